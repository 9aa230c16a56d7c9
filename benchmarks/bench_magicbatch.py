"""Benchmark: MagicBatch's assignment methods (issue 15's targets: ``exact`` on 1,000
streams over 300 GPUs of 3 types <= 1 s; ``shared`` on 200 streams <= 10 s; PSO-GA's time
at the paper's settings recorded).

Streams: ``random_streams`` (seeded; ResNet-101 and DenseNet-121 alternating, 5-50 req/s,
deadlines 100-500 ms), roofline latencies and energies on the MagicBatch edge GPU types
(GTX 1080 Ti, RTX 2080 Ti, RTX 3090). The batch options are computed once, outside the
timed part. Run: ``.venv/bin/python benchmarks/bench_magicbatch.py [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

from hetserve.core.gpus import DEFAULT_CATALOG
from hetserve.core.latency import RooflineModel
from hetserve.core.provenance import provenance_line
from hetserve.planning.magicbatch import (
    PsoGaParams,
    assign,
    pso_ga,
    random_streams,
    shared,
    stream_options,
    total_power_w,
)

TYPES = ("GTX-1080-Ti", "RTX-2080-Ti", "RTX-3090")


def main() -> None:
    print(provenance_line())
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    gpus = {n: DEFAULT_CATALOG.get(n) for n in TYPES}
    rm = RooflineModel()
    print("| method | streams | GPUs | placed | best | median | power W (total, idle parked) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    cases = [("exact", 1000, 100), ("pso-ga", 100, 40), ("pso-ga", 1000, 100),
             ("shared", 200, 20), ("exact", 200, 20)]  # fmt: skip
    for method, n_s, per in cases:
        streams = random_streams(n_s, ["resnet101", "densenet121"], 1)
        opts = stream_options(rm, streams, list(gpus.values()), 256)
        counts = dict.fromkeys(TYPES, per)
        ts, res = [], None
        for _ in range(a.repeats if method != "shared" else 1):
            t0 = time.perf_counter()
            if method == "shared":
                res = shared(streams, counts, opts, gpus, park_idle=True, time_limit_s=10.0)
            elif method == "pso-ga":
                res = pso_ga(streams, counts, opts, PsoGaParams())
            else:
                res = assign(method, streams, counts, opts)
            ts.append(time.perf_counter() - t0)
        assert res is not None
        p = total_power_w(res, streams, gpus, counts, park_idle=True)
        print(f"| {method} | {n_s} | {3 * per} | {len(res.gpu_of)} | {min(ts):.2f} s | "
              f"{statistics.median(ts):.2f} s | {p:,.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
