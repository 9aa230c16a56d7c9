"""One simulated point, phase by phase (issue 41: "start-up and output count where they
dominate: one 30-second point must not take longer than its simulation (trace generation,
setup and writing results included)").

The point is issue 41's instance: ``hc1-l`` with the PPipe authors' TensorRT block
profiles of their MAF19 trio (efficientnet-b8, encnet, rtmdet), their plan for SLOs of 5x
the L4's batch-1 latency (planner ``ppipe``, cut activations in fp32), the reservation
scheduler, Poisson arrivals at the plan's capacity for ``--seconds`` (30: 56,456
requests). ``--ppipe CHECKOUT`` (``github.com/JonnyKong/PPipe``) makes the profile set and
the plan once, into a temporary folder.

Each round runs, in a fresh process each, the steps of ``hetserve simulate --plan FILE
--profiles SET --scheduler reservation --duration S --out DIR`` as that command takes them
(``cli/sim.py``), each timed: the imports the command makes, the setup (the cluster, the
profiles, the plan), the trace, the simulation, the summary (``summarize``), and each file
written (``summary.json``, ``requests.csv``, ``batches.csv``, ``workers.csv``); once with
the compiled CSV writer (``sim/csv_cells.pyx``) and once with the ``csv`` module
(``--writers``), in turn; and then the command itself, its whole process timed from
outside (``hetserve simulate``: the interpreter's start, the imports, the console). The
files of every run are compared: the same bytes from both writers and the command.

It prints, for each phase, the range over the rounds per writer, and the point's verdict:
setup, trace, summary and files (what a point costs beside its simulation) against the
simulation. Imports are the process's, the same for a 1-second point as for a 300-second
one (and paid once by ``hetserve sweep`` or a study in one process): printed, not part of
the verdict.

``--against SRC`` runs another tree's ``src`` folder (built in place: ``setup.py build_ext
--inplace`` there) in the same rounds, in turn with this one (its column ``base``), through
``PYTHONPATH``: the code before a change, side by side with it.

Run: ``.venv/bin/python benchmarks/sim_point.py --ppipe CHECKOUT [--seconds 30] [--rounds 3]
[--writers compiled,csv] [--against OTHER_CHECKOUT/src]`` (about 2 s a round and writer, 30
s in all).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

T_START = time.perf_counter()
ROOT = Path(__file__).resolve().parents[1]
MAF19_TRIO = [
    "efficientnet-b8_3rdparty_8xb32-aa-advprop_in1k",
    "encnet_r101-d8_4xb2-40k_cityscapes-512x1024",
    "rtmdet_x_8xb32-300e_coco",
]
FILES = ("summary.json", "requests.csv", "batches.csv", "workers.csv")
PHASES = ("imports", "setup", "trace", "simulation", "summary", *FILES)
BESIDE = ("setup", "trace", "summary", *FILES)  # (a point's cost beside its simulation)


def one(writer: str, profiles: str, plan: str, seconds: float, out: Path) -> dict[str, float]:
    """The command's steps in this process (fresh), each timed; ``writer`` "csv" writes the
    CSV files with the ``csv`` module."""
    t: dict[str, float] = {}
    import hetserve.cli.main  # noqa: F401  (the command's imports, as its script makes them)
    from hetserve.cli.common import plan_scheduler
    from hetserve.cli.sim import _sim_config, setup_from_options
    from hetserve.experiments.metrics import summarize
    from hetserve.experiments.setup import build_trace, control_spec, model_rates
    from hetserve.experiments.setup import simulate as run_sim
    from hetserve.sim import result

    if writer == "csv":
        result.CSV_CELLS = None
    t["imports"] = time.perf_counter() - T_START
    c = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal c
        now = time.perf_counter()
        t[name] = now - c
        c = now

    setup = setup_from_options("hc1-l", None, profiles, False, None, 5.0, plan, 8)
    lap("setup")
    rates = model_rates(setup, None, 1.0)
    trace = build_trace(setup, "poisson", rates, seconds, 0)
    lap("trace")
    cfg = _sim_config(0, 0.0, None, setup, None)
    scheduler, params = plan_scheduler(setup.plan, "reservation", (), "edf-adaptive")
    spec = control_spec(setup, "off", "mbb", 4, rates, objective="throughput", solve_s=1.0)
    res = run_sim(setup, scheduler, trace, params, cfg, spec)
    lap("simulation")
    s = summarize(res)
    lap("summary")
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(s, indent=1, default=str) + "\n")
    lap("summary.json")
    res.write_requests_csv(out / "requests.csv")
    lap("requests.csv")
    res.write_batches_csv(out / "batches.csv")
    lap("batches.csv")
    res.write_workers_csv(out / "workers.csv")
    lap("workers.csv")
    t["requests"] = len(trace)
    return t


def _span(xs: list[float]) -> str:
    return f"{min(xs):.3f}-{max(xs):.3f}" if len(xs) > 1 else f"{xs[0]:.3f}"


def main() -> None:
    # (the command imports this module too: in a run's own process, part of its imports;
    # the line itself, git's commit and the versions, is not the command's: not counted)
    from hetserve.core.provenance import provenance_line

    global T_START
    c = time.perf_counter()
    print(provenance_line())
    T_START += time.perf_counter() - c
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ppipe", metavar="CHECKOUT",
                    help="a checkout of github.com/JonnyKong/PPipe (their profiles)")  # fmt: skip
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--writers", default="compiled,csv")
    ap.add_argument("--against", metavar="SRC", default=None,
                    help="another tree's src folder (built), in turn with this one")  # fmt: skip
    ap.add_argument("--one", nargs=4, metavar=("WRITER", "PROFILES", "PLAN", "OUT"),
                    help=argparse.SUPPRESS)  # fmt: skip
    a = ap.parse_args()
    if a.one:
        writer, profiles, plan, out = a.one
        print(json.dumps(one(writer, profiles, plan, a.seconds, Path(out))))
        return
    writers = a.writers.split(",")
    if not writers or any(w not in ("compiled", "csv") for w in writers):
        ap.error(f"--writers: expected compiled and/or csv, got {a.writers!r}")
    if not 1 <= a.rounds <= 20 or not 0 < a.seconds <= 3600:
        ap.error("--rounds: expected 1 to 20; --seconds: more than 0, at most 3600")
    if a.against is not None and not (Path(a.against) / "hetserve" / "__init__.py").is_file():
        ap.error(f"--against: {a.against} holds no hetserve package (expected a src folder)")
    if a.ppipe is None or not (Path(a.ppipe) / "data" / "models" / "block-timing-tf32").is_dir():
        ap.error(
            f"--ppipe: {a.ppipe} is not a checkout of the PPipe artifact "
            "(no data/models/block-timing-tf32)"
        )

    from hetserve.sim.result import CSV_CELLS

    # (DIGITS is newer than the writer: a tree from before it has none)
    digits = getattr(CSV_CELLS, "DIGITS", "PyOS_double_to_string")
    print(f"compiled CSV writer: {'built, digits by ' + digits if CSV_CELLS else 'not built'}")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_replan_maf19 import profile_set

    from hetserve.core.plan import slos_from_scale
    from hetserve.engine.setup import build_setup
    from hetserve.planning.ppipe import PlanOptions, plan_models

    with tempfile.TemporaryDirectory(prefix="hetserve-point-") as tmp:
        work = Path(tmp)
        profiles = work / "profiles"
        profile_set(Path(a.ppipe), MAF19_TRIO).write(profiles)
        base = build_setup("hc1-l", MAF19_TRIO, profiles=str(profiles))
        slos = slos_from_scale(base.cluster, base.latency, MAF19_TRIO, 5.0, "L4")
        opts = PlanOptions(planner="ppipe", cut_bytes_factor=1.0)
        plan_models(base.cluster, base.latency, slos, options=opts).save(work / "plan.json")
        cli = Path(sys.executable).with_name("hetserve")
        trees = {"this": os.environ.copy()}
        if a.against is not None:
            trees["base"] = {**os.environ, "PYTHONPATH": str(Path(a.against).resolve())}
        cols = [f"{tree} {w}" if len(trees) > 1 else w for tree in trees for w in writers]
        times: dict[str, dict[str, list[float]]] = {c: {p: [] for p in PHASES} for c in cols}
        whole: dict[str, list[float]] = {tree: [] for tree in trees}
        first: dict[str, bytes] = {}
        n = 0
        for r in range(a.rounds):
            for tree, env in trees.items():
                for w in writers:
                    col = f"{tree} {w}" if len(trees) > 1 else w
                    out = work / f"{tree}-{w}-{r}"
                    got = subprocess.run(
                        [sys.executable, __file__, "--seconds", str(a.seconds), "--one", w,
                         str(profiles), str(work / "plan.json"), str(out)],
                        capture_output=True, text=True, check=True, env=env,
                    )  # fmt: skip
                    t = json.loads(got.stdout.splitlines()[-1])
                    n = int(t.pop("requests"))
                    for p in PHASES:
                        times[col][p].append(t[p])
                    _same(first, out)
                out = work / f"{tree}-cli-{r}"
                c = time.perf_counter()
                subprocess.run(
                    [str(cli), "simulate", "--cluster", "hc1-l", "--profiles", str(profiles),
                     "--plan", str(work / "plan.json"), "--scheduler", "reservation",
                     "--duration", str(a.seconds), "--out", str(out)],
                    capture_output=True, check=True, env={**env, "COLUMNS": "100"},
                )  # fmt: skip
                whole[tree].append(time.perf_counter() - c)
                _same(first, out)
        print(f"\n{a.seconds:g} s of arrivals, {n:,} requests; seconds, the least to the most "
              f"of {a.rounds} rounds (each a fresh process); every run's CSV files the same "
              "bytes\n")  # fmt: skip
        print(f"| phase | {' | '.join(cols)} |\n|---|{'---:|' * len(cols)}")
        for p in PHASES:
            print(f"| {p} | {' | '.join(_span(times[c][p]) for c in cols)} |")
        for c in cols:
            beside = [sum(times[c][p][r] for p in BESIDE) for r in range(a.rounds)]
            sim = times[c]["simulation"]
            ok = all(b <= s for b, s in zip(beside, sim, strict=True))
            print(f"\n{c}: setup, trace, summary and files {_span(beside)} s against the "
                  f"simulation's {_span(sim)} s: {'not longer' if ok else 'LONGER'} in every "
                  f"round")  # fmt: skip
        for tree, ts in whole.items():
            print(f"\n`hetserve simulate` itself, the whole process ({tree}): {_span(ts)} s")


def _same(first: dict[str, bytes], out: Path) -> None:
    """The run's CSV files are the first run's, byte for byte."""
    for f in ("requests.csv", "batches.csv", "workers.csv"):
        data = (out / f).read_bytes()
        if first.setdefault(f, data) != data:
            raise SystemExit(f"error: {out / f} differs from the first run's {f}")


if __name__ == "__main__":
    main()
