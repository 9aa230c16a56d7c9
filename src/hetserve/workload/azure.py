"""Azure Functions trace readers and a synthetic generator with Azure-like statistics.

**Azure Functions 2019** (Shahrad et al., ATC 2020), files
``invocations_per_function_md.anon.dNN.csv``: columns ``HashOwner, HashApp, HashFunction,
Trigger`` then ``1 .. 1440``, the invocations of each function in each minute of one day.
Within a minute, arrivals are Poisson, i.e. given the count, uniform (seeded).

**Azure Functions 2021** (Zhang et al., SOSP 2021): rows ``app,func,end_timestamp,duration``
(seconds); an invocation arrives at ``end_timestamp - duration``. Times are shifted to
start at 0 and, if asked, rescaled to a target mean rate.

Functions are *folded onto models*: each function becomes a stream of one of the given
models, assigned round-robin in order of decreasing invocation count, so that every model
gets a similar mix of heavy and light streams.

The real traces cannot be downloaded here. :func:`synthetic_azure2019` writes a file in the
2019 format with the statistics the trace is known for: many functions, rates spread over
orders of magnitude (log-normal), minute-to-minute variation (a log-normal AR(1)
multiplier per function), a diurnal swing and a share of functions that are idle in most
minutes (sporadic timers and bursty event triggers).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hetserve.core.errors import ConfigError, HetserveError
from hetserve.core.files import csv_rows, read_text
from hetserve.core.requests import Stream
from hetserve.workload.arrivals import uniform_in
from hetserve.workload.trace import Trace

AZURE2019_KEYS = ("HashOwner", "HashApp", "HashFunction", "Trigger")
MINUTES_PER_DAY = 1440
TRIGGERS = ("http", "timer", "queue", "event", "storage", "orchestration", "others")


def fold_onto_models(totals: np.ndarray, models: Sequence[str]) -> list[str]:
    """Model of each function: round-robin over functions by decreasing total."""
    if not models:
        raise HetserveError("fold: give at least one model")
    order = np.argsort(-totals, kind="stable")
    out = [""] * len(totals)
    for rank, f in enumerate(order):
        out[f] = models[rank % len(models)]
    return out


def read_azure2019(
    path: str | Path,
    models: Sequence[str],
    slo_s: float | Sequence[float],
    seed: int,
    *,
    minutes: tuple[int, int] | None = None,
    top_functions: int | None = None,
    target_rate_rps: float | None = None,
) -> Trace:
    """Arrivals from an Azure Functions 2019 per-minute file.

    ``minutes``: a ``[first, last)`` minute range (default: all 1440). ``top_functions``:
    keep only the busiest functions. ``slo_s``: one SLO, or one per model.
    """
    path = Path(path)
    names, counts = read_2019_counts(path)
    lo, hi = minutes or (0, counts.shape[1])
    if not 0 <= lo < hi <= counts.shape[1]:
        raise HetserveError(f"{path}: minute range {lo}..{hi} is outside 0..{counts.shape[1]}")
    counts = counts[:, lo:hi]
    totals = counts.sum(axis=1)
    keep = np.nonzero(totals > 0)[0]
    if top_functions is not None:
        keep = keep[np.argsort(-totals[keep], kind="stable")[:top_functions]]
        keep.sort()
    if len(keep) == 0:
        raise HetserveError(f"{path}: no invocations in minutes {lo}..{hi}")
    counts, names = counts[keep], [names[i] for i in keep]
    trace = counts_to_trace(names, counts, models, slo_s, seed)
    return trace.scaled_to_rate(target_rate_rps) if target_rate_rps else trace


def counts_to_trace(
    names: Sequence[str],
    counts: np.ndarray,
    models: Sequence[str],
    slo_s: float | Sequence[float],
    seed: int,
) -> Trace:
    """Per-minute counts ``(functions, minutes)`` -> a trace: one stream per function,
    folded onto the models, arrivals uniform within each minute (seeded)."""
    fmodels = fold_onto_models(counts.sum(axis=1), models)
    slos = _slo_map(models, slo_s)
    streams = tuple(Stream(n, m, slos[m]) for n, m in zip(names, fmodels, strict=True))
    rng = np.random.default_rng(seed)
    n_f, n_m = counts.shape
    flat = counts.ravel()
    starts = np.tile(np.arange(n_m, dtype=float) * 60.0, n_f)
    fn = np.repeat(np.arange(n_f, dtype=np.int32), n_m)
    idx = np.repeat(np.arange(len(flat)), flat)
    times = starts[idx] + rng.random(len(idx)) * 60.0
    sidx = fn[idx]
    order = np.argsort(times, kind="stable")
    return Trace(times[order], sidx[order], streams, n_m * 60.0)


def _slo_map(models: Sequence[str], slo_s: float | Sequence[float]) -> dict[str, float]:
    if isinstance(slo_s, (int, float)):
        return dict.fromkeys(models, float(slo_s))
    if len(slo_s) != len(models):
        raise HetserveError(f"give one SLO or one per model ({len(models)}), got {len(slo_s)}")
    return {m: float(s) for m, s in zip(models, slo_s, strict=True)}


def read_2019_counts(path: Path) -> tuple[list[str], np.ndarray]:
    """An Azure Functions 2019 per-minute file's function names and counts
    (functions x minutes)."""
    with io.StringIO(read_text(path, "Azure Functions 2019 file"), newline="") as f:
        r = csv.reader(f)
        header = next(r, None)
        if header is None or tuple(header[:4]) != AZURE2019_KEYS:
            raise ConfigError(
                f"{path}:1: expected an Azure Functions 2019 header "
                f"{','.join(AZURE2019_KEYS)},1,...,1440"
            )
        minute_cols = header[4:]
        if not minute_cols or minute_cols != [str(i) for i in range(1, len(minute_cols) + 1)]:
            raise ConfigError(
                f"{path}:1: minute columns must be 1,2,...; got {','.join(minute_cols[:3])}..."
            )
        names, rows = [], []
        for row in r:
            line = r.line_num
            if len(row) != len(header):
                raise ConfigError(f"{path}:{line}: expected {len(header)} fields, got {len(row)}")
            try:
                vals = [int(v) for v in row[4:]]
            except ValueError:
                bad = next(v for v in row[4:] if not v.strip().lstrip("-").isdigit())
                raise ConfigError(
                    f"{path}:{line}: minute counts must be integers, got {bad!r}"
                ) from None
            if min(vals) < 0:
                raise ConfigError(f"{path}:{line}: minute counts must be >= 0")
            names.append(f"{row[1][:8]}/{row[2][:8]}")
            rows.append(vals)
    if not rows:
        raise ConfigError(f"{path}: no function rows")
    return names, np.asarray(rows, dtype=np.int64)


def read_azure2021(
    path: str | Path,
    models: Sequence[str],
    slo_s: float | Sequence[float],
    *,
    target_rate_rps: float | None = None,
) -> Trace:
    """Arrivals from an Azure Functions 2021 invocation file (``start = end - duration``)."""
    path = Path(path)
    starts: list[float] = []
    keys: list[str] = []
    for line, row in csv_rows(path, ("app", "func", "end_timestamp", "duration")):
        try:
            end, dur = float(row["end_timestamp"]), float(row["duration"])
        except ValueError:
            raise ConfigError(
                f"{path}:{line}: end_timestamp and duration must be numbers"
            ) from None
        if dur < 0:
            raise ConfigError(f"{path}:{line}: duration must be >= 0, got {dur}")
        starts.append(end - dur)
        keys.append(f"{row['app'][:8]}/{row['func'][:8]}")
    if not starts:
        raise ConfigError(f"{path}: no invocation rows")
    t = np.asarray(starts)
    names = sorted(set(keys))
    pos = {n: i for i, n in enumerate(names)}
    sidx = np.asarray([pos[k] for k in keys], dtype=np.int32)
    totals = np.bincount(sidx, minlength=len(names))
    fmodels = fold_onto_models(totals, models)
    slos = _slo_map(models, slo_s)
    streams = tuple(Stream(n, m, slos[m]) for n, m in zip(names, fmodels, strict=True))
    order = np.argsort(t, kind="stable")
    t = t[order] - t[order][0]
    duration = float(t[-1]) if t[-1] > 0 else 1.0
    trace = Trace(t, sidx[order], streams, duration)
    return trace.scaled_to_rate(target_rate_rps) if target_rate_rps else trace


def minute_multipliers(
    n: int, minutes: int, rng: np.random.Generator, sigma: float = 0.5, phi: float = 0.7
) -> np.ndarray:
    """``(n, minutes)`` rate multipliers with mean 1: ``exp`` of a stationary AR(1) per row
    (coefficient ``phi``, marginal sd ``sigma``), for minute-to-minute variation."""
    innov = rng.normal(0.0, sigma * np.sqrt(1 - phi**2), (n, minutes))
    x = np.empty_like(innov)
    x[:, 0] = rng.normal(0.0, sigma, n)
    for m in range(1, minutes):
        x[:, m] = phi * x[:, m - 1] + innov[:, m]
    return np.exp(x - sigma**2 / 2)


def synthetic_azure2019_counts(
    n_functions: int,
    minutes: int,
    mean_rate_rps: float,
    seed: int,
    *,
    rate_sigma: float = 2.0,
    minute_sigma: float = 0.5,
    minute_phi: float = 0.7,
    diurnal: float = 0.3,
    sporadic_share: float = 0.3,
    phase_spread: float = 1.0,
) -> np.ndarray:
    """Per-minute counts ``(n_functions, minutes)`` with Azure-like statistics.

    Base rates are log-normal (``rate_sigma`` in natural-log units: ~2 spreads rates over
    several orders of magnitude), scaled so the total mean is ``mean_rate_rps``. Each
    function's rate is multiplied per minute by ``exp(x_m)`` with ``x`` a stationary AR(1)
    (coefficient ``minute_phi``, marginal sd ``minute_sigma``), and by a diurnal factor
    ``1 + diurnal * sin(2 pi m / 1440 + phase)``. A ``sporadic_share`` of functions is
    active only in ~10% of minutes (bursty triggers). ``phase_spread`` scales the
    functions' random diurnal phases (1: spread over the day, so the total barely moves;
    0: in phase, so the day's total moves by ``1 +- diurnal``).
    """
    if n_functions < 1 or minutes < 1 or mean_rate_rps <= 0:
        raise HetserveError("synthetic trace: need functions >= 1, minutes >= 1, rate > 0")
    rng = np.random.default_rng(seed)
    base = rng.lognormal(0.0, rate_sigma, n_functions)
    mult = minute_multipliers(n_functions, minutes, rng, minute_sigma, minute_phi)
    phase = rng.random(n_functions) * 2 * np.pi * phase_spread
    m_idx = np.arange(minutes)
    mult *= 1 + diurnal * np.sin(2 * np.pi * m_idx[None, :] / MINUTES_PER_DAY + phase[:, None])
    sporadic = rng.random(n_functions) < sporadic_share
    active = rng.random((n_functions, minutes)) < 0.1
    mult = np.where(sporadic[:, None], mult * active * 10.0, mult)
    per_min = base[:, None] * mult
    per_min *= mean_rate_rps * 60.0 * minutes / per_min.sum()
    return rng.poisson(per_min)


def write_azure2019(path: str | Path, counts: np.ndarray, seed: int) -> None:
    """Write per-minute counts in the Azure Functions 2019 file format (hashes seeded)."""
    rng = np.random.default_rng(seed)
    n_f, n_m = counts.shape
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([*AZURE2019_KEYS, *(str(i) for i in range(1, n_m + 1))])
        owners = [rng.bytes(16).hex() for _ in range(max(1, n_f // 20))]
        apps = [rng.bytes(16).hex() for _ in range(max(1, n_f // 4))]
        for i in range(n_f):
            w.writerow(
                [
                    owners[i % len(owners)],
                    apps[i % len(apps)],
                    rng.bytes(16).hex(),
                    TRIGGERS[int(rng.integers(len(TRIGGERS)))],
                    *counts[i].tolist(),
                ]
            )


__all__ = [
    "fold_onto_models",
    "read_azure2019",
    "read_azure2021",
    "synthetic_azure2019_counts",
    "uniform_in",
    "write_azure2019",
]
