"""A simulation's raw output and its CSV files (formats in ``docs/formats.md``), and the
part that records it during a run."""

from __future__ import annotations

import csv
import functools
import io
import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hetserve.core import records
from hetserve.core.compiled import compiled_build
from hetserve.core.outcome import LATE, OK, ON_TIME_EPS_S, OUTCOME_NAMES
from hetserve.engine import entities
from hetserve.engine.entities import Slot
from hetserve.engine.executor import Observer
from hetserve.engine.links import LinkTable
from hetserve.sim import recorder_core as _pure
from hetserve.sim.energy import Energy
from hetserve.sim.recorder_core import FINISHED, ROW_INTS, ROW_TIMES
from hetserve.workload.trace import Trace

# the compiled CSV writer (setup.py), or None: the csv module writes the same bytes
CSV_CELLS = compiled_build("hetserve.sim.csv_cells", (Path(__file__).with_name("csv_cells.pyx"),))


def _ledger() -> tuple[type[_pure.Ledger], bool]:
    """The compiled build of ``recorder_core.py`` where there is one, built from the
    file as it is now and against the entities' C layout as it is now; only beside the
    compiled entities (it reads them as C structs); else the Python file's."""
    mod, compiled = entities.build_beside(_pure, *records.LAYOUT)
    return mod.Ledger, compiled


Ledger, LEDGER_COMPILED = _ledger()

REQUEST_COLUMNS = (
    "id",
    "stream",
    "model",
    "arrival_s",
    "deadline_s",
    "dispatch_s",
    "start_s",
    "finish_s",
    "latency_ms",
    "outcome",
    "reason",
    "batch",
)
WORKER_COLUMNS = ("worker", "gpu", "share", "busy_s", "utilization", "energy_j")
BATCH_COLUMNS = (
    "batch",
    "model",
    "stage",
    "worker",
    "gpu",
    "batch_size",
    "start_s",
    "end_s",
    "status",
    "transfer_start_s",
    "transfer_end_s",
    "dispatch_s",
)


def _column(values: Any, dtype: type[np.generic], n: int = -1) -> np.ndarray:
    """One of the ledger's C arrays (an ``array.array``, or a typed memoryview of one;
    ``dtype`` its element's) as a NumPy array over the same memory, its first ``n``
    elements (-1: all): the run is over, nothing writes to them again, and a copy of each
    column cost a few percent of a long run."""
    return np.frombuffer(values, dtype, n)


def _decode(codes: np.ndarray, names: Sequence[str]) -> list[str]:
    """Codes as the names they index (a list of Python strings)."""
    table = np.empty(len(names), dtype=object)
    table[:] = list(names)
    return table[np.asarray(codes, np.intp)].tolist()  # type: ignore[no-any-return]


def _f(x: float | None) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else repr(float(x))


def _times(values: Sequence[Any] | np.ndarray) -> list[Any]:
    """A column of times as the CSV writer takes it: each a Python float (which it writes
    as ``repr`` does, as :func:`_f` would), a missing one (None or NaN) as ``""``. A
    column at a time: a call per cell cost as much as the rest of the writing."""
    if isinstance(values, np.ndarray):
        return ["" if x != x else x for x in values.astype(float).tolist()]
    return ["" if x is None or x != x else float(x) for x in values]


# A CSV file's column, for :func:`write_csv`: (kind, data, cells). Kinds: "F" a float
# array (NaN an empty cell), "I" an int array, "C" an int array of codes into ``cells``
# (the strings), "T" a list of times (None or NaN empty), "O" a list of Python objects
# written as the ``csv`` module writes them.
Column = tuple[str, Any, Any]


def _cells(kind: str, data: Any, cells: Any) -> list[Any]:
    """A column as the ``csv`` module takes it."""
    if kind == "F" or kind == "T":
        return _times(data)
    if kind == "I":
        return np.asarray(data).astype(int).tolist()
    if kind == "C":
        return [cells[k] for k in np.asarray(data).tolist()]
    return list(data)


def _quote(x: Any) -> bytes:
    """A cell as the ``csv`` module writes it in a row of several (quoted where it must
    be), UTF-8."""
    buf = io.StringIO()
    csv.writer(buf).writerow((x, ""))
    return buf.getvalue()[:-3].encode()


def write_csv(path: str | Path, header: Sequence[str], columns: list[Column], n: int) -> None:
    """``n`` rows of ``columns`` under ``header``, in UTF-8 with CRLF line ends (the
    ``csv`` module's defaults): by ``sim/csv_cells.pyx`` where it was built, else by the
    ``csv`` module, the same bytes either way (``tests/sim/test_csv_cells.py``)."""
    if CSV_CELLS is not None:
        fixed = []
        for kind, data, cells in columns:
            if kind in ("F", "I", "C"):
                dtype = np.float64 if kind == "F" else np.int64
                data = np.ascontiguousarray(data, dtype)
            if kind == "C":
                cells = tuple(_quote(c) for c in cells)
            fixed.append((kind, data, cells))
        buf = io.StringIO()
        csv.writer(buf).writerow(header)
        head = buf.getvalue().encode()
        with open(path, "wb") as fb:
            CSV_CELLS.write_columns(fb, head, fixed, n, _quote)
        return
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(zip(*(_cells(*c) for c in columns), strict=True))


