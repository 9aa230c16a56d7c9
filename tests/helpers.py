"""Small clusters and latency models for scheduler and simulator tests, and the benchmark
scripts loaded as modules."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from hetserve.core.cluster import parse_cluster
from hetserve.core.latency import LinearModel, LinearParams
from hetserve.core.plan import bind, default_plan
from hetserve.engine.setup import Setup


def linear_setup(
    n_gpus: int = 1,
    alpha_s: float = 0.001,
    beta_s: float = 0.0,
    slo_s: float = 1.0,
    max_batch: int = 1,
    models: tuple[str, ...] = ("m",),
    nodes: int = 1,
) -> Setup:
    """``nodes`` nodes with ``n_gpus`` V100s each; latency ``alpha * b + beta`` for every
    model; a default plan (every model on every GPU)."""
    cluster = parse_cluster(
        {
            "name": "test",
            "nodes": [{"count": nodes, "name": "n", "gpus": {"V100": n_gpus}, "nic_gbps": 10}],
        },
        "test",
    )
    lat = LinearModel({(m, "V100"): LinearParams(alpha_s, beta_s) for m in models})
    slos = dict.fromkeys(models, slo_s)
    plan = default_plan(cluster, lat, slos, max_batch=max_batch)
    return Setup(cluster, lat, list(models), slos, plan, bind(plan, cluster))


def run_python_json(code: str, pure_python: bool) -> dict:
    """Run ``code`` in a new Python process whose only difference is
    ``HETSERVE_PURE_PYTHON`` (set: the Python files; unset: the compiled builds), and
    return the JSON object its last line prints."""
    env = dict(os.environ)
    env.pop("HETSERVE_PURE_PYTHON", None)
    if pure_python:
        env["HETSERVE_PURE_PYTHON"] = "1"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def benchmark_module(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` loaded as a module (the scripts are not a package), under a
    name of its own so that it does not shadow an import of the same script."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
