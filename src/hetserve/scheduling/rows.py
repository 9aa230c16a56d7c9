"""Batches in rows. A request carries ``rows`` rows of input (``core.requests.Request``):
what one client sent, which goes to the GPU in one batch. A batch is as large as its
requests' rows together, and every latency a scheduler looks up is at that size. These are
the helpers the schedulers share for their queues: ``rows_of`` and ``pop_edf`` (the most
urgent requests of a deadline heap whose rows fit; written beside the keyed heaps it pops,
``core/heaps_core.py``, and compiled with them)."""

from __future__ import annotations

from collections.abc import Iterable

from hetserve.core.heaps import pop_edf
from hetserve.core.requests import Request

__all__ = ["pop_edf", "rows_of"]


def rows_of(requests: Iterable[Request]) -> int:
    """The rows of some requests together (a batch's size)."""
    return sum(r.rows for r in requests)
