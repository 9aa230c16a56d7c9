"""The ``hetserve`` command line. Every command is documented in ``docs/cli.md``.

Bad input ends in one line on stderr naming the file, row or field and what was expected,
and exit status 2 — never a traceback.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from hetserve import __version__
from hetserve.core.errors import HetserveError

# Piped output (logs, CI, `| less`) gets wide tables instead of rich's 80-column default.
console = Console(width=None if sys.stdout.isatty() else 160)


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _int_list(value: str, what: str) -> list[int]:
    """``1,2,4`` or ``1-8``."""
    out: list[int] = []
    try:
        for part in _csv(value):
            if "-" in part:
                a, b = part.split("-", 1)
                out.extend(range(int(a), int(b) + 1))
            else:
                out.append(int(part))
    except ValueError:
        raise HetserveError(
            f"--{what}: expected integers like 1,2,4 or 1-8, got {value!r}"
        ) from None
    if not out or min(out) < 1:
        raise HetserveError(f"--{what}: expected integers >= 1, got {value!r}")
    return sorted(set(out))


@contextmanager
def progress_bar(label: str, total: int) -> Iterator[Callable[[], None]]:
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=not sys.stderr.isatty(),
    ) as p:
        task = p.add_task(label, total=total)
        yield lambda: p.advance(task)


def _print_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, default=str))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hetserve")
def cli() -> None:
    """hetserve: DNN inference serving on heterogeneous GPU clusters under latency SLOs."""


# ------------------------------------------------------------------ gpus


@cli.command()
@click.option(
    "--types",
    "types_file",
    type=click.Path(dir_okay=False),
    help="YAML file with extra GPU types to list alongside the built-in ones.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def gpus(types_file: str | None, as_json: bool) -> None:
    """The GPU catalog: spec-sheet facts of every known GPU type."""
    from hetserve.core.gpus import DEFAULT_CATALOG, load_gpu_types

    cat = DEFAULT_CATALOG
    if types_file:
        cat = cat.with_types(load_gpu_types(types_file))
    if as_json:
        _print_json([g.model_dump() for g in cat])
        return
    t = Table(title="GPU catalog (dense peak TFLOPS; idle W is a typical reading)")
    for col in (
        "name",
        "FP32",
        "FP16/TC",
        "mem GB",
        "mem GB/s",
        "PCIe",
        "NVLink GB/s",
        "TDP W",
        "idle W",
        "MPS",
        "year",
        "aliases",
    ):
        t.add_column(col, justify="left" if col in ("name", "aliases") else "right")
    for g in cat:
        t.add_row(
            g.name,
            f"{g.fp32_tflops:g}",
            f"{g.fp16_tflops:g}" + (" TC" if g.tensor_cores else ""),
            f"{g.memory_gb:g}",
            f"{g.mem_bw_gbps:g}",
            f"gen{g.pcie_gen} {g.host_gbps:g}",
            f"{g.nvlink_gbps:g}" if g.nvlink_gbps else "-",
            f"{g.tdp_w:g}",
            f"{g.idle_w:g}",
            "yes" if g.mps else "no",
            str(g.year),
            ", ".join(g.aliases),
        )
    console.print(t)


# ------------------------------------------------------------------ cluster


@cli.group()
def cluster() -> None:
    """Cluster presets and files."""


@cluster.command("list")
def cluster_list() -> None:
    """The built-in cluster presets."""
    from hetserve.core.presets import PRESETS, preset

    t = Table(title="cluster presets")
    for col in ("name", "nodes", "GPUs", "types", "description"):
        t.add_column(col)
    for name in PRESETS:
        c = preset(name)
        s = c.summary()
        t.add_row(
            name,
            str(s["nodes"]),
            str(s["gpus"]),
            ", ".join(f"{n}x {k}" for k, n in s["gpu_counts"].items()),
            c.description,
        )
    console.print(t)


@cluster.command("show")
@click.argument("name_or_file")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def cluster_show(name_or_file: str, as_json: bool) -> None:
    """A cluster preset (by NAME) or cluster YAML file: nodes, GPUs, links, topology."""
    from hetserve.core.cluster import load_cluster

    c = load_cluster(name_or_file)
    s = c.summary()
    groups: dict[tuple, list[str]] = {}
    for n in c.nodes:
        key = (
            tuple(g.type.name for g in n.gpus),
            n.uplink_gbps,
            n.downlink_gbps,
            n.rack is not None,
            n.switch is not None,
            bool(n.nvlink_pairs),
            any(x is not None for x in n.pcie_switch_of),
        )
        groups.setdefault(key, []).append(n.name)
    if as_json:
        s["node_groups"] = [
            {"gpus": list(k[0]), "uplink_gbps": k[1], "downlink_gbps": k[2], "nodes": v}
            for k, v in groups.items()
        ]
        _print_json(s)
        return
    console.print(f"[bold]{c.name}[/bold]  {c.description}")
    console.print(
        f"{s['nodes']} nodes, {s['gpus']} GPUs: "
        + ", ".join(f"{n}x {k}" for k, n in s["gpu_counts"].items())
    )
    t = Table()
    for col in ("nodes", "count", "GPUs per node", "NIC up/down Gbps", "extras"):
        t.add_column(col)
    for k, names in groups.items():
        extras = [
            x
            for x, on in (
                ("rack", k[3]),
                ("switch-attached", k[4]),
                ("NVLink", k[5]),
                ("PCIe switches", k[6]),
            )
            if on
        ]
        shown = names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]}"
        per = {}
        for g in k[0]:
            per[g] = per.get(g, 0) + 1
        t.add_row(
            shown,
            str(len(names)),
            ", ".join(f"{n}x {g}" for g, n in per.items()),
            f"{k[1]:g} / {k[2]:g}",
            ", ".join(extras),
        )
    console.print(t)
    if c.is_switched:
        kinds: dict[str, int] = {}
        for link in c.links.values():
            kinds[link.kind] = kinds.get(link.kind, 0) + 1
        console.print(
            f"topology: {len(c.switches)} switches, {len(c.switch_links)} "
            f"switch-to-switch links; directed links by kind: {kinds}"
        )
        g0, g1 = c.gpus[0], c.gpus[-1]
        path = c.transfer_path(g0.id, g1.id)
        console.print(
            f"example path {g0.id} -> {g1.id}: {' | '.join(path)} "
            f"({c.path_delay_s(path) * 1e6:.2f} us propagation + switching)"
        )


# ------------------------------------------------------------------ models


@cli.group()
def model() -> None:
    """Model graphs: layers, FLOPs, bytes, blocks, latency ratios between GPUs."""


@model.command("list")
def model_list() -> None:
    """The model graphs shipped with hetserve."""
    from hetserve.core.graph import get_graph, shipped_models

    t = Table(title="model zoo (graphs shipped as package data)")
    for col in ("name", "task", "input", "layers", "GMACs", "M params"):
        t.add_column(col, justify="left" if col in ("name", "task", "input") else "right")
    for name in shipped_models():
        g = get_graph(name)
        t.add_row(
            name,
            g.task,
            "x".join(map(str, g.input_shape)),
            str(len(g.layers)),
            f"{g.macs / 1e9:.2f}",
            f"{g.params / 1e6:.1f}",
        )
    console.print(t)


@model.command("show")
@click.argument("name")
@click.option(
    "--blocks",
    "n_blocks",
    default=10,
    show_default=True,
    help="Pre-partition into this many blocks of about equal latency.",
)
@click.option(
    "--ref-gpu", default="V100", show_default=True, help="Reference GPU for the pre-partitioning."
)
@click.option("--layers", "show_layers", is_flag=True, help="Also list every layer.")
@click.option("--json", "as_json", is_flag=True, help="Print the graph and blocks as JSON.")
def model_show(name: str, n_blocks: int, ref_gpu: str, show_layers: bool, as_json: bool) -> None:
    """A model's graph (NAME or a graph JSON file) and its pre-partitioned blocks."""
    from hetserve.core.graph import get_graph
    from hetserve.core.latency import RooflineModel

    g = get_graph(name)
    rm = RooflineModel(lambda _: g, n_blocks=n_blocks, ref_gpu=ref_gpu)
    blocks = rm.blocks(g.name)
    if as_json:
        _print_json(
            {
                **g.to_json(),
                "blocks": {
                    "bounds": blocks.bounds,
                    "out_bytes": blocks.out_bytes,
                    "ref_gpu": rm.ref_gpu.name,
                },
            }
        )
        return
    console.print(
        f"[bold]{g.name}[/bold] ({g.family}, {g.task}), input "
        f"{'x'.join(map(str, g.input_shape))}: {len(g.layers)} layers, "
        f"{g.macs / 1e9:.3f} GMACs ({g.flops / 1e9:.3f} GFLOPs), "
        f"{g.params / 1e6:.2f} M parameters ({g.param_bytes / 1e6:.1f} MB FP32)"
    )
    t = Table(
        title=f"{len(blocks)} blocks of about equal batch-1 latency on {rm.ref_gpu.name} (roofline)"
    )
    for col in (
        "block",
        "layers",
        "GFLOPs",
        "params MB",
        f"ms on {rm.ref_gpu.name}",
        "out bytes/request",
    ):
        t.add_column(col, justify="right")
    for i in range(len(blocks)):
        lr = blocks.layers(i)
        t.add_row(
            str(i),
            f"{lr.start}..{lr.stop - 1} ({g.layers[lr.start].name} .. "
            f"{g.layers[lr.stop - 1].name})",
            f"{sum(g.layers[j].flops for j in lr) / 1e9:.3f}",
            f"{sum(g.layers[j].param_bytes for j in lr) / 1e6:.1f}",
            f"{rm.latency(g.name, rm.ref_gpu, 1, 1, range(i, i + 1)) * 1e3:.3f}",
            f"{blocks.out_bytes[i]:,.0f}",
        )
    console.print(t)
    if show_layers:
        lt = Table(title="layers")
        for col in ("#", "name", "kind", "MFLOPs", "param KB", "out KB", "traffic KB", "ops"):
            lt.add_column(col, justify="right")
        for i, layer in enumerate(g.layers):
            lt.add_row(
                str(i),
                layer.name,
                layer.kind,
                f"{layer.flops / 1e6:.1f}",
                f"{layer.param_bytes / 1e3:.1f}",
                f"{layer.out_bytes / 1e3:.1f}",
                f"{layer.mem_bytes / 1e3:.1f}",
                str(layer.n_ops),
            )
        console.print(lt)


