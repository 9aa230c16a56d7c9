"""What a placement takes from the cluster, and the search for stage cuts.

A placement is a service's stages: operation ranges, one GPU each, and one path per cut.
A taken GPU is the service's alone; a path's links carry the cut's traffic (throughput
requirement x the cut's bytes) within their bandwidth (one lane's bandwidth per flow, all
lanes together for the link).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hetserve.planning.rampa.network import RampaNet, gpu_costs, link_costs
from hetserve.planning.rampa.perf import Estimate, Op, comm_delay_s, estimate, op_time_s


@dataclass(frozen=True)
class Service:
    """A deployment request: a model's operations and its requirements."""

    name: str
    model: str
    ops: tuple[Op, ...]
    throughput_tps: float  # gamma_k
    latency_s: float  # delta_k


@dataclass(frozen=True)
class Placement:
    service: Service
    bounds: tuple[int, ...]  # stage k runs ops[bounds[k]:bounds[k + 1]]
    gpus: tuple[str, ...]
    paths: tuple[tuple[str, ...], ...]  # one per cut
    est: Estimate
    cost: float  # Eq. 6 at the time it was placed
    method: str = ""

    @property
    def stages(self) -> int:
        return len(self.gpus)

    def traffic_bps(self) -> list[float]:
        """Bits per second each cut sends at the service's throughput requirement."""
        ops, b = self.service.ops, self.bounds
        return [self.service.throughput_tps * ops[b[k + 1] - 1].out_bytes * 8
                for k in range(len(self.paths))]  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {
            "service": self.service.name, "model": self.service.model, "method": self.method,
            "throughput_tps_required": self.service.throughput_tps,
            "latency_ms_required": self.service.latency_s * 1e3,
            "stages": [
                {"ops": [self.bounds[k], self.bounds[k + 1]], "gpu": g,
                 "path": list(self.paths[k]) if k < len(self.paths) else []}
                for k, g in enumerate(self.gpus)
            ],
            "throughput_tps": self.est.throughput_tps, "latency_ms": self.est.latency_s * 1e3,
            "cost": self.cost,
        }  # fmt: skip


@dataclass
class ClusterState:
    """Free GPUs and the bandwidth each directed link still has, with the allocation costs
    of the free resources (recomputed after every placement)."""

    net: RampaNet
    free: set[str] = field(default_factory=set)
    used_bps: dict[str, float] = field(default_factory=dict)
    placed: list[Placement] = field(default_factory=list)
    _costs: tuple[dict[str, float], dict[str, float]] | None = None

    @staticmethod
    def of(net: RampaNet) -> ClusterState:
        return ClusterState(net, set(net.gpus))

    def costs(self) -> tuple[dict[str, float], dict[str, float]]:
        """(GPU costs of the free GPUs, link costs), Eqs. 4-5."""
        if self._costs is None:
            gc = gpu_costs(self.net, sorted(self.free))
            self._costs = (gc, link_costs(self.net, gc))
        return self._costs

    def room_bps(self, link: str) -> float:
        lk = self.net.cluster.links[link]
        return lk.bw_gbps * 1e9 * lk.lanes - self.used_bps.get(link, 0.0)

    def carries(self, path: Sequence[str], bps: float) -> bool:
        links = self.net.cluster.links
        return all(bps <= min(links[x].bw_gbps * 1e9, self.room_bps(x)) + 1e-6 for x in path)

    def take(self, p: Placement) -> None:
        for g in p.gpus:
            if g not in self.free:
                raise ValueError(f"GPU {g} is not free")
            self.free.discard(g)
        for path, bps in zip(p.paths, p.traffic_bps(), strict=True):
            if not self.carries(path, bps):
                raise ValueError(f"a path of {p.service.name} lacks bandwidth")
            for x in path:
                self.used_bps[x] = self.used_bps.get(x, 0.0) + bps
        self.placed.append(p)
        self._costs = None

    def cost_of(self, gpus: Sequence[str], paths: Sequence[Sequence[str]]) -> float:
        """Eq. 6: the GPUs' costs and every link of every path."""
        gc, lc = self.costs()
        return sum(gc[g] for g in gpus) + sum(lc[x] for p in paths for x in p)


def best_cuts(
    state: ClusterState,
    svc: Service,
    gpus: Sequence[str],
    paths: Sequence[Sequence[str]],
) -> tuple[tuple[int, ...], Estimate] | None:
    """The requirement check: stage cuts for these GPUs and paths (in stage order) that
    meet the service's throughput, latency and memory requirements and whose cuts' traffic
    the paths carry; among them the one with the shortest pipeline cycle (a dynamic
    programme over cut positions: the largest stage time or cut delay so far, minimised).
    None when no cut meets them."""
    net, ops = state.net, svc.ops
    n, s = len(ops), len(gpus)
    if s > n:
        return None
    cap = 1.0 / svc.throughput_tps  # the cycle may not exceed this
    prefix_t = []
    prefix_m = [0.0]
    for g in gpus:
        gg = net.gpus[g]
        acc, row = 0.0, [0.0]
        for op in ops:
            acc += op_time_s(op, gg)
            row.append(acc)
        prefix_t.append(row)
    for op in ops:
        prefix_m.append(prefix_m[-1] + op.memory_bytes)
    inf = math.inf
    # best[k][j]: smallest cycle so far with stages 0..k-1 covering ops[:j]
    best = [[inf] * (n + 1) for _ in range(s + 1)]
    arg = [[-1] * (n + 1) for _ in range(s + 1)]
    best[0][0] = 0.0
    for k in range(s):
        mem_cap = net.gpus[gpus[k]].memory_gb * 1e9
        for i in range(k, n - (s - k) + 1):
            if best[k][i] == inf:
                continue
            received = ops[i - 1].out_bytes if i > 0 else 0.0
            if k > 0:  # the cut before stage k carries ops[i-1]'s output over paths[k-1]
                bps = svc.throughput_tps * received * 8
                if not state.carries(paths[k - 1], bps):
                    continue
                c = comm_delay_s(net, paths[k - 1], received)
                if c > cap:
                    continue
            else:
                c = 0.0
            base = max(best[k][i], c)
            for j in range(i + 1, n - (s - k - 1) + 1):
                if prefix_m[j] - prefix_m[i] + received > mem_cap:
                    break
                t = prefix_t[k][j] - prefix_t[k][i]
                if t > cap:
                    break
                v = max(base, t)
                if v < best[k + 1][j]:
                    best[k + 1][j], arg[k + 1][j] = v, i
    if best[s][n] == inf:
        return None
    bounds = [n]
    for k in range(s, 0, -1):
        bounds.append(arg[k][bounds[-1]])
    bounds.reverse()
    est = estimate(net, ops, bounds, gpus, paths)
    if est.cycle_s > cap * (1 + 1e-9) or est.latency_s > svc.latency_s * (1 + 1e-9):
        return None
    return tuple(bounds), est
