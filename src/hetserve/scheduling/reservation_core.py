"""The reservation scheduler's hot path (``scheduling/reservation.py``) on resources
numbered 0..n-1: the reservation table (PPipe appendix A.3, Algorithm 2's
``earliestSlot``), each worker pool's order by where its reservations end, and the probe
(Algorithm 2) that reads them.

This file is plain Python and runs as it is. Where the package was built with Cython
(``setup.py``; ``reservation_core.pxd`` beside it declares the C types), the same file is
also compiled as ``hetserve.scheduling.reservation_core_c`` and the scheduler takes that one
(``reservation_table.py`` chooses; ``HETSERVE_PURE_PYTHON=1`` keeps this one). Both give
the same results, bit for bit (``tests/scheduling/test_reservation_core.py``).

Conventions: a resource with no reservation has ``front`` and ``solid`` -inf; a tag names
one reservation of a resource (tags of one resource are unique and mutually comparable).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence

_EPS = 1e-12
_NEG_INF = -math.inf

# a stage's transfers from the previous stage's worker: per receiving worker (worker,
# links crossed, seconds per bit, delay s), and the least s/bit and delay over them
Xfers = tuple[dict[int, tuple[int, tuple[int, ...], float, float]], float, float]


class PoolOrder:
    """A pool's workers sorted by where their reservations end (``by_front``) and by where
    their final gap-free run begins (``by_solid``), kept current by the table. A probe
    visits the workers with a usable gap first, then the rest by ``front``, and stops as
    soon as no remaining worker can complete earlier: exact, and it usually looks at a
    handful of workers instead of the whole pool. Ties go by worker number."""

    def __init__(self, workers: Sequence[int]) -> None:
        self.by_front: list[tuple[float, int]] = sorted((_NEG_INF, w) for w in workers)
        self.by_solid: list[tuple[float, int]] = sorted((_NEG_INF, w) for w in workers)
        self.min_gap = 0.0  # the largest min_gap of its workers


def _move(lst: list[tuple[float, int]], old_t: float, w: int, new_t: float) -> None:
    i = bisect.bisect_left(lst, (old_t, w))
    del lst[i]
    bisect.insort(lst, (new_t, w))


def _first(x: tuple[float, int]) -> float:
    return x[0]


class SlotTable:
    """Reserved intervals ``[start, end)`` per resource, each tagged.

    Besides the sorted intervals, each resource keeps two numbers so that most queries are
    O(1): ``front`` (where its last reservation ends) and ``solid`` (where its final run of
    reservations begins: from there to ``front`` no gap of at least ``min_gap`` is left).
    A query for ``duration >= min_gap`` starting at ``t >= solid`` can only go at
    ``max(t, front)``; anything else scans the intervals. ``min_gap`` is per resource (the
    reservation scheduler sets a worker's to the shortest stage it ever runs): gaps shorter
    than that can never be used, so they do not break a run. Intervals that end before
    ``now`` are dropped lazily."""

    def __init__(self) -> None:
        self.iv: list[list[tuple[float, float, object]]] = []
        self.front: list[float] = []
        self.solid: list[float] = []
        self.min_gap: list[float] = []
        self.orders_of: list[list[PoolOrder]] = []
        self.now = _NEG_INF

    def grow(self, n: int) -> None:
        """Make room for resources ``0..n-1``."""
        while len(self.iv) < n:
            self.iv.append([])
            self.front.append(_NEG_INF)
            self.solid.append(_NEG_INF)
            self.min_gap.append(0.0)
            self.orders_of.append([])

    def set_min_gap(self, r: int, gap_s: float) -> None:
        self.min_gap[r] = gap_s
        self.update(r)

    def _moved(self, r: int, old_f: float, old_s: float, new_f: float, new_s: float) -> None:
        for order in self.orders_of[r]:
            if old_f != new_f:
                _move(order.by_front, old_f, r, new_f)
            if old_s != new_s:
                _move(order.by_solid, old_s, r, new_s)

    def update(self, r: int) -> None:
        """Drop what ended before ``now``; recompute ``front`` and ``solid`` from the
        intervals."""
        iv = self.iv[r]
        now = self.now
        if iv and iv[0][1] <= now:  # the past can never conflict again: drop it
            k = 1
            while k < len(iv) and iv[k][1] <= now:
                k += 1
            del iv[:k]
        old_f = self.front[r]
        old_s = self.solid[r]
        if not iv:
            run_s = run_e = _NEG_INF
        else:
            usable = self.min_gap[r] - _EPS
            run_s = iv[0][0]
            run_e = iv[0][1]
            for x in iv:
                s = x[0]
                e = x[1]
                if s - run_e >= usable:
                    run_s = s
                if e > run_e:
                    run_e = e
        self.solid[r] = run_s
        self.front[r] = run_e
        if old_f != run_e or old_s != run_s:
            self._moved(r, old_f, old_s, run_e, run_s)

    def forget_before(self, t: float) -> None:
        """Drop intervals that ended before ``t`` (they can no longer conflict)."""
        for r in range(len(self.iv)):
            iv = self.iv[r]
            if iv and iv[0][1] < t:
                self.iv[r] = [x for x in iv if x[1] >= t]
                self.update(r)

    def slot(self, r: int, t: float, duration: float) -> float:
        """Earliest time >= t at which ``r`` is free for ``duration``."""
        f = self.front[r]
        if t >= f - _EPS:
            return t
        if t >= self.solid[r] and duration >= self.min_gap[r]:
            return f
        return self.scan(r, t, duration)

    def scan(self, r: int, t: float, duration: float) -> float:
        """:meth:`slot` by a walk over ``r``'s intervals."""
        iv = self.iv[r]
        if iv[0][1] <= self.now:
            self.update(r)
            if not iv:
                return t
        # sorted by start, not by end (feedback correction can make them overlap)
        start = t
        for x in iv:
            if x[0] >= start + duration - _EPS:
                break
            e = x[1]
            if e > start + _EPS:
                start = e
        return start

    def earliest_slot(self, rs: Sequence[int], t: float, duration: float) -> float:
        """Earliest time >= t at which every resource of ``rs`` is free for ``duration``."""
        start = t
        moved = True
        while moved:
            moved = False
            for r in rs:
                s = self.slot(r, start, duration)
                if s > start:
                    start = s
                    moved = True
        return start

    def add(self, r: int, start: float, end: float, tag: object) -> None:
        """Reserve ``r`` for ``[start, end)`` under ``tag``."""
        iv = self.iv[r]
        now = self.now
        if iv and iv[0][1] <= now:
            # drop the past first; front and solid stay valid (a dropped interval ended
            # before now, so no later query can start inside it)
            k = 1
            while k < len(iv) and iv[k][1] <= now:
                k += 1
            del iv[:k]
        f = self.front[r]
        if f == _NEG_INF or not iv or iv[-1][0] <= start:
            # appended after the others (the usual case): the run extends or starts anew
            iv.append((start, end, tag))
            old_s = self.solid[r]
            new_s = old_s if start - f < self.min_gap[r] - _EPS else start
            new_f = end if end > f else f
            self.front[r] = new_f
            self.solid[r] = new_s
            if f != new_f or old_s != new_s:
                self._moved(r, f, old_s, new_f, new_s)
            return
        bisect.insort(iv, (start, end, tag))
        self.update(r)

    def remove(self, r: int, tag: object) -> None:
        """Release ``r``'s reservation ``tag`` (if any)."""
        iv = self.iv[r]
        if iv:
            self.iv[r] = [x for x in iv if x[2] != tag]
            self.update(r)

    def replace(self, r: int, tag: object, start: float, end: float) -> None:
        """Move ``r``'s reservation ``tag`` to ``[start, end)`` (feedback correction)."""
        iv = [x for x in self.iv[r] if x[2] != tag]
        bisect.insort(iv, (start, end, tag))
        self.iv[r] = iv
        self.update(r)

    def reserve(self, bid: int, resv: list[tuple[int, float, float]], path: list[int]) -> list:
        """Commit a probe's reservations for batch ``bid``, each tagged ``(bid, stage)``;
        returns them as ``(resource, start, duration, stage)``."""
        entries = []
        stage = 0
        for x in resv:
            r = x[0]
            start = x[1]
            dur = x[2]
            self.add(r, start, start + dur, (bid, stage))
            entries.append((r, start, dur, stage))
            if r == path[stage]:
                stage += 1
        return entries

    def correct(
        self,
        bid: int,
        entries: list,
        stage: int,
        worker: int,
        start_s: float,
        end_s: float,
        x_start_s: float,
        x_end_s: float,
        has_transfer: bool,
        completed: bool,
        last: bool,
    ) -> tuple[bool, list | None]:
        """Feedback correction of batch ``bid``'s reservations (``entries`` as
        :meth:`reserve` made them) by its stage ``stage``'s report: that stage's worker
        (``worker``) and transfer move to when they really ran (``start_s``..``end_s``,
        ``x_start_s``..``x_end_s`` where ``has_transfer``); later stages move by the
        stage's overrun (or gain), or are released if the batch stops here (not
        ``completed``). Returns whether any reservation moved, and the entries to keep
        (None: the batch has no more)."""
        delay = 0.0
        changed = False
        for x in entries:
            if x[3] != stage:
                continue
            r = x[0]
            start = x[1]
            dur = x[2]
            if r == worker:
                a = start_s
                b = end_s
                delay = b - (start + dur)
            elif has_transfer:
                a = x_start_s
                b = x_end_s
            else:
                continue
            if abs(a - start) > _EPS or abs(b - start - dur) > _EPS:
                self.replace(r, (bid, stage), a, b)
                changed = True
        if not completed or last:
            if not completed:  # the rest of the batch will not run
                for x in entries:
                    if x[3] > stage:
                        self.remove(x[0], (bid, x[3]))
                        changed = True
            return changed, None
        if abs(delay) > _EPS:  # later stages move with the overrun (or the gain)
            shifted = []
            for x in entries:
                r = x[0]
                start = x[1]
                dur = x[2]
                st = x[3]
                if st > stage:
                    self.replace(r, (bid, st), start + delay, start + delay + dur)
                    start += delay
                shifted.append((r, start, dur, st))
            return True, shifted
        return changed, entries


_NO_XFER: tuple[int, tuple[int, ...], float, float] = (-1, (), 0.0, 0.0)


def probe(
    table: SlotTable,
    info: list[tuple[float, float, PoolOrder]],
    xfers: list[dict[int, Xfers]],
    miss: Callable[[int, int], Xfers],
    lost: set[int],
    now: float,
) -> tuple[list[int], list[tuple[int, float, float]], float, float, list[float]]:
    """PPipe Algorithm 2: stage by stage, the worker of the pool that completes first
    (transfer on both link ends at once, then inference); side-effect free.

    ``info``: per stage its inference seconds, bits crossing the cut into it and its
    pool's order; ``xfers[si]``: the stage's transfers by the previous stage's worker
    (``miss(si, last)`` makes one that is not there yet). Returns the path (a worker per
    stage), the reservations it needs ``(resource, start, duration)``, the completion
    time, the time spent waiting for resources, and the stages' starts; an empty path
    and an infinite completion where a pool has no live worker."""
    front = table.front
    solid = table.solid
    min_gap = table.min_gap
    t_g = now
    last = -1
    path: list[int] = []
    resv: list[tuple[int, float, float]] = []
    starts: list[float] = []
    busy = 0.0
    min_inv = 0.0
    min_delay = 0.0
    xs: dict[int, tuple[int, tuple[int, ...], float, float]] = {}
    for si in range(len(info)):
        st = info[si]
        l_i: float = st[0]
        bits: float = st[1]
        order: PoolOrder = st[2]
        if last < 0:
            xs = {}
            t_lb = t_g
        else:
            hit = xfers[si].get(last)
            if hit is None:
                hit = miss(si, last)
            xs = hit[0]
            min_inv = hit[1]
            min_delay = hit[2]
            t_lb = t_g + bits * min_inv + min_delay  # no transfer arrives earlier
        best_t = math.inf
        best_w = -1
        best_s = 0.0
        best_tl = 0.0
        best_ln = 0.0
        best_links: tuple[int, ...] = ()
        # workers with a usable gap after t_lb first (their front says nothing), then
        # the rest by front: once max(t_lb, front) + l_i cannot beat the best, stop
        by_solid = order.by_solid
        cands: list[tuple[float, int]] = order.by_front
        if by_solid[-1][0] > t_lb:
            k = bisect.bisect_right(by_solid, t_lb, key=_first)
            cands = [(_NEG_INF, x[1]) for x in by_solid[k:]] + order.by_front
        if l_i < order.min_gap:  # a stage shorter than planned for: look at them all
            cands = [(_NEG_INF, x[1]) for x in order.by_front]
        for c in cands:
            f_w = c[0]
            w = c[1]
            if (f_w if f_w > t_lb else t_lb) + l_i >= best_t - _EPS:
                break
            if w in lost:
                continue
            xf = xs.get(w, _NO_XFER)
            links = xf[1]
            if links:
                l_n = bits * xf[2] + xf[3]
                tl = t_g
                for x in links:
                    if t_g < front[x] - _EPS:
                        tl = table.earliest_slot(links, t_g, l_n)
                        break
                arr = tl + l_n
            else:
                l_n = 0.0
                tl = t_g
                arr = t_g
            f = front[w]
            if arr >= f - _EPS:
                s = arr
            elif arr >= solid[w] and l_i >= min_gap[w]:
                s = f
            else:
                s = table.scan(w, arr, l_i)
            if s + l_i < best_t - _EPS:
                best_t = s + l_i
                best_w = w
                best_s = s
                best_tl = tl
                best_ln = l_n
                best_links = links
        if best_w < 0:
            return [], [], math.inf, math.inf, []
        for x in best_links:
            resv.append((x, best_tl, best_ln))
        resv.append((best_w, best_s, l_i))
        busy += best_ln + l_i
        path.append(best_w)
        starts.append(best_s)
        t_g = best_t
        last = best_w
    return path, resv, t_g, t_g - now - busy, starts
