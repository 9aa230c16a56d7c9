"""``hetserve serve``: real serving over HTTP (Open Inference Protocol).

Every option can also come from a YAML file (``--config serve.yaml``): its keys are the
option names (``max-batch`` or ``max_batch``), its values what the option takes (a list
for ``param``); options given on the command line win. The file is checked like the
options: an unknown key or a bad value is a one-line error naming the file and the key.

SIGTERM and SIGINT stop the server gracefully: new requests get 503 while the requests in
flight are answered (up to ``--drain-timeout``), then the workers are released and the
process exits with status 0.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import signal
import socket
import sys
from typing import Any

import click

from hetserve.cli.common import console, csv_list, model_catalog, repository
from hetserve.cli.serveviews import print_shutdown, print_summary
from hetserve.core.errors import HetserveError

LOG_LEVELS = ("debug", "info", "warning", "error")


def _load_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """``--config FILE``: the file's settings become the options' defaults."""
    if not value:
        return
    from hetserve.core.files import read_yaml

    data = read_yaml(value, "serve configuration")
    if data is None:
        return
    if not isinstance(data, dict):
        raise HetserveError(f"{value}: expected a mapping of serve options (key: value)")
    by_key: dict[str, click.Parameter] = {}
    for p in ctx.command.params:
        if isinstance(p, click.Option) and p.name != "config":
            for opt in p.opts:
                if opt.startswith("--"):
                    by_key[opt[2:].replace("-", "_")] = p
    defaults: dict[str, Any] = {}
    for key, v in data.items():
        p = by_key.get(str(key).replace("-", "_"))
        if p is None:
            raise HetserveError(
                f"{value}: unknown setting {key!r}; settings are the options of hetserve "
                f"serve: {', '.join(sorted(by_key))}"
            )
        if isinstance(v, (dict, list)) and not (p.multiple and isinstance(v, list)):
            raise HetserveError(f"{value}: {key}: expected a single value, got {v!r}")
        try:
            p.type_cast_value(ctx, v if not p.multiple or isinstance(v, list) else [v])
        except click.BadParameter as e:
            raise HetserveError(f"{value}: {key}: {e.message}") from None
        assert p.name is not None
        defaults[p.name] = v
    ctx.default_map = {**(ctx.default_map or {}), **defaults}


def _check_host(host: str) -> str:
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    try:
        socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        raise HetserveError(
            f"--host {host!r}: not an IP address or a host name this machine resolves"
        ) from None
    return host


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket (bound here, so that a taken port or a bad host is a one-line
    error before anything starts; port 0 takes any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise HetserveError(f"--host {host} --port {port}: cannot listen: {e.strerror}") from None
    sock.set_inheritable(True)
    return sock


def _token(token: str | None, token_file: str | None) -> str | None:
    if token is not None and token_file is not None:
        raise HetserveError("give --token (or HETSERVE_TOKEN) or --token-file, not both")
    if token_file is not None:
        from hetserve.core.files import read_text

        token = read_text(token_file, "token file").strip()
        if not token:
            raise HetserveError(f"{token_file}: the token file is empty")
    if token is not None and (not token.strip() or any(c.isspace() for c in token.strip())):
        raise HetserveError("--token: expected a non-empty token without spaces")
    return None if token is None else token.strip()


def _renamed_device(_ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    """``--device``, the old name of ``--profile-device``: refused, saying so."""
    if value is not None:
        raise HetserveError(
            "--device was renamed --profile-device: it only chose where the start-up profile "
            "measurement runs; workers run on their planned GPU's device"
        )


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler on whatever ``sys.stderr`` is when a record comes (a command run in
    process, as tests do, must not leave a handler on a stream closed after it)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def _setup_logging(level: str, access_log: bool) -> None:
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handler = _Stderr(sys.stderr)
    handler.setFormatter(fmt)
    root = logging.getLogger("hetserve")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
    access = logging.getLogger("hetserve.access")
    access.setLevel(logging.INFO if access_log else logging.WARNING)


@click.command("serve")
@click.option(
    "--config",
    type=click.Path(dir_okay=False),
    is_eager=True,
    expose_value=False,
    callback=_load_config,
    help="YAML file of serve options (keys: option names); command-line options win.",
)
@click.option(
    "--cluster", "cluster_name", default=None,
    help="Cluster preset name or cluster YAML file [default: local-cpu; with --address the "
    "cluster discovered there, and a given file must agree with it].",
)  # fmt: skip
@click.option(
    "--models",
    default=None,
    help="Comma-separated model names (required without --plan) [default: the plan's].",
)
@click.option(
    "--plan", "plan_file", type=click.Path(exists=True, dir_okay=False),
    help="A plan JSON (hetserve plan --output) to serve instead of planning at start-up.",
)  # fmt: skip
@click.option(
    "--planner",
    default="default",
    show_default=True,
    help="Without --plan: plan at start-up with a registered planner that needs only the "
    "models (ppipe, np, dart-r, deepplan; default: every model whole on every GPU).",
)
@click.option(
    "--scheduler",
    default=None,
    help="Scheduler name [default: the plan's scheduler; without a plan flex].",
)
@click.option(
    "--param", "params", multiple=True,
    help="Scheduler parameter key=value (repeatable), e.g. max_batch=4.",
)  # fmt: skip
@click.option(
    "--profiles", type=click.Path(exists=True, file_okay=False),
    help="Profile-set folder [default on local-cpu: this machine's, measured once and cached].",
)  # fmt: skip
@click.option(
    "--remeasure", is_flag=True,
    help="Measure this machine's profiles again instead of reusing the cached ones.",
)  # fmt: skip
@click.option("--slo", help="Per-model SLOs in ms: m1=ms,m2=ms [default: 5 x batch-1 latency].")
@click.option(
    "--emulate", is_flag=True,
    help="Workers sleep for the latency model's time (threads of this process; with "
    "--address, Ray actors placed on the cluster's nodes).",
)  # fmt: skip
@click.option(
    "--profile-device",
    default="cpu",
    show_default=True,
    help="cpu or cuda[:N]: the device of the start-up measurement of this machine's "
    "profiles (made on local-cpu when --profiles and --emulate are not given). Workers run "
    "on the device of their planned GPU.",
)
@click.option(
    "--device", hidden=True, expose_value=False, callback=_renamed_device,
    help="The old name of --profile-device: refused with a one-line error saying so.",
)  # fmt: skip
@click.option(
    "--engine",
    type=click.Choice(["ray", "threads"]),
    default="ray",
    show_default=True,
    help="Real workers as Ray actors, or as threads of this process (GPU workers on this "
    "machine's GPUs, cuda:<index> of the cluster file; all on one node).",
)
@click.option(
    "--address", default=None,
    help="Join this Ray cluster (HOST:PORT of its head): its GPUs are discovered, the plan "
    "checked against them, every worker placed on a GPU of its planned type [default: "
    "start a local Ray].",
)  # fmt: skip
@click.option(
    "--runtime-env", "runtime_env_file", type=click.Path(dir_okay=False), default=None,
    help="YAML or JSON file of Ray's runtime_env for the workers (pip, py_modules, env_vars: "
    "for nodes without hetserve; docs/deployment.md).",
)  # fmt: skip
@click.option(
    "--max-batch", type=click.IntRange(1, 1024), default=8, show_default=True,
    help="Largest batch a worker runs (the plan's and the scheduler's).",
)  # fmt: skip
@click.option(
    "--max-request-batch", type=click.IntRange(1, 4096), default=64, show_default=True,
    help="Rows one infer request may carry (its batch dimension): the model's max_batch_size.",
)  # fmt: skip
@click.option(
    "--max-pending", type=click.IntRange(1, 10_000_000), default=10_000, show_default=True,
    help="Requests held at once; more get 429.",
)  # fmt: skip
@click.option(
    "--admission/--no-admission", default=True, show_default=True,
    help="Refuse (503 at once) a request whose deadline even the best case misses.",
)  # fmt: skip
@click.option(
    "--cpu-threads",
    type=click.IntRange(min=0),
    default=0,
    help="Torch threads of the CPU workers together [default: cores - 1; one core is left "
    "to the HTTP front end]. Measured profiles are taken with the same threads.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
    help="Port to listen on (0: any free port, printed at start-up).",
)  # fmt: skip
@click.option(
    "--token", default=None, envvar="HETSERVE_TOKEN", show_envvar=True,
    help="Require 'Authorization: Bearer TOKEN' (prefer the environment variable or "
    "--token-file: argv is visible to ps).",
)  # fmt: skip
@click.option(
    "--token-file", type=click.Path(dir_okay=False), default=None,
    help="Read the bearer token from this file.",
)  # fmt: skip
@click.option(
    "--public-health/--private-health", default=True, show_default=True,
    help="Health probes answer without the token.",
)  # fmt: skip
@click.option(
    "--public-metrics/--private-metrics", default=False, show_default=True,
    help="/metrics answers without the token.",
)  # fmt: skip
@click.option(
    "--max-body-mb", type=click.FloatRange(0, 4096, min_open=True), default=64,
    show_default=True, help="Largest request body in MiB; larger ones get 413.",
)  # fmt: skip
@click.option(
    "--drain-timeout", type=click.FloatRange(0, 3600), default=30.0, show_default=True,
    help="Seconds a shutdown waits for the requests in flight.",
)  # fmt: skip
@click.option(
    "--log-level", type=click.Choice(LOG_LEVELS), default="info", show_default=True,
    help="Level of the server's log (stderr).",
)  # fmt: skip
@click.option(
    "--access-log/--no-access-log", default=True, show_default=True,
    help="One log line per HTTP request (client, method, path, status, milliseconds).",
)  # fmt: skip
@click.option(
    "--replan", default="off", show_default=True,
    help="Re-plan as the load moves and switch plans live: auto, every=SECONDS, manual (only "
    "an operator's plans, loads and unloads: POST /v2/control/plan, /v2/repository/models/M/"
    "load|unload) or off (docs/control.md). Needs a plan of ppipe, np or dart-r to re-plan.",
)  # fmt: skip
@click.option(
    "--switch", "switch_mode", type=click.Choice(["mbb", "flush"]), default="mbb",
    show_default=True,
    help="How a plan is switched: make-before-break (the old plan serves while the new "
    "one loads) or flush (PPipe's: pause, drain, switch).",
)  # fmt: skip
@click.option(
    "--max-moving", type=click.IntRange(min=1), default=4, show_default=True,
    help="Workers loading at once in a switch.",
)  # fmt: skip
@click.option(
    "--objective", type=click.Choice(["throughput", "cost", "energy"]), default="throughput",
    show_default=True,
    help="What a re-plan optimises: the most capacity on every usable GPU, the cheapest "
    "GPUs that carry the observed rates (the catalog's prices, or the cluster file's), or "
    "the least power that carries them.",
)  # fmt: skip
@click.option(
    "--check", "check_only", is_flag=True,
    help="Check the configuration, the plan and the port, print the summary and exit "
    "(nothing is served).",
)  # fmt: skip
def serve(
    cluster_name: str | None,
    models: str | None,
    plan_file: str | None,
    planner: str,
    scheduler: str | None,
    params: tuple[str, ...],
    profiles: str | None,
    remeasure: bool,
    slo: str | None,
    emulate: bool,
    profile_device: str,
    engine: str,
    address: str | None,
    runtime_env_file: str | None,
    max_batch: int,
    max_request_batch: int,
    max_pending: int,
    admission: bool,
    cpu_threads: int,
    host: str,
    port: int,
    token: str | None,
    token_file: str | None,
    public_health: bool,
    public_metrics: bool,
    max_body_mb: float,
    drain_timeout: float,
    log_level: str,
    access_log: bool,
    replan: str,
    switch_mode: str,
    max_moving: int,
    objective: str,
    check_only: bool,
) -> None:
    """Serve models over HTTP (KServe v2 / Open Inference Protocol) with a hetserve
    scheduler: real PyTorch workers (or --emulate), /metrics for Prometheus. SIGTERM or
    SIGINT: drain (503 to new requests, answer those in flight), release workers, exit 0."""
    import uvicorn

    from hetserve.core.presets import load_cluster
    from hetserve.experiments.setup import parse_slo
    from hetserve.runtime.http import HttpConfig, create_app

    names = csv_list(models) if models else []
    if not names and plan_file is None:
        raise HetserveError("--models: give at least one model name (or a --plan)")
    secret = _token(token, token_file)
    _check_host(host)
    if not re.fullmatch(r"cpu|cuda(:\d+)?", profile_device):
        raise HetserveError(f"--profile-device: expected cpu or cuda[:N], got {profile_device!r}")
    slo_ms = parse_slo(slo)
    if plan_file is not None and not names:
        from hetserve.core.plan import Plan

        names = list(Plan.load(plan_file).models)
    from hetserve.cli.joined import discovered_cluster, runtime_env_of

    runtime_env = runtime_env_of(runtime_env_file)
    found = None
    if address is not None:
        if engine != "ray":
            raise HetserveError("--address joins a Ray cluster: it needs --engine ray")
        cluster, found = discovered_cluster(address, cluster_name, plan_file, runtime_env)
    else:
        cluster = load_cluster(cluster_name or "local-cpu")
    if emulate and address is None:
        engine = "emulated"
    names, versions = _repository_versions(names, plan_file)
    from hetserve.experiments.assemble import ServeOptions, assemble_server
    from hetserve.scheduling.params import parse_params

    built = assemble_server(
        ServeOptions(
            cluster=cluster, models=names, plan=plan_file, planner=planner, profiles=profiles,
            slo_ms=slo_ms, max_batch=max_batch, scheduler=scheduler,
            params=parse_params(params), emulate=emulate,
            engine="threads" if engine == "emulated" else engine, address=address,
            found=found, runtime_env=runtime_env, cpu_threads=cpu_threads,
            max_pending=max_pending, admission=admission, max_request_batch=max_request_batch,
            drain_timeout_s=drain_timeout, profile_device=profile_device, remeasure=remeasure,
            versions=versions, model_catalog=model_catalog(), replan=replan,
            switch=switch_mode, max_moving=max_moving, objective=objective,
        ),
        say=console.print,
    )  # fmt: skip
    server, setup, scheduler = built.server, built.setup, built.scheduler
    _setup_logging(log_level, access_log)
    http_cfg = HttpConfig(
        token=secret, max_body_bytes=int(max_body_mb * (1 << 20)),
        public_health=public_health, public_metrics=public_metrics, access_log=access_log,
    )  # fmt: skip
    app = create_app(server, config=http_cfg)
    sock = _listen(host, port)
    bound = sock.getsockname()[1]
    print_summary(server, setup, scheduler, engine, host, bound, http_cfg)
    if check_only:
        sock.close()
        console.print("hetserve: configuration checked (--check): not serving")
        return
    config = uvicorn.Config(
        app, log_level=log_level if log_level != "info" else "warning", access_log=False,
        timeout_graceful_shutdown=drain_timeout,
    )  # fmt: skip
    userver = _DrainingServer(config, server)
    # uvicorn puts back the handlers it found and raises the signal again once stopped:
    # handlers that do nothing make that a clean exit (status 0) instead of a kill
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    userver.run(sockets=[sock])
    print_shutdown(server, userver.stop_signal)


class _DrainingServer:
    """uvicorn's server, with the hetserve server told to drain as soon as a signal comes
    (new requests on open connections get 503 while those in flight are answered)."""

    def __init__(self, config: Any, server: Any) -> None:
        import uvicorn

        hs = server
        outer = self

        class _Server(uvicorn.Server):
            def handle_exit(self, sig: int, frame: Any) -> None:
                hs.draining = True
                if outer.stop_signal is None:
                    outer.stop_signal = signal.Signals(sig).name
                    console.print(
                        f"hetserve: {outer.stop_signal}: draining {hs.in_flight} requests in "
                        f"flight (new requests get 503)",
                        markup=False,
                    )
                super().handle_exit(sig, frame)

        self.stop_signal: str | None = None
        self.server = _Server(config)

    def run(self, sockets: list[socket.socket]) -> None:
        self.server.run(sockets=sockets)


def _repository_versions(names: list[str], plan_file: str | None) -> tuple[list[str], Any]:
    """The served versions of the repository models among ``names``; a model that cannot
    load is left out (UNAVAILABLE in the repository index, with the reason) and the others
    serve; with a --plan, or when none is left, it is an error."""
    from hetserve.runtime.versions import VersionTable

    repo = repository()
    if repo is None:
        return names, VersionTable()
    states, broken = repo.serving(names)
    for m, (_, why) in broken.items():
        if plan_file is not None or len(broken) == len(names):
            raise HetserveError(why)
        console.print(f"hetserve: model {m} is UNAVAILABLE (the others serve): {why}",
                      markup=False)  # fmt: skip
    for m, vs in states.items():
        for v in vs:
            if v.state != "READY" and "version policy" not in v.reason:
                console.print(f"  {m} version {v.version}: UNAVAILABLE: {v.reason}", markup=False)
    return [n for n in names if n not in broken], VersionTable.of_states(states, broken)
