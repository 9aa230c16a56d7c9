"""Seeded, vectorised arrival processes.

Every process has a mean rate ``rate_rps`` and draws the arrival times in ``[0,
duration_s)`` from a NumPy ``Generator`` — the same generator state gives the same times.
``with_rate(r)`` returns the same process shape at mean rate ``r`` (scaling to a target
rate). Processes are named in a registry and parsed from ``name:key=value,...`` strings,
e.g. ``poisson:rate=50``, ``gamma:rate=50,cv=4``, ``mmpp:rate=50,ratio=10,high_s=2,low_s=8``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import ClassVar

import numpy as np

from hetserve.core.errors import HetserveError, unknown


@dataclass(frozen=True)
class ArrivalProcess:
    name: ClassVar[str] = "abstract"
    rate_rps: float

    def __post_init__(self) -> None:
        if not (self.rate_rps > 0 and math.isfinite(self.rate_rps)):
            raise HetserveError(
                f"{self.name}: rate must be a positive number of requests per "
                f"second, got {self.rate_rps}"
            )

    def sample(self, duration_s: float, rng: np.random.Generator) -> np.ndarray:
        """Sorted arrival times (float64 seconds) in ``[0, duration_s)``."""
        raise NotImplementedError

    def with_rate(self, rate_rps: float) -> ArrivalProcess:
        return replace(self, rate_rps=rate_rps)

    def describe(self) -> str:
        args = ",".join(
            f"{'rate' if f.name == 'rate_rps' else f.name}={getattr(self, f.name):g}"
            for f in fields(self)
        )
        return f"{self.name}:{args}"


def uniform_in(
    counts: np.ndarray, starts: np.ndarray, lengths: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """``counts[i]`` uniform times in ``[starts[i], starts[i] + lengths[i])``, sorted."""
    idx = np.repeat(np.arange(len(counts)), counts)
    t = starts[idx] + rng.random(len(idx)) * lengths[idx]
    t.sort()
    return t


@dataclass(frozen=True)
class Poisson(ArrivalProcess):
    name: ClassVar[str] = "poisson"

    def sample(self, duration_s: float, rng: np.random.Generator) -> np.ndarray:
        n = rng.poisson(self.rate_rps * duration_s)
        t = rng.random(n) * duration_s
        t.sort()
        return t


@dataclass(frozen=True)
class Gamma(ArrivalProcess):
    """Renewal process with Gamma inter-arrival times of coefficient of variation ``cv``."""

    name: ClassVar[str] = "gamma"
    cv: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.cv > 0:
            raise HetserveError(f"gamma: cv must be > 0, got {self.cv}")

    def sample(self, duration_s: float, rng: np.random.Generator) -> np.ndarray:
        shape = 1.0 / self.cv**2
        scale = 1.0 / (self.rate_rps * shape)
        # the first arrival is drawn from the stationary (equilibrium) distribution via a
        # uniform offset into a gap, so the process is stationary from t = 0
        chunks, t0 = [], -rng.random() * rng.gamma(shape + 1, scale)
        expected = self.rate_rps * duration_s
        while t0 < duration_s:
            n = int(expected + 6 * math.sqrt(expected * (1 + self.cv**2)) + 16)
            times = t0 + np.cumsum(rng.gamma(shape, scale, n))
            chunks.append(times)
            t0 = times[-1]
        t = np.concatenate(chunks)
        return t[(t >= 0) & (t < duration_s)]


@dataclass(frozen=True)
class MMPP2(ArrivalProcess):
    """Two-state Markov-modulated Poisson process (bursty).

    The process alternates between a high and a low state with exponentially distributed
    sojourns of mean ``high_s`` and ``low_s``; the high state's rate is ``ratio`` times the
    low state's; the two rates are set so that the long-run mean is ``rate_rps``.
    """

    name: ClassVar[str] = "mmpp"
    ratio: float = 10.0
    high_s: float = 1.0
    low_s: float = 4.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.ratio < 1 or self.high_s <= 0 or self.low_s <= 0:
            raise HetserveError("mmpp: need ratio >= 1 and positive high_s, low_s")

    @property
    def rates_rps(self) -> tuple[float, float]:
        low = self.rate_rps * (self.high_s + self.low_s) / (self.ratio * self.high_s + self.low_s)
        return self.ratio * low, low

    def sample(self, duration_s: float, rng: np.random.Generator) -> np.ndarray:
        hi, lo = self.rates_rps
        p_high = self.high_s / (self.high_s + self.low_s)
        state = int(rng.random() < p_high)  # 1 = high
        starts, lengths, rates = [], [], []
        t = 0.0
        while t < duration_s:
            n = 2 * int(duration_s / (self.high_s + self.low_s)) + 8  # even: state repeats
            high = (np.arange(n) + state) % 2 == 1  # alternating, starting at `state`
            soj = rng.exponential(np.where(high, self.high_s, self.low_s))
            s = t + np.concatenate(([0.0], np.cumsum(soj)[:-1]))
            starts.append(s)
            lengths.append(soj)
            rates.append(np.where(high, hi, lo))
            t = s[-1] + soj[-1]
        st, ln, rt = (np.concatenate(x) for x in (starts, lengths, rates))
        ln = np.minimum(ln, np.maximum(duration_s - st, 0.0))
        counts = rng.poisson(rt * ln)
        return uniform_in(counts, st, ln, rng)


@dataclass(frozen=True)
class Constant(ArrivalProcess):
    """Evenly spaced arrivals at ``1/rate`` from a random phase."""

    name: ClassVar[str] = "constant"

    def sample(self, duration_s: float, rng: np.random.Generator) -> np.ndarray:
        gap = 1.0 / self.rate_rps
        return np.arange(rng.random() * gap, duration_s, gap)


@dataclass(frozen=True)
class OnOff(ArrivalProcess):
    """Periodic on/off: Poisson arrivals during ``on_s`` seconds, none during the next
    ``off_s``; the on-rate is set so that the mean is ``rate_rps``. The cycle starts at a
    random phase."""

    name: ClassVar[str] = "onoff"
    on_s: float = 1.0
    off_s: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.on_s <= 0 or self.off_s < 0:
            raise HetserveError("onoff: need on_s > 0 and off_s >= 0")

    def sample(self, duration_s: float, rng: np.random.Generator) -> np.ndarray:
        period = self.on_s + self.off_s
        on_rate = self.rate_rps * period / self.on_s
        phase = rng.random() * period
        k = np.arange(-1, int(duration_s / period) + 2)
        st = k * period - phase
        en = np.minimum(st + self.on_s, duration_s)
        st = np.maximum(st, 0.0)
        ln = np.maximum(en - st, 0.0)
        counts = rng.poisson(on_rate * ln)
        return uniform_in(counts, st, ln, rng)


PROCESSES: dict[str, type[ArrivalProcess]] = {
    p.name: p for p in (Poisson, Gamma, MMPP2, Constant, OnOff)
}


def parse_process(spec: str, rate_rps: float | None = None) -> ArrivalProcess:
    """``name[:key=value,...]`` -> a process (the grammar in ``docs/workloads.md``); ``rate``
    means ``rate_rps``. With ``rate_rps`` the rate comes from elsewhere (a command's
    ``--rate`` or ``--load-factor``) and the spec must not name one; without, it must."""
    name, _, rest = spec.partition(":")
    name = name.strip().lower()
    if name not in PROCESSES:
        raise unknown("arrival process", name, PROCESSES)
    cls = PROCESSES[name]
    allowed = {f.name for f in fields(cls)}
    keys = ", ".join(sorted("rate" if a == "rate_rps" else a for a in allowed))
    kwargs: dict[str, float] = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        given, eq, val = item.partition("=")
        given = given.strip()
        key = "rate_rps" if given in ("rate", "rate_rps") else given
        if not eq or key not in allowed:
            hint = ""
            if not eq and len(allowed) == 2:  # a bare number: name its one shape parameter
                (shape,) = allowed - {"rate_rps"}
                hint = f" (e.g. {name}:{shape}={item})"
            raise HetserveError(
                f"arrival process {spec!r}: expected key=value with keys {keys}; got {item!r}{hint}"
            )
        try:
            kwargs[key] = float(val)
        except ValueError:
            raise HetserveError(
                f"arrival process {spec!r}: {given} must be a number, got {val!r}"
            ) from None
    if rate_rps is not None:
        if "rate_rps" in kwargs:
            raise HetserveError(
                f"arrival process {spec!r}: the rate is given separately here (--rate or "
                f"--load-factor); leave rate= out"
            )
        kwargs["rate_rps"] = rate_rps
    elif "rate_rps" not in kwargs:
        raise HetserveError(f"arrival process {spec!r}: rate is required (e.g. {name}:rate=10)")
    return cls(**kwargs)  # type: ignore[arg-type]
