"""The protocol's rules live once (``hetserve.engine.rules``): a scheduler that breaks one
fails the same way, with the same ``ProtocolError`` and message, in the simulator and in
the runtime engine."""

import pytest

from hetserve.core.requests import Stream
from hetserve.engine.executor import Observer
from hetserve.engine.modelled import ModelledExecutor
from hetserve.engine.rules import ProtocolError
from hetserve.engine.setup import build_setup
from hetserve.runtime.engine import RuntimeEngine, VirtualClock
from hetserve.scheduling import (
    BaseScheduler,
    ClusterView,
    Dispatch,
    Drop,
    Evict,
    Load,
    RouteStep,
    SetTimer,
)
from hetserve.sim.engine import SimConfig, Simulator
from hetserve.workload.trace import Trace

SETUP = build_setup("hc1-s", ["resnet50"])
MODEL = SETUP.models[0]
NB = SETUP.latency.num_blocks(MODEL)
W0, W1 = SETUP.placement.workers[0].id, SETUP.placement.workers[1].id


def _route(*steps):
    return tuple(RouteStep(k, w, 0.0, b) for k, (w, b) in enumerate(steps))


# one broken rule each: what the scheduler does at the first arrival (r) and the second (r2)
BROKEN = {
    "batch id in use": lambda r, now, s: [
        Dispatch(1, MODEL, (r,), _route((W0, (0, NB)))),
        Dispatch(1, MODEL, (s.extra,), _route((W1, (0, NB)))),
    ],
    "no requests": lambda r, now, s: [Dispatch(1, MODEL, (), _route((W0, (0, NB))))],
    "unknown model": lambda r, now, s: [Dispatch(1, "vgg16", (r,), _route((W0, (0, NB))))],
    "unknown worker": lambda r, now, s: [Dispatch(1, MODEL, (r,), _route(("gpu-x", (0, NB))))],
    "gap in the route": lambda r, now, s: [
        Dispatch(1, MODEL, (r,), _route((W0, (0, 2)), (W1, (3, NB))))
    ],
    "stage numbers": lambda r, now, s: [
        Dispatch(1, MODEL, (r,), (RouteStep(0, W0, 0.0, (0, 2)), RouteStep(2, W1, 0.0, (2, NB))))
    ],
    "past the last block": lambda r, now, s: [
        Dispatch(1, MODEL, (r,), _route((W0, (0, 2)), (W1, (2, NB + 1))))
    ],
    "dispatched twice": lambda r, now, s: [
        Dispatch(1, MODEL, (r,), _route((W0, (0, NB)))),
        Dispatch(2, MODEL, (r,), _route((W1, (0, NB)))),
    ],
    "planned start not a number": lambda r, now, s: [
        Dispatch(1, MODEL, (r,), (RouteStep(0, W0, None, (0, NB)),))
    ],
    "not at the route's first block": lambda r, now, s: [
        Dispatch(1, MODEL, (r,), _route((W0, (3, NB))))
    ],
    "dropped twice": lambda r, now, s: [Drop((r,), "deadline"), Drop((r,), "rows")],
    "dispatched after its drop": lambda r, now, s: [
        Drop((r,), "deadline"),
        Dispatch(1, MODEL, (r,), _route((W0, (0, NB)))),
    ],
    "a drop for a reason of its own": lambda r, now, s: [Drop((r,), "felt like it")],
    "timer in the past": lambda r, now, s: [SetTimer(now - 1.0, "t")],
    "load on an unknown worker": lambda r, now, s: [Load("gpu-x", MODEL, (0, NB))],
    "load past the last block": lambda r, now, s: [Load(W0, MODEL, (0, NB + 1))],
    "evict of another model": lambda r, now, s: [Evict(W0, "vgg16", (0, 1))],
    "unknown action": lambda r, now, s: ["dispatch everything"],
    # (a compiled core gives the kernel plain tuples, in its C calls only: a scheduler's
    # Python never does)
    "a dispatch as a plain tuple": lambda r, now, s: [(1, MODEL, (r,), ((0, W0, 0.0, (0, NB)),))],
}


class Broken(BaseScheduler):
    """Holds the first request until the second arrives, then breaks one rule."""

    def __init__(self, rule):
        super().__init__()
        self.rule = rule
        self.extra = None

    def on_arrival(self, r, now):
        if self.extra is None:
            self.extra = r
            return []
        first, self.extra = self.extra, r
        return BROKEN[self.rule](first, now, self)


def _trace():
    import numpy as np

    st = Stream(MODEL, MODEL, 1.0)
    return Trace(np.array([0.5, 1.0]), np.array([0, 0], dtype=np.int32), (st,), 2.0)


def _in_sim(rule):
    sim = Simulator(
        SETUP.cluster, SETUP.latency, SETUP.plan, SETUP.placement, Broken(rule), _trace(),
        SimConfig(),
    )  # fmt: skip
    with pytest.raises(ProtocolError) as e:
        sim.run()
    return str(e.value)


