"""Switching plans live: a scheduler made of one scheduler per plan version
(``docs/control.md``, "Switching").

:class:`Switching` follows the Scheduler protocol (``scheduling.protocol``), so both
engines drive it as they drive any scheduler; it stays pure (no clock, no I/O). Inside, an
*epoch* is one plan version and a fresh scheduler started on it (made by the factory it
was given: the same policy and parameters every time). A switch, driven by the engine's
control loop (``engine.control``) through :meth:`begin` and :meth:`drained`:

``mbb`` (make-before-break, the default):
  1. *loading*: the workers that change load their new blocks beside the old ones (the
     reconciler's waves, at most N workers at once) while the current plan serves;
  2. *cut-over*: when every load has ended, a new epoch starts on the target plan and
     every request that arrives from then on is its; the previous epoch keeps the
     requests it holds and its batches under way (*draining*): workers that keep their
     stages serve both, no request waits for the switch;
  3. *drained*: once the previous epoch owns no request, the blocks the target does not
     need are evicted, and workers the target does not use are let go.

``flush`` (PPipe section 4, the baseline):
  1. *loading*, as above (PPipe preloads too);
  2. *paused*: ingestion stops (arrivals wait here, held), the current plan drains;
  3. the blocks the target does not need are evicted, loads that did not fit beside the
     old blocks are made now, and the new epoch starts with the requests that waited.

A worker with no memory for its new blocks beside its old ones loads them *late* in a
``mbb`` switch (the switch's ``late`` names it): at the cut-over its load is sent with
``wait`` (``scheduling.protocol`` rule 8), the new plan's stages on it wait for their
blocks while it still serves the previous plan's; once that plan has drained, its old
blocks are evicted, the load starts (stages run each block as it arrives) and a ``Load``
without ``wait`` says it may not wait longer; the switch ends when every late load has.
Ingestion never pauses. A load that fails for another reason falls back to ``flush`` (the
switch's ``fallback`` says which).

Requests, batches and timers find their epoch: each epoch's batch ids are offset by
``epoch << EPOCH_SHIFT`` (its scheduler's ``BaseScheduler.new_batch_id`` counts from
there), a timer's token is wrapped with its epoch (the first epoch's are not: an
unwrapped token is the first epoch's), a load by its (worker, model, blocks). The kernel
ends every request exactly once whatever the epochs do (its ledger), so a switch cannot
lose or repeat one: the property test (``tests/control/test_switching.py``) switches at
random times and checks it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from hetserve.control.reconcile import SwitchSteps
from hetserve.core.errors import HetserveError
from hetserve.core.plan import Plan
from hetserve.core.requests import Request
from hetserve.scheduling.protocol import (
    NO_ACTIONS,
    Action,
    BaseScheduler,
    ClusterView,
    Dispatch,
    Drop,
    Evict,
    Load,
    Provisioned,
    Scheduler,
    SetTimer,
    StageReport,
    WorkerId,
)

EPOCH_SHIFT = 40  # an epoch's batch ids: [epoch << 40, (epoch + 1) << 40)
MODES = ("mbb", "flush")
#: a switch's states, in the order they come (``serving`` between switches)
STATES = ("serving", "loading", "draining", "late", "paused", "reloading")


class _Token(NamedTuple):
    epoch: int
    token: object


@dataclass
class Epoch:
    """One plan version and the scheduler serving it."""

    no: int
    sched: Scheduler
    view: ClusterView
    plan: Plan
    checked: bool = False  # a Dispatch of it had its batch id checked (``_wrap``)


@dataclass
class Transition:
    """A switch under way (read by the control loop for its report)."""

    view: ClusterView
    plan: Plan
    steps: SwitchSteps
    mode: str
    begun_s: float
    waves: list[tuple[str, ...]]
    pending: set[tuple[str, str, tuple[int, int]]] = field(default_factory=set)
    failed: list[tuple[str, str, tuple[int, int], str]] = field(default_factory=list)
    fallback: str = ""  # why a mbb switch paused after all
    late: tuple[str, ...] = ()  # workers whose loads waited for the previous plan to drain
    mark_s: float | None = None  # when the previous epoch stopped taking requests
    events: list[tuple[str, float]] = field(default_factory=list)
    buffered: int = 0  # requests that waited for a paused switch
    moved: int = 0  # held requests handed to the new plan at a make-before-break cut-over


def _base(sched: Scheduler) -> BaseScheduler:
    inner = sched.inner if isinstance(sched, Provisioned) else sched
    if not isinstance(inner, BaseScheduler):
        raise HetserveError(
            f"re-planning needs a scheduler built on scheduling.protocol.BaseScheduler (its "
            f"batch ids come from new_batch_id); {type(inner).__name__} is not"
        )
    return inner


class Switching:
    """A scheduler of epochs (module docstring)."""

    name = "switching"

    def __init__(self, factory: Callable[[], Scheduler]) -> None:
        """``factory``: a new scheduler of the policy that serves every plan version
        (``scheduling.protocol.make_scheduler`` with the run's name and parameters)."""
        self.factory = factory
        first = factory()
        _base(first)
        self.preempts = bool(first.preempts)  # type: ignore[attr-defined]
        self._first: Scheduler | None = first
        self.epochs: dict[int, Epoch] = {}
        self.cur: Epoch
        self.draining: Epoch | None = None
        self.state = "serving"
        self._holding = False  # paused or reloading: arrivals wait (``buffer``)
        self._narrowed = False  # a plan served fewer models than one before it
        self.switch: Transition | None = None
        self.buffer: list[Request] = []
        self._next_no = 0
        self._wrapping = False  # the first epoch's actions go out as they are
        self._loads: dict[tuple[str, str, tuple[int, int]], int] = {}
        self._still_held: Callable[[Request], bool] = lambda r: True
        self._busy_until: Callable[[float], dict[WorkerId, float]] | None = None
        self.lost: set[WorkerId] = set()  # workers lost so far (a new epoch hears of them)
        self.moved: set[int] = set()  # held requests handed to the new plan at a cut-over
        self._held_now: Callable[[], list[Request]] | None = None
        self.last: Transition | None = None  # the switch that ended last

    # ------------------------------------------------------------------ the protocol
    def start(self, view: ClusterView, plan: Plan, now: float) -> list[Action]:
        sched, self._first = self._first, None
        assert sched is not None, "Switching.start is called once"
        acts = self._open(sched, view, plan, now)
        # until a switch begins, the engine calls the first plan's scheduler directly: no
        # cost per event (``begin`` undoes it; the engine then calls ``Kernel.rebind``)
        e = self.cur
        self.on_arrival = e.sched.on_arrival  # type: ignore[method-assign]
        self.on_stage_done = e.sched.on_stage_done  # type: ignore[method-assign]
        self.on_timer = e.sched.on_timer  # type: ignore[method-assign]
        return acts

    def on_arrival(self, request: Request, now: float) -> list[Action]:
        if self._holding:
            self.buffer.append(request)
            return NO_ACTIONS
        e = self.cur
        if self._narrowed and request.model not in e.plan.models:  # (unloaded by a switch)
            return [Drop((request,), "not_provisioned")]
        acts = e.sched.on_arrival(request, now)
        return self._wrap(e, acts) if acts and self._wrapping else acts

    def on_stage_done(self, report: StageReport, now: float) -> list[Action]:
        if report.kind == "load":
            return self._load_done(report, now)
        e = self.epochs.get(report.batch_id >> EPOCH_SHIFT)
        if e is None:
            return NO_ACTIONS
        acts = e.sched.on_stage_done(report, now)
        return self._wrap(e, acts) if acts and self._wrapping else acts

    def on_timer(self, token: object, now: float) -> list[Action]:
        if type(token) is _Token:
            e = self.epochs.get(token.epoch)
            token = token.token
        else:
            e = self.epochs.get(0)
        if e is None:
            return NO_ACTIONS  # a timer of an epoch that has ended
        acts = e.sched.on_timer(token, now)
        return self._wrap(e, acts) if acts and self._wrapping else acts

    def on_worker_lost(self, worker: WorkerId, now: float) -> list[Action]:
        self.lost.add(worker)
        out: list[Action] = []
        for e in list(self.epochs.values()):
            if worker in e.view.workers:
                acts = e.sched.on_worker_lost(worker, now)
                out += self._wrap(e, acts) if acts and self._wrapping else acts
        return out

    def max_rows(self, model: str) -> int | None:
        """The serving epoch's scheduler's (``BaseScheduler.max_rows``)."""
        return _base(self.cur.sched).max_rows(model)

    # ------------------------------------------------------------------ switches
    def begin(
        self, view: ClusterView, plan: Plan, steps: SwitchSteps, mode: str, now: float,
        busy_until: Callable[[float], dict[WorkerId, float]] | None = None,
        held_now: Callable[[], list[Request]] | None = None,
    ) -> list[Action]:  # fmt: skip
        """Start switching to ``plan`` on ``view`` (the kernel knows its workers
        already: ``Kernel.extend``; it must read this scheduler's callbacks again after
        this call: ``Kernel.rebind``): the first wave of loads. ``busy_until``: at the
        cut-over, until when each worker is predicted busy with the previous plan's
        batches (the new scheduler's ``ClusterView.busy_until_s``). ``held_now``: the
        requests the current plan's scheduler holds, undispatched and not parked (at a
        make-before-break cut-over they are handed to the new plan's)."""
        self._busy_until = busy_until
        self._held_now = held_now
        if mode not in MODES:
            raise HetserveError(f"switch mode: expected mbb or flush, got {mode!r}")
        if self.state != "serving":
            raise HetserveError(f"a switch is under way ({self.state}); one at a time")
        for name in ("on_arrival", "on_stage_done", "on_timer"):
            self.__dict__.pop(name, None)  # the epochs' own from now on
        self.switch = Transition(view, plan, steps, mode, now, list(steps.waves))
        if set(self.cur.plan.models) - set(plan.models):
            self._narrowed = True  # (from now on an arrival's model is checked)
        self._set_state("loading")
        self.switch.events.append(("begin", now))
        return self._next_wave(now)

    def drained(self, now: float, still_held: Callable[[Request], bool]) -> list[Action]:
        """Called by the control loop once the epoch that stopped taking requests owns
        none (none held, no batch under way): evict what the target does not need, and
        in a paused switch, load what did not fit and start the target (the requests that
        waited go to it, those ``still_held``)."""
        sw = self.switch
        old = self.draining
        if sw is None or old is None:
            return NO_ACTIONS
        sw.events.append(("drained", now))
        self.epochs.pop(old.no, None)
        self.draining = None
        self.moved = set()
        acts: list[Action] = [Evict(c.worker, m, b) for c in sw.steps.changes for m, b in c.evict]
        if self.state == "draining":  # mbb: the switch is done, or its late loads start
            if not sw.pending:
                self._done(now)
                return acts
            self._set_state("late")
            # (after the evictions: a waiting load starts now, or fails)
            return acts + [Load(w, m, b) for w, m, b in sorted(sw.pending)]
        if self.state == "late":
            return acts
        # paused: the loads that did not fit beside the old blocks, now; then cut over
        retry, sw.failed = sw.failed, []
        loads = [Load(w, m, b) for w, m, b, _ in retry]
        sw.pending = {(a.worker, a.model, a.blocks) for a in loads}
        self._set_state("reloading")
        self._still_held = still_held
        if not loads:
            return acts + self._cutover(now)
        return acts + loads  # type: ignore[operator]

    # ------------------------------------------------------------------ inside
    def _open(self, sched: Scheduler, view: ClusterView, plan: Plan, now: float) -> list[Action]:
        e = Epoch(self._next_no, sched, view, plan)
        self._next_no += 1
        base = _base(sched)
        base._next_batch = e.no << EPOCH_SHIFT
        self.epochs[e.no] = e
        self.cur = e
        acts = sched.start(view, plan, now)
        for w in sorted(self.lost & set(view.workers)):  # lost before this epoch began
            acts = acts + sched.on_worker_lost(w, now)
        return self._wrap(e, acts) if acts and self._wrapping else acts

    def _wrap(self, e: Epoch, acts: list[Action]) -> list[Action]:
        if e.checked and not (self.moved and e is self.draining):
            for a in acts:  # (the common case: nothing to rewrite or record)
                kind = type(a)
                if kind is SetTimer or kind is Load:
                    break
            else:
                return acts
        out: list[Action] = []
        for a in acts:
            kind = type(a)
            if kind is SetTimer:
                a = SetTimer(a.at_s, _Token(e.no, a.token))  # type: ignore[union-attr]
            elif kind is Load:
                self._loads[(a.worker, a.model, a.blocks)] = e.no  # type: ignore[union-attr]
            elif kind is Dispatch and not e.checked:
                if a.batch_id >> EPOCH_SHIFT != e.no:  # type: ignore[union-attr]
                    raise HetserveError(
                        f"batch {a.batch_id} of epoch {e.no}: re-planning needs batch ids "  # type: ignore[union-attr]
                        f"from BaseScheduler.new_batch_id"
                    )
                e.checked = True  # (its ids come from new_batch_id: checked once)
            if (kind is Dispatch or kind is Drop) and self.moved and e is self.draining:
                moved = self.moved  # (requests handed to the new plan at the cut-over)
                keep = tuple(r for r in a.requests if r.id not in moved)  # type: ignore[union-attr]
                if len(keep) != len(a.requests):  # type: ignore[union-attr]
                    if not keep:
                        continue
                    a = a._replace(requests=keep)  # type: ignore[union-attr]
            out.append(a)
        return out

    def _load_done(self, rep: StageReport, now: float) -> list[Action]:
        key = (rep.worker, rep.model, rep.blocks)
        sw = self.switch
        if sw is not None and key in sw.pending:
            sw.pending.discard(key)
            if not rep.completed:
                sw.failed.append((*key, rep.reason))
            if sw.pending:
                return NO_ACTIONS
            if self.state == "reloading":
                return self._cutover(now)
            if self.state == "late":
                self._done(now)
                return NO_ACTIONS
            if self.state == "draining":
                return NO_ACTIONS  # (late loads done before the drain: ``drained`` ends it)
            return self._next_wave(now)
        owner = self._loads.pop(key, 0)
        e = self.epochs.get(owner) or self.cur
        acts = e.sched.on_stage_done(rep, now)
        return self._wrap(e, acts) if acts and self._wrapping else acts

    def _next_wave(self, now: float) -> list[Action]:
        sw = self.switch
        assert sw is not None
        changes = {c.worker: c for c in sw.steps.changes}
        while sw.waves:
            wave = sw.waves.pop(0)
            loads = [Load(w, m, b) for w in wave for m, b in changes[w].load]
            if loads:
                sw.pending = {(a.worker, a.model, a.blocks) for a in loads}
                return loads  # type: ignore[return-value]
        sw.events.append(("loaded", now))
        if sw.mode == "mbb" and not sw.failed:
            return self._cutover(now)
        if sw.mode == "mbb" and all(r == "out of memory" for *_, r in sw.failed):
            # no room beside the old blocks: those loads wait until the old plan drains
            late = [(w, m, b) for w, m, b, _ in sw.failed]
            sw.failed = []
            sw.late = tuple(sorted({w for w, _, _ in late}))
            sw.events.append(("late", now))
            sw.pending = set(late)
            # (first: the new plan's stages on these workers find their blocks loading)
            loads: list[Action] = [Load(w, m, b, wait=True) for w, m, b in late]
            return loads + self._cutover(now)
        if sw.failed:
            sw.fallback = "no memory beside the old blocks on " + ", ".join(
                sorted({w for w, _, _, _ in sw.failed})
            )
        # a paused switch: the current epoch stops taking requests and drains
        self._set_state("paused")
        self.draining = self.cur
        sw.mark_s = now
        sw.events.append(("paused", now))
        return NO_ACTIONS

    def _cutover(self, now: float) -> list[Action]:
        sw = self.switch
        assert sw is not None
        self._wrapping = True
        prev = self.cur
        view = sw.view
        if self.state == "loading" and self._busy_until is not None:
            view = replace(view, busy_until_s=self._busy_until(now), _lat_cache={})
        acts = self._open(self.factory(), view, sw.plan, now)
        sw.events.append(("cutover", now))
        if self.state == "loading":  # mbb: the previous epoch drains beside the new one
            self._set_state("draining")
            self.draining = prev
            sw.mark_s = now
            # the requests it holds and has not dispatched are the new plan's from now
            # (its later Dispatch or Drop of one leaves it out: ``_wrap``), so that it
            # dispatches nothing more onto workers the new plan's reservations count on
            held = self._held_now() if self._held_now is not None else []
            # (a model the new plan does not serve, unloaded: its requests stay with the
            # plan that serves it, which drains them)
            held = [r for r in held if r.model in sw.plan.models]
            self.moved = {r.id for r in held}
            sw.moved = len(held)
            for r in held:
                more = self.cur.sched.on_arrival(r, now)
                if more:
                    acts = acts + self._wrap(self.cur, more)
            return acts
        # a paused switch ends: the requests that waited (those not ended meanwhile)
        waited, self.buffer = self.buffer, []
        sw.buffered = len(waited)
        still = self._still_held
        for r in waited:
            if not still(r):
                continue
            if r.model not in self.cur.plan.models:  # (unloaded by this switch)
                acts = [*acts, Drop((r,), "not_provisioned")]
                continue
            more = self.cur.sched.on_arrival(r, now)
            if more:
                acts = acts + self._wrap(self.cur, more)
        self._done(now)
        return acts

    def _fast(self) -> None:
        """Between switches, after the first: the serving epoch's scheduler called through
        two small closures (instance attributes the engine reads again: ``Kernel.rebind``)
        that pass its actions on as they are unless one needs rewriting (a timer's
        token tagged with its epoch, a load recorded: ``_wrap``). Its timers keep the
        general path (their tokens are tagged)."""
        e = self.cur
        if self._narrowed or not self._wrapping:
            return
        arrive, done, wrap, no = e.sched.on_arrival, e.sched.on_stage_done, self._wrap, e.no
        general = Switching.on_stage_done

        def on_arrival(request: Request, now: float) -> list[Action]:
            acts = arrive(request, now)
            if acts:
                if not e.checked:
                    return wrap(e, acts)
                for a in acts:
                    kind = type(a)
                    if kind is SetTimer or kind is Load:
                        return wrap(e, acts)
            return acts

        def on_stage_done(report: StageReport, now: float) -> list[Action]:
            if report.batch_id >> EPOCH_SHIFT != no:  # (a load's report, or a stale one)
                return general(self, report, now)
            acts = done(report, now)
            if acts:
                if not e.checked:
                    return wrap(e, acts)
                for a in acts:
                    kind = type(a)
                    if kind is SetTimer or kind is Load:
                        return wrap(e, acts)
            return acts

        self.on_arrival = on_arrival  # type: ignore[method-assign]
        self.on_stage_done = on_stage_done  # type: ignore[method-assign]

    def _set_state(self, state: str) -> None:
        self.state = state
        self._holding = state == "paused" or state == "reloading"

    def _done(self, now: float) -> None:
        assert self.switch is not None
        self.switch.events.append(("done", now))
        self._set_state("serving")
        if self.draining is None:
            self._fast()
        self.last = self.switch
        self.switch = None
