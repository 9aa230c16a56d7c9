"""Benchmark: a re-plan's solve time on the PPipe authors' MAF19 instances (issue 40), with
their own TensorRT block profiles, cold and warm-started.

Nothing is downloaded: give the folder of a checkout of the PPipe artifact
(``github.com/JonnyKong/PPipe``; its ``data/`` holds the profiles and the plans read
here). From it this script builds a hetserve profile set
(``docs/profiles.md``):

- ``data/models/block-timing-tf32/MODEL-GPU-SHARE.csv``: a row per pre-partitioned block,
  a column per batch size 1..8, microseconds -> ``latency.csv``;
- ``data/prepartition_mappings/MODEL/contraction_trans-size_*.csv``: the bytes per request
  crossing each cut between blocks, as the authors' plans transmit them (their transfer
  times are these bytes over the NIC) -> ``blocks.csv`` (the last block: 0), planned with
  ``cut_bytes_factor=1`` (the bytes as given);
- each group's SLOs: the ``sla`` of the authors' plan file for it (``data/plans/maf19``,
  SLA multiplier 5), and their weights 0.3, 0.33, 0.37.

The instances are the authors' MAF19 plan files: six groups of three models on the four
clusters ``hc1-l .. hc4-l`` (25 high-class and 75 low-class GPUs). Per instance: the
plan for their weights (the one being served), then the re-plan for a moved mix
(0.6, 0.3, 0.1) cold and warm (``PlanOptions.start``: HiGHS given the served plan), and
the cost objective at half that capacity (25% headroom) cold. Printed per instance, then
medians and maxima. Also printed: the authors' plan's throughput (``xput``) beside ours
for their weights (their MILP, with Gurobi, differs from hetserve's in details; this is a
solve-time benchmark, not the planner's agreement check).

    python benchmarks/bench_replan_maf19.py PPIPE_CHECKOUT [--limit N]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
from pathlib import Path

from hetserve.core.presets import load_cluster
from hetserve.core.profiles import ProfileSet, TableModel
from hetserve.core.provenance import provenance_line
from hetserve.planning.ppipe import PlanOptions, plan_models

CLUSTERS = {("L4", "P4"): "hc1-l", ("L4", "T4"): "hc2-l", ("V100", "P4"): "hc3-l",
            ("V100", "T4"): "hc4-l"}  # fmt: skip
WEIGHTS = (0.3, 0.33, 0.37)
MOVED = (0.6, 0.3, 0.1)
GPU_NAMES = {"V100": "V100-16GB"}


def profile_set(root: Path, models: list[str]) -> ProfileSet:
    """The authors' block timings and cut sizes as a hetserve profile set."""
    ps = ProfileSet()
    timing = root / "data" / "models" / "block-timing-tf32"
    for m in models:
        sizes = sorted((root / "data" / "prepartition_mappings" / m).glob(
            "contraction_trans-size_*.csv"))  # fmt: skip
        if not sizes:
            raise SystemExit(f"{root}: no cut sizes for {m} under data/prepartition_mappings")
        cuts = [float(x) for x in sizes[0].read_text().split()]
        ps.out_bytes[m] = [*cuts, 0.0]
        for f in sorted(timing.glob(f"{m}-*.csv")):
            gpu, share = f.stem[len(m) + 1 :].rsplit("-", 1)
            rows = [[float(v) for v in r] for r in csv.reader(f.open()) if r]
            if len(rows) != len(ps.out_bytes[m]):
                raise SystemExit(f"{f}: {len(rows)} blocks, the cut sizes say "
                                 f"{len(ps.out_bytes[m])}")  # fmt: skip
            for b in range(len(rows[0])):
                key = (m, GPU_NAMES.get(gpu, gpu), int(share), b + 1)
                ps.latency_us[key] = [r[b] for r in rows]
    return ps


def main() -> None:
    print(provenance_line())
    ap = argparse.ArgumentParser()
    ap.add_argument("ppipe", type=Path, help="a checkout of the PPipe artifact")
    ap.add_argument("--limit", type=int, default=0, help="the first N instances only")
    a = ap.parse_args()
    plans = sorted((a.ppipe / "data" / "plans" / "maf19").glob("*_v4.json"))
    if not plans:
        raise SystemExit(f"{a.ppipe}: no data/plans/maf19/*_v4.json (a PPipe checkout?)")
    times: dict[str, list[float]] = {k: [] for k in ("throughput", "warm", "cost")}
    for k, path in enumerate(plans[: a.limit or None]):
        theirs = json.loads(path.read_text())
        models = [entry["config"]["dnn_name"] for entry in theirs]
        gpus = tuple(theirs[0]["config"]["gpu_name_arr"])
        cluster = load_cluster(CLUSTERS[gpus])
        lat = TableModel(profile_set(a.ppipe, models), cluster.catalog)
        slos = {e["config"]["dnn_name"]: e["sla"] / 1e6 for e in theirs}
        w0 = dict(zip(models, WEIGHTS, strict=True))
        w1 = dict(zip(models, MOVED, strict=True))
        opt = PlanOptions(cut_bytes_factor=1.0, time_limit_s=60)
        served = plan_models(cluster, lat, slos, w0, opt)
        t0 = time.perf_counter()
        cold = plan_models(cluster, lat, slos, w1, opt)
        t_cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        warm = plan_models(cluster, lat, slos, w1, PlanOptions(
            cut_bytes_factor=1.0, time_limit_s=60, start=served))  # fmt: skip
        t_warm = time.perf_counter() - t0
        rates = tuple((m, 0.5 * cold.models[m].throughput_rps) for m in models)
        t0 = time.perf_counter()
        cost = plan_models(cluster, lat, slos, w1, PlanOptions(
            cut_bytes_factor=1.0, objective="cost", rates_rps=rates))  # fmt: skip
        t_cost = time.perf_counter() - t0
        for key, v in zip(times, (t_cold, t_warm, t_cost), strict=True):
            times[key].append(v)
        ours = served.meta["objective"]["normalized_rps"]
        their = min(e["xput"] / w for e, w in zip(theirs, WEIGHTS, strict=True))
        short = "+".join(m.split("_")[0] for m in models)
        print(
            f"{k + 1:2d} {cluster.name} {short:<44} cold {t_cold:5.2f} s "
            f"({cold.meta['solve']['status']}), warm {t_warm:5.2f} s "
            f"({warm.meta['objective']['normalized_rps'] / cold.meta['objective']['normalized_rps']:.4f}), "  # noqa: E501
            f"cost {t_cost:5.2f} s ({cost.meta['objective']['cost_per_hour']:.0f} GPUs); "
            f"normalised req/s for their weights: ours {ours:.0f}, theirs {their:.0f}",
            flush=True,
        )
    for key, v in times.items():
        print(f"{key}: median {statistics.median(v):.2f} s, max {max(v):.2f} s over {len(v)} "
              f"(candidates and the MILP)")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
