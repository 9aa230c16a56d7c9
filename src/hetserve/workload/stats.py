"""Summary statistics of a trace (``hetserve trace stats``) and its rate plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from hetserve.workload.trace import Trace


def trace_stats(trace: Trace, bin_s: float = 60.0) -> dict[str, Any]:
    """Counts, rates and burstiness: inter-arrival CV (1 for Poisson) and the CV and
    peak-to-mean ratio of the per-``bin_s`` request counts."""
    n = len(trace)
    gaps = np.diff(trace.time_s)
    counts = trace.per_stream_counts()
    bins = max(1, int(np.ceil(trace.duration_s / bin_s)))
    per_bin = (
        np.bincount(np.minimum((trace.time_s // bin_s).astype(int), bins - 1), minlength=bins)
        if n
        else np.zeros(bins)
    )
    top = np.sort(counts)[::-1]
    k10 = max(1, len(top) // 10)
    return {
        "requests": int(n),
        "streams": len(trace.streams),
        "models": len(trace.models()),
        "duration_s": float(trace.duration_s),
        "mean_rate_rps": float(trace.rate_rps),
        "interarrival_cv": float(gaps.std() / gaps.mean())
        if len(gaps) > 1 and gaps.mean() > 0
        else float("nan"),
        "bin_s": bin_s,
        "per_bin_cv": float(per_bin.std() / per_bin.mean()) if per_bin.mean() > 0 else float("nan"),
        "peak_to_mean": float(per_bin.max() / per_bin.mean())
        if per_bin.mean() > 0
        else float("nan"),
        "top10pct_stream_share": float(top[:k10].sum() / max(1, top.sum())),
        "per_model_requests": {
            m: int(counts[[i for i, s in enumerate(trace.streams) if s.model == m]].sum())
            for m in trace.models()
        },
    }


def plot_rate(trace: Trace, path: str | Path, bin_s: float = 60.0, title: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bins = max(1, int(np.ceil(trace.duration_s / bin_s)))
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for m in trace.models():
        ids = [i for i, s in enumerate(trace.streams) if s.model == m]
        sel = np.isin(trace.stream_idx, ids)
        c = np.bincount(
            np.minimum((trace.time_s[sel] // bin_s).astype(int), bins - 1), minlength=bins
        )
        ax.plot(np.arange(bins) * bin_s / 60.0, c / bin_s, label=m, lw=1)
    ax.set_xlabel("time (min)")
    ax.set_ylabel(f"rate (req/s, {bin_s:g} s bins)")
    ax.set_title(title or f"{len(trace)} requests, {trace.rate_rps:.1f} req/s mean")
    if len(trace.models()) <= 10:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
