"""What every command module shares: the console, option parsers and validation, progress
bars, JSON output. It imports no command module (docs/design.md: the ``cli/`` package)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from hetserve.core.errors import HetserveError

if TYPE_CHECKING:
    from hetserve.core.models import ModelCatalog
    from hetserve.repository.models import ModelRepository

# Piped output (logs, CI, `| less`) gets wide tables instead of rich's 80-column default.
console = Console(width=None if sys.stdout.isatty() else 160)


def csv_list(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


INT_LIST_MAX = 4096  # batch sizes, shares: no list option needs more


def int_list(value: str, what: str) -> list[int]:
    """``1,2,4`` or ``1-8``."""
    out: list[int] = []
    try:
        for part in csv_list(value):
            if "-" in part:
                a, b = part.split("-", 1)
                lo, hi = int(a), int(b)
                if hi > INT_LIST_MAX or lo > hi:
                    raise HetserveError(
                        f"--{what}: a range must be LOW-HIGH with HIGH <= {INT_LIST_MAX}, "
                        f"got {part!r}"
                    )
                out.extend(range(lo, hi + 1))
            else:
                out.append(int(part))
    except ValueError:
        raise HetserveError(
            f"--{what}: expected integers like 1,2,4 or 1-8, got {value!r}"
        ) from None
    if not out or min(out) < 1 or max(out) > INT_LIST_MAX:
        raise HetserveError(f"--{what}: expected integers 1..{INT_LIST_MAX}, got {value!r}")
    return sorted(set(out))


@contextmanager
def progress_bar(label: str, total: int | None) -> Iterator[Callable[[], None]]:
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=not sys.stderr.isatty(),
    ) as p:
        task = p.add_task(label, total=total)
        yield lambda: p.advance(task)


def print_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, default=str))


def model_names(value: str, option: str = "--models") -> list[str]:
    """Comma-separated names of this command's models (:func:`model_catalog`; shipped ones
    case-insensitive), canonical; at least one."""
    names = csv_list(value)
    if not names:
        raise HetserveError(f"{option}: give at least one model name")
    catalog = model_catalog()
    return [catalog.graph(n).name for n in names]


def names_list(value: str, option: str) -> list[str]:
    """Comma-separated names; at least one."""
    names = csv_list(value)
    if not names:
        raise HetserveError(f"{option}: give at least one name, got {value!r}")
    return names


def report_error(message: str, status: int = 2) -> int:
    """One line on stderr, ``hetserve: error: ...``; the exit status to return."""
    first = " ".join(message.split())  # one line, whatever the message held
    click.echo(f"hetserve: error: {first}", err=True)
    return status


# ------------------------------------------------------------------ validation
#
# One layer for every command's numbers: ``harden`` (called once on the command tree)
# gives every float option a finite range and every count, size and seed an integer range,
# by option name, so that ``nan``, ``inf``, a negative seed or ``--blocks 0`` is a one-line
# usage error (exit 2) naming the option and the range — whatever the command.


class Finite(click.FloatRange):
    """A finite float (no nan or inf) within an optional range."""

    name = "finite number"

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        try:
            x = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number.", param, ctx)
        if not math.isfinite(x):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(x, param, ctx)


# The one table of ranges, keyed by an option's parameter name (what the command function
# receives): every float and integer option of every command has an entry here unless its
# declaration carries a click range of its own; tests/cli/test_cli_ranges.py ties the
# table to the options both ways (no option without a range, no entry without an option).
# option name -> (low, high, low open): bounds of float options
FLOAT_RANGES: dict[str, tuple[float | None, float | None, bool]] = {
    "duration_s": (0.0, 1e8, True),
    "serve_s": (0.0, 1e6, True),
    "slo_s": (0.0, 3600.0, True),
    "rate_rps": (0.0, 1e8, True),
    "bin_s": (0.0, 1e7, True),
    "slo_scale": (0.0, 1e4, True),
    "slo_margin": (0.0, 0.99, False),
    "time_limit_s": (0.0, 1e6, True),
    "mip_gap": (0.0, 1.0, False),
    "jitter_cv": (0.0, 10.0, False),
    "patience_s": (0.0, 1e6, True),
    "timeout_s": (0.0, 86400.0, True),  # bench: seconds to wait for the last answers
    "spin_ms": (0.0, 10.0, False),  # bench: how early the sender wakes before a send
    "solve_s": (0.0, 3600.0, False),
    "headroom": (0.0, 10.0, False),
    "hour_s": (0.0, 86400.0, True),
    "target": (0.0, 1.0, True),
    "resolution": (0.0, 1.0, True),
    "start_lf": (0.0, 100.0, True),
    "load_factor": (0.0, 100.0, True),
    "lf_step": (0.0, 1.0, True),
    "lf_max": (0.0, 100.0, True),
}
# option name -> (low, high): bounds of integer options
INT_RANGES: dict[str, tuple[int, int]] = {
    "seed": (0, 2**32 - 1),
    "n_blocks": (1, 1000),
    "batch": (1, 4096),
    "window": (1, 100_000),
    "n_streams": (1, 100_000),
    "random_n": (1, 10_000),
    "combos": (1, 288),
    "functions": (1, 1_000_000),
    "minutes": (1, 20_160),
    "warmup": (0, 10_000),
    "repeats": (1, 100_000),
    "max_stages": (1, 16),
    "jobs": (1, 256),
    "max_batch": (1, 1024),
    "pt_max": (1, 64),
    "gpus_per_type": (1, 1000),
    "g_max": (1, 1000),
    "case": (1, 4),
    "max_requests": (1, 100_000),
    "max_moving": (1, 10_000),
}


# commands that name models: ``--model-repository`` is added to each (``add_repository_option``)
MODEL_PARAMS = frozenset({"models", "name", "model"})


_CATALOG = "hetserve.model_catalog"  # the key of this invocation's catalog in ``ctx.meta``


def _use_repository(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value:
        from hetserve.core.models import ModelCatalog
        from hetserve.repository.models import ModelRepository

        ctx.meta[_CATALOG] = ModelCatalog(ModelRepository(value))


def model_catalog() -> ModelCatalog:
    """The models this command names: the zoo, and ``--model-repository``'s (made per
    invocation, kept in click's context: no module-level state)."""
    from hetserve.core.models import ZOO

    ctx = click.get_current_context(silent=True)
    found = ctx.meta.get(_CATALOG) if ctx is not None else None
    return found if found is not None else ZOO


