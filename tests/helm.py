"""Rendering the Helm chart with the pinned helm (the `helm` fixture is in tests/conftest.py)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import yaml

CHART = Path(__file__).resolve().parents[1] / "charts" / "gangsolve"
CRD_NAME = "podgroups.scheduling.x-k8s.io"

Helm = Callable[..., subprocess.CompletedProcess[str]]


def render(helm: Helm, *sets: str, namespace: str = "gangsolve-system", release: str = "gs") -> list[dict]:
    args = ["template", release, str(CHART), "--namespace", namespace]
    for s in sets:  # "key=value" for --set, or a whole flag such as "--set-json=key=0.5"
        args += [s] if s.startswith("--") else ["--set", s]
    return [d for d in yaml.safe_load_all(helm(*args).stdout) if d]


def only(docs: list[dict], kind: str) -> dict:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]
