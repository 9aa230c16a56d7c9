"""``hetserve bench URL``: load a KServe v2 server and report SLO attainment (docs/bench.md;
the pieces are ``hetserve.experiments.bench``)."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from hetserve.cli.common import console, csv_list
from hetserve.core.errors import HetserveError

MAX_REQUESTS = 1_000_000  # the most one run sends: bounded in count as well as in time


def _per_model(text: str | None, what: str, models: list[str]) -> dict[str, float] | None:
    """``X`` (the total, split evenly over the models) or ``m1=X,m2=Y`` (each model's)."""
    if not text:
        return None
    if "=" not in text:
        try:
            v = float(text)
        except ValueError:
            raise HetserveError(
                f"--{what}: expected a number or model=number,...; got {text!r}"
            ) from None
        if not 0 < v < math.inf:
            raise HetserveError(f"--{what}: expected a finite number > 0, got {text!r}")
        return {m: v / len(models) for m in models}
    out = {}
    for item in text.split(","):
        m, _, v = item.partition("=")
        m = m.strip()
        try:
            out[m] = float(v)
        except ValueError:
            raise HetserveError(f"--{what}: expected model=number, got {item!r}") from None
        if not 0 < out[m] < math.inf:
            raise HetserveError(f"--{what}: expected a finite number > 0, got {item!r}")
    unknown = sorted(set(out) - set(models))
    missing = sorted(set(models) - set(out))
    if unknown or missing:
        raise HetserveError(
            f"--{what}: give every model of --models once"
            + (f"; not in --models: {', '.join(unknown)}" if unknown else "")
            + (f"; missing: {', '.join(missing)}" if missing else "")
        )
    return out


def _dims(items: tuple[str, ...], models: list[str]) -> dict[str, dict[str, list[int]]]:
    """``--shape MODEL.INPUT=d1,d2``: the shape (without the batch) of a variable input."""
    out: dict[str, dict[str, list[int]]] = {}
    for item in items:
        key, eq, dims = item.partition("=")
        model, dot, name = key.partition(".")
        try:
            shape = [int(d) for d in dims.split(",")]
        except ValueError:
            shape = []
        if not eq or not dot or model not in models or not shape or min(shape) < 1:
            raise HetserveError(
                f"--shape: expected MODEL.INPUT=d1,d2,... (a model of --models, sizes >= 1), "
                f"got {item!r}"
            )
        out.setdefault(model, {})[name] = shape
    return out


@click.command()
@click.argument("url")
@click.option("--models", required=True, help="Comma-separated model names the server serves.")
@click.option(
    "--rate", default=None,
    help="Offered requests/s: a total split evenly over the models, or m1=r1,m2=r2 "
    "(open loop; required without --concurrency).",
)  # fmt: skip
@click.option(
    "--slo", default=None,
    help="Per-model SLOs in ms: m1=ms,m2=ms [default: the server's, where its model "
    "configuration says (hetserve's parameters.slo_ms)].",
)  # fmt: skip
@click.option(
    "--workload", default="poisson", show_default=True,
    help="An arrival process without its rate (poisson, gamma:cv=4, mmpp:ratio=10, constant, "
    "onoff:on_s=1,off_s=1) or a trace (csv:FILE, azure2019:FILE, azure2021:FILE, synthetic): "
    "the grammar of simulate (docs/workloads.md).",
)  # fmt: skip
@click.option("--duration", "duration_s", default=30.0, show_default=True,
              help="Seconds of arrivals (closed loop: of sending).")  # fmt: skip
@click.option("--seed", default=0, show_default=True, help="Arrivals' and inputs' seed.")
@click.option(
    "--concurrency", default=None, type=click.IntRange(1, 4096),
    help="Closed loop instead: this many clients per model, each sending again when answered "
    "(for comparison; its latencies leave out queueing an open loop would see).",
)  # fmt: skip
@click.option(
    "--encoding", type=click.Choice(["binary", "json"]), default="binary", show_default=True,
    help="Tensors as the binary tensor extension or as JSON.",
)  # fmt: skip
@click.option(
    "--inputs", "inputs_path", type=click.Path(dir_okay=False), default=None,
    help="A .npz of one request's tensors (without the batch dimension), named MODEL/INPUT "
    "or INPUT [default: random within the metadata's shapes and datatypes].",
)  # fmt: skip
@click.option("--shape", "shapes", multiple=True,
              help="MODEL.INPUT=d1,d2: an input's shape where the metadata leaves a size "
              "variable (repeatable).")  # fmt: skip
@click.option("--int-range", default="0,2", show_default=True,
              help="LO,HI: integer inputs are drawn from [LO, HI).")  # fmt: skip
@click.option("--deadline/--no-deadline", default=True, show_default=True,
              help="Send each request's SLO as parameters.deadline_ms (hetserve's; other "
              "servers ignore it).")  # fmt: skip
@click.option("--connections", default=64, show_default=True, type=click.IntRange(1, 4096),
              help="Keep-alive connections the open loop starts with.")  # fmt: skip
@click.option("--max-connections", default=1024, show_default=True,
              type=click.IntRange(1, 65536),
              help="More are opened when a request finds every one busy, up to this many "
              "(rate x latency are needed: a full pool would delay the sender).")  # fmt: skip
@click.option("--spin-ms", default=1.0, show_default=True,
              help="Wake this long before each send and yield until it is due: the event "
              "loop's timers are ~1 ms coarse; 0 saves the CPU and sends up to ~1 ms "
              "late.")  # fmt: skip
@click.option("--timeout", "timeout_s", default=30.0, show_default=True,
              help="Seconds to wait after the last request for the answers.")  # fmt: skip
@click.option("--max-requests", default=200_000, show_default=True,
              type=click.IntRange(1, MAX_REQUESTS),
              help="The most requests one run sends.")  # fmt: skip
@click.option("--token", envvar="HETSERVE_TOKEN", default=None,
              help="Bearer token (or HETSERVE_TOKEN).")  # fmt: skip
@click.option("--allow-remote", is_flag=True,
              help="Allow a URL that is not this machine (default: loopback only).")  # fmt: skip
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Write bench.json and bench.png here.")  # fmt: skip
@click.option("--predict", is_flag=True,
              help="Also simulate the same trace on --cluster with --plan/--profiles and "
              "print predicted beside measured.")  # fmt: skip
@click.option("--cluster", "cluster_name", default=None,
              help="--predict: the server's cluster (preset or YAML).")  # fmt: skip
@click.option("--plan", "plan_path", type=click.Path(dir_okay=False), default=None,
              help="--predict: the plan the server serves.")  # fmt: skip
@click.option("--profiles", type=click.Path(file_okay=False), default=None,
              help="--predict: the server's profile set "
              "[default: the roofline estimate].")  # fmt: skip
@click.option("--scheduler", default=None,
              help="--predict: the server's scheduler "
              "[default: the server's, else flex].")  # fmt: skip
@click.option("--param", "params", multiple=True, help="--predict: scheduler key=value.")
@click.option("--max-batch", default=8, show_default=True,
              help="--predict: the largest batch of the default plan (as serve's).")  # fmt: skip
def bench(
    url: str, models: str, rate: str | None, slo: str | None, workload: str, duration_s: float,
    seed: int, concurrency: int | None, encoding: str, inputs_path: str | None,
    shapes: tuple[str, ...], int_range: str, deadline: bool, connections: int,
    max_connections: int, spin_ms: float, timeout_s: float, max_requests: int,
    token: str | None, allow_remote: bool,
    out: str | None, predict: bool, cluster_name: str | None, plan_path: str | None,
    profiles: str | None, scheduler: str | None, params: tuple[str, ...], max_batch: int,
) -> None:  # fmt: skip
    """Load the KServe v2 server at URL (hetserve, Triton, KServe) open loop and report, per
    model, what fraction of requests met their SLO: latency percentiles from each request's
    scheduled time, attainment, goodput, refusals, errors and timeouts (as misses), and how
    late the sender ran. --predict simulates the same trace and prints the prediction
    beside the measurement."""
    from hetserve.experiments import bench as B

    base = B.check_url(url, allow_remote)
    names = csv_list(models)
    if not names or len(set(names)) != len(names):
        raise HetserveError(f"--models: give distinct model names, got {models!r}")
    if not 0 < duration_s <= 86_400:
        raise HetserveError(f"--duration: expected seconds in (0, 86400], got {duration_s:g}")
    lo_hi = int_range.split(",")
    try:
        ints = (int(lo_hi[0]), int(lo_hi[1]))
    except (ValueError, IndexError):
        ints = (0, 0)
    if len(lo_hi) != 2 or ints[1] <= ints[0]:
        raise HetserveError(f"--int-range: expected LO,HI with LO < HI, got {int_range!r}")
    if concurrency is None and rate is None and not workload.startswith("csv:"):
        raise HetserveError("--rate: required for an open loop (or give --concurrency N)")
    if predict and not cluster_name:
        raise HetserveError("--predict: give the server's --cluster (and --plan or --profiles)")
    metas = {m: B.fetch_model(base, m, token) for m in names}
    slos_ms = {m: metas[m].slo_ms for m in names}
    from hetserve.experiments.setup import parse_slo

    slos_ms |= parse_slo(slo) or {}
    unknown = sorted(set(slos_ms) - set(names))
    if unknown:
        raise HetserveError(f"--slo: model(s) {', '.join(unknown)} are not in --models")
    missing = [m for m, v in slos_ms.items() if v is None]
    if missing:
        raise HetserveError(
            f"--slo: the server does not say the SLO of {', '.join(missing)}; give it: "
            f"--slo {missing[0]}=MS"
        )
    slos_s = {m: float(v) / 1e3 for m, v in slos_ms.items()}  # type: ignore[arg-type]
    given = B.load_inputs(inputs_path) if inputs_path else {}
    dims = _dims(shapes, names)
    prepared = {}
    for i, m in enumerate(names):
        arrays = B.make_inputs(metas[m], seed + i, ints, given.get(m, given.get("")), dims.get(m))
        body, hdr = B.encode(metas[m], arrays, encoding == "binary",
                             slos_s[m] * 1e3 if deadline else None)  # fmt: skip
        prepared[m] = B.Prepared(metas[m], arrays, body, hdr)

    tty = sys.stderr.isatty()
    ticks = [0]

    def progress(sent: int, answered: int, total: int) -> None:
        """A live line on a terminal (every second), else a line every 10 s."""
        ticks[0] += 1
        line = f"  {ticks[0]:>4d} s: sent {sent}/{total}, answered {answered}"
        if tty:
            sys.stderr.write("\r" + line)
            sys.stderr.flush()
        elif ticks[0] % 10 == 0:
            print(line, file=sys.stderr, flush=True)

    opt = B.BenchOptions(connections, timeout_s, token, progress, spin_s=spin_ms / 1e3,
                         max_connections=max(connections, max_connections))  # fmt: skip
    trace = None
    t0 = time.perf_counter()
    if concurrency is not None:
        if predict:
            raise HetserveError("--predict: needs an open loop (a closed loop has no trace)")
        runs = []
        for m in names:
            console.print(f"closed loop: {concurrency} clients on {m} for {duration_s:g} s")
            runs.append(B.run_closed(base, m, slos_s[m], prepared[m], concurrency, duration_s,
                                     opt))  # fmt: skip
        j = _concat(runs)
    else:
        from hetserve.experiments.setup import workload_trace

        rates = _per_model(rate, "rate", names) or dict.fromkeys(names, 1.0)
        trace = workload_trace(workload, names, slos_s, rates, duration_s, seed)
        if len(trace) > max_requests:
            raise HetserveError(
                f"bench: the trace has {len(trace)} requests, more than --max-requests "
                f"{max_requests}; lower --rate or --duration (or raise --max-requests)"
            )
        if not len(trace):
            raise HetserveError("bench: the trace has no requests; raise --rate or --duration")
        console.print(
            f"open loop: {len(trace)} requests over {trace.duration_s:g} s to {base} "
            f"({encoding}, {connections} connections)"
        )
        j = B.run_open(base, trace, prepared, opt)
        if tty and ticks[0]:
            sys.stderr.write("\n")
    wall_s = time.perf_counter() - t0
    measured = B.summary(j, slos_s)
    result: dict[str, Any] = {
        "url": base, "mode": "closed" if concurrency else "open", "workload": workload,
        "encoding": encoding, "duration_s": j.duration_s, "wall_s": wall_s, "seed": seed,
        "measured": measured,
    }  # fmt: skip
    if predict and trace is not None:
        result["predicted"] = _predict(
            trace, names, slos_s, cluster_name or "", plan_path, profiles, scheduler, params,
            max_batch, base, token,
        )  # fmt: skip
    _table(result, names)
    if out:
        from hetserve.core.provenance import provenance

        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        result["provenance"] = provenance()
        (folder / "bench.json").write_text(json.dumps(result, indent=1) + "\n")
        png = B.plot(j, slos_s, folder / "bench.png", f"{base}: {result['mode']} loop, "
                     f"{workload if not concurrency else f'{concurrency} clients'}")  # fmt: skip
        console.print(f"wrote {folder / 'bench.json'}, {png}")


def _concat(runs: list[Any]) -> Any:
    import numpy as np

    from hetserve.experiments.bench import Judged

    return Judged(
        np.concatenate([r.model for r in runs]), np.concatenate([r.outcome for r in runs]),
        np.concatenate([r.latency_s for r in runs]), np.concatenate([r.lag_s for r in runs]),
        np.concatenate([r.time_s for r in runs]), sum(r.duration_s for r in runs),
    )  # fmt: skip


def _predict(
    trace: Any, names: list[str], slos_s: dict[str, float], cluster_name: str,
    plan_path: str | None, profiles: str | None, scheduler: str | None,
    params: tuple[str, ...], max_batch: int, base: str, token: str | None,
) -> dict[str, Any]:  # fmt: skip
    """The simulator's run of the same trace (the server's cluster, plan, profiles and
    scheduler as given), per model as ``summary`` reports it."""
    from hetserve.cli.sim import setup_from_options
    from hetserve.experiments.metrics import summarize
    from hetserve.experiments.setup import simulate
    from hetserve.scheduling.params import parse_params

    slo_arg = ",".join(f"{m}={s * 1e3:g}" for m, s in slos_s.items())
    setup = setup_from_options(
        cluster_name, ",".join(names), profiles, False, slo_arg, 5.0, plan_path, max_batch
    )
    name = scheduler or _server_scheduler(base, names[0], token) or "flex"
    res = simulate(setup, name, trace, parse_params(params) or {"max_batch": max_batch})
    s = summarize(res)
    out: dict[str, Any] = {"scheduler": name}
    for m in names:
        pm = s["per_model"].get(m, {})
        out[m] = {k: pm.get(k) for k in ("attainment", "goodput_rps", "latency_ms")}
    out["all"] = {k: s.get(k) for k in ("attainment", "goodput_rps", "latency_ms")}
    return out


def _server_scheduler(base: str, model: str, token: str | None) -> str | None:
    from hetserve.experiments.bench import get_json

    status, cfg = get_json(base, f"/v2/models/{model}/config", token, 10.0)
    if status != 200 or not isinstance(cfg, dict):
        return None
    value = ((cfg.get("parameters") or {}).get("scheduler") or {}).get("string_value")
    return str(value) if value else None


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _table(result: dict[str, Any], names: list[str]) -> None:
    pred = result.get("predicted")
    t = Table(title=f"{result['url']}: {result['mode']} loop, {result['duration_s']:.1f} s")
    cols = ["model", "SLO ms", "requests", "attainment", "goodput/s", "p50 ms", "p90 ms",
            "p99 ms", "late", "refused", "errors", "timeouts", "sender late p99 ms"]  # fmt: skip
    if pred:
        cols[4:4] = ["predicted"]
    for c in cols:
        t.add_column(c, justify="left" if c == "model" else "right")
    for m in [*names, "all"]:
        r = result["measured"][m]
        lat = r["latency_ms"]
        row = [
            m, "-" if m == "all" else f"{r['slo_ms']:.4g}", str(r["requests"]),
            f"{100 * r['attainment']:.1f}%", f"{r['goodput_rps']:.1f}",
            _ms(lat["p50"]), _ms(lat["p90"]), _ms(lat["p99"]), str(r["late"]),
            str(r["refused"]), str(r["error"]), str(r["timeout"]),
            _ms(r["sender_late_ms"]["p99"]),
        ]  # fmt: skip
        if pred:
            att = (pred.get(m) or {}).get("attainment")
            row[4:4] = ["-" if att is None else f"{100 * att:.1f}%"]
        t.add_row(*row)
    console.print(t)
