"""``DIR/report.html`` of ``hetserve reproduce ppipe``: the paper's Figs. 6, 7, 8 and 10
drawn from ``results.json``, with the targets side by side."""

from __future__ import annotations

import html
import statistics
from pathlib import Path
from typing import Any

from hetserve.experiments.ppipe.study import PAPER, clusters_of, summary_rows
from hetserve.experiments.report import bars as _bars_shared
from hetserve.experiments.report import html_page, pyplot, save_png
from hetserve.experiments.report import table_html as _table

_COLORS: dict[str, str] = {
    "ppipe": "#1f77b4",
    "reservation": "#1f77b4",
    "np": "#ff7f0e",
    "dart-r": "#2ca02c",
    "reactive": "#d62728",
}


def _mean(xs: Any) -> float:
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else 0.0


def plot_max_lf(results: dict[str, Any]) -> str:
    """Fig. 6: max load factor at 99% attainment per cluster and planner (mean over groups)."""
    plt = pyplot()
    cfg = results["config"]
    wls, planners, clusters = list(cfg["workloads"]), cfg["planners"], clusters_of(results)
    fig, axes = plt.subplots(1, len(wls), figsize=(5 * len(wls), 3.6), squeeze=False)
    for ax, wl in zip(axes[0], wls, strict=True):
        _bars(
            ax,
            clusters,
            {
                p: [_mean(results[c][g][p][wl] for g in results[c]) for c in clusters]
                for p in planners
            },
            1.2,
            "max load factor at 99%",
            f"{wl} (paper Fig. 6)",
        )
    fig.tight_layout()
    return save_png(fig)


def plot_attainment(results: dict[str, Any], group: str, workload: str) -> str:
    """Fig. 7: attainment (mean over the group's models) vs load factor, per planner."""
    plt = pyplot()
    clusters = clusters_of(results)
    fig, axes = plt.subplots(1, len(clusters), figsize=(4.2 * len(clusters), 3.4), squeeze=False)
    for ax, c in zip(axes[0], clusters, strict=True):
        for p, by_wl in results["curves"][c].get(group, {}).items():
            curve = by_wl.get(workload, [])
            xs = [pt[0] for pt in curve]
            ys = [100 * _mean(pt[2].values()) for pt in curve]
            ax.plot(xs, ys, "o-", ms=3, label=p, color=_COLORS.get(p))
        ax.axhline(99, color="grey", ls=":", lw=1)
        ax.set_ylim(max(0, ax.get_ylim()[0]), 100.5)
        ax.set_xlabel("load factor")
        ax.set_ylabel("SLO attainment (%)")
        ax.set_title(f"{c}, {group}, {workload}")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_png(fig)


def plot_utilization(results: dict[str, Any], workload: str) -> str:
    """Fig. 8: temporal utilisation of high- and low-class GPUs at the max load factor."""
    plt = pyplot()
    planners, clusters = results["config"]["planners"], clusters_of(results)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    for ax, cls in zip(axes, ("high", "low"), strict=True):
        util = results["utilization"]
        _bars(
            ax,
            clusters,
            {
                p: [
                    100 * _mean(u.get(p, {}).get(workload, {}).get(cls) for u in util[c].values())
                    for c in clusters
                ]
                for p in planners
            },
            118,
            "utilisation (%)",
            f"{cls}-class GPUs, {workload} (paper Fig. 8)",
        )
    fig.tight_layout()
    return save_png(fig)


def plot_ablation(results: dict[str, Any]) -> str:
    """Fig. 10: reservation vs reactive data plane on the PPipe plan, per group."""
    plt = pyplot()
    rows = [(f"{c} {g}", a) for c, gs in results["ablation"].items() for g, a in gs.items()]
    fig, ax = plt.subplots(figsize=(max(5, 1.3 * len(rows) + 2), 3.4))
    _bars(
        ax,
        [r for r, _ in rows],
        {k: [a.get(k) or 0.0 for _, a in rows] for k in ("reservation", "reactive")},
        1.2,
        "max load factor at 99%",
        "data plane ablation on the PPipe plan (paper Fig. 10)",
    )
    ax.tick_params(axis="x", labelsize=8, labelrotation=30 if len(rows) > 6 else 0)
    fig.tight_layout()
    return save_png(fig)


