"""Build a trace from command-line style options and run a simulation of a
:class:`~hetserve.engine.setup.Setup` on it.

Used by ``hetserve simulate``, ``sweep``, ``demo`` and the benchmarks, so that all of them
mean the same thing by a workload spec, a load factor or an SLO scale.

Workload specs (``--workload``; the grammar is in ``docs/workloads.md``, "Workload
specs"): an arrival process without its rate (``poisson``, ``gamma:cv=4``,
``mmpp:ratio=10``, ...; one stream per model, or per placed stream assignment), or a trace
source (``azure2019:FILE``, ``azure2021:FILE``, ``csv:FILE``, ``synthetic``).

Rates: ``rate`` is the total offered rate (req/s) split over the models by weight;
``load_factor`` multiplies the plan's capacity (:meth:`Plan.capacity_rps`). Azure traces
keep their own mix of models (from the fold) and are rescaled to the total rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hetserve.control.switching import Switching
from hetserve.core.errors import HetserveError
from hetserve.core.requests import Stream
from hetserve.engine.control import ControlSpec
from hetserve.engine.setup import Setup, fit_params
from hetserve.scheduling.protocol import make_scheduler
from hetserve.sim.engine import SimConfig, Simulator
from hetserve.sim.result import SimResult
from hetserve.workload.arrivals import PROCESSES, parse_process
from hetserve.workload.azure import (
    counts_to_trace,
    read_azure2019,
    read_azure2021,
    synthetic_azure2019_counts,
)
from hetserve.workload.trace import Trace, generate


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
    ``rates``) and with its deadline; otherwise one stream per model at the model's SLO
    (:func:`workload_trace`)."""
    kind = workload.partition(":")[0].strip().lower()
    if setup.plan.assignments and kind not in PROCESSES:
        raise HetserveError(
            f"--workload {kind}: a plan with stream assignments (MagicBatch) takes its "
            f"streams' rates; use an arrival process ({', '.join(PROCESSES)})"
        )
    if setup.plan.assignments:
        shape = parse_process(workload, 1.0)
        base = _stream_rates(setup)
        targets = [
            (a.stream, a.model, a.deadline_s, a.rate_rps * rates[a.model] / base[a.model])
            for a in setup.plan.assignments.values()
            if a.gpu and a.model in rates and base[a.model] > 0
        ]
        streams = [Stream(name, m, slo_s, shape.with_rate(r)) for name, m, slo_s, r in targets]
        return generate(streams, duration_s, seed)
    return workload_trace(workload, setup.models, setup.slos_s, rates, duration_s, seed)


def workload_trace(
    workload: str,
    models: Sequence[str],
    slos_s: Mapping[str, float],
    rates: Mapping[str, float],
    duration_s: float,
    seed: int,
) -> Trace:
    """A trace of ``models`` at per-model ``rates`` (an arrival process: one stream per
    model at its SLO) or from a trace source (Azure files and the synthetic day rescaled to
    the total rate; ``csv:FILE``, an arrivals CSV, as it is, cut at ``duration_s``)."""
    kind, _, arg = workload.partition(":")
    kind = kind.strip().lower()
    total = sum(rates.values())
    slos = [slos_s[m] for m in models]
    if kind in PROCESSES:
        shape = parse_process(workload, 1.0)
        streams = [Stream(m, m, slos_s[m], shape.with_rate(rates[m])) for m in models]
        return generate(streams, duration_s, seed)
    if kind in ("azure2019", "azure2021", "csv") and not arg:
        raise HetserveError(f"--workload {kind}:FILE needs a file")
    if kind == "azure2019":
        return read_azure2019(arg, models, slos, seed, target_rate_rps=total)
    if kind == "azure2021":
        return read_azure2021(arg, models, slos, target_rate_rps=total)
    if kind == "csv":
        tr = Trace.read_csv(arg)
        other = sorted(set(tr.models()) - set(models))
        if other:
            raise HetserveError(
                f"--workload csv:{arg}: the trace names model(s) {', '.join(other)} "
                f"beyond {', '.join(models)}"
            )
        keep = tr.time_s < duration_s
        return Trace(tr.time_s[keep], tr.stream_idx[keep], tr.streams, duration_s)
    if kind == "synthetic":
        minutes = max(1, math.ceil(duration_s / 60))
        counts = synthetic_azure2019_counts(100, minutes, total, seed)
        names = [f"fn{i:03d}" for i in range(len(counts))]
        tr = counts_to_trace(names, counts, models, slos, seed)
        keep = tr.time_s < duration_s
        return Trace(tr.time_s[keep], tr.stream_idx[keep], tr.streams, duration_s)
    raise HetserveError(
        f"--workload: unknown kind {kind!r}; expected an arrival process "
        f"({', '.join(PROCESSES)}), azure2019:FILE, azure2021:FILE, csv:FILE or synthetic"
    )


def simulate(
    setup: Setup,
    scheduler: str,
    trace: Trace,
    params: Mapping[str, Any] | None = None,
    config: SimConfig | None = None,
    control: ControlSpec | None = None,
) -> SimResult:
    """Simulate ``trace`` on the setup's plan; with ``control``, re-planning as the load
    moves (the scheduler wrapped in ``control.switching.Switching``, a fresh one of the
    same name and parameters per plan version)."""
    return simulator(setup, scheduler, trace, params, config, control).run()


