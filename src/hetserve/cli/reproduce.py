"""``hetserve reproduce``: the papers' evaluations, end to end."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from hetserve.cli.common import console, jobs_option, study_progress
from hetserve.cli.verdicts import reproduce_verdicts
from hetserve.experiments.studies import Study, get_study, run_study, study_names


@click.group()
def reproduce() -> None:
    """Reproduce a paper's evaluation on the simulator (results.json, report.html)."""


def _command(study: Study) -> click.Command:
    """The ``reproduce NAME`` command of a study: its declared options, then --quick,
    --seed, --jobs (where it runs in worker processes) and --out."""

    def callback(quick: bool, seed: int, out: str, jobs: int | None = None, **options: Any) -> None:
        with study_progress(*study.phases) as progress:
            _results, (path, report), tables = run_study(
                study, out, quick=quick, seed=seed, jobs=jobs_option(jobs) if study.parallel else 1,
                options=options, progress=progress,
            )  # fmt: skip
        for st in tables:
            t = Table(title=st.title)
            for n, col in enumerate(st.columns):
                t.add_column(col, justify="left" if n < st.left else "right")
            for row in st.rows:
                t.add_row(*row)
            console.print(t)
            for line in st.notes:
                console.print(line)
        console.print(f"wrote {path} and {report}")

    params: list[click.Parameter] = [click.Option(["--quick"], is_flag=True, help=study.quick_help)]
    for o in study.options:
        kind: Any = o.type
        if o.path is not None:
            kind = click.Path(exists=True, dir_okay=o.path == "dir", file_okay=o.path == "file")
        params.append(
            click.Option(
                [o.flag, o.dest],
                type=kind,
                multiple=o.multiple,
                default=o.default,
                show_default=o.default is not None,
                help=o.help,
            )
        )
    params.append(click.Option(["--seed"], type=int, default=0, show_default=True))
    if study.parallel:
        params.append(
            click.Option(
                ["--jobs"], type=int, default=None, help="Worker processes [default: all CPUs]."
            )
        )
    params.append(
        click.Option(
            ["--out"],
            required=True,
            type=click.Path(file_okay=False),
            help="Folder for results.json and report.html.",
        )
    )
    return click.Command(study.name, callback=callback, params=params, help=study.help)


for _name in study_names():
    reproduce.add_command(_command(get_study(_name)))
reproduce.add_command(reproduce_verdicts)  # (`reproduce verdicts`)
