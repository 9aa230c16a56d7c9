# cython: annotation_typing=False
"""The reservation table of the reservation scheduler (``scheduling/reservation.py``) on
resources numbered 0..n-1 (PPipe appendix A.3, Algorithm 2's ``earliestSlot``): each
resource's reservations (:class:`Lane`), the table (:class:`SlotTable`) with each
worker pool's order by where its reservations end (:class:`PoolOrder`), and the feedback
correction's moves. ``reservation_core.py`` probes and decides on it.

This file is plain Python and runs as it is. Where the package was built with Cython
(``setup.py``; ``reservation_slots_c.pxd`` beside it declares the C types), the same file is
also compiled as ``hetserve.scheduling.reservation_slots_c``, with C doubles and integers
in buffers that grow by doubling (as plain Python, memoryviews of arrays);
``reservation_table.py`` takes both compiled builds or neither. Both give the same
results, bit for bit (``tests/scheduling/test_reservation_core.py``).

Conventions: a resource with no reservation has ``front`` and ``solid`` -inf; a tag names
one reservation of a resource: an integer (a C ``long long`` compiled), unique among the
resource's reservations; equal intervals go by tag. (The reservation scheduler's tag of a
batch's stage is ``reservation_core.stage_tag``; integers, not tuples, so that no object is
made, stored, compared or freed per reservation.)
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from pathlib import Path

try:  # (Cython reads ``cython.compiled`` as True in the build it makes of this file)
    import cython
except ImportError:  # (plain Python, without Cython installed)
    from hetserve.core.records import NO_CYTHON as cython

_EPS = 1e-12
_NEG_INF = -math.inf
NO_TAG = -(1 << 63)  # a tag no reservation has (``Lane.keep``: no tag to drop)
_NO_TAG = NO_TAG  # (compiled: a C integer)
# :meth:`SlotTable.correct`'s flags: a reservation moved; the batch keeps its rows
MOVED = 1
KEPT = 2
_MOVED = MOVED  # (compiled: C integers)
_KEPT = KEPT
#: the C types a build that ``cimport``s this one was made against (``core.compiled``)
LAYOUT = Path(__file__).with_name("reservation_slots_c.pxd")


class PoolOrder:
    """A pool's workers sorted by where their reservations end (``front_t``, with the
    workers in ``front_w``) and by where their final gap-free run begins (``solid_t``,
    ``solid_w``), ``n`` workers each, kept current by the table. A probe visits the
    workers with a usable gap first, then the rest by ``front``, and stops as soon as no
    remaining worker can complete earlier: exact, and it usually looks at a handful of
    workers instead of the whole pool. Ties go by worker number. ``by_front`` and
    ``by_solid`` read them as lists of ``(time, worker)``.

    Each order is a ring: its ``i``-th pair is at ``(front_h + i) & mask`` (``solid_h``
    for the other), in buffers of ``mask + 1`` (a power of two, at least ``n``). A worker
    that takes a new reservation usually goes from near the start of the order to its
    end; in a ring that moves the few pairs before it and after its new place, where a
    flat array moved every pair between (a pool of 750 workers: 12 KB a reservation)."""

    def __init__(self, workers: Sequence[int]) -> None:
        ws = sorted(workers)
        n = len(ws)
        cap = 1
        while cap < n:
            cap <<= 1
        self.n = n
        self.mask = cap - 1
        self.front_h = 0
        self.solid_h = 0
        self.front_t = double_buffer(cap, _NEG_INF)
        self.front_w = int_buffer(cap)
        self.solid_t = double_buffer(cap, _NEG_INF)
        self.solid_w = int_buffer(cap)
        for i in range(n):
            self.front_w[i] = ws[i]
            self.solid_w[i] = ws[i]
        self.min_gap = 0.0  # the largest min_gap of its workers

    @property
    def by_front(self) -> list[tuple[float, int]]:
        h, m = self.front_h, self.mask
        return [
            (float(self.front_t[(h + i) & m]), int(self.front_w[(h + i) & m]))
            for i in range(self.n)
        ]

    @property
    def by_solid(self) -> list[tuple[float, int]]:
        h, m = self.solid_h, self.mask
        return [
            (float(self.solid_t[(h + i) & m]), int(self.solid_w[(h + i) & m]))
            for i in range(self.n)
        ]


def _at(ts: memoryview, ws: memoryview, n: int, h: int, mask: int, t: float, w: int) -> int:
    """Where ``(t, w)`` goes among the ``n`` sorted pairs of a ring (:class:`PoolOrder`)
    that starts at ``h`` (``bisect_left``; the place counted from the start)."""
    lo = 0
    hi = n
    while lo < hi:
        mid = (lo + hi) >> 1
        p = (h + mid) & mask
        u = ts[p]
        if u < t or (u == t and ws[p] < w):
            lo = mid + 1
        else:
            hi = mid
    return lo


def _move(
    ts: memoryview,
    ws: memoryview,
    n: int,
    h: int,
    mask: int,
    old_t: float,
    w: int,
    new_t: float,
) -> int:
    """Move worker ``w``'s pair from ``(old_t, w)`` to ``(new_t, w)`` in a ring of ``n``
    sorted pairs that starts at ``h``; returns where it starts now. Its old place ``i``
    and new place ``k`` (counted without it) are found by bisection. Either the pairs
    between the two places shift by one toward ``i``, or it is taken out and put back in,
    each time shifting the pairs on the shorter side of its place (the ring's start moves
    with those before it): whichever moves fewer pairs."""
    i = _at(ts, ws, n, h, mask, old_t, w)
    j = _at(ts, ws, n, h, mask, new_t, w)  # (counting its own old pair: after it when later)
    k = j - 1 if new_t > old_t else j
    # out and back in: min(i, n-1-i) pairs, then min(k, n-1-k)
    out_in = (i if i < n - 1 - i else n - 1 - i) + (k if k < n - 1 - k else n - 1 - k)
    if (k - i if k > i else i - k) <= out_in:
        if k > i:  # the pairs i+1..k move down by one
            _shift(ts, ws, h, mask, i, i + 1, k - i)
        else:  # the pairs k..i-1 move up by one
            _shift(ts, ws, h, mask, k + 1, k, i - k)
    else:
        if i < n - 1 - i:  # out: the pairs before it move up, and so does the start
            _shift(ts, ws, h, mask, 1, 0, i)
            h = (h + 1) & mask
        else:  # out: the pairs after it move down
            _shift(ts, ws, h, mask, i, i + 1, n - 1 - i)
        if k < n - 1 - k:  # in: the pairs before its place move down, and the start
            h = (h - 1) & mask
            _shift(ts, ws, h, mask, 0, 1, k)
        else:  # in: the pairs from its place on move up
            _shift(ts, ws, h, mask, k + 1, k, n - 1 - k)
    p = (h + k) & mask
    ts[p] = new_t
    ws[p] = w
    return h


def _shift_pairs(
    ts: memoryview, ws: memoryview, h: int, mask: int, dst: int, src: int, count: int
) -> None:
    """Copy the pairs ``src..src+count-1`` of a ring that starts at ``h`` to ``dst..``,
    pair by pair (places counted from the start; the two ranges overlap, ``dst`` one from
    ``src``)."""
    if dst < src:
        for q in range(count):
            a = (h + dst + q) & mask
            b = (h + src + q) & mask
            ts[a] = ts[b]
            ws[a] = ws[b]
    else:
        for q in range(count - 1, -1, -1):
            a = (h + dst + q) & mask
            b = (h + src + q) & mask
            ts[a] = ts[b]
            ws[a] = ws[b]


if not cython.compiled:  # (compiled: the inline C of the .pxd, a ``memmove`` a buffer)
    _shift = _shift_pairs


def int_buffer(n: int) -> memoryview:
    """``n`` zeros in a buffer of their own (compiled, a ``long long[::1]`` view of it)."""
    return memoryview(array("q", [0]) * n)


def double_buffer(n: int, fill: float) -> memoryview:
    """``n`` doubles, each ``fill``, in a buffer of their own (compiled, a ``double[::1]``
    view of it; as plain Python, a ``memoryview`` that reads and writes floats)."""
    return memoryview(array("d", [fill]) * n)


LANE_ROOM = 4  # a lane's room for intervals at first (it doubles as it fills)


def new_lanes(k: int) -> list:
    """``k`` empty lanes (:class:`Lane`) whose first buffers are slices of three made for
    all of them: three buffers made, not ``3 k`` (compiled, each a typed memoryview:
    1,000 workers' lanes took 1.6-2.6 ms of a run's start). A lane that fills gets
    buffers of its own (:meth:`Lane.room`); until then it writes only its own slice."""
    s_all = double_buffer(LANE_ROOM * k, 0.0)
    e_all = double_buffer(LANE_ROOM * k, 0.0)
    tags_all = int_buffer(LANE_ROOM * k)
    out = []
    for j in range(k):
        lane = Lane.__new__(Lane)
        a = LANE_ROOM * j
        lane.s = s_all[a : a + LANE_ROOM]
        lane.e = e_all[a : a + LANE_ROOM]
        lane.tags = tags_all[a : a + LANE_ROOM]
        lane.lo = 0
        lane.hi = 0
        out.append(lane)
    return out


class Lane:
    """One resource's reservations: intervals ``[s[i], e[i])`` tagged ``tags[i]`` for
    ``lo <= i < hi``, sorted by start, in buffers that grow by doubling (compiled, C
    doubles and integers: no object per interval). Dropping the past moves ``lo``; the
    live part moves down to 0 when the buffers are full, before they grow."""

    def __init__(self) -> None:
        self.s = double_buffer(LANE_ROOM, 0.0)
        self.e = double_buffer(LANE_ROOM, 0.0)
        self.tags = int_buffer(LANE_ROOM)
        self.lo = 0
        self.hi = 0

    def drop_past(self, now: float) -> None:
        """Drop the leading intervals that ended by ``now`` (the past can never conflict
        again)."""
        lo = self.lo
        hi = self.hi
        while lo < hi and self.e[lo] <= now:  # (not a local: see ``reservation_core.probe``)
            lo += 1
        if lo == hi:
            lo = hi = 0
            self.hi = 0
        self.lo = lo

    def room(self) -> None:
        """Make room for one more interval at ``hi``."""
        cap = len(self.tags)
        if self.hi < cap:
            return
        lo = self.lo
        n = self.hi - lo
        s = self.s
        e = self.e
        tags = self.tags
        if 2 * lo >= cap:  # at least half of it dead: move the live part down
            # (not at any ``lo > 0``: with the buffers nearly all live, each add would
            # move them all again; a move now frees at least half of them)
            for i in range(n):
                s[i] = s[lo + i]
                e[i] = e[lo + i]
                tags[i] = tags[lo + i]
            self.lo = 0
            self.hi = n
        else:  # twice the room, the intervals where they are
            s2 = double_buffer(2 * cap, 0.0)
            e2 = double_buffer(2 * cap, 0.0)
            tags2 = int_buffer(2 * cap)
            for i in range(lo, lo + n):
                s2[i] = s[i]
                e2[i] = e[i]
                tags2[i] = tags[i]
            self.s = s2
            self.e = e2
            self.tags = tags2

    def insort(self, start: float, end: float, tag: int) -> None:
        """Insert ``(start, end, tag)`` where ``bisect.insort`` puts it in the list of
        ``(s, e, tag)`` tuples: after the last that is not greater (the same comparisons,
        in the same order)."""
        self.room()
        s = self.s
        e = self.e
        tags = self.tags
        lo = self.lo
        hi = self.hi
        a = lo
        b = hi
        while a < b:
            mid = (a + b) >> 1
            u = s[mid]
            v = e[mid]
            if start < u or (start == u and (end < v or (end == v and tag < tags[mid]))):
                b = mid
            else:
                a = mid + 1
        i = hi
        while i > a:
            s[i] = s[i - 1]
            e[i] = e[i - 1]
            tags[i] = tags[i - 1]
            i -= 1
        s[a] = start
        e[a] = end
        tags[a] = tag
        self.hi = hi + 1

    def keep(self, tag: int, t: float) -> None:
        """Drop every interval tagged ``tag`` and every one that ends before ``t``
        (``NO_TAG``, ``-inf``: no such condition)."""
        s = self.s
        e = self.e
        tags = self.tags
        hi = self.hi
        j = self.lo
        for i in range(self.lo, hi):
            x = tags[i]
            if x != tag and e[i] >= t:
                if j != i:
                    s[j] = s[i]
                    e[j] = e[i]
                    tags[j] = x
                j += 1
        self.hi = j

    def intervals(self) -> list[tuple[float, float, int]]:
        return [(self.s[i], self.e[i], self.tags[i]) for i in range(self.lo, self.hi)]


class Bookings:
    """Every batch's reservations as ``reservation_core.reserve`` made them, one row each
    in buffers (compiled, C numbers: no tuple and floats made per reservation): each
    one's resource (``r``), start (``t``), duration (``d``), stage (``st``) and tag
    (``tags``: the one a stage's rows share, ``reservation_core.stage_tag``), and the next row
    of its batch (``nxt``; -1 after the last). A batch is known by its first row. The
    rows of a batch :meth:`release` gives back are used again (``free``: the first of
    them, chained by ``nxt``); ``top``: the rows used so far."""

    def __init__(self, cap: int = 64) -> None:
        self.r = int_buffer(cap)
        self.t = double_buffer(cap, 0.0)
        self.d = double_buffer(cap, 0.0)
        self.st = int_buffer(cap)
        self.nxt = int_buffer(cap)
        self.tags = int_buffer(cap)
        self.top = 0
        self.free = -1

    def new_row(self, r: int, t: float, d: float, st: int, tag: int) -> int:
        """A row for a reservation, the last of its batch so far (``nxt`` -1)."""
        k = self.free
        if k >= 0:
            self.free = self.nxt[k]
        else:
            k = self.top
            if k == len(self.tags):
                self._grow()
            self.top = k + 1
        self.r[k] = r
        self.t[k] = t
        self.d[k] = d
        self.st[k] = st
        self.nxt[k] = -1
        self.tags[k] = tag
        return k

    def _grow(self) -> None:
        """Twice the rows (the buffers copied)."""
        n = len(self.tags)
        r = int_buffer(2 * n)
        t = double_buffer(2 * n, 0.0)
        d = double_buffer(2 * n, 0.0)
        st = int_buffer(2 * n)
        nxt = int_buffer(2 * n)
        tags = int_buffer(2 * n)
        for i in range(n):
            r[i] = self.r[i]
            t[i] = self.t[i]
            d[i] = self.d[i]
            st[i] = self.st[i]
            nxt[i] = self.nxt[i]
            tags[i] = self.tags[i]
        self.r = r
        self.t = t
        self.d = d
        self.st = st
        self.nxt = nxt
        self.tags = tags

    def release(self, first: int) -> None:
        """The rows of the batch whose first row is ``first`` are free again."""
        k = first
        while k >= 0:
            nx = self.nxt[k]
            self.nxt[k] = self.free
            self.free = k
            k = nx

    def entries(self, first: int) -> list[tuple[int, float, float, int, int]]:
        """The batch's reservations as ``(resource, start, duration, stage, tag)``, in the
        order they were made."""
        out = []
        k = first
        while k >= 0:
            out.append((int(self.r[k]), float(self.t[k]), float(self.d[k]), int(self.st[k]),
                        int(self.tags[k])))  # fmt: skip
            k = self.nxt[k]
        return out


class SlotTable:
    """Reserved intervals ``[start, end)`` per resource, each tagged (a :class:`Lane`
    each).

    Besides the sorted intervals, each resource keeps two numbers so that most queries are
    O(1): ``front`` (where its last reservation ends) and ``solid`` (where its final run of
    reservations begins: from there to ``front`` no gap of at least ``min_gap`` is left).
    A query for ``duration >= min_gap`` starting at ``t >= solid`` can only go at
    ``max(t, front)``; anything else scans the intervals. ``min_gap`` is per resource (the
    reservation scheduler sets a worker's to the shortest stage it ever runs): gaps shorter
    than that can never be used, so they do not break a run. Intervals that end before
    ``now`` are dropped lazily. ``front``, ``solid`` and ``min_gap`` are buffers of
    doubles with room for more resources than there are (``n``)."""

    def __init__(self) -> None:
        self.lanes: list[Lane] = []
        self.n = 0
        self.front = double_buffer(0, _NEG_INF)
        self.solid = double_buffer(0, _NEG_INF)
        self.min_gap = double_buffer(0, 0.0)
        self.orders_of: list[list[PoolOrder]] = []
        self.now = _NEG_INF

    def grow(self, n: int) -> None:
        """Make room for resources ``0..n-1``."""
        if n <= self.n:
            return
        cap = len(self.lanes)
        if n > len(self.front):
            room = max(n, 2 * len(self.front))
            front = double_buffer(room, _NEG_INF)
            solid = double_buffer(room, _NEG_INF)
            min_gap = double_buffer(room, 0.0)
            for r in range(cap):
                front[r] = self.front[r]
                solid[r] = self.solid[r]
                min_gap[r] = self.min_gap[r]
            self.front = front
            self.solid = solid
            self.min_gap = min_gap
        if len(self.lanes) < n:
            more = n - len(self.lanes)
            self.lanes.extend(new_lanes(more))
            self.orders_of.extend([[] for _ in range(more)])
        self.n = n

    def bookings(self) -> Bookings:
        """An empty ledger of batches' reservations (:class:`Bookings`) of this table's
        build (compiled or not: :meth:`correct` takes its own kind)."""
        return Bookings()

    def intervals(self, r: int) -> list[tuple[float, float, int]]:
        """Resource ``r``'s reservations as ``(start, end, tag)``, by start."""
        return self.lanes[r].intervals()

    def set_min_gap(self, r: int, gap_s: float) -> None:
        self.min_gap[r] = gap_s
        self.update(r)

    def _moved(self, r: int, old_f: float, old_s: float, new_f: float, new_s: float) -> int:
        for order in self.orders_of[r]:
            if old_f != new_f:
                order.front_h = _move(order.front_t, order.front_w, order.n, order.front_h,
                                      order.mask, old_f, r, new_f)  # fmt: skip
            if old_s != new_s:
                order.solid_h = _move(order.solid_t, order.solid_w, order.n, order.solid_h,
                                      order.mask, old_s, r, new_s)  # fmt: skip
        return 0

    def update(self, r: int) -> None:
        """Drop what ended before ``now``; recompute ``front`` and ``solid`` from the
        intervals."""
        lane: Lane = self.lanes[r]
        lane.drop_past(self.now)
        old_f = self.front[r]
        old_s = self.solid[r]
        lo = lane.lo
        hi = lane.hi
        if lo == hi:
            run_s = run_e = _NEG_INF
        else:
            s = lane.s
            e = lane.e
            usable = self.min_gap[r] - _EPS
            run_s = s[lo]
            run_e = e[lo]
            for i in range(lo, hi):
                a = s[i]
                b = e[i]
                if a - run_e >= usable:
                    run_s = a
                if b > run_e:
                    run_e = b
        self.solid[r] = run_s
        self.front[r] = run_e
        if old_f != run_e or old_s != run_s:
            self._moved(r, old_f, old_s, run_e, run_s)

    def forget_before(self, t: float) -> None:
        """Drop intervals that ended before ``t`` (they can no longer conflict)."""
        for r in range(self.n):
            lane: Lane = self.lanes[r]
            if lane.lo < lane.hi and lane.e[lane.lo] < t:
                lane.keep(_NO_TAG, t)
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
        lane: Lane = self.lanes[r]
        if lane.lo == lane.hi or lane.e[lane.lo] <= self.now:
            self.update(r)
            if lane.lo == lane.hi:
                return t
        # sorted by start, not by end (feedback correction can make them overlap)
        s = lane.s
        e = lane.e
        start = t
        for i in range(lane.lo, lane.hi):
            if s[i] >= start + duration - _EPS:
                break
            b = e[i]
            if b > start + _EPS:
                start = b
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

    def add(self, r: int, start: float, end: float, tag: int) -> int:
        """Reserve ``r`` for ``[start, end)`` under ``tag``."""
        lane: Lane = self.lanes[r]
        # drop the past first; front and solid stay valid (a dropped interval ended before
        # now, so no later query can start inside it)
        lane.drop_past(self.now)
        f = self.front[r]
        hi = lane.hi
        if f == _NEG_INF or lane.lo == hi or lane.s[hi - 1] <= start:
            # appended after the others (the usual case): the run extends or starts anew
            if hi == len(lane.tags):
                lane.room()
                hi = lane.hi
            lane.s[hi] = start
            lane.e[hi] = end
            lane.tags[hi] = tag
            lane.hi = hi + 1
            old_s = self.solid[r]
            new_s = old_s if start - f < self.min_gap[r] - _EPS else start
            new_f = end if end > f else f
            self.front[r] = new_f
            self.solid[r] = new_s
            if f != new_f or old_s != new_s:
                self._moved(r, f, old_s, new_f, new_s)
            return 0
        lane.insort(start, end, tag)
        self.update(r)
        return 0

    def remove(self, r: int, tag: int) -> None:
        """Release ``r``'s reservation ``tag`` (if any)."""
        lane: Lane = self.lanes[r]
        if lane.lo < lane.hi:
            lane.keep(tag, _NEG_INF)
            self.update(r)

    def replace(self, r: int, tag: int, start: float, end: float) -> None:
        """Move ``r``'s reservation ``tag`` to ``[start, end)`` (feedback correction)."""
        lane: Lane = self.lanes[r]
        lane.keep(tag, _NEG_INF)
        lane.insort(start, end, tag)
        self.update(r)

    def correct(
        self,
        bid: int,
        bk: Bookings,
        first: int,
        stage: int,
        start_s: float,
        end_s: float,
        x_start_s: float,
        x_end_s: float,
        has_transfer: bool,
        completed: bool,
        last: bool,
    ) -> int:
        """Feedback correction of batch ``bid``'s reservations (the rows of ``bk`` from
        ``first`` on, as ``reservation_core.reserve`` made them) by its stage ``stage``'s
        report: that stage's worker and transfer move to when they really ran
        (``start_s``..``end_s``, ``x_start_s``..``x_end_s`` where ``has_transfer``); later
        stages move by the stage's overrun (or gain), their rows with them, or are
        released if the batch stops here (not ``completed``). Returns ``MOVED`` (1) where
        any reservation moved, plus ``KEPT`` (2) where the batch keeps its rows (without
        it, the batch has no more reservations to correct: the caller releases the
        rows). (Two flags in one integer: no tuple made per report.) The stage's worker's
        row is its last (``reservation_core.reserve`` books a stage's transfers, then the
        worker that runs it), so the report's worker is not looked up: the stage ran on
        the worker it was routed to (``Kernel`` starts a stage on its route step's)."""
        delay = 0.0
        changed = False
        k = first
        while k >= 0:
            if bk.st[k] == stage:
                r = bk.r[k]
                start = bk.t[k]
                dur = bk.d[k]
                moves = True
                nk = bk.nxt[k]
                if nk < 0 or bk.st[nk] != stage:  # (the stage's last row: its worker's)
                    a = start_s
                    b = end_s
                    delay = b - (start + dur)
                elif has_transfer:
                    a = x_start_s
                    b = x_end_s
                else:
                    moves = False
                if moves and (abs(a - start) > _EPS or abs(b - start - dur) > _EPS):
                    self.replace(r, bk.tags[k], a, b)
                    changed = True
            k = bk.nxt[k]
        if not completed or last:
            if not completed:  # the rest of the batch will not run
                k = first
                while k >= 0:
                    if bk.st[k] > stage:
                        self.remove(bk.r[k], bk.tags[k])
                        changed = True
                    k = bk.nxt[k]
            return _MOVED if changed else 0
        if abs(delay) > _EPS:  # later stages move with the overrun (or the gain)
            k = first
            while k >= 0:
                if bk.st[k] > stage:
                    start = bk.t[k]
                    dur = bk.d[k]
                    self.replace(bk.r[k], bk.tags[k], start + delay, start + delay + dur)
                    bk.t[k] = start + delay
                k = bk.nxt[k]
            return _MOVED | _KEPT
        return (_MOVED | _KEPT) if changed else _KEPT
