"""``hetserve serve --replan manual`` as an operator runs it: a real process, emulated
workers, requests flowing from a standard HTTP client while an operator posts a new plan,
unloads a model and loads it back (Triton's repository extension); every request is
answered, the metrics and the log say what switched, and SIGTERM still exits 0."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")

from hetserve.experiments.live import binary_body  # noqa: E402
from tests.runtime.serving import start_serve  # noqa: E402

pytestmark = [pytest.mark.slow]

CLUSTER = "hc1-s"
MODELS = "resnet50,bert-base"


def _plan(tmp_path, name: str, weights: str) -> str:
    out = tmp_path / name
    subprocess.run(
        [sys.executable, "-m", "hetserve", "plan", "--cluster", CLUSTER, "--models", MODELS,
         "--weights", weights, "--output", str(out)],
        check=True, capture_output=True,
    )  # fmt: skip
    return str(out)


def _json_body(meta: dict) -> dict:
    """One row of zeros for every input the model's metadata declares."""
    inputs = []
    for t in meta["inputs"]:
        shape = [1, *t["shape"][1:]]
        inputs.append({"name": t["name"], "shape": shape, "datatype": t["datatype"],
                       "data": [0] * math.prod(shape)})  # fmt: skip
    return {"inputs": inputs}


def _metric(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def test_an_operator_switches_plans_and_unloads_and_loads_a_model_while_serving(tmp_path):
    a = _plan(tmp_path, "a.json", "resnet50=0.8,bert-base=0.2")
    b = _plan(tmp_path, "b.json", "resnet50=0.2,bert-base=0.8")
    env = {**os.environ, "HETSERVE_CACHE": str(tmp_path / "cache"), "PYTHONUNBUFFERED": "1"}
    proc, url, out = start_serve(
        tmp_path, ["--cluster", CLUSTER, "--plan", a, "--emulate", "--replan", "manual"], env
    )
    codes: list[int] = []
    stop = threading.Event()

    def traffic() -> None:  # resnet50 at ~50 req/s, on one keep-alive connection
        body, hdr = binary_body(np.zeros((1, 3, 224, 224), np.float32))
        with httpx.Client(timeout=30) as c:
            while not stop.is_set():
                codes.append(
                    c.post(f"{url}/v2/models/resnet50/infer", content=body, headers=hdr).status_code
                )
                time.sleep(0.02)

    sender = threading.Thread(target=traffic)
    sender.start()
    try:
        with httpx.Client(base_url=url, timeout=60) as c:
            bert = _json_body(c.get("/v2/models/bert-base").json())
            time.sleep(0.5)
            # an operator's plan
            r = c.post("/v2/control/plan", content=open(b).read())
            assert r.status_code == 200, r.text
            rec = r.json()
            assert rec["switched"] and rec["version"] == 1 and rec["switch_s"] >= 0
            assert rec["predicted_switch_s"] > 0
            # a body that is no plan: a one-line 400
            r = c.post("/v2/control/plan", content=b"{not json")
            assert r.status_code == 400 and "expected a plan's JSON" in r.json()["error"]
            r = c.post("/v2/control/plan", content=json.dumps({"models": {"x": 1}}))
            assert r.status_code == 400, r.text
            # Triton's unload: the model is UNAVAILABLE at once, the others keep serving
            assert c.post("/v2/repository/models/bert-base/unload").status_code == 200
            r = c.get("/v2/models/bert-base")
            assert r.status_code == 404 and "UNAVAILABLE" in r.json()["error"]
            assert c.post("/v2/models/bert-base/infer", json=bert).status_code == 404
            index = {m["name"]: m for m in c.post("/v2/repository/index", json={}).json()}
            assert index["bert-base"]["state"] == "UNAVAILABLE"
            assert index["resnet50"]["state"] == "READY"
            r = c.post("/v2/repository/models/resnet50/unload")
            assert r.status_code == 400 and "last model" in r.json()["error"]
            r = c.post("/v2/repository/models/vgg19/load")
            assert r.status_code == 400 and "started with" in r.json()["error"]
            # ... and load: it serves again
            assert c.post("/v2/repository/models/bert-base/load").status_code == 200
            assert c.get("/v2/models/bert-base/ready").status_code == 200
            r = c.post("/v2/models/bert-base/infer", json=bert)
            assert r.status_code == 200, r.text
            state = c.get("/v2/control").json()
            assert state["replan"] == "manual" and state["version"] == 3
            assert [x["reason"] for x in state["records"]] == [
                "operator: a plan",
                "operator: unload bert-base",
                "operator: load bert-base",
            ]
            metrics = c.get("/metrics").text
            assert _metric(metrics, "hetserve_plan_version") == 3
            assert _metric(metrics, 'hetserve_switches_total{mode="mbb"}') == 3
            time.sleep(0.3)
    finally:
        stop.set()
        sender.join(timeout=60)
        os.killpg(proc.pid, signal.SIGTERM)
        rc = proc.wait(timeout=60)
    log = out.read()
    assert rc == 0, log
    assert "Traceback" not in log, log
    assert "switched to plan version 1" in log and "switched to plan version 3" in log, log
    assert "re-planning: manual" in log, log
    assert len(codes) > 20 and set(codes) == {200}, (sorted(set(codes)), log[-3000:])
