"""Benchmark: FLEX's scheduling cost (issue 6's performance target).

One serving group of 12 V100 workers serving 13 models of Shepherd Table 4 (SLO 250 ms,
Table 4's exit points), Poisson arrivals at ``--load`` times the group's capacity at
batch 32 (default 1.2: overloaded, so queues are long and preemptions happen). Reports
scheduling events per second of scheduler time: arrivals plus stage reports, divided by
the time spent in the scheduler's callbacks (target: >= 200,000/s; Theorem 5.3: O(G) per
event).
Run: ``.venv/bin/python benchmarks/bench_flex.py [--scheduler flex] [--duration S]
[--load X]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from hetserve.core.outcome import OK
from hetserve.core.provenance import provenance_line
from hetserve.core.requests import Stream
from hetserve.experiments.shepherd.scenarios import V100, group_setup
from hetserve.scheduling.protocol import SCHEDULERS, make_scheduler
from hetserve.sim.engine import SimConfig, Simulator
from hetserve.workload import Poisson, generate

MODELS = [
    "resnet18", "rn34", "resnet50", "resnet101", "resnet152", "rs50", "rs101", "rs200",
    "densenet121", "dn161", "dn169", "gn", "inception-v3",
]  # fmt: skip


def timed(cls: type) -> type:
    class Timed(cls):  # type: ignore[misc, valid-type]
        seconds = 0.0
        events = 0

        def _t(self, fn, *a):  # type: ignore[no-untyped-def]
            t0 = time.perf_counter()
            out = fn(*a)
            self.seconds += time.perf_counter() - t0
            self.events += 1
            return out

        def on_arrival(self, r, now):  # type: ignore[no-untyped-def]
            return self._t(super().on_arrival, r, now)

        def on_stage_done(self, rep, now):  # type: ignore[no-untyped-def]
            return self._t(super().on_stage_done, rep, now)

        def on_timer(self, tok, now):  # type: ignore[no-untyped-def]
            return self._t(super().on_timer, tok, now)

    return Timed


def main() -> None:
    print(provenance_line())
    ap = argparse.ArgumentParser()
    ap.add_argument("--scheduler", default="flex")
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--load", type=float, default=1.2)
    a = ap.parse_args()
    slo = 0.25
    setup = group_setup(12, dict.fromkeys(MODELS, slo))
    # capacity: 12 GPUs split evenly over the models, each at batch 32
    per_model = [32 / setup.latency.latency(m, V100, 1, 32) for m in MODELS]
    rate = a.load * 12 / sum(1 / c for c in per_model)
    streams = [Stream(m, m, slo, Poisson(rate)) for m in MODELS]
    trace = generate(streams, a.duration, seed=0)
    make_scheduler(a.scheduler)  # registers the built-ins
    sched = timed(SCHEDULERS[a.scheduler])()
    t0 = time.perf_counter()
    res = Simulator(
        setup.cluster, setup.latency, setup.plan, setup.placement, sched, trace, SimConfig()
    ).run()
    wall = time.perf_counter() - t0
    ok = int(np.count_nonzero(res.outcome == OK))
    print(
        f"{a.scheduler}: 12 x V100, 13 models, Poisson {len(MODELS) * rate:,.0f} req/s "
        f"(load {a.load:g}), {a.duration:g} s: {len(trace):,} requests, goodput "
        f"{ok / a.duration:,.0f} req/s ({100 * ok / len(trace):.1f}%), "
        f"{getattr(sched, 'preemptions', 0):,} preemptions"
    )
    print(
        f"scheduler events {sched.events:,} in {sched.seconds:.2f} s: "
        f"{sched.events / sched.seconds:,.0f} events/s "
        f"({1e6 * sched.seconds / sched.events:.2f} us/event); run wall {wall:.1f} s"
    )


if __name__ == "__main__":
    main()