@model.command("ratios")
@click.argument("name")
@click.option(
    "--gpus",
    "gpu_list",
    required=True,
    help="SLOW,FAST[,FAST2...]: ratios of the first GPU's latency over each other's.",
)
@click.option("--batch", default=1, show_default=True)
@click.option(
    "--window",
    type=int,
    default=None,
    help="Moving-window size in layers (default: an eighth of the layers).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    default=None,
    help="PNG to write (default: <model>-ratios.png).",
)
def model_ratios(name: str, gpu_list: str, batch: int, window: int | None, out: str | None) -> None:
    """Per-block latency ratio between GPU types, and a PNG of the per-layer ratio
    (PPipe Fig. 3)."""
    from hetserve.core.gpus import get_gpu
    from hetserve.core.graph import get_graph
    from hetserve.core.latency import RooflineModel
    from hetserve.core.ratios import latency_ratios, plot_ratios

    names = _csv(gpu_list)
    if len(names) < 2:
        raise HetserveError("--gpus: give at least two GPU types, e.g. --gpus P4,L4")
    if batch < 1:
        raise HetserveError(f"--batch: expected >= 1, got {batch}")
    types = [get_gpu(n) for n in names]
    g = get_graph(name)
    rm = RooflineModel()
    curves = [latency_ratios(rm, g.name, types[0], f, batch, window) for f in types[1:]]
    t = Table(title=f"{g.name}: latency ratio per block (batch {batch}, roofline)")
    t.add_column("block", justify="right")
    for c in curves:
        t.add_column(f"{c.slow}/{c.fast}", justify="right")
    for i in range(len(curves[0].block_ratio)):
        t.add_row(str(i), *(f"{c.block_ratio[i]:.2f}" for c in curves))
    console.print(t)
    for c in curves:
        console.print(
            f"{c.slow}/{c.fast}: per-layer ratio from {c.layer_ratio.min():.2f} to "
            f"{c.layer_ratio.max():.2f}; window-{c.window} ratio from "
            f"{c.window_ratio.min():.2f} to {c.window_ratio.max():.2f}"
        )
    path = plot_ratios(curves, out or f"{g.name}-ratios.png")
    console.print(f"wrote {path}")


