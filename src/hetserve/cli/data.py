"""``hetserve profile``, ``trace`` and ``zoo`` (registered on the main CLI group)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from hetserve.cli.common import (
    console,
    csv_list,
    int_list,
    model_catalog,
    model_names,
    print_json,
    progress_bar,
)
from hetserve.core.errors import HetserveError

# ------------------------------------------------------------------ profiles


@click.group()
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
@click.option(
    "--layers/--no-layers",
    default=False,
    show_default=True,
    help="Also write DeepPlan's layers.csv (per-layer load, on-GPU and host-access "
    "execution) for every model, GPU type and batch, from the shipped layer tables.",
)
def profile_estimate(
    cluster_name: str,
    models: str,
    out: str,
    shares: str,
    batches: str,
    n_blocks: int,
    ref_gpu: str,
    layers: bool,
) -> None:
    """Write a profile set estimated by the roofline model for the cluster's GPU types."""
    from hetserve.core.latency import RooflineModel
    from hetserve.core.presets import load_cluster
    from hetserve.core.profiles import estimate_profiles

    c = load_cluster(cluster_name)
    names = csv_list(models)
    if not names:
        raise HetserveError("--models: give at least one model name")
    catalog = model_catalog()
    graphs = [catalog.graph(n) for n in names]  # fail fast with suggestions
    rm = RooflineModel(catalog.graph, n_blocks=n_blocks, ref_gpu=ref_gpu, catalog=c.catalog)
    gpus_ = c.gpu_types()
    with progress_bar("estimating", len(names) * len(gpus_)) as tick:
        ps = estimate_profiles(
            rm,
            [g.name for g in graphs],
            gpus_,
            int_list(shares, "shares"),
            int_list(batches, "batches"),
            progress=tick,
        )
    folder = ps.write(out)
    console.print(
        f"wrote {folder}/latency.csv ({len(ps.latency_us)} model x GPU x share x "
        f"batch rows of {n_blocks} blocks), blocks.csv, energy.csv for "
        f"{', '.join(g.name for g in gpus_)}"
    )
    if layers:
        from hetserve.core.layertable import estimate_layer_rows, write_layers_csv

        tables = [catalog.layer_table(g.name) for g in graphs]
        rows = [
            r
            for t in tables
            for g in gpus_
            for b in int_list(batches, "batches")
            for r in estimate_layer_rows(t, g, b)
        ]
        path = write_layers_csv(rows, Path(folder) / "layers.csv")
        console.print(
            f"wrote {path} ({len(rows)} rows: {len(tables)} model(s) x {len(gpus_)} GPU "
            f"type(s) x {len(int_list(batches, 'batches'))} batch size(s))"
        )


