"""Benchmark: PPipe MILP solve times on hc1-l .. hc4-l (issue 4's targets).

Instances: three zoo models with roofline-estimated profiles (10 blocks, 2 GPU types,
shares 1-4, batches 1-8), SLO 5 x the L4 batch-1 latency, margin 0.4; every instance is
reported. Targets on this 2-core machine: 2 stages median <= 3 s and max <= 10 s, proven
optimal; 3 stages <= 60 s with proven gap <= 1%; 4 GPU types <= 60 s.
Run: ``.venv/bin/python benchmarks/bench_planner.py [--quick]``.
"""

from __future__ import annotations

import statistics
import sys

from hetserve.core.cluster import parse_cluster
from hetserve.core.latency import RooflineModel
from hetserve.core.plan import slos_from_scale
from hetserve.core.presets import load_cluster
from hetserve.core.provenance import provenance_line
from hetserve.planning.ppipe import PlanOptions, plan_models

TRIOS = [
    ["resnet50", "efficientnet-b4", "densenet121"],
    ["efficientnet-b8", "resnet152", "convnext-t"],
]


def run(cluster, models, stages, limit):
    rm = RooflineModel()
    slos = slos_from_scale(cluster, rm, models, 5.0, "L4")
    p = plan_models(cluster, rm, slos, None, PlanOptions(max_stages=stages, time_limit_s=limit))
    s = p.meta["solve"]
    print(
        f"{cluster.name:<10} {stages} stages  {'+'.join(models):<42} "
        f"{s['seconds']:7.2f} s  {s['status']:<10} gap {100 * s['gap']:6.3f}%  "
        f"{s['candidates']:5d} candidates  obj {p.meta['objective']['normalized_rps']:10.1f}",
        flush=True,
    )
    return s


def main() -> None:
    print(provenance_line())
    quick = "--quick" in sys.argv
    clusters = [load_cluster(f"hc{i}-l") for i in range(1, 5)]
    two = [run(c, t, 2, 60) for t in TRIOS for c in clusters]
    secs = [s["seconds"] for s in two]
    print(
        f"2 stages: median {statistics.median(secs):.2f} s, max {max(secs):.2f} s, "
        f"optimal {sum(s['status'] == 'optimal' for s in two)}/{len(two)}"
    )
    if quick:
        return
    three = [run(c, TRIOS[0], 3, 60) for c in clusters]
    print(
        f"3 stages: max {max(s['seconds'] for s in three):.2f} s, max gap "
        f"{100 * max(s['gap'] for s in three):.3f}%"
    )
    four = parse_cluster(
        {
            "name": "4-types",
            "nodes": [
                {"count": 25, "name": "l4-", "gpus": {"L4": 1}, "nic_gbps": 10},
                {"count": 25, "name": "v100-", "gpus": {"V100": 1}, "nic_gbps": 10},
                {"count": 25, "name": "t4-", "gpus": {"T4": 1}, "nic_gbps": 10},
                {"count": 25, "name": "p4-", "gpus": {"P4": 1}, "nic_gbps": 10},
            ],
        },
        "bench",
    )
    four_res = [run(four, TRIOS[0], 2, 60)]
    print(f"4 GPU types: {four_res[0]['seconds']:.2f} s ({four_res[0]['status']})")


if __name__ == "__main__":
    main()
