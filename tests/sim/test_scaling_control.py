"""``benchmarks/scaling_control.py``, the compiled control of issue 41's scaling run:
it builds with the system's C compiler and its runs obey what its model allows."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import benchmark_module

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "scaling_control.py"

pytestmark = pytest.mark.skipif(
    shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler"
)


def _control():
    return benchmark_module("scaling_control")


def test_the_control_builds_and_its_runs_keep_the_queueing_bounds(tmp_path):
    """Each served request waits at least one batch of one row (20 ms + 2 ms) and, at
    half the GPUs' capacity, meets its 150 ms deadline; by Little's law the requests in
    flight are the arrival rate (1,000 a second for ten GPUs) times the mean time in the
    system, so between 22 and 150; the same seed gives the same run, another seed
    another."""
    c = _control()
    exe = c.build(tmp_path)
    for gpus in (10, 20):
        got = c.run(exe, gpus, 20_000, 1)
        assert 20_000 <= got["served"] < 20_000 + 8 * gpus  # (the last batches end together)
        assert got["met"] == got["served"]
        rate = 100.0 * gpus
        assert 0.022 * rate <= got["in_flight"] <= 0.150 * rate
    a, b, other = (c.run(exe, 10, 5_000, s) for s in (3, 3, 4))
    assert a["in_flight"] == b["in_flight"] and a["in_flight"] != other["in_flight"]


def test_the_calendar_queue_gives_the_heap_s_run(tmp_path):
    """The calendar queue (buckets in a ring, each a sorted list) hands the events out in
    the heap's order: the same run (the requests served and in time, and the mean in
    flight, a sum of every request's time in the system, to the last bit), at sizes where
    its ring wraps many times (a run of seconds, a ring of 64 ms or so)."""
    c = _control()
    exe = c.build(tmp_path)
    for gpus, seed in ((10, 1), (20, 2), (200, 3)):
        heap = c.run(exe, gpus, 30_000, seed, "heap")
        calendar = c.run(exe, gpus, 30_000, seed, "calendar")
        for k in ("served", "met", "in_flight"):
            assert heap[k] == calendar[k], (gpus, k)


def test_bad_arguments_get_one_line():
    """A cluster that is not ten GPUs a model is refused in one line, not a traceback."""
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--gpus", "15"], capture_output=True, text=True
    )
    assert out.returncode != 0
    assert out.stderr.strip().count("\n") == 0 and "multiples of 10" in out.stderr
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--queues", "heap,fifo"], capture_output=True, text=True
    )
    assert out.returncode != 0
    assert out.stderr.strip().count("\n") == 0 and "heap,calendar" in out.stderr


def test_sim_scaling_runs_the_control_in_its_rounds():
    """``sim_scaling.py --paired R --controls heap,calendar``: the compiled control's rows
    beside hetserve's, from the same rounds, and the table of one over the other."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "sim_scaling.py"), "--gpus", "10,20",
         "--schedulers", "reservation", "--bases", "resnet18", "--requests", "400",
         "--paired", "1", "--controls", "heap,calendar"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    rows = [ln for ln in out.stdout.splitlines() if ln.startswith("| ")]
    assert sum("| C control | 20 |" in ln for ln in rows) == 2
    assert sum(ln.startswith("| reservation | planner | 20 |") for ln in rows) == 2
    assert "over heap's" in out.stdout and "over calendar's" in out.stdout
