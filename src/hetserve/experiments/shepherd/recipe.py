"""``reproduce shepherd``: Shepherd section 7 as a study
(:mod:`hetserve.experiments.studies`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from hetserve.core.errors import HetserveError
from hetserve.experiments.studies import Progress, Study, StudyOption, SummaryTable, register_study


def _numbers(opt: str, text: str, conv: type) -> tuple[Any, ...]:
    try:
        vals = tuple(conv(x) for x in (v.strip() for v in text.split(",")) if x)
    except ValueError:
        raise HetserveError(f"{opt}: expected comma-separated numbers, got {text!r}") from None
    if not vals or min(vals) <= 0:
        raise HetserveError(f"{opt}: expected positive numbers, got {text!r}")
    return vals


def configure(
    quick: bool,
    seed: int,
    *,
    duration_s: float | None,
    loads: str | None,
    workers: str | None,
    n_streams: int | None,
) -> Any:
    from hetserve.experiments.shepherd import study as S

    cfg = S.quick_config() if quick else S.ShepherdConfig()
    changes: dict[str, Any] = {"seed": seed}
    if duration_s is not None:
        changes["duration_s"] = duration_s
    if loads is not None:
        changes["loads_rps"] = _numbers("--loads", loads, float)
    if workers is not None:
        changes["workers"] = _numbers("--workers", workers, int)
    if n_streams is not None:
        changes["n_streams"] = n_streams
    return dataclasses.replace(cfg, **changes)


def run(cfg: Any, jobs: int, progress: Progress) -> dict[str, Any]:
    from hetserve.experiments.shepherd import study as S

    return S.run_study(cfg, jobs=jobs, progress=progress)


def write(results: dict[str, Any], out: str | Path) -> tuple[Path, Path]:
    from hetserve.experiments.shepherd import study as S
    from hetserve.experiments.shepherd.report import write_shepherd_report

    return Path(S.write_results(results, out)), Path(write_shepherd_report(results, out))


def summary(results: dict[str, Any], cfg: Any) -> list[SummaryTable]:
    from hetserve.experiments.shepherd import study as S

    two = results["summary"]["two_stream"]
    off = results["offline_optimum"]["flex"]
    notes = [
        f"two streams: preemption at 90 ms {two['preemption_90ms_first_burst']:.2f}x on the "
        f"first burst ({two['preemption_90ms_whole']:.2f}x over the run; paper 6.2x), "
        f"prioritisation at 250 ms {two['prioritisation_250ms_whole']:.2f}x (paper 3.7x)",
        f"FLEX vs the offline optimum: {100 * off['served_over_optimum']:.1f}% of the optimal "
        f"goodput over {off['instances']} instances, worst ratio {off['worst_ratio']:.2f} "
        f"(bound 12.62)",
    ]
    cols = ("workload", "offered", *S.SCHEDULERS, "FLEX/Clockwork", "FLEX/Nexus", "FLEX >= both")
    title = f"Shepherd reproduction: goodput (req/s) at the highest load, {cfg.duration_s:g} s"
    return [SummaryTable(title, cols, list(S.summary_rows(results)), notes)]


STUDY = register_study(
    Study(
        name="shepherd",
        paper="Shepherd",
        help="Shepherd section 7: goodput and utilisation vs load for flex, clockwork and nexus "
        "(MAF-stable and MAF-bursty), goodput vs SLO, the preemption and prioritisation "
        "ablation, FLEX against the offline optimum, and scaling with HERD serving groups.",
        quick_help="Three loads, three SLOs, 12 and 48 workers, 20 s.",
        options=(
            StudyOption("--duration", "duration_s", "Seconds per point [120; 20].", float),
            StudyOption(
                "--loads", "loads", "Comma-separated offered loads in req/s [2000,...,14000]."
            ),
            StudyOption(
                "--workers", "workers", "Comma-separated worker counts for scaling [12,...,400]."
            ),
            StudyOption("--streams", "n_streams", "MAF streams [2000; 500].", int),
        ),
        configure=configure,
        run=run,
        write=write,
        summary=summary,
        parallel=True,
        phases=("starting", "simulating"),
    )
)
