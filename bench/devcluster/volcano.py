"""Volcano's scheduler (vc-scheduler), the real peer, on a ControlPlane: where hack/build-peers.sh put it, the
CRDs, ClusterRole and scheduler configuration its own Helm chart installs, and the process itself.

vc-scheduler runs as kube-scheduler's user (as every scheduler the live bench measures), bound to the chart's
ClusterRole. It creates the `root` and `default` Queues itself on start. It schedules only pods that name a
Volcano PodGroup (annotation scheduling.k8s.io/group-name): the PodGroup is what a training operator creates
with gang scheduling on (Kubeflow's training-operator: minMember = every replica); pods without one would
need Volcano's controller manager, which the bench does not run.
"""

from __future__ import annotations

import subprocess
import time
import urllib.request
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from gangsolve.bench.devcluster.binaries import cache_dir, read_versions
from gangsolve.bench.devcluster.controlplane import (
    LOOPBACK,
    Component,
    ControlPlane,
    ControlPlaneError,
    free_port,
)
from gangsolve.bench.devcluster.crds import install as install_crds
from gangsolve.edge.quantity import parse_quantity

SCHEDULER_NAME = "volcano"  # the chart's default --scheduler-name
GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"  # a pod's Volcano PodGroup
POD_GROUP_API = "scheduling.volcano.sh/v1beta1"
DEFAULT_QUEUE = "default"
# The CRDs of the objects vc-scheduler watches (the chart installs these and the batch ones of its controllers).
SCHEDULER_CRDS = (
    "scheduling.volcano.sh_queues",
    "scheduling.volcano.sh_podgroups",
    "topology.volcano.sh_hypernodes",
    "nodeinfo.volcano.sh_numatopologies",
    "shard.volcano.sh_nodeshards",
)
COMPONENT = "vc-scheduler"


class PeerMissing(RuntimeError):
    """A peer scheduler is not in the cache: hack/build-peers.sh builds it."""


@dataclass(frozen=True)
class Volcano:
    """vc-scheduler at the pinned version and the Helm chart of the same release, as built into the cache."""

    version: str
    home: Path  # <cache>/bin/volcano-<version>: vc-scheduler and chart/

    @property
    def binary(self) -> Path:
        return self.home / "vc-scheduler"

    @property
    def chart(self) -> Path:
        return self.home / "chart"

    @classmethod
    def locate(cls) -> Volcano:
        version = read_versions().get("VOLCANO_VERSION")
        if not version:
            raise PeerMissing("VOLCANO_VERSION is not set in hack/versions.env")
        found = cls(version, cache_dir() / "bin" / f"volcano-{version}")
        if not (found.binary.is_file() and (found.chart / "Chart.yaml").is_file()):
            raise PeerMissing(
                f"Volcano's vc-scheduler {version} is not built (expected at {found.binary}): "
                "`make peers` builds it from source (hack/build-peers.sh; a few minutes on 2 cores)"
            )
        return found

    def render_chart(self, helm: Path, namespace: str = "volcano-system") -> list[dict]:
        """The chart's scheduler objects (ConfigMap, ServiceAccount, ClusterRole, ...) as helm renders them."""
        only = "templates/scheduler.yaml"
        out = subprocess.run(
            [helm, "template", "vc", str(self.chart), "--namespace", namespace, "--show-only", only],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return [d for d in yaml.safe_load_all(out) if d]

    def chart_scheduler_conf(self, helm: Path) -> dict[str, Any]:
        """The scheduler configuration the chart installs by default (volcano-scheduler.conf)."""
        config_map = next(d for d in self.render_chart(helm) if d["kind"] == "ConfigMap")
        return yaml.safe_load(config_map["data"]["volcano-scheduler.conf"])

    def crds(self) -> list[dict]:
        return [yaml.safe_load((self.chart / "crd" / "bases" / f"{name}.yaml").read_text()) for name in SCHEDULER_CRDS]


def install(cp: ControlPlane, volcano: Volcano, user: str = "system:kube-scheduler") -> None:
    """Volcano's CRDs, and the chart's ClusterRole for vc-scheduler bound to `user`."""
    install_crds(cp, *volcano.crds())
    role = next(d for d in volcano.render_chart(cp.binaries.helm) if d["kind"] == "ClusterRole")
    name = role["metadata"]["name"]
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    cp.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
    cp.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)


