"""The composition root: a :class:`Setup` (cluster, latency model, plan, placement) built
from a plan file or from command-line style options, and the scheduler parameters fitted to
it. Both engines are built from a ``Setup``: the simulator (``experiments.setup.simulate``)
and the runtime (``runtime.server.Server``); see ``docs/design.md``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hetserve.core.cluster import Cluster
from hetserve.core.errors import HetserveError
from hetserve.core.latency import LatencyModel, RooflineModel
from hetserve.core.models import ZOO, ModelCatalog
from hetserve.core.plan import Placement, Plan, bind, default_plan, slos_from_scale
from hetserve.core.presets import load_cluster
from hetserve.core.profiles import ProfileSet, TableModel
from hetserve.core.registry import Registry
from hetserve.scheduling.protocol import scheduler_factory


@dataclass
class Setup:
    """What both engines are built from: the cluster, the latency model, the models served
    (canonical names) with their SLOs, the plan and the plan's placement on the cluster,
    and the catalog the models' names were resolved in (the zoo, and a model repository
    where the run names one)."""

    cluster: Cluster
    latency: LatencyModel
    models: list[str]
    slos_s: dict[str, float]
    plan: Plan
    placement: Placement
    model_catalog: ModelCatalog = field(default=ZOO)

    def graph(self, model: str) -> Any:
        """The graph of a served model (``bert-base@3`` too) as the server advertises its
        tensors (``planning.registry.model_graph``)."""
        from hetserve.planning.registry import model_graph

        return model_graph(self.plan, model, self.model_catalog)

    # what the plan means for a run, derived in one place: ``simulate``, ``serve``, the
    # studies and the benchmarks read these rather than re-deriving them
    @property
    def cut_bytes_factor(self) -> float:
        """The precision activations cross cuts in: 0.5 FP16 (PPipe section 6, the
        default), 1.0 FP32 (RAMPA's plans say so in ``meta.cut_bytes_factor``)."""
        return float(self.plan.meta.get("cut_bytes_factor", 0.5))

    @property
    def cut_fp16(self) -> bool:
        """Whether real workers send FP16 activations at cuts (``cut_bytes_factor``)."""
        return self.cut_bytes_factor == 0.5

    @property
    def warm(self) -> bool:
        """The plan's blocks are resident when serving starts, unless its load plans load
        them on demand (DeepPlan's cold starts)."""
        return not self.plan.load_plans

    @property
    def scheduler(self) -> str | None:
        """The scheduler the plan names (None: the command's default)."""
        return self.plan.scheduler.name if self.plan.scheduler is not None else None

    @property
    def latency_kind(self) -> str:
        """Where stage times come from (``LATENCY_SOURCES``): ``layers`` (layer tables and
        load plans), ``rampa`` (RAMPA's per-operation times), ``profiles`` (a profile set)
        or ``roofline`` (estimated from the graphs)."""
        kind = latency_kind(self.plan, None)
        if kind == "roofline" and not isinstance(self.latency, RooflineModel):
            return "profiles"
        return kind


@dataclass(frozen=True)
class LatencyRequest:
    """What a latency source is made from."""

    cluster: Cluster
    models: list[str]
    plan: Plan | None
    profiles: str | Path | None  # a profile set's folder
    n_blocks: int  # the roofline's blocks per model
    source: str  # the plan's file, for messages
    model_catalog: ModelCatalog = ZOO  # where the models' graphs and layer tables come from


#: latency sources by kind (``core.registry``: the one registry shape); each makes the
#: latency model and the models' canonical names
LATENCY_SOURCES: Registry[Callable[[LatencyRequest], tuple[LatencyModel, list[str]]]] = Registry(
    "latency source"
)


def latency_kind(plan: Plan | None, profiles: str | Path | None) -> str:
    """Which latency source a run takes: the plan's load plans, RAMPA's own times for its
    plans, a profile set where given, else the roofline."""
    if plan is not None and plan.load_plans:
        return "layers"
    if plan is not None and plan.meta.get("latency_source") == "rampa":
        return "rampa"
    return "profiles" if profiles is not None else "roofline"


@LATENCY_SOURCES.register("layers")
def _layers(r: LatencyRequest) -> tuple[LatencyModel, list[str]]:
    assert r.plan is not None
    return cold_latency(r.plan, r.models, r.cluster, r.model_catalog)


@LATENCY_SOURCES.register("rampa")
def _rampa(r: LatencyRequest) -> tuple[LatencyModel, list[str]]:
    from hetserve.planning.rampa.serving import rampa_latency

    assert r.plan is not None
    return rampa_latency(r.plan, r.source), list(r.models)


@LATENCY_SOURCES.register("profiles")
@LATENCY_SOURCES.register("roofline")
def _profiles_or_roofline(r: LatencyRequest) -> tuple[LatencyModel, list[str]]:
    return latency_source(r.cluster, r.models, r.profiles, r.n_blocks, r.model_catalog)


def build_setup(
    cluster: str | Cluster,
    models: Sequence[str],
    *,
    profiles: str | Path | None = None,
    slo_ms: Mapping[str, float] | None = None,
    slo_scale: float = 5.0,
    plan: str | Path | Plan | None = None,
    max_batch: int = 8,
    slo_margin: float = 0.4,
    n_blocks: int = 10,
    model_catalog: ModelCatalog = ZOO,
) -> Setup:
    """A run's :class:`Setup` from a cluster (a preset's name or a file) and model names
    resolved in ``model_catalog``: a plan's (file or object) where given, else a default
    plan for the SLOs (``slo_ms``, else ``slo_scale`` x the fastest batch-1 latency)."""
    c = cluster if isinstance(cluster, Cluster) else load_cluster(cluster)
    source = str(plan) if isinstance(plan, (str, Path)) else "plan"
    if isinstance(plan, (str, Path)):
        plan = Plan.load(plan)
    if plan is not None and not models:  # the plan's models
        models = list(plan.models)
    kind = latency_kind(plan, profiles)
    latency, names = LATENCY_SOURCES.get(kind)(
        LatencyRequest(c, list(models), plan, profiles, n_blocks, source, model_catalog)
    )
    if plan is not None:
        missing = [m for m in names if m not in plan.models]
        if missing:
            raise HetserveError(f"plan has no pipelines for {', '.join(missing)}")
        groups = tuple(
            replace(g, models=tuple(m for m in g.models if m in names))
            for g in plan.groups
            if any(m in names for m in g.models)
        )
        plan = replace(
            plan, models={m: plan.models[m] for m in names}, groups=groups,
            load_plans={m: lp for m, lp in plan.load_plans.items() if m in names},
            assignments={n: a for n, a in plan.assignments.items() if a.model in names},
        )  # fmt: skip
        plan.check_against(latency, source)
        if plan.binding is not None:
            plan.binding.check_against(plan, c, f"{source}: binding")
        for (a, b), path in plan.paths.items():
            bad = [x for x in path if x not in c.links]
            if bad or not path:
                raise HetserveError(
                    f"{source}: paths: {a} -> {b} names links cluster {c.name} does not "
                    f"have: {', '.join(bad) or 'none given'}"
                )
        slos = {m: plan.models[m].slo_s for m in names}
    else:
        slos = slos_from_scale(c, latency, names, slo_scale, graphs=model_catalog.graph)
        if slo_ms:
            unknown_m = [m for m in slo_ms if m not in names]
            if unknown_m:
                raise HetserveError(f"--slo names {', '.join(unknown_m)}, not among --models")
            slos.update({m: v / 1e3 for m, v in slo_ms.items()})
        plan = default_plan(c, latency, slos, max_batch=max_batch, slo_margin=slo_margin)
    return Setup(c, latency, names, slos, plan, bind(plan, c), model_catalog)


def cold_latency(
    plan: Plan, models: Sequence[str], cluster: Cluster, model_catalog: ModelCatalog = ZOO
) -> tuple[LatencyModel, list[str]]:
    """The latency model of a plan with load plans (DeepPlan): layer tables and the
    plan's load plans (``core.layerlatency``), from the ``layers.csv`` the plan was made
    from where it names one. Model names may carry instance suffixes (``bert-base@3``)."""
    from hetserve.core.layerlatency import LayerLatency

    if not models:
        raise HetserveError("--models: give at least one model")
    missing = [m for m in models if m not in plan.load_plans]
    if missing:
        raise HetserveError(f"plan has no load plan for {', '.join(missing)}")
    sources = {lp.layers_source for lp in plan.load_plans.values()} - {"estimate", ""}
    if len(sources) > 1:
        raise HetserveError(f"plan's load plans come from several layer files: {sources}")
    lat = LayerLatency(
        plan.load_plans, next(iter(sources), None), cluster.catalog, model_catalog.layer_table
    )
    for m in models:  # a load plan must cover its model's layers exactly
        lp = plan.load_plans[m]
        n = len(lat.rows(m, lp.gpu))
        if len(lp.plan.modes) != n:
            raise HetserveError(
                f"plan: load_plans.{m} has {len(lp.plan.modes)} layers; the model's layer "
                f"table has {n}"
            )
    return lat, list(models)


def latency_source(
    cluster: Cluster,
    models: Sequence[str],
    profiles: str | Path | None,
    n_blocks: int = 10,
    model_catalog: ModelCatalog = ZOO,
) -> tuple[LatencyModel, list[str]]:
    """A profile set's table model (``profiles``), or the roofline model of
    ``model_catalog``'s graphs; and the models' canonical names (unknown names fail with
    suggestions)."""
    if not models:
        raise HetserveError("--models: give at least one model")
    if profiles is not None:
        table = TableModel(ProfileSet.read(profiles, cluster.catalog), cluster.catalog)
        for m in models:
            table.num_blocks(m)
        return table, list(models)
    names = [model_catalog.graph(m).name for m in models]
    return RooflineModel(model_catalog.graph, n_blocks=n_blocks, catalog=cluster.catalog), names


def covered_max_batch(setup: Setup, limit: int = 1024) -> int:
    """The largest batch size that the latency model covers for every model on every GPU
    type and share of the placement (a profile set may cover only some; the roofline and
    linear models cover all, up to ``limit``)."""
    kinds = {(w.gpu, w.share) for w in setup.placement.workers}
    if type(setup.latency) is RooflineModel and limit > 1:
        # (its times at every batch size come from one computation per model, GPU type
        # and share: one it has at batch 2 it has at all. Asking about each size cost
        # 25,600 look-ups for flex's limit of 128 at 100 models, 5-8 ms of a run's start)
        for m in setup.models:
            for gpu, share in kinds:
                try:
                    setup.latency.latency(m, gpu, share, 2)
                except HetserveError:
                    return 1
        return limit
    best = limit
    for m in setup.models:
        for gpu, share in kinds:
            b = 1
            while b < best:
                try:
                    setup.latency.latency(m, gpu, share, b + 1)
                except HetserveError:
                    break
                b += 1
            best = min(best, b)
    return best


def fit_params(setup: Setup, scheduler: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """The scheduler's parameters, with ``max_batch`` (where it takes one and none is given)
    kept to the batch sizes the latency model covers: a profile set of batches 1..4 must
    not fail on the scheduler's default of 8 or 128."""
    out = dict(params or {})
    if "max_batch" in out:
        return out
    factory = scheduler_factory(scheduler)
    if factory is None:
        return out
    p = inspect.signature(factory).parameters.get("max_batch")
    if p is None or not isinstance(p.default, int):
        return out
    cap = covered_max_batch(setup, p.default)
    if cap < p.default:
        out["max_batch"] = cap
    return out
