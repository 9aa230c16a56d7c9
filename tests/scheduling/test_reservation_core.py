"""The reservation scheduler's core (``scheduling/reservation_core.py``) compiled by Cython
and run as plain Python gives the same results: the same tables after the same operations
(hypothesis), and the same simulation, request by request, in two processes that differ
only in ``HETSERVE_PURE_PYTHON``."""

import math
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.scheduling import reservation_core, reservation_slots
from hetserve.scheduling.reservation_core import stage_tag
from tests.helpers import run_python_json


def _both(slots, core):
    """The table's module and the core's, as one (the core ``cimport``s the table)."""
    return SimpleNamespace(
        SlotTable=slots.SlotTable, PoolOrder=slots.PoolOrder, Lane=slots.Lane,
        new_lanes=slots.new_lanes,
        Probed=core.Probed, probe=core.probe, Pipe=core.Pipe, Into=core.Into,
        Algorithm1=core.Algorithm1,
    )  # fmt: skip


pure = _both(reservation_slots, reservation_core)
try:
    from hetserve.scheduling import reservation_core_c, reservation_slots_c
except ImportError:  # (no compiled build: nothing to compare with)
    compiled = None
else:
    compiled = _both(reservation_slots_c, reservation_core_c)

needs_build = pytest.mark.skipif(
    compiled is None, reason="hetserve was installed without its compiled part (setup.py)"
)

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 3), st.integers(0, 60), st.integers(1, 9)),
        st.tuples(st.just("replace"), st.integers(0, 3), st.integers(0, 60), st.integers(1, 9)),
        st.tuples(st.just("remove"), st.integers(0, 3), st.integers(0, 60), st.integers(1, 9)),
        st.tuples(st.just("now"), st.integers(0, 3), st.integers(0, 60), st.integers(1, 9)),
        st.tuples(st.just("probe"), st.integers(0, 3), st.integers(0, 60), st.integers(1, 9)),
    ),
    max_size=40,
)


