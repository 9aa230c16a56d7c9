"""``hetserve reproduce magicbatch``: MagicBatch's evaluation (DataCom 2022, section 5) on
an edge server of GTX 1080 Ti, RTX 2080 Ti and RTX 3090 GPUs (``gpus_per_type`` of each:
the paper's task counts need more than one of each), with VGG-16, GoogLeNet, ResNet-101
and DenseNet-121 and seeded random stream rates and deadlines.

- **Fig. 2**: per model and GPU type, at batch 1..256 (where the batch fits in memory):
  throughput, batch latency and energy per request from the latency and energy model, and
  where two types' energy-per-request curves cross.
- **Fig. 5**: total energy and throughput vs the number of streams for ``exact``,
  ``pso-ga``, ``greedy``, ``fcfs`` and ``shared``: planned, then simulated with the
  ``magicbatch`` scheduler.
- **Fig. 6**: MagicBatch (PSO-GA's assignment, the ``magicbatch`` scheduler) vs
  TF-Serving (FCFS's assignment, ``fixed-batch`` with batch 32 and a 30 ms timeout),
  simulated: energy and goodput.

Energy, as the paper's Eq. 5 counts it, is the energy of the batches (the busy GPUs'
power while they run; ``energy_j``). The total (``total_j``) adds the idle power of the
GPUs that serve streams between their batches; GPUs without streams are parked (the study's
cluster sets ``park_idle_gpus``: they draw nothing) for every method, so that ``shared``
and ``exact`` are compared in the accounting ``shared`` minimises.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from hetserve.core.cluster import Cluster, parse_cluster
from hetserve.core.errors import HetserveError
from hetserve.core.latency import LatencyModel, RooflineModel
from hetserve.core.outcome import OK
from hetserve.core.plan import Plan

MODELS = ("vgg16", "googlenet", "resnet101", "densenet121")
GPUS = ("GTX-1080-Ti", "RTX-2080-Ti", "RTX-3090")
METHODS = ("exact", "pso-ga", "greedy", "fcfs", "shared")
FIG2_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)

# shared's MILP stops after this many branch-and-bound nodes, not at a time limit, so that
# the study's results do not depend on the machine's speed
SHARED_LIMITS = {"time_limit_s": 3600.0, "max_nodes": 200}

# MagicBatch's reported figures (section 5.3): MagicBatch vs TF-Serving
PAPER = {"energy_saved": 0.313, "throughput_gain": 0.411}


@dataclass(frozen=True)
class MagicBatchConfig:
    models: tuple[str, ...] = MODELS
    gpus_per_type: int = 10
    stream_counts: tuple[int, ...] = (5, 10, 15, 20, 25, 30)
    methods: tuple[str, ...] = METHODS
    duration_s: float = 60.0
    capacity_counts: tuple[int, ...] = (5, 15, 30)  # stream counts with a capacity search
    capacity_duration_s: float = 5.0
    capacity_resolution: float = 0.05
    tf_batch: int = 32
    tf_timeout_ms: float = 30.0
    fig2_batches: tuple[int, ...] = FIG2_BATCHES
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def quick_config() -> MagicBatchConfig:
    return MagicBatchConfig(
        gpus_per_type=4,
        stream_counts=(3, 6, 9, 12),
        duration_s=20.0,
        capacity_counts=(12,),
        capacity_duration_s=3.0,
    )


def edge_cluster(per_type: int) -> Cluster:
    """The MagicBatch edge server with ``per_type`` GPUs of each of its three types."""
    if per_type < 1:
        raise HetserveError(f"--gpus-per-type must be >= 1, got {per_type}")
    return parse_cluster(
        {
            "name": f"magicbatch-edge-x{per_type}",
            "description": f"MagicBatch edge server, {per_type} of each GPU type",
            "nodes": [{"name": "edge", "nic_gbps": 10, "gpus": dict.fromkeys(GPUS, per_type)}],
            "park_idle_gpus": True,
        },
        "magicbatch study",
    )


# ------------------------------------------------------------------ Fig. 2


def fits_memory(lat: RooflineModel, model: str, gpu: Any, batch: int) -> bool:
    """Weights plus a batch's two largest live activations (a layer's input and output,
    FP16 storage) within the GPU's memory."""
    g = lat.graph(model)
    s = lat.p.storage_bytes
    act = max(layer.out_bytes for layer in g.layers) / 4 * s
    need = g.params * s + 2 * batch * act
    return need <= gpu.memory_gb * 1e9


