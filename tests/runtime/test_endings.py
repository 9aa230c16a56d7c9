"""Requests end on time and for a named reason (issue 44), as a user meets it: a real
``hetserve serve`` process on the CPU, a client that gives up and closes its connection,
a request whose ``timeout`` passes while it waits behind a long one."""

import concurrent.futures
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("torch")
httpx = pytest.importorskip("httpx")

from hetserve.runtime.oip import HEADER_LEN  # noqa: E402
from tests.runtime.serving import start_serve  # noqa: E402

# it starts Ray (the ray engine): one Ray at a time under pytest-xdist (see tests/conftest.py)
pytestmark = [pytest.mark.torch, pytest.mark.slow, pytest.mark.xdist_group("ray")]
BLOCKER_ROWS = 8  # one request of 8 rows runs as one execution: the worker is busy a while


def _serve(tmp_path, engine):
    """resnet18 on the CPU, one worker, edf-adaptive (which drops a request only when a
    worker is idle and even batch 1 misses its deadline: a drop at the deadline while the
    worker is busy is the kernel's), batches of up to 8 rows, an SLO of 120 s. (A request
    of 8 rows goes out at once; fewer rows wait, for a fuller batch, until their
    deadline nears.)"""
    env = {**os.environ, "HETSERVE_CACHE": str(tmp_path / "cache"), "PYTHONUNBUFFERED": "1"}
    profiles = tmp_path / "profiles"
    subprocess.run(
        [sys.executable, "-m", "hetserve", "profile", "estimate", "--cluster", "local-cpu",
         "--models", "resnet18", "--batches", "1-8", "--out", str(profiles)],
        check=True, capture_output=True, env=env,
    )  # fmt: skip
    args = ["--models", "resnet18", "--slo", "resnet18=120000", "--max-batch", "8",
            "--profiles", str(profiles), "--cpu-threads", "1", "--scheduler", "edf-adaptive",
            "--engine", engine]  # fmt: skip
    return start_serve(tmp_path, args, env)


def _body(rows, **params):
    from hetserve.zoo.registry import build

    x = build("resnet18").input_spec.example(rows).numpy().astype(np.float32)
    blob = x.tobytes()
    head = json.dumps({
        "inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                    "parameters": {"binary_data_size": len(blob)}}],
        "parameters": {"binary_data_output": True, **params},
    }).encode()  # fmt: skip
    return head + blob, {HEADER_LEN: str(len(head)), "Content-Type": "application/octet-stream"}


def _metric(url, name, **labels):
    text = httpx.get(f"{url}/metrics", timeout=5).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _answer_params(r):
    """The ``parameters`` of a binary-output inference answer (its JSON header)."""
    return json.loads(r.content[: int(r.headers[HEADER_LEN])]).get("parameters", {})


def _stop(proc, out):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    return out.read()


def _busy(pool, url):
    """A request of 8 rows (it keeps the worker busy a while), once the server has
    dispatched it (in flight, none queued): a request sent after it waits behind it,
    whatever its deadline. (Held but still queued, as a newcomer run on a loaded machine
    once caught it, edf-adaptive would serve an earlier deadline first.)"""
    body, hdr = _body(BLOCKER_ROWS)
    fut = pool.submit(httpx.post, f"{url}/v2/models/resnet18/infer", content=body, headers=hdr,
                      timeout=120)  # fmt: skip
    while (_metric(url, "hetserve_requests_in_flight") < 1
           or _metric(url, "hetserve_queue_depth") > 0):  # fmt: skip
        time.sleep(0.002)
    return fut


