"""``hetserve gpus``, ``cluster`` and ``model``: the catalog, cluster presets and model
graphs."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from hetserve.cli.common import console, csv_list, model_catalog, repository
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
@click.option("--models", default=None, hidden=True)
def model_list(models: str | None) -> None:
    """The model graphs shipped with hetserve, and the models of the model repository
    (with their versions and whether each can load)."""
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
    repo = repository()
    if repo is None:
        return
    r = Table(title=f"model repository {repo.root}")
    for col in ("name", "version", "format", "served", "state"):
        r.add_column(col)
    for m in repo.models.values():
        served = m.served()
        states = _import_states(repo, m.name)
        for n, v in sorted(m.versions.items()):
            state = "ok" if v.error is None else f"UNAVAILABLE: {v.error}"
            if v.error is None and n in served:
                state = states.get(n, state)
            r.add_row(m.name, str(n), v.format or "?", "yes" if n in served else "no", state)
    console.print(r)


def _import_states(repo: Any, name: str) -> dict[int, str]:
    """Each served version's state as ``serve`` would find it: READY, or UNAVAILABLE with
    the reason (imports it, from the import cache after the first time; needs torch)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:  # (importing needs torch: not said here)
        return {}
    try:
        return {
            v.version: "ok" if v.state == "READY" else f"UNAVAILABLE: {v.reason}"
            for v in repo.version_states(name)
        }
    except HetserveError as e:  # the default version cannot load: nothing serves
        return {n: f"UNAVAILABLE: {e}" for n in repo.get(name).served()}


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
    from hetserve.core.latency import RooflineModel
    from hetserve.core.ratios import latency_ratios, plot_ratios

    names = csv_list(gpu_list)
    if len(names) < 2:
        raise HetserveError("--gpus: give at least two GPU types, e.g. --gpus P4,L4")
    if batch < 1:
        raise HetserveError(f"--batch: expected >= 1, got {batch}")
    types = [get_gpu(n) for n in names]
    catalog = model_catalog()
    g = catalog.graph(name)
    rm = RooflineModel(catalog.graph)
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


@cluster.command("discover")
@click.option(
    "--address", default=None,
    help="A Ray cluster: HOST:PORT of its head (or 'auto') [default: this machine, read "
    "without Ray].",
)  # fmt: skip
@click.option(
    "--output", "-o", type=click.Path(dir_okay=False), default=None,
    help="Write the cluster YAML to this file [default: print it on stdout, the table on "
    "stderr].",
)  # fmt: skip
@click.option("--name", default="discovered", show_default=True, help="The cluster's name.")
@click.option(
    "--types", "types_file", type=click.Path(dir_okay=False), default=None,
    help="YAML file of extra GPU types (docs/formats.md#gpu-types): for GPUs the built-in "
    "catalog does not know (their driver names as aliases); written into the output.",
)  # fmt: skip
def cluster_discover(
    address: str | None, output: str | None, name: str, types_file: str | None
) -> None:
    """Read the GPUs of a Ray cluster (or of this machine) and write them as a cluster
    YAML for plan, simulate and serve: per node its address, CPUs and GPUs (type, memory,
    PCIe link, NVLink, PCIe switches where NVML answers; else Ray's accelerator_type)."""
    import sys

    from rich.console import Console

    from hetserve.core.gpus import DEFAULT_CATALOG, load_gpu_types
    from hetserve.runtime.discovery import discover
    from hetserve.runtime.ray_session import joined

    extra = load_gpu_types(types_file) if types_file else []
    catalog = DEFAULT_CATALOG.with_types(extra)
    with joined(address):
        found = discover(address, catalog)
    found.extra_types = extra
    found.cluster(name)  # the YAML is checked as plan, simulate and serve will read it
    t = Table(title=f"{name}: {found.describe()}")
    for col in ("node", "Ray node", "CPUs", "GPUs", "from", "host link", "NVLink", "hetserve"):
        t.add_column(col)
    for n in [*found.nodes, *found.skipped]:
        links = sorted({f"gen{g.pcie_gen} x{g.pcie_width}" for g in n.gpus if g.pcie_gen})
        t.add_row(
            n.name, n.node_id[:8] or "-", f"{n.cpus:g}",
            n.shape + ("".join(f"\n  {g.index}: {g.driver_name}" for g in n.gpus
                               if g.driver_name)),
            n.source, ", ".join(links) or "-",
            ", ".join(f"{a}-{b}" for a, b in n.nvlink) or "-",
            n.versions.get("hetserve", "-"),
        )  # fmt: skip
    text = found.yaml(name)
    if output is None:
        Console(stderr=True, width=console.width).print(t)
        sys.stdout.write(text)
        return
    from pathlib import Path

    console.print(t)
    Path(output).write_text(text)
    console.print(f"wrote {output} ({sum(found.gpu_counts().values())} GPUs on "
                  f"{len(found.nodes)} nodes)", markup=False)  # fmt: skip
