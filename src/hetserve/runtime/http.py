"""The HTTP front end: the Open Inference Protocol (KServe v2, with Triton's extensions
that standard clients call) over FastAPI.

Routes (each ``/v2/models/{m}/...`` also as ``/v2/models/{m}/versions/{v}/...`` for a
served version ``v``: a zoo model has the one version ``1``, a repository model the
versions its policy serves (``runtime.versions``); the unversioned route is the default
version; other versions are 404, with the reason for one that is UNAVAILABLE):

- ``GET /v2``, ``GET /v2/health/live``, ``GET /v2/health/ready``
- ``GET /v2/models/{m}`` (metadata: the model's tensors), ``GET /v2/models/{m}/ready``
- ``GET /v2/models/{m}/config`` (Triton's model configuration: max_batch_size, tensors)
- ``POST /v2/models/{m}/infer`` (request format in ``runtime.oip``)
- ``GET /v2/models/stats``, ``GET /v2/models/{m}/stats`` (Triton's statistics extension)
- ``POST /v2/repository/index`` (Triton's model repository index)
- ``GET /v2/cluster/workers`` (hetserve's: each worker, where it runs and its state;
  ``Server.workers``)
- ``GET /metrics`` (Prometheus)

Status codes: 400 for a malformed request (the message names the tensor or field, what was
sent and what was expected), 401 without the bearer token when one is set (with
``WWW-Authenticate: Bearer``), 404 for an unknown model, version or route, 405 for a wrong
method, 413 for a body over the limit, 429 when the server holds ``max_pending`` requests,
503 when a request's deadline cannot be met (at arrival or later) or the server is
shutting down, 500 when a worker fails a request (a bug or a lost worker). Every error body
is ``{"error": "..."}``. A client that disconnects before its answer cancels its request
(``Server.infer_rows``): no answer is sent; the access log and
``hetserve_http_responses_total`` say ``499`` (nginx's "client closed request").

The binary tensor extension (Triton's ``binary_data``) is supported both ways: a body whose
``Inference-Header-Content-Length`` header says how long its JSON part is may carry inputs'
bytes after it; outputs come back as raw bytes when asked for, with the same header.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from hetserve import __version__
from hetserve.core.errors import HetserveError
from hetserve.core.plan import Plan
from hetserve.runtime.oip import HEADER_LEN, RequestError, encode_outputs, parse_request, split_body
from hetserve.runtime.operator import Busy
from hetserve.runtime.server import Server

STATUS = {"dropped": 503, "overloaded": 429, "failed": 500, "refused": 503}
CLIENT_CLOSED = 499  # what the log says of a request whose client went away first
WATCH_AFTER_S = 0.02  # an infer request waiting this long has its connection watched
ACCESS = logging.getLogger("hetserve.access")


def _loggable(path: str) -> str:
    """The decoded path as one safe log field: control characters (a ``%0A`` in the URL
    would otherwise start a forged line), quotes and backslashes escaped as ``\\xNN``
    (``\\uNNNN`` beyond Latin-1)."""
    if path.isprintable() and '"' not in path and "\\" not in path:
        return path
    return "".join(_log_char(c) for c in path)


def _log_char(c: str) -> str:
    if c.isprintable() and c not in '"\\':
        return c
    return f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}"


@dataclass(frozen=True)
class HttpConfig:
    token: str | None = None  # require "Authorization: Bearer <token>"
    max_body_bytes: int = 64 << 20
    public_health: bool = True  # health probes answer without the token
    public_metrics: bool = False  # /metrics answers without the token
    access_log: bool = False  # one line per request on the hetserve.access logger


def create_app(
    server: Server,
    token: str | None = None,
    max_body_bytes: int = 64 << 20,
    config: HttpConfig | None = None,
) -> Any:
    """The ASGI app: ``POST .../infer`` is answered by a plain ASGI handler (the hot path:
    no framework routing, middleware or task groups); everything else is a FastAPI app. The
    guard (token, body limit) applies to every request."""
    cfg = config or HttpConfig(token=token, max_body_bytes=max_body_bytes)

    failed: list[str] = []  # why start-up failed, for the lifespan's one-line message

    @asynccontextmanager
    async def lifespan(app: Any) -> Any:
        try:
            server.start()
        except HetserveError as err:
            failed.append(str(err))
            raise
        yield
        await server.stop()  # graceful: answer what is in flight, then release workers

    api = FastAPI(title="hetserve", version=__version__, lifespan=lifespan)

    @api.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Any:
        msg = {404: f"no route {request.url.path}", 405: "method not allowed"}.get(
            exc.status_code, str(exc.detail)
        )
        if exc.status_code == 405:
            msg = f"{request.method} is not allowed on {request.url.path}"
        return JSONResponse({"error": msg}, exc.status_code, headers=exc.headers)

    @api.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Any:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", ()))
        return _error(400, f"{where}: {first.get('msg', 'invalid request')}")

    @api.get("/v2/health/live")
    async def live() -> Any:
        return {"live": True}

    @api.get("/v2/health/ready")
    async def ready() -> Any:
        ok = server.ready
        body = {"ready": ok, "lost_workers": server.lost_workers}
        return JSONResponse(body, status_code=200 if ok else 503)

    @api.get("/v2")
    async def meta() -> Any:
        return {
            "name": "hetserve",
            "version": __version__,
            "extensions": ["binary_tensor_data", "model_configuration", "statistics",
                           "model_repository"],
        }  # fmt: skip

    @api.get("/v2/models/stats")
    async def all_stats() -> Any:
        return {
            "model_stats": [
                e for m in server.models
                for e in server.stats.versions(m, server.cfg.versions.of(m).ready)
            ]
        }  # fmt: skip

    @api.get("/v2/models/{model}")
    async def model_meta(model: str) -> Any:
        if model not in server.models:
            return _unknown(server, model)
        t = server.tensors(model)
        return {
            "name": model,
            "versions": [str(v) for v in server.cfg.versions.of(model).ready],
            "platform": "pytorch",
            "inputs": [_meta(s) for s in t.inputs],
            "outputs": [_meta(s) for s in t.outputs],
        }

    @api.get("/v2/models/{model}/ready")
    async def model_ready(model: str) -> Any:
        if model not in server.models:
            return _unknown(server, model)
        ok = server.model_ready(model)
        return JSONResponse({"name": model, "ready": ok}, status_code=200 if ok else 503)

    @api.get("/v2/models/{model}/config")
    async def model_config(model: str) -> Any:
        if model not in server.models:
            return _unknown(server, model)
        t = server.tensors(model)
        plan = server.setup.plan.models[model]
        return {
            "name": model,
            "platform": "pytorch",
            "backend": "hetserve",
            "max_batch_size": t.max_batch,
            "input": [_config(s) for s in t.inputs],
            "output": [_config(s) for s in t.outputs],
            "parameters": {
                "slo_ms": {"string_value": f"{plan.slo_s * 1e3:g}"},
                "scheduler": {"string_value": server.cfg.scheduler},
            },
        }

    @api.get("/v2/models/{model}/stats")
    async def model_stats(model: str, request: Request) -> Any:
        """Every served version's entry, or the one version the route names."""
        if model not in server.models:
            return _unknown(server, model)
        version = request.scope.get("hetserve.version")
        if version is not None:
            return {"model_stats": [server.stats.of(model, int(version))]}
        ready = server.cfg.versions.of(model).ready
        return {"model_stats": server.stats.versions(model, ready)}

    @api.post("/v2/repository/index")
    async def repository_index() -> Any:
        lost = server.engine is not None and not server.draining
        why = "every pipeline has a lost worker" if lost else ""
        out = server.cfg.versions.index(server.models, server.model_ready, why)
        for m, gone in sorted(server.unloaded.items()):
            v = server.cfg.versions.of(m).default
            out.append({"name": m, "version": str(v), "state": "UNAVAILABLE", "reason": gone})
        return out

    @api.post("/v2/repository/models/{model}/load")
    async def repository_load(model: str) -> Any:
        return await _operator(server.operator.load_model(model), lambda rec: {})

    @api.post("/v2/repository/models/{model}/unload")
    async def repository_unload(model: str) -> Any:
        return await _operator(server.operator.unload_model(model), lambda rec: {})

    @api.get("/v2/control")
    async def control_state() -> Any:
        return server.operator.state()

    @api.post("/v2/control/plan")
    async def control_plan(request: Request) -> Any:
        try:
            plan = Plan.from_json(json.loads(await request.body()), "request body")
        except json.JSONDecodeError as e:
            return _error(
                400, f"request body: expected a plan's JSON (hetserve plan --output): {e}"
            )
        except HetserveError as e:
            return _error(400, str(e))
        return await _operator(server.operator.apply_plan(plan), lambda rec: rec.to_json())

    @api.get("/v2/cluster/workers")
    async def cluster_workers() -> Any:
        return server.workers()

    @api.get("/metrics")
    async def metrics() -> Any:
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(server.scrape(), media_type=CONTENT_TYPE_LATEST)

    return _OipApp(api, server, cfg, failed)


