"""``hetserve reproduce deepplan``: DeepPlan's evaluation (EuroSys 2023, section 5) on
``p3-8xlarge`` (four V100-16GB, two PCIe switches, NVLink between all pairs).

- **Fig. 11**: batch-1 cold-start latency of eight models under every load plan kind
  (the timeline over estimated or measured layer tables); Table 3-style excerpts of the
  plans (which layers run from host memory); how far Algorithm 1 is from the optimum on
  every zoo model.
- **Table 4**: two GPUs under different PCIe switches cold-starting at once, each doing
  PT+DHA over the other's host link too: measured in the simulator.
- **Fig. 12**: throughput of a cold start at batch 1..8 (batch / cold-start latency),
  normalised to the baseline at batch 1.
- **Fig. 13**: BERT-Base instances 20..200, Poisson 100 req/s spread uniformly over them,
  SLO 100 ms (and 50 ms), the ``coldstart`` scheduler (LRU residency) with each plan kind:
  p99 latency, goodput fraction, cold-start fraction, instances resident.
- **Fig. 15**: an Azure Functions 2019 trace (the synthetic twin by default), functions
  mapped to BERT-Base : RoBERTa-Base : GPT-2 instances at 4:4:1, 150 req/s, SLO 100 ms:
  p99 latency, goodput and cold starts per minute.

Every simulated request that arrives during the warm-up (instances preloaded at t = 0) is
left out of the metrics: arrivals start ``warmup_s`` after it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from hetserve.core.cluster import Cluster
from hetserve.core.coldstart import PLAN_KINDS, timeline
from hetserve.core.errors import HetserveError
from hetserve.core.layerlatency import LayerLatency
from hetserve.core.layertable import shipped_layer_tables
from hetserve.core.outcome import LATE, OK
from hetserve.core.plan import bind
from hetserve.core.requests import Request, Stream
from hetserve.planning.deepplan import (
    dha_summary,
    layer_rows_for,
    plan_cold_starts,
    plan_load,
    pt_parallelism,
)
from hetserve.scheduling.protocol import (
    Action,
    BaseScheduler,
    Dispatch,
    Load,
    RouteStep,
    make_scheduler,
)
from hetserve.sim.engine import SimConfig, Simulator
from hetserve.workload.arrivals import Poisson
from hetserve.workload.azure import counts_to_trace, read_azure2019, synthetic_azure2019_counts
from hetserve.workload.trace import Trace, generate

FIG11_MODELS = (
    "resnet50", "resnet101", "bert-base", "bert-large",
    "roberta-base", "roberta-large", "gpt2", "gpt2-medium",
)  # fmt: skip
FIG12_MODELS = ("resnet50", "bert-base", "roberta-large", "gpt2-medium")
SERVING_KINDS = ("pipeswitch", "dha", "pt+dha")

# DeepPlan's reported figures (section 5), for the ours-vs-paper summary
PAPER = {
    "resnet50_pipeswitch_ms": 11.98,
    "resnet50_pt_dha_ms": 8.36,
    "bert_base_speedup": 1.94,
    "bert_large_speedup": 1.74,
    "roberta_base_speedup": 2.21,
    "table4": {  # ms: PipeSwitch (1), PT+DHA (1), PT+DHA (2)
        "resnet50": (12.03, 8.93, 11.97),
        "resnet101": (19.85, 17.71, 21.19),
        "bert-base": (40.51, 20.88, 30.45),
        "bert-large": (122.37, 70.56, 108.16),
        "roberta-base": (45.86, 20.83, 34.48),
        "roberta-large": (129.58, 70.26, 107.87),
        "gpt2": (48.41, 33.38, 35.98),
        "gpt2-medium": (134.10, 101.83, 112.71),
    },
    "fig13_goodput_ratio_180": 1.84,
    "fig13_pipeswitch_resident": 100,
    "fig13_dha_resident": 124,
    "fig15_goodput_deepplan": (0.98, 0.99),
    "fig15_goodput_pipeswitch": (0.81, 0.98),
}


@dataclass(frozen=True)
class DeepPlanConfig:
    cluster: str = "p3-8xlarge"
    layers_csv: str | None = None  # measured (or estimated) layer times; default: estimate
    fig11_models: tuple[str, ...] = FIG11_MODELS
    fig12_models: tuple[str, ...] = FIG12_MODELS
    fig12_batches: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8)
    fig13_instances: tuple[int, ...] = tuple(range(20, 201, 20))
    fig13_rate_rps: float = 100.0
    fig13_slos_ms: tuple[float, ...] = (100.0, 50.0)
    fig13_duration_s: float = 30.0
    fig15_minutes: int = 180
    fig15_rate_rps: float = 150.0
    fig15_functions: int = 270  # instances: 120 BERT-Base, 120 RoBERTa-Base, 30 GPT-2
    # the synthetic twin's spread of per-function rates (log-normal sigma; the generator's
    # default, 2, concentrates the load on a few functions that never leave the GPUs)
    fig15_rate_sigma: float = 1.0
    fig15_slo_ms: float = 100.0
    fig15_trace: str | None = None  # an Azure Functions 2019 per-minute file
    kinds: tuple[str, ...] = SERVING_KINDS
    memory_reserve_gb: float = 5.0
    warmup_s: float = 3.0
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def quick_config() -> DeepPlanConfig:
    """Minutes, not hours: fewer instance counts, a 10-minute Fig. 15."""
    return DeepPlanConfig(
        fig12_batches=(1, 2, 4, 8),
        fig13_instances=(20, 60, 100, 140, 180),
        fig13_duration_s=15.0,
        fig15_minutes=10,
    )


# ------------------------------------------------------------------ Fig. 11, Table 3


def run_fig11(cfg: DeepPlanConfig, cluster: Cluster) -> dict[str, Any]:
    par, nv = pt_parallelism(cluster)
    gpu = cluster.gpu_types()[0]
    fig11: dict[str, dict[str, float]] = {}
    warm: dict[str, dict[str, float]] = {}
    plans: dict[str, dict[str, list[str]]] = {}
    for m in cfg.fig11_models:
        rows, _ = layer_rows_for(m, gpu, 1, cfg.layers_csv)
        kinds = [k for k in PLAN_KINDS if k not in ("pt", "pt+dha") or par >= 2]
        pl = {k: plan_load(m, k, rows, par, nv) for k in kinds}
        fig11[m] = {k: p.cold_s * 1e3 for k, p in pl.items()}
        warm[m] = {k: p.warm_s * 1e3 for k, p in pl.items()}
        plans[m] = {k: dha_summary(rows, pl[k].plan) for k in ("dha", "pt+dha") if k in pl}
    # Table 3: a middle part of ResNet-101 (rows 63-69) and GPT-2's first five rows
    table3: dict[str, Any] = {}
    for m, lo, hi in (("resnet101", 63, 70), ("gpt2", 0, 5)):
        rows, _ = layer_rows_for(m, gpu, 1, cfg.layers_csv)
        p = plan_load(m, "dha", rows, par, nv).plan
        initial = ["DHA" if r.exec_host_us <= r.exec_gpu_us + r.load_us else "load" for r in rows]
        table3[m] = [
            {"layer": i, "kind": rows[i].kind,
             "initial": initial[i] if rows[i].param_bytes else "-",
             "dha_plan": ("DHA" if p.modes[i] == "dha" else "load") if rows[i].param_bytes
             else "-"}
            for i in range(lo, min(hi, len(rows)))
        ]  # fmt: skip
    # Algorithm 1 vs the optimum, every zoo model
    gap: dict[str, dict[str, float]] = {}
    for m in shipped_layer_tables():
        rows, _ = layer_rows_for(m, gpu, 1, cfg.layers_csv if m in cfg.fig11_models else None)
        a = plan_load(m, "dha", rows, 1, None).cold_s
        o = plan_load(m, "optimal", rows, 1, None).cold_s
        ps = timeline(rows, plan_load(m, "pipeswitch", rows, 1, None).plan).latency_s
        gap[m] = {"dha_ms": a * 1e3, "optimal_ms": o * 1e3, "pipeswitch_ms": ps * 1e3,
                  "gap_pct": 100 * (a - o) / o if o > 0 else 0.0}  # fmt: skip
    return {"fig11": fig11, "fig11_warm": warm, "dha_layers": plans, "table3": table3,
            "algorithm1_gap": gap, "parallelism": par, "gpu": gpu.name}  # fmt: skip


# ------------------------------------------------------------------ Table 4


class _Pinned(BaseScheduler):
    """Request ``i`` loads and runs its model on worker ``workers[i]`` (Table 4)."""

    def __init__(self, workers: Sequence[str]) -> None:
        super().__init__()
        self.pin = list(workers)

    def on_arrival(self, request: Request, now: float) -> list[Action]:
        w = self.pin[request.id]
        route = (RouteStep(0, w, now, (0, 1)),)
        bid = self.new_batch_id()
        return [Load(w, request.model, (0, 1)), Dispatch(bid, request.model, (request,), route)]


def _instances_trace(names: Sequence[str], at_s: float = 0.0) -> Trace:
    streams = tuple(Stream(n, n, 10.0, Poisson(1.0)) for n in names)
    t = np.full(len(names), at_s)
    return Trace(t, np.arange(len(names), dtype=np.int32), streams, at_s + 1e-9)


def run_table4(cfg: DeepPlanConfig, cluster: Cluster) -> dict[str, Any]:
    """Per model (ms): PipeSwitch alone, PT+DHA alone, PT+DHA on two GPUs at once (mean),
    the GPUs under different PCIe switches (GPU 0 and GPU 2 of p3-8xlarge)."""
    node = cluster.nodes[0]
    sw = node.pcie_switch_of
    first = node.gpus[0]
    other = next((g for g in node.gpus[1:] if sw and sw[g.index] != sw[first.index]), None)
    if other is None:
        raise HetserveError(f"cluster {cluster.name}: Table 4 needs two PCIe switches")
    out: dict[str, Any] = {}
    for m in cfg.fig11_models:
        row = []
        for kind, n in (("pipeswitch", 1), ("pt+dha", 1), ("pt+dha", 2)):
            names = [f"{m}@{i}" for i in range(n)]
            plan, _ = plan_cold_starts(cluster, names, None, kind, layers_csv=cfg.layers_csv)
            lat = LayerLatency(plan.load_plans, cfg.layers_csv, cluster.catalog)
            pl = bind(plan, cluster)
            wid = {w.gpu_id: w.id for w in pl.workers}
            pins = [wid[first.id], wid[other.id]][:n]
            res = Simulator(cluster, lat, plan, pl, _Pinned(pins), _instances_trace(names),
                            SimConfig(warm=False)).run()  # fmt: skip
            row.append(float(np.mean(res.finish_s - res.trace.time_s)) * 1e3)
        out[m] = row
    return out


# ------------------------------------------------------------------ Fig. 12


def run_fig12(cfg: DeepPlanConfig, cluster: Cluster) -> dict[str, Any]:
    """Per model, per kind: [[batch, throughput normalised to baseline batch 1], ...]."""
    par, nv = pt_parallelism(cluster)
    gpu = cluster.gpu_types()[0]
    out: dict[str, Any] = {}
    for m in cfg.fig12_models:
        per: dict[str, list[list[float]]] = {}
        base1 = None
        for b in cfg.fig12_batches:
            rows, _ = layer_rows_for(m, gpu, b, cfg.layers_csv)
            for k in ("baseline", "pipeswitch", "dha", "pt+dha"):
                if k == "pt+dha" and par < 2:
                    continue
                lat_s = plan_load(m, k, rows, par, nv).cold_s
                if k == "baseline" and b == cfg.fig12_batches[0]:
                    base1 = cfg.fig12_batches[0] / lat_s
                per.setdefault(k, []).append([b, b / lat_s])
        assert base1 is not None
        out[m] = {k: [[b, t / base1] for b, t in v] for k, v in per.items()}
    return out


# ------------------------------------------------------------------ serving runs


def _serve(
    cfg: DeepPlanConfig,
    cluster: Cluster,
    names: Sequence[str],
    kind: str,
    trace: Trace,
    slo_s: float,
    max_batch: int = 1,
) -> dict[str, Any]:
    plan, _ = plan_cold_starts(
        cluster, names, None, kind, dict.fromkeys(names, slo_s), layers_csv=cfg.layers_csv
    )
    lat = LayerLatency(plan.load_plans, cfg.layers_csv, cluster.catalog)
    pl = bind(plan, cluster)
    sched = make_scheduler(
        "coldstart", {"max_batch": max_batch, "memory_reserve_gb": cfg.memory_reserve_gb}
    )
    res = Simulator(cluster, lat, plan, pl, sched, trace, SimConfig(warm=False)).run()
    cold = np.zeros(len(trace), dtype=bool)
    cold[np.asarray(sched.cold_ids, dtype=np.int64)] = True
    resident = sum(len(r) for r in sched.resident.values())
    return {"res": res, "cold": cold, "resident": resident, "stats": dict(sched.stats)}


def _metrics(res: Any, cold: np.ndarray, sel: np.ndarray) -> tuple[float, float, float]:
    """p99 latency (ms) of finished requests, goodput fraction, cold-start fraction."""
    out = res.outcome[sel]
    n = int(sel.sum())
    if n == 0:
        return (math.nan, math.nan, math.nan)
    done = (out == OK) | (out == LATE)
    lat = (res.finish_s[sel][done] - res.trace.time_s[sel][done]) * 1e3
    p99 = float(np.percentile(lat, 99)) if len(lat) else math.nan
    return (p99, float((out == OK).sum()) / n, float(cold[sel].sum()) / n)


def run_fig13(
    cfg: DeepPlanConfig, cluster: Cluster, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Per SLO (ms, as text), per kind: [[instances, p99 ms, goodput fraction, cold-start
    fraction, instances resident at the end], ...]."""
    out: dict[str, Any] = {}
    for slo_ms in cfg.fig13_slos_ms:
        per_kind: dict[str, list[list[float]]] = {}
        for kind in cfg.kinds:
            pts = []
            for n in cfg.fig13_instances:
                names = [f"bert-base@{i}" for i in range(n)]
                streams = [Stream(m, m, slo_ms / 1e3, Poisson(cfg.fig13_rate_rps / n))
                           for m in names]  # fmt: skip
                tr = generate(streams, cfg.fig13_duration_s, cfg.seed + n)
                tr = Trace(tr.time_s + cfg.warmup_s, tr.stream_idx, tr.streams,
                           tr.duration_s + cfg.warmup_s)  # fmt: skip
                run = _serve(cfg, cluster, names, kind, tr, slo_ms / 1e3)
                sel = np.ones(len(tr), dtype=bool)
                p99, good, cold = _metrics(run["res"], run["cold"], sel)
                pts.append([n, p99, good, cold, run["resident"]])
                if progress is not None:
                    progress(f"fig13 {kind} {n} instances, SLO {slo_ms:g} ms")
            per_kind[kind] = pts
        out[f"{slo_ms:g}"] = per_kind
    return out


