"""What produced a result: the versions of hetserve and the libraries that decide its
numbers, the git commit of the source, and the command line. Every ``results.json`` of
``hetserve reproduce`` carries it under ``provenance``, and every benchmark prints it
first (docs/formats.md, "Provenance")."""

from __future__ import annotations

import functools
import platform
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

# the distributions whose versions can change a result (HiGHS: the MILPs' choices among
# equal optima and their node counts; the others: arithmetic, sampling, execution)
PACKAGES = (
    "hetserve", "numpy", "scipy", "highspy", "torch", "ray", "transformers", "safetensors",
)  # fmt: skip


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


@functools.cache
def git_commit() -> str | None:
    """The commit of the source tree hetserve runs from (:func:`describe`); None outside
    a git checkout."""
    return describe(Path(__file__).resolve().parent)


def describe(folder: Path) -> str | None:
    """The commit of the git checkout holding ``folder``, ``+dirty`` when the checkout
    has uncommitted changes to tracked files or untracked Python files (a new module or
    script changes what runs; an untracked result file does not); None outside one."""
    try:
        head = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()  # fmt: skip
        status = subprocess.run(["git", "-C", str(folder), "status", "--porcelain",
                                 "--untracked-files=all"], capture_output=True, text=True,
                                timeout=10, check=True).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    dirty = any(
        not line.startswith("??") or line.rstrip().endswith(".py")
        for line in status.splitlines()
        if line.strip()
    )
    return head + ("+dirty" if dirty else "") if head else None


_COMMAND: list[str] | None = None


def set_command(argv: list[str]) -> None:
    """The command line being run (``hetserve`` calls it with its arguments, also when
    its ``main`` is called in-process, where ``sys.argv`` is the caller's)."""
    global _COMMAND
    _COMMAND = list(argv)


def command_line(argv: list[str] | None = None) -> str:
    """The command as a user would type it: ``hetserve ...`` for the console script,
    ``python SCRIPT ...`` for a script."""
    argv = list(argv if argv is not None else _COMMAND or sys.argv)
    if not argv:
        return ""
    head = Path(argv[0]).name
    if head in ("hetserve", "__main__.py"):
        argv[0] = "hetserve"
    elif head.endswith(".py"):
        argv = ["python", str(argv[0]), *argv[1:]]
    return shlex.join(argv)


def provenance(argv: list[str] | None = None) -> dict[str, Any]:
    """``{"versions": {package: version or None, "python": ...}, "git_commit": ...,
    "command": ...}``."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    versions.update({p: _version(p) for p in PACKAGES})
    return {"versions": versions, "git_commit": git_commit(), "command": command_line(argv)}


def provenance_line(argv: list[str] | None = None) -> str:
    """One line for a benchmark's output."""
    p = provenance(argv)
    vs = ", ".join(f"{k} {v}" for k, v in p["versions"].items() if v is not None)
    return f"command: {p['command']}; {vs}; commit {p['git_commit'] or 'unknown'}"
