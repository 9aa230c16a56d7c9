"""Benchmark: generate 1 M Poisson arrivals over 100 streams (target: under 2 s).

Run: ``make bench`` or ``.venv/bin/python benchmarks/bench_workload.py``. Prints the best
and median of several repetitions; results are recorded in ``docs/benchmarks.md``.
"""

from __future__ import annotations

import platform
import statistics
import time

import numpy as np

from hetserve.core.provenance import provenance_line
from hetserve.core.requests import Stream
from hetserve.workload import MMPP2, Gamma, Poisson, generate


def bench(label: str, streams: list[Stream], duration_s: float, reps: int = 5) -> float:
    times, n = [], 0
    for r in range(reps):
        t0 = time.perf_counter()
        tr = generate(streams, duration_s, seed=r)
        times.append(time.perf_counter() - t0)
        n = len(tr)
    best, med = min(times), statistics.median(times)
    print(f"{label:<44} {n:>9,} arrivals  best {best:6.3f} s  median {med:6.3f} s")
    return best


def main() -> None:
    print(provenance_line())
    print(
        f"python {platform.python_version()}, numpy {np.__version__}, "
        f"{platform.processor() or platform.machine()}"
    )
    duration_s = 100.0
    per_stream = 1_000_000 / 100 / duration_s
    best = bench(
        "Poisson, 100 streams, 1M arrivals",
        [Stream(f"s{i}", "resnet50", 0.1, Poisson(per_stream)) for i in range(100)],
        duration_s,
    )
    bench(
        "Gamma cv=4, 100 streams, 1M arrivals",
        [Stream(f"s{i}", "resnet50", 0.1, Gamma(per_stream, cv=4)) for i in range(100)],
        duration_s,
    )
    bench(
        "MMPP, 100 streams, 1M arrivals",
        [Stream(f"s{i}", "resnet50", 0.1, MMPP2(per_stream)) for i in range(100)],
        duration_s,
    )
    target = 2.0
    print(
        f"target: 1M Poisson arrivals over 100 streams in under {target} s -> "
        f"{'met' if best < target else 'MISSED'} ({best:.3f} s)"
    )


if __name__ == "__main__":
    main()
