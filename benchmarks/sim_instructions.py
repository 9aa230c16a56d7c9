"""Instructions per simulated request (issue 41), counted by callgrind, which does not
drift with the machine's speed: issue 41's instance (``benchmarks/against_base.py``: the
PPipe authors' MAF19 trio on ``hc1-l`` with their TensorRT profiles, a plan at its
capacity, the reservation scheduler) run under ``valgrind --tool=callgrind``. The process
sets everything up (imports, profiles, the plan's MILP, the trace), says so, and waits;
``callgrind_control --dump`` then closes the setup's counts, and a second dump when the
run is done holds the simulation's alone (not the process's exit, which frees what the
run made: until the twenty-second session the counts held it too). Two durations of
arrivals: the instructions per request of each, and of their difference (which cancels
what does not grow with the run).
``--planner deepplan`` counts the cold-start-heavy DeepPlan run instead
(``benchmarks/against_base.py``'s: 180 BERT-Base instances on ``p3-8xlarge``, PT+DHA load
plans, the ``coldstart`` scheduler, Poisson 100 requests/s; it reads no checkout).
``--planner scaling`` counts ``benchmarks/sim_scaling.py``'s run at ``--gpus`` GPUs with
``--scheduler`` (its seconds: 100 requests/s per GPU; reads no checkout either), its plan
the default one of the whole cluster or, with ``--shape replicated``, ``--gpus``/10 copies
of the 10-GPU point side by side (``sim_scaling.py --shapes``).

``--cache-sim`` also simulates the caches (callgrind's ``--cache-sim=yes``: a first-level
data cache of 48 KB, 12-way, ``--D1=49152,12,64``, and a last level of 2 MB, 16-way,
``--LL=2097152,16,64``: the first-level data cache and the per-core second level of the
machine the earlier sessions measured on, given, not read from the host, so that counts
from machines with other caches compare: until the thirtieth session the first level was
the host's, and that session's machine has 32 KB) and counts the data reads and
writes that miss each per request: what grows with a cluster's size where instructions
hardly do (a time profile drifts with the machine; these counts do not). A miss of the
second level goes to the shared third level or to memory, tens of cycles or more.

``--branch-sim`` also counts the conditional and indirect branches that callgrind's model
of a predictor mispredicts (``--branch-sim=yes``), per request: a branch that goes one way
or the other by the data (a heap's comparisons, a look-up's probes) costs a pipeline
flush, 15-20 cycles, where it is mispredicted, so a cost can grow with the cluster where
neither instructions nor misses do (``scaling_control.py``'s C control: 4.4 a request at
10 GPUs, 11.2 at 1,000).

``--keep DIR`` keeps each run's callgrind output (the simulation's part) for
``callgrind_annotate``, and the runs' requests (``requests.json``).
``--compare DIR_A DIR_B [--top N]`` runs nothing: it reads two ``--keep`` folders (two
durations each, ``--cache-sim``) and prints, per request of each folder's difference,
the functions whose first-level misses grew most from A to B, with their instructions
(e.g. the 10-GPU point against 1,000 GPUs: where a larger working set misses).
``--into REGEX`` (with ``--compare``) prints instead the calls into the functions whose
names match ``REGEX``, caller by caller: per (caller, callee) the first-level misses and
instructions per request of those calls, the callee's with all it called in turn
(callgrind's cost of a call), by growth; who looks up the dicts or frees the tuples whose
misses grew (e.g. ``--into 'dict_lookup|dict_get'``).

``--lines N`` (with ``--cache-sim``) also prints the ``N`` lines of hetserve's compiled
Python files whose first-level misses per request grew most from the first run to the
second, per request of the difference (as the plan's figure is): each C line of a
compiled module is charged to the Python line whose code it is (the comment Cython
writes before each statement's C; the runtime support Cython adds is nobody's), so a
cold read shows on the line of Python that makes it. Calls are not followed: a line that
calls a function shows what its own C missed, not the callee's.

``--perf FILE`` samples time instead (``perf record -e cpu-clock``, attached to the
process once its setup is done, so that the plan's MILP does not drown the simulation,
and stopped when the run is done, before the process's exit frees what it made):
one run, of the last of ``--seconds``, written to ``FILE``, then the functions' shares
of the samples (``perf report``). It drifts with the machine as a time profile does, but
it shows what instructions do not: where the time goes to memory (a function whose
share of the time is several times its share of the instructions). Needs ``perf``;
without hardware counters (a virtual machine) the software clock is sampled.
``--callers SYM1,SYM2`` (with ``--perf``) also records each sample's call chain (DWARF,
at 1,999 samples a second: the chains are large) and then prints, for the samples whose
innermost function is one of those named, the time per request by the nearest hetserve
function that called it: who does the dict look-ups, for one (``--callers
unicodekeys_lookup_unicode,_Py_dict_lookup``).

Run: ``.venv/bin/python benchmarks/sim_instructions.py PPIPE_CHECKOUT
[--planner ppipe|np|deepplan|scaling] [--seconds 1,4] [--scheduler S --gpus N]
[--bases B1,B2] [--shape planner|replicated] [--cache-sim [--lines N]] [--branch-sim] [--keep DIR]
[--perf FILE [--callers S1,S2]]`` or ``sim_instructions.py x --compare DIR_A DIR_B [--top N]
[--into REGEX]``
(needs ``valgrind`` and ``callgrind_control``; a few minutes, about twice as long with
``--cache-sim``). Nothing is downloaded: the checkout is a local copy of
``github.com/JonnyKong/PPipe``.
``--planner deepplan`` and ``scaling`` read no checkout: any path will do.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
LL_BYTES = 2 * 1024 * 1024  # (``--cache-sim``'s last level: a 2 MB L2 per core)
D1_BYTES = 48 * 1024  # (``--cache-sim``'s first level: 48 KB, 12-way)


def inner(
    ppipe: str,
    planner: str,
    seconds: float,
    scheduler: str,
    gpus: int,
    bases: str = "",
    shape: str = "planner",
) -> None:
    """One run (the valgrind child): setup, then the simulation; prints the requests."""
    if planner == "deepplan":
        return inner_deepplan(seconds)
    if planner == "scaling":
        return inner_scaling(scheduler, gpus, seconds, bases, shape)
    sys.path.insert(0, str(HERE))
    from against_base import MAF19_TRIO
    from bench_replan_maf19 import profile_set

    from hetserve.core.plan import slos_from_scale
    from hetserve.engine.setup import build_setup
    from hetserve.experiments.setup import build_trace
    from hetserve.planning.ppipe import PlanOptions, plan_models
    from hetserve.scheduling import make_scheduler
    from hetserve.sim.engine import SimConfig, Simulator

    folder = tempfile.mkdtemp(prefix="hetserve-ppipe-")
    profile_set(Path(ppipe), MAF19_TRIO).write(folder)
    base = build_setup("hc1-l", MAF19_TRIO, profiles=folder)
    slos = slos_from_scale(base.cluster, base.latency, MAF19_TRIO, 5.0, "L4")
    opts = PlanOptions(planner=planner, cut_bytes_factor=1.0)
    s = build_setup("hc1-l", MAF19_TRIO, profiles=folder,
                    plan=plan_models(base.cluster, base.latency, slos, options=opts))  # fmt: skip
    tr = build_trace(s, "poisson", s.plan.rates_at(1.0), seconds, seed=0)
    sim = Simulator(s.cluster, s.latency, s.plan, s.placement, make_scheduler("reservation"),
                    tr, SimConfig())  # fmt: skip
    shutil.rmtree(folder, ignore_errors=True)
    print("ready", flush=True)  # (the parent dumps the setup's counts, then says go)
    sys.stdin.readline()
    sim.run()
    print(f"requests {len(tr)}", flush=True)
    sys.stdin.readline()  # (--perf stops sampling here, before the exit)


def inner_deepplan(seconds: float) -> None:
    """:func:`inner` for the DeepPlan run."""
    from hetserve.core.layerlatency import LayerLatency
    from hetserve.core.plan import bind
    from hetserve.core.presets import preset
    from hetserve.core.requests import Stream
    from hetserve.planning.deepplan import plan_cold_starts
    from hetserve.scheduling import make_scheduler
    from hetserve.sim.engine import SimConfig, Simulator
    from hetserve.workload.arrivals import Poisson
    from hetserve.workload.trace import generate

    c = preset("p3-8xlarge")
    names = [f"bert-base@{i}" for i in range(180)]
    plan, _ = plan_cold_starts(c, names, None, "pt+dha", dict.fromkeys(names, 0.1))
    tr = generate([Stream(m, m, 0.1, Poisson(100 / len(names))) for m in names], seconds, 1)
    sim = Simulator(c, LayerLatency(plan.load_plans), plan, bind(plan, c),
                    make_scheduler("coldstart"), tr, SimConfig(warm=False))  # fmt: skip
    print("ready", flush=True)
    sys.stdin.readline()
    sim.run()
    print(f"requests {len(tr)}", flush=True)
    sys.stdin.readline()  # (--perf stops sampling here, before the exit)


def inner_scaling(
    scheduler: str, gpus: int, seconds: float, bases: str = "", shape: str = "planner"
) -> None:
    """:func:`inner` for ``benchmarks/sim_scaling.py``'s run at ``gpus`` GPUs (100
    requests/s per GPU) with ``scheduler`` (its models copies of ``bases``, comma-separated;
    empty: sim_scaling's own; its plan of ``shape``, sim_scaling's ``--shapes``): the plan,
    the trace and the simulator made first; the simulation counted (the scheduler's
    start, the run, the result)."""
    sys.path.insert(0, str(HERE))
    from sim_scaling import BASES, setup_and_trace

    from hetserve.experiments.setup import simulator

    s, tr = setup_and_trace(
        gpus, seconds, bases=tuple(bases.split(",")) if bases else BASES, shape=shape
    )
    sim = simulator(s, scheduler, tr)
    print("ready", flush=True)
    sys.stdin.readline()
    sim.run()
    print(f"requests {len(tr)}", flush=True)
    sys.stdin.readline()  # (--perf stops sampling here, before the exit)


def main() -> None:
    from hetserve.core.provenance import provenance_line

    print(provenance_line(), flush=True)
    ap = argparse.ArgumentParser()
    ap.add_argument("ppipe")
    ap.add_argument("--planner", choices=("ppipe", "np", "deepplan", "scaling"),
                    default="ppipe")  # fmt: skip
    ap.add_argument("--seconds", default="1,4", help="the two durations of arrivals")
    ap.add_argument("--scheduler", default="reservation", help="--planner scaling's")
    ap.add_argument("--gpus", type=int, default=1000, help="--planner scaling's")
    ap.add_argument("--bases", default="", help="--planner scaling's (sim_scaling.py --bases)")
    ap.add_argument("--shape", default="planner", choices=("planner", "replicated"),
                    help="--planner scaling's plan (sim_scaling.py --shapes)")  # fmt: skip
    ap.add_argument("--cache-sim", action="store_true",
                    help="also count data cache misses per request: past a 48 KB first "
                    "level (D1) and a 2 MB second level (LL)")  # fmt: skip
    ap.add_argument("--branch-sim", action="store_true",
                    help="also count mispredicted branches per request (callgrind's model "
                    "of a predictor)")  # fmt: skip
    ap.add_argument("--keep", default=None, metavar="DIR",
                    help="keep each run's callgrind output in DIR (callgrind_annotate reads "
                    "them: which functions, which libraries)")  # fmt: skip
    ap.add_argument("--lines", type=int, default=0, metavar="N",
                    help="with --cache-sim: print the N Python lines of the compiled "
                    "modules whose first-level misses per request grew most between the "
                    "two runs")  # fmt: skip
    ap.add_argument("--perf", default=None, metavar="FILE",
                    help="sample time with perf instead (one run, of the last duration), "
                    "written to FILE; then print the functions' shares")  # fmt: skip
    ap.add_argument("--callers", default=None, metavar="SYM1,SYM2",
                    help="with --perf: record call chains and print, for the samples in "
                    "these functions, the time per request by the nearest hetserve "
                    "caller")  # fmt: skip
    ap.add_argument("--compare", nargs=2, default=None, metavar=("DIR_A", "DIR_B"),
                    help="no run: two --keep folders (two durations each), the functions "
                    "whose first-level misses per request grew most from A to B")  # fmt: skip
    ap.add_argument("--top", type=int, default=30, help="with --compare: functions shown")
    ap.add_argument("--into", default=None, metavar="REGEX",
                    help="with --compare: the calls into the functions REGEX matches, by "
                    "caller, instead of the functions")  # fmt: skip
    ap.add_argument("--inner", type=float, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.into is not None and a.compare is None:
        ap.error("--into: needs --compare")
    if a.compare is not None:
        if a.into is not None:
            try:
                into = re.compile(a.into)
            except re.error as e:
                ap.error(f"--into {a.into!r}: not a regular expression ({e})")
            compare_calls(Path(a.compare[0]), Path(a.compare[1]), into, a.top)
        else:
            compare(Path(a.compare[0]), Path(a.compare[1]), a.top)
        return
    if a.inner is not None:
        inner(a.ppipe, a.planner, a.inner, a.scheduler, a.gpus, a.bases, a.shape)
        return
    if a.callers is not None and a.perf is None:
        ap.error("--callers: needs --perf FILE")
    if a.lines and not a.cache_sim:
        ap.error("--lines: needs --cache-sim")
    if a.perf is not None:
        perf_profile(a, float(a.seconds.split(",")[-1]))
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed")
    got = []
    by_line: list[dict[str, int]] = []  # (--lines: each run's misses by Python line)
    for d in (float(x) for x in a.seconds.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            out = f"{tmp}/cg.out"
            sim = (["--cache-sim=yes", f"--D1={D1_BYTES},12,64", f"--LL={LL_BYTES},16,64"]
                   if a.cache_sim else [])  # fmt: skip
            if a.branch_sim:
                sim.append("--branch-sim=yes")
            if a.keep or a.lines:  # (names written out in each dump: annotate reads them)
                sim.append("--compress-strings=no")
            proc = start_inner(
                a, d, ["valgrind", "--tool=callgrind", *sim, f"--callgrind-out-file={out}"]
            )
            subprocess.run(["callgrind_control", "--dump=setup", str(proc.pid)], check=True,
                           capture_output=True)  # fmt: skip
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
            rest = proc.stdout.readline()  # ("requests N": the run is done, not the exit)
            subprocess.run(["callgrind_control", "--dump=run", str(proc.pid)], check=True,
                           capture_output=True)  # fmt: skip
            _, err = proc.communicate("")
            run = f"{out}.2"  # (the run's dump: the setup's is ``.1``, the exit's ``out``)
            req = re.search(r"requests (\d+)", rest)
            if a.keep and req is not None:
                keep = Path(a.keep)
                keep.mkdir(parents=True, exist_ok=True)
                name = f"{a.planner}-{d:g}s.callgrind"
                shutil.copy(run, keep / name)
                # (the runs' requests, by file: what --compare divides by)
                counts_file = keep / "requests.json"
                kept = json.loads(counts_file.read_text()) if counts_file.exists() else {}
                kept[name] = int(req.group(1))
                counts_file.write_text(json.dumps(kept, indent=1) + "\n")
            text = Path(run).read_text() if Path(run).exists() else ""
            events = re.search(r"^events: (.+)$", text, re.M)
            total = re.search(r"^summary: (.+)$", text, re.M)
            if proc.returncode != 0 or req is None or total is None or events is None:
                raise SystemExit(f"the run of {d:g} s failed:\n{err[-2000:]}")
            if a.lines:
                by_line.append(misses_by_python_line(run))
        counts = dict(zip(events.group(1).split(), map(int, total.group(1).split()), strict=False))
        miss = counts.get("D1mr", 0) + counts.get("D1mw", 0)
        ll = counts.get("DLmr", 0) + counts.get("DLmw", 0)
        bm = counts.get("Bcm", 0) + counts.get("Bim", 0)
        got.append((int(req.group(1)), counts["Ir"], miss, ll, bm))
        n, ins, miss, ll, bm = got[-1]
        extra = (f", {miss:,} D1 misses ({miss / n:,.1f} per request), {ll:,} LL misses "
                 f"({ll / n:,.2f})") if a.cache_sim else ""  # fmt: skip
        if a.branch_sim:
            extra += f", {bm:,} mispredicted branches ({bm / n:,.2f})"
        print(f"{d:g} s of arrivals: {n:,} requests, {ins:,} instructions after the setup "
              f"({ins / n:,.0f} per request){extra}")  # fmt: skip
    (n0, i0, m0, l0, b0), (n1, i1, m1, l1, b1) = got[0], got[-1]
    if n1 == n0:  # (one duration: no difference to take; its own count is above)
        return
    extra = (f", {(m1 - m0) / (n1 - n0):,.1f} D1 misses, {(l1 - l0) / (n1 - n0):,.2f} LL misses"
             if a.cache_sim else "")  # fmt: skip
    if a.branch_sim:
        extra += f", {(b1 - b0) / (n1 - n0):,.2f} mispredicted branches"
    print(f"{a.planner} plan: {(i1 - i0) / (n1 - n0):,.0f} instructions per request{extra} "
          f"(the difference of the two runs)")  # fmt: skip
    if a.lines:
        first, last = by_line[0], by_line[-1]
        grew = {k: (last.get(k, 0) - first.get(k, 0)) / (n1 - n0) for k in set(first) | set(last)}
        total = sum(grew.values())
        print(f"first-level misses per request by Python line (the difference of the two "
              f"runs; all lines of the compiled modules together: {total:,.1f}):")  # fmt: skip
        for where, per in sorted(grew.items(), key=lambda kv: -kv[1])[: a.lines]:
            print(f"  {per:7.2f}  {where}  {python_line(where)}")


def by_function(dump: Path) -> dict[str, tuple[int, int]]:
    """A callgrind dump's instructions and first-level misses (reads and writes) by
    function, each its own (not its callees'), summed over its files and recursion
    depths. (The frames that enclose the whole run, from ``main`` down to the
    interpreter's, carry the program's totals in ``callgrind_annotate``'s table even
    as their own: left out.)"""
    text = subprocess.run(
        ["callgrind_annotate", "--show=Ir,D1mr,D1mw", "--threshold=100", "--inclusive=no",
         str(dump)], capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    table = text.split("file:function", 1)[1].split("\n\n", 1)[0]
    count = r"([\d,]+)\s+(?:\([^)]*\)\s+)?"
    row = re.compile(rf"^\s*{count}{count}{count}(\S.*)$")
    out: dict[str, tuple[int, int]] = {}
    for line in table.splitlines():
        m = row.match(line)
        if m is None or "(100.0%)" in line:
            continue
        ir, mr, mw = (int(m.group(i).replace(",", "")) for i in (1, 2, 3))
        where = re.sub(r" \[[^]]*\]$", "", m.group(4))
        fn = re.sub(r"'\d+$", "", where.rsplit(":", 1)[-1])
        i0, m0 = out.get(fn, (0, 0))
        out[fn] = (i0 + ir, m0 + mr + mw)
    return out


def calls_into(dump: Path, into: re.Pattern[str]) -> dict[tuple[str, str], tuple[int, int]]:
    """A callgrind dump's calls into the functions whose names ``into`` finds: per
    (caller, callee), the instructions and first-level misses (reads and writes) of those
    calls, the callee's with all it called in turn (the cost line under each ``calls=``),
    summed over the call sites and recursion depths (``'2`` suffixes dropped). Names
    written in full or compressed (``(12) name`` once, ``(12)`` after) both read. Rows
    can nest (a matched callee reached again inside another row's call, as in a chain of
    frees, counts in both): each is what its caller's calls cost, not a share of a sum."""
    names: dict[str, str] = {}

    def name(text: str) -> str:
        m = re.match(r"\((\d+)\)(?: (.*))?$", text)
        if m is not None:
            if m.group(2):
                names[m.group(1)] = m.group(2)
            text = names.get(m.group(1), text)
        return re.sub(r"'\d+$", "", text)

    events: list[str] = []
    out: dict[tuple[str, str], tuple[int, int]] = {}
    fn = cfn = ""
    cost_next = False  # (the line after ``calls=`` is the call's cost)
    with dump.open() as f:
        for line in f:
            if cost_next:
                cost_next = False
                if into.search(cfn):
                    got = dict(zip(events, map(int, line.split()[1:]), strict=False))
                    i0, m0 = out.get((fn, cfn), (0, 0))
                    out[fn, cfn] = (i0 + got.get("Ir", 0),
                                    m0 + got.get("D1mr", 0) + got.get("D1mw", 0))  # fmt: skip
            elif line.startswith("fn="):
                fn = name(line[3:].strip())
            elif line.startswith("cfn="):
                cfn = name(line[4:].strip())
            elif line.startswith("calls="):
                cost_next = True
            elif line.startswith("events:"):
                events = line.split()[1:]
    return out


def _runs(keep: Path) -> tuple[Path, int, Path, int]:
    """A ``--keep`` folder's two runs: the shorter's dump and requests, the longer's."""
    counts_file = keep / "requests.json"
    if not counts_file.exists():
        raise SystemExit(f"--compare: {counts_file} not found (a folder that --keep wrote)")
    counts = json.loads(counts_file.read_text())
    if len(counts) != 2:
        raise SystemExit(f"--compare: {counts_file}: expected two runs, found {len(counts)}")
    (f0, n0), (f1, n1) = sorted(counts.items(), key=lambda kv: kv[1])
    return keep / f0, n0, keep / f1, n1


def per_request(keep: Path) -> dict[str, tuple[float, float]]:
    """Per function, instructions and first-level misses per request of the difference of
    a ``--keep`` folder's two runs (:func:`by_function`)."""
    d0, n0, d1, n1 = _runs(keep)
    a, b = by_function(d0), by_function(d1)
    return {
        fn: (
            (b.get(fn, (0, 0))[0] - a.get(fn, (0, 0))[0]) / (n1 - n0),
            (b.get(fn, (0, 0))[1] - a.get(fn, (0, 0))[1]) / (n1 - n0),
        )
        for fn in set(a) | set(b)
    }


def compare_calls(dir_a: Path, dir_b: Path, into: re.Pattern[str], top: int) -> None:
    """``--compare --into``: the calls into the functions ``into`` finds whose first-level
    misses per request grew most from ``dir_a``'s point to ``dir_b``'s, by caller
    (:func:`calls_into`; each folder the difference of its two runs)."""
    per: list[dict[tuple[str, str], tuple[float, float]]] = []
    for keep in (dir_a, dir_b):
        d0, n0, d1, n1 = _runs(keep)
        a, b = calls_into(d0, into), calls_into(d1, into)
        zero = (0, 0)
        per.append({
            k: ((b.get(k, zero)[0] - a.get(k, zero)[0]) / (n1 - n0),
                (b.get(k, zero)[1] - a.get(k, zero)[1]) / (n1 - n0))
            for k in set(a) | set(b)
        })  # fmt: skip
    pa, pb = per
    none = (0.0, 0.0)
    print(f"per request, {dir_a} -> {dir_b}: calls into /{into.pattern}/ by caller "
          "(each call's cost, with all the callee called in turn)")  # fmt: skip
    if not pa and not pb:
        print(f"(no calls into a function that /{into.pattern}/ finds)")
        return
    print("| D1 misses: growth | A | B | instructions A | B | caller -> callee |")
    print("|---:|---:|---:|---:|---:|---|")
    grew = sorted(set(pa) | set(pb), key=lambda k: -(pb.get(k, none)[1] - pa.get(k, none)[1]))
    for caller, callee in grew[:top]:
        (ia, ma), (ib, mb) = pa.get((caller, callee), none), pb.get((caller, callee), none)
        print(f"| {mb - ma:+.2f} | {ma:.2f} | {mb:.2f} | {ia:,.0f} | {ib:,.0f} | "
              f"`{caller[-60:]}` -> `{callee[-40:]}` |")  # fmt: skip


def compare(dir_a: Path, dir_b: Path, top: int) -> None:
    """``--compare``: the functions whose first-level misses per request grew most from
    ``dir_a``'s point to ``dir_b``'s (each the difference of its two runs)."""
    a, b = per_request(dir_a), per_request(dir_b)
    zero = (0.0, 0.0)
    print(f"per request, {dir_a} -> {dir_b}: instructions "
          f"{sum(v[0] for v in a.values()):,.0f} -> {sum(v[0] for v in b.values()):,.0f}, "
          f"first-level misses {sum(v[1] for v in a.values()):,.1f} -> "
          f"{sum(v[1] for v in b.values()):,.1f}")  # fmt: skip
    print("| D1 misses: growth | A | B | instructions A | B | function |")
    print("|---:|---:|---:|---:|---:|---|")
    grew = sorted(set(a) | set(b), key=lambda fn: -(b.get(fn, zero)[1] - a.get(fn, zero)[1]))
    for fn in grew[:top]:
        (ia, ma), (ib, mb) = a.get(fn, zero), b.get(fn, zero)
        print(f"| {mb - ma:+.2f} | {ma:.2f} | {mb:.2f} | {ia:,.0f} | {ib:,.0f} | `{fn[:90]}` |")


_PY_COMMENT = re.compile(r'/\* "([^"]+)":(\d+)')
_COUNT = r"(\.|[\d,]+(?: \(\s*[\d.]+%\))?)"
_ANNOTATED = re.compile(rf"^\s*{_COUNT}\s+{_COUNT}\s")


def python_lines_of(c_file: Path) -> list[str | None]:
    """Per line of a compiled module's C (index 0: line 1), the Python line whose code it
    is, ``FILE.py:N`` (from the comment Cython writes before each statement's C), or None
    (declarations, Cython's own runtime support, and what its memoryviews' code is)."""
    out: list[str | None] = []
    cur: str | None = None
    for text in c_file.read_text(errors="replace").splitlines():
        if "/* #### Code section:" in text:
            cur = None
        m = _PY_COMMENT.search(text)
        if m:
            cur = f"{m.group(1)}:{m.group(2)}" if m.group(1).endswith(".py") else None
        out.append(cur)
    return out


def misses_by_python_line(dump: str) -> dict[str, int]:
    """A callgrind dump's first-level misses (reads and writes) summed by the Python line
    of hetserve's compiled modules that each C line belongs to (:func:`python_lines_of`);
    a call's own line is not counted (its callee's misses are the callee's)."""
    text = subprocess.run(
        ["callgrind_annotate", "--show=D1mr,D1mw", "--auto=yes", "--context=0",
         "--threshold=100", dump],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    got: dict[str, int] = {}
    lines: list[str | None] | None = None
    at = -1
    for row in text.splitlines():
        if row.startswith("-- Auto-annotated source:"):
            path = Path(row.split(":", 1)[1].strip())
            hetserve_c = path.suffix == ".c" and "hetserve" in path.parts and path.exists()
            lines = python_lines_of(path) if hetserve_c else None
            at = -1
            continue
        m = re.match(r"^-- line (\d+) -", row)
        if m:
            at = int(m.group(1))
            continue
        if lines is None or at < 0:
            continue
        m = _ANNOTATED.match(row)
        if m is None:
            continue
        if "=>" in row[m.end() :][:8]:  # (a call: inclusive counts, not this line's)
            continue
        n = sum(int(x.split()[0].replace(",", "")) for x in m.groups() if x != ".")
        where = lines[at - 1] if at - 1 < len(lines) else None
        if n and where is not None:
            got[where] = got.get(where, 0) + n
        at += 1
    return got


def python_line(where: str) -> str:
    """The text of ``FILE.py:N`` (a path under ``src``), stripped; empty where not found."""
    name, _, num = where.rpartition(":")
    path = HERE.parent / name
    if not path.exists():
        return ""
    src = path.read_text().splitlines()
    k = int(num) - 1
    return src[k].strip()[:90] if 0 <= k < len(src) else ""


def start_inner(a: argparse.Namespace, seconds: float, prefix: list[str]) -> subprocess.Popen:
    """The run of ``seconds`` of arrivals as a child process (under ``prefix``: valgrind's,
    or none), once it has said its setup is done; it waits for a line on its stdin."""
    proc = subprocess.Popen(
        [*prefix, sys.executable, __file__, a.ppipe, "--planner", a.planner,
         "--inner", str(seconds), "--scheduler", a.scheduler, "--gpus", str(a.gpus),
         "--bases", a.bases, "--shape", a.shape],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdin is not None
    for line in proc.stdout:
        if line.strip() == "ready":
            return proc
    raise SystemExit(f"the run of {seconds:g} s ended early:\n{proc.stderr.read()[-2000:]}")  # type: ignore[union-attr]


def perf_profile(a: argparse.Namespace, seconds: float) -> None:
    """``--perf``: one run of ``seconds`` of arrivals, sampled by ``perf record`` from the
    end of its setup to the end of the run (not the exit); then ``perf report``'s top
    functions."""
    if shutil.which("perf") is None:
        raise SystemExit("perf is not installed")
    proc = start_inner(a, seconds, [])
    chains = ["--call-graph", "dwarf,8192", "-F", "1999"] if a.callers else ["-F", "4999"]
    rec = subprocess.Popen(
        ["perf", "record", "-q", "-e", "cpu-clock", *chains, "-p", str(proc.pid),
         "-o", a.perf],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(1.0)  # (perf attached before the run starts)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()
    rest = proc.stdout.readline()  # ("requests N" once the run is done: not its exit)
    rec.send_signal(signal.SIGINT)
    _, rec_err = rec.communicate()
    _, err = proc.communicate("")
    req = re.search(r"requests (\d+)", rest)
    if proc.returncode != 0 or req is None or rec.returncode not in (0, -2):
        raise SystemExit(f"the run or perf failed:\n{err[-2000:]}{rec_err[-2000:]}")
    print(f"{seconds:g} s of arrivals: {int(req.group(1)):,} requests; samples in {a.perf}")
    report = subprocess.run(
        ["perf", "report", "-i", a.perf, "--no-children", "--sort", "symbol", "--stdio",
         *(["-g", "none"] if a.callers else [])],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    rows = [x for x in report.stdout.splitlines() if x.strip() and not x.startswith("#")]
    for x in rows[:40]:
        print(x.rstrip()[:110])
    if a.callers:
        print_callers(a.perf, int(req.group(1)), set(a.callers.split(",")))


def print_callers(data: str, n_requests: int, leaves: set[str]) -> None:
    """``--callers``: the samples of ``data`` (with call chains) whose innermost function
    is in ``leaves``, their time per request by the nearest hetserve function among the
    callers (a compiled module's C name holds ``hetserve``)."""
    out = subprocess.run(
        ["perf", "script", "-i", data, "-F", "period,ip,sym"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    by: dict[str, int] = {}
    period, chain = 0, []  # (a sample: its period in ns, then its frames, innermost first)
    for line in [*out.splitlines(), "0"]:
        s = line.strip()
        if s.isdigit():
            if chain and chain[0] in leaves:
                near = next((f for f in chain[1:] if "hetserve" in f), "(none)")
                by[near] = by.get(near, 0) + period
            period, chain = int(s), []
        elif s:
            parts = s.split(None, 1)
            if len(parts) == 2:
                chain.append(parts[1].replace(" (inlined)", ""))
    print(f"\nns per request in {', '.join(sorted(leaves))}, by the nearest hetserve caller:")
    for name, p in sorted(by.items(), key=lambda kv: -kv[1])[:20]:
        print(f"{p / n_requests:8.1f}  {name[-90:]}")


if __name__ == "__main__":
    main()
