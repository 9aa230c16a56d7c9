"""Residency and loading as the modelled executor models them (DeepPlan's concern, shared
by the simulator and ``--emulate``): a worker's memory (:class:`Held`), block bytes, warm
starts, planned loads over the host links they share, cold runs and DHA contention
(:class:`Residency`). Written in ``engine/modelled_core.py`` (its docstring's second
part says how), compiled with the modelled executor where it is (``engine.modelled``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetserve.engine import modelled

__all__ = ["Held", "Residency", "block_mask"]

if TYPE_CHECKING:  # (the same names, as a type checker reads them)
    from hetserve.engine.modelled_core import Held, Residency, block_mask
else:
    Held, Residency, block_mask = (
        modelled.core.Held,
        modelled.core.Residency,
        modelled.core.block_mask,
    )