@dataclass
class StageColumns:
    """A run's stage executions (one row each, in the order they ended) as columns, the
    fields of :attr:`SimResult.stage_rows`' tuples (:meth:`rows`). A stage whose input
    crossed no link has NaN transfer times here (None in the rows). The names are kept as
    codes: the worker's index into ``worker_ids`` and ``worker_gpus`` (a worker's id and
    GPU by its index), the model's and status's into ``names``; :attr:`model`,
    :attr:`worker`, :attr:`gpu` and :attr:`status` are the names, made on first use."""

    batch: np.ndarray  # int64
    stage: np.ndarray  # int64
    batch_size: np.ndarray  # int64
    start_s: np.ndarray
    end_s: np.ndarray
    transfer_start_s: np.ndarray
    transfer_end_s: np.ndarray
    dispatch_s: np.ndarray
    worker_index: np.ndarray  # int64, into worker_ids and worker_gpus
    model_code: np.ndarray  # int64, into names
    status_code: np.ndarray  # int64, into names
    worker_ids: list[str]
    worker_gpus: list[str]
    names: list[str]

    def __len__(self) -> int:
        return len(self.batch)

    @functools.cached_property
    def model(self) -> list[str]:
        return _decode(self.model_code, self.names)

    @functools.cached_property
    def worker(self) -> list[str]:
        return _decode(self.worker_index, self.worker_ids)

    @functools.cached_property
    def gpu(self) -> list[str]:
        return _decode(self.worker_index, self.worker_gpus)

    @functools.cached_property
    def status(self) -> list[str]:
        return _decode(self.status_code, self.names)

    def rows(self) -> list[tuple]:
        """The rows, as tuples of Python values."""
        xs = [None if x != x else x for x in self.transfer_start_s.tolist()]
        xe = [None if x != x else x for x in self.transfer_end_s.tolist()]
        return list(
            zip(
                self.batch.tolist(), self.model, self.stage.tolist(), self.worker, self.gpu,
                self.batch_size.tolist(), self.start_s.tolist(), self.end_s.tolist(),
                self.status, xs, xe, self.dispatch_s.tolist(),
                strict=True,
            )
        )  # fmt: skip


@dataclass
class SimResult:
    trace: Trace
    end_s: float
    dispatch_s: np.ndarray
    start_s: np.ndarray
    finish_s: np.ndarray
    outcome: np.ndarray  # core.outcome codes
    reason: np.ndarray  # index into reasons
    reasons: tuple[str, ...]
    batch: np.ndarray
    # one row per stage execution (``stage_rows``), as columns
    stages: StageColumns
    worker_busy_s: dict[str, float]
    worker_gpu: dict[str, str]
    worker_share: dict[str, int]
    gpu_energy_j: dict[str, float]
    worker_energy_j: dict[str, float] = field(default_factory=dict)
    link_log: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    # the control loop's decisions and switches (``engine.control.SwitchRecord.to_json``)
    control: list[dict[str, Any]] = field(default_factory=list)
    # GPU-seconds per GPU type the plan (the plans, re-planning) held over the run
    gpu_seconds: dict[str, float] = field(default_factory=dict)
    # the events the run's loop took in turn: arrivals and the clock's callbacks (stage
    # ends, transfers, timers, deadline checks): what "events per second" counts
    events: int = 0

    @functools.cached_property
    def stage_rows(self) -> list[tuple]:
        """Per stage execution, in the order they ended: (batch, model, stage, worker,
        gpu, batch_size, start, end, status, t_start, t_end, dispatch); the transfer times
        None where the input crossed no link (made from ``stages`` on first use)."""
        return self.stages.rows()

    @property
    def models(self) -> np.ndarray:
        names = np.array([s.model for s in self.trace.streams])
        return names[self.trace.stream_idx]

    def write_requests_csv(self, path: str | Path) -> None:
        tr = self.trace
        idx = np.asarray(tr.stream_idx, np.int64)
        lat_ms = (self.finish_s - tr.time_s) * 1e3
        n = len(tr)
        columns: list[Column] = [
            ("I", np.arange(n, dtype=np.int64), None),
            ("C", idx, [s.name for s in tr.streams]),
            ("C", idx, [s.model for s in tr.streams]),
            ("F", tr.time_s, None),
            ("F", tr.deadlines_s(), None),
            ("F", self.dispatch_s, None),
            ("F", self.start_s, None),
            ("F", self.finish_s, None),
            ("F", lat_ms, None),
            ("C", self.outcome, OUTCOME_NAMES),
            ("C", self.reason, self.reasons),
            ("I", self.batch, None),
        ]
        write_csv(path, REQUEST_COLUMNS, columns, n)

    def write_batches_csv(self, path: str | Path) -> None:
        c = self.stages
        columns: list[Column] = [
            ("I", c.batch, None), ("C", c.model_code, c.names), ("I", c.stage, None),
            ("C", c.worker_index, c.worker_ids), ("C", c.worker_index, c.worker_gpus),
            ("I", c.batch_size, None), ("F", c.start_s, None), ("F", c.end_s, None),
            ("C", c.status_code, c.names),
            ("F", c.transfer_start_s, None), ("F", c.transfer_end_s, None),
            ("F", c.dispatch_s, None),
        ]  # fmt: skip
        write_csv(path, BATCH_COLUMNS, columns, len(c))

    def write_workers_csv(self, path: str | Path) -> None:
        """Per worker (virtual GPU): busy time, utilisation, energy (its slice's share of
        idle power while idle, the latency model's busy energy while running)."""
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(WORKER_COLUMNS)
            for wid, busy in self.worker_busy_s.items():
                util = busy / self.end_s if self.end_s > 0 else 0.0
                w.writerow(
                    (
                        wid,
                        self.worker_gpu[wid],
                        self.worker_share[wid],
                        _f(busy),
                        _f(util),
                        _f(self.worker_energy_j.get(wid, math.nan)),
                    )
                )


