"""``hetserve plan`` (registered on the main CLI group)."""

from __future__ import annotations

from pathlib import Path

import click

from hetserve.cli.common import console, csv_list, int_list
from hetserve.cli.views import print_plan
from hetserve.core.errors import HetserveError


def _weights(text: str | None, models: list[str]) -> dict[str, float] | None:
    if not text:
        return None
    out: dict[str, float] = {}
    for item in csv_list(text):
        m, eq, v = item.partition("=")
        try:
            out[m.strip()] = float(v)
        except ValueError:
            raise HetserveError(f"--weights: expected model=weight, got {item!r}") from None
        if not eq or out[m.strip()] <= 0:
            raise HetserveError(f"--weights: expected model=weight > 0, got {item!r}")
    extra = [m for m in out if m not in models]
    if extra:
        raise HetserveError(f"--weights names {', '.join(extra)}, not among --models")
    return out


@click.command()
@click.option("--cluster", "cluster_name", required=True, help="Preset name or YAML file.")
@click.option(
    "--models",
    default=None,
    help="Comma-separated model names (magicbatch: of the --random streams).",
)
@click.option(
    "--profiles",
    type=click.Path(file_okay=False),
    default=None,
    help="Profile-set folder (default: the roofline estimate).",
)
@click.option("--estimate", is_flag=True, help="Use the roofline model (the default).")
@click.option("--weights", default=None, help="Workload shares: a=0.3,b=0.33,c=0.37.")
@click.option("--slo", default=None, help="Per-model SLOs in ms: a=ms,b=ms.")
@click.option(
    "--slo-scale",
    default=5.0,
    show_default=True,
    help="SLO = this x batch-1 whole-model latency on --slo-ref-gpu.",
)
@click.option(
    "--slo-ref-gpu",
    default=None,
    help="Reference GPU for --slo-scale (default: the cluster's fastest; PPipe: L4).",
)
@click.option(
    "--slo-margin",
    default=0.4,
    show_default=True,
    help="Plan for (1 - margin) x SLO (PPipe's evaluation: 0.4).",
)
@click.option("--max-stages", default=2, show_default=True)
@click.option(
    "--planner",
    type=click.Choice(["ppipe", "np", "dart-r", "deepplan", "magicbatch"]),
    default="ppipe",
    show_default=True,
    help="deepplan: per-model load plans for cold starts (DeepPlan); magicbatch: streams "
    "to GPUs and batch sizes with the least energy (MagicBatch).",
)
@click.option(
    "--method",
    type=click.Choice(["exact", "pso-ga", "fcfs", "greedy", "shared"]),
    default="exact",
    show_default=True,
    help="magicbatch: the assignment method.",
)
@click.option(
    "--streams",
    "streams_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="magicbatch: a stream file (name,model,rate_rps,deadline_ms).",
)
@click.option(
    "--random",
    "random_n",
    type=int,
    default=None,
    help="magicbatch: this many seeded random streams over --models.",
)
@click.option("--seed", default=0, show_default=True, help="magicbatch: random streams, PSO-GA.")
@click.option(
    "--park-idle/--no-park-idle",
    default=None,
    help="magicbatch: GPUs without streams draw nothing (else their idle power) "
    "[default: the cluster's park_idle_gpus].",
)
@click.option(
    "--kind",
    type=click.Choice(["baseline", "pipeswitch", "dha", "pt", "pt+dha", "optimal"]),
    default="pt+dha",
    show_default=True,
    help="deepplan: the load plan kind written to the plan (every kind is printed).",
)
@click.option(
    "--layers",
    "layers_csv",
    type=click.Path(dir_okay=False),
    default=None,
    help="deepplan: a layers.csv (measured or estimated); default: estimated.",
)
@click.option("--batch", default=1, show_default=True, help="deepplan: batch size of cold starts.")
@click.option(
    "--pt-max",
    "pt_max",
    type=int,
    default=None,
    help="deepplan: at most this many GPUs per parallel transmission (default: the topology's).",
)
@click.option("--gpu", default=None, help="deepplan: the GPU type (default: the cluster's only).")
@click.option("--shares", default="1-4", show_default=True, help="Virtual-GPU shares k.")
@click.option("--batches", default="1-8", show_default=True)
@click.option(
    "--blocks",
    "n_blocks",
    default=10,
    show_default=True,
    help="Pre-partitioned blocks per model (roofline source).",
)
@click.option(
    "--cut-bytes",
    type=click.Choice(["fp16", "fp32"]),
    default="fp16",
    show_default=True,
    help="Precision of activations crossing cuts (PPipe sends FP16).",
)
@click.option(
    "--time-limit",
    "time_limit_s",
    default=60.0,
    show_default=True,
    help="Solver time limit, seconds.",
)
@click.option(
    "--gap",
    "mip_gap",
    default=1e-4,
    show_default=True,
    help="Relative optimality gap at which the solver stops.",
)
@click.option(
    "--output",
    required=True,
    type=click.Path(dir_okay=False),
    help="Plan JSON to write (docs/formats.md#plans).",
)
def plan(
    cluster_name: str,
    models: str,
    profiles: str | None,
    estimate: bool,
    weights: str | None,
    slo: str | None,
    slo_scale: float,
    slo_ref_gpu: str | None,
    slo_margin: float,
    max_stages: int,
    planner: str,
    shares: str,
    batches: str,
    n_blocks: int,
    cut_bytes: str,
    time_limit_s: float,
    mip_gap: float,
    output: str,
    kind: str,
    layers_csv: str | None,
    batch: int,
    pt_max: int | None,
    gpu: str | None,
    method: str,
    streams_file: str | None,
    random_n: int | None,
    seed: int,
    park_idle: bool | None,
) -> None:
    """Plan pooled pipelines (PPipe MILP), a baseline (np, dart-r), or cold-start load
    plans (deepplan) for a cluster."""
    from hetserve.core.cluster import load_cluster
    from hetserve.core.plan import slos_from_scale
    from hetserve.experiments.setup import latency_source, parse_slo
    from hetserve.planning.ppipe import PlanOptions, plan_models

    if profiles and estimate:
        raise HetserveError("give --profiles DIR or --estimate, not both")
    ctx = click.get_current_context()
    own = {
        "deepplan": ("kind", "layers_csv", "batch", "pt_max", "gpu"),
        "magicbatch": ("method", "streams_file", "random_n", "seed", "park_idle"),
    }
    for who, names in own.items():
        if planner == who:
            continue
        given = [
            "--"
            + {"layers_csv": "layers", "streams_file": "streams", "random_n": "random"}.get(
                n, n.replace("_", "-")
            )
            for n in names
            if ctx.get_parameter_source(n) not in (None, click.core.ParameterSource.DEFAULT)
        ]
        if given:
            raise HetserveError(f"{', '.join(given)}: options of --planner {who} only")
    if planner == "magicbatch":
        _magicbatch(
            cluster_name, models, profiles, method, streams_file, random_n, seed, park_idle,
            output,
        )  # fmt: skip
        return
    if not models:
        raise HetserveError("--models: give at least one model name")
    if planner == "deepplan":
        from hetserve.core.layerlatency import base_model
        from hetserve.core.layertable import get_layer_table

        c = load_cluster(cluster_name)
        names = list(dict.fromkeys(csv_list(models)))
        if not names:
            raise HetserveError("--models: give at least one model")
        for m in names:  # instances (bert-base@3) are served whole: one block each
            get_layer_table(base_model(m))
        _deepplan(c, None, names, kind, parse_slo(slo), layers_csv, batch, pt_max, gpu, output)
        return
    if slo_scale <= 0:
        raise HetserveError(f"--slo-scale must be > 0, got {slo_scale}")
    c = load_cluster(cluster_name)
    lat, names = latency_source(c, csv_list(models), profiles, n_blocks)
    slos = slos_from_scale(c, lat, names, slo_scale, slo_ref_gpu)
    given = parse_slo(slo)
    if given:
        bad = [m for m in given if m not in names]
        if bad:
            raise HetserveError(f"--slo names {', '.join(bad)}, not among --models")
        slos.update({m: v / 1e3 for m, v in given.items()})
    opts = PlanOptions(
        planner=planner,
        slo_margin=slo_margin,
        max_stages=max_stages,
        shares=tuple(int_list(shares, "shares")),
        batches=tuple(int_list(batches, "batches")),
        time_limit_s=time_limit_s,
        mip_rel_gap=mip_gap,
        cut_bytes_factor=0.5 if cut_bytes == "fp16" else 1.0,
    )
    with console.status(f"solving the {planner} MILP for {', '.join(names)} on {c.name}"):
        p = plan_models(c, lat, slos, _weights(weights, names), opts)
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    p.save(output)
    solve = p.meta["solve"]
    print_plan(
        p,
        f"{planner} plan for {c.name} (margin {slo_margin:g}, up to "
        f"{opts.max_stages if planner == 'ppipe' else 1 if planner == 'np' else 2} "
        f"stages)",
    )
    console.print(
        f"normalised throughput {p.meta['objective']['normalized_rps']:.1f} req/s; "
        f"solver {solve['status']} in {solve['seconds']:.2f} s (gap "
        f"{100 * solve['gap']:.3f}%, {solve['candidates']} candidate pipelines); "
        f"wrote {output}"
    )


