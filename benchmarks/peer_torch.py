"""A peer to serve beside hetserve (issue 43, item 6, "PyTorch alone behind the same HTTP
load"): one zoo model in plain PyTorch behind a minimal KServe v2 endpoint with a dynamic
batcher (whatever is queued, up to ``--max-batch``, after waiting at most ``--wait-ms`` for
a batch to fill), then ``hetserve bench`` against it and against ``hetserve serve`` on the
same model, device, SLO and trace: goodput within the SLO and p99 side by side.

The peer knows no deadlines and never refuses: it is what a team writes first. Run:
``.venv/bin/python benchmarks/peer_torch.py --device cuda --model resnet50 --slo-ms 25
--rates 100,300,1000 [--seconds 10] [--engines threads,ray]``; ``--device cpu`` dry-runs it
(resnet18).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import subprocess
import sys
import tempfile
from pathlib import Path

from hetserve.core.provenance import provenance_line

HEADER = "inference-header-content-length"


def peer_app(model_name: str, device: str, max_batch: int, wait_ms: float):  # type: ignore[no-untyped-def]
    """The peer: GET /v2/models/M (metadata), POST /v2/models/M/infer (binary tensors in
    and out, one input), GET /v2/health/ready."""
    import numpy as np
    import torch
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    from hetserve.zoo.registry import build

    net = build(model_name).eval().to(device)
    spec = net.input_spec
    shape = list(spec.example(1).shape[1:])
    queue: asyncio.Queue = asyncio.Queue()

    def run(xs: list) -> list:
        with torch.inference_mode():
            y = net(torch.from_numpy(np.concatenate(xs)).to(device))
            if device.startswith("cuda"):
                torch.cuda.synchronize()
        out = y.float().cpu().numpy()
        return [out[i : i + 1] for i in range(len(xs))]

    async def batcher() -> None:
        loop = asyncio.get_running_loop()
        while True:
            items = [await queue.get()]
            t_end = loop.time() + wait_ms / 1e3
            while len(items) < max_batch:
                left = t_end - loop.time()
                if left <= 0:
                    break
                try:
                    items.append(await asyncio.wait_for(queue.get(), left))
                except TimeoutError:
                    break
            outs = await loop.run_in_executor(None, run, [x for x, _ in items])
            for (_, fut), o in zip(items, outs, strict=True):
                fut.set_result(o)

    async def infer(request: Request) -> Response:
        raw = await request.body()
        n = int(request.headers[HEADER])
        head = json.loads(raw[:n])
        t = head["inputs"][0]
        x = np.frombuffer(raw[n:], dtype="<f4").reshape(t["shape"])
        fut = asyncio.get_running_loop().create_future()
        await queue.put((x, fut))
        y = await fut
        blob = np.ascontiguousarray(y, dtype="<f4").tobytes()
        h = json.dumps({"model_name": model_name, "outputs": [{
            "name": "output", "datatype": "FP32", "shape": list(y.shape),
            "parameters": {"binary_data_size": len(blob)}}]}).encode()  # fmt: skip
        return Response(h + blob, headers={HEADER: str(len(h))},
                        media_type="application/octet-stream")  # fmt: skip

    async def meta(request: Request) -> Response:
        return JSONResponse({"name": model_name, "platform": "pytorch", "inputs": [
            {"name": "input", "datatype": "FP32", "shape": [-1, *shape]}]})  # fmt: skip

    async def ready(request: Request) -> Response:
        return JSONResponse({"ready": True})

    @contextlib.asynccontextmanager
    async def lifespan(app: object):  # type: ignore[no-untyped-def]
        task = asyncio.get_running_loop().create_task(batcher())
        yield
        task.cancel()

    return Starlette(routes=[
        Route(f"/v2/models/{model_name}/infer", infer, methods=["POST"]),
        Route(f"/v2/models/{model_name}", meta), Route("/v2/health/ready", ready),
    ], lifespan=lifespan)  # fmt: skip


def _serve_peer(port: int, model: str, device: str, max_batch: int, wait_ms: float) -> None:
    import uvicorn

    uvicorn.run(peer_app(model, device, max_batch, wait_ms), host="127.0.0.1", port=port,
                log_level="error")  # fmt: skip


def _ready(url: str, seconds: float = 300) -> None:
    from hetserve.experiments.bench import wait_ready

    if not wait_ready(url, seconds):
        raise SystemExit(f"{url} did not become ready")


def _bench(url: str, model: str, rate: float, seconds: float, slo_ms: float) -> dict:
    with tempfile.TemporaryDirectory() as d:
        run = subprocess.run(
            [sys.executable, "-m", "hetserve", "bench", url, "--models", model, "--rate",
             str(rate), "--duration", str(seconds), "--slo", f"{model}={slo_ms}", "--out", d],
            capture_output=True, text=True, timeout=seconds + 180,
        )  # fmt: skip
        if run.returncode != 0:
            raise SystemExit(run.stderr[-1500:])
        return json.loads((Path(d) / "bench.json").read_text())["measured"][model]


def main() -> None:
    print(provenance_line(), flush=True)
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--model", default=None, help="[default: resnet50 on cuda, resnet18 on cpu]")
    ap.add_argument("--slo-ms", type=float, default=None)
    ap.add_argument("--rates", default=None)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--wait-ms", type=float, default=2.0)
    ap.add_argument("--cluster", default=None, help="hetserve's cluster (default: discovered)")
    ap.add_argument("--profiles", default=None, help="hetserve's profile set (a folder)")
    ap.add_argument(
        "--engines",
        default="ray",
        help="hetserve's engines to run, in order: threads, ray [default: ray]",
    )
    a = ap.parse_args()
    engines = [e for e in a.engines.split(",") if e]
    if not engines or set(engines) - {"threads", "ray"}:
        ap.error(f"--engines: expected threads and/or ray, got {a.engines!r}")
    cuda = a.device.startswith("cuda")
    model = a.model or ("resnet50" if cuda else "resnet18")
    slo = a.slo_ms or (25.0 if cuda else 400.0)
    rates = [float(r) for r in (a.rates or ("100,300,1000" if cuda else "2,5")).split(",")]
    from hetserve.experiments.live import free_port

    rows = []
    port = free_port()
    peer = multiprocessing.get_context("spawn").Process(
        target=_serve_peer, args=(port, model, a.device, a.max_batch, a.wait_ms), daemon=True
    )
    peer.start()
    try:
        _ready(f"http://127.0.0.1:{port}")
        for r in rates:
            m = _bench(f"http://127.0.0.1:{port}", model, r, a.seconds, slo)
            rows.append({"system": f"PyTorch alone (batch <= {a.max_batch}, wait "
                         f"{a.wait_ms:g} ms)", "rate": r, **m})  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
    finally:
        peer.kill()
    cluster = a.cluster
    if cuda and cluster is None:
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            subprocess.run([sys.executable, "-m", "hetserve", "cluster", "discover", "--output",
                            f.name], check=True)  # fmt: skip
        cluster = f.name
    for engine in engines:
        port = free_port()
        argv = [sys.executable, "-m", "hetserve", "serve", "--models", model, "--port",
                str(port), "--slo", f"{model}={slo}", "--max-batch", str(a.max_batch),
                "--engine", engine]  # fmt: skip
        argv += ["--cluster", cluster] if cuda else ["--cpu-threads", "1"]
        if a.profiles:
            argv += ["--profiles", a.profiles]
        if engine == "ray" and not cuda:  # (a CPU plan on Ray: emulated actors)
            argv += ["--emulate"]
        log = tempfile.NamedTemporaryFile("w+", suffix=".log")
        srv = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            try:
                _ready(f"http://127.0.0.1:{port}", 150)
            except SystemExit as e:  # said, with the server's last words; the next goes on
                log.seek(0)
                print(f"hetserve --engine {engine}: {e}\n{log.read()[-3000:]}", flush=True)
                continue
            for r in rates:
                m = _bench(f"http://127.0.0.1:{port}", model, r, a.seconds, slo)
                rows.append({"system": f"hetserve (flex, {engine})", "rate": r, **m})
                print(json.dumps(rows[-1]), flush=True)
        finally:
            srv.terminate()
            srv.wait(timeout=60)
            log.close()
    print(f"\n{model} on {a.device}, SLO {slo:g} ms, Poisson, {a.seconds:g} s per point")
    print("| system | offered req/s | goodput req/s | attainment | p50 / p99 ms |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        lat = r["latency_ms"]
        p50 = "-" if lat["p50"] is None else f"{lat['p50']:.1f}"
        p99 = "-" if lat["p99"] is None else f"{lat['p99']:.1f}"
        print(f"| {r['system']} | {r['rate']:g} | {r['goodput_rps']:.1f} | "
              f"{100 * r['attainment']:.1f}% | {p50} / {p99} |")  # fmt: skip


if __name__ == "__main__":
    main()
