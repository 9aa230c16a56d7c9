"""The colony's cost against the exact optimum (``planning.rampa.exact``) on seeded random
small switched clusters (2-4 switches in a ring, 2-3 GPUs of one type behind each), for
services 1-4 of RAMPA's Table V at up to 4 stages, Table VII's colony parameters.

Run: ``.venv/bin/python benchmarks/rampa_gap.py [--instances 60] [--colony-seeds 1]``;
prints how often the colony reaches the optimum, its mean and worst gap, and how often it
finds nothing where a placement exists.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from hetserve.core.cluster import parse_cluster
from hetserve.core.provenance import provenance_line
from hetserve.planning.rampa.aco import AcoParams, rampa
from hetserve.planning.rampa.exact import exact_placement
from hetserve.planning.rampa.network import RampaNet
from hetserve.planning.rampa.place import table_v_services
from hetserve.planning.rampa.state import ClusterState

TYPES = ("L4", "V100-32GB", "A30", "T4")


def small_cluster(rng: np.random.Generator, k: int) -> RampaNet:
    n_sw = int(rng.integers(2, 5))
    names = [f"s{i}" for i in range(n_sw)]
    ring = [(names[i], names[(i + 1) % n_sw]) for i in range(n_sw)] if n_sw > 2 else [("s0", "s1")]
    nodes = [
        {"name": f"n-{s}", "gpus": {TYPES[int(rng.integers(4))]: int(rng.integers(2, 4))},
         "rack": f"rack-{s}", "switch": s, "attach": "gpu", "nic_gbps": 10,
         "link_gbps": 10, "link_delay_us": 0.05}
        for s in names
    ]  # fmt: skip
    spec = {
        "name": f"small-{k}",
        "nodes": nodes,
        "topology": {
            "switches": [{"name": s, "latency_us": 0.03} for s in names],
            "links": [{"a": a, "b": b, "bw_gbps": 10, "delay_us": 0.1, "lanes": 4}
                      for a, b in ring],
        },
    }  # fmt: skip
    return RampaNet.of(parse_cluster(spec, "rampa_gap"))


def main() -> None:
    print(provenance_line())
    ap = argparse.ArgumentParser()
    ap.add_argument("--instances", type=int, default=60)
    ap.add_argument("--colony-seeds", type=int, default=1, help="Colony runs per instance.")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    services = table_v_services()
    names = ["service1", "service2", "service3", "service4"]
    gaps, missed, none, n = [], 0, 0, 0
    for k in range(a.instances):
        net = small_cluster(rng, k)
        svc = services[names[k % len(names)]]
        best = exact_placement(ClusterState.of(net), svc, max_stages=4)
        if best is None:
            none += 1
            continue
        for seed in range(a.colony_seeds):
            n += 1
            found = rampa(ClusterState.of(net), svc, AcoParams(seed=k + 1000 * seed), max_stages=4)
            if found is None:
                missed += 1
            else:
                gaps.append(found.cost / best.cost - 1)
    hit = sum(1 for g in gaps if g < 1e-9)
    print(
        f"{a.instances} instances: {none} without any placement, "
        f"{n // a.colony_seeds} with one; {a.colony_seeds} colony run(s) each"
    )
    print(f"colony at the optimum: {hit} of {n} runs; found nothing: {missed}")
    if gaps:
        print(f"gap: mean {100 * statistics.mean(gaps):.2f}%, worst {100 * max(gaps):.2f}%")


if __name__ == "__main__":
    main()
