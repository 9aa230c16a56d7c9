"""Benchmark: one plan switch predicted, simulated and measured live, side by side
(issue 40, step 3).

The scenario of ``tests/control/scenario.py``: ``hc1-s``, resnet50 and bert-base at their
default SLOs, the ppipe plan for an 80/20 mix; Poisson arrivals at ``--rate`` req/s
(80/20) for ``--duration`` seconds; at half time an operator switches to the ppipe plan
for a 20/80 mix. Per switch mode (``mbb``, ``flush``), one trace (``--seed``), three views
of the same switch:

- ``predicted``: the control loop's estimate (``ControlLoop.estimate``), made before it
  switches: the switch's time and the requests it delays;
- ``simulated``: ``simulate`` on the trace, the switch asked for at half time
  (``control.controller.AtTimes``, the planner answering the target plan at once);
- ``live``: an in-process server (``Server``, emulated workers on the wall clock, the
  same scheduler), the trace's requests sent at their times, ``Operator.apply_plan`` at
  half time.

Printed per view: the switch's wall time (decision to the old plan drained), the requests
that arrived during it and missed their SLO (of how many), and attainment overall and in
the window from 1 s before the switch to 2 s after it. The live figures include this
machine's event loop: a 2-core machine running the sender, the server and the modelled
workers in one process.

    python benchmarks/bench_switch_live.py [--rate 300] [--duration 12] [--seed 0]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.control.scenario import plan_for, setup_for

from hetserve.core.provenance import provenance_line
from hetserve.experiments.control.switch import live_switch, simulated_switch
from hetserve.experiments.setup import build_trace, control_spec
from hetserve.runtime.server import Server
from hetserve.runtime.serverconfig import ServerConfig, wall_clock_params


def _server(setup: Any, mode: str) -> Server:
    spec = control_spec(
        setup, "manual", mode, 4, setup.plan.rates_at(1.0), solve_s=None, serving=True
    )
    cfg = ServerConfig(scheduler="reservation", params=wall_clock_params("reservation", {}),
                       emulate=True, replan="manual", max_pending=1_000_000)  # fmt: skip
    return Server(setup, cfg, spec)


def main() -> None:
    print(provenance_line())
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=300.0)
    ap.add_argument("--duration", type=float, default=12.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    setup = setup_for(0.8)
    target = plan_for(0.2)
    rates = {"resnet50": 0.8 * a.rate, "bert-base": 0.2 * a.rate}
    trace = build_trace(setup, "poisson", rates, a.duration, a.seed)
    at_s = a.duration / 2
    print(f"{len(trace)} requests over {a.duration:g} s at {a.rate:g} req/s; the switch at "
          f"{at_s:g} s")  # fmt: skip
    print("switch_s: decision to the old plan drained; during: requests that arrived in it; "
          "missed: of those, late, dropped or failed; delayed: the estimate's requests "
          "delayed (an upper bound: they may still meet their SLO); window: attainment of "
          "the requests that arrived from 1 s before the switch to 2 s after")  # fmt: skip
    print(f"{'mode':6s} {'view':10s} {'switch_s':>9s} {'during':>7s} {'missed':>7s} "
          f"{'delayed':>8s} {'attain':>7s} {'window':>7s}")  # fmt: skip
    for mode in ("mbb", "flush"):
        sim = simulated_switch(setup, trace, target, mode, at_s)
        live = asyncio.run(live_switch(_server(setup, mode), trace, target, at_s))
        print(f"{mode:6s} {'predicted':10s} {sim['predicted_s']:9.3f} {'':>7s} {'':>7s} "
              f"{sim['predicted_delayed']:8.1f}")  # fmt: skip
        for name, r in (("simulated", sim), ("live", live)):
            print(f"{mode:6s} {name:10s} {r['switch_s']:9.3f} {r['during']:7d} "
                  f"{r['missed']:7d} {'':>8s} {r['attainment']:7.4f} "
                  f"{r['window']:7.4f}")  # fmt: skip


if __name__ == "__main__":
    main()
