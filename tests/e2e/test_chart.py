"""The Helm chart installed by the real helm on the real API server: objects, RBAC, and `gangsolve run`
authenticated as the chart's ServiceAccount scheduling a gang. (What needs only helm is in
tests/test_chart_render.py.)

Cluster-scoped objects (ClusterRole, ClusterRoleBinding, the PodGroup CRD) come from one install shared by
this module; it is uninstalled, and the CRD it created deleted, at the end.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from live_helpers import service_account_kubeconfig

from gangsolve.bench.devcluster import GPU_RESOURCE, ApiError, Binaries, ControlPlane
from gangsolve.bench.devcluster.controlplane import free_port
from tests.helm import CHART, CRD_NAME, Helm, only, render

pytestmark = pytest.mark.e2e

VOLCANO_CRD_NAME = "podgroups.scheduling.volcano.sh"
# Volcano's PodGroup, reduced to what these tests touch: the environment of a cluster that runs Volcano's
# controllers (the chart does not install it). Without it kubectl cannot resolve the resource for can-i.
VOLCANO_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": VOLCANO_CRD_NAME},
    "spec": {
        "group": "scheduling.volcano.sh",
        "scope": "Namespaced",
        "names": {"kind": "PodGroup", "listKind": "PodGroupList", "plural": "podgroups", "singular": "podgroup"},
        "versions": [
            {
                "name": "v1beta1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "minMember": {"type": "integer", "format": "int32"},
                                    "queue": {"type": "string"},
                                    "minResources": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                },
                            },
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
            }
        ],
    },
}
PG_PATH = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups"

# ------------------------------------------------------------------------------------------------ installed


@dataclass
class Install:
    namespace: str
    release: str
    service_account: str
    fullname: str

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


@pytest.fixture(scope="module")
def installed(control_plane: ControlPlane, helm: Helm) -> Iterator[Install]:
    """`helm install` of the chart into a fresh namespace of the real control plane."""
    namespace = f"gangsolve-system-{secrets.token_hex(3)}"
    release = f"gs-{secrets.token_hex(3)}"
    control_plane.create_namespace(namespace)
    crd_was_there = control_plane.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}")
    helm(
        "install",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--set",
        f"crds.installPodGroup={'false' if crd_was_there else 'true'}",
        kubeconfig=control_plane.kubeconfig,
    )
    if crd_was_there:  # another test made it: apply the chart's CRD over it, as the API server would take it
        crd = helm("template", release, str(CHART), "--show-only", "templates/crd-podgroup.yaml").stdout
        control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=crd)
    volcano_was_there = control_plane.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{VOLCANO_CRD_NAME}")
    if not volcano_was_there:
        control_plane.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", VOLCANO_CRD)
    for crd_name in (CRD_NAME, VOLCANO_CRD_NAME):
        control_plane.wait_for(lambda name=crd_name: _crd_established(control_plane, name), timeout=30, what=crd_name)
    fullname = f"{release}-gangsolve"
    try:
        yield Install(namespace=namespace, release=release, service_account=fullname, fullname=fullname)
    finally:
        helm("uninstall", release, "--namespace", namespace, check=False, kubeconfig=control_plane.kubeconfig)
        if not crd_was_there:  # kept by helm on purpose (resource-policy: keep); this test made it
            control_plane.kubectl("delete", "crd", CRD_NAME, "--ignore-not-found", "--wait=false", check=False)
        if not volcano_was_there:
            control_plane.kubectl("delete", "crd", VOLCANO_CRD_NAME, "--ignore-not-found", "--wait=false", check=False)
        control_plane.delete_namespace(namespace)


def _crd_established(cp: ControlPlane, name: str) -> bool:
    crd = cp.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}") or {}
    return any(
        c["type"] == "Established" and c["status"] == "True" for c in (crd.get("status") or {}).get("conditions") or []
    )


def test_install_creates_every_object_and_valid_scheduler_pods(control_plane: ControlPlane, installed: Install) -> None:
    ns, name = installed.namespace, installed.fullname
    for path in (
        f"/api/v1/namespaces/{ns}/serviceaccounts/{name}",
        f"/api/v1/namespaces/{ns}/configmaps/{name}-config",
        f"/api/v1/namespaces/{ns}/services/{name}-metrics",
        f"/apis/apps/v1/namespaces/{ns}/deployments/{name}",
        f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{name}",
        f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}",
        f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{name}",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles/{name}-leader-election",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings/{name}-leader-election",
    ):
        assert control_plane.get(path) is not None, path
    # The Deployment controller made a pod from the template: the API server accepted its security
    # context, probes and volumes as rendered.
    selector = f"app.kubernetes.io/instance={installed.release}"

    def pods() -> list[dict]:
        return control_plane.request("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}")["items"]

    control_plane.wait_for(
        lambda: len(pods()) == 1, timeout=60, what="the scheduler's pod", component="kube-controller-manager"
    )
    (pod,) = pods()
    assert pod["spec"]["serviceAccountName"] == installed.service_account
    assert pod["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


def test_rendered_options_pass_server_side_dry_run(control_plane: ControlPlane, helm: Helm, installed: Install) -> None:
    # A release of its own: a dry run over the installed one would merge with its fields.
    args = [
        "template",
        f"dry-{secrets.token_hex(3)}",
        str(CHART),
        "--namespace",
        installed.namespace,
        "--set",
        "replicaCount=3",
        "--set",
        "groupLabel=job",
        "--set",
        "podDisruptionBudget.minAvailable=2",
        "--set",
        "crds.installPodGroup=true",
        "--set",
        "leaderElection.enabled=true",
    ]
    manifests = helm(*args).stdout
    out = control_plane.kubectl(
        "apply",
        "--server-side",
        "--dry-run=server",
        "--force-conflicts",
        "--field-manager=chart-test",
        "-f",
        "-",
        input=manifests,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "deployment.apps/" in out.stdout
    assert "customresourcedefinition.apiextensions.k8s.io/" in out.stdout


def test_podgroup_crd_validates_and_has_a_status_subresource(
    control_plane: ControlPlane, installed: Install, namespace: str
) -> None:
    base = PG_PATH.format(ns=namespace)
    pg = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "mnist"},
        "spec": {
            "minMember": 8,
            "minResources": {"cpu": "4", "memory": "16Gi", GPU_RESOURCE: 8},
            "scheduleTimeoutSeconds": 60,
        },
        "status": {"phase": "Running"},
    }
    created = control_plane.request("POST", base, pg)
    assert created["spec"] == pg["spec"]
    assert "status" not in created or not created["status"]  # status only through the subresource

    status = {
        "phase": "Scheduled",
        "occupiedBy": "kubeflow/mnist",
        "scheduled": 8,
        "running": 6,
        "succeeded": 1,
        "failed": 1,
        "scheduleStartTime": "2026-01-01T00:00:00Z",
    }
    patched = control_plane.request(
        "PATCH", f"{base}/mnist/status", {"status": status}, content_type="application/merge-patch+json"
    )
    assert patched["status"] == status
    assert control_plane.get(f"{base}/mnist")["status"] == status

    for bad_spec in ({"minMember": "eight"}, {"minResources": {"cpu": "lots"}}, {"scheduleTimeoutSeconds": 1.5}):
        with pytest.raises(ApiError) as err:
            control_plane.request("POST", base, dict(pg, metadata={"name": "bad"}, spec=bad_spec))
        assert err.value.status == 422, err.value
    # kubectl's printer columns come from the CRD.
    table = control_plane.kubectl("get", "podgroups.scheduling.x-k8s.io", "-n", namespace).stdout
    assert table.split()[:7] == ["NAME", "PHASE", "MINMEMBER", "RUNNING", "SUCCEEDED", "FAILED", "AGE"]


# What `gangsolve run` calls, as (verb, resource, namespace or None for all namespaces / cluster scope).
# What the scheduler calls is derived from the audit log (tests/e2e/test_rbac.py); these it must never be
# able to do.
DENIED = [
    ("get", "secrets", "team-a"),
    ("get", "pods", "team-a"),
    ("get", "nodes", None),
    ("get", "podgroups.scheduling.x-k8s.io", "team-a"),
    ("update", "podgroups.scheduling.x-k8s.io/status", "team-a"),
    ("create", "events", "team-a"),
    ("get", "leases.coordination.k8s.io", "OWN"),
    ("list", "secrets", None),
    ("get", "secrets", "OWN"),
    ("create", "pods", "team-a"),
    ("update", "pods", "team-a"),
    ("patch", "pods", "team-a"),
    ("deletecollection", "pods", "team-a"),
    ("create", "pods/eviction", "team-a"),
    ("update", "pods/status", "team-a"),
    ("create", "pods/exec", "team-a"),
    ("update", "nodes", None),
    ("patch", "nodes", None),
    ("delete", "nodes", None),
    ("patch", "nodes/status", None),
    ("get", "configmaps", "team-a"),
    ("create", "configmaps", "team-a"),
    ("get", "configmaps", "OWN"),
    ("create", "podgroups.scheduling.x-k8s.io", "team-a"),
    ("update", "podgroups.scheduling.x-k8s.io", "team-a"),
    ("delete", "podgroups.scheduling.volcano.sh", "team-a"),
    ("patch", "podgroups.scheduling.volcano.sh", "team-a"),
    ("delete", "events", "team-a"),
    ("get", "events", "team-a"),
    ("get", "leases.coordination.k8s.io", "kube-system"),
    ("update", "leases.coordination.k8s.io", "team-a"),
    ("delete", "leases.coordination.k8s.io", "OWN"),
    ("create", "poddisruptionbudgets.policy", "team-a"),
    ("create", "deployments.apps", "OWN"),
    ("create", "serviceaccounts/token", "OWN"),
    ("bind", "clusterroles.rbac.authorization.k8s.io", None),
    ("escalate", "clusterroles.rbac.authorization.k8s.io", None),
    ("impersonate", "users", None),
    ("create", "customresourcedefinitions.apiextensions.k8s.io", None),
    ("*", "*", None),
]


def _can_i(cp: ControlPlane, install: Install, verb: str, resource: str, ns: str | None) -> bool:
    args = ["auth", "can-i", verb]
    resource, _, sub = resource.partition("/")
    args.append(resource)
    if sub:
        args.append(f"--subresource={sub}")
    args += ["--all-namespaces"] if ns is None else ["-n", install.namespace if ns == "OWN" else ns]
    out = cp.kubectl(*args, f"--as={install.user}", check=False)
    assert out.stdout.strip() in ("yes", "no"), out.stderr
    return out.stdout.strip() == "yes"


def test_service_account_may_do_nothing_else(control_plane: ControlPlane, installed: Install) -> None:
    granted = [c for c in DENIED if _can_i(control_plane, installed, *c)]
    assert not granted, f"the chart's ServiceAccount is granted {granted}"


def test_cluster_role_is_exactly_the_rendered_rules(
    control_plane: ControlPlane, helm: Helm, installed: Install
) -> None:
    """Nothing was added on the server side (no aggregation, no wildcard)."""
    live = control_plane.get(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{installed.fullname}")
    rendered = only(render(helm, release=installed.release, namespace=installed.namespace), "ClusterRole")
    assert live["rules"] == rendered["rules"]
    for rule in live["rules"]:
        assert "*" not in rule["verbs"]
        assert "*" not in rule["resources"]
        assert "*" not in rule["apiGroups"]
    assert "aggregationRule" not in live


# ------------------------------------------------------------------------------ gangsolve run as the SA


def _http(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


def _gang(
    namespace: str, name: str, size: int, gpus: int, scheduler: str, *, volcano: bool = False
) -> list[dict[str, Any]]:
    pg = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": size},
    }
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-worker-{i}",
                "namespace": namespace,
                "labels": {"scheduling.x-k8s.io/pod-group": name},
            },
            "spec": {
                "schedulerName": scheduler,
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.invalid/trainer:1",
                        "resources": {
                            "requests": {"cpu": "1", GPU_RESOURCE: str(gpus)},
                            "limits": {GPU_RESOURCE: str(gpus)},
                        },
                    }
                ],
            },
        }
        for i in range(size)
    ]
    if volcano:  # Volcano's convention: the PodGroup named by an annotation
        pg["apiVersion"] = "scheduling.volcano.sh/v1beta1"
        for pod in pods:
            del pod["metadata"]["labels"]
            pod["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": name}
    return [pg, *pods]


def test_gangsolve_run_as_the_service_account_schedules_a_gang(
    control_plane: ControlPlane,
    binaries: Binaries,
    helm: Helm,
    installed: Install,
    namespace: str,
    make_nodes,
    tmp_path: Path,
) -> None:
    kubeconfig = service_account_kubeconfig(
        control_plane, installed.namespace, installed.service_account, tmp_path / "sa.kubeconfig"
    )
    whoami = subprocess.run(
        [
            str(binaries.kubectl),
            f"--kubeconfig={kubeconfig}",
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert whoami.stdout == installed.user

    # The config file exactly as the chart renders it for this release (lease in the release namespace).
    docs = render(helm, release=installed.release, namespace=installed.namespace)
    config = tmp_path / "config.yaml"
    config.write_text(only(docs, "ConfigMap")["data"]["config.yaml"])

    scheduler = f"gangsolve-sa-{secrets.token_hex(3)}"  # only this test's pods are this scheduler's
    nodes = make_nodes(3, cpu="16", memory="64Gi", gpus=4)
    # 12 GPUs. Fit: 4 pods x 2 GPUs (scheduler-plugins PodGroup) and 2 pods x 1 GPU (Volcano PodGroup).
    # Cannot fit afterwards: 3 pods x 4 GPUs.
    fitting = _gang(namespace, "mnist", 4, 2, scheduler) + _gang(namespace, "vc", 2, 1, scheduler, volcano=True)
    too_big = _gang(namespace, "too-big", 3, 4, scheduler)
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(fitting))

    port = free_port()
    log_path = tmp_path / "gangsolve.log"
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gangsolve",
                "run",
                f"--kubeconfig={kubeconfig}",
                f"--scheduler-name={scheduler}",
                f"--config={config}",
                "--leader-elect",
                f"--metrics-addr=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_path,
            start_new_session=True,
        )
    try:

        def pods(prefix: str) -> list[dict]:
            items = control_plane.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
            return [p for p in items if p["metadata"]["name"].startswith(prefix)]

        def alive_and(cond: Callable[[], bool]) -> Callable[[], bool]:
            def check() -> bool:
                assert proc.poll() is None, f"gangsolve run exited {proc.returncode}:\n{log_path.read_text()[-4000:]}"
                return cond()

            return check

        def bound(prefix: str, count: int) -> Callable[[], bool]:
            return lambda: sum(1 for p in pods(prefix) if p["spec"].get("nodeName")) == count

        control_plane.wait_for(alive_and(bound("mnist-", 4)), timeout=90, what="gangsolve to bind the mnist gang")
        control_plane.wait_for(alive_and(bound("vc-", 2)), timeout=60, what="gangsolve to bind the Volcano gang")
        assert {p["spec"]["nodeName"] for p in pods("mnist-") + pods("vc-")} <= set(nodes)

        # The gang that cannot fit: all-or-nothing, and the scheduler says why (pods/status, events).
        control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(too_big))

        def too_big_explained() -> bool:
            conds = [
                next((c for c in p["status"].get("conditions") or [] if c["type"] == "PodScheduled"), None)
                for p in pods("too-big-")
            ]
            return len(conds) == 3 and all(
                c and c["status"] == "False" and c["reason"] == "Unschedulable" for c in conds
            )

        control_plane.wait_for(alive_and(too_big_explained), timeout=60, what="Unschedulable conditions")
        assert not any(p["spec"].get("nodeName") for p in pods("too-big-"))

        def events() -> list[dict]:
            return control_plane.request("GET", f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]

        control_plane.wait_for(
            alive_and(lambda: {"Scheduled", "FailedScheduling"} <= {e["reason"] for e in events()}),
            timeout=60,
            what="Scheduled and FailedScheduling events",
        )

        # PodGroup status of both kinds, through the status subresource.
        base = PG_PATH.format(ns=namespace)
        control_plane.wait_for(
            alive_and(lambda: (control_plane.get(f"{base}/mnist").get("status") or {}).get("scheduled") == 4),
            timeout=60,
            what="the mnist PodGroup's status",
        )
        vc = f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{namespace}/podgroups/vc"
        control_plane.wait_for(
            alive_and(lambda: (control_plane.get(vc).get("status") or {}).get("phase")),
            timeout=60,
            what="the Volcano PodGroup's status",
        )

        # Leader election on a Lease in the release namespace; health, readiness and metrics served.
        lease = control_plane.get(
            f"/apis/coordination.k8s.io/v1/namespaces/{installed.namespace}/leases/{installed.fullname}"
        )
        assert lease is not None
        assert lease["spec"]["holderIdentity"]
        assert _http(f"http://127.0.0.1:{port}/healthz")[0] == 200
        assert _http(f"http://127.0.0.1:{port}/readyz")[0] == 200
        status, metrics = _http(f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        assert "gangsolve_pods_bound_total 6.0" in metrics
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    text = log_path.read_text()
    # Nothing the scheduler tried was refused: the chart's permissions are sufficient. (A refusal logs as
    # "HTTP 403 Forbidden"; a bare "403" also matches timestamps such as 1796039340.403.)
    assert "HTTP 403" not in text, text[-4000:]
    assert "forbidden" not in text.lower(), text[-4000:]
    assert "forbidden" not in text.lower(), text[-4000:]
    assert proc.returncode == 0, text[-4000:]
