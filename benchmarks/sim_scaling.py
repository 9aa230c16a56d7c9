"""The simulator's speed per request as the cluster grows (issue 41: "at 1,000 GPUs and 100
models at 100,000 requests/s offered, the simulator keeps its speed per request").

Clusters of N GPUs (a quarter L4, the rest P4, one per node at 6 Gbit/s: ``hc1-l``'s
shape), N/10 models (copies of five zoo models under names of their own, ``resnet50-c0``,
``efficientnet-b0-c1``, ...: each its own model to the plan and the schedulers, with the
zoo model's graph and roofline latencies), the default plan for SLOs of 5x the fastest
batch-1 latency, batches up to 8, Poisson arrivals at 100 requests/s per GPU in all
(100,000 at 1,000 GPUs), split over the models in proportion to the plan's capacity.
About ``--requests`` a point (100 s of arrivals at 10 GPUs, 1 s at 1,000). Timed: the
simulation alone (best of ``--rounds``); the plan and the trace are made once. A run of a
few requests (``--requests 20``) is almost all the simulation's own setup: the
schedulers' start and the warm start of every model on its workers.

``--steady`` also times a run of twice the requests at each point and reports the time
per request of the difference (``steady_ns``): the cost of a request once the run is
under way, without the setup and the first uses of each model on each kind of worker,
which a point of 100,000 requests at 1,000 GPUs (1 s of arrivals) still includes. Being a
difference of two timings it is noisier than either: on this 2-core machine the ratio of
1,000 GPUs' to 10 GPUs' moved by up to 12 points between sittings even with
``--requests 200000 --rounds 5`` (docs/benchmarks.md, issue 41's twenty-seventh session).

``--paired R`` measures the steady cost another way, for the ratio between points: R
rounds, and in each every point and scheduler in turn, each run in a fresh process (so
that no run inherits another's heap and the machine's drift falls on every point alike);
in each run the wall clock is read when the simulated clock reaches the middle arrival
and the last one (two callbacks on the simulator's clock), and the time per request is
that of the arrivals between (``paired_ns``: the median over the rounds): one run, no
difference of two timings, and neither the start (the first uses of each model on each
kind of worker) nor the results. It then prints each point's ratio to the first point's
(the first point's time over this one's, per round: 1.0 keeps the speed per request), the
median and the range over the rounds: about 5-10 points from the median at 1,000 GPUs
(docs/benchmarks.md, issue 41's twenty-ninth session). ``--plot FILE`` (with
``--paired``) also draws them (a PNG): the time per request against the GPUs, and the
ratio, per scheduler.

``--shapes planner,replicated`` adds a control (thirtieth session): ``replicated`` runs,
at N GPUs, N/10 copies of the 10-GPU point side by side (each copy the 10-GPU plan's
pipelines on GPUs of its own, offered the 10-GPU point's load: :func:`replicated_plan`).
The simulated system is then the 10-GPU one N/10 times over, every request's work the
same; what the simulator loses per request there against the 10-GPU point is what the
larger working set costs it (its caches), not more work, and the planner's plan can be
set against it (docs/benchmarks.md, issue 41's thirtieth session). Copies that need more
GPUs of a type than the cluster has (``resnet50``'s use the P4s: 800 at 1,000 GPUs, of
750) are refused in one line.

``--controls heap,calendar`` (with ``--paired``; thirty-second session) runs the compiled
control of ``scaling_control.py`` in the same rounds, beside the schedulers: at each point
and in each round, one run of the C simulation of the same shape (N GPUs, N/10 models,
100 requests/s a GPU) with the queue named (``heap``: a binary heap, more levels as the
cluster grows; ``calendar``: the same work an event at every size), 3,000,000 requests a
run. Its rows (shape ``C control``) give what a compiled simulator keeps of its speed per
request in the same sitting as hetserve's, so the two ratios compare side by side (this
machine's drift moved one scheduler's median by 31 points between two sittings an hour
apart). It needs a C compiler (``cc`` or ``gcc``); the GPU counts multiples of 10.

Run: ``.venv/bin/python benchmarks/sim_scaling.py [--gpus 10,100,1000] [--requests 100000]
[--schedulers edf-adaptive,fixed-batch,reservation,flex] [--rounds 2] [--steady]
[--paired R [--plot FILE] [--controls heap,calendar]] [--shapes planner,replicated]
[--bases resnet50,efficientnet-b0,bert-base,vit-b16,resnet18]``
(``--paired 7`` over five points and four schedulers: 140 runs, about 4 minutes). At 10
GPUs there is one model, a copy of the first base; at 100, two copies of each of the five;
so the mix of models changes between 10 and 100 GPUs and not after. ``--bases resnet18``
keeps one mix at every point (``resnet50``'s 100 copies do not fit an 8 GB P4 at 1,000
GPUs). Its plan uses the L4s alone and puts every model's pool on all of them: 2 workers
and one pool at 10 GPUs, 25 workers each in 10 pools at 100, 250 workers each in 100 pools
at 1,000 (so at 1,000 a worker's consecutive stages are seldom of one model;
docs/benchmarks.md, issue 41's twenty-eighth session).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from typing import Any

BASES = ("resnet50", "efficientnet-b0", "bert-base", "vit-b16", "resnet18")
PER_GPU_RPS = 100.0


class Copies:
    """A model source (``core.models.ModelSource``) of ``n`` copies of the zoo's
    ``BASES`` under names of their own: the models of a large cluster without a
    repository."""

    def __init__(self, n: int, bases: tuple[str, ...] = BASES) -> None:
        self.of = {f"{bases[i % len(bases)]}-c{i}": bases[i % len(bases)] for i in range(n)}

    def names(self) -> list[str]:
        """The copies' names."""
        return list(self.of)

    def __contains__(self, name: str) -> bool:
        """Whether ``name`` is a copy."""
        return name in self.of

    def graph(self, name: str) -> Any:
        """The zoo model's graph under the copy's name."""
        from hetserve.core.graph import get_graph

        return replace(get_graph(self.of[name]), name=name)

    def layer_table(self, name: str) -> Any:
        """None: copies have no layer tables (no cold starts here)."""
        raise KeyError(name)

    def build(self, name: str, version: int | None = None) -> Any:
        """None: copies are simulated only."""
        raise NotImplementedError("copies are simulated only")


