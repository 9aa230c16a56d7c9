"""The layer-table latency model shares what instances of one architecture under one load
plan have in common (DeepPlan's Fig. 13: 180 copies of BERT-Base), and nothing else: each
model's answers equal those of a model that is alone in its own latency model."""

import csv

import pytest

from hetserve.core.coldstart import DHA, LOAD, LoadPlan, ModelLoadPlan
from hetserve.core.layerlatency import LayerLatency


def _layers_csv(path):
    # two architectures with the same number of layers and different times and weights
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["model", "layer", "kind", "param_bytes", "load_us", "exec_gpu_us",
                    "exec_host_us"])  # fmt: skip
        for i in range(4):
            w.writerow(["arch-a", i, "L", 1_000_000 * (i + 1), 40 + 10 * i, 5 + i, 30 + i])
            w.writerow(["arch-b", i, "L", 3_000_000, 90 - 10 * i, 8, 50])
    return str(path)


def test_instances_share_only_what_their_architecture_and_plan_fix(tmp_path):
    layers = _layers_csv(tmp_path / "layers.csv")
    dha = LoadPlan.from_sets("dha", 4, [1])
    loaded = LoadPlan.all_loaded(4)
    pt = LoadPlan("pt+dha", (DHA, LOAD, LOAD, LOAD), (-1, 0, 1, 1))
    plans = {
        "arch-a@0": ModelLoadPlan(dha, "V100"),
        "arch-a@1": ModelLoadPlan(dha, "V100"),  # shares arch-a@0's architecture and plan
        "arch-a@2": ModelLoadPlan(loaded, "V100"),  # another plan
        "arch-b@0": ModelLoadPlan(dha, "V100"),  # the same plan object, another architecture
        "arch-a@3": ModelLoadPlan(pt, "V100", nvlink_gbps=10.0),
        "arch-a@4": ModelLoadPlan(pt, "V100", nvlink_gbps=1000.0),  # the same, faster NVLink
    }
    shared = LayerLatency(plans, layers)

    def answers(lat, m):
        tl = lat.load_timeline(m, "V100", (2.0, 1.5))
        return (
            lat.latency(m, "V100", 1, 1), lat.latency(m, "V100", 2, 4), lat.dha_s(m, "V100", 1, 2),
            lat.gpu_bytes(m, "V100"), lat.gpu_bytes(m, "T4"), tl.ready_s, tl.exec_start_s,
            tl.latency_s, lat.cold_run_s(m, "V100", 1, 2, tl, 1e-5),
            lat.load_timeline(m, "T4").latency_s,
        )  # fmt: skip

    got = {m: answers(shared, m) for m in plans}
    for m, lp in plans.items():
        alone = LayerLatency({m: lp}, layers)  # (nothing to share with)
        assert got[m] == answers(alone, m), m
    assert got["arch-a@0"] == got["arch-a@1"]
    for other in ("arch-a@2", "arch-b@0"):
        assert got[other] != got["arch-a@0"], other
    assert got["arch-a@3"][7] != got["arch-a@4"][7]  # NVLink: only the timeline moves
    assert got["arch-a@3"][:3] == got["arch-a@4"][:3]
    # the canonical instance: the first asked of those that share, each of the others
    # itself; its answers are the model's
    canon = {m: shared.canonical_instance(m) for m in plans}
    assert canon["arch-a@1"] == canon["arch-a@0"] == "arch-a@0"
    assert all(canon[m] == m for m in plans if m != "arch-a@1")
    assert LayerLatency(plans, layers).canonical_instance("arch-a@1") == "arch-a@1"  # (first)
    for m in plans:
        assert got[m] == got[canon[m]], m
    # shared: one timeline object for both instances
    assert shared.load_timeline("arch-a@0", "V100", (2.0, 1.5)) is shared.load_timeline(
        "arch-a@1", "V100", (2.0, 1.5)
    )


def test_a_model_without_a_load_plan_is_a_one_line_error():
    from hetserve.core.errors import HetserveError

    with pytest.raises(HetserveError, match="no load plan for model bert-base@3"):
        LayerLatency({}).gpu_bytes("bert-base@3", "V100")


def _run_through(rows, plan, tl, offset_s, share=1):
    """A batch that starts ``offset_s`` after the load began, layer by layer: each waits
    for the one before it and for its weights (``tl.ready_s``)."""
    t = offset_s if plan.pipelined else max(offset_s, tl.load_done_s)
    for r, m, ready in zip(rows, plan.modes, tl.ready_s, strict=True):
        t = max(t, ready) + share * 1e-6 * (r.exec_host_us if m == DHA else r.exec_gpu_us)
    return t - offset_s


def _from_terms(terms: tuple[float, float, bool, float], offset_s: float) -> float:
    """A cold run's time from its terms, as ``ColdStartModel.cold_run_terms`` says (what
    the simulator's residency works out per run)."""
    total_s, peak_s, pipelined, load_done_s = terms
    if pipelined:
        return max(offset_s + total_s, peak_s) - offset_s
    return max(offset_s, load_done_s) + total_s - offset_s


def test_a_cold_run_follows_its_own_timeline_even_one_made_elsewhere(tmp_path):
    # timelines made by the caller and dropped at once: their identities are reused, and
    # a run must still follow the timeline it is given
    from hetserve.core.coldstart import timeline

    layers = _layers_csv(tmp_path / "layers.csv")
    plan = LoadPlan("pt+dha", (DHA, LOAD, LOAD, LOAD), (-1, 0, 1, 1))
    lat = LayerLatency({"arch-a@0": ModelLoadPlan(plan, "V100", nvlink_gbps=10.0)}, layers)
    rows = lat.rows("arch-a@0", "V100")
    for k in range(1, 30):
        tl = timeline(rows, plan, 10.0, (float(k), float(k % 4 + 1)))
        for offset_s in (0.0, 2e-5, 1e-3):
            got = lat.cold_run_s("arch-a@0", "V100", 1, 1, tl, offset_s)
            assert got == pytest.approx(_run_through(rows, plan, tl, offset_s), abs=1e-12)
            assert got == _from_terms(lat.cold_run_terms("arch-a@0", "V100", 1, 1, tl), offset_s)
        del tl
    baseline = LoadPlan.all_loaded(4, "baseline", pipelined=False)
    lat = LayerLatency({"arch-b@0": ModelLoadPlan(baseline, "V100")}, layers)
    rows = lat.rows("arch-b@0", "V100", 2)
    tl = lat.load_timeline("arch-b@0", "V100", (3.0,))
    for offset_s in (0.0, 1e-4, 1.0):
        got = lat.cold_run_s("arch-b@0", "V100", 2, 2, tl, offset_s)
        assert got == pytest.approx(_run_through(rows, baseline, tl, offset_s, 2), abs=1e-12)
        assert got == _from_terms(lat.cold_run_terms("arch-b@0", "V100", 2, 2, tl), offset_s)
