# cython: annotation_typing=False
"""The engine kernel: one state machine for requests, batches and stages, driven by both
engines (``docs/design.md``, "Engines"), over its entities (``engine/entities_core.py``:
a worker's slot, a dispatched batch, one route step of it; the link model's lanes).

This file is plain Python and runs as it is. Where the package was built with Cython
(``setup.py``; ``kernel_core_c.pxd`` beside it declares the C types: the kernel is an
extension type with typed attributes, the per-request methods C calls, the entities read
as the C structs of their own build), the same file is also compiled as
``hetserve.engine.kernel_core_c``, and ``engine.kernel`` exports that one's ``Kernel``
where the entities are compiled too (``HETSERVE_PURE_PYTHON=1`` keeps this file). Both
give the same results, bit for bit (``tests/engine/test_kernel_core.py``). Both engines,
the simulator and the runtime, take the same one.

The kernel owns every request from its arrival to its one ending (ok, late, dropped,
failed), every batch from its dispatch to its last stage, and every worker's queue. A
driver owns only time and execution: it gives the kernel a :class:`~.executor.Clock` and
an :class:`~.executor.Executor`, calls the entry points below with the current time,
and hears what happened through an :class:`~.executor.Observer`. The simulator is such a
driver (a virtual clock, the event heap, the modelled executor); so is the runtime (a
wall clock, threads or Ray actors, or the same modelled executor).

State, and who changes it:

- **Requests** (the ledger, by request id): ``held`` (the scheduler owns them: arrived,
  returned, or parked after an open route, with ``parked[id] = (next block, worker,
  activations)``), in a batch, or ended. With ``track`` (the runtime) ``open`` holds
  every request not yet ended, so ending one twice is a ``ProtocolError``; the
  simulator leaves it out (its requests end by construction; two dict operations per
  request are a few percent of its time).
- **Batches** (:class:`Batch`): a ``Dispatch`` accepted; one :class:`Task` per route
  step as the batch reaches it; ``alive`` until its last step ends or it is stopped.
- **Workers** (:class:`Slot`): the running task, the ready queue (a heap by planned
  start, then arrival: rule 4), tasks deferred until a load ends, lost or not.

Entry points (drivers and executors call them; each takes ``now``): :meth:`start`,
:meth:`arrive`, :meth:`stage_done`, :meth:`stage_stopped`, :meth:`stage_failed`,
:meth:`defer`, :meth:`load_finished`, :meth:`worker_lost`, :meth:`close`. The protocol's
rules are checked by ``engine.rules``, as before: a scheduler that breaks one gets the
same ``ProtocolError`` from both engines.

Faults. Anything an executor raises, or reports as failed, ends the batch's requests as
failed with the reason; the worker serves its next task. With ``strict=False`` (serving)
a scheduler that raises, or whose action breaks a rule, does not stop the engine: the
error is logged, the action refused, and the requests the scheduler held (whose fate it
no longer knows) end as failed with the reason: never a hang, never a request that ends
twice. ``strict=True`` (simulation, tests) raises instead.
"""

from __future__ import annotations

import itertools
import logging
import math
from array import array
from collections.abc import Container, Iterable, Mapping, Sequence
from numbers import Real
from typing import Any

from hetserve.core.outcome import (
    CANCELLED,
    DROP_KINDS,
    DROPPED,
    FAILED,
    drop_text,
    failure_kind,
)
from hetserve.core.plan import Plan
from hetserve.core.requests import Request
from hetserve.engine import entities
from hetserve.engine.clock import VirtualClock
from hetserve.engine.executor import Clock, Executor, Observer
from hetserve.engine.rules import (
    ACTIVATIONS_LOST,
    PARKED,
    PREEMPTED,
    WITHDRAWN,
    ProtocolError,
    as_dispatch,
    check_load,
    check_timer,
    drop_not_held,
    ended_twice,
    evict_running,
    load_report,
    lost_reason,
    not_held,
    parked_elsewhere,
    parked_sources,
    stage_ended_report,
    unknown_action,
    unknown_drop_reason,
)
from hetserve.scheduling.protocol import (
    RETURNED,
    ClusterView,
    Dispatch,
    Drop,
    Evict,
    Load,
    Preempt,
    RouteStep,
    Scheduler,
    SetTimer,
    StageReport,
    WorkerInfo,
)

try:  # (Cython reads ``cython.compiled`` as True in the build it makes of this file)
    import cython
except ImportError:  # (plain Python, without Cython installed)
    from hetserve.core.records import NO_CYTHON as cython
if not cython.compiled:  # (compiled: these are the C its .pxd cimports, called as such)
    from hetserve.core.heaps import IdMap
    from hetserve.core.records import (
        LOAD_BLOCKS,
        LOAD_MODEL,
        LOAD_WORKER,
        REQUEST_ID,
        REQUEST_MODEL,
        STEP_BLOCKS,
        STEP_PLANNED_START_S,
        STEP_STAGE,
        STEP_WORKER,
        field,
        fields,
        record,
        record7,
        record15,
    )
    from hetserve.engine.deadlines import Deadlines
    from hetserve.engine.entities import (
        Slot,
        add_task,
        new_batch,
        new_task,
        starter_of,
        tasks_of,
    )
    from hetserve.scheduling.policy_core import core_of, timer_core_of

LOG = logging.getLogger("hetserve.engine")
_NO_PARTS = itertools.repeat(None)  # a route's parts where the executor computes no outputs
_NAN = math.nan  # (a load report's transfer times: none; a C double compiled)


# ---------------------------------------------------------------------- dispatch (rule 4)
def check_dispatch(
    d: Dispatch,
    nblocks: Mapping[str, int],
    workers: Container[str],
    live: Container[int],
    slots: list[entities.Slot],
) -> int:
    """A dispatch's shape: a batch id not in use (``live``: the batches under way), some
    requests, a route over the model's blocks contiguously with consecutive stage numbers,
    on known workers (a name in ``workers``, or, in a compiled core's plain dispatch, one
    of the kernel's ``slots`` itself: ``PolicyCore.worker_keys``), ending at or before the
    model's last block (``nblocks``: each model's blocks). Returns the route's first block.
    (Rule 4's check, with the other rules' in ``engine.rules``; here, beside the kernel,
    so that it is compiled with it.)"""
    return check_dispatch_nb(d, nblocks.get(field(d, 1)), workers, live, slots)


