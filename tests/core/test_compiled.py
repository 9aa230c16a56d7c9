"""Which build a compiled part runs (``core/compiled.py``): the extension where it was built
from its source as it is now, else the Python it stands in for."""

import os

import pytest

from hetserve.core.compiled import compiled_build


def test_a_build_is_taken_only_when_it_is_there_current_and_wanted(tmp_path, monkeypatch):
    import json  # (any module with a file stands in for an extension here)

    old, new = tmp_path / "old.pyx", tmp_path / "new.pyx"
    old.write_text("")
    new.write_text("")
    os.utime(old, (0, 0))
    monkeypatch.delenv("HETSERVE_PURE_PYTHON", raising=False)
    assert compiled_build("json", [old, tmp_path / "not-installed.pyx"]) is json
    with pytest.warns(RuntimeWarning, match=r"is older than .*new\.pyx: running the Python"):
        assert compiled_build("json", [old, new]) is None
    assert compiled_build("hetserve.no_such_build", [old]) is None
    monkeypatch.setenv("HETSERVE_PURE_PYTHON", "1")
    assert compiled_build("json", [old]) is None
    monkeypatch.setenv("HETSERVE_PURE_PYTHON", "0")
    assert compiled_build("json", [old]) is json
