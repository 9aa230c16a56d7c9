"""RAMPA's performance model (TCC 2025, section IV-A) for chain models (every Table VI
model is one: each operation feeds the next, so every edge is forward).

- **Operation time** on GPU ``g`` (section V-A-3): ``FLOPs / f_g + w_v / MemBW_g``, with
  ``w_v`` the operation's memory consumption (parameters x 1.2).
- **Communication delay** of a cut over a path ``T_c``: the time to obtain the head of the
  data (propagation and switching on every link) plus its transmission at the path's
  bottleneck bandwidth.
- **Pipeline cycle** (Eq. 3, forward edges): ``T_u = max over stages and cuts of
  max(stage execution, T_c)``; **throughput** (Eq. 1) ``1 / T_u``.
- **Execution latency** (Eq. 2): the input passes every stage, one cycle each, and every
  cut, one cycle plus its delay: ``T_u + sum over cuts (T_u + T_c)``.
- **Memory** (constraint d): a stage's operations' memory plus the data it receives must
  fit its GPU.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from hetserve.core.errors import HetserveError
from hetserve.core.graph import ModelGraph
from hetserve.planning.rampa.network import RampaGpu, RampaNet

MEMORY_OVERHEAD = 1.2  # RAMPA: memory consumption = parameter bytes x 1.2


@dataclass(frozen=True)
class Op:
    name: str
    flops: float
    memory_bytes: float  # w_v
    out_bytes: float  # d_e of the edge to the next operation


def ops_of(graph: ModelGraph) -> list[Op]:
    """A model's operations, in order (``core.rampa_data.rampa_graph`` for Table VI)."""
    return [Op(x.name, x.flops, x.param_bytes * MEMORY_OVERHEAD, x.out_bytes) for x in graph.layers]


def op_time_s(op: Op, gpu: RampaGpu) -> float:
    return op.flops / (gpu.tflops * 1e12) + op.memory_bytes / (gpu.mem_bw_gbps * 1e9)


def comm_delay_s(net: RampaNet, path: Sequence[str], n_bytes: float) -> float:
    """Propagation and switching on every link, then the bytes at the bottleneck."""
    if not path:
        return 0.0
    links = net.cluster.links
    head = sum(links[x].delay_s for x in path)
    bw = min(links[x].bw_gbps for x in path)
    return head + n_bytes * 8 / (bw * 1e9)


@dataclass(frozen=True)
class Estimate:
    cycle_s: float  # T_u
    latency_s: float  # T_r
    stage_s: tuple[float, ...]  # execution per stage
    comm_s: tuple[float, ...]  # T_c per cut
    memory_bytes: tuple[float, ...]  # per stage: operations' memory + the data it receives

    @property
    def throughput_tps(self) -> float:
        return 1.0 / self.cycle_s if self.cycle_s > 0 else float("inf")


def estimate(
    net: RampaNet,
    ops: Sequence[Op],
    bounds: Sequence[int],
    gpus: Sequence[str],
    paths: Sequence[Sequence[str]],
) -> Estimate:
    """The estimate for stages ``ops[bounds[k]:bounds[k + 1]]`` on ``gpus[k]``, cut ``k``
    (after stage ``k``) carried over ``paths[k]``."""
    n = len(gpus)
    if len(bounds) != n + 1 or bounds[0] != 0 or bounds[-1] != len(ops):
        raise HetserveError(f"stage bounds {list(bounds)} do not cover {len(ops)} operations")
    if any(a >= b for a, b in itertools.pairwise(bounds)):
        raise HetserveError(f"stage bounds {list(bounds)}: every stage needs an operation")
    if len(paths) != n - 1:
        raise HetserveError(f"{n} stages need {n - 1} paths, got {len(paths)}")
    stage, mem = [], []
    for k in range(n):
        g = net.gpus[gpus[k]]
        part = ops[bounds[k] : bounds[k + 1]]
        stage.append(sum(op_time_s(op, g) for op in part))
        received = ops[bounds[k] - 1].out_bytes if k > 0 else 0.0
        mem.append(sum(op.memory_bytes for op in part) + received)
    comm = [comm_delay_s(net, paths[k], ops[bounds[k + 1] - 1].out_bytes) for k in range(n - 1)]
    cycle = max([*stage, *comm])
    latency = cycle + sum(cycle + c for c in comm)
    return Estimate(cycle, latency, tuple(stage), tuple(comm), tuple(mem))


def fits(net: RampaNet, est: Estimate, gpus: Sequence[str]) -> bool:
    """Constraint (d): every stage's memory within its GPU's."""
    mem = zip(est.memory_bytes, gpus, strict=True)
    return all(m <= net.gpus[g].memory_gb * 1e9 for m, g in mem)
