import numpy as np
import pytest

from hetserve.core.errors import HetserveError
from hetserve.workload.maf import maf_trace, stream_rates
from hetserve.workload.stats import trace_stats


def test_stream_rates_are_heavy_tailed_and_sum_to_the_total():
    r = stream_rates(1000, 5000.0, seed=1)
    assert r.sum() == pytest.approx(5000.0) and np.all(np.diff(r) <= 0)
    assert r[:100].sum() > 0.6 * r.sum()  # the top 10% of streams carry most of the load
    assert np.array_equal(r, stream_rates(1000, 5000.0, seed=1))


@pytest.mark.parametrize("kind", ["maf-stable", "maf-bursty"])
def test_maf_traces(kind):
    tr = maf_trace(kind, ["a", "b", "c"], 600, 2000.0, 70.0, 0.25, seed=2)
    assert tr.rate_rps == pytest.approx(2000.0, rel=0.25)
    assert [s.model for s in tr.streams[:4]] == ["a", "b", "c", "a"]  # round-robin
    assert all(s.slo_s == 0.25 for s in tr.streams)
    assert np.all(np.diff(tr.time_s) >= 0) and tr.time_s.max() < 70.0
    again = maf_trace(kind, ["a", "b", "c"], 600, 2000.0, 70.0, 0.25, seed=2)
    assert np.array_equal(tr.time_s, again.time_s)


def test_bursty_is_burstier_than_stable():
    cv = {
        k: trace_stats(maf_trace(k, ["a"], 200, 1000.0, 60.0, 0.25, seed=3), 1.0)["per_bin_cv"]
        for k in ("maf-stable", "maf-bursty")
    }
    assert cv["maf-bursty"] > 3 * cv["maf-stable"]


def test_bad_maf_arguments():
    with pytest.raises(HetserveError, match="kind must be one of"):
        maf_trace("maf", ["a"], 10, 10.0, 1.0, 0.1, 0)
    with pytest.raises(HetserveError, match="at least one model"):
        maf_trace("maf-stable", [], 10, 10.0, 1.0, 0.1, 0)
    with pytest.raises(HetserveError, match="positive rate"):
        stream_rates(10, 0.0, 0)