def check_dispatch_nb(
    d: Dispatch,
    nb: int | None,
    workers: Container[str],
    live: Container[int],
    slots: list[entities.Slot],
) -> int:
    """:func:`check_dispatch` where the caller has looked the model's blocks up (``nb``;
    None: the model is not in the plan)."""
    # (the NamedTuples' fields in their order: one unpacking each, no attribute lookups)
    bid, model, reqs, route = fields(d)
    if type(reqs) is tuple and type(route) is tuple:  # (compiled: their lengths read in C)
        rq = reqs
        rt = route
        empty = len(rq) == 0 or len(rt) == 0
    else:
        empty = not reqs or not route
    if type(live) is IdMap:  # (the kernel's batches: a C call)
        lm = live
        used = lm.has(bid)
    else:
        used = bid in live
    if used or empty:
        raise ProtocolError(f"Dispatch {bid}: batch ids must be new; requests and route non-empty")
    if nb is None:
        raise ProtocolError(f"Dispatch {bid}: model {model!r} is not in the plan")
    if type(route) is tuple and type(nb) is int:
        # the usual shape (a tuple of route steps, each a tuple whose stage and blocks are
        # ints and whose start is a float), checked quickly: compiled, the items read and
        # compared in C; anything else (or anything wrong) is checked below
        rt = route
        nb_c = nb
        pos_c = 0
        for k in range(len(rt)):
            step = rt[k]
            if type(step) is not RouteStep and type(step) is not tuple:
                break  # (a compiled core's steps: plain tuples of a RouteStep's fields)
            stage, worker, at, blocks = fields(step)
            if type(stage) is not int or type(blocks) is not tuple:
                break
            bt = blocks
            if len(bt) != 2:
                break
            b0 = bt[0]
            b1 = bt[1]
            if type(b0) is not int or type(b1) is not int or type(at) is not float:
                break
            stage_c = stage
            b0_c = b0
            b1_c = b1
            if stage_c != k or b0_c != pos_c or b1_c <= pos_c:
                break
            if type(worker) is Slot:  # (a plain dispatch's: one of this kernel's, by index)
                ws = worker
                if ws.index >= len(slots) or slots[ws.index] is not ws:
                    break
            elif worker not in workers:
                break
            pos_c = b1_c
        else:
            if pos_c <= nb_c:
                return 0
    s0, _, _, blocks = fields(route[0])
    first = pos = blocks[0]
    for k in range(len(route)):  # (not ``enumerate``: compiled, ``k`` is a C integer)
        stage, worker, at, blocks = fields(route[k])
        b0 = field(blocks, 0)
        b1 = field(blocks, 1)
        if type(stage) is int and type(b0) is int and type(b1) is int:
            # (the usual case; compiled, compared as C integers: no int object made)
            stage_c = stage
            b0_c = b0
            b1_c = b1
            bad = stage_c != s0 + k or b0_c != pos or b1_c <= pos
        else:
            bad = stage != s0 + k or b0 != pos or b1 <= pos
        if bad or s0 < 0:
            raise ProtocolError(
                f"Dispatch {bid}: route must cover blocks contiguously with "
                f"consecutive stage numbers (step {k}: stage {stage}, {blocks})"
            )
        if type(worker) is Slot:
            ws = worker
            if ws.index >= len(slots) or slots[ws.index] is not ws:
                raise ProtocolError(f"Dispatch {bid}: unknown worker {ws.id!r}")
        elif worker not in workers:
            raise ProtocolError(f"Dispatch {bid}: unknown worker {worker!r}")
        if type(at) is not float and (not isinstance(at, Real) or isinstance(at, bool)):
            # (it orders the worker's queue: a keyed heap's first key, ``core/heaps.py``)
            raise ProtocolError(
                f"Dispatch {bid}: step {k}'s planned_start_s must be a number of seconds, "
                f"not {at!r}"
            )
        pos = b1
    if pos > nb:
        raise ProtocolError(f"Dispatch {bid}: route ends at block {pos}, {model} has {nb}")
    return first


