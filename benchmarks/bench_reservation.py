"""Benchmark: the reservation scheduler's cost (issue 5's performance targets).

On ``hc1-l`` with three models and their PPipe plan, Poisson at load factor 0.9: probe()
calls per dispatched batch and mean scheduler decision time per dispatched batch (all
scheduler callbacks' time divided by the batches dispatched; targets: <= 50 us in Python,
stretch <= 10 us; the paper: 3.58 probes and < 9 us in its Java simulator), and the wall
time of one 30 s load point (target <= 10 s).
Run: ``.venv/bin/python benchmarks/bench_reservation.py [--duration S]``.
"""

from __future__ import annotations

import sys
import time

from hetserve.core.plan import slos_from_scale
from hetserve.core.provenance import provenance_line
from hetserve.engine.setup import build_setup
from hetserve.experiments.metrics import summarize
from hetserve.experiments.setup import build_trace
from hetserve.planning.ppipe import plan_models
from hetserve.scheduling.protocol import make_scheduler
from hetserve.scheduling.reservation import Reservation
from hetserve.sim.engine import SimConfig, Simulator

MODELS = ["efficientnet-b8", "resnet152", "convnext-t"]


class Timed(Reservation):
    """The reservation scheduler with its callbacks timed and its probes counted."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds = 0.0
        self.probes = 0
        self.dispatches = 0

    def probe(self, pipe, batch, now):  # type: ignore[no-untyped-def]
        self.probes += 1
        return super().probe(pipe, batch, now)

    def _timed(self, fn, *args):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        out = fn(*args)
        self.seconds += time.perf_counter() - t0
        return out

    def new_batch_id(self) -> int:
        self.dispatches += 1
        return super().new_batch_id()

    def on_arrival(self, request, now):  # type: ignore[no-untyped-def]
        return self._timed(super().on_arrival, request, now)

    def on_timer(self, token, now):  # type: ignore[no-untyped-def]
        return self._timed(super().on_timer, token, now)

    def on_stage_done(self, report, now):  # type: ignore[no-untyped-def]
        return self._timed(super().on_stage_done, report, now)


def main() -> None:
    print(provenance_line())
    duration = 30.0
    if "--duration" in sys.argv:
        duration = float(sys.argv[sys.argv.index("--duration") + 1])
    base = build_setup("hc1-l", MODELS)
    plan = plan_models(
        base.cluster, base.latency, slos_from_scale(base.cluster, base.latency, MODELS, 5.0, "L4")
    )
    setup = build_setup("hc1-l", MODELS, plan=plan)
    trace = build_trace(setup, "poisson", plan.rates_at(0.9), duration, seed=0)
    sched = Timed()
    t0 = time.perf_counter()
    res = Simulator(
        setup.cluster, setup.latency, setup.plan, setup.placement, sched, trace, SimConfig(seed=0)
    ).run()
    wall = time.perf_counter() - t0
    s = summarize(res)
    print(
        f"hc1-l, {'+'.join(MODELS)}, Poisson at load factor 0.9, {duration:g} s: "
        f"{len(trace):,} requests, attainment {100 * s['attainment']:.2f}%"
    )
    print(
        f"dispatched batches {sched.dispatches:,}; probe() calls per batch "
        f"{sched.probes / max(1, sched.dispatches):.2f}; scheduler time per batch "
        f"{1e6 * sched.seconds / max(1, sched.dispatches):.1f} us"
    )
    print(
        f"wall time of the load point: {wall:.2f} s ({len(trace) / wall:,.0f} simulated requests/s)"
    )
    _ = make_scheduler  # the registered "reservation" is the class timed here


if __name__ == "__main__":
    main()
