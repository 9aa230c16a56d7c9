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

    def hs_stream_q(p: Any, v: Any) -> None:
        """Compiled only (``recorder_core_c.pxd``: a store past the caches, at a C
        address): plain Python never calls it."""
        raise NotImplementedError("hs_stream_q is compiled only")

    hs_stream_d = hs_stream_q

if TYPE_CHECKING:  # (a module, not its names: the compiled build takes those typed)
    from hetserve.core.requests import Request
    from hetserve.engine import entities

FINISHED = -1  # (while running: finished, ok or late not yet told apart)
_COMPLETED = "completed"  # (a stage's status as the kernel gives it)
_NAN = math.nan  # (a C double compiled)
# a stage row's fields of each kind (``Ledger.row_ints``, ``Ledger.row_times``)
ROW_INTS = 6
ROW_TIMES = 5


class Ledger(ObserverCore):
    """The per-event part of the recorder (module docstring), for ``n`` requests whose
    routes have up to ``stages`` stages: an ``ObserverCore``, whose methods the compiled
    kernel calls as C methods."""

    def __init__(self, n: int, stages: int = 1) -> None:
        nan = math.nan
        # per stage row (``SimResult.stage_rows``' fields), in the order the stages end,
        # each row's fields side by side in two C arrays: its integers (``ROW_INTS`` of
        # them: batch, stage, batch size, and for its names the worker's index, the
        # model's code and the status's code, codes into ``row_names``) and its times
        # (``ROW_TIMES``: start, end, transfer start and end, NaN where none, dispatch);
        # ``n_rows`` rows used. No Python object per row: a row is plain C values, which
        # the compiled build writes past the caches (``stage_ended``). Room for a row per
        # stage of every request made at once (a run with more rows, a new plan's or
        # retried stages, grows them by doubling, each copied whole)
        self.n_rows = 0
        cap = n * max(stages, 1) + 16
        self.row_ints = array("q", [0]) * (ROW_INTS * cap)
        self.row_times = array("d", [nan]) * (ROW_TIMES * cap)
        # the models' and statuses' names the rows' codes index (``"completed"``: 0), and
        # by worker index the model of the worker's last row and its code
        self.row_names: list[str] = [_COMPLETED]
        self._row_name_idx: dict[str, int] = {_COMPLETED: 0}
        self._model_at: list[object] = []
        self._model_code_at: list[int] = []
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
        more = len(self.row_ints) // ROW_INTS
        self.row_ints = array("q", bytes(self.row_ints)) + array("q", [0]) * (ROW_INTS * more)
        self.row_times = array("d", bytes(self.row_times)) + array("d", [math.nan]) * (
            ROW_TIMES * more
        )

    def row_name_code(self, name: str) -> int:
        """The code of a model's or status's name in :attr:`row_names` (added on first
        use)."""
        idx = self._row_name_idx.get(name)
        if idx is None:
            idx = self._row_name_idx[name] = len(self.row_names)
            self.row_names.append(name)
        return idx

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
        if ROW_INTS * j == len(self.row_ints):
            self._grow()
        # the model's code: the one this worker's last row had, where the model is the
        # same object (a worker serves one stage of one model's pool, mostly), else
        # looked up and kept for the worker (at 1,000 GPUs and 100 models, the last row's
        # model is seldom this one's, and a lookup a row cost 1-2% of the run)
        m = b.model
        wi = w.index
        at = self._model_at
        if wi < len(at) and at[wi] is m:
            model_code = self._model_code_at[wi]
        else:
            model_code = self.row_name_code(m)
            while len(at) <= wi:
                at.append(None)
                self._model_code_at.append(0)
            at[wi] = m
            self._model_code_at[wi] = model_code
        # (the kernel's own ``"completed"``, the same object, is code 0 without a lookup)
        code = 0 if status is _COMPLETED else self.row_name_code(status)
        k = ROW_INTS * j
        if cython.compiled:
            # non-temporal stores (x86-64; elsewhere plain ones: ``recorder_core_c.pxd``):
            # the rows are written once and read only after the run, and about 90 bytes
            # a row through the caches (100 MB in a 300-second run) pushed out what the
            # rest of the run reads; written past them, the PPipe plan's 300-second run
            # is 2-4% faster (docs/benchmarks.md)
            hs_stream_q(cython.address(self.row_ints[k]), b.id)
            hs_stream_q(cython.address(self.row_ints[k + 1]), field(task._step, STEP_STAGE))
            hs_stream_q(cython.address(self.row_ints[k + 2]), b.rows)
            hs_stream_q(cython.address(self.row_ints[k + 3]), w.index)
            hs_stream_q(cython.address(self.row_ints[k + 4]), model_code)
            hs_stream_q(cython.address(self.row_ints[k + 5]), code)
            k = ROW_TIMES * j
            hs_stream_d(cython.address(self.row_times[k]), task.start_s)
            hs_stream_d(cython.address(self.row_times[k + 1]), now)
            hs_stream_d(cython.address(self.row_times[k + 2]), task.xfer_start_s)
            hs_stream_d(cython.address(self.row_times[k + 3]), task.xfer_end_s)
            hs_stream_d(cython.address(self.row_times[k + 4]), b.dispatch_s)
        else:
            self.row_ints[k] = b.id
            self.row_ints[k + 1] = field(task._step, STEP_STAGE)
            self.row_ints[k + 2] = b.rows
            self.row_ints[k + 3] = w.index
            self.row_ints[k + 4] = model_code
            self.row_ints[k + 5] = code
            k = ROW_TIMES * j
            self.row_times[k] = task.start_s
            self.row_times[k + 1] = now
            self.row_times[k + 2] = task.xfer_start_s  # (NaN: no transfer)
            self.row_times[k + 3] = task.xfer_end_s
            self.row_times[k + 4] = b.dispatch_s
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
