"""The one link model, below both engines (``docs/design.md``): directed links with lanes,
FIFO, held end to end (:class:`LinkTable`, written in ``engine/entities_core.py`` and
compiled with the kernel's entities: the kernel takes a lane per activation transfer);
and the host links that planned loads share.

Every directed link of the cluster (NIC uplinks and downlinks, switch links, PCIe, NVLink)
has lanes, each free from some time on. A transfer over a path starts when every link on the
path has a free lane (FIFO in submission order), holds them all for
``bytes / bottleneck bandwidth`` plus the path's propagation delay, and so no lane ever
carries two transfers at once.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from hetserve.core.errors import HetserveError
from hetserve.engine import entities

if TYPE_CHECKING:  # (the same class, as a type checker reads it)
    from hetserve.engine.entities_core import LinkTable
else:
    LinkTable = entities.LinkTable


class HostLinks:
    """Host links in use by planned loads (shared by the simulator and the emulated
    runtime): which GPUs' links a load takes (the worker's, and for parallel
    transmission GPUs of the same node under other PCIe switches joined to it by NVLink,
    the least busy first, then by index) and the factor its load times are multiplied by
    (the number of loads on the busiest link it crosses, itself included)."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.busy: defaultdict[str, int] = defaultdict(int)  # loads over each link
        self._paths: dict[str, tuple[str, ...]] = {}
        self.dha_busy: defaultdict[str, int] = defaultdict(int)  # DHA runs reading over each
        self._until: list[tuple[float, int, tuple[str, ...]]] = []  # DHA runs: (end, seq, path)
        self._seq = 0
        self._cands: dict[str, list[tuple[str, int, object, tuple[str, ...]]]] = {}
        self._switch: dict[str, object] = {}

    def expire(self, now: float) -> None:
        """Forget the DHA runs whose reads have ended by ``now``."""
        until, dha = self._until, self.dha_busy
        while until and until[0][0] <= now + 1e-12:
            for x in heapq.heappop(until)[2]:
                dha[x] -= 1

    def dha_factor(
        self, gpu_id: str, now: float, own: tuple[str, ...] = ()
    ) -> tuple[float, tuple[str, ...]]:
        """The factor a DHA run starting ``now`` on ``gpu_id`` takes (users on the busiest
        link of its host path, itself included; ``own``: links held by its own model's
        cold load, not counted) and the path."""
        if self._until:
            self.expire(now)
        path = self.path(gpu_id)
        busy, dha = self.busy, self.dha_busy
        users = 0
        for x in path:
            u = busy[x] + dha[x]
            if own:
                u -= own.count(x)
            if u > users:
                users = u
        return float(users + 1), path

    def dha_run(self, gpu_id: str, now: float, dha_s: float, own: tuple[str, ...] = ()) -> float:
        """A run on ``gpu_id`` that reads host memory for ``dha_s`` seconds when alone
        starts ``now``: its factor (``dha_factor``); it holds its host path for as long as
        it reads, ``factor * dha_s`` (``hold_until``)."""
        f, path = self.dha_factor(gpu_id, now, own)
        self.hold_until(path, now + f * dha_s)
        return f

    def hold_until(self, path: tuple[str, ...], end_s: float) -> None:
        """A DHA run reads over ``path`` until ``end_s``."""
        dha = self.dha_busy
        for x in path:
            dha[x] += 1
        self._seq += 1
        heapq.heappush(self._until, (end_s, self._seq, path))

    def path(self, gpu_id: str) -> tuple[str, ...]:
        p = self._paths.get(gpu_id)
        if p is None:
            p = self._paths[gpu_id] = tuple(self.cluster.host_path(gpu_id))
        return p

    def take(
        self, gpu_id: str, n_parts: int, model: str, now: float | None = None
    ) -> tuple[list[float], tuple[str, ...]]:
        if now is not None and self._until:
            self.expire(now)
        busy = self.busy
        gpus = [gpu_id, *self.secondaries(gpu_id, n_parts - 1, model)] if n_parts > 1 else [gpu_id]
        paths = [self.path(g) for g in gpus]
        scale = [float(max([busy[x] for x in p]) + 1) for p in paths]
        held = paths[0] if len(paths) == 1 else tuple(x for p in paths for x in p)
        for x in held:
            busy[x] += 1
        return scale, held

    def release(self, held: tuple[str, ...]) -> None:
        for x in held:
            self.busy[x] -= 1

    def secondaries(self, gpu_id: str, k: int, model: str) -> list[str]:
        if k <= 0:
            return []
        cands = self._cands.get(gpu_id)
        if cands is None:
            cands = self._cands[gpu_id] = self._candidates(gpu_id)
        busy = self.busy
        ranked = sorted(
            (max([busy[x] for x in path]), index, switch, gid) for gid, index, switch, path in cands
        )
        seen_switch: set[object] = {self._switch[gpu_id]}
        out = []
        for _, _, s_, gid in ranked:
            if s_ in seen_switch and s_ is not None:
                continue
            seen_switch.add(s_)
            out.append(gid)
            if len(out) == k:
                return out
        raise HetserveError(
            f"load plan of {model} loads over {k + 1} GPUs' host links; GPU {gpu_id}'s "
            f"node offers {len(out) + 1} (GPUs under other PCIe switches joined by NVLink)"
        )

    def _candidates(self, gpu_id: str) -> list[tuple[str, int, object, tuple[str, ...]]]:
        """The GPUs that can carry a part of a load for ``gpu_id``: of its node, under
        another PCIe switch (or none), joined to it by NVLink; (id, index, switch, host
        path) each."""
        g = self.cluster.gpu(gpu_id)
        node = self.cluster.node(g.node)
        sw = node.pcie_switch_of
        mine = sw[g.index] if sw else None
        self._switch[gpu_id] = mine
        pairs = {frozenset(p) for p in node.nvlink_pairs}
        return [
            (o.id, o.index, sw[o.index] if sw else ("own", o.index), self.path(o.id))
            for o in node.gpus
            if o.index != g.index
            and (not sw or sw[o.index] is None or sw[o.index] != mine)
            and frozenset((g.index, o.index)) in pairs
        ]  # fmt: skip
