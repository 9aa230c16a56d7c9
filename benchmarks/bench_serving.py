"""Benchmark: real serving on this machine (issue 7's targets), load on loopback only.

- ``overhead``: ResNet-50 on the CPU at fixed batch sizes. A bare PyTorch loop (the batch,
  forward, repeat) against hetserve serving the same batches (``fixed-batch`` scheduler,
  requests sent over HTTP with binary tensors by a closed loop of 2 x batch clients), with
  the same torch threads for the model (target: >= 85% of the bare loop's requests/s).
- ``frontend``: ``--emulate`` workers (240 emulated V100s serving BERT-Base, whose request
  is 1 KB of token ids: no queueing to speak of), open-loop Poisson load over HTTP; the
  achieved requests/s and what HTTP added to each request (client latency minus the
  server's own time; target: 3,000 req/s, p99 < 10 ms). ``--model resnet50`` sends
  ResNet-50's 600 KB input instead (12 V100s): the cost of moving real image inputs.
- ``peer``: ResNet-18, the same Poisson load and SLO, served by hetserve (flex) and by Ray
  Serve with ``@serve.batch`` (max batch 8, a batch wait swept and the best kept): goodput
  and p99 at several loads (target: hetserve's goodput >= Ray Serve's, p99 lower). Needs
  ``pip install "ray[serve]"`` (not a hetserve dependency).

Run: ``.venv/bin/python benchmarks/bench_serving.py [overhead|frontend|peer ...]
[--seconds S] [--waits-ms 5,20,50]``.
Each section prints a table and a JSON line; docs/benchmarks.md records the results.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from hetserve.core.provenance import provenance_line

THREADS = 1  # torch threads for the model; the other core runs HTTP and the clients


def _bare(model, x, seconds: float) -> float:
    import torch

    with torch.inference_mode():
        model(x)
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            model(x)
            n += 1
    return n * len(x) / (time.perf_counter() - t0)


def _closed_loop(url: str, model: str, x: np.ndarray, clients: int, seconds: float) -> float:
    """Requests/s of ``clients`` concurrent senders, each sending its next request when the
    last is answered."""
    from hetserve.experiments.live import binary_body
    from hetserve.experiments.loadgen import closed_loop, http_request

    body, hdr = binary_body(x[None], 1e7)
    req = http_request(url, f"/v2/models/{model}/infer", body, hdr)
    return closed_loop(url, req, clients, seconds)


def overhead(batches=(1, 4, 8), seconds: float = 15.0) -> dict:
    import torch

    from hetserve.engine.setup import build_setup
    from hetserve.experiments.live import serve_in_thread
    from hetserve.runtime.http import create_app
    from hetserve.runtime.server import Server, ServerConfig
    from hetserve.zoo.registry import build

    torch.set_num_threads(THREADS)
    net = build("resnet50").eval()
    x1 = net.input_spec.example(1)[0]
    rows = []
    for b in batches:
        bare = _bare(net, torch.stack([x1] * b), seconds)
        row = {"batch": b, "bare_rps": bare}
        for engine in ("threads", "ray"):
            s = build_setup("local-cpu", ["resnet50"], slo_ms={"resnet50": 1e7}, max_batch=b)
            cfg = ServerConfig(
                scheduler="fixed-batch",
                params={"max_batch": b, "max_queue_delay_s": 10.0},
                build=build, engine=engine, cpu_threads=THREADS,
            )  # fmt: skip
            with serve_in_thread(create_app(Server(s, cfg))) as url:
                _closed_loop(url, "resnet50", x1.numpy(), 2 * b, 3.0)  # warm
                rps = _closed_loop(url, "resnet50", x1.numpy(), 2 * b, seconds)
            row[f"{engine}_rps"] = rps
            row[f"{engine}_of_bare"] = rps / bare
        rows.append(row)
        print(
            f"batch {b}: bare {bare:.2f} req/s, hetserve threads {row['threads_rps']:.2f} "
            f"({100 * row['threads_of_bare']:.0f}%), ray {row['ray_rps']:.2f} "
            f"({100 * row['ray_of_bare']:.0f}%)",
            flush=True,
        )
    return {"overhead": rows, "threads": THREADS}


FRONTEND = {"bert-base": 240, "resnet50": 12}  # model -> emulated V100s


def serve_emulated(port: int, model: str = "bert-base") -> None:
    """The front-end benchmark's server (a process of its own, as a deployment has)."""
    import uvicorn

    from hetserve.experiments.shepherd.scenarios import group_setup
    from hetserve.runtime.http import create_app
    from hetserve.runtime.server import Server, ServerConfig

    s = group_setup(FRONTEND[model], {model: 1.0})
    srv = Server(s, ServerConfig(scheduler="flex", emulate=True, params={"max_batch": 8}))
    uvicorn.run(create_app(srv), host="127.0.0.1", port=port, log_level="error")


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux)."""
    import os

    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def frontend(
    rates=(1000.0, 2000.0, 3000.0, 4000.0, 5000.0), seconds: float = 5.0, model: str = "bert-base"
) -> dict:
    """The server (``--emulate``, uvicorn) in its own process, the open-loop load generator
    in this one: per offered rate, the answered rate, what HTTP added (client latency minus
    the server's ``server_ms``), how late the generator sent, and the server's CPU time per
    request."""
    import multiprocessing

    from hetserve.experiments.live import free_port, replay_http
    from hetserve.experiments.loadgen import http_request, open_loop
    from hetserve.experiments.setup import build_trace
    from hetserve.experiments.shepherd.scenarios import group_setup

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = multiprocessing.get_context("spawn").Process(
        target=serve_emulated, args=(port, model), daemon=True
    )
    proc.start()
    ping = http_request(url, "/v2/health/ready", b"", {}).replace(b"POST", b"GET", 1)
    for _ in range(600):  # up to a minute to start
        try:
            if open_loop(url, [ping], np.zeros(1), connections=1, timeout_s=1).status[0] == 200:
                break
        except Exception:  # not listening yet
            pass
        time.sleep(0.1)
    s = group_setup(FRONTEND[model], {model: 1.0})
    from hetserve.core.graph import get_graph

    spec = get_graph(model).inputs[0]
    x = np.zeros(spec.shape, dtype=np.int64 if spec.datatype == "INT64" else np.float32)
    rows = []
    try:
        for rate in rates:
            trace = build_trace(s, "poisson", {model: rate}, seconds, seed=0)
            cpu0 = _cpu_s(proc.pid)
            live = replay_http(url, trace, {model: x})
            cpu = _cpu_s(proc.pid) - cpu0
            add = live.added_ms()
            sm = live.summary()
            row = {
                "offered_rps": len(trace) / seconds,
                "answered_rps": int((live.status > 0).sum()) / seconds,
                "ok_share": sm["attainment"],
                "added_ms_p50": float(np.percentile(add, 50)) if len(add) else None,
                "added_ms_p99": float(np.percentile(add, 99)) if len(add) else None,
                "client_p99_ms": sm["latency_ms"]["p99"],
                "server_cpu_us_per_request": 1e6 * cpu / max(1, len(trace)),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        proc.kill()
    return {"frontend": rows, "model": model}


# ---------------------------------------------------------------- Ray Serve, the peer


def _ray_serve_app(batch_wait_s: float):
    import torch
    from ray import serve
    from starlette.requests import Request
    from starlette.responses import Response

    # max_ongoing_requests (default 5) caps what a replica can batch: raised above the batch
    @serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=64)
    class ResNet:
        def __init__(self) -> None:
            from hetserve.zoo.registry import build

            torch.set_num_threads(THREADS)
            self.net = build("resnet18").eval()

        @serve.batch(max_batch_size=8, batch_wait_timeout_s=batch_wait_s)
        async def run(self, xs: list[torch.Tensor]) -> list[bytes]:
            with torch.inference_mode():
                out = self.net(torch.stack(xs))
            return [o.numpy().astype("<f4").tobytes() for o in out]

        async def __call__(self, req: Request) -> Response:
            raw = await req.body()
            n = int(req.headers["inference-header-content-length"])
            head = json.loads(raw[:n])
            shape = head["inputs"][0]["shape"]
            x = torch.from_numpy(np.frombuffer(raw[n:], dtype="<f4").copy().reshape(shape))[0]
            blob = await self.run(x)
            h = json.dumps({"outputs": [{"name": "output", "datatype": "FP32",
                            "shape": [1, 1000], "parameters": {"binary_data_size": len(blob)}}],
                            "parameters": {"late": 0}}).encode()  # fmt: skip
            return Response(h + blob, headers={"Inference-Header-Content-Length": str(len(h))})

    return ResNet.bind()


def _late_by_client(live, trace) -> dict:
    """Ray Serve knows no deadlines: a request is good when the client saw it answered
    within its SLO (the same rule applied to hetserve's answers)."""
    from hetserve.core.outcome import LATE, OK

    slo = np.array([trace.streams[k].slo_s for k in trace.stream_idx])
    served = live.outcome <= LATE
    good = served & (live.latency_s <= slo)
    lat = live.latency_s[served]
    return {
        "goodput_rps": float(good.sum()) / trace.duration_s,
        "attainment": float(good.mean()),
        "p99_ms": float(np.percentile(lat, 99)) * 1e3 if len(lat) else None,
        "ok_by_server": int((live.outcome == OK).sum()),
    }


def peer(loads=(0.3, 0.5, 0.7, 0.9), seconds: float = 10.0, waits=(0.005, 0.02, 0.05)) -> dict:
    import ray
    from ray import serve

    from hetserve.engine.setup import build_setup
    from hetserve.experiments.live import replay_http, serve_in_thread
    from hetserve.experiments.setup import build_trace
    from hetserve.profiling.cache import measured_profiles
    from hetserve.runtime.http import create_app
    from hetserve.runtime.server import Server, ServerConfig
    from hetserve.zoo.registry import build

    folder = measured_profiles(["resnet18"], "cpu", [1, 2, 4, 8], 10, THREADS)
    setup = build_setup("local-cpu", ["resnet18"], profiles=str(folder), max_batch=8)
    x = build("resnet18").input_spec.example(1)[0].numpy()
    rows = []
    traces = {
        lf: build_trace(setup, "poisson", setup.plan.rates_at(lf), seconds, seed=1) for lf in loads
    }
    for engine in ("threads", "ray"):
        cfg = ServerConfig(
            scheduler="flex", params={"max_batch": 8}, build=build, engine=engine,
            cpu_threads=THREADS,
        )  # fmt: skip
        with serve_in_thread(create_app(Server(setup, cfg))) as url:
            for lf, tr in traces.items():
                r = _late_by_client(replay_http(url, tr, {"resnet18": x}), tr)
                rows.append({"system": f"hetserve-{engine}", "load": lf, **r})
                print(json.dumps(rows[-1]), flush=True)
    ray.init(include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    port = 8123
    for wait in waits:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(_ray_serve_app(wait), route_prefix="/v2/models/resnet18/infer")
        for lf, tr in traces.items():
            r = _late_by_client(replay_http(f"http://127.0.0.1:{port}", tr, {"resnet18": x}), tr)
            rows.append({"system": f"ray-serve(wait {wait * 1e3:g} ms)", "load": lf, **r})
            print(json.dumps(rows[-1]), flush=True)
        serve.shutdown()
    ray.shutdown()
    out = {"peer": rows, "slo_ms": setup.slos_s["resnet18"] * 1e3}
    save_peer(out)
    return out


RESULTS = "docs/results/serving"


def save_peer(out: dict, folder: str = RESULTS) -> None:
    """The peer comparison's rows (``peer.json``) and its two curves (``peer.png``:
    goodput and p99 latency against load, one line per system)."""
    import os

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(folder, exist_ok=True)
    from hetserve.core.provenance import provenance

    with open(f"{folder}/peer.json", "w") as f:
        json.dump({**out, "provenance": provenance()}, f, indent=1)
    systems = list(dict.fromkeys(r["system"] for r in out["peer"]))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for name in systems:
        rs = [r for r in out["peer"] if r["system"] == name]
        style = "-o" if name.startswith("hetserve") else "--s"
        ax1.plot([r["load"] for r in rs], [r["goodput_rps"] for r in rs], style, label=name)
        ax2.plot([r["load"] for r in rs], [r["p99_ms"] for r in rs], style, label=name)
    ax1.set(xlabel="offered load (x planned capacity)", ylabel="goodput (req/s within SLO)")
    ax2.set(xlabel="offered load (x planned capacity)", ylabel="p99 latency of answers (ms)")
    ax2.axhline(out["slo_ms"], color="grey", lw=0.8, ls=":")
    ax2.set_yscale("log")
    ax1.legend(fontsize=8)
    ax1.grid(alpha=0.3)
    ax2.grid(alpha=0.3)
    fig.suptitle(f"ResNet-18 on this CPU, Poisson load, SLO {out['slo_ms']:.0f} ms")
    fig.tight_layout()
    fig.savefig(f"{folder}/peer.png", dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> None:
    print(provenance_line())
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sections = {"overhead": overhead, "frontend": frontend, "peer": peer}
    ap.add_argument("sections", nargs="*", help="overhead, frontend, peer [default: all]")
    ap.add_argument("--seconds", type=float, default=None, help="per point (peer: per trace)")
    ap.add_argument("--waits-ms", default="5,20,50", help="peer: Ray Serve batch waits")
    ap.add_argument("--model", default="bert-base", help="frontend: bert-base or resnet50")
    args = ap.parse_args(argv)
    bad = [n for n in args.sections if n not in sections]
    if bad:
        ap.error(f"unknown section(s) {', '.join(bad)}; choose from {', '.join(sections)}")
    out = {}
    for name in args.sections or list(sections):
        kw: dict = {} if args.seconds is None else {"seconds": args.seconds}
        if name == "frontend":
            kw["model"] = args.model
        if name == "peer":
            kw["waits"] = tuple(float(w) / 1e3 for w in args.waits_ms.split(","))
        out.update(sections[name](**kw))
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
