"""``hetserve gpus``, ``cluster`` and ``model``: the catalog, cluster presets and model
graphs."""

from __future__ import annotations

import click
from rich.table import Table

from hetserve.cli.common import console, csv_list
from hetserve.cli.views import show_cluster, show_gpus, show_model
from hetserve.core.errors import HetserveError

# ------------------------------------------------------------------ gpus


@click.command()
@click.option(
    "--types",
    "types_file",
    type=click.Path(dir_okay=False),
    help="YAML file with extra GPU types to list alongside the built-in ones.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def gpus(types_file: str | None, as_json: bool) -> None:
    """The GPU catalog: spec-sheet facts of every known GPU type."""
    show_gpus(types_file, as_json)


@click.group()
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
    show_cluster(name_or_file, as_json)


@click.group()
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
    show_model(name, n_blocks, ref_gpu, show_layers, as_json)


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

    names = csv_list(gpu_list)
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
