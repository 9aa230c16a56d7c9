"""A scheduler's compiled core as the kernel calls it (``scheduling/policy_core.py``): the
kernel takes the core only where the scheduler's arrivals and stage reports are that
core's own methods, calls its arrivals and completed stages' reports directly (no
``StageReport`` made), and the runs end exactly as through the protocol's calls."""

import hashlib

import numpy as np
import pytest

from hetserve.core.layerlatency import LayerLatency
from hetserve.core.outcome import OK
from hetserve.core.plan import ModelPlan, Pipeline, Plan, Stage, bind
from hetserve.core.presets import preset
from hetserve.core.requests import Stream
from hetserve.engine import kernel
from hetserve.engine.clock import VirtualClock
from hetserve.engine.executor import Observer
from hetserve.engine.modelled import ModelledExecutor
from hetserve.engine.setup import Setup, build_setup
from hetserve.experiments.setup import build_trace
from hetserve.planning.deepplan import plan_cold_starts
from hetserve.scheduling import coldstart, make_scheduler
from hetserve.scheduling import policy_core as pure_policy
from hetserve.scheduling.coldstart import ColdStart
from hetserve.scheduling.reservation import Reservation
from hetserve.scheduling.reservation_table import core as reservation_core
from hetserve.sim.engine import SimConfig, Simulator
from hetserve.workload import Poisson, generate


def _policy():
    """The module whose ``PolicyCore`` and ``core_of`` this process's kernel uses."""
    if kernel.COMPILED:
        from hetserve.scheduling import policy_core_c

        return policy_core_c
    return pure_policy


class ThroughProtocol(Reservation):
    """``reservation`` whose calls reach its core through functions of its own: the
    kernel cannot take the core, so every report is made and goes through
    ``on_stage_done`` (the protocol's call), and every timer through ``on_timer``."""

    def start(self, view, plan, now):
        acts = super().start(view, plan, now)
        core = self.algorithm
        self.on_arrival = lambda r, t: core.on_arrival(r, t)
        self.on_stage_done = lambda rep, t: core.on_stage_done(rep, t)
        self.on_timer = lambda tok, t: core.on_timer(tok, t)
        return acts


class ColdThroughProtocol(ColdStart):
    """``coldstart`` likewise (:class:`ThroughProtocol`)."""

    def start(self, view, plan, now):
        acts = super().start(view, plan, now)
        core = self.core
        self.on_arrival = lambda r, t: core.on_arrival(r, t)
        self.on_stage_done = lambda rep, t: core.on_stage_done(rep, t)
        return acts


def _digest(res) -> str:
    h = hashlib.sha256()
    for a in (res.outcome, res.reason, res.batch, res.dispatch_s, res.start_s, res.finish_s):
        h.update(np.asarray(a).tobytes())
    h.update(repr((res.stage_rows, res.reasons, sorted(res.worker_busy_s.items()))).encode())
    return h.hexdigest()


def _two_pools() -> Setup:
    base = build_setup("hc1-s", ["resnet50"])
    st = (Stage((0, 5), "P4", 1, 12), Stage((5, 10), "L4", 1, 4))
    plan = Plan(
        {"resnet50": ModelPlan(base.slos_s["resnet50"], 1.0, (Pipeline(st, 4, 0.0, 2000.0),))}
    )
    return Setup(base.cluster, base.latency, ["resnet50"], base.slos_s, plan,
                 bind(plan, base.cluster))  # fmt: skip


def _view(s: Setup):
    """The cluster view a scheduler of ``s`` starts with (a simulator's kernel's)."""
    return Simulator(s.cluster, s.latency, s.plan, s.placement, make_scheduler("reservation"),
                     [], SimConfig()).kernel.view  # fmt: skip


def _run_reservation(sched):
    s = _two_pools()
    tr = build_trace(s, "gamma:cv=2", {"resnet50": 1700.0}, 3.0, seed=4)
    sim = Simulator(s.cluster, s.latency, s.plan, s.placement, sched, tr,
                    SimConfig(seed=3, jitter="lognormal", jitter_cv=0.3))  # fmt: skip
    # (a first stage's worker: its batch comes back, "worker lost"; a second stage's: its
    # batch fails, its activations lost)
    sim.fail_worker(s.placement.workers[1].id, 1.3)
    sim.fail_worker(s.placement.workers[12].id, 1.3)
    res = sim.run()
    return sim, res


