"""The layering rules of docs/design.md, checked on the source: imports only go down the
list, core imports nothing else of hetserve, torch and ray only inside zoo/, repository/,
profiling/, runtime/.

``python -m tests.test_layering`` prints the package-level import graph (which package
imports which, with the number of importing modules) in the layers' order."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "hetserve"
ORDER = [
    "core",
    "workload",
    "planning",
    "scheduling",
    "control",
    "engine",
    "sim",
    "runtime",
    "zoo",
    "profiling",
    "repository",
    "experiments",
]
HEAVY_OK = {"zoo", "repository", "profiling", "runtime"}


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
        else:
            assert ORDER.index(parts[1]) <= ORDER.index(layer), f"{rel} imports {mod}"


def import_graph() -> dict[str, dict[str, int]]:
    """Per package of hetserve, the packages it imports and how many of its modules do
    (module-level and function-level imports alike)."""
    graph: dict[str, dict[str, int]] = {}
    for path in FILES:
        rel = path.relative_to(SRC)
        if len(rel.parts) < 2:
            continue
        src = rel.parts[0]
        seen = set()
        for mod in _imports(path):
            parts = mod.split(".")
            if parts[0] == "hetserve" and len(parts) > 1 and parts[1] != src:
                seen.add(parts[1])
        for dst in seen:
            graph.setdefault(src, {}).setdefault(dst, 0)
            graph[src][dst] += 1
    return graph


def test_the_import_graph_goes_down_the_layers():
    """The graph that ``python -m tests.test_layering`` prints has no edge upwards."""
    order = [*ORDER, "cli"]
    for src, dsts in import_graph().items():
        for dst in dsts:
            if src in order and dst in order:
                assert order.index(dst) < order.index(src), f"{src} -> {dst}"


if __name__ == "__main__":
    g = import_graph()
    for src in [*ORDER, "cli"]:
        deps = g.get(src, {})
        line = ", ".join(
            f"{d} ({n})"
            for d, n in sorted(
                deps.items(), key=lambda x: ORDER.index(x[0]) if x[0] in ORDER else 99
            )
        )
        print(f"{src:12} -> {line or '(nothing of hetserve)'}")


def test_the_protocol_module_imports_none_of_its_policies():
    """Built-in schedulers are named by module in ``protocol.BUILTIN`` and imported on
    first use; the protocol itself imports no policy."""
    # the protocol and its parameter checks are not policies
    policies = {p.stem for p in (SRC / "scheduling").glob("*.py")} - {
        "__init__",
        "protocol",
        "params",
    }
    found = []
    for node in ast.walk(ast.parse((SRC / "scheduling" / "protocol.py").read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found += [n for n in names if n.startswith("hetserve.scheduling.")
                  and n.split(".")[2] in policies]  # fmt: skip
    assert not found
    from hetserve.scheduling.protocol import BUILTIN

    assert {m.rsplit(".", 1)[-1] for m in BUILTIN.values()} <= policies


def _module_graph() -> dict[str, set[str]]:
    """Module -> the hetserve modules it imports (module-level, in functions, and under
    ``TYPE_CHECKING`` alike: each is a dependency of its design). ``from pkg import sub``
    depends on the module ``pkg.sub``, not on ``pkg``."""
    mods = {}
    for path in FILES:
        rel = path.relative_to(SRC.parent).with_suffix("")
        name = ".".join(rel.parts)
        mods[name.removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{a.name}" for a in node.names]
                if all(s in mods for s in subs):
                    graph[m] |= set(subs)
                elif node.module in mods:
                    graph[m].add(node.module)
            elif isinstance(node, ast.Import):
                graph[m] |= {a.name for a in node.names if a.name in mods}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    """No group of modules imports itself round (at module level, in functions or for
    types)."""
    assert _cycles(_module_graph()) == []


def test_no_private_name_is_imported_from_another_module():
    """A name that starts with ``_`` is its module's own: no other module imports it."""
    found = []
    for path in FILES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hetserve"):
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        found.append(f"{path.relative_to(SRC)}: {node.module}.{a.name}")
    assert not found, found
