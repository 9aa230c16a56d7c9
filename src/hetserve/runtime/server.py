"""A serving instance: plan, scheduler, workers and the runtime engine on an asyncio loop,
with one awaitable result per request and Prometheus metrics.

``Server.infer(model, tensor, deadline_s)`` returns the request's outcome exactly once:
its output, or an error with a reason (``dropped: deadline`` when the scheduler finds the
deadline unreachable, ``overloaded`` when more than ``max_pending`` requests are held
before any work is spent on it, ``failed: ...``). ``drain()`` waits for the requests in
flight (graceful shutdown).
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hetserve.core.errors import HetserveError
from hetserve.core.outcome import DROPPED, FAILED, LATE, OK
from hetserve.core.requests import Request
from hetserve.runtime.emulated import EmulatedExecutor
from hetserve.runtime.engine import LoopClock, RuntimeEngine
from hetserve.scheduling import ClusterView, Dispatch, make_scheduler


@dataclass
class Result:
    outcome: str  # "ok" | "late" | "dropped" | "failed" | "overloaded"
    reason: str = ""
    output: Any = None
    latency_s: float = 0.0


@dataclass
class ServerConfig:
    scheduler: str = "edf-adaptive"
    params: dict[str, Any] = field(default_factory=dict)
    emulate: bool = False
    max_pending: int = 10_000
    n_blocks: int = 10
    # the models' builder for real workers (``hetserve.zoo.registry.build``)
    build: Callable[[str], Any] | None = None
    engine: str = "threads"  # real workers: "threads" (this process) or "ray" (actors)
    ray_address: str | None = None
    # torch threads of all CPU workers together (0: torch's default); split among them
    cpu_threads: int = 0


_NAMES = {OK: "ok", LATE: "late", DROPPED: "dropped", FAILED: "failed"}


class Metrics:
    """The server's Prometheus metrics, in a registry of its own."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry()
        self.requests = Counter(
            "hetserve_requests", "Requests by model and outcome", ["model", "outcome"],
            registry=self.registry,
        )  # fmt: skip
        self.drops = Counter(
            "hetserve_drops", "Dropped or failed requests by reason", ["model", "reason"],
            registry=self.registry,
        )  # fmt: skip
        self.latency = Histogram(
            "hetserve_request_seconds", "Arrival to response", ["model"],
            registry=self.registry,
        )  # fmt: skip
        self.stage = Histogram(
            "hetserve_stage_seconds", "Stage compute time", ["model", "worker"],
            registry=self.registry,
        )  # fmt: skip
        self.batch = Histogram(
            "hetserve_batch_size", "Requests per dispatched batch", ["model"],
            buckets=(1, 2, 4, 8, 16, 32, 64, 128), registry=self.registry,
        )  # fmt: skip
        self.busy = Counter(
            "hetserve_worker_busy_seconds", "Time each worker spent running stages",
            ["worker"], registry=self.registry,
        )  # fmt: skip
        self.queue = Histogram(
            "hetserve_queue_seconds", "Arrival to first dispatch", ["model"],
            registry=self.registry,
        )  # fmt: skip
        self.energy = Counter(
            "hetserve_energy_joules", "Energy of the stages run, by worker; source: "
            "'model' (the latency model's power for the stage's time) or 'rapl' (this "
            "machine's CPU package counter, where readable)", ["worker", "source"],
            registry=self.registry,
        )  # fmt: skip
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}
        self._rapl = _RaplReader()
        self._rapl.read_j()  # from now on

    def scrape(self) -> bytes:
        """The Prometheus text exposition (RAPL's energy read now, where readable)."""
        from prometheus_client import generate_latest

        joules = self._rapl.read_j()
        if joules > 0:
            self.of(self.energy, "cpu-package", "rapl").inc(joules)
        return bytes(generate_latest(self.registry))

    def of(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, looked up once (the lookup costs more than the
        update, on the per-request path)."""
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child


class Server:
    def __init__(self, setup: Any, config: ServerConfig | None = None) -> None:
        """``setup``: cluster, latency, plan and placement (``experiments.setup.Setup``)."""
        self.setup = setup
        self.cfg = config or ServerConfig()
        self.metrics = Metrics()
        self.engine: RuntimeEngine | None = None
        self._futures: dict[int, asyncio.Future[Result]] = {}
        self._ids = itertools.count()
        self._t0: dict[int, float] = {}
        self._queued: set[int] = set()  # requests not yet dispatched
        self.draining = False  # shutting down: new requests are refused (503)

    @property
    def models(self) -> list[str]:
        return list(self.setup.plan.models)

    def input_shape(self, model: str) -> list[int] | None:
        """One request's input shape, where the builder can tell it."""
        if self.cfg.build is None:
            return None
        try:
            return list(self.cfg.build(model).input_spec.shape)
        except Exception:  # not a model the builder knows
            return None

    @property
    def ready(self) -> bool:
        return self.engine is not None

    def check(self) -> None:
        """Start a throwaway scheduler on the plan: configuration errors surface here, as
        one-line errors, before the HTTP server starts."""
        view = ClusterView.build(self.setup.cluster, self.setup.latency, self.setup.placement)
        self._check_engine(view)
        make_scheduler(self.cfg.scheduler, self.cfg.params).start(view, self.setup.plan, 0.0)

    def _check_engine(self, view: ClusterView) -> None:
        """The in-process engine runs every stage on this process's CPU: a plan with GPU
        workers needs the Ray engine (whose actors are placed on GPUs) or ``--emulate``."""
        if self.cfg.emulate or self.cfg.engine != "threads":
            return
        gpus = sorted({w.gpu.name for w in view.workers.values() if w.gpu.name != "CPU"})
        if gpus:
            raise HetserveError(
                f"--engine threads runs on this CPU only, but the plan has {', '.join(gpus)} "
                f"workers; use --engine ray (or --emulate)"
            )

    def start(self) -> None:
        """Start on the running loop (call from inside it)."""
        loop = asyncio.get_running_loop()
        view = ClusterView.build(self.setup.cluster, self.setup.latency, self.setup.placement)
        self._check_engine(view)
        if self.cfg.emulate:
            executor: Any = EmulatedExecutor()
        else:
            from hetserve.runtime.torch_executor import TorchExecutor

            if self.cfg.build is None:
                raise HetserveError("real workers need a model builder (or emulate=True)")
            if self.cfg.engine == "ray":
                from hetserve.runtime.ray_executor import RayExecutor

                executor = RayExecutor(
                    view, self.cfg.build, self.cfg.n_blocks, self.cfg.ray_address,
                    self.setup.plan, self.cfg.cpu_threads,
                )  # fmt: skip
            else:
                if self.cfg.cpu_threads > 0:  # (process-wide: the stages run in this process)
                    import torch

                    torch.set_num_threads(self.cfg.cpu_threads)
                executor = TorchExecutor(self.cfg.build, n_blocks=self.cfg.n_blocks)
                executor.prepare(self.setup.plan, self.setup.placement)
        sched = make_scheduler(self.cfg.scheduler, self.cfg.params)
        self.engine = RuntimeEngine(
            view, self.setup.plan, _Observed(sched, self), executor, LoopClock(loop),
            self._done, emulate_links=self.cfg.emulate, log_limit=10_000,
        )  # fmt: skip
        self.engine.start()
        # what exists now (models, plan, libraries) lives as long as the server: keep it out
        # of the garbage collector's full passes, which otherwise stall the loop for ms
        gc.collect()
        gc.freeze()

    async def infer(
        self, model: str, tensor: Any = None, deadline_s: float | None = None
    ) -> Result:
        """Serve one request (``tensor``: one request's input, without the batch dim)."""
        eng = self.engine
        if eng is None:
            raise HetserveError("the server is not started")
        if model not in self.setup.plan.models:
            raise HetserveError(f"no model {model!r} is served")
        slo = self.setup.plan.models[model].slo_s if deadline_s is None else deadline_s
        if self.draining:
            return Result("overloaded", "the server is shutting down")
        if len(self._futures) >= self.cfg.max_pending:
            self.metrics.of(self.metrics.requests, model, "overloaded").inc()
            return Result("overloaded", f"more than {self.cfg.max_pending} requests pending")
        rid = next(self._ids)
        now = eng.clock.now()
        fut: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._futures[rid] = fut
        self._t0[rid] = time.perf_counter()
        self._queued.add(rid)
        eng.submit(Request(rid, model, "http", now, now + slo), tensor)
        return await fut

    def _done(self, r: Request, outcome: int, reason: str, output: Any) -> None:
        name = _NAMES.get(outcome, "failed")
        self._queued.discard(r.id)
        dt = time.perf_counter() - self._t0.pop(r.id, time.perf_counter())
        m = self.metrics
        m.of(m.requests, r.model, name).inc()
        m.of(m.latency, r.model).observe(dt)
        if name in ("dropped", "failed"):
            m.of(m.drops, r.model, reason).inc()
        fut = self._futures.pop(r.id, None)
        if fut is not None and not fut.done():
            fut.set_result(Result(name, reason, output, dt))

    async def drain(self, timeout_s: float = 30.0) -> None:
        """Wait for every request in flight to get its answer."""
        pending = list(self._futures.values())
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)

    async def stop(self, timeout_s: float = 30.0) -> None:
        """Graceful shutdown: refuse new requests, answer those in flight (``drain``; any
        still unanswered after ``timeout_s`` get ``failed: shutdown``), then release the
        workers (Ray actors)."""
        self.draining = True
        await self.drain(timeout_s)
        for rid, fut in list(self._futures.items()):
            if not fut.done():
                fut.set_result(Result("failed", "shutdown"))
            self._futures.pop(rid, None)
        close = getattr(self.engine.executor if self.engine else None, "close", None)
        if close is not None:
            close()
        gc.unfreeze()  # what start() froze may be collected again