def test_the_kernel_takes_the_core_of_reservation_and_runs_as_through_the_protocol():
    sim, res = _run_reservation(make_scheduler("reservation"))
    assert isinstance(sim.kernel._core, _policy().PolicyCore)
    assert sim.kernel._core is sim.scheduler.algorithm
    assert sim.kernel._tcore is sim.scheduler.algorithm  # (its timers too: C calls)
    other, res2 = _run_reservation(ThroughProtocol())
    assert other.kernel._core is None and other.kernel._tcore is None
    # (the paths were taken: completed stages, corrections, a lost worker's stage)
    status = [r[8] for r in res.stage_rows]
    assert status.count("completed") > 5000 and status.count("failed") == 2
    assert (res.outcome == OK).sum() > 1000
    assert _digest(res) == _digest(res2)


@pytest.mark.parametrize("kind", ["pipeswitch", "pt+dha"])
def test_the_kernel_takes_the_core_of_coldstart_and_runs_as_through_the_protocol(kind):
    c = preset("p3-8xlarge")
    names = [f"bert-base@{i}" for i in range(24)]
    tr = generate([Stream(m, m, 0.1, Poisson(40 / 24)) for m in names], 15.0, 1)
    cp, _ = plan_cold_starts(c, names, None, kind, dict.fromkeys(names, 0.1))
    out = []
    for sched in (make_scheduler("coldstart", {}), ColdThroughProtocol()):
        sim = Simulator(c, LayerLatency(cp.load_plans), cp, bind(cp, c), sched, tr,
                        SimConfig(warm=False))  # fmt: skip
        res = sim.run()
        out.append((sim.kernel._core, _digest(res), dict(sched.stats)))
    assert isinstance(out[0][0], _policy().PolicyCore) and out[1][0] is None
    assert out[0][2]["cold_requests"] > 0
    assert out[0][1:] == out[1][1:]


def test_core_of_takes_only_a_core_whose_calls_are_the_schedulers_own():
    core_of = _policy().core_of
    s = _two_pools()
    view = _view(s)
    r = make_scheduler("reservation")
    assert core_of(r) is None  # (before start: its own methods, which call the core)
    r.start(view, s.plan, 0.0)
    assert core_of(r) is r.algorithm
    t = ThroughProtocol()
    t.start(view, s.plan, 0.0)
    assert core_of(t) is None
    # a core class that answers ``on_stage_done`` itself: the kernel would not call it
    same_build = reservation_core.__name__.endswith("_c") is kernel.COMPILED
    if same_build:

        class OwnReports(reservation_core.Algorithm1):
            def on_stage_done(self, report, now):
                return []

        u = make_scheduler("reservation")
        u.start(view, s.plan, 0.0)
        a = u.algorithm
        own = OwnReports(a.table, a.names, a.ids, a.lost, a.margin_s, a.pipes, [], 0)
        u.on_arrival, u.on_stage_done = own.on_arrival, own.on_stage_done
        assert core_of(u) is None
    # another scheduler: none
    assert core_of(make_scheduler("fixed-batch")) is None


def test_timer_core_of_takes_the_core_whose_on_timer_is_the_schedulers_own():
    """The kernel calls a core's ``on_timer`` as C only where the scheduler's
    ``on_timer`` is that core's own bound method, whatever its other calls are."""
    timer_core_of = _policy().timer_core_of
    s = _two_pools()
    view = _view(s)
    r = make_scheduler("reservation")
    assert timer_core_of(r) is None  # (before start: its own method, which calls the core)
    r.start(view, s.plan, 0.0)
    assert timer_core_of(r) is r.algorithm
    # arrivals through functions of its own, timers still the core's: the timers' core
    t = ThroughProtocol()
    t.start(view, s.plan, 0.0)
    assert timer_core_of(t) is None
    t.on_timer = t.algorithm.on_timer
    assert timer_core_of(t) is t.algorithm and _policy().core_of(t) is None
    # schedulers whose timers are their own (coldstart keeps its timers; fixed-batch has
    # no core): none
    assert timer_core_of(make_scheduler("coldstart", {})) is None
    assert timer_core_of(make_scheduler("fixed-batch")) is None