async def _operator(work: Any, body: Any) -> Any:
    """An operator's change (load, unload, a plan), awaited: 200 with ``body(record)``
    once switched; 409 while another re-plan or switch is under way; 400 with the
    reason where it could not be made."""
    try:
        rec = await work
    except Busy as e:
        return _error(409, str(e))
    except HetserveError as e:
        return _error(400, str(e))
    return body(rec) if rec is not None else {}


def _meta(s: Any) -> dict[str, Any]:
    return {"name": s.name, "datatype": s.datatype, "shape": [-1, *s.shape]}


def _config(s: Any) -> dict[str, Any]:
    return {"name": s.name, "data_type": f"TYPE_{s.datatype}", "dims": list(s.shape)}


def _error(status: int, msg: str) -> Any:
    return JSONResponse({"error": msg}, status_code=status)


def _unknown(server: Server, model: str) -> Any:
    return _error(404, _unknown_text(server, model))


def _unknown_text(server: Server, model: str) -> str:
    """Why ``model`` is not served: UNAVAILABLE with its reason (a repository model that
    could not load), or unknown."""
    why = server.unloaded.get(model)
    if why is not None:
        return f"model {model!r} is UNAVAILABLE: {why}"
    gone = server.cfg.versions.unavailable.get(model)
    if gone is not None:
        return f"model {model!r} is UNAVAILABLE: {gone[1]}"
    return f"unknown model {model!r}; served: {', '.join(server.models)}"


