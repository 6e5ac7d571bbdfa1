"""The local control plane is the real thing: real apiserver, controllers and scheduler; kwok nodes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from kubernetes_asyncio import client as k8s_client

from gangsolve.bench.devcluster import GPU_RESOURCE, Binaries, ControlPlane

pytestmark = pytest.mark.e2e


def test_binaries_report_pinned_versions(binaries: Binaries) -> None:
    k8s = binaries.versions["KUBERNETES_VERSION"]
    out = subprocess.run([binaries.kube_apiserver, "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"Kubernetes {k8s}"
    out = subprocess.run(
        [binaries.kubectl, "version", "--client", "-o", "json"], capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout)["clientVersion"]["gitVersion"] == k8s
    out = subprocess.run([binaries.etcd, "--version"], capture_output=True, text=True, check=True)
    assert f"etcd Version: {binaries.versions['ETCD_VERSION'].lstrip('v')}" in out.stdout
    out = subprocess.run([binaries.helm, "version", "--short"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith(binaries.versions["HELM_VERSION"])
    out = subprocess.run([binaries.kwok, "--version"], capture_output=True, text=True, check=True)
    assert binaries.versions["KWOK_VERSION"].lstrip("v") in out.stdout + out.stderr


def test_kwok_nodes_become_ready_with_requested_capacity(control_plane: ControlPlane, make_nodes, kubectl) -> None:
    names = make_nodes(
        2,
        cpu="16",
        memory="64Gi",
        gpus=4,
        pods=50,
        labels={"gangsolve.dev/pool": "a100"},
        taints=["gangsolve.dev/dedicated=train:NoSchedule"],
    )
    for name in names:
        node = json.loads(kubectl("get", "node", name, "-o", "json").stdout)
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}
        assert ready["Ready"] == "True"
        for field in ("capacity", "allocatable"):
            res = node["status"][field]
            assert (res["cpu"], res["memory"], res["pods"], res[GPU_RESOURCE]) == ("16", "64Gi", "50", "4")
        assert node["metadata"]["labels"]["gangsolve.dev/pool"] == "a100"
        assert {"key": "gangsolve.dev/dedicated", "value": "train", "effect": "NoSchedule"} in node["spec"]["taints"]
        # kwok keeps the node alive through its Lease, like a kubelet does.
        lease = control_plane.get(f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}")
        assert lease is not None
        assert lease["spec"]["leaseDurationSeconds"] == 40
        assert lease["spec"]["renewTime"]


@pytest.mark.asyncio
async def test_default_scheduler_binds_pod_and_kwok_runs_it(
    control_plane: ControlPlane, make_nodes, namespace: str, kube_client
) -> None:
    # Two plain nodes and one GPU node: only the GPU node fits the pod, so landing there is the scheduler's
    # doing (filtering on the extended resource, the node selector and the toleration).
    make_nodes(2, cpu="8", memory="32Gi")
    (gpu_node,) = make_nodes(
        1,
        cpu="8",
        memory="32Gi",
        gpus=2,
        labels={"gangsolve.dev/pool": "gpu"},
        taints=["gangsolve.dev/gpu=true:NoSchedule"],
    )
    core = k8s_client.CoreV1Api(kube_client)
    pod = k8s_client.V1Pod(
        metadata=k8s_client.V1ObjectMeta(name="trainer-0"),
        spec=k8s_client.V1PodSpec(
            node_selector={"gangsolve.dev/pool": "gpu"},
            tolerations=[
                k8s_client.V1Toleration(key="gangsolve.dev/gpu", operator="Equal", value="true", effect="NoSchedule")
            ],
            containers=[
                k8s_client.V1Container(
                    name="main",
                    image="registry.invalid/trainer:1",
                    resources=k8s_client.V1ResourceRequirements(
                        requests={"cpu": "2", "memory": "4Gi", GPU_RESOURCE: "1"}, limits={GPU_RESOURCE: "1"}
                    ),
                )
            ],
        ),
    )
    await core.create_namespaced_pod(namespace, pod)

    with anyio.fail_after(60):
        while True:
            got = await core.read_namespaced_pod("trainer-0", namespace)
            if got.status.phase == "Running":
                break
            await anyio.sleep(0.25)
    assert got.spec.node_name == gpu_node
    conditions = {c.type: c.status for c in got.status.conditions}
    assert conditions["PodScheduled"] == "True"
    assert conditions["Ready"] == "True"
    assert got.status.container_statuses[0].state.running is not None

    events = await core.list_namespaced_event(
        namespace, field_selector="involvedObject.name=trainer-0,reason=Scheduled"
    )
    reporters = {e.reporting_component or (e.source.component if e.source else None) for e in events.items}
    assert "default-scheduler" in reporters, events.items


def test_controller_manager_keeps_pdb_status_collects_garbage_and_makes_service_accounts(
    control_plane: ControlPlane, make_nodes, namespace: str, kubectl
) -> None:
    make_nodes(1)
    kubectl(
        "apply",
        "-n",
        namespace,
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "List",
                "items": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {"name": "worker", "labels": {"app": "w"}},
                        "spec": {"containers": [{"name": "c", "image": "registry.invalid/w:1"}]},
                    },
                    {
                        "apiVersion": "policy/v1",
                        "kind": "PodDisruptionBudget",
                        "metadata": {"name": "w"},
                        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "w"}}},
                    },
                    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}},
                ],
            }
        ),
    )
    ns = f"/api/v1/namespaces/{namespace}"
    owner = control_plane.get(f"{ns}/configmaps/owner")
    assert owner is not None
    control_plane.request(
        "POST",
        f"{ns}/configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "dependent",
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
                ],
            },
        },
    )

    def pdb_healthy() -> bool:
        pdb = control_plane.get(f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/w")
        status = (pdb or {}).get("status", {})
        return status.get("currentHealthy") == 1 and status.get("expectedPods") == 1

    control_plane.wait_for(
        pdb_healthy, timeout=60, what="PDB status (disruption controller)", component="kube-controller-manager"
    )

    control_plane.request("DELETE", f"{ns}/configmaps/owner")
    control_plane.wait_for(
        lambda: control_plane.get(f"{ns}/configmaps/dependent") is None,
        timeout=60,
        what="the garbage collector to delete the dependent",
        component="kube-controller-manager",
    )
    # The namespace fixture waited for the `default` ServiceAccount; its root CA bundle is published too.
    control_plane.wait_for(
        lambda: control_plane.get(f"{ns}/configmaps/kube-root-ca.crt") is not None,
        timeout=60,
        what="kube-root-ca.crt",
        component="kube-controller-manager",
    )


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers kill(0); it is gone for our purposes only once reaped.
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists()


def test_apiserver_restarts_on_demand_and_teardown_leaves_nothing(binaries: Binaries) -> None:
    cp = ControlPlane(binaries=binaries, scheduler=False)
    with cp:
        before = cp.pids()
        assert set(before) == {"etcd", "kube-apiserver", "kube-controller-manager", "kwok"}
        cp.create_namespace("before-restart")

        cp.restart_apiserver()
        after = cp.pids()
        assert after["kube-apiserver"] != before["kube-apiserver"]
        assert _gone(before["kube-apiserver"])
        assert {k: v for k, v in after.items() if k != "kube-apiserver"} == {
            k: v for k, v in before.items() if k != "kube-apiserver"
        }
        # Data survived (it lives in etcd) and every client reconnected: kwok still makes new nodes Ready.
        assert cp.get("/api/v1/namespaces/before-restart") is not None
        cp.add_nodes(["after-restart"], timeout=90)

        # A crash (SIGKILL) rather than a graceful stop: the apiserver comes back all the same.
        cp.stop_apiserver(grace=0)
        assert cp.get("/api/v1/namespaces") is None
        cp.check_alive()  # stopped on purpose: not reported as a crash
        cp.start_apiserver()
        assert cp.get("/api/v1/namespaces/before-restart") is not None
        cp.add_nodes(["after-crash"], timeout=90)
        pids = cp.pids()
        workdir = cp.workdir
    assert workdir is not None
    assert not workdir.exists()
    assert cp.pids() == {}
    for name, pid in pids.items():
        assert _gone(pid), f"{name} (pid {pid}) survived teardown"
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)  # nothing left in its process group either


def test_cli_dev_cluster_up_serves_kubectl_and_stops_on_ctrl_c(binaries: Binaries, tmp_path: Path) -> None:
    workdir = tmp_path / "cluster"
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "gangsolve"),
            "dev-cluster",
            "up",
            "--nodes",
            "2",
            "--gpus",
            "8",
            "--workdir",
            str(workdir),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        kubeconfig = None
        deadline = time.monotonic() + 120
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("export KUBECONFIG="):
                kubeconfig = line.strip().split("=", 1)[1]
                break
            assert time.monotonic() < deadline
        assert kubeconfig, proc.stderr.read() if proc.stderr else ""
        nodes = subprocess.run(
            [binaries.kubectl, "--kubeconfig", kubeconfig, "get", "nodes", "-o", "json"],
            capture_output=True,
            text=True,
            check=True,
        )
        items = json.loads(nodes.stdout)["items"]
        assert len(items) == 2
        assert all(n["status"]["allocatable"][GPU_RESOURCE] == "8" for n in items)
    finally:
        proc.send_signal(2)  # SIGINT, what Ctrl-C sends
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "stopped" in err
    # Nothing still runs from this cluster's directory.
    leftovers = []
    for stat in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(workdir) in stat.read_bytes().decode(errors="replace"):
                leftovers.append(stat.parent.name)
        except OSError:
            pass
    assert not leftovers, f"processes left running: {leftovers}"
