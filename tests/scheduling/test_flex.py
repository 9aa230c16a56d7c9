"""flex, flex-np, clockwork: unit tests with a fake clock, and simulations."""

import itertools
from unittest.mock import ANY

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.core.errors import HetserveError
from hetserve.core.outcome import LATE, OK, PENDING
from hetserve.core.requests import Request, Stream
from hetserve.experiments.setup import simulate
from hetserve.experiments.shepherd.scenarios import group_setup, two_stream_scenario
from hetserve.scheduling import (
    ClusterView,
    Dispatch,
    Drop,
    Preempt,
    RouteStep,
    StageReport,
    make_scheduler,
)
from hetserve.sim.engine import SimConfig
from hetserve.workload.trace import Trace

# resnet18: 0.22 ms x b + 3.74 ms; rs269: 4.37 ms x b + 74.2 ms (Shepherd Table 4, V100)


def _started(name, slos, n_gpus=1, **params):
    s = group_setup(n_gpus, slos)
    sched = make_scheduler(name, params)
    sched.start(ClusterView.build(s.cluster, s.latency, s.placement), s.plan, 0.0)
    return s, sched


def _req(i, model, t, slo):
    return Request(i, model, "s", t, t + slo)


def _done(d, now, completed=True, reason=""):
    return StageReport(
        "stage", d.batch_id, d.model, 0, d.route[0].worker, 0.0, now, d.requests, completed,
        completed, reason,
    )  # fmt: skip


def test_flex_runs_the_largest_batch_across_models_and_drops_the_hopeless():
    _, sched = _started("flex-np", {"resnet18": 0.1, "rs269": 0.2})
    (w,) = sched.workers
    (d0,) = sched.on_arrival(_req(0, "rs269", 0.0, 0.2), 0.0)  # idle: runs at once
    assert d0.route == (RouteStep(0, w, 0.0, (0, 128)),)
    # while it runs: 3 rs269 requests, 5 resnet18 requests, one that cannot make it
    for i in range(1, 4):
        assert sched.on_arrival(_req(i, "rs269", 0.001, 0.2), 0.001) == []
    for i in range(4, 9):
        assert sched.on_arrival(_req(i, "resnet18", 0.002, 0.1), 0.002) == []
    assert sched.on_arrival(_req(9, "resnet18", 0.0, 0.0801), 0.003) == []
    out = sched.on_stage_done(_done(d0, 0.0786), 0.0786)
    # request 9 has 1.5 ms left, less than resnet18's 3.96 ms at batch 1
    assert out[0] == Drop((_req(9, "resnet18", 0.0, 0.0801),), "deadline", ANY)
    (d1,) = out[1:]
    assert d1.model == "resnet18" and len(d1.requests) == 5  # 5 > 3 (largest first)
    # then rs269's 3 requests, together
    (d2,) = sched.on_stage_done(_done(d1, 0.0836), 0.0836)
    assert d2.model == "rs269" and len(d2.requests) == 3  # 74.2 + 3 x 4.37 ms fits


def test_deadline_priority_picks_the_most_urgent_model():
    _, sched = _started("flex-np", {"resnet18": 0.1, "rs269": 0.2}, priority="deadline")
    (d0,) = sched.on_arrival(_req(0, "resnet18", 0.0, 0.1), 0.0)
    sched.on_arrival(_req(1, "rs269", 0.0, 0.15), 0.0)  # deadline 0.15
    for i in range(2, 7):
        sched.on_arrival(_req(i, "resnet18", 0.0, 0.2), 0.0)  # deadline 0.2, more of them
    (d1,) = sched.on_stage_done(_done(d0, 0.004), 0.004)
    assert d1.model == "rs269"


@pytest.mark.parametrize("lam", [3.03, 2.0])
def test_preemption_rule_and_requeue(lam):
    _, sched = _started("flex", {"resnet18": 0.1, "rs269": 0.1}, lambda_=lam)
    (w,) = sched.workers
    (d0,) = sched.on_arrival(_req(0, "rs269", 0.0, 0.1), 0.0)
    out = []
    k = 0
    while not out:  # resnet18 requests at one instant until the candidate is lam x 1
        k += 1
        out = sched.on_arrival(_req(k, "resnet18", 0.005, 0.1), 0.005)
    assert k == int(np.ceil(lam))
    assert out[0] == Preempt(w, d0.batch_id)
    assert isinstance(out[1], Dispatch) and len(out[1].requests) == k
    assert sched.preemptions == 1
    # the preempted rs269 request cannot make it any more (needs 78.6 ms, 90 ms left at
    # 0.010 would do; at 0.030, 70 ms left, it cannot): dropped with the reason
    back = sched.on_stage_done(_done(d0, 0.030, completed=False, reason="preempted"), 0.030)
    assert back == [Drop(d0.requests, "preempted", ANY)]
    # the worker still runs the resnet18 batch: the report of the old batch freed nothing
    assert sched.workers[w].bid == out[1].batch_id


