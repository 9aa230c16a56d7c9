"""Benchmark: simulated requests per wall second (target: >= 100,000 on one core).

Setup (issue 3): ``edf-adaptive``, 100 workers (preset ``hc1-l``: 25 L4 + 75 P4), batches
<= 8, Poisson arrivals at 80% of the planned capacity, ResNet-50 (roofline latencies, SLO =
5 x batch-1 latency on the L4). Timed: the simulation run only (trace generation and
output writing excluded). Run: ``make bench`` or
``.venv/bin/python benchmarks/bench_sim.py``.
"""

from __future__ import annotations

import platform
import statistics
import time

from hetserve.core.provenance import provenance_line
from hetserve.engine.setup import build_setup
from hetserve.experiments.metrics import summarize
from hetserve.experiments.setup import build_trace, simulate


def bench(models: list[str], scheduler: str, duration_s: float, reps: int = 3) -> float:
    setup = build_setup("hc1-l", models, max_batch=8)
    trace = build_trace(setup, "poisson", setup.plan.rates_at(0.8), duration_s, seed=0)
    rates = []
    for _ in range(reps):
        t0 = time.perf_counter()
        res = simulate(setup, scheduler, trace)
        rates.append(len(trace) / (time.perf_counter() - t0))
    s = summarize(res)
    print(
        f"{scheduler:<13} {'+'.join(models):<26} {len(trace):>9,} requests  "
        f"best {max(rates):>9,.0f} req/s  median {statistics.median(rates):>9,.0f} req/s  "
        f"(attainment {100 * s['attainment']:.2f}%, mean batch {s['mean_batch_size']:.2f})"
    )
    return max(rates)


def main() -> None:
    print(provenance_line())
    print(f"python {platform.python_version()} on {platform.machine()}, one process")
    best = bench(["resnet50"], "edf-adaptive", 10.0)
    bench(["resnet50", "efficientnet-b0"], "edf-adaptive", 10.0)
    bench(["resnet50"], "fixed-batch", 10.0)
    print(
        f"target: >= 100,000 simulated requests per wall second (edf-adaptive, 100 workers) "
        f"-> {'met' if best >= 100_000 else 'MISSED'} ({best:,.0f})"
    )


if __name__ == "__main__":
    main()
