"""The three distributions and their layering: every package folder is in its distribution's list (a missing
one installs fine in development and is absent from the wheel), and imports only run down the layers:
bench -> edge and live -> solver."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# distribution folder -> (the folder its packages map from, the import name of that folder)
DISTRIBUTIONS = {
    ".": ("src/gangsolve", "gangsolve"),
    "solver": ("solver", "gangsolve.solver"),
    "bench": ("bench", "gangsolve.bench"),
}


def _declared(dist: str) -> set[str]:
    config = tomllib.loads((ROOT / dist / "pyproject.toml").read_text())
    return set(config["tool"]["setuptools"]["packages"])


def _on_disk(folder: str, name: str) -> set[str]:
    base = ROOT / folder
    return {
        ".".join([name, *init.parent.relative_to(base).parts])
        for init in base.rglob("__init__.py")
        if "results" not in init.parts
    }


@pytest.mark.parametrize("dist", sorted(DISTRIBUTIONS))
def test_every_package_folder_is_in_its_distribution(dist: str) -> None:
    folder, name = DISTRIBUTIONS[dist]
    assert _declared(dist) == _on_disk(folder, name)


def _imports(folder: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for path in (ROOT / folder).rglob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module)
        out[str(path.relative_to(ROOT))] = names
    return out


def test_the_edge_and_live_scheduler_never_import_the_harness() -> None:
    offenders = {
        f: sorted(n for n in names if n.startswith("gangsolve.bench")) for f, names in _imports("src/gangsolve").items()
    }
    assert {f: n for f, n in offenders.items() if n} == {}


def test_the_solver_distribution_depends_on_nothing_kubernetes() -> None:
    config = tomllib.loads((ROOT / "solver" / "pyproject.toml").read_text())
    names = {d.split(">")[0].split("=")[0].split("[")[0].strip() for d in config["project"]["dependencies"]}
    assert names == {"ortools", "numpy"}
