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