def cluster(n_gpus: int) -> Any:
    """``n_gpus`` GPUs, a quarter L4 and the rest P4, one per node at 6 Gbit/s."""
    from hetserve.core.cluster import parse_cluster

    n_l4 = n_gpus // 4
    nodes = [{"name": f"l4-{i}", "gpus": {"L4": 1}, "nic_gbps": 6.0} for i in range(n_l4)]
    nodes += [{"name": f"p4-{i}", "gpus": {"P4": 1}, "nic_gbps": 6.0}
              for i in range(n_gpus - n_l4)]  # fmt: skip
    return parse_cluster({"name": f"scale-{n_gpus}", "nodes": nodes}, "sim_scaling")


SHAPES = ("planner", "replicated")


def setup_and_trace(
    n_gpus: int,
    seconds: float,
    seed: int = 0,
    bases: tuple[str, ...] = BASES,
    shape: str = "planner",
) -> tuple[Any, Any]:
    """The run's setup and trace at ``n_gpus`` (module docstring), its models copies of
    ``bases`` in turn. ``shape``: ``planner``, the default plan of the whole cluster;
    ``replicated``, :func:`replicated_plan` (``n_gpus / 10`` copies of the 10-GPU point
    side by side)."""
    from hetserve.core.models import ModelCatalog
    from hetserve.engine.setup import build_setup
    from hetserve.experiments.setup import build_trace

    if shape not in SHAPES:
        raise ValueError(f"--shapes: expected one of {', '.join(SHAPES)}, got {shape!r}")
    catalog = ModelCatalog(Copies(max(1, n_gpus // 10), bases))
    assert catalog.source is not None
    names = catalog.source.names()
    c = cluster(n_gpus)
    if shape == "replicated":
        plan = replicated_plan(n_gpus, bases)
        s = build_setup(c, names, model_catalog=catalog, max_batch=8, plan=plan)
        # (each copy offered the 10-GPU point's load: the same total as the planner's)
        rates = {m: PER_GPU_RPS * n_gpus / len(names) for m in names}
    else:
        s = build_setup(c, names, model_catalog=catalog, max_batch=8)
        cap = s.plan.rates_at(1.0)
        total = sum(cap.values())
        rates = {m: r * PER_GPU_RPS * n_gpus / total for m, r in cap.items()}
    return s, build_trace(s, "poisson", rates, seconds, seed=seed)


def replicated_plan(n_gpus: int, bases: tuple[str, ...] = BASES) -> Any:
    """``n_gpus / 10`` copies of the 10-GPU point side by side (``--shape replicated``):
    copy ``i`` (a copy of ``bases[i % len(bases)]``) gets the pipelines the default plan
    gives that base alone on 10 GPUs, on GPUs of its own (no shared pools), and is
    offered what the 10-GPU point offers its one model. The simulated system is then
    the 10-GPU one ``n_gpus / 10`` times over, each request's work the same: what the
    simulator loses per request against the 10-GPU point is what a working set of that
    many copies costs it (its caches), not more work. Raises ``SystemExit`` where the
    copies need more GPUs of a type than the cluster has."""
    from collections import Counter

    from hetserve.core.models import ModelCatalog
    from hetserve.core.plan import Plan
    from hetserve.engine.setup import build_setup

    if n_gpus % 10:
        raise SystemExit(f"--shapes replicated: expected GPU counts that are multiples of 10, "
                         f"got {n_gpus}")  # fmt: skip
    one: dict[str, Any] = {}  # base -> its ModelPlan alone on 10 GPUs
    for b in dict.fromkeys(bases[: n_gpus // 10]):
        cat = ModelCatalog(Copies(1, (b,)))
        s10 = build_setup(cluster(10), [f"{b}-c0"], model_catalog=cat, max_batch=8)
        one[b] = s10.plan.models[f"{b}-c0"]
    models = {f"{bases[i % len(bases)]}-c{i}": one[bases[i % len(bases)]]
              for i in range(n_gpus // 10)}  # fmt: skip
    need: Counter[str] = Counter()
    for mp in models.values():
        for pl in mp.pipelines:
            for st in pl.stages:
                need[st.gpu] += -(-st.instances // st.share)  # (whole GPUs)
    have = cluster(n_gpus).gpu_counts()
    for gpu, k in need.items():
        if k > have.get(gpu, 0):
            raise SystemExit(f"--shapes replicated: {n_gpus // 10} copies need {k} {gpu} GPUs; "
                             f"the {n_gpus}-GPU cluster has {have.get(gpu, 0)}")  # fmt: skip
    return Plan(models, shared_pools=False, meta={"planner": "sim_scaling replicated"})


def in_run_ns(s: Any, scheduler: str, tr: Any) -> float:
    """One simulation of ``tr`` with ``scheduler``, timed inside the run: the wall time
    per request of the arrivals from the middle one to the last (``--paired``)."""
    from hetserve.experiments.setup import simulator

    sim = simulator(s, scheduler, tr)
    n = len(tr)
    if n < 4:
        raise ValueError(f"--paired: {n} requests at a point; expected at least 4")
    half = n // 2
    stamps: list[float] = []
    for t in (float(tr.time_s[half]), float(tr.time_s[-1])):
        # (a callback at an arrival's time runs before the arrival: the trace's arrivals
        # go after the clock's entries of the same time)
        sim.clock.at(t, lambda: stamps.append(time.perf_counter()))
    sim.run()
    return 1e9 * (stamps[1] - stamps[0]) / (n - 1 - half)


Key = tuple[int, str, str]  # (GPUs, shape, scheduler)
CONTROL = "C control"  # (the shape of --controls' rows; their scheduler: the queue)
CONTROL_REQUESTS = 3_000_000  # (a control's run: about 0.2-0.4 s on this machine)


def _control_module() -> Any:
    """``benchmarks/scaling_control.py`` (beside this file; ``benchmarks`` is not a
    package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).with_name("scaling_control.py")
    spec = importlib.util.spec_from_file_location("scaling_control", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def paired(gpus: list[int], schedulers: list[str], rounds: int, requests: int,
           bases: str, shapes: list[str], controls: tuple[Any, list[str]] | None = None,
           ) -> dict[Key, list[float]]:  # fmt: skip
    """``--paired``: per (point, shape, scheduler), the in-run time per request of each
    round, each run in a process of its own (this file with ``--one``), the points, shapes
    and schedulers in turn within a round. ``controls`` (``--controls``): the compiled
    control's executable and its queues, run at each point of each round before the
    schedulers, under ``(point, CONTROL, queue)``."""
    out: dict[Key, list[float]] = {(n, sh, x): [] for n in gpus for sh in shapes
                                   for x in schedulers}  # fmt: skip
    exe, queues = controls if controls else (None, [])
    ctl = _control_module() if queues else None
    out.update({(n, CONTROL, q): [] for n in gpus for q in queues})
    for r in range(rounds):
        for n in gpus:
            for q in queues:
                ns = ctl.run(exe, n, CONTROL_REQUESTS, 1, q)["ns"]
                out[(n, CONTROL, q)].append(ns)
                print(f"  round {r + 1}/{rounds}: {n} GPUs, {CONTROL}, {q}: {ns:,.1f} ns/request",
                      file=sys.stderr, flush=True)  # fmt: skip
            for sh in shapes:
                for x in schedulers:
                    cmd = [sys.executable, __file__, "--one", str(n), "--schedulers", x,
                           "--requests", str(requests), "--bases", bases,
                           "--shapes", sh]  # fmt: skip
                    got = subprocess.run(cmd, capture_output=True, text=True)
                    if got.returncode != 0:
                        tail = (got.stderr or got.stdout).strip().splitlines()[-1:]
                        why = f"exit {got.returncode}: {' '.join(tail)}"
                        raise SystemExit(
                            f"sim_scaling --paired: {n} GPUs, {sh}, {x}: failed ({why})"
                        )
                    ns = float(json.loads(got.stdout.strip().splitlines()[-1])["paired_ns"])
                    out[(n, sh, x)].append(ns)
                    print(f"  round {r + 1}/{rounds}: {n} GPUs, {sh}, {x}: {ns:,.0f} ns/request",
                          file=sys.stderr, flush=True)  # fmt: skip
    return out


def against_controls(got: dict[Key, list[float]], gpus: list[int], schedulers: list[str],
                     shapes: list[str], controls: list[str]) -> str:  # fmt: skip
    """``--controls``' table: at each point after the first, each scheduler's speed kept
    (its ratio to the first point, per round) over each control's in the same round, the
    median and range over the rounds: 1.0 loses as much as that control, above 1.0 less."""
    heads = " | ".join(f"over {q}'s: median (range)" for q in controls)
    out = [
        f"\nspeed kept against {gpus[0]} GPUs, over the compiled control's in the same round:",
        f"| scheduler | shape | GPUs | {heads} |",
        "|---|---|---:|" + "---|" * len(controls),
    ]
    for x in schedulers:
        for sh in shapes:
            for n in gpus[1:]:
                cells = []
                for q in controls:
                    g0, g = got[(gpus[0], sh, x)], got[(n, sh, x)]
                    c0, c = got[(gpus[0], CONTROL, q)], got[(n, CONTROL, q)]
                    r = sorted(
                        (a0 / a) / (b0 / b) for a0, a, b0, b in zip(g0, g, c0, c, strict=True)
                    )
                    cells.append(f"{statistics.median(r):.2f} ({r[0]:.2f}-{r[-1]:.2f})")
                out.append(f"| {x} | {sh} | {n:,} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def plot_paired(
    got: dict[Key, list[float]],
    gpus: list[int],
    schedulers: list[str],
    path: str,
    shapes: tuple[str, ...] | list[str] = ("planner",),
    controls: tuple[str, ...] | list[str] = (),
) -> None:
    """``--plot``: ``--paired``'s timings drawn (the median and the range of the rounds),
    the time per request and the ratio to the first point, per scheduler and shape (the
    replicated shape dashed; the compiled controls' queues dotted, in greys)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    lines = [(x, sh, {"fmt": "--s" if sh == "replicated" else "-o", "color": f"C{k}",
                      "label": x if len(shapes) == 1 else f"{x}, {sh}"})
             for k, x in enumerate(schedulers) for sh in shapes]  # fmt: skip
    lines += [(q, CONTROL, {"fmt": ":^", "color": str(0.2 + 0.35 * k),
                           "label": f"{CONTROL} ({q})"})
              for k, q in enumerate(controls)]  # fmt: skip
    for x, sh, look in lines:
        g = {n: got[(n, sh, x)] for n in gpus}
        style = dict(capsize=3, **look)
        med = [statistics.median(g[n]) for n in gpus]
        lo = [m - min(g[n]) for m, n in zip(med, gpus, strict=True)]
        hi = [max(g[n]) - m for m, n in zip(med, gpus, strict=True)]
        ax1.errorbar(gpus, med, yerr=[lo, hi], **style)
        rs = [[b / c for b, c in zip(g[gpus[0]], g[n], strict=True)] for n in gpus]
        rmed = [statistics.median(r) for r in rs]
        rlo = [m - min(r) for m, r in zip(rmed, rs, strict=True)]
        rhi = [max(r) - m for m, r in zip(rmed, rs, strict=True)]
        ax2.errorbar(gpus, rmed, yerr=[rlo, rhi], **style)
    rounds = len(got[(gpus[0], shapes[0], schedulers[0])])
    ax1.set(xscale="log", xlabel="GPUs", ylabel="wall ns per simulated request (in-run)")
    if controls:  # (the controls' tens of ns beside hetserve's thousands)
        ax1.set_yscale("log")
    ax2.set(xscale="log", xlabel="GPUs", ylabel=f"speed per request vs {gpus[0]} GPUs")
    ax2.axhline(1.0, color="grey", lw=0.8, ls=":")
    for ax in (ax1, ax2):
        ax.set_xticks(gpus, [f"{n:,}" for n in gpus])
        ax.minorticks_off()
        ax.grid(alpha=0.3)
    ax1.legend(fontsize=8)
    fig.suptitle(f"The simulator's steady cost per request: median and range of {rounds} rounds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    from hetserve.core.provenance import provenance_line

    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", default="10,100,1000")
    ap.add_argument("--requests", type=int, default=100_000,
                    help="about this many requests a point: seconds of arrivals = requests / "
                    "(100 x GPUs)")  # fmt: skip
    ap.add_argument("--schedulers", default="edf-adaptive,fixed-batch,reservation,flex")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steady", action="store_true",
                    help="also time twice the requests: the time per request of the "
                    "difference")  # fmt: skip
    ap.add_argument("--bases", default=",".join(BASES),
                    help="the zoo models copied, in turn (one: every point has the same "
                    "mix of models, only more copies of it)")  # fmt: skip
    ap.add_argument("--paired", type=int, default=0, metavar="R",
                    help="R rounds of in-run steady timings, each run in a fresh process, "
                    "the points in turn; each point's ratio to the first")  # fmt: skip
    ap.add_argument("--plot", default=None, metavar="FILE",
                    help="with --paired: the timings and ratios drawn to FILE (PNG)")  # fmt: skip
    ap.add_argument("--shapes", default="planner",
                    help="the plans, comma-separated: planner (the default plan of the "
                    "whole cluster), replicated (GPUs/10 copies of the 10-GPU point side "
                    "by side)")  # fmt: skip
    ap.add_argument("--controls", default="", metavar="QUEUES",
                    help="with --paired: also the compiled control (scaling_control.c) "
                    "with these event queues (heap, calendar), in the same rounds")  # fmt: skip
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    bases = tuple(a.bases.split(","))
    shapes = a.shapes.split(",")
    if not shapes or any(sh not in SHAPES for sh in shapes):
        ap.error(f"--shapes: expected some of {', '.join(SHAPES)}, got {a.shapes!r}")
    if not 10 <= a.requests <= 10_000_000 or not 1 <= a.rounds <= 20:
        ap.error("--requests: expected 10 to 10,000,000; --rounds: 1 to 20")
    if not 0 <= a.paired <= 50:
        ap.error("--paired: expected 0 to 50 rounds")
    if a.plot is not None and not a.paired:
        ap.error("--plot: needs --paired R")
    controls = [q for q in a.controls.split(",") if q]
    if controls and not a.paired:
        ap.error("--controls: needs --paired R")
    if controls and any(q not in _control_module().QUEUES for q in controls):
        ap.error(f"--controls: expected some of heap,calendar, got {a.controls!r}")
    try:
        gpus = [int(x) for x in a.gpus.split(",")]
    except ValueError:
        ap.error(f"--gpus: expected GPU counts separated by commas, got {a.gpus!r}")
    if min(gpus) < 1:
        ap.error(f"--gpus: expected counts of at least 1, got {a.gpus!r}")
    if controls and any(n % 10 for n in gpus):
        ap.error(f"--controls: expected GPU counts that are multiples of 10 (a model is ten "
                 f"GPUs in the control), got {a.gpus!r}")  # fmt: skip
    if "replicated" in shapes and any(n % 10 for n in [*gpus, a.one or 10]):
        ap.error(f"--shapes replicated: expected GPU counts that are multiples of 10, "
                 f"got {a.gpus!r}")  # fmt: skip
    if a.one is not None:  # (a child of --paired: one in-run timing, as JSON)
        s, tr = setup_and_trace(
            a.one, a.requests / (PER_GPU_RPS * a.one), bases=bases, shape=shapes[0]
        )
        print(json.dumps({"paired_ns": in_run_ns(s, a.schedulers, tr)}), flush=True)
        return
    print(provenance_line(), flush=True)
    if a.paired:
        import tempfile
        from pathlib import Path

        scheds = a.schedulers.split(",")
        with tempfile.TemporaryDirectory() as tmp:
            exe = _control_module().build(Path(tmp)) if controls else None
            got = paired(gpus, scheds, a.paired, a.requests, a.bases, shapes,
                         (exe, controls) if controls else None)  # fmt: skip
        print(
            f"\n| scheduler | shape | GPUs | in-run ns/request (median of {a.paired}) | "
            f"ratio to {gpus[0]} GPUs: median | range |"
        )
        print("|---|---|---:|---:|---:|---|")
        rows = [(x, sh) for x in scheds for sh in shapes] + [(q, CONTROL) for q in controls]
        for x, sh in rows:
            for n in gpus:
                g0, g = got[(gpus[0], sh, x)], got[(n, sh, x)]
                ratios = [b / c for b, c in zip(g0, g, strict=True)]
                med = statistics.median(g)
                cell = f"{med:,.0f}" if med >= 100 else f"{med:.1f}"  # (the controls' tens)
                print(
                    f"| {x} | {sh} | {n:,} | {cell} | "
                    f"{statistics.median(ratios):.2f} | "
                    f"{min(ratios):.2f}-{max(ratios):.2f} |"
                )
        if controls:
            print(against_controls(got, gpus, scheds, shapes, controls))
        if a.plot is not None:
            plot_paired(got, gpus, scheds, a.plot, shapes, controls)
            print(f"plot: {a.plot}")
        return
    from hetserve.core.outcome import OK
    from hetserve.experiments.setup import simulate

    def best_of(s: Any, sched: str, tr: Any) -> tuple[float, Any]:
        best, res = math.inf, None
        for _ in range(a.rounds):
            t0 = time.perf_counter()
            res = simulate(s, sched, tr)
            best = min(best, time.perf_counter() - t0)
        return best, res

    rows = []
    for n, sh in [(n, sh) for n in gpus for sh in shapes]:
        s, tr = setup_and_trace(n, a.requests / (PER_GPU_RPS * n), bases=bases, shape=sh)
        tr2 = (
            setup_and_trace(n, 2 * a.requests / (PER_GPU_RPS * n), bases=bases, shape=sh)[1]
            if a.steady
            else None
        )
        capacity = sum(s.plan.rates_at(1.0).values())
        for sched in a.schedulers.split(","):
            best, res = best_of(s, sched, tr)
            rows.append({
                "gpus": n, "shape": sh, "models": len(s.models), "scheduler": sched,
                "requests": len(tr),
                "offered_rps": round(PER_GPU_RPS * n), "capacity_rps": round(capacity),
                "attainment": round(float((res.outcome == OK).mean()), 4),
                "sim_req_per_s": round(len(tr) / best), "wall_ms": round(1e3 * best, 1),
            })  # fmt: skip
            if tr2 is not None:
                best2, _ = best_of(s, sched, tr2)
                rows[-1]["steady_ns"] = round(1e9 * (best2 - best) / (len(tr2) - len(tr)))
            print(json.dumps(rows[-1]), flush=True)
    steady = " steady ns/request |" if a.steady else ""
    print(f"\n| GPUs | shape | models | scheduler | requests | attainment | simulated req/s | "
          f"ms |{steady}")  # fmt: skip
    print("|---:|---|---:|---|---:|---:|---:|---:|" + ("---:|" if a.steady else ""))
    for r in rows:
        print(f"| {r['gpus']} | {r['shape']} | {r['models']} | {r['scheduler']} | "
              f"{r['requests']:,} | "
              f"{100 * r['attainment']:.1f}% | {r['sim_req_per_s']:,} | {r['wall_ms']} |"
              + (f" {r['steady_ns']:,} |" if a.steady else ""))  # fmt: skip


if __name__ == "__main__":
    main()