def _drive(mod, ops, gaps):
    """Run ``ops`` on a table of 4 workers (two pools of 2) and 2 links of module ``mod``;
    returns everything observable, as plain Python values."""
    t = mod.SlotTable()
    t.grow(6)
    pools = [mod.PoolOrder([0, 1]), mod.PoolOrder([2, 3])]
    for w in range(4):
        t.orders_of[w].append(pools[w // 2])
        t.set_min_gap(w, gaps[w])
    for p in pools:
        p.min_gap = max(gaps[w] for w in range(4) if p in t.orders_of[w])
    # stage 1 on pool 0; stage 2 on pool 1, reached over links 4 and 5
    info = [(0.004, 0.0, pools[0]), (0.003, 8e6, pools[1])]
    # (by worker number: into workers 2 and 3, from workers 0 and 1)
    into = mod.Into([(w, (4, 5), 1.0 / 1e9, 0.0001) for w in (2, 3)])
    assert (into.min_inv, into.min_delay) == (1e-9, 0.0001)
    assert into.links == [None, None, (4, 5), (4, 5)]
    # (from worker 1: worker 3 on its GPU, no link crossed; worker 2 over link 5 alone)
    into_1 = mod.Into([(2, (5,), 2.0 / 1e9, 0.0002), (3, (), 0.0, 0.0)])
    assert (into_1.min_inv, into_1.min_delay, into_1.width) == (0.0, 0.0, 2)
    xfers = [[], [into, into_1]]
    pipe = mod.Pipe(1, [(0, 1), (1, 2)], lambda batch: info, xfers, None)
    k_info = pipe.learn(3)  # (the numbers of a batch of 3 rows: ``info``'s)
    seen = []
    tags: dict[int, list[int]] = {r: [] for r in range(6)}
    for k, (op, r, a, d) in enumerate(ops):
        res = r if op != "add" or k % 3 else 4 + k % 2
        start, end = a / 1000, (a + d) / 1000
        if op == "add":
            t.add(res, start, end, k)
            tags[res].append(k)
        elif op == "replace" and tags[res]:
            t.replace(res, tags[res][a % len(tags[res])], start, end)
        elif op == "remove" and tags[res]:
            t.remove(res, tags[res].pop(a % len(tags[res])))
        elif op == "now":
            t.now = max(t.now, start)
        elif op == "probe":
            pr = mod.Probed(None, 2)
            mod.probe(t, pipe, k_info, {d % 5}, start, pr)
            seen.append((pr.path, pr.resv, pr.finish_s, pr.wait_s, pr.starts))
            seen.append(t.earliest_slot([r, 4 + r % 2], start, d / 1000))
        seen.append(
            (
                [t.intervals(r) for r in range(6)],
                [t.front[r] for r in range(6)],
                [t.solid[r] for r in range(6)],
                [(p.by_front, p.by_solid) for p in pools],
            )
        )
    return seen


@needs_build
@settings(max_examples=150, deadline=None)
@given(OPS, st.lists(st.integers(0, 5), min_size=4, max_size=4))
def test_the_compiled_table_and_probe_do_what_the_python_ones_do(ops, gaps):
    g = [x / 1000 for x in gaps]
    assert _drive(compiled, ops, g) == _drive(pure, ops, g)


def _run(pure_python: bool) -> dict:
    code = """
import hashlib, json
from hetserve.core.outcome import OK
from hetserve.core.plan import ModelPlan, Pipeline, Plan, Stage, bind
from hetserve.engine.setup import Setup, build_setup
from hetserve.experiments.setup import build_trace
from hetserve.scheduling import make_scheduler
from hetserve.scheduling import reservation_table
from hetserve.sim.engine import SimConfig, Simulator
base = build_setup("hc1-s", ["resnet50"])
st = (Stage((0, 5), "P4", 1, 12), Stage((5, 10), "L4", 1, 3))
whole = (Stage((0, 10), "L4", 1, 1),)
plan = Plan({"resnet50": ModelPlan(base.slos_s["resnet50"], 1.0,
             (Pipeline(st, 4, 0.0, 1600.0), Pipeline(whole, 8, 0.0, 400.0)))})
s = Setup(base.cluster, base.latency, ["resnet50"], base.slos_s, plan, bind(plan, base.cluster))
tr = build_trace(s, "gamma:cv=3", {"resnet50": 1700.0}, 2.0, seed=7)
sched = make_scheduler("reservation", {"margin_s": 0.0005})
sim = Simulator(s.cluster, s.latency, s.plan, s.placement, sched, tr,
                SimConfig(seed=4, jitter="lognormal", jitter_cv=0.3))
sim.fail_worker(s.placement.workers[3].id, 0.9)
res = sim.run()
h = hashlib.sha256()
for a in (res.outcome, res.reason, res.batch, res.dispatch_s, res.start_s, res.finish_s):
    h.update(a.tobytes())
h.update(repr(res.stage_rows).encode())
workers = {r[3] for r in res.stage_rows}
print(json.dumps({"compiled": reservation_table.COMPILED, "n": len(tr),
                  "ok": int((res.outcome == OK).sum()), "hash": h.hexdigest(),
                  "workers": len(workers)}))
"""
    return run_python_json(code, pure_python)


BIG = reservation_core.MAX_BATCH_ID - 1


@settings(max_examples=300, deadline=None)
@given(
    st.tuples(st.integers(-BIG, BIG), st.integers(0, reservation_core.STAGE_TAGS - 1)),
    st.tuples(st.integers(-BIG, BIG), st.integers(0, reservation_core.STAGE_TAGS - 1)),
)
def test_a_stage_s_tag_is_ordered_as_its_batch_and_stage_are(x, y):
    """The table's tag of a batch's stage (an integer) orders as the pair ``(batch,
    stage)`` did when tags were tuples (equal intervals go by tag), is unique, and fits a
    C ``long long`` with room below it for the previous plan's tag."""
    a, b = stage_tag(*x), stage_tag(*y)
    assert (a < b) == (x < y) and (a == b) == (x == y)
    assert reservation_core.PREVIOUS_PLAN_TAG < a < 2**63 - 1
    assert reservation_slots.NO_TAG < reservation_core.PREVIOUS_PLAN_TAG


def test_a_batch_id_too_large_for_a_tag_is_refused_not_wrapped():
    """``reserve`` refuses a batch id whose tags would not fit 63 bits, compiled as in
    Python (compiled, the product would wrap around silently)."""
    from hetserve.core.errors import HetserveError

    for core in (reservation_core, reservation_core_c) if compiled else (reservation_core,):
        slots = reservation_slots_c if core is not reservation_core else reservation_slots
        t = slots.SlotTable()
        t.grow(1)
        pr = core.Probed(None, 1)
        pr.add_resv(0, 0.0, 1.0)
        pr.iw[0] = 0  # (its one stage's worker)
        bk = slots.Bookings()
        assert core.reserve(t, reservation_core.MAX_BATCH_ID - 1, pr, bk) == 0
        assert t.intervals(0) == [(0.0, 1.0, stage_tag(reservation_core.MAX_BATCH_ID - 1, 0))]
        with pytest.raises(HetserveError, match="too large"):
            core.reserve(t, reservation_core.MAX_BATCH_ID, pr, bk)


def test_a_report_of_a_batch_with_no_reservations_moves_nothing():
    """The correction of a stage report whose batch has no reservations kept (released
    after its last stage, or dispatched before this core was made, as across a switch
    of plans) moves nothing and says so, compiled as in Python. (The compiled build
    read the kept row as a C integer before asking whether there was one: a TypeError.)"""
    for mod in (pure, compiled) if compiled is not None else (pure,):
        core = mod.Algorithm1(mod.SlotTable(), [], {}, set(), 0.0, {}, [], 0)
        assert core.correct(12345, 0, 0.0, 1.0, math.nan, math.nan, True, True) is False, mod
        assert core.correct(7, 1, 0.0, 1.0, 0.0, 0.5, False, False) is False, mod


RING_OPS = st.lists(
    st.tuples(
        st.sampled_from(["put", "get", "del"]),
        # (ids of batches under way side by side, and now and then one far off, or below
        # zero: each falls on the ring's places by its low bits)
        st.one_of(st.integers(0, 200), st.integers(-3, 5000)),
        st.integers(0, 10**6),
    ),
    max_size=300,
)


@given(RING_OPS)
@settings(max_examples=200, deadline=None)
def test_the_batches_rows_by_id_are_what_a_dict_of_them_holds(ops):
    """Each batch's first row, kept by id in a ring that doubles as needed
    (``Algorithm1.resv_put``/``resv_get``/``resv_del``), holds what a dict holds after
    the same operations, compiled as in Python; ``resv_items`` lists them by id. (A
    ``del`` only of a batch kept, as the correction does.)"""
    for mod in (pure, compiled) if compiled is not None else (pure,):
        core = mod.Algorithm1(mod.SlotTable(), [], {}, set(), 0.0, {}, [], 0)
        ref: dict[int, int] = {}
        for op, bid, first in ops:
            if op == "put":
                core.resv_put(bid, first)
                ref[bid] = first
            elif op == "del" and bid in ref:
                core.resv_del(bid)
                del ref[bid]
            assert core.resv_get(bid) == ref.get(bid, -1), (mod, op, bid)
        assert core.resv_items() == sorted(ref.items()), mod
        assert core.resv_mask + 1 >= len(ref) and (core.resv_mask + 1) & core.resv_mask == 0


@needs_build
def test_a_simulation_is_the_same_compiled_and_in_python():
    """Two pipelines of one model (two pools across links, and a whole model on one
    GPU), bursty arrivals past capacity (drops), batches that wait to fill, with a margin
    (timers), jitter (feedback correction moves reservations), a worker lost mid-run
    (its requests back in the queue)."""
    a, b = _run(pure_python=False), _run(pure_python=True)
    assert a["compiled"] is True and b["compiled"] is False
    assert a["n"] > 2000 and 0 < a["ok"] < a["n"]
    assert a["workers"] == 16  # (both pipelines ran)
    assert a == {**b, "compiled": True}


@needs_build
def test_the_build_takes_the_c_types_of_its_pxd():
    """The compiled core's classes are extension types with C fields, as
    ``reservation_core_c.pxd`` declares. (Until issue 41's fourth session the file was
    named for the ``.py`` and not for the module Cython builds, so Cython left it out
    without a word, and the "compiled" core was the Python classes run by compiled
    code.)"""
    t = compiled.SlotTable()
    assert not hasattr(t, "__dict__")  # an extension type: no instance dictionary
    with pytest.raises(TypeError):
        t.now = "soon"  # a C double
    for cls in (compiled.PoolOrder, compiled.Lane, compiled.Pipe, compiled.Probed,
                compiled.Algorithm1):  # fmt: skip
        assert "__dict__" not in dir(cls), cls
    assert hasattr(pure.SlotTable(), "__dict__")  # (the Python file: plain classes)


def _walk_pool_order(n: int, moves) -> None:  # type: ignore[no-untyped-def]
    """Workers 10..10+n-1 of one pool order; each move ``(worker, time, of_solid)`` sets
    that worker's front (or solid), through the table's ``_moved``; after each, both
    orders are what ``sorted`` gives, compiled and in Python."""
    for mod in (pure, compiled) if compiled is not None else (pure,):
        order = mod.PoolOrder(list(range(10, 10 + n)))
        front = {10 + k: float("-inf") for k in range(n)}
        solid = dict(front)
        for w, new, of_solid in moves:
            now = solid if of_solid else front
            if new == now[w]:
                continue
            old_f, old_s = front[w], solid[w]
            now[w] = new
            mod.SlotTable._moved(_table_with(mod, order, w), w, old_f, old_s, front[w], solid[w])
            assert order.by_front == sorted((t_, w_) for w_, t_ in front.items()), mod
            assert order.by_solid == sorted((t_, w_) for w_, t_ in solid.items()), mod


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 20),
    st.lists(st.tuples(st.integers(0, 19), st.integers(-4, 40), st.booleans()), max_size=150),
)
def test_a_pool_order_stays_sorted_by_time_then_worker(n, moves):
    """Moving a worker's front or solid keeps the pool's pairs sorted by (time, worker),
    ties included: the same lists ``sorted`` gives, compiled and in Python. (The orders
    are rings of a power of two: pools of 1 to 20 workers fill theirs, or not, and their
    starts go round.)"""
    _walk_pool_order(n, [(10 + k % n, t / 4, of_solid) for k, t, of_solid in moves])