# ------------------------------------------------------------------ profiles


@cli.group()
def profile() -> None:
    """Profile sets (per-block latency and energy tables)."""


@profile.command("estimate")
@click.option("--cluster", "cluster_name", required=True, help="Preset name or YAML file.")
@click.option("--models", required=True, help="Comma-separated model names.")
@click.option(
    "--out",
    required=True,
    type=click.Path(file_okay=False),
    help="Folder to write latency.csv, blocks.csv, energy.csv.",
)
@click.option(
    "--shares", default="1,2,3,4", show_default=True, help="MPS shares k (one of k slices)."
)
@click.option("--batches", default="1-8", show_default=True)
@click.option("--blocks", "n_blocks", default=10, show_default=True)
@click.option(
    "--ref-gpu", default="V100", show_default=True, help="Reference GPU for pre-partitioning."
)
def profile_estimate(
    cluster_name: str, models: str, out: str, shares: str, batches: str, n_blocks: int, ref_gpu: str
) -> None:
    """Write a profile set estimated by the roofline model for the cluster's GPU types."""
    from hetserve.core.cluster import load_cluster
    from hetserve.core.graph import get_graph
    from hetserve.core.latency import RooflineModel
    from hetserve.core.profiles import estimate_profiles

    c = load_cluster(cluster_name)
    names = _csv(models)
    if not names:
        raise HetserveError("--models: give at least one model name")
    for n in names:
        get_graph(n)  # fail fast with suggestions
    rm = RooflineModel(n_blocks=n_blocks, ref_gpu=ref_gpu, catalog=c.catalog)
    gpus_ = c.gpu_types()
    with progress_bar("estimating", len(names) * len(gpus_)) as tick:
        ps = estimate_profiles(
            rm,
            [get_graph(n).name for n in names],
            gpus_,
            _int_list(shares, "shares"),
            _int_list(batches, "batches"),
            progress=tick,
        )
    folder = ps.write(out)
    console.print(
        f"wrote {folder}/latency.csv ({len(ps.latency_us)} model x GPU x share x "
        f"batch rows of {n_blocks} blocks), blocks.csv, energy.csv for "
        f"{', '.join(g.name for g in gpus_)}"
    )


