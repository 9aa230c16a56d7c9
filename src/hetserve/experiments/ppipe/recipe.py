"""``reproduce ppipe``: PPipe section 7 as a study (:mod:`hetserve.experiments.studies`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from hetserve.core.errors import HetserveError
from hetserve.experiments.studies import Progress, Study, StudyOption, SummaryTable, register_study


def _names(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _named(items: tuple[str, ...], option: str) -> dict[str, str]:
    out = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name.strip() or not value.strip():
            raise HetserveError(f"{option}: expected NAME=VALUE, got {item!r}")
        out[name.strip()] = value.strip()
    return out


def _profile_groups(profiles: str) -> dict[str, tuple[str, ...]]:
    """A profile set's models in sorted order, in groups of three (G1, G2, ...)."""
    from hetserve.core.profiles import ProfileSet

    models = sorted(ProfileSet.read(profiles).models())
    if not models:
        raise HetserveError(f"{profiles}: the profile set has no models")
    return {f"G{i // 3 + 1}": tuple(models[i : i + 3]) for i in range(0, len(models), 3)}


def configure(
    quick: bool,
    seed: int,
    *,
    profiles: str | None,
    clusters: str | None,
    group_names: str | None,
    custom_groups: tuple[str, ...] | None,
    workloads: tuple[str, ...] | None,
    duration_s: float | None,
    lf_step: float,
    lf_max: float,
    ablation_cluster: str | None,
) -> Any:
    from hetserve.experiments.ppipe import study as S

    cfg = S.quick_config(profiles) if quick else S.StudyConfig(profiles=profiles)
    changes: dict[str, Any] = {}
    if clusters:
        changes["clusters"] = tuple(_names(clusters))
    if custom_groups:
        groups = {k: tuple(_names(v)) for k, v in _named(custom_groups, "--group").items()}
        bad = [g for g, ms in groups.items() if not ms]
        if bad:
            raise HetserveError(f"--group {bad[0]}: give at least one model")
        changes["groups"] = groups
    elif group_names:
        sel = _names(group_names)
        unknown = [g for g in sel if g not in S.GROUPS]
        if unknown:
            raise HetserveError(
                f"--groups: unknown group {unknown[0]!r}; built-in groups are "
                f"{', '.join(S.GROUPS)} (or define one with --group NAME=a,b,c)"
            )
        changes["groups"] = {g: S.GROUPS[g] for g in sel}
    elif profiles:
        changes["groups"] = _profile_groups(profiles)
    if workloads:
        from hetserve.workload.arrivals import PROCESSES, parse_process

        named = _named(workloads, "--workload")
        for spec in named.values():  # a bad spec fails now, not in a worker process
            if spec.partition(":")[0].strip().lower() in PROCESSES:
                parse_process(spec, 1.0)
        changes["workloads"] = named
    if duration_s is not None:
        changes["duration_s"] = duration_s
    if not 0 < lf_step <= lf_max:
        raise HetserveError(f"need 0 < --lf-step <= --lf-max, got {lf_step} and {lf_max}")
    changes["lf_step"], changes["lf_max"], changes["seed"] = lf_step, lf_max, seed
    if ablation_cluster is not None:
        changes["ablation_cluster"] = None if ablation_cluster == "none" else ablation_cluster
    cfg = dataclasses.replace(cfg, **changes)
    if cfg.ablation_cluster is not None and cfg.ablation_cluster not in cfg.clusters:
        cfg = dataclasses.replace(cfg, ablation_cluster=cfg.clusters[0])
    return cfg


def run(cfg: Any, jobs: int, progress: Progress) -> dict[str, Any]:
    from hetserve.experiments.ppipe import study as S

    return S.run_study(cfg, jobs=jobs, progress=progress)


def write(results: dict[str, Any], out: str | Path) -> tuple[Path, Path]:
    from hetserve.experiments.ppipe import study as S
    from hetserve.experiments.ppipe.report import write_study_report

    return Path(S.write_results(results, out)), Path(write_study_report(results, out))


def summary(results: dict[str, Any], cfg: Any) -> list[SummaryTable]:
    from hetserve.experiments.ppipe import study as S

    s = results["summary"]
    notes = []
    lows = s.get("low_class_utilization_poisson", {})
    if lows:
        notes.append(
            "low-class GPU utilisation at the max load factor (poisson): "
            + ", ".join(f"{p} {100 * v:.1f}%" for p, v in lows.items() if v is not None)
        )
    if "ablation" in s:
        notes.append(
            f"ablation on the PPipe plan: reservation {s['ablation']['reservation']:.3f}, "
            f"reactive {s['ablation']['reactive']:.3f} (paper 0.92 vs 0.71)"
        )
    title = (
        f"PPipe reproduction: max load factor at {100 * cfg.target:g}% attainment "
        f"(mean over groups; {cfg.duration_s:g} s per point)"
    )
    cols = ("cluster", "workload", *cfg.planners, "PPipe/NP", "PPipe/DART-r")
    return [SummaryTable(title, cols, list(S.summary_rows(results)), notes, left=2)]


STUDY = register_study(
    Study(
        name="ppipe",
        paper="PPipe",
        help="PPipe section 7: max load factor at 99% attainment of ppipe, np and dart-r plans "
        "(each with the reservation data plane) on hc1-l..hc4-l for Poisson and Bursty loads, "
        "attainment curves, GPU utilisation per class, and reservation vs reactive.",
        quick_help="One cluster (hc1-l), one group (G1), 10 s points.",
        options=(
            StudyOption(
                "--profiles",
                "profiles",
                "Run the study on this profile set instead of the roofline estimates.",
                path="dir",
            ),
            StudyOption(
                "--clusters",
                "clusters",
                "Comma-separated clusters [default: hc1-l,hc2-l,hc3-l,hc4-l].",
            ),
            StudyOption("--groups", "group_names", "Comma-separated built-in groups (G1..G6)."),
            StudyOption(
                "--group",
                "custom_groups",
                "A group of your own: NAME=model,model,model (repeatable; replaces the built-ins).",
                multiple=True,
            ),
            StudyOption(
                "--workload",
                "workloads",
                "NAME=SPEC (repeatable; replaces poisson and "
                "bursty), SPEC in the workload grammar (docs/workloads.md).",
                multiple=True,
            ),
            StudyOption("--duration", "duration_s", "Seconds per load factor [30; 10].", float),
            StudyOption("--lf-step", "lf_step", "Load-factor grid step.", float, default=0.05),
            StudyOption("--lf-max", "lf_max", "Largest load factor.", float, default=1.0),
            StudyOption(
                "--ablation-cluster",
                "ablation_cluster",
                "Cluster of the "
                "reservation-vs-reactive ablation [hc2-l; with --quick hc1-l]; 'none' to "
                "skip.",
            ),
        ),
        configure=configure,
        run=run,
        write=write,
        summary=summary,
        parallel=True,
        phases=("planning", "sweeping"),
    )
)
