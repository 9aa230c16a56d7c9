"""A serving instance assembled from typed options, below the command line: ``hetserve
serve`` parses its flags into :class:`ServeOptions` and calls :func:`assemble_server`;
a controller (or a test, a benchmark) builds the same server in process.

Assembly: the models' latency source (a profile set; on ``local-cpu`` without one, the
start-up measurement, cached), the plan (a plan file, a named planner, or the default
plan), the ``Setup`` (``engine.setup.build_setup``), the scheduler and its parameters
(the plan's unless named; on the wall clock with ``runtime.serverconfig.wall_clock_params``),
the model builder for real workers, and the :class:`~hetserve.runtime.server.Server`
with its configuration, checked (``Server.check``). What is printed goes through ``say``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetserve.core.cluster import Cluster
from hetserve.core.errors import HetserveError
from hetserve.core.models import ZOO, ModelCatalog
from hetserve.core.plan import Plan, bind
from hetserve.engine.setup import Setup, build_setup, latency_source
from hetserve.experiments.setup import control_spec, planned_rates
from hetserve.runtime.served import check_served
from hetserve.runtime.server import Server
from hetserve.runtime.serverconfig import ServerConfig, wall_clock_params
from hetserve.runtime.versions import VersionTable


@dataclass(frozen=True)
class ServeOptions:
    """What a server is made from (``hetserve serve``'s options, parsed)."""

    cluster: Cluster
    models: Sequence[str]
    plan: str | Path | Plan | None = None  # a plan file or object (None: plan here)
    planner: str = "default"  # without a plan: a registered planner, or the default plan
    profiles: str | None = None  # a profile set (None: measured on local-cpu, else roofline)
    slo_ms: Mapping[str, float] | None = None
    max_batch: int = 8
    scheduler: str | None = None  # None: the plan's, else ``flex``
    params: Mapping[str, Any] = field(default_factory=dict)  # on top of the plan's
    emulate: bool = False
    engine: str = "threads"  # threads | ray
    address: str | None = None  # a Ray cluster to join
    found: Any = None  # what discovery found there (``runtime.discovery``)
    runtime_env: dict[str, Any] | None = None
    cpu_threads: int = 0  # 0: the profiling cache's default
    max_pending: int = 10_000
    admission: bool = True
    max_request_batch: int = 64
    drain_timeout_s: float = 30.0
    profile_device: str = "cpu"
    remeasure: bool = False
    versions: VersionTable = field(default_factory=VersionTable)
    model_catalog: ModelCatalog = ZOO  # the zoo, and ``--model-repository``'s models
    replan: str = "off"  # off | manual | auto | every=SECONDS (``docs/control.md``)
    switch: str = "mbb"  # how plans switch: mbb | flush
    max_moving: int = 4  # workers loading at once in a switch
    objective: str = "throughput"  # what a re-plan optimises: throughput | cost


@dataclass
class Assembled:
    server: Server
    setup: Setup
    scheduler: str
    params: dict[str, Any]


def assemble_server(o: ServeOptions, say: Callable[[str], None] = print) -> Assembled:
    """The server of ``o`` (module docstring), checked, not started."""
    from hetserve.profiling.cache import default_cpu_threads, measured_profiles

    names = list(o.models)
    if not names:
        raise HetserveError("--models: give at least one model name (or a --plan)")
    profiles = o.profiles
    if profiles is None and not o.emulate and o.cluster.name == "local-cpu":
        folder = measured_profiles(
            names,
            o.profile_device,
            [1, 2, 4, 8],
            10,
            o.cpu_threads,
            o.remeasure,
            say=say,
            model_catalog=o.model_catalog,
        )
        profiles = str(folder)
    plan = o.plan
    if plan is None and o.planner != "default":
        from hetserve.planning.registry import PlanRequest, make_plan

        cluster = o.cluster
        req = PlanRequest(
            cluster, names, dict(o.slo_ms or {}) or None, None,
            lambda: latency_source(cluster, names, profiles, 10, o.model_catalog),
            model_catalog=o.model_catalog,
        )  # fmt: skip
        plan = make_plan(o.planner, req, {}).plan
        names = list(plan.models)
        check_served(plan, bind(plan, o.cluster), names)
    setup = build_setup(
        o.cluster, names, profiles=profiles, slo_ms=o.slo_ms, plan=plan,
        max_batch=o.max_batch, model_catalog=o.model_catalog,
    )  # fmt: skip
    scheduler, params = plan_scheduler(setup.plan, o.scheduler, o.params, "flex")
    params = wall_clock_params(scheduler, params, o.max_batch)
    build = leaf_rows = host_alias = None
    if not o.emulate:
        from hetserve.profiling.layers import host_alias, leaf_rows
        from hetserve.zoo.registry import builder

        build = builder(o.model_catalog)
    engine = "threads" if o.emulate and o.address is None else o.engine
    # re-planning: the first plan is taken as made for its models' mix at its capacity
    off = o.replan.strip().lower() == "off"
    control = control_spec(
        setup, o.replan, o.switch, o.max_moving, {} if off else planned_rates(setup.plan),
        objective=o.objective, solve_s=None, serving=True,
    )  # fmt: skip
    server = Server(
        setup,
        ServerConfig(
            scheduler=scheduler, params=params, emulate=o.emulate, build=build,
            leaf_rows=leaf_rows, host_alias=host_alias, engine=engine, ray_address=o.address,
            found=o.found, runtime_env=o.runtime_env,
            cpu_threads=o.cpu_threads or default_cpu_threads(), max_pending=o.max_pending,
            admission=o.admission, max_request_batch=o.max_request_batch,
            drain_timeout_s=o.drain_timeout_s, versions=o.versions, replan=o.replan,
        ),
        control,
    )  # fmt: skip
    server.check()
    return Assembled(server, setup, scheduler, params)


def plan_scheduler(
    plan: Plan, scheduler: str | None, params: Mapping[str, Any], fallback: str
) -> tuple[str, dict[str, Any]]:
    """The scheduler and its parameters: ``scheduler`` if given, else the one the plan
    names (with its parameters), else ``fallback``; ``params`` on top."""
    choice = plan.scheduler
    if scheduler is None and choice is not None:
        return choice.name, {**choice.params, **params}
    return scheduler or fallback, dict(params)
