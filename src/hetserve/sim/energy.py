"""Energy: every GPU draws its idle power all the time; while a slice runs a stage it draws
the latency model's busy energy (``engine.modelled.busy_j``) instead of its share of idle
power."""

from __future__ import annotations

from hetserve.core.cluster import Cluster
from hetserve.engine.entities import Slot


class Energy:
    """The simulator's energy part: at the end of a run each GPU's and each worker's
    energy, from the workers' busy time and busy energy."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def account(
        self,
        workers: dict[str, Slot],
        busy_s: dict[str, float],
        busy_j: dict[str, float],
        end_s: float,
    ) -> tuple[dict[str, float], dict[str, float]]:
        """(energy per GPU, energy per worker) over ``[0, end_s]``: every GPU idles all the
        time, except one without workers in a cluster that parks them."""
        serving = {w.gpu_id for w in workers.values()}
        park = self.cluster.park_idle_gpus
        gpu_j: dict[str, float] = {
            g.id: g.type.idle_w * end_s if g.id in serving or not park else 0.0
            for g in self.cluster.gpus
        }
        worker_j: dict[str, float] = {}
        for w in workers.values():
            idle_share_w = w.gpu.idle_w / w.info.share
            gpu_j[w.gpu_id] += busy_j[w.id] - idle_share_w * busy_s[w.id]
            worker_j[w.id] = busy_j[w.id] + idle_share_w * (end_s - busy_s[w.id])
        return gpu_j, worker_j
