"""Clients with a patience (``SimConfig.patience_s``, ``simulate --patience``): a request
not ended that long after its arrival is cancelled, as the runtime cancels one whose
client disconnects."""

import numpy as np
import pytest

from hetserve.core.errors import HetserveError
from hetserve.core.outcome import CANCELLED
from hetserve.engine.setup import build_setup
from hetserve.experiments.setup import build_trace
from hetserve.scheduling import make_scheduler
from hetserve.sim.engine import SimConfig, Simulator

SETUP = build_setup("hc1-s", ["resnet50"])
SLO = SETUP.slos_s["resnet50"]


def _run(trace, patience_s):
    s = SETUP
    return Simulator(s.cluster, s.latency, s.plan, s.placement, make_scheduler("flex"), trace,
                     SimConfig(patience_s=patience_s)).run()  # fmt: skip


def _columns(res):
    def times(a):
        return [None if np.isnan(x) else x for x in a.tolist()]

    return [res.outcome.tolist(), times(res.dispatch_s), times(res.finish_s),
            [res.reasons[i] for i in res.reason.tolist()]]  # fmt: skip


def test_impatient_clients_are_cancelled_queued_or_in_a_batch_and_never_answered_late():
    """At 1.6x the plan's capacity, clients that wait 0.75 SLO: nothing is answered after
    that; the requests still queued then are cancelled and never run, those in a batch
    are cancelled too (their part of it discarded)."""
    trace = build_trace(SETUP, "poisson", SETUP.plan.rates_at(1.6), 2.0, seed=1)
    res = _run(trace, 0.75 * SLO)
    assert np.nanmax(res.finish_s - trace.time_s) <= 0.75 * SLO + 1e-9
    cancelled = res.outcome == CANCELLED
    queued = cancelled & np.isnan(res.dispatch_s)
    assert queued.sum() > 100 and (cancelled & ~queued).sum() > 100
    assert (res.batch[queued] == -1).all()  # never in a batch: never ran
    assert {res.reasons[i] for i in res.reason[cancelled]} == {"cancelled: the client gave up"}


def test_clients_that_outwait_every_request_change_nothing():
    trace = build_trace(SETUP, "poisson", SETUP.plan.rates_at(1.2), 1.0, seed=2)
    assert _columns(_run(trace, 100 * SLO)) == _columns(_run(trace, None))


def test_patience_is_checked():
    with pytest.raises(HetserveError, match="patience_s must be > 0"):
        SimConfig(patience_s=0.0)
