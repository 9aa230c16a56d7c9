"""benchmarks/against_base.py's timed sittings (issue 41): a tree whose compiled build went
stale in the middle of a sitting (a ``.pxd`` edited while it ran) took the Python files
for the runs after that, and the sitting printed their ratios beside the compiled ones'.
It now stops there."""

import pytest

from tests.helpers import benchmark_module

A = benchmark_module("against_base")


def test_each_tree_keeps_the_build_its_first_run_took():
    seen: dict[str, str] = {}
    assert A.same_build(seen, "this", True) == "c"
    assert A.same_build(seen, "base", None) == ""  # (a tree from before the compiled core)
    assert A.same_build(seen, "this", True) == "c"
    assert A.same_build(seen, "base", None) == ""
    assert seen == {"this": "c", "base": ""}


def test_a_build_gone_stale_in_the_sitting_stops_it_with_one_line(capsys):
    seen: dict[str, str] = {}
    A.same_build(seen, "this", True)
    with pytest.raises(SystemExit) as e:
        A.same_build(seen, "this", False)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "this tree ran its py build after its c one" in err


def test_each_rounds_ratio_is_shown_with_their_median_and_range():
    line = A.round_ratios([100.0, 200.0, 100.0], [110.0, 190.0, 100.0])
    assert line == "by round: 1.100 0.950 1.000  (median 1.000, range 0.950-1.100)"
    even = A.round_ratios([1.0, 1.0], [1.02, 1.06])
    assert "median 1.040" in even and "range 1.020-1.060" in even
    assert A.round_ratios([], []) == "by round: none"
