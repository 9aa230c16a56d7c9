"""Routes: moving a batch's activations between its stages' workers, and gathering a
continued batch's input from where its requests are parked (open routes, protocol rule 4)."""

from __future__ import annotations

from collections.abc import Mapping

from hetserve.core.cluster import Cluster
from hetserve.core.latency import LatencyModel
from hetserve.core.requests import Request
from hetserve.engine.links import LinkTable
from hetserve.engine.rules import cut_bytes, parked_sources
from hetserve.sim.ledger import Ledger
from hetserve.sim.state import _Worker


class Routes:
    """The simulator's route part: the link model (its own state: when each link is
    free) and the activation sizes at cuts."""

    def __init__(
        self,
        cluster: Cluster,
        latency: LatencyModel,
        workers: dict[str, _Worker],
        ledger: Ledger,
        cut_bytes_factor: float,
        record_links: bool,
        pins: Mapping[tuple[str, str], tuple[str, ...]] | None,
    ) -> None:
        self.latency = latency
        self.workers = workers
        self.ledger = ledger
        self.cut_bytes_factor = cut_bytes_factor
        self.links = LinkTable(cluster, record_links, pins)

    def forward(
        self, model: str, end_block: int, batch: int, src: _Worker, dst: _Worker, now: float
    ) -> tuple[float, float]:
        """Send a batch's activations at the cut after ``end_block - 1`` from ``src`` to
        ``dst``: when the transfer starts and ends."""
        nbytes = cut_bytes(self.latency, model, end_block - 1, batch, self.cut_bytes_factor)
        return self.links.send(src.gpu_id, dst.gpu_id, nbytes, now)

    def gather(
        self, model: str, requests: tuple[Request, ...], first: int, dst: _Worker, now: float
    ) -> tuple[float, float] | None:
        """A continued batch's input: one transfer per worker its requests are parked on,
        each over the links to ``dst``; when the last starts and ends, or None when a
        worker holding some of them is lost."""
        counts = parked_sources(requests, self.ledger.at_worker.__getitem__)  # type: ignore[arg-type]
        workers = self.workers
        if any(workers[src].lost for src in counts):
            return None
        return self.links.gather(
            [(workers[src].gpu_id, k) for src, k in counts.items()],
            dst.gpu_id,
            cut_bytes(self.latency, model, first - 1, 1, self.cut_bytes_factor),
            now,
        )