@pytest.mark.parametrize("n", [2, 3, 5, 8, 9, 16, 33, 100])
def test_a_pool_order_stays_sorted_over_long_random_walks(n):
    """As above, over 1,500 moves a pool (seeded): long walks take every way a ring
    move goes (a worker from the end to the start and back, its start round the ring
    many times), which the short examples above seldom do."""
    import random

    rng = random.Random(n)
    moves = [
        (10 + rng.randrange(n), rng.randrange(-8, 4 * n) / 4, rng.random() < 0.3)
        for _ in range(1500)
    ]
    _walk_pool_order(n, moves)


LANE_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("insort"), st.integers(0, 40), st.integers(0, 6), st.integers(0, 9)),
        st.tuples(st.just("drop_past"), st.integers(0, 46)),
        st.tuples(st.just("keep"), st.integers(0, 9), st.integers(-1, 46)),
    ),
    max_size=200,
)


def _walk_lane(ops) -> None:  # type: ignore[no-untyped-def]
    """``ops`` on a lane, compiled and in Python, and on a list of ``(s, e, tag)``
    tuples (``bisect.insort``): the same intervals after each. The lane is one of its
    own, then the middle one of three made together (``new_lanes``: their first buffers
    are slices of shared ones), whose neighbours must stay empty."""
    import bisect

    builds = (pure, compiled) if compiled is not None else (pure,)
    for mod, together in [(mod, together) for mod in builds for together in (False, True)]:
        trio = mod.new_lanes(3) if together else [mod.Lane()] * 3
        lane = trio[1]
        model: list[tuple[float, float, int]] = []
        for op in ops:
            if op[0] == "insort":
                lane.insort(op[1], op[2], op[3])
                bisect.insort(model, (op[1], op[2], op[3]))
            elif op[0] == "drop_past":
                lane.drop_past(op[1])
                while model and model[0][1] <= op[1]:
                    model.pop(0)
            else:
                lane.keep(op[1], op[2])
                model = [x for x in model if x[2] != op[1] and x[1] >= op[2]]
            assert lane.intervals() == model, mod
            assert 0 <= lane.lo <= lane.hi <= len(lane.tags) == len(lane.s) == len(lane.e)
            if together:
                assert trio[0].intervals() == trio[2].intervals() == [], mod


