"""The one link model (DESIGN.md): directed links with lanes, FIFO, held end to end.

Every directed link of the cluster (NIC uplinks and downlinks, switch links, PCIe, NVLink)
has lanes, each free from some time on. A transfer over a path starts when every link on the
path has a free lane (FIFO in submission order), holds them all for
``bytes / bottleneck bandwidth`` plus the path's propagation delay, and so no lane ever
carries two transfers at once.
"""

from __future__ import annotations

import math

from hetserve.core.cluster import Cluster


class LinkTable:
    def __init__(self, cluster: Cluster, record: bool = False) -> None:
        self.cluster = cluster
        self.record = record
        self._lanes: dict[str, list[float]] = {}
        self._paths: dict[tuple[str, str], tuple[tuple[str, ...], float, float]] = {}
        self.log: dict[str, list[tuple[float, float]]] = {}

    def path(self, a: str, b: str) -> tuple[tuple[str, ...], float, float]:
        """Links between two GPUs, the bottleneck Gbit/s and the path's delay (cached)."""
        key = (a, b)
        hit = self._paths.get(key)
        if hit is None:
            p = self.cluster.transfer_path(a, b) if a != b else []
            links = self.cluster.links
            bw = min((links[x].bw_gbps for x in p), default=math.inf)
            delay = sum(links[x].delay_s for x in p)
            hit = (tuple(p), bw, delay)
            self._paths[key] = hit
        return hit

    def pin(self, a: str, b: str, path: tuple[str, ...]) -> None:
        """Transfers from GPU ``a`` to GPU ``b`` take ``path`` (a placement's chosen route)
        instead of the cluster's shortest one."""
        links = self.cluster.links
        unknown = [x for x in path if x not in links]
        if unknown:
            raise KeyError(f"path {a} -> {b}: unknown links {unknown}")
        bw = min((links[x].bw_gbps for x in path), default=math.inf)
        self._paths[(a, b)] = (tuple(path), bw, sum(links[x].delay_s for x in path))

    def transfer(
        self, path: tuple[str, ...], bw_gbps: float, delay_s: float, n_bytes: float, now: float
    ) -> tuple[float, float]:
        """Take a lane on every link of ``path`` for the transfer; returns (start, end)."""
        if not path or n_bytes <= 0:
            return now, now
        lanes = self._lanes
        links = self.cluster.links
        chosen = []
        start = now
        for name in path:
            ls = lanes.get(name)
            if ls is None:
                ls = lanes[name] = [0.0] * links[name].lanes
            i = min(range(len(ls)), key=ls.__getitem__)
            chosen.append((ls, i))
            start = max(start, ls[i])
        end = start + n_bytes * 8 / (bw_gbps * 1e9) + delay_s
        for ls, i in chosen:
            ls[i] = end
        if self.record:
            for name in path:
                self.log.setdefault(name, []).append((start, end))
        return start, end
