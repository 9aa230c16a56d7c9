"""Side by side with an earlier commit: the same simulations give the same results, and
how fast each tree runs them, measured in one sitting.

The base commit is checked out into a temporary folder (``git worktree``, removed at the
end); each scenario runs in a fresh process with ``PYTHONPATH`` set to one tree's
``src``, base and this tree in turn (so the machine's drift hits both alike).

- ``results``: every scenario's outputs (per request: outcome, reason, dispatch, start
  and finish times, batch; every stage row; per worker busy time and energy) are hashed
  in each tree; a scenario whose hashes differ prints its first differing request.
- ``speed``: simulated requests per wall second of the timed scenarios (the simulation
  only: setup and trace generation excluded), ``--rounds`` alternations, the best of
  each; the ratio this tree / base, and below it each round's ratio with their median and
  range (how far the machine moved in the sitting); and this tree's events
  (``SimResult.events``: the arrivals and clock callbacks its loop took) and events per
  wall second. ``c`` or ``py`` after a speed: the tree ran its compiled parts or the
  Python files (``scheduling/reservation_table.COMPILED`` and, where the tree has it,
  ``engine/kernel.COMPILED``; ``py`` where either ran Python; nothing: a tree from before
  the core). A tree whose build changes within the sitting (a compiled part's source
  edited while it ran: the runs after that take the Python files) stops it, exit 2.
  The base's worktree runs its Python files unless ``--build-base`` builds its compiled
  parts first (``setup.py build_ext --inplace``): then both trees run as installed, and a
  ratio is this tree's code against the base's alone.

- ``studies``: whole studies as a user runs them, ``hetserve reproduce NAME --quick --jobs
  J --out DIR`` (``--studies ppipe,rampa``, ``--jobs 2``), each command's wall time from
  outside, ``--rounds`` alternations; then whether the two trees' ``results.json`` are the
  same, and where not, which top-level keys hold differing values and how many (a
  study's ``provenance`` always differs; measured times such as ``seconds`` differ between
  two runs of one tree too).

Run: ``.venv/bin/python benchmarks/against_base.py [results] [speed] [studies] [--base REV]
[--rounds N] [--only NAME,...] [--build-base] [--ppipe CHECKOUT [--seconds S]]
[--studies NAME,...] [--jobs J]`` (default: results and speed, base ``HEAD``, so
uncommitted changes are compared with the last commit). ``--ppipe``: a checkout of the
PPipe artifact (``github.com/JonnyKong/PPipe``, nothing is downloaded) adds issue 41's
instance: the authors' MAF19 group (efficientnet-b8, encnet, rtmdet) on ``hc1-l`` with
their TensorRT block profiles, their PPipe and NP plans at capacity, ``--seconds`` of
Poisson arrivals.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hetserve.core.provenance import provenance_line

ROOT = Path(__file__).resolve().parents[1]

# Each scenario is Python run in the tree under test; it sets ``res`` (a SimResult) and
# ``wall`` (seconds of the simulation alone). Only APIs both trees have.
PRELUDE = """
import time
from hetserve.engine.setup import build_setup
from hetserve.experiments.setup import build_trace, simulate
from hetserve.scheduling import make_scheduler
from hetserve.sim.engine import SimConfig, Simulator

def run(setup, sched, trace, cfg=None, fail=None):
    global res, wall
    sim = Simulator(setup.cluster, setup.latency, setup.plan, setup.placement,
                    make_scheduler(sched) if isinstance(sched, str) else sched, trace,
                    cfg or SimConfig())
    if fail is not None:
        sim.fail_worker(*fail)
    t0 = time.perf_counter()
    res = sim.run()
    wall = time.perf_counter() - t0

def two_pool():
    from hetserve.core.plan import ModelPlan, Pipeline, Plan, Stage, bind
    from hetserve.engine.setup import Setup
    base = build_setup("hc1-s", ["resnet50"])
    st = (Stage((0, 5), "P4", 1, 12), Stage((5, 10), "L4", 1, 4))
    plan = Plan({"resnet50": ModelPlan(base.slos_s["resnet50"], 1.0,
                 (Pipeline(st, 4, 0.0, 2000.0),))})
    return Setup(base.cluster, base.latency, ["resnet50"], base.slos_s, plan,
                 bind(plan, base.cluster))

