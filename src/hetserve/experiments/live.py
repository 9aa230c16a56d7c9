"""Live load: replay a trace against a running server over HTTP, and compare with the
simulator.

:func:`replay_http` sends each request of a :class:`~hetserve.workload.trace.Trace` at its
arrival time (open loop: a slow server does not slow the sender) to
``POST /v2/models/{m}/infer`` with the stream's SLO as ``parameters.deadline_ms``, using the
binary tensor extension both ways (a ResNet input is 600 KB of floats: as JSON text its
encoding alone would cost the sender and the server more than the model). Each request's
outcome follows the server's answer: ``ok`` (200, on time), ``late`` (200 with
``parameters.late``), ``dropped`` (503, or 429 overload) or ``failed`` (anything else).
:func:`serve_in_thread` runs an app under uvicorn on loopback for the length of a block.
"""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from hetserve.core.errors import HetserveError
from hetserve.core.models import ZOO, ModelCatalog
from hetserve.core.outcome import DROPPED, FAILED, LATE, OK
from hetserve.workload.trace import Trace

HEADER_LEN = "Inference-Header-Content-Length"


@dataclass
class LiveRun:
    outcome: np.ndarray  # per request: core.outcome codes
    latency_s: np.ndarray  # send to answer, as the client saw it
    status: np.ndarray  # HTTP status (0: no answer)
    duration_s: float  # the trace's length
    server_s: np.ndarray | None = None  # the server's own time (``parameters.server_ms``)

    def added_ms(self) -> np.ndarray:
        """What HTTP and the network added to each answered request (client latency minus
        the server's own time), in ms."""
        if self.server_s is None:
            return np.array([])
        d = (self.latency_s - self.server_s) * 1e3
        return d[np.isfinite(d)]

    def summary(self) -> dict[str, Any]:
        n = len(self.outcome)
        ok = int((self.outcome == OK).sum())
        served = self.outcome <= LATE
        lat = self.latency_s[served]
        return {
            "requests": n,
            "ok": ok,
            "late": int((self.outcome == LATE).sum()),
            "dropped": int((self.outcome == DROPPED).sum()),
            "failed": int((self.outcome == FAILED).sum()),
            "attainment": ok / n if n else 0.0,
            "goodput_rps": ok / self.duration_s if self.duration_s > 0 else 0.0,
            "latency_ms": {
                "p50": float(np.percentile(lat, 50)) * 1e3 if len(lat) else None,
                "p99": float(np.percentile(lat, 99)) * 1e3 if len(lat) else None,
            },
        }


def binary_body(
    x: np.ndarray, deadline_ms: float | None = None, name: str = "input",
    stream: str | None = None,
) -> tuple[bytes, dict[str, str]]:  # fmt: skip
    """An infer request carrying ``x`` (with its batch dimension; FP32, or INT64 for
    integer arrays) as input ``name`` in binary, asking for binary outputs, from client
    stream ``stream`` (``parameters.stream``) where given: the body and its headers."""
    integer = np.issubdtype(x.dtype, np.integer)
    blob = np.ascontiguousarray(x, dtype="<i8" if integer else "<f4").tobytes()
    params: dict[str, Any] = {"binary_data_output": True}
    if deadline_ms is not None:
        params["deadline_ms"] = deadline_ms
    if stream is not None:
        params["stream"] = stream
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": name,
                    "shape": list(x.shape),
                    "datatype": "INT64" if integer else "FP32",
                    "parameters": {"binary_data_size": len(blob)},
                }
            ],
            "parameters": params,
        }
    ).encode()
    return head + blob, {HEADER_LEN: str(len(head)), "Content-Type": "application/octet-stream"}


def _answer(status: int, content: bytes, headers: Mapping[bytes, bytes]) -> tuple[int, float]:
    """The outcome, and the server's own time in seconds (NaN when not told)."""
    if status == 200:
        n = int(headers.get(HEADER_LEN.lower().encode(), len(content)))
        params = json.loads(content[:n]).get("parameters", {})
        server_s = params.get("server_ms", math.nan) / 1e3
        return (LATE if params.get("late", 0) else OK), server_s
    if status in (429, 503):
        return DROPPED, math.nan
    return FAILED, math.nan


def replay_http(
    url: str,
    trace: Trace,
    inputs: Mapping[str, np.ndarray],
    token: str | None = None,
    timeout_s: float = 60.0,
    connections: int = 128,
    input_names: Mapping[str, str] | None = None,
    model_catalog: ModelCatalog = ZOO,
) -> LiveRun:
    """Send the trace's requests to the server at ``url`` (``http://host:port``) at their
    arrival times, over ``connections`` keep-alive connections
    (:func:`hetserve.experiments.loadgen.open_loop`; latency counts from each request's
    arrival time); ``inputs[model]``: one request's input (no batch dimension), named
    ``input_names[model]`` (default: the model graph's first input). Each request names
    its trace stream (``parameters.stream``), which a MagicBatch plan queues by; the graphs
    come from ``model_catalog``."""
    from hetserve.experiments.loadgen import http_request, open_loop

    missing = [m for m in trace.models() if m not in inputs]
    if missing:
        raise HetserveError(f"no input for model(s) {', '.join(missing)}")
    payloads = []
    for st in trace.streams:
        name = (input_names or {}).get(st.model) or model_catalog.graph(st.model).inputs[0].name
        body, hdr = binary_body(inputs[st.model][None], st.slo_s * 1e3, name, st.name)
        if token is not None:
            hdr["Authorization"] = f"Bearer {token}"
        payloads.append(http_request(url, f"/v2/models/{st.model}/infer", body, hdr))
    shots = open_loop(url, payloads, trace.time_s, trace.stream_idx, connections, timeout_s)
    n = len(trace)
    outcome = np.full(n, FAILED, dtype=np.int8)
    server_s = np.full(n, np.nan)
    for i in range(n):
        body, headers = shots.bodies[i], shots.headers[i]
        if shots.status[i] and body is not None and headers is not None:
            outcome[i], server_s[i] = _answer(int(shots.status[i]), body, headers)
    return LiveRun(outcome, shots.latency_s, shots.status, trace.duration_s, server_s)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve_in_thread(
    app: Any, port: int | None = None, start_timeout_s: float = 120.0, **uvicorn_options: Any
) -> Iterator[str]:
    """Run ``app`` under uvicorn on 127.0.0.1 in a thread; yields its URL; shuts it down
    gracefully (requests in flight are answered) at the end of the block.
    ``uvicorn_options``: more of ``uvicorn.Config``'s (e.g. ``timeout_keep_alive``)."""
    import uvicorn

    port = port or free_port()
    opts: dict[str, Any] = {"log_level": "error", "access_log": False, **uvicorn_options}
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, **opts))
    th = threading.Thread(target=server.run, name="hetserve-http", daemon=True)
    th.start()
    t_end = time.monotonic() + start_timeout_s
    while not server.started:
        if not th.is_alive():
            raise HetserveError("the HTTP server did not start (see the error above)")
        if time.monotonic() > t_end:
            server.should_exit = True
            raise HetserveError(f"the HTTP server did not start within {start_timeout_s:g} s")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        th.join(timeout=60)
