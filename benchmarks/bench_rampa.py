"""Benchmark: one RAMPA placement per service (Table V) on each RAMPA cluster, empty, with
Table VII's colony parameters (issue 16: the largest model on ``rampa-large`` <= 20 s, aim
for 2 s; the time per service recorded for every model and cluster).

Run: ``.venv/bin/python benchmarks/bench_rampa.py [--clusters rampa-base,rampa-large]``.
"""

from __future__ import annotations

import argparse
import time

from hetserve.core.presets import preset
from hetserve.core.provenance import provenance_line
from hetserve.planning.rampa.aco import rampa
from hetserve.planning.rampa.network import RampaNet
from hetserve.planning.rampa.place import table_v_services
from hetserve.planning.rampa.state import ClusterState


def main() -> None:
    print(provenance_line())
    ap = argparse.ArgumentParser()
    ap.add_argument("--clusters", default="rampa-base,rampa-high-bw,rampa-high-perf,rampa-large")
    a = ap.parse_args()
    services = table_v_services()
    print("| cluster | " + " | ".join(f"{n} ({s.model}, {len(s.ops)} ops)"
                                      for n, s in services.items()) + " |")  # fmt: skip
    print("|---|" + "---:|" * len(services))
    for name in a.clusters.split(","):
        net = RampaNet.of(preset(name))
        cells = []
        for svc in services.values():
            state = ClusterState.of(net)
            state.costs()  # Eqs. 4-5 once per cluster state, outside the timed part
            t0 = time.perf_counter()
            p = rampa(state, svc)
            dt = time.perf_counter() - t0
            cells.append(f"{dt:.2f} s ({p.stages if p else '-'} st.)")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
