"""RAMPA's view of a switched GPU cluster (TCC 2025, section III) and its allocation costs
(section IV-B-1).

The network is a graph of switches; every GPU hangs off its rack's switch by a link of its
own (``attach: gpu`` in the cluster file), so a path between two GPUs is the sender's
attachment link, a shortest-or-not sequence of switch links, and the receiver's
attachment link. Hops count links: two GPUs behind one switch are 2 hops apart, behind
neighbouring switches 3.

**GPU cost** (Eq. 4): ``C_g = f_g * m_g * q_g`` with ``f_g`` the GPU's FLOPS (TFLOPS here),
``m_g`` its memory (GB) and ``q_g`` the number of free GPUs in its rack.

**Link cost** (Eq. 5): ``C_l = sum over GPU pairs (g1, g2) of N(l) / N * (C_g1 + C_g2) / H``
where ``N`` is the number of shortest paths between them, ``N(l)`` how many of those use
``l`` and ``H`` their hop distance. Pairs are ordered (a directed link serves one
direction), over the free GPUs. GPUs behind one switch are interchangeable for the switch
links, so the sum runs over switch pairs with the rack sums of ``C``; an attachment link
lies on every path from (or to) its GPU.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy import sparse

from hetserve.core.cluster import Cluster
from hetserve.core.errors import HetserveError


@dataclass(frozen=True)
class RampaGpu:
    id: str
    type: str
    switch: str
    rack: str
    tflops: float
    memory_gb: float
    mem_bw_gbps: float  # GB/s
    up: str  # attachment link GPU -> switch
    down: str  # attachment link switch -> GPU


@dataclass
class RampaNet:
    """Switches, GPUs and directed links of a switched cluster, with hop counts and the
    number of shortest switch paths between every switch pair."""

    cluster: Cluster
    gpus: dict[str, RampaGpu]
    adj: dict[str, list[str]]  # switch -> neighbouring switches
    dist: dict[str, dict[str, int]] = field(default_factory=dict)  # switch hops
    sigma: dict[str, dict[str, int]] = field(default_factory=dict)  # shortest path counts
    out: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # (next, link name)
    _shares: tuple | None = field(default=None, repr=False)

    @staticmethod
    def of(cluster: Cluster) -> RampaNet:
        if not cluster.is_switched:
            raise HetserveError(
                f"cluster {cluster.name}: RAMPA needs a switched topology (topology.switches)"
            )
        gpus = {}
        for n in cluster.nodes:
            if n.switch is None or n.attach != "gpu":
                raise HetserveError(
                    f"cluster {cluster.name}: node {n.name} must attach each GPU to a switch "
                    f"(switch: and attach: gpu)"
                )
            for g in n.gpus:
                t = g.type
                gpus[g.id] = RampaGpu(
                    g.id, t.name, n.switch, n.rack or n.switch, t.fp32_tflops, t.memory_gb,
                    t.mem_bw_gbps, f"{g.id}->{n.switch}", f"{n.switch}->{g.id}",
                )  # fmt: skip
        adj: dict[str, set[str]] = {s: set() for s in cluster.switches}
        for a, b, *_ in cluster.switch_links:
            adj[a].add(b)
            adj[b].add(a)
        net = RampaNet(cluster, gpus, {s: sorted(v) for s, v in adj.items()})
        net.out = {s: [(t, f"{s}->{t}") for t in ts] for s, ts in net.adj.items()}
        for s in net.adj:
            net.dist[s], net.sigma[s] = _bfs_counts(net.adj, s)
        used = {g.switch for g in gpus.values()}
        for s in used:
            missing = sorted(used - set(net.dist[s]))
            if missing:
                raise HetserveError(
                    f"cluster {cluster.name}: the switch graph is disconnected ({s} cannot "
                    f"reach {', '.join(missing[:3])})"
                )
        return net

    def hops(self, g1: str, g2: str) -> int:
        """Shortest hop count between two GPUs (links crossed)."""
        a, b = self.gpus[g1], self.gpus[g2]
        return self.dist[a.switch][b.switch] + 2

    def path_shares(self) -> tuple[list[str], list[str], sparse.csr_matrix]:
        """(switches with GPUs, switch links, the matrix whose entry (link, pair) is the
        pair's share of shortest paths over the link; pairs ``a * n + b`` in that switch
        order)."""
        if self._shares is None:
            racks = sorted({g.switch for g in self.gpus.values()})
            links = [(u, v) for u in self.adj for v in self.adj[u]]
            rows, cols, vals = [], [], []
            n = len(racks)
            for i, s1 in enumerate(racks):
                for j, s2 in enumerate(racks):
                    if i == j:
                        continue
                    for k, (u, v) in enumerate(links):
                        f = self.on_shortest(s1, s2, u, v)
                        if f:
                            rows.append(k)
                            cols.append(i * n + j)
                            vals.append(f)
            m = sparse.csr_matrix((vals, (rows, cols)), shape=(len(links), n * n))
            self._shares = (racks, [f"{u}->{v}" for u, v in links], m)
        return self._shares

    def on_shortest(self, s1: str, s2: str, u: str, v: str) -> float:
        """The share of the shortest switch paths from ``s1`` to ``s2`` that cross the
        directed switch link ``u -> v``."""
        d = self.dist[s1]
        if d.get(u, -1) < 0 or v not in self.dist or s2 not in self.dist[v]:
            return 0.0
        if d[u] + 1 + self.dist[v][s2] != d[s2]:
            return 0.0
        return self.sigma[s1][u] * self.sigma[v][s2] / self.sigma[s1][s2]


def _bfs_counts(adj: Mapping[str, list[str]], src: str) -> tuple[dict[str, int], dict[str, int]]:
    dist, sigma = {src: 0}, {src: 1}
    q = deque([src])
    while q:
        s = q.popleft()
        for t in adj[s]:
            if t not in dist:
                dist[t] = dist[s] + 1
                sigma[t] = 0
                q.append(t)
            if dist[t] == dist[s] + 1:
                sigma[t] += sigma[s]
    return dist, sigma


def gpu_costs(net: RampaNet, free: Iterable[str]) -> dict[str, float]:
    """Eq. 4 for every free GPU: TFLOPS x memory GB x free GPUs in its rack."""
    free = list(free)
    per_rack: dict[str, int] = {}
    for g in free:
        r = net.gpus[g].rack
        per_rack[r] = per_rack.get(r, 0) + 1
    return {
        g: net.gpus[g].tflops * net.gpus[g].memory_gb * per_rack[net.gpus[g].rack] for g in free
    }


def link_costs(net: RampaNet, cost: Mapping[str, float]) -> dict[str, float]:
    """Eq. 5 for every directed link, over the GPUs in ``cost`` (the free ones)."""
    by_switch: dict[str, list[str]] = {}
    for g in cost:
        by_switch.setdefault(net.gpus[g].switch, []).append(g)
    n_s = {s: len(gs) for s, gs in by_switch.items()}
    c_s = {s: sum(cost[g] for g in gs) for s, gs in by_switch.items()}
    out: dict[str, float] = {name: 0.0 for name in net.cluster.links}
    # attachment links: on every path from / to their GPU
    for s, gs in by_switch.items():
        for g in gs:
            up = 0.0
            for s2, m in n_s.items():
                h = net.dist[s][s2] + 2
                others = m - (1 if s2 == s else 0)
                rest = c_s[s2] - (cost[g] if s2 == s else 0.0)
                up += (others * cost[g] + rest) / h
            out[net.gpus[g].up] += up
            out[net.gpus[g].down] += up  # the same pairs, the other direction
    # switch links: per ordered switch pair, the rack sums, spread over the links by the
    # pair's shortest-path shares (a sparse matrix built once per network)
    racks, links, shares = net.path_shares()
    n_v = np.array([n_s.get(r, 0) for r in racks], dtype=float)
    c_v = np.array([c_s.get(r, 0.0) for r in racks])
    hops = np.array([[net.dist[a].get(b, 0) + 2 for b in racks] for a in racks], dtype=float)
    w = (np.outer(c_v, n_v) + np.outer(n_v, c_v)) / hops
    np.fill_diagonal(w, 0.0)
    for name, v in zip(links, shares @ w.ravel(), strict=True):
        out[name] += float(v)
    return out
