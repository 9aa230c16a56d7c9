"""A serving instance: plan, scheduler, workers and the runtime engine on an asyncio loop,
with one awaitable result per request and Prometheus metrics.

``Server.infer(model, tensor, deadline_s)`` returns the request's outcome exactly once:
its output, or an error with a reason: ``refused`` at arrival (the server is draining, or
admission control finds that even the best case misses the deadline:
``scheduling.admission``), ``overloaded`` when ``max_pending`` requests are held already,
``dropped`` when the scheduler finds the deadline unreachable later (at the latest at the
deadline: the kernel drops a request still queued then), ``failed`` when a worker fails
it. A caller that stops waiting (its task cancelled: the HTTP front end does so when the
client disconnects) cancels the request: it leaves the queue, or its result is discarded,
and it is counted ``cancelled``. ``drain()`` waits for the requests in flight (graceful
shutdown).

Metrics (Prometheus, a registry of the server's own; ``runtime.metrics``): requests by model
and outcome; drops
and failures by model and a *bounded* reason (``DROP_REASONS``, ``FAILURE_REASONS``);
HTTP responses by route kind and status; queue depth and requests in flight per model
(gauges); request, queueing and stage seconds; batch sizes; worker busy seconds; energy.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import itertools
import time
from dataclasses import dataclass
from typing import Any

from hetserve.control.switching import Switching
from hetserve.core.errors import HetserveError
from hetserve.core.outcome import CANCELLED, DROPPED, FAILED, LATE, OK, failure_text
from hetserve.core.plan import Placement, Plan
from hetserve.core.requests import Request
from hetserve.engine.control import ControlLoop, ControlSpec
from hetserve.engine.entities import Batch
from hetserve.engine.setup import Setup
from hetserve.runtime import status
from hetserve.runtime.control import LiveSensor
from hetserve.runtime.engine import LoopClock, Recording, RuntimeEngine
from hetserve.runtime.executors import EXECUTORS, ExecutorRequest, executor_kind
from hetserve.runtime.metrics import (
    LOG,
    Metrics,
    ModelStats,
    ProfileWatch,
    drop_reason,
    failure_reason,
)
from hetserve.runtime.oip import ModelTensors
from hetserve.runtime.operator import Operator
from hetserve.runtime.served import answer_mismatch, check_served
from hetserve.runtime.serverconfig import ServerConfig
from hetserve.scheduling import ClusterView, StageReport, make_scheduler
from hetserve.scheduling.admission import Admission


@dataclass
class Result:
    # "ok" | "late" | "dropped" | "failed" | "cancelled" | "overloaded" | "refused"
    outcome: str
    reason: str = ""
    output: Any = None
    latency_s: float = 0.0


_NAMES = {OK: "ok", LATE: "late", DROPPED: "dropped", FAILED: "failed", CANCELLED: "cancelled"}
#: the reason a cancelled request ends with (its client went away)
CLIENT_GONE = "cancelled: the client went away before its answer"


class Server:
    def __init__(
        self, setup: Setup, config: ServerConfig | None = None, control: ControlSpec | None = None
    ) -> None:
        """``setup``: cluster, latency, plan and placement (the composition root);
        ``control``: re-plan as the load moves, and take an operator's plans
        (``engine.control``; None: the plan stays as it is)."""
        self.setup = setup
        self.cfg = config or ServerConfig()
        self.control_spec = control
        self.operator = Operator(self, control)  # the control loop, an operator's changes
        self.sensor: LiveSensor | None = None  # (the operator's, once started)
        self._in_switch: set[int] = set()  # requests that arrived while a switch ran
        self.metrics = Metrics()
        self.stats = ModelStats(
            self.models, {m: self.cfg.versions.of(m).default for m in self.models}
        )
        self.engine: RuntimeEngine | None = None
        self.admission: Admission | None = None
        self.watch: ProfileWatch | None = None
        self._futures: dict[int, asyncio.Future[Result]] = {}
        self._ids = itertools.count()
        self._t0: dict[int, float] = {}
        self._queued: set[int] = set()  # requests not yet dispatched
        self._queued_n: dict[str, int] = dict.fromkeys(self.models, 0)
        self._queued_rows: dict[str, int] = dict.fromkeys(self.models, 0)
        self._pending_n: dict[str, int] = dict.fromkeys(self.models, 0)
        self._tensors: dict[str, ModelTensors] = {}
        self.draining = False  # shutting down: new requests are refused (503)
        self.served: dict[str, int] = {}  # stages run to their end, per worker
        self.infos: dict[str, Any] | None = None
        self._view: ClusterView | None = None
        self._versions: dict[int, int] = {}  # request id -> version (not the default)
        # batch id -> rows per version (None: the default), for batches with other versions
        self._batch_versions: dict[int, dict[int | None, int]] = {}
        # Ray's engine: where each worker was placed, what a stage call costs beyond compute
        self.places: dict[str, Any] = {}
        self.stage_overhead_s: dict[str, float] = {}

    @property
    def control(self) -> ControlLoop | None:
        """The control loop (``serve --replan``; None: the plan does not move)."""
        return self.operator.loop

    @property
    def unloaded(self) -> dict[str, str]:
        """Models an operator unloaded (or is unloading, or loading back): why."""
        return self.operator.unloaded

    @property
    def models(self) -> list[str]:
        """The models served now: the plan's, less those an operator unloads or has
        unloaded (``unloaded``)."""
        return [m for m in self.setup.plan.models if m not in self.unloaded]

    def tensors(self, model: str) -> ModelTensors:
        """The model's input and output tensors (from its graph, so the same for real and
        emulated workers) and the largest batch one infer request may carry."""
        t = self._tensors.get(model)
        if t is None:
            g = self.setup.graph(model)
            # a repository model is exported for its config.yaml's max_batch_size rows; a
            # request's rows go to the GPU in one batch, which the scheduler may bound
            rows = min(self.cfg.max_request_batch, int(g.meta.get("max_batch", 1 << 30)))
            if self.engine is not None:
                sched_rows = self.engine.scheduler.max_rows(model)
                rows = min(rows, sched_rows) if sched_rows else rows
            t = self._tensors[model] = ModelTensors(g.inputs, g.outputs, rows)
        return t

    @property
    def ready(self) -> bool:
        """Started, not draining, and every model has a pipeline whose every stage has a
        live worker (readiness follows lost workers)."""
        return (
            self.engine is not None
            and not self.draining
            and all(self.model_ready(m) for m in self.models)
        )

    def model_ready(self, model: str) -> bool:
        """Started, not draining, and some pipeline of the model has a live worker for
        every stage."""
        return status.model_ready(self, model)

    @property
    def lost_workers(self) -> list[str]:
        return sorted(self.engine.lost) if self.engine is not None else []

    def workers(self) -> list[dict[str, Any]]:
        """Per worker: where it runs and its state (``runtime.status.workers``; what
        ``GET /v2/cluster/workers`` answers)."""
        return status.workers(self)

    def check(self) -> None:
        """Start a throwaway scheduler on the plan: configuration errors surface here, as
        one-line errors, before the HTTP server starts."""
        view = self._view_of()
        self._check_engine(view)
        check_served(self.setup.plan, self.setup.placement, self.models)
        make_scheduler(self.cfg.scheduler, self.cfg.params).start(view, self.setup.plan, 0.0)

    def _view_of(self) -> ClusterView:
        """What the scheduler sees, with the plan's precision at cuts (``Setup``)."""
        st = self.setup
        return ClusterView.build(st.cluster, st.latency, st.placement, st.cut_bytes_factor)

    def _check_engine(self, view: ClusterView) -> None:
        """The in-process engine runs CPU workers on this process's CPU and GPU workers on
        this machine's GPUs (``torch_executor.local_devices``: all on one node, each GPU
        here and of its planned type); other plans need the Ray engine or ``--emulate``.
        Cold-start plans (load plans) run emulated in this process, or for real on either
        engine (the Ray engine's GPU workers load on their GPU by CUDA streams), except
        PT plans on Ray: an actor sees only its own GPU, not the secondaries' host links."""
        lps = self.setup.plan.load_plans
        if self.control_spec is not None and lps:
            raise HetserveError(
                "--replan: a plan with load plans (cold starts) is not re-planned; serve "
                "a plan of ppipe, np or dart-r, or leave out --replan"
            )
        if lps and self.cfg.engine == "ray" and self.cfg.emulate:
            raise HetserveError(
                "a plan with load plans (cold starts) is emulated in this process: leave "
                "out --address (or serve it for real on the Ray engine)"
            )
        pt = sorted(m for m, lp in lps.items() if lp.plan.n_parts > 1)
        if pt and self.cfg.engine == "ray" and not self.cfg.emulate:
            raise HetserveError(
                f"model {pt[0]}: its load plan ({lps[pt[0]].plan.kind}) loads over "
                f"{lps[pt[0]].plan.n_parts} GPUs' host links, but a Ray worker sees only its "
                f"own GPU: serve it with --emulate, or plan another kind (dha, pipeswitch)"
            )
        several = sorted(m for m in self.cfg.versions.others() if m in self.setup.plan.load_plans)
        if several and not self.cfg.emulate:
            raise HetserveError(
                f"model {several[0]}: a cold-start plan loads one version of a model; its "
                f"version_policy serves {len(self.cfg.versions.of(several[0]).ready)}"
            )
        if self.cfg.emulate or self.cfg.engine != "threads":
            return
        from hetserve.runtime.torch_executor import local_devices

        local_devices(view, self.cfg.gpu_device)  # GPU workers: this machine's GPUs

    def start(self) -> None:
        """Start on the running loop (call from inside it)."""
        loop = asyncio.get_running_loop()
        view = self._view_of()
        self._check_engine(view)
        name, params = self.cfg.scheduler, self.cfg.params
        sched: Any = make_scheduler(name, params)
        if self.control_spec is not None:  # one scheduler of the policy per plan version
            sched = Switching(lambda: make_scheduler(name, params))
        # stages stop at block boundaries only for a scheduler that preempts (FLEX): on
        # CUDA every boundary then waits for its kernels
        preemptive = bool(sched.preempts)
        kind = executor_kind(self.cfg)
        executor = EXECUTORS.get(kind)(
            ExecutorRequest(self.setup, self.cfg, view, preemptive, self._versions.get)
        )
        if kind == "ray":  # where each worker was placed, what a stage call costs there
            from hetserve.runtime.ray_executor import RayExecutor

            assert isinstance(executor, RayExecutor)
            self.places, self.stage_overhead_s = executor.places, executor.stage_overhead_s
        if not self.cfg.emulate:  # real workers: their times against the latency model
            self.watch = ProfileWatch(view)
        if self.cfg.admission:
            self.admission = self._admission(view, self.setup.plan)
        self._view = view
        self.engine = RuntimeEngine(
            view, self.setup.plan, sched, executor, LoopClock(loop),
            emulate_links=self.cfg.emulate, observer=_Observed(self), strict=False,
        )  # fmt: skip
        status.log_places(self)
        self.engine.start()
        if self.control_spec is not None:
            self.operator.start(sched)
        self._tensors.clear()  # (the rows a request may carry: the scheduler's say too)
        # what exists now (models, plan, libraries) lives as long as the server: keep it out
        # of the garbage collector's full passes, which otherwise stall the loop for ms
        gc.collect()
        gc.freeze()

    def _admission(self, view: ClusterView, plan: Plan) -> Admission:
        mb = self.cfg.params.get("max_batch")
        return Admission(view, plan, mb if isinstance(mb, int) else 0)

    def follow(self, plan: Plan, placement: Placement) -> None:
        """A switch has ended (``runtime.operator``): the server's view of the plan (its
        models, workers, admission) is the new one's."""
        self.setup = dataclasses.replace(self.setup, plan=plan, placement=placement)
        self._view = self._view_of()
        self.infos = None
        self._tensors.clear()
        if self.admission is not None:
            self.admission = self._admission(self._view, plan)

    def _refuse(self, model: str, reason: str, label: str, rows: int = 1) -> Result:
        m = self.metrics
        m.of(m.requests, model, "refused").inc()
        m.of(m.rows, model, "refused").inc(rows)
        m.of(m.drops, model, label).inc()
        self.stats.failed(model, 0.0)
        return Result("refused", reason)

    async def infer(
        self,
        model: str,
        tensor: Any = None,
        deadline_s: float | None = None,
        stream: str | None = None,
        version: int | None = None,
    ) -> Result:
        """Serve a one-row request: ``tensor`` is its input without the batch dimension
        (a tuple for several inputs; None: the model's example input), and so is the
        answer (:meth:`infer_rows` takes and answers several rows)."""
        x = None if tensor is None else _rows_of_one(tensor)
        res = await self.infer_rows(model, x, 1, deadline_s, stream, version)
        if res.output is not None:
            res.output = _first_row(res.output)
        return res

    async def infer_rows(
        self,
        model: str,
        batch: Any = None,
        rows: int = 1,
        deadline_s: float | None = None,
        stream: str | None = None,
        version: int | None = None,
    ) -> Result:
        """Serve one request of ``rows`` rows (``batch``: its input, the rows as the first
        dimension; a tuple for several inputs; None: the model's example input, or
        emulated workers). Its rows go to the GPU together, in one batch, and the answer
        holds them all (the batch as its first dimension). ``deadline_s``: relative to
        now (default: the stream's deadline where the plan assigns streams, else the
        model's SLO); ``stream``: the client's stream (default ``"http"``), which a
        MagicBatch plan's scheduler queues by; ``version``: a served version other than
        the default (``runtime.versions``; None: the default)."""
        eng = self.engine
        if eng is None:
            raise HetserveError("the server is not started")
        if model not in self.models:
            why = self.unloaded.get(model)
            raise HetserveError(
                f"model {model!r} is " + (f"UNAVAILABLE: {why}" if why else "not served")
            )
        if rows < 1:
            raise HetserveError(f"a request has at least one row, got {rows}")
        a = self.setup.plan.assignments.get(stream) if stream else None
        default_s = a.deadline_s if a is not None else self.setup.plan.models[model].slo_s
        slo = default_s if deadline_s is None else deadline_s
        if self.draining:
            return self._refuse(model, "shutdown: the server is shutting down", "shutdown", rows)
        sensor = self.sensor
        if sensor is not None:
            now = eng.clock.now()
            sensor.arrived(model, now)
        if len(self._futures) >= self.cfg.max_pending:
            if sensor is not None:  # (a refusal is a miss)
                sensor.ended(now + slo, False)
            m = self.metrics
            m.of(m.requests, model, "overloaded").inc()
            m.of(m.rows, model, "overloaded").inc(rows)
            m.of(m.drops, model, "overloaded").inc()
            self.stats.failed(model, 0.0)
            why = f"overloaded: more than {self.cfg.max_pending} requests pending"
            return Result("overloaded", why)
        if self.admission is not None:
            ahead = self._queued_rows[model]
            best_s = self.admission.best_finish_s(model, ahead)
            if best_s > slo:
                if sensor is not None:
                    sensor.ended(now + slo, False)
                return self._refuse(
                    model,
                    f"admission: deadline unreachable at arrival: {self._queued_n[model]} requests "
                    f"({ahead} rows) queued ahead, the best case needs {best_s * 1e3:.3g} ms, "
                    f"the deadline is {slo * 1e3:.3g} ms",
                    "admission",
                    rows,
                )
        rid = next(self._ids)
        now = eng.clock.now()
        fut: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._futures[rid] = fut
        self._t0[rid] = time.perf_counter()
        self._queued.add(rid)
        self._queued_n[model] += 1
        self._queued_rows[model] += rows
        self._pending_n[model] += 1
        if version is not None:
            self._versions[rid] = version
        if sensor is not None and self.operator.switching():  # (only with --replan)
            self._in_switch.add(rid)
        eng.submit(Request(rid, model, stream or "http", now, now + slo, None, rows), batch)
        try:
            return await fut
        except asyncio.CancelledError:  # the caller went away: so does its request
            if self.engine is not None:
                self.engine.cancel(rid, CLIENT_GONE)
            raise

    def dequeue(self, r: Request) -> bool:
        """A request leaves the queue (first dispatch, or its end): True the first time."""
        if r.id in self._queued:
            self._queued.discard(r.id)
            self._queued_n[r.model] -= 1
            self._queued_rows[r.model] -= r.rows
            return True
        return False

    def _done(self, r: Request, outcome: int, reason: str, output: Any) -> None:
        if output is not None and outcome in (OK, LATE):
            why = answer_mismatch(r.model, self.tensors(r.model).outputs, output, r.rows)
            if why:  # an answer the model does not advertise is no answer
                outcome, reason, output = FAILED, f"bad_output: {why}", None
        name = _NAMES.get(outcome, "failed")
        if self.sensor is not None:
            self.sensor.ended(r.deadline_s, outcome == OK)
            if r.id in self._in_switch:
                self._in_switch.discard(r.id)
                m = self.metrics
                m.of(m.switch_requests, "ok" if outcome == OK else "missed").inc()
        self.dequeue(r)
        self._pending_n[r.model] -= 1
        version = self._versions.pop(r.id, None)
        dt = time.perf_counter() - self._t0.pop(r.id, time.perf_counter())
        m = self.metrics
        m.of(m.requests, r.model, name).inc()
        m.of(m.rows, r.model, name).inc(r.rows)
        m.of(m.latency, r.model).observe(dt)
        if name == "dropped":
            m.of(m.drops, r.model, drop_reason(reason)).inc()
            LOG.info("request %d of %s dropped: %s", r.id, r.model, reason)
        elif name == "failed":
            label = failure_reason(reason)
            m.of(m.failures, r.model, label).inc()
            LOG.warning("request %d of %s failed: %s", r.id, r.model, reason)
        if name in ("ok", "late"):
            self.stats.succeeded(r.model, dt, r.rows, version)
        elif name == "cancelled":
            self.stats.cancelled(r.model, dt, version)
        else:
            self.stats.failed(r.model, dt, version)
        fut = self._futures.pop(r.id, None)
        if fut is not None and not fut.done():
            fut.set_result(Result(name, reason, output, dt))

    def encode_failed(self, model: str, n: int, reason: str) -> None:
        """The HTTP front end could not encode ``n`` answered requests' outputs (a bug:
        ``answer_mismatch`` passed them): counted as failures, logged."""
        m = self.metrics
        m.of(m.failures, model, failure_reason(reason)).inc(n)
        LOG.error("%d answers of %s could not be encoded: %s", n, model, reason)

    def scrape(self) -> bytes:
        """The Prometheus text, with the gauges set to now."""
        m = self.metrics
        for model, n in self._queued_n.items():
            m.of(m.queue_depth, model).set(n)
            m.of(m.in_flight, model).set(self._pending_n[model])
        return m.scrape()

    @property
    def in_flight(self) -> int:
        return len(self._futures)

    async def drain(self, timeout_s: float = 30.0) -> None:
        """Wait for every request in flight to get its answer."""
        pending = list(self._futures.values())
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)

    async def stop(self, timeout_s: float | None = None) -> None:
        """Graceful shutdown: refuse new requests, answer those in flight (``drain``; any
        still unanswered after ``timeout_s``, default ``drain_timeout_s``, get ``failed:
        shutdown``), then release the workers (Ray actors)."""
        self.draining = True
        await self.drain(self.cfg.drain_timeout_s if timeout_s is None else timeout_s)
        if self.engine is not None and self._futures:  # each still open ends, as shut down
            self.engine.close("shutdown")
        for rid, fut in list(self._futures.items()):
            if not fut.done():
                fut.set_result(Result("failed", failure_text("shutdown")))
            self._futures.pop(rid, None)
        if self.engine is not None:
            self.engine.executor.close()
        self.operator.close()
        gc.unfreeze()  # what start() froze may be collected again