@settings(max_examples=300, deadline=None)
@given(LANE_OPS)
def test_a_lane_holds_what_a_sorted_list_holds(ops):
    """A lane (its buffers moved down or grown as they fill) holds what a list of
    ``(s, e, tag)`` tuples does under the same inserts, drops of the past and keeps."""
    _walk_lane([
        ("insort", op[1] / 4, (op[1] + op[2]) / 4, op[3]) if op[0] == "insort"
        else ("drop_past", op[1] / 4) if op[0] == "drop_past"
        else ("keep", op[1], op[2] / 4 if op[2] >= 0 else -math.inf)
        for op in ops
    ])  # fmt: skip


@pytest.mark.parametrize("seed", range(4))
def test_a_lane_holds_what_a_sorted_list_holds_as_time_goes_on(seed):
    """As above, over 3,000 seeded steps as a simulation takes them: time goes on,
    intervals are reserved ahead of it and the past is dropped, so the lane fills
    with a few dead ones at its start and makes room both ways (moving the live part
    down, growing) many times."""
    import random

    rng = random.Random(seed)
    now = 0.0
    ops: list[tuple] = []
    for _ in range(3000):
        u = rng.random()
        if u < 0.6:
            start = now + rng.randrange(0, 40) / 8
            ops.append(("insort", start, start + rng.randrange(1, 12) / 8, rng.randrange(50)))
        elif u < 0.95:
            now += rng.randrange(0, 3) / 8
            ops.append(("drop_past", now))
        else:
            ops.append(("keep", rng.randrange(50), -math.inf))
    _walk_lane(ops)


