# cython: annotation_typing=False
"""What the simulator's recorder (``sim.result.Recorder``, the kernel's observer) does at
each event: per request its times, outcome, reason and batch, in C arrays indexed by
request id (``array.array``: an element is a C value, set much more cheaply than a NumPy
array's from here; they become NumPy arrays in the result); one row per stage execution
as it ends, its fields in columns of the same kind; per worker its busy time and busy
energy, by the worker's index.

This file is plain Python and runs as it is. Where the package was built with Cython
(``setup.py``; ``recorder_core_c.pxd`` beside it declares the C types, the kernel's
entities' among them), the same file is also compiled as ``hetserve.sim.recorder_core_c``,
and ``sim.result`` takes that one where the kernel's entities are compiled too
(``HETSERVE_PURE_PYTHON=1`` keeps this file). Both give the same results."""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hetserve.core.outcome import PENDING

try:  # (Cython reads ``cython.compiled`` as True in the build it makes of this file)
    import cython
except ImportError:  # (plain Python, without Cython installed)
    from hetserve.core.records import NO_CYTHON as cython
if not cython.compiled:  # (compiled: these are the C its .pxd cimports)
    from hetserve.core.records import REQUEST_ID, STEP_BLOCKS, STEP_STAGE, field, put
    from hetserve.engine.entities import ObserverCore

if TYPE_CHECKING:  # (a module, not its names: the compiled build takes those typed)
    from hetserve.core.requests import Request
    from hetserve.engine import entities

FINISHED = -1  # (while running: finished, ok or late not yet told apart)
_COMPLETED = "completed"  # (a stage's status as the kernel gives it)
_NAN = math.nan  # (a C double compiled)


