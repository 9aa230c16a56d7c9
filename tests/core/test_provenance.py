"""What produced a result: versions, commit and command, in every results.json and as the
first line of every benchmark."""

import ast
import re
import subprocess
import sys
from pathlib import Path

from hetserve.core import provenance as P

ROOT = Path(__file__).resolve().parents[2]


def test_versions_commit_and_command():
    p = P.provenance(["/x/bin/hetserve", "reproduce", "rampa", "--out", "a b"])
    assert p["command"] == "hetserve reproduce rampa --out 'a b'"
    assert p["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    import numpy

    assert p["versions"]["numpy"] == numpy.__version__
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()  # fmt: skip
    if head:  # a git checkout (CI's clone is one)
        assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", p["git_commit"])
        assert p["git_commit"].startswith(head)


def test_a_script_is_named_as_run():
    assert P.command_line(["benchmarks/bench_sim.py", "--n", "3"]) == (
        "python benchmarks/bench_sim.py --n 3"
    )
    line = P.provenance_line(["benchmarks/bench_sim.py"])
    assert line.startswith("command: python benchmarks/bench_sim.py; python ")
    assert "highspy" in line and "commit " in line


def test_every_benchmark_prints_its_provenance_first():
    for script in sorted((ROOT / "benchmarks").glob("*.py")):
        tree = ast.parse(script.read_text())
        main = next(
            (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"), None
        )
        assert main is not None, script.name
        first = next(n for n in main.body if not isinstance(n, ast.Expr)
                 or not isinstance(n.value, ast.Constant))  # fmt: skip
        assert "provenance_line" in ast.unparse(first), script.name


def test_an_untracked_python_file_makes_the_tree_dirty(tmp_path):
    """A new module or script nobody committed changes what runs: ``+dirty``. An
    untracked result file does not; a changed tracked file does."""
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "a.py").write_text("x = 1\n")
    subprocess.run([*git, "add", "a.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    assert not P.describe(tmp_path).endswith("+dirty")
    (tmp_path / "results.json").write_text("{}")
    assert not P.describe(tmp_path).endswith("+dirty")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "new.py").write_text("y = 2\n")
    assert P.describe(tmp_path).endswith("+dirty")
    (tmp_path / "pkg" / "new.py").unlink()
    (tmp_path / "a.py").write_text("x = 2\n")
    assert P.describe(tmp_path).endswith("+dirty")
    assert P.describe(tmp_path.parent / "nowhere") is None


def test_transformers_and_safetensors_are_named():
    assert {"transformers", "safetensors"} <= set(P.provenance()["versions"])
