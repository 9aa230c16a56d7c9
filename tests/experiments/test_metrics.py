import pytest

from hetserve.core.outcome import OK
from hetserve.engine.setup import build_setup
from hetserve.experiments.metrics import summarize
from hetserve.experiments.setup import build_trace, simulate


def test_summary_is_consistent_with_raw_records():
    s = build_setup("hc1-s", ["resnet50", "efficientnet-b0"])
    tr = build_trace(s, "poisson", s.plan.rates_at(1.3), 2.0, 3)
    res = simulate(s, "edf-adaptive", tr)
    m = summarize(res)
    n = len(tr)
    assert m["arrived"] == n
    assert m["ok"] + m["late"] + m["dropped"] + m["failed"] == n
    assert m["attainment"] == pytest.approx((res.outcome == OK).sum() / n)
    assert m["goodput_rps"] == pytest.approx(m["ok"] / 2.0)
    assert m["offered_rps"] == pytest.approx(n / 2.0)
    assert m["dropped"] > 0 and sum(m["drops_by_reason"].values()) == m["dropped"]
    assert sum(pm["arrived"] for pm in m["per_model"].values()) == n
    lat = m["latency_ms"]
    assert lat["p50"] <= lat["p90"] <= lat["p99"]
    busy = {}
    for row in res.stage_rows:
        busy[row[4]] = busy.get(row[4], 0.0) + row[7] - row[6]
    for g, u in m["utilization"].items():
        n_workers = sum(1 for w in res.worker_gpu.values() if w == g)
        assert u == pytest.approx(busy.get(g, 0.0) / (res.end_s * n_workers))
        assert 0 <= u <= 1
    assert sum(int(k) * v for k, v in m["batch_sizes"].items()) == m["ok"] + m["late"]
    assert m["energy_j"] > 0 and m["energy_per_request_j"] > 0


def test_summary_of_a_case_worked_by_hand():
    """One V100, 10 ms per request (batch 1), SLO 25 ms, three requests at t = 0 over 1 s:
    they end at 10, 20 and 30 ms, so OK, OK, LATE; energy 40 W idle for 0.97 s plus 300 W
    busy for 0.03 s = 47.8 J."""
    import numpy as np

    from hetserve.core.requests import Stream
    from hetserve.workload.trace import Trace
    from tests.helpers import linear_setup

    s = linear_setup(alpha_s=0.01, slo_s=0.025)
    tr = Trace(np.zeros(3), np.zeros(3, dtype=np.int32), (Stream("s", "m", 0.025),), 1.0)
    m = summarize(simulate(s, "fixed-batch", tr, {"max_batch": 1, "max_queue_delay_s": 0}))
    assert (m["arrived"], m["ok"], m["late"], m["dropped"]) == (3, 2, 1, 0)
    assert m["attainment"] == pytest.approx(2 / 3)
    assert m["goodput_rps"] == pytest.approx(2.0) and m["offered_rps"] == pytest.approx(3.0)
    assert m["energy_j"] == pytest.approx(40 * 0.97 + 300 * 0.03)
