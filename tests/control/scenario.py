"""A small re-planning scenario shared by the control tests: two models on ``hc1-s`` whose
mix turns over mid-trace, and ppipe plans for either mix (made once per session)."""

from __future__ import annotations

import functools

import numpy as np

from hetserve.core.plan import Plan
from hetserve.engine.setup import Setup, build_setup
from hetserve.experiments.setup import build_trace
from hetserve.planning.registry import PlanRequest, make_plan
from hetserve.workload.trace import Trace

MODELS = ["resnet50", "bert-base"]


@functools.cache
def plan_for(w_resnet: float) -> Plan:
    """The ppipe plan for a mix (resnet50's share of the requests)."""
    base = build_setup("hc1-s", MODELS)
    req = PlanRequest(
        base.cluster, list(MODELS), {m: s * 1e3 for m, s in base.slos_s.items()},
        {"resnet50": w_resnet, "bert-base": 1 - w_resnet},
        latency_source=lambda: (base.latency, list(base.models)),
    )  # fmt: skip
    return make_plan("ppipe", req, {}).plan


def setup_for(w_resnet: float) -> Setup:
    return build_setup("hc1-s", [], plan=plan_for(w_resnet))


def turning_trace(setup: Setup, total_rps: float, before_s: float, after_s: float,
                  seed: int = 0) -> Trace:  # fmt: skip
    """Poisson arrivals at ``total_rps``: 80% resnet50 for ``before_s``, then 20%."""
    a = build_trace(setup, "poisson", _mix(total_rps, 0.8), before_s, seed)
    b = build_trace(setup, "poisson", _mix(total_rps, 0.2), after_s, seed + 1)
    assert [s.name for s in a.streams] == [s.name for s in b.streams]
    return Trace(
        np.concatenate([a.time_s, b.time_s + before_s]),
        np.concatenate([a.stream_idx, b.stream_idx]),
        a.streams,
        before_s + after_s,
    )


def _mix(total: float, w_resnet: float) -> dict[str, float]:
    return {"resnet50": total * w_resnet, "bert-base": total * (1 - w_resnet)}
