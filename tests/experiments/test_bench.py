"""``hetserve bench URL``: outcomes by the client's clock, inputs from metadata, and the
tool run the way a user runs it, against hetserve itself (with --predict) and against a
foreign KServe v2 server (the kserve package's ModelServer, a real process)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("uvicorn")
pytest.importorskip("httptools")

from hetserve.cli import main
from hetserve.core.errors import HetserveError
from hetserve.experiments import bench as B
from hetserve.experiments.live import free_port, serve_in_thread

HERE = Path(__file__).resolve().parent


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 200, 400, 429, 500, 503]),
                          st.floats(0.0, 2.0), st.floats(0.01, 1.0)), max_size=40))  # fmt: skip
def test_every_request_gets_exactly_one_outcome_by_the_clients_clock(rows):
    """A 200 within the SLO is ok, after it late; 429/503 refused; 0 (no answer) a
    timeout; anything else an error; only ok counts towards attainment."""
    status = np.array([r[0] for r in rows], dtype=np.int32)
    lat = np.array([r[1] for r in rows])
    slo = np.array([r[2] for r in rows])
    out = B.judge(status, lat, slo)
    for (s, t, d), o in zip(rows, out, strict=True):
        want = (
            ("ok" if t <= d else "late")
            if s == 200
            else ("refused" if s in (429, 503) else "timeout" if s == 0 else "error")
        )
        assert B.OUTCOMES[o] == want
    n = len(rows)
    j = B.Judged(np.full(n, "m"), out, lat, np.zeros(n), np.zeros(n), 2.0)
    s = B.summary(j, {"m": 0.5})["m"]
    assert sum(s[k] for k in B.OUTCOMES) == s["requests"] == n
    assert s["attainment"] == (s["ok"] / n if n else 0.0)
    assert s["goodput_rps"] == s["ok"] / 2.0


def test_inputs_come_from_the_metadata_or_a_file(tmp_path):
    meta = B.ModelMeta("m", (B.TensorMeta("ids", "INT64", (-1, 8)),
                             B.TensorMeta("x", "FP16", (-1, 2, -1))), batched=True)  # fmt: skip
    with pytest.raises(HetserveError, match=r"--shape m\.x=2,N"):
        B.make_inputs(meta, 0)
    a = B.make_inputs(meta, 3, (5, 9), dims={"x": [2, 3]})
    assert a["ids"].shape == (1, 8) and a["ids"].dtype == np.int64
    assert a["ids"].min() >= 5 and a["ids"].max() < 9
    assert a["x"].shape == (1, 2, 3) and a["x"].dtype == np.float16
    assert np.array_equal(B.make_inputs(meta, 3, (5, 9), dims={"x": [2, 3]})["x"], a["x"])
    np.savez(tmp_path / "in.npz", **{"m/x": np.ones((2, 5), "f4")})
    got = B.load_inputs(tmp_path / "in.npz")
    b = B.make_inputs(meta, 0, given=got["m"])  # x from the file, ids drawn
    assert b["x"].shape == (1, 2, 5) and float(b["x"].sum()) == 10.0
    body, hdr = B.encode(meta, b, binary=True, deadline_ms=20.0)
    n = int(hdr["Inference-Header-Content-Length"])
    head = json.loads(body[:n])
    assert head["parameters"] == {"deadline_ms": 20.0, "binary_data_output": True}
    assert len(body) - n == sum(t["parameters"]["binary_data_size"] for t in head["inputs"])
    text, _ = B.encode(meta, b, binary=False)
    assert json.loads(text)["inputs"][1]["data"] == [1.0] * 10


def test_bench_against_hetserve_itself_with_the_prediction(tmp_path, capsys):
    """An emulated hetserve on PPipe's hc1-l (the roofline's latencies, the default plan),
    loaded over HTTP, and the same trace simulated with the same cluster and latencies."""
    from hetserve.engine.setup import build_setup
    from hetserve.runtime.http import create_app
    from hetserve.runtime.server import Server, ServerConfig

    setup = build_setup("hc1-l", ["resnet50"], slo_ms={"resnet50": 300.0})
    srv = Server(setup, ServerConfig(scheduler="flex", params={"max_batch": 8}, emulate=True))
    with serve_in_thread(create_app(srv)) as url:
        rc = main(["bench", url, "--models", "resnet50", "--rate", "20", "--duration", "3",
                   "--out", str(tmp_path), "--predict", "--cluster", "hc1-l"])  # fmt: skip
    out = capsys.readouterr()
    assert rc == 0, out.err
    r = json.loads((tmp_path / "bench.json").read_text())
    m = r["measured"]["resnet50"]
    assert m["slo_ms"] == 300.0  # the server's, from its configuration
    assert m["requests"] == sum(m[k] for k in B.OUTCOMES) > 30
    assert m["attainment"] >= 0.95 and m["error"] == m["timeout"] == 0
    assert r["predicted"]["scheduler"] == "flex"  # the server's, from its configuration
    assert r["predicted"]["resnet50"]["attainment"] >= 0.95
    assert r["provenance"]["command"].startswith("hetserve bench")
    assert (tmp_path / "bench.png").stat().st_size > 10_000
    assert "predicted" in out.out and "resnet50" in out.out


@pytest.fixture(scope="module")
def kserve_url():
    pytest.importorskip("kserve")
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(HERE / "kserve_doubler.py"), str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    if not B.wait_ready(url, 60.0, alive=lambda: proc.poll() is None,
                        path="/v2/models/doubler/ready"):  # fmt: skip
        proc.kill()
        pytest.fail("the kserve model server did not start")
    yield url
    proc.terminate()
    proc.wait(timeout=30)


@pytest.mark.parametrize("encoding", ["binary", "json"])
def test_bench_against_a_foreign_kserve_server(kserve_url, tmp_path, capsys, encoding):
    rc = main(["bench", kserve_url, "--models", "doubler", "--rate", "40", "--duration", "2",
               "--slo", "doubler=1000", "--encoding", encoding,
               "--out", str(tmp_path)])  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    m = json.loads((tmp_path / "bench.json").read_text())["measured"]["doubler"]
    assert m["requests"] == m["ok"] > 40 and m["attainment"] == 1.0


def test_a_closed_loop_for_comparison(kserve_url, tmp_path, capsys):
    rc = main(["bench", kserve_url, "--models", "doubler", "--concurrency", "2",
               "--duration", "1", "--slo", "doubler=1000", "--out", str(tmp_path)])  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    r = json.loads((tmp_path / "bench.json").read_text())
    assert r["mode"] == "closed" and r["measured"]["doubler"]["ok"] > 10


def test_bad_input_is_one_line(kserve_url, capsys):
    def err(*args: str) -> str:
        assert main(["bench", *args]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1, lines
        return lines[0]

    assert "give it: --slo doubler=MS" in err(kserve_url, "--models", "doubler", "--rate", "5")
    assert "model 'nope': the server answered 404" in err(
        kserve_url, "--models", "nope", "--rate", "5", "--slo", "nope=10"
    )
    assert "--rate: required" in err(kserve_url, "--models", "doubler", "--slo", "doubler=9")
    assert "is not this machine; pass --allow-remote" in err(
        "http://192.0.2.1:8000", "--models", "m", "--rate", "1"
    )
    port = free_port()
    assert f"cannot reach http://127.0.0.1:{port}" in err(
        f"http://127.0.0.1:{port}", "--models", "m", "--rate", "1", "--slo", "m=5"
    )
    assert "more than --max-requests 10" in err(
        kserve_url,
        "--models",
        "doubler",
        "--rate",
        "100",
        "--slo",
        "doubler=9",
        "--max-requests",
        "10",
    )
    assert "expected a URL like" in err("ftp://x", "--models", "m", "--rate", "1")
