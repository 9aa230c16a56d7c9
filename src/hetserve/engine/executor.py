"""The seams of the engine kernel (``engine.kernel``): what a driver plugs into it.

A driver is a clock and executors (``docs/design.md``, "Engines"): the simulator's clock is
its event heap and its executor the modelled one (``engine.modelled``); the runtime's
clock is an asyncio loop (or a virtual clock in tests) and its executors run PyTorch
blocks on threads, call Ray actors, or are the same modelled executor (``--emulate``).
Three declared protocols, each method documented with who calls it and when:

- :class:`Clock`: time, and callbacks at a time.
- :class:`Executor`: runs stages and loads on workers, and tells the kernel how they
  ended. :class:`BaseExecutor` gives the defaults an executor that does not load,
  split or hold inputs relies on.
- :class:`Observer`: what a driver records as the kernel moves requests (the
  simulator's per-request arrays and stage rows; the server's answers and metrics).
  :class:`Observer` itself records nothing.

The kernel never probes an executor or observer for optional methods: every method here
exists on every implementation (the base classes give the defaults).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from hetserve.core.plan import Plan
    from hetserve.core.requests import Request
    from hetserve.engine.entities import Batch, Task
    from hetserve.engine.links import LinkTable
    from hetserve.scheduling.protocol import ClusterView, Evict, Load, StageReport, WorkerInfo

#: a callback at a time: ``fn(a, b, now)``
Callback = Callable[[Any, Any, float], None]


class Clock(Protocol):
    """Time for the kernel and its executors."""

    def now(self) -> float:
        """Seconds since the run started. The kernel never reads it: every entry point
        is given ``now``; executors read it when they report an end from outside a
        callback (a thread's result arriving on the loop)."""
        ...

    def call_at(self, t: float, fn: Callback, a: Any = None, b: Any = None) -> None:
        """Call ``fn(a, b, now)`` at time ``t`` (never before it; at once when ``t`` is
        past), callbacks at equal times in the order they were set. The kernel calls it
        for timers and for inputs still in transfer; executors for the end of a
        modelled stage or load."""
        ...


class Kernel(Protocol):
    """What an executor sees of the kernel (``engine.kernel.Kernel``): the run it serves,
    and the entry points it reports to. Each report takes ``now``."""

    clock: Clock
    view: ClusterView
    plan: Plan
    links: LinkTable | None  # the link model between stages (None: the executor's own)
    nblocks: dict[str, int]  # per model, its blocks

    def stage_done(self, task: Task, now: float, output: Any = None) -> None:
        """Every block of ``task`` ran; ``output`` its result."""
        ...

    def stage_done_at(self, task: Task, version: int, now: float) -> None:
        """``stage_done`` put on the clock (``stage_done_at_cb``): ignored when the task's
        ``version`` moved on (the executor stopped it instead)."""
        ...

    stage_done_at_cb: Callback  # ``stage_done_at``, one bound method (the kernel's loop
    # knows the callback by it)

    def stage_stopped(self, task: Task, blocks_done: int, now: float) -> None:
        """``task`` stopped at a block boundary after a ``Preempt``."""
        ...

    def stage_failed(self, task: Task, reason: str, now: float) -> None:
        """``task`` could not run, or raised: its batch fails with ``reason``."""
        ...

    def defer(self, task: Task) -> None:
        """The running ``task`` waits for a load on its worker; the worker is free."""
        ...

    def load_finished(
        self, a: Load, start_s: float, now: float, ok: bool = True, reason: str = ""
    ) -> None:
        """A load ended (``ok=False``: it failed, ``reason`` says why)."""
        ...

    def worker_lost(self, worker: str, now: float) -> None:
        """The worker is gone (rule 9)."""
        ...


class Executor(Protocol):
    """Runs stages and loads on workers, for the kernel."""

    #: whether stages compute outputs (False: the modelled executor's; the kernel then
    #: never calls :meth:`split`, and every request's answer is None)
    outputs: bool

    def attach(self, kernel: Kernel) -> None:
        """Called once, by the kernel's constructor: the kernel this executor reports to
        (``kernel.clock`` is the clock). The Ray executor starts its node watch here."""
        ...

    def start(self, task: Task, now: float) -> None:
        """Called by the kernel when ``task`` (one route step of a batch) starts on its
        worker (``task.worker``), which runs nothing else until the executor reports the
        end: ``kernel.stage_done(task, now, output)`` when every block ran,
        ``kernel.stage_stopped(task, blocks_done, now)`` when it stopped at a block
        boundary after :meth:`stop`, ``kernel.stage_failed(task, reason, now)`` when it
        could not run. The input is ``task.batch.payload`` (the requests' inputs, the
        previous stage's output, or the parked parts of a continued batch); a task whose
        weights are still arriving by a load that does not stream may be handed back
        with ``kernel.defer(task)``. An exception raised here fails the batch."""
        ...

    def stop(self, task: Task, now: float) -> None:
        """Called by the kernel on a ``Preempt`` of the running ``task`` (``task.stop``
        is set already): stop at the next block boundary and report it with
        ``stage_stopped``; or run on and report ``stage_done`` when the next exit point
        is the stage's end."""
        ...

    def load(self, a: Load, now: float) -> None:
        """Called by the kernel on a ``Load`` (rule 8 checked): move the weights; report
        the end with ``kernel.load_finished(a, start_s, now, ok, reason)``, at once
        where there is nothing to move."""
        ...

    def evict(self, a: Evict, now: float) -> None:
        """Called by the kernel on an ``Evict`` (rule 8 checked; never of a model with a
        stage running on the worker: the kernel refuses that): free the weights."""
        ...

    def split(self, task: Task, output: Any) -> list[Any]:
        """Called by the kernel when the last step of a route ends: ``output`` (what the
        executor gave ``stage_done``) cut into one part per request of the batch, in its
        order (request ``i``'s part holds its ``rows`` rows): the model's answer for each
        request when the route reached the model's last block, the activations each
        request parks with otherwise (rule 4). An exception here fails the batch."""
        ...

    def admit(self, payload: Any) -> Any:
        """Called by the kernel when a request with an input arrives: what to keep for
        it until its batch starts (the Ray executor puts it in the object store)."""
        ...

    def close(self) -> None:
        """Called by the driver at the end of a run: release workers (Ray actors)."""
        ...

    def add_workers(self, infos: Mapping[str, WorkerInfo], done: Callable[[str], None]) -> None:
        """Called by the control loop (``engine.control``) before it switches to a plan
        that brings workers this executor does not serve (``Kernel.joining``: new ones,
        or ones it released): make them ready to take loads and stages, then call
        ``done("")`` (``done(reason)`` where they could not be made ready: the plan is
        not switched to). ``done`` may be called at once (the modelled executor gives
        them empty memory) or later on the kernel's clock (Ray's reserves their GPUs and
        starts their actors off the event loop). An executor that cannot grow calls
        ``done`` with a reason saying so."""
        ...

    def start_s(self, n: int) -> float:
        """Called by the control loop when it estimates a switch: the seconds
        :meth:`add_workers` is predicted to take to make ``n`` new workers ready (0 where
        they are ready at once; Ray's: the time its own workers took to start, measured
        when it started them)."""
        ...

    def release_workers(self, ids: Sequence[str]) -> None:
        """Called by the kernel (``Kernel.retire``) when a switch has ended and the plan
        no longer uses ``ids`` (none runs anything; their blocks were evicted): give
        their resources back (Ray's: the actors end and their GPUs go back to Ray). A
        later plan may bring them back by :meth:`add_workers`."""
        ...


class BaseExecutor:
    """The defaults of :class:`Executor`: loads end at once, evictions and stops do
    nothing (a stage that checks ``task.stop`` stops by itself), outputs are not cut
    (every request's part is None), inputs are kept as given."""

    kernel: Kernel
    outputs = True

    def attach(self, kernel: Kernel) -> None:
        self.kernel = kernel

    def start(self, task: Task, now: float) -> None:
        raise NotImplementedError

    def stop(self, task: Task, now: float) -> None:
        return None

    def load(self, a: Load, now: float) -> None:
        self.kernel.load_finished(a, now, now)

    def evict(self, a: Evict, now: float) -> None:
        return None

    def split(self, task: Task, output: Any) -> list[Any]:
        return [None] * len(task.batch.requests)

    def admit(self, payload: Any) -> Any:
        return payload

    def close(self) -> None:
        return None

    def add_workers(self, infos: Mapping[str, WorkerInfo], done: Callable[[str], None]) -> None:
        done(
            f"{type(self).__name__} cannot add workers ({', '.join(infos)}): a new plan must "
            f"keep to the workers this engine started with"
        )

    def release_workers(self, ids: Sequence[str]) -> None:
        return None

    def start_s(self, n: int) -> float:
        return 0.0


class Observer:
    """What a driver records while the kernel runs (every method a no-op here).

    All are called by the kernel, never by a scheduler; none may call back into the
    kernel."""

    def dispatched(self, batch: Batch, first_block: int, now: float) -> None:
        """A ``Dispatch`` was accepted: ``batch`` is under way (``first_block`` > 0: it
        continues requests parked by an open route)."""

    def stage_ended(self, task: Task, now: float, status: str, blocks_done: int) -> None:
        """A route step ended on its worker: ``status`` is ``"completed"``,
        ``"preempted"`` or ``"failed"`` (also for a step failed before it started, with
        ``task.start_s == now``); ``blocks_done`` the blocks that ran. ``task.ran``:
        the executor took it (it ran, for however long)."""

    def reported(self, report: StageReport) -> None:
        """A report is about to reach the scheduler (rule 5)."""

    def ended(
        self,
        requests: Sequence[Request],
        outcomes: Sequence[int] | None,
        reason: str,
        now: float,
        outputs: Sequence[Any] | None,
    ) -> None:
        """``requests`` ended, each exactly once. ``outcomes`` None: they finished
        ``now``, each ok or late by ``core.outcome.finished(now, request.deadline_s)``
        (``reason`` empty); else ``outcomes[i]`` is request ``i``'s (dropped or failed,
        a ``core.outcome`` code) and ``reason`` says why. ``outputs[i]`` is the model's
        answer for request ``i`` (``outputs`` None where the executor computes none)."""
