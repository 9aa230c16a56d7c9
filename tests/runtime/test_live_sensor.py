"""The server's sensor (``runtime.control.LiveSensor``): rates, burst rates and
attainment read from binned counts, against the same figures counted directly from the
events; its memory stays bounded however long it runs."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetserve.core.errors import HetserveError
from hetserve.runtime.control import LiveSensor


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.floats(20.0, 200.0), st.sampled_from([5.0, 10.0, 30.0]))
def test_rates_and_attainment_match_a_direct_count(seed, rate, window_s):  # type: ignore[no-untyped-def]
    rng = random.Random(seed)
    sensor = LiveSensor(["a", "b"], keep_s=60.0, bin_s=1.0)
    t, events = 0.0, []
    while t < 90.0:
        t += rng.expovariate(rate)
        m = "a" if rng.random() < 0.7 else "b"
        sensor.arrived(m, t)
        deadline, met = t + 0.05, rng.random() < 0.9
        sensor.ended(deadline, met)
        events.append((t, m, deadline, met))
    now = 90.0  # (a bin boundary: the window is whole bins)
    got = sensor.rates(now, window_s)
    for m in ("a", "b"):
        n = sum(1 for a, mm, _, _ in events if mm == m and now - window_s <= a < now)
        assert got[m] == pytest.approx(n / window_s, rel=1e-9)
    due = [(d, ok) for _, _, d, ok in events if now - window_s <= d < now]
    att, n_due = sensor.attainment(now, window_s)
    assert n_due == len(due)
    assert att == pytest.approx(sum(ok for _, ok in due) / len(due), rel=1e-9)
    # bursts: the quantile of the per-second rates over the window's whole bins
    per_s = [sum(1 for a, mm, _, _ in events if mm == "a" and k <= a < k + 1)
             for k in range(int(now - window_s), int(now))]  # fmt: skip
    peak = sensor.peak_rates(now, window_s, 1.0, 0.9)["a"]
    assert peak == pytest.approx(float(np.quantile(per_s, 0.9)), rel=1e-9)


def test_memory_stays_bounded_and_bad_settings_are_refused():
    sensor = LiveSensor(["a"], keep_s=10.0, bin_s=1.0)
    for k in range(10_000):
        sensor.arrived("a", k * 0.5)
        sensor.ended(k * 0.5 + 0.1, True)
    assert len(sensor._arrivals["a"]) <= sensor.keep + 1
    assert len(sensor._due) <= sensor.keep + 1
    assert sensor.rates(5000.0, 10.0)["a"] == pytest.approx(2.0)
    with pytest.raises(HetserveError, match="bin_s and keep_s"):
        LiveSensor(["a"], keep_s=0.0)
