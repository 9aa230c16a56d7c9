"""``hetserve reproduce shepherd``: Shepherd's evaluation (section 7) on the simulator.

- **Goodput and utilisation vs offered load** (Fig. 7) for ``flex``, ``clockwork`` and
  ``nexus`` on ``shepherd-12xv100`` (12 single-V100 workers, one serving group), 13 models
  of Table 4 with its exit points, thousands of MAF streams (``maf-stable``,
  ``maf-bursty``), SLO 250 ms. Nexus gets the peak 1 s rate of each coming 60 s window, as
  Shepherd adapted it.
- **Goodput vs SLO** (Fig. 9), 50 to 500 ms at a fixed offered load.
- **Ablation** (Fig. 11a): the two-stream scenario of section 7.2 at 90 and 250 ms SLOs
  (``flex``, ``flex-np``, ``clockwork``; first burst and the whole run), and on MAF at the
  highest load ``flex`` vs ``flex-np`` vs deadline-first ``flex``.
- **Competitive ratio**: FLEX against the exact offline optimum (Shepherd Eq. 3) on small
  random instances.
- **Scaling** (Figs. 10, 11b): goodput and scheduler cost vs number of workers, with HERD
  groups, one big group, and one-GPU groups.

Every point is one simulation; points run in parallel (``--jobs``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from hetserve.engine.setup import Setup
    from hetserve.workload.trace import Trace

# the 13 models of the main experiments (Table 4 minus ResNeSt-269, BERT, R-CNN, DN201)
MODELS = (
    "resnet18", "rn34", "resnet50", "resnet101", "resnet152", "rs50", "rs101", "rs200",
    "densenet121", "dn161", "dn169", "gn", "inception-v3",
)  # fmt: skip
SCHEDULERS = ("flex", "clockwork", "nexus")
WORKLOADS = ("maf-stable", "maf-bursty")
# FP32 weights (GB) from the models' parameter counts (torchvision model documentation;
# ResNeSt: Zhang et al., 2020), for HERD's memory constraint
MODEL_GB = {
    "resnet18": 0.047, "rn34": 0.087, "resnet50": 0.102, "resnet101": 0.178,
    "resnet152": 0.241, "rs50": 0.110, "rs101": 0.193, "rs200": 0.281, "densenet121": 0.032,
    "dn161": 0.115, "dn169": 0.056, "gn": 0.026, "inception-v3": 0.109,
}  # fmt: skip
PAPER = {
    "flex_over_clockwork_high_load": 4.6,
    "flex_over_nexus_high_load": 7.1,
    "preemption_two_stream_90ms": 6.2,
    "prioritisation_two_stream_250ms": 3.7,
    "competitive_ratio": 12.62,
}


@dataclass(frozen=True)
class ShepherdConfig:
    models: tuple[str, ...] = MODELS
    n_gpus: int = 12
    n_streams: int = 2000
    slo_s: float = 0.25
    loads_rps: tuple[float, ...] = (2000, 4000, 6000, 8000, 10000, 12000, 14000)
    duration_s: float = 120.0
    slos_s: tuple[float, ...] = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5)
    slo_load_rps: float = 3000.0
    epoch_s: float = 60.0
    workers: tuple[int, ...] = (12, 24, 48, 96, 192, 400)
    scale_rps_per_gpu: float = 800.0
    scale_duration_s: float = 10.0
    g_max: int = 12
    offline_instances: int = 40
    seed: int = 0


def quick_config() -> ShepherdConfig:
    """Every figure at a few points, short runs: minutes, not an hour."""
    return ShepherdConfig(
        n_streams=500,
        loads_rps=(3000, 8000, 13000),
        duration_s=20.0,
        slos_s=(0.05, 0.25, 0.5),
        epoch_s=10.0,
        workers=(12, 48),
        scale_duration_s=4.0,
        offline_instances=15,
    )


# ---------------------------------------------------------------------------- one point
def _sched(name: str, trace: Any, cfg: ShepherdConfig) -> tuple[str, dict[str, Any]]:
    from hetserve.scheduling.nexus import peak_rates

    if name == "nexus":
        return "nexus", {"epoch_s": cfg.epoch_s, "rates": peak_rates(trace, cfg.epoch_s)}
    if name == "flex-deadline":
        return "flex", {"priority": "deadline"}
    return name, {}


def _run(setup: Setup, name: str, trace: Trace, cfg: ShepherdConfig) -> dict[str, float]:
    from hetserve.core.outcome import OK
    from hetserve.experiments.setup import simulate

    sched, params = _sched(name, trace, cfg)
    t0 = time.perf_counter()
    res = simulate(setup, sched, trace, params)
    busy = sum(res.worker_busy_s.values()) / (len(res.worker_busy_s) * trace.duration_s)
    return {
        "offered_rps": len(trace) / trace.duration_s,
        "goodput_rps": float(np.count_nonzero(res.outcome == OK)) / trace.duration_s,
        "utilization": min(1.0, busy),
        "wall_s": time.perf_counter() - t0,
    }


def run_point(task: tuple, cfg: ShepherdConfig) -> tuple[tuple, dict[str, Any]]:
    """One simulation: ``("load", workload, scheduler, rate)``, ``("slo", workload,
    scheduler, slo)``, ``("two-stream", slo, scheduler)``, ``("scale", workers,
    grouping)`` or ``("offline", scheduler)``."""
    from hetserve.experiments.shepherd.scenarios import group_setup, two_stream_scenario
    from hetserve.workload.maf import maf_trace

    kind = task[0]
    if kind in ("load", "slo"):
        _, wl, name, x = task
        slo = x if kind == "slo" else cfg.slo_s
        rate = x if kind == "load" else cfg.slo_load_rps
        setup = group_setup(cfg.n_gpus, dict.fromkeys(cfg.models, slo))
        trace = maf_trace(wl, cfg.models, cfg.n_streams, rate, cfg.duration_s, slo, cfg.seed)
        return task, _run(setup, name, trace, cfg)
    if kind == "two-stream":
        from hetserve.core.outcome import OK
        from hetserve.experiments.setup import simulate

        _, slo, name = task
        out = {}
        for label, dur in (("first_burst", 0.12), ("whole", 1.2)):
            setup, trace = two_stream_scenario(slo, duration_s=dur)
            res = simulate(setup, name, trace)
            out[label] = float(np.count_nonzero(res.outcome == OK))
        return task, out
    if kind == "scale":
        return task, _scale_point(task[1], task[2], cfg)
    if kind == "offline":
        from hetserve.experiments.shepherd.scenarios import flex_vs_offline

        rows = flex_vs_offline(cfg.offline_instances, cfg.seed, task[1], max_requests=10)
        return task, {"instances": rows}
    raise ValueError(f"unknown task {task!r}")


def _scale_point(n_gpus: int, grouping: str, cfg: ShepherdConfig) -> dict[str, Any]:
    """``n_gpus`` workers serving ``13 x ceil(n / 12)`` models (copies of the 13, as
    distinct tenants' models), MAF-stable at ``scale_rps_per_gpu`` per worker; grouped by
    HERD (``herd``), all in one group (``one-group``) or one GPU per group (``one-gpu``)."""
    from hetserve.core.cluster import parse_cluster
    from hetserve.core.latency import LinearModel, shepherd_linear_model
    from hetserve.core.plan import bind
    from hetserve.engine.setup import Setup
    from hetserve.experiments.shepherd.scenarios import V100
    from hetserve.planning.herd import HerdResult, herd, herd_plan, model_streams, split_heavy
    from hetserve.workload.maf import maf_trace

    base = shepherd_linear_model()
    copies = math.ceil(n_gpus / 12)
    names = [f"{m}@{c}" for c in range(copies) for m in cfg.models]
    params = {(n, V100): base.params[(n.split("@")[0], V100)] for n in names}
    lat = LinearModel(params, blocks={n: base.num_blocks(n.split("@")[0]) for n in names})
    slos = dict.fromkeys(names, cfg.slo_s)
    trace = maf_trace(
        "maf-stable",
        names,
        cfg.n_streams * copies,
        cfg.scale_rps_per_gpu * n_gpus,
        cfg.scale_duration_s,
        cfg.slo_s,
        cfg.seed,
    )
    counts = np.bincount(trace.stream_idx, minlength=len(trace.streams))
    rates = dict.fromkeys(names, 0.0)
    streams: dict[str, list[tuple[str, float]]] = {n: [] for n in names}
    for s, c in zip(trace.streams, counts, strict=True):
        rates[s.model] += c / trace.duration_s
        streams[s.model].append((s.name, c / trace.duration_s))
    rates = {m: max(r, 1e-6) for m, r in rates.items()}
    mem = {n: MODEL_GB[n.split("@")[0]] for n in names}
    ms = model_streams(rates, slos, lat, V100, mem, streams=streams)
    t0 = time.perf_counter()
    if grouping == "one-group":  # every model on every GPU (memory not checked)
        bt = tuple(n_gpus / s.n_gpus for s in ms)
        one = HerdResult(((tuple(range(len(ms))), n_gpus),), bt, "one-group", "fixed", 0.0)
        plan = herd_plan(one, ms, slos, lat, V100)
    else:
        g_max = 1 if grouping == "one-gpu" else cfg.g_max
        ms = split_heavy(ms, max(1.0, g_max / 2))
        res = herd(ms, n_gpus, g_max=g_max, mem_gb=14.0)
        plan = herd_plan(res, ms, slos, lat, V100)
    plan_s = time.perf_counter() - t0
    nodes = [{"count": n_gpus, "name": "p3-", "gpus": {V100: 1}, "nic_gbps": 10}]
    cluster = parse_cluster({"name": f"{n_gpus}xv100", "nodes": nodes}, "scale")
    setup = Setup(cluster, lat, names, slos, plan, bind(plan, cluster))
    out = _run_timed(setup, trace)
    out.update(
        {
            "groups": len(plan.groups),
            "models": len(names),
            "min_burst_tolerance": plan.meta["objective"]["min_burst_tolerance"]
            if grouping != "one-group"
            else None,
            "plan_s": plan_s,
        }
    )
    return out


def _run_timed(setup: Setup, trace: Trace) -> dict[str, float]:
    """FLEX with its callbacks timed: goodput and scheduler microseconds per event."""
    from hetserve.core.outcome import OK
    from hetserve.scheduling.flex import Flex
    from hetserve.sim.engine import Simulator

    class Timed(Flex):
        seconds = 0.0
        events = 0

        def on_arrival(self, r: Any, now: float) -> Any:
            t = time.perf_counter()
            out = super().on_arrival(r, now)
            self.seconds += time.perf_counter() - t
            self.events += 1
            return out

        def on_stage_done(self, rep: Any, now: float) -> Any:
            t = time.perf_counter()
            out = super().on_stage_done(rep, now)
            self.seconds += time.perf_counter() - t
            self.events += 1
            return out

    sched = Timed()
    t0 = time.perf_counter()
    res = Simulator(setup.cluster, setup.latency, setup.plan, setup.placement, sched, trace).run()
    return {
        "offered_rps": len(trace) / trace.duration_s,
        "goodput_rps": float(np.count_nonzero(res.outcome == OK)) / trace.duration_s,
        "us_per_event": 1e6 * sched.seconds / max(1, sched.events),
        "wall_s": time.perf_counter() - t0,
    }


# ---------------------------------------------------------------------------- the study
def tasks(cfg: ShepherdConfig) -> list[tuple]:
    out: list[tuple] = []
    for wl in WORKLOADS:
        out += [("load", wl, s, r) for s in SCHEDULERS for r in cfg.loads_rps]
        out += [("slo", wl, s, x) for s in SCHEDULERS for x in cfg.slos_s]
        top = max(cfg.loads_rps)
        out += [("load", wl, v, top) for v in ("flex-np", "flex-deadline")]
    out += [
        ("two-stream", slo, s) for slo in (0.09, 0.25) for s in ("flex", "flex-np", "clockwork")
    ]
    out += [("offline", s) for s in ("flex", "flex-np", "clockwork")]
    out += [("scale", n, g) for n in cfg.workers for g in ("herd", "one-group", "one-gpu")]
    # the longest first, so the pool's last minutes are not one straggler
    weight = {"scale": 0, "load": 1, "slo": 2, "two-stream": 3, "offline": 4}
    return sorted(out, key=lambda t: (weight[t[0]], -float(t[1]) if t[0] == "scale" else 0))


def _job(args: tuple[tuple, ShepherdConfig]) -> tuple[tuple, dict[str, Any]]:
    return run_point(*args)


def run_study(
    cfg: ShepherdConfig,
    jobs: int = 1,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    from hetserve.experiments.jobs import parallel_map

    items = [(t, cfg) for t in tasks(cfg)]
    done = dict(parallel_map(_job, items, jobs, progress, lambda tr: _label(tr[0])))
    return collect(cfg, done)


def _label(t: tuple) -> str:
    return " ".join(str(x) for x in t)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def collect(cfg: ShepherdConfig, done: Mapping[tuple, dict[str, Any]]) -> dict[str, Any]:
    """results.json (docs/reproduce.md#shepherd)."""
    by_wl: dict[str, Any] = {}
    for wl in WORKLOADS:
        g = {s: [[done[("load", wl, s, r)]["offered_rps"], done[("load", wl, s, r)]["goodput_rps"]]
                 for r in cfg.loads_rps] for s in SCHEDULERS}  # fmt: skip
        u = {s: [[done[("load", wl, s, r)]["offered_rps"], done[("load", wl, s, r)]["utilization"]]
                 for r in cfg.loads_rps] for s in SCHEDULERS}  # fmt: skip
        slo = {s: [[x, done[("slo", wl, s, x)]["goodput_rps"]] for x in cfg.slos_s]
               for s in SCHEDULERS}  # fmt: skip
        top = max(cfg.loads_rps)
        abl = {v: done[("load", wl, v if v != "flex" else "flex", top)]["goodput_rps"]
               for v in ("flex", "flex-np", "flex-deadline")}  # fmt: skip
        by_wl[wl] = {
            "goodput_vs_load": g,
            "utilization_vs_load": u,
            "goodput_vs_slo": slo,
            "ablation_at_highest_load": abl,
        }
    trio = ("flex", "flex-np", "clockwork")
    two = {
        f"{round(slo * 1e3)}ms": {s: done[("two-stream", slo, s)] for s in trio}
        for slo in (0.09, 0.25)
    }
    offline = {}
    for s in ("flex", "flex-np", "clockwork"):
        rows = done[("offline", s)]["instances"]
        served, opt = sum(r["served"] for r in rows), sum(r["optimum"] for r in rows)
        offline[s] = {
            "instances": len(rows),
            "served_over_optimum": served / opt if opt else None,
            "worst_ratio": max((r["ratio"] for r in rows), default=None),
            "optimal_instances": sum(r["served"] == r["optimum"] for r in rows),
        }
    scaling = {
        g: [{"workers": n, **done[("scale", n, g)]} for n in cfg.workers]
        for g in ("herd", "one-group", "one-gpu")
    }
    summary: dict[str, Any] = {}
    for wl in WORKLOADS:
        g = by_wl[wl]["goodput_vs_load"]
        hi = {s: g[s][-1][1] for s in SCHEDULERS}
        every = all(
            g["flex"][k][1] >= max(g["clockwork"][k][1], g["nexus"][k][1]) * 0.995
            for k in range(len(cfg.loads_rps))
        )
        summary[wl] = {
            "flex_over_clockwork_high_load": _ratio(hi["flex"], hi["clockwork"]),
            "flex_over_nexus_high_load": _ratio(hi["flex"], hi["nexus"]),
            "flex_at_least_baselines_every_load": every,
            "flex_over_flex_np_high_load": _ratio(
                hi["flex"], by_wl[wl]["ablation_at_highest_load"]["flex-np"]
            ),
        }
    t90, t250 = two["90ms"], two["250ms"]
    summary["two_stream"] = {
        "preemption_90ms_first_burst": _ratio(
            t90["flex"]["first_burst"], t90["flex-np"]["first_burst"]
        ),
        "preemption_90ms_whole": _ratio(t90["flex"]["whole"], t90["flex-np"]["whole"]),
        "prioritisation_250ms_whole": _ratio(t250["flex-np"]["whole"], t250["clockwork"]["whole"]),
    }
    conf = asdict(cfg)
    return {
        "goodput_vs_load": by_wl["maf-stable"]["goodput_vs_load"],
        "workloads": by_wl,
        "ablation": {
            "two_stream": two,
            "maf": {wl: by_wl[wl]["ablation_at_highest_load"] for wl in WORKLOADS},
        },
        "offline_optimum": offline,
        "scaling": scaling,
        "summary": summary,
        "paper": PAPER,
        "config": conf,
    }


def summary_rows(results: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for wl in WORKLOADS:
        s = results["summary"][wl]
        g = results["workloads"][wl]["goodput_vs_load"]
        rows.append(
            [
                wl,
                f"{g['flex'][-1][0]:,.0f}",
                *(f"{g[x][-1][1]:,.0f}" for x in SCHEDULERS),
                f"{s['flex_over_clockwork_high_load']:.2f}x",
                f"{s['flex_over_nexus_high_load']:.2f}x",
                "yes" if s["flex_at_least_baselines_every_load"] else "no",
            ]
        )
    return rows


def write_results(results: Mapping[str, Any], out_dir: str | Path) -> Path:
    from hetserve.experiments.report import write_results as write

    return write(results, out_dir)


__all__: Sequence[str] = ("ShepherdConfig", "collect", "quick_config", "run_study")
