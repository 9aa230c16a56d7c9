"""``hetserve serve``: real serving over HTTP (Open Inference Protocol)."""

from __future__ import annotations

import click

from hetserve.cli.common import console, csv_list
from hetserve.core.errors import HetserveError


@click.command("serve")
@click.option("--cluster", "cluster_name", default="local-cpu", show_default=True)
@click.option("--models", required=True, help="Comma-separated model names.")
@click.option("--plan", "plan_file", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--planner",
    type=click.Choice(["default", "np", "ppipe", "dart-r"]),
    default="default",
    show_default=True,
    help="Without --plan: plan at start-up (default: every model whole on every GPU).",
)
@click.option("--scheduler", default="flex", show_default=True)
@click.option("--param", "params", multiple=True, help="Scheduler parameter key=value.")
@click.option("--profiles", type=click.Path(exists=True, file_okay=False))
@click.option("--slo", help="Per-model SLOs in ms: m1=ms,m2=ms [default: 5 x batch-1 latency].")
@click.option("--emulate", is_flag=True, help="Workers sleep for the latency model's time.")
@click.option("--device", default="cpu", show_default=True, help="cpu or cuda[:N].")
@click.option(
    "--engine",
    type=click.Choice(["ray", "threads"]),
    default="ray",
    show_default=True,
    help="Real workers as Ray actors, or as threads of this process.",
)
@click.option("--address", default=None, help="Join this Ray cluster [default: start one].")
@click.option("--max-batch", default=8, show_default=True)
@click.option(
    "--cpu-threads",
    type=click.IntRange(min=0),
    default=0,
    help="Torch threads of the CPU workers together [default: cores - 1; one core is left "
    "to the HTTP front end]. Measured profiles are taken with the same threads.",
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True)
@click.option("--token", default=None, help="Require 'Authorization: Bearer TOKEN'.")
@click.option("--max-body-mb", default=64, show_default=True)
def serve(
    cluster_name: str,
    models: str,
    plan_file: str | None,
    planner: str,
    scheduler: str,
    params: tuple[str, ...],
    profiles: str | None,
    slo: str | None,
    emulate: bool,
    device: str,
    engine: str,
    address: str | None,
    max_batch: int,
    cpu_threads: int,
    host: str,
    port: int,
    token: str | None,
    max_body_mb: int,
) -> None:
    """Serve models over HTTP (KServe v2 / Open Inference Protocol) with a hetserve
    scheduler: real PyTorch workers (or --emulate), /metrics for Prometheus."""
    import uvicorn

    from hetserve.core.cluster import load_cluster
    from hetserve.experiments.setup import build_setup, parse_slo
    from hetserve.profiling.cache import default_cpu_threads, measured_profiles
    from hetserve.runtime.http import create_app
    from hetserve.runtime.server import Server, ServerConfig
    from hetserve.scheduling.protocol import parse_params

    names = csv_list(models)
    if not names:
        raise HetserveError("--models: give at least one model name")
    cluster = load_cluster(cluster_name)
    if profiles is None and not emulate and cluster.name == "local-cpu":
        profiles = str(
            measured_profiles(names, device, [1, 2, 4, 8], 10, cpu_threads, say=console.print)
        )
    plan = plan_file
    if plan is None and planner != "default":
        from hetserve.core.plan import slos_from_scale
        from hetserve.experiments.setup import latency_source
        from hetserve.planning.ppipe import PlanOptions, plan_models

        lat, names = latency_source(cluster, names, profiles, 10)
        slos = slos_from_scale(cluster, lat, names, 5.0)
        slos.update({m: v / 1e3 for m, v in (parse_slo(slo) or {}).items()})
        plan = plan_models(cluster, lat, slos, None, PlanOptions(planner=planner))
    setup = build_setup(
        cluster, names, profiles=profiles, slo_ms=parse_slo(slo) or None, plan=plan,
        max_batch=max_batch,
    )  # fmt: skip
    sp = parse_params(params)
    if scheduler in ("flex", "flex-np", "clockwork", "nexus"):
        sp.setdefault("max_batch", max_batch)  # (their default, 128, exceeds the profiles)
    if scheduler in ("edf-adaptive", "reservation"):
        sp.setdefault("margin_s", 0.01)  # timers on the wall clock fire late (1-4 ms here)
    build = None
    if not emulate:
        from hetserve.zoo.registry import build
    server = Server(
        setup,
        ServerConfig(
            scheduler=scheduler, params=sp, emulate=emulate, build=build, engine=engine,
            ray_address=address, cpu_threads=cpu_threads or default_cpu_threads(),
        ),
    )  # fmt: skip
    server.check()
    app = create_app(server, token=token, max_body_bytes=max_body_mb << 20)
    console.print(
        f"serving {', '.join(setup.models)} on {cluster.name} with {scheduler}"
        f"{' (emulated workers)' if emulate else ''} at http://{host}:{port}/v2"
    )
    uvicorn.run(app, host=host, port=port, log_level="warning")
