"""Helpers for the live scheduler's end-to-end tests: gangsolve as a subprocess, pod manifests, polling and
the invariants checked after every test (no node overcommitted, no gang partly bound)."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from gangsolve import objects
from gangsolve.bench.devcluster import ApiError, ControlPlane
from gangsolve.bench.devcluster.controlplane import free_port
from gangsolve.gangs import _Grouper
from gangsolve.snapshot import Snapshot

REPO = Path(__file__).resolve().parents[2]
GPU = "nvidia.com/gpu"


def poll(condition: Callable[[], Any], *, timeout: float = 60.0, interval: float = 0.2, what: str = "condition"):
    """Poll until `condition()` is truthy; return its value, or fail saying what was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class Gangsolve:
    """`python -m gangsolve run` against the control plane, its log in a file, metrics on a free port."""

    def __init__(
        self,
        cp: ControlPlane,
        scheduler_name: str,
        log_dir: Path,
        *extra: str,
        env: Mapping[str, str] | None = None,
        kubeconfig: Path | None = None,
    ) -> None:
        self.cp = cp
        self.env = dict(env or {})
        self.scheduler_name = scheduler_name
        self.port = free_port()
        self.log_path = log_dir / f"gangsolve-{scheduler_name}-{self.port}.log"
        self.args = [
            sys.executable,
            "-m",
            "gangsolve",
            "run",
            "--kubeconfig",
            str(kubeconfig or cp.kubeconfig),
            "--scheduler-name",
            scheduler_name,
            "--metrics-addr",
            f"127.0.0.1:{self.port}",
            "--time-limit",
            "1",
            *extra,
        ]
        self.proc: subprocess.Popen | None = None

    def start(self, wait_ready: bool = True) -> Gangsolve:
        env = {**os.environ, **self.env}
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        if wait_ready:
            poll(
                lambda: (self.alive() and self.get("/readyz")[0] == 200) or self._dead(),
                timeout=60,
                what=f"gangsolve {self.scheduler_name} to be ready",
            )
        return self

    def _dead(self) -> bool:
        if not self.alive():
            raise AssertionError(f"gangsolve exited with {self.proc.returncode}:\n{self.log()[-4000:]}")
        return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:
            return 0, ""

    def metric(self, name: str, labels: str = "") -> float | None:
        _status, text = self.get("/metrics")
        for line in text.splitlines():
            if line.startswith(name + (("{" + labels + "}") if labels else " ")):
                return float(line.rsplit(" ", 1)[1])
        return None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def terminate(self, timeout: float = 40) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


def pod(
    name: str,
    *,
    scheduler: str,
    gpus: int = 0,
    cpu: str = "1",
    memory: str = "1Gi",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    owner: Mapping[str, str] | None = None,
    tolerations: list[dict] | None = None,
) -> dict:
    requests = {"cpu": cpu, "memory": memory}
    limits = {}
    if gpus:
        requests[GPU] = str(gpus)
        limits[GPU] = str(gpus)
    meta: dict[str, Any] = {"name": name, "labels": dict(labels or {}), "annotations": dict(annotations or {})}
    if owner:
        meta["ownerReferences"] = [{**owner, "controller": True, "blockOwnerDeletion": False}]
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "main",
                "image": "registry.invalid/train:1",
                "resources": {"requests": requests, **({"limits": limits} if limits else {})},
            }
        ],
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = tolerations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def create(cp: ControlPlane, namespace: str, obj: dict) -> dict:
    api = obj["apiVersion"]
    base = "/api/v1" if api == "v1" else f"/apis/{api}"
    plural = {
        "Pod": "pods",
        "PodDisruptionBudget": "poddisruptionbudgets",
        "ConfigMap": "configmaps",
        "PodGroup": "podgroups",
        "PriorityClass": "priorityclasses",
    }[obj["kind"]]
    path = f"{base}/{plural}" if obj["kind"] == "PriorityClass" else f"{base}/namespaces/{namespace}/{plural}"
    return cp.request("POST", path, obj)


def pods(cp: ControlPlane, namespace: str, selector: str = "") -> list[dict]:
    q = f"?labelSelector={selector}" if selector else ""
    return cp.request("GET", f"/api/v1/namespaces/{namespace}/pods{q}")["items"]


def delete_pod(cp: ControlPlane, namespace: str, name: str) -> None:
    try:
        cp.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}?gracePeriodSeconds=0")
    except ApiError as e:
        if e.status != 404:
            raise


