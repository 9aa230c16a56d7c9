"""Benchmark: HERD at scale (issue 6's target: 1,000 models and 1,000,000 streams into
groups over 1,000 GPUs in <= 15 s; Shepherd section 7.3 reports 13.3 s).

1,000 models: the 17 of Shepherd Table 4 cycled, each copy a distinct model (its own
weights in memory) with alpha and beta scaled by a seeded factor in [0.8, 1.25]; FP32
weights of 0.1-0.6 GB. 1,000,000 streams with log-normal rates (sigma 2) folded
round-robin onto the models, 250 ms SLO, total load such that the average needs half the
GPUs. The timed part is everything from the stream rates on: aggregating streams into
model-streams, per-model goodput (latency model), affinity sets, grouping, the plan.
Run: ``.venv/bin/python benchmarks/bench_herd.py [--models 1000] [--streams 1000000]
[--gpus 1000] [--k-max inf]``.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from hetserve.core.latency import LinearModel, LinearParams, shepherd_table4
from hetserve.core.provenance import provenance_line
from hetserve.planning.herd import goodput_per_gpu, herd, herd_plan, model_streams
from hetserve.workload.maf import stream_rates

GPU = "V100-16GB"


def main() -> None:
    print(provenance_line())
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", type=int, default=1000)
    ap.add_argument("--streams", type=int, default=1_000_000)
    ap.add_argument("--gpus", type=int, default=1000)
    ap.add_argument("--k-max", type=float, default=math.inf)
    a = ap.parse_args()
    rng = np.random.default_rng(7)
    rows = shepherd_table4()
    params, mem = {}, {}
    for k in range(a.models):
        r = rows[k % len(rows)]
        f = float(rng.uniform(0.8, 1.25))
        name = f"{r.abbrev.lower()}-{k}"
        params[(name, GPU)] = LinearParams(r.alpha_ms * f / 1e3, r.beta_ms * f / 1e3)
        mem[name] = float(rng.uniform(0.1, 0.6))
    lat = LinearModel(params)
    names = [m for m, _ in params]
    slos = dict.fromkeys(names, 0.25)
    # load: the average needs half the GPUs
    per_gpu = [goodput_per_gpu(lat, m, GPU, 0.25)[0] for m in names]
    total = 0.5 * a.gpus / float(np.mean(1 / np.array(per_gpu)))
    rates = stream_rates(a.streams, total, seed=1)

    t0 = time.perf_counter()
    model_of = np.arange(a.streams) % a.models  # round-robin by decreasing rate
    per_model = np.bincount(model_of, weights=rates, minlength=a.models)
    ms = model_streams(
        dict(zip(names, per_model.tolist(), strict=True)), slos, lat, GPU, mem, a.k_max
    )
    res = herd(ms, a.gpus, g_max=12, mem_gb=14.0)
    plan = herd_plan(res, ms, slos, lat, GPU)
    wall = time.perf_counter() - t0
    sizes = [s for _, s in res.groups]
    print(
        f"HERD: {a.models:,} models, {a.streams:,} streams, {a.gpus:,} GPUs, K_max {a.k_max:g}: "
        f"{len(res.groups)} groups of {min(sizes)}-{max(sizes)} GPUs ({sum(sizes)} used), "
        f"min burst tolerance {res.min_burst_tolerance:.3f} ({res.method}); "
        f"{len(plan.models)} models planned in {wall:.2f} s"
    )


if __name__ == "__main__":
    main()