# ------------------------------------------------------------------ traces


@cli.group()
def trace() -> None:
    """Workload traces: generate and summarise."""


@trace.command("gen")
@click.option(
    "--kind",
    type=click.Choice(["arrivals", "azure2019"]),
    default="arrivals",
    show_default=True,
    help="arrivals: an arrivals CSV from an arrival process per stream; "
    "azure2019: a synthetic per-minute file in the Azure Functions 2019 format.",
)
@click.option(
    "--process",
    default="poisson:rate=100",
    show_default=True,
    help="arrivals: process spec for the TOTAL rate, split evenly over streams, "
    "e.g. gamma:rate=200,cv=4 or mmpp:rate=100,ratio=10,high_s=1,low_s=4.",
)
@click.option(
    "--models",
    default="resnet50",
    show_default=True,
    help="arrivals: comma-separated models; streams are spread over them.",
)
@click.option(
    "--streams",
    "n_streams",
    default=1,
    show_default=True,
    help="arrivals: number of streams (round-robin over the models).",
)
@click.option("--slo", "slo_s", default=0.1, show_default=True, help="SLO, seconds.")
@click.option(
    "--duration", "duration_s", default=60.0, show_default=True, help="arrivals: seconds."
)
@click.option("--functions", default=200, show_default=True, help="azure2019: functions.")
@click.option("--minutes", default=60, show_default=True, help="azure2019: minutes.")
@click.option(
    "--rate",
    "rate_rps",
    default=100.0,
    show_default=True,
    help="azure2019: mean total rate, requests/s.",
)
@click.option("--seed", default=0, show_default=True)
@click.option("--out", required=True, type=click.Path(dir_okay=False))
def trace_gen(
    kind: str,
    process: str,
    models: str,
    n_streams: int,
    slo_s: float,
    duration_s: float,
    functions: int,
    minutes: int,
    rate_rps: float,
    seed: int,
    out: str,
) -> None:
    """Generate a trace file (seeded: the same seed writes the same file)."""
    if kind == "azure2019":
        from hetserve.workload.azure import synthetic_azure2019_counts, write_azure2019

        counts = synthetic_azure2019_counts(functions, minutes, rate_rps, seed)
        write_azure2019(out, counts, seed)
        console.print(
            f"wrote {out}: {functions} functions x {minutes} minutes, "
            f"{int(counts.sum())} invocations (Azure Functions 2019 format)"
        )
        return
    from hetserve.core.requests import Stream
    from hetserve.workload import generate, parse_process

    if n_streams < 1:
        raise HetserveError(f"--streams: expected >= 1, got {n_streams}")
    if slo_s <= 0:
        raise HetserveError(f"--slo: expected seconds > 0, got {slo_s}")
    proc = parse_process(process)
    names = _csv(models)
    per = proc.with_rate(proc.rate_rps / n_streams)
    streams = [Stream(f"s{i}", names[i % len(names)], slo_s, per) for i in range(n_streams)]
    tr = generate(streams, duration_s, seed)
    tr.write_csv(out)
    console.print(
        f"wrote {out}: {len(tr)} arrivals over {duration_s:g} s "
        f"({tr.rate_rps:.2f} req/s; {proc.describe()})"
    )


