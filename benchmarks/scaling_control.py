"""A control for issue 41's scaling goal ("at 1,000 GPUs and 100 models at 100,000
requests/s offered, the simulator keeps its speed per request"): does a simulator
written in C, the way fast simulators are written, keep its speed per request from 10 to
1,000 GPUs?

``benchmarks/scaling_control.c`` is the smallest discrete-event simulation of the
scaling run's shape (``sim_scaling.py``): N GPUs, N/10 models of ten GPUs each, Poisson
arrivals at 100 requests/s a GPU, each idle GPU of a model taking what is queued (up to 8
rows) for 20 ms + 2 ms a row, a deadline 150 ms after arrival. Requests are 64-byte
structs from a free list (the most recently freed first: the friendliest order for the
caches), nothing is allocated per event, and the events are kept in one of two queues
(``--queues``): ``heap``, 16-byte structs in one binary heap in an array, as most
simulators keep them (more levels as the cluster grows), or ``calendar``, Brown's
calendar queue (buckets of a fixed width in a ring, each a sorted list; the width set for
about one event a bucket: the same work an event at any size). The two give the same run
(no two events share a time). It is not hetserve's model and gives no result hetserve is
checked against; it measures what a compiled simulator's time per request does when the
state in flight grows a hundredfold (about 33 requests in flight at 10 GPUs, 3,300 at
1,000), with the queue's growth (``heap``) and without it (``calendar``).

This script compiles it (the system's C compiler, ``cc -O2``, in a temporary folder:
nothing is downloaded) and runs it:

- timed: ``--rounds R`` rounds, each point in turn in a fresh process (the machine's
  drift falls on every point alike), ``--requests`` served requests a run; per queue and
  point the median time per request and, per round, the first point's time over this
  one's (1.0 keeps the speed per request), with the median and range over the rounds;
- ``--callgrind``: also the instructions and first-level misses per request (the
  difference of runs of ``--requests`` and twice as many, so that the start does not
  count), the first level given as 48 KB, 12-way, as ``sim_instructions.py --cache-sim``
  gives it, and the mispredicted branches of callgrind's model of a predictor
  (``valgrind`` must be installed).

Run: ``.venv/bin/python benchmarks/scaling_control.py [--gpus 10,100,1000]
[--requests 3000000] [--rounds 7] [--seed 1] [--queues heap,calendar] [--callgrind]``
(the defaults: about 40 s, and 3 minutes more with ``--callgrind``).
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("scaling_control.c")
D1 = "--D1=49152,12,64"  # (as sim_instructions.py --cache-sim)
QUEUES = ("heap", "calendar")


def build(folder: Path) -> Path:
    """The control compiled into ``folder``; a one-line error where no C compiler is."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        sys.exit("scaling_control: no C compiler (cc or gcc) on PATH")
    exe = folder / "scaling_control"
    subprocess.run([cc, "-O2", "-o", str(exe), str(SOURCE), "-lm"], check=True)
    return exe


def run(
    exe: Path, gpus: int, requests: int, seed: int, queue: str = "heap",
    prefix: list[str] | None = None,
) -> dict:  # fmt: skip
    """One run: its printed line as a dict (``ns``: wall time per request)."""
    out = subprocess.run(
        [*(prefix or []), str(exe), str(gpus), str(requests), str(seed), queue],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    g, n, secs, ns, served, met, in_flight = out.stdout.split()
    return {
        "gpus": int(g), "requests": int(n), "seconds": float(secs), "ns": float(ns),
        "served": int(served), "met": int(met), "in_flight": float(in_flight),
        "stderr": out.stderr,
    }  # fmt: skip


def counts(exe: Path, gpus: int, requests: int, seed: int, queue: str, folder: Path) -> list[float]:
    """Instructions, first-level misses (reads and writes) and mispredicted branches
    (callgrind's model of a predictor) per request under callgrind: the difference of
    runs of ``requests`` and twice as many."""
    got = []
    for n in (requests, 2 * requests):
        grind = ["valgrind", "--tool=callgrind", "--cache-sim=yes", D1, "--branch-sim=yes",
                 f"--callgrind-out-file={folder}/cg.out"]  # fmt: skip
        res = run(exe, gpus, n, seed, queue, grind)
        row = [res["served"]]
        for name in (r"I\s+refs", r"D1\s+misses", r"Mispredicts"):
            row.append(int(re.search(name + r":\s+([\d,]+)", res["stderr"])[1].replace(",", "")))
        got.append(row)
    a, b = got
    return [(y - x) / (b[0] - a[0]) for x, y in zip(a[1:], b[1:], strict=True)]


def main() -> None:
    from hetserve.core.provenance import provenance_line

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", default="10,100,1000")
    ap.add_argument("--requests", type=int, default=3_000_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--queues", default=",".join(QUEUES))
    ap.add_argument("--callgrind", action="store_true")
    args = ap.parse_args()
    try:
        points = [int(g) for g in args.gpus.split(",")]
    except ValueError:
        sys.exit(f"scaling_control: --gpus {args.gpus!r}: expected numbers like 10,100,1000")
    if any(g < 10 or g % 10 for g in points) or args.requests < 1 or args.rounds < 1:
        sys.exit("scaling_control: --gpus multiples of 10; --requests and --rounds at least 1")
    queues = args.queues.split(",")
    if not queues or any(q not in QUEUES for q in queues):
        sys.exit(f"scaling_control: --queues {args.queues!r}: expected some of heap,calendar")
    if args.callgrind and shutil.which("valgrind") is None:
        sys.exit("scaling_control: --callgrind needs valgrind on PATH")
    print(provenance_line(), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(Path(tmp))
        ns: dict[tuple[str, int], list[float]] = {(q, g): [] for q in queues for g in points}
        last: dict[tuple[str, int], dict] = {}
        for _ in range(args.rounds):
            for g in points:
                for q in queues:
                    last[q, g] = run(exe, g, args.requests, args.seed, q)
                    ns[q, g].append(last[q, g]["ns"])
        print(f"\n{args.rounds} rounds, {args.requests:,} requests a run (seed {args.seed})")
        print(
            "| queue | GPUs | in flight (mean) | met SLO | ns/request (median) | ratio to "
            f"{points[0]} GPUs: median (range) |"
        )
        print("|---|---:|---:|---:|---:|---|")
        for q in queues:
            for g in points:
                ratios = sorted(a / b for a, b in zip(ns[q, points[0]], ns[q, g], strict=True))
                got = last[q, g]
                print(
                    f"| {q} | {g:,} | {got['in_flight']:,.0f} | {got['met'] / got['served']:.3f}"
                    f" | {statistics.median(ns[q, g]):.1f} | {statistics.median(ratios):.2f} "
                    f"({ratios[0]:.2f}-{ratios[-1]:.2f}) |"
                )
        if args.callgrind:
            n = max(args.requests // 6, 1000)
            print(
                f"\ncallgrind ({D1[2:]}), per request of the difference of "
                f"{n:,} and {2 * n:,} requests:"
            )
            print("| queue | GPUs | instructions | first-level misses | mispredicted branches |")
            print("|---|---:|---:|---:|---:|")
            for q in queues:
                for g in points:
                    ir, d1, bm = counts(exe, g, n, args.seed, q, Path(tmp))
                    print(f"| {q} | {g:,} | {ir:,.0f} | {d1:.2f} | {bm:.2f} |", flush=True)


if __name__ == "__main__":
    main()
