# cython: annotation_typing=False
"""The reservation scheduler's hot path (``scheduling/reservation.py``) on resources
numbered 0..n-1: the reservation table (PPipe appendix A.3, Algorithm 2's
``earliestSlot``), each worker pool's order by where its reservations end, the probe
(Algorithm 2) that reads them, and the decisions (Algorithm 1, its queues and the feedback
correction: :class:`Algorithm1`), which take the protocol's calls whole.

This file is plain Python and runs as it is. Where the package was built with Cython
(``setup.py``; ``reservation_core_c.pxd`` beside it declares the C types), the same file is
also compiled as ``hetserve.scheduling.reservation_core_c`` and the scheduler takes that one
(``reservation_table.py`` chooses; ``HETSERVE_PURE_PYTHON=1`` keeps this one). Both give
the same results, bit for bit (``tests/scheduling/test_reservation_core.py``).

Conventions: a resource with no reservation has ``front`` and ``solid`` -inf; a tag names
one reservation of a resource (tags of one resource are unique and mutually comparable).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Sequence

from hetserve.core.heaps import pop, pop_edf, push
from hetserve.scheduling.protocol import RETURNED, Dispatch, Drop, RouteStep, SetTimer

_EPS = 1e-12
_NEG_INF = -math.inf
_NO_TAG = object()  # (a tag no reservation has: ``Lane.keep``)
# the protocol's actions made without their Python constructors (NamedTuples: the class's
# own ``__new__`` is a Python function, a frame per action; this is one C call)
_new = tuple.__new__

# a stage's transfers from the previous stage's worker: per receiving worker (worker,
# links crossed, seconds per bit, delay s), and the least s/bit and delay over them
Xfers = tuple[dict[int, tuple[int, tuple[int, ...], float, float]], float, float]


class PoolOrder:
    """A pool's workers sorted by where their reservations end (``front_t``, with the
    workers in ``front_w``) and by where their final gap-free run begins (``solid_t``,
    ``solid_w``), ``n`` workers each, kept current by the table. A probe visits the
    workers with a usable gap first, then the rest by ``front``, and stops as soon as no
    remaining worker can complete earlier: exact, and it usually looks at a handful of
    workers instead of the whole pool. Ties go by worker number. ``by_front`` and
    ``by_solid`` read them as lists of ``(time, worker)``."""

    def __init__(self, workers: Sequence[int]) -> None:
        ws = sorted(workers)
        n = len(ws)
        self.n = n
        self.front_t = _doubles(n, _NEG_INF)
        self.front_w = _ints(n)
        self.solid_t = _doubles(n, _NEG_INF)
        self.solid_w = _ints(n)
        for i in range(n):
            self.front_w[i] = ws[i]
            self.solid_w[i] = ws[i]
        self.min_gap = 0.0  # the largest min_gap of its workers

    @property
    def by_front(self) -> list[tuple[float, int]]:
        return [(float(self.front_t[i]), int(self.front_w[i])) for i in range(self.n)]

    @property
    def by_solid(self) -> list[tuple[float, int]]:
        return [(float(self.solid_t[i]), int(self.solid_w[i])) for i in range(self.n)]


def _at(ts: memoryview, ws: memoryview, n: int, t: float, w: int) -> int:
    """Where ``(t, w)`` goes among the first ``n`` of the sorted pairs ``(ts[i], ws[i])``
    (``bisect_left``)."""
    lo = 0
    hi = n
    while lo < hi:
        mid = (lo + hi) >> 1
        u = ts[mid]
        if u < t or (u == t and ws[mid] < w):
            lo = mid + 1
        else:
            hi = mid
    return lo


def _move(ts: memoryview, ws: memoryview, n: int, old_t: float, w: int, new_t: float) -> None:
    """Move worker ``w``'s pair from ``(old_t, w)`` to ``(new_t, w)``: the pairs between
    its old place and its new one shift by one (a worker has one pair; fronts and solids
    mostly move a little, so few do)."""
    i = _at(ts, ws, n, old_t, w)
    if new_t > old_t:  # later: the next ones that come before it move down
        j = i + 1
        while j < n and (ts[j] < new_t or (ts[j] == new_t and ws[j] < w)):
            ts[j - 1] = ts[j]
            ws[j - 1] = ws[j]
            j += 1
        ts[j - 1] = new_t
        ws[j - 1] = w
    else:  # earlier: the ones before it that come after it move up
        j = i
        while j > 0 and (ts[j - 1] > new_t or (ts[j - 1] == new_t and ws[j - 1] > w)):
            ts[j] = ts[j - 1]
            ws[j] = ws[j - 1]
            j -= 1
        ts[j] = new_t
        ws[j] = w


def _ints(n: int) -> memoryview:
    return memoryview(array("q", [0]) * n)


def _doubles(n: int, fill: float) -> memoryview:
    """``n`` doubles, each ``fill``, in a buffer of their own (compiled, a ``double[::1]``
    view of it; as plain Python, a ``memoryview`` that reads and writes floats)."""
    return memoryview(array("d", [fill]) * n)


class Lane:
    """One resource's reservations: intervals ``[s[i], e[i])`` tagged ``tags[i]`` for
    ``lo <= i < hi``, sorted by start, in buffers that grow by doubling (compiled, C
    doubles: no object per interval). Dropping the past moves ``lo``; the live part moves
    down to 0 when the buffers are full, before they grow."""

    def __init__(self) -> None:
        self.s = _doubles(4, 0.0)
        self.e = _doubles(4, 0.0)
        self.tags: list = [None] * 4
        self.lo = 0
        self.hi = 0

    def drop_past(self, now: float) -> None:
        """Drop the leading intervals that ended by ``now`` (the past can never conflict
        again)."""
        e = self.e
        tags = self.tags
        lo = self.lo
        hi = self.hi
        while lo < hi and e[lo] <= now:
            tags[lo] = None
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
        if lo > 0:  # move the live part down
            for i in range(n):
                s[i] = s[lo + i]
                e[i] = e[lo + i]
                tags[i] = tags[lo + i]
            for i in range(n, cap):
                tags[i] = None
        else:  # full: twice the room
            s2 = _doubles(2 * cap, 0.0)
            e2 = _doubles(2 * cap, 0.0)
            for i in range(n):
                s2[i] = s[i]
                e2[i] = e[i]
            self.s = s2
            self.e = e2
            tags.extend([None] * cap)
        self.lo = 0
        self.hi = n

    def insort(self, start: float, end: float, tag: object) -> None:
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

    def keep(self, tag: object, t: float) -> None:
        """Drop every interval tagged ``tag`` and every one that ends before ``t``
        (``_NO_TAG``, ``-inf``: no such condition)."""
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
        for i in range(j, hi):
            tags[i] = None
        self.hi = j

    def intervals(self) -> list[tuple[float, float, object]]:
        return [(self.s[i], self.e[i], self.tags[i]) for i in range(self.lo, self.hi)]


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
        self.front = _doubles(0, _NEG_INF)
        self.solid = _doubles(0, _NEG_INF)
        self.min_gap = _doubles(0, 0.0)
        self.orders_of: list[list[PoolOrder]] = []
        self.now = _NEG_INF

    def grow(self, n: int) -> None:
        """Make room for resources ``0..n-1``."""
        if n <= self.n:
            return
        cap = len(self.lanes)
        if n > len(self.front):
            room = max(n, 2 * len(self.front))
            front = _doubles(room, _NEG_INF)
            solid = _doubles(room, _NEG_INF)
            min_gap = _doubles(room, 0.0)
            for r in range(cap):
                front[r] = self.front[r]
                solid[r] = self.solid[r]
                min_gap[r] = self.min_gap[r]
            self.front = front
            self.solid = solid
            self.min_gap = min_gap
        while len(self.lanes) < n:
            self.lanes.append(Lane())
            self.orders_of.append([])
        self.n = n

    def intervals(self, r: int) -> list[tuple[float, float, object]]:
        """Resource ``r``'s reservations as ``(start, end, tag)``, by start."""
        return self.lanes[r].intervals()

    def set_min_gap(self, r: int, gap_s: float) -> None:
        self.min_gap[r] = gap_s
        self.update(r)

    def _moved(self, r: int, old_f: float, old_s: float, new_f: float, new_s: float) -> None:
        for order in self.orders_of[r]:
            if old_f != new_f:
                _move(order.front_t, order.front_w, order.n, old_f, r, new_f)
            if old_s != new_s:
                _move(order.solid_t, order.solid_w, order.n, old_s, r, new_s)

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

    def add(self, r: int, start: float, end: float, tag: object) -> None:
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
            return
        lane.insort(start, end, tag)
        self.update(r)

    def remove(self, r: int, tag: object) -> None:
        """Release ``r``'s reservation ``tag`` (if any)."""
        lane: Lane = self.lanes[r]
        if lane.lo < lane.hi:
            lane.keep(tag, _NEG_INF)
            self.update(r)

    def replace(self, r: int, tag: object, start: float, end: float) -> None:
        """Move ``r``'s reservation ``tag`` to ``[start, end)`` (feedback correction)."""
        lane: Lane = self.lanes[r]
        lane.keep(tag, _NEG_INF)
        lane.insort(start, end, tag)
        self.update(r)

    def reserve(self, bid: int, pr: Probed) -> list:
        """Commit a probe's reservations for batch ``bid``, each tagged ``(bid, stage)``;
        returns them as ``(resource, start, duration, stage)``."""
        entries = []
        stage = 0
        path_w = pr.path_w
        for k in range(pr.n_resv):
            r = pr.resv_r[k]
            start = pr.resv_t[k]
            dur = pr.resv_d[k]
            self.add(r, start, start + dur, (bid, stage))
            entries.append((r, start, dur, stage))
            if r == path_w[stage]:
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
    out: Probed,
) -> None:
    """PPipe Algorithm 2: stage by stage, the worker of the pool that completes first
    (transfer on both link ends at once, then inference); side-effect free but for
    ``out``, where it writes its result.

    ``info``: per stage its inference seconds, bits crossing the cut into it and its
    pool's order; ``xfers[si]``: the stage's transfers by the previous stage's worker
    (``miss(si, last)`` makes one that is not there yet). Writes the path (a worker per
    stage), the reservations it needs ``(resource, start, duration)``, the completion
    time, the time spent waiting for resources, and the stages' starts into ``out``
    (:class:`Probed`); an empty path and an infinite completion where a pool has no live
    worker."""
    front = table.front
    solid = table.solid
    min_gap = table.min_gap
    t_g = now
    last = -1
    path_w = out.path_w
    start_s = out.start_s
    out.n_resv = 0
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
                # (it may have numbered new links: the table's buffers may have grown)
                front = table.front
                solid = table.solid
                min_gap = table.min_gap
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
        # (candidates j = k0..n-1: by_solid's from the first that begins after t_lb, as if
        # their front were -inf; then j = n..2n-1: by_front's)
        n_w = order.n
        solid_t = order.solid_t
        k0 = n_w
        if solid_t[n_w - 1] > t_lb:  # (bisect_right by time)
            k0 = 0
            hi = n_w
            while k0 < hi:
                mid = (k0 + hi) >> 1
                if t_lb < solid_t[mid]:
                    hi = mid
                else:
                    k0 = mid + 1
        all_inf = l_i < order.min_gap  # a stage shorter than planned for: look at them all
        if all_inf:
            k0 = n_w
        for j in range(k0, 2 * n_w):
            if j < n_w:
                f_w = _NEG_INF
                w = order.solid_w[j]
            else:
                f_w = _NEG_INF if all_inf else order.front_t[j - n_w]
                w = order.front_w[j - n_w]
            if (f_w if f_w > t_lb else t_lb) + l_i >= best_t - _EPS:
                break
            if lost and w in lost:
                continue
            xf = xs.get(w, _NO_XFER)
            links = xf[1]
            if links:
                l_n = bits * xf[2] + xf[3]
                tl = t_g
                for lk in links:
                    if t_g < front[lk] - _EPS:
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
            out.n_stages = 0
            out.n_resv = 0
            out.finish_s = math.inf
            out.wait_s = math.inf
            return
        for lk in best_links:
            out.add_resv(lk, best_tl, best_ln)
        out.add_resv(best_w, best_s, l_i)
        busy += best_ln + l_i
        path_w[si] = best_w
        start_s[si] = best_s
        t_g = best_t
        last = best_w
    out.n_stages = len(info)
    out.finish_s = t_g
    out.wait_s = t_g - now - busy


