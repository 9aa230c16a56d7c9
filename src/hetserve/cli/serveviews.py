"""What ``hetserve serve`` prints: the start-up summary (models, plans, tensors, auth) and
the line at shutdown (requests by outcome)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hetserve.cli.common import console

if TYPE_CHECKING:
    from hetserve.engine.setup import Setup


def print_summary(
    server: Any, setup: Setup, scheduler: str, engine: str, host: str, port: int, http: Any
) -> None:
    from hetserve import __version__

    shown = f"[{host}]" if ":" in host else host
    n_workers = len(setup.placement.workers)
    many = len(setup.models) > 12  # model instances (bert-base@0..@199): a summary line
    listed = setup.models[:6] if many else setup.models
    names = ", ".join(listed) + (f" ... ({len(setup.models)} models)" if many else "")
    console.print(
        f"hetserve {__version__} serving {names} on {setup.cluster.name} "
        f"with {scheduler} ({engine} engine, {n_workers} worker(s)) at "
        f"http://{shown}:{port}/v2"
    )
    if many:
        console.print(f"  (the first {len(listed)} of {len(setup.models)} models:)")
    for m in listed:
        mp = setup.plan.models[m]
        pipes = []
        for p in mp.pipelines:
            stages = " -> ".join(
                f"blocks {s.blocks[0]}-{s.blocks[1]} on {s.instances}x {s.gpu}"
                + (f"/{s.share}" if s.share > 1 else "")
                for s in p.stages
            )
            pipes.append(f"[{stages}, batch {p.batch}]")
        t = server.tensors(m)
        ins = ", ".join(f"{s.name} {s.datatype}{[-1, *s.shape]}" for s in t.inputs)
        console.print(
            f"  {m}: SLO {mp.slo_s * 1e3:.1f} ms, input {ins}, up to {t.max_batch} rows per "
            f"request; {' '.join(pipes)}",
            markup=False,
        )
        meta = setup.graph(m).meta
        if meta.get("note"):
            console.print(f"  {m}: {meta['note']}", markup=False)
        if meta.get("batch_moved"):
            console.print(
                f"  {m}: the batch dimension of {meta['batch_moved']} is moved to the front "
                f"(each request gets its own slice)",
                markup=False,
            )
    auth = "none"
    if http.token is not None:
        public = [x for x, on in (("health", http.public_health), ("metrics", http.public_metrics))
                  if on]  # fmt: skip
        auth = "bearer token" + (f" ({' and '.join(public)} public)" if public else "")
    console.print(
        f"  auth: {auth}; admission {'on' if server.cfg.admission else 'off'}; max pending "
        f"{server.cfg.max_pending}; metrics at /metrics; SIGTERM or Ctrl+C drains and stops",
        markup=False,
    )
    spec = server.control_spec
    if spec is not None:
        c = spec.config
        console.print(
            f"  re-planning: {server.cfg.replan}, switches {c.switch} (at most {c.max_parallel} "
            f"workers loading at once); GET /v2/control, POST /v2/control/plan, "
            f"POST /v2/repository/models/M/load|unload",
            markup=False,
        )


def print_shutdown(server: Any, sig: str | None) -> None:
    get = server.metrics.registry.get_sample_value
    counts: dict[str, int] = {}
    rows = 0
    for m in server.setup.models:
        for outcome in ("ok", "late", "dropped", "refused", "overloaded", "failed", "cancelled"):
            v = get("hetserve_requests_total", {"model": m, "outcome": outcome}) or 0
            counts[outcome] = counts.get(outcome, 0) + int(v)
            rows += int(get("hetserve_rows_total", {"model": m, "outcome": outcome}) or 0)
    total = sum(counts.values())
    parts = ", ".join(f"{k} {v}" for k, v in counts.items() if v)
    console.print(
        f"hetserve: stopped{f' ({sig})' if sig else ''}; {total} requests ({rows} rows)"
        + (f"; {parts}" if parts else "")
        + "; workers released",
        markup=False,
    )
