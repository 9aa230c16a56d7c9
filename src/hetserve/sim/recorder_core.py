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
    from hetserve.core.records import REQUEST_ID, STEP_BLOCKS, STEP_STAGE, field
    from hetserve.engine.entities import ObserverCore

if TYPE_CHECKING:  # (a module, not its names: the compiled build takes those typed)
    from hetserve.core.requests import Request
    from hetserve.engine import entities

FINISHED = -1  # (while running: finished, ok or late not yet told apart)
_NAN = math.nan  # (a C double compiled)
_COMPLETED = "completed"
# a stage row's fields in ``Ledger.rows``, in this order from ``row * ROW_FIELDS``: its
# stage, batch size, start, end, transfer start and end, dispatch time, and the numbers
# of its model, worker and status
ROW_FIELDS = 10


class Ledger(ObserverCore):
    """The per-event part of the recorder (module docstring), for ``n`` requests: an
    ``ObserverCore``, whose methods the compiled kernel calls as C methods."""

    def __init__(self, n: int) -> None:
        nan = math.nan
        # per stage row (``SimResult.stage_rows``' fields), in the order the stages end,
        # grown by doubling (``n_rows`` of them used): the batch id in a C array of its
        # own (any integer a scheduler gives, exactly), the rest side by side in one of C
        # doubles, ``ROW_FIELDS`` a row (a row's stores in two or three cache lines, not
        # in twelve columns'), the names as numbers: a model's and a status's into
        # ``models`` and ``statuses``, a worker's its index (``Slot.index``: its name and
        # GPU in ``worker_ids`` and ``worker_gpus``); a transfer time NaN where none
        self.n_rows = 0
        cap = n + 16
        self.row_batch = array("q", [0]) * cap
        self.rows = array("d", [nan]) * (cap * ROW_FIELDS)
        self.models: list[str] = []
        self._model_idx: dict[str, int] = {}
        self.statuses: list[str] = [_COMPLETED]
        self._status_idx: dict[str, int] = {_COMPLETED: 0}
        self.worker_ids: list[str | None] = []
        self.worker_gpus: list[str | None] = []
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
        """Twice the room for stage rows (each buffer's bytes copied whole)."""
        more = len(self.row_batch)
        self.row_batch = array("q", bytes(self.row_batch)) + array("q", [0]) * more
        self.rows = array("d", bytes(self.rows)) + array("d", [math.nan]) * (more * ROW_FIELDS)

    def _index(self, names: list[str], idx: dict[str, int], text: str) -> int:
        """The number of ``text`` in ``names`` (added on first use)."""
        i = idx.get(text)
        if i is None:
            i = idx[text] = len(names)
            names.append(text)
        return i

    def _name_worker(self, w: entities.Slot) -> None:
        """Keep the name and GPU of worker ``w`` by its index (its first row)."""
        k = w.index
        while len(self.worker_ids) <= k:
            self.worker_ids.append(None)
            self.worker_gpus.append(None)
        self.worker_ids[k] = w.id
        self.worker_gpus[k] = w.gpu_name

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
        o = j * ROW_FIELDS
        self.rows[o] = field(task.step, STEP_STAGE)
        self.rows[o + 1] = b.rows
        self.rows[o + 2] = task.start_s
        self.rows[o + 3] = now
        x = task.transfer_start_s
        self.rows[o + 4] = _NAN if x is None else x
        x = task.transfer_end_s
        self.rows[o + 5] = _NAN if x is None else x
        self.rows[o + 6] = b.dispatch_s
        self.rows[o + 7] = self._index(self.models, self._model_idx, b.model)
        k = w.index
        self.rows[o + 8] = k
        self.rows[o + 9] = (
            0 if status == _COMPLETED else self._index(self.statuses, self._status_idx, status)
        )
        if k >= len(self.worker_ids) or self.worker_ids[k] is None:
            self._name_worker(w)
        self.n_rows = j + 1
        if task.ran and task.index == 0 and field(task.step, STEP_BLOCKS)[0] == 0:  # service began
            t0 = task.start_s
            for r in b.requests:
                self.start_s[field(r, REQUEST_ID)] = t0
        k = w.index
        self.busy_s[k] += now - task.start_s
        run = task.run
        if run is not None and status != "failed":
            self.busy_energy_j[k] += (
                run[1] if status == "completed" else run[1] * blocks_done / len(run[0])
            )

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
