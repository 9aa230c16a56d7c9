"""The simulator against queueing formulas: one worker, batch size 1, Poisson arrivals,
no drops (fixed-batch with max_batch 1 and no queue delay is a FIFO single server)."""

import numpy as np
import pytest

from hetserve.core.requests import Stream
from hetserve.experiments.setup import simulate
from hetserve.sim.engine import SimConfig
from hetserve.workload import Constant, Poisson, generate
from tests.helpers import linear_setup

MU = 1000.0  # service rate: 1 ms per request
N = 300_000


def _mean_wait(rho: float, jitter: str, seed: int) -> float:
    s = linear_setup(alpha_s=1 / MU, beta_s=0.0, slo_s=100.0)
    tr = generate([Stream("s", "m", 100.0, Poisson(rho * MU))], N / (rho * MU), seed)
    res = simulate(
        s,
        "fixed-batch",
        tr,
        {"max_batch": 1, "max_queue_delay_s": 0.0},
        SimConfig(seed=seed, jitter=jitter),
    )
    assert (res.outcome == 1).all()  # all ok, nothing dropped
    return float((res.start_s - tr.time_s).mean())


@pytest.mark.slow
@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_md1_mean_wait(rho):
    expected = rho / (2 * MU * (1 - rho))  # Pollaczek-Khinchine, deterministic service
    assert _mean_wait(rho, "none", seed=11) == pytest.approx(expected, rel=0.03)


@pytest.mark.slow
@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_mm1_mean_wait(rho):
    expected = rho / (MU * (1 - rho))
    assert _mean_wait(rho, "exponential", seed=12) == pytest.approx(expected, rel=0.03)


def test_no_queueing_at_low_load():
    """Arrivals further apart than the service time never wait."""
    s = linear_setup(alpha_s=0.001)
    tr = generate([Stream("s", "m", 1.0, Constant(100.0))], 5.0, 0)
    res = simulate(s, "fixed-batch", tr, {"max_batch": 1, "max_queue_delay_s": 0.0})
    assert np.allclose(res.start_s, tr.time_s)
    assert np.allclose(res.finish_s - res.start_s, 0.001)
