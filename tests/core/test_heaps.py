"""Keyed heaps (``core/heaps.py``): the compiled ``push`` and ``pop`` keep the same list,
entry for entry, as ``heapq`` does on heaps of ``(key, unique number, ...)`` tuples, mixed
with ``heapq`` on one heap too; the Python file's sift (what the build compiles) does the
same run as Python; ``pop_edf`` takes what an independent sort says it should; the idle
set (``IdleSet``) holds what a Python set does; the map by id (``IdMap``) answers as a
dict does."""

import heapq
import importlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.core import heaps, heaps_core
from hetserve.core.requests import Request

try:
    compiled = importlib.import_module("hetserve.core.heaps_core_c")
except ImportError:  # (not built: the compiled half of the checks is skipped)
    compiled = None
needs_build = pytest.mark.skipif(compiled is None, reason="the compiled part is not built")


def _python_push(heap, item):
    """The Python file's own sift (the code the build compiles), run as Python."""
    heap.append(item)
    heaps_core._sift_down(heap, 0, len(heap) - 1)


def _python_pop(heap):
    last = heap.pop()
    if not heap:
        return last
    top, heap[0] = heap[0], last
    heaps_core._sift_up(heap, 0)
    return top


# a run of operations: push an entry with one of a few keys (ties are common, so the
# numbers decide often), or pop; a key may be an int (a test's clock.at(5, ...))
keys = st.sampled_from([0.0, 0.5, 1.0, 1.0, 2, 3.25, -1.0, float("inf")])
ops = st.lists(st.one_of(keys, st.none()), max_size=200)


def _replay(ops_, push, pop, mixed=False):
    heap, popped = [], []
    for n, op in enumerate(ops_):
        if op is None:
            if heap:
                popped.append((pop if not (mixed and n % 2) else heapq.heappop)(heap))
        else:
            (push if not (mixed and n % 3 == 0) else heapq.heappush)(heap, (op, n, f"entry {n}"))
        yield list(heap), list(popped)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_the_python_sift_keeps_heapqs_list(ops_):
    for a, b in zip(_replay(ops_, heapq.heappush, heapq.heappop),
                    _replay(ops_, _python_push, _python_pop), strict=True):  # fmt: skip
        assert a == b


@needs_build
@settings(max_examples=200, deadline=None)
@given(ops)
def test_the_compiled_heap_keeps_heapqs_list(ops_):
    for a, b in zip(_replay(ops_, heapq.heappush, heapq.heappop),
                    _replay(ops_, compiled.push, compiled.pop), strict=True):  # fmt: skip
        assert a == b


@needs_build
@settings(max_examples=100, deadline=None)
@given(ops)
def test_compiled_and_heapq_mix_on_one_heap(ops_):
    mixed = _replay(ops_, compiled.push, compiled.pop, mixed=True)
    for a, b in zip(_replay(ops_, heapq.heappush, heapq.heappop), mixed, strict=True):
        assert a == b


@needs_build
def test_compiled_pop_of_an_empty_heap_raises_as_heapq_does():
    with pytest.raises(IndexError):
        compiled.pop([])
    with pytest.raises(TypeError):  # (not a list)
        compiled.push((), (1.0, 1))


def test_the_exported_functions_are_one_build():
    if heaps.COMPILED:
        assert (heaps.push, heaps.pop, heaps.pop_edf) == (compiled.push, compiled.pop,
                                                          compiled.pop_edf)  # fmt: skip
    else:
        assert (heaps.push, heaps.pop) == (heapq.heappush, heapq.heappop)
        assert heaps.pop_edf is heaps_core.pop_edf
    assert heaps_core.COMPILED is False  # (the Python file, imported as Python)


def _queue(rows, deadlines):
    q = []
    for i, (r, d) in enumerate(zip(rows, deadlines, strict=True)):
        heapq.heappush(q, (d, i, Request(i, "m", "s", 0.0, d, rows=r)))
    return q


def _expected(q, limit):
    """What pop_edf should take, by a sort (not a heap): the most urgent first, up to the
    first request that does not fit."""
    taken, n = [], 0
    for _, _, r in sorted(q, key=lambda e: (e[0], e[1])):
        if n + r.rows > limit:
            break
        taken.append(r)
        n += r.rows
    return taken, n


@pytest.mark.parametrize("build", ["python", "compiled"])
@settings(max_examples=150, deadline=None)
@given(rows=st.lists(st.integers(1, 4), max_size=30), limit=st.integers(0, 12),
       data=st.data())  # fmt: skip