class Ledger(ObserverCore):
    """The per-event part of the recorder (module docstring), for ``n`` requests whose
    routes have up to ``stages`` stages: an ``ObserverCore``, whose methods the compiled
    kernel calls as C methods."""

    def __init__(self, n: int, stages: int = 1) -> None:
        nan = math.nan
        # per stage row (``SimResult.stage_rows``' fields), in the order the stages end:
        # the numbers in C arrays (a transfer time NaN where there was none) and the names
        # in lists, ``n_rows`` of each used; room for a row per stage of every request
        # made at once (a run with more rows, a new plan's or retried stages, grows them
        # by doubling: each column copied whole)
        self.n_rows = 0
        cap = n * max(stages, 1) + 16
        self.row_batch = array("q", [0]) * cap
        self.row_stage = array("q", [0]) * cap
        self.row_size = array("q", [0]) * cap
        self.row_start_s = array("d", [nan]) * cap
        self.row_end_s = array("d", [nan]) * cap
        self.row_xfer_start_s = array("d", [nan]) * cap
        self.row_xfer_end_s = array("d", [nan]) * cap
        self.row_dispatch_s = array("d", [nan]) * cap
        # (the names' lists made as long as the arrays and set by index, as they are: a
        # list grown by appends is copied whole at each of its reallocations)
        self.row_model: list[str | None] = [None] * cap
        self.row_worker: list[str | None] = [None] * cap
        self.row_gpu: list[str | None] = [None] * cap
        self.row_status: list[str | None] = [None] * cap
        # per request, by its id: C arrays (``array.array``s, typed memoryviews of them in
        # the compiled build), no Python object per value to make, convert or free
        self.dispatch_s = array("d", [nan]) * n
        self.start_s = array("d", [nan]) * n
        self.finish_s = array("d", [nan]) * n
        self.outcome = array("b", [PENDING]) * n
        self.reason = array("h", [0]) * n
        self.batch_of = array("q", [-1]) * n
        self.reasons: list[str] = [""]
        self._reason_idx: dict[str, int] = {"": 0}
        # per worker, by its index (``Slot.index``): C arrays too (``size`` makes room)
        self.busy_s = array("d")
        self.busy_energy_j = array("d")

    def _grow(self) -> None:
        """Twice the room for stage rows (each column's bytes copied whole)."""
        more = len(self.row_batch)
        nan = math.nan
        self.row_batch = array("q", bytes(self.row_batch)) + array("q", [0]) * more
        self.row_stage = array("q", bytes(self.row_stage)) + array("q", [0]) * more
        self.row_size = array("q", bytes(self.row_size)) + array("q", [0]) * more
        self.row_start_s = array("d", bytes(self.row_start_s)) + array("d", [nan]) * more
        self.row_end_s = array("d", bytes(self.row_end_s)) + array("d", [nan]) * more
        self.row_xfer_start_s = array("d", bytes(self.row_xfer_start_s)) + array("d", [nan]) * more
        self.row_xfer_end_s = array("d", bytes(self.row_xfer_end_s)) + array("d", [nan]) * more
        self.row_dispatch_s = array("d", bytes(self.row_dispatch_s)) + array("d", [nan]) * more
        self.row_model = self.row_model + [None] * more
        self.row_worker = self.row_worker + [None] * more
        self.row_gpu = self.row_gpu + [None] * more
        self.row_status = self.row_status + [None] * more

    def reason_index(self, text: str) -> int:
        """The index of a reason text in :attr:`reasons` (added on first use)."""
        idx = self._reason_idx.get(text)
        if idx is None:
            idx = self._reason_idx[text] = len(self.reasons)
            self.reasons.append(text)
        return idx

    def dispatched(self, batch: entities.Batch, first_block: int, now: float) -> None:
        # (the buffers read as ``self.batch_of[i]``, not kept in locals: compiled, a
        # typed buffer in a local is taken and let go with atomic counts at each call)
        bid = batch.id
        if first_block == 0:
            for r in batch.requests:
                i = field(r, REQUEST_ID)
                self.dispatch_s[i] = now
                self.batch_of[i] = bid
        else:
            for r in batch.requests:
                self.batch_of[field(r, REQUEST_ID)] = bid

    def stage_ended(self, task: entities.Task, now: float, status: str, blocks_done: int) -> None:
        b = task.batch
        w = task.worker
        j = self.n_rows
        if j == len(self.row_batch):
            self._grow()
        self.row_batch[j] = b.id
        self.row_stage[j] = field(task._step, STEP_STAGE)
        self.row_size[j] = b.rows
        self.row_start_s[j] = task.start_s
        self.row_end_s[j] = now
        self.row_xfer_start_s[j] = task.xfer_start_s  # (NaN: no transfer)
        self.row_xfer_end_s[j] = task.xfer_end_s
        self.row_dispatch_s[j] = b.dispatch_s
        put(self.row_model, j, b.model)
        put(self.row_worker, j, w.id)
        put(self.row_gpu, j, w.gpu_name)
        put(self.row_status, j, status)
        self.n_rows = j + 1
        if task.ran and task.index == 0 and field(task._step, STEP_BLOCKS)[0] == 0:  # service began
            t0 = task.start_s
            for r in b.requests:
                self.start_s[field(r, REQUEST_ID)] = t0
        k = w.index
        self.busy_s[k] += now - task.start_s
        run = task.run
        if run is None:
            return
        # (the kernel's own ``"completed"``, the same object: told apart without comparing
        # the strings, which compiled is a call per comparison)
        if status is _COMPLETED or status == "completed":
            self.busy_energy_j[k] += run[1]
        elif status != "failed":
            self.busy_energy_j[k] += run[1] * blocks_done / len(run[0])

    def ended(
        self,
        requests: Sequence[Request],
        outcomes: Sequence[int] | None,
        reason: str,
        now: float,
        outputs: Sequence[Any] | None,
    ) -> None:
        if outcomes is None:  # finished now: ok or late, told apart in ``result``
            for r in requests:
                i = field(r, REQUEST_ID)
                self.outcome[i] = FINISHED
                self.finish_s[i] = now
        else:
            ri = self.reason_index(reason)
            for r, o in zip(requests, outcomes, strict=True):
                self.outcome[r.id] = o
                self.reason[r.id] = ri
