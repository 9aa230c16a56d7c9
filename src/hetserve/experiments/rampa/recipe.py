"""``reproduce rampa``: RAMPA section V as a study (:mod:`hetserve.experiments.studies`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from hetserve.core.errors import HetserveError
from hetserve.experiments.studies import (
    Progress,
    Study,
    StudyOption,
    SummaryTable,
    ours_vs_paper,
    register_study,
)


def configure(
    quick: bool,
    seed: int,
    *,
    clusters: str | None,
    cases: str | None,
    combos: int | None,
    max_requests: int,
    serve_s: float | None,
) -> Any:
    from hetserve.core.presets import load_cluster
    from hetserve.experiments.rampa import study as S
    from hetserve.planning.rampa.network import RampaNet

    cfg = S.quick_config() if quick else S.RampaConfig()
    changes: dict[str, Any] = {"seed": seed, "max_requests": max_requests}
    if clusters is not None:
        names = tuple(v.strip() for v in clusters.split(",") if v.strip())
        for n in names:
            load_cluster(n)  # an unknown name fails here with the known ones listed
        if not names:
            raise HetserveError("--clusters: expected at least one cluster")
        changes["clusters"] = names
    if cases is not None:
        try:
            ks = tuple(int(v) for v in (x.strip() for x in cases.split(",")) if v)
        except ValueError:
            raise HetserveError(f"--cases: expected integers like 1,3, got {cases!r}") from None
        if not ks or not set(ks) <= {1, 2, 3, 4}:
            raise HetserveError(f"--cases: expected cases among 1..4, got {cases!r}")
        changes["cases"] = ks
    if combos is not None:
        changes["combos"] = combos
    if serve_s is not None:
        changes["serve_s"] = serve_s
    cfg = dataclasses.replace(cfg, **changes)
    for c in cfg.clusters:
        RampaNet.of(load_cluster(c))  # a cluster RAMPA cannot use fails before the runs
    return cfg


def run(cfg: Any, jobs: int, progress: Progress) -> dict[str, Any]:
    from hetserve.experiments.rampa import study as S

    return S.run_study(cfg, jobs=jobs, progress=progress)


def write(results: dict[str, Any], out: str | Path) -> tuple[Path, Path]:
    from hetserve.experiments.rampa.report import write_rampa_report
    from hetserve.experiments.report import write_results

    return Path(write_results(results, out)), Path(write_rampa_report(results, out))


def summary(results: dict[str, Any], cfg: Any) -> list[SummaryTable]:
    from hetserve.experiments.rampa import study as S

    rows = []
    for c, per in results["fig7"].items():
        for k, e in per.items():
            rows.append((c, results["cases"][k], str(e["rampa"]),
                         *(f"{e[m]['best']} / {e[m]['mean']:.1f} / {e[m]['worst']}"
                           for m in ("ncar", "pe"))))  # fmt: skip
    cols = ("cluster", "case", "RAMPA", "NCAR best / mean / worst", "PE best / mean / worst")
    return [
        SummaryTable("RAMPA reproduction: services placed (Fig. 7)", cols, rows, left=2),
        ours_vs_paper("RAMPA", S.summary_rows(results)),
    ]


STUDY = register_study(
    Study(
        name="rampa",
        paper="RAMPA",
        help="RAMPA section V: services placed by RAMPA, PE and NCAR over Table IX's stage-count "
        "combinations (Fig. 7), RAMPA's stage counts (Fig. 8), throughput and latency estimated "
        "and served (Figs. 9-10) and placement time (Fig. 11).",
        quick_help="Base and high-perf clusters, cases 1 and 3, 4 combinations.",
        options=(
            StudyOption("--clusters", "clusters", "Comma-separated switched clusters [all four]."),
            StudyOption("--cases", "cases", "Comma-separated demand cases 1..4 [all]."),
            StudyOption(
                "--combos",
                "combos",
                "Sample this many of the 288 stage-count combinations for PE and NCAR [all; 4].",
                int,
            ),
            StudyOption(
                "--max-requests", "max_requests", "Requests placed per sequence.", int, default=2000
            ),
            StudyOption("--serve", "serve_s", "Seconds served [20; 5].", float),
        ),
        configure=configure,
        run=run,
        write=write,
        summary=summary,
        parallel=True,
        phases=("starting", "placing"),
    )
)
