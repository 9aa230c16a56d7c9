"""``hetserve place``: RAMPA's placement of a sequence of service deployment requests, as a
plan (the ``rampa``, ``pe`` and ``ncar`` planners of ``planning.planners``)."""

from __future__ import annotations

import click

from hetserve.cli.common import console
from hetserve.cli.planviews import print_placements
from hetserve.core.errors import HetserveError


@click.command()
@click.option("--cluster", "cluster_name", required=True, help="A switched cluster (rampa-*).")
@click.option(
    "--method",
    type=click.Choice(["rampa", "pe", "ncar"]),
    default="rampa",
    show_default=True,
    help="RAMPA (stage counts searched), or PE / NCAR at the --stages counts.",
)
@click.option("--stages", default=None, help="pe, ncar: stage counts of services 1-6, 2,3,2,4,8,5.")
@click.option(
    "--case", type=click.IntRange(1, 4), default=1, show_default=True,
    help="Demand mix (Table IV): 1 same, 2 high-throughput, 3 low-delay, 4 huge-model.",
)  # fmt: skip
@click.option("--max-requests", type=click.IntRange(1, 100_000), default=500, show_default=True)
@click.option(
    "--requests",
    "requests_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="A CSV with a 'service' column (service1..service6) instead of a generated sequence.",
)
@click.option("--seed", default=0, show_default=True)
@click.option("--output", required=True, type=click.Path(dir_okay=False))
def place(
    cluster_name: str,
    method: str,
    stages: str | None,
    case: int,
    max_requests: int,
    requests_file: str | None,
    seed: int,
    output: str,
) -> None:
    """Place service deployment requests (RAMPA, TCC 2025) until the first that cannot be
    placed; prints every placement and writes the plan (what ``hetserve plan --planner
    METHOD`` writes): ``simulate --plan`` replays it, ``serve --plan`` serves it."""
    from pathlib import Path

    from hetserve.core.presets import load_cluster
    from hetserve.planning.registry import PlanRequest, make_plan

    c = load_cluster(cluster_name)
    if method == "rampa" and stages:
        raise HetserveError("--stages: only --method pe or ncar take fixed stage counts")
    if method != "rampa" and not stages:
        raise HetserveError(f"--method {method} needs --stages (stage counts of services 1-6)")
    opts = {"case": case, "max_requests": max_requests, "seed": seed}
    if stages:
        opts["stages"] = stages
    if requests_file:
        opts["requests_file"] = requests_file
    req = PlanRequest(c, [])
    with console.status(f"placing requests with {method} on {c.name}") as status:
        n = 0

        def tick() -> None:
            nonlocal n
            n += 1
            status.update(f"placed {n} requests with {method} on {c.name}")

        req.progress = tick
        res = make_plan(method, req, opts)
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    res.plan.save(output)
    d = res.details
    print_placements(d["placed"], d["net"], f"{method} on {c.name}", output)
    failed = d["failed"]
    end = (
        f"request {len(d['placed']) + 1} ({failed}) could not be placed"
        if failed
        else f"all {d['requests']} requests placed"
    )
    wall = res.plan.meta["solve"]["seconds"]
    console.print(
        f"{len(d['placed'])} placed in {wall:.1f} s; {end}; wrote the plan {output} "
        f"(simulate --plan or serve --plan it)"
    )