def test_a_reservation_timer_of_a_replaced_core_is_not_answered():
    """A wake-up timer's token carries its model's queue: the core that set it answers
    it while the queue still waits for it; another core (of a plan since replaced)
    leaves it, and a timer the queue no longer waits for is left too."""
    s = _two_pools()
    view = _view(s)
    a, b = make_scheduler("reservation"), make_scheduler("reservation")
    a.start(view, s.plan, 0.0)
    b.start(view, s.plan, 0.0)
    mq = a.algorithm.queues["resnet50"]
    mq.timer_at = 0.5
    token = ("reservation", "resnet50", 0.5, mq)
    assert b.algorithm.on_timer(token, 0.5) == []  # (another core's queue)
    assert mq.timer_at == 0.5
    assert a.algorithm.on_timer(("reservation", "resnet50", 0.25, mq), 0.5) == []  # (stale)
    assert mq.timer_at == 0.5
    assert a.algorithm.on_timer(token, 0.5) == []  # (its own: answered, nothing waits)
    assert mq.timer_at != mq.timer_at  # (NaN: it waits for none now)


def test_a_subclass_of_a_core_that_overrides_its_report_is_still_called():
    """``stage_report`` is a ``cpdef`` method: the kernel's C call reaches a Python
    subclass's override."""
    calls = []

    class Counting(coldstart.core.ColdStartCore):
        def stage_report(self, kind, *rest):
            calls.append(kind)
            return super().stage_report(kind, *rest)

    class CountingColdStart(ColdStart):
        core_class = Counting

    c = preset("p3-8xlarge")
    names = [f"bert-base@{i}" for i in range(6)]
    tr = generate([Stream(m, m, 0.1, Poisson(2.0)) for m in names], 5.0, 2)
    cp, _ = plan_cold_starts(c, names, None, "pt+dha", dict.fromkeys(names, 0.1))
    sched = CountingColdStart()
    sim = Simulator(c, LayerLatency(cp.load_plans), cp, bind(cp, c), sched, tr,
                    SimConfig(warm=False))  # fmt: skip
    res = sim.run()
    if coldstart.COMPILED == kernel.COMPILED:  # (one build: the kernel takes the core)
        assert sim.kernel._core is sched.core
    assert calls.count("stage") == len([r for r in res.stage_rows if r[8] == "completed"])
    assert "load" in calls


def test_a_server_calls_the_protocol():
    """With ``strict=False`` (serving), the kernel takes no core: its guards call the
    scheduler's methods."""
    s = _two_pools()
    sched = make_scheduler("reservation")
    sim = Simulator(s.cluster, s.latency, s.plan, s.placement, sched, [], SimConfig())
    clock = VirtualClock()
    ex = ModelledExecutor()
    k = kernel.Kernel(sim.kernel.view, s.plan, sched, ex, clock, strict=False)
    k.start(0.0)
    assert k._core is None
    k2 = kernel.Kernel(sim.kernel.view, s.plan, make_scheduler("reservation"),
                       ModelledExecutor(),
                       VirtualClock(), strict=True)  # fmt: skip
    k2.start(0.0)
    assert k2._core is k2.scheduler.algorithm


def test_the_kernel_calls_the_modelled_start_as_c_and_an_executors_own_start_through_python():
    """``entities.StageStarter``: the modelled executor's start is the kernel's C call; an
    executor whose class has a start of its own is called through it, and the runs end
    the same."""
    from hetserve.engine.entities import starter_of

    calls = []

    class OwnStart(ModelledExecutor):
        def start(self, task, now):
            calls.append(task)
            super().start(task, now)

    out = []
    for ex in (None, OwnStart(seed=3, jitter="lognormal", jitter_cv=0.3)):
        s = _two_pools()
        tr = build_trace(s, "gamma:cv=2", {"resnet50": 1700.0}, 3.0, seed=4)
        sim = Simulator(s.cluster, s.latency, s.plan, s.placement, make_scheduler("reservation"),
                        tr, SimConfig(seed=3, jitter="lognormal", jitter_cv=0.3),
                        executor=ex)  # fmt: skip
        starter = sim.kernel._starter  # (before the run: its end lets go of it)
        assert starter is starter_of(sim.executor)
        res = sim.run()
        out.append((starter, _digest(res)))
    assert out[0][0] is not None and out[1][0] is None and len(calls) > 5000
    assert out[0][1] == out[1][1]


