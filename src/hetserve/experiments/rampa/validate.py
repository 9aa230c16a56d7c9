"""Validation by serving (beyond the paper, whose Figs. 9-10 only estimate): RAMPA
placements run in hetserve's simulator over the switched topology.

A placement is a plan (``planning.rampa.serving``): one pipeline per placed service, its
stages bound to the chosen GPUs, its cuts to the chosen paths. Each service receives
requests at its required throughput, evenly spaced (a seeded phase per service, early
enough for one request at least), and the
``fixed-batch`` scheduler sends each request through its pipeline alone (batch 1, no
waiting), so the stages overlap as RAMPA's pipeline cycle assumes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hetserve.core.cluster import Cluster
from hetserve.core.outcome import LATE, OK
from hetserve.core.plan import bind
from hetserve.core.requests import Stream
from hetserve.planning.rampa.serving import placements_plan, rampa_latency
from hetserve.planning.rampa.state import Placement as RampaPlacement
from hetserve.workload.trace import merge


def simulate_placements(
    placed: Sequence[RampaPlacement],
    cluster: Cluster,
    duration_s: float = 20.0,
    seed: int = 0,
) -> Any:
    """The simulator's result of serving every placed service at its required throughput
    for ``duration_s`` (models named ``p<k>-<service>``, streams in placement order)."""
    from hetserve.scheduling.protocol import make_scheduler
    from hetserve.sim.engine import SimConfig, Simulator

    plan = placements_plan(placed, cluster)
    lat = rampa_latency(plan)
    rng = np.random.default_rng(seed)
    streams, parts = [], []
    for name, p in zip(plan.models, placed, strict=True):
        gap = 1.0 / p.service.throughput_tps
        times = np.arange(rng.uniform(0, min(gap, duration_s / 2)), duration_s, gap)
        streams.append(Stream(name, name, p.service.latency_s))
        parts.append(times)
    trace = merge(parts, streams, duration_s)
    sched = make_scheduler("fixed-batch", {"max_batch": 1, "max_queue_delay_s": 0.0})
    sim = Simulator(cluster, lat, plan, bind(plan, cluster), sched, trace,
                    SimConfig(seed=seed, cut_bytes_factor=1.0))  # fmt: skip
    return sim.run()


def serve_placements(
    placed: Sequence[RampaPlacement],
    cluster: Cluster,
    duration_s: float = 20.0,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Serve every placed service at its required throughput in the simulator; per
    service the measured throughput (completed requests per second of arrivals) and
    latency (mean, p99) beside the estimate and the requirements."""
    if not placed:
        return []
    res = simulate_placements(placed, cluster, duration_s, seed)
    names = [s.name for s in res.trace.streams]
    lat_s = res.finish_s - res.trace.time_s
    done = (res.outcome == OK) | (res.outcome == LATE)
    idx = res.trace.stream_idx
    out = []
    for k, (name, p) in enumerate(zip(names, placed, strict=True)):
        mine = idx == k
        ok = mine & done
        ls = lat_s[ok]
        out.append({
            "service": p.service.name, "model": name,
            "required_tps": p.service.throughput_tps,
            "required_latency_ms": p.service.latency_s * 1e3,
            "estimated_tps": p.est.throughput_tps, "estimated_latency_ms": p.est.latency_s * 1e3,
            "requests": int(mine.sum()), "completed": int(ok.sum()),
            "measured_tps": float(ok.sum()) / duration_s,
            "offered_tps": float(mine.sum()) / duration_s,
            "measured_latency_ms": float(ls.mean() * 1e3) if len(ls) else None,
            "measured_p99_ms": float(np.percentile(ls, 99) * 1e3) if len(ls) else None,
            "met": int((mine & (res.outcome == OK)).sum()),
        })  # fmt: skip
    return out
