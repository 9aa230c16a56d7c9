# cython: annotation_typing=False
"""Keyed heaps: ``heapq``'s binary heaps of tuples whose first item is a time or a
deadline (a float) and whose second is a number no other entry of the heap has (an event's
sequence number, a request's id), so that the first two items order the heap alone. The
simulator's clock, the kernel's ready queues and the schedulers' deadline queues are such
heaps.

Through ``heapq`` each step of a sift compares two tuples: two rich comparisons of their
first items (equal? less?) and the calls around them, about a tenth of the simulator's
time on issue 41's PPipe-plan run. Compiled by Cython (``setup.py``; ``heaps_core_c.pxd``
beside it declares the C types), :func:`push` and :func:`pop` compare the two keys as a C
double and a C integer instead. They are ``heapq``'s algorithm step for step, so a heap
they keep is the same list, item for item, as ``heapq`` keeps (``tests/core/test_heaps.py``
checks it against ``heapq``); the two mix on one heap.

The file also keeps :class:`IdleSet` (a set of places as words of 64 bits) and
:class:`IdMap` (a map by integer id, the kernel's batches), each a dict or a set's work in
C where compiled.

Run as plain Python, this file's :func:`push` and :func:`pop` hand over to ``heapq``
(``COMPILED`` is False): ``heapq``'s C functions are faster than any sift written in
Python. ``core/heaps.py`` exports whichever build is taken."""

from __future__ import annotations

import heapq
import math
from array import array
from collections.abc import Iterator
from typing import Any

try:  # (Cython reads ``cython.compiled`` as True in the build it makes of this file)
    import cython
except ImportError:  # (Cython is not installed: this file runs as plain Python)
    from hetserve.core.records import NO_CYTHON as cython
COMPILED = bool(cython.compiled)
if not cython.compiled:  # (compiled: the inline C its .pxd cimports)
    from hetserve.core.records import id_fits, pop_last, put, take

    def hs_key(t: Any) -> Any:
        """Compiled only (``heaps_core_c.pxd``: a time's order as a C word's; the entries'
        words, their slots' items): plain Python never calls these."""
        raise NotImplementedError("the EventHeap's words are compiled only")

    hs_time = hs_lt = hs_take = hs_put = hs_key

_heappush = heapq.heappush
_INF = math.inf
_heappop = heapq.heappop


