"""The Ray path against the in-process one (docs/benchmarks.md, "The Ray path"): the
three measurements behind its tables, on this machine's CPU with ResNet-18.

- ``demo``: ``make demo``'s step 10 (``hetserve.cli.demo._live_step``: one trace served by
  a Ray actor and by a thread of the server, beside the simulator with the measured
  profile), ``--runs`` times, on a profile measured into a fresh cache (``--fresh``) or the
  machine's cached one. Prints the three attainments of each run.
- ``pieces``: where a Ray stage's time goes: the model's compute in a loop inside an
  actor, the same compute one call at a time, a call with no payload, and the Ray
  executor's own record of what a stage's call added beyond the compute
  (``RayExecutor.call_overhead_ms``) while serving the demo's trace.
- ``gap``: the demo's trace simulated with the profile, then with a per-stage cost added
  (``--call-ms``, the Ray call) and the compute scaled (``--scales``), the scheduler still
  planning with the original profile: what each part of the gap costs, seeds 0-2.

Run: ``.venv/bin/python benchmarks/ray_path.py [demo|pieces|gap ...] [--runs 3] [--fresh]``.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from hetserve.core.provenance import provenance_line

MODEL = "resnet18"
THREADS = 1  # as the demo: one core computes, the other serves HTTP and sends


def _profile(fresh: bool) -> Path:
    from hetserve.profiling.cache import measured_profiles

    return measured_profiles([MODEL], "cpu", [1, 2, 4, 8], 10, THREADS, remeasure=fresh)


def demo(runs: int) -> None:
    import io
    import json
    from contextlib import redirect_stdout

    from hetserve.cli.demo import _live_step

    print("| run | simulated | Ray actor | in-process thread | Ray call p50 / p99 ms |")
    print("|---:|---:|---:|---:|---:|")
    for i in range(runs):
        with tempfile.TemporaryDirectory() as d:
            with redirect_stdout(io.StringIO()):
                _live_step(Path(d))
            rec = json.loads((Path(d) / "live-resnet18.json").read_text())
        o = rec["ray"].get("ray_call_overhead_ms", {})
        att = [100 * rec[k]["attainment"] for k in ("simulated", "ray", "threads")]
        print(f"| {i} | {att[0]:.1f}% | {att[1]:.1f}% | {att[2]:.1f}% | "
              f"{o.get('p50_ms', float('nan')):.1f} / {o.get('p99_ms', float('nan')):.1f} |",
              flush=True)  # fmt: skip


def pieces(calls: int = 40) -> None:
    import numpy as np
    import ray
    import torch

    from hetserve.zoo.registry import build

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)

    @ray.remote(num_cpus=1)
    class Runner:
        def __init__(self) -> None:
            torch.set_num_threads(THREADS)
            self.net = build(MODEL).eval()
            self.x = self.net.input_spec.example(1)

        def loop(self, n: int) -> list[float]:
            out = []
            with torch.inference_mode():
                for _ in range(n):
                    t0 = time.perf_counter()
                    self.net(self.x)
                    out.append(time.perf_counter() - t0)
            return out

        def once(self, x: np.ndarray) -> np.ndarray:
            with torch.inference_mode():
                return self.net(torch.from_numpy(x)).numpy()

        def nothing(self) -> None:
            return None

    a = Runner.remote()
    ray.get(a.loop.remote(3))
    inside = statistics.median(ray.get(a.loop.remote(calls)))
    x = build(MODEL).input_spec.example(1).numpy()
    ref = ray.put(x)
    ray.get(a.once.remote(ref))
    one = []
    for _ in range(calls):
        t0 = time.perf_counter()
        ray.get(a.once.remote(ref))
        one.append(time.perf_counter() - t0)
    empty = []
    for _ in range(calls):
        t0 = time.perf_counter()
        ray.get(a.nothing.remote())
        empty.append(time.perf_counter() - t0)
    ray.shutdown()
    print(f"| piece | ResNet-18, batch 1, idle (median of {calls}) |")
    print("|---|---:|")
    print(f"| the model's compute, in a loop inside the actor | {inside * 1e3:.1f} ms |")
    print(f"| the same compute, one call at a time (input in the store) | "
          f"{statistics.median(one) * 1e3:.1f} ms |")  # fmt: skip
    print(f"| a no-payload actor call | {statistics.median(empty) * 1e3:.2f} ms |")
    print(f"| so a call adds, beyond the compute | "
          f"{(statistics.median(one) - inside) * 1e3:.1f} ms |")  # fmt: skip
    print("(under the demo's load: `demo` prints the Ray executor's own record of the same)")


def gap(call_ms: float, scales: list[float]) -> None:
    from hetserve.engine.setup import build_setup
    from hetserve.experiments.metrics import summarize
    from hetserve.experiments.setup import build_trace

    folder = _profile(False)
    base = build_setup("local-cpu", [MODEL], profiles=str(folder), max_batch=8)
    rows = list(csv.DictReader(open(folder / "latency.csv")))
    n_blocks = 1 + max(int(r["block"]) for r in rows)
    variants = [("the profile (the demo's simulated row)", 1.0, 0.0)]
    variants += [(f"+ {call_ms:g} ms per stage (the Ray call)", 1.0, call_ms)]
    variants += [(f"x {s:g} compute + {call_ms:g} ms per stage", s, call_ms) for s in scales]
    print("| simulated with | seed 0 | seed 1 | seed 2 |")
    print("|---|---:|---:|---:|")
    for label, scale, add_ms in variants:
        with tempfile.TemporaryDirectory() as d:
            shutil.copytree(folder, d, dirs_exist_ok=True)
            with open(Path(d) / "latency.csv", "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(rows[0]))
                w.writeheader()
                for r in rows:  # the call's cost on the last block: once per stage
                    us = float(r["latency_us"]) * scale
                    if int(r["block"]) == n_blocks - 1:
                        us += add_ms * 1e3
                    w.writerow({**r, "latency_us": f"{us:.3f}"})
            ran = build_setup("local-cpu", [MODEL], profiles=d, max_batch=8)
            cells = []
            for seed in range(3):
                trace = build_trace(base, "poisson", base.plan.rates_at(0.5), 8.0, seed)
                res = _run_slower(base, ran.latency, trace)
                cells.append(f"{100 * summarize(res)['attainment']:.1f}%")
        print(f"| {label} | " + " | ".join(cells) + " |", flush=True)


def _run_slower(setup, run_latency, trace):  # type: ignore[no-untyped-def]
    """``setup``'s plan simulated with ``flex``, the scheduler reading ``setup``'s
    latencies while the workers take ``run_latency``'s."""
    from hetserve.engine.modelled import ModelledExecutor
    from hetserve.engine.setup import fit_params
    from hetserve.scheduling.protocol import make_scheduler
    from hetserve.sim.engine import SimConfig, Simulator

    class Slower(ModelledExecutor):
        def attach(self, kernel):  # type: ignore[no-untyped-def]
            super().attach(kernel)
            self.latency = run_latency  # what a stage takes; the view keeps the plan's

    sched = make_scheduler("flex", fit_params(setup, "flex", {"max_batch": 8}))
    cfg = SimConfig(cut_bytes_factor=setup.cut_bytes_factor, warm=setup.warm)
    return Simulator(setup.cluster, setup.latency, setup.plan, setup.placement, sched, trace,
                     cfg, executor=Slower(warm=False)).run()  # fmt: skip


def main() -> None:
    print(provenance_line(), flush=True)
    ap = argparse.ArgumentParser()
    ap.add_argument("sections", nargs="*", default=["demo", "pieces", "gap"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--fresh", action="store_true", help="measure the profile again first")
    ap.add_argument("--call-ms", type=float, default=3.3)
    ap.add_argument("--scales", default="1.10,1.17")
    a = ap.parse_args()
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if a.fresh:
        _profile(True)
    for s in a.sections:
        print(f"\n## {s}", flush=True)
        if s == "demo":
            demo(a.runs)
        elif s == "pieces":
            pieces()
        elif s == "gap":
            gap(a.call_ms, [float(x) for x in a.scales.split(",")])
        else:
            raise SystemExit(f"unknown section {s!r}: demo, pieces or gap")


if __name__ == "__main__":
    main()
