"""The import graph: no cycle between any two modules of the funcsion packages, and the
package import rules of DESIGN.md (imports point down the package table; storage_functions
and metadata_server never import each other).

Every import counts, wherever it stands: module level, under ``if TYPE_CHECKING:`` and
inside functions. A type-only circle does not fail at run time, but it hides what a module
depends on, which is what a reader and a test double need to know; a function-local import
is still a dependency. An edge goes to the most specific module an import names
(``from a.b import c`` names ``a.b.c`` where that is a module, else ``a.b``); parent
packages are not edges, since their ``__init__`` is already being imported."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("funcsion_errors", "wds", "hdag", "funcsion_rpc", "lifetime_model", "metadata_server",
            "storage_functions", "sdk")
# DESIGN.md's package table, "may import" column (funcsion_errors, the root of the
# exception tree, sits under every package and imports nothing of ours).
MAY_IMPORT: dict[str, frozenset[str]] = {
    "funcsion_errors": frozenset(),
    "wds": frozenset({"funcsion_errors"}),
    "hdag": frozenset({"funcsion_errors", "wds"}),
    "lifetime_model": frozenset({"funcsion_errors", "wds", "hdag"}),
    "funcsion_rpc": frozenset({"funcsion_errors"}),
    "metadata_server": frozenset({"funcsion_errors", "wds", "hdag", "lifetime_model", "funcsion_rpc"}),
    "storage_functions": frozenset({"funcsion_errors"}),
    "sdk": frozenset({"funcsion_errors", "wds", "hdag", "lifetime_model", "funcsion_rpc",
                      "metadata_server", "storage_functions"}),
}
# The table's order, bottom first: a package imports only packages before it.
ORDER = ("funcsion_errors", "wds", "hdag", "lifetime_model", "funcsion_rpc", "metadata_server",
         "storage_functions", "sdk")


def _modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the packages: dotted name -> (file, is a package ``__init__``)."""
    found: dict[str, tuple[Path, bool]] = {}
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            found[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return found


def _imports(name: str, path: Path, is_pkg: bool,
             modules: dict[str, tuple[Path, bool]]) -> dict[str, int]:
    """The modules of ours that ``name`` imports anywhere in its file, each with the line
    of its first import."""
    found: dict[str, int] = {}

    def add(target: str, line: int) -> None:
        if target != name and target.split(".")[0] in PACKAGES:
            found.setdefault(target, line)

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                add(sub if sub in modules else module, node.lineno)
    return found


def _graph() -> dict[str, dict[str, int]]:
    modules = _modules()
    return {name: _imports(name, path, is_pkg, modules) for name, (path, is_pkg) in modules.items()}


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle through each strongly connected component of more than one module
    (Tarjan's algorithm, iterative), as the list of modules around it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in graph:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return [_cycle_in(set(c), graph) for c in components]


def _cycle_in(component: set[str], graph: dict[str, dict[str, int]]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first)."""
    start = min(component)
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node]):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [*reversed(path), start]
                if nxt in component and nxt not in parent:
                    parent[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover - a component has one


def _describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    steps = [f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:])]
    return " -> ".join([*steps, cycle[-1]])


def test_the_finder_names_a_cycle() -> None:
    """The finder itself: a three-module circle and a self-contained tail."""
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3, "d": 4}, "d": {}}
    assert _cycles(graph) == [["a", "b", "c", "a"]]
    assert _describe(["a", "b", "c", "a"], graph) == "a (line 1) -> b (line 2) -> c (line 3) -> a"
    assert _cycles({"a": {"b": 1}, "b": {}}) == []


def test_the_walk_sees_type_only_and_local_imports(tmp_path: Path) -> None:
    """An import under ``if TYPE_CHECKING:`` and one inside a function are edges; a
    relative import resolves against the package."""
    (tmp_path / "m.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from ._server import Daemon\n"
        "def f() -> None:\n"
        "    from storage_functions.daemon import _put\n")
    modules = {"storage_functions.daemon._server": (tmp_path, False),
               "storage_functions.daemon._put": (tmp_path, False)}
    assert _imports("storage_functions.daemon.m", tmp_path / "m.py", False, modules) == {
        "storage_functions.daemon._server": 3, "storage_functions.daemon._put": 5}


def test_no_import_cycle_between_modules() -> None:
    graph = _graph()
    cycles = [_describe(c, graph) for c in _cycles(graph)]
    assert not cycles, (
        f"{len(cycles)} import cycle(s), type-only and function-local imports included; "
        "give one side a Protocol (or move the shared type down) so imports point one way:\n"
        + "\n".join(cycles))


def test_package_import_rules() -> None:
    """Imports point down DESIGN.md's package table, and storage_functions and
    metadata_server never import each other: they talk over the wire."""
    assert set(MAY_IMPORT) == set(PACKAGES) == set(ORDER)
    for pkg, allowed in MAY_IMPORT.items():
        assert all(ORDER.index(dep) < ORDER.index(pkg) for dep in allowed), pkg
    assert "metadata_server" not in MAY_IMPORT["storage_functions"]
    assert "storage_functions" not in MAY_IMPORT["metadata_server"]
    wrong = sorted(
        f"{name} imports {target} (line {line}); {name.split('.')[0]} may import only "
        f"{sorted(MAY_IMPORT[name.split('.')[0]]) or 'the standard library and third parties'}"
        for name, targets in _graph().items() for target, line in targets.items()
        if target.split(".")[0] != name.split(".")[0]
        and target.split(".")[0] not in MAY_IMPORT[name.split(".")[0]])
    assert not wrong, "\n".join(wrong)
