"""grpokit's import graph, read from the source: no cycles, and every import inside a function says why.

The graph holds every `import` and `from ... import` of grpokit modules at any depth (module level,
functions, methods, `if` blocks). `from grpokit.x import y` is an edge to module `grpokit.x.y` when that
is a module, else to `grpokit.x`. Importing `grpokit.a.b` runs `grpokit/a/__init__.py` first, so it is
an edge to package `grpokit.a` too, except from inside `grpokit.a` (its own package is already loading).

While working on a few packages: `python tests/test_imports.py recipe tasks` checks only those.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = SRC / "grpokit"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every grpokit module by its dotted name (a package by its own name, for its __init__.py)."""
    return {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _targets(node: ast.Import | ast.ImportFrom, importer: str, known: dict[str, Path]) -> set[str]:
    """The grpokit modules one import statement runs, its packages' __init__ included."""
    if isinstance(node, ast.Import):
        named = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:  # relative: from the importer's package
            package = importer if _is_package(known[importer]) else importer.rpartition(".")[0]
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = f"{package}.{base}" if base else package
        named = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
    out = set()
    for name in named:
        while name and name not in known:  # `import grpokit.x.attr` style: the module that holds it
            name = name.rpartition(".")[0]
        if not name:
            continue
        out.add(name)
        parts = name.split(".")
        for i in range(1, len(parts)):
            package = ".".join(parts[:i])
            if importer != package and not importer.startswith(package + "."):
                out.add(package)
    out.discard(importer)
    return out


def import_graph(known: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """Module -> the grpokit modules it imports (at any depth)."""
    known = known or modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        edges: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                edges |= _targets(node, name, known)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]], within: set[str] | None = None) -> list[str] | None:
    """One import cycle as a path that ends where it starts (only through modules in `within`), or None."""
    nodes = set(graph) if within is None else within
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ()) & nodes):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(nodes):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def _block_comment_above(lines: list[str], index: int) -> bool:
    """Whether the block of imports holding line `index` (0-based) opens with a comment: one reason may
    cover several imports together (and a `matplotlib.use(...)` between them)."""
    for line in reversed(lines[:index]):
        text = line.strip()
        if text.startswith("#"):
            return True
        if not text or text.startswith(("import ", "from ")) or text.startswith("matplotlib.use("):
            if "#" in text:
                return True
            continue
        return False
    return False


def uncommented_inner_imports(known: dict[str, Path]) -> list[str]:
    """`file:line: import` for each import inside a function or method with no comment on the line above
    or on its own line: an import placed there must say why (an optional dependency, a slow import)."""
    offenders = []
    for path in known.values():
        lines = path.read_text(encoding="utf-8").splitlines()
        tree = ast.parse("\n".join(lines), str(path))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if not isinstance(node, ast.Import | ast.ImportFrom):
                    continue
                same = " ".join(lines[node.lineno - 1 : node.end_lineno])
                if "#" not in same and not _block_comment_above(lines, node.lineno - 1):
                    where = f"{path.relative_to(SRC)}:{node.lineno}"
                    offenders.append(f"{where}: {ast.unparse(node)}")
    return sorted(set(offenders))


def _select(packages: Iterable[str] | None) -> dict[str, Path]:
    known = modules()
    if packages is None:
        return known
    prefixes = [f"grpokit.{p}" for p in packages]
    return {n: p for n, p in known.items() if any(n == q or n.startswith(q + ".") for q in prefixes)}


def problems(packages: Iterable[str] | None = None) -> list[str]:
    """What the tests below find, in `packages` only (e.g. ["recipe", "tasks"]) or everywhere."""
    selected = _select(packages)
    out = []
    cycle = find_cycle(import_graph(modules()), set(selected))
    if cycle:
        out.append("import cycle: " + " -> ".join(cycle))
    out += [f"inner import without a comment: {line}" for line in uncommented_inner_imports(selected)]
    return out


def test_the_graph_sees_a_cycle_and_inner_imports(tmp_path, monkeypatch):
    """The checks themselves: a two-module cycle through a package __init__ and an uncommented inner import."""
    package = tmp_path / "grpokit" / "pkg"
    package.mkdir(parents=True)
    (tmp_path / "grpokit" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("from grpokit.pkg import a\n")
    (package / "a.py").write_text("from grpokit.pkg.b import x\n")
    (package / "b.py").write_text("x = 1\n\ndef f():\n    # optional dependency: y\n    import json\n")
    (tmp_path / "grpokit" / "top.py").write_text("def g():\n    from grpokit.pkg.b import x\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path / "grpokit")
    known = modules()
    graph = import_graph(known)
    assert graph["grpokit.top"] == {"grpokit.pkg", "grpokit.pkg.b"}  # the package's __init__ runs first
    assert graph["grpokit.pkg.a"] == {"grpokit.pkg.b"}  # its own package is already loading
    assert find_cycle(graph) is None
    (package / "b.py").write_text("from grpokit.pkg import a\n")
    cycle = find_cycle(import_graph(modules()))
    assert cycle is not None and cycle[0] == cycle[-1] and "grpokit.pkg.b" in cycle
    assert uncommented_inner_imports(known) == ["grpokit/top.py:2: from grpokit.pkg.b import x"]


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_inner_imports_say_why():
    offenders = uncommented_inner_imports(modules())
    assert not offenders, (
        "imports inside functions need a one-line reason (a comment above or on the line: an optional dependency, "
        "a slow import), or belong at the top of the module:\n" + "\n".join(offenders)
    )


if __name__ == "__main__":
    found = problems(sys.argv[1:] or None)
    print("\n".join(found) or "no problems")
    sys.exit(1 if found else 0)