@trace.command("stats")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", "arrivals", "azure2019", "azure2021"]),
    default="auto",
    show_default=True,
)
@click.option(
    "--models",
    default="resnet50",
    show_default=True,
    help="Azure traces: models to fold the functions onto.",
)
@click.option("--slo", "slo_s", default=0.1, show_default=True)
@click.option(
    "--rate",
    "rate_rps",
    type=float,
    default=None,
    help="Azure traces: rescale to this mean rate (req/s).",
)
@click.option(
    "--bin",
    "bin_s",
    default=60.0,
    show_default=True,
    help="Bin width (s) for the per-bin rate statistics and plot.",
)
@click.option("--seed", default=0, show_default=True)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write a PNG of the rate over time per model.",
)
@click.option("--json", "as_json", is_flag=True)
def trace_stats(
    path: str,
    fmt: str,
    models: str,
    slo_s: float,
    rate_rps: float | None,
    bin_s: float,
    seed: int,
    plot: str | None,
    as_json: bool,
) -> None:
    """Summarise a trace: rates, burstiness (CVs, peak/mean), heavy-tailed streams."""
    from hetserve.workload.azure import read_azure2019, read_azure2021
    from hetserve.workload.stats import plot_rate
    from hetserve.workload.stats import trace_stats as stats
    from hetserve.workload.trace import Trace

    if fmt == "auto":
        try:
            with open(path) as f:
                head = f.readline()
        except OSError as e:
            raise HetserveError(f"{path}: cannot read: {e.strerror}") from None
        fmt = (
            "azure2019"
            if head.startswith("HashOwner")
            else "azure2021"
            if head.startswith("app,")
            else "arrivals"
        )
    names = _csv(models)
    if fmt == "azure2019":
        tr = read_azure2019(path, names, slo_s, seed, target_rate_rps=rate_rps)
    elif fmt == "azure2021":
        tr = read_azure2021(path, names, slo_s, target_rate_rps=rate_rps)
    else:
        tr = Trace.read_csv(path)
    s = stats(tr, bin_s)
    if as_json:
        _print_json({"format": fmt, **s})
    else:
        t = Table(title=f"{path} ({fmt})")
        t.add_column("statistic")
        t.add_column("value", justify="right")
        for k, v in s.items():
            t.add_row(k, f"{v:.4g}" if isinstance(v, float) else str(v))
        console.print(t)
    if plot:
        written = plot_rate(tr, plot, bin_s)
        click.echo(f"wrote {written}", err=as_json)  # keep stdout pure JSON


