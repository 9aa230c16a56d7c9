"""MagicBatch's streams, the batch choice per GPU type (Eqs. 2-4) and assignments
(the package docstring says what each means)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hetserve.core.errors import HetserveError
from hetserve.core.gpus import GpuType
from hetserve.core.latency import LatencyModel

METHODS = ("exact", "pso-ga", "fcfs", "greedy")


@dataclass(frozen=True)
class EdgeStream:
    """One device's requests (the paper's "device" ``m``)."""

    name: str
    model: str
    rate_rps: float
    deadline_s: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate_rps) and self.rate_rps > 0):
            raise HetserveError(f"stream {self.name}: rate must be > 0 req/s, got {self.rate_rps}")
        if not (math.isfinite(self.deadline_s) and self.deadline_s > 0):
            raise HetserveError(
                f"stream {self.name}: deadline must be > 0 s, got {self.deadline_s}"
            )


@dataclass(frozen=True)
class Option:
    """A stream on a GPU type: its batch, the worst request's latency, the execution time
    of a batch, the energy per request; or why it cannot run there."""

    gpu: str
    batch: int = 0
    latency_s: float = math.inf
    exec_s: float = math.inf
    energy_j: float = math.inf  # per request
    why: str = ""

    @property
    def feasible(self) -> bool:
        return self.batch > 0

    def power_w(self, rate_rps: float) -> float:
        """Energy per second while serving ``rate_rps`` (Eq. 5 per second)."""
        return self.energy_j * rate_rps


def batch_choice(
    latency: LatencyModel, stream: EdgeStream, gpu: GpuType, max_batch: int = 256
) -> Option:
    """The paper's batch choice with its checks (module docstring)."""
    r, d = stream.rate_rps, stream.deadline_s
    best: Option | None = None
    why = ""
    for b in range(1, max_batch + 1):
        wait = (b - 1) / r
        if wait >= d:
            why = why or f"waiting for a batch of {b} takes {wait * 1e3:.1f} ms"
            break
        try:
            ex = latency.latency(stream.model, gpu, 1, b)
        except HetserveError:
            if b == 1:
                raise  # an unknown model, or none of its latencies on this GPU
            break  # a latency table without this batch size: the largest profiled bounds it
        if wait + ex > d:
            why = why or (
                f"batch {b} misses the deadline ({(wait + ex) * 1e3:.1f} > {d * 1e3:.1f} ms)"
            )
            break  # latency grows with the batch
        if ex > b / r:
            why = f"batch {b} runs {ex * 1e3:.1f} ms, longer than {b} arrivals take"
            continue  # a larger batch may keep up
        e = latency.energy(stream.model, gpu, 1, b) / b
        best = Option(gpu.name, b, wait + ex, ex, e)
    if best is None:
        return Option(gpu.name, why=why or "no batch size fits")
    return best


def stream_options(
    latency: LatencyModel,
    streams: Sequence[EdgeStream],
    gpus: Sequence[GpuType],
    max_batch: int = 256,
) -> dict[str, dict[str, Option]]:
    """Per stream, per GPU type: the option each method chooses from."""
    return {s.name: {g.name: batch_choice(latency, s, g, max_batch) for g in gpus} for s in streams}


@dataclass(frozen=True)
class Assignment:
    """Streams bound to GPU instances (``"<type>#<k>"``), with their options."""

    method: str
    gpu_of: dict[str, str]  # stream -> GPU instance
    option_of: dict[str, Option]
    rejected: dict[str, str] = field(default_factory=dict)  # stream -> why
    # for a solver's assignment: its status ("optimal" = proven; "node_limit" or
    # "time_limit" = the best found when the search stopped) and relative MIP gap
    solve: dict[str, Any] = field(default_factory=dict)

    def power_w(self, streams: Sequence[EdgeStream]) -> float:
        rate = {s.name: s.rate_rps for s in streams}
        return sum(o.power_w(rate[m]) for m, o in self.option_of.items())


def gpu_instances(counts: Mapping[str, int]) -> list[str]:
    return [f"{t}#{k}" for t, n in counts.items() for k in range(n)]


def type_of(instance: str) -> str:
    return instance.rsplit("#", 1)[0]


def reject_reason(opts: Mapping[str, Option]) -> str:
    return "; ".join(f"{t}: {o.why}" for t, o in opts.items() if not o.feasible)
