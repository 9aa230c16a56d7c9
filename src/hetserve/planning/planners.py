"""The built-in planners, registered by name (``planning.registry``): each adapts one
paper's method to a :class:`~hetserve.planning.registry.PlanRequest` and returns a core
plan with its default scheduler.

=============  ===============  ===========================================================
planner        serves with      what it decides
=============  ===============  ===========================================================
``ppipe``      ``reservation``  pooled pipelines, cuts, vGPU shares, batches (PPipe MILP)
``np``         ``reservation``  PPipe's baseline: whole models, one GPU type each
``dart-r``     ``reservation``  PPipe's baseline: pairs of a high- and a low-class GPU
``herd``       ``flex``         Shepherd's serving groups (HERD) for an offered rate
``deepplan``   ``coldstart``    per-model load plans for cold starts (DeepPlan)
``magicbatch`` ``magicbatch``   streams to GPUs and batch sizes, least energy (MagicBatch)
``rampa``      ``fixed-batch``  RAMPA's placement of service requests in a switched cluster
``pe``         ``fixed-batch``  RAMPA's baseline: equal-FLOPs stages, ant colony placement
``ncar``       ``fixed-batch``  RAMPA's baseline: network-unaware placement
=============  ===============  ===========================================================
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from hetserve.core.errors import HetserveError
from hetserve.core.plan import slos_from_scale
from hetserve.planning.registry import PlanRequest, PlanResult, register_planner

SLO_OPTIONS = ("slo_scale", "slo_ref_gpu")
PPIPE_OPTIONS = (
    *SLO_OPTIONS, "slo_margin", "max_stages", "shares", "batches", "time_limit_s", "mip_gap",
    "cut_bytes", "objective", "rate_rps", "headroom", "start",
)  # fmt: skip


def _slos(req: PlanRequest, opts: Mapping[str, Any]) -> tuple[Any, list[str], dict[str, float]]:
    """The latency model, canonical names and SLOs: ``slo_scale`` x batch-1 latency on
    ``slo_ref_gpu`` (the fastest by default), overridden per model by the request's SLOs."""
    scale = float(opts.get("slo_scale", 5.0))
    if scale <= 0:
        raise HetserveError(f"--slo-scale must be > 0, got {scale}")
    lat, names = req.latency()
    slos = slos_from_scale(
        req.cluster, lat, names, scale, opts.get("slo_ref_gpu"), req.model_catalog.graph
    )
    slos.update(_given_slos(req, names))
    return lat, names, slos


def _given_slos(req: PlanRequest, names: list[str]) -> dict[str, float]:
    """The request's SLOs in seconds, each for one of ``names``."""
    given = req.slo_ms or {}
    bad = [m for m in given if m not in names]
    if bad:
        raise HetserveError(f"--slo names {', '.join(bad)}, not among --models")
    return {m: v / 1e3 for m, v in given.items()}


def _ppipe_family(name: str) -> Any:
    def build(req: PlanRequest, opts: Mapping[str, Any]) -> PlanResult:
        from hetserve.planning.ppipe import PlanOptions, plan_models

        lat, names, slos = _slos(req, opts)
        objective = str(opts.get("objective", "throughput"))
        rates: tuple[tuple[str, float], ...] = ()
        if objective in ("cost", "energy"):
            rate = opts.get("rate_rps")
            if rate is None or not 0 < float(rate) < math.inf:
                raise HetserveError(
                    f"--objective {objective}: give the rate to serve with --rate REQ_PER_S "
                    f"(> 0), split over the models by --weights"
                )
            w = {m: float((req.weights or {}).get(m, 1.0)) for m in names}
            rates = tuple((m, float(rate) * w[m] / sum(w.values())) for m in names)
        o = PlanOptions(
            planner=name,
            slo_margin=float(opts.get("slo_margin", 0.4)),
            max_stages=int(opts.get("max_stages", 2)),
            shares=tuple(opts.get("shares", (1, 2, 3, 4))),
            batches=tuple(opts.get("batches", range(1, 9))),
            time_limit_s=float(opts.get("time_limit_s", 60.0)),
            mip_rel_gap=float(opts.get("mip_gap", 1e-4)),
            cut_bytes_factor=0.5 if opts.get("cut_bytes", "fp16") == "fp16" else 1.0,
            objective=objective,
            rates_rps=rates,
            headroom=float(opts.get("headroom", 0.25)),
            start=opts.get("start"),
        )
        plan = plan_models(req.cluster, lat, slos, req.weights, o)
        meta = {**plan.meta, "cut_bytes_factor": o.cut_bytes_factor}
        return PlanResult(replace(plan, meta=meta), {"options": o})

    return build


