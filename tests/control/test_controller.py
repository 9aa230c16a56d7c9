"""The controller decides from figures: hysteresis, the period, the alarm, and a switch
only when the predicted gain exceeds the predicted cost."""

from __future__ import annotations

import pytest

from hetserve.control.controller import (
    RateController,
    Replan,
    Snapshot,
    SwitchEstimate,
    parse_replan,
    served_rps,
)
from hetserve.core.errors import HetserveError

PLANNED = {"a": 100.0, "b": 100.0}
CAP = {"a": 150.0, "b": 150.0}


def snap(now, short, long_, att=None, due=0, busy=False):  # type: ignore[no-untyped-def]
    return Snapshot(now, short, long_, att, due, 0, PLANNED, CAP, 4, busy)


def test_a_burst_in_the_short_window_alone_does_not_replan():
    c = RateController("auto", period_s=10, change=0.25)
    assert c.observe(snap(100, {"a": 300, "b": 100}, {"a": 110, "b": 100})) is None
    want = c.observe(snap(101, {"a": 300, "b": 100}, {"a": 200, "b": 100}))
    assert want is not None and "a 100.0 -> 300.0" in want.reason
    assert want.rates_rps == {"a": 300, "b": 100}  # up: the larger window's rate


def test_down_moves_take_the_long_windows_rate():
    c = RateController("auto", period_s=10, change=0.25)
    want = c.observe(snap(100, {"a": 20, "b": 100}, {"a": 50, "b": 100}))
    assert want is not None and want.rates_rps["a"] == 50


def test_at_most_one_replan_per_period_and_none_while_busy():
    c = RateController("every", period_s=60)
    assert c.observe(snap(0, PLANNED, PLANNED)) is not None
    assert c.observe(snap(59, PLANNED, PLANNED)) is None
    assert c.observe(snap(61, PLANNED, PLANNED, busy=True)) is None
    assert c.observe(snap(61, PLANNED, PLANNED)) is not None


def test_the_alarm_needs_enough_requests_due():
    c = RateController("auto", period_s=1, alarm=0.9, min_due=50)
    assert c.observe(snap(10, PLANNED, PLANNED, att=0.5, due=10)) is None
    want = c.observe(snap(11, PLANNED, PLANNED, att=0.5, due=100))
    assert want is not None and "alarm" in want.reason


def test_off_never_replans():
    assert RateController("off").observe(snap(1e6, {"a": 1e6}, {"a": 1e6})) is None


def est(cap, delayed, moved=2, gpus=4, load_gpu_s=1.0):  # type: ignore[no-untyped-def]
    return SwitchEstimate(cap, gpus, moved, 1.0, load_gpu_s, delayed, 1.5)


def test_switches_only_when_the_gain_exceeds_the_cost():
    c = RateController(horizon_s=100, min_gain=1)
    rates = {"a": 200.0, "b": 100.0}  # a is over its capacity of 150
    s = snap(0, rates, rates)
    want = Replan(rates, "test")
    better = {"a": 200.0, "b": 110.0}
    gain = 100 * (served_rps(rates, better) - served_rps(rates, CAP))
    assert gain == pytest.approx(100 * 50)
    assert c.judge(s, want, est(better, gain - 2)).switch
    d = c.judge(s, want, est(better, gain + 1))
    assert not d.switch and "stay" in d.text
    # no gain in requests, but GPUs saved beyond the loading: switch
    same = dict(CAP)
    assert c.judge(s, want, est(same, 0.0, gpus=3)).switch
    assert not c.judge(s, want, est(same, 0.0, gpus=4)).switch


@pytest.mark.parametrize(
    ("text", "expected"),
    [("auto", ("auto", None)), ("every=30", ("every", 30.0)), ("OFF", ("off", None))],
)
def test_parse_replan(text, expected):  # type: ignore[no-untyped-def]
    assert parse_replan(text) == expected


@pytest.mark.parametrize("text", ["every=0", "every=-1", "every=x", "sometimes", "every=inf"])
def test_parse_replan_refuses(text):  # type: ignore[no-untyped-def]
    with pytest.raises(HetserveError, match="--replan: expected auto"):
        parse_replan(text)


def test_bad_settings_are_refused():
    with pytest.raises(HetserveError, match="replan mode"):
        RateController("sometimes")
    with pytest.raises(HetserveError, match="period_s"):
        RateController(period_s=0)
    with pytest.raises(HetserveError, match="alarm"):
        RateController(alarm=2)


def test_load_ratios_replan_with_hysteresis():
    c = RateController("auto", period_s=1, change=1.0, high_load=0.9, low_load=0.5)
    # a at 140 of its 150: 93% in both windows
    want = c.observe(snap(10, {"a": 140, "b": 100}, {"a": 140, "b": 100}))
    assert want is not None and "load high: a at 93%" in want.reason
    # one window alone is not enough
    assert c.observe(snap(20, {"a": 140, "b": 100}, {"a": 120, "b": 100})) is None
    # every model below half its capacity in both windows: over-provisioned
    want = c.observe(snap(30, {"a": 60, "b": 70}, {"a": 60, "b": 70}))
    assert want is not None and "over-provisioned" in want.reason
    # (without low_load, the throughput objective's, it is not a reason)
    assert RateController("auto", period_s=1).observe(snap(30, PLANNED, PLANNED)) is None


def test_an_alarm_asks_for_the_share_it_missed_and_counts_what_it_saw():
    c = RateController("auto", period_s=1, alarm=0.95, min_due=10)
    s = snap(10, PLANNED, PLANNED, att=0.8, due=100)
    want = c.observe(s)
    assert want is not None and want.rates_rps == {"a": 125.0, "b": 125.0}
    # the current plan served 80% of 200 req/s though its capacity covers them: a plan
    # with the same capacity gains what was missed, over the horizon
    d = c.judge(s, want, est(dict(CAP), 0.0))
    assert d.gain == pytest.approx(c.horizon_s * (200 - 160))


def test_shrinking_weighs_gpu_seconds_against_requests_delayed():
    c = RateController(horizon_s=100, request_gpu_s=50.0)
    s = snap(0, PLANNED, PLANNED)  # 4 GPUs
    want = Replan(dict(PLANNED), "test")
    # one GPU less for 100 s, 1 GPU-s loading: 99 GPU-s saved
    assert c.judge(s, want, est(dict(CAP), 1.0, gpus=3)).switch  # 99 > 1 x 50
    assert not c.judge(s, want, est(dict(CAP), 2.0, gpus=3)).switch  # 99 < 2 x 50


def test_up_fast_down_slowly():
    c = RateController("auto", period_s=60, change=0.25, low_load=0.5)
    assert c.observe(snap(0, PLANNED, PLANNED, att=0.5, due=100)) is not None  # (the alarm)
    # 20 s later, within the period: a move down waits, a move up does not
    assert c.observe(snap(20, {"a": 50, "b": 100}, {"a": 50, "b": 100})) is None
    assert c.observe(snap(10, {"a": 300, "b": 100}, {"a": 300, "b": 100})) is None  # < 15 s
    want = c.observe(snap(20, {"a": 300, "b": 100}, {"a": 300, "b": 100}))
    assert want is not None and "a 100.0 -> 300.0" in want.reason
    assert (
        RateController("auto", period_s=60, up_period_s=60).observe(
            snap(0, PLANNED, PLANNED, att=0.5, due=100)
        )
        is not None
    )
