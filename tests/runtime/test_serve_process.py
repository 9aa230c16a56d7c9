"""``hetserve serve`` as users run it: a real process, sent a real SIGTERM (or SIGINT) while
requests are in flight, for both engines."""

import concurrent.futures
import os
import re
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch")
httpx = pytest.importorskip("httpx")

from tests.runtime.serving import start_serve  # noqa: E402

# it starts Ray (the ray engine): one Ray at a time under pytest-xdist (see tests/conftest.py)
pytestmark = [pytest.mark.torch, pytest.mark.slow, pytest.mark.xdist_group("ray")]


def _start(tmp_path, *args):
    env = {**os.environ, "HETSERVE_CACHE": str(tmp_path / "cache"), "PYTHONUNBUFFERED": "1"}
    return start_serve(tmp_path, args, env)


def _rows(url):
    """(requests in flight, requests received in all) from /metrics."""
    text = httpx.get(f"{url}/metrics", timeout=5).text

    def total(pattern):
        return sum(float(v) for v in re.findall(pattern, text, re.M))

    flying = total(r"^hetserve_requests_in_flight\{[^}]*\} (\S+)$")
    return flying, flying + total(r"^hetserve_requests_total\{[^}]*\} (\S+)$")


def _resnet18(tmp_path):
    """``serve``'s arguments for resnet18 on this machine's CPU, one row a batch, with
    estimated profiles (made here)."""
    profiles = tmp_path / "profiles"
    subprocess.run(
        [sys.executable, "-m", "hetserve", "profile", "estimate", "--cluster",
         "local-cpu", "--models", "resnet18", "--batches", "1-2", "--out", str(profiles)],
        check=True, capture_output=True,
    )  # fmt: skip
    return ["--models", "resnet18", "--slo", "resnet18=120000", "--max-batch", "1",
            "--profiles", str(profiles), "--cpu-threads", "1"]  # fmt: skip


@pytest.mark.parametrize("engine", ["threads", "ray", "emulated"])
def test_sigterm_drains_the_requests_in_flight_and_exits_0(tmp_path, engine):
    from hetserve.core.profiles import estimate_profiles  # noqa: F401  (import check)

    args = _resnet18(tmp_path)
    args += ["--emulate"] if engine == "emulated" else ["--engine", engine]
    proc, url, out = _start(tmp_path, *args)
    from hetserve.experiments.live import binary_body
    from hetserve.zoo.registry import build

    x = build("resnet18").input_spec.example(1).numpy()  # (--max-batch 1: one row each)
    body, hdr = binary_body(x)
    infer = f"{url}/v2/models/resnet18/infer"
    try:
        # 32 requests of one row each (a batch each): on a busy machine the first ones are
        # answered while the last are still on their way, and at least 4 must be in
        # flight when all have arrived (8 requests left only 2 in flight once, under Ray
        # with the whole suite running beside it; 16 left 3 once, with the suite and two
        # callgrind runs beside it)
        n = 32
        with concurrent.futures.ThreadPoolExecutor(n) as pool:
            futs = [pool.submit(httpx.post, infer, content=body, headers=hdr, timeout=120)
                    for _ in range(n)]  # fmt: skip
            for _ in range(1500):  # until all requests have arrived, some still in flight
                flying, received = _rows(url)
                if received >= n:
                    break
                time.sleep(0.002)
            assert received >= n and flying >= 4, (flying, received)
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.2)
            late = []  # a request sent while draining: 503, or the connection refused
            try:
                late.append(httpx.post(infer, content=body, headers=hdr, timeout=30).status_code)
            except httpx.TransportError:
                late.append("refused")
            codes = [f.result().status_code for f in futs]
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = out.read()
    assert codes == [200] * n, log
    assert late[0] in (503, "refused"), log
    assert rc == 0, log
    assert "Traceback" not in log and "stopped (SIGTERM)" in log, log


