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
- the MILP sees a stage only through its GPU type and what one physical GPU of it carries,
  ``share x batch / latency`` capped by the GPU's share of its node's NIC for the bytes
  the stage receives and sends. Candidates another candidate of the same model dominates
  in GPUs needed per request and per type are dropped (:func:`prune_dominated`, exact).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
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
    per_gpu_rps: float = 0.0  # what one physical GPU carries: share x rate, NIC-capped


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
    cut_bytes_factor: float = 0.5,
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
                        in_b = out_b[a - 1] if i > 0 else 0.0
                        o_b = out_b[z - 1] if i < s - 1 else 0.0
                        per = k * b / lat  # what one GPU (its k slices) carries
                        nic_bps = net.per_gpu_gbps[t] * 1e9
                        for nbytes in (in_b, o_b):
                            if nbytes > 0:
                                per = min(per, nic_bps / (nbytes * 8))
                        stages.append(StageCfg((a, z), t, k, lat, b / lat, in_b, o_b, xfer, per))
                        total += lat + xfer
                    best_seen = min(best_seen, total)
                    if total <= budget_s * (1 + 1e-12):
                        found.setdefault((bounds, assign), []).append(
                            Candidate(model, b, tuple(stages), total)
                        )
    cands: list[Candidate] = []
    for group in found.values():
        cands.extend(group)
    if prune:
        cands = prune_dominated(cands, list(gpus))
    return cands, best_seen


def need_per_type(c: Candidate, types: Sequence[str]) -> list[float]:
    """GPUs of each type one request/s needs: sum over the type's stages of 1 / per-GPU
    throughput (NIC limits included)."""
    u = [0.0] * len(types)
    for st in c.stages:
        u[types.index(st.gpu)] += 1.0 / st.per_gpu_rps
    return u


def prune_dominated(
    cands: list[Candidate], types: Sequence[str],
    extra: Callable[[Candidate], float] | None = None,
) -> list[Candidate]:  # fmt: skip
    """Drop candidates that another candidate of the same model dominates exactly.

    In the MILP a stage on ``g`` GPUs carries at most ``per_gpu_rps x g`` (its throughput
    and NIC rows combined), so throughput ``x`` needs ``ceil(x / per_gpu_rps)`` GPUs for that
    stage. A candidate ``p`` with at most one stage per GPU type needs ``ceil(x u_p[t])``
    GPUs of type ``t``; any candidate ``q`` needs ``sum_j ceil(x / r_j) >= ceil(x u_q[t])``.
    So if ``u_p <= u_q`` for every type, ``p`` carries any throughput ``q`` carries with no
    more GPUs of any type: ``q`` is dropped. Only candidates with one stage per type can
    dominate (ties: fewer stages, then larger batch, win). ``extra``: one more cost per
    request that ``p`` must also not exceed to dominate (the energy objective's joules).
    """
    import numpy as np

    out: list[Candidate] = []
    by_model: dict[str, list[Candidate]] = {}
    for c in cands:
        by_model.setdefault(c.model, []).append(c)
    for group in by_model.values():
        simple = [c for c in group if len({st.gpu for st in c.stages}) == len(c.stages)]
        simple.sort(
            key=lambda c: (
                sum(need_per_type(c, types)),
                len(c.stages),
                -c.batch,
                [st.blocks for st in c.stages],
            )
        )
        front: list[Candidate] = []
        front_u = np.empty((0, len(types) + (extra is not None)))
        for c in simple:
            u = np.asarray(_coords(c, types, extra))
            if len(front_u) and np.any(np.all(front_u <= u * (1 + 1e-12), axis=1)):
                continue
            front.append(c)
            front_u = np.vstack([front_u, u])
        out.extend(front)
        for c in group:
            if len({st.gpu for st in c.stages}) == len(c.stages):
                continue  # simple ones are settled above
            u = np.asarray(_coords(c, types, extra))
            if len(front_u) and np.any(np.all(front_u <= u * (1 + 1e-12), axis=1)):
                continue
            out.append(c)
    return out


def _coords(
    c: Candidate, types: Sequence[str], extra: Callable[[Candidate], float] | None
) -> list[float]:
    u = need_per_type(c, types)
    return u if extra is None else [*u, extra(c)]
