import pytest

from hetserve.core.outcome import OK
from hetserve.experiments.metrics import summarize
from hetserve.experiments.setup import build_setup, build_trace, simulate


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
