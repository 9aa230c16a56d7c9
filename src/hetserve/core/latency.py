"""Latency and energy models behind one interface (docs/design.md):

``latency(model, gpu, share, batch, blocks) -> seconds`` and ``energy(...) -> joules`` for
a contiguous range of the model's blocks (``None``: the whole model) on one ``1/share``
MPS slice of a GPU (a *virtual GPU*) at a batch size. Three sources:

- :class:`RooflineModel` — analytic, from the model graph and the GPU's spec sheet;
- :class:`LinearModel` — ``alpha * batch + beta`` per (model, GPU) (Shepherd Eq. 1);
- :class:`TableModel` — a measured or imported profile set (:mod:`hetserve.core.profiles`).

Roofline (documented in ``docs/latency-models.md``). For layer ``l`` at batch ``b`` on a
``1/k`` slice of GPU ``g``::

    P = peak_tflops(g) / k        B = mem_bw(g) / k
    flops  = b * flops_l
    bytes  = s * (param_bytes_l + b * mem_bytes_l)      s = storage bytes per value / 4
    eff_c  = eff_kind[kind_l] * fill,   fill = w / (w + fill_elems_per_tflop * P),
             w = b * mem_bytes_l / 4 / (2 n_ops_l)  (elements of the average tensor a
             kernel reads or writes: the parallel work a kernel offers the GPU)
    t_l    = max(flops / (P * eff_c), bytes / (B * eff_mem)) + n_ops_l * launch_s

``peak_tflops`` is the FP16 tensor-core peak where the GPU has tensor cores, otherwise its
FP32 peak (Pascal parts compute in FP32); values are stored in FP16 (``s = 0.5``) by
default, as TensorRT-style inference does. Layers whose time is set by bytes (early, wide
CNN layers with large activations, depthwise convolutions, normalisations) then run at a
low-to-high-class ratio near the bandwidth ratio, compute-bound layers (late, many-channel
convolutions, large matmuls) near the much larger peak-FLOPS ratio: PPipe's Fig. 3.

Energy (all sources but a table with ``energy.csv``): while a slice computes, it draws
``(idle_w + (tdp_w - idle_w) * (floor + (1 - floor) * u)) / k`` watts, where ``u`` is the
fraction of the bounding resource's peak the work achieves (roofline: per layer,
``max(flops / (P t), bytes / (B t))``; linear model: ``alpha b / (alpha b + beta)``) and
``floor = 0.3`` is the activity floor of a busy GPU. Idle power between batches is the
simulator's business.
"""

from __future__ import annotations

import csv
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from hetserve.core.errors import ConfigError, HetserveError, unknown
from hetserve.core.gpus import DEFAULT_CATALOG, GpuCatalog, GpuType
from hetserve.core.graph import Blocks, ModelGraph, balanced_partition, get_graph

if TYPE_CHECKING:
    from hetserve.core.coldstart import ModelLoadPlan, Timeline

BUSY_POWER_FLOOR = 0.3


@runtime_checkable
class LatencyModel(Protocol):
    """The interface every latency source implements."""

    def num_blocks(self, model: str) -> int: ...

    def out_bytes(self, model: str, block: int) -> float:
        """Bytes per request leaving ``block`` (crossing a cut after it)."""
        ...

    def latency(
        self, model: str, gpu: str | GpuType, share: int, batch: int, blocks: range | None = None
    ) -> float: ...

    def energy(
        self, model: str, gpu: str | GpuType, share: int, batch: int, blocks: range | None = None
    ) -> float: ...


