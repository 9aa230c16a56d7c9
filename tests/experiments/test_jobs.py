"""The studies' job runner: the same results in one process or several, with progress."""

import math

import pytest

from hetserve.experiments.jobs import parallel_map


@pytest.mark.parametrize("jobs", [1, 2])
def test_parallel_map_runs_every_item_and_reports_progress(jobs):
    seen = []
    out = parallel_map(math.sqrt, [1.0, 4.0, 9.0], jobs, lambda m, k, n: seen.append((m, k, n)),
                       label=lambda r: f"{r:g}")  # fmt: skip
    assert sorted(out) == [1.0, 2.0, 3.0]
    assert [k for _, k, _ in seen] == [1, 2, 3] and {n for _, _, n in seen} == {3}
    assert sorted(m for m, _, _ in seen) == ["1", "2", "3"]
