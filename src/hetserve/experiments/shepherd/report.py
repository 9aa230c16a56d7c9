"""``DIR/report.html`` of ``hetserve reproduce shepherd``: Shepherd's Figs. 7, 9, 10/11b
and 11a drawn from ``results.json``, with the paper's figures side by side."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from hetserve.experiments.report import bars as _bars_shared
from hetserve.experiments.report import html_page, img_tag, pyplot, save_png
from hetserve.experiments.report import table_html as _table
from hetserve.experiments.shepherd.study import PAPER, SCHEDULERS, WORKLOADS, summary_rows

_COLORS = {"flex": "#1f77b4", "clockwork": "#ff7f0e", "nexus": "#2ca02c", "flex-np": "#9467bd"}


def _lines(ax: Any, series: dict[str, list[list[float]]], xlabel: str, ylabel: str) -> None:
    for name, pts in series.items():
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=name, color=_COLORS.get(name))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def plot_load(results: dict[str, Any]) -> str:
    """Fig. 7: goodput and utilisation vs offered load, both workloads."""
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for col, wl in enumerate(WORKLOADS):
        r = results["workloads"][wl]
        _lines(axes[0][col], r["goodput_vs_load"], "offered load (req/s)", "goodput (req/s)")
        axes[0][col].set_title(f"{wl}: goodput")
        _lines(axes[1][col], r["utilization_vs_load"], "offered load (req/s)", "GPU utilisation")
        axes[1][col].set_title(f"{wl}: utilisation")
    fig.tight_layout()
    return save_png(fig)


def plot_slo(results: dict[str, Any]) -> str:
    """Fig. 9: goodput vs SLO at a fixed offered load."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, wl in zip(axes, WORKLOADS, strict=True):
        pts = {
            s: [[x * 1e3, y] for x, y in v]
            for s, v in results["workloads"][wl]["goodput_vs_slo"].items()
        }
        _lines(ax, pts, "SLO (ms)", "goodput (req/s)")
        ax.set_title(f"{wl}, {results['config']['slo_load_rps']:g} req/s offered")
    fig.tight_layout()
    return save_png(fig)


def plot_ablation(results: dict[str, Any]) -> str:
    """Fig. 11a: the two-stream scenario (first burst) and FLEX variants on MAF."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    two = results["ablation"]["two_stream"]
    cats = list(two)
    trio = ["flex", "flex-np", "clockwork"]
    series = {s: [two[c][s]["first_burst"] for c in cats] for s in trio}
    top = max(max(v) for v in series.values()) * 1.3
    _bars(axes[0], [f"SLO {c}" for c in cats], series, top, "requests served", "two streams")
    maf = results["ablation"]["maf"]
    variants = ["flex", "flex-np", "flex-deadline"]
    series2 = {v: [maf[wl][v] for wl in WORKLOADS] for v in variants}
    top2 = max(max(v) for v in series2.values()) * 1.3
    _bars(axes[1], list(WORKLOADS), series2, top2, "goodput (req/s)", "MAF, highest load")
    fig.tight_layout()
    return save_png(fig)


def plot_scaling(results: dict[str, Any]) -> str:
    """Figs. 10 and 11b: goodput share and scheduler cost vs workers, by grouping."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for g, rows in results["scaling"].items():
        xs = [r["workers"] for r in rows]
        axes[0].plot(xs, [r["goodput_rps"] / r["offered_rps"] for r in rows], "o-", label=g)
        axes[1].plot(xs, [r["us_per_event"] for r in rows], "o-", label=g)
    ticks = [r["workers"] for r in next(iter(results["scaling"].values()))]
    for ax, label in zip(axes, ["goodput / offered", "FLEX us per event"], strict=True):
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_xlabel("workers")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return save_png(fig)