@runtime_checkable
class ColdStartModel(LatencyModel, Protocol):
    """A latency model that also knows how its models start cold (DeepPlan): each model's
    load plan, the weights it keeps on the GPU, the part of a warm run spent reading host
    memory (direct host access), the cold start's timeline and how long a batch takes that
    starts while its model loads. ``core.layerlatency.LayerLatency`` implements it; the
    engines and the cold-start scheduler ask :func:`cold_start_model` for it instead of
    probing for methods."""

    def model_load_plan(self, model: str) -> ModelLoadPlan:
        """The model's load plan (a one-line error where it has none)."""
        ...

    def gpu_bytes(self, model: str, gpu: str | GpuType) -> float:
        """The weights one instance keeps in a GPU's memory (its loaded layers), bytes."""
        ...

    def dha_s(self, model: str, gpu: str | GpuType, share: int, batch: int) -> float:
        """The part of a warm run spent on layers that read host memory (DHA)."""
        ...

    def load_timeline(
        self, model: str, gpu: str | GpuType, load_scale: Sequence[float] = ()
    ) -> Timeline:
        """A cold start's timeline on a GPU type, part ``k``'s loads ``load_scale[k]``
        times as long (its host link shared)."""
        ...

    def cold_run_s(
        self, model: str, gpu: str | GpuType, share: int, batch: int, load: Timeline,
        offset_s: float,
    ) -> float:  # fmt: skip
        """How long a batch takes that starts ``offset_s`` after its load (``load``, a
        timeline) began, each layer waiting for its weights."""
        ...

    def cold_run_terms(
        self, model: str, gpu: str | GpuType, share: int, batch: int, load: Timeline
    ) -> tuple[float, float, bool, float]:
        """What :meth:`cold_run_s` is for every offset: ``(total_s, peak_s, pipelined,
        load_done_s)``, where a batch starting ``offset_s`` after the load began takes
        ``max(offset_s + total_s, peak_s) - offset_s`` when ``pipelined``, else
        ``max(offset_s, load_done_s) + total_s - offset_s`` (the same floats as
        :meth:`cold_run_s`): a caller that asks once per load may work out each run
        itself."""
        ...

    def canonical_instance(self, model: str) -> str:
        """A model whose every answer here (latency, energy, weights, load plan, cold
        starts) is the same as ``model``'s on every GPU type, the same one for all such
        models: the instances of one architecture under one load plan (DeepPlan's Fig. 13
        serves 180 of BERT-Base) share one. Callers keep what they ask of this model once
        per canonical instance; ``model`` itself where it shares with none."""
        ...


def cold_start_model(latency: LatencyModel) -> ColdStartModel | None:
    """``latency`` as a :class:`ColdStartModel`, or None when it follows no load plans
    (its loads move whole blocks over the host link, its runs read no host memory). The
    answer depends on the class only, and is cached per class (a protocol ``isinstance``
    check costs microseconds; schedulers ask per model and worker)."""
    return latency if _is_cold_start_class(type(latency)) else None


@functools.cache
def _is_cold_start_class(cls: type) -> bool:
    return issubclass(cls, ColdStartModel)


@runtime_checkable
class GraphBlocksModel(LatencyModel, Protocol):
    """A latency model over a model graph cut into blocks (the roofline model): the
    simulator counts a block's weights from its layers."""

    def graph(self, model: str) -> ModelGraph: ...

    def blocks(self, model: str) -> Blocks: ...


def check_latency_args(
    model: str, share: int, batch: int, n_blocks: int, blocks: range | None
) -> range:
    if share < 1:
        raise HetserveError(f"{model}: share must be >= 1 (one of k MPS slices), got {share}")
    if batch < 1:
        raise HetserveError(f"{model}: batch must be >= 1, got {batch}")
    if blocks is None:
        return range(n_blocks)
    if blocks.step != 1 or len(blocks) == 0 or blocks.start < 0 or blocks.stop > n_blocks:
        raise HetserveError(
            f"{model}: block range {blocks.start}..{blocks.stop - 1} is not a "
            f"non-empty contiguous range within 0..{n_blocks - 1}"
        )
    return blocks


# ------------------------------------------------------------------ roofline


DEFAULT_EFF_KIND: dict[str, float] = {
    "conv": 0.55,
    "stem": 0.45,
    "bottleneck": 0.55,
    "basic": 0.55,
    "dense": 0.45,
    "transition": 0.45,
    "inception": 0.5,
    "mbconv": 0.25,
    "convnext": 0.4,
    "downsample": 0.5,
    "attention": 0.5,
    "encoder": 0.55,
    "decoder": 0.55,
    "embedding": 0.3,
    "mlp": 0.6,
    "head": 0.5,
    "pool": 0.3,
    "norm": 0.3,
    "fpn": 0.5,
    "upsample": 0.3,
}


