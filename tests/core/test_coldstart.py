"""The cold-start timeline: hand-worked examples (DeepPlan's Figures 7-9), a naive
event-by-event computation (with shared host links, for every layer), one set of parts
for every sharing, the compiled ready times to the bit of the Python file's, and bad
input."""

import heapq
import importlib
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.core import timeline_core
from hetserve.core.coldstart import (
    DHA,
    LOAD,
    LoadPlan,
    TimelineParts,
    timeline,
    warm_latency_s,
)
from hetserve.core.errors import HetserveError
from hetserve.core.layertable import LayerRow


def rows_of(spec):
    """``spec``: (load, exec_gpu, exec_host) in microseconds, 1 MB of weights each (0 bytes
    where the load is 0)."""
    return [
        LayerRow("m", i, "L", 1_000_000 if load else 0, load, g, h)
        for i, (load, g, h) in enumerate(spec)
    ]


def ms(tl):
    return round(tl.latency_s * 1e6, 9)


def test_pipeline_stalls_and_the_baseline():
    rows = rows_of([(4, 1, 2), (2, 1, 5), (2, 1, 5)])
    ps = timeline(rows, LoadPlan.all_loaded(3))
    # loads end at 4, 6, 8; L1 runs 4-5, L2 stalls to 6 and runs 6-7, L3 stalls to 8, ends 9
    assert [round(x * 1e6, 9) for x in ps.ready_s] == [4, 6, 8]
    assert [round(x * 1e6, 9) for x in ps.stall_s] == [4, 1, 1]
    assert ms(ps) == 9
    base = timeline(rows, LoadPlan.all_loaded(3, "baseline", pipelined=False))
    assert ms(base) == 8 + 3  # every load, then every layer
    assert ps.gpu_bytes == base.gpu_bytes == 3_000_000


def test_figure7_dha_on_the_first_layer_removes_its_stall_and_advances_the_loads():
    rows = rows_of([(4, 1, 2), (2, 1, 5), (2, 1, 5)])
    tl = timeline(rows, LoadPlan.from_sets("dha", 3, [0]))
    # L1 runs from host memory 0-2 while L2 loads 0-2 and L3 2-4
    assert [round(x * 1e6, 9) for x in tl.exec_start_s] == [0, 2, 4]
    assert ms(tl) == 5
    assert tl.gpu_bytes == 2_000_000 and tl.dha_bytes == 1_000_000
    assert warm_latency_s(rows, LoadPlan.from_sets("dha", 3, [0])) == pytest.approx(4e-6)


def test_figure8_dha_on_an_earlier_layer_shortens_a_later_stall():
    # L3's load (6) is not hidden behind L1 and L2; DHA on L2 (PerfDiff 1) starts it 2 earlier
    rows = rows_of([(1, 1, 9), (2, 1, 2), (6, 1, 9)])
    before = timeline(rows, LoadPlan.all_loaded(3))
    after = timeline(rows, LoadPlan.from_sets("dha", 3, [1]))
    # before: L1 1-2, L2 waits for its load to 3 and runs 3-4; L3 arrives at 9: stall 5
    assert round(before.stall_s[2] * 1e6, 9) == 9 - 4 and ms(before) == 10
    # after: L3 arrives at 1 + 6 = 7; L2 runs 2-4 from host memory (its own stall of 1
    # absorbed the PerfDiff); L3's stall is 3 and the cold start 2 shorter
    assert round(after.stall_s[2] * 1e6, 9) == 7 - 4 and ms(after) == 8


def test_figure9_parallel_transmission_with_dha():
    # L1 on DHA; L2-L4 over the primary's link; L5-L7 over the secondary's, forwarded over
    # NVLink at 1 MB per us (1,000 GB/s) while the primary still loads L3 and L4
    spec = [(3, 1, 1)] + [(2, 1, 9)] * 6
    rows = rows_of(spec)
    plan = LoadPlan("pt+dha", (DHA,) + (LOAD,) * 6, (-1, 0, 0, 0, 1, 1, 1))
    tl = timeline(rows, plan, nvlink_gbps=1000)
    # primary: L2 0-2, L3 2-4, L4 4-6; secondary: L5 0-2 (+1 fwd -> 3), L6 -> 5, L7 -> 7
    assert [round(x * 1e6, 9) for x in tl.ready_s] == [0, 2, 4, 6, 3, 5, 7]
    # L1 0-1, stall to 2; L2 2-3, L3 4-5, L4 6-7, L5 7-8, L6 8-9, L7 9-10
    assert ms(tl) == 10
    assert tl.loaded_bytes == (3_000_000, 3_000_000)
    serial = timeline(rows, LoadPlan.from_sets("dha", 7, [0]))
    assert ms(serial) == 13  # one link: L7 arrives at 2 x 6 = 12 and runs 12-13
    with pytest.raises(HetserveError, match="needs NVLink"):
        timeline(rows, plan)


