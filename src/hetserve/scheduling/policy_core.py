# cython: annotation_typing=False
"""A compiled scheduler's core as the compiled kernel calls it (issue 41): arrivals and
stage reports as C calls, a stage report as its fields, no ``StageReport`` made.

The Scheduler protocol (``scheduling/protocol.py``) is the seam between every policy and
both engines: ``on_arrival(request, now)``, ``on_stage_done(report, now)``, each a Python
call, each report a record of fifteen fields. Where a scheduler hands those two calls to a
compiled core of its own (``reservation``'s ``Algorithm1``, ``coldstart``'s
``ColdStartCore``: each binds the core's methods as its own after ``start``), the core is a
:class:`PolicyCore`, and the kernel (``engine/kernel_core.py``) asks :func:`core_of` for
it once the scheduler has started. It then calls the core's :meth:`PolicyCore.on_arrival`
as a C method (and its :meth:`PolicyCore.on_timer`, where the scheduler's timers are the
core's own too: :func:`timer_core_of`), and after a stage that completed or a load that ended,
:meth:`PolicyCore.stage_report` with the report's fields, as C values where they are
numbers, instead of making the report and calling ``on_stage_done`` through Python. A
report that is made anyway (a stopped batch's; any report where the driver's observer asks
to see it) goes through
:meth:`PolicyCore.on_stage_done`, which is ``stage_report`` of its fields: one body for
both, so the two calls cannot differ (``tests/scheduling/test_policy_core.py`` runs the
schedulers both ways and compares every result).

A scheduler written in plain Python is called through the protocol as before, and so is
everything on a server (``strict=False``: its guards call the protocol's methods).

This file is plain Python and runs as it is. Where the package was built with Cython
(``setup.py``; ``policy_core_c.pxd`` beside it declares the C types), the same file is also
compiled as ``hetserve.scheduling.policy_core_c``; the compiled kernel and cores cimport
that one, and the Python files import this one: each build pairs with its own.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import MethodType
from typing import Any

try:  # (Cython reads ``cython.compiled`` as True in the build it makes of this file)
    import cython
except ImportError:  # (plain Python, without Cython installed)
    from hetserve.core.records import NO_CYTHON as cython
if not cython.compiled:  # (compiled: the C its .pxd cimports)
    from hetserve.core.records import fields

__all__ = ["LAYOUT", "PolicyCore", "core_of", "timer_core_of"]

_NAN = math.nan  # (a report's transfer times where it has none: ``stage_report``)

#: what a build that ``cimport``s this one was made against (``core.compiled``): this
#: file (its ``on_stage_done`` is compiled into the class the cores derive from) and its
#: C types
LAYOUT = (Path(__file__).with_name("policy_core.py"), Path(__file__).with_name("policy_core_c.pxd"))


class PolicyCore:
    """The per-request calls of a scheduler's compiled core (module docstring). A core
    implements :meth:`on_arrival` and :meth:`stage_report`; it does not override
    :meth:`on_stage_done` (:func:`core_of` takes no core that does: the kernel would not
    call it).

    ``plain``: the kernel raises it just before each C call it makes (its arrivals, timers
    and stage reports); the core lowers it before that call returns (``reservation``'s as
    it takes the call, ``coldstart``'s in a ``finally``), and in that call only may give a
    dispatch as a plain tuple of a ``Dispatch``'s fields, its route a tuple of plain
    tuples of a ``RouteStep``'s (the kernel's ``_apply_core`` reads them; its
    ``Batch.d``, ``Batch.route`` and ``Task.step`` make the NamedTuples where Python reads
    them). Any other caller, the flag lowered, gets the NamedTuples: what the protocol
    says. A core that makes no plain tuples may leave the flag as it is.

    ``worker_keys``: None, or, for each of :meth:`worker_names` in its order, what the
    kernel gave for it (its own object for that worker, or the name again where it has
    none): in a plain dispatch's route, a core whose numbers these are may put a step's
    key in place of its worker's name, so that the kernel finds the worker without
    looking the name up (``Kernel.bind_core`` sets them; the NamedTuples always carry
    names)."""

    def __init__(self) -> None:
        self.plain = False
        self.worker_keys = None

    def worker_names(self) -> list | None:
        """The names of this core's resources by its numbers, where its plain dispatches
        can carry :attr:`worker_keys` in place of workers' names (None: they carry names).
        Read once, when the kernel takes the core."""
        return None

    def on_arrival(self, request: Any, now: float) -> list:
        """The Scheduler protocol's ``on_arrival``: the actions it takes (a list, maybe
        empty)."""
        raise NotImplementedError

    def on_timer(self, token: Any, now: float) -> list:
        """The Scheduler protocol's ``on_timer``: the actions it takes (a list, maybe
        empty). A core that answers its scheduler's timers implements it (the kernel calls
        it as a C method where :func:`timer_core_of` finds it)."""
        raise NotImplementedError

    def stage_report(
        self,
        kind: str,
        batch_id: int,
        model: str,
        stage: int,
        worker: str,
        start_s: float,
        end_s: float,
        requests: tuple,
        completed: bool,
        last: bool,
        reason: str,
        blocks: tuple[int, int],
        blocks_done: int,
        transfer_start_s: float,
        transfer_end_s: float,
        now: float,
    ) -> list | None:
        """``on_stage_done`` of the report with these fields (``StageReport``'s, in its
        order), at ``now``: the actions it takes (None: none, as ``[]``); the transfer's
        start and end are NaN where the report's are None (the kernel keeps them as C
        doubles: ``Task.xfer_start_s``). The kernel calls this itself after a stage
        completed, without making the report."""
        raise NotImplementedError

    def on_stage_done(self, report: Any, now: float) -> list:
        """The Scheduler protocol's ``on_stage_done``: :meth:`stage_report` of the
        report's fields."""
        (kind, bid, model, stage, worker, start_s, end_s, requests, completed, last,
         reason, blocks, blocks_done, xs, xe) = fields(report)  # fmt: skip
        acts = self.stage_report(
            kind, bid, model, stage, worker, start_s, end_s, requests, completed, last,
            reason, blocks, blocks_done, _NAN if xs is None else xs,
            _NAN if xe is None else xe, now,
        )  # fmt: skip
        return acts if acts is not None else []