# ---------------------------------------------------------------------- Algorithm 1
class Pipe:
    """A pipeline as Algorithm 1 probes it: its planned batch size (``bs``), its stages'
    blocks, per batch size the stages' inference seconds, bits into them and pool orders
    (``infos``; ``info_of(batch)`` makes one that is not there yet and keeps it there),
    and per stage its transfers by the previous stage's worker (``xfers``; ``miss(si,
    last)`` makes one)."""

    def __init__(
        self,
        bs: int,
        blocks: list[tuple[int, int]],
        info_of: Callable[[int], list[tuple[float, float, PoolOrder]]],
        xfers: list[dict[int, Xfers]],
        miss: Callable[[int, int], Xfers],
    ) -> None:
        self.bs = bs
        self.blocks = blocks
        self.infos: dict[int, list[tuple[float, float, PoolOrder]]] = {}
        self.info_of = info_of
        self.xfers = xfers
        self.miss = miss
        # (Algorithm 1's probes of this pipeline, written over each time: the one at its
        # planned batch size, and the others)
        self.first = Probed(self, len(blocks))
        self.other = Probed(self, len(blocks))


class Probed:
    """A probe's result (:func:`probe`) for ``batch`` rows on ``pipe``, in buffers that
    a probe writes over: per stage its worker (``path_w``) and start (``start_s``), for
    the first ``n_stages``; the reservations it needs, ``resv_r`` (resource),
    ``resv_t`` (start) and ``resv_d`` (duration), for the first ``n_resv``; the
    completion (``finish_s``) and the time spent waiting for resources (``wait_s``).
    ``path``, ``starts`` and ``resv`` read them as lists."""

    def __init__(self, pipe: Pipe | None, n_stages: int) -> None:
        self.pipe = pipe
        self.batch = 0
        self.n_stages = 0
        self.path_w = _ints(n_stages)
        self.start_s = _doubles(n_stages, 0.0)
        self.n_resv = 0
        self.resv_r = _ints(3 * n_stages)
        self.resv_t = _doubles(3 * n_stages, 0.0)
        self.resv_d = _doubles(3 * n_stages, 0.0)
        self.finish_s = math.inf
        self.wait_s = math.inf

    def add_resv(self, r: int, start: float, dur: float) -> None:
        """One more reservation (the buffers grow by doubling)."""
        k = self.n_resv
        if k == len(self.resv_r):
            rr = _ints(2 * k)
            tt = _doubles(2 * k, 0.0)
            dd = _doubles(2 * k, 0.0)
            for i in range(k):
                rr[i] = self.resv_r[i]
                tt[i] = self.resv_t[i]
                dd[i] = self.resv_d[i]
            self.resv_r = rr
            self.resv_t = tt
            self.resv_d = dd
        self.resv_r[k] = r
        self.resv_t[k] = start
        self.resv_d[k] = dur
        self.n_resv = k + 1

    @property
    def path(self) -> list[int]:
        return [int(self.path_w[i]) for i in range(self.n_stages)]

    @property
    def starts(self) -> list[float]:
        return [float(self.start_s[i]) for i in range(self.n_stages)]

    @property
    def resv(self) -> list[tuple[int, float, float]]:
        return [
            (int(self.resv_r[k]), float(self.resv_t[k]), float(self.resv_d[k]))
            for k in range(self.n_resv)
        ]


