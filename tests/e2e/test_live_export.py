"""`gangsolve export` writes the snapshot format `gangsolve solve` reads, with the succeeded pods of the scheduler
it names (what the live runtime history learns from)."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest
from live_helpers import REPO, create, unique
from test_live_scheduling import tfjob, users_cluster

pytestmark = pytest.mark.e2e


def test_export_then_solve_offline(control_plane, make_nodes, namespace, tmp_path):
    scheduler = unique()  # nobody schedules these pods: the snapshot shows them pending
    master, gpu_nodes = users_cluster(make_nodes, namespace)
    tfjob(control_plane, namespace, scheduler, namespace, workers=7)
    for name, scheduler_name in (("done-ours", scheduler), ("done-theirs", "default-scheduler")):
        succeed(control_plane, namespace, name, scheduler_name)
    out = tmp_path / "snap.json"
    env = dict(os.environ)
    kubeconfig = str(control_plane.kubeconfig)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "gangsolve",
            "export",
            "--kubeconfig",
            kubeconfig,
            "--scheduler-name",
            scheduler,
            "-o",
            str(out),
        ],
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
    finished = {o["metadata"]["name"] for o in snap["items"] if o.get("status", {}).get("phase") == "Succeeded"}
    assert finished == {"done-ours"}

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


def succeed(cp, namespace: str, name: str, scheduler: str) -> None:
    """A pod of `scheduler` that ran for ten minutes and succeeded (left unbound: nothing else touches it)."""
    create(
        cp,
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {"schedulerName": scheduler, "containers": [{"name": "main", "image": "busybox"}]},
        },
    )
    terminated = {"exitCode": 0, "reason": "Completed", "finishedAt": "2026-01-01T00:10:00Z"}
    status = {
        "phase": "Succeeded",
        "startTime": "2026-01-01T00:00:00Z",
        "containerStatuses": [
            {
                "name": "main",
                "image": "busybox",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": terminated},
            }
        ],
    }
    path = f"/api/v1/namespaces/{namespace}/pods/{name}/status"
    cp.request("PATCH", path, {"status": status}, content_type="application/merge-patch+json")