for _name, _what in (
    ("ppipe", "pooled pipelines (PPipe MILP)"),
    ("np", "PPipe's NP baseline: whole models, no partitioning"),
    ("dart-r", "PPipe's DART-r baseline: high/low-class GPU pairs"),
):
    register_planner(_name, "reservation", options=PPIPE_OPTIONS, summary=_what)(
        _ppipe_family(_name)
    )


@register_planner(
    "herd",
    "flex",
    options=(*SLO_OPTIONS, "rate_rps", "gpu", "g_max", "max_batch"),
    summary="Shepherd's serving groups (HERD) for an offered rate",
)
def _herd(req: PlanRequest, opts: Mapping[str, Any]) -> PlanResult:
    """HERD on the cluster's GPUs of one type: each model's share of ``rate_rps`` (by the
    weights) is a model-stream; streams heavier than half a group are split; memory per
    model from its graph's weights; a GPU keeps 1/8 of its memory for the scheduler."""
    from hetserve.planning.herd import herd, herd_plan, model_streams, split_heavy

    rate = opts.get("rate_rps")
    if rate is None or not 0 < float(rate) < math.inf:
        raise HetserveError("--planner herd: give the offered load with --rate REQ_PER_S (> 0)")
    lat, names, slos = _slos(req, opts)
    counts = req.cluster.gpu_counts()
    gpu = opts.get("gpu")
    if gpu is None:
        if len(counts) != 1:
            raise HetserveError(
                f"--planner herd groups GPUs of one type; {req.cluster.name} has "
                f"{', '.join(counts)}: name one with --gpu"
            )
        gpu = next(iter(counts))
    gtype = req.cluster.catalog.get(gpu)
    if gtype.name not in counts:
        raise HetserveError(f"--gpu {gpu}: cluster {req.cluster.name} has {', '.join(counts)}")
    w = req.weights or {}
    total_w = sum(float(w.get(m, 1.0)) for m in names)
    rates = {m: float(rate) * float(w.get(m, 1.0)) / total_w for m in names}
    mem = {m: req.model_catalog.graph(m).param_bytes / 1e9 for m in names}
    max_batch = int(opts.get("max_batch", 128))
    g_max = int(opts.get("g_max", 12))
    if g_max < 1 or max_batch < 1:
        raise HetserveError("--g-max and --max-batch must be >= 1")
    ms = model_streams(rates, slos, lat, gtype.name, mem, max_batch=max_batch)
    ms = split_heavy(ms, max(1.0, g_max / 2))
    res = herd(ms, counts[gtype.name], g_max=g_max, mem_gb=gtype.memory_gb * 7 / 8)
    plan = herd_plan(res, ms, slos, lat, gtype.name, max_batch)
    from hetserve.core.plan import SchedulerChoice

    sched = SchedulerChoice("flex", {"max_batch": max_batch})
    return PlanResult(replace(plan, scheduler=sched), {"herd": res})


@register_planner(
    "deepplan",
    "coldstart",
    options=("kind", "layers_csv", "batch", "pt_max", "gpu"),
    summary="DeepPlan's load plans for cold starts",
)
def _deepplan(req: PlanRequest, opts: Mapping[str, Any]) -> PlanResult:
    from hetserve.core.layerlatency import base_model
    from hetserve.planning.deepplan import plan_cold_starts

    names = list(dict.fromkeys(req.models))
    if not names:
        raise HetserveError("--models: give at least one model")
    for m in names:  # instances (bert-base@3) are served whole: one block each
        req.model_catalog.layer_table(base_model(m))
    slos = _given_slos(req, names)
    kind = str(opts.get("kind", "pt+dha"))
    plan, every = plan_cold_starts(
        req.cluster, names, None, kind, slos, int(opts.get("batch", 1)),
        opts.get("layers_csv"), opts.get("pt_max"), opts.get("gpu"), req.progress,
        req.model_catalog,
    )  # fmt: skip
    return PlanResult(plan, {"every": every, "kind": kind, "batch": int(opts.get("batch", 1))})


