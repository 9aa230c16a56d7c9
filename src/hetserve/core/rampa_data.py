"""RAMPA's services (paper Table V), category mixes (Table IV) and per-operation model
tables (Table VI), shipped as ``hetserve/data/rampa_services.yaml``."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from hetserve.core.errors import unknown
from hetserve.core.graph import Layer, ModelGraph


@dataclass(frozen=True)
class RampaService:
    id: int
    category: str
    model: str
    latency_s: float
    throughput_tps: float


@cache
def _data() -> dict[str, Any]:
    text = (resources.files("hetserve") / "data" / "rampa_services.yaml").read_text()
    return yaml.safe_load(text)


def rampa_services() -> list[RampaService]:
    return [RampaService(**s) for s in _data()["services"]]


def rampa_category_mix() -> dict[str, dict[str, float]]:
    return {k: dict(v) for k, v in _data()["category_mix"].items()}


def rampa_models() -> list[str]:
    return list(_data()["models"])


def rampa_graph(model: str) -> ModelGraph:
    """A RAMPA Table VI model as a graph: one layer per operation (repeats expanded).

    Table VI gives memory consumption (parameters x 1.2), not activation traffic, so
    ``param_bytes`` is the table's memory over 1.2 and ``mem_bytes`` is the output size.
    """
    models = _data()["models"]
    if model not in models:
        raise unknown("RAMPA model", model, models)
    layers = []
    for op in models[model]:
        for r in range(int(op.get("repeat", 1))):
            suffix = f".{r}" if op.get("repeat", 1) > 1 else ""
            layers.append(
                Layer(
                    name=f"{op['op']}{suffix}",
                    kind="encoder",
                    flops=float(op["flops"]),
                    param_bytes=float(op["memory_bytes"]) / 1.2,
                    out_bytes=float(op["out_bytes"]),
                    mem_bytes=float(op["out_bytes"]),
                    n_ops=1,
                )
            )
    return ModelGraph(
        name=model,
        family="rampa",
        task="rampa-service",
        input_shape=(),
        input_bytes=0.0,
        layers=tuple(layers),
        meta={"source": "RAMPA Table VI"},
    )