_JSON = [(b"content-type", b"application/json")]
_PUBLIC_HEALTH = ("/v2/health/live", "/v2/health/ready")


def _route(path: str) -> str:
    """A bounded label for the metrics: which kind of route a path is."""
    if path.endswith("/infer"):
        return "infer"
    if path.startswith("/v2/health"):
        return "health"
    if path == "/metrics":
        return "metrics"
    if path.startswith("/v2/models") or path.startswith("/v2/repository") or path == "/v2":
        return "metadata"
    if path.startswith("/v2/cluster"):
        return "cluster"
    if path.startswith("/v2/control"):
        return "control"
    return "other"


class _OipApp:
    """ASGI: the guard (token, body limit) for every request, versioned paths, the infer
    route, and the FastAPI app for the rest (and for the lifespan)."""

    def __init__(self, api: Any, server: Server, cfg: HttpConfig, failed: list[str]) -> None:
        self.api = api
        self.failed = failed
        self.server = server
        self.cfg = cfg
        self.token = None if cfg.token is None else cfg.token.encode()
        self.max_body = cfg.max_body_bytes

    def _lifespan_send(self, send: Any) -> Any:
        """The lifespan's messages, where a start-up that failed with a
        :class:`HetserveError` says so in one line (not the traceback Starlette sends)."""

        async def one_line(msg: dict[str, Any]) -> None:
            if msg["type"] == "lifespan.startup.failed" and self.failed:
                msg = {**msg, "message": f"hetserve: error: {self.failed[-1]}"}
            await send(msg)

        return one_line

    def _authorised(self, headers: dict[bytes, bytes], path: str) -> bool:
        if self.token is None:
            return True
        if (self.cfg.public_health and path in _PUBLIC_HEALTH) or (
            self.cfg.public_metrics and path == "/metrics"
        ):
            return True
        scheme, _, value = headers.get(b"authorization", b"").partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(value.strip(), self.token)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return await self.api(scope, receive, self._lifespan_send(send))
        if scope["type"] != "http":
            return await self.api(scope, receive, send)
        t0 = time.perf_counter()
        status_box = [0]

        async def counted(msg: dict[str, Any]) -> None:
            if msg["type"] == "http.response.start":
                status_box[0] = msg["status"]
            await send(msg)

        try:
            await self._handle(scope, receive, counted)
        finally:
            path: str = scope["path"]
            if not status_box[0] and scope.get("hetserve.client_gone"):
                status_box[0] = CLIENT_CLOSED
            self.server.metrics.http(_route(path), status_box[0])
            if self.cfg.access_log:
                client = scope.get("client") or ("-", 0)
                ACCESS.info(
                    '%s "%s %s" %d %.1f ms', client[0], scope["method"], _loggable(path),
                    status_box[0], 1e3 * (time.perf_counter() - t0),
                )  # fmt: skip

    async def _handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = dict(scope["headers"])
        path: str = scope["path"]
        if not self._authorised(headers, path):
            return await _send(
                send, 401, "missing or wrong bearer token",
                [(b"www-authenticate", b'Bearer realm="hetserve"')],
            )  # fmt: skip
        size = headers.get(b"content-length", b"")
        if size.isdigit() and int(size) > self.max_body:
            return await _send(
                send, 413, f"request body of {int(size)} bytes exceeds {self.max_body}"
            )
        if path.startswith("/v2/models/") and "/versions/" in path:
            model, _, rest = path[len("/v2/models/") :].partition("/versions/")
            version, _, tail = rest.partition("/")
            if "/" in model:
                return await _send(send, 404, f"no route {path}")
            if model not in self.server.models:
                served = ", ".join(self.server.models)
                return await _send(send, 404, f"unknown model {model!r}; served: {served}")
            _, err = self.server.cfg.versions.parse(model, version)
            if err:
                return await _send(send, 404, err)
            path = f"/v2/models/{model}" + (f"/{tail}" if tail else "")
            scope = {**scope, "path": path, "raw_path": path.encode(), "hetserve.version": version}
        if path.startswith("/v2/models/") and path.endswith("/infer"):
            model = path[len("/v2/models/") : -len("/infer")]
            if "/" not in model:
                if scope["method"] != "POST":
                    return await _send(
                        send, 405, f"{scope['method']} is not allowed on {path}; use POST",
                        [(b"allow", b"POST")],
                    )  # fmt: skip
                chunks: list[bytes] = []  # joined once: growing a bytearray costs ~1 ms/MB
                size_in = 0
                while True:
                    msg = await receive()
                    if msg["type"] == "http.disconnect":
                        return None
                    chunk = msg.get("body", b"")
                    chunks.append(chunk)
                    size_in += len(chunk)
                    if size_in > self.max_body:
                        return await _send(send, 413, f"request body exceeds {self.max_body}")
                    if not msg.get("more_body", False):
                        break
                raw = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                head = headers.get(HEADER_LEN.lower().encode())
                version = scope.get("hetserve.version")
                answer = await _unless_gone(
                    _infer(self.server, model, raw, head, version), receive, scope
                )
                if answer is not None:
                    await _respond(send, *answer)
                return None
        return await self.api(scope, receive, send)


