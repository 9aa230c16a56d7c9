"""``hetserve reproduce``: the papers' evaluations, end to end."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from hetserve.cli.common import console, csv_list
from hetserve.core.errors import HetserveError


@click.group()
def reproduce() -> None:
    """Reproduce a paper's evaluation on the simulator (results.json, report.html)."""


def _jobs(jobs: int | None) -> int:
    """``--jobs``: worker processes, every CPU by default."""
    n = jobs if jobs is not None else (os.cpu_count() or 1)
    if n < 1:
        raise HetserveError(f"--jobs must be >= 1, got {n}")
    return n


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
    from hetserve.experiments.ppipe import study as S
    from hetserve.experiments.ppipe.report import write_study_report

    cfg = S.quick_config(profiles) if quick else S.StudyConfig(profiles=profiles)
    changes: dict[str, Any] = {}
    if clusters:
        changes["clusters"] = tuple(csv_list(clusters))
    if custom_groups:
        groups = {k: tuple(csv_list(v)) for k, v in _named(custom_groups, "--group").items()}
        bad = [g for g, ms in groups.items() if not ms]
        if bad:
            raise HetserveError(f"--group {bad[0]}: give at least one model")
        changes["groups"] = groups
    elif group_names:
        sel = csv_list(group_names)
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
    if duration_s is not None:  # > 0: its range is cli.common's
        changes["duration_s"] = duration_s
    if not 0 < lf_step <= lf_max:
        raise HetserveError(f"need 0 < --lf-step <= --lf-max, got {lf_step} and {lf_max}")
    changes["lf_step"], changes["lf_max"], changes["seed"] = lf_step, lf_max, seed
    if ablation_cluster is not None:
        changes["ablation_cluster"] = None if ablation_cluster == "none" else ablation_cluster
    cfg = dataclasses.replace(cfg, **changes)
    if cfg.ablation_cluster is not None and cfg.ablation_cluster not in cfg.clusters:
        cfg = dataclasses.replace(cfg, ablation_cluster=cfg.clusters[0])
    n_jobs = _jobs(jobs)

    with _progress("planning", "sweeping") as progress:
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


@contextlib.contextmanager
def _progress(first: str, running: str) -> Iterator[Callable[[str, int, int], None]]:
    """A progress bar on a terminal, a log line per finished job otherwise; yields the
    ``progress(message, done, total)`` callback the studies take (total 0: a message)."""
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[info]}"),
        console=Console(stderr=True),
        disable=not sys.stderr.isatty(),
    ) as prog:
        task = prog.add_task(first, total=None, info="")

        def progress(msg: str, k: int, n: int) -> None:
            if n:
                prog.update(task, description=running, total=n, completed=k, info=msg)
            else:
                prog.update(task, info=msg)
            if n and not sys.stderr.isatty():
                click.echo(f"[{k}/{n}] {msg}", err=True)

        yield progress