def test_sigint_stops_an_idle_server_with_status_0(tmp_path):
    proc, _url, out = _start(
        tmp_path, "--models", "resnet50", "--cluster", "shepherd-12xv100", "--emulate"
    )
    proc.send_signal(signal.SIGINT)
    rc = proc.wait(timeout=60)
    log = out.read()
    assert rc == 0 and "stopped (SIGINT)" in log and "Traceback" not in log, log


def test_a_plan_file_alone_serves_in_a_real_process(tmp_path):
    """``hetserve plan --planner herd ... --output p.json`` then ``hetserve serve --plan
    p.json --emulate`` as users run them: the process serves the plan's models with the
    scheduler the plan names, answers a standard client, and exits 0 on SIGTERM."""
    plan = tmp_path / "p.json"
    subprocess.run(
        [sys.executable, "-m", "hetserve", "plan", "--planner", "herd", "--cluster",
         "shepherd-12xv100", "--models", "resnet50,bert-base", "--slo-scale", "20", "--rate",
         "200", "--output", str(plan)],
        check=True, capture_output=True,
    )  # fmt: skip
    proc, url, out = _start(tmp_path, "--cluster", "shepherd-12xv100", "--plan", str(plan),
                            "--emulate")  # fmt: skip
    from hetserve.experiments.live import binary_body
    from hetserve.zoo.registry import build

    try:
        index = httpx.post(f"{url}/v2/repository/index", json={}, timeout=10).json()
        assert {m["name"] for m in index} == {"resnet50", "bert-base"}
        x = build("resnet50").input_spec.example(2).numpy()
        body, hdr = binary_body(x)
        r = httpx.post(f"{url}/v2/models/resnet50/infer", content=body, headers=hdr, timeout=60)
        assert r.status_code == 200, r.text
        assert "flex" in out.read()  # the plan's scheduler (HERD's groups are served by FLEX)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def _children(pid: int) -> dict[int, str]:
    """The processes under ``pid`` (any depth) and their names, read from /proc."""
    parent, name = {}, {}
    for d in os.listdir("/proc"):
        try:
            stat = open(f"/proc/{d}/stat").read()
        except (OSError, ValueError):
            continue
        if d.isdigit():
            comm, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") :]
            parent[int(d)], name[int(d)] = int(rest.split()[2]), comm
    found, todo = {}, [pid]
    while todo:
        p = todo.pop()
        for c, pp in parent.items():
            if pp == p and c not in found:
                found[c] = name[c]
                todo.append(c)
    return found


def test_a_ray_server_whose_gcs_was_killed_still_stops_with_status_0(tmp_path):
    """A signal to the server's whole process group (``kill -- -PGID``, systemd's default
    ``KillMode=control-group``) also ends the GCS that ``ray.init`` started, before the
    server shuts down. Here the GCS is killed first: the server goes on answering (the
    actors' calls do not pass through the GCS), its node watch says once that the GCS
    does not answer, and SIGTERM still drains and exits 0. (The watch asked
    ``ray.nodes()``, which ends the process when its call fails: a newcomer run's serve
    exited 1 on SIGTERM to its group, with Ray's failed check on a cancelled
    ``GetAllNodeInfo`` call.)"""
    proc, url, out = _start(tmp_path, *_resnet18(tmp_path), "--engine", "ray")
    from hetserve.experiments.live import binary_body
    from hetserve.zoo.registry import build

    try:
        gcs = [p for p, n in _children(proc.pid).items() if n == "gcs_server"]
        assert len(gcs) == 1, _children(proc.pid)
        os.kill(gcs[0], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while "GCS does not answer" not in out.read() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "GCS does not answer" in out.read()
        body, hdr = binary_body(build("resnet18").input_spec.example(1).numpy())
        r = httpx.post(f"{url}/v2/models/resnet18/infer", content=body, headers=hdr, timeout=60)
        assert r.status_code == 200, r.text
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    log = out.read()
    assert rc == 0 and "stopped (SIGTERM)" in log and "Traceback" not in log, log
    assert time.monotonic() - t0 < 30, log
