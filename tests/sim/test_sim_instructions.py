"""``benchmarks/sim_instructions.py --compare --into``: the calls into chosen functions,
caller by caller, read from callgrind dumps (two small dumps written here in callgrind's
format, with names in full and compressed)."""

import json
import re
from pathlib import Path

from tests.helpers import benchmark_module

S = benchmark_module("sim_instructions")

HEADER = "version: 1\npositions: line\nevents: Ir Dr Dw I1mr D1mr D1mw\n\n"


def _dump(lookups: int, misses: int, compressed: bool) -> str:
    """``run`` calls ``lookup`` (which calls ``probe``) ``lookups`` times with ``misses``
    first-level misses in all, and ``free`` (twice: one recursion deeper the second
    time); ``lookup`` itself calls ``probe``."""
    run, lookup, probe, free = (
        ("(1) run", "(2) lookup", "(3) probe", "(4) free") if compressed
        else ("run", "lookup", "probe", "free")
    )  # fmt: skip
    again = "(2)" if compressed else "lookup"
    return HEADER + (
        f"fn={run}\n10 5 0 0 0 0 0\n"
        f"cfn={lookup}\ncalls={lookups} 20\n11 {100 * lookups} 0 0 0 {misses} 1\n"
        f"cfn={free}\ncalls=1 30\n+2 40 0 0 0 2 0\n"
        f"cfn={free}'2\ncalls=1 30\n+1 10 0 0 0 1 1\n"
        f"fn={lookup}\n20 7 0 0 0 0 0\n"
        f"cfn={probe}\ncalls=1 40\n21 50 0 0 0 3 0\n"
        f"fn={again}\n22 1 0 0 0 0 0\n"
    )


def _keep(folder: Path, requests: tuple[int, int], lookups: tuple[int, int],
          misses: tuple[int, int], compressed: bool) -> Path:  # fmt: skip
    folder.mkdir()
    counts = {}
    for i in range(2):
        name = f"run-{i}.callgrind"
        (folder / name).write_text(_dump(lookups[i], misses[i], compressed))
        counts[name] = requests[i]
    (folder / "requests.json").write_text(json.dumps(counts))
    return folder


def test_calls_into_reads_each_callers_calls_in_full_and_compressed_names(tmp_path):
    for compressed in (False, True):
        d = tmp_path / f"d{compressed}"
        d.mkdir()
        (d / "x.callgrind").write_text(_dump(3, 9, compressed))
        got = S.calls_into(d / "x.callgrind", re.compile("lookup|free"))
        # (the call's cost line: Ir, and D1mr + D1mw; the recursion's depth dropped)
        assert got == {("run", "lookup"): (300, 10), ("run", "free"): (50, 4)}, compressed
        assert S.calls_into(d / "x.callgrind", re.compile("probe")) == {
            ("lookup", "probe"): (50, 3)
        }


def test_compare_into_prints_the_growth_per_request_by_caller(tmp_path, capsys):
    # A: 100 more requests take 10 more lookups and 5 more misses; B: 100 more requests,
    # 10 more lookups, 105 more misses (the per-request growth: 0.05 -> 1.05 misses)
    a = _keep(tmp_path / "a", (100, 200), (10, 20), (5, 10), compressed=False)
    b = _keep(tmp_path / "b", (1000, 1100), (10, 20), (20, 125), compressed=True)
    S.compare_calls(a, b, re.compile("lookup"), 10)
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "`run` -> `lookup`" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:5] == ["+1.00", "0.05", "1.05", "10", "10"]
    S.compare_calls(a, b, re.compile("nothing_matches"), 10)
    assert "no calls into a function" in capsys.readouterr().out