def add_scheduler(
    cp: ControlPlane, volcano: Volcano, conf: dict[str, Any], *, qps: float | None = None, verbosity: int = 3
) -> Component:
    """vc-scheduler as a component of `cp` (stopped with it, checked by check_alive), not yet started:
    `conf` as its --scheduler-conf, kube-scheduler's kubeconfig, `qps` as its client's QPS and burst (None:
    its own default, 2000)."""
    assert cp.workdir is not None
    conf_path = cp.workdir / "volcano-scheduler.conf"
    conf_path.write_text(yaml.safe_dump(conf, sort_keys=False))
    healthz = free_port()
    argv: list[str | Path] = [
        volcano.binary,
        "--logtostderr",
        f"--kubeconfig={cp.scheduler_kubeconfig}",
        f"--scheduler-conf={conf_path}",
        f"--scheduler-name={SCHEDULER_NAME}",
        "--leader-elect=false",
        "--enable-healthz=true",
        f"--healthz-address={LOOPBACK}:{healthz}",
        f"--listen-address={LOOPBACK}:{free_port()}",
        f"--cache-dump-dir={cp.workdir}",
        f"-v={verbosity}",
    ]
    if qps is not None:
        argv += [f"--kube-api-qps={qps}", f"--kube-api-burst={int(qps)}"]
    component = Component(COMPONENT, argv, cp.workdir / "logs", cp.workdir)
    component.healthz_port = healthz  # type: ignore[attr-defined]
    cp.components[COMPONENT] = component
    return component


def start_scheduler(cp: ControlPlane, timeout: float = 90.0) -> int:
    """Start the added vc-scheduler; return its pid once it answers /healthz and the default Queue exists."""
    component = cp.components[COMPONENT]
    component.start()
    port = component.healthz_port  # type: ignore[attr-defined]
    deadline = time.monotonic() + timeout

    def ready() -> bool:
        if not component.alive():
            assert component.process is not None
            raise component.failure(f"exited with code {component.process.returncode} while starting")
        try:
            queue = cp.get(f"/apis/{POD_GROUP_API}/queues/{DEFAULT_QUEUE}")
        except Exception:
            return False
        return queue is not None and _healthy(port)

    while not ready():
        if time.monotonic() > deadline:
            raise component.failure(f"not ready (healthz, the default Queue) within {timeout:.0f}s")
        time.sleep(0.2)
    if component.pid is None:
        raise ControlPlaneError("vc-scheduler has no pid")
    return component.pid


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/healthz", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def pod_group(
    name: str, min_member: int, pods: list[dict], namespace: str | None = None, queue: str = DEFAULT_QUEUE
) -> dict:
    """A Volcano PodGroup as Kubeflow's training-operator writes one for a job with gang scheduling on:
    minMember, the job's minimum resources (the sum of its pods' requests), its priority class, its queue."""
    total: dict[str, Decimal] = {}
    for pod in pods:
        for container in pod["spec"]["containers"]:
            for resource, quantity in ((container.get("resources") or {}).get("requests") or {}).items():
                total[resource] = total.get(resource, Decimal(0)) + parse_quantity(quantity)
    spec: dict[str, Any] = {
        "minMember": min_member,
        "queue": queue,
        "minResources": {r: format(v.normalize(), "f") for r, v in total.items()},
    }
    classes = {p["spec"].get("priorityClassName") for p in pods}
    if len(classes) == 1 and (priority_class := classes.pop()):
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": POD_GROUP_API,
        "kind": "PodGroup",
        "metadata": {"name": name, **({"namespace": namespace} if namespace else {})},
        "spec": spec,
    }
