"""Import: a repository version -> an exported program -> hetserve's graph and a model
that runs block by block with the version's own weights (needs torch).

Three sources (``layout``): ``model.pt2`` is loaded as it is (its batch dimension must be
dynamic); ``model.py`` builds the module, whose weights come from ``*.safetensors``
(``load_state_dict(strict=True)``), and ``example_inputs(batch)`` names the inputs; a
Hugging Face folder builds the architecture its ``config.json`` names with
``transformers`` (``from_pretrained``, safetensors only, nothing downloaded). The last two
are exported here with ``torch.export`` and the batch dimension declared dynamic.

The program is then cut (``cuts``) and counted the way the zoo's export counts its layers
(``zoo.export.count_layers``). The graph is cached by a hash of the version's files and
configuration under ``$HETSERVE_CACHE/imports/`` so planning and simulation later need
neither torch nor a re-import.
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hetserve.core.errors import HetserveError
from hetserve.core.graph import ModelGraph
from hetserve.core.tensors import TORCH_TO_DATATYPE, TensorSpec
from hetserve.repository import cuts
from hetserve.repository.layout import RepoModel, Version
from hetserve.repository.sources import (
    DTYPES,
    SOURCES,
    ImportError_,
    MultiInput,
    as_tuple,
)  # fmt: skip
from hetserve.zoo.layered import LayeredModel

GRAPH_FORMAT = 4  # bump when the import's result changes for the same files


class ImportedModel(LayeredModel):
    """A repository model as a ``LayeredModel``: its layers are the exported program's
    pieces between the chosen cuts, all reading the one loaded copy of the weights."""

    def __init__(
        self,
        name: str,
        pieces: list[Any],
        layer_names: list[str],
        inputs: MultiInput,
        output_names: tuple[str, ...],
        program: Any,
    ) -> None:
        layers = [(n, "imported", m) for n, m in zip(layer_names, pieces, strict=True)]
        super().__init__(name, layers, inputs, "imported", "repository", output_names)  # type: ignore[arg-type]
        self.compute_dtype = inputs.float_dtype
        # the flattened program: the pieces' root, which owns the weights
        self.__dict__["program"] = program
        # per output, where the model puts the batch (``batch_dims``): moved to the front
        # at the model's end (None: nothing to move)
        self.batch_dims: tuple[int, ...] | None = None

    def _apply(self, fn: Any, recurse: bool = True) -> Any:
        """``to``, ``cuda``, ``cpu``: the weights move, and so do the devices the export
        recorded in the pieces' graphs (``cuts.retarget``)."""
        out = super()._apply(fn, recurse)
        dev = next(itertools.chain(self.parameters(), self.buffers()), None)
        if dev is not None:
            for layer in self.layers:
                cuts.retarget(layer, dev.device)
        return out

    def run_layers(self, x: Any, start: int, stop: int) -> Any:
        for layer in self.layers[start:stop]:
            x = layer(*x) if isinstance(x, tuple) else layer(x)
        if self.batch_dims is not None and stop == len(self.layers):
            x = _batch_first(x, self.batch_dims)
        return x

    def run_layer_calls(self, index: int, x: Any, on_call: Any) -> Any:
        """Layer ``index`` run operator by operator, ``on_call(module path, class name,
        index)`` called where a leaf-module call begins (``cuts.leaf_calls``): how the
        layer table (``zoo.leaves``) sees this model's leaf modules."""
        calls = self.__dict__.get("_leaf_calls")
        if calls is None:
            calls = self.__dict__["_leaf_calls"] = cuts.leaf_calls(self.program)
        return cuts.run_marked(self.layers[index], x, calls, lambda p, k: on_call(p, k, index))


# ------------------------------------------------------------------ cutting and counting


@dataclass
class Imported:
    model: ImportedModel
    graph: ModelGraph
    seconds: float


