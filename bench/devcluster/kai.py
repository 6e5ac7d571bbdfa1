"""NVIDIA's KAI scheduler, the real peer, on a ControlPlane: where hack/build-peers.sh put its scheduler and
binder, the CRDs, ClusterRoles and default queues its own Helm chart installs, the scheduler configuration its
operator writes for the chart's default SchedulingShard, and the processes themselves.

KAI splits scheduling in two: the scheduler decides where a PodGroup's pods go and writes a BindRequest per pod;
the binder binds each pod its BindRequest names. Both run as kube-scheduler's user (as every scheduler the live
bench measures), bound to the chart's ClusterRoles for them. KAI schedules only pods that name a KAI PodGroup
(annotation `pod-group-name`) in a leaf Queue. For pods a controller owns, KAI's podgrouper makes that PodGroup
from the owner; for a gang of plain pods its users create the PodGroup themselves (KAI's "External PodGroups":
the PodGroup, then pods naming it), which is what the bench's users do. The podgrouper leaves a pod that names a
PodGroup and has no owner alone, so it is not run; nor are KAI's admission webhooks (GPU sharing and validation:
whole-GPU pods in the default queue pass them unchanged) or its queue and PodGroup status controllers (they
write status for people and metrics; the scheduler reads specs).
"""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from gangsolve.bench.devcluster.controlplane import LOOPBACK, Component, ControlPlane, ControlPlaneError, free_port
from gangsolve.bench.devcluster.crds import install as install_crds
from gangsolve.bench.devcluster.volcano import helm_template, pinned_build, require_built

SCHEDULER_NAME = "kai-scheduler"  # the chart's global.schedulerName default
NAMESPACE = "kai-scheduler"  # the chart's namespace: the scheduler's --namespace
RESERVATION_NAMESPACE = "kai-resource-reservation"  # where the binder keeps GPU-sharing reservation pods
QUEUE_LABEL = "kai.scheduler/queue"
POD_GROUP_ANNOTATION = "pod-group-name"
POD_GROUP_API = "scheduling.run.ai/v2alpha2"
TOPOLOGY_API = "kai.scheduler/v1alpha1"
TOPOLOGY = "cluster-topology"  # the name KAI's topology guide gives the cluster's Topology
QUEUE_API = "scheduling.run.ai/v2"
DEFAULT_QUEUE = "default-queue"  # the chart's leaf queue, under default-parent-queue
# The CRDs of the objects the scheduler and binder read and write (the chart also installs its operator's
# Config and SchedulingShard, which only the operator reads).
CRDS = (
    "scheduling.run.ai_podgroups",
    "scheduling.run.ai_queues",
    "scheduling.run.ai_bindrequests",
    "kai.scheduler_topologies",
)
ROLES = ("kai-scheduler", "kai-binder")  # the chart's ClusterRoles for the two processes
SCHEDULER_COMPONENT = "kai-scheduler"
BINDER_COMPONENT = "kai-binder"


@dataclass(frozen=True)
class Kai:
    """KAI's scheduler and binder at the pinned version and the Helm chart of the same release, as built into
    the cache."""

    version: str
    home: Path  # <cache>/bin/kai-<version>: kai-scheduler, kai-binder and chart/

    @property
    def scheduler(self) -> Path:
        return self.home / "kai-scheduler"

    @property
    def binder(self) -> Path:
        return self.home / "kai-binder"

    @property
    def chart(self) -> Path:
        return self.home / "chart"

    @classmethod
    def locate(cls) -> Kai:
        found = cls(*pinned_build("KAI_VERSION", "kai"))
        how = "from source (hack/build-peers.sh; about 15 minutes on 2 cores)"
        require_built("KAI's scheduler", found.version, (found.scheduler, found.binder), found.chart, how)
        return found

    def render_chart(self, helm: Path) -> list[dict]:
        """Every object the chart installs by default (hooks included), as helm renders them."""
        return helm_template(helm, self.chart, "kai", NAMESPACE)

    def crds(self) -> list[dict]:
        return [yaml.safe_load((self.chart / "crds" / f"{name}.yaml").read_text()) for name in CRDS]


def default_queues(chart: list[dict]) -> list[dict]:
    """The queues a fresh install creates (its quick start's): `default-parent-queue` and its leaf
    `default-queue`, quota 0, no limit, over-quota weight 1 for CPU, GPU and memory."""
    return [d for d in chart if d["kind"] == "Queue" and d["apiVersion"] == QUEUE_API]