def _lt(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """``a < b`` for two entries of a keyed heap (their first two items decide)."""
    x = a[0]
    y = b[0]
    if x < y:
        return True
    if x == y:
        i = a[1]
        j = b[1]
        return i < j
    return False


def _sift_down(heap: list[Any], start: int, pos: int) -> None:
    """``heapq._siftdown``: the entry at ``pos`` moves up towards ``start`` while it is
    less than its parent."""
    item = heap[pos]
    while pos > start:
        parent_pos = (pos - 1) >> 1
        parent = heap[parent_pos]
        if _lt(item, parent):
            heap[pos] = parent
            pos = parent_pos
            continue
        break
    heap[pos] = item


def _sift_up(heap: list[Any], pos: int) -> None:
    """``heapq._siftup``: the smaller child moves up until a leaf is reached, then the
    entry that was at ``pos`` moves down there and up again (``_sift_down``)."""
    end = len(heap)
    start = pos
    item = heap[pos]
    child = 2 * pos + 1
    while child < end:
        right = child + 1
        if right < end and not _lt(heap[child], heap[right]):
            child = right
        heap[pos] = heap[child]
        pos = child
        child = 2 * pos + 1
    heap[pos] = item
    _sift_down(heap, start, pos)


def push(heap: list[Any], item: tuple[Any, ...]) -> None:
    """``heapq.heappush`` for a keyed heap."""
    if not COMPILED:
        _heappush(heap, item)
        return
    heap.append(item)
    _sift_down(heap, 0, len(heap) - 1)


def pop(heap: list[Any]) -> Any:
    """``heapq.heappop`` for a keyed heap (IndexError where it is empty)."""
    if not COMPILED:
        return _heappop(heap)
    last = pop_last(heap)  # (compiled: the list keeps its memory)
    if not heap:
        return last
    top = heap[0]
    heap[0] = last
    _sift_up(heap, 0)
    return top


def pop_first(q: list[Any], k: int) -> tuple[Any, ...]:
    """The ``k`` most urgent requests of the deadline heap ``q`` (entries ``(deadline_s,
    id, request)``; ``0 < k <= len(q)``), taken off: :func:`pop_edf` where each request
    is one row (its caller knows ``k``: no pair made to return it)."""
    if k == 1:  # (the most common batch at a low load: its tuple made at once)
        return (pop(q)[2],)
    return tuple([pop(q)[2] for _ in range(k)])


def pop_edf(q: list[Any], limit: int, queued_rows: int = -1) -> tuple[tuple[Any, ...], int]:
    """The most urgent requests of the deadline heap ``q`` (entries ``(deadline_s, id,
    request)``) whose rows fit in ``limit`` together, taken off ``q``, and their rows. It
    stops at the first request that does not fit (the deadline order is kept): none when
    the most urgent alone does not. ``queued_rows``: the queue's rows together, where the
    caller keeps them (when they equal its length, every request is one row: the plain
    pops)."""
    if queued_rows == len(q):
        k = limit if limit < queued_rows else queued_rows
        return pop_first(q, k), k
    out = []
    n = 0
    while q:
        k = q[0][2].rows
        if n + k > limit:
            break
        out.append(pop(q)[2])
        n += k
    return tuple(out), n


def bisect_s(lat: list[Any], x: float) -> int:
    """``bisect.bisect_right(lat, x)`` on a latency table (latencies at batch 1, 2, ...:
    the most rows whose latency is at most ``x``), the same steps on C doubles when
    compiled: the schedulers' search for the largest batch that meets a deadline."""
    lo = 0
    hi = len(lat)
    while lo < hi:
        mid = (lo + hi) // 2
        if x < lat[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _words(n: int) -> memoryview:
    return memoryview(array("Q", [0]) * n)


def _longs(n: int) -> memoryview:
    return memoryview(array("q", [0]) * n)


FIRST_ROOM = 8  # (``EventHeap(0)``'s room at its first push)
# (the numbers an ``EventHeap`` orders by: from minus this to below it; compiled, a number
# plus this is kept in the 41 bits of an entry's second word above its slot's)
SEQ_LIMIT = 1 << 40
SLOT_BITS = 23  # (compiled: the bits of an entry's second word that say its slot)
SLOT_LIMIT = 1 << SLOT_BITS  # (compiled: the entries an ``EventHeap`` holds at most)
_SLOT_MASK = SLOT_LIMIT - 1
_NO_WORDS = _words(0)
_NO_LONGS = _longs(0)


_ONE = 1
_ALL = (1 << 64) - 1  # (a word's every bit)
# the lowest set bit of a word, times this, has the bit's place in its top six bits, each
# place its own (a de Bruijn sequence); ``_PLACE`` maps those six bits back to the place
_DE_BRUIJN = 0x03F79D71B4CB0A89
_PLACE = _longs(64)
for _k in range(64):
    _PLACE[((_ONE << _k) * _DE_BRUIJN & _ALL) >> 58] = _k
assert sorted([_PLACE[_k] for _k in range(64)]) == list(range(64))  # (each place once)


class IdleSet:
    """A set of the places ``0 .. n-1`` (a scheduler's idle workers of one list of
    workers, by their place in it: flex's and edf-adaptive's), all in at first, as words
    of 64 bits: taking a place in or out changes one word in place (compiled, C integers;
    a Python integer of 1,000 bits was made anew at each change), and the least member at
    or after a place is found a word at a time. ``count``: the members there are."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.count = n
        nw = (n + 63) >> 6
        self.words = memoryview(array("Q", [0]) * nw)
        for j in range(nw):
            left = n - 64 * j
            self.words[j] = _ALL if left >= 64 else (_ONE << left) - _ONE

    def add(self, i: int) -> None:
        """Place ``i`` in (where it was out)."""
        bit = _ONE << (i & 63)
        w = self.words[i >> 6]
        if not w & bit:
            self.words[i >> 6] = w | bit
            self.count += 1

    def discard(self, i: int) -> None:
        """Place ``i`` out (where it was in)."""
        bit = _ONE << (i & 63)
        w = self.words[i >> 6]
        if w & bit:
            self.words[i >> 6] = w ^ bit
            self.count -= 1

    def first_from(self, i: int) -> int:
        """The least member at or after ``i`` (from 0 where ``i`` is negative); -1 where
        there is none."""
        if i < 0:
            i = 0
        j = i >> 6
        nw = len(self.words)
        if j >= nw:
            return -1
        w = self.words[j] & (_ALL ^ ((_ONE << (i & 63)) - _ONE))
        while w == 0:
            j += 1
            if j == nw:
                return -1
            w = self.words[j]
        low = w & ((w ^ _ALL) + _ONE)  # (its lowest bit: ``w & -w`` in 64 bits)
        return 64 * j + _PLACE[((low * _DE_BRUIJN) & _ALL) >> 58]

    def as_int(self) -> int:
        """The set as one Python integer (bit i: member i)."""
        out = 0
        for j in range(len(self.words) - 1, -1, -1):
            out = (out << 64) | self.words[j]
        return out


class EventHeap:
    """A clock's callbacks by time (``engine.clock.VirtualClock``): entries ``(time, seq,
    fn, a, b)`` ordered by time, then by ``seq``, the number :meth:`push` gives each (1, 2,
    ... in the order they came: callbacks at one time run in that order). ``pushed``: the
    last number given; ``n``: the entries there are (compiled, a C integer: what a
    caller reads to ask whether there is any, without a call). A time is a number (NaN:
    ValueError); -0.0 is 0.0.

    Compiled, an entry is two C words of 64 bits, by heap position: its time as an
    unsigned integer in the same order (``hs_key``, ``heaps_core_c.pxd``), and its number
    (plus ``SEQ_LIMIT``) above the slot that its callback and arguments are kept in (the
    low ``SLOT_BITS`` bits); one comparison of the pair as a 128-bit integer orders two
    entries, by time and then by number, without a branch. A node has four children, and
    a node's four are one cache line (the buffer begins where that holds): a pop's sift
    down reads one line a level, at half the levels of a binary heap. The callbacks and
    arguments are in a list, three items a slot, handed over without their references
    counted up and down (a slot given out is left empty: NULL). As plain Python (or where
    the build is not there) it is a ``heapq`` heap of the tuples. Either way the pops come
    in the same order: the (time, seq) pairs are all different. Compiled, at most
    ``SLOT_LIMIT`` entries are there at once (OverflowError past it)."""

    def __init__(self, room: int = 64) -> None:
        """``room``: the entries there is room for at first (compiled; it doubles when
        full). 0: none until the first push, which makes room for ``FIRST_ROOM``: a
        worker's queue of ready stages is often never used, and making 1,000 workers'
        buffers (four each) took 3-6 ms of a run's start."""
        self.pushed = 0
        self.n = 0
        self.items: list[tuple[float, int, Any, Any, Any]] = []  # (as plain Python)
        cap = max(0, min(int(room), SLOT_LIMIT)) if COMPILED else 0
        self.ks = _NO_WORDS
        self.off = 0
        self.calls: list[Any] = []
        self.free = _NO_LONGS
        self.n_free = 0
        if cap > 0:
            self._room(cap)
        # the time of the clock that drives the heap (``engine.clock.VirtualClock.t``: its
        # loop sets it as it pops; compiled, a C double)
        self.now_s = 0.0
        # what :meth:`pop_into` took off last (``seq``: its number)
        self.seq = 0
        self.fn: Any = None
        self.a: Any = None
        self.b: Any = None

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[tuple[float, int, Any, Any, Any]]:
        """The entries as tuples, in no particular order."""
        if not COMPILED:
            return iter(list(self.items))
        out = []
        o = self.off
        for i in range(self.n):
            lo = self.ks[o + 2 * i + 1]
            k = lo & _SLOT_MASK
            out.append((
                hs_time(self.ks[o + 2 * i]), (lo >> SLOT_BITS) - SEQ_LIMIT,
                self.calls[3 * k], self.calls[3 * k + 1], self.calls[3 * k + 2],
            ))  # fmt: skip
        return iter(out)

    def clear(self) -> None:
        """Every entry dropped (the numbers go on from ``pushed``)."""
        if not COMPILED:
            self.items.clear()
            self.n = 0
            return
        while self.n > 0:
            self.pop_into()
        self.fn = self.a = self.b = None

    def first_s(self) -> float:
        """The earliest entry's time (inf: none)."""
        if not COMPILED:
            return self.items[0][0] if self.items else _INF
        return hs_time(self.ks[self.off]) if self.n > 0 else _INF

    def first(self) -> Any:
        """The earliest entry's callback (``fn``), left there (None: none)."""
        if not COMPILED:
            return self.items[0][2] if self.items else None
        return self.calls[3 * (self.ks[self.off + 1] & _SLOT_MASK)] if self.n > 0 else None

    def push(self, t: float, fn: Any, a: Any, b: Any) -> int:
        """``fn(a, b, t)`` due at ``t``, numbered ``pushed + 1``."""
        self.pushed += 1
        self.push_seq(t, self.pushed, fn, a, b)
        return 0

    def push_seq(self, t: float, seq: int, fn: Any, a: Any, b: Any) -> int:
        """An entry at ``t`` numbered ``seq`` by the caller (``pushed`` left as it is):
        a heap used only this way is a priority queue by ``(t, seq)``, where the caller
        makes each pair different (``scheduling.edf_adaptive_core``'s models to try, by
        their keys). ``seq`` must be in ``[-SEQ_LIMIT, SEQ_LIMIT)`` (2**40; OverflowError:
        compiled, it is kept in 41 bits of a word); ``t`` a number (ValueError: NaN)."""
        if not 0 <= (seq >> 40) + 1 <= 1:  # (-``SEQ_LIMIT`` <= seq < ``SEQ_LIMIT``, in C)
            raise OverflowError(f"EventHeap: entry number {seq} is not in [-2**40, 2**40)")
        if t != t:
            raise ValueError(f"EventHeap: an entry at NaN seconds (number {seq})")
        if not COMPILED:
            _heappush(self.items, (t, seq, fn, a, b))
            self.n += 1
            return 0
        if self.n_free == 0:
            self._grow()
        # (compiled: C reads and writes of the buffers and lists, every index in range)
        with cython.boundscheck(False), cython.wraparound(False), cython.initializedcheck(False):
            self.n_free -= 1
            k = self.free[self.n_free]
            calls = self.calls
            hs_put(calls, 3 * k, fn)
            hs_put(calls, 3 * k + 1, a)
            hs_put(calls, 3 * k + 2, b)
            hi = hs_key(t)
            lo = (cython.cast(cython.ulonglong, seq + SEQ_LIMIT) << SLOT_BITS) | k
            o = self.off
            pos = self.n
            self.n += 1
            while pos > 0:  # up from the end while earlier than the parent
                parent = (pos - 1) >> 2
                ph = self.ks[o + 2 * parent]
                pl = self.ks[o + 2 * parent + 1]
                if hs_lt(hi, lo, ph, pl):
                    self.ks[o + 2 * pos] = ph
                    self.ks[o + 2 * pos + 1] = pl
                    pos = parent
                    continue
                break
            self.ks[o + 2 * pos] = hi
            self.ks[o + 2 * pos + 1] = lo
        return 0

    def pop(self) -> tuple[float, int, Any, Any, Any]:
        """The earliest entry, taken off (IndexError where there is none)."""
        if not COMPILED:
            item = _heappop(self.items)
            self.n -= 1
            return item
        if self.n == 0:
            raise IndexError("pop from an EventHeap with no entries")
        t = self.pop_into()
        return (t, self.seq, self.fn, self.a, self.b)

    def pop_into(self) -> float:
        """The earliest entry taken off: its callback and arguments in ``fn``, ``a`` and
        ``b``, its number in ``seq``; returns its time. (There must be one.)"""
        if not COMPILED:
            t, self.seq, self.fn, self.a, self.b = _heappop(self.items)
            self.n -= 1
            return t
        if self.n == 0:
            raise IndexError("pop from an EventHeap with no entries")
        with cython.boundscheck(False), cython.wraparound(False), cython.initializedcheck(False):
            o = self.off
            hi0 = self.ks[o]
            lo0 = self.ks[o + 1]
            self.seq = cython.cast(cython.longlong, lo0 >> SLOT_BITS) - SEQ_LIMIT
            k = lo0 & _SLOT_MASK
            calls = self.calls
            self.fn = hs_take(calls, 3 * k)
            self.a = hs_take(calls, 3 * k + 1)
            self.b = hs_take(calls, 3 * k + 2)
            self.free[self.n_free] = k
            self.n_free += 1
            self.n -= 1
            n = self.n
            if n > 0:  # the last entry sifts down from the top
                hi = self.ks[o + 2 * n]
                lo = self.ks[o + 2 * n + 1]
                pos = 0
                child = 1
                while child < n:
                    c = o + 2 * child
                    if child + 3 < n:
                        # four children (one cache line): the earliest by a tournament of
                        # three comparisons whose outcomes are added to indices, not
                        # branched on (the order of the children's times is data, which
                        # no predictor learns)
                        x = child + hs_lt(
                            self.ks[c + 2], self.ks[c + 3], self.ks[c], self.ks[c + 1]
                        )
                        y = (
                            child
                            + 2
                            + hs_lt(self.ks[c + 6], self.ks[c + 7], self.ks[c + 4], self.ks[c + 5])
                        )
                        won = hs_lt(
                            self.ks[o + 2 * y], self.ks[o + 2 * y + 1],
                            self.ks[o + 2 * x], self.ks[o + 2 * x + 1],
                        )  # fmt: skip
                        child = x + (y - x) * won
                    else:
                        # the earliest of its (up to three) children
                        right = child + 1
                        while right < n:
                            r = o + 2 * right
                            c = o + 2 * child
                            if hs_lt(self.ks[r], self.ks[r + 1], self.ks[c], self.ks[c + 1]):
                                child = right
                            right += 1
                    c = o + 2 * child
                    ch = self.ks[c]
                    cl = self.ks[c + 1]
                    if hs_lt(ch, cl, hi, lo):
                        self.ks[o + 2 * pos] = ch
                        self.ks[o + 2 * pos + 1] = cl
                        pos = child
                        child = 4 * pos + 1
                        continue
                    break
                self.ks[o + 2 * pos] = hi
                self.ks[o + 2 * pos + 1] = lo
        return hs_time(hi0)

    def _room(self, cap: int) -> None:
        """Room for ``cap`` entries (compiled): a buffer of ``2 cap`` words, and 8 more so
        that position 1 (the first of four children) can begin a cache line (``off``: the
        word where position 0 begins); the entries there moved to it; the slots
        ``len(calls) // 3 .. cap - 1`` added, free."""
        old = len(self.calls) // 3
        ks = _words(2 * cap + 8)
        at = cython.cast(cython.size_t, cython.address(ks[2]))  # (position 1's, where off=0)
        off = ((64 - at % 64) % 64) // 8
        for i in range(2 * self.n):
            ks[off + i] = self.ks[self.off + i]
        free = _longs(cap)
        more = cap - old
        for i in range(self.n_free):
            free[i] = self.free[i]
        for i in range(more):
            free[self.n_free + i] = cap - 1 - i
        self.ks, self.off, self.free = ks, off, free
        self.n_free += more
        self.calls.extend([None] * (3 * more))

    def _grow(self) -> None:
        """Twice the room (every slot in use), or ``FIRST_ROOM`` where there was none."""
        cap = len(self.calls) // 3
        if cap >= SLOT_LIMIT:
            raise OverflowError(f"EventHeap: more than {SLOT_LIMIT:,} entries at once")
        self._room(min(2 * cap, SLOT_LIMIT) if cap > 0 else FIRST_ROOM)


_MAP_ROOM = 64  # (an ``IdMap``'s room for entries at first; it doubles as it fills)
_MISSING = object()  # (``IdMap.pop``'s default where none is given)


class IdMap:
    """A map by integer id (the kernel's batches by batch id): a dict's behaviour, its
    order of insertion included, for ledgers whose keys are ints of 64 bits. Compiled, such
    a key is a C integer: the entries' ids sit in a C buffer and their values in a list,
    in the order they came (a removed entry's place stays empty until the entries are
    packed again), and an open-addressed table of twice as many places maps an id to its
    entry (the id's bits folded, then the next places in turn): no Python hashing,
    comparison or call, where a dict's insertion, look-up and deletion of an int were
    100-240 instructions each. A key of any other kind (not exactly an ``int``, or outside
    64 bits) makes the map a dict (``d``) from then on, with a dict's meaning for every
    key. Plain Python: a dict from the first.

    :meth:`has`, :meth:`put` and :meth:`discard` are the kernel's calls (compiled, C
    methods); Python uses it as a dict (``in``, ``[]``, ``get``, ``pop``, ``del``,
    iteration, ``len``, ``clear``; ``keys``, ``values`` and ``items`` are lists, made when
    called)."""

    def __init__(self) -> None:
        self.d: dict[Any, Any] | None = None if COMPILED else {}
        self.n = 0
        self.key = 0  # (compiled: the C integer of the key :meth:`_c` took)
        self._room(_MAP_ROOM if COMPILED else 0)

    def _room(self, cap: int) -> None:
        """Empty buffers for ``cap`` entries (``used``: none yet), and their table."""
        self.ids = _longs(cap)
        self.vals: list[Any] = [None] * cap
        self.live = _longs(cap)  # (1: the entry is there; 0: removed)
        self.table = _longs(2 * cap)  # (an entry's place + 1; 0: empty; -1: removed)
        self.mask = 2 * cap - 1 if cap > 0 else 0
        self.used = 0

    def _c(self, key: Any) -> bool:
        """Whether ``key`` is a C integer here (then in ``key``); where it is not, the map
        is a dict from now on. (:meth:`has`, :meth:`put` and :meth:`discard` ask the
        same inline.)"""
        if self.d is None and type(key) is int and id_fits(key):
            self.key = key
            return True
        self._as_dict()
        return False

    def _as_dict(self) -> None:
        """The map a dict from now on (``d``; where it is not one yet)."""
        if self.d is None:
            d = {}
            for j in range(self.used):
                if self.live[j]:
                    d[int(self.ids[j])] = self.vals[j]
            self.d = d
            self._room(0)

    def _place(self, key: int) -> int:
        """The table's place of ``key``'s entry; -1 where there is none."""
        mask = self.mask
        i = (key ^ (key >> 29)) & mask
        while True:
            e = self.table[i]
            if e == 0:
                return -1
            if e > 0 and self.ids[e - 1] == key:
                return i
            i = (i + 1) & mask

    def _remove(self, i: int) -> Any:
        """The entry at the table's place ``i`` removed; its value."""
        j = self.table[i] - 1
        self.table[i] = -1
        self.live[j] = 0
        self.n -= 1
        return take(self.vals, j)

    def has(self, key: Any) -> bool:
        """``key in map``."""
        if self.d is None and type(key) is int and id_fits(key):
            return self._place(key) >= 0
        self._as_dict()
        return key in self.d  # type: ignore[operator]

    def put(self, key: Any, value: Any) -> None:
        """``map[key] = value`` (a new key comes last in the order; a known one keeps its
        place)."""
        if self.d is not None or type(key) is not int or not id_fits(key):
            self._as_dict()
            self.d[key] = value  # type: ignore[index]
            return
        k = key
        i = self._place(k)
        if i >= 0:
            put(self.vals, self.table[i] - 1, value)
            return
        if self.used == len(self.vals):
            self._pack()
        j = self.used
        self.used = j + 1
        self.ids[j] = k
        self.live[j] = 1
        put(self.vals, j, value)
        mask = self.mask
        i = (k ^ (k >> 29)) & mask
        while self.table[i] > 0:  # (the first empty or removed place: ``k`` is not there)
            i = (i + 1) & mask
        self.table[i] = j + 1
        self.n += 1

    def discard(self, key: Any) -> Any:
        """``map.pop(key, None)``."""
        if self.d is None and type(key) is int and id_fits(key):
            i = self._place(key)
            return None if i < 0 else self._remove(i)
        self._as_dict()
        return self.d.pop(key, None)  # type: ignore[union-attr]

    def _pack(self) -> None:
        """The entries there are, in their order, at the front, the removed ones' places
        freed: in place where the room holds four times as many as there are (so that a
        pack comes at most once per three puts of each entry it moves), else in buffers
        of twice the room, or more."""
        n, used = self.n, self.used
        cap = len(self.vals)
        room = _MAP_ROOM
        while room < 4 * n:
            room *= 2
        ids, vals, live = self.ids, self.vals, self.live
        if room > cap:
            self._room(room)
        else:  # (in place: the table emptied, each entry moved down to its new place)
            for i in range(2 * cap):
                self.table[i] = 0
        mask = self.mask
        j = 0
        for e in range(used):
            if live[e]:
                k = ids[e]
                if room > cap or e != j:  # (in place, the flags past ``used`` are not read)
                    self.ids[j] = k
                    self.live[j] = 1
                    put(self.vals, j, take(vals, e))
                i = (k ^ (k >> 29)) & mask
                while self.table[i] > 0:
                    i = (i + 1) & mask
                self.table[i] = j + 1
                j += 1
        self.used = j
        self.n = j

    def get(self, key: Any, default: Any = None) -> Any:
        if self._c(key):
            i = self._place(self.key)
            return default if i < 0 else self.vals[self.table[i] - 1]
        return self.d.get(key, default)  # type: ignore[union-attr]

    def pop(self, key: Any, default: Any = _MISSING) -> Any:
        if self._c(key):
            i = self._place(self.key)
            if i >= 0:
                return self._remove(i)
        elif key in self.d:  # type: ignore[operator]
            return self.d.pop(key)  # type: ignore[union-attr]
        if default is _MISSING:
            raise KeyError(key)
        return default

    def __len__(self) -> int:
        return self.n if self.d is None else len(self.d)

    def __contains__(self, key: Any) -> bool:
        return self.has(key)

    def __getitem__(self, key: Any) -> Any:
        out = self.get(key, _MISSING)
        if out is _MISSING:
            raise KeyError(key)
        return out

    def __setitem__(self, key: Any, value: Any) -> None:
        self.put(key, value)

    def __delitem__(self, key: Any) -> None:
        self.pop(key)

    def keys(self) -> list[Any]:
        if self.d is not None:
            return list(self.d)
        return [int(self.ids[j]) for j in range(self.used) if self.live[j]]

    def values(self) -> list[Any]:
        if self.d is not None:
            return list(self.d.values())
        return [self.vals[j] for j in range(self.used) if self.live[j]]

    def items(self) -> list[tuple[Any, Any]]:
        if self.d is not None:
            return list(self.d.items())
        return [(int(self.ids[j]), self.vals[j]) for j in range(self.used) if self.live[j]]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.keys())

    def clear(self) -> None:
        if self.d is not None:
            self.d.clear()
            return
        self.n = 0
        self._room(_MAP_ROOM)

    def __repr__(self) -> str:
        return f"IdMap({dict(self.items())!r})"
