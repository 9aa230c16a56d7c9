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


def test_the_warm_start_numbers_each_workers_residency_as_it_names_it():
    """After the warm start of a plan of two models on shared workers, each worker's
    residency by model number (``Held.res_at``, what a stage's start reads) is its
    residency by name, for every model numbered, and a worker that joins again has none."""
    s = build_setup("hc1-l", ["resnet50", "efficientnet-b0", "vit-b16"])
    trace = Trace(np.array([0.1]), np.array([0], dtype=np.int32),
                  (Stream("resnet50", "resnet50", 10.0),), 1.0)  # fmt: skip
    from hetserve.scheduling import make_scheduler

    sim = Simulator(s.cluster, s.latency, s.plan, s.placement, make_scheduler("reservation"),
                    trace, SimConfig())  # fmt: skip
    sim.run()
    ex = sim.executor
    numbered = ex.residency.model_ix
    assert set(numbered) == set(s.plan.models)
    held = 0
    for h in ex.held.values():
        for model, ix in numbered.items():
            got = h.res_at[ix] if ix < len(h.res_at) else 0
            assert got == h.resident.get(model, 0), model
            held += bool(got)
    assert held >= len(s.plan.models)
    w = s.placement.workers[0].id
    ex.add_workers({w: ex.infos[w]}, lambda err: None)
    assert ex.held[w].res_at == [] and ex.held[w].resident == {}