def with_quota(queues: list[dict], cpu: Decimal, memory: Decimal, gpus: int) -> list[dict]:
    """`queues` each guaranteed `cpu` cores, `memory` bytes and `gpus` GPUs (in KAI's units: millicores,
    megabytes, GPUs), limits and weights unchanged. KAI runs a gang whose priority is 100 or more (its
    "non-preemptible" work) only within its queue's quota and every ancestor's: with the quick start's quota 0
    such a gang is never scheduled."""
    quota = {"cpu": int(cpu * 1000), "memory": int(memory / 10**6), "gpu": gpus}
    out = []
    for queue in queues:
        resources = {r: {**v, "quota": quota[r]} for r, v in queue["spec"]["resources"].items()}
        out.append({**queue, "spec": {**queue["spec"], "resources": resources}})
    return out


def team_queues(volcano_queues: list[dict], parent: str = "default-parent-queue") -> list[dict]:
    """Volcano Queues as KAI's users write the same teams: leaf queues under the chart's parent queue, each
    resource's quota 0 and over-quota weight the Volcano weight (KAI divides what is left after quotas by
    these weights: the weighted share), a Volcano GPU capability as the GPU limit (else -1, none). A Volcano
    queue tree keeps its shape: a queue's `parent` becomes its `parentQueue`."""
    out = []
    for q in volcano_queues:
        spec = q["spec"]
        weight = int(spec.get("weight", 1))
        cap = (spec.get("capability") or {}).get("nvidia.com/gpu")
        resources = {r: {"quota": 0, "overQuotaWeight": weight, "limit": -1} for r in ("cpu", "memory", "gpu")}
        resources["gpu"]["limit"] = int(cap) if cap is not None else -1
        body = {"parentQueue": spec.get("parent") or parent, "resources": resources}
        out.append(
            {"apiVersion": QUEUE_API, "kind": "Queue", "metadata": {"name": q["metadata"]["name"]}, "spec": body}
        )
    return out


def default_shard(chart: list[dict]) -> dict:
    """The chart's default SchedulingShard's spec (its placement strategy: binpack for GPUs and CPUs)."""
    return next(d for d in chart if d["kind"] == "SchedulingShard")["spec"]


# The operator's default plugins and actions with their priorities (higher runs first), as KAI's
# SchedulingShardSpec.SetDefaultsWhereNeeded sets them (pkg/apis/kai/v1/schedulingshard_types.go).
PLUGIN_PRIORITIES = {
    "predicates": 1900,
    "proportion": 1800,
    "priority": 1700,
    "nodeavailability": 1600,
    "resourcetype": 1500,
    "podaffinity": 1400,
    "elastic": 1300,
    "kubeflow": 1200,
    "ray": 1100,
    "subgrouporder": 1000,
    "taskorder": 900,
    "nominatednode": 800,
    "dynamicresources": 700,
    "minruntime": 600,
    "topology": 500,
    "snapshot": 400,
    "sg-nodelocalgreedy": 360,
    "sg-multinodegang": 350,
    "gpupack": 300,
    "gpuspread": 300,
    "nodeplacement": 200,
    "gpusharingorder": 100,
}
ACTION_PRIORITIES = {"allocate": 500, "consolidation": 400, "reclaim": 300, "preempt": 200, "stalegangeviction": 100}
PLACEMENTS = ("binpack", "spread")


def scheduler_conf(shard: dict[str, Any]) -> dict[str, Any]:
    """The scheduler configuration KAI's operator writes for a SchedulingShard without plugin overrides: every
    default plugin in one tier by descending priority (GPU binpacking packs GPUs with gpupack and orders shared
    GPUs; spreading uses gpuspread), nodeplacement given the shard's GPU and CPU strategies, and the default
    actions, consolidation only where neither strategy spreads, with the shard's action overrides merged in."""
    placement = shard.get("placementStrategy") or {}
    gpu, cpu = placement.get("gpu", "binpack"), placement.get("cpu", "binpack")
    for resource, strategy in (("gpu", gpu), ("cpu", cpu)):
        if strategy not in PLACEMENTS:
            raise ValueError(
                f"SchedulingShard spec.placementStrategy.{resource}: {strategy!r} is not one of {PLACEMENTS}"
            )
    if shard.get("plugins"):
        raise ValueError("SchedulingShard spec.plugins: plugin overrides are not modelled here")
    binpack = gpu == "binpack"
    disabled = {"gpuspread"} if binpack else {"gpupack", "gpusharingorder"}
    plugins = sorted((p for p in PLUGIN_PRIORITIES if p not in disabled), key=lambda p: (-PLUGIN_PRIORITIES[p], p))
    actions = {
        a: {"enabled": a != "consolidation" or "spread" not in (gpu, cpu), "priority": p}
        for a, p in ACTION_PRIORITIES.items()
    }
    for name, override in (shard.get("actions") or {}).items():
        if name not in actions:
            raise ValueError(f"SchedulingShard spec.actions.{name}: not one of KAI's actions {tuple(actions)}")
        actions[name] = {**actions[name], **{k: v for k, v in override.items() if k in ("enabled", "priority")}}
    enabled = sorted((a for a, c in actions.items() if c["enabled"]), key=lambda a: (-actions[a]["priority"], a))
    tier = [{"name": p, **({"arguments": {"gpu": gpu, "cpu": cpu}} if p == "nodeplacement" else {})} for p in plugins]
    return {"actions": ", ".join(enabled), "tiers": [{"plugins": tier}]}


