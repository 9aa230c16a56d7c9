"""The runtime engine: a driver of the engine kernel (``engine.kernel``) on a clock, with
real (or emulated) workers instead of simulated ones.

The kernel is the state machine the simulator drives too: requests, batches, stages,
worker queues, open-route parking and gathering, endings and reports (so the same
scheduler meets the same engine, and a scheduler that breaks the protocol gets the same
``ProtocolError``). This module adds the clocks and the recording a server needs:

- :class:`LoopClock` runs callbacks on an asyncio event loop at wall-clock times
  (serving); one that raises is logged and handed to the engine's fault handler, so a
  bug in a callback ends requests as failed instead of leaving them hanging;
- :class:`VirtualClock` runs them in time order without waiting (tests, and the parity
  check with the simulator);
- :class:`Recording`, the kernel's observer here: every ending goes to ``on_done``
  (exactly once), every dispatch to a bounded log.

Executors (``engine.executor.Executor``): the modelled one (``engine.modelled``,
``--emulate``: a stage takes the latency model's time), ``TorchExecutor`` (the model's
blocks really run on a thread), ``RayExecutor`` (Ray actors, real or emulated). Between
stages, emulated activations cross the simulator's link model; real ones are handed over
by the executor.

Faults: an executor that finds its worker gone (a dead Ray actor) calls
:meth:`RuntimeEngine.worker_lost`; the scheduler hears of it first, then the batches on
that worker come back to it (``reason="worker lost"``, protocol rule 9). A stage that
raises ends its batch's requests as failed with the error as the reason. With
``strict=False`` (serving) a scheduler's error is contained too (``engine.kernel``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Sequence
from typing import Any

from hetserve.core.errors import HetserveError
from hetserve.core.outcome import failure_text, finished
from hetserve.core.plan import Plan
from hetserve.core.requests import Request
from hetserve.engine.clock import VirtualClock
from hetserve.engine.entities import Batch, Task
from hetserve.engine.executor import Callback, Executor, Observer
from hetserve.engine.kernel import Kernel
from hetserve.engine.links import LinkTable
from hetserve.scheduling.protocol import ClusterView, Scheduler

LOG = logging.getLogger("hetserve.runtime")

__all__ = ["LoopClock", "Recording", "RuntimeEngine", "Task", "VirtualClock"]


class LoopClock:
    """Wall-clock seconds since the clock was made, on an asyncio loop. A callback that
    raises goes to ``on_error(error, now)`` (the engine's fault handler), after a log."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.t0 = loop.time()
        self.on_error: Callable[[BaseException, float], None] | None = None

    def now(self) -> float:
        return self.loop.time() - self.t0

    def call_at(self, t: float, fn: Callback, a: Any = None, b: Any = None) -> None:
        self.loop.call_at(self.t0 + t, self._call, fn, a, b)

    def call_soon(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop, from any thread, guarded like a callback."""
        self.loop.call_soon_threadsafe(self.guard, fn, *args)

    def _call(self, fn: Callback, a: Any, b: Any) -> None:
        self.guard(fn, a, b, self.now())

    def guard(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)``; an exception is logged and handed to ``on_error``."""
        try:
            fn(*args)
        except Exception as err:
            LOG.error("a callback raised", exc_info=err)
            if self.on_error is not None:
                self.on_error(err, self.now())


class Recording(Observer):
    """The runtime's observer: endings to ``on_done(request, outcome, reason, output)``,
    dispatches to ``dispatch_log`` (``(time, batch id, model, request ids, workers of the
    route)``, the last ``log_limit`` of them; None: all)."""

    def __init__(
        self,
        on_done: Callable[[Request, int, str, Any], None] | None = None,
        log_limit: int | None = None,
    ) -> None:
        self.on_done = on_done
        self.dispatch_log: collections.deque[
            tuple[float, int, str, tuple[int, ...], tuple[str, ...]]
        ] = collections.deque(maxlen=log_limit)

    def dispatched(self, batch: Batch, first_block: int, now: float) -> None:
        self.dispatch_log.append(
            (now, batch.id, batch.model, tuple(r.id for r in batch.requests),
             tuple(s.worker for s in batch.route))
        )  # fmt: skip

    def ended(
        self,
        requests: Sequence[Request],
        outcomes: Sequence[int] | None,
        reason: str,
        now: float,
        outputs: Sequence[Any] | None,
    ) -> None:
        on_done = self.on_done
        if on_done is None:
            return
        if outcomes is None:
            outcomes = [finished(now, r.deadline_s) for r in requests]
        if outputs is None:
            for r, o in zip(requests, outcomes, strict=True):
                on_done(r, o, reason, None)
        else:
            for r, o, out in zip(requests, outcomes, outputs, strict=True):
                on_done(r, o, reason, out)


class RuntimeEngine:
    """Runs a Scheduler against workers on a clock (module docstring)."""

    def __init__(
        self,
        view: ClusterView,
        plan: Plan,
        scheduler: Scheduler,
        executor: Executor,
        clock: Any,
        on_done: Callable[[Request, int, str, Any], None] | None = None,
        emulate_links: bool = True,
        log_limit: int | None = None,
        observer: Recording | None = None,
        strict: bool = True,
    ) -> None:
        """``emulate_links``: activations between stages take the link model's time
        (emulated workers; real ones move them themselves); ``observer``: what records
        (default: :class:`Recording` with ``on_done`` and ``log_limit``); ``strict``:
        a scheduler's error raises (tests) or is contained (serving: ``False``)."""
        self.clock = clock
        self.observer = observer if observer is not None else Recording(on_done, log_limit)
        links = LinkTable(view.cluster, pins=plan.paths) if emulate_links else None
        self.kernel = Kernel(
            view, plan, scheduler, executor, clock, self.observer, links, strict=strict
        )
        if isinstance(clock, LoopClock):
            clock.on_error = self.fault

    # ------------------------------------------------------------------ what the server reads
    @property
    def view(self) -> ClusterView:
        return self.kernel.view

    @property
    def plan(self) -> Plan:
        return self.kernel.plan

    @property
    def scheduler(self) -> Scheduler:
        return self.kernel.scheduler

    @property
    def executor(self) -> Executor:
        return self.kernel.executor

    @property
    def on_done(self) -> Callable[[Request, int, str, Any], None] | None:
        """Where every ending goes: ``on_done(request, outcome, reason, output)``."""
        return self.observer.on_done

    @on_done.setter
    def on_done(self, fn: Callable[[Request, int, str, Any], None] | None) -> None:
        self.observer.on_done = fn

    @property
    def dispatch_log(self) -> collections.deque:
        return self.observer.dispatch_log

    @property
    def lost(self) -> set[str]:
        return {w for w, s in self.kernel.workers.items() if s.lost}

    @property
    def parked(self) -> dict[int, tuple[int, str, Any]]:
        return self.kernel.parked

    def running(self, worker: str) -> Task | None:
        """The task running on ``worker`` (None: idle)."""
        return self.kernel.workers[worker].running

    def queued(self, worker: str) -> int:
        """Stages queued on ``worker`` (their input arrived; not yet started)."""
        return sum(1 for t in self.kernel.workers[worker].queued() if not t.dead)

    # ------------------------------------------------------------------ entry points
    def start(self) -> None:
        self.kernel.start(self.clock.now())

    def submit(self, request: Request, payload: Any = None) -> None:
        """A request arrives now; its outcome comes through ``on_done`` exactly once."""
        if request.model not in self.kernel.nblocks:
            raise HetserveError(f"no model {request.model!r} is served")
        if request.id in (self.kernel.open or ()):
            raise HetserveError(f"request {request.id} submitted twice")
        self.kernel.arrive(request, self.clock.now(), payload)

    def cancel(self, request_id: int, reason: str) -> bool:
        """The request's client went away: it ends now, cancelled, with ``reason``
        (``Kernel.cancel``). False: it had ended already."""
        return self.kernel.cancel(request_id, self.clock.now(), reason)

    def worker_lost(self, worker: str) -> None:
        """The worker is gone (protocol rule 9)."""
        self.kernel.worker_lost(worker, self.clock.now())

    def close(self, reason: str = "shutdown") -> None:
        """The end of serving: batches under way fail and requests the scheduler still
        holds are dropped (a drop of kind ``shutdown``), all with ``reason``, each through
        its one ending."""
        held = reason if reason.startswith("shutdown") else f"shutdown: {reason}"
        ran = failure_text("shutdown", "" if reason == "shutdown" else reason)
        self.kernel.close(self.clock.now(), ran, held)

    def fault(self, err: BaseException, now: float) -> None:
        """A bug in a callback (the kernel's state may be inconsistent): every request not
        yet ended fails with the error as the reason (``Kernel.fail_all``), so nothing
        hangs; the workers serve what comes next."""
        n = len(self.kernel.unended())
        why = f"internal: {type(err).__name__}: {err}"
        self.kernel.fail_all(why, now)
        LOG.error("%s; %d requests failed", why, n)
