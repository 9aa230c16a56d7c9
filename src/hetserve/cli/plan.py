"""``hetserve plan`` (registered on the main CLI group)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from hetserve.cli.common import console, csv_list, int_list, model_catalog, progress_bar
from hetserve.cli.planviews import print_plan_result
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
    default="ppipe",
    show_default=True,
    help="A registered planner: ppipe, np, dart-r (PPipe), herd (Shepherd), deepplan, "
    "magicbatch, rampa, pe, ncar (RAMPA); docs/planning.md.",
)
@click.option(
    "--rate",
    "rate_rps",
    type=float,
    default=None,
    help="herd: the offered load; ppipe, np, dart-r with --objective cost or energy: the rate "
    "to serve (req/s over all models, split by --weights).",
)
@click.option(
    "--objective",
    type=click.Choice(["throughput", "cost", "energy"]),
    default="throughput",
    show_default=True,
    help="ppipe, np, dart-r: the most normalised throughput on every GPU (PPipe), the "
    "cheapest GPUs that serve --rate x (1 + --headroom) (prices per GPU type from the "
    "catalog or the cluster file's pricing, caps from it), or the least power that serves "
    "it (idle power of the GPUs taken plus each request's energy; docs/control.md).",
)
@click.option(
    "--headroom",
    type=float,
    default=0.25,
    show_default=True,
    help="ppipe, np, dart-r with --objective cost or energy: plan for this much more than --rate.",
)
@click.option("--g-max", type=int, default=12, show_default=True, help="herd: largest group.")
@click.option("--max-batch", type=int, default=128, show_default=True, help="herd: largest batch.")
@click.option(
    "--stages", default=None, help="pe, ncar: stage counts of services 1-6, e.g. 2,3,2,4,8,5."
)
@click.option(
    "--case", type=int, default=1, show_default=True,
    help="rampa, pe, ncar: demand mix (Table IV): 1 same, 2 high-throughput, 3 low-delay, "
    "4 huge-model.",
)  # fmt: skip
@click.option(
    "--max-requests", type=int, default=500, show_default=True,
    help="rampa, pe, ncar: requests in the generated sequence.",
)  # fmt: skip
@click.option(
    "--requests",
    "requests_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="rampa, pe, ncar: a CSV with a 'service' column instead of a generated sequence.",
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
@click.option(
    "--seed", default=0, show_default=True,
    help="magicbatch: random streams, PSO-GA; rampa, pe, ncar: the sequence, the colony.",
)  # fmt: skip
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
@click.option(
    "--gpu", default=None, help="deepplan, herd: the GPU type (default: the cluster's only)."
)
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
def plan(cluster_name: str, models: str | None, profiles: str | None, estimate: bool,
         weights: str | None, slo: str | None, n_blocks: int, output: str,
         planner: str, **options: Any) -> None:  # fmt: skip
    """Plan with a registered planner: pooled pipelines (ppipe; np and dart-r baselines),
    serving groups (herd), cold-start load plans (deepplan), energy-saving stream
    assignments (magicbatch), or placements in a switched cluster (rampa; pe and ncar). The
    plan names the scheduler that serves it by default."""
    from hetserve.core.presets import load_cluster
    from hetserve.engine.setup import latency_source
    from hetserve.experiments.setup import parse_slo
    from hetserve.planning.registry import PlanRequest, get_planner, make_plan, option_owners

    if profiles and estimate:
        raise HetserveError("give --profiles DIR or --estimate, not both")
    spec = get_planner(planner)
    ctx = click.get_current_context()
    owners = option_owners()
    given = {
        n: v for n, v in options.items()
        if ctx.get_parameter_source(n) not in (None, click.core.ParameterSource.DEFAULT)
    }  # fmt: skip
    for n in given:
        key = n
        if key in owners and key not in spec.options:
            flag = "--" + _FLAG.get(n, n.replace("_", "-"))
            raise HetserveError(f"{flag}: options of --planner {', '.join(owners[key])} only")
    opts = {}
    for n, v in options.items():
        key = n
        if key not in spec.options or (n not in given and v is None):
            continue
        if n in ("shares", "batches"):
            v = tuple(int_list(v, n))
        opts[key] = v
    c = load_cluster(cluster_name)
    names = csv_list(models) if models else []
    if not names and planner not in ("magicbatch", "rampa", "pe", "ncar"):
        raise HetserveError("--models: give at least one model name")
    catalog = model_catalog()
    req = PlanRequest(
        c, names, parse_slo(slo), _weights(weights, names),
        lambda: latency_source(c, req.models, profiles, n_blocks, catalog),
        model_catalog=catalog,
    )  # fmt: skip
    with progress_bar(f"planning with {planner} on {c.name}", None) as tick:
        req.progress = tick  # type: ignore[assignment]
        res = make_plan(planner, req, opts)
    p = res.plan
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    p.save(output)
    print_plan_result(res, c, output)
    sched = p.scheduler
    if sched is not None:
        console.print(f"served by default with the {sched.name} scheduler; wrote {output}")


# command-line parameter -> its flag, where the flag is not the name with dashes
_FLAG = {"layers_csv": "layers", "streams_file": "streams", "random_n": "random",
         "requests_file": "requests", "time_limit_s": "time-limit", "mip_gap": "gap",
         "rate_rps": "rate"}  # fmt: skip