def _table_with(mod, order, w):
    """A table whose resource ``w`` belongs to ``order`` alone."""
    t = mod.SlotTable()
    t.grow(w + 1)
    t.orders_of[w].append(order)
    return t


BATCH_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("book"), st.integers(0, 9)),  # a batch of that many rows
        st.tuples(st.just("release"), st.integers(0, 1000)),  # a live batch, by position
    ),
    max_size=80,
)


def _book(bk, rows) -> int:  # type: ignore[no-untyped-def]
    """``rows`` booked in ``bk`` as one batch's, in order (as ``reserve`` books them):
    its first row (-1: none)."""
    first = prev = -1
    for row in rows:
        j = bk.new_row(*row)
        if prev < 0:
            first = j
        else:
            bk.nxt[prev] = j
        prev = j
    return first


@settings(max_examples=200, deadline=None)
@given(BATCH_OPS)
def test_the_bookings_keep_each_batch_s_rows_in_order_and_reuse_released_ones(ops):
    """``Bookings``, compiled and in Python, against a dict of lists: each live batch's
    rows read back as booked, in order; released rows are used again (the rows in use
    never exceed the most that were live at once), and the buffers grow as needed."""
    for mod in (reservation_slots, reservation_slots_c) if compiled else (reservation_slots,):
        bk = mod.Bookings(4)
        live: dict[int, tuple[int, list]] = {}  # batch -> (first row, its rows as booked)
        most = 0
        for k, (op, x) in enumerate(ops):
            if op == "book":
                rows = [(k * 10 + i, k + i / 8, i / 4, i // 2, k * 4 + i // 2) for i in range(x)]
                live[k] = (_book(bk, rows), rows)
            elif live:
                b = sorted(live)[x % len(live)]
                bk.release(live.pop(b)[0])
            most = max(most, sum(len(r) for _, r in live.values()))
            for first, rows in live.values():
                assert bk.entries(first) == rows, mod
        assert bk.top <= max(most, 0) or not ops, mod
        assert len(bk.tags) == len(bk.r) >= bk.top, mod


def _correct_as_a_list(table, entries, stage, worker, start_s, end_s, xs, xe, has_x, completed,
                       last):  # fmt: skip
    """The feedback correction as it was written over a list of ``(resource, start,
    duration, stage, tag)`` tuples (its specification): whether any reservation moved,
    and the entries kept (None: none)."""
    eps = 1e-12
    delay = 0.0
    changed = False
    for r, start, dur, st_, tag in entries:
        if st_ != stage:
            continue
        if r == worker:
            a, b = start_s, end_s
            delay = b - (start + dur)
        elif has_x:
            a, b = xs, xe
        else:
            continue
        if abs(a - start) > eps or abs(b - start - dur) > eps:
            table.replace(r, tag, a, b)
            changed = True
    if not completed or last:
        if not completed:
            for r, _, _, st_, tag in entries:
                if st_ > stage:
                    table.remove(r, tag)
                    changed = True
        return changed, None
    if abs(delay) > eps:
        out = []
        for r, start, dur, st_, tag in entries:
            if st_ > stage:
                table.replace(r, tag, start + delay, start + delay + dur)
                start += delay
            out.append((r, start, dur, st_, tag))
        return True, out
    return changed, entries


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 3),  # stages
    # per stage reported: its start and end moved (ms), and whether it completed
    st.lists(st.tuples(st.integers(-3, 3), st.integers(-3, 3), st.booleans()), max_size=3),
    st.booleans(),
)
def test_the_correction_over_bookings_is_the_correction_over_a_list(n, reports, has_x):
    """A batch of ``n`` stages (worker ``s``, links 4 and 5 into each later stage),
    corrected stage by stage by reports that move its runs and transfers, or stop it:
    the table's reservations and the batch's rows are those of the correction written
    over a list of tuples."""
    for mod in (reservation_slots, reservation_slots_c) if compiled else (reservation_slots,):
        tables = [mod.SlotTable(), mod.SlotTable()]
        for t in tables:
            t.grow(6)
        bk = mod.Bookings(2)
        entries = [
            (r, s * 0.01, 0.004 if r == s else 0.001, s, stage_tag(7, s))
            for s in range(n)
            for r in ([4, 5, s] if s else [s])
        ]
        for r, start, dur, _, tag in entries:
            for t in tables:
                t.add(r, start, start + dur, tag)
        first = _book(bk, entries)
        kept = entries
        for s, (da, db, completed) in enumerate(reports[:n]):
            start, end = s * 0.01 + da / 1000, s * 0.01 + 0.004 + db / 1000
            last = s == n - 1
            x = (start - 0.001, start) if has_x and s else (0.0, 0.0)
            args = (s, s, start, end, x[0], x[1], has_x and s > 0, completed, last)
            # (the table is not told the stage's worker: it is its last row, as booked)
            res = tables[0].correct(7, bk, first, s, *args[2:])
            changed, keep = bool(res & reservation_slots.MOVED), bool(res & reservation_slots.KEPT)
            want_changed, want = _correct_as_a_list(tables[1], kept, *args)
            assert changed == want_changed, mod
            assert [tables[0].intervals(r) for r in range(6)] == [
                tables[1].intervals(r) for r in range(6)
            ], mod
            assert keep == (want is not None), mod
            if want is None:
                break
            assert bk.entries(first) == want, mod
            kept = want


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.sampled_from([f"w{i}" for i in range(12)]), max_size=20),
    st.lists(st.sampled_from([f"w{i}" for i in range(12)]), max_size=20),
)
def test_naming_all_at_once_gives_the_ids_one_by_one_gives(before, names):
    """``ReservationTable.name_all`` (the table grown once) gives the ids, names and
    lanes that ``id_of`` of each name in turn gives, after names already known."""
    from hetserve.scheduling.reservation_table import ReservationTable

    a, b = ReservationTable(), ReservationTable()
    for n in before:
        a.id_of(n)
        b.id_of(n)
    a.name_all(names)
    for n in names:
        b.id_of(n)
    assert a.ids == b.ids and a.names == b.names
    assert a.core.n == b.core.n == len(a.core.lanes) == len(a.names)
    assert len(a.core.orders_of) == len(a.names) and len(a.core.front) >= len(a.names)