def test_a_shared_link_doubles_its_loads():
    rows = rows_of([(2, 1, 9)] * 3)
    assert ms(timeline(rows, LoadPlan.all_loaded(3), load_scale=[2.0])) == 13


def naive(rows, plan, nvlink_gbps=None, load_scale=()):
    """An event-by-event computation: a heap of (time, event) with load streams, migration
    streams and the execution stream as explicit processes; part ``k``'s loads take
    ``load_scale[k]`` times as long (1 where not given). Returns (per layer: when its
    weights are on the primary, its execution start and stall; the latency)."""
    n = len(rows)
    ready = [None] * n
    events = []
    queues = {}
    for i, (m, p) in enumerate(zip(plan.modes, plan.parts, strict=True)):
        if m == DHA or rows[i].param_bytes == 0:
            ready[i] = 0.0
        else:
            queues.setdefault(p, []).append(i)

    def load_s(i, p):
        return rows[i].load_us * 1e-6 * (load_scale[p] if p < len(load_scale) else 1.0)

    seq = 0
    for p, q in queues.items():
        heapq.heappush(events, (load_s(q[0], p), seq, "loaded", p, 0))
        seq += 1
    fwd_busy = {}
    while events:
        t, _, what, p, k = heapq.heappop(events)
        i = queues[p][k]
        if what == "loaded":
            if k + 1 < len(queues[p]):
                nxt = queues[p][k + 1]
                heapq.heappush(events, (t + load_s(nxt, p), seq, "loaded", p, k + 1))
                seq += 1
            if p == 0:
                ready[i] = t
            else:
                start = max(t, fwd_busy.get(p, 0.0))
                fwd_busy[p] = start + rows[i].param_bytes / (nvlink_gbps * 1e9)
                heapq.heappush(events, (fwd_busy[p], seq, "forwarded", p, k))
                seq += 1
        else:
            ready[i] = t
    t = max(ready) if not plan.pipelined else 0.0
    starts, stalls = [], []
    for i in range(n):
        s = max(t, ready[i])
        starts.append(s)
        stalls.append(s - t)
        t = s + (rows[i].exec_host_us if plan.modes[i] == DHA else rows[i].exec_gpu_us) * 1e-6
    return ready, starts, stalls, t


layer = st.tuples(
    st.integers(0, 50).map(float), st.integers(1, 20).map(float), st.integers(1, 60).map(float)
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(layer, min_size=1, max_size=12),
    st.lists(st.integers(-1, 2), min_size=12, max_size=12),
    st.booleans(),
)
def test_timeline_equals_an_event_by_event_computation(spec, choice, pipelined):
    rows = rows_of(spec)
    n = len(rows)
    parts = choice[:n]
    modes = tuple(DHA if p < 0 else LOAD for p in parts)
    plan = LoadPlan("x", modes, tuple(parts), pipelined)
    nv = 50.0
    assert timeline(rows, plan, nv).latency_s == pytest.approx(naive(rows, plan, nv)[3], abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(layer, min_size=1, max_size=12),
    st.lists(st.integers(-1, 2), min_size=12, max_size=12),
    st.booleans(),
    st.lists(st.lists(st.sampled_from([1.0, 1.5, 2.0, 3.0, 7.0]), max_size=3), max_size=6),
)
def test_one_set_of_parts_gives_the_timeline_of_every_sharing(spec, choice, pipelined, scales):
    # the simulator keeps one ``TimelineParts`` per architecture, plan and GPU type and asks
    # it for each sharing of the host links; each answer is the event-by-event timeline
    rows = rows_of(spec)
    parts = choice[: len(rows)]
    plan = LoadPlan("x", tuple(DHA if p < 0 else LOAD for p in parts), tuple(parts), pipelined)
    made = TimelineParts(rows, plan, 50.0)
    for scale in [*scales, []]:
        tl = made.timeline(scale)
        ready, starts, stalls, latency_s = naive(rows, plan, 50.0, scale)
        assert tl.ready_s == pytest.approx(ready, abs=1e-12)
        assert tl.exec_start_s == pytest.approx(starts, abs=1e-12)
        assert tl.stall_s == pytest.approx(stalls, abs=1e-12)
        assert tl.latency_s == pytest.approx(latency_s, abs=1e-12)
        assert tl.exec_end_s[-1] == tl.latency_s
        assert tl.load_done_s == max(ready)
        fresh = timeline(rows, plan, 50.0, scale)  # (the same numbers, made anew)
        same = ("ready_s", "exec_start_s", "stall_s", "latency_s")
        assert [getattr(fresh, f) for f in same] == [getattr(tl, f) for f in same]