def test_preempted_requests_that_can_make_it_return_as_arrivals():
    _, sched = _started("flex", {"resnet18": 0.1, "rs269": 0.2})
    (d0,) = sched.on_arrival(_req(0, "rs269", 0.0, 0.2), 0.0)
    outs = [sched.on_arrival(_req(k, "resnet18", 0.001, 0.1), 0.001) for k in (1, 2, 3, 4)]
    assert outs[:3] == [[], [], []]  # 3 < 3.03 x 1
    pre, run = outs[3]  # 4 >= 3.03: preempt
    assert isinstance(pre, Preempt) and len(run.requests) == 4
    back = sched.on_stage_done(_done(d0, 0.002, completed=False, reason="preempted"), 0.002)
    assert back == []  # requeued: the worker is busy with the resnet18 batch
    (d2,) = sched.on_stage_done(_done(run, 0.01), 0.01)
    assert d2.requests == d0.requests  # served after all


def test_flex_np_and_clockwork_never_preempt():
    for name in ("flex-np", "clockwork"):
        _, sched = _started(name, {"resnet18": 0.1, "rs269": 0.1})
        sched.on_arrival(_req(0, "rs269", 0.0, 0.1), 0.0)
        outs = [sched.on_arrival(_req(k, "resnet18", 0.001, 0.1), 0.001) for k in range(1, 50)]
        assert all(o == [] for o in outs)


def test_clockwork_is_earliest_deadline_first():
    _, sched = _started("clockwork", {"resnet18": 0.1, "rs269": 0.2})
    (d0,) = sched.on_arrival(_req(0, "resnet18", 0.0, 0.1), 0.0)
    sched.on_arrival(_req(1, "rs269", 0.0, 0.15), 0.0)
    for i in range(2, 7):
        sched.on_arrival(_req(i, "resnet18", 0.0, 0.2), 0.0)
    (d1,) = sched.on_stage_done(_done(d0, 0.004), 0.004)
    assert d1.model == "rs269"  # the tightest request, though the other batch is larger


def test_parameters_are_checked():
    for name, params, msg in [
        ("flex", {"lambda_": 1.0}, "lambda_ must be a finite number > 1, got 1.0"),
        ("flex", {"priority": "x"}, "priority must be 'largest' or 'deadline', got 'x'"),
        ("clockwork", {"max_batch": 0}, "max_batch must be an integer >= 1, got 0"),
        ("flex-np", {"overhead_s": -1}, "overhead_s must be a finite number >= 0, got -1"),
        ("flex", {"lambda_": "x"}, "lambda_ must be a finite number > 1, got 'x'"),
        ("nexus", {"epoch_s": 0}, "epoch_s must be a finite number > 0, got 0"),
    ]:
        with pytest.raises(HetserveError, match=msg):
            make_scheduler(name, params)
    _, sched = _started("flex", {"resnet18": 0.1})
    with pytest.raises(HetserveError, match="no worker serves model 'bert'"):
        sched.on_arrival(_req(0, "bert", 0.0, 0.1), 0.0)


# ---------------------------------------------------------------- simulations


def _goodput(name, setup, trace, **cfg):
    res = simulate(setup, name, trace, None, SimConfig(**cfg))
    return res, int((res.outcome == OK).sum())


def test_two_stream_scenario_preemption_and_prioritisation():
    """Shepherd section 7.2 / Fig. 11a. SLO 90 ms: on the first burst, FLEX preempts the
    long rs269 batch and serves about 6x more (paper: 6.2x); without preemption the burst
    waits 79 ms. SLO 250 ms: preferring large batches alone is worth about 3.7x against
    earliest-deadline-first (paper: 3.7x)."""
    s, tr = two_stream_scenario(0.090, duration_s=0.12)
    flex, flex_np, cw = (_goodput(n, s, tr)[1] for n in ("flex", "flex-np", "clockwork"))
    assert flex >= 3 * flex_np and flex_np == cw
    s, tr = two_stream_scenario(0.250, duration_s=1.2)
    flex, flex_np, cw = (_goodput(n, s, tr)[1] for n in ("flex", "flex-np", "clockwork"))
    assert flex >= flex_np >= 3 * cw


