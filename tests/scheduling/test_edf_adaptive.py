"""edf-adaptive driven through the protocol with a fake clock (no engine).

Latency = 1 ms x batch + 2 ms on the single worker."""

from unittest.mock import ANY

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.core.requests import Request
from hetserve.scheduling import ClusterView, Dispatch, Drop, SetTimer, StageReport, make_scheduler
from tests.helpers import linear_setup


def _start(max_batch=8, n_gpus=1):
    s = linear_setup(n_gpus=n_gpus, alpha_s=0.001, beta_s=0.002, slo_s=0.010, max_batch=max_batch)
    sched = make_scheduler("edf-adaptive", {"max_batch": max_batch})
    sched.start(ClusterView.build(s.cluster, s.latency, s.placement), s.plan, 0.0)
    return sched


def _req(i, t, slo=0.010):
    return Request(i, "m", "s", t, t + slo)


def test_waits_while_a_larger_batch_is_feasible():
    s = _start()
    (timer,) = s.on_arrival(_req(0, 0.0), 0.0)
    # b_max = 8 (2 + 8 = 10 ms <= 10 ms); one request waits until 10 - 3 = 7 ms
    assert isinstance(timer, SetTimer) and timer.at_s == pytest.approx(0.007)
    (d,) = s.on_timer(timer.token, timer.at_s)
    assert isinstance(d, Dispatch) and [r.id for r in d.requests] == [0]


def test_dispatches_largest_feasible_batch():
    s = _start()
    acts = []
    for i in range(7):
        acts = s.on_arrival(_req(i, 0.0), 0.0)
    assert all(isinstance(a, SetTimer) for a in acts)
    (d,) = s.on_arrival(_req(7, 0.0), 0.0)
    assert len(d.requests) == 8


def test_batch_shrinks_as_the_deadline_nears():
    s = _start()
    for i in range(8):
        if i < 7:
            s.on_arrival(_req(i, 0.0), 0.0)
    # at t = 5 ms only 10 - 5 = 5 ms remain: b_max = 3
    (d, *_rest) = s.on_arrival(_req(7, 0.005, slo=0.020), 0.005)
    assert len(d.requests) == 3 and [r.id for r in d.requests] == [0, 1, 2]


def test_drops_head_that_cannot_make_it():
    s = _start()
    acts = s.on_arrival(_req(0, 0.0, slo=0.0025), 0.0)  # batch 1 takes 3 ms
    assert acts[0] == Drop((_req(0, 0.0, slo=0.0025),), "deadline", ANY)


def test_edf_order_across_streams():
    s = _start(max_batch=2)
    s.on_arrival(_req(0, 0.0, slo=0.050), 0.0)
    (d,) = s.on_arrival(_req(1, 0.001, slo=0.005), 0.001)
    # b_max for head (deadline 6 ms): 2 + 2 = 4 ms <= 5 ms -> 2: both go, most urgent first
    assert [r.id for r in d.requests] == [1, 0]


def test_stale_timers_are_ignored():
    s = _start()
    (t1,) = s.on_arrival(_req(0, 0.0), 0.0)
    (t2,) = s.on_arrival(_req(1, 0.0), 0.0)
    assert t2.at_s < t1.at_s
    assert s.on_timer(t1.token, t1.at_s) == []
    (d,) = s.on_timer(t2.token, t2.at_s)
    assert len(d.requests) == 2


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 0.02), st.floats(0.001, 0.03)), min_size=1, max_size=30))
def test_every_dispatch_meets_the_head_deadline(arrivals):
    """Property: a dispatched batch always completes by every member's deadline, and every
    request is dispatched or dropped exactly once once the queue drains."""
    s = _start(max_batch=8, n_gpus=2)
    reqs = sorted(((t, slo) for t, slo in arrivals), key=lambda x: x[0])
    seen, pending_timers, busy_until = {}, [], {}

    def handle(acts, now):
        for a in acts:
            if isinstance(a, Dispatch):
                lat = 0.002 + 0.001 * len(a.requests)
                assert all(now + lat <= r.deadline_s + 1e-12 for r in a.requests)
                for r in a.requests:
                    assert r.id not in seen
                    seen[r.id] = "dispatched"
                w = a.route[0].worker
                assert busy_until.get(w, 0.0) <= now + 1e-12
                busy_until[w] = now + lat
                pending_timers.append((now + lat, "done", a))
            elif isinstance(a, Drop):
                for r in a.requests:
                    assert r.id not in seen
                    seen[r.id] = "dropped"
            elif isinstance(a, SetTimer):
                pending_timers.append((a.at_s, "timer", a.token))

    events = [(t, "arr", _req(i, t, slo)) for i, (t, slo) in enumerate(reqs)]
    while events or pending_timers:
        pending_timers.sort(key=lambda x: x[0])
        events.sort(key=lambda x: x[0])
        if pending_timers and (not events or pending_timers[0][0] <= events[0][0]):
            t, kind, obj = pending_timers.pop(0)
            if kind == "timer":
                handle(s.on_timer(obj, t), t)
            else:
                st = obj.route[0]
                rep = StageReport(
                    "stage",
                    obj.batch_id,
                    "m",
                    0,
                    st.worker,
                    t,
                    t,
                    obj.requests,
                    True,
                    True,
                    "",
                    st.blocks,
                    1,
                )
                handle(s.on_stage_done(rep, t), t)
        else:
            t, _, r = events.pop(0)
            handle(s.on_arrival(r, t), t)
    assert len(seen) == len(reqs)
