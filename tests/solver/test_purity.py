"""The core stays pure: no Kubernetes, YAML, network or async imports anywhere under solver/, and nothing of
gangsolve outside gangsolve.solver."""

import ast
from pathlib import Path

import gangsolve.solver as solver

FORBIDDEN = {
    "kubernetes_asyncio",
    "kubernetes",
    "yaml",
    "orjson",
    "anyio",
    "asyncio",
    "prometheus_client",
    "gangsolve",
    "socket",
    "http",
    "urllib",
    "subprocess",
}


def test_solver_imports_nothing_kubernetes_or_io():
    root = Path(solver.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{path.name}: {n}"
                for n in names
                if n.split(".")[0] in FORBIDDEN and not (n == "gangsolve.solver" or n.startswith("gangsolve.solver."))
            ]
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "open":
                offenders.append(f"{path.name}: open()")
    assert offenders == []


def _parts(path: Path) -> tuple[str, ...]:
    parts = path.with_suffix("").parts
    return parts[:-1] if parts[-1] == "__init__" else parts


def _solver_imports() -> dict[str, set[str]]:
    """Each solver module and the solver modules it imports, wherever the import stands (under
    `if TYPE_CHECKING:` or in a function too)."""
    root = Path(solver.__file__).parent
    modules = {".".join(["gangsolve.solver", *_parts(p.relative_to(root))]): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                # `from package import module` imports the module; `from module import name`, the module.
                for alias in node.names:
                    module = f"{node.module}.{alias.name}"
                    imported.add(module if module in modules else node.module)
        graph[name] = {m for m in imported if m in modules and m != name}
    return graph


def test_solver_modules_import_each_other_without_a_cycle():
    """Types used by several modules live below all of them: no module imports one that imports it back,
    not even for type hints."""
    graph = _solver_imports()
    cycles = []
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            cycles.append(" -> ".join([*path[path.index(name) :], name]))
            return
        if name in done:
            return
        for imported in sorted(graph[name]):
            visit(imported, [*path, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
    assert cycles == []
