"""Layer tables: a model as DeepPlan plans it, one row per *leaf module call*.

DeepPlan (EuroSys 2023, section 4.3) decides per layer whether the layer is loaded to the
GPU or executed by direct host access (DHA). Its layers are the leaf modules of the
PyTorch model (a convolution, a batch norm, a linear layer, an embedding). The graph's
layers (``core.graph``) are coarser, so each zoo model also ships a *layer table*
(``hetserve/data/layers/<model>.json``, exported by ``hetserve zoo layers``, format in
``docs/formats.md``): one :class:`Leaf` per leaf-module call in execution order, with
everything the cold-start timeline needs per request at the table's input size.

Operators run between leaf modules (attention's matmuls and softmax, residual adds) are
counted with the leaf call before them: they run after it and need no weights of the
next one. A weight read outside any leaf module (a parameter of a container module, such
as ViT's class token) belongs to the row whose operators read it first.

What a DHA execution reads over the host link (:func:`dha_read_bytes`):

- an embedding reads only the rows it looks up (``dha_sparse_bytes`` per request, at
  most the whole table);
- element-wise uses of weights (batch and layer norm, biases) read them once;
- a GEMM reads its weight once per tile of ``tile_rows_linear`` output rows (tokens):
  a weight tile is re-fetched for every row tile, so the reads grow with the sequence
  length and the batch;
- a convolution reads its weight ``conv_reads`` times, whatever its size.

Both constants (:class:`LeafCostParams`) are fitted to DeepPlan's Table 1 (PCIe read
events on a V100, batch 1): a 2.25 MB fully connected layer of BERT-Base at 384 tokens
reads 12.1x its size by DHA (446,276 vs 36,920 events), so 384 / 12 = 32 rows per tile;
ResNet-50's 2.25 MB and 9 MB convolutions read 1.79x and 1.85x (65,891 vs 36,869 and
273,487 vs 147,465 events) at 196 and 49 output pixels: about the same factor at any size.

Times per layer for a GPU type (:func:`estimate_layer_rows`, the ``layers.csv`` of
``hetserve profile estimate --layers``):

- ``load_us``: the weights over the GPU's host link from pinned memory, at
  ``host_eff`` of the link's rate, plus ``copy_s`` per weight tensor (one copy each);
  fitted to DeepPlan's Table 2: serial loads reach 11.52 GB/s of PCIe 3.0's 15.75 (0.73)
  for GPT-2 Medium's large layers and 9.10 GB/s for ResNet-50's many small ones;
- ``exec_gpu_us``: a roofline at FP32 (DeepPlan serves FP32 PyTorch models): the larger
  of compute at ``eff`` of the FP32 peak and memory traffic (activations and weights) at
  ``mem_eff`` of the memory bandwidth, plus ``launch_s`` per kernel (eager PyTorch at
  batch 1 is bound by launching kernels: 30 us each puts ResNet-50 at about 7 ms on a
  V100, which DeepPlan's Table 4 implies: PT+DHA, loading over two links in about 5 ms,
  takes 8.93 ms);
- ``exec_host_us``: the same with the weights read over the host link instead of from
  GPU memory (:func:`dha_read_bytes` at ``host_eff`` of the link's rate).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import MISSING, asdict, dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from hetserve.core.errors import ConfigError, unknown
from hetserve.core.files import csv_rows, read_json
from hetserve.core.gpus import GpuType


@dataclass(frozen=True)
class Leaf:
    """One leaf-module call, per request at the table's input size."""

    name: str  # module path in the zoo model ("layers.3.c1.0")
    kind: str  # module class ("Conv2d", "Linear", "Embedding", "ReLU", ...)
    layer: int  # index of the graph layer (``core.graph``) the call belongs to
    param_bytes: float  # FP32 bytes of the weights this row is first to use
    n_tensors: int  # weight tensors among them (one host-to-GPU copy each)
    flops: float
    act_bytes: float  # activation traffic of its kernels (weights excluded)
    n_ops: int  # kernels
    dha_once_bytes: float = 0.0  # weights read once per run by element-wise kernels
    dha_sparse_bytes: float = 0.0  # embedding rows looked up, per request
    dha_gemm_bytes: float = 0.0  # weights of GEMMs/convolutions (re-read per row tile)
    gemm_rows: float = 0.0  # output rows per request of those GEMMs/convolutions
    gemm_kind: str = ""  # "linear" or "conv": which tile size applies


