"""The recorder keeps its stage rows as columns (C arrays grown as they fill, issue 41),
and ``SimResult.stage_rows`` makes the rows from them: the same rows, in the order the
stages ended, whether the columns grew during the run or not, in both builds."""

import math

from hetserve.core.plan import ModelPlan, Pipeline, Plan, Stage, bind
from hetserve.engine.setup import Setup, build_setup
from hetserve.experiments.setup import build_trace, simulate


def _two_stage_setup():
    base = build_setup("hc1-s", ["resnet50"])
    stages = (Stage((0, 5), "P4", 1, 12), Stage((5, 10), "L4", 1, 4))
    plan = Plan({"resnet50": ModelPlan(base.slos_s["resnet50"], 1.0,
                                       (Pipeline(stages, 4, 0.0, 2000.0),))})  # fmt: skip
    return Setup(base.cluster, base.latency, ["resnet50"], base.slos_s, plan,
                 bind(plan, base.cluster))  # fmt: skip


def test_stage_rows_from_columns_that_grew():
    s = _two_stage_setup()
    trace = build_trace(s, "poisson", {"resnet50": 400.0}, 0.5, seed=3)
    res = simulate(s, "reservation", trace)
    rows = res.stage_rows
    c = res.stages
    assert len(rows) == len(c) > len(trace) + 16  # (room for n + 16 at first: it grew)
    assert res.stage_rows is rows  # (made once)
    ends = [r[7] for r in rows]
    assert ends == sorted(ends)  # in the order the stages ended
    done = {i for i, b in enumerate(res.batch.tolist()) if b >= 0}
    batches = {int(res.batch[i]) for i in done}
    assert {r[0] for r in rows} == batches
    for r in rows:
        assert isinstance(r[0], int) and isinstance(r[2], int) and isinstance(r[5], int)
        assert r[1] == "resnet50" and r[8] in ("completed", "preempted", "failed")
        assert r[6] <= r[7] and r[11] <= r[6]
        if r[2] == 0:  # the first stage's input crossed no link
            assert r[9] is None and r[10] is None
        else:  # the second's came from the first stage's GPU
            assert r[9] is not None and r[9] <= r[10] <= r[6] + 1e-12
            assert not math.isnan(r[9])
    assert {r[2] for r in rows} == {0, 1}


def test_a_rows_names_are_codes_into_small_tables_and_read_back_right():
    """The recorder keeps no name per row: the worker by its index, the model and status
    by codes into one short table; read back, each row's worker has its own GPU (as the
    result's ``worker_gpu`` has it, made apart from the rows) and its batch's model (as
    the requests of that batch have it)."""
    s = _two_stage_setup()
    trace = build_trace(s, "poisson", {"resnet50": 400.0}, 0.5, seed=3)
    res = simulate(s, "reservation", trace)
    c = res.stages
    assert c.worker_index.dtype == c.model_code.dtype == c.status_code.dtype == "int64"
    assert sorted(c.names) == sorted(set(c.names))  # (each name once)
    assert set(c.names) <= {"resnet50", "completed", "preempted", "failed", "withdrawn"}
    assert len(c.worker_ids) == len(res.worker_gpu)
    model_of_batch = {int(b): m for b, m in zip(res.batch.tolist(), res.models.tolist(),
                                                 strict=True) if b >= 0}  # fmt: skip
    for r in res.stage_rows:
        assert res.worker_gpu[r[3]] == r[4]
        assert model_of_batch[r[0]] == r[1]
    assert set(c.worker) <= set(res.worker_gpu)
    assert set(c.status) == {r[8] for r in res.stage_rows} and "completed" in c.status
