"""A real multi-node Ray cluster on this machine (``tests/runtime/raycluster.py``): two
"P4" nodes with two GPUs each and one "L4" node with one GPU (GPU-less in fact, described by
Ray's ``accelerator_type`` convention), started and stopped by this module alone.

What a platform engineer does, the way they do it: ``hetserve cluster discover --address``
writes the cluster YAML, ``hetserve plan --planner ppipe`` makes a two-stage plan on it (two
slices of the L4, then three P4s), ``hetserve serve --address ... --plan ... --emulate``
serves it with workers placed by type (checked here from Ray's own state, not hetserve's),
and a node dies under load (its raylet killed): every request is answered exactly once and
the server keeps serving on the rest."""

import concurrent.futures
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import yaml

pytest.importorskip("ray")
httpx = pytest.importorskip("httpx")

from tests.runtime.raycluster import ENV, LocalRayCluster, ray_cli  # noqa: E402
from tests.runtime.serving import start_serve  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]
TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def cluster():
    if ray_cli() is None:
        pytest.skip("the ray command is not installed")
    c = LocalRayCluster()
    try:
        c.start_head()
        c.add_node(2, "P4")
        c.add_node(2, "P4")
        c.add_node(1, "L4")
        yield c
    finally:
        left = c.stop()
    assert not left, f"processes of the test's Ray cluster outlived it: {left}"


def _hetserve(*args, timeout=300, check=True):
    run = subprocess.run([sys.executable, "-m", "hetserve", *args], capture_output=True,
                         text=True, env=ENV, timeout=timeout)  # fmt: skip
    if check:
        assert run.returncode == 0, run.stderr[-3000:]
    return run


def test_discover_reads_the_nodes_by_rays_convention(cluster, tmp_path):
    out = tmp_path / "c.yaml"
    _hetserve("cluster", "discover", "--address", cluster.address, "--output", str(out))
    spec = yaml.safe_load(out.read_text())
    shapes = sorted(json.dumps(n["gpus"]) for n in spec["nodes"])
    assert shapes == sorted(['{"P4": 2}', '{"P4": 2}', '{"L4": 1}'])
    # the GPU-less head is said, not made a worker node
    assert "no GPUs; not a worker node" in out.read_text()
    # and the file is a cluster every command takes
    _hetserve("cluster", "show", str(out))


def test_a_plan_for_other_gpus_is_refused_before_anything_starts(cluster, tmp_path):
    plan = tmp_path / "p.json"
    _hetserve("plan", "--cluster", "shepherd-12xv100", "--models", "resnet50",
              "--output", str(plan))  # fmt: skip
    run = _hetserve("serve", "--address", cluster.address, "--plan", str(plan), "--emulate",
                    "--port", "0", check=False)  # fmt: skip
    assert run.returncode == 2
    err = run.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "V100" in err and "has 1x L4, 4x P4" in err, err