@dataclass(frozen=True)
class LayerTable:
    model: str
    input_shape: tuple[int, ...]
    leaves: tuple[Leaf, ...]
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    def __len__(self) -> int:
        return len(self.leaves)

    @property
    def param_bytes(self) -> float:
        return sum(x.param_bytes for x in self.leaves)

    def leaf_range(self, layer_start: int, layer_stop: int) -> range:
        """The leaves of graph layers ``layer_start..layer_stop-1`` (contiguous)."""
        idx = [i for i, x in enumerate(self.leaves) if layer_start <= x.layer < layer_stop]
        return range(idx[0], idx[-1] + 1) if idx else range(0)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "input_shape": list(self.input_shape),
            "meta": self.meta,
            "leaves": [asdict(x) for x in self.leaves],
        }

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=0) + "\n")

    @staticmethod
    def from_json(data: Any, source: str) -> LayerTable:
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: expected a JSON object with model and leaves")
        for key in ("model", "input_shape", "leaves"):
            if key not in data:
                raise ConfigError(f"{source}: missing field '{key}'")
        rows = data["leaves"]
        if not isinstance(rows, list) or not rows:
            raise ConfigError(f"{source}: leaves: expected a non-empty list")
        leaves = []
        names = {f.name: f.type for f in Leaf.__dataclass_fields__.values()}
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                raise ConfigError(f"{source}: leaves[{i}]: expected an object")
            extra = set(row) - set(names)
            if extra:
                raise ConfigError(f"{source}: leaves[{i}]: unknown field '{sorted(extra)[0]}'")
            required = [
                f.name for f in Leaf.__dataclass_fields__.values()
                if f.default is MISSING and f.default_factory is MISSING
            ]  # fmt: skip
            lacking = [f for f in required if f not in row]
            if lacking:
                raise ConfigError(f"{source}: leaves[{i}]: missing field '{lacking[0]}'")
            try:
                leaf = Leaf(**row)
                for f, t in names.items():
                    v = getattr(leaf, f)
                    if t == "float" and (
                        isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0
                    ):
                        raise ValueError(f)
                    if t == "int" and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                        raise ValueError(f)
            except TypeError as e:
                raise ConfigError(f"{source}: leaves[{i}]: {e}") from None
            except ValueError as e:
                raise ConfigError(
                    f"{source}: leaves[{i}]: field '{e}': expected a number >= 0, "
                    f"got {row.get(str(e))!r}"
                ) from None
            if not math.isfinite(leaf.param_bytes + leaf.flops + leaf.act_bytes):
                raise ConfigError(f"{source}: leaves[{i}]: values must be finite")
            if leaves and leaf.layer < leaves[-1].layer:
                raise ConfigError(
                    f"{source}: leaves[{i}]: layer {leaf.layer} after layer "
                    f"{leaves[-1].layer}: leaves must be in execution order"
                )
            leaves.append(leaf)
        return LayerTable(
            str(data["model"]),
            tuple(int(x) for x in data["input_shape"]),
            tuple(leaves),
            dict(data.get("meta", {})),
        )


def _layer_dir() -> Any:
    return resources.files("hetserve") / "data" / "layers"


@cache
def shipped_layer_tables() -> tuple[str, ...]:
    return tuple(sorted(p.name[:-5] for p in _layer_dir().iterdir() if p.name.endswith(".json")))


@cache
def _load_shipped(name: str) -> LayerTable:
    res = _layer_dir() / f"{name}.json"
    return LayerTable.from_json(json.loads(res.read_text()), f"hetserve/data/layers/{name}.json")