def ppipe_setup(models, planner="ppipe"):
    from hetserve.core.plan import slos_from_scale
    from hetserve.planning.ppipe import PlanOptions, plan_models
    base = build_setup("hc1-l", models)
    slos = slos_from_scale(base.cluster, base.latency, models, 5.0, "L4")
    opts = PlanOptions(planner=planner)
    return build_setup("hc1-l", models, plan=plan_models(base.cluster, base.latency, slos,
                       options=opts))
"""

PPIPE3 = ["efficientnet-b8", "resnet152", "convnext-t"]  # bench_reservation's

# issue 41's instance: the PPipe authors' MAF19 group on hc1-l with their TensorRT block
# profiles (``--ppipe CHECKOUT``: written as a profile set, ``HETSERVE_PPIPE_PROFILES``),
# at their plans' capacity, ``--seconds`` of Poisson arrivals (the issue: 300)
MAF19_TRIO = [
    "efficientnet-b8_3rdparty_8xb32-aa-advprop_in1k",
    "encnet_r101-d8_4xb2-40k_cityscapes-512x1024",
    "rtmdet_x_8xb32-300e_coco",
]
ISSUE41 = """
import os
from hetserve.core.plan import slos_from_scale
from hetserve.planning.ppipe import PlanOptions, plan_models
models = {models!r}
prof = os.environ["HETSERVE_PPIPE_PROFILES"]
base = build_setup("hc1-l", models, profiles=prof)
slos = slos_from_scale(base.cluster, base.latency, models, 5.0, "L4")
plan = plan_models(base.cluster, base.latency, slos, options=PlanOptions(planner={planner!r},
                   cut_bytes_factor=1.0))
s = build_setup("hc1-l", models, profiles=prof, plan=plan)
run(s, "reservation", build_trace(s, "poisson", s.plan.rates_at(1.0),
                                   float(os.environ["ISSUE41_SECONDS"]), seed=0))
"""

# the scaling run (``benchmarks/sim_scaling.py``, this tree's, in either tree): 1,000 GPUs,
# 100 models, 100,000 requests/s offered, 1 s of arrivals
SCALING = f"""
import sys
sys.path.insert(0, {str(ROOT / "benchmarks")!r})
from sim_scaling import setup_and_trace
s, tr = setup_and_trace(1000, 1.0)
run(s, {{sched!r}}, tr)
"""

SCENARIOS: dict[str, str] = {
    "edf-adaptive hc1-l resnet50 (bench_sim)": """
s = build_setup("hc1-l", ["resnet50"], max_batch=8)
run(s, "edf-adaptive", build_trace(s, "poisson", s.plan.rates_at(0.8), 10.0, seed=0))
""",
    "edf-adaptive hc1-l resnet50+efficientnet-b0 (bench_sim)": """
s = build_setup("hc1-l", ["resnet50", "efficientnet-b0"], max_batch=8)
run(s, "edf-adaptive", build_trace(s, "poisson", s.plan.rates_at(0.8), 10.0, seed=0))
""",
    "fixed-batch hc1-l resnet50 (bench_sim)": """
s = build_setup("hc1-l", ["resnet50"], max_batch=8)
run(s, "fixed-batch", build_trace(s, "poisson", s.plan.rates_at(0.8), 10.0, seed=0))
""",
    "reservation ppipe plan hc1-l, 3 models": f"""
s = ppipe_setup({PPIPE3!r})
run(s, "reservation", build_trace(s, "poisson", s.plan.rates_at(1.0), 30.0, seed=0))
""",
    "reservation np plan hc1-l, 3 models": f"""
s = ppipe_setup({PPIPE3!r}, "np")
run(s, "reservation", build_trace(s, "poisson", s.plan.rates_at(1.0), 30.0, seed=0))
""",
    "reservation two pools, jitter": """
s = two_pool()
run(s, "reservation", build_trace(s, "poisson", {"resnet50": 1500.0}, 3.0, seed=1),
    SimConfig(seed=4, jitter="lognormal", jitter_cv=0.3))
""",
    "reactive open routes": """
s = two_pool()
run(s, "reactive", build_trace(s, "poisson", {"resnet50": 1500.0}, 3.0, seed=1))
""",
    "flex preemptions (Shepherd group)": """
from hetserve.experiments.shepherd.scenarios import group_setup
from hetserve.workload.maf import maf_trace
models = ["resnet18", "resnet50", "rs200"]
s = group_setup(2, dict.fromkeys(models, 0.1))
run(s, "flex", maf_trace("maf-bursty", models, 40, 400.0, 10.0, 0.1, seed=2))
""",
    "flex, a worker lost": """
