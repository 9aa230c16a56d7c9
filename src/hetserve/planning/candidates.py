"""PPipe's search space as an explicit list of candidate pooled pipelines.

A *stage configuration* is (block range, GPU type, share k, batch); a *candidate pipeline*
is a sequence of stage configurations with contiguous block ranges from block 0 to the
model's last, one unified batch size (PPipe section 5.3), at most ``max_stages`` stages,
whose latency — stage latencies plus the transfer of every cut (``out_bytes x batch`` over
the slower of the two nodes' NICs) — is within ``(1 - slo_margin) x SLO``.

Enumerating candidates replaces the big-M partition-point variables of PPipe's appendix A
with a list the MILP chooses from (:mod:`hetserve.planning.milp`). Two exact reductions keep
the list short:

- consecutive stages on the same (GPU type, share) are never better than the merged stage
  (the merged stage needs no more GPUs for any throughput and no transfer), so they are left
  out;
- the MILP sees a stage only through its GPU type, its throughput per physical GPU
  ``R = share x batch / latency`` and the bytes it receives and sends per request. Among
  candidates of one model with the same GPU type in every stage, one with ``R`` at least as
  high and bytes no larger in every stage needs, for any throughput, no more GPUs of any
  type and no more NIC bandwidth; so dominated candidates (other cuts, shares or batch
  sizes) are dropped. Exactly equal ones keep the first (larger batch, fewer stages).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hetserve.core.cluster import Cluster
from hetserve.core.errors import HetserveError
from hetserve.core.latency import LatencyModel


@dataclass(frozen=True)
class StageCfg:
    blocks: tuple[int, int]
    gpu: str
    share: int
    latency_s: float
    rate_rps: float  # per slice: batch / latency
    in_bytes: float  # per request, into this stage (0 for the first)
    out_bytes: float  # per request, out of this stage (0 for the last)
    transfer_s: float  # of this stage's output to the next stage, at the batch size


@dataclass(frozen=True)
class Candidate:
    model: str
    batch: int
    stages: tuple[StageCfg, ...]
    latency_s: float


@dataclass(frozen=True)
class NetInfo:
    node_gbps: dict[str, float]  # per GPU type: the slowest NIC of a node holding it
    per_gpu_gbps: dict[str, float]  # per GPU type: NIC share of one GPU (NIC / GPUs on node)


def net_info(cluster: Cluster) -> NetInfo:
    node: dict[str, float] = {}
    per: dict[str, float] = {}
    for n in cluster.nodes:
        nic = min(n.uplink_gbps, n.downlink_gbps)
        for t in {g.type.name for g in n.gpus}:
            node[t] = min(node.get(t, math.inf), nic)
            per[t] = min(per.get(t, math.inf), nic / len(n.gpus))
    return NetInfo(node, per)


def _block_table(
    latency: LatencyModel, model: str, gpu: str, share: int, batch: int, n: int
) -> list[float] | None:
    """Prefix sums of block latencies; None if the source has no such configuration."""
    try:
        lat = [latency.latency(model, gpu, share, batch, range(i, i + 1)) for i in range(n)]
    except HetserveError:
        return None
    out = [0.0]
    for t in lat:
        out.append(out[-1] + t)
    return out


def enumerate_candidates(
    model: str,
    latency: LatencyModel,
    gpus: Mapping[str, int],
    net: NetInfo,
    budget_s: float,
    *,
    max_stages: int = 2,
    shares: Sequence[int] = (1, 2, 3, 4),
    batches: Sequence[int] = tuple(range(1, 9)),
    mps: Mapping[str, bool] | None = None,
    cut_bytes_factor: float = 1.0,
    prune: bool = True,
    allow_same_consecutive: bool = False,
) -> tuple[list[Candidate], float]:
    """Feasible candidate pipelines of one model, and the smallest latency seen (feasible
    or not) for error messages."""
    n = latency.num_blocks(model)
    out_b = [latency.out_bytes(model, i) * cut_bytes_factor for i in range(n)]
    tables: dict[tuple[str, int, int], list[float]] = {}
    for t in gpus:
        for k in shares:
            if k > 1 and mps is not None and not mps.get(t, True):
                continue
            for b in batches:
                tab = _block_table(latency, model, t, k, b, n)
                if tab is not None:
                    tables[(t, k, b)] = tab
    configs = sorted({(t, k) for t, k, _ in tables})
    best_seen = math.inf
    found: dict[tuple, list[Candidate]] = {}
    for s in range(1, min(max_stages, n) + 1):
        for cuts in itertools.combinations(range(1, n), s - 1):
            bounds = (0, *cuts, n)
            for assign in itertools.product(configs, repeat=s):
                if not allow_same_consecutive and any(
                    assign[i] == assign[i + 1] for i in range(s - 1)
                ):
                    continue
                for b in batches:
                    tabs = [tables.get((t, k, b)) for t, k in assign]
                    if any(tab is None for tab in tabs):
                        continue
                    stages, total = [], 0.0
                    for i, ((t, k), tab) in enumerate(zip(assign, tabs, strict=True)):
                        a, z = bounds[i], bounds[i + 1]
                        lat = tab[z] - tab[a]
                        xfer = 0.0
                        if i < s - 1:
                            gbps = min(net.node_gbps[t], net.node_gbps[assign[i + 1][0]])
                            xfer = out_b[z - 1] * b * 8 / (gbps * 1e9)
                        stages.append(
                            StageCfg(
                                (a, z),
                                t,
                                k,
                                lat,
                                b / lat,
                                out_b[a - 1] if i > 0 else 0.0,
                                out_b[z - 1] if i < s - 1 else 0.0,
                                xfer,
                            )
                        )
                        total += lat + xfer
                    best_seen = min(best_seen, total)
                    if total <= budget_s * (1 + 1e-12):
                        found.setdefault((bounds, assign), []).append(
                            Candidate(model, b, tuple(stages), total)
                        )
    cands: list[Candidate] = []
    if not prune:
        for group in found.values():
            cands.extend(group)
        return cands, best_seen
    by_types: dict[tuple, list[Candidate]] = {}
    for (_, assign), group in found.items():
        by_types.setdefault(tuple(t for t, _ in assign), []).extend(group)
    for group in by_types.values():
        cands.extend(_pareto(group))
    return cands, best_seen


def _vector(c: Candidate) -> list[float]:
    v: list[float] = []
    for st in c.stages:
        v += [st.rate_rps * st.share, -st.in_bytes, -st.out_bytes]
    return v


def _pareto(group: list[Candidate]) -> list[Candidate]:
    """Candidates not dominated by another (same GPU types per stage): per stage, throughput
    per GPU at least as high and bytes no larger."""
    import numpy as np

    order = sorted(
        group,
        key=lambda c: (
            -c.stages[0].rate_rps * c.stages[0].share,
            -c.batch,
            [st.blocks for st in c.stages],
        ),
    )
    keep: list[Candidate] = []
    kept = np.empty((0, 3 * len(order[0].stages))) if order else None
    for c in order:
        v = np.asarray(_vector(c))
        if kept is not None and len(kept):
            tol = 1e-12 * np.maximum(np.abs(v), 1.0)
            if np.any(np.all(kept >= v - tol, axis=1)):
                continue
        keep.append(c)
        kept = np.vstack([kept, v]) if kept is not None else v[None, :]
    return keep
