"""The container image's install steps, run outside Docker (no Docker engine is needed).

The test reads the Dockerfile's build stage, copies exactly what its COPY instructions copy into a fresh
build context, runs its RUN lines that call hack/install-image-deps.sh with the image's environment
variables pointed at a fresh directory, and then uses the result the way the image does: from another
directory, with a HOME it cannot write to, checking that nothing in the environment is written at run time
(the image runs with a read-only root filesystem).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INSTALL_SCRIPT = "hack/install-image-deps.sh"

pytestmark = pytest.mark.image


def _instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with line continuations joined and comments dropped."""
    lines: list[str] = []
    pending = ""
    for raw in dockerfile.read_text().splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    assert not pending, "Dockerfile ends with a line continuation"
    out = []
    for line in lines:
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def _build_stage(dockerfile: Path) -> list[tuple[str, str]]:
    stages: list[list[tuple[str, str]]] = []
    for instr, args in _instructions(dockerfile):
        if instr == "FROM":
            stages.append([])
        elif stages:
            stages[-1].append((instr, args))
    assert len(stages) == 2, "expected a build stage and a runtime stage"
    return stages[0]


def _without_flags(args: str) -> str:
    return re.sub(r"^(--[a-z-]+=\S+\s+)+", "", args)


def _makefile_uv_version() -> str:
    match = re.search(r"^UV_VERSION\s*:=\s*(\S+)", (ROOT / "Makefile").read_text(), re.M)
    assert match
    return match.group(1)


def _tree(path: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(path)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in path.rglob("*")
        if p.is_file() and not p.is_symlink()
    }


def test_image_install_steps_give_a_working_gangsolve(tmp_path: Path) -> None:
    uv = ROOT / ".tools" / "bin" / "uv"
    if not uv.exists():
        uv = Path(shutil.which("uv") or "")
    assert uv.is_file(), "uv not found: run `make sync` (it bootstraps .tools/bin/uv)"

    context = tmp_path / "src"
    context.mkdir()
    venv = tmp_path / "opt" / "gangsolve"
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH", "UV_PROJECT_ENVIRONMENT"}}
    env["UV"] = str(uv)
    ran: list[str] = []
    for instr, args in _build_stage(ROOT / "Dockerfile"):
        if instr == "ARG" and args.startswith("UV_VERSION="):
            assert args.partition("=")[2] == _makefile_uv_version(), "Dockerfile and Makefile pin different uv"
        elif instr == "ENV":
            for key, _, _value in (item.partition("=") for item in shlex.split(args)):
                # The image's locations, moved into the test's directory; the interpreter is this one's base.
                env[key] = {"GANGSOLVE_VENV": str(venv), "PYTHON": sys._base_executable}[key]
        elif instr == "COPY":
            assert not args.startswith("--from"), "the build stage copies only from the build context"
            *sources, dest = shlex.split(args)
            for source in sources:
                target = context / dest / (Path(source).name if dest.endswith("/") else "")
                if (ROOT / source).is_dir():
                    shutil.copytree(
                        ROOT / source,
                        context / dest,
                        dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "results", "*.egg-info"),
                    )
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(ROOT / source, target)
        elif instr == "RUN":
            command = _without_flags(args)
            if INSTALL_SCRIPT not in command:
                continue  # installing uv itself: the test brings the same version
            subprocess.run(["bash", "-c", command], cwd=context, env=env, check=True)
            ran.append(command)
    assert [c.split()[1] for c in ran] == ["--deps-only", '"$GANGSOLVE_VENV"'], ran

    # The environment holds gangsolve and the locked runtime dependencies, without the dev group.
    version = subprocess.run([str(uv), "--version"], capture_output=True, text=True, check=True).stdout
    assert version.split()[1] == _makefile_uv_version()
    freeze = subprocess.run(
        [str(uv), "pip", "freeze", "--python", str(venv / "bin" / "python")],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    names = {re.split(r"==| @ ", line)[0].lower() for line in freeze.splitlines()}
    assert {"gangsolve", "gangsolve-solver", "ortools", "kubernetes-asyncio", "prometheus-client"} <= names
    assert not names & {"pytest", "hypothesis"}, "dev dependencies leaked into the image"
    leaked = names & {"gangsolve-bench", "matplotlib", "cryptography"}
    assert not leaked, f"the bench extra (harness, dev cluster, plots) leaked into the scheduler image: {leaked}"

    # Run it as the image does: not from the checkout, HOME unwritable, nothing written into the environment.
    run_env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8"}
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    before = _tree(venv)
    out = subprocess.run(
        ["gangsolve", "--version"], cwd=workdir, env=run_env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "gangsolve, version 0.1.0"
    solved = subprocess.run(
        [
            "gangsolve",
            "solve",
            str(ROOT / "examples" / "tfjob-8.yaml"),
            "--scheduler-name",
            "kube-batchd",
            "-o",
            "json",
        ],
        cwd=workdir,
        env=run_env,
        capture_output=True,
        text=True,
        check=True,
    )
    plan = json.loads(solved.stdout)
    assert len(plan["bindings"]) == 8
    assert "apollo25" not in plan["bindings"].values()
    assert [g["placed"] for g in plan["gangs"]] == [True]
    assert _tree(venv) == before, "running gangsolve wrote into its environment (bytecode not precompiled?)"
    assert not list(workdir.iterdir())
    # The harness is not there, and asking for it says how to get it, in one line.
    bench = subprocess.run(["gangsolve", "bench", "--list"], cwd=workdir, env=run_env, capture_output=True, text=True)
    assert bench.returncode == 2
    assert "gangsolve[bench]" in bench.stderr
    assert "Traceback" not in bench.stderr
    # The image's entrypoint, `gangsolve run`, is there.
    entry = subprocess.run(["gangsolve", "run", "--help"], cwd=workdir, env=run_env, capture_output=True, text=True)
    assert entry.returncode == 0, entry.stderr
