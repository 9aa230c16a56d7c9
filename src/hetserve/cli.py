"""The ``hetserve`` command line. Every command is documented in ``docs/cli.md``.

Bad input ends in one line on stderr naming the file, row or field and what was expected,
and exit status 2 — never a traceback.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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


def _register_subcommands() -> None:
    """Import the modules that add commands to the ``cli`` group."""
    import hetserve.cli_data
    import hetserve.cli_demo
    import hetserve.cli_plan
    import hetserve.cli_reproduce
    import hetserve.cli_serve
    import hetserve.cli_sim  # noqa: F401  (simulate, sweep, report)


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