@register_planner(
    "magicbatch",
    "magicbatch",
    options=("method", "streams_file", "random_n", "seed", "park_idle"),
    summary="MagicBatch's least-energy stream assignment",
)
def _magicbatch(req: PlanRequest, opts: Mapping[str, Any]) -> PlanResult:
    from hetserve.planning.magicbatch import plan_streams, random_streams, read_streams

    c = req.cluster
    streams_file, random_n = opts.get("streams_file"), opts.get("random_n")
    seed = int(opts.get("seed", 0))
    if (streams_file is None) == (random_n is None):
        raise HetserveError("--planner magicbatch: give --streams FILE or --random N")
    if random_n is not None:
        if not 1 <= int(random_n) <= 100_000:
            raise HetserveError(f"--random must be 1..100000, got {random_n}")
        if not req.models:
            raise HetserveError("--random: give the streams' models with --models")
        lat, names = req.latency()
        streams = random_streams(int(random_n), names, seed)
    else:
        streams = read_streams(str(streams_file))
        given = sorted({s.model for s in streams})
        req.models = given
        lat, names = req.latency()
        canon = dict(zip(given, names, strict=True))
        streams = [replace(s, model=canon[s.model]) for s in streams]
    park_idle = opts.get("park_idle")
    if park_idle is None:
        park_idle = c.park_idle_gpus
    types = {g.name: g for g in c.gpu_types()}
    order = [g.name for g in sorted(types.values(), key=lambda g: (g.year, g.fp32_tflops))]
    method = str(opts.get("method", "exact"))
    p, assignment, options = plan_streams(
        method, streams, c.gpu_counts(), types, lat, order=order, park_idle=park_idle, seed=seed
    )
    if streams_file is not None:  # a given stream no GPU type can serve is bad input
        for s in streams:
            if not any(o.feasible for o in options[s.name].values()):
                why = "; ".join(f"{t}: {o.why}" for t, o in options[s.name].items())
                raise HetserveError(
                    f"{streams_file}: stream {s.name} ({s.model}, {s.rate_rps:g} req/s, "
                    f"deadline {s.deadline_s * 1e3:g} ms): no GPU type of {c.name} can serve "
                    f"it ({why})"
                )
    details = {"streams": streams, "method": method, "park_idle": park_idle,
               "assignment": assignment}  # fmt: skip
    return PlanResult(p, details)


RAMPA_OPTIONS = ("stages", "case", "max_requests", "requests_file", "seed")


def _rampa_family(method: str) -> Any:
    def build(req: PlanRequest, opts: Mapping[str, Any]) -> PlanResult:
        import time

        from hetserve.planning.rampa.aco import AcoParams, min_stages, stage_counts
        from hetserve.planning.rampa.network import RampaNet
        from hetserve.planning.rampa.place import (
            CASES,
            place_sequence,
            read_requests,
            request_sequence,
            table_v_services,
        )
        from hetserve.planning.rampa.serving import placements_plan
        from hetserve.planning.rampa.state import ClusterState

        if req.models:
            raise HetserveError(
                f"--planner {method} places RAMPA's services (Table V), not --models"
            )
        services = table_v_services()
        stages = opts.get("stages")
        if method == "rampa" and stages:
            raise HetserveError("--stages: only --planner pe or ncar take fixed stage counts")
        counts = stage_counts(stages, list(services)) if stages else None
        if method != "rampa" and counts is None:
            raise HetserveError(f"--planner {method}: give the stage counts with --stages")
        for name, k in (counts or {}).items():
            if k > len(services[name].ops):
                raise HetserveError(
                    f"--stages: {name} ({services[name].model}) has "
                    f"{len(services[name].ops)} operations, fewer than {k} stages"
                )
        c = req.cluster
        net = RampaNet.of(c)
        seed = int(opts.get("seed", 0))
        case = int(opts.get("case", 1))
        if case not in CASES:
            raise HetserveError(f"--case: expected 1..4, got {case}")
        rf = opts.get("requests_file")
        reqs = (
            read_requests(str(rf), list(services))
            if rf
            else request_sequence(case, int(opts.get("max_requests", 500)), seed)
        )
        state = ClusterState.of(net)
        for name in sorted(set(reqs)):
            if min_stages(state, services[name]) > len(net.gpus):
                need = sum(op.memory_bytes for op in services[name].ops) / 1e9
                total = sum(g.memory_gb for g in net.gpus.values())
                raise HetserveError(
                    f"{name} ({services[name].model}) needs {need:.1f} GB, more than all "
                    f"{len(net.gpus)} GPUs of {c.name} hold ({total:.0f} GB)"
                )
        t0 = time.perf_counter()

        def tick(i: int, p: object) -> None:
            if req.progress is not None:
                req.progress()

        placed, failed = place_sequence(
            state, reqs, method, counts, AcoParams(seed=seed), on_placed=tick
        )
        if not placed:
            raise HetserveError(f"{method}: not even the first request ({failed}) fits {c.name}")
        meta = {"planner": method, "case": rf or CASES[case], "seed": seed, "stages": counts,
                "solve": {"seconds": time.perf_counter() - t0, "failed": failed}}  # fmt: skip
        plan = placements_plan(placed, c, meta)
        return PlanResult(plan, {"placed": placed, "failed": failed, "requests": len(reqs),
                                 "net": net})  # fmt: skip

    return build


for _name, _what in (
    ("rampa", "RAMPA's placement (ant colony, stage counts searched)"),
    ("pe", "RAMPA's PE baseline at fixed stage counts"),
    ("ncar", "RAMPA's NCAR baseline at fixed stage counts"),
):
    register_planner(
        _name, "fixed-batch", options=RAMPA_OPTIONS,
        params={"max_batch": 1, "max_queue_delay_s": 0.0}, summary=_what,
    )(_rampa_family(_name))  # fmt: skip