def fig15_trace(cfg: DeepPlanConfig, names: Sequence[str]) -> Trace:
    slo = cfg.fig15_slo_ms / 1e3
    if cfg.fig15_trace:
        tr = read_azure2019(
            cfg.fig15_trace, names, slo, cfg.seed,
            minutes=(0, cfg.fig15_minutes), target_rate_rps=cfg.fig15_rate_rps,
        )  # fmt: skip
    else:
        counts = synthetic_azure2019_counts(
            len(names), cfg.fig15_minutes, cfg.fig15_rate_rps, cfg.seed,
            rate_sigma=cfg.fig15_rate_sigma,
        )  # fmt: skip
        tr = counts_to_trace([f"fn{i:03d}" for i in range(len(names))], counts, names, slo,
                             cfg.seed)  # fmt: skip
    return Trace(tr.time_s + cfg.warmup_s, tr.stream_idx, tr.streams,
                 tr.duration_s + cfg.warmup_s)  # fmt: skip


def fig15_instances(n: int) -> list[str]:
    """BERT-Base : RoBERTa-Base : GPT-2 at 4:4:1, interleaved so that the busiest
    functions (folded in order) spread over the three."""
    pattern = ["bert-base", "roberta-base"] * 4 + ["gpt2"]
    counts: dict[str, int] = {}
    out = []
    for i in range(n):
        arch = pattern[i % len(pattern)]
        out.append(f"{arch}@{counts.get(arch, 0)}")
        counts[arch] = counts.get(arch, 0) + 1
    return out


