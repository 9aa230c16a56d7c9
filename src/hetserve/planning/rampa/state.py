"""What a placement takes from the cluster, and the search for stage cuts.

A placement is a service's stages: operation ranges, one GPU each, and one path per cut.
A taken GPU is the service's alone; a path's links carry the cut's traffic (throughput
requirement x the cut's bytes) within their bandwidth (one lane's bandwidth per flow, all
lanes together for the link).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hetserve.planning.rampa.network import RampaGpu, RampaNet, gpu_costs, link_costs
from hetserve.planning.rampa.perf import Estimate, Op, estimate, op_time_s


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


def _cut_dp(
    state: ClusterState,
    svc: Service,
    gpus: Sequence[str],
    paths: Sequence[Sequence[str]] | None,
    bound_s: float | None = None,
) -> tuple[float, list[int]] | None:
    """A dynamic programme over cut positions. Without ``bound_s``: the shortest pipeline
    cycle (the largest stage time or cut delay, minimised) and its bounds. With it: the
    smallest sum of cut delays over the cuts whose every stage time and cut delay is at
    most ``bound_s``, and its bounds. Memory, bandwidth and the throughput requirement hold
    either way; ``paths=None`` relaxes the cuts (no delay, no bandwidth)."""
    net, ops = state.net, svc.ops
    n, s = len(ops), len(gpus)
    if s > n:
        return None
    cap = (1.0 / svc.throughput_tps) * (1 + 1e-9)  # the cycle may not exceed this
    add = bound_s is not None
    if add:
        cap = min(cap, bound_s)
    prefix_t = [_prefix_s(ops, net.gpus[g]) for g in gpus]
    prefix_m = _prefix_bytes(ops)
    cuts = _path_terms(state, paths)
    inf = math.inf
    # best[k][j]: the best value so far with stages 0..k-1 covering ops[:j]
    best = [[inf] * (n + 1) for _ in range(s + 1)]
    arg = [[-1] * (n + 1) for _ in range(s + 1)]
    best[0][0] = 0.0
    for k in range(s):
        mem_cap = net.gpus[gpus[k]].memory_gb * 1e9
        row_t, cur, nxt, nxt_arg = prefix_t[k], best[k], best[k + 1], arg[k + 1]
        for i in range(k, n - (s - k) + 1):
            if cur[i] == inf:
                continue
            received = ops[i - 1].out_bytes if i > 0 else 0.0
            c = 0.0
            if k > 0 and cuts:  # the cut before stage k carries ops[i-1]'s output
                head, bw, room = cuts[k - 1]
                if svc.throughput_tps * received * 8 > room + 1e-6:
                    continue
                c = head + received * 8 / bw  # perf.comm_delay_s
                if c > cap:
                    continue
            t0, m_room = row_t[i], mem_cap - received + prefix_m[i]
            if add:  # a stage adds nothing to the sum; it must only fit the bound
                base = cur[i] + c
                for j in range(i + 1, n - (s - k - 1) + 1):
                    if prefix_m[j] > m_room or row_t[j] - t0 > cap:
                        break
                    if base < nxt[j]:
                        nxt[j], nxt_arg[j] = base, i
                continue
            base = cur[i] if cur[i] > c else c
            for j in range(i + 1, n - (s - k - 1) + 1):
                t = row_t[j] - t0
                if prefix_m[j] > m_room or t > cap:
                    break
                v = t if t > base else base
                if v < nxt[j]:
                    nxt[j], nxt_arg[j] = v, i
    if best[s][n] == inf:
        return None
    bounds = [n]
    for k in range(s, 0, -1):
        bounds.append(arg[k][bounds[-1]])
    bounds.reverse()
    return best[s][n], bounds


def _path_terms(
    state: ClusterState, paths: Sequence[Sequence[str]] | None
) -> list[tuple[float, float, float]]:
    """Per path: (propagation and switching, bottleneck bit/s, bit/s it can still carry)."""
    links = state.net.cluster.links
    out = []
    for path in paths or ():
        head = sum(links[x].delay_s for x in path)
        bw = min(links[x].bw_gbps for x in path) * 1e9
        out.append((head, bw, min(min(links[x].bw_gbps * 1e9, state.room_bps(x)) for x in path)))
    return out


def _cycle_bounds(
    state: ClusterState,
    svc: Service,
    gpus: Sequence[str],
    paths: Sequence[Sequence[str]],
    lo_s: float,
    hi_s: float,
) -> list[float]:
    """Every value a cut's pipeline cycle can take in ``[lo_s, hi_s]``: the times of every
    stage (operation range on its GPU) and the delays of every cut, sorted, distinct."""
    ops, n, s = svc.ops, len(svc.ops), len(gpus)
    out: set[float] = set()
    for k, g in enumerate(gpus):
        row = _prefix_s(ops, state.net.gpus[g])
        for i in range(k, n - (s - k) + 1):
            t0 = row[i]
            for j in range(i + 1, n - (s - k - 1) + 1):
                t = row[j] - t0
                if t > hi_s:
                    break
                if t >= lo_s:
                    out.add(t)
    for k, (head, bw, _) in enumerate(_path_terms(state, paths)):
        for i in range(k + 1, n - (s - k - 1) + 1):  # the cut after stage k follows ops[i-1]
            c = head + ops[i - 1].out_bytes * 8 / bw
            if lo_s <= c <= hi_s:
                out.add(c)
    return sorted(out)


_PREFIX_S: dict[tuple, list[float]] = {}


def _prefix_s(ops: tuple[Op, ...], gpu: RampaGpu) -> list[float]:
    """Cumulative operation times on a GPU, shared by every GPU of its speed (not to be
    modified)."""
    key = (ops, gpu.tflops, gpu.mem_bw_gbps)
    out = _PREFIX_S.get(key)
    if out is None:
        out, acc = [0.0], 0.0
        for op in ops:
            acc += op_time_s(op, gpu)
            out.append(acc)
        if len(_PREFIX_S) > 1024:
            _PREFIX_S.clear()
        _PREFIX_S[key] = out
    return out


@functools.lru_cache(maxsize=256)
def _prefix_bytes(ops: tuple[Op, ...]) -> list[float]:
    out = [0.0]
    for op in ops:
        out.append(out[-1] + op.memory_bytes)
    return out


def best_cuts(
    state: ClusterState,
    svc: Service,
    gpus: Sequence[str],
    paths: Sequence[Sequence[str]],
) -> tuple[tuple[int, ...], Estimate] | None:
    """The requirement check: stage cuts for these GPUs and paths (in stage order) that
    meet the service's throughput, latency and memory requirements and whose cuts' traffic
    the paths carry; among them one with the shortest pipeline cycle. None when no cut
    meets them.

    Exact: the latency is ``S x cycle + sum of cut delays``, so the shortest cycle alone
    can miss a deadline that a cut with a longer cycle and smaller cut delays meets. For
    each value ``T`` the cycle can take (a stage time or a cut delay, from the shortest
    cycle up), the cut with the smallest sum of cut delays among those with every stage
    and cut within ``T`` is found; the first ``T`` with ``S x T + sum <= deadline`` holds
    a cut that meets the requirements with the shortest cycle of any that does (any such
    cut, at its own cycle, would have been found there or earlier)."""
    hit = _cut_dp(state, svc, gpus, paths)
    if hit is None:
        return None
    cap = (1.0 / svc.throughput_tps) * (1 + 1e-9)  # as in the DP
    deadline = svc.latency_s * (1 + 1e-9)
    est = estimate(state.net, svc.ops, hit[1], gpus, paths)
    if est.cycle_s > cap:
        return None
    if est.latency_s <= deadline:
        return tuple(hit[1]), est
    s = len(gpus)
    if s == 1:
        return None  # one stage: its only cut is the one above
    floor = _cut_dp(state, svc, gpus, paths, cap)  # the smallest sum at any cycle
    if floor is None or s * hit[0] + floor[0] > deadline:
        return None
    hi = min(cap, (deadline - floor[0]) / s)
    for t in _cycle_bounds(state, svc, gpus, paths, hit[0], hi):
        if s * t + floor[0] > deadline:
            break
        got = _cut_dp(state, svc, gpus, paths, t)
        if got is None or s * t + got[0] > deadline:
            continue
        est = estimate(state.net, svc.ops, got[1], gpus, paths)
        if est.cycle_s <= cap and est.latency_s <= deadline:
            return tuple(got[1]), est
        if got[0] <= floor[0]:
            break  # the sum cannot fall further; a longer cycle only adds latency
    return None


def could_meet(state: ClusterState, svc: Service, gpus: Sequence[str]) -> bool:
    """A necessary condition for ``best_cuts`` on these GPUs with any paths: the cuts
    relaxed to cost nothing (cuts only add delay, and the latency is at least ``S`` cycles),
    the throughput, latency and memory requirements can be met. It depends only on the
    GPUs' types, so the colony checks it before walking any path."""
    hit = _cut_dp(state, svc, gpus, None)
    return hit is not None and len(gpus) * hit[0] <= svc.latency_s * (1 + 1e-9)