def run_fig2(cfg: MagicBatchConfig, cluster: Cluster, lat: RooflineModel) -> dict[str, Any]:
    curves: dict[str, dict[str, list[list[float]]]] = {}
    for m in cfg.models:
        curves[m] = {}
        for g in cluster.gpu_types():
            pts = []
            for b in cfg.fig2_batches:
                if not fits_memory(lat, m, g, b):
                    break
                t = lat.latency(m, g, 1, b)
                e = lat.energy(m, g, 1, b)
                pts.append([b, b / t, t * 1e3, e / b, e / t])
            curves[m][g.name] = pts
    return {"fig2": curves, "fig2_crossings": crossings(curves)}


def crossings(curves: dict[str, dict[str, list[list[float]]]]) -> list[dict[str, Any]]:
    """Where two GPU types' energy-per-request curves cross (the order flips between two
    consecutive batch sizes), per model."""
    out = []
    for m, per in curves.items():
        types = sorted(per)
        for i, a in enumerate(types):
            for b in types[i + 1 :]:
                ea = {int(p[0]): p[3] for p in per[a]}
                eb = {int(p[0]): p[3] for p in per[b]}
                common = sorted(set(ea) & set(eb))
                for lo, hi in itertools.pairwise(common):
                    if (ea[lo] - eb[lo]) * (ea[hi] - eb[hi]) < 0:
                        cheaper = a if ea[hi] < eb[hi] else b
                        out.append({"model": m, "gpus": [a, b], "between": [lo, hi],
                                    "cheaper_above": cheaper})  # fmt: skip
    return out


# ------------------------------------------------------------------ Figs. 5-6


def _sim_energy(res: Any, cluster: Cluster) -> tuple[float, float]:
    """(energy of the batches, every GPU's energy: idle time included, parked GPUs zero)."""
    busy = 0.0
    for w, e in res.worker_energy_j.items():
        g = cluster.catalog.get(res.worker_gpu[w])
        busy += e - g.idle_w / res.worker_share[w] * (res.end_s - res.worker_busy_s[w])
    return busy, float(sum(res.gpu_energy_j.values()))


def simulate_plan(
    plan: Plan,
    cluster: Cluster,
    lat: LatencyModel,
    scheduler: str,
    params: dict[str, Any],
    duration_s: float,
    seed: int,
) -> dict[str, Any]:
    """Serve a MagicBatch plan's streams (Poisson at their rates, their deadlines) in the
    simulator; energy over the run, goodput, attainment, drops."""
    from hetserve.core.plan import bind
    from hetserve.engine.setup import Setup
    from hetserve.experiments.setup import build_trace, model_rates, simulate
    from hetserve.sim.engine import SimConfig

    names = list(plan.models)
    setup = Setup(cluster, lat, names, {m: plan.models[m].slo_s for m in names}, plan,
                  bind(plan, cluster))  # fmt: skip
    trace = build_trace(setup, "poisson", model_rates(setup, None, 1.0), duration_s, seed)
    res = simulate(setup, scheduler, trace, params, SimConfig(seed=seed))
    busy, total = _sim_energy(res, cluster)
    ok = int((res.outcome == OK).sum())
    return {
        "energy_j": busy,
        "total_j": total,
        "goodput_rps": ok / duration_s,
        "offered_rps": len(trace) / duration_s,
        "attainment": ok / len(trace) if len(trace) else 1.0,
        "requests": len(trace),
    }