@pytest.mark.parametrize("engine", ["threads", "ray"])
def test_a_client_that_goes_away_cancels_its_request_which_never_runs(tmp_path, engine):
    proc, url, out = _serve(tmp_path, engine)
    infer = f"{url}/v2/models/resnet18/infer"
    body, hdr = _body(1)
    warm, warm_hdr = _body(BLOCKER_ROWS)
    try:
        httpx.post(infer, content=warm, headers=warm_hdr, timeout=60)  # one execution
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            blocker = _busy(pool, url)

            def impatient():
                try:
                    httpx.post(infer, content=body, headers=hdr, timeout=0.05)
                    return "answered"
                except httpx.TimeoutException:  # httpx closes the connection
                    return "gave up"

            ends = [f.result() for f in [pool.submit(impatient) for _ in range(6)]]
            assert blocker.result().status_code == 200
        gave_up = ends.count("gave up")
        for _ in range(500):  # the server counts them as it notices the disconnects
            if _metric(url, "hetserve_requests_total", outcome="cancelled") >= gave_up:
                break
            time.sleep(0.01)
        cancelled = _metric(url, "hetserve_requests_total", outcome="cancelled")
        ok = _metric(url, "hetserve_requests_total", outcome="ok")
        stats = httpx.get(f"{url}/v2/models/resnet18/stats", timeout=5).json()
        s = stats["model_stats"][0]
        closed = _metric(url, "hetserve_http_responses_total", route="infer", status="499")
    finally:
        log = _stop(proc, out)
    # (behind 8 rows of resnet18, and waiting for a fuller batch, 50 ms is not enough)
    assert gave_up == 6, (ends, log)
    assert cancelled == 6 and closed == 6, log
    assert ok == 2, log
    # the cancelled ones never ran: the executions are the warm-up's and the blocker's
    assert s["execution_count"] == 2, s
    assert s["inference_stats"]["cancel"]["count"] == gave_up, s
    assert len(re.findall(r'"POST /v2/models/resnet18/infer" 499 ', log)) == gave_up, log
    assert "Traceback" not in log, log


def test_a_request_still_queued_at_its_timeout_is_answered_then(tmp_path):
    """``parameters.timeout`` (Triton's, microseconds) is a deadline: a request still
    queued when it passes gets 503 ``deadline`` at that moment, not when the worker
    frees up (edf-adaptive would otherwise serve it late, after the 8 rows)."""
    proc, url, out = _serve(tmp_path, "threads")
    infer = f"{url}/v2/models/resnet18/infer"
    warm, hdr = _body(BLOCKER_ROWS)
    timeout_s = 0.1
    body, hdr1 = _body(1, timeout=int(timeout_s * 1e6))
    free_in_time = 0
    try:
        httpx.post(infer, content=warm, headers=hdr, timeout=60)
        t8 = time.perf_counter()
        httpx.post(infer, content=warm, headers=hdr, timeout=60)
        busy_s = time.perf_counter() - t8  # how long 8 rows keep the worker
        for _ in range(3):
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                blocker = _busy(pool, url)
                t0 = time.perf_counter()
                r = httpx.post(infer, content=body, headers=hdr1, timeout=60)
                waited = time.perf_counter() - t0
                assert blocker.result().status_code == 200
            if r.status_code != 200 or _answer_params(r).get("late"):
                break
            # answered in time: the worker was free again before the deadline (on a loaded
            # machine the blocker can end while the client still sends this one), so the
            # case was not set up; a late answer would be the failure this test is for
            free_in_time += 1
    finally:
        log = _stop(proc, out)
    assert busy_s > 2 * timeout_s, busy_s  # (so the request was still queued at its timeout)
    assert r.status_code == 503, (free_in_time, r.text)
    assert "deadline: after" in r.json()["error"], r.text
    assert re.search(r"request \d+ of resnet18 dropped: deadline: after", log), log
    # answered at its deadline, well before the worker was free; earlier only where the
    # scheduler dropped it itself, which edf-adaptive does when even batch 1 cannot meet
    # the deadline (on a loaded machine: the blocker not yet started, and the time left
    # at arrival, after HTTP and decoding, shorter than batch 1 needs)
    assert waited < timeout_s + 0.3, waited
    if waited < timeout_s:
        err = r.json()["error"]
        m = re.search(r"([\d.]+) ms left of its .* it needs at least ([\d.]+) ms", err)
        assert m and float(m[2]) > float(m[1]), (waited, err)
    assert "Traceback" not in log, log