class _Observed(Recording):
    """The server's observer of the kernel: every ending answers its request (``_done``),
    dispatches and stage reports are counted in the metrics."""

    def __init__(self, server: Server) -> None:
        super().__init__(server._done, log_limit=10_000)
        self.server = server

    def _energy(self, rep: StageReport) -> float:
        """The latency model's energy for the part of the stage that ran (0 where it has
        no power figures)."""
        view = self.server._view
        if view is None or rep.blocks is None or not rep.requests:
            return 0.0
        w = view.workers.get(rep.worker)
        first, stop = rep.blocks
        done = rep.blocks_done if rep.blocks_done else stop - first
        if w is None or done <= 0:
            return 0.0
        try:
            return float(
                view.latency.energy(
                    rep.model,
                    w.gpu,
                    w.share,
                    sum(r.rows for r in rep.requests),
                    range(first, first + done),
                )
            )
        except Exception:  # a latency model without power figures for this device
            return 0.0

    def dispatched(self, batch: Batch, first_block: int, now: float) -> None:
        super().dispatched(batch, first_block, now)
        srv = self.server
        m = srv.metrics
        m.of(m.batch, batch.model).observe(batch.rows)
        if first_block == 0:  # first dispatches: the requests' queueing
            q = m.of(m.queue, batch.model)
            for r in batch.requests:
                if srv.dequeue(r):
                    wait = max(0.0, now - r.arrival_s)
                    q.observe(wait)
                    srv.stats.queued(r.model, wait, srv._versions.get(r.id))
            if srv._versions:  # a batch with rows of versions other than the default
                rows: dict[int | None, int] = {}
                for r in batch.requests:
                    v = srv._versions.get(r.id)
                    rows[v] = rows.get(v, 0) + r.rows
                if set(rows) != {None}:
                    srv._batch_versions[batch.id] = rows

    def reported(self, rep: StageReport) -> None:
        if rep.kind != "stage":
            return
        srv = self.server
        if rep.completed:
            srv.served[rep.worker] = srv.served.get(rep.worker, 0) + 1
        dur = max(0.0, rep.end_s - rep.start_s)
        m = srv.metrics
        m.of(m.stage, rep.model, rep.worker).observe(dur)
        m.of(m.busy, rep.worker).inc(dur)
        joules = self._energy(rep)
        if joules > 0:
            m.of(m.energy, rep.worker, "model").inc(joules)
        if rep.requests:
            first = rep.blocks is not None and rep.blocks[0] == 0
            by_version = srv._batch_versions.get(rep.batch_id)
            if by_version is None:
                srv.stats.executed(rep.model, sum(r.rows for r in rep.requests), dur, first)
            else:
                for v, rows in by_version.items():
                    srv.stats.executed(rep.model, rows, dur, first, v)
        if rep.last:
            srv._batch_versions.pop(rep.batch_id, None)
        if srv.watch is not None:
            srv.watch.observe(rep)


def _rows_of_one(x: Any) -> Any:
    """One row's input as a batch of one (a tensor, or a tuple of them)."""
    if isinstance(x, tuple):
        return tuple(_rows_of_one(v) for v in x)
    return x[None]


def _first_row(x: Any) -> Any:
    """A batch of one's answer as that row (a tensor, or a tuple of them)."""
    if isinstance(x, tuple | list):
        return type(x)(_first_row(v) for v in x)
    return x[0]
