"""``reproduce control``: the control loop over a day of moving load, as a study
(:mod:`hetserve.experiments.studies`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from hetserve.core.errors import HetserveError
from hetserve.experiments.studies import (
    Progress,
    Study,
    StudyOption,
    SummaryTable,
    register_study,
)


def configure(
    quick: bool, seed: int, *, trace: str | None, rate_rps: float | None,
    hour_s: float | None, cluster: str | None,
) -> Any:  # fmt: skip
    from hetserve.core.presets import load_cluster
    from hetserve.experiments.control import study as S

    cfg = S.quick_config() if quick else S.ControlConfig()
    changes: dict[str, Any] = {"seed": seed}
    if trace is not None:
        changes["trace"] = trace
    if rate_rps is not None:
        if not rate_rps > 0:
            raise HetserveError(f"--rate: expected req/s > 0, got {rate_rps}")
        changes["rate_rps"] = rate_rps
    if hour_s is not None:
        if not hour_s >= 2.0:
            raise HetserveError(f"--hour: expected seconds >= 2, got {hour_s}")
        changes["hour_s"] = hour_s
    if cluster is not None:
        load_cluster(cluster)  # an unknown name fails here with the known ones listed
        changes["cluster"] = cluster
    return dataclasses.replace(cfg, **changes)


def run(cfg: Any, jobs: int, progress: Progress) -> dict[str, Any]:
    from hetserve.experiments.control import study as S

    return S.run_study(cfg, progress)


def write(results: dict[str, Any], out: str | Path) -> tuple[Path, Path]:
    from hetserve.experiments.control.report import write_control_report
    from hetserve.experiments.report import write_results

    return Path(write_results(results, out)), Path(write_control_report(results, out))


def summary(results: dict[str, Any], cfg: Any) -> list[SummaryTable]:
    rows = []
    for name, r in results["runs"].items():
        gh = ", ".join(f"{t} {h:.1f}" for t, h in r["gpu_hours"].items())
        rows.append((
            name, f"{r['attainment']:.4f}", f"{r['gpu_hours_total']:.1f}", gh, f"{r['cost']:.1f}",
            f"{r['energy_kwh']:.2f}", str(r["switches"]), f"{r['paused_s_total']:.3f}",
            f"{r['missed_during_switches']}/{r['arrived_during_switches']}",
        ))  # fmt: skip
    h = results["headline"]
    notes = [
        f"mbb-auto holds {h['gpu_hours_share']:.0%} of static-peak's GPU-hours; "
        + "; ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in h["checks"].items()),
        f"{results['requests']:,} requests; an hour of the day lasts "
        f"{results['config']['hour_s']:g} s; hours of the day in GPU-hours and cost",
    ]
    unit = next(iter(results["runs"].values()), {}).get("cost_unit", "GPU-hours")
    cols = ("run", "attainment", "GPU-hours", "per type", f"cost {unit}", "energy kWh", "switches",
            "paused s", "missed/arrived in switches")  # fmt: skip
    return [SummaryTable("The control loop over a day (issue 40)", cols, rows, notes)]


STUDY = register_study(
    Study(
        name="control",
        paper="PPipe section 4 / Shepherd section 4.3 (re-planning)",
        help="A day of moving load (the Azure Functions 2019 twin, or --trace FILE) served by "
        "static plans sized for the mean and for the peak, and by the control loop: hourly "
        "re-plans with PPipe's flush, and re-plans when the load moves with make-before-break "
        "switches (cost objective, and every-GPU throughput). Attainment per hour, GPU-hours "
        "and cost per type, energy, switches.",
        quick_help="An hour lasts 10 s.",
        options=(
            StudyOption(
                "--trace", "trace", "An Azure Functions 2019 per-minute file.", path="file"
            ),
            StudyOption("--rate", "rate_rps", "The day's mean rate, req/s [1000].", float),
            StudyOption("--hour", "hour_s", "Seconds an hour of the day lasts [60; 10].", float),
            StudyOption("--cluster", "cluster", "The cluster [hc1-s]."),
        ),
        configure=configure,
        run=run,
        write=write,
        summary=summary,
        phases=("planning", "simulating"),
    )
)