from hetserve.experiments.shepherd.scenarios import group_setup
from hetserve.workload.maf import maf_trace
models = ["resnet18", "resnet50"]
s = group_setup(3, dict.fromkeys(models, 0.1))
run(s, "flex", maf_trace("maf-bursty", models, 40, 300.0, 4.0, 0.1, seed=4),
    fail=(s.placement.workers[0].id, 1.2345))
""",
    "edf-adaptive, a worker lost": """
from hetserve.experiments.shepherd.scenarios import group_setup
from hetserve.workload.maf import maf_trace
models = ["resnet18", "resnet50"]
s = group_setup(3, dict.fromkeys(models, 0.1))
run(s, "edf-adaptive", maf_trace("maf-bursty", models, 40, 300.0, 4.0, 0.1, seed=4),
    fail=(s.placement.workers[1].id, 0.777))
""",
    "issue41: reservation, PPipe plan, MAF19 trio (their profiles)": ISSUE41.format(
        models=MAF19_TRIO, planner="ppipe"
    ),
    "issue41: reservation, NP plan, MAF19 trio (their profiles)": ISSUE41.format(
        models=MAF19_TRIO, planner="np"
    ),
    "scaling: edf-adaptive, 1,000 GPUs, 100 models": SCALING.format(sched="edf-adaptive"),
    "scaling: fixed-batch, 1,000 GPUs, 100 models": SCALING.format(sched="fixed-batch"),
    "scaling: reservation, 1,000 GPUs, 100 models": SCALING.format(sched="reservation"),
    "scaling: flex, 1,000 GPUs, 100 models": SCALING.format(sched="flex"),
    "coldstart DeepPlan, 180 BERT-Base (bench_deepplan)": """
from hetserve.core.layerlatency import LayerLatency
from hetserve.core.plan import bind
from hetserve.core.presets import preset
from hetserve.core.requests import Stream
from hetserve.engine.setup import Setup
from hetserve.planning.deepplan import plan_cold_starts
from hetserve.workload.arrivals import Poisson
from hetserve.workload.trace import generate
c = preset("p3-8xlarge")
names = [f"bert-base@{i}" for i in range(180)]
plan, _ = plan_cold_starts(c, names, None, "pt+dha", dict.fromkeys(names, 0.1))
tr = generate([Stream(m, m, 0.1, Poisson(100 / len(names))) for m in names], 60.0, 1)
s = Setup(c, LayerLatency(plan.load_plans), names, dict.fromkeys(names, 0.1), plan,
          bind(plan, c))
run(s, "coldstart", tr, SimConfig(warm=False))
""",
}

DIGEST = """
import hashlib, json, math
def _f(x):
    return None if isinstance(x, float) and math.isnan(x) else x
h = {}
per_req = list(zip(res.outcome.tolist(), [res.reasons[i] for i in res.reason.tolist()],
                   map(_f, res.dispatch_s.tolist()), map(_f, res.start_s.tolist()),
                   map(_f, res.finish_s.tolist()), res.batch.tolist()))
h["requests"] = hashlib.sha256(json.dumps(per_req).encode()).hexdigest()[:16]
h["stages"] = hashlib.sha256(json.dumps([list(r) for r in res.stage_rows],
                                        default=str).encode()).hexdigest()[:16]
h["workers"] = hashlib.sha256(json.dumps([sorted(res.worker_busy_s.items()),
                                          sorted(res.worker_energy_j.items())]).encode()
                              ).hexdigest()[:16]
try:  # whether the tree ran its compiled core (None: a tree from before there was one)
    from hetserve.scheduling.reservation_table import COMPILED as compiled
except ImportError:
    compiled = None
try:  # and its compiled kernel (a tree from before it: the scheduler's core says)
    from hetserve.engine.kernel import COMPILED as kernel_compiled
    compiled = compiled and kernel_compiled
except ImportError:
    pass
print(json.dumps({"n": len(res.trace), "wall": wall, "hash": h, "sample": per_req,
                  "compiled": compiled, "events": getattr(res, "events", 0)}))
