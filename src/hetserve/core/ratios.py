"""Per-layer latency ratio between two GPU types (PPipe section 2, Fig. 3)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hetserve.core.gpus import GpuType
from hetserve.core.latency import RooflineModel


@dataclass(frozen=True)
class RatioCurve:
    model: str
    slow: str
    fast: str
    layer_ratio: np.ndarray  # per layer: latency on slow / latency on fast
    window_ratio: np.ndarray  # moving window (sum over window) ratio, per window start
    window: int
    block_ratio: np.ndarray  # per pre-partitioned block
    block_bounds: tuple[int, ...]


def latency_ratios(
    rm: RooflineModel,
    model: str,
    slow: GpuType,
    fast: GpuType,
    batch: int = 1,
    window: int | None = None,
) -> RatioCurve:
    ts = np.array([t for t, _ in rm.layer_times(model, slow, 1, batch)])
    tf = np.array([t for t, _ in rm.layer_times(model, fast, 1, batch)])
    n = len(ts)
    w = window or max(1, n // 8)
    w = min(w, n)
    cs, cf = np.concatenate(([0], np.cumsum(ts))), np.concatenate(([0], np.cumsum(tf)))
    win = (cs[w:] - cs[:-w]) / (cf[w:] - cf[:-w])
    blocks = rm.blocks(model)
    br = np.array(
        [
            rm.latency(model, slow, 1, batch, range(i, i + 1))
            / rm.latency(model, fast, 1, batch, range(i, i + 1))
            for i in range(len(blocks))
        ]
    )
    return RatioCurve(model, slow.name, fast.name, ts / tf, win, w, br, blocks.bounds)


def plot_ratios(curves: list[RatioCurve], path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.6))
    for c in curves:
        x = np.arange(len(c.window_ratio)) + c.window / 2
        ax.plot(x, c.window_ratio, lw=1.8, label=f"{c.slow} / {c.fast} (window {c.window})")
        ax.plot(
            np.arange(len(c.layer_ratio)),
            c.layer_ratio,
            lw=0.6,
            alpha=0.45,
            color=ax.lines[-1].get_color(),
        )
    for b in curves[0].block_bounds[1:-1]:
        ax.axvline(b - 0.5, color="grey", lw=0.5, ls=":")
    ax.set_xlabel(f"layer of {curves[0].model} (dotted: pre-partitioned block boundaries)")
    ax.set_ylabel("latency ratio")
    ax.set_title(f"{curves[0].model}: per-layer latency ratio between GPU types (roofline)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
