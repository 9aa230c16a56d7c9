"""The models a run can name are an object passed explicitly (``core.models``): two
catalogs in one process name different models under one name, side by side, and nothing
of one leaks into the other or into the zoo."""

from __future__ import annotations

import pickle
from dataclasses import replace

import pytest

from hetserve.core.errors import HetserveError
from hetserve.core.graph import get_graph
from hetserve.core.models import ZOO, ModelCatalog
from hetserve.engine.setup import build_setup


class Source:
    """A ``ModelSource`` of renamed shipped graphs (``name -> shipped model``)."""

    def __init__(self, models: dict[str, str]) -> None:
        self.models = models

    def names(self) -> list[str]:
        return list(self.models)

    def __contains__(self, name: str) -> bool:
        return name in self.models

    def graph(self, name: str):
        g = get_graph(self.models[name])
        return replace(g, name=name, meta={**g.meta, "slo_ms": 50 if "big" in name else 20})

    def layer_table(self, name: str):
        from hetserve.core.layertable import get_layer_table

        return get_layer_table(self.models[name])

    def build(self, name: str, version: int | None = None):
        raise NotImplementedError  # not needed without torch


def test_two_catalogs_name_different_models_side_by_side():
    small = ModelCatalog(Source({"mine": "resnet18"}))
    big = ModelCatalog(Source({"mine": "resnet152", "mine-big": "resnet152"}))
    assert small.graph("mine").layers == get_graph("resnet18").layers
    assert big.graph("mine").layers == get_graph("resnet152").layers
    a = build_setup("hc1-s", ["mine"], model_catalog=small)
    b = build_setup("hc1-s", ["mine"], model_catalog=big)
    # each run's latency model and SLO come from its own catalog's graph
    assert a.latency.latency("mine", "V100", 1, 1) < b.latency.latency("mine", "V100", 1, 1)
    assert a.slos_s == {"mine": pytest.approx(0.02)} and b.slos_s == {"mine": pytest.approx(0.02)}
    assert a.graph("mine").name == b.graph("mine").name == "mine"
    assert build_setup("hc1-s", ["mine-big"], model_catalog=big).slos_s["mine-big"] == 0.05
    # the zoo alone does not know them, before or after
    for catalog in (ZOO, ModelCatalog()):
        with pytest.raises(HetserveError, match="unknown model 'mine'"):
            catalog.graph("mine")
        with pytest.raises(HetserveError, match="unknown model 'mine'"):
            build_setup("hc1-s", ["mine"], model_catalog=catalog)


def test_shipped_names_win_and_unknown_names_suggest_the_sources_too():
    c = ModelCatalog(Source({"mine": "resnet18"}))
    assert c.graph("ResNet50") == get_graph("resnet50")  # case-insensitive, as before
    assert "mine" in c and "resnet50" in c and "other" not in c
    assert c.names()[0] == "mine"
    assert c.has_layer_table("mine") and c.layer_table("mine") is not None
    with pytest.raises(HetserveError, match=r"unknown model 'mina'; did you mean 'mine'"):
        c.graph("mina")


def test_a_catalog_pickles_with_its_source():
    """Workers in other processes get the catalog with the builder (``zoo.registry``)."""
    c = ModelCatalog(Source({"mine": "resnet18"}))
    again = pickle.loads(pickle.dumps(c))
    assert again.graph("mine").layers == c.graph("mine").layers
    assert pickle.loads(pickle.dumps(ZOO)) == ZOO
