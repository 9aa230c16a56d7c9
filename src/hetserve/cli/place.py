"""``hetserve place``: RAMPA's placement of a sequence of service deployment requests."""

from __future__ import annotations

import time

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
@click.option(
    "--serve",
    "serve_s",
    type=float,
    default=None,
    help="Then serve the placements in the simulator for this many seconds (at the required "
    "throughputs) and print measured throughput and latency beside the estimates.",
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
    serve_s: float | None,
    seed: int,
    output: str,
) -> None:
    """Place service deployment requests (RAMPA, TCC 2025) until the first that cannot be
    placed; prints every placement, writes them as JSON."""
    from hetserve.core.cluster import load_cluster
    from hetserve.planning.rampa.aco import AcoParams, min_stages, stage_counts
    from hetserve.planning.rampa.network import RampaNet
    from hetserve.planning.rampa.place import (
        CASES,
        place_sequence,
        read_requests,
        request_sequence,
        table_v_services,
        write_placements,
    )
    from hetserve.planning.rampa.state import ClusterState

    services = table_v_services()
    if serve_s is not None and not 0 < serve_s <= 86_400:
        raise HetserveError(f"--serve: expected seconds in (0, 86400], got {serve_s}")
    if method == "rampa" and stages:
        raise HetserveError("--stages: only --method pe or ncar take fixed stage counts")
    counts = stage_counts(stages, list(services)) if stages else None
    if counts is not None:
        for name, k in counts.items():
            if k > len(services[name].ops):
                raise HetserveError(
                    f"--stages: {name} ({services[name].model}) has {len(services[name].ops)} "
                    f"operations, fewer than {k} stages"
                )
    c = load_cluster(cluster_name)
    net = RampaNet.of(c)
    reqs = (
        read_requests(requests_file, list(services))
        if requests_file
        else request_sequence(case, max_requests, seed)
    )
    state = ClusterState.of(net)
    total_gb = sum(g.memory_gb for g in net.gpus.values())
    for name in sorted(set(reqs)):
        if min_stages(state, services[name]) > len(net.gpus):
            need = sum(op.memory_bytes for op in services[name].ops) / 1e9
            raise HetserveError(
                f"{name} ({services[name].model}) needs {need:.1f} GB, more than all "
                f"{len(net.gpus)} GPUs of {c.name} hold ({total_gb:.0f} GB)"
            )
    t0 = time.perf_counter()
    with console.status(f"placing up to {len(reqs)} requests with {method}") as status:

        def tick(i: int, p: object) -> None:
            status.update(f"placing request {i + 1} of {len(reqs)} with {method}")

        placed, failed = place_sequence(
            state, reqs, method, counts, AcoParams(seed=seed), on_placed=tick
        )
    wall = time.perf_counter() - t0
    served = None
    if serve_s is not None:
        from hetserve.experiments.rampa.validate import serve_placements

        with console.status(f"serving {len(placed)} services for {serve_s:g} s (simulated)"):
            served = serve_placements(placed, c, serve_s, seed)
    meta = {"method": method, "case": requests_file or CASES[case],
            "seed": seed, "stages": counts, "seconds": wall}  # fmt: skip
    write_placements(output, c.name, placed, failed, meta, served)
    print_placements(placed, net, f"{method} on {c.name}", output)
    end = (
        f"request {len(placed) + 1} ({failed}) could not be placed"
        if failed
        else f"all {len(reqs)} requests placed"
    )
    if served is not None:
        bad = [r for r in served if r["met"] < r["requests"]]
        worst = max((r["measured_latency_ms"] / r["estimated_latency_ms"] for r in served
                     if r["measured_latency_ms"] is not None), default=0.0)  # fmt: skip
        console.print(
            f"served {serve_s:g} s in the simulator: {len(served) - len(bad)} of "
            f"{len(served)} services met every deadline at their required throughput; "
            f"measured latency at most {worst:.2f}x the estimate"
            + (f"; missed: {', '.join(r['model'] for r in bad[:5])}" if bad else "")
        )
    console.print(f"{len(placed)} placed in {wall:.1f} s; {end}; wrote {output}")