class Kernel:
    """The state machine (module docstring)."""

    def __init__(
        self,
        view: ClusterView,
        plan: Plan,
        scheduler: Scheduler,
        executor: Executor,
        clock: Clock,
        observer: Observer | None = None,
        links: entities.LinkTable | None = None,
        strict: bool = True,
        track: bool = True,
    ) -> None:
        """``links``: the link model activations cross between stages (None: they take
        no time here, the executor moves them); ``strict``: raise on a scheduler's error
        (module docstring); ``track``: keep ``open`` (module docstring)."""
        self.view = view
        self.plan = plan
        self.scheduler = scheduler
        self.executor = executor
        self.clock = clock
        self.observer = observer if observer is not None else Observer()  # (and ``_obs``)
        self.links = links
        self.strict = strict
        self.workers = {
            wid: entities.Slot(info, k) for k, (wid, info) in enumerate(view.workers.items())
        }
        self._slots = list(self.workers.values())  # (by ``Slot.index``)
        self.retired: set[str] = set()  # workers a switch released (``retire``)
        self.nblocks = {m: view.latency.num_blocks(m) for m in plan.models}
        # (by batch id: a dict's behaviour, its ids C integers where compiled)
        self.batches: IdMap = IdMap()
        self.held: dict[int, Request] = {}
        # :meth:`run`'s arrival while the scheduler's compiled core takes it: held, but
        # not in ``held`` (None: none). Where the core dispatches it at once, as it
        # mostly does, it goes from here into its batch: no dict entry made and taken.
        # Any other action, or a dispatch's steps after its requests are taken, puts it in
        # ``held`` first (:meth:`_hold_fresh`), so every other path sees ``held`` as ever.
        self._fresh = None
        self._fresh_id = -1
        self._fresh_held = False  # (:meth:`_hold_fresh` put it in ``held``)
        self.open: dict[int, Request] | None = {} if track else None
        self.parked: dict[int, tuple[int, str, Any]] = {}
        self.payloads: dict[int, Any] = {}
        # requests the kernel ended while the scheduler held them (their deadline came,
        # their client cancelled): the scheduler's later Dispatch or Drop of one leaves it out
        self.gone: set[int] = set()
        self.deadlines = Deadlines()
        # model -> by block, its bytes out (-1.0: not read yet); the view's factor
        self._out_bytes: dict[str, list[float]] = {}
        # model -> (its blocks, its ``_out_bytes`` list), made at its first dispatch: each
        # batch keeps its model's (``Batch.nblocks``, ``Batch.cuts``), so that its stages'
        # ends look nothing up by the model's name
        self._models: dict[str, tuple[int, list[float]]] = {}
        self._cut_factor = view.cut_bytes_factor
        self._expiry_s = math.inf  # the kernel's deadline timer (inf: none set)
        self._ask = self._ask_strict if strict else self._ask_guarded
        self._apply = self._apply_strict if strict else self._apply_guarded
        self._on_arrival = scheduler.on_arrival  # (bound again by ``start``)
        self._on_stage_done = scheduler.on_stage_done  # (the same)
        # the scheduler's compiled core, where its arrivals and stage reports are that
        # core's own (``scheduling.policy_core.core_of``; set by ``start``): the kernel
        # calls it as C, and makes no report for a stage that completed (strict only: a
        # server's guards call the protocol)
        self._core = None
        # the core whose ``on_timer`` is the scheduler's (``policy_core.timer_core_of``;
        # set by ``start``): :meth:`run` calls it as C where a timer fires (strict only)
        self._tcore = None
        self._unit = True  # every request so far has one row: a batch's rows are its length
        self._rebound = False  # :meth:`rebind` was called: :meth:`run` reads the callbacks again
        # one bound method each: :meth:`run` knows these callbacks by them
        self._timer_cb = self._timer
        self._expire_cb = self._expire
        self._arrived_cb = self._arrived
        self.stage_done_at_cb = self.stage_done_at
        # whether the executor computes outputs to cut per request (the modelled one: no)
        self._outputs = executor.outputs
        # timers on the engine's own virtual clock go straight onto its heap
        self._heap = clock.heap if type(clock) is VirtualClock else None
        executor.attach(self)
        self._exec_start = executor.start  # (as ``attach`` bound it)
        # the modelled executor's start as a C call (``entities.StageStarter``)
        self._starter = starter_of(executor)

    @property
    def observer(self) -> Observer:
        """What records the run (``engine.executor.Observer``). The kernel calls its
        per-event methods through ``_obs``: the observer itself where it is an
        ``entities.ObserverCore`` (C calls where compiled: the simulator's recorder),
        else an ``entities.ObserverCall`` in front of it."""
        return self._observer

    @observer.setter
    def observer(self, observer: Observer) -> None:
        self._observer = observer
        if isinstance(observer, entities.ObserverCore):
            self._obs = observer
        else:
            self._obs = entities.ObserverCall(observer)
        self._reported = type(observer).reported is not Observer.reported

    def detach(self) -> None:
        """After a run: drop the references that make the kernel, its executor and its
        clock a cycle (bound methods kept for speed), so that a run's state is freed
        when the driver lets go of it, not at the next full collection (which slows the
        next run in the same process)."""
        if type(self.clock) is VirtualClock:
            self.clock.heap.clear()
        self._ask = self._apply = self._timer_cb = self._expire_cb = self._arrived_cb = None
        self.stage_done_at_cb = self._exec_start = self._starter = None
        self.executor.close()

    # ------------------------------------------------------------------ the ledger
    def unended(self) -> list[Request]:
        """Every request that arrived and has not ended, by id (held, or in a batch)."""
        if self.open is not None:
            left = dict(self.open)
        else:
            left = dict(self.held)
            for b in self.batches.values():
                left.update((r.id, r) for r in _live(b))
        return sorted(left.values(), key=lambda r: r.id)

    # ------------------------------------------------------------------ plans that move
    def joining(self, view: ClusterView) -> dict[str, WorkerInfo]:
        """The workers of ``view`` the executor does not serve now: new to the kernel,
        or retired by an earlier switch (:meth:`retire`). The control loop has the
        executor make them ready (``Executor.add_workers``) before :meth:`extend`."""
        return {
            wid: info for wid, info in view.workers.items()
            if wid not in self.workers or wid in self.retired
        }  # fmt: skip

    def extend(self, view: ClusterView, plan: Plan) -> list[str]:
        """A new plan is coming (``engine.control``; its joining workers made ready by
        the executor already): the workers of ``view`` the kernel does not have yet
        become slots, retired ones serve again, and the plan's models become known to
        the rule checks. Workers already known keep their slots and queues. Returns the
        ids of the workers added (new slots)."""
        new = {wid: info for wid, info in view.workers.items() if wid not in self.workers}
        for wid, info in new.items():
            w = self.workers[wid] = entities.Slot(info, len(self.workers))
            self._slots.append(w)
        self.retired -= set(view.workers)
        for m in plan.models:
            if m not in self.nblocks:
                self.nblocks[m] = view.latency.num_blocks(m)
        return list(new)

    def retire(self, ids: Iterable[str]) -> list[str]:
        """A switch has ended and the plan no longer uses ``ids``: those that run and
        hold nothing are retired and their executor releases them
        (``Executor.release_workers``); a later plan may bring them back. Returns the
        ids retired."""
        out = []
        for wid in ids:
            w = self.workers.get(wid)
            if w is None or wid in self.retired or w.running is not None or w.ready or w.waiting:
                continue
            out.append(wid)
        if out:
            self.retired.update(out)
            self.executor.release_workers(out)
        return out

    def apply(self, actions: Iterable[object], now: float) -> None:
        """Actions from outside a scheduler callback (a switch between plans starts or
        moves on: ``engine.control``), checked and carried out as a scheduler's are."""
        acts = list(actions)
        if acts:
            self._apply(acts, now)

    def rebind(self) -> None:
        """The scheduler's callbacks changed (``control.switching.Switching`` calls its
        first plan's scheduler directly until a switch begins): read them again. Called
        from a clock callback; :meth:`run` refreshes its own copies after it."""
        self._on_arrival = self.scheduler.on_arrival
        self._on_stage_done = self.scheduler.on_stage_done
        self._core = core_of(self.scheduler) if self.strict else None
        self._tcore = timer_core_of(self.scheduler) if self.strict else None
        self._bind_core()
        self._rebound = True

    # ------------------------------------------------------------------ entry points
    def start(self, now: float) -> None:
        """Start the scheduler (rule 2)."""
        self._ask(lambda _, t: self.scheduler.start(self.view, self.plan, t), None, now)
        # (after its start: a wrapper may bind its inner scheduler's methods then)
        self._on_arrival = self.scheduler.on_arrival
        self._on_stage_done = self.scheduler.on_stage_done
        self._core = core_of(self.scheduler) if self.strict else None
        self._tcore = timer_core_of(self.scheduler) if self.strict else None
        self._bind_core()

    def _bind_core(self) -> None:
        """The scheduler's compiled core, where it numbers its workers
        (``PolicyCore.worker_names``), gets this kernel's slots as their keys
        (``PolicyCore.worker_keys``; a name the kernel has no worker of stays a name): its
        plain dispatches then carry the slots, and no name is looked up per stage."""
        core = self._core
        if core is None:
            return
        names = core.worker_names()
        if names is not None:
            workers = self.workers
            core.worker_keys = [workers.get(n, n) for n in names]

    def arrive(self, r: Request, now: float, payload: Any = None) -> None:
        """A request arrives (each once: the driver gives every request a new id); it
        ends exactly once (``Observer.ended``)."""
        rid = r.id
        if self.open is not None:
            self.open[rid] = r
        self.held[rid] = r
        if r.rows != 1:
            self._unit = False
        if payload is not None:
            self.payloads[rid] = self.executor.admit(payload)
        if self.strict:
            acts = self._on_arrival(r, now)
            if acts:
                self._apply_strict(acts, now)
        else:
            self._ask_guarded(self.scheduler.on_arrival, r, now)
        if self.held.get(rid) is r:
            self._watch(r)

    def cancel(self, request_id: int, now: float, reason: str) -> bool:
        """The request's client went away (``reason`` says how): it ends now, as
        cancelled. Held by the scheduler, it is out of its queue (a later Dispatch or
        Drop of it leaves it out); in a batch, its result is discarded, and a batch
        whose every request is cancelled stops before its next stage starts (the
        scheduler hears ``reason="withdrawn"``). False: it had already ended."""
        r = self.held.pop(request_id, None)
        if r is not None:
            self.gone.add(request_id)
            self._end((r,), CANCELLED, reason, now)
            return True
        if self.open is not None and request_id not in self.open:
            return False
        for b in self.batches.values():
            for r in b.requests:
                if r.id == request_id:
                    return self._cancel_in(b, r, reason, now)
        return False

    def _cancel_in(self, b: entities.Batch, r: Request, reason: str, now: float) -> bool:
        if b.gone is None:
            b.gone = set()
        elif r.id in b.gone:
            return False
        b.gone.add(r.id)
        self._end((r,), CANCELLED, reason, now)
        task = b.task
        if len(b.gone) == len(b.requests) and task.worker.running is not task:
            self._end_batch(b, task, now, WITHDRAWN, 0)  # (not started: it never will)
        return True

    def _at(self, t: float, fn: Any, a: Any, b: Any) -> int:
        """``clock.call_at(t, fn, a, b)``: onto the engine's heap where the clock is its
        virtual one (what its ``call_at`` does, without the call)."""
        if self._heap is not None:
            self._heap.push(t, fn, a, b)
        else:
            self.clock.call_at(t, fn, a, b)
        return 0

    # ------------------------------------------------------------------ deadlines
    def _watch(self, r: Request, again: bool = False) -> None:
        """``r`` is held (arrived; ``again``: returned, or parked): it is dropped at its
        deadline if still held then."""
        if again:
            self.deadlines.again(r)
        else:
            self.deadlines.add(r)
        if r.deadline_s < self._expiry_s:
            self._expiry_s = t = r.deadline_s
            self._at(t, self._expire_cb, None, t)

    def _expire(self, _: Any, at_s: float, now: float) -> bool:
        """The deadline timer: every request still held whose deadline has come ends,
        dropped (``deadline``), as the scheduler would have dropped it had it looked;
        the timer is set again for the next. Whether any ended."""
        if at_s != self._expiry_s:
            return False  # superseded by an earlier one, which set the next
        t = at_s if now < at_s else now
        held = self.held
        due = self.deadlines.due(t, held)
        if due:
            for r in due:
                del held[r.id]
                self.gone.add(r.id)
            if self.open is None:
                self._end(due, DROPPED, "deadline", t)
            else:  # (serving: the text says how many of its model were still queued)
                queued: dict[str, int] = {}
                for q in held.values():
                    queued[q.model] = queued.get(q.model, 0) + 1
                for r in due:
                    figures = (None, queued.get(r.model, 0))
                    text = drop_text("deadline", figures, r.arrival_s, r.deadline_s, r.rows, t)
                    self._end((r,), DROPPED, text, t)
        nxt = self.deadlines.first_s(held)
        self._expiry_s = nxt
        if nxt < math.inf:
            self._at(nxt, self._expire_cb, None, nxt)
        return bool(due)

    def run(
        self,
        models: Sequence[str],
        streams: Sequence[str],
        deadlines_s: Sequence[float],
        times: Sequence[float],
        horizon: float,
    ) -> float:
        """Drive the kernel on its own virtual clock (the simulator's loop): the arrivals
        merged with the clock's callbacks (an arrival and a callback at the same instant:
        the callback first), until both are spent or the next callback is past
        ``horizon``. Returns the time of the last event (a deadline timer that found
        nothing due does not count: it changes nothing).

        The arrivals come as columns, as the simulator has them from its trace: the
        ``i``-th request is ``Request(i, models[i], streams[i], times[i],
        deadlines_s[i])``, one row, no payload (``times`` sorted, a stream's deadlines in
        order); the loop makes each as it arrives (``core.records.record``: no Python
        call), its time and deadline as floats then (the two columns are best given as
        ``array("d")``s: compiled, C doubles read from their memory; anything else is
        copied into one first).

        The loop is the kernel's so that its per-request path costs no call beyond the
        scheduler's: an arrival, a timer and a modelled stage's end are :meth:`arrive`,
        :meth:`_timer` and :meth:`stage_done_at` written inline (the same steps; an
        arrival's id is its index, and its one row leaves batches' sizes their lengths;
        an input's transfer's end is :meth:`_arrived`, without its call)."""
        clock = self.clock
        if type(clock) is not VirtualClock:
            raise TypeError("Kernel.run drives the engine's VirtualClock")
        if not self.strict or self.open is not None or self.payloads:
            return self._run_plain(models, streams, deadlines_s, times, horizon)
        heap = clock.heap
        held = self.held
        on_arrival, on_timer = self.scheduler.on_arrival, self.scheduler.on_timer
        timer, done_at, arrived = self._timer_cb, self.stage_done_at_cb, self._arrived_cb
        dl = self.deadlines  # (compiled, its methods C calls and ``fifos`` a dict read in C)
        fifos = dl.fifos
        expire = self._expire_cb
        core = self._core  # (where there is one: its arrivals as C calls)
        tcore = self._tcore  # (likewise its timers)
        # (the names' columns as lists, the times' as C doubles: compiled, each item read
        # in C, a time made a float only as its request arrives)
        models_l = models if type(models) is list else list(models)
        streams_l = streams if type(streams) is list else list(streams)
        deadlines_a = deadlines_s if type(deadlines_s) is array else array("d", deadlines_s)
        times_a = times if type(times) is array else array("d", times)
        n = len(times_a)
        i = 0
        now = 0.0
        # (the next arrival's time, a C double compiled: no float made per comparison; the
        # arrival's own objects, its time's and its id's, made once and passed on)
        t_next = times_a[0] if n else math.inf
        while True:
            if t_next < heap.first_s():
                t_obj = times_a[i]
                rid = i
                now = t_next
                heap.now_s = t_next  # (the clock's ``t``: a C double, no float made)
                stream = streams_l[i]
                dl_obj = deadlines_a[i]
                r = record7(Request, rid, models_l[i], stream, t_obj, dl_obj, None, 1)
                # still held (``_watch``, inline below): where no action came, nothing took
                # it, and it is not looked up
                kept = True
                if core is not None:
                    core.plain = True  # (its dispatches as plain tuples: this call's)
                    self._fresh = r  # (held, as ``_fresh``: ``__init__``)
                    self._fresh_id = i
                    self._fresh_held = False
                    try:
                        acts = core.on_arrival(r, now)
                        if acts:
                            self._apply_core(acts, now)
                    except BaseException:
                        self._hold_fresh()
                        raise
                    if self._fresh is not None:  # nothing took it: held from now on
                        self._fresh = None
                        held[rid] = r
                    elif self._fresh_held:  # an action came before: ``held`` tells
                        kept = held.get(rid) is r
                    else:  # a dispatch took it
                        kept = False
                else:
                    held[rid] = r
                    acts = on_arrival(r, t_obj)
                    if acts:
                        self._apply_strict(acts, now)
                        kept = held.get(rid) is r
                if kept:  # (``_watch``: a stream's deadlines come in order)
                    q = fifos.get(stream)
                    t = dl_obj
                    if q is None:
                        dl.add(r)
                    else:
                        if not q:
                            dl.head(q, t)
                        q.append(rid)
                    if t < self._expiry_s:
                        self._expiry_s = t
                        heap.push(t, expire, None, t)  # (``clock.call_at``, without its call)
                i += 1
                t_next = times_a[i] if i < n else math.inf
                continue
            if heap.first_s() > horizon or heap.n == 0:
                return now
            last = now
            now = heap.pop_into()
            fn, a, b = heap.fn, heap.a, heap.b
            heap.now_s = now
            if fn is done_at:  # ``stage_done_at``, inline
                task = a
                if task.version == b:
                    self.stage_done(task, now, None)
            elif fn is arrived:  # ``_arrived``, inline (a stage's input came over the links)
                self._input_arrived(a, now)
            elif fn is timer:  # ``_timer``, inline
                if tcore is not None:
                    tcore.plain = True
                    acts = tcore.on_timer(a, b if now < b else now)
                    if acts:
                        self._apply_core(acts, b if now < b else now)
                else:
                    acts = on_timer(a, b if now < b else now)
                    if acts:
                        self._apply_strict(acts, b if now < b else now)
            elif fn is expire:
                if not self._expire(a, b, now):
                    now = last  # (it found nothing due: not an event of the run's)
            else:
                fn(a, b, now)
                if self._rebound:  # (a switch between plans began: ``rebind``)
                    self._rebound = False
                    on_arrival, on_timer = self.scheduler.on_arrival, self.scheduler.on_timer
                    core = self._core
                    tcore = self._tcore

    def _run_plain(
        self,
        models: Sequence[str],
        streams: Sequence[str],
        deadlines_s: Sequence[float],
        times: Sequence[float],
        horizon: float,
    ) -> float:
        """:meth:`run` through the entry points (serving's guards, tracked requests)."""
        clock = self.clock
        heap = clock.heap  # type: ignore[attr-defined]
        n, i, now = len(times), 0, 0.0
        while True:
            if i < n and times[i] < heap.first_s():
                now = clock.t = times[i]  # type: ignore[attr-defined]
                r = record(Request, (i, models[i], streams[i], times[i], deadlines_s[i], None, 1))
                self.arrive(r, now)
                i += 1
                continue
            if heap.first_s() > horizon or not len(heap):
                return now
            last = now
            now = heap.pop_into()
            fn, a, b = heap.fn, heap.a, heap.b
            clock.t = now  # type: ignore[attr-defined]
            if fn is self._expire_cb:
                if not self._expire(a, b, now):
                    now = last  # (as in ``run``)
            else:
                fn(a, b, now)

    def worker_lost(self, worker: str, now: float) -> None:
        """The worker is gone (rule 9): nothing starts on it again; the scheduler hears
        of it first, then of the batches it held (running, queued or deferred)."""
        w = self.workers.get(worker)
        if w is None or w.lost:
            return
        w.lost = True
        self._ask(self.scheduler.on_worker_lost, worker, now)
        victims = []
        t = w.running
        if t is not None:
            w.running = None
            self._obs.stage_ended(t, now, "failed", 0)
            victims.append(t)
        victims += [t for t in w.queued() if not t.dead]
        victims += [t for t in w.waiting if not t.dead]
        w.ready.clear()
        w.waiting.clear()
        for t in victims:
            if not t.dead and t.batch.alive:
                self._end_batch(t.batch, t, now, lost_reason(t.batch.route), 0)

    def close(self, now: float, batch_reason: str, held_reason: str) -> None:
        """The end of a run: batches under way fail (``batch_reason``; a running stage
        is cut here), requests the scheduler still holds are dropped (``held_reason``).
        Nothing is reported to the scheduler."""
        for b in list(self.batches.values()):
            task = b.task
            w = task.worker
            if w.running is task:
                w.running = None
                self._obs.stage_ended(task, now, "failed", 0)
            b.alive = False
            for t in tasks_of(b):
                t.dead = True
            live = _live(b)
            if live:
                self._end(live, FAILED, batch_reason, now)
        self.batches.clear()
        held = sorted(self.held.values(), key=lambda r: r.id)
        self.held.clear()
        self.gone.clear()
        self.deadlines.clear()
        if held:
            self._end(held, DROPPED, held_reason, now)

    def fail_all(self, reason: str, now: float) -> None:
        """After a fault that leaves the state in doubt (a bug in a callback): every
        request not yet ended fails with ``reason``, batches and queues are forgotten
        (their executors' late reports are ignored), so nothing hangs and the workers
        serve what comes next."""
        left = self.unended()
        for b in self.batches.values():
            b.alive = False
            for t in tasks_of(b):
                t.dead = True
        self.batches.clear()
        for w in self.workers.values():
            if w.running is not None:
                w.running.dead = True
            w.running = None
            w.ready.clear()
            w.waiting.clear()
        self.held.clear()
        self.gone.clear()
        self.deadlines.clear()
        if left:
            self._end(left, FAILED, reason, now, check=False)

    # ------------------------------------------------------------------ executors' reports
    def stage_done(self, task: entities.Task, now: float, output: Any = None) -> None:
        """Every block of ``task`` ran; ``output`` its result (what the next step takes,
        or, at the route's end, what ``Executor.split`` cuts per request)."""
        if task.dead:  # its batch ended meanwhile (worker lost, run closed)
            return
        w = task.worker
        b = task.batch
        w.running = None
        step = task._step  # (as the route holds it: ``Task.step``)
        blocks = field(step, STEP_BLOCKS)
        blk0 = blocks[0]  # (C integers compiled: ``check_dispatch`` took them as such)
        blk1 = blocks[1]
        self._obs.stage_ended(task, now, "completed", blk1 - blk0)
        last = task.index == len(b._route) - 1
        reason = ""
        withdraw = None
        if last:
            parts = self._split(task, output, now) if self._outputs else _NO_PARTS
            if parts is None:
                return  # the batch failed
            b.alive = False
            self.batches.discard(b.id)
            # the batch and its tasks a cycle no more: freed as soon as they are dropped,
            # not by the garbage collector (which a cycle a batch made run ~8x as often)
            b.task = None
            end_block = blk1
            reqs = b.requests
            if b.gone is not None:  # (some were cancelled: their parts are discarded)
                keep = [k for k, r in enumerate(reqs) if r.id not in b.gone]
                reqs = tuple([reqs[k] for k in keep])
                if self._outputs:
                    parts = [parts[k] for k in keep]  # type: ignore[index]
            if end_block < b.nblocks:
                # an open route: the requests are parked here, back with the scheduler
                reason = PARKED
                held, parked, wid = self.held, self.parked, w.id
                for r, part in zip(reqs, parts, strict=False):
                    held[r.id] = r
                    parked[r.id] = (end_block, wid, part)
                    self._watch(r, again=True)
            elif not reqs:
                pass
            else:
                if self.open is not None or self.parked or self.payloads:
                    self._close(reqs)
                # finished: ok or late, as ``core.outcome.finished`` says
                self._obs.ended(reqs, None, "", now, parts if self._outputs else None)
        elif b.gone is not None and len(b.gone) == len(b.requests):
            # every request was cancelled while this stage ran: the next does not start
            reqs = ()
            nw = self._slot(field(b._route[b.stage + 1], STEP_WORKER))
            withdraw = new_task(b, b.stage + 1, nw)
        else:
            reqs = b.requests if b.gone is None else _live(b)
            b.stage += 1
            b.payload = output
            nw = self._slot(field(b._route[b.stage], STEP_WORKER))
            ntask = new_task(b, b.stage, nw)
            add_task(b, ntask)
            links = self.links
            if links is not None:
                nbytes = self._cut_bytes_in(b.cuts, b.model, blk1 - 1, b.rows)
                x0 = links.send_between_at(w, nw, nbytes, now)  # (its end: ``end_s``)
                self._transfer_s(ntask, x0, links.end_s, now)
            else:
                self._transfer_s(ntask, now, now, now)
        core = self._core
        if core is not None and not self._reported:
            # the report's fields to the scheduler's core, as C: no report made
            # (``scheduling.policy_core``; what ``on_stage_done`` of the report would do)
            core.plain = True
            acts = core.stage_report(
                "stage", b.id, b.model, field(step, STEP_STAGE), w.id, task.start_s, now,
                reqs, True, last, reason, blocks, blk1 - blk0, task.xfer_start_s,
                task.xfer_end_s, now,
            )  # fmt: skip
            if acts:
                self._apply_core(acts, now)
        else:
            # (engine.rules.stage_done_report, made without its Python calls; ``now_s``:
            # the one float object of ``now``, for the report and the call)
            now_s = now
            rep = record15(
                StageReport, "stage", b.id, b.model, field(step, STEP_STAGE), w.id,
                task.start_s, now_s, reqs, True, last, reason, blocks, blk1 - blk0,
                task.transfer_start_s, task.transfer_end_s,
            )  # fmt: skip
            if self._reported:
                self._observer.reported(rep)
            if self.strict:
                acts = self._on_stage_done(rep, now_s)
                if acts:
                    self._apply_strict(acts, now)
            else:
                self._ask_guarded(self.scheduler.on_stage_done, rep, now)
        if withdraw is not None and b.alive:
            self._end_batch(b, withdraw, now, WITHDRAWN, 0)
        if w.running is None and w.ready.n > 0:
            self._try_start(w, now)

    def stage_done_at(self, task: entities.Task, version: int, now: float) -> None:
        """:meth:`stage_done` without an output, for an executor that puts the end of a
        stage on the clock (``clock.call_at(end, kernel.stage_done_at_cb, task,
        task.version)``): ignored when the task's ``version`` moved on meanwhile (the
        executor stopped it at a block boundary instead)."""
        if task.version == version:
            self.stage_done(task, now, None)

    def stage_stopped(self, task: entities.Task, blocks_done: int, now: float) -> None:
        """``task`` stopped at a block boundary after a ``Preempt`` (``blocks_done``
        ran): its requests go back to the scheduler (rule 7)."""
        w = task.worker
        if w.running is not task or task.dead:
            return
        w.running = None
        self._obs.stage_ended(task, now, PREEMPTED, blocks_done)
        self._end_batch(task.batch, task, now, PREEMPTED, blocks_done)
        self._try_start(w, now)

    def stage_failed(self, task: entities.Task, reason: str, now: float) -> None:
        """``task`` could not run, or raised (``reason`` says why): its batch's requests
        end as failed; the worker serves its next task."""
        if task.dead or not task.batch.alive:
            return
        w = task.worker
        running = w.running is task
        if running:
            w.running = None
        else:
            task.start_s = now
        self._obs.stage_ended(task, now, "failed", 0)
        self._end_batch(task.batch, task, now, reason, 0)
        if running:
            self._try_start(w, now)

    def defer(self, task: entities.Task) -> None:
        """The executor cannot start the running ``task`` until a load on its worker
        ends: the worker is free meanwhile; the task is queued again when the load ends
        (:meth:`load_finished`)."""
        w = task.worker
        if w.running is task:
            w.running = None
        w.waiting.append(task)

    def load_finished(
        self, a: Load, start_s: float, now: float, ok: bool = True, reason: str = ""
    ) -> None:
        """A load ended (``ok=False``: it failed, ``reason`` says why): the scheduler
        hears of it; after a load that ended well, the worker's deferred tasks are
        queued again; after one that failed, the deferred tasks that needed its blocks
        fail with it (nothing else would bring their weights)."""
        worker = field(a, LOAD_WORKER)
        model = field(a, LOAD_MODEL)
        blocks = field(a, LOAD_BLOCKS)
        w = self.workers[worker]
        if not ok and w.waiting:
            lo, hi = blocks
            hit = [t for t in w.waiting if t.batch.model == model
                   and t.step.blocks[0] < hi and lo < t.step.blocks[1]]  # fmt: skip
            if hit:
                w.waiting = [t for t in w.waiting if t not in hit]
                for t in hit:
                    self.stage_failed(t, f"its weights did not load: {reason}", now)
        if ok and w.waiting:
            waiting, w.waiting = w.waiting, []
            for t in waiting:
                w.ready.push(field(t._step, STEP_PLANNED_START_S), None, t, None)
        core = self._core
        if core is not None and not self._reported:
            # the load's report's fields to the scheduler's core, as C (as ``stage_done``
            # does: no report made, no Python call; a cold-start-heavy run loads every few
            # requests)
            core.plain = True
            acts = core.stage_report(
                "load", -1, model, 0, worker, start_s, now, (), ok, False, reason, blocks, 0,
                _NAN, _NAN, now,
            )  # fmt: skip
            if acts:
                self._apply_core(acts, now)
        else:
            # (``engine.rules.load_report``, made without its Python calls)
            rep = record(StageReport, (
                "load", -1, model, 0, worker, start_s, now, (), ok, False, reason, blocks, 0,
                None, None,
            ))  # fmt: skip
            self._report(rep, now)
        if ok and w.running is None and w.ready:
            self._try_start(w, now)

    def resume(self, worker: str, now: float) -> None:
        """A load on ``worker`` now streams (its stages may run each block as it
        arrives): the worker's deferred tasks are queued again."""
        w = self.workers[worker]
        if w.waiting:
            waiting, w.waiting = w.waiting, []
            for t in waiting:
                w.ready.push(field(t._step, STEP_PLANNED_START_S), None, t, None)
            if w.running is None:
                self._try_start(w, now)

    # ------------------------------------------------------------------ the scheduler
    def _ask_strict(self, fn: Any, arg: Any, now: float) -> None:
        acts = fn(arg, now)
        if acts:
            self._apply(acts, now)

    def _ask_guarded(self, fn: Any, arg: Any, now: float) -> None:
        try:
            acts = fn(arg, now)
        except Exception as err:
            self._scheduler_failed(err, now)
            return
        if acts:
            self._apply(acts, now)

    def _scheduler_failed(self, err: Exception, now: float) -> None:
        """A scheduler raised: what it holds may never be dispatched; end it as failed."""
        held = sorted(self.held.values(), key=lambda r: r.id)
        self.held.clear()
        self.gone.clear()
        LOG.error("the scheduler raised; its %d requests fail", len(held), exc_info=err)
        if held:
            self._end(held, FAILED, f"scheduler_error: {type(err).__name__}: {err}", now)

    def _report(self, rep: StageReport, now: float) -> None:
        if self._reported:
            self._observer.reported(rep)
        self._ask(self.scheduler.on_stage_done, rep, now)

    def _timer(self, token: object, at_s: float, now: float) -> None:
        """Rule 6: a timer never fires before its time (a wall clock may run a callback
        a hair early: the scheduler is then told its own time)."""
        if now < at_s:
            now = at_s
        if self.strict:
            tcore = self._tcore
            if tcore is not None:
                tcore.plain = True
                acts = tcore.on_timer(token, now)
                if acts:
                    self._apply_core(acts, now)
            else:
                acts = self.scheduler.on_timer(token, now)
                if acts:
                    self._apply_strict(acts, now)
        else:
            self._ask_guarded(self.scheduler.on_timer, token, now)

    # ------------------------------------------------------------------ actions
    def _apply_strict(self, actions: Iterable[object], now: float) -> None:
        for a in actions:
            self._take(a, now, False)

    def _apply_core(self, actions: list, now: float) -> None:
        """A compiled core's actions, called with ``PolicyCore.plain`` raised: as
        :meth:`_apply_strict`, but a plain tuple is a dispatch (the fields of a
        ``Dispatch``, its route's steps plain tuples of a ``RouteStep``'s: no NamedTuple
        made and freed per batch and step). From a scheduler's Python, a plain tuple is no
        action (``_act``)."""
        for a in actions:
            self._take(a, now, True)

    def _take(self, a: object, now: float, plain: bool) -> None:
        """One action, strictly (``plain``: :meth:`_apply_core`'s)."""
        kind = type(a)
        if kind is Dispatch or (plain and kind is tuple):  # the common cases, without a call
            self._dispatch(a, now)  # type: ignore[arg-type]
            return
        if self._fresh is not None:
            self._hold_fresh()
        if kind is SetTimer:
            at = at_s = a.at_s  # type: ignore[attr-defined]
            if at < now:
                check_timer(at, now)
                at = now
            self._at(at, self._timer_cb, a.token, at_s)  # type: ignore[attr-defined]
        else:
            self._act(a, now)

    def _apply_guarded(self, actions: Iterable[object], now: float) -> None:
        for a in actions:
            try:
                self._act(a, now)
            except Exception as err:
                self._refused(a, err, now)

    def _refused(self, a: object, err: Exception, now: float) -> None:
        """Serving: an action that breaks a rule is refused, loudly; what the scheduler
        believes it did is made true where it can be (a refused load is reported failed)
        and requests it may have lost track of fail."""
        LOG.error(
            "refused %s: %s", type(a).__name__, err, exc_info=not isinstance(err, ProtocolError)
        )
        why = f"scheduler_error: {err}"
        if type(a) is Dispatch or type(a) is Drop:
            # the scheduler let go of them (it believes them dispatched or dropped): the
            # ones still held end, as failed
            lost = [r for r in a.requests if self.held.get(r.id) is r]  # type: ignore[attr-defined]
            self.gone.difference_update(r.id for r in a.requests)  # type: ignore[attr-defined]
            for r in lost:
                del self.held[r.id]
            if lost:
                self._end(lost, FAILED, why, now)
        elif type(a) is Load and a.worker in self.workers:
            self._report(load_report(a.worker, a.model, a.blocks, now, now, False, why), now)

    def _act(self, a: object, now: float) -> None:
        kind = type(a)
        if kind is Dispatch:
            self._dispatch(a, now)  # type: ignore[arg-type]
        elif kind is SetTimer:
            at = a.at_s  # type: ignore[attr-defined]
            if at < now:
                check_timer(at, now)
                at = now
            self._at(at, self._timer_cb, a.token, a.at_s)  # type: ignore[attr-defined]
        elif kind is Drop:
            self._drop(a, now)  # type: ignore[arg-type]
        elif kind is Preempt:
            self._preempt(a, now)  # type: ignore[arg-type]
        elif kind is Load:
            self._check_load(a)
            self.executor.load(a, now)  # type: ignore[arg-type]
        elif kind is Evict:  # (read as a ``Load``'s first three fields: its own)
            self._check_load(a)
            t = self.workers[field(a, LOAD_WORKER)].running
            if t is not None and t.batch.model == field(a, LOAD_MODEL):
                lo, hi = field(a, LOAD_BLOCKS)
                if lo < t.step.blocks[1] and t.step.blocks[0] < hi:
                    raise evict_running(a, t.batch.id)  # type: ignore[arg-type]
            self.executor.evict(a, now)  # type: ignore[arg-type]
        else:
            raise unknown_action(a)

    def _check_load(self, a: Any) -> None:
        """Rule 8 (``engine.rules.check_load``): its test inline, its call only to say
        what is wrong."""
        nb = self.nblocks.get(field(a, LOAD_MODEL))  # (a ``Load`` or an ``Evict``: ``_act``)
        blocks = field(a, LOAD_BLOCKS)
        if (
            nb is None
            or field(a, LOAD_WORKER) not in self.workers
            or not 0 <= blocks[0] < blocks[1] <= nb
        ):
            check_load(a, self.nblocks, self.workers)

    def _drop(self, a: Drop, now: float) -> None:
        """The scheduler gives up on requests it holds, for a reason of the closed set:
        the simulator records the kind; a driver that answers clients (``track``) tells
        each one what happened, with the Drop's figures (``core.outcome.drop_text``)."""
        held, reqs, why = self.held, a.requests, a.reason
        if why not in DROP_KINDS:
            raise unknown_drop_reason(why)
        if self.gone:  # those the kernel ended already: the scheduler lets go of them
            gone = self.gone
            left = [r for r in reqs if r.id not in gone]
            gone.difference_update(r.id for r in reqs)
            if not left:
                return
            reqs = tuple(left)
        # (the texts before any request leaves the ledger: bad figures raise here)
        texts = None
        if self.open is not None:
            texts = [
                drop_text(why, a.figures, r.arrival_s, r.deadline_s, r.rows, now) for r in reqs
            ]
        for k, r in enumerate(reqs):
            if held.pop(r.id, None) is None:
                self._give_back(reqs[:k])
                raise drop_not_held(r)
        if texts is None:
            self._end(reqs, DROPPED, why, now)
            return
        for r, text in zip(reqs, texts, strict=True):
            self._end((r,), DROPPED, text, now)

    def _dispatch(self, d: Dispatch, now: float) -> None:
        bid, model, reqs, route = fields(d)  # (one unpacking: cheaper than the fields)
        mi = self._models.get(model)
        if mi is None:
            nb = self.nblocks.get(model)
            if nb is not None:
                mi = self._models[model] = (nb, self._cuts(model))
        else:
            nb = mi[0]
        first = check_dispatch_nb(d, nb, self.workers, self.batches, self._slots)
        held, parked = self.held, self.parked
        trim = False
        for k, r in enumerate(reqs):
            if type(r) is Request:  # (its fields read in C)
                rid = field(r, REQUEST_ID)
                r_model = field(r, REQUEST_MODEL)
            else:
                rid = r.id
                r_model = r.model
            got = self._fresh
            if got is not None and (r is got or rid == self._fresh_id):
                self._fresh = None  # (:meth:`run`'s arrival: held, not in ``held``)
            else:
                got = held.pop(rid, None)
            if got is None or r_model != model:
                self._hold_fresh()
                if got is None and rid in self.gone and r_model == model:
                    trim = True  # ended meanwhile (deadline, cancelled): left out below
                    continue
                if got is not None:
                    held[rid] = got  # (another model's: it stays the scheduler's)
                self._give_back(reqs[:k])
                raise not_held(d, r)
            if parked:
                at = parked.get(rid)
                blk = 0 if at is None else at[0]
                if blk != first:
                    self._give_back(reqs[: k + 1])
                    raise parked_elsewhere(d, r, blk)
            elif first:
                self._give_back(reqs[: k + 1])
                raise parked_elsewhere(d, r, 0)
        if self._fresh is not None:  # (another request's batch: the rest sees ``held``)
            self._hold_fresh()
        if trim:
            gone = self.gone
            given = reqs
            reqs = tuple([r for r in reqs if r.id not in gone])
            gone.difference_update([r.id for r in given])
            if not reqs:  # nothing left to run: the scheduler hears so, after this call
                self.clock.call_at(now, self._withdrawn, d)
                return
            d = d._replace(requests=reqs) if type(d) is Dispatch else (bid, model, reqs, route)
        n_rows = len(reqs) if self._unit else sum([r.rows for r in reqs])
        b = new_batch(d, bid, model, reqs, route, now, n_rows)
        b.nblocks = mi[0]
        b.cuts = mi[1]
        if first > 0:  # a continued batch (rule 4): its input is the parked activations
            b.payload = [parked[r.id][2] for r in reqs]
        elif self.payloads:
            pl = self.payloads
            b.payload = [pl.get(r.id) for r in reqs]
        self.batches.put(bid, b)
        self._obs.dispatched(b, first, now)
        task = new_task(b, 0, self._slot(field(route[0], STEP_WORKER)))
        add_task(b, task)
        if first == 0:
            self._input_arrived(task, now)
            return
        self._gather(task, first, now)

    def _hold_fresh(self) -> None:
        """:meth:`run`'s arrival, where the core has not dispatched it, put in ``held``
        (``__init__``'s ``_fresh``)."""
        r = self._fresh
        if r is not None:
            self._fresh = None
            self._fresh_held = True
            self.held[self._fresh_id] = r

    def _slot(self, worker: Any) -> entities.Slot:
        """A route step's worker's slot: the step's worker itself where it is one (a
        compiled core's plain dispatch: ``PolicyCore.worker_keys``), else by its name."""
        if type(worker) is Slot:
            return worker  # type: ignore[no-any-return]
        return self.workers[worker]

    def _withdrawn(self, d: Dispatch, _: Any, now: float) -> None:
        """A dispatch whose every request had ended (``_dispatch``): reported, not run."""
        d = as_dispatch(d)  # (a compiled core's: a plain tuple)
        rep = stage_ended_report(d, 0, d.route[0].worker, now, now, WITHDRAWN, 0)
        self._report(rep._replace(requests=()), now)

    def _give_back(self, taken: Iterable[Request]) -> None:
        """Requests are the scheduler's again (after a refused action: those it gave;
        never one the kernel ended meanwhile)."""
        held, gone = self.held, self.gone
        for r in taken:
            if r.id not in gone:
                held[r.id] = r

    def _gather(self, task: entities.Task, first: int, now: float) -> None:
        """A continued batch's input: one transfer per worker its requests are parked
        on, each over the links to the stage's worker; the stage may start when all have
        arrived. Activations parked on a lost worker are gone."""
        b = task.batch
        parked, workers = self.parked, self.workers
        counts = parked_sources(b.requests, lambda i: parked[i][1])
        if any(workers[src].lost for src in counts):
            self.stage_failed(task, ACTIVATIONS_LOST, now)
            return
        span = (now, now)
        if self.links is not None:
            span = self.links.gather(
                [(workers[src].gpu_id, k) for src, k in counts.items()],
                task.worker.gpu_id,
                self._cut_bytes(b.model, first - 1, 1),
                now,
            )
        self._transfer(task, span, now)

    def _cut_bytes(self, model: str, after_block: int, rows: int) -> float:
        """Activation bytes crossing the cut after ``after_block`` for a batch of ``rows``
        rows (the view's ``cut_bytes_factor``: 0.5 FP16, 1.0 FP32 of the graph's FP32
        bytes); the graph's bytes per cut are read once."""
        return self._cut_bytes_in(self._cuts(model), model, after_block, rows)

    def _cuts(self, model: str) -> list[float]:
        """``model``'s bytes out by block, as read so far (-1.0: not yet)."""
        per = self._out_bytes.get(model)  # (by model, then a list by block: no key to make)
        if per is None:
            per = self._out_bytes[model] = []
        return per

    def _cut_bytes_in(self, per: list[float], model: str, after_block: int, rows: int) -> float:
        """:meth:`_cut_bytes` where the caller has ``model``'s list (:meth:`_cuts`)."""
        while len(per) <= after_block:
            per.append(-1.0)
        out = per[after_block]  # (compiled: C doubles, the product without floats made)
        if out < 0.0:
            out = self.view.latency.out_bytes(model, after_block)
            per[after_block] = out
        return out * rows * self._cut_factor

    def _transfer(self, task: entities.Task, span: tuple[float, float], now: float) -> None:
        """A stage's input on its way (``span``: the transfer's start and end)."""
        self._transfer_s(task, span[0], span[1], now)

    def _transfer_s(self, task: entities.Task, start_s: float, end_s: float, now: float) -> int:
        """:meth:`_transfer` of the span ``(start_s, end_s)`` (compiled, C doubles: no
        pair made)."""
        task.xfer_start_s = start_s
        task.xfer_end_s = end_s
        if end_s > now:
            self._at(end_s, self._arrived_cb, task, None)
        else:
            self._input_arrived(task, now)
        return 0

    def _arrived(self, task: entities.Task, _: Any, now: float) -> None:
        self._input_arrived(task, now)

    def _input_arrived(self, task: entities.Task, now: float) -> None:
        if task.dead:
            return
        w = task.worker
        if w.running is None and w.ready.n == 0 and not w.lost:
            self._start(w, task, now)  # (the common case: an idle worker, nothing queued)
            return
        w.ready.push(field(task._step, STEP_PLANNED_START_S), None, task, None)
        if w.running is None:
            self._try_start(w, now)

    def _try_start(self, w: entities.Slot, now: float) -> None:
        ready = w.ready
        while w.running is None and ready.n > 0:
            ready.pop_into()
            task = ready.a
            ready.a = None  # (the heap keeps no task it gave)
            if task.dead:
                continue
            if w.lost:
                self.stage_failed(task, lost_reason(task.batch.route), now)
                continue
            self._start(w, task, now)

    def _start(self, w: entities.Slot, task: entities.Task, now: float) -> None:
        task.start_s = now
        w.running = task
        starter = self._starter
        try:
            if starter is not None:
                starter.start(task, now)
            else:
                self._exec_start(task, now)
        except Exception as err:
            self._start_failed(task, err, now)
            return
        if w.running is task:
            task.ran = True

    def _start_failed(self, task: entities.Task, err: Exception, now: float) -> None:
        LOG.error("stage %s of batch %d failed to start", task.index, task.batch.id, exc_info=err)
        self.stage_failed(task, f"stage_error: {type(err).__name__}: {err}", now)

    def _split(self, task: entities.Task, output: Any, now: float) -> list[Any] | None:
        """The executor's parts of a route's output, one per request; None (the batch
        failed) when it cannot cut them."""
        n = len(task.batch.requests)
        try:
            parts = self.executor.split(task, output)
            if len(parts) != n:
                raise ValueError(f"{len(parts)} parts for {n} requests")
        except Exception as err:
            LOG.error("batch %d of %s: its output could not be split", task.batch.id,
                      task.batch.model, exc_info=err)  # fmt: skip
            why = f"bad_output: its output could not be cut per request: {type(err).__name__}"
            why += f": {err}"
            self._end_batch(task.batch, task, now, why, 0)
            if task.worker.running is None and task.worker.ready:
                self._try_start(task.worker, now)
            return None
        return parts

    def _preempt(self, p: Preempt, now: float) -> None:
        b = self.batches.get(p.batch_id)
        if b is None or not b.alive:
            return  # finished or gone: nothing to stop (a race a real system has too)
        task = b.task
        if task.worker.id != p.worker:
            return
        if task.worker.running is task:
            task.stop = True  # at the next block boundary
            self.executor.stop(task, now)
        else:  # queued, deferred or in transfer: it ends here
            self._end_batch(b, task, now, PREEMPTED, 0)

    # ------------------------------------------------------------------ endings
    def _end_batch(
        self, b: entities.Batch, task: entities.Task, now: float, reason: str, blocks_done: int
    ) -> None:
        """Stop a batch before its route's end and report it: its requests go back to
        the scheduler (``reason`` in ``RETURNED``) or fail."""
        b.alive = False
        self.batches.discard(b.id)
        for t in tasks_of(b):
            t.dead = True
        b.task = None  # (see ``stage_done``)
        live = _live(b)
        if reason not in RETURNED and reason != WITHDRAWN:
            # a failure: of the closed set (an executor's own text is a stage's error),
            # saying where it struck
            if not failure_kind(reason):
                reason = f"stage_error: {reason}"
            reason = f"{reason} (stage {task.step.stage} of batch {b.id} on {task.worker.id})"
        if reason in RETURNED:
            self._give_back(live)
            for r in live:
                self._watch(r, again=True)
        elif live:
            self._end(live, FAILED, reason, now)
        start = task.start_s if not math.isnan(task.start_s) else now
        rep = stage_ended_report(
            b.d, task.index, task.worker.id, start, now, reason, blocks_done,
            (task.transfer_start_s, task.transfer_end_s),
        )  # fmt: skip
        if b.gone is not None:
            rep = rep._replace(requests=live)
        self._report(rep, now)

    def _close(self, requests: Sequence[Request], check: bool = True) -> None:
        """Requests end in the ledger (each once: ``ended_twice`` otherwise, where
        ``open`` is kept)."""
        if self.open is not None:
            pop = self.open.pop
            for r in requests:
                if pop(r.id, None) is None and check:
                    raise ended_twice(r.id)
        if self.parked or self.payloads:
            parked, payloads = self.parked, self.payloads
            for r in requests:
                parked.pop(r.id, None)
                payloads.pop(r.id, None)

    def _end(
        self, requests: Sequence[Request], outcome: int, reason: str, now: float,
        check: bool = True,
    ) -> None:  # fmt: skip
        """Requests end, all with one outcome (dropped or failed) and reason."""
        self._close(requests, check)
        self._obs.ended(requests, (outcome,) * len(requests), reason, now, None)


def _live(b: entities.Batch) -> tuple[Request, ...]:
    """A batch's requests that have not ended (all but those cancelled meanwhile)."""
    if b.gone is None:
        return b.requests
    gone = b.gone
    return tuple([r for r in b.requests if r.id not in gone])
