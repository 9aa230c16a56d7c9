"""benchmarks/sim_scaling.py's replicated shape (issue 41): N/10 copies of the 10-GPU point
side by side, the control run that tells what a larger working set costs the simulator
from what more work per request would."""

import numpy as np
import pytest

from hetserve.experiments.setup import simulate
from tests.helpers import benchmark_module

S = benchmark_module("sim_scaling")


def test_at_ten_gpus_the_replicated_shape_is_the_planners_system():
    got = {}
    for shape in ("planner", "replicated"):
        s, tr = S.setup_and_trace(10, 2.0, bases=("resnet18",), shape=shape)
        res = simulate(s, "reservation", tr)
        got[shape] = (tr.time_s, res.outcome, res.finish_s, res.batch)
    for a, b in zip(got["planner"], got["replicated"], strict=True):
        assert np.array_equal(a, b)


def test_each_copy_has_the_ten_gpu_pipelines_on_gpus_of_its_own():
    s10, _ = S.setup_and_trace(10, 0.1, bases=("resnet18",))
    (one,) = s10.plan.models.values()
    s, tr = S.setup_and_trace(40, 0.5, bases=("resnet18",), shape="replicated")
    assert len(s.plan.models) == 4 and not s.plan.shared_pools
    assert all(mp == one for mp in s.plan.models.values())
    owners: dict[str, str] = {}
    for (model, _, _), workers in s.placement.stages.items():
        for w in workers:
            assert owners.setdefault(w, model) == model  # (no worker serves two copies)
    assert len(owners) == 4 * sum(st.instances for p in one.pipelines for st in p.stages)
    # each copy offered the 10-GPU point's load: 100 requests/s per GPU in all
    models = np.array([st.model for st in tr.streams])[tr.stream_idx]
    counts = {m: int((models == m).sum()) for m in s.plan.models}
    assert sum(counts.values()) == pytest.approx(0.5 * 100 * 40, rel=0.1)
    assert max(counts.values()) < 1.5 * min(counts.values())


def test_copies_that_do_not_fit_are_refused_in_one_line():
    with pytest.raises(
        SystemExit, match="100 copies need 800 P4 GPUs; the 1000-GPU cluster has 750"
    ):
        S.replicated_plan(1000, ("resnet50",))
    with pytest.raises(SystemExit, match="multiples of 10, got 15"):
        S.replicated_plan(15, ("resnet18",))


def test_against_controls_divides_each_rounds_speed_kept_by_the_controls():
    """``--controls``' table: per round, the scheduler's speed kept (its first point's
    time over this point's) over the control's in the same round; the median and range of
    those quotients, not a quotient of medians."""
    got = {
        (10, "planner", "reservation"): [1000.0, 2000.0, 1000.0],
        (1000, "planner", "reservation"): [1250.0, 2500.0, 2000.0],  # kept 0.8, 0.8, 0.5
        (10, S.CONTROL, "calendar"): [50.0, 50.0, 100.0],
        (1000, S.CONTROL, "calendar"): [62.5, 50.0, 125.0],  # kept 0.8, 1.0, 0.8
    }
    table = S.against_controls(got, [10, 1000], ["reservation"], ["planner"], ["calendar"])
    row = table.strip().splitlines()[-1]
    assert row == "| reservation | planner | 1,000 | 0.80 (0.62-1.00) |"


def test_controls_get_one_line_errors():
    import subprocess
    import sys

    for args, why in (
        (["--controls", "heap"], "--controls: needs --paired R"),
        (["--paired", "1", "--controls", "fifo"], "expected some of heap,calendar"),
        (["--paired", "1", "--controls", "heap", "--gpus", "10,15"], "multiples of 10"),
    ):
        out = subprocess.run([sys.executable, S.__file__, *args], capture_output=True, text=True)
        assert out.returncode == 2 and why in out.stderr, (args, out.stderr)
        assert "Traceback" not in out.stderr
