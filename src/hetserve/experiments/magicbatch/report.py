"""``DIR/report.html`` of ``hetserve reproduce magicbatch``: MagicBatch's Figs. 2, 5 and 6
drawn from ``results.json``, with the paper's numbers beside ours."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hetserve.experiments.magicbatch.study import summary_rows
from hetserve.experiments.report import html_page, img_tag, pyplot, save_png, table_html

GPU_COLORS = {"GTX-1080-Ti": "#7f7f7f", "RTX-2080-Ti": "#ff7f0e", "RTX-3090": "#1f77b4"}
METHOD_COLORS = {
    "exact": "#d62728",
    "pso-ga": "#1f77b4",
    "greedy": "#2ca02c",
    "fcfs": "#7f7f7f",
    "shared": "#9467bd",
    "magicbatch": "#1f77b4",
    "tf-serving": "#ff7f0e",
}


def plot_fig2(results: dict[str, Any]) -> str:
    """Per model (rows): throughput, batch latency, energy per request vs batch size."""
    plt = pyplot()
    f2 = results["fig2"]
    cols = (("throughput (req/s)", 1), ("batch latency (ms)", 2), ("energy per request (J)", 3))
    fig, axes = plt.subplots(len(f2), 3, figsize=(12, 2.6 * len(f2)), squeeze=False)
    for r, (m, per) in enumerate(f2.items()):
        for c, (label, k) in enumerate(cols):
            ax = axes[r][c]
            for g, pts in per.items():
                ax.plot([p[0] for p in pts], [p[k] for p in pts], "o-", ms=3, label=g,
                        color=GPU_COLORS.get(g))  # fmt: skip
            ax.set_xscale("log", base=2)
            if k == 2:
                ax.set_yscale("log")
            ax.set_title(f"{m}: {label}", fontsize=9)
            ax.grid(alpha=0.3)
            if r == len(f2) - 1:
                ax.set_xlabel("batch size")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return save_png(fig)


def _lines(ax: Any, series: dict[str, list[list[float]]], k: int, style: str = "o-") -> None:
    for name, pts in series.items():
        ax.plot([p[0] for p in pts], [p[k] for p in pts], style, label=name,
                color=METHOD_COLORS.get(name.split(' ')[0]))  # fmt: skip


def _two_panels(
    left: list[tuple[dict[str, list[list[float]]], str]],
    right: list[tuple[dict[str, list[list[float]]], str]],
    titles: tuple[str, str],
    ylabels: tuple[str, str],
    log_right: bool = False,
) -> str:
    """Energy (left) and throughput (right) vs streams: series with their line styles."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, series, k, title, ylabel in zip(axes, (left, right), (1, 2), titles, ylabels,
                                            strict=True):  # fmt: skip
        for lines, style in series:
            _lines(ax, lines, k, style)
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        ax.set_xlabel("streams")
        ax.grid(alpha=0.3)
    if log_right:
        axes[1].set_yscale("log")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    return save_png(fig)


def plot_fig5(results: dict[str, Any]) -> str:
    planned = {f"{m} (planned)": v for m, v in results["fig5_planned"].items()}
    return _two_panels(
        [(results["fig5"], "o-"), (planned, "x:")],
        [(results["fig5"], "o-")],
        ("Fig. 5(a): energy (simulated; x: planned)", "Fig. 5(b): throughput (simulated)"),
        ("energy of the batches (J)", "goodput (req/s)"),
    )


def plot_fig6(results: dict[str, Any]) -> str:
    cap = {f"{k} (most at 99%)": v for k, v in results.get("fig6_capacity", {}).items() if v}
    return _two_panels(
        [(results["fig6"], "o-")],
        [(results["fig6"], "o-"), (cap, "s--")],
        ("Fig. 6(a): energy at the streams' rates",
         "Fig. 6(b): goodput (dashed: the most sustained)"),
        ("energy of the batches (J)", "goodput (req/s)"),
        log_right=bool(cap),
    )  # fmt: skip


def _fig5_rows(results: dict[str, Any], methods: list[str]) -> list[list[str]]:
    rows = []
    for p in results["points"]:
        row = [str(p["streams"])]
        for m in methods:
            r = p["methods"][m]
            row.append(f"{r['planned_energy_j']:.0f} / {r['sim']['energy_j']:.0f}")
        rows.append(row)
    return rows


def _gap_rows(s: dict[str, Any]) -> list[list[str]]:
    return [
        [
            m,
            f"{100 * (c['gap_mean'] or 0):.2f}%",
            f"{100 * (c['gap_worst'] or 0):.2f}%",
            str(c["exact_not_better_at"] or "none"),
            str(c["placed_fewer_at"] or "none"),
        ]
        for m, c in s["exact_vs"].items()
    ]


def _fig6_rows(results: dict[str, Any]) -> list[list[str]]:
    f6 = results["fig6"]
    return [
        [
            str(a[0]),
            f"{a[1]:.0f}",
            f"{b[1]:.0f}",
            f"{100 * (1 - a[1] / b[1]):.1f}%",
            f"{a[2]:.1f}",
            f"{b[2]:.1f}",
        ]
        for a, b in zip(f6["magicbatch"], f6["tf-serving"], strict=True)
    ]


def write_magicbatch_report(results: dict[str, Any], out_dir: str | Path) -> Path:
    cfg = results["config"]
    s = results["summary"]
    methods = list(results["fig5"])
    crossings = [
        [c["model"], " / ".join(c["gpus"]), f"{c['between'][0]} and {c['between'][1]}",
         c["cheaper_above"]]
        for c in results["fig2_crossings"]
    ]  # fmt: skip
    parts = [
        "<h1>MagicBatch evaluation on the hetserve simulator</h1>",
        f"<p>Edge server with {cfg['gpus_per_type']} each of GTX 1080 Ti, RTX 2080 Ti and RTX "
        f"3090; models {', '.join(cfg['models'])}; seeded random streams (5-50 req/s, "
        f"deadlines 100-500 ms); {cfg['duration_s']:g} s of Poisson arrivals per point. "
        "Energy is the batches' energy (the paper's Eq. 5); GPUs without streams are parked."
        "</p>",
        "<h2>Ours vs the paper</h2>",
        table_html(["metric", "hetserve", "paper"], [list(r) for r in summary_rows(results)]),
        "<h2>Fig. 2: throughput, latency and energy per request vs batch size</h2>",
        img_tag(plot_fig2(results)),
        table_html(["model", "GPU types", "order flips between batches", "cheaper above"],
                   crossings),
        "<h2>Fig. 5: assignment methods</h2>",
        img_tag(plot_fig5(results)),
        table_html(["streams", *[f"{m} J (planned / simulated)" for m in methods]],
                   _fig5_rows(results, methods)),
    ]  # fmt: skip
    if "exact_vs" in s:
        head = ["method", "energy over exact, mean", "worst", "instances where exact was worse",
                "instances where it placed fewer streams"]  # fmt: skip
        parts.append(table_html(head, _gap_rows(s)))
    head = ["streams", "MagicBatch J", "TF-Serving J", "energy saved", "MagicBatch req/s",
            "TF-Serving req/s"]  # fmt: skip
    parts += [
        "<h2>Fig. 6: MagicBatch vs TF-Serving (batch 32, 30 ms timeout)</h2>",
        img_tag(plot_fig6(results)),
        table_html(head, _fig6_rows(results)),
    ]
    out = Path(out_dir) / "report.html"
    out.write_text(html_page("MagicBatch reproduction", parts), encoding="utf-8")
    return out