# The actions that evict running pods, turned off for the bench (a SchedulingShard's `spec.actions`, KAI's own
# switch): its placement scenarios let no scheduler preempt (their PriorityClasses say Never, which KAI does not
# read), and their pods are plain pods that no controller recreates once evicted. With consolidation on, KAI
# evicted a gang it had just bound to make room for another and the evicted pods were gone.
NO_EVICTIONS = {"consolidation": {"enabled": False}, "reclaim": {"enabled": False}, "preempt": {"enabled": False}}


def without_evictions(shard: dict[str, Any]) -> dict[str, Any]:
    """`shard` with the actions that evict turned off (NO_EVICTIONS)."""
    return {**shard, "actions": {**(shard.get("actions") or {}), **NO_EVICTIONS}}


def install(cp: ControlPlane, kai: Kai, user: str = "system:kube-scheduler") -> list[dict]:
    """KAI's CRDs, the chart's ClusterRoles for the scheduler and the binder bound to `user`, and the
    namespaces the two use. Returns the chart as rendered (create_queues makes its queues)."""
    chart = kai.render_chart(cp.binaries.helm)
    install_crds(cp, *kai.crds())
    for namespace in (NAMESPACE, RESERVATION_NAMESPACE):
        cp.create_namespace(namespace)
    for role in (d for d in chart if d["kind"] == "ClusterRole" and d["metadata"]["name"] in ROLES):
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
    return chart


def create_queues(cp: ControlPlane, queues: list[dict]) -> None:
    """Create KAI Queues, parents first (as `default_queues` lists them)."""
    for queue in queues:
        cp.request("POST", f"/apis/{QUEUE_API}/queues", {**queue, "metadata": {"name": queue["metadata"]["name"]}})


@dataclass(frozen=True)
class KaiProcesses:
    """The scheduler and the binder as components of a ControlPlane (stopped with it, watched by its
    check_alive), with their metrics ports: neither serves a health check (the binder's probe server has none
    registered), so serving metrics is the sign each is up."""

    scheduler: Component
    binder: Component
    scheduler_metrics: int
    binder_metrics: int
    args: dict[str, list[str]]  # each process's flags, for the record


def add(
    cp: ControlPlane, kai: Kai, conf: dict[str, Any], *, qps: float | None = None, verbosity: int = 3
) -> KaiProcesses:
    """The scheduler (`conf` as its --scheduler-conf, the flags KAI's operator gives it, on loopback ports) and
    the binder (the operator's flags), both as kube-scheduler's user and, where `qps` is set, with it as their
    client's QPS and burst (else their own defaults, 50 and 300), added to `cp`, not started."""
    assert cp.workdir is not None
    conf_path = cp.workdir / "kai-scheduler.yaml"
    conf_path.write_text(yaml.safe_dump(conf, sort_keys=False))
    metrics, plugin_server, binder_metrics, binder_health = (free_port() for _ in range(4))
    limits = [f"--qps={int(qps)}", f"--burst={int(qps)}"] if qps is not None else []
    scheduler_args = [
        f"--scheduler-conf={conf_path}",
        f"--scheduler-name={SCHEDULER_NAME}",
        f"--namespace={NAMESPACE}",
        f"--queue-label-key={QUEUE_LABEL}",
        "--resource-reservation-app-label=kai-resource-reservation",
        f"--listen-address={LOOPBACK}:{metrics}",
        f"--plugin-server-port={plugin_server}",
        f"--v={verbosity}",
        *limits,
    ]
    binder_args = [
        f"--scheduler-name={SCHEDULER_NAME}",
        f"--resource-reservation-namespace={RESERVATION_NAMESPACE}",
        "--resource-reservation-service-account=kai-resource-reservation",
        "--resource-reservation-app-label=kai-resource-reservation",
        f"--health-probe-bind-address={LOOPBACK}:{binder_health}",
        f"--metrics-bind-address={LOOPBACK}:{binder_metrics}",
        *limits,
    ]
    env = {"KUBECONFIG": str(cp.scheduler_kubeconfig), "PATH": "/usr/bin:/bin", "NAMESPACE": NAMESPACE}
    logs = cp.workdir / "logs"
    made = KaiProcesses(
        Component(SCHEDULER_COMPONENT, [kai.scheduler, *scheduler_args], logs, cp.workdir, env),
        Component(BINDER_COMPONENT, [kai.binder, *binder_args], logs, cp.workdir, env),
        metrics,
        binder_metrics,
        {"scheduler": scheduler_args[1:], "binder": binder_args},
    )
    cp.components[SCHEDULER_COMPONENT] = made.scheduler
    cp.components[BINDER_COMPONENT] = made.binder
    return made


