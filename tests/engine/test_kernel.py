"""The engine kernel, driven by both engines (issue 39's proof): with random arrivals,
executors that raise or fail at random points, a lost worker, preemptions and evictions,
clients that cancel at random times (issue 44), every request ends exactly once with a
reason, nothing is left held, parked or in a batch
at the end, and the simulator and the runtime on a virtual clock end every request the
same way."""

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetserve.core.layerlatency import LayerLatency
from hetserve.core.outcome import (
    CANCELLED,
    DROP_KINDS,
    DROPPED,
    FAILED,
    LATE,
    OK,
    drop_kind,
    failure_kind,
    finished,
)
from hetserve.core.plan import bind
from hetserve.core.presets import preset
from hetserve.core.requests import Stream
from hetserve.engine.clock import VirtualClock
from hetserve.engine.executor import Observer
from hetserve.engine.modelled import ModelledExecutor
from hetserve.engine.rules import ProtocolError
from hetserve.engine.setup import Setup, build_setup
from hetserve.experiments.shepherd.scenarios import group_setup
from hetserve.planning.deepplan import plan_cold_starts
from hetserve.runtime.engine import RuntimeEngine
from hetserve.scheduling import (
    RETURNED,
    BaseScheduler,
    ClusterView,
    Dispatch,
    Evict,
    RouteStep,
    make_scheduler,
)
from hetserve.sim.engine import RUN_ENDED, UNSERVED, SimConfig, Simulator
from hetserve.workload.arrivals import Poisson
from hetserve.workload.trace import generate


class Flaky(ModelledExecutor):
    """The modelled executor, with faults drawn from its own seeded stream in the order
    the kernel starts stages (the same in both drivers): ``start`` raises, a stage fails
    at its end instead of completing, or cutting the output raises."""

    outputs = True  # so the kernel cuts outputs (``split``), where a fault can strike

    def __init__(self, seed, p_raise, p_fail, p_split, warm):
        super().__init__(warm=warm)
        self.faults = random.Random(seed)
        self.p = (p_raise, p_fail, p_split)

    def start(self, task, now):
        u = self.faults.random()
        if u < self.p[0]:
            raise RuntimeError("injected at start")
        super().start(task, now)
        if task.run is not None and u < self.p[0] + self.p[1]:
            task.version += 1  # its end becomes a failure
            end = now + task.run[0][-1]
            self.kernel.clock.call_at(end, self.kernel.stage_failed, task, "failed: injected")

    def split(self, task, output):
        if self.faults.random() < self.p[2]:
            raise ValueError("injected in split")
        return [None] * len(task.batch.requests)


class Endings(Observer):
    """Every ending, counted per request; and when each request last came back to the
    scheduler from a batch (returned, or parked by an open route)."""

    def __init__(self):
        self.ends = {}
        self.back = {}

    def reported(self, rep):
        if rep.kind == "stage" and (
            (not rep.completed and rep.reason in RETURNED) or rep.reason == "parked"
        ):
            for r in rep.requests:
                self.back[r.id] = rep.end_s

    def ended(self, requests, outcomes, reason, now, outputs):
        if outcomes is None:
            outcomes = [finished(now, r.deadline_s) for r in requests]
        for r, o in zip(requests, outcomes, strict=True):
            assert r.id not in self.ends, f"request {r.id} ended twice"
            assert o in (OK, LATE) or reason, f"request {r.id}: outcome {o} without a reason"
            self.ends[r.id] = (o, reason, now)


# ------------------------------------------------------------------ setups
def _group(scheduler):
    models = ["resnet18", "resnet50"]
    return group_setup(3, dict.fromkeys(models, 0.1)), scheduler, {}, True


def _pools(scheduler):
    from hetserve.core.plan import ModelPlan, Pipeline, Plan, Stage

    base = build_setup("hc1-s", ["resnet50"])
    stages = (Stage((0, 5), "P4", 1, 4), Stage((5, 10), "L4", 1, 2))
    plan = Plan({"resnet50": ModelPlan(base.slos_s["resnet50"], 1.0,
                                       (Pipeline(stages, 4, 0.0, 600.0),))})  # fmt: skip
    s = Setup(base.cluster, base.latency, ["resnet50"], base.slos_s, plan,
              bind(plan, base.cluster))  # fmt: skip
    return s, scheduler, {}, True