def _trace(times, models, slo):
    order = np.argsort(times, kind="stable")
    names = sorted(set(models))
    streams = tuple(Stream(m, m, slo) for m in names)
    idx = np.array([names.index(m) for m in models], dtype=np.int32)
    return Trace(np.asarray(times)[order], idx[order], streams, float(max(times)) + 1e-9)


@settings(max_examples=20, deadline=None)
@given(
    st.sampled_from(["flex", "flex-np", "clockwork"]),
    st.integers(1, 3),
    st.lists(
        st.tuples(st.floats(0, 0.5), st.sampled_from(["resnet18", "resnet50", "rs269"])),
        min_size=1,
        max_size=300,
    ),
    st.floats(0.05, 0.3),
    st.sampled_from([0.0, 0.0, 0.1, 0.3]),
)
def test_invariants(name, n_gpus, arrivals, slo, overhead_ms):
    models = ["resnet18", "resnet50", "rs269"]
    s = group_setup(n_gpus, dict.fromkeys(models, slo))
    tr = _trace([t for t, _ in arrivals], [m for _, m in arrivals], slo)
    over = overhead_ms / 1e3
    res = simulate(s, name, tr, {"overhead_s": over}, SimConfig(seed=1, request_overhead_s=over))
    assert (res.outcome != PENDING).all()  # every request ends exactly once
    done = (res.outcome == OK) | (res.outcome == LATE)
    assert np.all(res.finish_s[done] >= tr.time_s[done])
    if name != "flex" or over == 0:
        # every batch is sized to make its deadline from when it can really start (for a
        # preempting batch: the next exit point; with an overhead in the first block the
        # exit points are no longer evenly spaced, FLEX's assumption)
        assert not (res.outcome == LATE).any()
    by_worker = {}
    for row in res.stage_rows:
        by_worker.setdefault(row[3], []).append((row[6], row[7]))
    for iv in by_worker.values():
        iv.sort()
        assert all(b[0] >= a[1] - 1e-12 for a, b in itertools.pairwise(iv))


def _flex_cores():
    from hetserve.scheduling import flex, flex_core

    return (flex_core, flex.core) if flex.COMPILED else (flex_core,)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(0.0005, 0.2), min_size=1, max_size=12),
    st.lists(st.floats(0.0005, 0.2), min_size=1, max_size=12),
    st.lists(st.tuples(st.floats(0.0, 0.3), st.integers(1, 3)), min_size=1, max_size=10),
    st.floats(0.0, 0.1),
    st.integers(0, 1),
)
def test_fit_reads_each_kind_s_table_as_a_search_of_it_would(a, b, reqs, now, which):
    """``fit`` (FLEX's batch size on a worker) searches the worker kind's table in C
    doubles (``ModelQueue.lat_c``); the answer is the largest batch whose latency meets
    the most urgent deadline, counted here from the tables as lists, capped by the rows
    waiting, 0 where the most urgent alone does not fit. Both builds; two kinds, a
    worker of each."""
    tables = [sorted(a), sorted(b)]
    for core in _flex_cores():
        q = core.ModelQueue("m", (0, 1))
        workers = {}
        for kind, wid in enumerate(("w0", "w1")):
            core.join(q, workers, wid, tables[kind], kind)
        for i, (slack, rows) in enumerate(reqs):
            q.push(Request(i, "m", "s", 0.0, now + slack, None, rows))
        w = workers[("w0", "w1")[which]]
        head_deadline, _, head = min((r.deadline_s, r.id, r) for r in (
            Request(i, "m", "s", 0.0, now + s, None, n) for i, (s, n) in enumerate(reqs)
        ))  # fmt: skip
        fits = sum(1 for t in tables[which] if t <= head_deadline - now + 1e-12)
        fits = min(fits, sum(n for _, n in reqs))
        want = fits if head.rows <= fits else 0
        assert core.fit(w, q, now) == want, core.__name__
