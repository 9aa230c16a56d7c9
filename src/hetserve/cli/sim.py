"""``hetserve simulate``, ``sweep`` and ``report`` (registered on the main CLI group)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from hetserve.cli.common import console, csv_list, model_catalog, names_list, plan_scheduler
from hetserve.cli.views import print_summary, write_run
from hetserve.core.errors import HetserveError


def _setup_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Options shared by simulate and sweep."""
    opts = [
        click.option(
            "--cluster", "cluster_name", required=True, help="Preset name or cluster YAML file."
        ),
        click.option(
            "--models",
            default=None,
            help="Comma-separated model names (required without --plan; with one, a subset "
            "of its models) [default: the plan's models].",
        ),
        click.option(
            "--profiles",
            type=click.Path(file_okay=False),
            default=None,
            help="Profile-set folder (default: the roofline estimate).",
        ),
        click.option(
            "--estimate",
            is_flag=True,
            help="Use the roofline model (the default without --profiles).",
        ),
        click.option(
            "--slo",
            "slo",
            default=None,
            help="Per-model SLOs in ms: m1=ms,m2=ms (overrides --slo-scale).",
        ),
        click.option(
            "--slo-scale",
            default=5.0,
            show_default=True,
            help="SLO = this x batch-1 latency on the cluster's fastest GPU type.",
        ),
        click.option(
            "--plan",
            "plan_path",
            type=click.Path(dir_okay=False),
            default=None,
            help="Plan JSON (default: whole models on every GPU, shared pools).",
        ),
        click.option(
            "--max-batch",
            default=8,
            show_default=True,
            help="Largest batch the default plan allows.",
        ),
        click.option(
            "--param", "params", multiple=True, help="Scheduler parameter key=value (repeatable)."
        ),
        click.option(
            "--workload",
            default="poisson",
            show_default=True,
            help="An arrival process without its rate (poisson, gamma:cv=4, mmpp:ratio=10, "
            "constant, onoff:on_s=1,off_s=1) or a trace source (azure2019:FILE, azure2021:FILE, "
            "synthetic); grammar in docs/workloads.md.",
        ),
        click.option(
            "--duration", "duration_s", default=60.0, show_default=True, help="Seconds of arrivals."
        ),
        click.option(
            "--jitter-cv",
            default=0.0,
            show_default=True,
            help="CV of a lognormal multiplier on every stage execution.",
        ),
        click.option(
            "--cut-bytes",
            type=click.Choice(["fp16", "fp32"]),
            default=None,
            help="Precision of activations crossing cuts [default: the plan's, else fp16: "
            "PPipe sends FP16].",
        ),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def setup_from_options(
    cluster_name: str,
    models: str | None,
    profiles: str | None,
    estimate: bool,
    slo: str | None,
    slo_scale: float,
    plan_path: str | None,
    max_batch: int,
) -> Any:
    from hetserve.engine.setup import build_setup
    from hetserve.experiments.setup import parse_slo

    if not models and not plan_path:
        raise HetserveError("--models: required without --plan (comma-separated model names)")
    if profiles and estimate:
        raise HetserveError("give --profiles DIR or --estimate, not both")
    if slo_scale <= 0:
        raise HetserveError(f"--slo-scale must be > 0, got {slo_scale}")
    if max_batch < 1:
        raise HetserveError(f"--max-batch must be >= 1, got {max_batch}")
    return build_setup(
        cluster_name,
        csv_list(models) if models else [],
        profiles=profiles,
        slo_ms=parse_slo(slo),
        slo_scale=slo_scale,
        plan=plan_path,
        max_batch=max_batch,
        model_catalog=model_catalog(),
    )


def _sim_config(
    seed: int, jitter_cv: float, cut_bytes: str | None, setup: Any,
    patience_s: float | None = None,
) -> Any:  # fmt: skip
    """The simulator's configuration; what the plan means for the run from the ``Setup``
    (its precision at cuts unless ``--cut-bytes`` names one; warm unless its load plans
    load on demand)."""
    from hetserve.sim.engine import SimConfig

    named = {"fp16": 0.5, "fp32": 1.0}
    factor = setup.cut_bytes_factor if cut_bytes is None else named[cut_bytes]
    return SimConfig(
        seed=seed,
        jitter="lognormal" if jitter_cv > 0 else "none",
        jitter_cv=jitter_cv,
        cut_bytes_factor=factor,
        warm=setup.warm,
        patience_s=patience_s,
    )


@click.command()
@_setup_options
@click.option(
    "--scheduler",
    default=None,
    help="Registered name (fixed-batch, edf-adaptive, ...) or module:Class [default: the "
    "plan's scheduler; without a plan edf-adaptive].",
)
@click.option("--rate", "rate_rps", type=float, default=None, help="Total offered rate, req/s.")
@click.option(
    "--load-factor",
    type=float,
    default=None,
    help="Offered rate as a multiple of the plan's capacity (default 1.0).",
)
@click.option(
    "--patience",
    "patience_s",
    type=float,
    default=None,
    help="Clients give up this many seconds after sending: a request not ended by then is "
    "cancelled (out of its queue, or its part of a batch discarded) [default: they wait].",
)
@click.option(
    "--replan",
    default="off",
    show_default=True,
    help="Re-plan as the load moves (docs/control.md): auto (when a model's rate leaves "
    "the band around the planned one, or attainment falls below 90%), every=SECONDS, or "
    "off. Takes a plan of ppipe, np or dart-r.",
)
@click.option(
    "--switch",
    "switch_mode",
    type=click.Choice(["mbb", "flush"]),
    default="mbb",
    show_default=True,
    help="How a new plan takes over: mbb (make-before-break: load beside, cut over, the old "
    "plan drains; no pause) or flush (PPipe: pause ingestion, drain, switch).",
)
@click.option(
    "--max-moving",
    type=int,
    default=4,
    show_default=True,
    help="With --replan: at most this many workers load weights at once.",
)
@click.option(
    "--solve-time",
    "solve_s",
    type=float,
    default=1.0,
    show_default=True,
    help="With --replan: the planner's solve time as modelled in the simulator (seconds; "
    "the measured one is recorded beside it).",
)
@click.option(
    "--objective",
    type=click.Choice(["throughput", "cost", "energy"]),
    default="throughput",
    show_default=True,
    help="With --replan: each new plan takes every usable GPU for the observed mix "
    "(throughput), the cheapest GPUs that serve the observed rates with 25%% headroom "
    "(cost: GPUs it does not need are let go; prices from the catalog or the cluster file, "
    "caps from the cluster file), or "
    "the least power that serves them (energy).",
)
@click.option("--seed", default=0, show_default=True)
@click.option("--out", required=True, type=click.Path(file_okay=False))
def simulate(
    cluster_name: str,
    models: str | None,
    profiles: str | None,
    estimate: bool,
    slo: str | None,
    slo_scale: float,
    plan_path: str | None,
    max_batch: int,
    params: tuple[str, ...],
    workload: str,
    duration_s: float,
    jitter_cv: float,
    cut_bytes: str | None,
    scheduler: str | None,
    rate_rps: float | None,
    load_factor: float | None,
    patience_s: float | None,
    replan: str,
    switch_mode: str,
    max_moving: int,
    solve_s: float,
    objective: str,
    seed: int,
    out: str,
) -> None:
    """Simulate serving a workload; writes summary.json, requests.csv, batches.csv,
    workers.csv (and with --replan, control.json: every decision and switch)."""
    from hetserve.experiments.metrics import summarize
    from hetserve.experiments.setup import build_trace, control_spec, model_rates
    from hetserve.experiments.setup import simulate as run_sim

    if duration_s <= 0:
        raise HetserveError(f"--duration must be > 0, got {duration_s}")
    setup = setup_from_options(
        cluster_name, models, profiles, estimate, slo, slo_scale, plan_path, max_batch
    )
    if rate_rps is None and load_factor is None:
        load_factor = 1.0
    rates = model_rates(setup, rate_rps, load_factor)
    trace = build_trace(setup, workload, rates, duration_s, seed)
    t0 = time.perf_counter()
    cfg = _sim_config(seed, jitter_cv, cut_bytes, setup, patience_s)
    scheduler, sched_params = plan_scheduler(setup.plan, scheduler, params, "edf-adaptive")
    spec = control_spec(
        setup, replan, switch_mode, max_moving, rates, objective=objective, solve_s=solve_s
    )
    res = run_sim(setup, scheduler, trace, sched_params, cfg, spec)
    wall = time.perf_counter() - t0
    s = summarize(res)
    s["config"] = {
        "cluster": setup.cluster.name,
        "models": setup.models,
        "slo_ms": {m: v * 1e3 for m, v in setup.slos_s.items()},
        "scheduler": scheduler,
        "params": list(params),
        "scheduler_params": sched_params,
        "workload": workload,
        "rates_rps": rates,
        "load_factor": load_factor,
        "duration_s": duration_s,
        "seed": seed,
        "jitter_cv": jitter_cv,
        "patience_s": patience_s,
        "replan": replan,
        "switch": switch_mode if spec is not None else None,
        "objective": objective if spec is not None else None,
        "cut_bytes": "fp16" if cfg.cut_bytes_factor == 0.5 else "fp32",
        "capacity_rps": setup.plan.capacity_rps(),
        "latency_source": "profiles" if profiles else "roofline",
    }
    folder = Path(out)
    write_run(folder, res, s)
    if spec is not None:
        (folder / "control.json").write_text(json.dumps(res.control, indent=1) + "\n")
        for r in res.control:
            console.print(
                f"[{r['asked_s']:.0f} s] {r['reason']}: {r['decision']}"
                + (f"; switched in {r['done_s'] - r['decided_s']:.3f} s ({r['steps']})"
                   if r["switched"] else "")
            )  # fmt: skip
    print_summary(
        s,
        f"{scheduler} on {setup.cluster.name}, {workload}, "
        f"{sum(rates.values()):.1f} req/s"
        + (f" (load factor {load_factor:g})" if load_factor else ""),
    )
    console.print(
        f"simulated {len(trace)} requests in {wall:.2f} s wall "
        f"({len(trace) / max(wall, 1e-9):,.0f} requests/s); wrote {folder}/"
        f"summary.json, requests.csv, batches.csv"
    )


def _seeds(value: str) -> list[int]:
    try:
        out = [int(v) for v in csv_list(value)]
    except ValueError:
        raise HetserveError(f"--seeds: expected integers like 0,1,2, got {value!r}") from None
    if not out:
        raise HetserveError("--seeds: give at least one seed")
    if not all(0 <= s < 2**32 for s in out):
        raise HetserveError(f"--seeds: seeds must be in 0..2**32-1, got {value!r}")
    return out


@click.command()
@_setup_options
@click.option("--schedulers", default="fixed-batch,edf-adaptive", show_default=True)
@click.option("--seeds", default="0", show_default=True, help="Comma-separated seeds.")
@click.option("--target", default=0.99, show_default=True, help="Attainment target.")
@click.option(
    "--resolution",
    default=0.01,
    show_default=True,
    help="Stop bisecting when the bracket is this narrow.",
)
@click.option(
    "--start", "start_lf", default=1.0, show_default=True, help="First load factor to try."
)
@click.option("--out", required=True, type=click.Path(file_okay=False))
def sweep(
    cluster_name: str,
    models: str,
    profiles: str | None,
    estimate: bool,
    slo: str | None,
    slo_scale: float,
    plan_path: str | None,
    max_batch: int,
    params: tuple[str, ...],
    workload: str,
    duration_s: float,
    jitter_cv: float,
    cut_bytes: str | None,
    schedulers: str,
    seeds: str,
    target: float,
    resolution: float,
    start_lf: float,
    out: str,
) -> None:
    """Highest load factor at which attainment stays >= target, per scheduler."""
    from hetserve.experiments.loadfactor import search_max_load_factor
    from hetserve.experiments.setup import pooled_attainment
    from hetserve.scheduling.params import parse_params

    if duration_s <= 0:
        raise HetserveError(f"--duration must be > 0, got {duration_s}")
    if not 0 < target <= 1 or resolution <= 0 or start_lf <= 0:
        raise HetserveError("need 0 < --target <= 1, --resolution > 0 and --start > 0")
    setup = setup_from_options(
        cluster_name, models, profiles, estimate, slo, slo_scale, plan_path, max_batch
    )
    seed_list = _seeds(seeds)
    cfg = _sim_config(seed_list[0], jitter_cv, cut_bytes, setup)
    sched_params = parse_params(params)
    results: dict[str, Any] = {}
    names = names_list(schedulers, "--schedulers")
    with Progress(
        TextColumn("[bold]{task.description}"),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=not sys.stderr.isatty(),
    ) as prog:
        for name in names:
            task = prog.add_task(name, total=None, info="")

            def evaluate(lf: float, name: str = name) -> float:
                return pooled_attainment(
                    setup, name, workload, lf, duration_s, seed_list, sched_params, cfg
                )

            def sampled(lf: float, att: float, task: Any = task) -> None:
                prog.update(task, info=f"load factor {lf:.3f}: {100 * att:.2f}%")

            r = search_max_load_factor(
                evaluate,
                target=target,
                resolution=resolution,
                start=min(start_lf, 64.0),
                on_sample=sampled,
            )
            best = max((a for _, a in r.curve), default=0.0)
            results[name] = {
                "max_load_factor": r.max_load_factor,
                "reached_target": r.max_load_factor > 0,
                "best_attainment": best,
                "curve": [[lf, a] for lf, a in r.curve],
            }
    results["config"] = {
        "cluster": setup.cluster.name,
        "models": setup.models,
        "workload": workload,
        "duration_s": duration_s,
        "seeds": seed_list,
        "target": target,
        "resolution": resolution,
        "capacity_rps": setup.plan.capacity_rps(),
    }
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sweep.json").write_text(json.dumps(results, indent=1) + "\n")
    t = Table(
        title=f"max load factor at {100 * target:g}% attainment ({setup.cluster.name}, "
        f"{workload}, {duration_s:g} s x {len(seed_list)} seeds)"
    )
    for col in ("scheduler", "max load factor", "req/s", "samples"):
        t.add_column(col, justify="left" if col == "scheduler" else "right")
    never = []
    for name in names:
        r = results[name]
        reached = r["reached_target"]
        if not reached:
            never.append(f"{name} (best {100 * r['best_attainment']:.1f}%)")
        t.add_row(
            name,
            f"{r['max_load_factor']:.3f}" if reached else "never reached",
            f"{r['max_load_factor'] * setup.plan.capacity_rps():.1f}" if reached else "-",
            str(len(r["curve"])),
        )
    console.print(t)
    if never:
        console.print(
            f"[yellow]not at {100 * target:g}% attainment at any load factor tried: "
            f"{', '.join(never)}[/yellow] (a looser --target or --slo, or another plan)"
        )
    console.print(f"wrote {folder}/sweep.json")


@click.command()
@click.argument("folder", type=click.Path())
def report(folder: str) -> None:
    """Write FOLDER/report.html (plots of a simulate or sweep output folder)."""
    from hetserve.experiments.report import write_report

    console.print(f"wrote {write_report(folder)}")
