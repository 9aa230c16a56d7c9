"""Energy: every GPU draws its idle power all the time; while a slice runs a stage it draws
the latency model's busy energy instead of its share of idle power."""

from __future__ import annotations

from hetserve.core.cluster import Cluster
from hetserve.core.errors import HetserveError
from hetserve.core.gpus import GpuType
from hetserve.core.latency import LatencyModel, busy_power_w
from hetserve.sim.state import _Worker


class Energy:
    """The simulator's energy part: a stage run's busy energy, and at the end of a run
    each GPU's and each worker's energy."""

    def __init__(self, cluster: Cluster, latency: LatencyModel) -> None:
        self.cluster = cluster
        self.latency = latency

    def busy_j(
        self, model: str, gpu: GpuType, share: int, batch: int, blocks: range, busy_s: float
    ) -> float:
        """Busy energy of a run of ``blocks`` that takes ``busy_s``: the latency model's,
        or the GPU's busy power share for that long when the model has no energy table."""
        try:
            return self.latency.energy(model, gpu, share, batch, blocks)
        except HetserveError:
            return busy_s * busy_power_w(gpu, share, 1.0)

    def account(
        self, workers: dict[str, _Worker], end_s: float
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
            gpu_j[w.gpu_id] += w.busy_energy_j - idle_share_w * w.busy_s
            worker_j[w.id] = w.busy_energy_j + idle_share_w * (end_s - w.busy_s)
        return gpu_j, worker_j