def test_pop_edf_takes_the_most_urgent_that_fit(build, rows, limit, data):
    if build == "compiled" and compiled is None:
        pytest.skip("the compiled part is not built")
    pop_edf = compiled.pop_edf if build == "compiled" else heaps_core.pop_edf
    deadlines = data.draw(st.lists(st.sampled_from([0.1, 0.2, 0.3]), min_size=len(rows),
                                   max_size=len(rows)))  # fmt: skip
    q = _queue(rows, deadlines)
    want, n_want = _expected(q, limit)
    rest = sorted(set(e[1] for e in q) - {r.id for r in want})
    queued = sum(rows) if data.draw(st.booleans()) else -1  # (the caller's count, or none)
    got, n = pop_edf(q, limit, queued)
    assert list(got) == want and n == n_want
    assert sorted(e[1] for e in q) == rest
    assert all(not (q[(k - 1) // 2] > q[k]) for k in range(1, len(q)))  # still a heap


# a clock's run: push a callback at one of a few times (ties common: the order they came
# decides), pop the earliest, or clear; more pushes than the compiled heap's first room
clock_ops = st.lists(
    st.one_of(st.tuples(st.just("push"), keys), st.just(("pop",)), st.just(("clear",))),
    max_size=300,
)


def _event_heaps() -> list:
    out = [heaps_core.EventHeap()]  # the Python file: heapq's heap of the tuples
    if compiled is not None:  # C numbers in buffers: room for 64 at first, or 1, or none
        out += [compiled.EventHeap(), compiled.EventHeap(1), compiled.EventHeap(0)]
    return out


@settings(max_examples=200, deadline=None)
@given(clock_ops, st.integers(0, 3))
def test_an_event_heap_pops_by_time_then_by_the_order_pushed(ops, weight):
    ref: list = []  # heapq on (time, number, fn, a, b)
    pushed = 0
    for h in _event_heaps():
        ref, pushed = [], 0
        for op in ops + [("push", 0.0)] * (70 * weight):  # (grown past 64 in use at times)
            if op[0] == "push":
                pushed += 1
                fn, a, b = (f"fn{pushed}", [pushed], None)
                heapq.heappush(ref, (float(op[1]), pushed, fn, a, b))
                h.push(op[1], fn, a, b)
            elif op[0] == "pop" and ref:
                want = heapq.heappop(ref)
                assert h.first_s() == want[0]
                if pushed % 2:
                    assert h.pop() == want
                else:
                    assert h.pop_into() == want[0] and (h.fn, h.a, h.b) == want[2:]
            elif op[0] == "clear":
                ref.clear()
                h.clear()
            assert len(h) == len(ref) and h.pushed == pushed
            assert sorted(h) == sorted(ref)
        assert h.first_s() == (ref[0][0] if ref else float("inf"))


@pytest.mark.parametrize("seed", range(3))
def test_an_event_heap_pops_in_order_when_it_holds_thousands(seed):
    """As above, over a long seeded walk (20,000 pushes and pops, more pushes than pops:
    the heap grows to about 2,000 entries, many levels deep, with ties at every level),
    which the short examples above seldom reach: every pop the earliest by time, then by
    the order pushed."""
    import random

    rng = random.Random(seed)
    for h in _event_heaps():
        ref: list = []
        for step in range(20_000):
            if rng.random() < 0.55 or not ref:
                t = float(rng.randrange(50))
                heapq.heappush(ref, (t, step))
                h.push(t, None, step, None)
            else:
                want = heapq.heappop(ref)
                assert (h.pop_into(), h.a) == want, (type(h), step)
        assert len(h) == len(ref) > 1_000


def test_an_event_heap_holds_its_callbacks_once():
    """A popped entry's callback and arguments are the caller's (``fn``, ``a``, ``b``),
    no longer the heap's: their reference counts come back to what they were once the
    caller lets go (the compiled pop hands the heap's references over, ``take``: a count
    off by one either way would leak them or free them early)."""
    import sys

    fn, a, b = object(), object(), object()
    before = [sys.getrefcount(x) for x in (fn, a, b)]
    for h in _event_heaps():
        for k in range(100):  # (popped at once, and from a heap of many)
            h.push(float(k), fn, a, b)
            if k % 3 == 0:
                h.pop_into()
        while len(h):
            h.pop_into()
            assert (h.fn, h.a, h.b) == (fn, a, b)
        h.fn = h.a = h.b = None
        assert [sys.getrefcount(x) for x in (fn, a, b)] == before, type(h)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),
            st.one_of(
                st.integers(-heaps_core.SEQ_LIMIT, heaps_core.SEQ_LIMIT - 1),
                st.sampled_from([-heaps_core.SEQ_LIMIT, heaps_core.SEQ_LIMIT - 1, -1, 0]),
            ),
        ),
        max_size=60,
    )
)
def test_an_event_heap_orders_callers_numbers_up_to_its_limit(entries):
    """``push_seq``'s numbers (the caller's) order ties from ``-SEQ_LIMIT`` to below
    ``SEQ_LIMIT`` (2**40), where the compiled heap keeps them in 41 bits of a word,
    exactly; past either end, every build says so."""
    assert heaps_core.SEQ_LIMIT == 2**40
    for h in _event_heaps():
        ref = []
        for t, seq in dict.fromkeys(entries):  # (each pair once: the caller's promise)
            h.push_seq(float(t), seq, None, seq, None)
            ref.append((float(t), seq))
        assert [(h.pop_into(), h.seq) for _ in range(len(ref))] == sorted(ref)
        with pytest.raises(OverflowError, match="2\\*\\*40"):
            h.push_seq(0.0, heaps_core.SEQ_LIMIT, None, None, None)
        with pytest.raises(OverflowError):
            h.push_seq(0.0, -heaps_core.SEQ_LIMIT - 1, None, None, None)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.floats(allow_nan=False),  # (any time: infinities, subnormals, -0.0, 1e308)
            st.sampled_from([0.0, -0.0, 1.0, -1.0, 5e-324, -5e-324]),
        ),
        max_size=80,
    ),
    st.integers(0, 2),
)
def test_an_event_heap_orders_any_time_as_floats_compare(times, start):
    """Every time a float may be but NaN orders as Python compares floats (the compiled
    heap compares a time's bits as an unsigned word's: the sign's bit and the negative
    times' order are what this checks), ties by the order pushed; -0.0 and 0.0 are one
    time; an entry at NaN is refused in every build."""
    for h in _event_heaps()[start:] + _event_heaps()[:1]:
        ref = []
        for n, t in enumerate(times):
            h.push(t, None, n, None)
            ref.append((t, n))
        got = [(h.pop_into(), h.a) for _ in range(len(ref))]
        assert got == sorted(ref), type(h)
        with pytest.raises(ValueError, match="NaN"):
            h.push(float("nan"), None, None, None)
        assert len(h) == 0


