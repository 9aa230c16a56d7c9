"""The cost of the boundary between the compiled engine and a scheduler written in Python
(issue 41): what one call from the kernel into a Python policy costs, per decision.

The kernel calls its scheduler per decision: ``on_arrival`` per request, ``on_stage_done``
per stage that ends, ``on_timer`` per timer the scheduler set (never per bookkeeping
event: transfers, deadline checks and stage starts stay in the kernel). Issue 41's
instance (``benchmarks/against_base.py``: the PPipe authors' MAF19 trio on ``hc1-l``, a
plan at capacity, the reservation scheduler) runs twice, alternating, in one process:

- ``direct``: the reservation scheduler as shipped (its protocol methods are Python,
  each handing the call to the compiled core whole);
- ``wrapped``: the same scheduler behind a plain-Python scheduler that forwards each
  protocol call (``Forward``): one more Python call per decision, what any scheduler
  written in Python adds.

The difference of the two runs' times, over the protocol calls the run made, is the cost
of one Python call at the boundary; with the calls per request it gives that cost per
request, and its share of the run. The two runs give the same results (checked).

Run: ``.venv/bin/python benchmarks/policy_boundary.py PPIPE_CHECKOUT [--planner ppipe|np]
[--seconds 30] [--rounds 5]`` (nothing is downloaded: the checkout is a local copy of
``github.com/JonnyKong/PPipe``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


class Forward:
    """A scheduler in plain Python that forwards each protocol call to ``inner``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0

    def start(self, view: Any, plan: Any, now: float) -> Any:
        return self.inner.start(view, plan, now)

    def on_arrival(self, request: Any, now: float) -> Any:
        self.calls += 1
        return self.inner.on_arrival(request, now)

    def on_stage_done(self, report: Any, now: float) -> Any:
        self.calls += 1
        return self.inner.on_stage_done(report, now)

    def on_timer(self, token: Any, now: float) -> Any:
        self.calls += 1
        return self.inner.on_timer(token, now)

    def on_worker_lost(self, worker: str, now: float) -> Any:
        return self.inner.on_worker_lost(worker, now)


def main() -> None:
    from hetserve.core.provenance import provenance_line

    print(provenance_line(), flush=True)
    sys.path.insert(0, str(HERE))
    from against_base import MAF19_TRIO
    from bench_replan_maf19 import profile_set

    from hetserve.core.plan import slos_from_scale
    from hetserve.engine import kernel
    from hetserve.engine.setup import build_setup
    from hetserve.experiments.setup import build_trace
    from hetserve.planning.ppipe import PlanOptions, plan_models
    from hetserve.scheduling import make_scheduler
    from hetserve.sim.engine import SimConfig, Simulator

    ap = argparse.ArgumentParser()
    ap.add_argument("ppipe")
    ap.add_argument("--planner", choices=("ppipe", "np"), default="ppipe")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    folder = tempfile.mkdtemp(prefix="hetserve-ppipe-")
    profile_set(Path(a.ppipe), MAF19_TRIO).write(folder)
    base = build_setup("hc1-l", MAF19_TRIO, profiles=folder)
    slos = slos_from_scale(base.cluster, base.latency, MAF19_TRIO, 5.0, "L4")
    opts = PlanOptions(planner=a.planner, cut_bytes_factor=1.0)
    s = build_setup("hc1-l", MAF19_TRIO, profiles=folder,
                    plan=plan_models(base.cluster, base.latency, slos, options=opts))  # fmt: skip
    shutil.rmtree(folder, ignore_errors=True)
    tr = build_trace(s, "poisson", s.plan.rates_at(1.0), a.seconds, seed=0)

    def run(wrapped: bool) -> tuple[float, int, Any]:
        sched = make_scheduler("reservation")
        fwd = Forward(sched)
        sim = Simulator(s.cluster, s.latency, s.plan, s.placement, fwd if wrapped else sched,
                        tr, SimConfig())  # fmt: skip
        t0 = time.perf_counter()
        res = sim.run()
        return time.perf_counter() - t0, fwd.calls, res

    best = {False: float("inf"), True: float("inf")}
    calls, outs = 0, {}
    for _ in range(a.rounds):
        for wrapped in (False, True):
            wall, c, res = run(wrapped)
            best[wrapped] = min(best[wrapped], wall)
            calls = max(calls, c)
            outs[wrapped] = (res.outcome.tobytes(), res.finish_s.tobytes())
    assert outs[False] == outs[True], "the forwarding scheduler changed the results"
    n = len(tr)
    per_call = (best[True] - best[False]) / calls
    print(f"{a.planner} plan, {a.seconds:g} s of arrivals: {n:,} requests, {calls:,} protocol "
          f"calls ({calls / n:.2f} per request); kernel compiled: {kernel.COMPILED}")  # fmt: skip
    print(f"direct: {n / best[False]:,.0f} req/s; wrapped: {n / best[True]:,.0f} req/s "
          f"(best of {a.rounds} each, alternating)")  # fmt: skip
    share = 100 * (best[True] - best[False]) / best[True]
    print(f"one Python call at the boundary: {per_call * 1e9:,.0f} ns; per request "
          f"{per_call * calls / n * 1e6:.2f} us, {share:.1f}% of the wrapped run")  # fmt: skip


if __name__ == "__main__":
    main()