def simulator(
    setup: Setup,
    scheduler: str,
    trace: Trace,
    params: Mapping[str, Any] | None = None,
    config: SimConfig | None = None,
    control: ControlSpec | None = None,
) -> Simulator:
    """:func:`simulate`'s simulator, made and not run (for a caller that sets something
    on its clock first: a benchmark's timing callbacks)."""
    fitted = fit_params(setup, scheduler, params)
    sched: Any = make_scheduler(scheduler, fitted)
    if control is not None:
        sched = Switching(lambda: make_scheduler(scheduler, fitted))
    if config is None:  # what the plan means for the run (``Setup``)
        config = SimConfig(cut_bytes_factor=setup.cut_bytes_factor, warm=setup.warm)
    return Simulator(
        setup.cluster,
        setup.latency,
        setup.plan,
        setup.placement,
        sched,
        trace,
        config,
        graphs=setup.model_catalog.graph,
        control=control,
    )


#: planners that re-plan for rates (their plans weigh models by the rates asked for)
REPLANNERS = ("ppipe", "np", "dart-r")


def replanner(
    setup: Setup, planner: str | None = None, options: Mapping[str, Any] | None = None,
    objective: str = "throughput",
) -> Callable[[dict[str, float], Any, Any], Any]:  # fmt: skip
    """The setup's planner as the control loop calls it: rates in (the models planned
    are those given a rate; a model's weight is its rate, and one at 0 keeps 1% of the
    largest, so it stays served), the setup's
    SLOs, the planner's ``options``; a plan out. ``planner``: the plan's own by default,
    which must be one of ``REPLANNERS``. ``objective``: ``throughput`` (every usable GPU,
    the mix of the rates) or ``cost`` (the cheapest GPUs that serve the rates, with the
    ``headroom`` option's margin, 25% by default)."""
    from hetserve.planning.registry import PlanRequest, make_plan

    name = planner or str(setup.plan.meta.get("planner", ""))
    if name not in REPLANNERS:
        raise HetserveError(
            f"--replan: the plan was made by {name or 'no planner'}, which does not plan for "
            f"rates; re-planning takes a plan of {', '.join(REPLANNERS)} (hetserve plan "
            f"--planner ppipe ..., or serve --planner ppipe)"
        )
    slo_ms = {m: setup.slos_s[m] * 1e3 for m in setup.models}
    opts = dict(options or {})
    opts.setdefault("time_limit_s", 10.0)

    if objective not in ("throughput", "cost", "energy"):
        raise HetserveError(f"--objective: expected throughput, cost or energy, got {objective!r}")
    if objective == "cost":
        setup.cluster.prices()  # (a price for some types and none for others: said now)
    opts["objective"] = objective

    def replan(rates: dict[str, float], plan: Any, placement: Any) -> Any:
        # the models planned: those given a rate (an operator's unload leaves one out)
        models = [m for m in setup.models if m in rates]
        if not models:
            raise HetserveError("re-plan: no model to plan (every model is unloaded)")
        top = max(rates.values(), default=0.0)
        floor = 0.01 * top if top > 0 else 1.0
        weights = {m: max(rates[m], floor) for m in models}
        if objective != "throughput":
            opts["rate_rps"] = sum(weights.values())
        req = PlanRequest(
            setup.cluster, models, {m: slo_ms[m] for m in models}, weights,
            latency_source=lambda: (setup.latency, models),
            model_catalog=setup.model_catalog,
        )  # fmt: skip
        # (cold: a warm start from the current plan, ``PlanOptions.start``, measured no
        # faster: benchmarks/bench_replan.py, docs/benchmarks.md)
        return make_plan(name, req, opts).plan

    return replan


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


def control_spec(
    setup: Setup, replan: str, switch: str, max_moving: int, rates: Mapping[str, float],
    objective: str = "throughput", solve_s: float | None = 1.0, serving: bool = False,
) -> ControlSpec | None:  # fmt: skip
    """The control loop's spec for ``--replan`` (None for ``off``): the built-in
    controller, the setup's planner (``replanner``), ``rates`` as the rates the first
    plan was made for. ``solve_s``: the simulator's modelled solve time (a server
    measures it). ``serving``: ``--replan manual`` is allowed (the controller never
    re-plans by itself; an operator's plans, loads and unloads go through the loop), and
    a plan no re-planning planner made is served (only an operator's plans switch it)."""
    from hetserve.control.controller import RateController, parse_replan
    from hetserve.engine.control import ControlConfig

    mode, period = parse_replan(replan, manual=serving)
    if mode == "off":
        return None
    ctl = RateController(
        "off" if mode == "manual" else mode, period_s=period or 60.0,
        low_load=None if objective == "throughput" else 0.5,
    )  # fmt: skip
    if period is not None and solve_s is not None and period < solve_s:
        raise HetserveError(
            f"--replan every={period:g}: the period is shorter than the solve time "
            f"(--solve-time {solve_s:g} s)"
        )
    try:
        plan_for = replanner(setup, objective=objective)
    except HetserveError as err:
        if mode != "manual":
            raise
        why = str(err)

        def plan_for(rates: dict[str, float], plan: Any, placement: Any) -> Any:
            raise HetserveError(why.replace("--replan", "re-planning"))

    cfg = ControlConfig(switch=switch, max_parallel=max_moving, solve_s=solve_s,
                        tick_s=min(5.0, ctl.period_s))  # fmt: skip
    return ControlSpec(ctl, plan_for, dict(rates), cfg)


def planned_rates(plan: Any) -> dict[str, float]:
    """The rates a plan was made for: a cost plan's demand less its headroom (ppipe's
    ``objective`` in the plan's meta), else its models' mix at its capacity
    (``Plan.rates_at(1)``): where a server's controller starts from."""
    obj = plan.meta.get("objective")
    if isinstance(obj, dict) and isinstance(obj.get("demand_rps"), dict):
        head = float(obj.get("headroom", 0.0) or 0.0)
        return {m: float(r) / (1.0 + head) for m, r in obj["demand_rps"].items()}
    return dict(plan.rates_at(1.0))
