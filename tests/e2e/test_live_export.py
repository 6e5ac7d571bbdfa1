"""`gangsolve export` writes the snapshot format `gangsolve solve` reads."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest
from live_helpers import REPO, unique
from test_live_scheduling import tfjob, users_cluster

pytestmark = pytest.mark.e2e


def test_export_then_solve_offline(control_plane, make_nodes, namespace, tmp_path):
    scheduler = unique()  # nobody schedules these pods: the snapshot shows them pending
    master, gpu_nodes = users_cluster(make_nodes, namespace)
    tfjob(control_plane, namespace, scheduler, namespace, workers=7)
    out = tmp_path / "snap.json"
    env = dict(os.environ)
    run = subprocess.run(
        [sys.executable, "-m", "gangsolve", "export", "--kubeconfig", str(control_plane.kubeconfig), "-o", str(out)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    snap = orjson.loads(out.read_bytes())
    kinds = {o["kind"] for o in snap["items"]}
    assert {"Node", "Pod", "PodDisruptionBudget", "PriorityClass"} <= kinds
    assert not any("managedFields" in o["metadata"] for o in snap["items"])

    solved = subprocess.run(
        [sys.executable, "-m", "gangsolve", "solve", str(out), "--strict", "--scheduler-name", scheduler, "-o", "json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert solved.returncode == 0, solved.stderr
    plan = orjson.loads(solved.stdout)
    assert len(plan["bindings"]) == 8
    assert set(plan["bindings"].values()) <= set(gpu_nodes)
    assert master not in plan["bindings"].values()
