"""Issue 43 on a lent GPU, in few full runs: every CUDA path of hetserve on one card.

Parts (each a list of sections, each section under its own time limit, all bounded by
``--deadline-s`` so that a run ends inside the device call's limit):

- ``1``: ``env`` (the card, driver, torch), ``tests`` (the tests that skip without CUDA,
  with the other tests of their files), ``profiles`` (``hetserve profile measure --device
  cuda`` for resnet50, bert-base, efficientnet-b0, vit-b16 and vgg16 at batches 1-64:
  ``latency.csv``, ``blocks.csv``, ``energy.csv``), ``coldstart``
  (``benchmarks/coldstart_real.py``: baseline, PipeSwitch and DHA cold starts of ResNet-50,
  BERT-Base and GPT-2 against the timeline predicted from the measured ``layers.csv``,
  outputs against the warm model's, and behind another model's queued work).
- ``3``: ``cold_tests`` (the loader's tests, after the load stopped waiting for the
  execution stream), ``coldstart`` again (the same, measured), ``stage_sync`` (FLEX's
  per-block synchronisation and stop latency, ``benchmarks/stage_sync.py``), ``slices``
  (part 2's ``serve`` on two half-GPU slices, on the shipped H200 profile set where part 1
  did not run), ``peer`` (PyTorch alone behind the same HTTP load beside hetserve,
  ``benchmarks/peer_torch.py``), ``fp16`` (the profile set in FP16, what the roofline
  models).
- ``4``: ``threads_tests`` (the threads engine serving on this machine's GPU, and the
  stage and cold executor tests), ``stage_sync`` again (every stop on one warm thread),
  ``peers`` (the peer beside hetserve on both engines: threads, then Ray),
  ``threads_served`` (part 2's one-worker ``serve`` on the threads engine, beside the
  simulator), ``coldstart`` a third time (the leases' cold starts differed).
- ``2``: ``hf`` (the same measurement of a Hugging Face BERT folder in a model repository,
  random weights from its config), ``serve`` (resnet50 served on the card over HTTP with
  binary tensors under Poisson load, measured attainment beside the simulator's for the
  same trace and profile: one Ray actor on the GPU, then two half-GPU slices).

``--device cpu`` dry-runs every section on the CPU (smaller sizes; the numbers say
nothing about a GPU). Writes everything under ``OUT`` and packs it into
``OUT/results.tgz``; prints a summary last.

Run: ``python benchmarks/gpu_card.py OUT --part 1|2|3|4|all [--device cuda] [--deadline-s 400]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ZOO_MODELS = "resnet50,bert-base,efficientnet-b0,vit-b16,vgg16"


class Run:
    def __init__(self, out: Path, device: str, deadline_s: float) -> None:
        self.out = out
        self.device = device
        self.cuda = device.startswith("cuda")
        self.t_end = time.monotonic() + deadline_s
        self.summary: dict[str, object] = {}

    def left_s(self) -> float:
        return self.t_end - time.monotonic()

    def sh(self, name: str, argv: list[str], limit_s: float) -> int:
        """Runs ``argv`` with its output in ``OUT/name.log``, at most ``limit_s`` (and never
        past the deadline); returns its exit code (124: stopped at its limit)."""
        limit = min(limit_s, self.left_s() - 5)
        if limit < 10:
            self.summary[name] = "skipped: no time left"
            return 124
        t0 = time.monotonic()
        with open(self.out / f"{name}.log", "w") as log:
            log.write(" ".join(argv) + "\n")
            log.flush()
            try:
                rc = subprocess.run(
                    argv, stdout=log, stderr=subprocess.STDOUT, timeout=limit, cwd=ROOT
                ).returncode
            except subprocess.TimeoutExpired:
                rc = 124
        self.summary[name] = {"rc": rc, "wall_s": round(time.monotonic() - t0, 1)}
        print(f"[{name}] rc={rc} in {time.monotonic() - t0:.0f} s", flush=True)
        return rc


def hetserve(*args: str) -> list[str]:
    return [sys.executable, "-m", "hetserve", *args]


def env(r: Run) -> None:
    import torch

    info: dict[str, object] = {"python": sys.version.split()[0], "torch": torch.__version__}
    if r.cuda:
        p = torch.cuda.get_device_properties(0)
        info |= {"gpu": p.name, "sms": p.multi_processor_count, "mem_gib": p.total_memory / 2**30}
        q = "name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu"
        info["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", f"--query-gpu={q}", "--format=csv"], capture_output=True, text=True
        ).stdout
    (r.out / "env.json").write_text(json.dumps(info, indent=1) + "\n")
    r.summary["env"] = info
    print(json.dumps(info), flush=True)


def tests(r: Run) -> None:
    files = [
        "tests/runtime/test_streams.py", "tests/runtime/test_stage.py", "tests/profiling",
        "tests/zoo/test_leaves.py", "tests/runtime/test_coldload.py",
        "tests/cli/test_serve_profile_device.py",
    ]  # fmt: skip
    n = "8" if r.cuda else "2"
    argv = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-n", n]
    r.sh("tests", argv + files, 150)


def profiles(r: Run) -> None:
    batches = "1,2,4,8,16,32,64" if r.cuda else "1,2,4,8"
    models = ZOO_MODELS if r.cuda else "resnet50,efficientnet-b0"
    argv = hetserve("profile", "measure", "--models", models, "--device", r.device)
    argv += ["--batches", batches, "--warmup", "3", "--repeats", "10", "--no-layers"]
    r.sh("profiles", [*argv, "--out", str(r.out / "profiles")], 240)


def coldstart(r: Run) -> None:
    argv = [sys.executable, "benchmarks/coldstart_real.py", "--device", r.device]
    argv += ["--out", str(r.out / "coldstart"), "--busy-ms", "50"]
    if not r.cuda:
        argv += ["--models", "resnet50", "--repeats", "2", "--warmup", "1"]
    r.sh("coldstart", argv, 120)


def cold_tests(r: Run) -> None:
    """The loader's tests (the load beside queued kernels, evictions under a running
    batch) and the cold executor's, with each request's outcome printed on a failure."""
    files = ["tests/runtime/test_streams.py", "tests/runtime/test_coldload.py"]
    argv = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"]
    r.sh("cold_tests", [*argv, "-n", "4" if r.cuda else "2", *files], 90)


HF_CONFIG = "max_batch_size: 64\nslo_ms: 100\ninputs:\n" + (
    "  - {name: input_ids, shape: [128]}\n  - {name: attention_mask, shape: [128]}\n"
)


def hf(r: Run) -> None:
    """A Hugging Face BERT-Base folder (random weights from its config) in a model
    repository, measured by ``profile measure --model-repository``."""
    import torch
    from transformers import BertConfig, BertModel

    repo = r.out / "hf-repo"
    torch.manual_seed(0)
    m = BertModel(BertConfig()).eval()  # BERT-Base's shape: 12 layers, 768 wide
    m.save_pretrained(repo / "hf-bert" / "1", safe_serialization=True)
    (repo / "hf-bert" / "config.yaml").write_text(HF_CONFIG)
    batches = "1,2,4,8,16,32,64" if r.cuda else "1,2,4,8"
    argv = hetserve("profile", "measure", "--model-repository", str(repo), "--models")
    argv += ["hf-bert", "--device", r.device, "--batches", batches, "--no-layers"]
    if r.sh("hf", [*argv, "--out", str(r.out / "profiles-hf")], 120) not in (0, 124):
        _hf_where(r, repo)


def _hf_where(r: Run, repo: Path) -> None:
    """Where the repository model fails on the device: its pieces run one by one, and the
    failing piece's generated code around the failing line written to ``hf-where.txt``."""
    import traceback

    import torch

    from hetserve.core.models import ModelCatalog
    from hetserve.repository.models import ModelRepository
    from hetserve.zoo.registry import build

    net = build("hf-bert", model_catalog=ModelCatalog(ModelRepository(repo))).to(r.device)
    x = net.input_spec.example(2)
    x = tuple(t.to(r.device) for t in x) if isinstance(x, tuple) else x.to(r.device)
    lines = []
    with torch.inference_mode():
        for i, layer in enumerate(net.layers):
            try:
                x = layer(*x) if isinstance(x, tuple) else layer(x)
            except Exception as e:
                tb = traceback.extract_tb(e.__traceback__)
                at = [f.lineno for f in tb if f.filename.startswith("<eval_with_key")]
                code = layer.code.splitlines()
                k = at[-1] if at else 0
                lines += [f"piece {i}: {type(e).__name__}: {e}", f"line {k}:"]
                lines += code[max(0, k - 12) : k + 2]
                break
    (r.out / "hf-where.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


def _slices(setup, k: int):
    """The setup's plan with each stage on ``k`` slices of each of its GPUs (share k)."""
    from dataclasses import replace

    from hetserve.core.plan import Pipeline, Stage

    models = {}
    for m, mp in setup.plan.models.items():
        pipes = []
        for p in mp.pipelines:
            st = []
            for s in p.stages:
                lat = setup.latency.latency(m, s.gpu, k, p.batch, range(*s.blocks))
                st.append(Stage(s.blocks, s.gpu, k, s.instances * k, lat))
            lat_s = sum(s.latency_s for s in st)
            xput = min(s.instances * p.batch / s.latency_s for s in st)
            pipes.append(Pipeline(tuple(st), p.batch, lat_s, xput))
        models[m] = replace(mp, pipelines=tuple(pipes))
    return replace(setup.plan, models=models, shared_pools=False)


def _with_share(folder: Path, out: Path, k: int) -> Path:
    """A copy of a profile set (under ``out``) with share-``k`` rows taken as ``k`` x share
    1: ``k`` processes time-sharing the card without MPS (an assumption, said where
    reported)."""
    import csv

    dst = out / f"{folder.name}-share{k}"
    dst.mkdir(exist_ok=True)
    for name in ("latency.csv", "blocks.csv", "energy.csv"):
        src = folder / name
        if not src.exists():
            continue
        rows = list(csv.DictReader(open(src)))
        with open(dst / name, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            for row in rows:
                w.writerow(row)
                if name != "blocks.csv" and row.get("share") == "1":
                    col = "latency_us" if name == "latency.csv" else "energy_mj"
                    w.writerow({**row, "share": str(k), col: f"{float(row[col]) * k:.3f}"})
    return dst


SLO_MS = 25.0  # resnet50 on the card: batch 8 in a few ms; the rest is HTTP and queueing
CUDA_RPS = {0.5: 150.0, 0.8: 300.0}


def serve(r: Run, seconds: float, runs: tuple[str, ...] = ("1 worker", "2 slices")) -> None:
    from hetserve.engine.setup import build_setup
    from hetserve.experiments.live import replay_http, serve_in_thread
    from hetserve.experiments.metrics import summarize
    from hetserve.experiments.setup import build_trace, simulate
    from hetserve.runtime.http import create_app
    from hetserve.runtime.server import Server, ServerConfig
    from hetserve.zoo.registry import build

    folder = r.out / "profiles"
    shipped = ROOT / "src" / "hetserve" / "data" / "profiles" / "h200"
    if not (folder / "latency.csv").exists() and r.cuda and "H200" in str(r.summary.get("env")):
        folder = shipped  # measured on an H200 (part 1, the last lease)
    if not (folder / "latency.csv").exists():
        r.summary["serve"] = "skipped: no profiles (part 1's)"
        return
    if r.cuda:
        cluster = str(r.out / "cluster.yaml")
        r.sh("discover", hetserve("cluster", "discover", "--output", cluster), 60)
    else:
        cluster = "local-cpu"
    model = "resnet50"
    x = build(model).input_spec.example(1)[0].numpy()
    rows = []
    kinds = (("1 worker", "ray", 1), ("2 slices", "ray", 2), ("1 worker, threads", "threads", 1))
    for label, engine, k in kinds:
        if label not in runs:
            continue
        if r.left_s() < 3 * seconds + 30:
            rows.append({"run": label, "skipped": "no time left"})
            continue
        prof = folder if k == 1 else _with_share(folder, r.out, k)
        slo = {model: SLO_MS} if r.cuda else None
        setup = build_setup(cluster, [model], profiles=str(prof), max_batch=8, slo_ms=slo)
        if k > 1:
            setup = build_setup(
                cluster, [model], profiles=str(prof), plan=_slices(setup, k), slo_ms=slo
            )
        for lf in (0.5, 0.8):
            # on the card: fixed rates a Python client sends on time (600 KB a request)
            rates = {model: CUDA_RPS[lf]} if r.cuda else setup.plan.rates_at(lf)
            trace = build_trace(setup, "poisson", rates, seconds, seed=1)
            params = {"max_batch": 8}
            sim = summarize(simulate(setup, "flex", trace, params))
            cfg = ServerConfig(
                scheduler="flex", params=params, build=build, engine=engine,
                gpu_device="cuda" if r.cuda else "cpu",
            )  # fmt: skip
            t0 = time.monotonic()
            try:
                with serve_in_thread(create_app(Server(setup, cfg))) as url:
                    live = replay_http(url, trace, {model: x}).summary()
            except Exception as e:  # reported; the next run goes on
                live = {"error": f"{type(e).__name__}: {e}"}
            rows.append({
                "run": label, "engine": engine, "load_factor": lf,
                "rate_rps": rates[model], "slo_ms": setup.slos_s[model] * 1e3,
                "requests": len(trace), "simulated": sim, "served": live,
                "wall_s": round(time.monotonic() - t0, 1),
            })  # fmt: skip
            brief = {k: rows[-1][k] for k in ("run", "load_factor", "rate_rps", "wall_s")}
            brief["sim"] = {k: sim.get(k) for k in ("attainment", "latency_ms")}
            brief["live"] = {k: live.get(k) for k in ("attainment", "latency_ms", "error")}
            print(json.dumps(brief, default=str), flush=True)
    (r.out / "serve.json").write_text(json.dumps(rows, indent=1, default=str) + "\n")
    r.summary["serve"] = [
        {k: row.get(k) for k in ("run", "load_factor", "rate_rps", "skipped")}
        | {
            "sim_att": (row.get("simulated") or {}).get("attainment"),
            "live_att": (row.get("served") or {}).get("attainment"),
            "live_p99_ms": ((row.get("served") or {}).get("latency_ms") or {}).get("p99"),
            "error": (row.get("served") or {}).get("error"),
        }
        for row in rows
    ]


def fp16(r: Run) -> None:
    """The same profile set in FP16 (what the roofline models): ``profiles-fp16``."""
    batches = "1,2,4,8,16,32,64" if r.cuda else "1,2"
    models = ZOO_MODELS if r.cuda else "resnet18"
    argv = hetserve("profile", "measure", "--models", models, "--device", r.device)
    argv += ["--batches", batches, "--dtype", "fp16" if r.cuda else "bf16", "--no-layers"]
    r.sh("fp16", [*argv, "--out", str(r.out / "profiles-fp16")], 240)


def stage_sync(r: Run) -> None:
    """FLEX's per-block synchronisation and stop latency (``benchmarks/stage_sync.py``)."""
    argv = [sys.executable, "benchmarks/stage_sync.py", "--device", r.device]
    argv += ["--json", str(r.out / "stage_sync.json")]
    if not r.cuda:
        argv += ["--models", "resnet18", "--batches", "1", "--repeats", "3"]
    r.sh("stage_sync", argv, 120)


def threads_tests(r: Run) -> None:
    """The threads engine on this machine's GPU (``tests/runtime/test_threads_gpu.py``), the
    stage runner's tests, and the cold executor's LRU test on a virtual clock."""
    files = ["tests/runtime/test_threads_gpu.py", "tests/runtime/test_stage.py",
             "tests/runtime/test_coldload.py"]  # fmt: skip
    argv = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"]
    r.sh("threads_tests", [*argv, "-n", "4" if r.cuda else "2", *files], 100)


def peer(r: Run, engines: str = "ray", rates: str | None = None) -> None:
    """PyTorch alone behind the same HTTP load, beside hetserve (``benchmarks/peer_torch.py``;
    hetserve with the shipped H200 profile set where the card is one)."""
    argv = [sys.executable, "benchmarks/peer_torch.py", "--device", r.device, "--seconds", "8"]
    argv += ["--engines", engines] + (["--rates", rates] if rates and r.cuda else [])
    shipped = ROOT / "src" / "hetserve" / "data" / "profiles" / "h200"
    if r.cuda and "H200" in str(r.summary.get("env", {})):
        argv += ["--profiles", str(shipped)]
    r.sh("peer", argv, 240)


def main() -> None:
    from hetserve.core.provenance import provenance_line

    print(provenance_line(), flush=True)
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--part", choices=("1", "2", "3", "4", "all"), required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--deadline-s", type=float, default=400)
    ap.add_argument("--serve-seconds", type=float, default=15)
    ap.add_argument("--only", default=None, help="of the part's sections, these (comma-separated)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    r = Run(out, a.device, a.deadline_s)
    os.environ.setdefault("HETSERVE_CACHE", str(out / "cache"))
    part1 = [env, tests, profiles, coldstart]

    def served(r: Run) -> None:
        serve(r, a.serve_seconds)

    def slices(r: Run) -> None:
        serve(r, a.serve_seconds, runs=("2 slices",))

    def threads_served(r: Run) -> None:
        serve(r, a.serve_seconds, runs=("1 worker, threads",))

    def peers(r: Run) -> None:  # the peer, then hetserve's two engines (at 1,000 req/s
        peer(r, "threads,ray", "100,200,300")  # the sender fell behind: left out)

    part2 = [hf, served]
    part3 = [cold_tests, coldstart, stage_sync, slices, peer, fp16]
    part4 = [threads_tests, stage_sync, peers, threads_served, coldstart]
    sections = {"1": part1, "2": [env, *part2], "3": [env, *part3], "4": [env, *part4],
                "all": part1 + part2 + part3 + part4}[a.part]  # fmt: skip
    if a.only:
        sections = [s for s in sections if s.__name__ in {env.__name__, *a.only.split(",")}]
    for sec in sections:
        try:
            sec(r)
        except Exception as e:  # the next section still runs
            r.summary[sec.__name__] = f"{type(e).__name__}: {e}"
            print(f"section failed: {type(e).__name__}: {e}", flush=True)
    (out / "summary.json").write_text(json.dumps(r.summary, indent=1, default=str) + "\n")
    with tarfile.open(out / "results.tgz", "w:gz") as tf:
        for p in sorted(out.iterdir()):
            if p.name not in ("results.tgz", "cache", "hf-repo"):
                tf.add(p, arcname=p.name)
    print(json.dumps(r.summary, indent=1, default=str))


if __name__ == "__main__":
    main()