# ------------------------------------------------------------------ zoo


@cli.group()
def zoo() -> None:
    """The PyTorch model zoo (needs the torch extra)."""


@zoo.command("export")
@click.option("--models", default=None, help="Comma-separated (default: all).")
@click.option("--out", required=True, type=click.Path(file_okay=False))
def zoo_export(models: str | None, out: str) -> None:
    """Export model graphs (FLOPs, bytes per layer) as JSON, by running each model once."""
    try:
        from hetserve.zoo.export import export_all
        from hetserve.zoo.registry import MODELS
    except ImportError as e:
        raise HetserveError(
            f"zoo export needs PyTorch: pip install 'hetserve[torch]' ({e})"
        ) from None
    names = _csv(models) if models else list(MODELS)
    with progress_bar("exporting", len(names)) as tick:
        written = export_all(names, out, lambda _: tick())
    console.print(f"wrote {len(written)} graphs to {out}")


# ------------------------------------------------------------------ demo


@cli.command()
@click.option("--out", default="demo-out", show_default=True, type=click.Path(file_okay=False))
def demo(out: str) -> None:
    """A tour: the GPU catalog, a PPipe cluster preset, a model's blocks, the per-layer
    latency ratio plot (PPipe Fig. 3), an estimated profile set, and a simulation of two
    schedulers with a report, and PPipe's planner against its baselines."""
    from hetserve.core.cluster import load_cluster
    from hetserve.core.gpus import get_gpu
    from hetserve.core.latency import RooflineModel
    from hetserve.core.profiles import estimate_profiles
    from hetserve.core.ratios import latency_ratios, plot_ratios

    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    console.rule("1. GPU catalog")
    ctx = click.get_current_context()
    ctx.invoke(gpus)
    console.rule("2. A heterogeneous cluster: PPipe's HC1-L")
    ctx.invoke(cluster_show, name_or_file="hc1-l")
    console.rule("3. EfficientNet-B8 cut into 10 blocks")
    ctx.invoke(model_show, name="efficientnet-b8")
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
    from hetserve.cli_sim import print_summary, write_run
    from hetserve.experiments.metrics import summarize
    from hetserve.experiments.report import write_report
    from hetserve.experiments.setup import build_setup, build_trace
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
    for name in ("np", "dart-r", "ppipe"):
        pl = plan_models(c1, rm, slos, None, PlanOptions(planner=name))
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
    console.print(
        "[green]demo done[/green]: next issues add the reservation data plane, "
        "Shepherd, DeepPlan, MagicBatch, RAMPA and the Ray runtime to this tour."
    )


def _register_subcommands() -> None:
    import hetserve.cli_plan
    import hetserve.cli_sim  # noqa: F401  (registers simulate, sweep, report)


def main(argv: list[str] | None = None) -> int:
    _register_subcommands()
    try:
        cli.main(args=argv, prog_name="hetserve", standalone_mode=False)
    except HetserveError as e:
        click.echo(f"hetserve: error: {e}", err=True)
        return 2
    except OSError as e:  # writing an output file or folder
        where = f"{e.filename}: " if e.filename else ""
        click.echo(f"hetserve: error: {where}{e.strerror or e}", err=True)
        return 2
    except click.exceptions.Abort:
        click.echo("hetserve: aborted", err=True)
        return 130
    except click.ClickException as e:
        e.show()
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