def _cold(_):
    c = preset("p3-8xlarge")
    names = [f"bert-base@{i}" for i in range(60)]
    plan, _ = plan_cold_starts(c, names, None, "pipeswitch", dict.fromkeys(names, 0.15))
    s = Setup(c, LayerLatency(plan.load_plans), names, dict.fromkeys(names, 0.15), plan,
              bind(plan, c))  # fmt: skip
    return s, "coldstart", {"memory_reserve_gb": 12.0}, False


SETUPS = {
    "flex (preemptions)": lambda: _group("flex"),
    "edf-adaptive": lambda: _group("edf-adaptive"),
    "reservation (two stages)": lambda: _pools("reservation"),
    "reactive (open routes)": lambda: _pools("reactive"),
    "coldstart (loads, evictions)": lambda: _cold(None),
}
# a load factor of 1 is about the setup's capacity
RATES = {
    "flex (preemptions)": 6000.0,
    "edf-adaptive": 6000.0,
    "reservation (two stages)": 600.0,
    "reactive (open routes)": 600.0,
    "coldstart (loads, evictions)": 60.0,
}
_BUILT = {}


def _setup(name):
    if name not in _BUILT:
        _BUILT[name] = SETUPS[name]()
    return _BUILT[name]


def _trace(setup, rate_rps, seed):
    names = setup.models
    streams = [Stream(m, m, setup.slos_s[m], Poisson(rate_rps / len(names))) for m in names]
    return generate(streams, 0.6, seed)


def _cancels(trace, share, seed):
    """Clients that go away: ``share`` of the requests, each at a random time between
    its arrival and 1.5 SLOs after it (so some while queued, some in a batch, some
    after their end, which changes nothing)."""
    rng = random.Random(seed)
    out = []
    for r in trace.requests():
        if rng.random() < share:
            out.append((r.arrival_s + rng.uniform(0.0, 1.5) * r.slo_s, r.id))
    return out


def _cancel(kernel):
    return lambda rid, _, now: kernel.cancel(rid, now, "cancelled: the client went away")


def _in_sim(setup, sched, params, warm, trace, flaky, loss, cancels=()):
    obs = Endings()
    sim = Simulator(setup.cluster, setup.latency, setup.plan, setup.placement,
                    make_scheduler(sched, params), trace, SimConfig(warm=warm),
                    executor=Flaky(*flaky, warm=False))  # fmt: skip
    sim.kernel.observer = _Both(sim.recorder, obs)
    sim.kernel._reported = True  # (the observer is swapped after the kernel was made)
    if loss is not None:
        sim.fail_worker(*loss)
    for at, rid in cancels:
        sim.clock.call_at(at, _cancel(sim.kernel), rid)
    res = sim.run()
    return sim.kernel, obs.ends, res, obs.back


def _in_runtime(setup, sched, params, warm, trace, flaky, loss, cancels=()):
    obs = Endings()
    clock = VirtualClock()
    view = ClusterView.build(setup.cluster, setup.latency, setup.placement)
    eng = RuntimeEngine(view, setup.plan, make_scheduler(sched, params), Flaky(*flaky, warm=warm),
                        clock)  # fmt: skip
    eng.kernel.observer = obs
    eng.start()
    for r in trace.requests():
        clock.at(r.arrival_s, lambda r=r: eng.submit(r))
    if loss is not None:
        clock.at(loss[1], lambda: eng.worker_lost(loss[0]))
    for at, rid in cancels:
        clock.call_at(at, _cancel(eng.kernel), rid)
    horizon = trace.duration_s + 10 * max(setup.slos_s.values()) + 1.0
    clock.run(until=horizon)
    eng.kernel.close(clock.now(), RUN_ENDED, UNSERVED)
    return eng.kernel, obs.ends


