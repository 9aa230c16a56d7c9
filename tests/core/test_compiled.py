"""Which build a compiled part runs (``core/compiled.py``): the extension where it was built
from its source as it is now, else the Python it stands in for."""

import json
import os
from pathlib import Path

import pytest

from hetserve.core.compiled import compiled_build


def test_a_build_is_taken_only_when_it_is_there_current_and_wanted(tmp_path, monkeypatch):
    # (json: any module with a file stands in for an extension here)

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


def test_build_of_names_the_build_and_its_pxd_for_the_module(monkeypatch, tmp_path):
    """``build_of(module)`` asks for ``<module>_c``, current against the module's file,
    the ``<stem>_c.pxd`` beside it and any other layouts given; without it, the module."""
    from hetserve.core import compiled
    from hetserve.scheduling import reservation_core as pure

    asked = []
    monkeypatch.setattr(compiled, "compiled_build", lambda *a: asked.append(a))
    layout = tmp_path / "other_c.pxd"
    assert compiled.build_of(pure, layout) == (pure, False)
    (name, sources), src = asked[0], Path(pure.__file__)
    assert name == "hetserve.scheduling.reservation_core_c"
    assert sources == (src, src.with_name("reservation_core_c.pxd"), layout)
    monkeypatch.setattr(compiled, "compiled_build", lambda *a: json)
    assert compiled.build_of(pure) == (json, True)