def get_layer_table(name: str) -> LayerTable:
    """A shipped layer table by model name or a layer-table JSON file by path (a user's
    models' tables come through a ``core.models.ModelCatalog``)."""
    if name.endswith(".json"):
        return LayerTable.from_json(read_json(name, "layer table"), name)
    key = name.lower().replace("_", "-")
    if key not in shipped_layer_tables():
        raise unknown("layer table of model", name, shipped_layer_tables())
    return _load_shipped(key)


def has_layer_table(name: str) -> bool:
    """Whether a layer table ships for the model ``name``."""
    return name.lower().replace("_", "-") in shipped_layer_tables()


# ------------------------------------------------------------------ cost model


@dataclass(frozen=True)
class LeafCostParams:
    """The per-layer cost model's constants (module docstring: what each is fitted to)."""

    host_eff: float = 0.73  # achieved fraction of the host link's rate (pinned DMA)
    copy_s: float = 7.5e-6  # fixed cost of one host-to-GPU copy
    eff_compute: dict[str, float] = field(
        default_factory=lambda: {"Conv2d": 0.5, "Linear": 0.6, "Embedding": 0.3}
    )
    eff_default: float = 0.4
    mem_eff: float = 0.7
    launch_s: float = 30e-6  # per kernel (PyTorch eager at batch 1: host-bound launches)
    tile_rows_linear: int = 32
    conv_reads: float = 1.8


def dha_read_bytes(leaf: Leaf, batch: int = 1, p: LeafCostParams | None = None) -> float:
    """Bytes a direct-host-access execution of ``leaf`` at ``batch`` reads over the host
    link (the module docstring's model)."""
    p = p or LeafCostParams()
    sparse = min(leaf.dha_sparse_bytes * batch, leaf.param_bytes)
    gemm = 0.0
    if leaf.dha_gemm_bytes > 0:
        rows = leaf.gemm_rows * batch
        if leaf.gemm_kind == "conv":
            gemm = leaf.dha_gemm_bytes * p.conv_reads
        else:
            gemm = leaf.dha_gemm_bytes * max(1.0, math.ceil(rows / p.tile_rows_linear))
    return leaf.dha_once_bytes + sparse + gemm


# ------------------------------------------------------------------ layers.csv

LAYER_COLUMNS = (
    "model",
    "layer",
    "kind",
    "param_bytes",
    "load_us",
    "exec_gpu_us",
    "exec_host_us",
)
# optional columns: the GPU type and batch size the times are for (one table per
# (model, gpu, batch); a file without them holds one table per model)
LAYER_OPTIONAL = ("gpu", "batch")


@dataclass(frozen=True)
class LayerRow:
    """One row of ``layers.csv``: a layer's load and execution times (microseconds)."""

    model: str
    layer: int
    kind: str
    param_bytes: int
    load_us: float
    exec_gpu_us: float
    exec_host_us: float
    gpu: str = ""
    batch: int = 1

    @property
    def perf_diff_us(self) -> float:
        """DeepPlan's PerfDiff: Exe(DHA) - Exe(InMem)."""
        return self.exec_host_us - self.exec_gpu_us


def estimate_layer_rows(
    table: LayerTable, gpu: GpuType, batch: int = 1, p: LeafCostParams | None = None
) -> list[LayerRow]:
    """``layers.csv`` rows for ``gpu`` by the module docstring's model."""
    p = p or LeafCostParams()
    host_bw = gpu.host_gbps * 1e9 * p.host_eff
    mem_bw = gpu.mem_bw_gbps * 1e9 * p.mem_eff
    peak = gpu.fp32_tflops * 1e12
    rows = []
    for i, leaf in enumerate(table.leaves):
        t_c = batch * leaf.flops / (peak * p.eff_compute.get(leaf.kind, p.eff_default))
        act = batch * leaf.act_bytes / mem_bw
        launch = leaf.n_ops * p.launch_s
        sparse = min(leaf.dha_sparse_bytes * batch, leaf.param_bytes)
        weights_gpu = (leaf.dha_once_bytes + sparse + leaf.dha_gemm_bytes) / mem_bw
        exec_gpu = max(t_c, act + weights_gpu) + launch
        exec_host = max(t_c, act + dha_read_bytes(leaf, batch, p) / host_bw) + launch
        load = leaf.param_bytes / host_bw + leaf.n_tensors * p.copy_s if leaf.param_bytes else 0
        rows.append(
            LayerRow(
                table.model, i, leaf.kind, int(leaf.param_bytes),
                load * 1e6, exec_gpu * 1e6, exec_host * 1e6, gpu.name, batch,
            )
        )  # fmt: skip
    return rows


