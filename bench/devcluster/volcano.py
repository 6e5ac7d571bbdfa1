"""Volcano's scheduler (vc-scheduler), the real peer, on a ControlPlane: where hack/build-peers.sh put it, the
CRDs, ClusterRole and scheduler configuration its own Helm chart installs, and the process itself.

vc-scheduler runs as kube-scheduler's user (as every scheduler the live bench measures), bound to the chart's
ClusterRole. It creates the `root` and `default` Queues itself on start; vc-controller-manager's queue
controller opens them (an unopened Queue admits nothing). vc-scheduler schedules only pods that name a Volcano
PodGroup (annotation scheduling.k8s.io/group-name): the bench's users create it, as a training operator does
with gang scheduling on (Kubeflow's training-operator: minMember = every replica).

Volcano's own CRDs matter: a Queue created under a schema-less CRD has no `spec.weight` (the real CRD defaults
it to 1), and with a total weight of 0 the proportion plugin gives every Queue an empty share, so vc-scheduler
logs "Queue <default> is overused" and binds nothing.
"""

from __future__ import annotations

import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
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
# The CRDs of the objects vc-scheduler and the controllers below watch (the chart installs these and those of
# Volcano Jobs and its other controllers).
SCHEDULER_CRDS = (
    "bus.volcano.sh_commands",
    "scheduling.volcano.sh_queues",
    "scheduling.volcano.sh_podgroups",
    "topology.volcano.sh_hypernodes",
    "nodeinfo.volcano.sh_numatopologies",
    "shard.volcano.sh_nodeshards",
)
COMPONENT = "vc-scheduler"
CONTROLLERS_COMPONENT = "vc-controller-manager"


class PeerMissing(RuntimeError):
    """A peer scheduler is not in the cache: hack/build-peers.sh builds it."""


def pinned_build(key: str, name: str) -> tuple[str, Path]:
    """The version hack/versions.env pins under `key`, and the cache folder hack/build-peers.sh builds it in."""
    version = read_versions().get(key)
    if not version:
        raise PeerMissing(f"{key} is not set in hack/versions.env")
    return version, cache_dir() / "bin" / f"{name}-{version}"


def require_built(what: str, version: str, binaries: tuple[Path, ...], chart: Path, how: str) -> None:
    """PeerMissing, saying how to build it, unless a peer's binaries and its chart are all in the cache."""
    if not all(p.is_file() for p in (*binaries, chart / "Chart.yaml")):
        raise PeerMissing(f"{what} {version} is not built (expected at {binaries[0]}): `make peers` builds it {how}")


