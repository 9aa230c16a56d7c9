"""Benchmark: ``hetserve bench`` as a load tool (issue 42), beside ``locust``.

The server is the front-end benchmark's (``bench_serving.py frontend``): an emulated
hetserve (240 V100s serving BERT-Base, 1 KB requests: no queueing to speak of) in a
process of its own. At each offered rate, for ``--seconds``:

- ``hetserve bench`` (open loop, Poisson) as a subprocess: how late its sender ran (p99
  and max of each request's send time after its scheduled time), the rate it got
  answered, and its own CPU time per request (user + system, from the OS; the marginal
  cost: a run at 5 req/s is taken off, so start-up does not count);
- ``locust`` (headless, ``FastHttpUser``, ``constant_throughput`` users sized to the same
  rate; a closed loop per user, so it has no schedule to be late against) where
  ``--locust PATH`` names its executable (it is not a hetserve dependency: install it in a
  virtualenv of its own): the rate it got answered and its CPU time per request.

The table's headline: the highest offered rate at which the tool's send lag stays under
1 ms at p99. Run: ``.venv/bin/python benchmarks/bench_loadtool.py [--rates 500,1000,2000]
[--seconds 10] [--locust /tmp/locust-venv/bin/locust]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from hetserve.core.provenance import provenance_line

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_serving import serve_emulated  # (the same server process)

MODEL = "bert-base"


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _wait_ready(url: str) -> None:
    from hetserve.experiments.bench import wait_ready

    if not wait_ready(url, 60.0):
        raise SystemExit("the server did not start")


def ours(url: str, rate: float, seconds: float, spin_ms: float = 1.0) -> dict:
    with tempfile.TemporaryDirectory() as d:
        cpu0 = _children_cpu_s()
        t0 = time.perf_counter()
        run = subprocess.run(
            [sys.executable, "-m", "hetserve", "bench", url, "--models", MODEL, "--rate",
             str(rate), "--duration", str(seconds), "--slo", f"{MODEL}=1000",
             "--connections", "64", "--spin-ms", str(spin_ms), "--out", d],
            capture_output=True, text=True, timeout=seconds + 120,
        )  # fmt: skip
        wall = time.perf_counter() - t0
        cpu = _children_cpu_s() - cpu0
        if run.returncode != 0:
            raise SystemExit(run.stderr[-2000:])
        r = json.loads((Path(d) / "bench.json").read_text())["measured"]["all"]
    return {
        "tool": f"hetserve bench (spin {spin_ms:g} ms)", "offered_rps": rate, "sent": r["requests"],
        "answered_rps": (r["ok"] + r["late"]) / seconds,
        "send_lag_p99_ms": r["sender_late_ms"]["p99"],
        "send_lag_max_ms": r["sender_late_ms"]["max"],
        "cpu_s": cpu, "wall_s": wall,
    }  # fmt: skip


LOCUSTFILE = textwrap.dedent("""
    import json, os
    from locust import FastHttpUser, constant_throughput, task

    X = bytes(8 * 128)  # input_ids [1, 128] INT64, zeros
    HEAD = json.dumps({"inputs": [{"name": "input_ids", "shape": [1, 128], "datatype": "INT64",
                        "parameters": {"binary_data_size": len(X)}}],
                       "parameters": {"binary_data_output": True}}).encode()
    BODY = HEAD + X
    PER_USER = float(os.environ["PER_USER_RPS"])

    class Client(FastHttpUser):
        wait_time = constant_throughput(PER_USER)

        @task
        def infer(self):
            self.client.post("/v2/models/bert-base/infer", data=BODY, headers={
                "Inference-Header-Content-Length": str(len(HEAD)),
                "Content-Type": "application/octet-stream"})
""")


def locust(exe: str, url: str, rate: float, seconds: float) -> dict:
    users = max(1, int(rate // 20))  # 20 req/s each: requests well apart within a user
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "locustfile.py"
        f.write_text(LOCUSTFILE)
        env = {**os.environ, "PER_USER_RPS": str(rate / users)}
        cpu0 = _children_cpu_s()
        run = subprocess.run(
            [exe, "-f", str(f), "--headless", "-u", str(users), "-r", str(users),
             "-t", f"{int(seconds)}s", "-H", url, "--csv", str(Path(d) / "s"), "--only-summary",
             "--loglevel", "ERROR"],
            capture_output=True, text=True, timeout=seconds + 120, env=env,
        )  # fmt: skip
        cpu = _children_cpu_s() - cpu0
        import csv

        if not (Path(d) / "s_stats.csv").exists():
            raise SystemExit(f"locust failed: {run.stderr[-1500:]}")
        rows = list(csv.DictReader(open(Path(d) / "s_stats.csv")))
        agg = next(r for r in rows if r["Name"] == "Aggregated")
        n = int(agg["Request Count"])
    return {
        "tool": f"locust ({users} users)", "offered_rps": rate, "sent": n,
        "answered_rps": float(agg["Requests/s"]), "send_lag_p99_ms": None,
        "send_lag_max_ms": None, "cpu_s": cpu,
        "failures": int(agg["Failure Count"]), "rc": run.returncode,
    }  # fmt: skip


def main() -> None:
    print(provenance_line(), flush=True)
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="250,500,1000,1500,2000,3000")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--locust", default=None, help="locust's executable (not installed here)")
    ap.add_argument("--spin-ms", type=float, default=1.0, help="hetserve bench --spin-ms")
    a = ap.parse_args()
    from hetserve.experiments.live import free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = multiprocessing.get_context("spawn").Process(
        target=serve_emulated, args=(port, MODEL), daemon=True
    )
    proc.start()
    rows = []
    try:
        _wait_ready(url)
        # each tool's fixed cost (start-up, writing results) from a run at 5 req/s: the
        # CPU per request below is the marginal one, (cpu - base) / (sent - base's sent)
        base = {"hetserve bench": ours(url, 5.0, a.seconds, a.spin_ms)}
        if a.locust:
            base["locust"] = locust(a.locust, url, 5.0, a.seconds)
        for rate in [float(x) for x in a.rates.split(",")]:
            runs = [ours(url, rate, a.seconds, a.spin_ms)]
            if a.locust:
                runs.append(locust(a.locust, url, rate, a.seconds))
            for r in runs:
                b = base[r["tool"].split(" (")[0]]
                r["cpu_us_per_request"] = (
                    1e6 * (r["cpu_s"] - b["cpu_s"]) / max(1, r["sent"] - b["sent"])
                )
                rows.append(r)
                print(json.dumps(r), flush=True)
    finally:
        proc.kill()
    print("\n| tool | offered req/s | answered req/s | send lag p99 / max ms | CPU per request |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        lag = ("-" if r["send_lag_p99_ms"] is None
               else f"{r['send_lag_p99_ms']:.2f} / {r['send_lag_max_ms']:.1f}")  # fmt: skip
        print(f"| {r['tool']} | {r['offered_rps']:.0f} | {r['answered_rps']:.0f} | {lag} | "
              f"{r['cpu_us_per_request']:.0f} us |")  # fmt: skip
    good = [r["offered_rps"] for r in rows
            if r["tool"].startswith("hetserve") and (r["send_lag_p99_ms"] or 0) < 1.0]  # fmt: skip
    print(f"\nhighest offered rate with hetserve bench's send lag under 1 ms at p99: "
          f"{max(good) if good else 'none'} req/s")  # fmt: skip


if __name__ == "__main__":
    main()
