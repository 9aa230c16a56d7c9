"""``hetserve reproduce``: the papers' evaluations, end to end."""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from hetserve.cli import _csv, cli, console
from hetserve.core.errors import HetserveError


@cli.group()
def reproduce() -> None:
    """Reproduce a paper's evaluation on the simulator (results.json, report.html)."""


def _named(items: tuple[str, ...], option: str) -> dict[str, str]:
    out = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name.strip() or not value.strip():
            raise HetserveError(f"{option}: expected NAME=VALUE, got {item!r}")
        out[name.strip()] = value.strip()
    return out


@reproduce.command("ppipe")
@click.option("--quick", is_flag=True, help="One cluster (hc1-l), one group (G1), 10 s points.")
@click.option(
    "--profiles",
    type=click.Path(exists=True, file_okay=False),
    help="Run the study on this profile set instead of the roofline estimates.",
)
@click.option("--clusters", help="Comma-separated clusters [default: hc1-l,hc2-l,hc3-l,hc4-l].")
@click.option("--groups", "group_names", help="Comma-separated built-in groups (G1..G6).")
@click.option(
    "--group",
    "custom_groups",
    multiple=True,
    help="A group of your own: NAME=model,model,model (repeatable; replaces the built-ins).",
)
@click.option(
    "--workload",
    "workloads",
    multiple=True,
    help="NAME=SPEC (repeatable; replaces poisson and bursty), SPEC as in simulate.",
)
@click.option("--duration", "duration_s", type=float, help="Seconds per load factor [30; 10].")
@click.option("--lf-step", type=float, default=0.05, show_default=True)
@click.option("--lf-max", type=float, default=1.0, show_default=True)
@click.option(
    "--ablation-cluster",
    help="Cluster of the reservation-vs-reactive ablation [hc2-l; with --quick hc1-l]; "
    "'none' to skip.",
)
@click.option("--seed", default=0, show_default=True)
@click.option(
    "--jobs",
    type=int,
    default=None,
    help="Worker processes [default: all CPUs].",
)
@click.option("--out", required=True, type=click.Path(file_okay=False))
def reproduce_ppipe(
    quick: bool,
    profiles: str | None,
    clusters: str | None,
    group_names: str | None,
    custom_groups: tuple[str, ...],
    workloads: tuple[str, ...],
    duration_s: float | None,
    lf_step: float,
    lf_max: float,
    ablation_cluster: str | None,
    seed: int,
    jobs: int | None,
    out: str,
) -> None:
    """PPipe section 7: max load factor at 99% attainment of ppipe, np and dart-r plans
    (each with the reservation data plane) on hc1-l..hc4-l for Poisson and Bursty loads,
    attainment curves, GPU utilisation per class, and reservation vs reactive."""
    from hetserve.experiments import ppipe_study as S
    from hetserve.experiments.ppipe_report import write_study_report

    cfg = S.quick_config(profiles) if quick else S.StudyConfig(profiles=profiles)
    changes: dict[str, Any] = {}
    if clusters:
        changes["clusters"] = tuple(_csv(clusters))
    if custom_groups:
        groups = {k: tuple(_csv(v)) for k, v in _named(custom_groups, "--group").items()}
        bad = [g for g, ms in groups.items() if not ms]
        if bad:
            raise HetserveError(f"--group {bad[0]}: give at least one model")
        changes["groups"] = groups
    elif group_names:
        sel = _csv(group_names)
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
        changes["workloads"] = _named(workloads, "--workload")
    if duration_s is not None:
        if duration_s <= 0:
            raise HetserveError(f"--duration must be > 0, got {duration_s}")
        changes["duration_s"] = duration_s
    if not 0 < lf_step <= lf_max:
        raise HetserveError(f"need 0 < --lf-step <= --lf-max, got {lf_step} and {lf_max}")
    changes["lf_step"], changes["lf_max"], changes["seed"] = lf_step, lf_max, seed
    if ablation_cluster is not None:
        changes["ablation_cluster"] = None if ablation_cluster == "none" else ablation_cluster
    cfg = dataclasses.replace(cfg, **changes)
    if cfg.ablation_cluster is not None and cfg.ablation_cluster not in cfg.clusters:
        cfg = dataclasses.replace(cfg, ablation_cluster=cfg.clusters[0])
    n_jobs = jobs if jobs is not None else (os.cpu_count() or 1)
    if n_jobs < 1:
        raise HetserveError(f"--jobs must be >= 1, got {n_jobs}")

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[info]}"),
        console=Console(stderr=True),
        disable=not sys.stderr.isatty(),
    ) as prog:
        task = prog.add_task("planning", total=None, info="")

        def progress(msg: str, k: int, n: int) -> None:
            if n:
                prog.update(task, description="sweeping", total=n, completed=k, info=msg)
            else:
                prog.update(task, info=msg)
            if n and not sys.stderr.isatty():  # a log line per finished sweep
                click.echo(f"[{k}/{n}] {msg}", err=True)

        results = S.run_study(cfg, jobs=n_jobs, progress=progress)
    path = S.write_results(results, out)
    report = write_study_report(results, out)
    t = Table(
        title=f"PPipe reproduction: max load factor at {100 * cfg.target:g}% attainment "
        f"(mean over groups; {cfg.duration_s:g} s per point)"
    )
    for col in ["cluster", "workload", *cfg.planners, "PPipe/NP", "PPipe/DART-r"]:
        t.add_column(col, justify="left" if col in ("cluster", "workload") else "right")
    for row in S.summary_rows(results):
        t.add_row(*row)
    console.print(t)
    s = results["summary"]
    lows = s.get("low_class_utilization_poisson", {})
    if lows:
        console.print(
            "low-class GPU utilisation at the max load factor (poisson): "
            + ", ".join(f"{p} {100 * v:.1f}%" for p, v in lows.items() if v is not None)
        )
    if "ablation" in s:
        console.print(
            f"ablation on the PPipe plan: reservation {s['ablation']['reservation']:.3f}, "
            f"reactive {s['ablation']['reactive']:.3f} (paper 0.92 vs 0.71)"
        )
    console.print(f"wrote {path} and {report}")


def _profile_groups(profiles: str) -> dict[str, tuple[str, ...]]:
    """A profile set's models in sorted order, in groups of three (G1, G2, ...)."""
    from hetserve.core.profiles import ProfileSet

    models = sorted(ProfileSet.read(profiles).models())
    if not models:
        raise HetserveError(f"{profiles}: the profile set has no models")
    return {f"G{i // 3 + 1}": tuple(models[i : i + 3]) for i in range(0, len(models), 3)}
