"""A worker that joins again (``Executor.add_workers``: a retired worker that a new plan
brings back, ``Kernel.joining``) starts with empty memory in the modelled executor, even
where its stage start kept the worker's memory by worker index from before."""

import numpy as np

from hetserve.core.outcome import FAILED, OK
from hetserve.core.requests import Stream
from hetserve.engine.setup import build_setup
from hetserve.scheduling import BaseScheduler, Dispatch, RouteStep
from hetserve.sim.engine import SimConfig, Simulator
from hetserve.workload.trace import Trace

SETUP = build_setup("hc1-s", ["resnet50"])
A = "resnet50"
NA = SETUP.latency.num_blocks(A)
W = SETUP.placement.workers[0].id


class Script(BaseScheduler):
    """Every request on ``W``, whole; before the second, ``W`` joins again (what the
    control loop has the executor do for a worker that a new plan brings back)."""

    def __init__(self, executor) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.executor = executor

    def on_arrival(self, r, now):  # type: ignore[no-untyped-def]
        if r.id == 1:
            self.executor.add_workers({W: self.executor.infos[W]}, lambda err: None)
        return [Dispatch(self.new_batch_id(), A, (r,), (RouteStep(0, W, now, (0, NA)),))]


def test_a_worker_that_joins_again_holds_nothing():
    trace = Trace(np.array([0.1, 0.5]), np.array([0, 0], dtype=np.int32),
                  (Stream(A, A, 10.0),), 2.0)  # fmt: skip
    sim = Simulator(SETUP.cluster, SETUP.latency, SETUP.plan, SETUP.placement,
                    Script(None), trace, SimConfig())  # fmt: skip
    sim.scheduler.executor = sim.executor
    res = sim.run()
    # the first ran on the plan's warm weights; the second found W's memory empty
    assert res.outcome.tolist() == [OK, FAILED]
    assert "not_resident" in res.reasons[res.reason[1]]
    assert not sim.executor.held[W].resident
