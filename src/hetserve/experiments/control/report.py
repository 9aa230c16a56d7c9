"""``reproduce control``'s report page: load, GPUs held with a mark per plan version, and
attainment over the day."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hetserve.experiments.report import html_page, img_tag, pyplot, save_png, table_html


def plot_day(results: dict[str, Any]) -> str:
    plt = pyplot()
    hours = list(range(len(next(iter(results["hourly_rps"].values())))))
    fig, axes = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    ax = axes[0]
    for m, ys in results["hourly_rps"].items():
        ax.plot(hours, ys, marker="o", label=m)
    ax.plot(hours, [sum(v) for v in zip(*results["hourly_rps"].values(), strict=True)], "k--",
            label="total")  # fmt: skip
    ax.set_ylabel("offered req/s")
    ax.set_title("load over the day (hourly means)")
    ax.legend(fontsize=8)
    ax = axes[1]
    for name, r in results["runs"].items():
        steps = [(0.0, _first_gpus(r))] + [(t, g) for t, _, g in r["timeline"]]
        xs = [t for t, _ in steps] + [len(hours)]
        ys = [g for _, g in steps] + [steps[-1][1]]
        versions = len(r["timeline"])
        (line,) = ax.step(xs, ys, where="post", label=f"{name} ({versions} switches)")
        # each switch (a new plan version) marked where it happened, also those that
        # kept the plan's size
        ax.plot([t for t, _, _ in r["timeline"]], [g for _, _, g in r["timeline"]],
                linestyle="none", marker="|", markersize=9, color=line.get_color())  # fmt: skip
    ax.set_ylabel("GPUs held")
    ax.set_title("plan size and plan versions over the day (a mark per switch)")
    ax.legend(fontsize=8)
    ax = axes[2]
    for name, r in results["runs"].items():
        ax.plot(hours, [None if a is None else 100 * a for a in r["attainment_per_hour"]],
                marker=".", label=name)  # fmt: skip
    ax.set_ylabel("attainment %")
    ax.set_xlabel("hour of the day")
    ax.set_title("SLO attainment per hour")
    ax.legend(fontsize=8)
    for a in axes:
        a.grid(alpha=0.3)
    fig.tight_layout()
    return save_png(fig)


def _first_gpus(r: dict[str, Any]) -> int:
    """GPUs of the run's first plan (a static run: all day)."""
    return int(r.get("first_gpus", 0))


def write_control_report(results: dict[str, Any], out_dir: str | Path) -> Path:
    rows = [
        [name, f"{r['attainment']:.4f}", f"{r['gpu_hours_total']:.1f}", f"{r['cost']:.1f}",
         f"{r['energy_kwh']:.2f}", str(r["switches"]), f"{r['switch_s_mean']:.3f}",
         f"{r['paused_s_total']:.3f}",
         f"{r['missed_during_switches']}/{r['arrived_during_switches']}"]
        for name, r in results["runs"].items()
    ]  # fmt: skip
    h = results["headline"]
    checks = [[k, "yes" if v else "no"] for k, v in h["checks"].items()]
    cfg = results["config"]
    unit = next(iter(results["runs"].values()), {}).get("cost_unit", "GPU-hours")
    parts = [
        "<h1>The control loop over a day</h1>",
        f"<p>{results['requests']:,} requests on {cfg['cluster']} ({', '.join(cfg['models'])}), "
        f"mean {cfg['rate_rps']:g} req/s; an hour lasts {cfg['hour_s']:g} s; "
        f"{'the trace ' + cfg['trace'] if cfg['trace'] else 'the synthetic Azure 2019 twin'}."
        "</p>",
        img_tag(plot_day(results)),
        table_html(["run", "attainment", "GPU-hours", f"cost {unit}", "energy kWh", "switches",
                    "mean switch s", "paused s", "missed/arrived in switches"], rows),
        "<h2>The headline</h2>",
        f"<p>mbb-auto holds {h['gpu_hours_share']:.0%} of static-peak's GPU-hours.</p>",
        table_html(["check", "met"], checks),
    ]  # fmt: skip
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.html"
    path.write_text(html_page("hetserve: the control loop over a day", parts))
    return path