def test_an_empty_event_heap_says_so():
    for h in _event_heaps():
        assert len(h) == 0 and h.first_s() == float("inf")
        with pytest.raises(IndexError):
            h.pop()


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.floats(0, 1, allow_nan=False), max_size=12),
    st.floats(-0.5, 1.5, allow_nan=False),
    st.booleans(),
)
def test_bisect_s_is_bisect_right(xs, x, sort):
    """The latency tables' search is ``bisect.bisect_right``, step for step: on sorted
    tables (what the schedulers give it) and on unsorted ones (the same probes give the
    same answer), compiled and as the Python file."""
    import bisect

    lat = sorted(xs) if sort else xs
    want = bisect.bisect_right(lat, x)
    assert heaps_core.bisect_s(lat, x) == want
    assert heaps.bisect_s(lat, x) == want
    if compiled is not None:
        assert compiled.bisect_s(lat, x) == want


def _idle_builds():
    """The idle set (``IdleSet``) as the Python file has it, and compiled."""
    out = [heaps_core.IdleSet]
    if compiled is not None:
        out.append(compiled.IdleSet)
    return out


@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, 300),
    st.lists(st.tuples(st.sampled_from(["add", "discard"]), st.integers(0, 10**6)), max_size=80),
    st.lists(st.integers(-2, 310), min_size=1, max_size=20),
)
def test_the_idle_set_is_a_set_of_places(n, ops, probes):
    """An idle set of ``n`` places starts full; ``add`` and ``discard`` take a place in
    and out; ``first_from(i)`` is the least member at or after ``i`` (-1: none) and
    ``count`` the members, as a Python set says, in both builds, across the words' edges
    (63, 64, 65, ...)."""
    for cls in _idle_builds():
        s, ref = cls(n), set(range(n))
        for op, x in ops:
            if not n:
                break
            i = x % n
            (s.add if op == "add" else s.discard)(i)
            (ref.add if op == "add" else ref.discard)(i)
            for p in [*probes, i, i + 1, (i | 63), (i | 63) + 1]:
                want = min((m for m in ref if m >= max(p, 0)), default=-1)
                assert s.first_from(p) == want, (cls, n, p)
            assert s.count == len(ref), cls
        assert s.as_int() == sum(1 << m for m in ref), cls


@pytest.mark.parametrize("n", [64, 1000])
def test_the_idle_set_walks_its_members_in_order(n):
    """A seeded walk of 5,000 changes to a set of ``n`` places: after each, its members
    from ``first_from`` in turn are the set's, in order (both builds)."""
    import random

    for cls in _idle_builds():
        rng = random.Random(n)
        s, ref = cls(n), set(range(n))
        for step in range(5_000):
            i = rng.randrange(n)
            if rng.random() < 0.5:
                s.discard(i)
                ref.discard(i)
            else:
                s.add(i)
                ref.add(i)
            if step % 50 == 0:
                got, k = [], s.first_from(0)
                while k >= 0:
                    got.append(k)
                    k = s.first_from(k + 1)
                assert got == sorted(ref), (cls, step)


