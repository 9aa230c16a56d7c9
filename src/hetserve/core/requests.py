"""Requests and streams.

A request has a model, a stream, an arrival time and a deadline (and, in the runtime, a
payload). A stream is (model, SLO, arrival process); the arrival process objects live in
:mod:`hetserve.workload` (core imports nothing else of hetserve).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple


@dataclass(frozen=True)
class Stream:
    name: str
    model: str
    slo_s: float
    process: Any = None  # a hetserve.workload.ArrivalProcess

    def __post_init__(self) -> None:
        if self.slo_s <= 0:
            raise ValueError(f"stream {self.name}: slo_s must be > 0, got {self.slo_s}")


class Request(NamedTuple):
    """One inference request: what one client sent, ``rows`` rows of input (one batch
    dimension's worth) that go to the GPU together, in one batch, and end together. Batch
    sizes are in rows: a batch of requests is as large as their rows together. A
    NamedTuple: immutable and cheap to create (the simulator makes one per arrival)."""

    id: int
    model: str
    stream: str
    arrival_s: float
    deadline_s: float
    payload: Any = None
    rows: int = 1

    @property
    def slo_s(self) -> float:
        return self.deadline_s - self.arrival_s
