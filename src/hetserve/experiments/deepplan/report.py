"""``DIR/report.html`` of ``hetserve reproduce deepplan``: DeepPlan's Figs. 11, 12, 13 and
15 and Tables 3 and 4 drawn from ``results.json``, with the paper's numbers beside ours."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from hetserve.experiments.deepplan.study import PAPER, summary_rows
from hetserve.experiments.report import bars, html_page, img_tag, pyplot, save_png, table_html

COLORS = {
    "baseline": "#7f7f7f",
    "pipeswitch": "#ff7f0e",
    "dha": "#2ca02c",
    "pt": "#9467bd",
    "pt+dha": "#1f77b4",
    "optimal": "#d62728",
}


def plot_fig11(results: dict[str, Any]) -> str:
    """Cold-start speed-up over the baseline per model and plan kind (batch 1)."""
    plt = pyplot()
    f11 = results["fig11"]
    models = list(f11)
    kinds = [k for k in COLORS if all(k in f11[m] for m in models)]
    series = {k: [f11[m]["baseline"] / f11[m][k] for m in models] for k in kinds}
    fig, ax = plt.subplots(figsize=(11, 3.8))
    top = max(max(v) for v in series.values()) * 1.25
    bars(ax, models, series, top, "speed-up over baseline", "Fig. 11: batch-1 cold start", COLORS)
    ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    return save_png(fig)


def plot_fig12(results: dict[str, Any]) -> str:
    plt = pyplot()
    f12 = results["fig12"]
    fig, axes = plt.subplots(1, len(f12), figsize=(3.2 * len(f12), 3.2), squeeze=False)
    for ax, (m, per) in zip(axes[0], f12.items(), strict=True):
        for k, pts in per.items():
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=k, color=COLORS.get(k))
        ax.set_title(m)
        ax.set_xlabel("batch")
        ax.set_ylabel("throughput / baseline at batch 1")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return save_png(fig)


def plot_fig13(results: dict[str, Any]) -> str:
    plt = pyplot()
    by_slo = results["fig13_by_slo"]
    fig, axes = plt.subplots(3, len(by_slo), figsize=(5 * len(by_slo), 8), squeeze=False)
    for col, (slo, per) in enumerate(by_slo.items()):
        for k, pts in per.items():
            xs = [p[0] for p in pts]
            for row, idx in enumerate((1, 2, 3)):
                ys = [p[idx] if p[idx] is not None else math.nan for p in pts]
                axes[row][col].plot(xs, ys, "o-", label=k, color=COLORS.get(k))
        axes[0][col].axhline(float(slo), color="k", ls="--", lw=0.8)
        axes[0][col].set_title(f"SLO {slo} ms")
        for row, label in enumerate(("p99 latency (ms)", "goodput fraction", "cold-start rate")):
            axes[row][col].set_ylabel(label)
            axes[row][col].grid(alpha=0.3)
        axes[2][col].set_xlabel("BERT-Base instances")
        axes[0][col].legend(fontsize=8)
    fig.tight_layout()
    return save_png(fig)


def plot_fig15(results: dict[str, Any]) -> str:
    plt = pyplot()
    f15 = results["fig15"]
    fig, axes = plt.subplots(4, 1, figsize=(11, 9), sharex=True)
    offered = f15["offered_per_minute"]
    axes[0].plot(range(len(offered)), offered, color="k")
    axes[0].set_ylabel("offered req/s")
    for k, v in f15["kinds"].items():
        pm = v["per_minute"]
        xs = [p[0] for p in pm]
        for row, idx in ((1, 1), (2, 2), (3, 3)):
            ys = [p[idx] if p[idx] is not None else math.nan for p in pm]
            axes[row].plot(xs, ys, label=k, color=COLORS.get(k), lw=1)
    axes[1].axhline(results["config"]["fig15_slo_ms"], color="k", ls="--", lw=0.8)
    for ax, label in zip(axes[1:], ("p99 (ms)", "goodput fraction", "cold-start rate"),
                         strict=True):  # fmt: skip
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8)
    axes[3].set_xlabel("minute")
    fig.tight_layout()
    return save_png(fig)


def write_deepplan_report(results: dict[str, Any], out_dir: str | Path) -> Path:
    cfg = results["config"]
    f11 = results["fig11"]
    kinds = [k for k in COLORS if all(k in f11[m] for m in f11)]
    parts = [
        "<h1>DeepPlan evaluation on the hetserve simulator</h1>",
        f"<p>Cluster {cfg['cluster']} ({results['gpu']}, parallel transmission over "
        f"{results['parallelism']} GPUs); layer times "
        f"{'from ' + cfg['layers_csv'] if cfg['layers_csv'] else 'estimated from the shipped layer tables'}."  # noqa: E501
        "</p>",
        "<h2>Ours vs the paper</h2>",
        table_html(["metric", "hetserve", "paper"], [list(r) for r in summary_rows(results)]),
        "<h2>Fig. 11: batch-1 cold-start latency (ms)</h2>",
        table_html(["model", *kinds], [[m, *[f"{f11[m][k]:.2f}" for k in kinds]] for m in f11]),
        img_tag(plot_fig11(results)),
        "<h2>Table 3: which layers run from host memory (DHA plan)</h2>",
    ]
    for m, rows in results["table3"].items():
        parts.append(f"<p>{m}</p>")
        parts.append(
            table_html(
                ["layer", "kind", "DHA alone faster (initial)", "DeepPlan (DHA)"],
                [[str(r["layer"]), r["kind"], r["initial"], r["dha_plan"]] for r in rows],
            )
        )
    gap = results["algorithm1_gap"]
    parts += [
        "<h2>Algorithm 1 vs the optimal DHA set (single GPU)</h2>",
        table_html(
            ["model", "pipeswitch ms", "dha (Alg. 1) ms", "optimal ms", "Alg. 1 above optimal"],
            [
                [
                    m,
                    f"{g['pipeswitch_ms']:.2f}",
                    f"{g['dha_ms']:.2f}",
                    f"{g['optimal_ms']:.2f}",
                    f"{g['gap_pct']:.2f}%",
                ]
                for m, g in gap.items()
            ],
        ),
        "<h2>Table 4: two GPUs under different PCIe switches cold-starting at once (ms)</h2>",
        table_html(
            ["model", "PipeSwitch (1)", "PT+DHA (1)", "PT+DHA (2)", "paper"],
            [
                [
                    m,
                    *[f"{x:.2f}" for x in v],
                    " / ".join(f"{x:g}" for x in PAPER["table4"].get(m, ())),
                ]
                for m, v in results["table4"].items()
            ],
        ),
        "<h2>Fig. 12: throughput during cold starts, batch 1-8</h2>",
        img_tag(plot_fig12(results)),
        "<h2>Fig. 13: BERT-Base instances beyond GPU memory</h2>",
        f"<p>Poisson {cfg['fig13_rate_rps']:g} req/s spread uniformly over the instances, "
        f"{cfg['fig13_duration_s']:g} s after a {cfg['warmup_s']:g} s warm-up; the "
        f"coldstart scheduler (LRU, one batch per GPU) with each plan kind.</p>",
        img_tag(plot_fig13(results)),
        "<h2>Fig. 15: an Azure Functions trace</h2>",
        f"<p>{cfg['fig15_functions']} functions as BERT-Base : RoBERTa-Base : GPT-2 instances "
        f"at 4:4:1, {cfg['fig15_rate_rps']:g} req/s, SLO {cfg['fig15_slo_ms']:g} ms, "
        f"{cfg['fig15_minutes']} minutes "
        f"({'trace ' + cfg['fig15_trace'] if cfg['fig15_trace'] else 'the synthetic twin'}).</p>",
        table_html(
            ["kind", "goodput", "p99 ms", "cold-start rate", "loads", "evictions"],
            [
                [
                    k,
                    f"{100 * v['goodput']:.1f}%",
                    f"{v['p99_ms']:.1f}",
                    f"{100 * v['cold_fraction']:.2f}%",
                    str(v["stats"]["loads"]),
                    str(v["stats"]["evictions"]),
                ]
                for k, v in results["fig15"]["kinds"].items()
            ],
        ),
        img_tag(plot_fig15(results)),
    ]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.html"
    path.write_text(html_page("hetserve: DeepPlan reproduction", parts))
    return path
