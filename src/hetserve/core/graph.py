"""Model graphs: a DNN as layers in execution order, and blocks (PPipe's pre-partitioning).

A *layer* is one executable unit of the zoo's model (a residual block, a transformer layer,
a stem); for each the graph records, per request at the model's input size:

- ``flops``: floating-point operations (multiply-add = 2) counted by the project's export
  (``hetserve.zoo.export``) from the matmul/convolution/attention ops the layer runs;
- ``param_bytes``: FP32 bytes of the layer's parameters and buffers;
- ``out_bytes``: FP32 bytes of the layer's output activations (all tensors it passes on,
  including skip tensors carried for later layers) — what crosses a cut placed after it;
- ``mem_bytes``: FP32 bytes of activation traffic, the sum over the layer's kernels of the
  bytes each reads and writes (weights excluded; used by the roofline model);
- ``n_ops``: number of kernels (PyTorch operator calls) the layer runs.

Graphs ship as JSON package data (``hetserve/data/graphs/<model>.json``, format in
``docs/formats.md``) so that planning and simulation work without torch.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from hetserve.core.errors import ConfigError, unknown
from hetserve.core.files import read_json
from hetserve.core.tensors import TensorSpec, default_inputs


@dataclass(frozen=True)
class Layer:
    name: str
    kind: str
    flops: float
    param_bytes: float
    out_bytes: float
    mem_bytes: float
    n_ops: int

    @property
    def macs(self) -> float:
        return self.flops / 2


@dataclass(frozen=True)
class ModelGraph:
    name: str
    family: str
    task: str
    input_shape: tuple[int, ...]
    input_bytes: float
    layers: tuple[Layer, ...]
    meta: dict[str, Any] = field(default_factory=dict, compare=False)
    # the request's tensors as a client sees them (``core.tensors``); graph files without
    # them get one FP32 input named "input" and no known outputs
    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()

    def __post_init__(self) -> None:
        if not self.inputs:
            object.__setattr__(self, "inputs", default_inputs(self.input_shape))

    @property
    def flops(self) -> float:
        return sum(layer.flops for layer in self.layers)

    @property
    def macs(self) -> float:
        return self.flops / 2

    @property
    def param_bytes(self) -> float:
        return sum(layer.param_bytes for layer in self.layers)

    @property
    def params(self) -> float:
        """Number of FP32 parameters (and buffers)."""
        return self.param_bytes / 4

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "family": self.family,
            "task": self.task,
            "input_shape": list(self.input_shape),
            "input_bytes": self.input_bytes,
            "meta": self.meta,
            "inputs": [s.to_json() for s in self.inputs],
            "outputs": [s.to_json() for s in self.outputs],
            "layers": [asdict(layer) for layer in self.layers],
        }

    @staticmethod
    def from_json(data: Any, source: str) -> ModelGraph:
        try:
            layers = []
            for i, row in enumerate(data["layers"]):
                try:
                    layer = Layer(
                        name=str(row["name"]),
                        kind=str(row["kind"]),
                        flops=float(row["flops"]),
                        param_bytes=float(row["param_bytes"]),
                        out_bytes=float(row["out_bytes"]),
                        mem_bytes=float(row["mem_bytes"]),
                        n_ops=int(row["n_ops"]),
                    )
                except KeyError as e:
                    raise ConfigError(f"{source}: layers[{i}]: missing field {e}") from None
                except (TypeError, ValueError):
                    raise ConfigError(
                        f"{source}: layers[{i}]: expected numbers for flops, "
                        f"param_bytes, out_bytes, mem_bytes, n_ops"
                    ) from None
                if min(layer.flops, layer.param_bytes, layer.out_bytes, layer.mem_bytes) < 0:
                    raise ConfigError(f"{source}: layers[{i}] ({layer.name}): negative value")
                layers.append(layer)
            if not layers:
                raise ConfigError(f"{source}: layers: expected at least one layer")
            return ModelGraph(
                name=str(data["name"]),
                family=str(data.get("family", "")),
                task=str(data.get("task", "")),
                input_shape=tuple(int(x) for x in data["input_shape"]),
                input_bytes=float(data["input_bytes"]),
                layers=tuple(layers),
                meta=dict(data.get("meta", {})),
                inputs=_tensors(data, "inputs", source),
                outputs=_tensors(data, "outputs", source),
            )
        except KeyError as e:
            raise ConfigError(f"{source}: missing field {e}") from None

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n")


def _tensors(data: Any, key: str, source: str) -> tuple[TensorSpec, ...]:
    rows = data.get(key, [])
    if not isinstance(rows, list):
        raise ConfigError(f"{source}: {key}: expected a list of tensors")
    return tuple(TensorSpec.from_json(r, f"{source}: {key}[{i}]") for i, r in enumerate(rows))


def load_graph_file(path: str | Path) -> ModelGraph:
    return ModelGraph.from_json(read_json(path, "model graph"), str(path))


def _graph_dir() -> Any:
    return resources.files("hetserve") / "data" / "graphs"


@cache
def shipped_models() -> tuple[str, ...]:
    """Names of the model graphs shipped with the package."""
    return tuple(sorted(p.name[:-5] for p in _graph_dir().iterdir() if p.name.endswith(".json")))


@cache
def _load_shipped(name: str) -> ModelGraph:
    res = _graph_dir() / f"{name}.json"
    return ModelGraph.from_json(json.loads(res.read_text()), f"hetserve/data/graphs/{name}.json")


def get_graph(name: str) -> ModelGraph:
    """A shipped model graph by name (case-insensitive) or a graph JSON file by path (a
    user's models are named through a ``core.models.ModelCatalog``)."""
    if name.endswith(".json"):
        return load_graph_file(name)
    key = name.lower().replace("_", "-")
    models = shipped_models()
    if key in models:
        return _load_shipped(key)
    raise unknown("model", name, models)


# ------------------------------------------------------------------ blocks


@dataclass(frozen=True)
class Blocks:
    """A model cut into contiguous blocks: block ``i`` holds layers
    ``bounds[i] .. bounds[i+1]-1``."""

    model: str
    bounds: tuple[int, ...]
    out_bytes: tuple[float, ...]  # per request, leaving each block

    def __post_init__(self) -> None:
        if (
            len(self.bounds) < 2
            or self.bounds[0] != 0
            or any(a >= b for a, b in zip(self.bounds, self.bounds[1:], strict=False))
        ):
            raise ValueError(
                f"{self.model}: block bounds must start at 0 and increase: {self.bounds}"
            )
        if len(self.out_bytes) != len(self.bounds) - 1:
            raise ValueError(f"{self.model}: one out_bytes per block expected")

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def layers(self, block: int) -> range:
        return range(self.bounds[block], self.bounds[block + 1])

    @staticmethod
    def from_graph(graph: ModelGraph, bounds: Sequence[int]) -> Blocks:
        bounds = tuple(bounds)
        return Blocks(graph.name, bounds, tuple(graph.layers[b - 1].out_bytes for b in bounds[1:]))


def balanced_partition(costs: Sequence[float], n_blocks: int) -> tuple[int, ...]:
    """Cut ``costs`` into ``n_blocks`` contiguous non-empty groups minimising the largest
    group sum (ties: the lexicographically smallest bounds). Returns the bounds
    ``(0, ..., len(costs))``. Exact dynamic programme, O(n_blocks * n^2)."""
    n = len(costs)
    if not 1 <= n_blocks <= n:
        raise ValueError(f"cannot cut {n} layers into {n_blocks} blocks")
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    inf = float("inf")
    # best[k][i]: min over cuts of the first i layers into k blocks of the max block sum
    best = [[inf] * (n + 1) for _ in range(n_blocks + 1)]
    arg = [[0] * (n + 1) for _ in range(n_blocks + 1)]
    best[0][0] = 0.0
    for k in range(1, n_blocks + 1):
        for i in range(k, n - (n_blocks - k) + 1):
            bk, ak = inf, 0
            prev = best[k - 1]
            for j in range(k - 1, i):
                v = max(prev[j], prefix[i] - prefix[j])
                if v < bk - 1e-15:
                    bk, ak = v, j
            best[k][i], arg[k][i] = bk, ak
    bounds = [n]
    for k in range(n_blocks, 0, -1):
        bounds.append(arg[k][bounds[-1]])
    return tuple(reversed(bounds))
