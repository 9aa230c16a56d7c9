"""``hetserve demo``: the tour (registered on the main CLI group)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from hetserve.cli.common import console
from hetserve.cli.views import print_summary, show_cluster, show_gpus, show_model, write_run

# ------------------------------------------------------------------ demo


@click.command()
@click.option("--out", default="demo-out", show_default=True, type=click.Path(file_okay=False))
def demo(out: str) -> None:
    """A tour: the GPU catalog, a PPipe cluster preset, a model's blocks, the per-layer
    latency ratio plot (PPipe Fig. 3), an estimated profile set, and a simulation of two
    schedulers with a report, and PPipe's planner against its baselines."""
    from hetserve.core.gpus import get_gpu
    from hetserve.core.latency import RooflineModel
    from hetserve.core.presets import load_cluster
    from hetserve.core.profiles import estimate_profiles
    from hetserve.core.ratios import latency_ratios, plot_ratios

    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    console.rule("1. GPU catalog")
    show_gpus(None, False)
    console.rule("2. A heterogeneous cluster: PPipe's HC1-L")
    show_cluster("hc1-l", False)
    console.rule("3. EfficientNet-B8 cut into 10 blocks")
    show_model("efficientnet-b8", 10, "V100", False, False)
    console.rule("4. Why heterogeneous pipelines: latency ratios differ across layers")
    rm = RooflineModel()
    p4, l4, v100 = get_gpu("P4"), get_gpu("L4"), get_gpu("V100")
    curves = [latency_ratios(rm, "efficientnet-b8", p4, f) for f in (l4, v100)]
    for c in curves:
        console.print(
            f"{c.slow}/{c.fast}: early blocks {c.block_ratio[0]:.2f}x slower, "
            f"late blocks {c.block_ratio[-2]:.2f}x slower -> put early blocks on "
            f"the {c.slow} pool and late ones on the {c.fast} pool"
        )
    png = plot_ratios(curves, outdir / "efficientnet-b8-ratios.png")
    console.print(f"wrote {png}")
    console.rule("5. A profile set for the cluster (roofline estimate)")
    c = load_cluster("hc1-l")
    ps = estimate_profiles(rm, ["resnet50", "efficientnet-b8"], c.gpu_types(), (1, 2), (1, 2, 4, 8))
    folder = ps.write(outdir / "profiles-hc1")
    console.print(
        f"wrote {folder}/ (latency.csv, blocks.csv, energy.csv; format in docs/profiles.md)"
    )
    console.rule("6. Simulate: the same kind of cluster, two schedulers")
    from hetserve.engine.setup import build_setup
    from hetserve.experiments.metrics import summarize
    from hetserve.experiments.report import write_report
    from hetserve.experiments.setup import build_trace
    from hetserve.experiments.setup import simulate as run_sim

    setup = build_setup("hc1-s", ["resnet50", "efficientnet-b0"])
    trace = build_trace(setup, "poisson", setup.plan.rates_at(0.7), 10.0, seed=0)
    for sched in ("fixed-batch", "edf-adaptive"):
        res = run_sim(setup, sched, trace)
        s = summarize(res)
        print_summary(
            s, f"{sched} on hc1-s, Poisson at load factor 0.7 ({len(trace)} requests over 10 s)"
        )
        write_run(outdir / f"sim-{sched}", res, s)
    console.print(f"wrote {write_report(outdir / 'sim-edf-adaptive')}")
    console.rule("7. Plan: PPipe's MILP against NP and DART-r on hc1-l")
    from hetserve.core.plan import slos_from_scale
    from hetserve.planning.ppipe import PlanOptions, plan_models

    c1 = load_cluster("hc1-l")
    trio = ["efficientnet-b8", "resnet152", "convnext-t"]
    slos = slos_from_scale(c1, rm, trio, 5.0, "L4")
    t = Table(
        title="normalised throughput (req/s per unit of workload share; SLO = 5 x L4 "
        "batch-1 latency, margin 0.4)"
    )
    for col in ("planner", "normalised req/s", "vs np", "pipelined stages", "solve s"):
        t.add_column(col, justify="left" if col == "planner" else "right")
    base = None
    plans = {}
    for name in ("np", "dart-r", "ppipe"):
        pl = plans[name] = plan_models(c1, rm, slos, None, PlanOptions(planner=name))
        pl.save(outdir / f"plan-hc1-l-{name}.json")
        obj = pl.meta["objective"]["normalized_rps"]
        base = base or obj
        split = sum(1 for m in pl.models.values() for p in m.pipelines if len(p.stages) > 1)
        t.add_row(
            name,
            f"{obj:,.0f}",
            f"{obj / base:.2f}x",
            str(split),
            f"{pl.meta['solve']['seconds']:.2f}",
        )
    console.print(t)
    console.print(f"wrote {outdir}/plan-hc1-l-{{np,dart-r,ppipe}}.json")
    console.rule("8. Serve the plans: PPipe's reservation data plane on hc1-l")
    lf = 0.8
    t = Table(
        title=f"Poisson at {lf:g} x PPipe's capacity for 5 s, every plan served by the "
        "reservation scheduler (PPipe section 7.2)"
    )
    for col in ("planner", "offered req/s", "attainment", "goodput req/s", "p99 ms"):
        t.add_column(col, justify="left" if col == "planner" else "right")
    rates = plans["ppipe"].rates_at(lf)
    for name, pl in plans.items():
        st = build_setup(c1, trio, plan=pl)
        res = run_sim(st, "reservation", build_trace(st, "poisson", rates, 5.0, seed=0))
        s = summarize(res)
        p99 = s["latency_ms"]["p99"]
        t.add_row(
            name,
            f"{s['offered_rps']:,.0f}",
            f"{100 * s['attainment']:.2f}%",
            f"{s['goodput_rps']:,.0f}",
            "-" if p99 is None else f"{p99:.1f}",
        )
    console.print(t)
    console.print("the whole study (Figs. 6-8 and 10): hetserve reproduce ppipe --quick --out DIR")
    _shepherd_step()
    _live_step(outdir)
    console.print("[green]demo done[/green]")


