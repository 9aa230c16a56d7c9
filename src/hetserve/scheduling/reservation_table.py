"""Reservation tables for PPipe's data plane (PPipe appendix A.3, Algorithm 2's
``earliestSlot``): when each resource (a worker slot, a link) is reserved, and the earliest
time a set of them is free for a while. Used by ``scheduling/reservation.py``.

The table itself is ``reservation_slots.SlotTable``, on resources numbered 0..n-1;
:class:`ReservationTable` names them. ``slots`` and ``core`` are the compiled builds of
``reservation_slots.py`` and ``reservation_core.py`` where the package was built with
Cython, else the Python files: both compiled or neither (the core's build takes the
table's C types; ``HETSERVE_PURE_PYTHON=1`` asks for the Python files even where both are
there; ``COMPILED`` says which this process took)."""

from __future__ import annotations

from collections.abc import Sequence

from hetserve.core import heaps, records
from hetserve.core.compiled import python_module
from hetserve.scheduling import policy_core

# (the table's Python file is imported either way: the core's build imports its buffer
# helpers; the core's by name, imported only where its build is not taken)
from hetserve.scheduling import reservation_slots as _pure_slots

_PURE = "hetserve.scheduling.reservation_core"

slots, COMPILED = heaps.build_beside(_pure_slots)
if COMPILED:  # (the core cimports the keyed heaps and the table's types)
    core, COMPILED = heaps.build_beside(
        _PURE, _pure_slots.LAYOUT, *records.LAYOUT, *policy_core.LAYOUT
    )
    if not COMPILED:
        slots = _pure_slots
else:
    core = python_module(_PURE)


class ReservationTable:
    """A :class:`reservation_core.SlotTable` whose resources have names (``str``): ids
    are given in the order names are first seen (:meth:`id_of`, or :meth:`name_all` to
    fix them up front)."""

    def __init__(self) -> None:
        self.core = slots.SlotTable()
        self.ids: dict[str, int] = {}
        self.names: list[str] = []

    def id_of(self, res: str) -> int:
        r = self.ids.get(res)
        if r is None:
            r = self.ids[res] = len(self.names)
            self.names.append(res)
            self.core.grow(len(self.names))
        return r

    def name_all(self, names: Sequence[str]) -> None:
        """Ids for ``names`` (those new, in their order), as :meth:`id_of` of each gives
        them; the table grown once for all of them."""
        ids, known = self.ids, self.names
        for n in names:
            if n not in ids:
                ids[n] = len(known)
                known.append(n)
        self.core.grow(len(known))

    @property
    def now(self) -> float:
        return float(self.core.now)

    @now.setter
    def now(self, t: float) -> None:
        self.core.now = t

    def intervals(self, res: str) -> list[tuple[float, float, int]]:
        r = self.ids.get(res)
        return [] if r is None else self.core.intervals(r)

    def set_min_gap(self, res: str, gap_s: float) -> None:
        self.core.set_min_gap(self.id_of(res), gap_s)

    def forget_before(self, t: float) -> None:
        """Drop intervals that ended before ``t`` (they can no longer conflict)."""
        self.core.forget_before(t)

    def slot(self, res: str, t: float, duration: float) -> float:
        """Earliest time >= t at which ``res`` is free for ``duration``."""
        return float(self.core.slot(self.id_of(res), t, duration))

    def earliest_slot(self, resources: Sequence[str], t: float, duration: float) -> float:
        """Earliest time >= t at which every resource is free for ``duration``."""
        return float(self.core.earliest_slot([self.id_of(r) for r in resources], t, duration))

    def add(self, res: str, start: float, end: float, tag: int) -> None:
        """Reserve ``res`` for ``[start, end)``; ``tag``, an integer, names the reservation
        (tags of one resource must be unique; ``reservation_core.stage_tag`` makes a
        batch's stage's)."""
        self.core.add(self.id_of(res), start, end, tag)

    def remove(self, res: str, tag: int) -> None:
        self.core.remove(self.id_of(res), tag)

    def remove_batch(self, tag: int, resources: Sequence[str]) -> None:
        for res in set(resources):
            self.remove(res, tag)

    def replace(self, res: str, tag: int, start: float, end: float) -> None:
        """Move the reservation ``tag`` of ``res`` to ``[start, end)`` (feedback correction)."""
        self.core.replace(self.id_of(res), tag, start, end)