async def _unless_gone(work: Any, receive: Any, scope: dict[str, Any]) -> Any:
    """Await ``work`` (the body is read), unless the client disconnects first (the ASGI
    server's ``receive`` then says ``http.disconnect``): ``work`` is cancelled, which
    cancels its request (``Server.infer_rows``), ``scope["hetserve.client_gone"]`` is
    set, and the answer is None. The watch on ``receive`` starts only once the request
    has waited ``WATCH_AFTER_S`` (most are answered sooner, and a task per request costs
    the front end a tenth of its CPU); a client gone before then is noticed then."""
    me = asyncio.current_task()
    if me is None:
        return await work
    gone = False
    watch: asyncio.Future[Any] | None = None

    def on_message(t: asyncio.Future[Any]) -> None:
        nonlocal gone
        ok = not t.cancelled() and t.exception() is None
        if ok and t.result().get("type") == "http.disconnect":
            gone = True
            me.cancel()

    def start_watch() -> None:
        nonlocal watch
        watch = asyncio.ensure_future(receive())
        watch.add_done_callback(on_message)

    timer = asyncio.get_running_loop().call_later(WATCH_AFTER_S, start_watch)
    try:
        return await work
    except asyncio.CancelledError:
        if not gone:
            raise
        me.uncancel()
        scope["hetserve.client_gone"] = True
        return None
    finally:
        timer.cancel()
        if watch is not None:
            watch.remove_done_callback(on_message)
            watch.cancel()


