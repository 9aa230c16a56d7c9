"""Benchmark: re-planning as the load moves, in the simulator (issue 40, step 1).

The scenario (``tests/control/scenario.py`` at benchmark size): ``hc1-s``, resnet50 and
bert-base with the SLOs of the default scale, the ppipe plan for an 80/20 mix; Poisson
arrivals at 70% of that plan's capacity, 80% resnet50 for ``--before`` seconds, then 20%
for ``--after`` seconds. Three runs on one trace, the ``reservation`` scheduler:

- ``static``: the first plan throughout;
- ``mbb``: ``RateController("auto", period_s=20)``, make-before-break switches;
- ``flush``: the same controller, PPipe's pause-flush-switch.

Printed per run: attainment, late, dropped, failed, the switches (steps, time, pause,
requests that waited) and the wall time. Then the cost of the control machinery when
nothing moves: the ``static`` run against the same run under the ``Switching`` wrapper
and the control loop on a trace whose mix does not turn, and the same after one switch
(to the same plan) 1 s in, so that every later event passes through the Switching
scheduler (best of ``--repeat``, the three interleaved; ratios to static).

    python benchmarks/bench_control.py [--before 60] [--after 120] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.control.scenario import setup_for, turning_trace

from hetserve.control.controller import AtTimes, RateController
from hetserve.core.outcome import DROPPED, FAILED, LATE, OK
from hetserve.core.provenance import provenance_line
from hetserve.engine.control import ControlConfig, ControlSpec
from hetserve.experiments.setup import build_trace, replanner, simulate


def main() -> None:
    print(provenance_line())
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", type=float, default=60.0)
    ap.add_argument("--after", type=float, default=120.0)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    setup = setup_for(0.8)
    total = 0.7 * setup.plan.capacity_rps()
    planned = {"resnet50": 0.8 * total, "bert-base": 0.2 * total}
    trace = turning_trace(setup, total, a.before, a.after)
    print(f"{len(trace)} requests over {a.before + a.after:g} s at {total:.0f} req/s")

    def spec(mode: str, ctl: str = "auto") -> ControlSpec:
        return ControlSpec(RateController(ctl, period_s=20.0), replanner(setup), planned,
                           ControlConfig(switch=mode, tick_s=2.0, window_s=10.0,
                                         long_window_s=20.0))  # fmt: skip

    for name in ("static", "mbb", "flush"):
        t0 = time.perf_counter()
        res = simulate(
            setup, "reservation", trace, control=None if name == "static" else spec(name)
        )
        wall = time.perf_counter() - t0
        n = len(res.trace)
        counts = {k: int((res.outcome == v).sum()) for k, v in
                  (("late", LATE), ("dropped", DROPPED), ("failed", FAILED))}  # fmt: skip
        print(f"{name:7s} attainment {(res.outcome == OK).sum() / n:.4f} {counts} "
              f"wall {wall:.2f} s")  # fmt: skip
        for r in res.control:
            if r["switched"]:
                print(f"   v{r['version']} at {r['decided_s']:.1f} s: {r['steps']}; done in "
                      f"{r['done_s'] - r['decided_s']:.3f} s, paused {r['paused_s']:.3f} s, "
                      f"{r['waited']} waited; predicted delayed "
                      f"{r['predicted_delayed']:.0f}")  # fmt: skip

    flat = build_trace(setup, "poisson", planned, a.before, 7)

    # after a switch every event passes through the Switching scheduler: one switch to the
    # same plan (no worker moves) 1 s in, and the rest of the run behind the wrapper
    def early() -> ControlSpec:  # (a controller keeps state: a fresh one per run)
        return ControlSpec(AtTimes((1.0,)), lambda r, p, pl: setup.plan, planned,
                           ControlConfig(tick_s=0.5, window_s=1.0, long_window_s=2.0,
                                         solve_s=0.0))  # fmt: skip

    runs = {"static": lambda: None, "wrapped": lambda: spec("mbb", "off"), "switched": early}
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(a.repeat):  # (interleaved: the machine's speed drifts between runs)
        for name, make in runs.items():
            ctl = make()
            t0 = time.perf_counter()
            res = simulate(setup, "reservation", flat, control=ctl)
            best[name] = min(best[name], time.perf_counter() - t0)
            if name == "switched":
                assert [r["switched"] for r in res.control] == [True], res.control
    print(
        f"no switch, {len(flat)} requests: static {best['static']:.2f} s, under the control "
        f"loop {best['wrapped']:.2f} s (ratio {best['wrapped'] / best['static']:.3f}); "
        f"switched once 1 s in, the rest behind the Switching scheduler "
        f"{best['switched']:.2f} s (ratio {best['switched'] / best['static']:.3f}): "
        f"{(best['switched'] - best['static']) / len(flat) * 1e6:.2f} us per arrival"
    )


if __name__ == "__main__":
    main()
