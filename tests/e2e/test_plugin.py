"""`kubectl gangsolve` on a real cluster, run by the real kubectl from PATH with the current kubeconfig context:
its answers are `gangsolve solve`'s on a `gangsolve export` of the same cluster, and it needs only read access."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import yaml
from live_helpers import REPO, create, service_account_kubeconfig, unique
from test_live_scheduling import tfjob, users_cluster

pytestmark = pytest.mark.e2e

BIN = Path(sys.executable).parent  # where the package's console scripts are, kubectl-gangsolve among them


def kubectl_gangsolve(cp, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, KUBECONFIG=str(kubeconfig), PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(
        [str(cp.binaries.kubectl), "gangsolve", *args], capture_output=True, text=True, env=env, timeout=120
    )


def gangsolve(*args: str) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [sys.executable, "-m", "gangsolve", *args], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out


def answer(cp, kubeconfig: Path, *args: str):
    out = kubectl_gangsolve(cp, kubeconfig, *args, "-o", "json")
    assert out.returncode == 0, out.stderr
    return orjson.loads(out.stdout)


def test_the_plugin_answers_as_solve_does_on_an_export(control_plane, make_nodes, namespace, tmp_path):
    cp = control_plane
    scheduler = unique()  # nobody schedules these pods: the cluster holds still between the two reads
    _master, gpu_nodes = users_cluster(make_nodes, namespace)
    tfjob(cp, namespace, scheduler, namespace, workers=7)  # 7 GPUs of 8: placed
    tfjob(cp, namespace, scheduler, namespace, workers=9, name="big")  # 9 GPUs: never fits
    gate = [{"name": "example.com/hold"}]
    gated = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "held"}}
    gated["spec"] = {"schedulerName": scheduler, "schedulingGates": gate, "containers": [{"name": "c", "image": "x"}]}
    create(cp, namespace, gated)

    snapshot = tmp_path / "snap.json"
    gangsolve("export", "--kubeconfig", str(cp.kubeconfig), "--scheduler-name", scheduler, "-o", str(snapshot))
    solved = orjson.loads(
        gangsolve("solve", str(snapshot), "--skip-invalid", "--scheduler-name", scheduler, "-o", "json").stdout
    )
    gangs = {g["name"]: g for g in solved["gangs"]}
    mnist, big = f"{namespace}/mnist", f"{namespace}/big"
    assert gangs[mnist]["placed"]
    assert not gangs[big]["placed"]
    mnist_nodes = sorted({node for pod, node in solved["bindings"].items() if pod.startswith(f"{mnist}-")})
    assert set(mnist_nodes) <= set(gpu_nodes)

    flags = ("--scheduler-name", scheduler)
    plan = answer(cp, cp.kubeconfig, "plan", *flags)
    assert [row["gang"] for row in plan] == [mnist, big]  # binding now, then not planned
    assert {row["gang"] for row in plan} == set(gangs)
    assert (plan[0]["state"], plan[0]["nodes"]) == ("binds now", mnist_nodes)
    assert [row["reason"] for row in plan] == [gangs[mnist]["reason"], gangs[big]["reason"]]

    why = answer(cp, cp.kubeconfig, "why", f"{namespace}/big-worker-3", *flags)
    assert (why["gang"], why["state"], why["reason"]) == (big, "pending", gangs[big]["reason"])
    assert why["reason"].startswith("needs 9 nvidia.com/gpu, 8 free")
    assert why["expectedStart"] is None
    held = answer(cp, cp.kubeconfig, "why", f"{namespace}/held", *flags)
    assert (held["state"], held["reason"]) == ("gated", "scheduling gates: example.com/hold")
    assert f"{namespace}/held" in solved["gated"]

    queues = answer(cp, cp.kubeconfig, "queues", *flags)
    assert [{k: v for k, v in q.items() if k != "pendingGangs"} for q in queues] == solved["queues"]
    assert {q["name"]: q["pendingGangs"] for q in queues} == {"default": 1}

    table = kubectl_gangsolve(cp, cp.kubeconfig, "plan", *flags)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[1].split()[:2] == ["GANG", "QUEUE"]
    assert lines[2].startswith(mnist)
    assert "binds now" in lines[2]
    assert lines[3].startswith(big)
    assert "needs 9 nvidia.com/gpu" in lines[3]

    # --context picks a context other than the current one (here, a current context that leads nowhere).
    config = yaml.safe_load(Path(cp.kubeconfig).read_text())
    (context,) = config["contexts"]
    elsewhere = {"name": "elsewhere", "context": dict(context["context"], cluster="nowhere")}
    nowhere = {"name": "nowhere", "cluster": {"server": "https://127.0.0.1:1"}}
    config |= {"contexts": [context, elsewhere], "clusters": [*config["clusters"], nowhere]}
    two = tmp_path / "two-contexts"
    two.write_text(yaml.safe_dump(config | {"current-context": "elsewhere"}))
    assert kubectl_gangsolve(cp, two, "plan", *flags).returncode == 2
    chosen = answer(cp, two, "plan", *flags, "--context", context["name"])
    assert [row["gang"] for row in chosen] == [mnist, big]

    # Read access is all it needs: a ServiceAccount that may only get, list and watch gets the same plan.
    reader = unique("reader")
    cp.kubectl("create", "serviceaccount", reader, "-n", namespace)
    cp.kubectl("create", "clusterrole", reader, "--verb=get,list,watch", "--resource=*.*")
    try:
        cp.kubectl(
            "create", "clusterrolebinding", reader, f"--clusterrole={reader}", f"--serviceaccount={namespace}:{reader}"
        )
        kubeconfig = service_account_kubeconfig(cp, namespace, reader, tmp_path / "reader")
        read_only = answer(cp, kubeconfig, "plan", *flags)
        assert [row | {"expectedStart": None} for row in read_only] == [row | {"expectedStart": None} for row in plan]
        cp.kubectl("delete", "clusterrolebinding", reader)
        denied = kubectl_gangsolve(cp, kubeconfig, "plan", *flags)
        assert denied.returncode == 2
        assert denied.stdout == ""
        assert denied.stderr.startswith("error: cluster: ")
        assert "403" in denied.stderr
        assert len(denied.stderr.splitlines()) == 1
    finally:
        cp.kubectl("delete", "clusterrolebinding", reader, "--ignore-not-found")
        cp.kubectl("delete", "clusterrole", reader)
