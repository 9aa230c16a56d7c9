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


def test_by_name_the_python_file_is_imported_only_where_its_build_is_not_taken(monkeypatch):
    """``build_of("name")`` finds the Python file without importing it: asked for and
    taken, the build is all that is imported; not taken, the Python module is."""
    import importlib.util
    import sys

    from hetserve.core import compiled

    name = "hetserve.core.timeline_core"
    src = Path(importlib.util.find_spec(name).origin)
    monkeypatch.delitem(sys.modules, name, raising=False)
    asked = []
    monkeypatch.setattr(compiled, "compiled_build", lambda *a: asked.append(a) or json)
    assert compiled.build_of(name) == (json, True)
    assert name not in sys.modules
    assert asked == [(f"{name}_c", (src, src.with_name("timeline_core_c.pxd")))]
    monkeypatch.setattr(compiled, "compiled_build", lambda *a: None)
    mod, taken = compiled.build_of(name)
    assert not taken and mod is sys.modules[name] and Path(mod.__file__) == src
    with pytest.raises(ImportError, match="no module hetserve.core.no_such_core"):
        compiled.build_of("hetserve.core.no_such_core")


def test_a_simulation_imports_no_python_twin_of_a_build_it_takes():
    """Where the builds are taken, a simulation's imports (the CLI's, the simulator's,
    the built-in schedulers') leave the Python files they stand in for alone, but for the
    three whose constants or helpers the others import (the policy core's C layout, the
    reservation table's buffers, the recorder's row layout)."""
    import subprocess
    import sys

    code = (
        "import json, sys\n"
        "import hetserve.cli.main, hetserve.experiments.metrics, hetserve.sim.engine\n"
        "from hetserve.cli.sim import setup_from_options\n"
        "from hetserve.core import coldstart\n"
        "from hetserve.engine import kernel, modelled\n"
        "from hetserve.scheduling import coldstart as cs, edf_adaptive, fixed_batch, flex\n"
        "from hetserve.scheduling import reservation_table\n"
        "twins = [m for m in sys.modules if m.startswith('hetserve.')\n"
        "         and m.endswith(('_core', '_slots')) and m + '_c' in sys.modules]\n"
        "print(json.dumps({'compiled': kernel.COMPILED, 'twins': sorted(twins)}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "HETSERVE_PURE_PYTHON": "0"})  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.splitlines()[-1])
    if not got["compiled"]:
        pytest.skip("the package is not built here (setup.py build_ext)")
    assert set(got["twins"]) <= {
        "hetserve.scheduling.policy_core",
        "hetserve.scheduling.reservation_slots",
        "hetserve.sim.recorder_core",
    }
