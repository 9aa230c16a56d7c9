"""The server's observability: Prometheus metrics with bounded labels, per-model
statistics in the shape of Triton's statistics extension, the check of real batches
against the profile they were planned with, and this machine's RAPL energy counter."""

from __future__ import annotations

import logging
import statistics
import time
from typing import Any

from hetserve.core.outcome import DROP_KINDS, FAILURE_KINDS, drop_kind, failure_kind
from hetserve.scheduling import ClusterView

LOG = logging.getLogger("hetserve.server")
# the bounded label values of hetserve_drops_total and hetserve_failures_total
DROP_REASONS = tuple(DROP_KINDS)
FAILURE_REASONS = tuple(FAILURE_KINDS)


def drop_reason(reason: str) -> str:
    """The bounded label of a drop's reason text: its kind (``core.outcome.DROP_KINDS``,
    which the kernel holds every drop to; ``unnamed`` would be a bug, kept off the
    label set's growth)."""
    kind = drop_kind(reason)
    return kind if kind in DROP_KINDS else "unnamed"


def failure_reason(reason: str) -> str:
    """The bounded label of a failure's reason text: its kind
    (``core.outcome.FAILURE_KINDS``, which every failure's text starts with; ``unnamed``
    would be a bug, kept off the label set's growth). The text goes to the log."""
    return failure_kind(reason) or "unnamed"