def running(items: list[dict]) -> list[dict]:
    return [p for p in items if p.get("status", {}).get("phase") == "Running"]


def bound(items: list[dict]) -> list[dict]:
    return [p for p in items if p.get("spec", {}).get("nodeName")]


def events(cp: ControlPlane, namespace: str, reason: str) -> list[dict]:
    items = cp.request("GET", f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
    return [e for e in items if e.get("reason") == reason]


def unique(prefix: str = "gangsolve") -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def assert_cluster_sound(cp: ControlPlane, group_label: str | None = None) -> None:
    """Read the whole cluster through the API: no node overcommitted on any resource, and no gang (by the
    project's own grouping rules) with some but fewer than its minimum members bound."""
    snap = Snapshot()
    for obj in cp.request("GET", "/api/v1/nodes")["items"]:
        snap.add({**obj, "kind": "Node", "apiVersion": "v1"})
    all_pods = cp.request("GET", "/api/v1/pods")["items"]
    for obj in all_pods:
        snap.add({**obj, "kind": "Pod", "apiVersion": "v1"})
    for obj in cp.request("GET", "/apis/policy/v1/poddisruptionbudgets")["items"]:
        snap.add({**obj, "kind": "PodDisruptionBudget", "apiVersion": "policy/v1"})
    for api in ("scheduling.x-k8s.io/v1alpha1", "scheduling.volcano.sh/v1beta1"):
        try:
            for obj in cp.request("GET", f"/apis/{api}/podgroups")["items"]:
                snap.add({**obj, "kind": "PodGroup", "apiVersion": api})
        except ApiError:
            pass
    live = [p for p in snap.pods if not objects.is_finished(p) and not p["metadata"].get("deletionTimestamp")]
    nodes = {n["metadata"]["name"]: objects.node(n) for n in snap.nodes}
    used: dict[str, dict[str, int]] = {}
    for p in live:
        node = p["spec"].get("nodeName")
        if node:
            for r, q in objects.pod_requests(p).items():
                used.setdefault(node, {})[r] = used.setdefault(node, {}).get(r, 0) + q
    for node, res in used.items():
        if node not in nodes:
            continue
        for r, q in res.items():
            assert q <= nodes[node].allocatable.get(r, 0), f"node {node} overcommitted on {r}: {q}"
    grouper = _Grouper(snap, group_label, strict=False)
    gangs: dict[Any, list[dict]] = {}
    for p in live:
        if p["spec"].get("schedulerName", "default-scheduler") == "default-scheduler":
            continue
        key = grouper.key(p)
        if key is not None:
            gangs.setdefault(key, []).append(p)
    for key, members in gangs.items():
        n_bound = sum(1 for p in members if p["spec"].get("nodeName"))
        need = grouper.min_member(key, members)
        assert n_bound == 0 or n_bound >= need, f"gang {key} partly bound: {n_bound} of {need}"


def pod_group_crd(group: str, version: str, short: str) -> dict:
    """A PodGroup CRD (scheduler-plugins' or Volcano's), schema-less, with the status subresource."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"podgroups.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "kind": "PodGroup",
                "listKind": "PodGroupList",
                "plural": "podgroups",
                "singular": "podgroup",
                "shortNames": [short],
            },
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }


POD_GROUP_APIS = {"scheduling.x-k8s.io": "v1alpha1", "scheduling.volcano.sh": "v1beta1"}


def pod_group(group: str, name: str, min_member: int) -> dict:
    return {
        "apiVersion": f"{group}/{POD_GROUP_APIS[group]}",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": min_member},
    }


def get_pod_group(cp: ControlPlane, namespace: str, group: str, name: str) -> dict | None:
    return cp.get(f"/apis/{group}/{POD_GROUP_APIS[group]}/namespaces/{namespace}/podgroups/{name}")


def service_account_kubeconfig(cp: ControlPlane, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig holding only a TokenRequest token of a ServiceAccount (no admin certificate)."""
    token = cp.kubectl("create", "token", account, "-n", namespace, "--duration=24h").stdout.strip()
    admin = yaml.safe_load(Path(cp.kubeconfig).read_text())
    ca_data = admin["clusters"][0]["cluster"]["certificate-authority-data"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "dev", "cluster": {"server": cp.server, "certificate-authority-data": ca_data}}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "dev", "user": account, "namespace": namespace}}],
        "current-context": "sa",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path
