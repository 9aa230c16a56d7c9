"""Studies by name: each paper's evaluation as one :class:`Study`, run by ``hetserve
reproduce NAME``.

A study declares its options (:class:`StudyOption`; the CLI turns them into command-line
options, so a study module needs no CLI code), how they make its configuration, how it runs
and writes ``results.json`` and ``report.html``, and the summary printed at the end. Every
study takes ``--quick``, ``--seed`` and ``--out``, and ``--jobs`` where it runs in worker
processes. A new paper adds a module with a ``STUDY`` and one line in :data:`BUILTIN`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetserve.core.errors import HetserveError
from hetserve.core.registry import Registry

#: ``progress(message, done, total)`` (total 0: a message only)
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class StudyOption:
    """One option of a study: ``--flag`` on the command line, ``dest`` in ``configure``'s
    keyword arguments (None when not given, or a tuple when ``multiple``)."""

    flag: str
    dest: str
    help: str
    type: type = str  # str, int or float
    multiple: bool = False
    default: Any = None
    path: str | None = None  # "dir" or "file": an existing path


@dataclass(frozen=True)
class SummaryTable:
    """A table printed after a run, and lines printed under it."""

    title: str
    columns: tuple[str, ...]
    rows: list[tuple[str, ...]]
    notes: list[str] = field(default_factory=list)
    left: int = 1  # the first ``left`` columns are labels, the rest numbers


@dataclass(frozen=True)
class Study:
    """A paper's evaluation. ``configure(quick, seed, **options)`` returns the study's
    configuration (a one-line ``HetserveError`` naming the option on bad input);
    ``run(config, jobs, progress)`` its results; ``write(results, out)`` the paths of
    ``results.json`` and ``report.html``; ``summary(results, config)`` the tables printed."""

    name: str
    paper: str
    help: str
    quick_help: str
    options: tuple[StudyOption, ...]
    configure: Callable[..., Any]
    run: Callable[[Any, int, Progress], dict[str, Any]]
    write: Callable[[dict[str, Any], str | Path], tuple[Path, Path]]
    summary: Callable[[dict[str, Any], Any], list[SummaryTable]]
    parallel: bool = False  # takes --jobs
    phases: tuple[str, str] = ("starting", "simulating")  # progress labels: before, during


#: the built-in studies: name -> the module whose import registers it (its ``STUDY``)
BUILTIN: dict[str, str] = {
    "ppipe": "hetserve.experiments.ppipe.recipe",
    "shepherd": "hetserve.experiments.shepherd.recipe",
    "deepplan": "hetserve.experiments.deepplan.recipe",
    "magicbatch": "hetserve.experiments.magicbatch.recipe",
    "rampa": "hetserve.experiments.rampa.recipe",
    "control": "hetserve.experiments.control.recipe",
}
#: studies by name (``core.registry``: the one registry shape)
STUDIES: Registry[Study] = Registry("study", BUILTIN)


def register_study(study: Study) -> Study:
    """Register ``study`` under its name (a recipe module: ``STUDY = register_study(...)``)."""
    return STUDIES.register(study.name, study)


def study_names() -> list[str]:
    """The built-ins in their order, then those registered since."""
    return [*BUILTIN, *(n for n in STUDIES.names() if n not in BUILTIN)]


def get_study(name: str) -> Study:
    """The study called ``name`` (an unknown name fails with the known ones)."""
    return STUDIES.get(name)


def run_study(
    study: Study,
    out: str | Path,
    *,
    quick: bool = False,
    seed: int = 0,
    jobs: int = 1,
    options: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
) -> tuple[dict[str, Any], tuple[Path, Path], list[SummaryTable]]:
    """Configure, run and write a study: (results, (results.json, report.html), summary)."""
    known = {o.dest for o in study.options}
    extra = set(options or {}) - known
    if extra:
        raise HetserveError(f"study {study.name}: unknown options {', '.join(sorted(extra))}")
    cfg = study.configure(quick, seed, **{k: (options or {}).get(k) for k in known})
    results = study.run(cfg, jobs, progress or (lambda msg, k, n: None))
    paths = study.write(results, out)
    return results, paths, study.summary(results, cfg)


def ours_vs_paper(paper: str, rows: list[tuple[str, str, str]]) -> SummaryTable:
    """The table of a study's headline figures against the paper's."""
    return SummaryTable(
        f"{paper} reproduction: ours vs the paper", ("metric", "hetserve", "paper"), rows
    )
