"""``Load(..., wait=True)`` (``scheduling.protocol`` rule 8): a load with no room beside
what its worker holds waits for an eviction, the stage that needs it waits too and then
runs each block as it arrives; a plain ``Load`` of the same blocks is its last word, and
a load that fails takes the stages waiting for it along (they never hang)."""

import numpy as np

from hetserve.core.outcome import FAILED, OK
from hetserve.core.requests import Stream
from hetserve.engine.setup import build_setup
from hetserve.scheduling import BaseScheduler, Dispatch, Evict, Load, RouteStep
from hetserve.sim.engine import SimConfig, Simulator
from hetserve.workload.trace import Trace

SETUP = build_setup("hc1-s", ["resnet50", "efficientnet-b0"])
A, B = "resnet50", "efficientnet-b0"
NA, NB = SETUP.latency.num_blocks(A), SETUP.latency.num_blocks(B)
W, W2 = SETUP.placement.workers[0].id, SETUP.placement.workers[1].id  # both hold both


class Script(BaseScheduler):
    """First request (efficientnet-b0): its blocks evicted from ``W`` and loaded again
    with ``wait`` (``W``'s memory made too small for them beside resnet50's), and it
    dispatched there at once; second request (resnet50): served on ``W2``, and ``then``
    (an eviction of resnet50 on ``W``, or a plain load)."""

    def __init__(self, then):  # type: ignore[no-untyped-def]
        super().__init__()
        self.then = then
        self.loads = []

    def on_arrival(self, r, now):  # type: ignore[no-untyped-def]
        if r.model == B:
            route = (RouteStep(0, W, now, (0, NB)),)
            return [Evict(W, B, (0, NB)), Load(W, B, (0, NB), wait=True),
                    Dispatch(self.new_batch_id(), B, (r,), route)]  # fmt: skip
        route = (RouteStep(0, W2, now, (0, NA)),)
        return [Dispatch(self.new_batch_id(), A, (r,), route), *self.then(r, now)]

    def on_stage_done(self, report, now):  # type: ignore[no-untyped-def]
        if report.kind == "load":
            self.loads.append((report.completed, report.reason))
        return []


def _run(then):  # type: ignore[no-untyped-def]
    trace = Trace(np.array([0.1, 0.2]), np.array([1, 0], dtype=np.int32),
                  (Stream(A, A, 10.0), Stream(B, B, 10.0)), 5.0)  # fmt: skip
    sched = Script(then)
    sim = Simulator(SETUP.cluster, SETUP.latency, SETUP.plan, SETUP.placement, sched, trace,
                    SimConfig())  # fmt: skip
    ex = sim.executor
    warm = ex.warm_start

    def shrink() -> None:  # after the warm start: room for A, not for B beside it
        warm()
        full = {m: ex.residency.bytes_of(m, (1 << n) - 1) for m, n in ((A, NA), (B, NB))}
        ex.held[W].mem_cap = full[A] + full[B] / 2

    ex.warm_start = shrink
    res = sim.run()
    return res, sched, sim


def test_a_waiting_load_starts_at_the_eviction_and_its_stage_streams():
    res, sched, sim = _run(lambda r, now: [Evict(W, A, (0, NA))])
    assert res.outcome.tolist() == [OK, OK], [res.reasons[i] for i in set(res.reason)]
    assert sched.loads == [(True, "")]
    h = sim.executor.held[W]
    assert h.resident.get(B) == (1 << NB) - 1 and not h.resident.get(A) and not h.waits
    # it started at the eviction (0.2 s), not before, and finished after its load began
    assert res.start_s[0] >= 0.2 - 1e-9 and res.finish_s[0] > 0.2


def test_a_plain_load_is_the_last_word_and_a_failed_load_fails_its_waiting_stages():
    res, sched, sim = _run(lambda r, now: [Load(W, B, (0, NB))])
    assert res.outcome.tolist() == [FAILED, OK]
    assert "its weights did not load: out of memory" in res.reasons[res.reason[0]]
    assert sched.loads == [(False, "out of memory")]  # one report, for the waiting load
    h = sim.executor.held[W]
    assert not h.waits and not h.loading.get(B)
