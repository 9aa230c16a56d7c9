"""What ``hetserve plan`` prints: a table chosen by what the plan holds (load plans,
stream assignments, placements in a switched cluster, serving groups, pipelines), so a new
planner needs no printing code of its own."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from hetserve.cli.common import console
from hetserve.cli.views import print_load_plans, print_plan


def print_plan_result(res: Any, cluster: Any, output: str) -> None:
    p, d = res.plan, res.details
    planner = p.meta.get("planner", "?")
    solve = p.meta.get("solve", {})
    if p.load_plans and "every" in d:
        n = solve.get("parallelism", 1)
        print_load_plans(
            d["every"], d["kind"],
            f"DeepPlan load plans on {solve.get('gpu')} (batch {d['batch']}; parallel "
            f"transmission over {n} GPU{'s' if n != 1 else ''})",
        )  # fmt: skip
        console.print(f"load plans of kind {d['kind']}")
    elif p.assignments and "streams" in d:
        _print_assignments(p, d, cluster, output)
    elif p.binding is not None and "placed" in d:
        _print_placements(p, d, cluster, output)
    else:
        title = f"{planner} plan for {cluster.name}"
        if p.groups:
            title += ": " + "; ".join(
                f"{g.name} = {g.gpus} x {g.gpu} serving {', '.join(g.models)}" for g in p.groups
            )
        print_plan(p, title)
        obj = p.meta.get("objective", {})
        bits = []
        if "normalized_rps" in obj:
            bits.append(f"normalised throughput {obj['normalized_rps']:.1f} req/s")
        if "cost_per_hour" in obj:
            from hetserve.core.placement import gpus_needed

            took = gpus_needed(p, cluster.catalog)
            bits.append(
                (
                    f"cost ${obj['cost_per_hour']:.2f} per hour for "
                    if obj.get("cost_unit") == "USD"
                    else f"cost {obj['cost_per_hour']:.2f} GPU-hours per hour for "
                )
                + ", ".join(f"{n} {t}" for t, n in took.items())
                + f" (rates + {100 * obj.get('headroom', 0):.0f}% headroom)"
            )
        if "watts" in obj:
            from hetserve.core.placement import gpus_needed

            took = gpus_needed(p, cluster.catalog)
            bits.append(
                f"power {obj['watts']:.1f} W ({obj['joules_per_request']:.4f} J per request) "
                f"for "
                + ", ".join(f"{n} {t}" for t, n in took.items())
                + f" (rates + {100 * obj.get('headroom', 0):.0f}% headroom)"
            )
        if "min_burst_tolerance" in obj:
            bits.append(f"smallest burst tolerance {obj['min_burst_tolerance']:.2f}")
        if "status" in solve:
            extra = f" (gap {100 * solve['gap']:.3f}%, {solve['candidates']} candidate " \
                    f"pipelines)" if "candidates" in solve else ""  # fmt: skip
            bits.append(f"solver {solve['status']} in {solve['seconds']:.2f} s{extra}")
        if bits:
            console.print("; ".join(bits))


def _print_assignments(p: Any, d: dict[str, Any], cluster: Any, output: str) -> None:
    streams, a = d["streams"], d["assignment"]
    t = Table(title=f"MagicBatch ({d['method']}) on {cluster.name}: {len(a.gpu_of)} of "
                    f"{len(streams)} streams placed")  # fmt: skip
    for col in ("stream", "model", "req/s", "deadline ms", "GPU", "batch", "latency ms",
                "J/request"):  # fmt: skip
        t.add_column(col, justify="left" if col in ("stream", "model", "GPU") else "right")
    for s in streams[:50]:
        r = p.assignments[s.name]
        t.add_row(s.name, s.model, f"{s.rate_rps:g}", f"{s.deadline_s * 1e3:g}",
                  r.gpu or f"rejected: {r.rejected}", str(r.batch or "-"),
                  f"{r.latency_s * 1e3:.1f}" if r.gpu else "-",
                  f"{r.energy_j:.3f}" if r.gpu else "-")  # fmt: skip
    console.print(t)
    if len(streams) > 50:
        console.print(f"(the first 50 of {len(streams)} streams; all are in {output})")
    o = p.meta["objective"]
    console.print(
        f"busy power {o['busy_power_w']:.1f} W; with idle GPUs "
        f"{'parked' if d['park_idle'] else 'idling'} {o['total_power_w']:.1f} W; "
        f"{o['placed']} placed, {o['rejected']} rejected"
    )


def _print_placements(p: Any, d: dict[str, Any], cluster: Any, output: str) -> None:
    placed = d["placed"]
    print_placements(placed, d["net"], f"{p.meta['planner']} on {cluster.name}", output)
    failed = d["failed"]
    console.print(
        f"request {len(placed) + 1} ({failed}) could not be placed" if failed
        else f"all {d['requests']} requests placed"
    )  # fmt: skip


def print_placements(placed: Any, net: Any, title: str, output: str) -> None:
    """RAMPA's placements, a row each (the first 60): stages, GPUs (type@rack), path hops,
    estimated throughput and latency against the requirement, cost."""
    t = Table(title=f"{title}: {len(placed)} services placed")
    for col in ("#", "service", "model", "stages", "GPUs", "hops", "tps est / req",
                "latency ms est / req", "cost"):  # fmt: skip
        t.add_column(col, justify="left" if col in ("service", "model", "GPUs") else "right")
    for i, x in enumerate(placed[:60]):
        gpus = ", ".join(f"{net.gpus[g].type}@{net.gpus[g].rack}" for g in x.gpus)
        hops = ",".join(str(len(y)) for y in x.paths) or "-"
        t.add_row(str(i + 1), x.service.name, x.service.model, str(x.stages), gpus, hops,
                  f"{x.est.throughput_tps:.2f} / {x.service.throughput_tps:g}",
                  f"{x.est.latency_s * 1e3:.1f} / {x.service.latency_s * 1e3:g}",
                  f"{x.cost:.3g}")  # fmt: skip
    console.print(t)
    if len(placed) > 60:
        console.print(f"(the first 60 of {len(placed)}; all are in {output})")
