import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.core.errors import HetserveError, UnknownNameError
from hetserve.core.requests import Stream
from hetserve.workload import MMPP2, Constant, Gamma, OnOff, Poisson, generate, parse_process
from hetserve.workload.trace import Trace

RNG = np.random.default_rng


@pytest.mark.parametrize(
    "proc",
    [
        Poisson(1000.0),
        Gamma(1000.0, cv=0.5),
        Gamma(1000.0, cv=4.0),
        MMPP2(1000.0, ratio=10, high_s=0.01, low_s=0.04),
        Constant(1000.0),
        OnOff(1000.0, on_s=0.05, off_s=0.15),
    ],
)
def test_rate_within_2pct_over_100k_arrivals(proc):
    t = proc.sample(100.0, RNG(7))
    assert len(t) / 100.0 == pytest.approx(1000.0, rel=0.02)
    assert np.all(np.diff(t) >= 0) and t.min() >= 0 and t.max() < 100.0


def test_interarrival_shape():
    def cv(t):
        g = np.diff(t)
        return g.std() / g.mean()

    assert cv(Poisson(500).sample(200, RNG(1))) == pytest.approx(1.0, abs=0.02)
    assert cv(Gamma(500, cv=3).sample(200, RNG(1))) == pytest.approx(3.0, rel=0.05)
    assert cv(Constant(500).sample(200, RNG(1))) < 1e-6
    assert cv(MMPP2(500, ratio=20, high_s=0.5, low_s=2).sample(200, RNG(1))) > 1.3
    hi, lo = MMPP2(100, ratio=10, high_s=1, low_s=4).rates_rps
    assert hi == pytest.approx(10 * lo) and (hi * 1 + lo * 4) / 5 == pytest.approx(100)


def test_poisson_counts_are_poisson():
    """Counts in 1 s windows: mean == variance (index of dispersion 1)."""
    t = Poisson(50).sample(4000, RNG(3))
    c = np.bincount(t.astype(int), minlength=4000)
    assert c.var() / c.mean() == pytest.approx(1.0, abs=0.08)


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(
        [
            "poisson:rate=30",
            "gamma:rate=30,cv=2",
            "mmpp:rate=30",
            "constant:rate=30",
            "onoff:rate=30,on_s=0.5,off_s=0.5",
        ]
    ),
    st.integers(0, 2**32 - 1),
)
def test_same_seed_same_trace(spec, seed):
    streams = [Stream(f"s{i}", "resnet50", 0.1, parse_process(spec)) for i in range(3)]
    a, b = generate(streams, 20.0, seed), generate(streams, 20.0, seed)
    assert np.array_equal(a.time_s, b.time_s) and np.array_equal(a.stream_idx, b.stream_idx)
    c = generate(streams, 20.0, seed + 1)
    assert len(c) != len(a) or not np.array_equal(a.time_s, c.time_s) or spec.startswith("constant")


def test_streams_independent_of_each_other():
    s = [Stream(f"s{i}", "m", 0.1, Poisson(10)) for i in range(3)]
    a = generate(s[:2], 50.0, 5)
    b = generate(s, 50.0, 5)
    for k in range(2):
        assert np.array_equal(a.time_s[a.stream_idx == k], b.time_s[b.stream_idx == k])


def test_generate_merges_and_requests():
    s = [Stream("a", "resnet50", 0.05, Poisson(100)), Stream("b", "bert-base", 0.2, Poisson(50))]
    tr = generate(s, 100.0, 0)
    assert np.all(np.diff(tr.time_s) >= 0)
    counts = tr.per_stream_counts()
    assert counts[0] == pytest.approx(10000, rel=0.05) and counts[1] == pytest.approx(
        5000, rel=0.05
    )
    reqs = list(tr.requests())
    assert len(reqs) == len(tr)
    r = reqs[10]
    assert r.deadline_s - r.arrival_s == pytest.approx(0.05 if r.stream == "a" else 0.2)
    assert [q.id for q in reqs[:3]] == [0, 1, 2]
    assert np.allclose(tr.deadlines_s(), [q.deadline_s for q in reqs])


def test_scaling_to_target_rate():
    p = Gamma(10, cv=2).with_rate(40)
    assert p.rate_rps == 40 and p.cv == 2
    tr = generate([Stream("a", "m", 0.1, Poisson(100))], 100.0, 1)
    sc = tr.scaled_to_rate(250.0)
    assert sc.rate_rps == pytest.approx(250.0)
    assert len(sc) == len(tr)


def test_arrivals_csv_round_trip(tmp_path):
    tr = generate(
        [Stream("a", "resnet50", 0.05, Poisson(100)), Stream("b", "gpt2", 0.3, Poisson(20))], 5.0, 0
    )
    p = tmp_path / "a.csv"
    tr.write_csv(p)
    back = Trace.read_csv(p)
    assert np.array_equal(back.time_s, tr.time_s)
    assert [s.name for s in back.streams] == ["a", "b"]
    assert [(s.model, s.slo_s) for s in back.streams] == [("resnet50", 0.05), ("gpt2", 0.3)]


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("time_s,stream,model\n", "header must have columns"),
        ("time_s,stream,model,slo_s\n1,a,m,x\n", r":2: time_s and slo_s must be numbers"),
        ("time_s,stream,model,slo_s\n1,a,m,0\n", r":2: expected time_s >= 0 and slo_s > 0"),
        ("time_s,stream,model,slo_s\n2,a,m,1\n1,a,m,1\n", "must be sorted"),
        ("time_s,stream,model,slo_s\n1,a,m,1\n2,a,q,1\n", r":3: stream a changes model"),
    ],
)
def test_bad_arrivals_csv(tmp_path, body, match):
    p = tmp_path / "a.csv"
    p.write_text(body)
    with pytest.raises(HetserveError, match=match):
        Trace.read_csv(p)


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("poison:rate=1", "did you mean 'poisson'"),
        ("poisson", "rate is required"),
        ("poisson:rate=abc", "rate must be a number"),
        ("gamma:rate=1,shape=2", "keys cv, rate"),
        ("poisson:rate=-1", "rate must be a positive"),
        ("gamma:rate=1,cv=0", "cv must be > 0"),
    ],
)
def test_parse_process_errors(spec, match):
    with pytest.raises((HetserveError, UnknownNameError), match=match):
        parse_process(spec)


def test_parse_process_ok():
    p = parse_process("mmpp:rate=100,ratio=5,high_s=2,low_s=8")
    assert isinstance(p, MMPP2) and p.ratio == 5 and p.describe().startswith("mmpp:rate=100")
    with pytest.raises(HetserveError):
        generate([], 1.0, 0)
    with pytest.raises(HetserveError):
        generate([Stream("a", "m", 0.1, Poisson(1))], 0.0, 0)


def test_one_grammar_with_the_rate_given_elsewhere():
    """The same spec, its rate given by the command (simulate) or in the spec (trace gen):
    the same process."""
    assert parse_process("gamma:cv=4", 50.0) == parse_process("gamma:rate=50,cv=4")
    assert parse_process("mmpp", 7.0) == parse_process("mmpp:rate=7")
    with pytest.raises(HetserveError, match="leave rate= out"):
        parse_process("poisson:rate=5", 10.0)
    with pytest.raises(HetserveError, match=r"e\.g\. gamma:cv=4"):
        parse_process("gamma:4", 10.0)  # the old positional spelling names the new one
