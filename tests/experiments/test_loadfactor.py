import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.engine.setup import build_setup
from hetserve.experiments.loadfactor import search_max_load_factor
from hetserve.experiments.setup import pooled_attainment


@settings(max_examples=100, deadline=None)
@given(st.floats(0.01, 64.0), st.floats(0.05, 4.0), st.sampled_from([0.01, 0.05]))
def test_finds_the_threshold_of_a_monotone_curve(threshold, start, resolution):
    calls = []

    def f(lf):
        calls.append(lf)
        return 1.0 if lf <= threshold else 0.5

    r = search_max_load_factor(f, start=start, resolution=resolution, lowest=0.01, highest=64.0)
    assert r.max_load_factor <= threshold
    assert threshold - r.max_load_factor <= resolution + 1e-9
    assert len(set(calls)) == len(calls)  # never evaluates a point twice
    assert [lf for lf, _ in r.curve] == sorted(set(calls))


def test_edges():
    r = search_max_load_factor(lambda lf: 0.0, start=1.0)
    assert r.max_load_factor == 0.0
    r = search_max_load_factor(lambda lf: 1.0, start=1.0, highest=8.0)
    assert r.max_load_factor == 8.0
    with pytest.raises(ValueError):
        search_max_load_factor(lambda lf: 1.0, target=1.5)


def test_simulated_attainment_falls_with_load():
    s = build_setup("hc1-s", ["resnet50"])
    lo = pooled_attainment(s, "edf-adaptive", "poisson", 0.5, 1.0, [0, 1])
    hi = pooled_attainment(s, "edf-adaptive", "poisson", 3.0, 1.0, [0, 1])
    assert lo > 0.99 > hi