@reproduce.command("shepherd")
@click.option("--quick", is_flag=True, help="Three loads, three SLOs, 12 and 48 workers, 20 s.")
@click.option("--duration", "duration_s", type=float, help="Seconds per point [120; 20].")
@click.option("--loads", help="Comma-separated offered loads in req/s [2000,...,14000].")
@click.option("--workers", help="Comma-separated worker counts for scaling [12,...,400].")
@click.option("--streams", "n_streams", type=int, help="MAF streams [2000; 500].")
@click.option("--seed", default=0, show_default=True)
@click.option("--jobs", type=int, default=None, help="Worker processes [default: all CPUs].")
@click.option("--out", required=True, type=click.Path(file_okay=False))
def reproduce_shepherd(
    quick: bool,
    duration_s: float | None,
    loads: str | None,
    workers: str | None,
    n_streams: int | None,
    seed: int,
    jobs: int | None,
    out: str,
) -> None:
    """Shepherd section 7: goodput and utilisation vs load for flex, clockwork and nexus
    (MAF-stable and MAF-bursty), goodput vs SLO, the preemption and prioritisation
    ablation, FLEX against the offline optimum, and scaling with HERD serving groups."""
    from hetserve.experiments.shepherd import study as S
    from hetserve.experiments.shepherd.report import write_shepherd_report

    cfg = S.quick_config() if quick else S.ShepherdConfig()
    changes: dict[str, Any] = {"seed": seed}
    if duration_s is not None:  # > 0: its range is cli.common's
        changes["duration_s"] = duration_s
    for opt, text, key, conv in (
        ("--loads", loads, "loads_rps", float),
        ("--workers", workers, "workers", int),
    ):
        if text is not None:
            try:
                vals = tuple(conv(x) for x in csv_list(text))
            except ValueError:
                raise HetserveError(
                    f"{opt}: expected comma-separated numbers, got {text!r}"
                ) from None
            if not vals or min(vals) <= 0:
                raise HetserveError(f"{opt}: expected positive numbers, got {text!r}")
            changes[key] = vals
    if n_streams is not None:  # >= 1: its range is cli.common's
        changes["n_streams"] = n_streams
    cfg = dataclasses.replace(cfg, **changes)
    n_jobs = _jobs(jobs)
    with _progress("starting", "simulating") as progress:
        results = S.run_study(cfg, jobs=n_jobs, progress=progress)
    path = S.write_results(results, out)
    report = write_shepherd_report(results, out)
    t = Table(
        title=f"Shepherd reproduction: goodput (req/s) at the highest load, {cfg.duration_s:g} s"
    )
    for col in [
        "workload",
        "offered",
        *S.SCHEDULERS,
        "FLEX/Clockwork",
        "FLEX/Nexus",
        "FLEX >= both",
    ]:
        t.add_column(col, justify="left" if col == "workload" else "right")
    for row in S.summary_rows(results):
        t.add_row(*row)
    console.print(t)
    two = results["summary"]["two_stream"]
    console.print(
        f"two streams: preemption at 90 ms {two['preemption_90ms_first_burst']:.2f}x on the "
        f"first burst ({two['preemption_90ms_whole']:.2f}x over the run; paper 6.2x), "
        f"prioritisation at 250 ms {two['prioritisation_250ms_whole']:.2f}x (paper 3.7x)"
    )
    off = results["offline_optimum"]["flex"]
    console.print(
        f"FLEX vs the offline optimum: {100 * off['served_over_optimum']:.1f}% of the optimal "
        f"goodput over {off['instances']} instances, worst ratio {off['worst_ratio']:.2f} "
        f"(bound 12.62)"
    )
    console.print(f"wrote {path} and {report}")


def _profile_groups(profiles: str) -> dict[str, tuple[str, ...]]:
    """A profile set's models in sorted order, in groups of three (G1, G2, ...)."""
    from hetserve.core.profiles import ProfileSet

    models = sorted(ProfileSet.read(profiles).models())
    if not models:
        raise HetserveError(f"{profiles}: the profile set has no models")
    return {f"G{i // 3 + 1}": tuple(models[i : i + 3]) for i in range(0, len(models), 3)}


