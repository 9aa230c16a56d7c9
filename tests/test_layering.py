"""DESIGN.md's layering rules, checked on the source: imports only go down the list, core
imports nothing else of hetserve, torch and ray only inside zoo/, profiling/, runtime/."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "hetserve"
ORDER = [
    "core",
    "workload",
    "planning",
    "scheduling",
    "engine",
    "sim",
    "runtime",
    "zoo",
    "profiling",
    "experiments",
]
HEAVY_OK = {"zoo", "profiling", "runtime"}


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


FILES = sorted(SRC.rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(SRC)))
def test_layering(path):
    rel = path.relative_to(SRC)
    layer = rel.parts[0] if len(rel.parts) > 1 else None
    for mod in _imports(path):
        top = mod.split(".")[0]
        if top in ("torch", "ray"):
            assert layer in HEAVY_OK, f"{rel} imports {top}"
        if top != "hetserve" or layer not in ORDER:
            continue
        parts = mod.split(".")
        if len(parts) < 2 or parts[1] not in ORDER:
            continue
        if layer == "core":
            assert parts[1] == "core", f"core module {rel} imports {mod}"
        elif layer in ("zoo", "profiling"):
            assert parts[1] in ("core", "zoo", "profiling"), f"{rel} imports {mod}"
        else:
            assert ORDER.index(parts[1]) <= ORDER.index(layer), f"{rel} imports {mod}"
