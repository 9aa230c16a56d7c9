"""Benchmark: a bounded soak of a real ``hetserve serve`` process on loopback (issue 44,
item 4): is every request answered exactly once, and does the server stay flat?

The server is started as a user starts it: ``python -m hetserve serve --models
resnet18,bert-base --slo resnet18=2000,bert-base=4000 --profiles DIR --cpu-threads 1
--engine threads --port 0`` in a session of its own, its output (with the access log) to
a file, ``HETSERVE_CACHE`` in a temporary folder, the profiles from ``hetserve profile
estimate --cluster local-cpu --batches 1-8``. (``--engine threads`` is given: the
default engine is ``ray`` even on ``local-cpu``.)

The client sends from one seeded schedule, open loop: Poisson arrivals, ``--rate`` of
them valid requests of one row to either model (each answered 200, or 503 when dropped or
refused), and at ``--share`` each, mixed in:

- ``malformed``: bodies that break the protocol in one of several ways (not JSON, an
  unknown input, a wrong shape, a wrong datatype, a short binary part, a negative
  ``timeout``): 400;
- ``unknown``: a valid body to a model that is not served: 404;
- ``abandoned``: a valid request whose client closes the connection 50 ms after it
  started sending it: the server counts it ``cancelled`` and logs 499 (or, when its answer
  was on its way by then, counts that answer: the documented race, which resnet18's
  ~55 ms on this CPU makes common);
- ``tight``: a valid request with ``parameters.timeout`` (Triton's, microseconds) of
  50 ms (below the profiled best case: refused 503 at arrival by admission) or of twice
  the model's profiled batch-1 latency (admitted unless its model's queue is long, then
  answered 200, or 503 ``deadline`` at its deadline when still queued then).

Every request has a connection of its own (``Connection: close``), so a slow answer
never holds up the next request, and the client can abandon one request without touching
another; latency counts from the scheduled send time (no coordinated omission).
Every 5 s the server's resident memory, threads and open files (``/proc/PID``) and its
requests in flight (``/metrics``) are sampled. At the end the client waits for every
answer, scrapes ``/metrics``, sends SIGTERM and waits for exit 0, then compares what the
client saw with what the server counted (``hetserve_requests_total``,
``hetserve_http_responses_total``, the access log) and checks: per model, the server
counted each request once and the answers agree (an abandoned request the server
answered may count as answered); every malformed request got 400 and every unknown
model 404; 499s = cancelled in the metrics and the access log; one access-log line per
request; no 500; no request without an answer (``--hang-s``) and no connection error;
every 503 ``deadline`` within ``--slack-s`` of its deadline; exit 0 on SIGTERM, no
traceback in the log; flat: from the middle of the load to its end resident memory grows
by at most 10% (or 32 MiB) and threads not at all, and after the drain the open files are
back to what they were before the load.

Run: ``.venv/bin/python benchmarks/bench_soak.py [--duration 180] [--rate 2.2]
[--seed 0] [--out soak.json]``. Prints the tables, writes them to ``--out`` as JSON, and
exits 1 with one line per failed check. The server's log stays in the printed folder.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from hetserve.core.provenance import provenance_line

MODELS = {"resnet18": 2000.0, "bert-base": 4000.0}  # SLO in ms
KINDS = ("valid", "malformed", "unknown", "abandoned", "tight")
TO_MODEL = ("valid", "abandoned", "tight")  # the kinds that reach a model's queue
ABANDON_S = 0.05
SAMPLE_S = 5.0
UNKNOWN_MODEL = "no-such-model"
# server outcomes of hetserve_requests_total (runtime.server.Result.outcome)
OUTCOMES = ("ok", "late", "dropped", "refused", "overloaded", "failed", "cancelled")


# ------------------------------------------------------------------------------ payloads


def _with_params(body: bytes, hdr: dict[str, str], **params: Any) -> tuple[bytes, dict]:
    """``body`` (a binary infer request) with ``params`` added to its request parameters."""
    from hetserve.runtime.oip import HEADER_LEN

    n = int(hdr[HEADER_LEN])
    head = json.loads(body[:n])
    head.setdefault("parameters", {}).update(params)
    raw = json.dumps(head).encode()
    return raw + body[n:], {**hdr, HEADER_LEN: str(len(raw))}


def _batch1_ms(profiles: Path) -> dict[str, float]:
    """Each model's profiled batch-1 latency (its blocks' sum, a whole CPU)."""
    total: Counter[str] = Counter()
    with open(profiles / "latency.csv") as f:
        for row in csv.DictReader(f):
            if row["batch"] == "1" and row["share"] == "1" and row["model"] in MODELS:
                total[row["model"]] += float(row["latency_us"]) / 1e3
    return dict(total)


def payloads(url: str, batch1_ms: dict[str, float]) -> dict[tuple[str, str, int], bytes]:
    """The request bytes of each (model, kind, variant)."""
    from hetserve.experiments.live import binary_body
    from hetserve.experiments.loadgen import http_request
    from hetserve.zoo.registry import build

    out: dict[tuple[str, str, int], bytes] = {}

    def req(model: str, body: bytes, hdr: dict[str, str]) -> bytes:
        return http_request(url, f"/v2/models/{model}/infer", body, {**hdr, "Connection": "close"})

    for m in MODELS:
        spec = build(m).input_spec
        x = spec.example(1).numpy()
        body, hdr = binary_body(x, name=spec.name)
        out[m, "valid", 0] = out[m, "abandoned", 0] = req(m, body, hdr)
        out["-", "unknown", 0] = req(UNKNOWN_MODEL, body, hdr)  # (the last model's body)
        for v, ms in enumerate((50.0, 2 * batch1_ms[m])):
            out[m, "tight", v] = req(m, *_with_params(body, hdr, timeout=int(ms * 1e3)))
        other = x.astype(np.float32) if np.issubdtype(x.dtype, np.integer) else x.astype(np.int64)
        bad = [
            (b"{not json", {"Content-Type": "application/json"}),
            binary_body(x, name="no_such_input"),
            binary_body(x[..., :-1], name=spec.name),  # the last dimension one short
            binary_body(other, name=spec.name),  # FP32 for INT64, INT64 for FP32
            (body[:-8], hdr),  # the binary part 8 bytes short of its binary_data_size
            _with_params(body, hdr, timeout=-5),
        ]
        for v, (b, h) in enumerate(bad):
            out[m, "malformed", v] = req(m, b, h)
    return out


def schedule(duration: float, rate: float, share: float, seed: int) -> list[tuple]:
    """(send time s, kind, model, variant) of every request: Poisson arrivals whose valid
    ones come at ``rate`` per second, each other kind at ``share`` of all."""
    rng = np.random.default_rng(seed)
    total = rate / (1 - share * (len(KINDS) - 1))
    p = [1 - share * (len(KINDS) - 1)] + [share] * (len(KINDS) - 1)
    out, t = [], 0.0
    models = list(MODELS)
    while True:
        t += rng.exponential(1 / total)
        if t >= duration:
            return out
        kind = str(rng.choice(KINDS, p=p))
        model = models[int(rng.integers(len(models)))]
        variant = int(rng.integers(6 if kind == "malformed" else 2 if kind == "tight" else 1))
        out.append((t, kind, "-" if kind == "unknown" else model, variant))


# -------------------------------------------------------------------------------- client


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    else:
        body = await reader.read()
    return status, headers, body


async def _get(host: str, port: int, path: str, timeout: float = 10.0) -> str:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        _, _, body = await asyncio.wait_for(_read_response(reader), timeout)
        return body.decode()
    finally:
        writer.close()


def _what(status: int, headers: dict[str, str], body: bytes) -> str:
    """What an answer says: ok / late for 200, ``STATUS outcome:kind`` for an error."""
    if status == 200:
        n = int(headers.get("inference-header-content-length", len(body)))
        late = json.loads(body[:n]).get("parameters", {}).get("late", 0)
        return "late" if late else "ok"
    try:
        error = json.loads(body).get("error", "")
    except ValueError:
        error = ""
    m = re.match(r"request (\w+): (\w+)", error)
    return f"{status} {m.group(1)}:{m.group(2)}" if m else str(status)


class Client:
    def __init__(self, url: str, reqs: list[tuple], data: dict, hang_s: float) -> None:
        u = urlsplit(url)
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 80
        self.reqs, self.data, self.hang_s = reqs, data, hang_s
        # per request: status (0: none), what it said, latency from the scheduled send,
        # latency from the actual send, how late it was sent
        self.rec: list[dict[str, Any]] = [{} for _ in reqs]
        self.t0 = 0.0

    async def one(self, i: int) -> None:
        t_sched, kind, _model, _v = self.reqs[i]
        key = (self.reqs[i][2], kind, self.reqs[i][3])
        rec = self.rec[i]
        sent = time.perf_counter()
        rec["lag_s"] = sent - self.t0 - t_sched
        limit = sent + ABANDON_S if kind == "abandoned" else self.t0 + t_sched + self.hang_s

        async def exchange() -> tuple[int, dict[str, str], bytes]:
            reader, writer = await asyncio.open_connection(self.host, self.port)
            try:  # (closed when answered, and when abandoned: wait_for cancels this)
                writer.write(self.data[key])
                await writer.drain()
                return await _read_response(reader)
            finally:
                writer.close()

        try:
            got = await asyncio.wait_for(exchange(), limit - time.perf_counter())
            now = time.perf_counter()
            rec.update(status=got[0], what=_what(*got), sent_s=now - sent)
            rec["latency_s"] = now - self.t0 - t_sched
        except TimeoutError:
            rec.update(status=0, what="abandoned" if kind == "abandoned" else "hang")
        except (OSError, asyncio.IncompleteReadError, ValueError) as e:
            rec.update(status=0, what=f"error {type(e).__name__}: {e}")

    async def run(self, sampler: Any) -> None:
        tasks = []
        stop = asyncio.Event()
        samples = asyncio.ensure_future(sampler(stop))
        self.t0 = time.perf_counter()
        for i, (t, *_) in enumerate(self.reqs):
            delay = self.t0 + t - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(self.one(i)))
        await asyncio.gather(*tasks)
        stop.set()
        await samples


# ----------------------------------------------------------------------- server, samples


def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        m = re.match(r"^(\w+)(?:\{(.*)\})? (\S+)$", line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            out.append((m.group(1), labels, float(m.group(3))))
    return out


def metric(rows: list, name: str, **labels: str) -> float:
    return sum(
        v for n, lab, v in rows if n == name and all(lab.get(k) == x for k, x in labels.items())
    )


def proc_sample(pid: int) -> dict[str, float]:
    s = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k == "VmRSS":
                s["rss_mib"] = int(v.split()[0]) / 1024
            elif k == "Threads":
                s["threads"] = int(v)
    fds = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):  # (closed meanwhile)
            fds[fd] = os.readlink(f"/proc/{pid}/fd/{fd}")
    s["fds"] = len(fds)
    s["fd_kinds"] = dict(Counter(re.sub(r"\[\d+\]$", "", t) for t in fds.values()))
    return s


def start_serve(tmp: Path, args: list[str], env: dict, timeout_s: float = 300.0) -> tuple:
    """(process, base URL, log path) once ``/v2/health/ready`` answers 200 (as
    tests/runtime/serving.py starts it)."""
    import httpx

    path = tmp / "serve.out"
    path.write_text("")
    out = open(path, "a")
    proc = subprocess.Popen(
        [sys.executable, "-m", "hetserve", "serve", "--port", "0", *args],
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        m = re.search(r"at http://127\.0\.0\.1:(\d+)/v2", path.read_text())
        if m:
            url = f"http://127.0.0.1:{m.group(1)}"
            try:
                if httpx.get(f"{url}/v2/health/ready", timeout=2).status_code == 200:
                    return proc, url, path
            except httpx.TransportError:
                pass
        if proc.poll() is not None:
            sys.exit(f"serve exited with {proc.returncode}:\n{path.read_text()}")
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    sys.exit(f"serve did not become ready in {timeout_s:.0f} s:\n{path.read_text()}")


# ------------------------------------------------------------------------------ analysis


def client_counts(reqs: list[tuple], rec: list[dict]) -> dict[str, Counter]:
    """Per model (and ``-`` for the unknown one): how many requests of each kind were
    sent, and what came back."""
    out: dict[str, Counter] = {}
    for (_, kind, model, _), r in zip(reqs, rec, strict=True):
        c = out.setdefault(model, Counter())
        c["sent"] += 1
        c[f"sent {kind}"] += 1
        c[f"got {r.get('what', 'nothing')}"] += 1
        c[f"{kind} -> {r.get('what', 'nothing')}"] += 1
    return out


def _outcome(what: str) -> str | None:
    """The server outcome an answer the client saw stands for (``cancelled``: the client
    closed first); None for what no outcome explains (a hang, a 500, an error)."""
    if what in ("ok", "late"):
        return what
    if what == "abandoned":
        return "cancelled"
    m = re.match(r"(503|429) (dropped|refused|overloaded):", what)
    return m.group(2) if m else None


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


def analyse(
    reqs: list[tuple],
    rec: list[dict],
    rows: list,
    log: str,
    rc: int | None,
    samples: list,
    duration: float,
    slack_s: float,
) -> dict[str, Any]:
    cc = client_counts(reqs, rec)
    checks: list[tuple[str, bool, str]] = []

    def check(name: str, ok: bool, why: str) -> None:
        checks.append((name, bool(ok), why))

    table = []
    for m in MODELS:
        c = cc.get(m, Counter())
        server = {o: metric(rows, "hetserve_requests_total", model=m, outcome=o) for o in OUTCOMES}
        seen = Counter({o: 0 for o in OUTCOMES})
        others: Counter[str] = Counter()
        for (_, kind, mm, _), r in zip(reqs, rec, strict=True):
            if mm == m and kind in TO_MODEL:
                o = _outcome(r.get("what", "nothing"))
                if o is None:
                    others[f"{kind} -> {r.get('what', 'nothing')}"] += 1
                else:
                    seen[o] += 1
        reached = sum(c[f"sent {k}"] for k in TO_MODEL)
        extra = {o: server[o] - seen[o] for o in OUTCOMES if o != "cancelled"}
        race = sum(extra.values())
        for o in OUTCOMES:
            table.append({"model": m, "what": o, "client": seen[o], "server": server[o]})
        table.append(
            {"model": m, "what": "requests", "client": reached, "server": sum(server.values())}
        )
        check(
            f"{m}: every request counted once",
            sum(server.values()) == reached,
            f"{m}: the client sent {reached} requests to it, the server counted "
            f"{sum(server.values()):.0f} ({server})",
        )
        check(
            f"{m}: answers agree",
            all(v >= 0 for v in extra.values()) and race + server["cancelled"] == seen["cancelled"],
            f"{m}: client saw {dict(seen)}, server counted {server} (an abandoned request whose "
            f"answer was on its way when the client closed may count as answered)",
        )
        check(f"{m}: no other answers", not others, f"{m}: unexpected answers {others}")
        xs = [
            r["latency_s"]
            for (_, k, mm, _), r in zip(reqs, rec, strict=True)
            if mm == m and k == "valid" and r.get("what") in ("ok", "late")
        ]
        table.append(
            {"model": m, "what": "race (abandoned, yet answered)", "client": "", "server": race}
        )
        table.append(
            {
                "model": m,
                "what": "valid 200 latency p50/p99/max ms",
                "client": (
                    f"{_pct(xs, 50) * 1e3:.0f}/{_pct(xs, 99) * 1e3:.0f}/"
                    f"{max(xs, default=float('nan')) * 1e3:.0f}"
                ),
                "server": "",
            }
        )
    # what never reaches a model: 400 and 404
    c_all = Counter()
    for c in cc.values():
        c_all.update(c)
    malformed, unknown = c_all["sent malformed"], c_all["sent unknown"]
    got400 = c_all["malformed -> 400"]
    got404 = c_all["unknown -> 404"]
    http = {
        s: metric(rows, "hetserve_http_responses_total", route="infer", status=s)
        for s in ("200", "400", "404", "429", "499", "500", "503")
    }
    access = Counter(re.findall(r'hetserve\.access: \S+ "POST /v2/models/[^/]+/infer" (\d+) ', log))
    statuses = Counter(str(r.get("status", 0)) for r in rec)
    table += [
        {
            "model": "*",
            "what": "malformed -> 400",
            "client": f"{got400}/{malformed}",
            "server": http["400"],
        },
        {
            "model": "*",
            "what": "unknown -> 404",
            "client": f"{got404}/{unknown}",
            "server": http["404"],
        },
        {
            "model": "*",
            "what": "499 (metrics / access log)",
            "client": "",
            "server": f"{http['499']:.0f} / {access['499']}",
        },
        {
            "model": "*",
            "what": "500 (client / server)",
            "client": statuses["500"],
            "server": http["500"],
        },
        {
            "model": "*",
            "what": "no answer (hang) / error",
            "client": (
                f"{c_all['got hang']} / "
                f"{sum(v for k, v in c_all.items() if k.startswith('got error'))}"
            ),
            "server": "",
        },
    ]
    check(
        "malformed -> 400",
        got400 == malformed and http["400"] == malformed,
        f"{malformed} malformed requests: client got 400 for {got400}, the server counted "
        f"{http['400']:.0f} 400s; {[k for k in c_all if k.startswith('malformed ->')]}",
    )
    check(
        "unknown model -> 404",
        got404 == unknown and http["404"] == unknown,
        f"{unknown} requests to an unknown model: client got 404 for {got404}, the server "
        f"counted {http['404']:.0f}",
    )
    cancelled = sum(
        metric(rows, "hetserve_requests_total", model=m, outcome="cancelled") for m in MODELS
    )
    check(
        "499 = cancelled",
        http["499"] == cancelled == access["499"],
        f"cancelled {cancelled:.0f}, 499 in metrics {http['499']:.0f}, in the access log "
        f"{access['499']}",
    )
    # the access log against the client: a line per request, with the status the client
    # got; an abandoned request's line says 499, or (the race) the answer it was sent
    gone = (
        statuses.get("0", 0)
        - c_all["got hang"]
        - sum(v for k, v in c_all.items() if k.startswith("got error"))
    )
    more = {
        k: access[k] - statuses[k] for k in set(access) | set(statuses) if k not in ("0", "499")
    }
    check(
        "access log: one line per request",
        sum(access.values()) == len(reqs)
        and all(v >= 0 for v in more.values())
        and sum(more.values()) + access["499"] == gone,
        f"{len(reqs)} requests sent, {sum(access.values())} infer lines in the access log; "
        f"log statuses {dict(access)}, client statuses {dict(statuses)} (0: abandoned)",
    )
    check(
        "no 500",
        statuses["500"] == 0 and http["500"] == 0,
        f"500s: client {statuses['500']}, server {http['500']:.0f}",
    )
    hung = [i for i, r in enumerate(rec) if r.get("what") == "hang"]
    errors = [r["what"] for r in rec if r.get("what", "").startswith("error")]
    check("no hang", not hung, f"{len(hung)} requests got no answer (first: {hung[:5]})")
    check("no connection error", not errors, f"{len(errors)} connection errors: {errors[:3]}")
    # a 503 deadline comes at the deadline: its latency from the send is at most the
    # deadline (the request's timeout, else its model's SLO) plus slack
    over = []
    for (_, kind, m, v), r in zip(reqs, rec, strict=True):
        if r.get("what", "").startswith("503 dropped:deadline"):
            limit = MODELS[m] / 1e3 if kind != "tight" else TIGHT_S[m][v]
            over.append(r["sent_s"] - limit)
    table.append(
        {
            "model": "*",
            "what": "503 deadline: max answer after deadline ms",
            "client": f"{max(over, default=0) * 1e3:.0f} (n={len(over)})",
            "server": "",
        }
    )
    # the requests the server's stop line says it saw: every one it counted
    stop = re.search(r"stopped \(SIGTERM\); (\d+) requests", log)
    counted = int(metric(rows, "hetserve_requests_total"))
    table.append(
        {
            "model": "*",
            "what": "requests in the server's stop line / its metrics",
            "client": sum(1 for _, k, _, _ in reqs if k in TO_MODEL),
            "server": f"{stop.group(1) if stop else '-'} / {counted}",
        }
    )
    check(
        "stop line counts every request",
        stop is not None and int(stop.group(1)) == counted,
        f"the stop line says {stop.group(1) if stop else 'nothing'}, the metrics {counted}",
    )
    check(
        "deadline drops on time",
        max(over, default=0) <= slack_s,
        f"a 503 deadline came {max(over, default=0) * 1e3:.0f} ms after its deadline "
        f"(allowed {slack_s * 1e3:.0f})",
    )
    check("exit 0", rc == 0, f"the server exited with {rc}")
    check("stopped on SIGTERM", "stopped (SIGTERM)" in log, "no 'stopped (SIGTERM)' in the log")
    check(
        "no traceback",
        "Traceback" not in log,
        f"{log.count('Traceback')} tracebacks in the server log",
    )
    # flat: from the middle of the load to its end (warm-up done), resident memory
    # grows by at most 10% (or 32 MiB), and threads by none; after the drain, open files
    # are back to what they were before the load
    load = [s for s in samples[1:-1] if s["t_s"] >= 0] or samples  # (the load's samples)
    mid = min(load, key=lambda s: abs(s["t_s"] - duration / 2))
    end = load[-1]
    before, after = samples[0], samples[-1]
    grow = end["rss_mib"] - mid["rss_mib"]
    check(
        "memory flat",
        grow <= max(0.10 * mid["rss_mib"], 32.0),
        f"RSS grew {grow:.0f} MiB from {mid['rss_mib']:.0f} MiB at {mid['t_s']:.0f} s to "
        f"{end['rss_mib']:.0f} MiB at {end['t_s']:.0f} s",
    )
    most_late = max(s["threads"] for s in load if s["t_s"] >= mid["t_s"])
    most_early = max(s["threads"] for s in samples if s["t_s"] <= mid["t_s"])
    check(
        "threads flat",
        most_late <= most_early,
        f"threads reached {most_late} in the second half of the load, {most_early} before",
    )
    check(
        "open files back",
        after["fds"] <= before["fds"],
        f"{before['fds']} open files before the load, {after['fds']} after it (before: "
        f"{before['fd_kinds']}, after: {after['fd_kinds']})",
    )
    resources = {
        k: {
            "before load": before[k],
            "first": load[0][k],
            "max": max(s[k] for s in load),
            "last": end[k],
            "after drain": after[k],
        }
        for k in ("rss_mib", "threads", "fds")
    }
    return {
        "table": table,
        "resources": resources,
        "checks": [{"check": n, "ok": ok, "why": "" if ok else w} for n, ok, w in checks],
        "client": {m: dict(c) for m, c in cc.items()},
        "http_infer": http,
        "access_log": dict(access),
        "lag_s_max": max((r.get("lag_s", 0) for r in rec), default=0.0),
    }


TIGHT_S: dict[str, tuple[float, float]] = {}  # per model: its tight requests' timeouts (s)


def _print_table(rows: list[dict], cols: list[str]) -> None:
    w = {c: max(len(c), *(len(_fmt(r[c])) for r in rows)) for c in cols}
    print("  ".join(c.ljust(w[c]) for c in cols))
    for r in rows:
        print("  ".join(_fmt(r[c]).ljust(w[c]) for c in cols))


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.0f}" if v == int(v) else f"{v:.1f}"
    return str(v)


# ---------------------------------------------------------------------------------- main


def main() -> int:
    print(provenance_line())
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=180.0, help="seconds of load")
    ap.add_argument("--rate", type=float, default=2.2, help="valid requests/s (Poisson)")
    ap.add_argument("--share", type=float, default=0.05, help="share of each other kind")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--hang-s",
        type=float,
        default=60.0,
        help="a request with no answer this long after its send time hangs",
    )
    ap.add_argument(
        "--slack-s",
        type=float,
        default=1.0,
        help="how late after its deadline a 503 deadline may come",
    )
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    a = ap.parse_args()

    t_start = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="hetserve-soak-"))
    env = {**os.environ, "HETSERVE_CACHE": str(tmp / "cache"), "PYTHONUNBUFFERED": "1"}
    profiles = tmp / "profiles"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "hetserve",
            "profile",
            "estimate",
            "--cluster",
            "local-cpu",
            "--models",
            ",".join(MODELS),
            "--batches",
            "1-8",
            "--out",
            str(profiles),
        ],
        check=True,
        capture_output=True,
        env=env,
    )
    b1 = _batch1_ms(profiles)
    for m in MODELS:
        TIGHT_S[m] = (0.05, 2 * b1[m] / 1e3)
    reqs = schedule(a.duration, a.rate, a.share, a.seed)
    kinds = Counter(k for _, k, _, _ in reqs)
    print(f"schedule: {len(reqs)} requests in {a.duration:.0f} s (seed {a.seed}): {dict(kinds)}")
    data = payloads("http://127.0.0.1:0", b1)  # (the Host header's port is not checked)
    args = [
        "--models",
        ",".join(MODELS),
        "--slo",
        ",".join(f"{m}={ms:.0f}" for m, ms in MODELS.items()),
        "--profiles",
        str(profiles),
        "--cpu-threads",
        "1",
        "--engine",
        "threads",
    ]
    print(f"server: python -m hetserve serve --port 0 {' '.join(args)}; log {tmp / 'serve.out'}")
    proc, url, log_path = start_serve(tmp, args, env)
    host, port = "127.0.0.1", int(urlsplit(url).port or 0)
    rc: int | None = None
    samples: list[dict[str, Any]] = []
    client = Client(url, reqs, data, a.hang_s)
    try:
        import httpx

        def sample(t_s: float, in_flight: float) -> None:
            samples.append({"t_s": round(t_s, 1), **proc_sample(proc.pid), "in_flight": in_flight})

        def flying(text: str) -> float:
            return metric(parse_metrics(text), "hetserve_requests_in_flight")

        idle = flying(httpx.get(f"{url}/metrics", timeout=10).text)
        time.sleep(1.0)  # (the server closes the probes' connections a moment after them)
        sample(-1.0, idle)

        async def sampler(stop: asyncio.Event) -> None:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), SAMPLE_S)
                if stop.is_set():  # (the last sample is taken after the drain)
                    break
                t = time.perf_counter() - client.t0
                try:
                    sample(t, flying(await _get(host, port, "/metrics")))
                except (OSError, TimeoutError) as e:
                    print(f"  (sample at {t:.0f} s: /metrics did not answer: {e})")
                    sample(t, float("nan"))

        print(f"load: {a.duration:.0f} s from {url} ...", flush=True)
        asyncio.run(client.run(sampler))
        t_load = time.perf_counter() - client.t0
        # the server counts an abandoned request when it notices the disconnect: wait
        # until nothing is in flight and the counts are complete
        want = sum(1 for _, k, _, _ in reqs if k in TO_MODEL)
        deadline = time.monotonic() + 60
        while True:
            rows = parse_metrics(httpx.get(f"{url}/metrics", timeout=10).text)
            counted = metric(rows, "hetserve_requests_total")
            if (metric(rows, "hetserve_requests_in_flight") == 0 and counted >= want) or (
                time.monotonic() > deadline
            ):
                break
            time.sleep(0.5)
        # the last connections close a moment after their answers: open files settle
        idle = metric(rows, "hetserve_requests_in_flight")
        for _ in range(20):
            time.sleep(0.5)
            if proc_sample(proc.pid)["fds"] <= samples[0]["fds"]:
                break
        sample(time.perf_counter() - client.t0, idle)
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            rc = None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    log = log_path.read_text()
    res = analyse(reqs, client.rec, rows, log, rc, samples, a.duration, a.slack_s)
    wall = time.perf_counter() - t_start

    print(f"\nload took {t_load:.0f} s; client sent at most {res['lag_s_max'] * 1e3:.0f} ms late")
    print("\nclient against server (requests_total by outcome; client: what it was answered)")
    _print_table(res["table"], ["model", "what", "client", "server"])
    print("\nclient: what each kind of request was answered (all models)")
    for kind in KINDS:
        got = Counter(
            r.get("what", "nothing")
            for (_, k, _, _), r in zip(reqs, client.rec, strict=True)
            if k == kind
        )
        print(
            f"  {kind:10s} {sum(got.values()):4d}: "
            + ", ".join(f"{w} {n}" for w, n in got.most_common())
        )
    print("\nserver process (RSS MiB, threads, open files)")
    _print_table(
        [{"": k, **{c: v for c, v in r.items()}} for k, r in res["resources"].items()],
        ["", "before load", "first", "max", "last", "after drain"],
    )
    print("\nover time: t_s rss_mib threads fds in_flight")
    for s in samples:
        print(
            f"  {s['t_s']:6.1f} {s['rss_mib']:8.1f} {s['threads']:4d} {s['fds']:4d} "
            f"{s['in_flight']:4.0f}"
        )
    failed = [c for c in res["checks"] if not c["ok"]]
    print(f"\nchecks: {len(res['checks']) - len(failed)}/{len(res['checks'])} passed")
    for c in res["checks"]:
        print(f"  {'ok  ' if c['ok'] else 'FAIL'} {c['check']}")
    print(
        json.dumps(
            {
                "bench": "soak",
                "duration_s": a.duration,
                "requests": len(reqs),
                "failed": [c["check"] for c in failed],
                "wall_s": round(wall),
            }
        )
    )
    if a.out:
        out = {
            "provenance": provenance_line(),
            "args": vars(a),
            "server_args": args,
            "log": str(log_path),
            "wall_s": wall,
            "load_s": t_load,
            "samples": samples,
            "schedule": {"requests": len(reqs), "kinds": dict(kinds)},
            "tight_timeouts_s": TIGHT_S,
            "exit_code": rc,
            **res,
        }
        Path(a.out).write_text(json.dumps(out, indent=1, default=str))
        print(f"wrote {a.out}")
    for c in failed:
        print(f"FAILED {c['check']}: {c['why']}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