@reproduce.command("deepplan")
@click.option("--quick", is_flag=True, help="Fewer points and a 10-minute Fig. 15.")
@click.option(
    "--layers",
    "layers_csv",
    type=click.Path(dir_okay=False),
    default=None,
    help="A layers.csv (measured or estimated) instead of the estimate.",
)
@click.option("--cluster", "cluster_name", default="p3-8xlarge", show_default=True)
@click.option(
    "--trace",
    type=click.Path(dir_okay=False),
    default=None,
    help="Fig. 15: an Azure Functions 2019 per-minute file (default: the synthetic twin).",
)
@click.option("--minutes", type=int, default=None, help="Fig. 15 length (default 180; 10 quick).")
@click.option("--seed", default=0, show_default=True)
@click.option("--out", required=True, type=click.Path(file_okay=False))
def reproduce_deepplan(
    quick: bool,
    layers_csv: str | None,
    cluster_name: str,
    trace: str | None,
    minutes: int | None,
    seed: int,
    out: str,
) -> None:
    """DeepPlan section 5: cold-start latency per load plan (Fig. 11, Tables 3 and 4),
    throughput during cold starts (Fig. 12), instances beyond GPU memory (Fig. 13) and an
    Azure Functions trace (Fig. 15)."""
    from hetserve.core.layertable import read_layers_csv
    from hetserve.experiments.deepplan import study as S
    from hetserve.experiments.deepplan.report import write_deepplan_report
    from hetserve.experiments.report import write_results

    cfg = S.quick_config() if quick else S.DeepPlanConfig()
    changes: dict[str, Any] = {"seed": seed, "cluster": cluster_name}
    if layers_csv:
        read_layers_csv(layers_csv)  # a bad file fails now, with its line
        changes["layers_csv"] = layers_csv
    if trace:
        changes["fig15_trace"] = trace
    if minutes is not None:
        changes["fig15_minutes"] = minutes
    cfg = dataclasses.replace(cfg, **changes)
    with _progress("planning", "simulating") as progress:
        results = S.run_study(cfg, progress=progress)
    path = write_results(results, out)
    report = write_deepplan_report(results, out)
    _ours_vs_paper("DeepPlan", S.summary_rows(results), path, report)


@reproduce.command("magicbatch")
@click.option("--quick", is_flag=True, help="4 GPUs per type, 3-12 streams, 20 s points.")
@click.option(
    "--gpus-per-type", type=int, default=None, help="GPUs of each of the three types [10; 4]."
)
@click.option("--streams", "counts", default=None, help="Comma-separated stream counts.")
@click.option("--duration", "duration_s", type=float, default=None, help="Seconds per point.")
@click.option("--seed", default=0, show_default=True)
@click.option("--out", required=True, type=click.Path(file_okay=False))
def reproduce_magicbatch(
    quick: bool,
    gpus_per_type: int | None,
    counts: str | None,
    duration_s: float | None,
    seed: int,
    out: str,
) -> None:
    """MagicBatch section 5: energy, throughput and latency vs batch size per GPU type
    (Fig. 2), the assignment methods (Fig. 5) and MagicBatch vs TF-Serving (Fig. 6)."""
    from hetserve.experiments.magicbatch import study as S
    from hetserve.experiments.magicbatch.report import write_magicbatch_report
    from hetserve.experiments.report import write_results

    cfg = S.quick_config() if quick else S.MagicBatchConfig()
    changes: dict[str, Any] = {"seed": seed}
    if gpus_per_type is not None:
        changes["gpus_per_type"] = gpus_per_type
    if counts is not None:
        try:
            ns = tuple(int(v) for v in csv_list(counts))
        except ValueError:
            raise HetserveError(f"--streams: expected integers like 5,10, got {counts!r}") from None
        if not ns or min(ns) < 1 or max(ns) > 10_000:
            raise HetserveError(f"--streams: expected counts in 1..10000, got {counts!r}")
        changes["stream_counts"] = ns
        changes["capacity_counts"] = tuple(c for c in cfg.capacity_counts if c in ns) or (ns[-1],)
    if duration_s is not None:
        if not 0 < duration_s <= 86_400:
            raise HetserveError(f"--duration must be in (0, 86400] s, got {duration_s}")
        changes["duration_s"] = duration_s
        changes["capacity_duration_s"] = min(cfg.capacity_duration_s, duration_s)
    cfg = dataclasses.replace(cfg, **changes)
    with _progress("planning", "simulating") as progress:
        results = S.run_study(cfg, progress=progress)
    path = write_results(results, out)
    report = write_magicbatch_report(results, out)
    _ours_vs_paper("MagicBatch", S.summary_rows(results), path, report)