def run_fig15(
    cfg: DeepPlanConfig, cluster: Cluster, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    names = fig15_instances(cfg.fig15_functions)
    tr = fig15_trace(cfg, names)
    minute = np.floor((tr.time_s - cfg.warmup_s) / 60.0).astype(int)
    offered = np.bincount(minute, minlength=cfg.fig15_minutes)[: cfg.fig15_minutes]
    out: dict[str, Any] = {"offered_per_minute": (offered / 60.0).tolist(), "kinds": {}}
    for kind in cfg.kinds:
        run = _serve(cfg, cluster, names, kind, tr, cfg.fig15_slo_ms / 1e3)
        per_min = []
        for k in range(cfg.fig15_minutes):
            p99, good, cold = _metrics(run["res"], run["cold"], minute == k)
            per_min.append([k, p99, good, cold])
        p99, good, cold = _metrics(run["res"], run["cold"], np.ones(len(tr), dtype=bool))
        out["kinds"][kind] = {"per_minute": per_min, "p99_ms": p99, "goodput": good,
                              "cold_fraction": cold, "stats": run["stats"]}  # fmt: skip
        if progress is not None:
            progress(f"fig15 {kind}")
    out["requests"] = len(tr)
    return out


# ------------------------------------------------------------------ the study


def study_steps(cfg: DeepPlanConfig) -> int:
    """How many progress steps :func:`run_study` reports."""
    n13 = len(cfg.kinds) * len(cfg.fig13_instances) * len(cfg.fig13_slos_ms)
    return 3 + n13 + len(cfg.kinds)


def run_study(
    cfg: DeepPlanConfig, progress: Callable[[str, int, int], None] | None = None
) -> dict[str, Any]:
    from hetserve.core.presets import load_cluster

    cluster = load_cluster(cfg.cluster)
    if len(cluster.gpu_types()) != 1:
        raise HetserveError(f"cluster {cluster.name}: the DeepPlan study needs one GPU type")

    total = study_steps(cfg)
    done = [0]

    def step(what: str) -> None:
        done[0] += 1
        if progress is not None:
            progress(what, done[0], total)

    results: dict[str, Any] = {"config": asdict(cfg), "paper": PAPER}
    results.update(run_fig11(cfg, cluster))
    step("fig11")
    results["table4"] = run_table4(cfg, cluster)
    step("table4")
    results["fig12"] = run_fig12(cfg, cluster)
    step("fig12")
    fig13 = run_fig13(cfg, cluster, step)
    results["fig13"] = fig13.get("100", next(iter(fig13.values())))
    results["fig13_by_slo"] = fig13
    results["fig15"] = run_fig15(cfg, cluster, step)
    results["summary"] = summarize(results)
    return results


def _at(points: list[list[float]], n: int) -> list[float] | None:
    return next((p for p in points if p[0] == n), None)


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    """Ours next to the paper's headline numbers."""
    f11 = results["fig11"]
    s: dict[str, Any] = {}
    if "resnet50" in f11:
        s["resnet50_pipeswitch_ms"] = f11["resnet50"]["pipeswitch"]
        s["resnet50_pt_dha_ms"] = f11["resnet50"].get("pt+dha")
    for m, key in (("bert-base", "bert_base_speedup"), ("bert-large", "bert_large_speedup"),
                   ("roberta-base", "roberta_base_speedup")):  # fmt: skip
        if m in f11 and "pt+dha" in f11[m]:
            s[key] = f11[m]["pipeswitch"] / f11[m]["pt+dha"]
    f13 = results["fig13"]
    if "pipeswitch" in f13:
        for kind in f13:
            best = _at(f13[kind], 180) or f13[kind][-1]
            s[f"fig13_goodput_{kind}_at_{int(best[0])}"] = best[2]
        ps = _at(f13["pipeswitch"], 180) or f13["pipeswitch"][-1]
        top = "pt+dha" if "pt+dha" in f13 else "dha"
        dp = _at(f13[top], int(ps[0])) or f13[top][-1]
        s["fig13_goodput_ratio_at"] = int(ps[0])
        s["fig13_goodput_ratio"] = dp[2] / ps[2] if ps[2] > 0 else math.inf
        s["fig13_resident"] = {k: int(v[-1][4]) for k, v in f13.items()}
    f15 = results["fig15"]["kinds"]
    s["fig15_goodput"] = {k: v["goodput"] for k, v in f15.items()}
    s["fig15_p99_ms"] = {k: v["p99_ms"] for k, v in f15.items()}
    s["fig15_minute_goodput_range"] = {
        k: [min(p[2] for p in v["per_minute"] if not math.isnan(p[2])),
            max(p[2] for p in v["per_minute"] if not math.isnan(p[2]))]
        for k, v in f15.items()
    }  # fmt: skip
    return s


def summary_rows(results: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(what, ours, paper) for the printed summary."""
    s, p = results["summary"], PAPER
    rows = []
    if "resnet50_pipeswitch_ms" in s:
        rows.append(("ResNet-50 cold start, PipeSwitch / PT+DHA (ms)",
                     f"{s['resnet50_pipeswitch_ms']:.2f} / {s['resnet50_pt_dha_ms'] or 0:.2f}",
                     f"{p['resnet50_pipeswitch_ms']} / {p['resnet50_pt_dha_ms']}"))  # fmt: skip
    for key, label in (("bert_base_speedup", "BERT-Base"), ("bert_large_speedup", "BERT-Large"),
                       ("roberta_base_speedup", "RoBERTa-Base")):  # fmt: skip
        if key in s:
            rows.append((f"{label}: PT+DHA speed-up over PipeSwitch", f"{s[key]:.2f}x",
                         f"{p[key]}x"))  # fmt: skip
    if "fig13_goodput_ratio" in s:
        rows.append((f"Fig. 13: goodput PT+DHA / PipeSwitch at {s['fig13_goodput_ratio_at']} "
                     f"instances", f"{s['fig13_goodput_ratio']:.2f}x",
                     f"{p['fig13_goodput_ratio_180']}x"))  # fmt: skip
        r = s["fig13_resident"]
        rows.append(("Fig. 13: instances resident, PipeSwitch / DHA",
                     f"{r.get('pipeswitch', '-')} / {r.get('dha', '-')}",
                     f"{p['fig13_pipeswitch_resident']} / {p['fig13_dha_resident']}"))  # fmt: skip
    g = s["fig15_goodput"]
    rows.append(("Fig. 15: goodput " + ", ".join(g), ", ".join(f"{100 * v:.1f}%"
                 for v in g.values()), "PipeSwitch 81-98%, DeepPlan 98-99%"))  # fmt: skip
    return rows