def plan_method(
    method: str,
    streams: Sequence[Any],
    cluster: Cluster,
    lat: LatencyModel,
    seed: int,
) -> tuple[Plan, Any]:
    from hetserve.planning.magicbatch import plan_streams

    types = {g.name: g for g in cluster.gpu_types()}
    order = [g.name for g in sorted(types.values(), key=lambda g: (g.year, g.fp32_tflops))]
    plan, a, _ = plan_streams(method, streams, cluster.gpu_counts(), types, lat, order=order,
                              park_idle=cluster.park_idle_gpus, seed=seed,
                              shared_limits=SHARED_LIMITS)  # fmt: skip
    return plan, a


def run_point(cfg: MagicBatchConfig, cluster: Cluster, lat: LatencyModel, n: int) -> dict[str, Any]:
    """Every method on one seeded set of ``n`` streams: planned and simulated."""
    from hetserve.planning.magicbatch import random_streams

    seed = cfg.seed * 1000 + n
    streams = random_streams(n, cfg.models, seed)
    out: dict[str, Any] = {"streams": n, "methods": {}}
    plans = {}
    for method in cfg.methods:
        plan, a = plan_method(method, streams, cluster, lat, seed)
        plans[method] = plan
        obj = plan.meta["objective"]
        rate = {s.name: s.rate_rps for s in streams}
        sim = simulate_plan(plan, cluster, lat, "magicbatch", {}, cfg.duration_s, seed)
        out["methods"][method] = {
            "planned_energy_j": obj["busy_power_w"] * cfg.duration_s,
            "planned_total_j": obj["total_power_w"] * cfg.duration_s,
            "planned_throughput_rps": sum(rate[s] for s in a.gpu_of),
            "placed": obj["placed"],
            "rejected": obj["rejected"],
            "gpus_used": len(set(a.gpu_of.values())),
            "sim": sim,
        }
        if a.solve:  # shared's MILP: proven optimal, or stopped at its node limit
            out["methods"][method]["solve"] = {"status": a.solve["status"], "gap": a.solve["gap"]}
    if "fcfs" not in plans:
        plans["fcfs"], _ = plan_method("fcfs", streams, cluster, lat, seed)
    tf = {"max_batch": cfg.tf_batch, "max_queue_delay_s": cfg.tf_timeout_ms / 1e3}
    out["tf-serving"] = simulate_plan(
        plans["fcfs"], cluster, lat, "fixed-batch", tf, cfg.duration_s, seed
    )
    mb = plans.get("pso-ga") or plan_method("pso-ga", streams, cluster, lat, seed)[0]
    out["magicbatch"] = (
        out["methods"]["pso-ga"]["sim"]
        if "pso-ga" in out["methods"]
        else simulate_plan(mb, cluster, lat, "magicbatch", {}, cfg.duration_s, seed)
    )
    if n in cfg.capacity_counts:
        out["capacity"] = {
            k: capacity(cfg, cluster, lat, streams, k, seed) for k in ("magicbatch", "tf-serving")
        }
    return out


def capacity(
    cfg: MagicBatchConfig,
    cluster: Cluster,
    lat: LatencyModel,
    streams: Sequence[Any],
    system: str,
    seed: int,
) -> dict[str, Any]:
    """The most goodput a system sustains on these streams: every stream's rate scaled by
    a factor, re-planned at the scaled rates (MagicBatch: PSO-GA; TF-Serving: FCFS), the
    largest factor at which every stream is placed and >= 99% of requests meet their
    deadlines (bisection to ``capacity_resolution``)."""
    from dataclasses import replace

    from hetserve.experiments.loadfactor import search_max_load_factor

    method, sched, params = (
        ("pso-ga", "magicbatch", {})
        if system == "magicbatch"
        else ("fcfs", "fixed-batch",
              {"max_batch": cfg.tf_batch, "max_queue_delay_s": cfg.tf_timeout_ms / 1e3})
    )  # fmt: skip

    def evaluate(lf: float) -> float:
        scaled = [replace(s, rate_rps=s.rate_rps * lf) for s in streams]
        plan, a = plan_method(method, scaled, cluster, lat, seed)
        if a.rejected:
            return 0.0
        sim = simulate_plan(plan, cluster, lat, sched, params, cfg.capacity_duration_s, seed)
        return sim["attainment"]

    r = search_max_load_factor(
        evaluate, resolution=cfg.capacity_resolution, lowest=0.05, highest=64.0
    )
    base = sum(s.rate_rps for s in streams)
    return {"load_factor": r.max_load_factor, "goodput_rps": r.max_load_factor * base,
            "curve": [[lf, a] for lf, a in r.curve]}  # fmt: skip