def _requests(n: int, deadline_s: float) -> list:
    from hetserve.core.requests import Request

    return [Request(i, "resnet50", "resnet50", 0.0, deadline_s) for i in range(n)]


@pytest.mark.parametrize("plain", [False, True])
def test_a_core_gives_plain_tuples_only_in_the_call_the_kernel_flags(plain):
    """``PolicyCore.plain``: raised before a call, that call's dispatch is a plain tuple of
    the ``Dispatch``'s fields (its steps a ``RouteStep``'s) and the core lowers the flag;
    otherwise, and in every later call, the protocol's NamedTuples. Either way the same
    values."""
    from hetserve.engine.rules import as_dispatch
    from hetserve.scheduling.protocol import Dispatch, RouteStep

    s = _two_pools()
    view = _view(s)
    out = {}
    for flag in (False, plain):
        r = make_scheduler("reservation")
        r.start(view, s.plan, 0.0)
        core = r.algorithm
        assert core.plain is False  # (lowered from the start)
        acts = []
        for req in _requests(4, 5.0):  # (the plan's batch of 4: dispatched at the 4th)
            core.plain = flag
            acts += core.on_arrival(req, 0.0)
            assert core.plain is False
        (d,) = [a for a in acts if type(a) in (tuple, Dispatch)]
        out[flag] = d
    d, named = out[plain], out[False]
    assert type(named) is Dispatch and all(type(st) is RouteStep for st in named.route)
    assert len(named.route) == 2 and d == named  # (a tuple equals its NamedTuple)
    if plain:
        assert type(d) is tuple and all(type(st) is tuple for st in d[3])
    assert as_dispatch(d) == named and type(as_dispatch(d)) is Dispatch
    assert all(type(st) is RouteStep for st in as_dispatch(d).route)


def test_a_batch_of_a_plain_dispatch_shows_python_the_named_tuples():
    """``Batch.d``, ``Batch.route`` and ``Task.step`` of a batch a compiled core gave as
    plain tuples: the NamedTuples, made once; the kernel's own reads (``_d``, ``_route``,
    ``_step``) keep what it was given."""
    from hetserve.engine import entities
    from hetserve.scheduling.protocol import Dispatch, RouteStep

    reqs = tuple(_requests(2, 1.0))
    steps = ((0, "w0", 0.25, (0, 5)), (1, "w1", 0.5, (5, 10)))
    plain = (7, "resnet50", reqs, steps)
    b = entities.Batch(plain, 0.0, 2)
    t = entities.Task(b, 1, None)
    assert t._step is steps[1] and b._route is steps and b._d is plain
    assert not t.last or t.index == 1
    step = t.step
    assert type(step) is RouteStep and step == RouteStep(1, "w1", 0.5, (5, 10))
    assert t.step is step and t._step is step  # (made once)
    assert all(type(s) is RouteStep for s in b.route) and b.route == steps
    d = b.d
    assert type(d) is Dispatch and d == Dispatch(7, "resnet50", reqs, steps)
    assert b.d is d and d.route is b.route
    # a batch of the protocol's Dispatch keeps it as it is
    named = Dispatch(8, "resnet50", reqs, tuple(RouteStep(*s) for s in steps))
    b2 = entities.Batch(named, 0.0, 2)
    assert b2.d is named and b2.route is named.route
    assert entities.Task(b2, 0, None).step is named.route[0]