def _in_runtime(rule):
    clock = VirtualClock()
    view = ClusterView.build(SETUP.cluster, SETUP.latency, SETUP.placement)
    eng = RuntimeEngine(view, SETUP.plan, Broken(rule), ModelledExecutor(), clock)
    eng.start()
    for r in _trace().requests():
        clock.at(r.arrival_s, lambda r=r: eng.submit(r))
    with pytest.raises(ProtocolError) as e:
        clock.run()
    return str(e.value)


@pytest.mark.parametrize("rule", sorted(BROKEN))
def test_a_broken_rule_fails_alike_in_both_engines(rule):
    sim_msg = _in_sim(rule)
    assert sim_msg == _in_runtime(rule)
    assert sim_msg  # a message that says what broke


def test_a_correct_scheduler_passes_the_same_checks():
    """The checks reject only what breaks a rule: the same dispatch, done right, serves."""

    class Fine(Broken):
        def on_arrival(self, r, now):
            return [Dispatch(r.id + 1, MODEL, (r,), _route((W0, (0, 2)), (W1, (2, NB))))]

    res = Simulator(
        SETUP.cluster, SETUP.latency, SETUP.plan, SETUP.placement, Fine(None), _trace(),
        SimConfig(),
    ).run()  # fmt: skip
    assert res.outcome.tolist() == [1, 1]  # ok, ok


class DropsFirst(Broken):
    """Drops the first request, with figures, when the second arrives."""

    def on_arrival(self, r, now):
        if self.extra is None:
            self.extra = r
            return []
        return [Drop((self.extra,), "deadline", (0.25, 2))]


class _Reasons(Observer):
    def __init__(self):
        self.reasons = {}

    def ended(self, requests, outcomes, reason, now, outputs):
        for r in requests:
            self.reasons[r.id] = reason


def test_a_drop_names_its_kind_and_serving_says_what_happened_with_figures():
    """The simulator records the kind; serving tells the client and the log what
    happened, with the scheduler's figures; a reason outside the closed set is refused."""
    sim = Simulator(SETUP.cluster, SETUP.latency, SETUP.plan, SETUP.placement,
                    DropsFirst(None), _trace(), SimConfig())  # fmt: skip
    res = sim.run()
    # (the second, which it never lets go of, is dropped at its deadline by the kernel)
    assert [res.reasons[i] for i in res.reason.tolist()] == ["deadline", "deadline"]
    clock, seen = VirtualClock(), _Reasons()
    view = ClusterView.build(SETUP.cluster, SETUP.latency, SETUP.placement)
    eng = RuntimeEngine(view, SETUP.plan, DropsFirst(None), ModelledExecutor(), clock)
    eng.kernel.observer = seen
    eng.start()
    for r in _trace().requests():
        clock.at(r.arrival_s, lambda r=r: eng.submit(r))
    clock.run()
    eng.close()
    assert seen.reasons[0] == (
        "deadline: after 500.0 ms queued, 500.0 ms left of its 1000.0 ms SLO; it needs at "
        "least 250.0 ms to finish (2 requests of its model queued)"
    )
    assert seen.reasons[1] == (
        "deadline: after 1000.0 ms queued, 0.0 ms left of its 1000.0 ms SLO (0 requests of "
        "its model queued)"
    )
    assert "expected one of deadline, rows" in _in_sim("a drop for a reason of its own")


@pytest.mark.parametrize(
    "drop", [("felt like it", ()), ("deadline", ("soon",))], ids=["reason", "figures"]
)
def test_serving_refuses_a_bad_drop_and_its_requests_end_failed_not_lost(drop):
    """Serving contains a scheduler's bad drop (an unknown reason, figures that are not
    numbers): its requests end, failed with the scheduler's error; none stays held."""
    reason, figures = drop

    class BadDrop(Broken):
        def on_arrival(self, r, now):
            return [Drop((r,), reason, figures)]

    clock, seen = VirtualClock(), _Reasons()
    view = ClusterView.build(SETUP.cluster, SETUP.latency, SETUP.placement)
    eng = RuntimeEngine(view, SETUP.plan, BadDrop(None), ModelledExecutor(), clock, strict=False)
    eng.kernel.observer = seen
    eng.start()
    for r in _trace().requests():
        clock.at(r.arrival_s, lambda r=r: eng.submit(r))
    clock.run()
    assert sorted(seen.reasons) == [0, 1] and not eng.kernel.held
    assert all(why.startswith("scheduler_error: ") for why in seen.reasons.values())


def test_a_planned_start_that_is_not_a_number_is_named():
    """A route step's ``planned_start_s`` orders its worker's queue (a keyed heap): one that
    is not a number is refused at the dispatch, naming the step and the value."""
    msg = _in_sim("planned start not a number")
    assert "step 0's planned_start_s must be a number of seconds, not None" in msg