def _deepplan(
    cluster: object,
    latency: object,
    names: list[str],
    kind: str,
    slo_ms: dict[str, float] | None,
    layers_csv: str | None,
    batch: int,
    pt_max: int | None,
    gpu: str | None,
    output: str,
) -> None:
    from hetserve.cli.common import progress_bar
    from hetserve.cli.views import print_load_plans
    from hetserve.planning.deepplan import plan_cold_starts

    slos = {m: v / 1e3 for m, v in (slo_ms or {}).items()}
    bad = [m for m in slos if m not in names]
    if bad:
        raise HetserveError(f"--slo names {', '.join(bad)}, not among --models")
    with progress_bar("planning cold starts", len(names)) as tick:
        p, every = plan_cold_starts(
            cluster,
            names,
            latency,
            kind,
            slos,
            batch,
            layers_csv,
            pt_max,
            gpu,
            tick,  # type: ignore[arg-type]
        )
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    p.save(output)
    solve = p.meta["solve"]
    print_load_plans(
        every,
        kind,
        f"DeepPlan load plans on {solve['gpu']} (batch {batch}; parallel transmission over "
        f"{solve['parallelism']} GPU{'s' if solve['parallelism'] != 1 else ''})",
    )
    console.print(f"wrote {output} (load plans of kind {kind})")


