"""``reproduce deepplan``: DeepPlan section 5 as a study
(:mod:`hetserve.experiments.studies`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

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
    layers_csv: str | None,
    cluster_name: str,
    trace: str | None,
    minutes: int | None,
) -> Any:
    from hetserve.core.layertable import read_layers_csv
    from hetserve.experiments.deepplan import study as S

    cfg = S.quick_config() if quick else S.DeepPlanConfig()
    changes: dict[str, Any] = {"seed": seed, "cluster": cluster_name}
    if layers_csv:
        read_layers_csv(layers_csv)  # a bad file fails now, with its line
        changes["layers_csv"] = layers_csv
    if trace:
        changes["fig15_trace"] = trace
    if minutes is not None:
        changes["fig15_minutes"] = minutes
    return dataclasses.replace(cfg, **changes)


def run(cfg: Any, jobs: int, progress: Progress) -> dict[str, Any]:
    from hetserve.experiments.deepplan import study as S

    return S.run_study(cfg, progress=progress)


def write(results: dict[str, Any], out: str | Path) -> tuple[Path, Path]:
    from hetserve.experiments.deepplan.report import write_deepplan_report
    from hetserve.experiments.report import write_results

    return Path(write_results(results, out)), Path(write_deepplan_report(results, out))


def summary(results: dict[str, Any], cfg: Any) -> list[SummaryTable]:
    from hetserve.experiments.deepplan import study as S

    return [ours_vs_paper("DeepPlan", S.summary_rows(results))]


STUDY = register_study(
    Study(
        name="deepplan",
        paper="DeepPlan",
        help="DeepPlan section 5: cold-start latency per load plan (Fig. 11, Tables 3 and 4), "
        "throughput during cold starts (Fig. 12), instances beyond GPU memory (Fig. 13) and an "
        "Azure Functions trace (Fig. 15).",
        quick_help="Fewer points and a 10-minute Fig. 15.",
        options=(
            StudyOption(
                "--layers",
                "layers_csv",
                "A layers.csv (measured or estimated) instead of the estimate.",
                path="file",
            ),
            StudyOption("--cluster", "cluster_name", "The cluster.", default="p3-8xlarge"),
            StudyOption(
                "--trace",
                "trace",
                "Fig. 15: an Azure Functions 2019 per-minute file (default: the synthetic twin).",
                path="file",
            ),
            StudyOption("--minutes", "minutes", "Fig. 15 length (default 180; 10 quick).", int),
        ),
        configure=configure,
        run=run,
        write=write,
        summary=summary,
        phases=("planning", "simulating"),
    )
)
