"""Placement by type on a real (one-node) Ray: a node that declares one "T4" GPU the Ray
way (``num_gpus`` and the ``accelerator_type:T4`` resource). Two slices of one planned GPU
land on its one GPU and report so; a group Ray cannot reserve is a one-line error naming
what the plan needs and what the cluster has, not a hang."""

from dataclasses import replace

import pytest

ray = pytest.importorskip("ray")

from hetserve.core.cluster import parse_cluster  # noqa: E402
from hetserve.core.errors import HetserveError  # noqa: E402
from hetserve.core.placement import bind  # noqa: E402
from hetserve.engine.setup import build_setup  # noqa: E402
from hetserve.runtime import ray_placement  # noqa: E402
from hetserve.runtime.discovery import discover  # noqa: E402
from hetserve.runtime.ray_emulated import EmulatedActor  # noqa: E402
from hetserve.runtime.ray_placement import RayPlacement, WorkerPlace, verify  # noqa: E402
from hetserve.scheduling import ClusterView  # noqa: E402

pytestmark = [pytest.mark.xdist_group("ray")]


@pytest.fixture(scope="module")
def one_t4():
    ray.init(num_cpus=2, num_gpus=1, resources={"accelerator_type:T4": 1},
             include_dashboard=False, log_to_driver=False)  # fmt: skip
    yield discover()
    ray.shutdown()


def _view(gpus_per_node, share):
    cluster = parse_cluster({"name": "t", "nodes": [
        {"name": "n", "gpus": {"T4": gpus_per_node}, "nic_gbps": 10}]}, "t")  # fmt: skip
    s = build_setup(cluster, ["resnet50"])
    # every stage as `share` slices of each of its GPUs (a plan with MPS slices)
    sliced = {
        m: replace(mp, pipelines=tuple(
            replace(p, stages=tuple(replace(st, share=share, instances=st.instances * share)
                                    for st in p.stages))
            for p in mp.pipelines))
        for m, mp in s.plan.models.items()
    }  # fmt: skip
    plan = replace(s.plan, models=sliced)
    return ClusterView.build(cluster, s.latency, bind(plan, cluster))


def test_two_slices_share_the_one_gpu_and_say_where(one_t4):
    assert one_t4.gpu_counts() == {"T4": 1}
    view = _view(1, 2)
    assert len(view.workers) == 2
    placed = RayPlacement(view, one_t4)
    try:
        actors = {w: EmulatedActor.options(**placed.options(info)).remote()
                  for w, info in view.workers.items()}  # fmt: skip
        places = {w: WorkerPlace(**ray.get(a.where.remote())) for w, a in actors.items()}
        verify(view, one_t4, places)  # raises on any mismatch
        assert {(p.node_id, p.gpu_index) for p in places.values()} == {(one_t4.nodes[0].node_id, 0)}
        assert set(placed.bundles_to_node().values()) == {one_t4.nodes[0].node_id}
        for a in actors.values():
            ray.kill(a)
    finally:
        placed.remove()


def test_a_group_ray_cannot_reserve_is_a_one_line_error(one_t4, monkeypatch):
    # discovery is told the node has two T4s; Ray has one GPU to give
    node = one_t4.nodes[0]
    two = replace(one_t4, nodes=[replace(node, gpus=(*node.gpus, replace(node.gpus[0], index=1)))])
    monkeypatch.setattr(ray_placement, "RESERVE_TIMEOUT_S", 2.0)
    with pytest.raises(HetserveError) as e:
        RayPlacement(_view(2, 1), two)
    msg = str(e.value)
    assert "\n" not in msg and "could not reserve 2x T4 on one node for the plan's n" in msg
    assert "1 node(s) of 2x T4" in msg
    assert not ray.util.placement_group_table() or all(
        g["state"] == "REMOVED" for g in ray.util.placement_group_table().values()
    )


_CLOSE_WITHOUT_GCS = """
import os, signal, time
import ray
ray.init(num_cpus=2, num_gpus=1, resources={"accelerator_type:T4": 1},
         include_dashboard=False, log_to_driver=False)
from hetserve.core.cluster import parse_cluster
from hetserve.core.placement import bind
from hetserve.engine.setup import build_setup
from hetserve.runtime.ray_executor import RayExecutor
from hetserve.scheduling import ClusterView
node = {"name": "n", "gpus": {"T4": 1}, "nic_gbps": 10}
cluster = parse_cluster({"name": "t", "nodes": [node]}, "t")
s = build_setup(cluster, ["resnet50"])
ex = RayExecutor(ClusterView.build(cluster, s.latency, bind(s.plan, cluster)), None,
                 emulate=True)
assert ex.placement is not None and len(ex.actors) == 1
gcs = [int(d) for d in os.listdir("/proc") if d.isdigit()
       and open(f"/proc/{d}/comm").read().strip() == "gcs_server"
       and open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1] == str(os.getpid())]
os.kill(gcs[0], signal.SIGKILL)
t = time.monotonic()
ex.close()
print(f"closed in {time.monotonic() - t:.1f} s", flush=True)
"""


def test_workers_are_released_promptly_when_the_gcs_is_gone():
    """A signal to a server's whole process group ends the GCS its ``ray.init`` started
    before the server releases its workers: removing the placement groups then waited
    60 s for the GCS and Ray ended the process with status 1. In a process of its own
    (its own Ray, its GCS killed): ``close`` returns within seconds, says why the groups
    are not removed, and the process exits 0."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", _CLOSE_WITHOUT_GCS], capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "the Ray GCS does not answer: its placement groups went with it" in out
    took = float(out.split("closed in ")[1].split(" s")[0])
    assert took < 10, out
