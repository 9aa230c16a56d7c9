"""Reservation tables for PPipe's data plane (PPipe appendix A.3, Algorithm 2's
``earliestSlot``): when each resource (a worker slot, a link) is reserved, and the earliest
time a set of them is free for a while. Used by ``scheduling/reservation.py``."""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Hashable, Sequence

_EPS = 1e-12


class ReservationTable:
    """Reserved intervals ``[start, end)`` per resource, each tagged with a batch id.

    Besides the sorted intervals, each resource keeps two numbers so that most queries are
    O(1): ``front`` (where its last reservation ends) and ``solid`` (where its final run of
    reservations begins: from there to ``front`` no gap of at least ``min_gap`` is left).
    A query for ``duration >= min_gap`` starting at ``t >= solid`` can only go at
    ``max(t, front)``; anything else scans the intervals. ``min_gap`` is per resource (the
    reservation scheduler sets a worker's to the shortest stage it ever runs): gaps shorter
    than that can never be used, so they do not break a run."""

    def __init__(self) -> None:
        self._iv: dict[str, list[tuple[float, float, Hashable]]] = {}
        self.front: dict[str, float] = {}
        self.solid: dict[str, float] = {}
        self.min_gap: dict[str, float] = {}
        self.now = -math.inf  # intervals ending before this are dropped lazily
        # called as (res, old front, old solid, new front, new solid), -inf for none
        self.on_change: Callable[[str, float, float, float, float], None] | None = None

    def intervals(self, res: str) -> list[tuple[float, float, Hashable]]:
        return self._iv.get(res, [])

    def set_min_gap(self, res: str, gap_s: float) -> None:
        self.min_gap[res] = gap_s
        self._update(res)

    def _update(self, res: str) -> None:
        iv = self._iv.get(res)
        if iv and iv[0][1] <= self.now:  # the past can never conflict again: drop it
            k = 1
            while k < len(iv) and iv[k][1] <= self.now:
                k += 1
            del iv[:k]
        old = (self.front.get(res, -math.inf), self.solid.get(res, -math.inf))
        if not iv:
            self.front.pop(res, None)
            self.solid.pop(res, None)
            run_s = run_e = -math.inf
        else:
            usable = self.min_gap.get(res, 0.0) - _EPS
            run_s, run_e = iv[0][0], iv[0][1]
            for s, e, _ in iv:
                if s - run_e >= usable:
                    run_s = s
                if e > run_e:
                    run_e = e
            self.solid[res] = run_s
            self.front[res] = run_e
        if self.on_change is not None and old != (run_e, run_s):
            self.on_change(res, old[0], old[1], run_e, run_s)

    def forget_before(self, t: float) -> None:
        """Drop intervals that ended before ``t`` (they can no longer conflict)."""
        for res, iv in self._iv.items():
            if iv and iv[0][1] < t:
                self._iv[res] = [x for x in iv if x[1] >= t]
                self._update(res)

    def slot(self, res: str, t: float, duration: float) -> float:
        """Earliest time >= t at which ``res`` is free for ``duration``."""
        f = self.front.get(res)
        if f is None or t >= f - _EPS:
            return t
        if t >= self.solid[res] and duration >= self.min_gap.get(res, 0.0):
            return f
        return self._scan(res, t, duration)

    def _scan(self, res: str, t: float, duration: float) -> float:
        iv = self._iv[res]
        if iv[0][1] <= self.now:
            self._update(res)
            if not iv:
                return t
        # sorted by start, not by end (feedback correction can make them overlap)
        start = t
        for s_, e_, _ in iv:
            if s_ >= start + duration - _EPS:
                break
            if e_ > start + _EPS:
                start = e_
        return start

    def earliest_slot(self, resources: Sequence[str], t: float, duration: float) -> float:
        """Earliest time >= t at which every resource is free for ``duration``."""
        start = t
        moved = True
        while moved:
            moved = False
            for res in resources:
                s = self.slot(res, start, duration)
                if s > start:
                    start = s
                    moved = True
        return start

    def add(self, res: str, start: float, end: float, tag: Hashable) -> None:
        """Reserve ``res`` for ``[start, end)``; ``tag`` names the reservation (tags of one
        resource must be unique and mutually comparable)."""
        iv = self._iv.get(res)
        if iv is None:
            iv = self._iv[res] = []
        elif iv and iv[0][1] <= self.now:
            # drop the past first; front and solid stay valid (a dropped interval ended
            # before now, so no later query can start inside it)
            k = 1
            while k < len(iv) and iv[k][1] <= self.now:
                k += 1
            del iv[:k]
        f = self.front.get(res)
        if f is None or not iv or iv[-1][0] <= start:
            # appended after the others (the usual case): the run extends or starts anew
            iv.append((start, end, tag))
            old_s = self.solid.get(res, -math.inf)
            new_s = (
                old_s if f is not None and start - f < self.min_gap.get(res, 0.0) - _EPS else start
            )
            new_f = end if f is None or end > f else f
            self.front[res], self.solid[res] = new_f, new_s
            if self.on_change is not None and (f, old_s) != (new_f, new_s):
                self.on_change(res, -math.inf if f is None else f, old_s, new_f, new_s)
            return
        bisect.insort(iv, (start, end, tag))
        self._update(res)

    def remove(self, res: str, tag: Hashable) -> None:
        iv = self._iv.get(res)
        if iv:
            self._iv[res] = [x for x in iv if x[2] != tag]
            self._update(res)

    def remove_batch(self, tag: Hashable, resources: Sequence[str]) -> None:
        for res in set(resources):
            self.remove(res, tag)

    def replace(self, res: str, tag: Hashable, start: float, end: float) -> None:
        """Move the reservation ``tag`` of ``res`` to ``[start, end)`` (feedback correction)."""
        iv = [x for x in self._iv.get(res, []) if x[2] != tag]
        bisect.insort(iv, (start, end, tag))
        self._iv[res] = iv
        self._update(res)
