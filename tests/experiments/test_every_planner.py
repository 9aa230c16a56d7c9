"""One product: for every registered planner, ``hetserve plan --planner P --output p.json``,
``hetserve simulate --plan p.json`` and ``hetserve serve --plan p.json --emulate`` (its
server, on loopback HTTP) all work on the plan alone, with the scheduler the plan names,
and agree: on the same trace the served SLO attainment is within ``TOLERANCE`` of the
simulated one.

Why a tolerance and not equality: the emulated server runs on the wall clock (asyncio
timers fire 1-4 ms late here, HTTP adds its own time), the simulator on a virtual one.
The trace is light (tens of requests per second), so both should serve nearly all of it
on time; a plan that one engine could not serve (a missing binding, pinned paths not
taken, the wrong scheduler) fails far outside it.
"""

import json

import numpy as np
import pytest

from hetserve.cli.main import main
from hetserve.core.outcome import OK
from hetserve.engine.setup import build_setup
from hetserve.experiments.live import replay_http, serve_in_thread
from hetserve.experiments.setup import build_trace, model_rates
from hetserve.planning.registry import planners
from hetserve.runtime.http import create_app
from hetserve.runtime.server import Server, ServerConfig
from hetserve.runtime.serverconfig import wall_clock_params

TOLERANCE = 0.10  # served attainment within 10 points of the simulated one
RATE_RPS, DURATION_S = 30.0, 3.0

# SLOs of 20 x the batch-1 latency (tens of ms): the wall clock's few ms of HTTP and timer
# lateness must not decide the outcome
PIPELINES = ["--cluster", "hc1-s", "--models", "resnet50,bert-base", "--slo-scale", "20"]
CASES = {
    "ppipe": PIPELINES,
    "np": PIPELINES,
    "dart-r": PIPELINES,
    "herd": ["--cluster", "shepherd-12xv100", "--rate", "200", *PIPELINES[2:]],
    "deepplan": ["--cluster", "p3-8xlarge", "--models", "resnet18,bert-base"],
    "magicbatch": ["--cluster", "magicbatch-edge", "--models", "resnet50,vgg16", "--random", "4"],
    "rampa": ["--cluster", "rampa-base", "--max-requests", "3"],
    "pe": ["--cluster", "rampa-base", "--stages", "2,3,2,4,8,5", "--max-requests", "3"],
    "ncar": ["--cluster", "rampa-base", "--stages", "2,3,2,4,8,5", "--max-requests", "3"],
}
# (a busy machine makes the wall clock's answers late: never beside a Ray test, conftest.py)
pytestmark = pytest.mark.wallclock

DEFAULT_SCHEDULER = {
    "ppipe": "reservation", "np": "reservation", "dart-r": "reservation", "herd": "flex",
    "deepplan": "coldstart", "magicbatch": "magicbatch", "rampa": "fixed-batch",
    "pe": "fixed-batch", "ncar": "fixed-batch",
}  # fmt: skip


def test_every_registered_planner_is_tested():
    assert set(planners()) == set(CASES) == set(DEFAULT_SCHEDULER)


@pytest.mark.parametrize("planner", sorted(CASES))
def test_a_plan_simulates_and_serves_alike(planner, tmp_path, capsys):
    args = CASES[planner]
    cluster = args[args.index("--cluster") + 1]
    plan_file = tmp_path / "p.json"
    assert main(["plan", "--planner", planner, *args, "--output", str(plan_file)]) == 0
    data = json.loads(plan_file.read_text())
    assert data["planner"] == planner
    assert data["scheduler"]["name"] == DEFAULT_SCHEDULER[planner]
    capsys.readouterr()

    # simulate: the plan alone (its models, its scheduler, its precision at cuts)
    out = tmp_path / "sim"
    assert main(["simulate", "--cluster", cluster, "--plan", str(plan_file), "--rate",
                 str(RATE_RPS), "--duration", str(DURATION_S), "--out", str(out)]) == 0  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["scheduler"] == DEFAULT_SCHEDULER[planner]
    sim_att = summary["attainment"]

    # serve --emulate: the same plan and the same trace, over HTTP
    setup = build_setup(cluster, [], plan=str(plan_file))
    trace = build_trace(setup, "poisson", model_rates(setup, RATE_RPS, None), DURATION_S, 0)
    assert summary["arrived"] == len(trace) > 0
    sched = setup.plan.scheduler
    params = wall_clock_params(sched.name, sched.params)  # as hetserve serve does
    server = Server(setup, ServerConfig(sched.name, params, emulate=True))
    server.check()
    inputs, names = {}, {}
    for m in setup.models:
        spec = server.tensors(m).inputs[0]
        shape = [1 if d < 0 else d for d in spec.shape]  # one request's (no batch)
        inputs[m] = np.zeros(shape, dtype=np.int64 if spec.datatype == "INT64" else np.float32)
        names[m] = spec.name
    with serve_in_thread(create_app(server)) as url:
        live = replay_http(url, trace, inputs, input_names=names)
    served_att = float((live.outcome == OK).mean())
    print(
        planner,
        sim_att,
        served_att,
        np.unique(live.status, return_counts=True),
        np.unique(live.outcome, return_counts=True),
        np.nanmean(live.latency_s),
    )
    assert abs(served_att - sim_att) <= TOLERANCE, (planner, sim_att, served_att)