def write_layers_csv(rows: Sequence[LayerRow], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(LAYER_COLUMNS + LAYER_OPTIONAL)
        for r in rows:
            w.writerow(
                [r.model, r.layer, r.kind, r.param_bytes]
                + [f"{v:.3f}" for v in (r.load_us, r.exec_gpu_us, r.exec_host_us)]
                + [r.gpu, r.batch]
            )
    return path


def read_layers_csv(path: str | Path) -> list[LayerRow]:
    """The rows of a ``layers.csv``; a bad field is a one-line error naming file and line."""
    path = Path(path)
    rows: list[LayerRow] = []
    seen: dict[tuple[str, str, int], int] = {}
    for line, row in csv_rows(path, LAYER_COLUMNS):

        def bad(col: str, want: str, line: int = line, row: dict = row) -> ConfigError:
            return ConfigError(f"{path}:{line}: field '{col}': expected {want}, got {row[col]!r}")

        model, kind = row["model"].strip(), row["kind"].strip()
        if not model:
            raise bad("model", "a model name")
        if not kind:
            raise bad("kind", "a layer kind")
        ints = {}
        for col in ("layer", "param_bytes"):
            try:
                ints[col] = int(row[col])
            except ValueError:
                raise bad(col, "an integer >= 0") from None
            if ints[col] < 0:
                raise bad(col, "an integer >= 0")
        nums = {}
        for col in ("load_us", "exec_gpu_us", "exec_host_us"):
            try:
                nums[col] = float(row[col])
            except ValueError:
                raise bad(col, "a non-negative number of microseconds") from None
            if not math.isfinite(nums[col]) or nums[col] < 0:
                raise bad(col, "a non-negative number of microseconds")
        gpu = (row.get("gpu") or "").strip()
        batch = 1
        if (row.get("batch") or "").strip():
            try:
                batch = int(row["batch"])
            except ValueError:
                raise bad("batch", "an integer >= 1") from None
            if batch < 1:
                raise bad("batch", "an integer >= 1")
        key = (model, gpu, batch)
        want = seen.get(key, 0)
        if ints["layer"] != want:
            raise ConfigError(
                f"{path}:{line}: model {model}"
                f"{f' on {gpu}' if gpu else ''}{f' at batch {batch}' if batch != 1 else ''}: "
                f"layers must be numbered 0, 1, ... in order; expected {want}, "
                f"got {ints['layer']}"
            )
        seen[key] = want + 1
        rows.append(
            LayerRow(model, ints["layer"], kind, ints["param_bytes"], **nums, gpu=gpu, batch=batch)
        )
    if not rows:
        raise ConfigError(f"{path}: no layers (expected one row per layer after the header)")
    return rows


def select_rows(
    rows: Sequence[LayerRow], model: str, gpu: str | None = None, batch: int = 1, source: str = ""
) -> list[LayerRow]:
    """The rows of one model's table (at ``gpu`` where the file names GPUs, at ``batch``);
    a one-line error when the file has none."""
    got = [r for r in rows if r.model == model and r.batch == batch]
    gpus = sorted({r.gpu for r in got if r.gpu})
    if gpu is not None and gpus:
        got = [r for r in got if r.gpu.lower() == gpu.lower()]
    elif len(gpus) > 1:
        raise ConfigError(f"{source}: model {model} has tables for {', '.join(gpus)}: name one")
    if not got:
        have = sorted({f"{r.model}{f' on {r.gpu}' if r.gpu else ''} at batch {r.batch}"
                       for r in rows})  # fmt: skip
        raise ConfigError(
            f"{source}: no layers of model {model}{f' on {gpu}' if gpu else ''} at batch "
            f"{batch} (the file has {', '.join(have[:8])}{' ...' if len(have) > 8 else ''})"
        )
    return got
