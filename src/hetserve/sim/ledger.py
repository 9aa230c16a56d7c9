"""The request ledger: every request's state and times, born with the simulator.

Python lists, not NumPy arrays: element access is much cheaper in the hot path; they become
arrays in the result (:class:`~hetserve.sim.result.SimResult`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from hetserve.core.outcome import DROPPED, PENDING
from hetserve.core.requests import Request
from hetserve.sim.state import _AWAITING, _DONE
from hetserve.workload.trace import Trace


class Ledger:
    """Per-request state: held by the scheduler (``_AWAITING``), in a batch (``_IN_BATCH``)
    or ended (``_DONE``); the times the engine saw; the outcome and its reason; where a
    request's activations are parked between open routes (protocol rule 4)."""

    def __init__(self, trace: Trace) -> None:
        n = len(trace)
        nan = math.nan
        self.deadline: list[float] = trace.deadlines_s().tolist()
        self.dispatch_s = [nan] * n
        self.start_s = [nan] * n
        self.finish_s = [nan] * n
        self.outcome = [PENDING] * n
        self.reason = [0] * n
        self.batch_of = [-1] * n
        self.state = [_AWAITING] * n
        # the next block to run and the worker holding its input (None: the request's input)
        self.at_block = [0] * n
        self.at_worker: list[str | None] = [None] * n
        self.reasons: list[str] = [""]
        self._reason_idx: dict[str, int] = {"": 0}

    def reason_index(self, text: str) -> int:
        """The index of a reason text in :attr:`reasons` (added on first use)."""
        idx = self._reason_idx.get(text)
        if idx is None:
            idx = self._reason_idx[text] = len(self.reasons)
            self.reasons.append(text)
        return idx

    def end(self, requests: Iterable[Request], outcome: int, reason: str) -> None:
        """End requests with an outcome (dropped or failed) and its reason."""
        ri = self.reason_index(reason)
        state, out, why = self.state, self.outcome, self.reason
        for r in requests:
            state[r.id] = _DONE
            out[r.id] = outcome
            why[r.id] = ri

    def give_back(self, requests: Iterable[Request]) -> None:
        """Requests back with the scheduler (a preempted batch's)."""
        state = self.state
        for r in requests:
            state[r.id] = _AWAITING

    def close(self) -> None:
        """Requests never served end as dropped, never pending."""
        if PENDING in self.outcome:
            ri = self.reason_index("unserved at end of simulation")
            for i, o in enumerate(self.outcome):
                if o == PENDING:
                    self.outcome[i] = DROPPED
                    self.reason[i] = ri