def _magicbatch(
    cluster_name: str,
    models: str | None,
    profiles: str | None,
    method: str,
    streams_file: str | None,
    random_n: int | None,
    seed: int,
    park_idle: bool | None,
    output: str,
) -> None:
    from rich.table import Table

    from hetserve.core.cluster import load_cluster
    from hetserve.experiments.setup import latency_source
    from hetserve.planning.magicbatch import plan_streams, random_streams, read_streams

    c = load_cluster(cluster_name)
    if (streams_file is None) == (random_n is None):
        raise HetserveError("--planner magicbatch: give --streams FILE or --random N")
    if random_n is not None:
        if not 1 <= random_n <= 100_000:
            raise HetserveError(f"--random must be 1..100000, got {random_n}")
        if not models:
            raise HetserveError("--random: give the streams' models with --models")
        lat, names = latency_source(c, csv_list(models), profiles)
        streams = random_streams(random_n, names, seed)
    else:
        assert streams_file is not None
        streams = read_streams(streams_file)
        lat, names = latency_source(c, sorted({s.model for s in streams}), profiles)
        canon = dict(zip(sorted({s.model for s in streams}), names, strict=True))
        from dataclasses import replace

        streams = [replace(s, model=canon[s.model]) for s in streams]
    if park_idle is None:
        park_idle = c.park_idle_gpus
    types = {g.name: g for g in c.gpu_types()}
    counts = c.gpu_counts()
    order = [g.name for g in sorted(types.values(), key=lambda g: (g.year, g.fp32_tflops))]
    with console.status(f"assigning {len(streams)} streams with {method}"):
        p, a, opts = plan_streams(
            method, streams, counts, types, lat, order=order, park_idle=park_idle, seed=seed
        )
    if streams_file is not None:  # a given stream no GPU type can serve is bad input
        for s in streams:
            if not any(o.feasible for o in opts[s.name].values()):
                why = "; ".join(f"{t}: {o.why}" for t, o in opts[s.name].items())
                raise HetserveError(
                    f"{streams_file}: stream {s.name} ({s.model}, {s.rate_rps:g} req/s, "
                    f"deadline {s.deadline_s * 1e3:g} ms): no GPU type of {c.name} can serve "
                    f"it ({why})"
                )
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    p.save(output)
    t = Table(title=f"MagicBatch ({method}) on {c.name}: {len(a.gpu_of)} of {len(streams)} "
                    f"streams placed")  # fmt: skip
    for col in ("stream", "model", "req/s", "deadline ms", "GPU", "batch", "latency ms",
                "J/request"):  # fmt: skip
        t.add_column(col, justify="left" if col in ("stream", "model", "GPU") else "right")
    for s in streams[:50]:
        r = p.assignments[s.name]
        t.add_row(s.name, s.model, f"{s.rate_rps:g}", f"{s.deadline_s * 1e3:g}",
                  r.gpu or f"rejected: {r.rejected}", str(r.batch or "-"),
                  f"{r.latency_s * 1e3:.1f}" if r.gpu else "-",
                  f"{r.energy_j:.3f}" if r.gpu else "-")  # fmt: skip
    console.print(t)
    if len(streams) > 50:
        console.print(f"(the first 50 of {len(streams)} streams; all are in {output})")
    o = p.meta["objective"]
    console.print(
        f"busy power {o['busy_power_w']:.1f} W; with idle GPUs "
        f"{'parked' if park_idle else 'idling'} {o['total_power_w']:.1f} W; "
        f"{o['placed']} placed, {o['rejected']} rejected; wrote {output}"
    )
