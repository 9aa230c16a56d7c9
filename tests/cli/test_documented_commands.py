"""Every ``hetserve`` command shown in a code block of the README or docs/ exists with the
options it is shown with (each is parsed with ``--help`` appended: an unknown command or
option fails), and the quick ones run for real, as written, in an empty folder. A command
renamed or an option dropped without its docs fails here."""

import re
import shlex
from pathlib import Path

import pytest

from hetserve.cli import main

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def documented_commands() -> list[tuple[str, str]]:
    """(doc, command) for every ``hetserve ...`` line of a fenced block (continuation
    lines joined, comments and ``[optional]`` parts dropped, ``a | b`` alternatives of the
    README's summary split)."""
    out = []
    for doc in DOCS:
        text = doc.read_text()
        for block in re.findall(r"```(?:sh|bash|console)?\n(.*?)```", text, re.S):
            cmd = ""
            for raw in block.split("\n"):
                line = raw.strip().removeprefix("$ ")
                if not cmd and not line.startswith("hetserve "):
                    continue
                cmd = f"{cmd} {line}" if cmd else line
                if cmd.endswith("\\"):
                    cmd = cmd[:-1]
                    continue
                cmd = re.sub(r"\s+#.*$", "", cmd)
                cmd = re.sub(r"\[[^\]]*\]", "", cmd)  # optional parts (no nesting in docs)
                head, *alts = [c.strip() for c in cmd.split(" | ")]
                out.append((doc.name, " ".join(head.split())))
                group = head.split()[:2]  # `hetserve cluster list | show hc1-l`
                out.extend((doc.name, " ".join([*group, a])) for a in alts)
                cmd = ""
    return out


COMMANDS = documented_commands()

# the quick ones, run as written (seconds each); the rest (reproduce, serve, a full plan
# of big models, zoo export) are checked by --help and run by their own tests
RUN = {
    "hetserve gpus",
    "hetserve cluster list",
    "hetserve cluster show hc1-l",
    "hetserve model list",
    "hetserve model show efficientnet-b8",
    "hetserve model ratios efficientnet-b8 --gpus P4,L4,V100",
    "hetserve profile estimate --cluster hc1-l --models resnet50,vit-b16 --out profiles/",
    "hetserve profile estimate --cluster hc1-l --models resnet50 --out prof --shares 1,2 "
    "--batches 1,2",
    "hetserve trace gen --process mmpp:rate=200 --streams 8 --models resnet50,bert-base "
    "--out a.csv",
    "hetserve plan --planner deepplan --cluster p3-8xlarge --models resnet50,bert-base "
    "--output dp.json",
    "hetserve place --cluster rampa-base --max-requests 20 --output pl.json",
}


def test_the_docs_show_commands_and_the_quick_ones_are_run():
    shown = {c for _, c in COMMANDS}
    assert len(COMMANDS) >= 25, COMMANDS
    assert shown >= RUN, RUN - shown  # a quick command edited in the docs: update RUN


def documented_serve_yaml(folder: Path) -> None:
    """docs/runtime.md's example configuration as ``serve.yaml`` (its token file made)."""
    text = (ROOT / "docs" / "runtime.md").read_text()
    body = text.split("### The configuration file", 1)[1]
    yaml = re.search(r"```yaml\n(.*?)```", body, re.S).group(1)
    token = folder / "token"
    token.write_text("s3cret-token-for-the-docs-test\n")
    yaml = re.sub(r"token-file: .*", f"token-file: {token}", yaml)
    (folder / "serve.yaml").write_text(yaml)


@pytest.mark.parametrize(("doc", "cmd"), COMMANDS, ids=[f"{d}: {c}" for d, c in COMMANDS])
def test_every_documented_command_and_option_exists(capsys, tmp_path, monkeypatch, doc, cmd):
    """Parsed with --help; ``--config serve.yaml`` reads (and checks, key by key) the
    documented example."""
    monkeypatch.chdir(tmp_path)
    documented_serve_yaml(tmp_path)
    argv = shlex.split(cmd)[1:]
    rc = main([*argv, "--help"])
    err = capsys.readouterr().err
    assert rc == 0, f"{doc}: `{cmd}`: {err}"


def test_the_quick_documented_commands_run_as_written(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for cmd in sorted(RUN):
        rc = main(shlex.split(cmd)[1:])
        err = capsys.readouterr().err
        assert rc == 0, f"`{cmd}`: {err}"
    # and the one that reads what an earlier one wrote
    assert main(["trace", "stats", "a.csv", "--plot", "rate.png"]) == 0
    assert (tmp_path / "rate.png").stat().st_size > 0


def _cited():
    """(doc, text) for every backticked source path (``x/y.py``, optionally ``: name``) and
    dotted module reference (``hetserve.a.b`` or ``core.a.b``) in the README and docs/."""
    paths, modules = [], []
    for doc in DOCS:
        text = doc.read_text()
        for m in re.finditer(r"`([\w/.-]+\.py)(?::\s*(\w+))?`", text):
            paths.append((doc.name, m.group(1), m.group(2)))
        pattern = (r"`((?:hetserve\.)?(?:core|planning|sim|runtime|experiments|scheduling|"
                   r"workload|zoo|profiling|cli)\.[\w.]+)`")  # fmt: skip
        for m in re.finditer(pattern, text):
            modules.append((doc.name, m.group(1)))
    return paths, modules


def test_every_cited_file_function_and_module_exists():
    import importlib

    src = ROOT / "src" / "hetserve"
    paths, modules = _cited()
    assert paths and modules
    missing = []
    for doc, path, name in paths:
        found = [p for p in (ROOT / path, src / path) if p.is_file()]
        if not found and "/" not in path:  # a bare file name, in the section's package
            found = sorted(src.rglob(path))
        if not found:
            missing.append(f"{doc}: {path}")
        elif name and not any(re.search(rf"^\s*(def|class) {name}\b", f.read_text(), re.M)
                              for f in found):  # fmt: skip
            missing.append(f"{doc}: {path}: {name}")
    for doc, dotted in modules:
        parts = (dotted if dotted.startswith("hetserve.") else f"hetserve.{dotted}").split(".")
        for i in range(len(parts), 1, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            for attr in parts[i:]:
                obj = getattr(obj, attr, None)
            if obj is None:
                missing.append(f"{doc}: {dotted}")
            break
        else:
            missing.append(f"{doc}: {dotted}")
    assert not missing, missing