def run_study(
    cfg: MagicBatchConfig, progress: Callable[[str, int, int], None] | None = None
) -> dict[str, Any]:
    cluster = edge_cluster(cfg.gpus_per_type)
    lat = RooflineModel(catalog=cluster.catalog)
    for m in cfg.models:
        lat.graph(m)  # an unknown model fails here, with suggestions
    total = 1 + len(cfg.stream_counts)
    results: dict[str, Any] = {"config": asdict(cfg), "paper": PAPER}
    results.update(run_fig2(cfg, cluster, lat))
    if progress is not None:
        progress("fig2", 1, total)
    points = []
    for i, n in enumerate(cfg.stream_counts):
        points.append(run_point(cfg, cluster, lat, n))
        if progress is not None:
            progress(f"{n} streams", 2 + i, total)
    results["points"] = points
    results["fig5"] = {
        m: [[p["streams"], p["methods"][m]["sim"]["energy_j"],
             p["methods"][m]["sim"]["goodput_rps"]] for p in points]
        for m in cfg.methods
    }  # fmt: skip
    results["fig5_planned"] = {
        m: [[p["streams"], p["methods"][m]["planned_energy_j"],
             p["methods"][m]["planned_throughput_rps"]] for p in points]
        for m in cfg.methods
    }  # fmt: skip
    results["fig6"] = {
        k: [[p["streams"], p[k]["energy_j"], p[k]["goodput_rps"]] for p in points]
        for k in ("magicbatch", "tf-serving")
    }
    results["fig6_capacity"] = {
        k: [[p["streams"], p["capacity"][k]["load_factor"], p["capacity"][k]["goodput_rps"]]
            for p in points if "capacity" in p]
        for k in ("magicbatch", "tf-serving")
    }  # fmt: skip
    results["summary"] = summarize(results)
    return results


