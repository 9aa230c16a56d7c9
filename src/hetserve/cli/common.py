"""What every command module shares: the console, option parsers and validation, progress
bars, JSON output. It imports no command module (DESIGN.md: the ``cli/`` package)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from hetserve.core.errors import HetserveError

# Piped output (logs, CI, `| less`) gets wide tables instead of rich's 80-column default.
console = Console(width=None if sys.stdout.isatty() else 160)


def csv_list(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def int_list(value: str, what: str) -> list[int]:
    """``1,2,4`` or ``1-8``."""
    out: list[int] = []
    try:
        for part in csv_list(value):
            if "-" in part:
                a, b = part.split("-", 1)
                out.extend(range(int(a), int(b) + 1))
            else:
                out.append(int(part))
    except ValueError:
        raise HetserveError(
            f"--{what}: expected integers like 1,2,4 or 1-8, got {value!r}"
        ) from None
    if not out or min(out) < 1:
        raise HetserveError(f"--{what}: expected integers >= 1, got {value!r}")
    return sorted(set(out))


@contextmanager
def progress_bar(label: str, total: int) -> Iterator[Callable[[], None]]:
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


def report_error(message: str, status: int = 2) -> int:
    """One line on stderr, ``hetserve: error: ...``; the exit status to return."""
    first = " ".join(message.split())  # one line, whatever the message held
    click.echo(f"hetserve: error: {first}", err=True)
    return status
