"""``hetserve reproduce control``, as a user runs it, at a small size: one trace, five
runs, every request accounted for, the switches as their modes say, the report written."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hetserve.cli import main
from hetserve.experiments.control.study import ControlConfig, day_trace


def test_the_day_moves_and_keeps_its_mean():
    cfg = ControlConfig(rate_rps=500.0, hour_s=2.0)
    tr, rates = day_trace(cfg, {"resnet50": 0.01, "bert-base": 0.02})
    assert tr.duration_s == pytest.approx(48.0)
    assert len(tr) / tr.duration_s == pytest.approx(500.0, rel=0.05)
    hourly = rates.sum(axis=0).reshape(24, 60).mean(axis=1)
    assert hourly.max() / hourly.min() > 2.5  # the functions' days in phase: it moves
    assert (np.diff(tr.time_s) >= 0).all()


def test_reproduce_control_small(tmp_path, capsys):  # type: ignore[no-untyped-def]
    code = main(["reproduce", "control", "--hour", "2", "--rate", "600", "--out", str(tmp_path)])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "The control loop over a day" in out.out
    res = json.loads((tmp_path / "results.json").read_text())
    runs = res["runs"]
    assert set(runs) == {"static-mean", "static-peak", "flush-every", "mbb-auto",
                         "mbb-auto-throughput"}  # fmt: skip
    for r in runs.values():
        assert r["failed"] == 0
        assert 0 < r["attainment"] <= 1
    assert runs["static-peak"]["gpu_hours_total"] >= runs["static-mean"]["gpu_hours_total"]
    # every GPU all day under the throughput objective; fewer under cost
    assert runs["mbb-auto-throughput"]["gpu_hours_total"] > runs["mbb-auto"]["gpu_hours_total"]
    assert runs["flush-every"]["switches"] > 0 and runs["flush-every"]["paused_s_total"] > 0
    assert runs["mbb-auto"]["paused_s_total"] == 0.0
    assert set(res["headline"]["checks"]) and isinstance(res["headline"]["met"], bool)
    assert (tmp_path / "report.html").read_text().count("<img") == 1


def test_reproduce_control_refuses_bad_options(tmp_path, capsys):  # type: ignore[no-untyped-def]
    code = main(["reproduce", "control", "--hour", "1", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "--hour: expected seconds >= 2" in err and "Traceback" not in err