def build(model: RepoModel, version: Version, bounds_by_name: list[str] | None = None) -> Imported:
    """Import ``version`` of ``model``: export, cut, and count (module docstring). Whatever
    goes wrong is an ``ImportError_`` naming the version (the model is UNAVAILABLE with
    that reason; the others serve)."""
    try:
        return _build(model, version, bounds_by_name)
    except HetserveError:
        raise
    except Exception as e:
        msg = " ".join(str(e).split())[:300]
        raise ImportError_(f"{version.path}: import failed: {type(e).__name__}: {msg}") from None


def _build(model: RepoModel, version: Version, bounds_by_name: list[str] | None) -> Imported:
    t0 = time.perf_counter()
    src = SOURCES[version.format](model, version)
    dtype = DTYPES[model.config.datatype]
    gm = cuts.flatten(src.program)
    cutter = cuts.Cutter(gm)
    spec = MultiInput(src.inputs, dtype)
    x1 = as_tuple(spec.example(1))
    if bounds_by_name is None:
        flops = cuts.node_flops(gm, x1)
        bounds = cutter.choose(flops)
    else:
        index = {n.name: i for i, n in enumerate(cutter.compute)}
        missing = [b for b in bounds_by_name if b not in index]
        if missing:
            raise ImportError_(
                f"{version.path}: the export no longer has the cut before {missing[0]} "
                f"(a different torch?); delete the import cache to re-import"
            )
        bounds = [0, *(index[b] for b in bounds_by_name), len(cutter.compute)]
    pieces = cuts.split(cutter, bounds)
    names = _unique([cuts.layer_name(cutter, a, b) for a, b in itertools.pairwise(bounds)])
    net = ImportedModel(model.name, pieces, names, spec, src.output_names, gm).eval()
    dims = batch_dims(net, version.path)
    if any(d != 0 for d in dims):
        net.batch_dims = dims
    graph = _graph(net, model, version, [cutter.compute[b].name for b in bounds[1:-1]])
    if net.batch_dims is not None:
        moved = [f"{n} (at {d})" for n, d in zip(net.output_names, dims, strict=True) if d]
        graph.meta["batch_moved"] = ", ".join(moved)
    return Imported(net, graph, time.perf_counter() - t0)


def batch_dims(net: ImportedModel, where: Path) -> tuple[int, ...]:
    """Where each output holds the batch, found by running the model at batch 1 and 2:
    the one dimension of size 1, then 2, all others unchanged. An output without one (a
    scalar, a statistic over the batch) or with several is refused: it cannot be cut into
    the requests' answers."""
    outs = []
    with torch.no_grad():
        for b in (1, 2):
            y = net.run_layers(as_tuple(net.input_spec.example(b)), 0, len(net.layers))
            outs.append(as_tuple(y))
    if len(outs[0]) != len(net.output_names):
        raise ImportError_(
            f"{where}: the model returns {len(outs[0])} tensors; its outputs are named "
            f"{len(net.output_names)} ({', '.join(net.output_names)})"
        )
    dims = []
    for name, y1, y2 in zip(net.output_names, outs[0], outs[1], strict=True):
        s1, s2 = tuple(y1.shape), tuple(y2.shape)
        found = [
            d for d in range(len(s1)) if len(s1) == len(s2) and s1[d] == 1 and s2[d] == 2
            and s1[:d] + s1[d + 1 :] == s2[:d] + s2[d + 1 :]
        ]  # fmt: skip
        if len(found) != 1:
            why = (
                "no batch dimension: it does not grow with the batch, so it cannot be cut "
                "into the requests' answers (a statistic over the batch?)"
                if not found or len(s1) != len(s2)
                else f"several dimensions ({found}) could hold the batch"
            )
            raise ImportError_(
                f"{where}: output {name!r} has shape {list(s1)} at batch 1 and {list(s2)} at "
                f"batch 2: {why}; return it per request, with the batch as a dimension"
            )
        dims.append(found[0])
    return tuple(dims)