def test_bad_plans_are_one_line_errors():
    rows = rows_of([(1, 1, 1)] * 3)
    with pytest.raises(HetserveError, match="has 2 layers; the layer table has 3"):
        timeline(rows, LoadPlan.all_loaded(2))
    with pytest.raises(HetserveError, match="layer 1: a DHA layer has part -1"):
        LoadPlan("x", (LOAD, DHA), (0, 0))
    with pytest.raises(HetserveError, match="mode 'copy'"):
        LoadPlan("x", ("copy",), (0,))


def test_bad_layer_tables_are_one_line_errors(tmp_path):
    import json

    from hetserve.core.errors import ConfigError
    from hetserve.core.layertable import get_layer_table

    good = get_layer_table("resnet18").to_json()
    cases = [
        (lambda d: d.pop("leaves"), "missing field 'leaves'"),
        (lambda d: d["leaves"][3].pop("param_bytes"), r"leaves\[3\]: missing field 'param_bytes'"),
        (lambda d: d["leaves"][2].update(flops=-5), r"leaves\[2\]: field .flops.: expected a num"),
        (lambda d: d["leaves"][1].update(bogus=1), r"leaves\[1\]: unknown field 'bogus'"),
        (lambda d: d["leaves"][5].update(layer=0), r"leaves\[5\]: layer 0 after layer \d+"),
        (lambda d: d.update(leaves=[]), "expected a non-empty list"),
    ]  # fmt: skip
    for change, msg in cases:
        d = json.loads(json.dumps(good))
        change(d)
        f = tmp_path / "t.json"
        f.write_text(json.dumps(d))
        with pytest.raises(ConfigError, match=msg):
            get_layer_table(str(f))
    (tmp_path / "bad.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(ConfigError, match="not UTF-8"):
        get_layer_table(str(tmp_path / "bad.json"))


try:
    compiled_timeline = importlib.import_module("hetserve.core.timeline_core_c")
except ImportError:  # (not built: the check below is skipped)
    compiled_timeline = None

times = st.floats(0.0, 1e3) | st.sampled_from([0.0, 5e-324, 1e-9, 0.1, 1 / 3])


@pytest.mark.skipif(compiled_timeline is None, reason="the compiled part is not built")
@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(st.tuples(times, times), max_size=8), min_size=1, max_size=4),
    st.lists(st.floats(0.1, 8.0) | st.integers(1, 4), max_size=5),
    st.integers(0, 3),
    st.randoms(use_true_random=False),
)
def test_the_compiled_ready_times_are_the_python_files_to_the_bit(parts, scale, spare, rnd):
    """``timeline_core.ready_times`` compiled (``timeline_core_c``) and run as the Python
    file: the same doubles, bit for bit (a sum's order changes its last bits), for any
    parts, link shares (floats or ints, fewer or more than the parts) and layer order."""
    n = sum(len(p) for p in parts) + spare
    layers = rnd.sample(range(n), n - spare)
    layer = array("q", layers)
    load_s = array("d", [x[0] for p in parts for x in p])
    fwd_s = array("d", [x[1] for p in parts for x in p])
    ends, k = [], 0
    for p in parts:
        k += len(p)
        ends.append(k)
    part_end = array("q", ends)
    args = (layer, load_s, fwd_s, part_end, tuple(scale), n)
    want = timeline_core.ready_times(*args)
    got = compiled_timeline.ready_times(*args)
    assert [x.hex() for x in got[0]] == [x.hex() for x in want[0]]
    assert got[1].hex() == want[1].hex() and want[1] == max(want[0], default=0.0)
