"""``hetserve reproduce verdicts``: the headline comparisons over several seeds."""

from __future__ import annotations

import click
from rich.table import Table

from hetserve.cli.common import console, csv_list, jobs_option, study_progress
from hetserve.core.errors import HetserveError


@click.command("verdicts")
@click.option("--quick", is_flag=True, help="Every headline at a small scale (minutes).")
@click.option("--seeds", default="0,1,2", show_default=True, help="Comma-separated seeds (>= 2).")
@click.option("--jobs", type=int, default=None, help="Worker processes [default: all CPUs].")
@click.option("--out", required=True, type=click.Path(file_okay=False))
def reproduce_verdicts(quick: bool, seeds: str, jobs: int | None, out: str) -> None:
    """The headline comparisons of docs/reproduce.md over several seeds: both sides' mean
    and spread, and a verdict that calls a difference inside the spread a tie."""
    from hetserve.experiments import verdicts as V
    from hetserve.experiments.report import write_results

    try:
        ss = tuple(int(v) for v in csv_list(seeds))
    except ValueError:
        raise HetserveError(f"--seeds: expected integers like 0,1,2, got {seeds!r}") from None
    if len(ss) < 2 or len(set(ss)) != len(ss) or min(ss) < 0:
        raise HetserveError(f"--seeds: expected at least two distinct seeds >= 0, got {seeds!r}")
    cfg = V.quick_config(ss) if quick else V.VerdictConfig(seeds=ss)
    n_jobs = jobs_option(jobs)
    with study_progress("starting", "running") as progress:
        results = V.run_verdicts(cfg, jobs=n_jobs, progress=progress)
    path = write_results(results, out)
    t = Table(title=f"Headline comparisons over seeds {', '.join(map(str, ss))}: mean (min..max)")
    for col in ("compared", "A", "B", "A - B", "verdict"):
        t.add_column(col)
    for row in V.summary_rows(results):
        t.add_row(*row)
    console.print(t)
    console.print(f"wrote {path}")
