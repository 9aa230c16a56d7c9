"""``hetserve bench URL``: load any KServe v2 server (hetserve, Triton, KServe) and report
what fraction of requests met their deadline (docs/bench.md).

The pieces, each usable on its own:

- :func:`fetch_model` reads a model's metadata (``GET /v2/models/{m}``) and, where the
  server has Triton's configuration extension, its ``max_batch_size`` and SLO;
- :func:`make_inputs` draws one request's tensors from the metadata (seeded), or takes
  them from a ``.npz`` file;
- :func:`encode` writes an infer request as JSON or with the binary tensor extension;
- :func:`run_open` sends a trace open loop (``experiments.loadgen``: latency from each
  request's scheduled time, so a slow server cannot hide behind a slow sender), and
  :func:`run_closed` a fixed number of clients, each sending when answered;
- :func:`judge` turns answers into outcomes by the client's clock: a 200 within the
  request's SLO is ``ok``, later ``late``; 429 and 503 ``refused``; any other status
  ``error``; no answer in time ``timeout``. Only ``ok`` counts towards attainment and
  goodput: errors and timeouts are misses, not left out.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from hetserve.core.errors import HetserveError
from hetserve.workload.trace import Trace

HEADER_LEN = "Inference-Header-Content-Length"
# the datatypes a request can carry as numbers (BYTES is text: not generated)
NUMPY = {
    "BOOL": "?", "UINT8": "<u1", "UINT16": "<u2", "UINT32": "<u4", "UINT64": "<u8",
    "INT8": "<i1", "INT16": "<i2", "INT32": "<i4", "INT64": "<i8",
    "FP16": "<f2", "FP32": "<f4", "FP64": "<f8",
}  # fmt: skip
OUTCOMES = ("ok", "late", "refused", "error", "timeout")


@dataclass(frozen=True)
class TensorMeta:
    name: str
    datatype: str
    shape: tuple[int, ...]  # as the metadata gives it, -1 for a variable dimension


@dataclass(frozen=True)
class ModelMeta:
    """What the server says of a model: its inputs, whether their first dimension is the
    batch (a ``-1`` there, or Triton's ``max_batch_size`` > 0), and the SLO it serves
    under where it says (hetserve's ``parameters.slo_ms`` in the configuration)."""

    name: str
    inputs: tuple[TensorMeta, ...]
    batched: bool
    slo_ms: float | None = None


def check_url(url: str, allow_remote: bool) -> str:
    """``url`` as ``http://host:port``; a host that is not this machine needs
    ``allow_remote`` (a load tool pointed elsewhere by mistake is a denial of service)."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or parts.path not in ("", "/"):
        raise HetserveError(f"bench: expected a URL like http://127.0.0.1:8000, got {url!r}")
    if not allow_remote and not _loopback(parts.hostname):
        raise HetserveError(
            f"bench: {parts.hostname} is not this machine; pass --allow-remote to load a "
            "server elsewhere (only one you run)"
        )
    return f"http://{parts.netloc}"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return all(
                ipaddress.ip_address(a[4][0]).is_loopback for a in socket.getaddrinfo(host, None)
            )
        except OSError:
            return False


def get_json(url: str, path: str, token: str | None, timeout_s: float) -> tuple[int, Any]:
    """``GET url+path``: the status and the decoded JSON body (a 4xx/5xx's ``error`` text
    where it has one); a server that does not answer is a one-line error."""
    req = urllib.request.Request(url + path)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        body = e.read()[:300].decode("utf-8", "replace")
        with contextlib.suppress(ValueError, AttributeError):
            body = json.loads(body).get("error", body)
        return e.code, body
    except (OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise HetserveError(f"bench: cannot reach {url}: {reason}") from None


def wait_ready(
    url: str, timeout_s: float = 60.0, alive: Callable[[], bool] | None = None,
    path: str = "/v2/health/ready",
) -> bool:  # fmt: skip
    """Polls ``url + path`` until it answers 200 (True), ``timeout_s`` passes or ``alive``
    says the server's process is gone (False): a server started beside a benchmark."""
    import time

    t_end = time.monotonic() + timeout_s
    while time.monotonic() < t_end:
        if alive is not None and not alive():
            return False
        try:
            with urllib.request.urlopen(url + path, timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


def fetch_model(
    url: str, model: str, token: str | None = None, timeout_s: float = 10.0
) -> ModelMeta:
    """The model's metadata (and configuration, where the server has the extension); a
    one-line error naming the model when the server does not serve it."""
    status, meta = get_json(url, f"/v2/models/{model}", token, timeout_s)
    if status != 200 or not isinstance(meta, dict):
        raise HetserveError(f"bench: model {model!r}: the server answered {status}: {meta}")
    try:
        inputs = tuple(
            TensorMeta(str(t["name"]), str(t["datatype"]), tuple(int(d) for d in t["shape"]))
            for t in meta["inputs"]
        )
    except (KeyError, TypeError, ValueError) as e:
        raise HetserveError(
            f"bench: model {model!r}: metadata without inputs' name, datatype and shape ({e})"
        ) from None
    if not inputs:
        raise HetserveError(f"bench: model {model!r}: the metadata lists no inputs")
    status, cfg = get_json(url, f"/v2/models/{model}/config", token, timeout_s)
    batched = all(t.shape and t.shape[0] == -1 for t in inputs)
    slo_ms = None
    if status == 200 and isinstance(cfg, dict):
        batched = batched or int(cfg.get("max_batch_size", 0) or 0) > 0
        slo = ((cfg.get("parameters") or {}).get("slo_ms") or {}).get("string_value")
        try:
            slo_ms = float(slo) if slo is not None else None
        except ValueError:
            slo_ms = None
    return ModelMeta(model, inputs, batched, slo_ms)


def make_inputs(
    meta: ModelMeta,
    seed: int,
    int_range: tuple[int, int] = (0, 2),
    given: Mapping[str, np.ndarray] | None = None,
    dims: Mapping[str, Sequence[int]] | None = None,
) -> dict[str, np.ndarray]:
    """One request's tensors (a batch of one where the model batches): ``given[name]``
    where given (without the batch dimension), else random: floats from a standard
    normal, integers uniform in ``int_range`` (``[0, 2)`` is valid for token ids and masks
    alike), booleans fair. A variable dimension other than the batch takes ``dims[name]``
    (the input's shape without the batch), or is a one-line error saying so."""
    rng = np.random.default_rng(seed)
    out = {}
    for t in meta.inputs:
        if t.datatype not in NUMPY:
            raise HetserveError(
                f"bench: model {meta.name!r}: input {t.name!r} is {t.datatype}; generated "
                f"inputs are numbers ({', '.join(NUMPY)}): give it with --inputs FILE.npz"
            )
        shape = list(t.shape[1:] if meta.batched else t.shape)
        if given is not None and t.name in given:
            x = np.asarray(given[t.name], dtype=NUMPY[t.datatype])
        else:
            if dims is not None and t.name in dims:
                shape = [int(d) for d in dims[t.name]]
            if any(d < 0 for d in shape):
                raise HetserveError(
                    f"bench: model {meta.name!r}: input {t.name!r} has shape {list(t.shape)} "
                    f"with a variable dimension; give it: --shape {meta.name}.{t.name}="
                    + ",".join("N" if d < 0 else str(d) for d in shape)
                )
            kind = np.dtype(NUMPY[t.datatype]).kind
            if kind == "f":
                x = rng.standard_normal(shape).astype(NUMPY[t.datatype])
            elif kind == "b":
                x = rng.random(shape) < 0.5
            else:
                x = rng.integers(int_range[0], int_range[1], size=shape).astype(NUMPY[t.datatype])
        out[t.name] = x[None] if meta.batched else x
    return out


def encode(
    meta: ModelMeta,
    arrays: Mapping[str, np.ndarray],
    binary: bool = True,
    deadline_ms: float | None = None,
) -> tuple[bytes, dict[str, str]]:
    """An infer request's body and headers: the binary tensor extension (raw little-endian
    bytes after the JSON header, outputs asked for as binary) or plain JSON.
    ``deadline_ms``: sent as ``parameters.deadline_ms`` (hetserve's; other servers ignore
    free-form parameters)."""
    params: dict[str, Any] = {}
    if deadline_ms is not None:
        params["deadline_ms"] = deadline_ms
    blobs, tensors = [], []
    for t in meta.inputs:
        x = np.ascontiguousarray(arrays[t.name], dtype=NUMPY[t.datatype])
        entry: dict[str, Any] = {"name": t.name, "shape": list(x.shape), "datatype": t.datatype}
        if binary:
            blob = x.tobytes()
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = x.reshape(-1).tolist()
        tensors.append(entry)
    if binary:
        params["binary_data_output"] = True
    body: dict[str, Any] = {"inputs": tensors}
    if params:
        body["parameters"] = params
    head = json.dumps(body).encode()
    if binary:
        return head + b"".join(blobs), {
            HEADER_LEN: str(len(head)),
            "Content-Type": "application/octet-stream",
        }
    return head, {"Content-Type": "application/json"}


@dataclass
class Judged:
    """Per request of a run: its model, outcome (an index of ``OUTCOMES``), latency from
    its scheduled time (NaN without an answer) and how late it was sent."""

    model: np.ndarray  # model names, per request
    outcome: np.ndarray
    latency_s: np.ndarray
    lag_s: np.ndarray
    time_s: np.ndarray  # scheduled send time (open loop) or the answer's time (closed)
    duration_s: float


def judge(status: np.ndarray, latency_s: np.ndarray, slo_s: np.ndarray) -> np.ndarray:
    """Outcomes (indices of ``OUTCOMES``) by the client's clock (module docstring)."""
    out = np.full(len(status), OUTCOMES.index("error"), dtype=np.int8)
    answered = status == 200
    on_time = answered & (latency_s <= slo_s)
    out[on_time] = OUTCOMES.index("ok")
    out[answered & ~on_time] = OUTCOMES.index("late")
    out[(status == 429) | (status == 503)] = OUTCOMES.index("refused")
    out[status == 0] = OUTCOMES.index("timeout")
    return out


def summary(j: Judged, slos_s: Mapping[str, float]) -> dict[str, Any]:
    """Per model and over all: counts per outcome, attainment (ok / requests), goodput (ok
    per second), latency percentiles of the answered (200) requests and the sender's
    lateness."""

    def one(mask: np.ndarray) -> dict[str, Any]:
        n = int(mask.sum())
        counts = {k: int((j.outcome[mask] == i).sum()) for i, k in enumerate(OUTCOMES)}
        lat = j.latency_s[mask & (j.outcome <= 1)]
        lag = j.lag_s[mask]
        lag = lag[np.isfinite(lag)]

        def pct(a: np.ndarray, q: float) -> float | None:
            return float(np.percentile(a, q)) * 1e3 if len(a) else None

        return {
            "requests": n, **counts,
            "attainment": counts["ok"] / n if n else 0.0,
            "goodput_rps": counts["ok"] / j.duration_s if j.duration_s > 0 else 0.0,
            "offered_rps": n / j.duration_s if j.duration_s > 0 else 0.0,
            "latency_ms": {"p50": pct(lat, 50), "p90": pct(lat, 90), "p99": pct(lat, 99)},
            "sender_late_ms": {"p50": pct(lag, 50), "p99": pct(lag, 99),
                               "max": float(lag.max()) * 1e3 if len(lag) else None},
        }  # fmt: skip

    out: dict[str, Any] = {
        m: {"slo_ms": slos_s[m] * 1e3, **one(j.model == m)} for m in sorted(slos_s)
    }
    out["all"] = one(np.ones(len(j.model), dtype=bool))
    return out


@dataclass
class Prepared:
    """A model's request, ready to send: its metadata, one request's tensors, and the
    prepared body and headers."""

    meta: ModelMeta
    arrays: dict[str, np.ndarray]
    body: bytes
    headers: dict[str, str]


@dataclass
class BenchOptions:
    connections: int = 64
    timeout_s: float = 30.0
    token: str | None = None
    progress: Callable[[int, int, int], None] | None = None  # (sent, answered, total)
    spin_s: float = 0.001  # wake this early and yield until a request is due (loadgen)
    max_connections: int = 1024  # opened on demand beyond ``connections``
    extra: dict[str, Any] = field(default_factory=dict)


def run_open(url: str, trace: Trace, prepared: Mapping[str, Prepared], opt: BenchOptions) -> Judged:
    """Send ``trace`` open loop: each request at its time, its model's prepared body."""
    from hetserve.experiments.loadgen import http_request, open_loop

    payloads = []
    for st in trace.streams:
        p = prepared[st.model]
        hdr = dict(p.headers)
        if opt.token:
            hdr["Authorization"] = f"Bearer {opt.token}"
        payloads.append(http_request(url, f"/v2/models/{st.model}/infer", p.body, hdr))
    n = len(trace)
    progress = None
    if opt.progress is not None:
        cb = opt.progress

        def progress(sent: int, answered: int) -> None:
            cb(sent, answered, n)

    shots = open_loop(url, payloads, trace.time_s, trace.stream_idx, opt.connections,
                      opt.timeout_s, progress, opt.spin_s, opt.max_connections)  # fmt: skip
    slo = np.array([s.slo_s for s in trace.streams])[trace.stream_idx]
    models = np.array([s.model for s in trace.streams])[trace.stream_idx]
    outcome = judge(shots.status, shots.latency_s, slo)
    return Judged(models, outcome, shots.latency_s, shots.lag_s, trace.time_s, trace.duration_s)


def run_closed(
    url: str, model: str, slo_s: float, p: Prepared, clients: int, seconds: float,
    opt: BenchOptions,
) -> Judged:  # fmt: skip
    """``clients`` connections, each sending ``model``'s request again when answered, for
    ``seconds`` (for comparison: a closed loop offers what the server lets it, and its
    latencies omit the waiting a real arrival would have done)."""
    from hetserve.experiments.loadgen import closed_loop_answers, http_request

    hdr = dict(p.headers)
    if opt.token:
        hdr["Authorization"] = f"Bearer {opt.token}"
    run = closed_loop_answers(url, http_request(url, f"/v2/models/{model}/infer", p.body, hdr),
                              clients, seconds)  # fmt: skip
    n = len(run.status)
    outcome = judge(run.status, run.latency_s, np.full(n, slo_s))
    return Judged(np.full(n, model), outcome, run.latency_s, np.zeros(n), np.zeros(n),
                  run.seconds)  # fmt: skip


def load_inputs(path: str | Path) -> dict[str, dict[str, np.ndarray]]:
    """``--inputs FILE.npz``: arrays named ``MODEL/INPUT`` (or ``INPUT`` for every model),
    each one request's tensor without the batch dimension."""
    try:
        with np.load(path) as f:
            items = {k: f[k] for k in f.files}
    except (OSError, ValueError) as e:
        raise HetserveError(f"--inputs {path}: not a readable .npz file ({e})") from None
    out: dict[str, dict[str, np.ndarray]] = {}
    for key, a in items.items():
        model, _, name = key.rpartition("/")
        out.setdefault(model, {})[name] = a
    return out


def plot(j: Judged, slos_s: Mapping[str, float], path: str | Path, title: str) -> Path:
    """Two panels: the latency distribution per model (answered requests, the SLO marked)
    and attainment per second over the run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    for m in sorted(slos_s):
        mask = j.model == m
        lat = np.sort(j.latency_s[mask & (j.outcome <= 1)]) * 1e3
        if len(lat):
            line = a1.plot(lat, np.arange(1, len(lat) + 1) / mask.sum(), label=m)[0]
            a1.axvline(slos_s[m] * 1e3, color=line.get_color(), ls=":", lw=1)
        t = j.time_s[mask]
        if len(t):
            edges = np.arange(0.0, max(j.duration_s, float(t.max())) + 1.0, 1.0)
            total, _ = np.histogram(t, edges)
            ok, _ = np.histogram(t[j.outcome[mask] == 0], edges)
            with np.errstate(invalid="ignore", divide="ignore"):
                a2.plot(edges[:-1], np.where(total > 0, ok / total, np.nan), label=m)
    a1.set_xlabel("latency from the scheduled send, ms (dotted: the SLO)")
    a1.set_ylabel("fraction of requests answered by then")
    a1.set_xscale("log")
    a2.set_xlabel("time, s")
    a2.set_ylabel("attainment per second")
    a2.set_ylim(-0.02, 1.02)
    for a in (a1, a2):
        a.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