def _shepherd_step() -> None:
    """9. Shepherd: FLEX against Clockwork and Nexus on a serving group under overload."""
    from hetserve.core.outcome import OK
    from hetserve.experiments.setup import simulate
    from hetserve.experiments.shepherd.scenarios import group_setup
    from hetserve.experiments.shepherd.study import MODELS
    from hetserve.scheduling.nexus import peak_rates
    from hetserve.workload.maf import maf_trace

    console.rule("9. Shepherd: FLEX on a serving group of 12 V100s (Table 4 models)")
    setup = group_setup(12, dict.fromkeys(MODELS, 0.25))
    trace = maf_trace("maf-bursty", MODELS, 1000, 14000.0, 10.0, 0.25, seed=0)
    t = Table(
        title=f"{len(trace) / trace.duration_s:,.0f} req/s offered (MAF-bursty, 1,000 streams, "
        "13 models, SLO 250 ms), 10 s (Shepherd section 7)"
    )
    for col in ("scheduler", "goodput req/s", "of offered"):
        t.add_column(col, justify="left" if col == "scheduler" else "right")
    for name, params in (
        ("flex", {}),
        ("clockwork", {}),
        ("nexus", {"rates": peak_rates(trace, 5.0), "epoch_s": 5.0}),
    ):
        res = simulate(setup, name, trace, params)
        ok = int((res.outcome == OK).sum())
        t.add_row(name, f"{ok / trace.duration_s:,.0f}", f"{100 * ok / len(trace):.1f}%")
    console.print(t)
    console.print(
        "the whole study (Figs. 7, 9, 10, 11): hetserve reproduce shepherd --quick --out DIR"
    )