"""


def _run(tree: Path, code: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    out = subprocess.run(
        [sys.executable, "-c", PRELUDE + code + DIGEST], env=env, capture_output=True,
        text=True, cwd=tree,
    )  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"scenario failed in {tree}:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _first_difference(a: list, b: list) -> str:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"request {i}: base {x} / this tree {y}"
    return f"lengths {len(a)} / {len(b)}"


def main() -> None:
    print(provenance_line())
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", nargs="*", default=["results", "speed"])
    ap.add_argument("--base", default="HEAD")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="")
    ap.add_argument(
        "--build-base",
        action="store_true",
        help="build the base's compiled parts too (setup.py build_ext --inplace)",
    )
    ap.add_argument(
        "--ppipe",
        default=None,
        help="a checkout of github.com/JonnyKong/PPipe: issue 41's scenarios",
    )
    ap.add_argument("--seconds", type=float, default=300.0,
                    help="issue 41's scenarios: seconds of arrivals [300]")  # fmt: skip
    ap.add_argument("--studies", default="ppipe,rampa",
                    help="studies: the studies to run [ppipe,rampa]")  # fmt: skip
    ap.add_argument("--jobs", type=int, default=2, help="studies: --jobs of each [2]")
    args = ap.parse_args()
    names = [n for n in SCENARIOS if not args.only or any(k in n for k in args.only.split(","))]
    if args.ppipe is None:
        names = [n for n in names if not n.startswith("issue41")]
    else:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from bench_replan_maf19 import profile_set

        folder = Path(tempfile.mkdtemp(prefix="hetserve-ppipe-"))
        atexit.register(shutil.rmtree, folder, True)  # (read by every scenario's process)
        profile_set(Path(args.ppipe), MAF19_TRIO).write(folder)
        os.environ["HETSERVE_PPIPE_PROFILES"] = str(folder)
        os.environ["ISSUE41_SECONDS"] = repr(args.seconds)
    rev = subprocess.run(
        ["git", "rev-parse", "--short", args.base], cwd=ROOT, capture_output=True, text=True,
        check=True,
    ).stdout.strip()  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="hetserve-base-") as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(base), rev], cwd=ROOT,
                       check=True)  # fmt: skip
        try:
            if args.build_base and (base / "setup.py").exists():
                print(f"building the base's compiled parts ({base / 'setup.py'})", flush=True)
                subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"],
                               cwd=base, check=True, capture_output=True)  # fmt: skip
            py = sys.version.split()[0]
            print(f"base {rev} ({base}) against this tree ({ROOT}); python {py}")
            if "results" in args.what:
                print("\nresults (same seed, same inputs):")
                for name in names:
                    a, b = _run(base, SCENARIOS[name]), _run(ROOT, SCENARIOS[name])
                    same = a["hash"] == b["hash"]
                    diff = [k for k in a["hash"] if a["hash"][k] != b["hash"][k]]
                    line = "identical" if same else f"DIFFERENT ({', '.join(diff)})"
                    print(f"  {name:<55} {a['n']:>8,} requests  {line}")
                    if "requests" in diff:
                        print(f"      first: {_first_difference(a['sample'], b['sample'])}")
            if "speed" in args.what:
                print(f"\nspeed (simulated requests per wall second, best of {args.rounds}, "
                      f"alternating):")  # fmt: skip
                seen: dict[str, str] = {}  # (each tree's build as its first run took it)
                for name in names:
                    best = {"base": 0.0, "this": 0.0}
                    core = {"base": "", "this": ""}
                    speeds: dict[str, list[float]] = {"base": [], "this": []}
                    n = events = 0
                    for _ in range(args.rounds):
                        for key, tree in (("base", base), ("this", ROOT)):
                            r = _run(tree, SCENARIOS[name])
                            n = r["n"]
                            if key == "this":
                                events = r.get("events", 0)
                            speeds[key].append(r["n"] / r["wall"])
                            best[key] = max(best[key], r["n"] / r["wall"])
                            core[key] = same_build(seen, key, r.get("compiled"))
                    per_s = best["this"] * events / n if n else 0.0
                    print(
                        f"  {name:<55} base {best['base']:>9,.0f}{core['base']:>3}"
                        f"  this {best['this']:>9,.0f}{core['this']:>3}"
                        f"  ratio {best['this'] / best['base']:.3f}  ({n:,} requests;"
                        f" this tree {events:,} events, {per_s:,.0f} events/s)"
                    )
                    print(f"      {round_ratios(speeds['base'], speeds['this'])}")
            if "studies" in args.what:
                studies(base, args.studies.split(","), args.rounds, args.jobs)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT,
                           check=False)  # fmt: skip


def studies(base: Path, names: list[str], rounds: int, jobs: int) -> None:
    """Each study's ``hetserve reproduce NAME --quick`` in both trees, ``rounds``
    alternations (base, then this tree), timed from outside; then the last round's
    ``results.json`` of the two compared."""
    print(f"\nstudies (hetserve reproduce NAME --quick --jobs {jobs}; wall seconds, "
          f"{rounds} rounds alternating):")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="hetserve-studies-") as tmp:
        for name in names:
            walls: dict[str, list[float]] = {"base": [], "this": []}
            for r in range(rounds):
                for key, tree in (("base", base), ("this", ROOT)):
                    out = Path(tmp) / f"{name}-{key}-{r}"
                    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
                    cmd = [sys.executable, "-m", "hetserve", "reproduce", name, "--quick",
                           "--jobs", str(jobs), "--out", str(out)]  # fmt: skip
                    t0 = time.perf_counter()
                    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
                    walls[key].append(time.perf_counter() - t0)
                    if done.returncode != 0:
                        print(f"  {name}: the {key} tree's run failed (exit "
                              f"{done.returncode}): {done.stderr.strip()[-500:]}")  # fmt: skip
                        raise SystemExit(1)
            each = {k: ", ".join(f"{w:.1f}" for w in v) for k, v in walls.items()}
            ratio = min(walls["base"]) / min(walls["this"])
            print(f"  {name:<10} base {each['base']}  this {each['this']}  "
                  f"ratio {ratio:.2f}x (best of each)")  # fmt: skip
            print(f"      {round_ratios(walls['this'], walls['base'])}")
            last = rounds - 1
            a, b = (json.loads((Path(tmp) / f"{name}-{k}-{last}/results.json").read_text())
                    for k in ("base", "this"))  # fmt: skip
            diff = json_differences(a, b)
            if not diff:
                print("      results.json: identical")
            else:
                where = ", ".join(
                    f"{k} ({n} value{'s' if n != 1 else ''})" for k, n in sorted(diff.items())
                )
                print(f"      results.json: the same but for {where}")


def json_differences(a: object, b: object, top: str = "") -> dict[str, int]:
    """The values that differ between two JSON documents, counted by the top-level key
    that holds them (``"."`` for the document itself)."""
    out: dict[str, int] = {}

    def walk(x: object, y: object, key: str) -> None:
        if isinstance(x, dict) and isinstance(y, dict):
            for k in x.keys() | y.keys():
                if k not in x or k not in y:
                    out[key or k] = out.get(key or k, 0) + 1
                else:
                    walk(x[k], y[k], key or k)
        elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
            for u, v in zip(x, y, strict=True):
                walk(u, v, key)
        elif x != y or type(x) is not type(y):
            out[key or "."] = out.get(key or ".", 0) + 1

    walk(a, b, top)
    return out


def round_ratios(base: list[float], this: list[float]) -> str:
    """Each round's ratio (this tree's speed over the base's, the two runs of a round one
    after the other) and their median and range: how far the machine moved within the
    sitting, which the best-of ratio above does not show. A difference smaller than the
    range between rounds is a tie."""
    ratios = [t / b for b, t in zip(base, this, strict=True)]
    if not ratios:
        return "by round: none"
    ordered = sorted(ratios)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    each = " ".join(f"{x:.3f}" for x in ratios)
    return f"by round: {each}  (median {median:.3f}, range {ordered[0]:.3f}-{ordered[-1]:.3f})"


def same_build(seen: dict[str, str], key: str, compiled: bool | None) -> str:
    """The mark of a run's build (``c``: compiled, ``py``: the Python files, ``""``: a
    tree from before the compiled core), which must be the one the tree's first run of
    the sitting had: a compiled part's source changed while the sitting ran makes its
    build stale, and the runs after that silently take the Python files (a ratio of
    those is not the code's). SystemExit (exit 2) where it changed."""
    mark = {True: "c", False: "py"}.get(compiled, "")  # type: ignore[arg-type]
    first = seen.setdefault(key, mark)
    if mark != first:
        print(
            f"against_base.py: the {key} tree ran its {mark or 'pre-core'} build after its "
            f"{first or 'pre-core'} one in this sitting: a compiled part's source changed "
            f"while it ran; build it again (setup.py build_ext --inplace) and run again",
            file=sys.stderr,
        )
        raise SystemExit(2)
    return mark


if __name__ == "__main__":
    main()
