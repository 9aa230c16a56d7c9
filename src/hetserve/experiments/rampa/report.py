"""``DIR/report.html`` of ``hetserve reproduce rampa``: RAMPA's Figs. 7-11 drawn from
``results.json``, with the paper's claims beside ours."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hetserve.experiments.rampa.study import summary_rows
from hetserve.experiments.report import html_page, img_tag, pyplot, save_png, table_html

COLORS = {"RAMPA": "#ff7f0e", "NCAR": "#1f77b4", "PE": "#2ca02c"}


def plot_fig7(results: dict[str, Any]) -> str:
    """Per cluster: services placed per case; NCAR and PE as their mean over the
    combinations with whiskers from worst to best."""
    plt = pyplot()
    f7 = results["fig7"]
    fig, axes = plt.subplots(1, len(f7), figsize=(3.6 * len(f7), 3.6), squeeze=False)
    for ax, (c, per) in zip(axes[0], f7.items(), strict=True):
        cases = list(per)
        for k, name in enumerate(("RAMPA", "NCAR", "PE")):
            xs = [i + (k - 1) * 0.27 for i in range(len(cases))]
            if name == "RAMPA":
                ax.bar(xs, [per[x]["rampa"] for x in cases], 0.27, label=name,
                       color=COLORS[name])  # fmt: skip
                continue
            e = [per[x][name.lower()] for x in cases]
            mean = [v["mean"] for v in e]
            err = [[max(0.0, m - v["worst"]) for m, v in zip(mean, e, strict=True)],
                   [max(0.0, v["best"] - m) for m, v in zip(mean, e, strict=True)]]  # fmt: skip
            ax.bar(xs, mean, 0.27, yerr=err, capsize=3, label=f"{name} (mean, worst-best)",
                   color=COLORS[name])  # fmt: skip
        ax.set_xticks(range(len(cases)), [results["cases"][x] for x in cases], fontsize=7,
                      rotation=20)  # fmt: skip
        ax.set_title(c)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("services placed")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return save_png(fig)


def plot_fig8(results: dict[str, Any]) -> str:
    """Per cluster: RAMPA's stage counts per service (case 1), stacked."""
    plt = pyplot()
    f8 = results["fig8"]
    fig, axes = plt.subplots(1, len(f8), figsize=(3.6 * len(f8), 3.4), squeeze=False)
    counts = sorted({int(s) for per in f8.values() for h in per.values() for s in h})
    cmap = plt.get_cmap("viridis", max(2, len(counts)))
    for ax, (c, per) in zip(axes[0], f8.items(), strict=True):
        names = list(per)
        bottom = [0] * len(names)
        for j, s in enumerate(counts):
            ys = [per[n].get(str(s), 0) for n in names]
            ax.bar(range(len(names)), ys, bottom=bottom, label=f"{s} stages", color=cmap(j))
            bottom = [a + b for a, b in zip(bottom, ys, strict=True)]
        ax.set_xticks(range(len(names)), [n.replace("service", "s") for n in names])
        ax.set_title(c)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("services placed (case 1)")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    return save_png(fig)


def _perf_bars(ax: Any, perf: dict[str, Any], svc: str, key: str, measured: str) -> None:
    labels, est, meas = ["RAMPA"], [perf["rampa"][svc]], []
    for k, v in perf["pe"][svc].items():
        labels.append(f"PE {k}")
        est.append(v)
    meas = [e.get(measured) for e in est]
    for off, vals, hatch, tag in ((-0.2, [e.get(key) for e in est], "", "estimated"),
                                  (0.2, meas, "//", "simulated")):  # fmt: skip
        for i, v in enumerate(vals):
            if not v:
                continue
            ax.bar(i + off, v["mean"], 0.4, hatch=hatch,
                   yerr=[[max(0.0, v["mean"] - v["min"])], [max(0.0, v["max"] - v["mean"])]],
                   capsize=2,
                   color=COLORS["RAMPA" if i == 0 else "PE"], edgecolor="black", lw=0.3,
                   label=tag if i == 1 else None)  # fmt: skip
    ax.set_xticks(range(len(labels)), labels, fontsize=7)