@dataclass(frozen=True)
class RooflineParams:
    eff_kind: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_EFF_KIND))
    eff_default: float = 0.45
    eff_mem: float = 0.7
    fill_elems_per_tflop: float = 2048.0
    launch_s: float = 2e-6
    storage_bytes: int = 2


class RooflineModel:
    """Analytic latency from model graphs and GPU spec sheets.

    ``blocks`` per model default to PPipe's pre-partitioning: ``n_blocks`` contiguous blocks
    of about equal batch-1 latency on ``ref_gpu`` (section 5.2).
    """

    def __init__(
        self,
        graphs: Callable[[str], ModelGraph] = get_graph,
        *,
        n_blocks: int = 10,
        ref_gpu: str = "V100",
        catalog: GpuCatalog = DEFAULT_CATALOG,
        params: RooflineParams | None = None,
        blocks: Mapping[str, Blocks] | None = None,
    ) -> None:
        self._graphs = graphs
        self.n_blocks = n_blocks
        self.ref_gpu = catalog.get(ref_gpu)
        self.catalog = catalog
        self.p = params or RooflineParams()
        self._blocks: dict[str, Blocks] = dict(blocks or {})
        self._cache: dict[tuple[str, str, int, int], list[tuple[float, float]]] = {}
        self._arrays: dict[str, tuple[np.ndarray, ...]] = {}
        # latency() and energy() by their arguments: a simulator asks for the same few
        # thousand at every dispatch, each a sum over the model's layers
        self._sums: dict[tuple[Any, ...], float] = {}

    def graph(self, model: str) -> ModelGraph:
        return self._graphs(model)

    def _gpu(self, gpu: str | GpuType) -> GpuType:
        return gpu if isinstance(gpu, GpuType) else self.catalog.get(gpu)

    def layer_times(
        self, model: str, gpu: str | GpuType, share: int = 1, batch: int = 1
    ) -> list[tuple[float, float]]:
        """Per layer: (seconds, achieved fraction of the bounding resource's peak)."""
        g = self._gpu(gpu)
        key = (model, g.name, share, batch)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        # every batch size up to a power of two at least 32 at once: a scheduler's table
        # asks for batch 1..max_batch (flex: 128) of every model on every GPU type, and
        # numpy's cost is per call, not per element (issue 41: 100 models, 1,000 GPUs)
        top = 32
        while top < batch:
            top *= 2
        for b, times in enumerate(self._rooflines(model, g, share, top), 1):
            self._cache.setdefault((model, g.name, share, b), times)
        return self._cache[key]

    def _rooflines(
        self, model: str, g: GpuType, share: int, top: int
    ) -> list[list[tuple[float, float]]]:
        """:meth:`layer_times` at batch 1..``top``: a row per batch, a column per layer.
        Each element is computed by the operations a loop over the layers would do, in the
        same order: the same doubles (``tests/core/test_latency.py``)."""
        flops_1, param_b, mem_b, n_ops, eff_k = self._layer_arrays(model)
        p = self.p
        peak = g.inference_tflops * 1e12 / share
        bw = g.mem_bw_gbps * 1e9 / share
        s = p.storage_bytes / 4
        fill_half = p.fill_elems_per_tflop * peak / 1e12
        batch = np.arange(1, top + 1, dtype=np.float64)[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            flops = batch * flops_1
            nbytes = s * (param_b + batch * mem_b)
            # parallel work: the average tensor a kernel of this layer reads or writes
            work = batch * mem_b / 4 / np.maximum(1.0, 2 * n_ops)
            fill = np.where(work > 0, work / (work + fill_half), 1.0)
            eff_c = eff_k * fill
            t_c = np.where(flops > 0, flops / (peak * eff_c), 0.0)
            t_m = nbytes / (bw * p.eff_mem)
            t = np.maximum(t_c, t_m) + n_ops * p.launch_s
            u = np.where(t > 0, np.maximum(flops / (peak * t), nbytes / (bw * t)), 0.0)
        rows = zip(t.tolist(), np.minimum(1.0, u).tolist(), strict=True)
        return [list(zip(ts, us, strict=True)) for ts, us in rows]

    def _layer_arrays(self, model: str) -> tuple[np.ndarray, ...]:
        """The model's layers as arrays: FLOPs, parameter bytes and activation bytes at
        batch 1, kernels, and the compute efficiency of each layer's kind."""
        got = self._arrays.get(model)
        if got is None:
            layers = self.graph(model).layers
            p = self.p
            got = self._arrays[model] = (
                np.array([x.flops for x in layers], np.float64),
                np.array([x.param_bytes for x in layers], np.float64),
                np.array([x.mem_bytes for x in layers], np.float64),
                np.array([x.n_ops for x in layers], np.float64),
                np.array([p.eff_kind.get(x.kind, p.eff_default) for x in layers], np.float64),
            )
        return got

    def blocks(self, model: str) -> Blocks:
        if model not in self._blocks:
            graph = self.graph(model)
            # a repository model's config.yaml may fix its block count (``blocks``)
            n = min(int(graph.meta.get("n_blocks", self.n_blocks)), len(graph.layers))
            costs = [t for t, _ in self.layer_times(model, self.ref_gpu, 1, 1)]
            self._blocks[model] = Blocks.from_graph(graph, balanced_partition(costs, n))
        return self._blocks[model]

    def num_blocks(self, model: str) -> int:
        return len(self.blocks(model))

    def out_bytes(self, model: str, block: int) -> float:
        return self.blocks(model).out_bytes[block]

    def _layer_range(self, model: str, blocks: range) -> range:
        b = self.blocks(model)
        return range(b.bounds[blocks.start], b.bounds[blocks.stop])

    def latency(
        self, model: str, gpu: str | GpuType, share: int, batch: int, blocks: range | None = None
    ) -> float:
        key = ("l", model, gpu if isinstance(gpu, str) else gpu.name, share, batch,
               None if blocks is None else (blocks.start, blocks.stop, blocks.step))  # fmt: skip
        hit = self._sums.get(key)
        if hit is not None:
            return hit
        rng = check_latency_args(model, share, batch, self.num_blocks(model), blocks)
        times = self.layer_times(model, gpu, share, batch)
        out = self._sums[key] = sum(times[i][0] for i in self._layer_range(model, rng))
        return out

    def energy(
        self, model: str, gpu: str | GpuType, share: int, batch: int, blocks: range | None = None
    ) -> float:
        key = ("e", model, gpu if isinstance(gpu, str) else gpu.name, share, batch,
               None if blocks is None else (blocks.start, blocks.stop, blocks.step))  # fmt: skip
        hit = self._sums.get(key)
        if hit is not None:
            return hit
        rng = check_latency_args(model, share, batch, self.num_blocks(model), blocks)
        g = self._gpu(gpu)
        times = self.layer_times(model, g, share, batch)
        joules = 0.0
        for i in self._layer_range(model, rng):
            t, u = times[i]
            joules += t * busy_power_w(g, share, u)
        self._sums[key] = joules
        return joules


def busy_power_w(gpu: GpuType, share: int, utilisation: float) -> float:
    """Power drawn by one ``1/share`` slice while it computes at ``utilisation``."""
    u = BUSY_POWER_FLOOR + (1 - BUSY_POWER_FLOOR) * min(1.0, max(0.0, utilisation))
    return (gpu.idle_w + (gpu.tdp_w - gpu.idle_w) * u) / share


# ------------------------------------------------------------------ linear


@dataclass(frozen=True)
class LinearParams:
    alpha_s: float
    beta_s: float


class LinearModel:
    """``latency = alpha * batch + beta`` per (model, GPU type) (Shepherd Eq. 1).

    A linear model describes whole models. By default a model is one block; ``blocks``
    gives a model that many equal blocks instead, each taking ``1 / blocks`` of the time:
    Shepherd's preemption exit points (Table 4), which is where a preemption can stop a
    batch. Only ``share = 1`` is defined (Shepherd does not slice GPUs).
    """

    def __init__(
        self,
        params: Mapping[tuple[str, str], LinearParams],
        catalog: GpuCatalog = DEFAULT_CATALOG,
        blocks: Mapping[str, int] | None = None,
    ) -> None:
        self.catalog = catalog
        self.params = {(m.lower(), catalog.get(g).name): v for (m, g), v in params.items()}
        self.blocks = {m.lower(): int(n) for m, n in (blocks or {}).items()}
        for m, n in self.blocks.items():
            if n < 1:
                raise ConfigError(f"linear model: {m} must have >= 1 block, got {n}")

    def models(self) -> list[str]:
        return sorted({m for m, _ in self.params})

    def _get(self, model: str, gpu: str | GpuType) -> LinearParams:
        g = gpu.name if isinstance(gpu, GpuType) else self.catalog.get(gpu).name
        try:
            return self.params[(model.lower(), g)]
        except KeyError:
            if model.lower() not in {m for m, _ in self.params}:
                raise unknown("model", model, self.models()) from None
            gpus = sorted({gg for m, gg in self.params if m == model.lower()})
            raise HetserveError(
                f"linear model has no parameters for {model} on {g} (only on {', '.join(gpus)})"
            ) from None

    def num_blocks(self, model: str) -> int:
        return self.blocks.get(model.lower(), 1)

    def out_bytes(self, model: str, block: int) -> float:
        return 0.0

    def latency(
        self, model: str, gpu: str | GpuType, share: int, batch: int, blocks: range | None = None
    ) -> float:
        nb = self.blocks.get(model.lower(), 1)
        rng = check_latency_args(model, share, batch, nb, blocks)
        if share != 1:
            raise HetserveError(f"linear model ({model}): only share 1 is defined, got {share}")
        p = self._get(model, gpu)
        whole = p.alpha_s * batch + p.beta_s
        return whole if len(rng) == nb else whole * len(rng) / nb

    def energy(
        self, model: str, gpu: str | GpuType, share: int, batch: int, blocks: range | None = None
    ) -> float:
        t = self.latency(model, gpu, share, batch, blocks)
        p = self._get(model, gpu)
        g = gpu if isinstance(gpu, GpuType) else self.catalog.get(gpu)
        u = p.alpha_s * batch / (p.alpha_s * batch + p.beta_s)
        return t * busy_power_w(g, share, u)


@dataclass(frozen=True)
class ShepherdRow:
    model: str
    abbrev: str
    zoo_model: str
    alpha_ms: float
    beta_ms: float
    exit_points: int


def shepherd_table4() -> list[ShepherdRow]:
    """Shepherd (NSDI'23) Table 4: alpha, beta (ms) and exit points of 17 models on a
    V100-16GB (p3.2xlarge), shipped as ``hetserve/data/shepherd_table4.csv``."""
    text = (resources.files("hetserve") / "data" / "shepherd_table4.csv").read_text()
    rows = []
    for r in csv.DictReader(line for line in text.splitlines() if not line.startswith("#")):
        rows.append(
            ShepherdRow(
                r["model"],
                r["abbrev"],
                r["zoo_model"],
                float(r["alpha_ms"]),
                float(r["beta_ms"]),
                int(r["exit_points"]),
            )
        )
    return rows


def shepherd_linear_model(exit_points: bool = True) -> LinearModel:
    """The linear model of Shepherd Table 4, keyed by our zoo name where we have the model
    and by the paper's abbreviation otherwise (e.g. ``rs50``). With ``exit_points`` each
    model has as many equal blocks as the table's exit points (a preemption stops a batch
    at the next one); without, one block."""
    params, blocks = {}, {}
    for r in shepherd_table4():
        name = r.zoo_model or r.abbrev.lower()
        params[(name, "V100-16GB")] = LinearParams(r.alpha_ms / 1e3, r.beta_ms / 1e3)
        blocks[name] = r.exit_points
    return LinearModel(params, blocks=blocks if exit_points else None)


def fit_linear(batches: Iterable[int], latencies_s: Iterable[float]) -> LinearParams:
    """Least-squares ``alpha, beta`` of latency against batch size."""
    import numpy as np

    b = np.asarray(list(batches), dtype=float)
    y = np.asarray(list(latencies_s), dtype=float)
    if len(b) < 2 or len(set(b.tolist())) < 2:
        raise ConfigError("fit_linear: need latencies at two or more batch sizes")
    alpha, beta = np.polyfit(b, y, 1)
    return LinearParams(float(alpha), float(beta))