def repository() -> ModelRepository | None:
    """This command's model repository (``--model-repository``), if any."""
    from hetserve.repository.models import ModelRepository

    source = model_catalog().source
    return source if isinstance(source, ModelRepository) else None


def add_repository_option(command: click.Command, under_model: bool = False) -> None:
    """Give every command of the tree that names models ``--model-repository DIR`` (also
    ``$HETSERVE_MODEL_REPOSITORY``): its models are then named like zoo models."""
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            add_repository_option(sub, under_model or name == "model")
        return
    names = {p.name for p in command.params}
    if not (names & {"models", "model"} or (under_model and "name" in names)):
        return
    command.params.insert(
        0,
        click.Option(
            ["--model-repository", "model_repository"],
            type=click.Path(file_okay=False),
            envvar="HETSERVE_MODEL_REPOSITORY",
            show_envvar=True,
            expose_value=False,
            callback=_use_repository,  # before the command's body resolves any name
            help="Model repository (Triton layout) whose models are named like zoo models.",
        ),
    )


def harden(command: click.Command) -> None:
    """Give the options of ``command`` and its subcommands their validated types."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            harden(sub)
    for p in command.params:
        name = p.name or ""
        if isinstance(p.type, click.types.FloatParamType) and not isinstance(p.type, Finite):
            old = p.type
            lo, hi, lo_open = FLOAT_RANGES.get(name, (None, None, False))
            if isinstance(old, click.FloatRange):
                lo, hi, lo_open = old.min, old.max, old.min_open
            p.type = Finite(lo, hi, min_open=lo_open)
        elif type(p.type) is click.types.IntParamType and name in INT_RANGES:
            lo_i, hi_i = INT_RANGES[name]
            p.type = click.IntRange(lo_i, hi_i)


def plan_scheduler(
    plan: Any, scheduler: str | None, params: Sequence[str], fallback: str
) -> tuple[str, dict[str, Any]]:
    """The scheduler and its parameters: ``--scheduler`` if given, else the one the plan
    names (with its parameters), else ``fallback``; ``--param`` on top."""
    from hetserve.scheduling.params import parse_params

    choice = plan.scheduler
    if scheduler is None and choice is not None:
        return choice.name, {**choice.params, **parse_params(params)}
    return scheduler or fallback, parse_params(params)


def jobs_option(jobs: int | None) -> int:
    """``--jobs``: worker processes, every CPU by default."""
    n = jobs if jobs is not None else (os.cpu_count() or 1)
    if n < 1:
        raise HetserveError(f"--jobs must be >= 1, got {n}")
    return n


@contextlib.contextmanager
def study_progress(first: str, running: str) -> Iterator[Callable[[str, int, int], None]]:
    """A progress bar on a terminal, a log line per finished job otherwise; yields the
    ``progress(message, done, total)`` callback the studies take (total 0: a message)."""
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[info]}"),
        console=Console(stderr=True),
        disable=not sys.stderr.isatty(),
    ) as prog:
        task = prog.add_task(first, total=None, info="")

        def progress(msg: str, k: int, n: int) -> None:
            if n:
                prog.update(task, description=running, total=n, completed=k, info=msg)
            else:
                prog.update(task, info=msg)
            if n and not sys.stderr.isatty():
                click.echo(f"[{k}/{n}] {msg}", err=True)

        yield progress