@reproduce.command("rampa")
@click.option(
    "--quick", is_flag=True, help="Base and high-perf clusters, cases 1 and 3, 4 combinations."
)
@click.option("--clusters", default=None, help="Comma-separated switched clusters [all four].")
@click.option("--cases", default=None, help="Comma-separated demand cases 1..4 [all].")
@click.option(
    "--combos",
    type=int,
    default=None,
    help="Sample this many of the 288 stage-count combinations for PE and NCAR [all; 4].",
)
@click.option("--max-requests", type=click.IntRange(1, 100_000), default=2000, show_default=True)
@click.option("--serve", "serve_s", type=float, default=None, help="Seconds served [20; 5].")
@click.option("--seed", default=0, show_default=True)
@click.option("--jobs", type=int, default=None, help="Worker processes [default: all CPUs].")
@click.option("--out", required=True, type=click.Path(file_okay=False))
def reproduce_rampa(
    quick: bool,
    clusters: str | None,
    cases: str | None,
    combos: int | None,
    max_requests: int,
    serve_s: float | None,
    seed: int,
    jobs: int | None,
    out: str,
) -> None:
    """RAMPA section V: services placed by RAMPA, PE and NCAR over Table IX's stage-count
    combinations (Fig. 7), RAMPA's stage counts (Fig. 8), throughput and latency estimated
    and served (Figs. 9-10) and placement time (Fig. 11)."""
    from hetserve.core.cluster import load_cluster
    from hetserve.experiments.rampa import study as S
    from hetserve.experiments.rampa.report import write_rampa_report
    from hetserve.experiments.report import write_results

    cfg = S.quick_config() if quick else S.RampaConfig()
    changes: dict[str, Any] = {"seed": seed, "max_requests": max_requests}
    if clusters is not None:
        names = tuple(csv_list(clusters))
        for n in names:
            load_cluster(n)  # an unknown name fails here with the known ones listed
        if not names:
            raise HetserveError("--clusters: expected at least one cluster")
        changes["clusters"] = names
    if cases is not None:
        try:
            ks = tuple(int(v) for v in csv_list(cases))
        except ValueError:
            raise HetserveError(f"--cases: expected integers like 1,3, got {cases!r}") from None
        if not ks or not set(ks) <= {1, 2, 3, 4}:
            raise HetserveError(f"--cases: expected cases among 1..4, got {cases!r}")
        changes["cases"] = ks
    if combos is not None:  # 1..288: its range is cli.common's
        changes["combos"] = combos
    if serve_s is not None:
        if not 0 < serve_s <= 86_400:
            raise HetserveError(f"--serve: expected seconds in (0, 86400], got {serve_s}")
        changes["serve_s"] = serve_s
    n_jobs = _jobs(jobs)
    cfg = dataclasses.replace(cfg, **changes)
    for c in cfg.clusters:
        from hetserve.planning.rampa.network import RampaNet

        RampaNet.of(load_cluster(c))  # a cluster RAMPA cannot use fails before the runs
    with _progress("starting", "placing") as progress:
        results = S.run_study(cfg, jobs=n_jobs, progress=progress)
    path = write_results(results, out)
    report = write_rampa_report(results, out)
    t = Table(title="RAMPA reproduction: services placed (Fig. 7)")
    for col in ("cluster", "case", "RAMPA", "NCAR best / mean / worst", "PE best / mean / worst"):
        t.add_column(col, justify="left" if col in ("cluster", "case") else "right")
    for c, per in results["fig7"].items():
        for k, e in per.items():
            t.add_row(c, results["cases"][k], str(e["rampa"]),
                      *(f"{e[m]['best']} / {e[m]['mean']:.1f} / {e[m]['worst']}"
                        for m in ("ncar", "pe")))  # fmt: skip
    console.print(t)
    _ours_vs_paper("RAMPA", S.summary_rows(results), path, report)


def _ours_vs_paper(paper: str, rows: list[tuple[str, str, str]], path: Any, report: Any) -> None:
    t = Table(title=f"{paper} reproduction: ours vs the paper")
    for col in ("metric", "hetserve", "paper"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    for row in rows:
        t.add_row(*row)
    console.print(t)
    console.print(f"wrote {path} and {report}")


# `reproduce verdicts` lives in its own module; importing it registers the command
from hetserve.cli import verdicts as _verdicts  # noqa: E402, F401