class _Both(Observer):
    def __init__(self, *obs):
        self.obs = obs

    def dispatched(self, *a):
        for o in self.obs:
            o.dispatched(*a)

    def stage_ended(self, *a):
        for o in self.obs:
            o.stage_ended(*a)

    def ended(self, *a):
        for o in self.obs:
            o.ended(*a)

    def reported(self, *a):
        for o in self.obs:
            o.reported(*a)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(SETUPS)),
    seed=st.integers(0, 10_000),
    load=st.floats(0.3, 2.0),
    p_raise=st.sampled_from([0.0, 0.05, 0.2]),
    p_fail=st.sampled_from([0.0, 0.05, 0.2]),
    p_split=st.sampled_from([0.0, 0.05]),
    loss_at=st.one_of(st.none(), st.floats(0.0, 0.6)),
    cancel=st.sampled_from([0.0, 0.0, 0.1, 0.5]),
)
def test_every_request_ends_exactly_once_alike_in_both_drivers(
    name, seed, load, p_raise, p_fail, p_split, loss_at, cancel
):
    setup, sched, params, warm = _setup(name)
    rate = load * RATES[name]
    trace = _trace(setup, rate, seed)
    flaky = (seed, p_raise, p_fail, p_split)
    loss = None if loss_at is None else (setup.placement.workers[seed % 3].id, loss_at)
    cancels = _cancels(trace, cancel, seed)
    k_sim, sim_ends, res, back = _in_sim(setup, sched, params, warm, trace, flaky, loss, cancels)
    k_rt, rt_ends = _in_runtime(setup, sched, params, warm, trace, flaky, loss, cancels)
    n = len(trace)
    # exactly once, with a reason where it did not finish
    assert sorted(sim_ends) == list(range(n)) and sorted(rt_ends) == list(range(n))
    # nothing left behind
    for k in (k_sim, k_rt):
        assert not k.held and not k.parked and not k.batches and not k.payloads and not k.gone
        assert all(w.running is None and not w.ready and not w.waiting for w in k.workers.values())
    assert not k_rt.open

    # the two drivers agree on every ending, and on when it happened (a drop: on its
    # kind; the runtime, which answers clients, says more: core.outcome.drop_text)
    def told(o, why, t):
        return (o, drop_kind(why) if o == DROPPED else why, t)

    assert {i: told(*e) for i, e in rt_ends.items()} == {i: told(*e) for i, e in sim_ends.items()}
    dropped = [why for o, why, _ in rt_ends.values() if o == DROPPED]
    assert all(drop_kind(why) in DROP_KINDS for why in dropped)
    failed = [why for o, why, _ in sim_ends.values() if o == FAILED]
    assert all(failure_kind(why) for why in failed), failed  # (of the closed set)
    # a request held by the scheduler at its deadline ends then, never later: a deadline
    # drop comes by its deadline, or when it came back from a batch after it
    deadlines = trace.deadlines_s()
    held_too_long = [
        (i, t) for i, (o, why, t) in sim_ends.items()
        if o == DROPPED and drop_kind(why) == "deadline"
        and t > max(deadlines[i], back.get(i, 0.0)) + 1e-9
    ]  # fmt: skip
    assert not held_too_long
    assert np.asarray([sim_ends[i][0] for i in range(n)]).tolist() == res.outcome.tolist()


def test_the_faults_do_strike_and_every_kind_of_ending_occurs():
    """The property above is not vacuous: in one of its runs, requests end ok, late,
    dropped and failed, failures by each injected fault and by the lost worker."""
    setup, sched, params, warm = _setup("flex (preemptions)")
    trace = _trace(setup, 12000.0, 3)
    loss = (setup.placement.workers[0].id, 0.3)
    _, ends, _, _ = _in_sim(setup, sched, params, warm, trace, (3, 0.1, 0.1, 0.1), loss)
    outcomes = {o for o, _, _ in ends.values()}
    assert {OK, DROPPED, FAILED} <= outcomes
    reasons = {why for o, why, _ in ends.values() if o == FAILED}
    for fault in ("injected at start", "failed: injected", "injected in split"):
        assert any(fault in why for why in reasons), (fault, reasons)


def test_an_eviction_of_a_running_model_is_refused_alike():
    """Rule 8: evicting the blocks a running stage uses is a scheduler's error, the same
    in both drivers; serving (``strict=False``) refuses it loudly and goes on."""
    setup = build_setup("hc1-s", ["resnet50"])
    w = setup.placement.workers[0].id
    nb = setup.latency.num_blocks("resnet50")

    class EvictsRunning(BaseScheduler):
        def on_arrival(self, r, now):
            return [Dispatch(r.id + 1, "resnet50", (r,), (RouteStep(0, w, now, (0, nb)),)),
                    Evict(w, "resnet50", (0, nb))]  # fmt: skip

    trace = _trace(setup, 5.0, 1)
    with pytest.raises(ProtocolError, match="while batch 1 runs them there"):
        Simulator(setup.cluster, setup.latency, setup.plan, setup.placement, EvictsRunning(),
                  trace).run()  # fmt: skip
    clock = VirtualClock()
    view = ClusterView.build(setup.cluster, setup.latency, setup.placement)
    ends = {}
    eng = RuntimeEngine(view, setup.plan, EvictsRunning(), ModelledExecutor(), clock,
                        lambda r, o, why, out: ends.setdefault(r.id, o))  # fmt: skip
    eng.start()
    first = next(trace.requests())
    clock.at(first.arrival_s, lambda: eng.submit(first))
    with pytest.raises(ProtocolError, match="while batch 1 runs them there"):
        clock.run()
    # serving: refused, logged, and the batch runs to its end on weights still there
    clock = VirtualClock()
    ends = {}
    eng = RuntimeEngine(view, setup.plan, EvictsRunning(), ModelledExecutor(), clock,
                        lambda r, o, why, out: ends.setdefault(r.id, o), strict=False)  # fmt: skip
    eng.start()
    clock.at(first.arrival_s, lambda: eng.submit(first))
    clock.run()
    assert ends == {first.id: OK}


