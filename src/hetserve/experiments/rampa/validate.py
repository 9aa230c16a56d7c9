"""Validation by serving (beyond the paper, whose Figs. 9-10 only estimate): RAMPA
placements run in hetserve's simulator over the switched topology.

A placement is a plan: one pipeline per placed service (its model named
``p<k>-<service>``), its stages bound to the chosen GPUs, its cuts to the chosen paths
(pinned in the link model, so transfers take them and share their lanes with every other
service's). Operations take RAMPA's time (``FLOPs / FLOPS + memory / memory bandwidth``,
times the batch) and cuts carry Table VI's output sizes as they are. Each service receives
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
from hetserve.core.gpus import GpuType
from hetserve.core.latency import busy_power_w
from hetserve.core.outcome import LATE, OK
from hetserve.core.plan import ModelPlan, Pipeline, Placement, Plan, Stage, WorkerSlot, worker_id
from hetserve.core.requests import Stream
from hetserve.planning.rampa.perf import Op
from hetserve.planning.rampa.state import Placement as RampaPlacement
from hetserve.workload.trace import merge


class RampaLatency:
    """The ``LatencyModel`` of placed services: per operation (one block each) RAMPA's time
    on the GPU, linear in the batch."""

    def __init__(self, ops: dict[str, Sequence[Op]]) -> None:
        self.ops = {m: list(v) for m, v in ops.items()}

    def num_blocks(self, model: str) -> int:
        return len(self.ops[model])

    def out_bytes(self, model: str, block: int) -> float:
        return self.ops[model][block].out_bytes

    def latency(
        self, model: str, gpu: GpuType, share: int, batch: int, blocks: range | None = None
    ) -> float:
        ops = self.ops[model]
        rng = range(len(ops)) if blocks is None else blocks
        per = sum(ops[i].flops / (gpu.fp32_tflops * 1e12)
                  + ops[i].memory_bytes / (gpu.mem_bw_gbps * 1e9) for i in rng)  # fmt: skip
        return per * batch * share

    def energy(
        self, model: str, gpu: GpuType, share: int, batch: int, blocks: range | None = None
    ) -> float:
        return self.latency(model, gpu, share, batch, blocks) * busy_power_w(gpu, share, 1.0)


def placements_plan(
    placed: Sequence[RampaPlacement], cluster: Cluster
) -> tuple[Plan, Placement, RampaLatency, dict[tuple[str, str], tuple[str, ...]]]:
    """The plan, worker binding, latency model and pinned cut paths of placements."""
    models: dict[str, ModelPlan] = {}
    slots: list[WorkerSlot] = []
    stages: dict[tuple[str, int, int], tuple[str, ...]] = {}
    ops: dict[str, list[Op]] = {}
    pins: dict[tuple[str, str], tuple[str, ...]] = {}
    for k, p in enumerate(placed):
        name = f"p{k:03d}-{p.service.name}"
        ops[name] = list(p.service.ops)
        st = []
        for s, g in enumerate(p.gpus):
            gpu = cluster.gpu(g)
            wid = worker_id(g, 0, 1)
            slots.append(WorkerSlot(wid, g, gpu.node, gpu.type.name, 1, 0))
            stages[(name, 0, s)] = (wid,)
            st.append(Stage((p.bounds[s], p.bounds[s + 1]), gpu.type.name, 1, 1,
                            p.est.stage_s[s]))  # fmt: skip
        for s, path in enumerate(p.paths):
            pins[(p.gpus[s], p.gpus[s + 1])] = tuple(path)
        pipe = Pipeline(tuple(st), 1, p.est.latency_s, p.est.throughput_tps)
        models[name] = ModelPlan(p.service.latency_s, 1.0, (pipe,))
    return Plan(models), Placement(tuple(slots), stages), RampaLatency(ops), pins


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

    plan, placement, lat, pins = placements_plan(placed, cluster)
    rng = np.random.default_rng(seed)
    streams, parts = [], []
    for name, p in zip(plan.models, placed, strict=True):
        gap = 1.0 / p.service.throughput_tps
        times = np.arange(rng.uniform(0, min(gap, duration_s / 2)), duration_s, gap)
        streams.append(Stream(name, name, p.service.latency_s))
        parts.append(times)
    trace = merge(parts, streams, duration_s)
    sched = make_scheduler("fixed-batch", {"max_batch": 1, "max_queue_delay_s": 0.0})
    sim = Simulator(cluster, lat, plan, placement, sched, trace,
                    SimConfig(seed=seed, cut_bytes_factor=1.0))  # fmt: skip
    for (a, b), path in pins.items():
        sim.links.pin(a, b, path)
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