def _rel(a: float, b: float) -> float:
    return (a - b) / b if b > 0 else 0.0


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    pts = results["points"]
    s: dict[str, Any] = {"crossings": len(results["fig2_crossings"])}
    methods = results["config"]["methods"]
    if "exact" in methods:
        checks: dict[str, Any] = {}
        for m in methods:
            if m in ("exact", "shared"):
                continue
            worse = [p["streams"] for p in pts
                     if p["methods"][m]["placed"] >= p["methods"]["exact"]["placed"]
                     and p["methods"]["exact"]["planned_energy_j"]
                     > p["methods"][m]["planned_energy_j"] * (1 + 1e-9)]  # fmt: skip
            fewer = [p["streams"] for p in pts
                     if p["methods"][m]["placed"] < p["methods"]["exact"]["placed"]]  # fmt: skip
            gaps = [
                _rel(p["methods"][m]["planned_energy_j"], p["methods"]["exact"]["planned_energy_j"])
                for p in pts
                if p["methods"][m]["placed"] == p["methods"]["exact"]["placed"]
            ]
            checks[m] = {"exact_not_better_at": worse, "placed_fewer_at": fewer,
                         "gap_mean": float(np.mean(gaps)) if gaps else None,
                         "gap_worst": max(gaps) if gaps else None}  # fmt: skip
        s["exact_vs"] = checks
        if "pso-ga" in checks:
            s["psoga_gap_mean"] = checks["pso-ga"]["gap_mean"]
            s["psoga_gap_worst"] = checks["pso-ga"]["gap_worst"]
    if "shared" in methods and "exact" in methods:
        s["shared_over_exact_at"] = [
            p["streams"] for p in pts
            if p["methods"]["shared"]["planned_total_j"]
            > p["methods"]["exact"]["planned_total_j"] * (1 + 1e-6)
        ]  # fmt: skip
        s["shared_saving_total"] = [
            -_rel(p["methods"]["shared"]["planned_total_j"],
                  p["methods"]["exact"]["planned_total_j"]) for p in pts
        ]  # fmt: skip
        s["shared_min_attainment"] = min(p["methods"]["shared"]["sim"]["attainment"] for p in pts)
    mb = [p["magicbatch"] for p in pts]
    tf = [p["tf-serving"] for p in pts]
    s["energy_saved"] = [-_rel(a["energy_j"], b["energy_j"]) for a, b in zip(mb, tf, strict=True)]
    s["throughput_gain"] = [
        _rel(a["goodput_rps"], b["goodput_rps"]) for a, b in zip(mb, tf, strict=True)
    ]
    cap = [p["capacity"] for p in pts if "capacity" in p]
    s["capacity_gain"] = [
        _rel(c["magicbatch"]["goodput_rps"], c["tf-serving"]["goodput_rps"]) for c in cap
    ]
    s["capacity_gain_min"] = min(s["capacity_gain"], default=None)
    s["capacity_gain_mean"] = float(np.mean(s["capacity_gain"])) if cap else None
    s["energy_saved_min"] = min(s["energy_saved"])
    s["energy_saved_mean"] = float(np.mean(s["energy_saved"]))
    s["throughput_gain_min"] = min(s["throughput_gain"])
    s["throughput_gain_mean"] = float(np.mean(s["throughput_gain"]))
    s["min_attainment"] = {
        "magicbatch": min(a["attainment"] for a in mb),
        "tf-serving": min(b["attainment"] for b in tf),
    }
    return s


def summary_rows(results: dict[str, Any]) -> list[tuple[str, str, str]]:
    s, p = results["summary"], PAPER
    rows = [
        ("Fig. 2: energy-per-request curves that cross", str(s["crossings"]),
         "2080 Ti and 3090 cross (e.g. at 128-256)"),
        ("Fig. 6: energy saved vs TF-Serving (min / mean)",
         f"{100 * s['energy_saved_min']:.1f}% / {100 * s['energy_saved_mean']:.1f}%",
         f"> {100 * p['energy_saved']:.1f}%"),
        ("Fig. 6: goodput gained vs TF-Serving (min / mean)",
         f"{100 * s['throughput_gain_min']:.1f}% / {100 * s['throughput_gain_mean']:.1f}%",
         f"> {100 * p['throughput_gain']:.1f}%"),
    ]  # fmt: skip
    cap = results["fig6_capacity"]
    if cap["magicbatch"]:
        gains = ", ".join(
            f"{int(a[0])}: {100 * (a[2] / b[2] - 1):.0f}%"
            for a, b in zip(cap["magicbatch"], cap["tf-serving"], strict=True)
        )
        rows.append(("Fig. 6: most goodput with >= 99% of deadlines met, gain per stream count",
                     gains, f"> {100 * p['throughput_gain']:.1f}%"))  # fmt: skip
    if s.get("psoga_gap_mean") is not None:
        rows.append(("PSO-GA's energy over exact's (mean / worst)",
                     f"{100 * s['psoga_gap_mean']:.2f}% / {100 * s['psoga_gap_worst']:.2f}%",
                     "not reported"))  # fmt: skip
    if "shared_saving_total" in s:
        v = s["shared_saving_total"]
        rows.append(("shared: total energy saved over exact (min / max)",
                     f"{100 * min(v):.1f}% / {100 * max(v):.1f}%", "beyond the paper"))  # fmt: skip
    return rows