def _live_step(outdir: Path, duration_s: float = 8.0, load_factor: float = 0.5) -> None:
    """10. Serve ResNet-18 for real over HTTP and compare with the simulator."""
    import json

    from hetserve.engine.setup import build_setup
    from hetserve.experiments.live import replay_http, serve_in_thread
    from hetserve.experiments.metrics import summarize
    from hetserve.experiments.setup import build_trace, simulate
    from hetserve.profiling.cache import measured_profiles
    from hetserve.runtime.http import create_app
    from hetserve.runtime.server import Server, ServerConfig
    from hetserve.zoo.registry import build

    console.rule("10. Serve for real: ResNet-18 on this machine's CPU, over HTTP")
    threads = 1  # one core computes; the other serves HTTP and sends the load
    folder = measured_profiles(["resnet18"], "cpu", [1, 2, 4, 8], 10, threads, say=console.print)
    setup = build_setup("local-cpu", ["resnet18"], profiles=str(folder), max_batch=8)
    rates = setup.plan.rates_at(load_factor)
    trace = build_trace(setup, "poisson", rates, duration_s, seed=0)
    params = {"max_batch": 8}
    x = build("resnet18").input_spec.example(1)[0].numpy()
    slo_ms = setup.slos_s["resnet18"] * 1e3
    t = Table(
        title=f"flex, Poisson {rates['resnet18']:.1f} req/s ({load_factor:g} x planned "
        f"capacity) for {duration_s:g} s, SLO {slo_ms:.0f} ms (5 x measured batch-1 latency)"
    )
    for col in ("run", "requests", "attainment", "goodput req/s", "p50 ms", "p99 ms"):
        t.add_column(col, justify="left" if col == "run" else "right")

    def row(name: str, s: dict) -> dict:
        lat = s["latency_ms"]
        t.add_row(
            name, str(s["requests"]), f"{100 * s['attainment']:.1f}%",
            f"{s['goodput_rps']:.1f}",
            *("-" if lat[k] is None else f"{lat[k]:.0f}" for k in ("p50", "p99")),
        )  # fmt: skip
        return {k: s[k] for k in ("requests", "attainment", "goodput_rps", "latency_ms")}

    sim = summarize(simulate(setup, "flex", trace, params))
    sim["requests"] = len(trace)
    record = {"simulated": row("simulated (measured profile)", sim)}
    for engine, label in (("ray", "served: Ray actor"), ("threads", "served: in-process thread")):
        cfg = ServerConfig(
            scheduler="flex", params=params, build=build, engine=engine, cpu_threads=threads
        )
        busy = f"serving over HTTP ({engine} engine), sending {len(trace)} requests"
        srv = Server(setup, cfg)
        with console.status(busy), serve_in_thread(create_app(srv)) as url:
            live = replay_http(url, trace, {"resnet18": x})
        record[engine] = row(label, live.summary())
        call = getattr(srv.engine.executor if srv.engine else None, "call_overhead_ms", None)
        if call is not None:
            record[engine]["ray_call_overhead_ms"] = call()
    console.print(t)
    if "ray_call_overhead_ms" in record.get("ray", {}):
        o = record["ray"]["ray_call_overhead_ms"]
        console.print(
            f"the Ray actor's calls took {o['p50_ms']:.1f} ms (median; p99 {o['p99_ms']:.1f}) "
            f"beyond its compute per stage: the call, the object store and the reply, a cost "
            f"the profile (measured in process) does not hold; where it is a large part of a "
            f'stage, the Ray row falls behind the simulated one (docs/benchmarks.md, "The Ray '
            f'path")',
            markup=False,
        )
    path = outdir / "live-resnet18.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    console.print(
        f"wrote {path}. Latency here is the client's (HTTP, 600 KB of input per request, "
        "the object store); the simulator sees only the measured compute. Serve it yourself: "
        "hetserve serve --models resnet18"
    )
