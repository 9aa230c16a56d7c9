"""What the control loop observes in a simulated run (``engine.control.Sensor``): the
trace's arrivals and the recorder's outcomes, read as they stand at ``now``."""

from __future__ import annotations

import numpy as np

from hetserve.core.outcome import ON_TIME_EPS_S
from hetserve.sim.result import FINISHED, Recorder
from hetserve.workload.trace import Trace

#: the most requests a tick reads outcomes of (``TraceSensor.attainment``)
SAMPLE = 2048


class TraceSensor:
    """Rates from the trace's arrival times (each model's, sorted), attainment from the
    recorder's per-request outcomes and finish times."""

    def __init__(self, trace: Trace, recorder: Recorder) -> None:
        self.trace = trace
        self.recorder = recorder
        self.time_s = trace.time_s
        self.deadline_s = trace.deadlines_s()
        models = np.array([s.model for s in trace.streams], dtype=object)[trace.stream_idx]
        self.by_model = {
            m: np.sort(trace.time_s[models == m]) for m in sorted({s.model for s in trace.streams})
        }
        self.max_slo_s = max((s.slo_s for s in trace.streams), default=0.0)

    def rates(self, now: float, window_s: float) -> dict[str, float]:
        """Arrivals per model in ``(now - window_s, now]`` over the window (over the time
        so far, early in the run)."""
        span = min(window_s, now) if now > 0 else window_s
        out = {}
        for m, t in self.by_model.items():
            n = int(np.searchsorted(t, now, "right") - np.searchsorted(t, now - span, "right"))
            out[m] = n / span
        return out

    def peak_rates(self, now: float, window_s: float, bin_s: float, q: float) -> dict[str, float]:
        """Per model, the ``q`` quantile of its rate over ``bin_s`` bins of the window
        ``(now - window_s, now]`` (the bursts a plan must carry)."""
        span = min(window_s, now) if now > 0 else window_s
        k = max(1, int(span / bin_s))
        edges = now - span + np.arange(k + 1) * (span / k)
        out = {}
        for m, t in self.by_model.items():
            counts = np.diff(np.searchsorted(t, edges, "right"))
            out[m] = float(np.quantile(counts, q)) / (span / k)
        return out

    def attainment(self, now: float, window_s: float) -> tuple[float | None, int]:
        """Of the requests due in ``(now - window_s, now]``, the share that finished by
        their deadline: read on a systematic sample of at most ``SAMPLE`` of them (every
        k-th in arrival order), so that a tick costs the same at any rate; the count is
        exact."""
        lo = int(np.searchsorted(self.time_s, now - window_s - self.max_slo_s, "right"))
        hi = int(np.searchsorted(self.time_s, now, "right"))
        if hi <= lo:
            return None, 0
        dl_all = self.deadline_s[lo:hi]
        due_all = (dl_all > now - window_s) & (dl_all <= now)
        n = int(due_all.sum())
        if n == 0:
            return None, 0
        k = max(1, (hi - lo) // SAMPLE)
        rec = self.recorder
        dl, due = dl_all[::k], due_all[::k]
        out = np.asarray(rec.outcome[lo:hi:k], dtype=np.int8)
        fin = np.asarray(rec.finish_s[lo:hi:k], dtype=np.float64)
        ok = due & (out == FINISHED) & (fin <= dl + ON_TIME_EPS_S)
        seen = int(due.sum())
        return (float(ok.sum()) / seen if seen else None), n