def test_a_cluster_file_that_disagrees_is_refused(cluster, tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("name: mine\nnodes:\n  - {name: big, gpus: {P4: 4}, nic_gbps: 10}\n"
                 "  - {name: l4, gpus: {L4: 1}, nic_gbps: 10}\n")  # fmt: skip
    run = _hetserve("serve", "--address", cluster.address, "--cluster", str(f), "--models",
                    "vgg16", "--emulate", "--port", "0", check=False)  # fmt: skip
    assert run.returncode == 2
    assert "disagrees with the cluster discovered" in run.stderr and "big" in run.stderr


# what the test reads from Ray's own state, in a driver of its own: every placement group's
# bundles and the node each sits on, and each node's resources
STATE = textwrap.dedent(
    """
    import json, sys, ray
    ray.init(address=sys.argv[1], log_to_driver=False)
    groups = ray.util.placement_group_table()
    nodes = {n["NodeID"]: n["Resources"] for n in ray.nodes() if n["Alive"]}
    print(json.dumps({"groups": groups, "nodes": nodes}))
    """
)


def _serve(tmp_path, *args):
    env = {**ENV, "PYTHONUNBUFFERED": "1", "HETSERVE_TOKEN": TOKEN}
    return start_serve(tmp_path, args, env, timeout_s=180)


def test_without_a_plan_serve_plans_on_the_discovered_cluster(cluster, tmp_path):
    # (an SLO of a second: the default, 5 x resnet50's batch-1 time on an L4, is 6.6 ms,
    # which a loaded 2-core machine's Ray calls can miss; the plan is what is tested here)
    proc, url, _out = _serve(tmp_path, "--address", cluster.address, "--models", "resnet50",
                            "--slo", "resnet50=1000", "--emulate")  # fmt: skip
    try:
        workers = httpx.get(f"{url}/v2/cluster/workers", headers=AUTH, timeout=10).json()
        types = {n.node_id: n.accelerator for n in cluster.nodes}
        # the default plan: the model whole on every GPU the cluster has (4 P4s, 1 L4)
        assert sorted(w["gpu_type"] for w in workers) == ["L4", "P4", "P4", "P4", "P4"]
        assert all(types[w["node_id"]] == w["gpu_type"] for w in workers), workers
        assert all(w["stage_overhead_ms"] > 0 for w in workers), workers
        from hetserve.experiments.live import binary_body

        body, hdr = binary_body(__import__("numpy").zeros((2, 3, 224, 224), dtype="float32"))
        r = httpx.post(f"{url}/v2/models/resnet50/infer", content=body,
                       headers={**hdr, **AUTH}, timeout=60)  # fmt: skip
        assert r.status_code == 200, r.text
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def _bundles(cluster):
    """The GPUs Ray holds for placement groups now: (node id, bundle) per created one."""
    state = json.loads(
        subprocess.run([sys.executable, "-c", STATE, cluster.address], capture_output=True,
                       text=True, env=ENV, timeout=120, check=True).stdout.splitlines()[-1]
    )  # fmt: skip
    return sorted(
        (nid, g["name"]) for g in state["groups"].values() if g["state"] == "CREATED"
        for nid in g["bundles_to_node_id"].values()
    )  # fmt: skip


def test_an_unload_gives_gpus_back_to_ray_and_a_load_takes_them_again(cluster, tmp_path):
    """``serve --replan manual --objective cost`` on the cluster: unloading a model
    re-plans the other on fewer GPUs and Ray gets the rest back (its placement groups
    removed, read from Ray's own state); loading it again reserves GPUs again, and it
    serves."""
    c_yaml, plan = tmp_path / "c.yaml", tmp_path / "p.json"
    _hetserve("cluster", "discover", "--address", cluster.address, "--output", str(c_yaml))
    _hetserve("plan", "--planner", "ppipe", "--cluster", str(c_yaml), "--models",
              "resnet50,vgg16", "--slo", "resnet50=1000,vgg16=1000", "--objective", "cost",
              "--rate", "40", "--output", str(plan))  # fmt: skip
    proc, url, out = _serve(tmp_path, "--address", cluster.address, "--cluster", str(c_yaml),
                            "--plan", str(plan), "--emulate", "--replan", "manual",
                            "--objective", "cost")  # fmt: skip
    from hetserve.experiments.live import binary_body

    body, hdr = binary_body(__import__("numpy").zeros((1, 3, 224, 224), dtype="float32"))
    try:
        before = _bundles(cluster)
        n_workers = len(httpx.get(f"{url}/v2/cluster/workers", headers=AUTH, timeout=10).json())
        r = httpx.post(f"{url}/v2/repository/models/vgg16/unload", headers=AUTH, timeout=300)
        assert r.status_code == 200, r.text
        after = _bundles(cluster)
        assert len(after) < len(before), (before, after)
        r = httpx.post(f"{url}/v2/models/resnet50/infer", content=body,
                       headers={**hdr, **AUTH}, timeout=60)  # fmt: skip
        assert r.status_code == 200, r.text
        workers = httpx.get(f"{url}/v2/cluster/workers", headers=AUTH, timeout=10).json()
        assert len(workers) < n_workers
        r = httpx.post(f"{url}/v2/repository/models/vgg16/load", headers=AUTH, timeout=300)
        assert r.status_code == 200, r.text
        assert len(_bundles(cluster)) > len(after)
        r = httpx.post(f"{url}/v2/models/vgg16/infer", content=body,
                       headers={**hdr, **AUTH}, timeout=60)  # fmt: skip
        assert r.status_code == 200, r.text
        metrics = httpx.get(f"{url}/metrics", headers=AUTH, timeout=10).text
        assert re.search(r"^hetserve_plan_version 2\.0$", metrics, re.M), metrics
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        rc = proc.wait(timeout=60)
    log = out.read()
    assert rc == 0 and "Traceback" not in log, log
    assert "GPUs given back to Ray" in log, log


# last in this module: it kills a node of the module's cluster
def test_serve_places_by_type_and_survives_a_node_loss(cluster, tmp_path):
    c_yaml, plan = tmp_path / "c.yaml", tmp_path / "p.json"
    _hetserve("cluster", "discover", "--address", cluster.address, "--output", str(c_yaml))
    _hetserve("plan", "--planner", "ppipe", "--cluster", str(c_yaml), "--models", "vgg16",
              "--slo-scale", "5", "--output", str(plan))  # fmt: skip
    stages = json.loads(plan.read_text())["models"]["vgg16"]["pipelines"][0]["stages"]
    # the MILP's pipeline: two slices of the L4 for the first blocks, then three P4s
    assert [(s["gpu"], s["share"]) for s in stages] == [("L4", 2), ("P4", 1)], stages

    proc, url, out = _serve(tmp_path, "--address", cluster.address, "--cluster", str(c_yaml),
                            "--plan", str(plan), "--emulate")  # fmt: skip
    try:
        workers = httpx.get(f"{url}/v2/cluster/workers", headers=AUTH, timeout=10).json()
        assert httpx.get(f"{url}/v2/cluster/workers", timeout=10).status_code == 401
        # where Ray says each placement group's bundles are, and what each node is
        state = json.loads(
            subprocess.run([sys.executable, "-c", STATE, cluster.address], capture_output=True,
                           text=True, env=ENV, timeout=120, check=True).stdout.splitlines()[-1]
        )  # fmt: skip
        nodes = state["nodes"]
        bundle_nodes = {
            nid for g in state["groups"].values() if g["state"] == "CREATED"
            for nid in g["bundles_to_node_id"].values()
        }  # fmt: skip
        accel = {nid: [k for k in r if k.startswith("accelerator_type:")] for nid, r in
                 nodes.items()}  # fmt: skip
        assert len(workers) == 5
        names = {n.node_id: n for n in cluster.nodes}
        for w in workers:
            # the plan was made on the discovered YAML: each worker on its very node
            assert w["planned_gpu"].split("/")[0].endswith(w["node_id"][:6]), w
            assert names[w["node_id"]].accelerator == w["gpu_type"], w
            # on a node Ray reserved a bundle on, whose accelerator type is the planned one
            assert w["node_id"] in bundle_nodes, w
            assert accel[w["node_id"]] == [f"accelerator_type:{w['gpu_type']}"], w
            assert w["state"] in ("ready", "busy") and w["stages"], w
        l4 = [w for w in workers if w["gpu_type"] == "L4"]
        assert len(l4) == 2 and len({(w["node_id"], w["gpu_index"]) for w in l4}) == 1
        p4 = [w for w in workers if w["gpu_type"] == "P4"]
        assert len({(w["node_id"], w["gpu_index"]) for w in p4}) == 3

        # kill the raylet of a P4 node that holds some, not all, of the P4 workers
        by_node = {}
        for w in p4:
            by_node.setdefault(w["node_id"], []).append(w["id"])
        victim_id = next(n for n, ws in by_node.items() if len(ws) < len(p4))
        victim = next(n for n in cluster.nodes if n.node_id == victim_id)
        from hetserve.experiments.live import binary_body

        x = __import__("numpy").zeros((1, 3, 224, 224), dtype="float32")
        # (the plan's SLO, 10.2 ms, leaves 6 ms above the modelled best case, 4.1 ms; the
        # Ray stage calls' cost measured at start, ``stage_overhead_s``, a few ms a stage on
        # this 2-core machine, can take all of it, and admission then rightly refuses every
        # request: 2 runs of 4 alone, and CI's. This test is about where workers go and a
        # node's loss, so its requests carry a deadline of their own.)
        body, hdr = binary_body(x, deadline_ms=100.0)
        infer = f"{url}/v2/models/vgg16/infer"

        def send(_):
            try:
                r = httpx.post(infer, content=body, headers={**hdr, **AUTH}, timeout=60)
                return r.status_code, r.text
            except httpx.TransportError as e:
                return "transport", str(e)

        n_before, n_after = 150, 60
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            futs = []
            for i in range(n_before):
                futs.append(pool.submit(send, i))
                if i == n_before // 2:
                    cluster.kill_raylet(victim)
                time.sleep(0.01)
            got = [f.result() for f in futs]
        # every request got exactly one answer: a result, or an error with its reason
        assert all(code in (200, 500, 503) for code, _ in got), got
        assert sum(code == 200 for code, _ in got) >= n_before // 2
        for code, text in got:
            if code != 200:
                assert json.loads(text)["error"], text
        # the loss is seen: status endpoint, readiness
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            workers = httpx.get(f"{url}/v2/cluster/workers", headers=AUTH, timeout=10).json()
            if {w["id"] for w in workers if w["state"] == "lost"} == set(by_node[victim_id]):
                break
            time.sleep(0.5)
        lost = sorted(w["id"] for w in workers if w["state"] == "lost")
        assert lost == sorted(by_node[victim_id]), workers
        ready = httpx.get(f"{url}/v2/health/ready", timeout=10)
        assert ready.status_code == 200 and sorted(ready.json()["lost_workers"]) == lost
        # and it keeps serving on the rest: no request fails on the lost node. A deadline
        # on this loaded 2-core machine can still be out of reach for a request (a previous
        # request's reservation running late); admission then answers 503 naming the
        # deadline, which is the right answer, so a few are allowed (2 of 60 in one CI run,
        # at the plan's 10 ms SLO)
        after = [send(i) for i in range(n_after)]
        refused = [t for code, t in after if code != 200]
        assert all(code == 503 and "deadline" in json.loads(t)["error"] for code, t in after
                   if code != 200), after  # fmt: skip
        assert len(refused) <= n_after // 4, after
        # the server's own count: each request it took ended exactly once
        text = httpx.get(f"{url}/metrics", headers=AUTH, timeout=10).text
        total = re.findall(r"^hetserve_requests_total\{[^}]*\} (\S+)$", text, re.M)
        assert sum(float(v) for v in total) == n_before + n_after, text
        flying = re.findall(r"^hetserve_requests_in_flight\{[^}]*\} (\S+)$", text, re.M)
        assert [float(v) for v in flying] == [0.0], text
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        rc = proc.wait(timeout=60)
    log = out.read()
    assert rc == 0, log
    assert "Traceback" not in log, log
    assert "placed and checked against the plan" in log, log
