"""Shepherd's workloads (section 7): many request streams with heavy-tailed rates, folded
round-robin onto the models, from a Microsoft Azure Functions-like trace ("MAF").

- ``maf-stable``: each stream's rate is log-normal over streams (``rate_sigma`` 2: rates
  spread over orders of magnitude) and varies from minute to minute like the synthetic
  Azure 2019 counts (a log-normal AR(1) multiplier per stream and minute,
  :func:`hetserve.workload.azure.minute_multipliers`); within a minute arrivals are
  Poisson.
- ``maf-bursty``: the same stream rates, each stream an MMPP (high state ``ratio`` = 10
  times the low one, mean sojourns 1 s high and 4 s low), so load comes in bursts.

Streams are named ``s0``, ``s1``, ... in order of decreasing rate; stream ``k`` serves
``models[k % len(models)]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from hetserve.core.errors import HetserveError
from hetserve.core.requests import Stream
from hetserve.workload.arrivals import MMPP2
from hetserve.workload.azure import minute_multipliers
from hetserve.workload.trace import Trace, generate

MAF_KINDS = ("maf-stable", "maf-bursty")


def stream_rates(
    n_streams: int, total_rps: float, seed: int, rate_sigma: float = 2.0
) -> np.ndarray:
    """Heavy-tailed per-stream rates (log-normal), sorted decreasing, summing to the total."""
    if n_streams < 1 or total_rps <= 0:
        raise HetserveError("MAF workload: need >= 1 stream and a positive rate")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x3AF]))
    r = np.sort(rng.lognormal(0.0, rate_sigma, n_streams))[::-1]
    return r * (total_rps / r.sum())


def maf_trace(
    kind: str,
    models: Sequence[str],
    n_streams: int,
    total_rps: float,
    duration_s: float,
    slo_s: float,
    seed: int,
    rate_sigma: float = 2.0,
) -> Trace:
    """A ``maf-stable`` or ``maf-bursty`` trace (module docstring)."""
    if kind not in MAF_KINDS:
        raise HetserveError(
            f"MAF workload: kind must be one of {', '.join(MAF_KINDS)}, got {kind!r}"
        )
    if not models:
        raise HetserveError("MAF workload: give at least one model")
    if duration_s <= 0 or slo_s <= 0:
        raise HetserveError("MAF workload: duration and SLO must be > 0")
    rates = stream_rates(n_streams, total_rps, seed, rate_sigma)
    names = [f"s{k}" for k in range(n_streams)]
    of = [models[k % len(models)] for k in range(n_streams)]
    if kind == "maf-bursty":
        streams = [
            Stream(n, m, slo_s, MMPP2(float(r), ratio=10.0, high_s=1.0, low_s=4.0))
            for n, m, r in zip(names, of, rates, strict=True)
        ]
        return generate(streams, duration_s, seed)
    minutes = math.ceil(duration_s / 60.0)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x57AB]))
    mult = minute_multipliers(n_streams, minutes, rng)  # minute-to-minute variation
    starts = 60.0 * np.arange(minutes)
    span = np.minimum(60.0, duration_s - starts)
    lam = rates[:, None] * mult * span[None, :]
    counts = rng.poisson(lam)
    flat = counts.ravel()
    idx = np.repeat(np.arange(flat.size), flat)
    times = np.tile(starts, n_streams)[idx] + rng.random(idx.size) * np.tile(span, n_streams)[idx]
    sidx = np.repeat(np.arange(n_streams, dtype=np.int32), minutes)[idx]
    order = np.argsort(times, kind="stable")
    streams_t = tuple(Stream(n, m, slo_s) for n, m in zip(names, of, strict=True))
    return Trace(times[order], sidx[order], streams_t, duration_s)
