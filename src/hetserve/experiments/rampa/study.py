"""``hetserve reproduce rampa``: RAMPA's evaluation (TCC 2025, section V) on the four
switched clusters (``rampa-base``, ``rampa-high-bw``, ``rampa-high-perf``, ``rampa-large``)
and the four demand cases of Table IV.

Every (cluster, case) setting places one seeded request sequence (the same for every
method) until the first request that cannot be placed:

- **Fig. 7**: services placed by RAMPA, and by PE and NCAR at every combination of Table
  IX's stage counts (288; ``combos`` samples them, seeded, always with the all-fewest and
  all-most combinations): best, worst and mean, with the best combination.
- **Fig. 8**: how many stages RAMPA gave each service it placed, per cluster, case 1.
- **Figs. 9-10**: throughput and latency per service on ``rampa-base``, case 1: RAMPA's
  placements and PE's per stage count (over the combinations), estimated (Eqs. 1-2) and
  measured by serving the placements in the simulator at the required rates
  (``experiments.rampa.validate``), beside the requirements.
- **Fig. 11**: RAMPA's placement time per service (mean and 95% confidence interval over
  the placements of the case-1 runs) against the model's number of operations, base and
  large clusters.

Runs are independent and go to ``jobs`` processes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from hetserve.core.errors import HetserveError

CLUSTERS = ("rampa-base", "rampa-high-bw", "rampa-high-perf", "rampa-large")
SERVE_CLUSTER = "rampa-base"  # Figs. 9-10, as in the paper
TIMING_CLUSTERS = ("rampa-base", "rampa-large")  # Fig. 11, as in the paper


@dataclass(frozen=True)
class RampaConfig:
    clusters: tuple[str, ...] = CLUSTERS
    cases: tuple[int, ...] = (1, 2, 3, 4)
    combos: int | None = None  # None: all 288 stage-count combinations; k: a sample of k
    max_requests: int = 2000  # a sequence stops at its first failure or here
    serve_s: float = 20.0  # seconds of serving per placement set (Figs. 9-10)
    seed: int = 0


def quick_config() -> RampaConfig:
    return RampaConfig(clusters=("rampa-base", "rampa-high-perf"), cases=(1, 3), combos=4,
                       serve_s=5.0)  # fmt: skip


def combinations(k: int | None, seed: int) -> list[dict[str, int]]:
    """Table IX's combinations: all (k None or >= 288) or a seeded sample of k with the
    all-fewest and all-most combinations first."""
    from hetserve.planning.rampa.place import stage_combinations

    every = stage_combinations()
    if k is None or k >= len(every):
        return every
    if k < 1:
        raise HetserveError(f"--combos: expected at least 1, got {k}")
    first, last = 0, len(every) - 1  # itertools.product order: all fewest, all most
    rest = [i for i in range(len(every)) if i not in (first, last)]
    rng = np.random.default_rng(seed)
    pick = [first, last][:k] + sorted(rng.choice(rest, size=max(0, k - 2), replace=False))
    return [every[int(i)] for i in pick]


def tasks(cfg: RampaConfig) -> list[tuple]:
    """(method, cluster, case, combination index or -1): the longest first."""
    n = len(combinations(cfg.combos, cfg.seed))
    out = [("rampa", c, k, -1) for c in cfg.clusters for k in cfg.cases]
    out += [(m, c, k, i) for m in ("ncar", "pe") for c in cfg.clusters for k in cfg.cases
            for i in range(n)]  # fmt: skip
    weight = {"rampa": 0, "ncar": 1, "pe": 2}
    return sorted(out, key=lambda t: (weight[t[0]], t[1] != "rampa-large"))


def run_one(t: tuple, cfg: RampaConfig) -> tuple[tuple, dict[str, Any]]:
    """Place the setting's request sequence with one method (and combination)."""
    from hetserve.core.presets import load_cluster
    from hetserve.planning.rampa.aco import AcoParams
    from hetserve.planning.rampa.network import RampaNet
    from hetserve.planning.rampa.place import place_sequence, request_sequence
    from hetserve.planning.rampa.state import ClusterState

    method, cluster_name, case, ci = t
    cluster = load_cluster(cluster_name)
    state = ClusterState.of(RampaNet.of(cluster))
    reqs = request_sequence(case, cfg.max_requests, cfg.seed)
    stages = combinations(cfg.combos, cfg.seed)[ci] if ci >= 0 else None
    times: list[float] = []
    last = [time.perf_counter()]

    def tick(i: int, p: object) -> None:
        now = time.perf_counter()
        times.append(now - last[0])
        last[0] = now

    t0 = time.perf_counter()
    placed, failed = place_sequence(state, reqs, method, stages, AcoParams(seed=cfg.seed),
                                    on_placed=tick)  # fmt: skip
    out: dict[str, Any] = {
        "placed": len(placed),
        "first_failure": failed,
        "seconds": time.perf_counter() - t0,
        "stages": stages,
        "services": [
            {
                "service": p.service.name,
                "stages": p.stages,
                "tps": p.est.throughput_tps,
                "latency_ms": p.est.latency_s * 1e3,
                "ops": len(p.service.ops),
            }
            for p in placed
        ],
        # per request tried (the failed one too): service, seconds
        "times": [[name, s] for name, s in zip(reqs, times, strict=False)],
    }
    if case == 1 and cluster_name == SERVE_CLUSTER and method in ("rampa", "pe") and placed:
        from hetserve.experiments.rampa.validate import serve_placements

        served = serve_placements(placed, cluster, cfg.serve_s, cfg.seed)
        for s, r in zip(out["services"], served, strict=True):
            s["measured_tps"] = r["measured_tps"]
            s["measured_latency_ms"] = r["measured_latency_ms"]
            s["met"], s["requests"] = r["met"], r["requests"]
    return t, out