def core_of(scheduler: Any) -> PolicyCore | None:
    """The :class:`PolicyCore` that answers ``scheduler``'s arrivals and stage reports
    itself, or None: its ``on_arrival`` and ``on_stage_done`` are one core's own bound
    methods (as ``reservation`` and ``coldstart`` bind them after ``start``), and that
    core's class keeps :meth:`PolicyCore.on_stage_done` (the kernel calls
    :meth:`PolicyCore.stage_report` in its place). A scheduler that wraps its core in a
    method of its own, or any other, is called through the protocol."""
    arrival = scheduler.on_arrival
    if type(arrival) is not MethodType:
        return None
    core = arrival.__self__
    if not isinstance(core, PolicyCore):
        return None
    if type(core).on_stage_done is not PolicyCore.on_stage_done:
        return None
    if arrival != core.on_arrival or scheduler.on_stage_done != core.on_stage_done:
        return None
    return core


def timer_core_of(scheduler: Any) -> PolicyCore | None:
    """The :class:`PolicyCore` whose own bound ``on_timer`` is ``scheduler``'s (as
    ``reservation`` binds its core's after ``start``), or None: the kernel then calls that
    core's :meth:`PolicyCore.on_timer` as a C method, where a wake-up timer fires, instead
    of the scheduler's ``on_timer`` through Python. Apart from :func:`core_of`: a
    scheduler may hand its timers to a core and keep its arrivals, or the other way."""
    timer = scheduler.on_timer
    if type(timer) is not MethodType:
        return None
    core = timer.__self__
    if not isinstance(core, PolicyCore) or timer != core.on_timer:
        return None
    return core
