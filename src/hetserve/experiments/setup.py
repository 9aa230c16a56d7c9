"""Build a simulation from command-line style options and run it.

Used by ``hetserve simulate``, ``sweep``, ``demo`` and the benchmarks, so that all of them
mean the same thing by a workload spec, a load factor or an SLO scale.

Workload specs (``--workload``):

==================  ==============================================================
``poisson``         one Poisson stream per model
``gamma:CV``        one Gamma-renewal stream per model, inter-arrival CV ``CV``
``mmpp[:k=v,...]``  one two-state MMPP stream per model (``ratio``, ``high_s``, ``low_s``)
``azure2019:FILE``  Azure Functions 2019 file; functions folded onto the models
``azure2021:FILE``  Azure Functions 2021 file; likewise
``synthetic``       a synthetic Azure-like trace (100 functions) generated in memory
==================  ==============================================================

Rates: ``rate`` is the total offered rate (req/s) split over the models by weight;
``load_factor`` multiplies the plan's capacity (:meth:`Plan.capacity_rps`). Azure traces
keep their own mix of models (from the fold) and are rescaled to the total rate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hetserve.core.cluster import Cluster, load_cluster
from hetserve.core.errors import HetserveError
from hetserve.core.graph import get_graph
from hetserve.core.latency import LatencyModel, RooflineModel
from hetserve.core.plan import Placement, Plan, bind, default_plan, slos_from_scale
from hetserve.core.profiles import ProfileSet, TableModel
from hetserve.core.requests import Stream
from hetserve.scheduling.protocol import make_scheduler
from hetserve.sim.engine import SimConfig, Simulator
from hetserve.sim.result import SimResult
from hetserve.workload.arrivals import MMPP2, Gamma, Poisson
from hetserve.workload.azure import (
    counts_to_trace,
    read_azure2019,
    read_azure2021,
    synthetic_azure2019_counts,
)
from hetserve.workload.trace import Trace, generate


@dataclass
class Setup:
    cluster: Cluster
    latency: LatencyModel
    models: list[str]
    slos_s: dict[str, float]
    plan: Plan
    placement: Placement


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
) -> Setup:
    c = cluster if isinstance(cluster, Cluster) else load_cluster(cluster)
    source = str(plan) if isinstance(plan, (str, Path)) else "plan"
    if isinstance(plan, (str, Path)):
        plan = Plan.load(plan)
    if plan is not None and not models:  # the plan's models
        models = list(plan.models)
    if plan is not None and plan.load_plans:
        latency, names = cold_latency(plan, models, c)
    elif plan is not None and plan.meta.get("latency_source") == "rampa":
        from hetserve.planning.rampa.serving import rampa_latency

        latency, names = rampa_latency(plan, source), list(models)
    else:
        latency, names = latency_source(c, models, profiles, n_blocks)
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
        slos = slos_from_scale(c, latency, names, slo_scale)
        if slo_ms:
            unknown_m = [m for m in slo_ms if m not in names]
            if unknown_m:
                raise HetserveError(f"--slo names {', '.join(unknown_m)}, not among --models")
            slos.update({m: v / 1e3 for m, v in slo_ms.items()})
        plan = default_plan(c, latency, slos, max_batch=max_batch, slo_margin=slo_margin)
    return Setup(c, latency, names, slos, plan, bind(plan, c))


def cold_latency(plan: Plan, models: Sequence[str], cluster: Cluster) -> tuple[Any, list[str]]:
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
    lat = LayerLatency(plan.load_plans, next(iter(sources), None), cluster.catalog)
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
    cluster: Cluster, models: Sequence[str], profiles: str | Path | None, n_blocks: int = 10
) -> tuple[LatencyModel, list[str]]:
    """A profile set's table model (``profiles``), or the roofline model of the shipped
    graphs; and the models' canonical names (unknown names fail with suggestions)."""
    if not models:
        raise HetserveError("--models: give at least one model")
    if profiles is not None:
        table = TableModel(ProfileSet.read(profiles, cluster.catalog), cluster.catalog)
        for m in models:
            table.num_blocks(m)
        return table, list(models)
    names = [get_graph(m).name for m in models]
    return RooflineModel(n_blocks=n_blocks, catalog=cluster.catalog), names


def parse_slo(text: str | None) -> dict[str, float] | None:
    """``m1=ms,m2=ms`` -> {model: ms}."""
    if not text:
        return None
    out = {}
    for item in text.split(","):
        m, eq, v = item.partition("=")
        try:
            out[m.strip()] = float(v)
        except ValueError:
            raise HetserveError(f"--slo: expected model=milliseconds, got {item!r}") from None
        if not eq or not m.strip() or not 0 < out[m.strip()] < math.inf:
            raise HetserveError(
                f"--slo: expected model=milliseconds, a finite number > 0, got {item!r}"
            )
    return out


def model_rates(
    setup: Setup, rate_rps: float | None, load_factor: float | None
) -> dict[str, float]:
    if (rate_rps is None) == (load_factor is None):
        raise HetserveError("give exactly one of --rate and --load-factor")
    if load_factor is not None:
        if load_factor <= 0:
            raise HetserveError(f"--load-factor must be > 0, got {load_factor}")
        if setup.plan.assignments:  # MagicBatch: the streams' own rates, scaled
            return {m: load_factor * r for m, r in _stream_rates(setup).items()}
        return setup.plan.rates_at(load_factor)
    assert rate_rps is not None
    if rate_rps <= 0:
        raise HetserveError(f"--rate must be > 0, got {rate_rps}")
    if setup.plan.assignments:
        per = _stream_rates(setup)
        return {m: rate_rps * r / sum(per.values()) for m, r in per.items()}
    total_w = sum(setup.plan.models[m].weight for m in setup.models)
    return {m: rate_rps * setup.plan.models[m].weight / total_w for m in setup.models}