class Metrics:
    """The server's Prometheus metrics, in a registry of its own."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.requests = Counter(
            "hetserve_requests", "Requests by model and outcome", ["model", "outcome"],
            registry=self.registry,
        )  # fmt: skip
        self.rows = Counter(
            "hetserve_rows", "Rows of the requests (a request carries one or more), by model "
            "and outcome", ["model", "outcome"], registry=self.registry,
        )  # fmt: skip
        self.drops = Counter(
            "hetserve_drops", "Requests dropped or refused, by model and reason "
            f"({', '.join(DROP_REASONS)})", ["model", "reason"], registry=self.registry,
        )  # fmt: skip
        self.failures = Counter(
            "hetserve_failures", "Requests failed by a worker, by model and reason "
            f"({', '.join(FAILURE_REASONS)})", ["model", "reason"], registry=self.registry,
        )  # fmt: skip
        self.responses = Counter(
            "hetserve_http_responses", "HTTP responses by route kind (infer, metadata, "
            "health, metrics, cluster, control, other) and status code", ["route", "status"],
            registry=self.registry,
        )  # fmt: skip
        self.queue_depth = Gauge(
            "hetserve_queue_depth", "Requests arrived and not yet dispatched", ["model"],
            registry=self.registry,
        )  # fmt: skip
        self.in_flight = Gauge(
            "hetserve_requests_in_flight", "Requests arrived and not yet answered", ["model"],
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
            "hetserve_batch_size", "Rows per dispatched batch (its requests' rows together)",
            ["model"],
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
        # the control loop (``serve --replan``)
        self.plan_version = Gauge(
            "hetserve_plan_version", "The plan version served (0: the plan served at start; "
            "each switch adds one)", registry=self.registry,
        )  # fmt: skip
        self.replans = Counter(
            "hetserve_replans", "Re-plans decided (an operator's plan included), by decision "
            "(switch or stay)", ["decision"], registry=self.registry,
        )  # fmt: skip
        self.switches = Counter(
            "hetserve_switches", "Plan switches completed, by mode (mbb: make-before-break; "
            "flush: pause, drain, switch)", ["mode"], registry=self.registry,
        )  # fmt: skip
        self.switch_seconds = Histogram(
            "hetserve_switch_seconds", "A switch's wall time, from the decision to the old "
            "plan's last batch and eviction", registry=self.registry,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )  # fmt: skip
        self.switch_waited = Counter(
            "hetserve_switch_waited_requests", "Requests whose ingestion a switch paused (flush) "
            "until the new plan started", registry=self.registry,
        )  # fmt: skip
        self.switch_requests = Counter(
            "hetserve_switch_requests", "Requests that arrived while a switch ran, by whether "
            "they met their SLO (ok) or not (missed: late, dropped or failed)", ["result"],
            registry=self.registry,
        )  # fmt: skip
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}
        self._rapl = _RaplReader()
        self._rapl.read_j()  # from now on

    def http(self, route: str, status: int) -> None:
        self.of(self.responses, route, str(status)).inc()

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


class ModelStats:
    """Per model and version, counts and times in the shape of Triton's statistics
    extension (``GET /v2/models/{m}[/versions/{v}]/stats``); durations in nanoseconds,
    measured on the server's clock (with ``--emulate`` the compute times are the latency
    model's: that is what an emulated worker computes). ``default``: per model, the
    version a request naming none gets (``runtime.versions``)."""

    KEYS = ("success", "fail", "cancel", "queue", "compute_input", "compute_infer",
            "compute_output")  # fmt: skip

    def __init__(self, models: list[str], default: dict[str, int] | None = None) -> None:
        self.default = {m: (default or {}).get(m, 1) for m in models}
        self._d: dict[tuple[str, int], dict[str, Any]] = {}

    def _of(self, model: str, version: int | None) -> dict[str, Any]:
        key = (model, self.default[model] if version is None else version)
        d = self._d.get(key)
        if d is None:
            d = self._d[key] = {
                "inference": {k: [0, 0] for k in self.KEYS},
                "inference_count": 0,
                "execution_count": 0,
                "last_inference": 0,
                "batches": {},
            }
        return d

    def succeeded(self, model: str, dt_s: float, rows: int = 1, version: int | None = None) -> None:
        """A request answered: ``success`` counts requests, ``inference_count`` their rows
        (Triton's: each inference of a batched request counts)."""
        d = self._of(model, version)
        _add(d["inference"]["success"], dt_s)
        d["inference_count"] += rows
        d["last_inference"] = int(time.time() * 1e3)

    def failed(self, model: str, dt_s: float, version: int | None = None) -> None:
        _add(self._of(model, version)["inference"]["fail"], dt_s)

    def cancelled(self, model: str, dt_s: float, version: int | None = None) -> None:
        """A request whose client went away before its answer (hetserve's ``cancel``,
        named like the ``cancel`` of Triton's response statistics): arrival to then."""
        _add(self._of(model, version)["inference"]["cancel"], dt_s)

    def queued(self, model: str, dt_s: float, version: int | None = None) -> None:
        _add(self._of(model, version)["inference"]["queue"], dt_s)

    def executed(
        self, model: str, batch: int, dt_s: float, first: bool, version: int | None = None
    ) -> None:
        """A stage ran ``batch`` rows of ``version``; a batch holding rows of several
        versions (they run in lockstep) counts once for each, with its whole time."""
        d = self._of(model, version)
        _add(d["inference"]["compute_infer"], dt_s)
        if first:
            d["execution_count"] += 1
        _add(d["batches"].setdefault(batch, [0, 0]), dt_s)

    def of(self, model: str, version: int | None = None) -> dict[str, Any]:
        """One version's entry (None: the default version's)."""
        v = self.default[model] if version is None else version
        d = self._of(model, v)
        return {
            "name": model,
            "version": str(v),
            "last_inference": d["last_inference"],
            "inference_count": d["inference_count"],
            "execution_count": d["execution_count"],
            "inference_stats": {k: {"count": c, "ns": ns} for k, (c, ns) in d["inference"].items()},
            "batch_stats": [
                {"batch_size": b, "compute_infer": {"count": c, "ns": ns}}
                for b, (c, ns) in sorted(d["batches"].items())
            ],
        }

    def versions(self, model: str, served: tuple[int, ...] = ()) -> list[dict[str, Any]]:
        """An entry per version: those ``served`` and any that has counts, ascending."""
        vs = set(served) | {v for m, v in self._d if m == model} | {self.default[model]}
        return [self.of(model, v) for v in sorted(vs)]


def _add(cell: list[int], dt_s: float) -> None:
    cell[0] += 1
    cell[1] += int(max(0.0, dt_s) * 1e9)


class ProfileWatch:
    """Real workers against the latency model they were planned with: after the first
    ``first_n`` batches of a model on a worker, a warning when their median measured time is
    more than ``factor`` times what the profile says (a stale cached profile, another load
    on the machine, other threads): the plan and the SLOs then rest on wrong numbers."""

    def __init__(self, view: ClusterView, first_n: int = 20, factor: float = 1.5) -> None:
        self.view = view
        self.first_n = first_n
        self.factor = factor
        self.ratios: dict[tuple[str, str], list[float]] = {}
        self.verdicts: dict[tuple[str, str], float] = {}  # median measured / profile

    def observe(self, rep: Any) -> None:
        key = (rep.model, rep.worker)
        if key in self.verdicts or not rep.completed or not rep.requests:
            return
        if rep.blocks_done and rep.blocks_done != rep.blocks[1] - rep.blocks[0]:
            return  # a preempted stage ran part of its blocks
        try:
            want = self.view.stage_latency_s(rep.model, rep.worker, len(rep.requests), rep.blocks)
        except Exception:  # a batch size the profile lacks
            return
        if want <= 0:
            return
        rs = self.ratios.setdefault(key, [])
        rs.append(max(0.0, rep.end_s - rep.start_s) / want)
        if len(rs) >= self.first_n:
            med = statistics.median(rs)
            self.verdicts[key] = med
            del self.ratios[key]
            if med > self.factor:
                LOG.warning(
                    "%s on %s: the first %d batches ran %.1fx slower than the profile says "
                    "(median); deadlines planned on it will be missed. Re-measure "
                    "(hetserve serve --remeasure) or check the machine's load and threads.",
                    rep.model, rep.worker, len(rs), med,
                )  # fmt: skip


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