def plot_fig9_10(results: dict[str, Any]) -> str:
    """Per service: throughput (top) and latency (bottom), RAMPA and PE per stage count,
    estimated and simulated; red: the requirement."""
    plt = pyplot()
    perf = results["fig9_10"]
    svcs = list(perf["required"])
    fig, axes = plt.subplots(2, len(svcs), figsize=(2.6 * len(svcs), 6), squeeze=False)
    for j, s in enumerate(svcs):
        for r, (key, measured, req, label) in enumerate((
            ("tps", "measured_tps", "tps", "throughput (req/s)"),
            ("latency_ms", "measured_latency_ms", "latency_ms", "latency (ms)"),
        )):  # fmt: skip
            ax = axes[r][j]
            _perf_bars(ax, perf, s, key, measured)
            ax.axhline(perf["required"][s][req], color="red", lw=1)
            ax.set_title(f"{s}: {label}", fontsize=8)
            ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    return save_png(fig)


def plot_fig11(results: dict[str, Any]) -> str:
    """Mean placement time (95% CI) vs the model's operations, per cluster."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for c, per in results["fig11"].items():
        pts = sorted(per.values(), key=lambda v: v["ops"])
        ax.errorbar([v["ops"] for v in pts], [v["mean_s"] for v in pts],
                    yerr=[v["ci95_s"] for v in pts], fmt="o-", capsize=3, label=c)  # fmt: skip
    ax.set_xlabel("operations in the model")
    ax.set_ylabel("RAMPA placement time (s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_png(fig)


def _fig7_rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    for c, per in results["fig7"].items():
        for k, e in per.items():
            rows.append([c, results["cases"][k], str(e["rampa"])] + [
                f"{e[m]['best']} ({','.join(map(str, e[m]['best_stages']))}) / "
                f"{e[m]['mean']:.1f} / {e[m]['worst']}" for m in ("ncar", "pe")])  # fmt: skip
    return rows


def write_rampa_report(results: dict[str, Any], out_dir: str | Path) -> Path:
    cfg = results["config"]
    n = len(results["combinations"])
    parts = [
        "<h1>RAMPA evaluation on hetserve</h1>",
        f"<p>Clusters {', '.join(cfg['clusters'])}; demand cases "
        f"{', '.join(results['cases'].values())}; one seeded request sequence per case "
        f"(seed {cfg['seed']}), placed until the first request that cannot be; PE and NCAR "
        f"at {n} of Table IX's 288 stage-count combinations"
        + ("" if n == 288 else " (a seeded sample with the all-fewest and all-most ones)")
        + ". Served: every placed service at its required rate for "
        f"{cfg['serve_s']:g} s in the simulator.</p>",
        "<h2>Ours vs the paper</h2>",
        table_html(["metric", "hetserve", "paper"], [list(r) for r in summary_rows(results)]),
        "<h2>Fig. 7: services placed</h2>",
        img_tag(plot_fig7(results)),
        table_html(["cluster", "case", "RAMPA", "NCAR best (stages) / mean / worst",
                    "PE best (stages) / mean / worst"], _fig7_rows(results)),
    ]  # fmt: skip
    if results["fig8"]:
        parts += ["<h2>Fig. 8: RAMPA's stage counts (case 1)</h2>", img_tag(plot_fig8(results))]
    if results["fig9_10"]:
        parts += ["<h2>Figs. 9-10: throughput and latency per service (rampa-base, case 1)</h2>",
                  img_tag(plot_fig9_10(results))]  # fmt: skip
    if results["fig11"]:
        parts += ["<h2>Fig. 11: placement time</h2>", img_tag(plot_fig11(results))]
    out = Path(out_dir) / "report.html"
    out.write_text(html_page("RAMPA reproduction", parts), encoding="utf-8")
    return out
