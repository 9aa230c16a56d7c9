"""Bad repositories and bad models: one line naming the file and what was expected,
exit status 2, and never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from tests.repository.models import MODEL_PY  # noqa: E402

pytestmark = pytest.mark.torch


def _show(root, name, tmp_path):
    env = {**os.environ, "HETSERVE_CACHE": str(tmp_path / "cache")}
    r = subprocess.run(
        [sys.executable, "-m", "hetserve", "model", "show", name, "--model-repository",
         str(root)], capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hetserve: error: "), r.stderr
    assert "Traceback" not in r.stderr
    return lines[0]


def _python_model(root, name="m", weights=True, source=MODEL_PY):
    from safetensors.torch import save_file

    d = root / name / "1"
    d.mkdir(parents=True)
    (d / "model.py").write_text(source)
    if weights:
        ns: dict = {}
        exec(source, ns)
        save_file(ns["build"]().state_dict(), str(d / "w.safetensors"))
    return d


def test_pickled_weights_are_refused(tmp_path):
    d = tmp_path / "repo" / "m" / "1"
    d.mkdir(parents=True)
    (d / "model.py").write_text(MODEL_PY)
    torch.save({"x": torch.zeros(1)}, d / "weights.pt")
    msg = _show(tmp_path / "repo", "m", tmp_path)
    assert "weights.pt: pickled weights are refused" in msg and "safetensors" in msg


def test_corrupt_safetensors(tmp_path):
    d = _python_model(tmp_path / "repo", weights=False)
    (d / "w.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not a header")
    msg = _show(tmp_path / "repo", "m", tmp_path)
    assert "w.safetensors: not a readable safetensors file" in msg


def test_weights_that_do_not_match_the_module(tmp_path):
    from safetensors.torch import save_file

    d = _python_model(tmp_path / "repo", weights=False)
    save_file({"stem.weight": torch.zeros(3)}, str(d / "w.safetensors"))
    msg = _show(tmp_path / "repo", "m", tmp_path)
    assert "the weights do not match the module built by model.py" in msg


def test_an_export_that_fails_gives_the_exporters_reason(tmp_path):
    src = MODEL_PY.replace(
        "        h = self.blocks(self.stem(image)).mean((2, 3))",
        "        h = self.blocks(self.stem(image)).mean((2, 3))\n"
        "        if h.sum() > 0:\n            h = -h",
    )
    _python_model(tmp_path / "repo", source=src)
    msg = _show(tmp_path / "repo", "m", tmp_path)
    assert "torch.export failed" in msg


def test_a_file_that_is_not_an_exported_program(tmp_path):
    d = tmp_path / "repo" / "m" / "1"
    d.mkdir(parents=True)
    (d / "model.pt2").write_bytes(b"PK\x03\x04 not really")
    msg = _show(tmp_path / "repo", "m", tmp_path)
    assert "model.pt2: not a torch.export program" in msg


def test_a_program_exported_with_a_fixed_batch_is_refused(tmp_path):
    d = tmp_path / "repo" / "m" / "1"
    d.mkdir(parents=True)
    ep = torch.export.export(torch.nn.Linear(4, 2), (torch.randn(3, 4),))
    torch.export.save(ep, str(d / "model.pt2"))
    msg = _show(tmp_path / "repo", "m", tmp_path)
    assert "fixed batch dimension" in msg and "Dim('batch')" in msg


def test_a_config_key_the_schema_lacks(tmp_path):
    _python_model(tmp_path / "repo")
    (tmp_path / "repo" / "m" / "config.yaml").write_text("max_batch: 8\n")
    msg = _show(tmp_path / "repo", "m", tmp_path)
    assert "config.yaml: unknown key 'max_batch'" in msg and "max_batch_size" in msg


def test_an_unsupported_datatype(tmp_path):
    _python_model(tmp_path / "repo")
    (tmp_path / "repo" / "m" / "config.yaml").write_text("datatype: fp8\n")
    msg = _show(tmp_path / "repo", "m", tmp_path)
    assert "config.yaml: datatype" in msg and "fp32" in msg


def test_a_missing_version_and_a_policy_serving_none(tmp_path):
    d = tmp_path / "repo" / "m"
    d.mkdir(parents=True)
    (d / "README").write_text("no versions")
    msg = _show(tmp_path / "repo", "m", tmp_path)
    assert "no version folders" in msg and "<repo>/<model>/<version>/" in msg
    (tmp_path / "repo" / "m" / "README").unlink()
    _python_model(tmp_path / "repo2")
    (tmp_path / "repo2" / "m" / "config.yaml").write_text("version_policy: {specific: [3]}\n")
    msg = _show(tmp_path / "repo2", "m", tmp_path)
    assert "no version to serve" in msg and "[1]" in msg


def test_a_name_clash_with_the_zoo(tmp_path):
    _python_model(tmp_path / "repo", name="resnet50")
    msg = _show(tmp_path / "repo", "resnet50", tmp_path)
    assert "'resnet50' is also a zoo model" in msg


def test_a_repository_that_is_not_there(tmp_path):
    msg = _show(tmp_path / "nothing", "m", tmp_path)
    assert "model repository not found" in msg


def test_a_model_without_a_cut_is_one_block_and_says_so(tmp_path):
    """It exports but has no cut point (one operator): planned and served whole, and the
    output says so."""
    one = (
        "import torch\n\n\ndef build():\n    return torch.nn.Linear(8, 4)\n\n\n"
        "def example_inputs(batch):\n    return {'input': torch.randn(batch, 8)}\n"
    )
    _python_model(tmp_path / "repo", source=one)
    env = {**os.environ, "HETSERVE_CACHE": str(tmp_path / "cache")}
    r = subprocess.run(
        [sys.executable, "-m", "hetserve", "model", "show", "m", "--model-repository",
         str(tmp_path / "repo")], capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "1 layers" in r.stdout and "no valid cut point" in r.stdout


def test_a_hugging_face_folder_without_transformers_says_how_to_install_it(tmp_path):
    """After ``make demo`` (no transformers in its virtualenv) a Hugging Face folder is the
    first thing a newcomer serves: the error names the very Python to install it into."""
    from tests.repository.models import hf_models

    hf_models()["tiny-bert"].save_pretrained(tmp_path / "repo" / "b" / "1")
    env = {**os.environ, "HETSERVE_CACHE": str(tmp_path / "cache")}
    code = (
        "import sys; sys.modules['transformers'] = None; from hetserve.cli import main; "
        f"sys.exit(main(['model', 'show', 'b', '--model-repository', {str(tmp_path / 'repo')!r}]))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300)  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"{sys.executable} -m pip install 'transformers>=4.56' safetensors" in r.stderr