def test_the_kernel_gives_the_reservation_core_its_slots_and_checks_the_slots_it_is_given():
    """``PolicyCore.worker_keys``: the kernel that takes ``reservation``'s core gives it
    its own slots for the core's workers; the core's plain dispatches (the kernel's flagged
    call) then carry those slots in place of names, the same route otherwise, and the
    protocol's NamedTuples still carry names. ``check_dispatch`` takes a slot only where it
    is the kernel's own: a slot of another kernel is an unknown worker, named."""
    from hetserve.engine import entities
    from hetserve.engine.rules import ProtocolError, as_dispatch
    from hetserve.scheduling.protocol import Dispatch

    sim, _ = _run_reservation(make_scheduler("reservation"))
    k, core = sim.kernel, sim.scheduler.algorithm
    check_dispatch = kernel.core.check_dispatch  # (the build this process's kernel is)
    keys = core.worker_keys
    names = core.worker_names()
    assert keys is not None and len(keys) <= len(names)
    assert sum(1 for x in keys if type(x) is entities.Slot) == len(k.workers)
    for n, key in zip(names, keys, strict=False):
        assert key is k.workers[n] if n in k.workers else key == n
    # a fresh core of the same plan, bound by that kernel's keys: its flagged call's route
    # carries the slots, its unflagged call's the names, on the same workers
    out = {}
    for flag in (True, False):
        r = make_scheduler("reservation")
        r.start(k.view, sim.plan, 0.0)
        r.algorithm.worker_keys = [k.workers.get(n, n) for n in r.algorithm.worker_names()]
        acts = []
        for req in _requests(4, 5.0):
            r.algorithm.plain = flag
            acts += r.algorithm.on_arrival(req, 0.0)
        (out[flag],) = [a for a in acts if type(a) in (tuple, Dispatch)]
    plain, named = out[True], out[False]
    assert [type(st[1]) for st in plain[3]] == [entities.Slot, entities.Slot]
    assert [st[1].id for st in plain[3]] == [st.worker for st in named.route]
    assert as_dispatch(plain) == named
    slots = k._slots
    assert all(slots[w.index] is w for w in k.workers.values())
    assert check_dispatch(plain, k.nblocks, k.workers, {}, slots) == 0
    w = plain[3][1][1]
    stranger = entities.Slot(w.info, w.index)  # (another kernel's slot for the same worker)
    bad = (plain[0], plain[1], plain[2], (plain[3][0], (1, stranger, *plain[3][1][2:])))
    with pytest.raises(ProtocolError, match=f"unknown worker {w.id!r}"):
        check_dispatch(bad, k.nblocks, k.workers, {}, slots)


class _Scripted:
    """A core (a Python subclass of this build's ``PolicyCore``) that answers arrivals by
    a script of the request's id: the actions the kernel's ``run`` must take the same way
    whether the arrival it calls the core with is in ``held`` or only its own."""

    @staticmethod
    def make(s: Setup, fail_at: int = -1):
        from hetserve.scheduling.protocol import Dispatch, Drop, RouteStep, SetTimer

        p4 = [w.id for w in s.placement.workers if w.gpu == "P4"]
        l4 = [w.id for w in s.placement.workers if w.gpu == "L4"]

        class Scripted(_policy().PolicyCore):
            def __init__(self):
                super().__init__()
                self.waiting = []
                self.next_id = 0

            def _dispatch(self, reqs, now):
                self.next_id += 1
                k = self.next_id
                route = (RouteStep(0, p4[k % len(p4)], now, (0, 5)),
                         RouteStep(1, l4[k % len(l4)], now, (5, 10)))  # fmt: skip
                return Dispatch(self.next_id, "resnet50", tuple(reqs), route)

            def on_arrival(self, r, now):
                self.plain = False  # (NamedTuples: what the protocol says)
                if r.id == fail_at:
                    raise RuntimeError("the core failed")
                k = r.id % 7
                if k == 0:  # at once
                    return [self._dispatch([r], now)]
                if k == 1:  # kept, for a later arrival to dispatch
                    self.waiting.append(r)
                    return []
                if k == 2:  # another action first
                    return [SetTimer(now + 1e-3, "tick"), self._dispatch([r], now)]
                if k == 3:  # an older request's batch; this one stays held until its deadline
                    return [self._dispatch([self.waiting.pop()], now)] if self.waiting else []
                if k == 4:  # the same request, another object
                    return [self._dispatch([r._replace()], now)]
                if k == 5:  # the kept ones with it, in one batch
                    reqs, self.waiting = [*self.waiting, r], []
                    return [self._dispatch(reqs, now)]
                return [Drop((r,), "rows")]  # dropped at once

            def on_timer(self, token, now):
                return []

            def stage_report(self, *fields):
                return None

        class Sched:
            name = "scripted"
            preempts = False

            def __init__(self):
                self.core = Scripted()
                self.on_arrival = self.core.on_arrival
                self.on_stage_done = self.core.on_stage_done
                self.on_timer = self.core.on_timer

            def start(self, view, plan, now):
                return []

            def on_worker_lost(self, worker, now):
                return []

            def max_rows(self, model):
                return None

        return Sched()


