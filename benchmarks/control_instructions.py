"""Instruction counts of the control machinery in the simulator (issue 40): one variant
of ``bench_control.py``'s no-turn run per process, to be run under callgrind, whose
counts do not drift with the machine's speed as wall times do.

    for v in "static 0" "static 8" "wrapped 8" "switched 8"; do set -- $v
      valgrind --tool=callgrind --callgrind-out-file=/tmp/cg-$1-$2.out \\
        .venv/bin/python benchmarks/control_instructions.py $1 $2 2>&1 | grep Collected
    done

``static``: the first plan, no control loop; ``wrapped``: the Switching scheduler and the
control loop's ticks, no switch; ``switched``: one switch to the same plan 1 s in (every
later event passes through the Switching scheduler's fast path). ``SECONDS`` of Poisson
arrivals (``static 0``: start-up alone, to subtract).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.control.scenario import setup_for

from hetserve.control.controller import AtTimes, RateController
from hetserve.core.provenance import provenance_line
from hetserve.engine.control import ControlConfig, ControlSpec
from hetserve.experiments.setup import build_trace, replanner, simulate


def main() -> None:
    print(provenance_line())
    variant, seconds = sys.argv[1], float(sys.argv[2])
    setup = setup_for(0.8)
    total = 0.7 * setup.plan.capacity_rps()
    planned = {"resnet50": 0.8 * total, "bert-base": 0.2 * total}
    flat = build_trace(setup, "poisson", planned, max(seconds, 0.01), 7)
    ctl = None
    if variant == "wrapped":
        ctl = ControlSpec(RateController("off", period_s=20.0), replanner(setup), planned,
                          ControlConfig(tick_s=2.0, window_s=10.0, long_window_s=20.0))  # fmt: skip
    elif variant == "switched":
        ctl = ControlSpec(AtTimes((1.0,)), lambda r, p, pl: setup.plan, planned,
                          ControlConfig(tick_s=0.5, window_s=1.0, long_window_s=2.0,
                                        solve_s=0.0))  # fmt: skip
    elif variant != "static":
        raise SystemExit(f"variant: expected static, wrapped or switched, got {variant!r}")
    if seconds > 0:
        print(f"{len(flat)} requests")
        simulate(setup, "reservation", flat, control=ctl)


if __name__ == "__main__":
    main()