def _batch_first(x: Any, dims: tuple[int, ...]) -> Any:
    """The model's outputs with each one's batch dimension moved to the front."""
    if isinstance(x, torch.Tensor):
        return x.movedim(dims[0], 0) if dims[0] else x
    return tuple(t.movedim(d, 0) if d else t for t, d in zip(x, dims, strict=True))


def _unique(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n}#{seen[n]}")
    return out


def _graph(net: ImportedModel, model: RepoModel, version: Version, bounds: list[str]) -> ModelGraph:
    from hetserve.zoo.export import count_layers

    x = net.input_spec.example(batch=1)
    layers, final = count_layers(net, x)
    spec: MultiInput = net.input_spec  # type: ignore[assignment]
    outs = as_tuple(final) if not isinstance(final, torch.Tensor) else (final,)
    outputs = []
    for n, o in zip(net.output_names, outs, strict=True):
        dt = TORCH_TO_DATATYPE.get(str(o.dtype), "FP32")
        outputs.append(TensorSpec(n, dt, tuple(o.shape[1:])))
    cfg = model.config
    meta: dict[str, Any] = {
        "exported_by": "hetserve.repository",
        "torch": torch.__version__.split("+")[0],
        "dtype": {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}[cfg.datatype],
        "batch": 1,
        "repository": str(model.path.parent),
        "format": version.format,
        "version": version.number,
        "cuts": bounds,
        "digest": version.digest(cfg),
        "max_batch": cfg.max_batch_size,
    }
    if len(layers) == 1:
        meta["note"] = "no valid cut point: the model is one layer, planned and served whole"
    if cfg.slo_ms is not None:
        meta["slo_ms"] = cfg.slo_ms
    if cfg.blocks is not None:
        meta["n_blocks"] = cfg.blocks
    x_bytes = sum(float(t.nbytes) for t in as_tuple(x))
    return ModelGraph(
        name=model.name,
        family="imported",
        task="repository",
        input_shape=tuple(spec.inputs[0].shape),
        input_bytes=x_bytes,
        layers=tuple(layers),
        meta=meta,
        inputs=spec.inputs,
        outputs=tuple(outputs),
    )


# ------------------------------------------------------------------ the cache


def cache_folder(model: RepoModel, version: Version) -> Path:
    from hetserve.profiling.cache import cache_root

    return (
        cache_root()
        / "imports"
        / f"{model.name}-v{version.number}-{version.digest(model.config)}-f{GRAPH_FORMAT}"
    )


def cached_graph(model: RepoModel, version: Version) -> ModelGraph:
    """The version's graph, imported now (and cached) unless the cache has it."""
    from hetserve.core.graph import load_graph_file

    folder = cache_folder(model, version)
    path = folder / "graph.json"
    if path.exists():
        return load_graph_file(path)
    imp = build(model, version)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / "graph.json.tmp"
    imp.graph.save(tmp)
    tmp.replace(path)
    (folder / "import.json").write_text(
        json.dumps({"seconds": round(imp.seconds, 3), "layers": len(imp.graph.layers)}) + "\n"
    )
    return imp.graph


def cached_layer_table(model: RepoModel, version: Version) -> Any:
    """The version's layer table (``core.layertable``: one row per leaf-module call, as
    DeepPlan plans it), made now (and cached beside the graph) unless the cache has it."""
    from hetserve.core.layertable import LayerTable
    from hetserve.zoo.leaves import leaf_table

    folder = cache_folder(model, version)
    path = folder / "layers.json"
    if path.exists():
        return LayerTable.from_json(json.loads(path.read_text()), str(path))
    graph = cached_graph(model, version)
    table = leaf_table(build(model, version, list(graph.meta.get("cuts", []))).model)
    table.meta.update(exported_by="hetserve.repository", version=version.number)
    tmp = folder / "layers.json.tmp"
    table.save(tmp)
    tmp.replace(path)
    return table
