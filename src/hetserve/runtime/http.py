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
it.

The binary tensor extension (Triton's ``binary_data``) is supported both ways: a request
whose ``Inference-Header-Content-Length`` header says how long its JSON part is may carry
the input's bytes after it (``parameters.binary_data_size`` on the input, raw little-endian
values, no ``data``); outputs come back as raw bytes after the JSON part when the request
asks (``parameters.binary_data_output: true``, or ``parameters.binary_data: true`` on a
requested output), with the same header on the response.
"""

from __future__ import annotations

import asyncio
import json
import math
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response

from hetserve.runtime.server import Server

DTYPES = {"FP32": "float32", "FP16": "float16", "INT64": "int64", "INT32": "int32"}
FIELDS = ("name", "shape", "datatype", "data")
HEADER_LEN = "Inference-Header-Content-Length"
STATUS = {"dropped": 503, "overloaded": 429, "failed": 500}


def create_app(server: Server, token: str | None = None, max_body_bytes: int = 64 << 20) -> Any:
    """The ASGI app: ``POST /v2/models/{m}/infer`` is answered by a plain ASGI handler (the
    hot path: no framework routing, middleware or task groups, about a quarter of the CPU
    time per request that a FastAPI route with an HTTP middleware took); everything else is
    a FastAPI app. The bearer token and the body limit apply to every request."""

    @asynccontextmanager
    async def lifespan(app: Any) -> Any:
        server.start()
        yield
        await server.stop()  # graceful: answer what is in flight, then release workers

    api = FastAPI(title="hetserve", lifespan=lifespan)

    @api.get("/v2/health/live")
    async def live() -> Any:
        return {"live": True}

    @api.get("/v2/health/ready")
    async def ready() -> Any:
        return JSONResponse({"ready": server.ready}, status_code=200 if server.ready else 503)

    @api.get("/v2")
    async def meta() -> Any:
        return {"name": "hetserve", "version": "0.1.0", "extensions": ["binary_tensor_data"]}

    @api.get("/v2/models/{model}")
    async def model_meta(model: str) -> Any:
        if model not in server.models:
            return _error(404, f"unknown model {model!r}; served: {', '.join(server.models)}")
        shape: list[int] = [-1, *(server.input_shape(model) or [])]
        return {
            "name": model,
            "versions": ["1"],
            "platform": "pytorch",
            "inputs": [{"name": "input", "datatype": "FP32", "shape": shape}],
            "outputs": [{"name": "output", "datatype": "FP32", "shape": [-1]}],
        }

    @api.get("/v2/models/{model}/ready")
    async def model_ready(model: str) -> Any:
        if model not in server.models:
            return _error(404, f"unknown model {model!r}")
        return JSONResponse({"name": model, "ready": server.ready}, status_code=200)

    @api.get("/metrics")
    async def metrics() -> Any:
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(server.metrics.scrape(), media_type=CONTENT_TYPE_LATEST)

    return _OipApp(api, server, token, max_body_bytes)


def _error(status: int, msg: str) -> Any:
    return JSONResponse({"error": msg}, status_code=status)


_JSON = [(b"content-type", b"application/json")]


class _OipApp:
    """ASGI: the guard (token, body limit) for every request, the infer route, and the
    FastAPI app for the rest (and for the lifespan)."""

    def __init__(self, api: Any, server: Server, token: str | None, max_body: int) -> None:
        self.api = api
        self.server = server
        self.auth = None if token is None else f"Bearer {token}".encode()
        self.max_body = max_body

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.api(scope, receive, send)
        headers = dict(scope["headers"])
        if self.auth is not None and headers.get(b"authorization") != self.auth:
            return await _send(send, 401, "missing or wrong bearer token")
        size = headers.get(b"content-length", b"")
        if size.isdigit() and int(size) > self.max_body:
            return await _send(
                send, 413, f"request body of {int(size)} bytes exceeds {self.max_body}"
            )
        path: str = scope["path"]
        if scope["method"] == "POST" and path.startswith("/v2/models/") and path.endswith("/infer"):
            model = path[len("/v2/models/") : -len("/infer")]
            if "/" not in model:
                raw = bytearray()
                while True:
                    msg = await receive()
                    if msg["type"] == "http.disconnect":
                        return None
                    raw += msg.get("body", b"")
                    if len(raw) > self.max_body:
                        return await _send(send, 413, f"request body exceeds {self.max_body}")
                    if not msg.get("more_body", False):
                        break
                head = headers.get(HEADER_LEN.lower().encode())
                status, body, extra = await _infer(self.server, model, bytes(raw), head)
                await _respond(send, status, body, extra)
                return None
        return await self.api(scope, receive, send)


async def _send(send: Any, status: int, msg: str) -> None:
    await _respond(send, status, json.dumps({"error": msg}).encode(), _JSON)


async def _respond(send: Any, status: int, body: bytes, headers: list[Any]) -> None:
    length = (b"content-length", str(len(body)).encode())
    await send({"type": "http.response.start", "status": status, "headers": [*headers, length]})
    await send({"type": "http.response.body", "body": body})


def _fail(status: int, msg: str) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    return status, json.dumps({"error": msg}).encode(), _JSON


async def _infer(
    server: Server, model: str, raw: bytes, head: bytes | None
) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    """One infer request: the status, the body and the headers of the answer."""
    if model not in server.models:
        return _fail(404, f"unknown model {model!r}; served: {', '.join(server.models)}")
    if server.draining:
        return _fail(503, "the server is shutting down")
    try:
        n_json = len(raw) if head is None else int(head)
        if not 0 <= n_json <= len(raw):
            raise ValueError
    except ValueError:
        shown = None if head is None else head.decode("latin-1")
        return _fail(400, f"{HEADER_LEN} must be an integer within the body, got {shown!r}")
    try:
        body = json.loads(raw[:n_json])
    except (ValueError, UnicodeDecodeError):
        return _fail(400, "request body is not JSON")
    try:
        rows, deadline_s, rid = _parse(body, server.cfg.emulate, raw[n_json:])
        binary_out = _wants_binary(body)
    except ValueError as e:
        return _fail(400, str(e))
    if len(rows) == 1:
        results = [await server.infer(model, rows[0], deadline_s)]
    else:
        results = await asyncio.gather(*(server.infer(model, x, deadline_s) for x in rows))
    for r in results:
        if r.outcome in STATUS:
            why = r.reason or r.outcome
            return _fail(STATUS[r.outcome], f"request {r.outcome}: {why}")
    out: dict[str, Any] = {"model_name": model, "model_version": "1", "outputs": []}
    if rid is not None:
        out["id"] = rid
    late = sum(r.outcome == "late" for r in results)
    # late rows, and the server's time for the request (arrival to answer, the slowest
    # row): what a client's latency adds on top is the HTTP and network part
    server_ms = 1e3 * max((r.latency_s for r in results), default=0.0)
    out["parameters"] = {"late": late, "server_ms": round(server_ms, 3)}
    if results and results[0].output is not None:
        out["outputs"], blobs = _encode([r.output for r in results], binary_out)
        if binary_out:
            head_bytes = json.dumps(out).encode()
            extra = [
                (b"content-type", b"application/octet-stream"),
                (HEADER_LEN.lower().encode(), str(len(head_bytes)).encode()),
            ]
            return 200, head_bytes + b"".join(blobs), extra
    return 200, json.dumps(out).encode(), _JSON


def _wants_binary(body: dict[str, Any]) -> bool:
    params = body.get("parameters") or {}
    if params.get("binary_data_output") is True:
        return True
    outs = body.get("outputs") or []
    if not isinstance(outs, list):
        raise ValueError("'outputs' must be a list of requested outputs")
    return any(
        isinstance(o, dict) and (o.get("parameters") or {}).get("binary_data") is True for o in outs
    )


def _parse(body: Any, emulate: bool, binary: bytes = b"") -> tuple[list[Any], float | None, Any]:
    """Rows of the one input tensor, the deadline and the request id; ValueError names the
    problem. ``binary``: the body's bytes after its JSON part (binary tensor extension)."""
    if not isinstance(body, dict):
        raise ValueError("request body must be a JSON object")
    inputs = body.get("inputs")
    if not isinstance(inputs, list) or len(inputs) != 1 or not isinstance(inputs[0], dict):
        raise ValueError("'inputs' must be a list with one tensor")
    t = inputs[0]
    tparams = t.get("parameters") or {}
    size = tparams.get("binary_data_size") if isinstance(tparams, dict) else None
    for key in ("name", "shape", "datatype") if size is not None else FIELDS:
        if key not in t:
            raise ValueError(f"inputs[0]: missing field {key!r}")
    shape, dt, data = t["shape"], t["datatype"], t.get("data")
    if (
        not isinstance(shape, list)
        or not shape
        or not all(isinstance(s, int) and s > 0 for s in shape)
    ):
        raise ValueError(f"inputs[0].shape must be a list of positive integers, got {shape!r}")
    if dt not in DTYPES:
        raise ValueError(f"inputs[0].datatype must be one of {', '.join(DTYPES)}, got {dt!r}")
    if size is not None:
        if not isinstance(size, int) or size < 0 or size != len(binary):
            raise ValueError(
                f"inputs[0].parameters.binary_data_size is {size!r}, but {len(binary)} bytes "
                f"follow the JSON header"
            )
    elif not isinstance(data, list):
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

    if size is not None:
        want = math.prod(shape) * np.dtype(DTYPES[dt]).itemsize
        if size != want:
            raise ValueError(
                f"inputs[0] has {size} bytes of binary data, shape {shape} of {dt} needs {want}"
            )
        arr = np.frombuffer(binary, dtype=np.dtype(DTYPES[dt]).newbyteorder("<")).copy()
    else:
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


def _encode(outputs: list[Any], binary: bool = False) -> tuple[list[dict[str, Any]], list[bytes]]:
    """The output tensors (FP32), as JSON data or as raw bytes to append (``binary``)."""
    import torch

    first = outputs[0]
    parts = list(first) if isinstance(first, tuple) else [first]
    out, blobs = [], []
    for k in range(len(parts)):
        t = torch.stack([o[k] if isinstance(o, tuple) else o for o in outputs]).float().cpu()
        entry: dict[str, Any] = {
            "name": "output" if len(parts) == 1 else f"output_{k}",
            "datatype": "FP32",
            "shape": list(t.shape),
        }
        if binary:
            blob = t.contiguous().numpy().astype("<f4").tobytes()
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = t.flatten().tolist()
        out.append(entry)
    return out, blobs
