"""The discrete-event simulator: a driver of the engine kernel (``engine.kernel``).

The kernel holds the state machine (requests, batches, stages, worker queues, endings,
reports); the simulator adds what is its own:

- **a virtual clock**: the event heap (:class:`~hetserve.engine.clock.VirtualClock`), float
  seconds, ties broken by a sequence number, so a run is a deterministic function of its
  inputs and seed. Arrivals are not put on the heap: they are merged from the trace's
  sorted arrays (an arrival and a heap event at the same instant: the heap event goes
  first);
- **the modelled executor** (``engine.modelled``): one worker per virtual GPU (a GPU's
  ``1/share`` MPS slice) runs a stage for the latency model's time (optionally with
  seeded jitter), preemptible at block boundaries; residency and loads by the model;
- **links**: activations between stages cross the link model (``engine.links``), FIFO
  lanes held end to end;
- **failures to inject** (:meth:`Simulator.fail_worker`);
- **clients that give up** (``SimConfig.patience_s``): a request not ended that long after
  its arrival is cancelled, as the runtime cancels one whose client disconnects;
- **the recorder** (:class:`~hetserve.sim.result.Recorder`), the kernel's observer.

Outputs (:class:`~hetserve.sim.result.SimResult`): one record per request (arrival, dispatch,
start, finish, outcome, reason, batch), one row per stage execution (worker, start, end,
batch size, completed/preempted/failed, input transfer), per-GPU energy, per-worker busy time.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from array import array
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import numpy as np

from hetserve.control.switching import Switching
from hetserve.core.cluster import Cluster
from hetserve.core.errors import HetserveError
from hetserve.core.graph import ModelGraph, get_graph
from hetserve.core.latency import LatencyModel
from hetserve.core.outcome import PENDING
from hetserve.core.plan import Placement, Plan
from hetserve.engine.clock import VirtualClock
from hetserve.engine.control import ControlLoop, ControlSpec, gpu_seconds, held_gpus
from hetserve.engine.kernel import Kernel
from hetserve.engine.links import LinkTable
from hetserve.engine.modelled import ModelledExecutor
from hetserve.scheduling.protocol import ClusterView, Scheduler
from hetserve.sim.energy import Energy
from hetserve.sim.result import Recorder, SimResult
from hetserve.sim.sensor import TraceSensor
from hetserve.sim.state import SimConfig
from hetserve.workload.trace import Trace

__all__ = ["SimConfig", "Simulator"]

#: how requests the scheduler still holds, and batches under way, end with the run
UNSERVED = "run_ended"  # a drop kind (core.outcome.DROP_KINDS): the run ended first
RUN_ENDED = "run_ended: the simulation ended while it ran"  # (a failure kind too)
#: how a request whose client gave up (``SimConfig.patience_s``) ends: cancelled
GAVE_UP = "cancelled: the client gave up"


def _columns(tr: Trace) -> tuple[list[str], list[str]]:
    """The trace's requests' models and stream names in arrival order, as lists (what
    ``Kernel.run`` takes, beside their times and deadlines)."""
    if len(tr.streams) == 1:  # one stream: its model and name throughout
        n = len(tr)
        return [tr.streams[0].model] * n, [tr.streams[0].name] * n
    idx = tr.stream_idx
    models = np.array([s.model for s in tr.streams], dtype=object)[idx].tolist()
    names = np.array([s.name for s in tr.streams], dtype=object)[idx].tolist()
    return models, names


YOUNG_LESS_OFTEN = 100  # (``older_objects_frozen``)
# CPython 3.12 keeps its static immortal objects (375 tuples in 3.12.1 and 3.12.3) in the
# collector's permanent generation from start-up, and a collection puts them back there
# after a ``gc.unfreeze``: so many frozen objects are the interpreter's, not a caller's
# freeze (0 on 3.11 and 3.13). Found on the H200's Python 3.12.3, where every run skipped
# the freeze below.
INTERPRETER_FROZEN = gc.get_freeze_count() if sys.version_info[:2] == (3, 12) else 0


def _leave_alone() -> None:
    """(``older_objects_frozen``'s answer where it froze nothing: nothing to set aside)"""


@contextlib.contextmanager
def older_objects_frozen() -> Iterator[Callable[[], None]]:
    """While a run lasts, the garbage collector looks only at the objects it makes: those
    from before (imports, the setup, the caller's) are set aside (``gc.freeze``) and given
    back after (``gc.unfreeze``). A full collection traverses every tracked object, and
    after a large setup the two of a 20-second run cost a sixth of it (issue 41). Nothing
    is freed or kept differently: a cycle among the older objects is collected after the
    run instead. The young generation is collected ``YOUNG_LESS_OFTEN`` times less often
    meanwhile (its threshold raised; set back after): a run makes few cycles, and each
    collection traverses what survived since the last, so fewer of them cost less
    (3.8% of a request's instructions on issue 41's PPipe-plan run; switching the
    collector off saved no more). Where objects are frozen already (a caller's own
    ``gc.freeze``: more than ``INTERPRETER_FROZEN``, the interpreter's own, as found when
    this module was imported) or the collector is off, nothing is changed.

    It gives a function that sets aside the objects made since, the same way: the run
    calls it once its own start is done (the kernel's, the schedulers' and the executor's
    tables: at 1,000 GPUs the first collections of the young generation traversed them,
    3 ms each). Where nothing was frozen, the function does nothing."""
    if gc.get_freeze_count() > INTERPRETER_FROZEN or not gc.isenabled():
        yield _leave_alone
        return
    gc.freeze()
    threshold = gc.get_threshold()
    gc.set_threshold(threshold[0] * YOUNG_LESS_OFTEN, *threshold[1:])
    try:
        yield gc.freeze
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


class Simulator:
    """One simulated run of a scheduler over a trace (``run()`` once)."""

    def __init__(
        self,
        cluster: Cluster,
        latency: LatencyModel,
        plan: Plan,
        placement: Placement,
        scheduler: Scheduler,
        trace: Trace,
        config: SimConfig | None = None,
        executor: ModelledExecutor | None = None,
        graphs: Callable[[str], ModelGraph] = get_graph,
        control: ControlSpec | None = None,
    ) -> None:
        """``control``: re-plan as the load moves (``engine.control``; ``scheduler``
        must then be a ``control.switching.Switching``). ``executor``: the modelled
        executor to run stages (default: one made from ``config``; it must not
        warm-start by itself: the run does, with ``config.warm``). ``graphs``: the
        models' graphs by name (a ``ModelCatalog``'s), for their weights' bytes."""
        self.cluster = cluster
        self.latency = latency
        self.plan = plan
        self.placement = placement
        self.scheduler = scheduler
        self.trace = trace
        self.cfg = cfg = config or SimConfig()
        self.view = ClusterView.build(cluster, latency, placement, cfg.cut_bytes_factor)
        self.clock = VirtualClock()
        deepest = max(
            (len(p.stages) for mp in plan.models.values() for p in mp.pipelines), default=1
        )
        self.recorder = Recorder(trace, deepest)
        self.links = LinkTable(cluster, cfg.record_links, plan.paths)
        self.executor = executor or ModelledExecutor(
            cfg.seed,
            cfg.jitter,
            cfg.jitter_cv,
            cfg.request_overhead_s,
            warm=False,
            graphs=graphs,
        )  # (warm at the start of the run: cfg.warm)
        self.kernel = Kernel(
            self.view, plan, scheduler, self.executor, self.clock, self.recorder, self.links,
            track=False,
        )  # fmt: skip
        self.recorder.size(len(self.kernel.workers))
        self.control: ControlLoop | None = None
        if control is not None:
            if not isinstance(scheduler, Switching):
                raise HetserveError("re-planning needs the scheduler wrapped in Switching")
            self.control = ControlLoop(
                self.kernel, scheduler, control.controller, control.replanner,
                TraceSensor(trace, self.recorder), cluster, graphs, dict(control.planned_rps),
                replace(control.config, until_s=trace.duration_s), grew=self.recorder.size,
            )  # fmt: skip
        self.failures: list[tuple[float, str]] = []
        self._ran = False

    def fail_worker(self, worker: str, at_s: float) -> None:
        """Lose a worker at a given time (failure injection)."""
        if worker not in self.kernel.workers:
            raise HetserveError(f"no worker {worker!r}")
        self.failures.append((at_s, worker))

    @property
    def link_log(self) -> dict[str, list[tuple[float, float]]]:
        """Every transfer's interval per link (with ``SimConfig(record_links=True)``)."""
        return self.links.log

    def _lose(self, worker: str, _: Any, now: float) -> None:
        self.kernel.worker_lost(worker, now)

    def _give_up(self, request_id: int, _: Any, now: float) -> None:
        if self.recorder.outcome[request_id] == PENDING:
            self.kernel.cancel(request_id, now, GAVE_UP)

    def run(self) -> SimResult:
        if self._ran:
            raise HetserveError("a Simulator runs once: build another for another run")
        self._ran = True
        with older_objects_frozen() as set_aside:
            return self._run(set_aside)

    def _run(self, set_aside: Callable[[], None]) -> SimResult:
        tr = self.trace
        kernel, clock = self.kernel, self.clock
        if self.cfg.warm:
            self.executor.warm_start()
        for at, wid in self.failures:
            clock.call_at(at, self._lose, wid)
        if self.cfg.patience_s is not None:  # (in arrival order: each push costs O(1))
            p = self.cfg.patience_s
            for i, t in enumerate(tr.time_s.tolist()):
                clock.call_at(t + p, self._give_up, i)
        kernel.start(0.0)
        if self.control is not None:
            self.control.start(0.0)
        set_aside()  # (what the starts made: older objects now, as the setup's are)

        max_slo = max((s.slo_s for s in tr.streams), default=1.0)
        drain = self.cfg.drain_s if self.cfg.drain_s is not None else 10 * max_slo + 1.0
        horizon = tr.duration_s + drain
        # (the times as C doubles, copied whole: ``Kernel.run`` makes each a float as its
        # request arrives, not a list of floats first)
        times = array("d", np.ascontiguousarray(tr.time_s, np.float64).tobytes())
        deadlines = array("d", np.ascontiguousarray(tr.deadlines_s(), np.float64).tobytes())
        models, names = _columns(tr)
        now = kernel.run(models, names, deadlines, times, horizon)
        # (the clock numbers every callback it is given; those left are past the horizon)
        events = len(times) + clock.heap.pushed - len(clock.heap)
        end = max(now, tr.duration_s)
        kernel.close(end, RUN_ENDED, UNSERVED)
        kernel.detach()
        result = self.recorder.result(end, kernel.workers, Energy(self.cluster), self.links)
        result.events = events
        if self.control is not None:
            result.control = [r.to_json() for r in self.control.records]
            result.gpu_seconds = gpu_seconds(self.control.holding, end)
        else:
            result.gpu_seconds = gpu_seconds([(0.0, held_gpus(self.placement))], end)
        return result
