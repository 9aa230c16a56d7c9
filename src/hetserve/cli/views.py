"""Tables and output shared by commands (the demo shows the same tables as the
commands). No command module is imported here."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rich.table import Table

from hetserve.cli.common import console, model_catalog, print_json


def show_gpus(types_file: str | None, as_json: bool) -> None:
    """The GPU catalog: spec-sheet facts of every known GPU type."""
    from hetserve.core.gpus import CATALOG_PRICE_PER_HOUR, DEFAULT_CATALOG, load_gpu_types

    cat = DEFAULT_CATALOG
    if types_file:
        cat = cat.with_types(load_gpu_types(types_file))
    if as_json:
        # (price_per_hour: the catalog's, US$ per GPU-hour; null: none, docs/control.md)
        print_json([
            {**g.model_dump(), "price_per_hour": CATALOG_PRICE_PER_HOUR.get(g.name)} for g in cat
        ])  # fmt: skip
        return
    t = Table(
        title="GPU catalog (dense peak TFLOPS; idle W is a typical reading; $/h: Google "
        "Cloud us-central1, the GPU alone, docs/control.md)"
    )
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
        "$/h",
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
            f"{CATALOG_PRICE_PER_HOUR[g.name]:g}" if g.name in CATALOG_PRICE_PER_HOUR else "-",
            ", ".join(g.aliases),
        )
    console.print(t)


# ------------------------------------------------------------------ cluster


def show_cluster(name_or_file: str, as_json: bool) -> None:
    """A cluster preset (by NAME) or cluster YAML file: nodes, GPUs, links, topology."""
    from hetserve.core.presets import load_cluster

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
        print_json(s)
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


def show_model(name: str, n_blocks: int, ref_gpu: str, show_layers: bool, as_json: bool) -> None:
    """A model's graph (NAME or a graph JSON file) and its pre-partitioned blocks."""
    from hetserve.core.latency import RooflineModel

    g = model_catalog().graph(name)
    rm = RooflineModel(lambda _: g, n_blocks=n_blocks, ref_gpu=ref_gpu)
    blocks = rm.blocks(g.name)
    if as_json:
        print_json(
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
    if g.meta.get("note"):
        console.print(f"note: {g.meta['note']}", markup=False)
    if g.meta.get("batch_moved"):
        console.print(
            f"note: the batch dimension of {g.meta['batch_moved']} is moved to the front "
            f"when served",
            markup=False,
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
        cat = model_catalog()
        if not name.endswith(".json") and cat.has_layer_table(name):
            _show_leaves(cat.layer_table(name))


def _show_leaves(table: Any) -> None:
    """DeepPlan's per-leaf-module table: a row per leaf-module call, with the graph layer
    (above) it belongs to."""
    t = Table(title=f"leaf modules (DeepPlan's layer table, {len(table)} rows)")
    for col in ("#", "module", "kind", "layer", "MFLOPs", "param KB", "kernels"):
        t.add_column(col, justify="left" if col in ("module", "kind") else "right")
    for i, leaf in enumerate(table.leaves):
        t.add_row(
            str(i), leaf.name, leaf.kind, str(leaf.layer), f"{leaf.flops / 1e6:.1f}",
            f"{leaf.param_bytes / 1e3:.1f}", str(leaf.n_ops),
        )  # fmt: skip
    console.print(t)


def attainment_text(share: float) -> str:
    """An attainment as a percentage with two decimals, rounded down: a run that missed
    any request never reads 100.00% (1 dropped of 40,000 is 99.99%, not 100.00%)."""
    return f"{math.floor(share * 10_000 + 1e-6) / 100:.2f}%"


def print_summary(s: dict[str, Any], title: str) -> None:
    t = Table(title=title)
    cancelled = bool(s.get("cancelled"))  # (a column only where clients gave up)
    cols = ["model", "arrived", "attainment", "goodput/s", "offered/s", "p50 ms", "p90 ms",
            "p99 ms", "late", "dropped", "failed"]  # fmt: skip
    cols += ["cancelled"] if cancelled else []
    for col in cols:
        t.add_column(col, justify="left" if col == "model" else "right")

    def row(name: str, m: dict[str, Any]) -> None:
        lat = m["latency_ms"]

        def ms(k: str) -> str:
            return "-" if lat[k] is None else f"{lat[k]:.2f}"

        t.add_row(
            name,
            str(m["arrived"]),
            attainment_text(m["attainment"]),
            f"{m['goodput_rps']:.1f}",
            f"{m['offered_rps']:.1f}",
            ms("p50"),
            ms("p90"),
            ms("p99"),
            str(m["late"]),
            str(m["dropped"]),
            str(m["failed"]),
            *([str(m.get("cancelled", 0))] if cancelled else []),
        )

    for name, m in s["per_model"].items():
        row(name, m)
    row("all", s)
    console.print(t)
    util = ", ".join(f"{g} {100 * u:.1f}%" for g, u in s["utilization"].items())
    epr = s["energy_per_request_j"]
    console.print(
        f"utilisation: {util}; energy {s['energy_j']:.1f} J"
        + (f" ({epr:.3f} J/request)" if epr is not None else "")
        + (f"; mean batch {s['mean_batch_size']:.2f}" if s["mean_batch_size"] else "")
    )


def write_run(folder: Path, res: Any, summary: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    res.write_requests_csv(folder / "requests.csv")
    res.write_batches_csv(folder / "batches.csv")
    res.write_workers_csv(folder / "workers.csv")


def print_plan(plan: Any, title: str) -> None:
    t = Table(title=title)
    for col in (
        "model",
        "SLO ms",
        "pipeline",
        "batch",
        "req/s",
        "latency ms",
        "stages (blocks GPU/share x slices: ms, transfer ms)",
    ):
        t.add_column(
            col,
            justify="left"
            if col in ("model", "stages (blocks GPU/share x slices: ms, transfer ms)")
            else "right",
        )
    for name, m in plan.models.items():
        for pi, p in enumerate(m.pipelines):
            stages = "  ->  ".join(
                f"[{st.blocks[0]},{st.blocks[1]}) {st.gpu}/{st.share} x{st.instances}: "
                f"{st.latency_s * 1e3:.2f}"
                + (f", {st.transfer_s * 1e3:.2f}" if st.transfer_s else "")
                for st in p.stages
            )
            t.add_row(
                name if pi == 0 else "",
                f"{m.slo_s * 1e3:.1f}" if pi == 0 else "",
                str(pi),
                str(p.batch),
                f"{p.throughput_rps:.1f}",
                f"{p.latency_s * 1e3:.2f}",
                stages,
            )
    console.print(t)


def print_load_plans(every: dict[str, dict[str, Any]], chosen: str, title: str) -> None:
    """Per model: layers loaded / DHA, bytes, predicted cold and warm latency per kind."""
    kinds = [k for k in ("baseline", "pipeswitch", "dha", "pt", "pt+dha", "optimal")
             if any(k in v for v in every.values())]  # fmt: skip
    t = Table(
        title=title,
        caption="cold-start latency (ms) per plan kind; * the kind written (its layers, "
        "memory and warm latency shown)",
    )
    t.add_column("model")
    for col in ("layers", "loaded/DHA", "GPU MB", "host MB"):
        t.add_column(col, justify="right")
    for k in kinds:
        t.add_column(f"{k}{'*' if k == chosen else ''}", justify="right")
    t.add_column("warm ms", justify="right")
    from hetserve.core.layerlatency import base_model

    groups: dict[str, list[str]] = {}
    for m in every:  # instances of one architecture share its plans: one row for them
        groups.setdefault(base_model(m), []).append(m)
    for arch, members in groups.items():
        plans = every[members[0]]
        m = (
            arch
            if len(members) == 1 and members[0] == arch
            else (f"{arch} x{len(members)}" if len(members) > 1 else members[0])
        )
        p = plans[chosen]
        n_dha = len(p.plan.dha_layers)
        n = len(p.plan.modes)
        t.add_row(
            m, str(n), f"{n - n_dha}/{n_dha}", f"{p.timeline.gpu_bytes / 1e6:.1f}",
            f"{p.timeline.dha_bytes / 1e6:.1f}",
            *[f"{plans[k].cold_s * 1e3:.2f}" for k in kinds], f"{p.warm_s * 1e3:.2f}",
        )  # fmt: skip
    console.print(t)