def write_shepherd_report(results: dict[str, Any], out_dir: str | Path) -> Path:
    cfg = results["config"]
    s = results["summary"]
    parts = [
        "<h1>Shepherd evaluation on the hetserve simulator</h1>",
        f"<p>{cfg['n_gpus']} V100 workers in one serving group, {len(cfg['models'])} models "
        f"of Shepherd Table 4 ({html.escape(', '.join(cfg['models']))}) with its exit "
        f"points, {cfg['n_streams']:,} MAF streams, SLO {cfg['slo_s'] * 1e3:g} ms, "
        f"{cfg['duration_s']:g} s per point; Nexus re-provisions every {cfg['epoch_s']:g} s "
        "for the coming window's peak rate.</p>",
        "<h2>Summary</h2>",
        _table(
            [
                "workload",
                "highest load",
                *SCHEDULERS,
                "FLEX/Clockwork",
                "FLEX/Nexus",
                "FLEX >= both everywhere",
            ],
            summary_rows(results),
        ),
    ]
    t = s["two_stream"]
    rows = [
        [
            "FLEX / Clockwork, highest load",
            " / ".join(f"{s[wl]['flex_over_clockwork_high_load']:.2f}x" for wl in WORKLOADS),
            f"up to {PAPER['flex_over_clockwork_high_load']}x",
        ],
        [
            "FLEX / Nexus, highest load",
            " / ".join(f"{s[wl]['flex_over_nexus_high_load']:.2f}x" for wl in WORKLOADS),
            f"up to {PAPER['flex_over_nexus_high_load']}x",
        ],
        [
            "preemption, two streams, 90 ms (first burst / whole run)",
            f"{t['preemption_90ms_first_burst']:.2f}x / {t['preemption_90ms_whole']:.2f}x",
            f"{PAPER['preemption_two_stream_90ms']}x",
        ],
        [
            "prioritisation, two streams, 250 ms (FLEX-NP / Clockwork)",
            f"{t['prioritisation_250ms_whole']:.2f}x",
            f"{PAPER['prioritisation_two_stream_250ms']}x",
        ],
    ]
    off = results["offline_optimum"]
    for name, o in off.items():
        rows.append(
            [
                f"{name} vs the offline optimum ({o['instances']} instances)",
                f"{100 * o['served_over_optimum']:.1f}% of optimal goodput, worst ratio "
                f"{o['worst_ratio']:.2f}, optimal on {o['optimal_instances']}",
                f"bound {PAPER['competitive_ratio']} (FLEX)" if name == "flex" else "-",
            ]
        )
    parts += ["<h2>Ours vs the paper</h2>", _table(["metric", "hetserve", "paper"], rows)]
    parts += [
        "<h2>Goodput and utilisation vs load (Fig. 7)</h2>",
        img_tag(plot_load(results)),
        "<h2>Goodput vs SLO (Fig. 9)</h2>",
        img_tag(plot_slo(results)),
        "<h2>Ablation (Fig. 11a)</h2>",
        img_tag(plot_ablation(results)),
        "<h2>Scaling with serving groups (Figs. 10, 11b)</h2>",
        img_tag(plot_scaling(results)),
    ]
    scale_rows = [
        [
            g,
            str(r["workers"]),
            str(r["models"]),
            str(r["groups"]),
            f"{r['offered_rps']:,.0f}",
            f"{r['goodput_rps']:,.0f}",
            f"{r['us_per_event']:.2f}",
        ]
        for g, rs in results["scaling"].items()
        for r in rs
    ]
    parts += [
        _table(
            ["grouping", "workers", "models", "groups", "offered", "goodput", "us/event"],
            scale_rows,
        ),
    ]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.html"
    path.write_text(html_page("hetserve: Shepherd reproduction", parts))
    return path


def _bars(
    ax: Any, categories: list[str], series: dict[str, list[float]], top: float, ylabel: str,
    title: str,
) -> None:  # fmt: skip
    _bars_shared(ax, categories, series, top, ylabel, title, _COLORS)