def _map_builds():
    """The map by id (``IdMap``) as the Python file has it (a dict), and compiled."""
    out = [heaps_core.IdMap]
    if compiled is not None:
        out.append(compiled.IdMap)
    return out


# keys: mostly small ints that come and go (a ledger's ids, each often put, removed and
# looked up again), some colliding in the table (multiples of 2**32 and of 2**29, negative
# ones), any of 64 bits; and, in some runs only, a key outside 64 bits or of another kind
# (a float equal to an int, a bool, a string), which makes the map a dict from then on
_ID_KEYS = st.one_of(
    st.integers(0, 40),
    st.integers(0, 40),
    st.integers(0, 12).map(lambda k: k << 32),
    st.integers(-3, 3).map(lambda k: k * 2**29),
    st.integers(-(2**63), 2**63 - 1),
)
_ODD_KEYS = st.sampled_from([2**64, -(2**63) - 1, 2**63, 3.0, True, "x", (1, 2)])
_OPS = st.sampled_from(["put", "put", "put", "discard", "del", "pop", "get", "has"])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(_OPS, _ID_KEYS, st.integers()), max_size=300),
    st.integers(0, 300),
    st.one_of(st.none(), st.tuples(_ODD_KEYS, st.integers(0, 300))),
    st.integers(0, 300),
)
def test_the_map_by_id_answers_as_a_dict_does(ops, clear_at, odd, check_at):
    """Whatever is put, removed, looked up or cleared, in both builds, ``IdMap`` holds
    and answers what a dict does: its length, each look-up (``in``, ``get``, ``[]``,
    ``pop`` with and without a default, ``KeyError`` where a dict raises one), and its
    keys, values and items in the dict's order (insertion, a re-put key keeping its
    place), through the packing of removed entries and the table's growth."""
    if odd is not None:  # (a put of a key of another kind, at a point of the run)
        ops = [*ops[: odd[1]], ("put", odd[0], 7), *ops[odd[1] :]]
    for cls in _map_builds():
        m, ref = cls(), {}
        for t, (op, key, value) in enumerate(ops):
            if t == clear_at:
                m.clear()
                ref.clear()
            if t == check_at:  # (the order, midway)
                assert m.items() == list(ref.items())
            if op == "put":
                if value % 2:
                    m.put(key, value)
                else:
                    m[key] = value
                ref[key] = value
            elif op == "discard":
                assert m.discard(key) == ref.pop(key, None)
            elif op == "del":
                if key in ref:
                    del m[key]
                    del ref[key]
                else:
                    with pytest.raises(KeyError):
                        del m[key]
            elif op == "pop":
                if key in ref or value % 2:
                    assert m.pop(key, "none") == ref.pop(key, "none")
                else:
                    with pytest.raises(KeyError):
                        m.pop(key)
            elif op == "get":
                assert m.get(key) == ref.get(key)
                assert m.get(key, "none") == ref.get(key, "none")
                if key in ref:
                    assert m[key] == ref[key]
                else:
                    with pytest.raises(KeyError):
                        m[key]
            else:
                assert m.has(key) == (key in ref) == (key in m)
            assert len(m) == len(ref) and bool(m) == bool(ref)
        assert m.keys() == list(ref) == list(m)
        assert m.values() == list(ref.values())
        assert m.items() == list(ref.items())


@needs_build
def test_the_compiled_map_by_id_keeps_ints_in_c_and_becomes_a_dict_for_another_key():
    """A map of ints keeps them in its C buffers (no dict) across growth and packing; the
    first key of another kind makes it a dict, with every entry and the order kept."""
    m = compiled.IdMap()
    for k in range(1000):
        m.put(k, -k)
        if k % 3 == 0:
            m.discard(k // 2)
    assert m.d is None and len(m.vals) < 4096
    want = {k: -k for k in range(1000)}
    for k in range(1000):
        if k % 3 == 0:
            want.pop(k // 2, None)
    assert m.items() == list(want.items())
    m.put("x", 1)
    want["x"] = 1
    assert m.d is not None and m.items() == list(want.items())


@needs_build
def test_the_compiled_map_by_id_packs_in_place_as_ids_come_and_go():
    """A ledger's use: ids one after another, each removed a few puts later. The map packs
    its entries in place (its room never grows) and answers as a dict does throughout."""
    m, ref = compiled.IdMap(), {}
    room = len(m.vals)
    for k in range(5000):
        m.put(k, -k)
        ref[k] = -k
        if k >= 5:
            assert m.discard(k - 5) == ref.pop(k - 5)
        if k % 97 == 0:
            assert m.items() == list(ref.items())
            for j in range(k - 8, k + 2):
                assert m.has(j) == (j in ref) and m.get(j) == ref.get(j)
    assert len(m.vals) == room and m.d is None
