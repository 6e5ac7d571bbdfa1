"""Fixtures shared by the unit and e2e tests: the pinned binaries of the local control plane, and helm."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gangsolve.bench.devcluster import Binaries, BinariesMissing
from tests.helm import Helm


@pytest.fixture(scope="session")
def binaries() -> Binaries:
    """Missing binaries fail (never skip) every test that needs them, with the fix: `make binaries`."""
    try:
        return Binaries.locate()
    except BinariesMissing as e:
        missing = str(e)
    pytest.fail(missing, pytrace=False)


@pytest.fixture(scope="session")
def helm(binaries: Binaries, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """The pinned helm, with its cache, config and data in a temporary directory."""
    home = tmp_path_factory.mktemp("helm")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_") and k != "KUBECONFIG"}
    env.update(
        HELM_CACHE_HOME=str(home / "cache"), HELM_CONFIG_HOME=str(home / "config"), HELM_DATA_HOME=str(home / "data")
    )

    def run(*args: str, check: bool = True, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
        full_env = dict(env, **({"KUBECONFIG": str(kubeconfig)} if kubeconfig else {}))
        out = subprocess.run([str(binaries.helm), *args], capture_output=True, text=True, env=full_env, timeout=120)
        if check and out.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({out.returncode}):\n{out.stderr}")
        return out

    return run
