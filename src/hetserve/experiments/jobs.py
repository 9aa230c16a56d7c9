"""Running a study's independent jobs in worker processes, with progress."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import TypeVar

A = TypeVar("A")
R = TypeVar("R")


def parallel_map(
    fn: Callable[[A], R],
    items: Sequence[A],
    jobs: int = 1,
    progress: Callable[[str, int, int], None] | None = None,
    label: Callable[[R], str] = str,
) -> list[R]:
    """``fn`` over ``items`` in ``jobs`` processes (in this one when ``jobs <= 1``; ``fn``
    must then be a module-level function); results in the order they finish, each reported
    as ``progress(label(result), done, total)``. Workers are started by a fork server, so
    ``fn`` and its arguments must pickle (module-level functions, plain data)."""
    out: list[R] = []

    def note(r: R) -> None:
        out.append(r)
        if progress:
            progress(label(r), len(out), len(items))

    if jobs <= 1:
        for a in items:
            note(fn(a))
    else:
        # forkserver, not fork: a process that has run HiGHS (1.16 keeps a thread pool)
        # can deadlock a forked child's next solve; the workers start from a clean server
        ctx = multiprocessing.get_context("forkserver")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as ex:
            for fut in as_completed([ex.submit(fn, a) for a in items]):
                note(fut.result())
    return out