class _Observed:
    """The scheduler, with its dispatches and stage reports counted in the metrics."""

    def __init__(self, inner: Any, server: Server) -> None:
        self.inner = inner
        self.server = server
        self._view: ClusterView | None = None

    def _energy(self, rep: Any) -> float:
        """The latency model's energy for the part of the stage that ran (0 where it has
        no power figures)."""
        view = self._view
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
                    rep.model, w.gpu, w.share, len(rep.requests), range(first, first + done)
                )
            )
        except Exception:  # a latency model without power figures for this device
            return 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _seen(self, acts: list[Any]) -> list[Any]:
        for a in acts:
            if type(a) is Dispatch:
                srv = self.server
                m = srv.metrics
                m.of(m.batch, a.model).observe(len(a.requests))
                if a.route[0].blocks[0] == 0:  # first dispatches: the requests' queueing
                    q = m.of(m.queue, a.model)
                    now = srv.engine.clock.now() if srv.engine else 0.0
                    for r in a.requests:
                        if r.id in srv._queued:
                            srv._queued.discard(r.id)
                            q.observe(max(0.0, now - r.arrival_s))
        return acts

    def start(self, view: Any, plan: Any, now: float) -> list[Any]:
        self._view = view
        return self._seen(self.inner.start(view, plan, now))

    def on_arrival(self, r: Request, now: float) -> list[Any]:
        return self._seen(self.inner.on_arrival(r, now))

    def on_timer(self, token: object, now: float) -> list[Any]:
        return self._seen(self.inner.on_timer(token, now))

    def on_worker_lost(self, worker: str, now: float) -> list[Any]:
        return self._seen(self.inner.on_worker_lost(worker, now))

    def on_stage_done(self, rep: Any, now: float) -> list[Any]:
        if rep.kind == "stage":
            dur = max(0.0, rep.end_s - rep.start_s)
            m = self.server.metrics
            m.of(m.stage, rep.model, rep.worker).observe(dur)
            m.of(m.busy, rep.worker).inc(dur)
            joules = self._energy(rep)
            if joules > 0:
                m.of(m.energy, rep.worker, "model").inc(joules)
        return self._seen(self.inner.on_stage_done(rep, now))


class _RaplReader:
    """This machine's CPU package energy counter (RAPL), where readable: exported as
    ``hetserve_energy_joules_total{worker="cpu-package",source="rapl"}`` at each scrape."""

    def __init__(self) -> None:
        import os
        from pathlib import Path

        path = Path("/sys/class/powercap/intel-rapl:0/energy_uj")
        self.path = path if path.exists() and os.access(path, os.R_OK) else None
        self.last: int | None = None

    def read_j(self) -> float:
        """Joules since the last read (0 without RAPL; the counter's wrap is handled)."""
        if self.path is None:
            return 0.0
        try:
            uj = int(self.path.read_text())
        except (OSError, ValueError):
            return 0.0
        prev, self.last = self.last, uj
        if prev is None:
            return 0.0
        if uj < prev:  # wrapped
            top = self.path.with_name("max_energy_range_uj")
            try:
                return (int(top.read_text()) - prev + uj) / 1e6
            except (OSError, ValueError):
                return 0.0
        return (uj - prev) / 1e6