def start(processes: KaiProcesses, timeout: float = 90.0) -> int:
    """Start the binder, then the scheduler; return the scheduler's pid once both serve their metrics (the
    scheduler has built its caches and runs its sessions)."""
    processes.binder.start()
    processes.scheduler.start()
    deadline = time.monotonic() + timeout

    def ready() -> bool:
        for component in (processes.binder, processes.scheduler):
            if not component.alive():
                assert component.process is not None
                raise component.failure(f"exited with code {component.process.returncode} while starting")
        return _answers(f"http://{LOOPBACK}:{processes.binder_metrics}/metrics") and _answers(
            f"http://{LOOPBACK}:{processes.scheduler_metrics}/metrics"
        )

    while not ready():
        if time.monotonic() > deadline:
            raise processes.scheduler.failure(
                f"not ready within {timeout:.0f}s (the binder's and the scheduler's /metrics); "
                f"the binder's log: {processes.binder.log_path}"
            )
        time.sleep(0.2)
    if processes.scheduler.pid is None:
        raise ControlPlaneError("kai-scheduler has no pid")
    return processes.scheduler.pid


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def topology(levels: tuple[str, ...]) -> dict:
    """The cluster's Topology as KAI's topology guide writes one: the nodes' level labels, widest first, down to
    the node itself."""
    keys = [*levels, "kubernetes.io/hostname"]
    return {
        "apiVersion": TOPOLOGY_API,
        "kind": "Topology",
        "metadata": {"name": TOPOLOGY},
        "spec": {"levels": [{"nodeLabel": key} for key in keys]},
    }


def pod_group(
    name: str,
    min_member: int,
    pods: list[dict],
    namespace: str,
    queue: str = DEFAULT_QUEUE,
    required: str | None = None,
    preferred: str | None = None,
) -> dict:
    """A KAI PodGroup as its users write one for a gang of plain pods (KAI's "External PodGroups"): minMember,
    its queue, the pods' priority class; with `required` (and `preferred`) level labels, a topology constraint
    on the cluster's Topology: every pod within one domain of the required level, as few of the preferred as
    it can."""
    spec: dict[str, Any] = {"minMember": min_member, "queue": queue}
    if required or preferred:
        constraint = {"topology": TOPOLOGY}
        constraint |= {"requiredTopologyLevel": required} if required else {}
        constraint |= {"preferredTopologyLevel": preferred} if preferred else {}
        spec["topologyConstraint"] = constraint
    classes = {p["spec"].get("priorityClassName") for p in pods}
    if len(classes) == 1 and (priority_class := classes.pop()):
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": POD_GROUP_API,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def label_members(members: list[dict], group: str, queue: str = DEFAULT_QUEUE) -> list[dict]:
    """A gang's pods as KAI's users write them: the queue label (its quick start's), the PodGroup they join
    (annotation `pod-group-name`) and KAI's scheduler name."""
    out = []
    for p in members:
        meta = p["metadata"]
        labels = {**(meta.get("labels") or {}), QUEUE_LABEL: queue}
        annotations = {**(meta.get("annotations") or {}), POD_GROUP_ANNOTATION: group}
        spec = {**p["spec"], "schedulerName": SCHEDULER_NAME}
        out.append({**p, "metadata": {**meta, "labels": labels, "annotations": annotations}, "spec": spec})
    return out


# A session's first and last lines in the scheduler's log (scheduler/scheduler.go, at -v 1): timestamp, level,
# caller, [session id], message; the id may be coloured.
_SESSION_LINE = re.compile(r"^(\S+)\s.*?\[(?:\x1b\[\d+m)?(\w+)(?:\x1b\[0m)?\] (Start|End) scheduling \.\.\.$")


_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\S+)\s")


def last_logged(log: str) -> datetime | None:
    """The time of the log's last line: how long a session still open at the end had been open."""
    for line in reversed(log.splitlines()):
        if seen := _LOG_TIME.match(line):
            return datetime.fromisoformat(seen[1])
    return None


def session_marks(log: str) -> Iterator[tuple[datetime, str, bool]]:
    """(time, session id, opened) for each session's start and end in the scheduler's log."""
    for line in log.splitlines():
        if seen := _SESSION_LINE.match(line):
            yield datetime.fromisoformat(seen[1]), seen[2], seen[3] == "Start"
