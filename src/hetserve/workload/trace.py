"""Traces: arrival times with their streams and models, generated or read from files.

A :class:`Trace` is columnar (NumPy arrays sorted by arrival time) so that a million
arrivals cost megabytes, not a million objects; :meth:`Trace.requests` yields core
:class:`~hetserve.core.requests.Request` objects lazily.

Arrivals CSV (written by ``hetserve trace gen``, read by ``trace stats``)::

    time_s,stream,model,slo_s
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hetserve.core.errors import ConfigError, HetserveError
from hetserve.core.files import csv_rows
from hetserve.core.requests import Request, Stream

ARRIVALS_COLUMNS = ("time_s", "stream", "model", "slo_s")


@dataclass(frozen=True)
class Trace:
    time_s: np.ndarray  # float64, sorted
    stream_idx: np.ndarray  # int32 index into streams
    streams: tuple[Stream, ...]
    duration_s: float

    def __post_init__(self) -> None:
        if len(self.time_s) != len(self.stream_idx):
            raise ValueError("time_s and stream_idx differ in length")

    def __len__(self) -> int:
        return len(self.time_s)

    @property
    def rate_rps(self) -> float:
        return len(self) / self.duration_s if self.duration_s > 0 else 0.0

    def models(self) -> list[str]:
        return sorted({s.model for s in self.streams})

    def deadlines_s(self) -> np.ndarray:
        slo = np.array([s.slo_s for s in self.streams])
        return self.time_s + slo[self.stream_idx]

    def requests(self) -> Iterator[Request]:
        slo = [s.slo_s for s in self.streams]
        for i, (t, k) in enumerate(
            zip(self.time_s.tolist(), self.stream_idx.tolist(), strict=True)
        ):
            s = self.streams[k]
            yield Request(i, s.model, s.name, t, t + slo[k])

    def scaled_to_rate(self, rate_rps: float) -> Trace:
        """The same arrival pattern stretched or compressed in time to a mean rate."""
        if rate_rps <= 0:
            raise HetserveError(f"target rate must be > 0, got {rate_rps}")
        if len(self) == 0:
            raise HetserveError("cannot rescale an empty trace")
        f = self.rate_rps / rate_rps
        return Trace(self.time_s * f, self.stream_idx, self.streams, self.duration_s * f)

    def per_stream_counts(self) -> np.ndarray:
        return np.bincount(self.stream_idx, minlength=len(self.streams))

    # ------------------------------------------------------------ arrivals CSV
    def write_csv(self, path: str | Path) -> None:
        names = [s.name for s in self.streams]
        models = [s.model for s in self.streams]
        slos = [s.slo_s for s in self.streams]
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(ARRIVALS_COLUMNS)
            for t, k in zip(self.time_s.tolist(), self.stream_idx.tolist(), strict=True):
                w.writerow([repr(t), names[k], models[k], repr(slos[k])])

    @staticmethod
    def read_csv(path: str | Path) -> Trace:
        path = Path(path)
        times: list[float] = []
        idx: list[int] = []
        streams: dict[str, Stream] = {}
        order: dict[str, int] = {}
        for line, row in csv_rows(path, ARRIVALS_COLUMNS):
            try:
                t, slo = float(row["time_s"]), float(row["slo_s"])
            except ValueError:
                raise ConfigError(f"{path}:{line}: time_s and slo_s must be numbers") from None
            if t < 0 or slo <= 0:
                raise ConfigError(f"{path}:{line}: expected time_s >= 0 and slo_s > 0")
            name = row["stream"]
            if name not in streams:
                streams[name] = Stream(name, row["model"], slo)
                order[name] = len(order)
            elif streams[name].model != row["model"]:
                raise ConfigError(
                    f"{path}:{line}: stream {name} changes model "
                    f"from {streams[name].model} to {row['model']}"
                )
            times.append(t)
            idx.append(order[name])
        t_arr = np.asarray(times, dtype=np.float64)
        if np.any(np.diff(t_arr) < 0):
            raise ConfigError(f"{path}: time_s must be sorted ascending")
        dur = float(t_arr[-1]) if len(t_arr) else 0.0
        return Trace(t_arr, np.asarray(idx, dtype=np.int32), tuple(streams.values()), dur)


def merge(parts: Sequence[np.ndarray], streams: Sequence[Stream], duration_s: float) -> Trace:
    """Merge per-stream sorted times into one trace (stable: ties keep stream order)."""
    times = np.concatenate(parts) if parts else np.empty(0)
    idx = (
        np.concatenate([np.full(len(p), k, dtype=np.int32) for k, p in enumerate(parts)])
        if parts
        else np.empty(0, dtype=np.int32)
    )
    order = np.argsort(times, kind="stable")
    return Trace(times[order], idx[order], tuple(streams), duration_s)


MAX_REQUESTS_ENV = "HETSERVE_MAX_REQUESTS"
DEFAULT_MAX_REQUESTS = 20_000_000  # about 6 GiB of simulator state


def max_requests() -> int:
    """The most requests a generated trace may hold: ``$HETSERVE_MAX_REQUESTS`` or 20
    million (a simulated request costs a few hundred bytes from arrival to report)."""
    raw = os.environ.get(MAX_REQUESTS_ENV, "")
    try:
        return int(raw) if raw else DEFAULT_MAX_REQUESTS
    except ValueError:
        raise HetserveError(f"${MAX_REQUESTS_ENV}: expected an integer, got {raw!r}") from None


def check_trace_size(expected_requests: float) -> None:
    """Refuse, before any memory is spent, a trace whose expected size (rate x duration)
    exceeds ``max_requests()``."""
    limit = max_requests()
    if not expected_requests <= limit:
        raise HetserveError(
            f"the workload would hold about {expected_requests:.3g} requests (rate x "
            f"duration), more than the limit of {limit:,}; shorten the duration or lower the "
            f"rate, or raise the limit with {MAX_REQUESTS_ENV}=N if the machine has the "
            f"memory (a few hundred bytes per request)"
        )


def generate(streams: Sequence[Stream], duration_s: float, seed: int) -> Trace:
    """Arrivals of every stream over ``[0, duration_s)``.

    Each stream draws from its own generator spawned from ``seed`` (so adding a stream
    does not change the others' arrivals); same seed, same trace.
    """
    if duration_s <= 0:
        raise HetserveError(f"duration must be > 0 seconds, got {duration_s}")
    if not streams:
        raise HetserveError("no streams to generate")
    check_trace_size(sum(s.process.rate_rps for s in streams if s.process is not None) * duration_s)
    children = np.random.SeedSequence(seed).spawn(len(streams))
    parts = []
    for s, ss in zip(streams, children, strict=True):
        if s.process is None:
            raise HetserveError(f"stream {s.name} has no arrival process")
        parts.append(s.process.sample(duration_s, np.random.default_rng(ss)))
    return merge(parts, streams, duration_s)