class Recorder(Ledger, Observer):
    """The simulator's observer (``engine.executor.Observer``): what each event changes
    is :class:`~hetserve.sim.recorder_core.Ledger`'s (compiled with the kernel where the
    package was built with Cython: ``LEDGER_COMPILED``); at the end of a run it makes the
    :class:`SimResult`."""

    def __init__(self, trace: Trace, stages: int = 1) -> None:
        """``stages``: the most stages a route has (the plan's deepest pipeline): the
        stage rows' room, made at once."""
        super().__init__(len(trace), stages)
        self.trace = trace

    def size(self, n_workers: int) -> None:
        """Make room for the workers' busy time and energy (before the run; a new plan's
        workers during it)."""
        more = n_workers - len(self.busy_s)
        if more > 0:  # (C arrays: each copied whole, with the room added)
            self.busy_s = array("d", bytes(self.busy_s)) + array("d", [0.0]) * more
            self.busy_energy_j = array("d", bytes(self.busy_energy_j)) + array("d", [0.0]) * more

    def _outcomes(self, finish_s: np.ndarray) -> np.ndarray:
        """Per request its outcome: a finished one (at ``finish_s``) ok or late by
        ``core.outcome.finished`` (the same rule, on the arrays)."""
        # (a copy, not a view: the ledger's own outcomes stay as the run left them, where
        # a finished one is ``FINISHED``, which the control loop's sensor reads)
        out = np.array(self.outcome, np.int8)
        done = out == FINISHED
        if done.any():
            fin = finish_s[done]
            dl = self.trace.deadlines_s()[done]
            out[done] = np.where(fin <= dl + ON_TIME_EPS_S, OK, LATE)
        return out

    def _stages(self, workers: dict[str, Slot]) -> StageColumns:
        """The stage rows' columns (``n_rows`` of them), as views over the ledger's
        buffers (each row's fields side by side there; no copy: the run is over and
        nothing writes to them again); ``workers``: every slot the rows may name."""
        n = self.n_rows
        ints = _column(self.row_ints, np.int64, ROW_INTS * n).reshape(n, ROW_INTS)
        times = _column(self.row_times, np.float64, ROW_TIMES * n).reshape(n, ROW_TIMES)
        ids = [""] * (max((w.index for w in workers.values()), default=-1) + 1)
        gpus = list(ids)
        for w in workers.values():
            ids[w.index] = w.id
            gpus[w.index] = w.gpu_name
        return StageColumns(
            ints[:, 0], ints[:, 1], ints[:, 2],
            times[:, 0], times[:, 1], times[:, 2], times[:, 3], times[:, 4],
            ints[:, 3], ints[:, 4], ints[:, 5],
            ids, gpus, list(self.row_names),
        )  # fmt: skip

    def result(
        self,
        end_s: float,
        workers: dict[str, Slot],
        energy: Energy,
        links: LinkTable,
    ) -> SimResult:
        busy = {wid: self.busy_s[w.index] for wid, w in workers.items()}
        busy_j = {wid: self.busy_energy_j[w.index] for wid, w in workers.items()}
        gpu_j, worker_j = energy.account(workers, busy, busy_j, end_s)
        finish_s = _column(self.finish_s, np.float64)
        return SimResult(
            trace=self.trace,
            end_s=end_s,
            dispatch_s=_column(self.dispatch_s, np.float64),
            start_s=_column(self.start_s, np.float64),
            finish_s=finish_s,
            outcome=self._outcomes(finish_s),
            reason=_column(self.reason, np.int16),
            reasons=tuple(self.reasons),
            batch=_column(self.batch_of, np.int64),
            stages=self._stages(workers),
            worker_busy_s=busy,
            worker_gpu={w.id: w.gpu.name for w in workers.values()},
            worker_share={w.id: w.info.share for w in workers.values()},
            gpu_energy_j=gpu_j,
            worker_energy_j=worker_j,
            link_log=links.log,
        )