class Algorithm1:
    """PPipe Algorithm 1 with the feedback correction: the ``reservation`` scheduler's
    decisions, which ``scheduling/reservation.py`` sets up and hands the protocol's calls
    to. Per model, a heap of waiting requests by deadline (``queues``, with their
    ``rows``: those of the scheduler's ``DeadlineQueues``, ``queue``); the pipelines to probe
    (``pipes``); the wake-up timer each model waits for (``timer_at``); each batch's
    reservations (``batch_resv``) and route (``batch_route``); ``next_batch``: the last
    batch id given (what ``BaseScheduler.new_batch_id`` counts)."""

    def __init__(
        self,
        table: SlotTable,
        names: list[str],
        ids: dict[str, int],
        lost: set[int],
        margin_s: float,
        pipes: dict[str, list[Pipe]],
        queue: object,
        next_batch: int,
    ) -> None:
        self.table = table
        self.names = names  # (resources by number, and the numbers by name)
        self.ids = ids
        self.lost = lost
        self.margin_s = margin_s
        self.pipes = pipes
        self.queue = queue
        self.queues: dict[str, list] = queue.heaps  # type: ignore[attr-defined]
        self.rows: dict[str, int] = queue.rows  # type: ignore[attr-defined]
        self.timer_at: dict[str, float] = {}
        self.batch_resv: dict[int, list] = {}
        self.batch_route: dict[int, tuple] = {}
        self.next_batch = next_batch

    # ------------------------------------------------------------------ the protocol
    def on_arrival(self, request: object, now: float) -> list:
        """A request joins its model's queue; then Algorithm 1 for that model."""
        model = request.model  # type: ignore[attr-defined]
        q = self.queues.get(model)
        if q is None:
            self.queue.push(request)  # type: ignore[attr-defined]  # (raises: no pipeline serves it)
        # ``DeadlineQueues.push``, inline (the hot path)
        push(q, (request.deadline_s, request.id, request))  # type: ignore[attr-defined]
        self.rows[model] += request.rows  # type: ignore[attr-defined]
        out: list = []
        self.try_model(model, now, out)
        return out

    def on_timer(self, token: object, now: float) -> list:
        """The wake-up timer of a model: Algorithm 1 again, if it is still the one the
        model waits for."""
        model = token[1]
        at = token[2]
        if self.timer_at.get(model) != at:
            return []
        del self.timer_at[model]
        out: list = []
        self.try_model(model, now, out)
        return out

    def on_stage_done(self, report: object, now: float) -> list:
        """The feedback correction; preempted requests back in their queue; Algorithm 1
        again where anything moved."""
        if report.kind != "stage":  # type: ignore[attr-defined]
            return []
        changed = self.correct(report)  # (the tables say who is busy: no counts kept)
        if not report.completed and report.reason in RETURNED:  # type: ignore[attr-defined]
            self.queue.requeue(report.requests)  # type: ignore[attr-defined]
            changed = True
        if not changed:
            # everything ran as reserved: nothing a new decision could use (Algorithm 1
            # runs on arrivals, at the wake-up timer and when resources change)
            return []
        out: list = []
        self.try_model(report.model, now, out)  # type: ignore[attr-defined]
        return out

    # ------------------------------------------------------------------ the steps
    def probe(self, p: Pipe, batch: int, now: float) -> Probed:
        """Algorithm 2 (:func:`probe`) for ``batch`` rows on ``p``: a new
        :class:`Probed`."""
        pr = Probed(p, len(p.blocks))
        self.probe_into(pr, p, batch, now)
        return pr

    def probe_into(self, out: Probed, p: Pipe, batch: int, now: float) -> None:
        """Algorithm 2 for ``batch`` rows on ``p``, written over ``out``."""
        info = p.infos.get(batch)
        if info is None:
            info = p.info_of(batch)
        probe(self.table, info, p.xfers, p.miss, self.lost, now, out)
        out.pipe = p
        out.batch = batch

    def largest_in_time(self, first: Probed, head_s: float, now: float, least: int) -> object:
        """Step 2: from ``first``'s batch size down to ``least`` (the head's rows), the
        first probe of its pipeline that completes by ``head_s`` (None: none does). The
        smaller ones are written over the pipeline's ``other`` probe."""
        pr = first.pipe.other
        if first.batch < least:  # the head alone is larger than the planned batch
            self.probe_into(pr, first.pipe, least, now)
            return pr if pr.finish_s <= head_s else None
        if first.finish_s <= head_s:
            return first
        bs = first.batch - 1
        while bs >= least:
            self.probe_into(pr, first.pipe, bs, now)
            if pr.finish_s <= head_s:
                return pr
            bs -= 1
        return None

    def try_model(self, model: str, now: float, out: list) -> None:
        """Algorithm 1 for ``model``'s queue, until it is empty or waits; the actions go
        to ``out``."""
        q = self.queues[model]
        if not q:
            return
        pipes = self.pipes[model]
        table = self.table
        table.now = now
        rows = self.rows
        while q:
            # step 1: the pipeline whose probe at its planned batch size waits least
            firsts = []
            best = None
            for p in pipes:
                pr = p.first
                self.probe_into(pr, p, p.bs, now)
                firsts.append(pr)
                if best is None or pr.wait_s < best.wait_s - _EPS:
                    best = pr
            # step 2: from there down, the largest batch that meets the head's deadline
            head = q[0][0] + _EPS
            least = q[0][2].rows  # (a batch holds the head's rows at least)
            chosen = self.largest_in_time(best, head, now, least)
            if chosen is None and len(firsts) > 1:
                # not even batch 1 makes it there: before dropping the head, the other
                # pipelines that are free right now (a request that waited for a fuller
                # batch on one pipeline may still fit another that sits idle)
                for pr in firsts:
                    if pr is not best and pr.wait_s <= _EPS:
                        chosen = self.largest_in_time(pr, head, now, least)
                        if chosen is not None:
                            break
            if chosen is None:
                r = pop(q)[2]
                rows[model] -= r.rows
                out.append(_new(Drop, ((r,), "deadline", ())))
                continue
            # (from here on only ``chosen`` is read: the probes below write over it)
            n = rows[model]
            if n < chosen.batch:
                pr = chosen
                self.probe_into(pr, chosen.pipe, n, now)
                slack = q[0][0] - pr.finish_s - self.margin_s
                if slack > _EPS:  # wait till the last moment the n can still make it
                    at = now + slack
                    t_at = self.timer_at.get(model)
                    if t_at is None or t_at > at + _EPS or t_at < now:
                        self.timer_at[model] = at
                        out.append(_new(SetTimer, (at, ("reservation", model, at))))
                    return
                chosen = pr
            reqs, taken = pop_edf(q, chosen.batch, n)
            rows[model] = n - taken
            if taken < chosen.batch:  # (the next request's rows did not fit)
                self.probe_into(chosen, chosen.pipe, taken, now)
            self.next_batch += 1
            bid = self.next_batch
            self.batch_resv[bid] = table.reserve(bid, chosen)
            names = self.names
            path_w = chosen.path_w
            starts = chosen.start_s
            blocks = chosen.pipe.blocks
            route = tuple([
                _new(RouteStep, (si, names[path_w[si]], starts[si], blocks[si]))
                for si in range(chosen.n_stages)
            ])  # fmt: skip
            self.batch_route[bid] = (model, route)
            out.append(_new(Dispatch, (bid, model, reqs, route)))

    def correct(self, r: object) -> bool:
        """Feedback correction: the batch's reservations follow reality
        (:meth:`SlotTable.correct`). Returns whether any reservation moved."""
        # (a StageReport's fields in their order: one unpacking, no attribute lookups)
        _, bid, _, stage, worker, start_s, end_s, _, completed, last, _, _, _, xs, xe = r  # type: ignore[misc]
        entries = self.batch_resv.get(bid)
        if entries is None:
            return False
        has_x = xs is not None and xe is not None
        changed, keep = self.table.correct(
            bid, entries, stage, self.ids[worker], start_s, end_s,
            xs if has_x else 0.0, xe if has_x else 0.0, has_x, completed, last,
        )  # fmt: skip
        if keep is None:
            del self.batch_resv[bid]
            self.batch_route.pop(bid, None)
        elif keep is not entries:
            self.batch_resv[bid] = keep
        return changed
