"""HTTP keep-alive's race, made likely: how many requests of an open loop go unanswered
(status 0) and how many the load generator sent again, against a server that closes idle
connections after ``--keep-alive-s`` (uvicorn's ``timeout_keep_alive``; 5 s by default,
here much shorter so that the race shows in seconds).

The server is a trivial ASGI app that answers every POST at once; the load is Poisson at
``--rate`` over ``--connections`` connections (``experiments.loadgen.open_loop``, the
generator behind ``replay_http``, ``hetserve bench`` and the demo), seeded.

Run: ``.venv/bin/python benchmarks/keepalive_race.py [--keep-alive-s 0.02] [--requests
10000] [--rate 500] [--connections 128] [--seed 0]``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", b"2")]})  # fmt: skip
    await send({"type": "http.response.body", "body": b"ok"})


def main() -> None:
    from hetserve.core.provenance import provenance_line
    from hetserve.experiments.live import serve_in_thread
    from hetserve.experiments.loadgen import http_request, open_loop

    print(provenance_line(), flush=True)
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep-alive-s", type=float, default=0.02)
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--rate", type=float, default=500.0)
    ap.add_argument("--connections", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.keep_alive_s <= 0 or a.requests < 1 or a.rate <= 0 or a.connections < 1:
        ap.error("expected --keep-alive-s, --rate > 0 and --requests, --connections >= 1")
    arrivals = np.cumsum(np.random.default_rng(a.seed).exponential(1 / a.rate, a.requests))
    with serve_in_thread(_app, timeout_keep_alive=a.keep_alive_s) as url:
        shots = open_loop(url, [http_request(url, "/", b"{}", {})], arrivals,
                          connections=a.connections, timeout_s=10.0)  # fmt: skip
    status = np.asarray(shots.status)
    print(json.dumps({
        "keep_alive_s": a.keep_alive_s, "requests": a.requests, "rate_rps": a.rate,
        "connections": a.connections, "answered": int((status == 200).sum()),
        "unanswered": int((status == 0).sum()), "resent": shots.resent,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
