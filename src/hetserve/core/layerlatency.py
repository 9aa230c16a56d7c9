"""A latency model over layer tables and load plans: what the simulator runs for DeepPlan.

Every model is served whole (one block). Its warm latency on a GPU at a batch size is the
sum of its layers' execution times with the model's load plan: loaded layers at their
in-memory time, DHA layers at their host-access time (they stay in host memory when the
model is warm, DeepPlan section 5.3). Its cold start follows the timeline
(``core.coldstart``) of its load plan.

Model names may carry an instance suffix, ``bert-base@17``: instance 17 of BERT-Base (a
different user's copy of the same architecture, DeepPlan's Fig. 13); the layer table is the
architecture's, the load plan the instance's (or the architecture's).

Layer times come from a ``layers.csv`` where one is given (for the batch sizes it has;
other batches scale the batch-1 execution times linearly, an approximation) and from the
estimate over the shipped layer tables otherwise. A ``1/k`` slice runs ``k`` times slower.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from hetserve.core.coldstart import DHA, LoadPlan, ModelLoadPlan, Timeline, TimelineParts
from hetserve.core.errors import HetserveError
from hetserve.core.gpus import DEFAULT_CATALOG, GpuCatalog, GpuType
from hetserve.core.layertable import (
    LayerRow,
    LayerTable,
    estimate_layer_rows,
    get_layer_table,
    read_layers_csv,
)


def base_model(name: str) -> str:
    """``bert-base@17`` -> ``bert-base``."""
    return name.split("@", 1)[0]


class LayerLatency:
    """The module docstring's latency model (the ``LatencyModel`` protocol, one block)."""

    def __init__(
        self,
        load_plans: Mapping[str, ModelLoadPlan],
        layers_csv: str | None = None,
        catalog: GpuCatalog = DEFAULT_CATALOG,
        tables: Callable[[str], LayerTable] = get_layer_table,
    ) -> None:
        self.load_plans = dict(load_plans)
        self.catalog = catalog
        self._tables = tables  # a model's layer table by name (a ModelCatalog's)
        self._gpus: dict[str, GpuType] = {}  # (the catalog's, by the name asked for)
        self._csv: list[LayerRow] = read_layers_csv(layers_csv) if layers_csv else []
        self._rows: dict[tuple[str, str, int], list[LayerRow]] = {}
        self._warm: dict[tuple[str, str, int, int], tuple[float, float]] = {}
        self._gpu_bytes: dict[str, float] = {}
        self._timelines: dict[tuple[str, str, tuple[float, ...]], Timeline] = {}
        self._cold: dict[tuple[int, str, int, int], tuple[float, float, bool, float, Timeline]] = {}
        # A run, the weights and the timeline depend on a model's architecture (its layer
        # rows), its load plan and its NVLink bandwidth, not on its name: the instances
        # that agree on these (DeepPlan's Fig. 13: 180 copies of BERT-Base) share one
        # canonical instance, and a model's first question about anything is answered by
        # its canonical instance's. (The plan by identity: the plans are held by this
        # object's own ``load_plans``, so an identity is not reused while it is kept.)
        self._canonical: dict[str, str] = {}  # model -> its canonical instance
        self._instances: dict[tuple[str, int, float | None], str] = {}
        # (per canonical instance and GPU type, a timeline's parts; per canonical
        # instance, GPU type, share and batch, each layer's run, last first, their sum
        # and whether the plan is pipelined)
        self._parts: dict[tuple[str, str], TimelineParts] = {}
        self._exec: dict[tuple[str, str, int, int], tuple[float, list[float], bool]] = {}

    # ---- inputs
    def _gpu(self, gpu: str | GpuType) -> GpuType:
        if isinstance(gpu, GpuType):
            return gpu
        hit = self._gpus.get(gpu)
        if hit is None:
            hit = self._gpus[gpu] = self.catalog.get(gpu)
        return hit

    def model_load_plan(self, model: str) -> ModelLoadPlan:
        lp = self.load_plans.get(model) or self.load_plans.get(base_model(model))
        if lp is None:
            raise HetserveError(f"no load plan for model {model} (plan --planner deepplan)")
        return lp

    def rows(self, model: str, gpu: str | GpuType, batch: int = 1) -> list[LayerRow]:
        g = self._gpu(gpu)
        arch = base_model(model)
        key = (arch, g.name, batch)
        hit = self._rows.get(key)
        if hit is None:
            mine = [r for r in self._csv if r.model == arch and (not r.gpu or r.gpu == g.name)]
            if mine:
                at = [r for r in mine if r.batch == batch]
                if not at:
                    one = [r for r in mine if r.batch == 1]
                    if not one:
                        raise HetserveError(f"layers.csv has no batch-1 rows of {arch}")
                    at = [
                        LayerRow(r.model, r.layer, r.kind, r.param_bytes, r.load_us,
                                 r.exec_gpu_us * batch, r.exec_host_us * batch, r.gpu, batch)
                        for r in one
                    ]  # fmt: skip
                hit = at
            else:
                hit = estimate_layer_rows(self._tables(arch), g, batch)
            self._rows[key] = hit
        return hit

    def plan_of(self, model: str) -> LoadPlan:
        return self.model_load_plan(model).plan

    def canonical_instance(self, model: str) -> str:
        """The first model asked about of those with ``model``'s architecture, load plan
        and NVLink bandwidth: what every answer here depends on (``ColdStartModel``;
        ``__init__``)."""
        hit = self._canonical.get(model)
        if hit is None:
            lp = self.model_load_plan(model)
            key = (base_model(model), id(lp.plan), lp.nvlink_gbps)
            hit = self._canonical[model] = self._instances.setdefault(key, model)
        return hit

    # ---- the LatencyModel protocol
    def num_blocks(self, model: str) -> int:
        return 1

    def out_bytes(self, model: str, block: int) -> float:
        return 0.0

    def _run_s(self, model: str, gpu: str | GpuType, share: int, batch: int) -> tuple[float, float]:
        """(warm run time, the part of it on DHA layers)."""
        g = self._gpu(gpu)
        key = (model, g.name, share, batch)
        hit = self._warm.get(key)
        if hit is None:
            c = self.canonical_instance(model)
            if c != model:
                hit = self._run_s(c, g, share, batch)
            else:
                rows = self.rows(model, g, batch)
                modes = self.plan_of(model).modes
                _check_len(model, rows, modes)
                on_gpu = dha = 0.0
                for r, m in zip(rows, modes, strict=True):
                    if m == DHA:
                        dha += r.exec_host_us
                    else:
                        on_gpu += r.exec_gpu_us
                hit = (share * 1e-6 * (on_gpu + dha), share * 1e-6 * dha)
            self._warm[key] = hit
        return hit

    def latency(
        self, model: str, gpu: str | GpuType, share: int, batch: int, blocks: range | None = None
    ) -> float:
        return self._run_s(model, gpu, share, batch)[0]

    def dha_s(self, model: str, gpu: str | GpuType, share: int, batch: int) -> float:
        """The part of a run spent executing DHA layers (reading host memory over PCIe)."""
        return self._run_s(model, gpu, share, batch)[1]

    def energy(
        self, model: str, gpu: str | GpuType, share: int, batch: int, blocks: range | None = None
    ) -> float:
        from hetserve.core.latency import busy_power_w

        g = self._gpu(gpu)
        return self.latency(model, g, share, batch) * busy_power_w(g, share, 1.0)

    # ---- cold starts
    def gpu_bytes(self, model: str, gpu: str | GpuType) -> float:
        """Weights one instance holds in GPU memory (its loaded layers)."""
        g = self._gpu(gpu)
        key = f"{model}@{g.name}"
        hit = self._gpu_bytes.get(key)
        if hit is None:
            c = self.canonical_instance(model)
            if c != model:
                hit = self.gpu_bytes(c, g)
            else:
                rows = self.rows(model, g)
                modes = self.plan_of(model).modes
                _check_len(model, rows, modes)
                hit = float(
                    sum(r.param_bytes for r, m in zip(rows, modes, strict=True) if m != DHA)
                )
            self._gpu_bytes[key] = hit
        return hit

    def load_timeline(
        self, model: str, gpu: str | GpuType, load_scale: Sequence[float] = ()
    ) -> Timeline:
        """The cold start's timeline at batch 1 (when each layer's weights arrive); the
        same object for the same architecture, load plan, GPU type and link shares."""
        g = self._gpu(gpu)
        scale = tuple(load_scale)
        key = (model, g.name, scale)
        tl = self._timelines.get(key)
        if tl is None:
            c = self.canonical_instance(model)
            if c != model:
                tl = self.load_timeline(c, g, scale)
            else:
                parts = self._parts.get((model, g.name))
                if parts is None:
                    lp = self.model_load_plan(model)
                    parts = TimelineParts(self.rows(model, g), lp.plan, lp.nvlink_gbps)
                    self._parts[(model, g.name)] = parts
                tl = parts.timeline(scale)
            self._timelines[key] = tl
        return tl

    def cold_run_s(
        self,
        model: str,
        gpu: str | GpuType,
        share: int,
        batch: int,
        load: Timeline,
        offset_s: float,
    ) -> float:
        """How long a batch takes that starts ``offset_s`` after its model's load began,
        each layer waiting for its weights (``load``: the load's timeline)."""
        total, peak, pipelined, done = self.cold_run_terms(model, gpu, share, batch, load)
        if not pipelined:
            return max(offset_s, done) + total - offset_s
        end = offset_s + total
        return (end if end > peak else peak) - offset_s

    def cold_run_terms(
        self, model: str, gpu: str | GpuType, share: int, batch: int, load: Timeline
    ) -> tuple[float, float, bool, float]:
        """:meth:`cold_run_s` for every offset (``ColdStartModel.cold_run_terms``):
        ``(total_s, peak_s, pipelined, load_done_s)``.

        The execution recursion ``e_i = max(e_{i-1}, ready_i) + x_i`` unrolls to
        ``e_n = max(offset + sum(x), max_i(ready_i + sum_{j >= i} x_j))``, so one pass per
        (timeline, batch) gives every offset."""
        # (by the GPU as given, a name or a type; the timeline is kept with its terms, so
        # that its identity, in the key, is not reused by another while they are kept)
        key = (id(load), gpu if isinstance(gpu, str) else gpu.name, share, batch)
        hit = self._cold.get(key)
        if hit is None:
            g = self._gpu(gpu)
            c = self.canonical_instance(model)
            run = self._exec.get((c, g.name, share, batch))
            if run is None:
                rows = self.rows(c, g, batch)
                plan = self.plan_of(c)
                _check_len(c, rows, plan.modes)
                xs = [
                    share * 1e-6 * (r.exec_host_us if m == DHA else r.exec_gpu_us)
                    for r, m in zip(rows, plan.modes, strict=True)
                ]
                run = self._exec[(c, g.name, share, batch)] = (sum(xs), xs[::-1], plan.pipelined)
            total, backwards, pipelined = run
            suffix = peak = 0.0
            for x, a in zip(backwards, reversed(load.ready_s), strict=True):
                suffix += x
                v = a + suffix
                if v > peak:
                    peak = v
            hit = self._cold[key] = (total, peak, pipelined, load.load_done_s, load)
        return hit[0], hit[1], hit[2], hit[3]


def _check_len(model: str, rows: Sequence[LayerRow], modes: Sequence[str]) -> None:
    if len(rows) != len(modes):
        raise HetserveError(
            f"load plan of {model} has {len(modes)} layers; its layer table has {len(rows)}"
        )