@pytest.mark.parametrize("through", [False, True])
def test_an_arrival_the_core_dispatches_at_once_is_never_held_and_every_other_is(through):
    """``Kernel.run`` gives an arrival to the scheduler's core without putting it in
    ``held``, and puts it there where the core does not dispatch it at once (kept for
    later, or another action first): every request ends once, as it does where the core
    is called through the protocol (the arrival in ``held`` first), and a core that
    raises leaves its arrival held."""
    s = _two_pools()
    tr = build_trace(s, "poisson", {"resnet50": 300.0}, 2.0, seed=1)
    sched = _Scripted.make(s)
    if through:  # (functions of its own: the kernel calls the protocol)
        core = sched.core
        sched.on_arrival = lambda r, t: core.on_arrival(r, t)
    sim = Simulator(s.cluster, s.latency, s.plan, s.placement, sched, tr, SimConfig(seed=2))
    res = sim.run()
    assert (sim.kernel._core is None) == through
    ids = np.arange(len(tr))
    n = len(tr)
    assert n > 300 and not sim.kernel.held and sim.kernel._fresh is None
    # each request's one ending, by its script
    reason = np.array([res.reasons[i] for i in res.reason])
    dropped = reason == "deadline"
    assert dropped[ids % 7 == 3].all()  # (kept by the core, never dispatched)
    assert (reason[ids % 7 == 6] == "rows").all()
    at_once = np.isin(ids % 7, (0, 2, 4, 5))  # (dispatched in the call they came in)
    assert not dropped[at_once].any() and (res.outcome[at_once] == OK).mean() > 0.9
    # the same run either way
    other = _Scripted.make(s)
    if not through:
        c2 = other.core
        other.on_arrival = lambda r, t: c2.on_arrival(r, t)
    sim2 = Simulator(s.cluster, s.latency, s.plan, s.placement, other, tr, SimConfig(seed=2))
    assert _digest(sim2.run()) == _digest(res)
    # a core that raises: its arrival stays held (what ``close`` ends)
    bad = _Scripted.make(s, fail_at=40)
    sim3 = Simulator(s.cluster, s.latency, s.plan, s.placement, bad, tr, SimConfig(seed=2))
    with pytest.raises(RuntimeError, match="the core failed"):
        sim3.run()
    assert 40 in sim3.kernel.held and sim3.kernel._fresh is None


def test_a_tasks_transfer_times_are_doubles_that_python_reads_as_none_where_there_was_none():
    """The kernel keeps a stage's transfer times as C doubles (``Task.xfer_start_s``, NaN:
    none) and gives them to a core so (``PolicyCore.stage_report``); Python reads
    ``transfer_start_s`` and ``transfer_end_s`` as before: None for a first stage (no
    transfer), the times for a later one, and may set them, None included."""
    s = _two_pools()
    tr = build_trace(s, "poisson", {"resnet50": 300.0}, 1.0, seed=1)
    sim = Simulator(s.cluster, s.latency, s.plan, s.placement, make_scheduler("reservation"),
                    tr, SimConfig(seed=2))  # fmt: skip
    seen = []

    class Seen(Observer):
        def stage_ended(self, task, now, status, blocks_done):
            seen.append((task.index, task.transfer_start_s, task.transfer_end_s,
                         task.xfer_start_s, task.start_s))  # fmt: skip
            if len(seen) == 1:
                task.transfer_start_s = 2.5
                assert task.xfer_start_s == 2.5 and task.transfer_start_s == 2.5
                task.transfer_start_s = None
                assert task.xfer_start_s != task.xfer_start_s and task.transfer_start_s is None

    sim.kernel.observer = Seen()
    sim.run()
    firsts = [x for x in seen if x[0] == 0]
    laters = [x for x in seen if x[0] == 1]
    assert firsts and laters
    assert all(xs is None and xe is None and d != d for _, xs, xe, d, _ in firsts)
    assert all(type(xs) is float and xs <= xe <= start + 1e-9 and d == xs
               for _, xs, xe, d, start in laters)  # fmt: skip
