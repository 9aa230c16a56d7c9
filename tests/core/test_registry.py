"""One registry shape (``core.registry``) behind every pluggable kind."""

import sys
import types

import pytest

from hetserve.core.errors import HetserveError
from hetserve.core.registry import Registry


def test_registered_and_built_in_things_by_name(monkeypatch):
    reg: Registry[int] = Registry("widget", {"lazy": "toy_widget_module"})
    mod = types.ModuleType("toy_widget_module")
    monkeypatch.setitem(sys.modules, "toy_widget_module", mod)
    reg.register("now", 1)

    @reg.register("deco")
    def deco() -> None: ...

    assert reg.names() == ["deco", "lazy", "now"]  # listed without importing anything
    assert reg.find("lazy") is None  # its module registered nothing: not found
    reg.register("lazy", 3)  # (what its module's import would run)
    assert reg.get("lazy") == 3 and reg.get("now") == 1 and reg.get("deco") is deco
    assert list(reg.all()) == ["lazy", "now", "deco"]  # built-ins first, then as registered
    assert "now" in reg and "nope" not in reg
    with pytest.raises(HetserveError, match=r"unknown widget 'nw'; did you mean 'now'"):
        reg.get("nw")


def test_every_pluggable_kind_is_a_registry():
    from hetserve.engine.setup import LATENCY_SOURCES
    from hetserve.experiments.studies import STUDIES
    from hetserve.planning.registry import PLANNERS
    from hetserve.runtime.executors import EXECUTORS
    from hetserve.scheduling.protocol import SCHEDULERS

    kinds = {
        "scheduler": SCHEDULERS, "planner": PLANNERS, "study": STUDIES,
        "executor": EXECUTORS, "latency source": LATENCY_SOURCES,
    }  # fmt: skip
    for kind, reg in kinds.items():
        assert isinstance(reg, Registry) and reg.kind == kind and reg.all()
    assert set(EXECUTORS.names()) == {"modelled", "threads", "ray"}
    assert set(LATENCY_SOURCES.names()) == {"layers", "rampa", "profiles", "roofline"}