def _stream_rates(setup: Setup) -> dict[str, float]:
    """Per model: the summed rates of the plan's placed streams (MagicBatch)."""
    out = dict.fromkeys(setup.models, 0.0)
    for a in setup.plan.assignments.values():
        if a.gpu and a.model in out:
            out[a.model] += a.rate_rps
    return out


def build_trace(
    setup: Setup, workload: str, rates: Mapping[str, float], duration_s: float, seed: int
) -> Trace:
    """A trace at per-model ``rates``. A plan with stream assignments (MagicBatch) gets one
    stream per placed assignment, at its rate (scaled so that each model's streams sum to
    ``rates``) and with its deadline; otherwise one stream per model at the model's SLO."""
    kind, _, arg = workload.partition(":")
    kind = kind.strip().lower()
    total = sum(rates.values())
    slos = [setup.slos_s[m] for m in setup.models]
    if setup.plan.assignments and kind not in ("poisson", "gamma", "mmpp"):
        raise HetserveError(
            f"--workload {kind}: a plan with stream assignments (MagicBatch) takes its "
            f"streams' rates; use poisson, gamma:CV or mmpp"
        )
    if kind in ("poisson", "gamma", "mmpp"):
        streams = []
        if setup.plan.assignments:
            base = _stream_rates(setup)
            targets = [
                (a.stream, a.model, a.deadline_s, a.rate_rps * rates[a.model] / base[a.model])
                for a in setup.plan.assignments.values()
                if a.gpu and a.model in rates and base[a.model] > 0
            ]
        else:
            targets = [(m, m, setup.slos_s[m], rates[m]) for m in setup.models]
        for name, m, slo_s, r in targets:
            if kind == "poisson":
                proc: Any = Poisson(r)
            elif kind == "gamma":
                try:
                    proc = Gamma(r, cv=float(arg or 1.0))
                except ValueError:
                    raise HetserveError(
                        f"--workload gamma:CV: CV must be a number, got {arg!r}"
                    ) from None
            else:
                kw = {}
                for item in filter(None, arg.split(",")):
                    k, _, v = item.partition("=")
                    if k not in ("ratio", "high_s", "low_s"):
                        raise HetserveError(
                            f"--workload mmpp: unknown parameter {k!r} (ratio, high_s, low_s)"
                        )
                    kw[k] = float(v)
                proc = MMPP2(r, **kw)
            streams.append(Stream(name, m, slo_s, proc))
        return generate(streams, duration_s, seed)
    if kind == "azure2019":
        if not arg:
            raise HetserveError("--workload azure2019:FILE needs a file")
        return read_azure2019(arg, setup.models, slos, seed, target_rate_rps=total)
    if kind == "azure2021":
        if not arg:
            raise HetserveError("--workload azure2021:FILE needs a file")
        return read_azure2021(arg, setup.models, slos, target_rate_rps=total)
    if kind == "synthetic":
        minutes = max(1, math.ceil(duration_s / 60))
        counts = synthetic_azure2019_counts(100, minutes, total, seed)
        names = [f"fn{i:03d}" for i in range(len(counts))]
        tr = counts_to_trace(names, counts, setup.models, slos, seed)
        keep = tr.time_s < duration_s
        return Trace(tr.time_s[keep], tr.stream_idx[keep], tr.streams, duration_s)
    raise HetserveError(
        f"--workload: unknown kind {kind!r}; expected poisson, gamma:CV, "
        f"mmpp, azure2019:FILE, azure2021:FILE or synthetic"
    )


def simulate(
    setup: Setup,
    scheduler: str,
    trace: Trace,
    params: Mapping[str, Any] | None = None,
    config: SimConfig | None = None,
) -> SimResult:
    sched = make_scheduler(scheduler, fit_params(setup, scheduler, params))
    return Simulator(
        setup.cluster, setup.latency, setup.plan, setup.placement, sched, trace, config
    ).run()


def covered_max_batch(setup: Setup, limit: int = 1024) -> int:
    """The largest batch size that the latency model covers for every model on every GPU
    type and share of the placement (a profile set may cover only some; the roofline and
    linear models cover all, up to ``limit``)."""
    kinds = {(w.gpu, w.share) for w in setup.placement.workers}
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
    import inspect

    from hetserve.scheduling.protocol import scheduler_factory

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


def attainment(res: SimResult) -> tuple[int, int]:
    """(ok, arrived)."""
    from hetserve.core.outcome import OK

    return int((res.outcome == OK).sum()), len(res.trace)


def pooled_attainment(
    setup: Setup,
    scheduler: str,
    workload: str,
    load_factor: float,
    duration_s: float,
    seeds: Sequence[int],
    params: Mapping[str, Any] | None = None,
    config: SimConfig | None = None,
) -> float:
    """SLO attainment over several seeds, pooled (total ok / total arrived)."""
    ok = arrived = 0
    rates = setup.plan.rates_at(load_factor)
    for s in seeds:
        tr = build_trace(setup, workload, rates, duration_s, s)
        cfg = config or SimConfig()
        cfg = SimConfig(
            s,
            cfg.jitter,
            cfg.jitter_cv,
            cfg.cut_bytes_factor,
            cfg.warm,
            cfg.drain_s,
            cfg.record_links,
        )
        o, a = attainment(simulate(setup, scheduler, tr, params, cfg))
        ok += o
        arrived += a
    return ok / arrived if arrived else 1.0