@pytest.mark.parametrize(
    "sched, params",
    [
        ("edf-adaptive", {"max_batch": 32}),
        ("fixed-batch", {"max_batch": 32, "max_queue_delay_s": 0.0}),
        ("flex", {}),
        ("flex-np", {}),
        ("clockwork", {}),
        ("reservation", {}),
        ("reactive", {}),
    ],
)
def test_a_request_of_many_rows_is_one_execution(sched, params):
    """A request is what the client sent (issue 39): its rows go to the GPU together. A
    2-row and a 32-row request at low load are each one execution per stage (one batch of
    2 and one of 32 rows), in both drivers' kernel, and end once each."""
    from hetserve.core.requests import Request

    setup, *_ = _setup("reservation (two stages)") if sched in ("reservation", "reactive") \
        else _setup("edf-adaptive")  # fmt: skip
    model = setup.models[0]
    slo = 30.0
    reqs = [Request(0, model, "s", 0.1, 0.1 + slo, None, 2),
            Request(1, model, "s", 5.0, 5.0 + slo, None, 32)]  # fmt: skip
    clock = VirtualClock()
    view = ClusterView.build(setup.cluster, setup.latency, setup.placement)
    eng = RuntimeEngine(view, setup.plan, make_scheduler(sched, params), ModelledExecutor(), clock)
    obs = Endings()
    seen = []

    class Log(Observer):
        def dispatched(self, batch, first_block, now):
            seen.append((tuple(r.id for r in batch.requests), batch.rows))

        def ended(self, *a):
            obs.ended(*a)

    eng.kernel.observer = Log()
    eng.start()
    for r in reqs:
        clock.at(r.arrival_s, lambda r=r: eng.submit(r))
    clock.run(until=100.0)
    assert {i: e[:2] for i, e in obs.ends.items()} == {0: (OK, ""), 1: (OK, "")}
    stages = len(setup.plan.models[model].pipelines[0].stages) if sched == "reactive" else 1
    assert seen == [((0,), 2)] * stages + [((1,), 32)] * stages


class _Reports(Observer):
    def __init__(self):
        self.reasons = []

    def reported(self, rep):
        self.reasons.append(rep.reason)


def test_cancellations_strike_queued_and_dispatched_requests_and_empty_batches_stop():
    """The cancellations above are not vacuous either: in one run, requests are cancelled
    while queued and after their dispatch, batches whose every request was cancelled
    stop without running their next stage (``withdrawn``), and the rest are served."""
    from hetserve.engine.rules import WITHDRAWN

    setup, sched, params, warm = _setup("reservation (two stages)")
    trace = _trace(setup, 900.0, 5)
    cancels = _cancels(trace, 0.6, 5)
    sim = Simulator(setup.cluster, setup.latency, setup.plan, setup.placement,
                    make_scheduler(sched, params), trace, SimConfig(warm=warm))  # fmt: skip
    reports = _Reports()
    sim.kernel.observer = _Both(sim.recorder, reports)
    sim.kernel._reported = True
    for at, rid in cancels:
        sim.clock.call_at(at, _cancel(sim.kernel), rid)
    res = sim.run()
    cancelled = res.outcome == CANCELLED
    assert 0 < cancelled.sum() < len(cancels)  # (some ended before their client left)
    dispatched = ~np.isnan(res.dispatch_s)
    assert (cancelled & dispatched).any() and (cancelled & ~dispatched).any()
    assert WITHDRAWN in reports.reasons
    assert (res.outcome == OK).any()
