"""stages/, rollout/ and runs/ import down the tree: no import cycle through them, and an import inside a
function only with its reason in a comment (`# slow import: ...` or `# optional dependency: ...`)."""

import ast
from pathlib import Path

import grpokit

SRC = Path(grpokit.__file__).parent
PACKAGES = ("stages", "rollout", "runs")
REASONS = ("# slow import:", "# optional dependency:")


def _module_name(path: Path) -> str:
    return ".".join(("grpokit", *path.relative_to(SRC).with_suffix("").parts)).removesuffix(".__init__")


def _import_graph() -> dict[str, set[str]]:
    """grpokit module -> the grpokit modules it imports anywhere in its file (inside functions too)."""
    modules = {_module_name(path): path for path in SRC.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("grpokit"):
                for alias in node.names:  # `from grpokit.runs import disk` imports the module grpokit.runs.disk
                    full = f"{node.module}.{alias.name}"
                    targets.add(full if full in modules else node.module)
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names if alias.name.startswith("grpokit"))
        graph[name] = {target for target in targets if target in modules and target != name}
    return graph


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return False


def _ours(name: str) -> bool:
    return any(name.startswith(f"grpokit.{package}.") for package in PACKAGES)


def test_no_import_cycle_runs_through_stages_rollout_or_runs():
    graph = _import_graph()
    cycles = sorted(
        f"{name} -> {target}"
        for name, targets in graph.items()
        if _ours(name)
        for target in targets
        if _reaches(graph, target, name)
    )
    assert cycles == []


def test_imports_inside_functions_say_why():
    unexplained = []
    for package in PACKAGES:
        for path in sorted((SRC / package).glob("*.py")):
            lines = path.read_text(encoding="utf-8").splitlines()
            for function in ast.walk(ast.parse("\n".join(lines))):
                if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                for node in ast.walk(function):
                    if isinstance(node, ast.Import | ast.ImportFrom):
                        above = lines[node.lineno - 2].strip()
                        if not above.startswith(REASONS):
                            unexplained.append(f"{package}/{path.name}:{node.lineno}")
    assert unexplained == []