async def _send(send: Any, status: int, msg: str, headers: list[Any] | None = None) -> None:
    await _respond(send, status, json.dumps({"error": msg}).encode(), [*_JSON, *(headers or [])])


async def _respond(send: Any, status: int, body: bytes, headers: list[Any]) -> None:
    length = (b"content-length", str(len(body)).encode())
    await send({"type": "http.response.start", "status": status, "headers": [*headers, length]})
    await send({"type": "http.response.body", "body": body})


def _fail(status: int, msg: str) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    return status, json.dumps({"error": msg}).encode(), _JSON


async def _infer(
    server: Server, model: str, raw: bytes, head: bytes | None, route_version: str | None = None
) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    """One infer request (``route_version``: the version its route names, if any): the
    status, the body and the headers of the answer."""
    if model not in server.models:
        return _fail(404, _unknown_text(server, model))
    if server.draining:
        return _fail(503, "the server is shutting down")
    tensors = server.tensors(model)
    try:
        body, binary = split_body(raw, head)
        version = _check_names(body, model, route_version, server)
        req = parse_request(body, binary, tensors, decode=not server.cfg.emulate)
    except RequestError as e:
        return _fail(400, f"model {model!r}: {e}")
    r = await server.infer_rows(model, req.batch, req.n, req.deadline_s, req.stream, version)
    if r.outcome in STATUS:
        return _fail(STATUS[r.outcome], f"request {r.outcome}: {r.reason or r.outcome}")
    used = version if version is not None else server.cfg.versions.of(model).default
    out: dict[str, Any] = {"model_name": model, "model_version": str(used), "outputs": []}
    if req.id is not None:
        out["id"] = req.id
    # whether it was late, and the server's time for the request (arrival to answer):
    # what a client's latency adds on top is the HTTP and network part
    out["parameters"] = {"late": int(r.outcome == "late"),
                         "server_ms": round(1e3 * r.latency_s, 3)}  # fmt: skip
    if r.output is not None:
        try:
            out["outputs"], blobs = encode_outputs(r.output, tensors, req)
        except Exception as e:  # the protocol's JSON error, never a plain-text 500
            why = (
                f"bad_output: model {model!r}: its outputs could not be encoded: "
                f"{type(e).__name__}: {e}"
            )
            server.encode_failed(model, 1, why)
            return _fail(500, why)
        if blobs:
            head_bytes = json.dumps(out).encode()
            extra = [
                (b"content-type", b"application/octet-stream"),
                (HEADER_LEN.lower().encode(), str(len(head_bytes)).encode()),
            ]
            return 200, head_bytes + b"".join(blobs), extra
    return 200, json.dumps(out).encode(), _JSON


def _check_names(
    body: dict[str, Any], model: str, route_version: str | None, server: Server
) -> int | None:
    """Clients (kserve's) repeat the model's name and version in the body: they must match
    the route's. The version asked for: None for the default, else a served version."""
    name = body.pop("model_name", model)
    if name != model:
        raise RequestError(f"model_name {name!r} in the body, but the route names {model!r}")
    given = body.pop("model_version", None)
    given = None if given in ("", None) else str(given)
    if route_version is not None and given is not None and given != route_version:
        raise RequestError(
            f"model_version {given!r} in the body, but the route names version {route_version!r}"
        )
    version, err = server.cfg.versions.parse(model, route_version or given)
    if err:
        raise RequestError(f"model_version: {err}")
    return version