def _job(args: tuple[tuple, RampaConfig]) -> tuple[tuple, dict[str, Any]]:
    return run_one(*args)


def run_study(
    cfg: RampaConfig,
    jobs: int = 1,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    from hetserve.experiments.jobs import parallel_map

    t0 = time.perf_counter()
    items = [(t, cfg) for t in tasks(cfg)]
    done = dict(parallel_map(_job, items, jobs, progress, lambda tr: _label(*tr)))
    res = collect(cfg, done)
    res["seconds"] = time.perf_counter() - t0
    return res


def _label(t: tuple, r: Mapping[str, Any]) -> str:
    what = f"{t[0]} {t[1]} case {t[2]}" + (f" #{t[3]}" if t[3] >= 0 else "")
    return f"{what}: {r['placed']} placed"


def _spread(xs: list[float]) -> dict[str, float] | None:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    if not xs:
        return None
    return {"mean": float(np.mean(xs)), "min": float(min(xs)), "max": float(max(xs)), "n": len(xs)}


def _fig7_entry(runs: list[dict[str, Any]]) -> dict[str, Any]:
    counts = [r["placed"] for r in runs]
    best = max(range(len(runs)), key=lambda i: counts[i])
    worst = min(range(len(runs)), key=lambda i: counts[i])
    return {"best": counts[best], "worst": counts[worst], "mean": float(np.mean(counts)),
            "best_stages": list(runs[best]["stages"].values()),
            "worst_stages": list(runs[worst]["stages"].values()),
            "combinations": len(runs)}  # fmt: skip


def _perf(services: list[dict[str, Any]]) -> dict[str, Any]:
    """Estimated and measured throughput and latency spreads of placed services."""
    out: dict[str, Any] = {}
    for key in ("tps", "latency_ms", "measured_tps", "measured_latency_ms"):
        out[key] = _spread([s.get(key) for s in services])
    met = [s for s in services if "met" in s]
    if met:
        out["deadlines_met"] = sum(s["met"] for s in met) / max(1, sum(s["requests"] for s in met))
    return out


def collect(cfg: RampaConfig, done: Mapping[tuple, dict[str, Any]]) -> dict[str, Any]:
    """results.json (docs/reproduce.md#rampa)."""
    from hetserve.planning.rampa.place import CASES, TABLE_IX, table_v_services

    n = len(combinations(cfg.combos, cfg.seed))
    fig7: dict[str, Any] = {}
    for c in cfg.clusters:
        fig7[c] = {}
        for k in cfg.cases:
            fig7[c][str(k)] = {"rampa": done[("rampa", c, k, -1)]["placed"]}
            for m in ("pe", "ncar"):
                fig7[c][str(k)][m] = _fig7_entry([done[(m, c, k, i)] for i in range(n)])
    fig8 = {}
    for c in cfg.clusters:
        if 1 in cfg.cases:
            hist: dict[str, dict[str, int]] = {s: {} for s in TABLE_IX}
            for s in done[("rampa", c, 1, -1)]["services"]:
                h = hist[s["service"]]
                h[str(s["stages"])] = h.get(str(s["stages"]), 0) + 1
            fig8[c] = hist
    perf: dict[str, Any] = {}
    if SERVE_CLUSTER in cfg.clusters and 1 in cfg.cases:
        svcs = table_v_services()
        r = done[("rampa", SERVE_CLUSTER, 1, -1)]["services"]
        pe = [s for i in range(n) for s in done[("pe", SERVE_CLUSTER, 1, i)]["services"]]
        perf = {
            "required": {name: {"tps": s.throughput_tps, "latency_ms": s.latency_s * 1e3}
                         for name, s in svcs.items()},
            "rampa": {name: _perf([s for s in r if s["service"] == name]) for name in svcs},
            "pe": {name: {str(k): _perf([s for s in pe if s["service"] == name
                                         and s["stages"] == k]) for k in TABLE_IX[name]}
                   for name in svcs},
        }  # fmt: skip
    fig11: dict[str, Any] = {}
    for c in TIMING_CLUSTERS:
        if c in cfg.clusters and 1 in cfg.cases:
            by: dict[str, list[float]] = {}
            for name, s in done[("rampa", c, 1, -1)]["times"]:
                by.setdefault(name, []).append(s)
            ops = {name: len(svc.ops) for name, svc in table_v_services().items()}
            fig11[c] = {name: {"ops": ops[name], "mean_s": float(np.mean(v)),
                               "ci95_s": _ci95(v), "max_s": float(max(v)), "n": len(v)}
                        for name, v in sorted(by.items())}  # fmt: skip
    must = []
    for c in cfg.clusters:
        for k in cfg.cases:
            e = fig7[c][str(k)]
            must.append({"cluster": c, "case": k, "rampa": e["rampa"],
                         "ncar_best": e["ncar"]["best"],
                         "holds": e["rampa"] >= e["ncar"]["best"]})  # fmt: skip
    return {
        "config": asdict(cfg),
        "cases": {str(k): CASES[k] for k in cfg.cases},
        "combinations": combinations(cfg.combos, cfg.seed),
        "fig7": fig7,
        "fig8": fig8,
        "fig9_10": perf,
        "fig11": fig11,
        "rampa_not_below_ncar_best": must,
        "runs_seconds": {f"{t[0]} {t[1]} {t[2]} {t[3]}": v["seconds"] for t, v in done.items()},
    }


def _ci95(xs: list[float]) -> float:
    """Half-width of the 95% confidence interval of the mean (Student's t)."""
    if len(xs) < 2:
        return 0.0
    from scipy import stats

    return float(stats.t.ppf(0.975, len(xs) - 1) * np.std(xs, ddof=1) / math.sqrt(len(xs)))


def summary_rows(results: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Ours vs the paper (section V-C to V-E; its figures give no table of numbers, so the
    paper's column states its claims)."""
    fig7, must = results["fig7"], results["rampa_not_below_ncar_best"]
    holds = [m for m in must if m["holds"]]
    ncar_over_pe = [(c, k) for c, per in fig7.items() for k, e in per.items()
                    if e["ncar"]["mean"] >= e["pe"]["mean"]]  # fmt: skip
    gains = [e["rampa"] / e["ncar"]["best"] - 1 for per in fig7.values() for e in per.values()
             if e["ncar"]["best"]]  # fmt: skip
    n = results["config"]["combos"] or 288
    rows = [
        (f"Fig. 7: RAMPA >= NCAR's best of {n} combinations",
         f"{len(holds)} of {len(must)} settings", "all 16 settings"),
        ("Fig. 7: RAMPA over NCAR's best (min / max)",
         f"{100 * min(gains):+.1f}% / {100 * max(gains):+.1f}%" if gains else "-", ">= 0%"),
        ("Fig. 7: NCAR's mean >= PE's mean", f"{len(ncar_over_pe)} of {len(must)} settings",
         "NCAR tends to place more"),
    ]  # fmt: skip
    f8 = results["fig8"]
    if f8:
        multi = sum(1 for per in f8.values() for h in per.values() if len(h) > 1)
        total = sum(1 for per in f8.values() for h in per.values() if h)
        rows.append(("Fig. 8: services RAMPA cut into more than one stage count",
                     f"{multi} of {total} (cluster, service)",
                     "several patterns per service"))  # fmt: skip
    perf = results["fig9_10"]
    if perf:
        below = [
            s
            for s, v in perf["rampa"].items()
            if v["tps"]
            and any(
                e["tps"] and v["tps"]["mean"] < e["tps"]["mean"] for e in perf["pe"][s].values()
            )
        ]
        met = perf["rampa"]
        fr = [v["deadlines_met"] for v in met.values() if v.get("deadlines_met") is not None]
        rows.append(("Figs. 9-10: services where RAMPA's mean throughput < PE's",
                     f"{len(below)} of {sum(1 for v in met.values() if v['tps'])}",
                     "all (PE maximises throughput)"))  # fmt: skip
        if fr:
            rows.append(("Figs. 9-10 served: deadlines met by RAMPA's placements (worst service)",
                         f"{100 * min(fr):.1f}%", "requirements met (estimated only)"))  # fmt: skip
    worst = max((v["max_s"] for per in results["fig11"].values() for v in per.values()),
                default=None)  # fmt: skip
    if worst is not None:
        rows.append(("Fig. 11: slowest RAMPA placement", f"{worst:.2f} s",
                     "about 20 s (C++, multi-threaded)"))  # fmt: skip
    return rows
