"""``reproduce magicbatch``: MagicBatch section 5 as a study
(:mod:`hetserve.experiments.studies`)."""

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
    gpus_per_type: int | None,
    counts: str | None,
    duration_s: float | None,
) -> Any:
    from hetserve.experiments.magicbatch import study as S

    cfg = S.quick_config() if quick else S.MagicBatchConfig()
    changes: dict[str, Any] = {"seed": seed}
    if gpus_per_type is not None:
        changes["gpus_per_type"] = gpus_per_type
    if counts is not None:
        try:
            ns = tuple(int(v) for v in (x.strip() for x in counts.split(",")) if v)
        except ValueError:
            raise HetserveError(f"--streams: expected integers like 5,10, got {counts!r}") from None
        if not ns or min(ns) < 1 or max(ns) > 10_000:
            raise HetserveError(f"--streams: expected counts in 1..10000, got {counts!r}")
        changes["stream_counts"] = ns
        changes["capacity_counts"] = tuple(c for c in cfg.capacity_counts if c in ns) or (ns[-1],)
    if duration_s is not None:
        changes["duration_s"] = duration_s
        changes["capacity_duration_s"] = min(cfg.capacity_duration_s, duration_s)
    return dataclasses.replace(cfg, **changes)


def run(cfg: Any, jobs: int, progress: Progress) -> dict[str, Any]:
    from hetserve.experiments.magicbatch import study as S

    return S.run_study(cfg, progress=progress)


def write(results: dict[str, Any], out: str | Path) -> tuple[Path, Path]:
    from hetserve.experiments.magicbatch.report import write_magicbatch_report
    from hetserve.experiments.report import write_results

    return Path(write_results(results, out)), Path(write_magicbatch_report(results, out))


def summary(results: dict[str, Any], cfg: Any) -> list[SummaryTable]:
    from hetserve.experiments.magicbatch import study as S

    return [ours_vs_paper("MagicBatch", S.summary_rows(results))]


STUDY = register_study(
    Study(
        name="magicbatch",
        paper="MagicBatch",
        help="MagicBatch section 5: energy, throughput and latency vs batch size per GPU type "
        "(Fig. 2), the assignment methods (Fig. 5) and MagicBatch vs TF-Serving (Fig. 6).",
        quick_help="4 GPUs per type, 3-12 streams, 20 s points.",
        options=(
            StudyOption(
                "--gpus-per-type", "gpus_per_type", "GPUs of each of the three types [10; 4].", int
            ),
            StudyOption("--streams", "counts", "Comma-separated stream counts."),
            StudyOption("--duration", "duration_s", "Seconds per point.", float),
        ),
        configure=configure,
        run=run,
        write=write,
        summary=summary,
        phases=("planning", "simulating"),
    )
)
