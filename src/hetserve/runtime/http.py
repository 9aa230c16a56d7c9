"""The HTTP front end: the Open Inference Protocol (KServe v2) over FastAPI.

Endpoints: ``GET /v2/health/live``, ``GET /v2/health/ready``, ``GET /v2/models/{m}``,
``GET /v2/models/{m}/ready``, ``POST /v2/models/{m}/infer`` (JSON tensors) and
``GET /metrics`` (Prometheus). An infer request carries one input tensor whose first
dimension is the number of requests (each row is served as its own request, batched by the
scheduler with others); ``parameters.deadline_ms`` sets the deadline (default: the model's
SLO).

Status codes: 400 for a malformed request (message names the field: shape, datatype, data
size, missing fields), 401 without the bearer token when one is set, 404 for an unknown
model, 413 for a body over the limit, 429 when the server holds too many requests, 503
when the scheduler drops a request (its deadline is unreachable), 500 when a worker fails
it. The binary tensor extension is not implemented.
"""

from __future__ import annotations

import asyncio
import math
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from hetserve.runtime.server import Server

DTYPES = {"FP32": "float32", "FP16": "float16", "INT64": "int64", "INT32": "int32"}
STATUS = {"dropped": 503, "overloaded": 429, "failed": 500}


def create_app(server: Server, token: str | None = None, max_body_bytes: int = 64 << 20) -> Any:
    @asynccontextmanager
    async def lifespan(app: Any) -> Any:
        server.start()
        yield
        await server.drain()

    app = FastAPI(title="hetserve", lifespan=lifespan)

    def error(status: int, msg: str) -> Any:
        return JSONResponse({"error": msg}, status_code=status)

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Any:
        if token is not None and request.headers.get("authorization") != f"Bearer {token}":
            return error(401, "missing or wrong bearer token")
        size = request.headers.get("content-length")
        if size is not None and size.isdigit() and int(size) > max_body_bytes:
            return error(413, f"request body of {size} bytes exceeds {max_body_bytes}")
        return await call_next(request)

    @app.get("/v2/health/live")
    async def live() -> Any:
        return {"live": True}

    @app.get("/v2/health/ready")
    async def ready() -> Any:
        return JSONResponse({"ready": server.ready}, status_code=200 if server.ready else 503)

    @app.get("/v2")
    async def meta() -> Any:
        return {"name": "hetserve", "version": "0.1.0", "extensions": []}

    @app.get("/v2/models/{model}")
    async def model_meta(model: str) -> Any:
        if model not in server.models:
            return error(404, f"unknown model {model!r}; served: {', '.join(server.models)}")
        shape: list[int] = [-1, *(server.input_shape(model) or [])]
        return {
            "name": model,
            "versions": ["1"],
            "platform": "pytorch",
            "inputs": [{"name": "input", "datatype": "FP32", "shape": shape}],
            "outputs": [{"name": "output", "datatype": "FP32", "shape": [-1]}],
        }

    @app.get("/v2/models/{model}/ready")
    async def model_ready(model: str) -> Any:
        if model not in server.models:
            return error(404, f"unknown model {model!r}")
        return JSONResponse({"name": model, "ready": server.ready}, status_code=200)

    @app.post("/v2/models/{model}/infer")
    async def infer(model: str, request: Request) -> Any:
        if model not in server.models:
            return error(404, f"unknown model {model!r}; served: {', '.join(server.models)}")
        try:
            body = await request.json()
        except Exception:
            return error(400, "request body is not JSON")
        try:
            rows, deadline_s, rid = _parse(body, server.cfg.emulate)
        except ValueError as e:
            return error(400, str(e))
        results = await asyncio.gather(*(server.infer(model, x, deadline_s) for x in rows))
        for r in results:
            if r.outcome in STATUS:
                why = r.reason or r.outcome
                return error(STATUS[r.outcome], f"request {r.outcome}: {why}")
        out: dict[str, Any] = {"model_name": model, "model_version": "1", "outputs": []}
        if rid is not None:
            out["id"] = rid
        late = sum(r.outcome == "late" for r in results)
        out["parameters"] = {"late": late}
        if results and results[0].output is not None:
            out["outputs"] = _encode([r.output for r in results])
        return out

    @app.get("/metrics")
    async def metrics() -> Any:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(server.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def _parse(body: Any, emulate: bool) -> tuple[list[Any], float | None, Any]:
    """Rows of the one input tensor, the deadline and the request id; ValueError names the
    problem."""
    if not isinstance(body, dict):
        raise ValueError("request body must be a JSON object")
    inputs = body.get("inputs")
    if not isinstance(inputs, list) or len(inputs) != 1 or not isinstance(inputs[0], dict):
        raise ValueError("'inputs' must be a list with one tensor")
    t = inputs[0]
    for key in ("name", "shape", "datatype", "data"):
        if key not in t:
            raise ValueError(f"inputs[0]: missing field {key!r}")
    shape, dt, data = t["shape"], t["datatype"], t["data"]
    if (
        not isinstance(shape, list)
        or not shape
        or not all(isinstance(s, int) and s > 0 for s in shape)
    ):
        raise ValueError(f"inputs[0].shape must be a list of positive integers, got {shape!r}")
    if dt not in DTYPES:
        raise ValueError(f"inputs[0].datatype must be one of {', '.join(DTYPES)}, got {dt!r}")
    if not isinstance(data, list):
        raise ValueError("inputs[0].data must be a (flat or nested) list of numbers")
    params = body.get("parameters") or {}
    deadline_s = None
    if "deadline_ms" in params:
        d = params["deadline_ms"]
        if not isinstance(d, (int, float)) or not math.isfinite(d) or d <= 0:
            raise ValueError(f"parameters.deadline_ms must be a positive number, got {d!r}")
        deadline_s = d / 1e3
    n = shape[0]
    if emulate:
        return [None] * n, deadline_s, body.get("id")
    import numpy as np
    import torch

    try:
        arr = np.asarray(data, dtype=DTYPES[dt])
    except (TypeError, ValueError):
        raise ValueError(f"inputs[0].data is not a list of {dt} numbers") from None
    if arr.size != math.prod(shape):
        raise ValueError(
            f"inputs[0].data has {arr.size} values, shape {shape} needs {math.prod(shape)}"
        )
    x = torch.from_numpy(arr.reshape(shape)).float()
    return [x[i] for i in range(n)], deadline_s, body.get("id")


def _encode(outputs: list[Any]) -> list[dict[str, Any]]:
    import torch

    first = outputs[0]
    parts = list(first) if isinstance(first, tuple) else [first]
    out = []
    for k in range(len(parts)):
        t = torch.stack([o[k] if isinstance(o, tuple) else o for o in outputs]).float()
        out.append(
            {
                "name": "output" if len(parts) == 1 else f"output_{k}",
                "datatype": "FP32",
                "shape": list(t.shape),
                "data": t.flatten().tolist(),
            }
        )
    return out
