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


@pytest.mark.parametrize("dist", sorted(DISTRIBUTIONS))
def test_every_data_file_in_a_package_folder_is_package_data(dist: str) -> None:
    """A file that is not Python ships only when its distribution lists it (tests read it from the source)."""
    folder, name = DISTRIBUTIONS[dist]
    config = tomllib.loads((ROOT / dist / "pyproject.toml").read_text())
    declared = config["tool"]["setuptools"].get("package-data", {})
    base = ROOT / folder
    data = {
        path.relative_to(base)
        for path in base.rglob("*")
        if path.is_file()
        and path.suffix not in (".py", ".pyc")
        and path.name != "pyproject.toml"
        and not {"results", "__pycache__"} & set(path.parts)
        and not any(part.endswith(".egg-info") for part in path.parts)
    }
    shipped = {path for path in data for pattern in declared.get(name, ()) if path.match(pattern)}
    assert data == shipped


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


# The harness's folders, each with the harness packages it never imports: a mode reaches down to what the modes
# share (bench/*.py) and to the static mode's runner and preemption rounds, never sideways into another mode; the
# shared modules reach no mode (`gangsolve bench` itself, bench_cli.py, runs them all); the report reads results,
# not how they were made; the control plane stands alone.
HARNESS = "gangsolve.bench"
NEVER_IMPORTS = {
    "bench": tuple(f"{HARNESS}.{p}" for p in ("static", "timeline", "live", "report", "devcluster")),
    "bench/static": tuple(f"{HARNESS}.{p}" for p in ("timeline", "live", "report", "devcluster")),
    "bench/timeline": tuple(f"{HARNESS}.{p}" for p in ("live", "report", "devcluster")),
    "bench/live": tuple(f"{HARNESS}.{p}" for p in ("timeline", "report")),
    "bench/report": tuple(f"{HARNESS}.{p}" for p in ("static", "live", "devcluster")),
    "bench/devcluster": tuple(f"{HARNESS}.{p.stem}" for p in (ROOT / "bench").iterdir() if p.name != "devcluster"),
}


def _harness_imports() -> dict[str, set[str]]:
    """Per harness file but the command's, what it imports, `from gangsolve.bench import x` as gangsolve.bench.x."""
    out: dict[str, set[str]] = {}
    for path in (ROOT / "bench").rglob("*.py"):
        if path.name == "bench_cli.py" or "results" in path.parts:
            continue
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.update(f"{node.module}.{a.name}" for a in node.names)
        out[str(path.relative_to(ROOT))] = names
    return out


def test_the_harness_modes_import_only_down() -> None:
    imports = _harness_imports()
    assert {str(Path(f).parent) for f in imports} == set(NEVER_IMPORTS)  # every folder has its rule
    offenders = {
        f: sorted(n for n in names if n.startswith(NEVER_IMPORTS[str(Path(f).parent)])) for f, names in imports.items()
    }
    assert {f: n for f, n in offenders.items() if n} == {}


# The scheduler's layers: the edge reads Kubernetes objects and knows nothing of who runs it; the cycle joins the
# edge to the solver; the live scheduler and the command line run the cycle.
LAYERS = {
    "src/gangsolve/edge": ("gangsolve.live", "gangsolve.cycle", "gangsolve.cli", "gangsolve.render"),
    "src/gangsolve/cycle.py": ("gangsolve.live", "gangsolve.cli", "gangsolve.render"),
    "src/gangsolve/live": ("gangsolve.cli", "gangsolve.render"),
}
# The live scheduler's actors talk through messages (live/messages.py), mailboxes and the store, never through
# each other's modules; run.py wires them.
ACTORS = ("watchers", "solver_actor", "binder", "feedback", "leader", "http")


def test_the_edge_the_cycle_and_the_live_scheduler_import_only_down() -> None:
    imports = _imports("src/gangsolve")
    offenders = {}
    for path, names in imports.items():
        for where, never in LAYERS.items():
            if path == where or path.startswith(where + "/"):
                offenders[path] = sorted(n for n in names if n.startswith(never))
    assert {f: n for f, n in offenders.items() if n} == {}


def test_no_actor_imports_another() -> None:
    imports = _imports("src/gangsolve/live")
    actor_modules = {f"gangsolve.live.{a}" for a in ACTORS}
    offenders = {
        path: sorted(n for n in names if n in actor_modules and n != f"gangsolve.live.{Path(path).stem}")
        for path, names in imports.items()
        if Path(path).stem in ACTORS
    }
    assert {f: n for f, n in offenders.items() if n} == {}
    assert all((ROOT / "src/gangsolve/live" / f"{a}.py").exists() for a in ACTORS)  # the list names real modules


def test_no_module_outside_the_tests_is_over_800_lines() -> None:
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for folder in ("src", "solver", "bench")
        for path in (ROOT / folder).rglob("*.py")
        if "results" not in path.parts
    }
    assert {f: n for f, n in sizes.items() if n > 800} == {}