def helm_template(helm: Path, chart: Path, release: str, namespace: str, *flags: str) -> list[dict]:
    """The objects a chart installs, as `helm template` renders them."""
    out = subprocess.run(
        [helm, "template", release, str(chart), "--namespace", namespace, *flags],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


@dataclass(frozen=True)
class Volcano:
    """vc-scheduler at the pinned version and the Helm chart of the same release, as built into the cache."""

    version: str
    home: Path  # <cache>/bin/volcano-<version>: vc-scheduler, vc-controller-manager and chart/

    @property
    def binary(self) -> Path:
        return self.home / "vc-scheduler"

    @property
    def controller_manager(self) -> Path:
        return self.home / "vc-controller-manager"

    @property
    def chart(self) -> Path:
        return self.home / "chart"

    @classmethod
    def locate(cls) -> Volcano:
        found = cls(*pinned_build("VOLCANO_VERSION", "volcano"))
        how = "from source (hack/build-peers.sh; a few minutes on 2 cores)"
        require_built(
            "Volcano's vc-scheduler", found.version, (found.binary, found.controller_manager), found.chart, how
        )
        return found

    def render_chart(self, helm: Path, namespace: str = "volcano-system") -> list[dict]:
        """The chart's scheduler objects (ConfigMap, ServiceAccount, ClusterRole, ...) as helm renders them."""
        return helm_template(helm, self.chart, "vc", namespace, "--show-only", "templates/scheduler.yaml")

    def chart_scheduler_conf(self, helm: Path) -> dict[str, Any]:
        """The scheduler configuration the chart installs by default (volcano-scheduler.conf)."""
        config_map = next(d for d in self.render_chart(helm) if d["kind"] == "ConfigMap")
        return yaml.safe_load(config_map["data"]["volcano-scheduler.conf"])

    def crds(self) -> list[dict]:
        return [yaml.safe_load((self.chart / "crd" / "bases" / f"{name}.yaml").read_text()) for name in SCHEDULER_CRDS]


# The binpack plugin's own documented arguments (its source's example, without the example's made-up resource):
# the chart's default scores cpu and memory only, so GPU pods are spread by nodeorder's leastrequested.
GPU_BINPACK = {
    "binpack.weight": 10,
    "binpack.cpu": 5,
    "binpack.memory": 1,
    "binpack.resources": "nvidia.com/gpu",
    "binpack.resources.nvidia.com/gpu": 2,
}


def with_gpu_binpack(conf: dict[str, Any]) -> dict[str, Any]:
    """`conf` with the binpack plugin scoring GPUs too (GPU_BINPACK as its arguments)."""
    tiers = [
        {**tier, "plugins": [{**p, "arguments": GPU_BINPACK} if p["name"] == "binpack" else p for p in tier["plugins"]]}
        for tier in conf["tiers"]
    ]
    return {**conf, "tiers": tiers}


def with_preempt(conf: dict[str, Any]) -> dict[str, Any]:
    """`conf` with the preempt action after allocate and without enqueue, as Volcano's maintainers run it in
    their own preemption tests ("enqueue and preempt conflict": `enqueue` admits a job only while idle capacity
    covers its minimum, and `preempt` passes over jobs not admitted, so with both a job that needs a preemption
    never gets one): a pending job may evict lower-priority jobs' tasks in its queue."""
    actions = [a.strip() for a in conf["actions"].split(",") if a.strip() != "enqueue"]
    at = actions.index("allocate") + 1 if "allocate" in actions else len(actions)
    return {**conf, "actions": ", ".join([*actions[:at], "preempt", *actions[at:]])}


def with_reclaim(conf: dict[str, Any]) -> dict[str, Any]:
    """`conf` with the reclaim action after the others, as Volcano's guides have users add it for queues that
    lend what they do not use and take it back ("add reclaim action", the capacity plugin's user guide)."""
    return {**conf, "actions": f"{conf['actions']}, reclaim"}


# The network-topology-aware plugin as Volcano's topology guide has users add it to the chart's configuration
# (how_to_use_network_topology_aware_scheduling.md), without the guide's made-up resource: HyperNode-level bin
# packing weighs GPUs.
NETWORK_TOPOLOGY_AWARE = {
    "name": "network-topology-aware",
    "arguments": {
        "weight": 10,
        "hypernode.binpack.cpu": 5,
        "hypernode.binpack.memory": 1,
        "hypernode.binpack.resources": "nvidia.com/gpu",
        "hypernode.binpack.resources.nvidia.com/gpu": 2,
        "hypernode.binpack.normal-pod.enable": True,
        "hypernode.binpack.normal-pod.fading": 0.8,
    },
}
HYPERNODE_API = "topology.volcano.sh/v1alpha1"


def with_network_topology(conf: dict[str, Any]) -> dict[str, Any]:
    """`conf` with the network-topology-aware plugin last in the tier that scores nodes (the guide's)."""
    tiers = [
        {**tier, "plugins": [*tier["plugins"], NETWORK_TOPOLOGY_AWARE]}
        if any(p["name"] == "binpack" for p in tier["plugins"])
        else tier
        for tier in conf["tiers"]
    ]
    return {**conf, "tiers": tiers}


def hypernodes(nodes: list[dict], levels: tuple[str, ...]) -> list[dict]:
    """The network topology as a Volcano admin builds it by hand from the nodes' `levels` labels (widest first):
    a HyperNode per value of the narrowest level at tier 1 (its nodes by label), then one per value of each wider
    level at the next tier, whose members are the HyperNodes below it that its nodes fall in."""
    out: list[dict] = []
    tiers = list(reversed(levels))  # tier 1 = the narrowest level
    for tier, key in enumerate(tiers, start=1):
        below: dict[str, set[str]] = {}
        for node in nodes:
            labels = node["metadata"].get("labels") or {}
            if key in labels:
                child = labels.get(tiers[tier - 2]) if tier > 1 else None
                below.setdefault(labels[key], set()).update([child] if child else [])
        for value, children in sorted(below.items()):
            if tier == 1:
                members = [{"type": "Node", "selector": {"labelMatch": {"matchLabels": {key: value}}}}]
            else:
                members = [
                    {"type": "HyperNode", "selector": {"exactMatch": {"name": _hypernode_name(tier - 1, c)}}}
                    for c in sorted(children)
                ]
            out.append(
                {
                    "apiVersion": HYPERNODE_API,
                    "kind": "HyperNode",
                    "metadata": {"name": _hypernode_name(tier, value)},
                    "spec": {"tier": tier, "members": members},
                }
            )
    return out


def _hypernode_name(tier: int, value: str) -> str:
    return f"t{tier}-{value}".lower()


def tier_of(level: str, levels: tuple[str, ...]) -> int:
    """The HyperNode tier `hypernodes` gives `level` (one of `levels`, widest first)."""
    return len(levels) - levels.index(level)


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


@dataclass(frozen=True)
class VolcanoProcesses:
    """vc-scheduler and vc-controller-manager as components of a ControlPlane (stopped with it, watched by its
    check_alive), each with the port of its /healthz."""

    scheduler: Component
    controllers: Component
    scheduler_healthz: int
    controllers_healthz: int


# The controllers the scheduler's path needs: the queue controller opens Queues (vc-scheduler enqueues nothing
# into a Queue whose status.state is not Open) and the PodGroup controller makes a PodGroup for a pod that has
# none. The chart runs every controller; the others (Volcano Jobs, JobFlows, HyperNode discovery, ...) act on
# objects the bench does not create.
CONTROLLERS = "queue-controller,pg-controller"


def add(
    cp: ControlPlane, volcano: Volcano, conf: dict[str, Any], *, qps: float | None = None, verbosity: int = 3
) -> VolcanoProcesses:
    """vc-scheduler (`conf` as its --scheduler-conf, as kube-scheduler's user, `qps` as its client's QPS and
    burst; None: its own default, 2000) and vc-controller-manager (the chart's client limits, as the admin: its
    requests are not the scheduler's), added to `cp`, not started."""
    assert cp.workdir is not None
    conf_path = cp.workdir / "volcano-scheduler.conf"
    conf_path.write_text(yaml.safe_dump(conf, sort_keys=False))
    ports = {name: (free_port(), free_port()) for name in (COMPONENT, CONTROLLERS_COMPONENT)}

    def common(name: str) -> list[str]:
        healthz, metrics = ports[name]
        return [
            "--logtostderr",
            f"--scheduler-name={SCHEDULER_NAME}",
            "--leader-elect=false",
            "--enable-healthz=true",
            f"--healthz-address={LOOPBACK}:{healthz}",
            f"--listen-address={LOOPBACK}:{metrics}",
            "--enable-metrics=true",  # as the chart runs both
            f"-v={verbosity}",
        ]

    limits = [f"--kube-api-qps={qps}", f"--kube-api-burst={int(qps)}"] if qps is not None else []
    scheduler: list[str | Path] = [
        volcano.binary,
        *common(COMPONENT),
        f"--kubeconfig={cp.scheduler_kubeconfig}",
        f"--scheduler-conf={conf_path}",
        f"--cache-dump-dir={cp.workdir}",
        *limits,
    ]
    controllers: list[str | Path] = [
        volcano.controller_manager,
        *common(CONTROLLERS_COMPONENT),
        f"--kubeconfig={cp.kubeconfig}",
        f"--controllers={CONTROLLERS}",
        "--kube-api-qps=50",
        "--kube-api-burst=100",
    ]
    logs = cp.workdir / "logs"
    made = VolcanoProcesses(
        Component(COMPONENT, scheduler, logs, cp.workdir),
        Component(CONTROLLERS_COMPONENT, controllers, logs, cp.workdir),
        ports[COMPONENT][0],
        ports[CONTROLLERS_COMPONENT][0],
    )
    cp.components[COMPONENT] = made.scheduler
    cp.components[CONTROLLERS_COMPONENT] = made.controllers
    return made


def start(cp: ControlPlane, processes: VolcanoProcesses, timeout: float = 90.0) -> int:
    """Start the controllers, then the scheduler; return the scheduler's pid once both answer /healthz and the
    default Queue (which the scheduler creates) is Open (which the queue controller makes it)."""
    processes.controllers.start()
    processes.scheduler.start()
    deadline = time.monotonic() + timeout

    def ready() -> bool:
        for component in (processes.controllers, processes.scheduler):
            if not component.alive():
                assert component.process is not None
                raise component.failure(f"exited with code {component.process.returncode} while starting")
        try:
            queue = cp.get(f"/apis/{POD_GROUP_API}/queues/{DEFAULT_QUEUE}")
        except Exception:
            return False
        state = ((queue or {}).get("status") or {}).get("state")
        return state == "Open" and _healthy(processes.scheduler_healthz) and _healthy(processes.controllers_healthz)

    while not ready():
        if time.monotonic() > deadline:
            raise processes.scheduler.failure(
                f"not ready within {timeout:.0f}s (healthz of both, the default Queue Open); "
                f"vc-controller-manager's log: {processes.controllers.log_path}"
            )
        time.sleep(0.2)
    if processes.scheduler.pid is None:
        raise ControlPlaneError("vc-scheduler has no pid")
    return processes.scheduler.pid


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/healthz", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def label_members(members: list[dict], group: str) -> list[dict]:
    """A gang's pods as Volcano's users write them: naming their PodGroup (annotation `group-name`) and Volcano's
    scheduler name."""
    out = []
    for p in members:
        annotations = {**(p["metadata"].get("annotations") or {}), GROUP_NAME_ANNOTATION: group}
        spec = {**p["spec"], "schedulerName": SCHEDULER_NAME}
        out.append({**p, "metadata": {**p["metadata"], "annotations": annotations}, "spec": spec})
    return out


def pod_group(
    name: str,
    min_member: int,
    pods: list[dict],
    namespace: str | None = None,
    queue: str = DEFAULT_QUEUE,
    highest_tier: int | None = None,
) -> dict:
    """A Volcano PodGroup as Kubeflow's training-operator writes one for a job with gang scheduling on:
    minMember, the job's minimum resources (the sum of its pods' requests), its priority class, its queue; with
    `highest_tier`, a hard network-topology constraint (every pod within one HyperNode of at most that tier)."""
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
    if highest_tier is not None:
        spec["networkTopology"] = {"mode": "hard", "highestTierAllowed": highest_tier}
    classes = {p["spec"].get("priorityClassName") for p in pods}
    if len(classes) == 1 and (priority_class := classes.pop()):
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": POD_GROUP_API,
        "kind": "PodGroup",
        "metadata": {"name": name, **({"namespace": namespace} if namespace else {})},
        "spec": spec,
    }


# vc-scheduler's session lines (framework/session.go, at -v 3) in klog's header: Lmmdd hh:mm:ss.uuuuuu.
_SESSION_LINE = re.compile(r"^I(\d{4} \d\d:\d\d:\d\d\.\d+)\s.*\] (Open|Close) Session ([0-9a-f-]+)")


_LOG_TIME = re.compile(r"^[IWEF](\d{4} \d\d:\d\d:\d\d\.\d+)\s")


def _klog_time(stamp: str, year: int) -> datetime:
    return datetime.strptime(f"{year}{stamp}", "%Y%m%d %H:%M:%S.%f")


def last_logged(log: str, year: int) -> datetime | None:
    """The time of the log's last klog line: how long a session still open at the end had been open."""
    for line in reversed(log.splitlines()):
        if seen := _LOG_TIME.match(line):
            return _klog_time(seen[1], year)
    return None


def session_marks(log: str, year: int) -> Iterator[tuple[datetime, str, bool]]:
    """(time, session id, opened) for each session opened and closed in the scheduler's log (klog writes no year:
    `year`'s)."""
    for line in log.splitlines():
        if seen := _SESSION_LINE.match(line):
            yield _klog_time(seen[1], year), seen[3], seen[2] == "Open"
