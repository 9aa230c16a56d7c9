"""Re-planning in the simulator, as a user runs it: the mix turns over, and a run that
re-plans serves far more within the SLO than the static plan, in either switch mode,
with no request failed; ``simulate --replan`` writes every decision."""

from __future__ import annotations

import json

import pytest

from hetserve.cli import main
from hetserve.control.controller import RateController
from hetserve.core.outcome import FAILED, OK
from hetserve.engine.control import ControlConfig, ControlSpec
from hetserve.experiments.setup import replanner, simulate
from tests.control.scenario import setup_for, turning_trace


def run_cli(capsys, *args):  # type: ignore[no-untyped-def]
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("mode", ["mbb", "flush"])
def test_replanning_follows_a_turning_mix(mode):  # type: ignore[no-untyped-def]
    setup = setup_for(0.8)
    total = 0.7 * setup.plan.capacity_rps()
    trace = turning_trace(setup, total, 4.0, 8.0)
    static = simulate(setup, "reservation", trace)
    spec = ControlSpec(
        RateController("auto", period_s=2.0),
        replanner(setup),
        {"resnet50": 0.8 * total, "bert-base": 0.2 * total},
        ControlConfig(switch=mode, tick_s=0.5, window_s=1.0, long_window_s=2.0, solve_s=0.2),
    )
    moved = simulate(setup, "reservation", trace, control=spec)
    att = {k: float((r.outcome == OK).mean()) for k, r in (("static", static), ("moved", moved))}
    assert att["moved"] > att["static"] + 0.1, att
    assert not (moved.outcome == FAILED).any()
    switched = [r for r in moved.control if r["switched"]]
    assert switched and all(r["mode"] == mode for r in switched)
    assert all(r["asked_s"] >= 4.0 for r in switched if r["moved"])  # not before the turn


def test_simulate_replan_writes_the_decisions(capsys, tmp_path):  # type: ignore[no-untyped-def]
    plan = tmp_path / "plan.json"
    run_cli(capsys, "plan", "--cluster", "hc1-s", "--models", "resnet50,bert-base", "--estimate",
            "--output", str(plan))  # fmt: skip
    out = tmp_path / "run"
    code, text, err = run_cli(
        capsys, "simulate", "--cluster", "hc1-s", "--plan", str(plan), "--rate", "2000",
        "--duration", "12", "--replan", "every=5", "--switch", "flush", "--out", str(out),
    )  # fmt: skip
    assert code == 0, err
    assert "periodic" in text
    records = json.loads((out / "control.json").read_text())
    assert [x["asked_s"] for x in records] == [5.0, 10.0]
    assert all("decision" in x and "reason" in x for x in records)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["replan"] == "every=5"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--replan", "every=0.5"], "shorter than the solve time"),
        (["--replan", "sometimes"], "--replan: expected auto, every=SECONDS"),
        (["--replan", "auto", "--max-moving", "0"], "--max-moving': 0 is not in the range"),
        (["--replan", "auto", "--models", "resnet50", "--plan", ""], ""),
    ],
)
def test_simulate_replan_refuses_bad_input(capsys, tmp_path, args, message):  # type: ignore[no-untyped-def]
    if "--plan" in args:  # a plan no re-planning planner made (the default plan)
        args = ["--replan", "auto", "--models", "resnet50"]
        message = "does not plan for rates"
        base = ["simulate", "--cluster", "hc1-s", "--estimate"]
    else:
        plan = tmp_path / "plan.json"
        run_cli(capsys, "plan", "--cluster", "hc1-s", "--models", "resnet50", "--estimate",
                "--output", str(plan))  # fmt: skip
        base = ["simulate", "--cluster", "hc1-s", "--plan", str(plan)]
    out = str(tmp_path / "o")
    code, _, err = run_cli(capsys, *base, "--rate", "100", "--duration", "2", *args, "--out", out)
    assert code == 2
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_the_sensor_reads_rates_and_attainment_as_they_are(monkeypatch):  # type: ignore[no-untyped-def]
    """The simulator's sensor against the run's own arrays: rates exact, attainment exact
    when it reads every request, and within 0.05 on its sample."""
    import numpy as np

    import hetserve.sim.sensor as sensor
    from hetserve.scheduling.protocol import make_scheduler
    from hetserve.sim.engine import SimConfig, Simulator

    setup = setup_for(0.8)
    trace = turning_trace(setup, 1.3 * setup.plan.capacity_rps(), 2.0, 2.0)
    sim = Simulator(setup.cluster, setup.latency, setup.plan, setup.placement,
                    make_scheduler("reservation"), trace, SimConfig())  # fmt: skip
    res = sim.run()
    s = sensor.TraceSensor(trace, sim.recorder)
    now, w = 3.0, 1.0
    models = np.array([st.model for st in trace.streams])[trace.stream_idx]
    in_w = (trace.time_s > now - w) & (trace.time_s <= now)
    assert s.rates(now, w) == {m: float((in_w & (models == m)).sum()) / w for m in set(models)}
    dl = trace.deadlines_s()
    due = (dl > now - w) & (dl <= now)
    exact = float((res.outcome[due] == OK).mean())
    sampled, n = s.attainment(now, w)
    assert n == int(due.sum()) and abs(sampled - exact) < 0.05
    monkeypatch.setattr(sensor, "SAMPLE", 10**9)
    assert s.attainment(now, w) == (pytest.approx(exact), n)
    assert 0.3 < exact < 0.95  # (an overloaded run: the check means something)


def test_simulate_replans_for_the_least_power(capsys, tmp_path):  # type: ignore[no-untyped-def]
    """``--objective energy``: the plan and every re-plan draw the least power for the
    rates; a re-plan of the observed rates takes fewer GPUs than a plan of every GPU."""
    plan = tmp_path / "plan.json"
    code, _, err = run_cli(capsys, "plan", "--cluster", "hc1-s", "--models",
                           "resnet50,bert-base", "--objective", "energy", "--rate", "2000",
                           "--output", str(plan))  # fmt: skip
    assert code == 0, err
    assert json.loads(plan.read_text())["objective"]["watts"] > 0
    out = tmp_path / "run"
    code, _, err = run_cli(
        capsys, "simulate", "--cluster", "hc1-s", "--plan", str(plan), "--rate", "2000",
        "--duration", "12", "--replan", "every=5", "--objective", "energy", "--out", str(out),
    )  # fmt: skip
    assert code == 0, err
    records = json.loads((out / "control.json").read_text())
    switched = [r for r in records if r["switched"]]
    assert switched and all(0 < r["gpus"] < 16 for r in switched)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["objective"] == "energy"
