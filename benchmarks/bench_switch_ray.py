"""Benchmark: a plan switch live on Ray with emulated workers, beside the simulator's
(issue 40).

A real multi-node Ray cluster on this machine (``tests/runtime/raycluster.py``: two "P4"
nodes of two GPUs and one "L4" node of one, GPU-less in fact, started and stopped here),
discovered as ``serve --address`` discovers it; ppipe plans for resnet50 and bert-base on
it for an 80/20 and a 20/80 mix (SLOs ``--slo-ms``: a Ray call on a 2-core machine takes
milliseconds). An in-process server on the Ray engine with emulated actors
(``assemble_server``, as ``hetserve serve --address ... --emulate --replan manual``) is
sent Poisson arrivals (80/20) at ``--rate`` for ``--duration`` seconds; at half time an
operator switches to the 20/80 plan (``Operator.apply_plan``); once in each mode. The
simulator runs the same trace, plans and switch (``control.controller.AtTimes``).
Printed per mode: the switch's wall time (predicted, simulated, live), the requests that
arrived during it and missed their SLO, attainment overall and from 1 s before the
switch to 2 s after.

    python benchmarks/bench_switch_ray.py [--rate 100] [--duration 12] [--slo-ms 200]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.runtime.raycluster import ENV, LocalRayCluster

from hetserve.core.provenance import provenance_line
from hetserve.experiments.control.switch import live_switch, simulated_switch
from hetserve.experiments.setup import build_trace

MODELS = ["resnet50", "bert-base"]


def _plan(cluster: Any, w_resnet: float, slo_ms: float) -> Any:
    from hetserve.engine.setup import build_setup
    from hetserve.planning.registry import PlanRequest, make_plan

    base = build_setup(cluster, MODELS, slo_ms=dict.fromkeys(MODELS, slo_ms))
    req = PlanRequest(
        base.cluster, list(MODELS), dict.fromkeys(MODELS, slo_ms),
        {"resnet50": w_resnet, "bert-base": 1 - w_resnet},
        latency_source=lambda: (base.latency, list(base.models)),
    )  # fmt: skip
    return make_plan("ppipe", req, {}).plan


def main() -> None:
    print(provenance_line())
    import os

    os.environ.update(ENV)
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--duration", type=float, default=12.0)
    ap.add_argument("--slo-ms", type=float, default=200.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    from hetserve.cli.joined import discovered_cluster
    from hetserve.experiments.assemble import ServeOptions, assemble_server

    c = LocalRayCluster()
    try:
        c.start_head()
        c.add_node(2, "P4")
        c.add_node(2, "P4")
        c.add_node(1, "L4")
        cluster, found = discovered_cluster(c.address, None, None, None)
        plan_a, plan_b = _plan(cluster, 0.8, a.slo_ms), _plan(cluster, 0.2, a.slo_ms)
        at_s = a.duration / 2
        print(f"{cluster.name}: {cluster.gpu_counts()}; {a.rate:g} req/s for {a.duration:g} s, "
              f"the switch at {at_s:g} s; SLOs {a.slo_ms:g} ms")  # fmt: skip
        print(f"{'mode':6s} {'view':10s} {'switch_s':>9s} {'during':>7s} {'missed':>7s} "
              f"{'attain':>7s} {'window':>7s}")  # fmt: skip
        for mode in ("mbb", "flush"):
            built = assemble_server(
                ServeOptions(
                    cluster=cluster, models=MODELS, plan=plan_a, emulate=True, engine="ray",
                    address=c.address, found=found, replan="manual", switch=mode,
                    slo_ms=dict.fromkeys(MODELS, a.slo_ms), max_pending=1_000_000,
                ),
                say=lambda _: None,
            )  # fmt: skip
            rates = {"resnet50": 0.8 * a.rate, "bert-base": 0.2 * a.rate}
            trace = build_trace(built.setup, "poisson", rates, a.duration, a.seed)
            sim = simulated_switch(built.setup, trace, plan_b, mode, at_s)
            live = asyncio.run(live_switch(built.server, trace, plan_b, at_s, lead_s=0.5))
            print(f"{mode:6s} {'predicted':10s} {live['predicted_s']:9.3f}   ({live['steps']})")
            for name, r in (("simulated", sim), ("live", live)):
                print(f"{mode:6s} {name:10s} {r['switch_s']:9.3f} {r['during']:7d} "
                      f"{r['missed']:7d} {r['attainment']:7.4f} {r['window']:7.4f}")  # fmt: skip
    finally:
        left = c.stop()
        if left:
            print(f"processes of the benchmark's Ray cluster outlived it: {left}")


if __name__ == "__main__":
    main()