def _fmt(x: Any, pct: bool = False) -> str:
    if x is None:
        return "-"
    return f"{100 * x:.1f}%" if pct else f"{x:.3f}"


def write_study_report(results: dict[str, Any], out_dir: str | Path) -> Path:
    cfg = results["config"]
    planners = cfg["planners"]
    parts = [
        "<h1>PPipe evaluation on the hetserve simulator</h1>",
        f"<p>Clusters {', '.join(clusters_of(results))}; groups "
        + "; ".join(f"{g}: {', '.join(m)}" for g, m in cfg["groups"].items())
        + f". SLO = {cfg['slo_scale']:g} x batch-1 latency on {cfg['slo_ref_gpu']}, planning "
        f"margin {cfg['slo_margin']:g}; {cfg['duration_s']:g} s per load factor, grid step "
        f"{cfg['lf_step']:g} up to {cfg['lf_max']:g}; workloads "
        + ", ".join(f"{k} = <code>{html.escape(v)}</code>" for k, v in cfg["workloads"].items())
        + ". Load factor 1.0 = the PPipe plan's capacity for the group.</p>",
        "<h2>Summary</h2>",
        _table(
            ["cluster", "workload", *planners, "PPipe/NP", "PPipe/DART-r"],
            summary_rows(results),
        ),
    ]
    s = results["summary"]
    target_rows = []
    for wl, paper_lf in PAPER["ppipe_max_lf"].items():
        if wl in s:
            target_rows.append(
                [
                    f"PPipe max load factor, {wl}",
                    _fmt(s[wl].get("ppipe_mean_max_lf")),
                    f"{paper_lf}",
                ]
            )
            for base, key in (("NP", "ppipe_over_np"), ("DART-r", "ppipe_over_dart_r")):
                if s[wl].get(key) is not None:
                    target_rows.append(
                        [f"PPipe / {base}, {wl}", f"{s[wl][key]:.2f}x", f"{PAPER[key][wl]}x"]
                    )
    for p, v in s.get("low_class_utilization_poisson", {}).items():
        target_rows.append(
            [
                f"low-class utilisation, {p}, poisson",
                _fmt(v, True),
                _fmt(PAPER["low_class_util"].get(p), True),
            ]
        )
    if "ablation" in s:
        for k in ("reservation", "reactive"):
            target_rows.append(
                [f"ablation: {k}", _fmt(s["ablation"][k]), f"{PAPER['ablation'][k]}"]
            )
    parts += ["<h2>Ours vs the paper</h2>", _table(["metric", "hetserve", "paper"], target_rows)]
    parts += [
        "<h2>Max load factor at 99% attainment (Fig. 6)</h2>",
        f"<img src='data:image/png;base64,{plot_max_lf(results)}'>",
    ]
    first_group = next(iter(cfg["groups"]))
    wl0 = next(iter(cfg["workloads"]))
    parts += [
        f"<h2>Attainment vs load factor, {first_group} (Fig. 7)</h2>",
        f"<img src='data:image/png;base64,{plot_attainment(results, first_group, wl0)}'>",
        "<h2>GPU utilisation at the max load factor (Fig. 8)</h2>",
        f"<img src='data:image/png;base64,{plot_utilization(results, wl0)}'>",
    ]
    if results.get("ablation"):
        parts += [
            "<h2>Reservation vs reactive data plane (Fig. 10)</h2>",
            f"<img src='data:image/png;base64,{plot_ablation(results)}'>",
        ]
    rows = []
    for c in clusters_of(results):
        for g, by_p in results["per_model"][c].items():
            for p, by_wl in by_p.items():
                for wl, per in by_wl.items():
                    rows.append(
                        [c, g, p, wl]
                        + [f"{m}: {v:.2f}" for m, v in per.items()]
                        + [f"{results[c][g][p][wl]:.3f}"]
                    )
    parts += [
        "<h2>Per model</h2>",
        _table(
            ["cluster", "group", "planner", "workload", "model 1", "model 2", "model 3", "mean"],
            rows,
        ),
    ]
    out = Path(out_dir) / "report.html"
    out.write_text(html_page("hetserve: PPipe reproduction", parts))
    return out


def _bars(
    ax: Any, categories: list[str], series: dict[str, list[float]], top: float, ylabel: str,
    title: str,
) -> None:  # fmt: skip
    _bars_shared(ax, categories, series, top, ylabel, title, _COLORS)