@profile.command("measure")
@click.option("--models", required=True, help="Comma-separated zoo model names.")
@click.option("--device", default="cpu", show_default=True, help="cpu or cuda[:N].")
@click.option("--batches", default="1,2,4,8", show_default=True)
@click.option("--shares", default="1", show_default=True, help="CPU: 1/k of the threads.")
@click.option("--blocks", "n_blocks", default=10, show_default=True)
@click.option("--warmup", default=3, show_default=True, help="Unmeasured runs per block.")
@click.option("--repeats", default=10, show_default=True, help="Measured runs (median kept).")
@click.option(
    "--dtype",
    type=click.Choice(["fp32", "fp16", "bf16"]),
    default="fp32",
    show_default=True,
    help="Precision of the weights and floating-point inputs (the roofline models fp16). "
    "The profile set does not record it: say it in the folder's name.",
)
@click.option(
    "--out",
    required=True,
    type=click.Path(file_okay=False),
    help="Folder to write latency.csv, blocks.csv (and energy.csv where power is readable).",
)
@click.option(
    "--layers/--no-layers",
    default=None,
    help="Also write DeepPlan's per-layer layers.csv (load, on-GPU and from-host execution "
    "times) [default: on CUDA devices].",
)
def profile_measure(
    models: str,
    device: str,
    batches: str,
    shares: str,
    n_blocks: int,
    warmup: int,
    repeats: int,
    dtype: str,
    out: str,
    layers: bool | None,
) -> None:
    """Measure the zoo's PyTorch models block by block on this machine (profile-set
    format), and fit Shepherd's alpha/beta to each."""
    from hetserve.profiling.measure import measure_profiles

    names = csv_list(models)
    if not names:
        raise HetserveError("--models: give at least one model name")
    b_list, s_list = int_list(batches, "batches"), int_list(shares, "shares")
    if layers and not device.startswith("cuda"):
        raise HetserveError(
            f"--layers: DeepPlan's per-layer times need a CUDA device, not {device!r}"
        )
    runs = len(names) * len(b_list) * len(s_list)
    notes: list[str] = []
    with progress_bar("measuring", runs) as tick:
        ps, fits = measure_profiles(
            names, device, b_list, s_list, n_blocks, warmup, repeats, lambda _msg: tick(),
            note=notes.append, model_catalog=model_catalog(), dtype=dtype,
        )  # fmt: skip
    folder = ps.write(out)
    why = notes[0] if notes else "no energy: power is not readable here"
    extra = ", energy.csv" if ps.energy_mj else f" ({why})"
    console.print(f"wrote {folder}/latency.csv, blocks.csv{extra}")
    for f in fits:
        console.print(
            f"{f.model} on {f.device}: alpha {f.params.alpha_s * 1e3:.3f} ms/request, beta "
            f"{f.params.beta_s * 1e3:.3f} ms (Shepherd Eq. 1), largest fit error "
            f"{100 * f.max_rel_error:.1f}%"
        )
    if layers is None:
        layers = device.startswith("cuda")
    if layers:
        from hetserve.profiling.layers import measure_layers, write_layers_csv

        rows = []
        with progress_bar("layers", len(names)) as tick:
            for name in names:
                rows += measure_layers(name, device, 1, warmup, repeats, model_catalog())
                tick()
        path = write_layers_csv(rows, folder / "layers.csv")
        console.print(f"wrote {path} ({len(rows)} layers)")


# ------------------------------------------------------------------ traces


@click.group()
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
    names = model_names(models)
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
        from hetserve.core.files import read_text

        head = read_text(path, "trace").split("\n", 1)[0]
        fmt = (
            "azure2019"
            if head.startswith("HashOwner")
            else "azure2021"
            if head.startswith("app,")
            else "arrivals"
        )
    names = model_names(models)
    if fmt == "azure2019":
        tr = read_azure2019(path, names, slo_s, seed, target_rate_rps=rate_rps)
    elif fmt == "azure2021":
        tr = read_azure2021(path, names, slo_s, target_rate_rps=rate_rps)
    else:
        tr = Trace.read_csv(path)
    s = stats(tr, bin_s)
    if as_json:
        print_json({"format": fmt, **s})
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


@click.group()
def zoo() -> None:
    """The PyTorch model zoo (needs the torch extra)."""


def _zoo_write(what: str, models: str | None, out: str, fn: str) -> None:
    """Export every (or the named) zoo model's ``what`` with ``hetserve.zoo.<fn>``."""
    try:
        import importlib

        from hetserve.zoo.registry import MODELS

        mod, _, name = fn.rpartition(".")
        write = getattr(importlib.import_module(f"hetserve.zoo.{mod}"), name)
    except ImportError as e:
        raise HetserveError(f"zoo needs PyTorch: pip install 'hetserve[torch]' ({e})") from None
    names = csv_list(models) if models else list(MODELS)
    with progress_bar("exporting", len(names)) as tick:
        written = write(names, out, lambda _: tick())
    console.print(f"wrote {len(written)} {what} to {out}")


@zoo.command("layers")
@click.option("--models", default=None, help="Comma-separated (default: all).")
@click.option("--out", required=True, type=click.Path(file_okay=False))
def zoo_layers(models: str | None, out: str) -> None:
    """Export layer tables (one row per leaf-module call: DeepPlan's layers) as JSON, at
    DeepPlan's input sizes (384 tokens for BERT and RoBERTa, 1,024 for GPT-2)."""
    _zoo_write("layer tables", models, out, "leaves.export_layer_tables")


@zoo.command("export")
@click.option("--models", default=None, help="Comma-separated (default: all).")
@click.option("--out", required=True, type=click.Path(file_okay=False))
def zoo_export(models: str | None, out: str) -> None:
    """Export model graphs (FLOPs, bytes per layer) as JSON, by running each model once."""
    _zoo_write("graphs", models, out, "export.export_all")
