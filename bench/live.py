"""Live mode: the same kwok cluster and workload on the real control plane, once per scheduler.

Schedulers: `kube-scheduler` (the pinned release), `kube-scheduler-gang` (the same with its native gang
scheduling: the GenericWorkload and TopologyAwareWorkloadScheduling gates on, a scheduling.k8s.io/v1beta1
PodGroup per gang with the gang's priority class and, for co-located gangs, a topology constraint) and
`gangsolve` (`gangsolve run`). Each scheduler's users create what that scheduler reads: nothing for plain
kube-scheduler, native PodGroups for its gang scheduling, scheduler-plugins PodGroups for gangsolve.

Two modes, as scheduler_perf measures:
- **stream**: the scheduler runs, then the pending pods arrive at `rate` pods a second (or as fast as the API
  server takes them): per-gang latency (last member created -> the gang's minimum bound) and whether the
  scheduler keeps up;
- **burst**: every pending pod is created while no scheduler runs, then the scheduler starts: pods bound per
  second from its start to the last binding.

Each run gets a fresh ControlPlane (etcd, kube-apiserver, kube-controller-manager, kwok, kube-scheduler when it
is the scheduler under test), so no run shares capacity, caches or leftovers with another. A run:

1. creates the scenario's Nodes as kwok nodes, its PriorityClasses, PDBs and background pods (bound through
   `spec.nodeName`), and waits until kwok has them all Running;
2. stream: starts the scheduler (gangsolve: waits for /readyz), then creates the gangs (PodGroup first, then
   its pods) at the scenario's rate; burst: creates them all, then starts the scheduler;
3. watches the pending pods and records when each was created, bound and Running;
4. waits until every pending pod is bound or bindings have not changed for `quiet` seconds (the first binding
   gets at least a minute), then reads the final bindings back from the API and measures them with
   `bench.metrics.quality` on the scenario's own Cluster (gangs, partial gangs, stranded GPUs and the
   validator's overcommit check, from real bindings);
5. reads the scheduler process's CPU seconds and peak RSS, and counts its API requests in the API server's
   audit log. Every scheduler runs as kube-scheduler's user (`system:kube-scheduler`; gangsolve gets the few
   read rights kube-scheduler lacks), so all share one API Priority and Fairness flow and one audit identity.

A scenario may say what each scheduler's users create from its objects (`users`: live/topology gives each
its own way of asking for one block and few racks) and check the final bindings with an oracle of its own.

Timing is wall clock on a shared machine (the bench process, the control plane and the scheduler share its
cores); compare schedulers measured in the same run.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import yaml

from gangsolve.bench import live_topology, metrics
from gangsolve.bench import objects as k8s
from gangsolve.bench import scenarios as sc
from gangsolve.bench.devcluster import ControlPlane, NodeSpec
from gangsolve.bench.devcluster.controlplane import GPU_RESOURCE, _tls_context, free_port, schedulable
from gangsolve.live.kube import ApiError, Kube
from gangsolve.solver import Cluster, SolveConfig

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SCHEDULER = "default-scheduler"
PENDING_LABEL = "bench.gangsolve.io/pending"  # marks the pods under test (not the background)
SCHEDULER_USER = "system:kube-scheduler"
# The API server logs every request of the scheduler under test (and nothing else) for the request count.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata", "users": [SCHEDULER_USER]}, {"level": "None"}],
}
# scheduler_perf's client (test/integration/scheduler_perf/util.go): QPS 5000, burst 5000. The scale scenarios
# give every scheduler this client-side limit, as a user of a large cluster raises the default 50/100.
PERF_QPS = 5000.0
CREATE_CONCURRENCY = 64  # requests in flight while creating objects
FIRST_BIND_WAIT = 60.0  # seconds a run waits for its first binding, however short its quiet time


# --- scenarios ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LiveScenario:
    name: str
    nodes: int
    build: Callable[[], list[dict]]
    description: str
    time_limit: float = SolveConfig.time_limit  # gangsolve run's --time-limit (its default)
    mode: str = "stream"  # stream | burst (module docstring)
    rate: float | None = None  # stream: pods created a second; None: as fast as the API server takes them
    client_qps: float | None = None  # every scheduler's client-side QPS and burst; None: each one's default
    scale: bool = False  # a large cluster: no node Leases (ControlPlane(node_leases=False))
    timeout: float = 300.0  # the run ends at the latest this long after t = 0
    # Seconds after the pending pods that their gang definitions (PDBs, PodGroups) are created, the pods owned
    # by TFJobs, as a training operator making separate calls creates them; 0: definitions first.
    late_definitions: float = 0.0
    # The objects each scheduler's users create from the scenario's (objects, scheduler); None: the scenario's
    # own, plus a native PodGroup per gang for kube-scheduler-gang.
    users: Callable[[list[dict], str], list[dict]] | None = None
    # The feature gates of a plane that serves scheduling.k8s.io PodGroups (kube-scheduler-gang's, and any whose
    # users create such PodGroups): API server, controller manager, and kube-scheduler where it runs.
    native_gates: tuple[str, ...] = ("GenericWorkload", "TopologyAwareWorkloadScheduling")
    # An independent check of the final bindings: (the scenario's objects, pod -> node, pod -> seconds bound).
    oracle: Callable[[list[dict], dict[str, str], dict[str, float]], dict] | None = None


def tfjob_objects(name: str, workers: int, created: float, selector: dict[str, str]) -> list[dict]:
    """A TFJob as its operator creates it: a parameter server and 1-GPU workers, grouped by a PDB with
    minAvailable = all of them (the kube-batch convention), no PodGroup."""
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": k8s.NAMESPACE},
        "spec": {"minAvailable": workers + 1, "selector": {"matchLabels": {"tf-job-name": name}}},
    }
    pods = [
        k8s.pod(
            f"{name}-ps-0",
            2000,
            4096,
            created=created,
            labels={"tf-job-name": name, "tf-replica-type": "ps"},
            node_selector=selector,
        )
    ]
    pods += [
        k8s.pod(
            f"{name}-worker-{i}",
            2000,
            4096,
            1,
            created=created,
            labels={"tf-job-name": name, "tf-replica-type": "worker"},
            node_selector=selector,
        )
        for i in range(workers)
    ]
    return [pdb, *pods]


def users_tfjob() -> list[dict]:
    """The users' cluster (a tainted GPU-less control-plane node, two 4-GPU nodes) and two TFJobs asking for
    12 GPUs of its 8: one fits, the other must wait whole."""
    master = k8s.node(
        "master",
        24000,
        128 * 1024,
        labels={"node-role.kubernetes.io/master": ""},
        taints=[{"key": "node-role.kubernetes.io/master", "value": "", "effect": "NoSchedule"}],
    )
    gpu = [k8s.node(f"gpu-{i}", 28000, 128 * 1024, 4, labels={"gpu": "yes"}) for i in range(2)]
    selector = {"gpu": "yes"}
    return [master, *gpu, *tfjob_objects("mnist", 7, 0, selector), *tfjob_objects("resnet", 5, 1, selector)]


# Gang shapes at scale: scheduler_perf's GangScheduling workloads (gangs x pods: 1,000 x 3 and 3 x 1,000 on its
# 4-cpu nodes; test/integration/scheduler_perf/podgroup/gangscheduling), 10 x 500 between them, and the
# synthetic GPU mix (the static mode's synthetic clusters: shapes, taints, background load, priorities).
SHAPES = {"1000x3": (1000, 3), "3x1000": (3, 1000), "10x500": (10, 500)}
STREAM_RATES = (100, 300, 1000)
SYNTHETIC_GANGS = {1000: 200, 5000: 1000}  # as the static synthetic/<n>nodes scenarios


def _scale_scenarios(nodes: int) -> list[LiveScenario]:
    out = []
    builds: dict[str, tuple[Callable[[], list[dict]], str]] = {
        shape: (
            partial(sc.kube_perf, nodes, gangs, size),
            f"{nodes} scheduler_perf nodes (4 cpu, 32Gi), {gangs} gangs x {size} pods (100m, 100Mi)",
        )
        for shape, (gangs, size) in SHAPES.items()
    }
    builds["synthetic"] = (
        partial(sc.synthetic, nodes, SYNTHETIC_GANGS[nodes], seed=nodes),
        f"synthetic/{nodes}nodes: GPU nodes and background load, {SYNTHETIC_GANGS[nodes]} gangs of the GPU mix",
    )
    streamed = ("1000x3", "synthetic")  # the latency-sensitive shape, and the contended mix
    timeout = 300.0 if nodes <= 1000 else 600.0
    for shape, (build, description) in builds.items():
        common: dict[str, Any] = {"client_qps": PERF_QPS, "scale": True, "timeout": timeout}
        name = f"live/{nodes}nodes-{shape}"
        out.append(LiveScenario(f"{name}-burst", nodes, build, f"{description}; burst", mode="burst", **common))
        if shape in streamed:
            out += [
                LiveScenario(
                    f"{name}-stream{rate}",
                    nodes,
                    build,
                    f"{description}; {rate} pods/s",
                    mode="stream",
                    rate=rate,
                    **common,
                )
                for rate in STREAM_RATES
            ]
    return out


LIVE_SCENARIOS: dict[str, LiveScenario] = {
    s.name: s
    for s in (
        LiveScenario(
            "live/tfjob",
            3,
            users_tfjob,
            "the users' cluster: tainted control-plane node + 2x 4-GPU nodes; TFJobs of 8 and 6 pods "
            "(7 + 5 GPUs) grouped by PDB",
            time_limit=1.0,
        ),
        LiveScenario(
            "live/tfjob-late-pdb",
            3,
            users_tfjob,
            "the users' TFJobs owned by TFJob objects, their PDBs created 2 s after the pods (separate calls, "
            "as a training operator makes them): the race a gang scheduler must not lose",
            time_limit=1.0,
            late_definitions=2.0,
        ),
        LiveScenario(
            "live/synthetic-100nodes",
            100,
            lambda: sc.synthetic(100, 40, seed=100),
            "synthetic/100nodes' cluster and background, 40 pending gangs",
            time_limit=1.0,
        ),
        *(
            LiveScenario(
                f"live/topology-seed{seed}",
                live_topology.NODES,
                partial(live_topology.objects, seed=seed),
                f"{live_topology.NODES} 8-GPU nodes in racks of 8, blocks of 3 racks, about a quarter held; "
                f"scheduling.k8s.io PodGroups of 8-64 GPUs asking {live_topology.LOAD:.0%} of the free GPUs, "
                f"required block, preferred rack (seed {seed})",
                users=live_topology.for_scheduler,
                native_gates=live_topology.TOPOLOGY_GATES,
                oracle=live_topology.oracle,
            )
            for seed in live_topology.SEEDS
        ),
        LiveScenario(
            "live/10nodes-10x3-burst",
            10,
            lambda: sc.kube_perf(10, 10, 3),
            "scheduler_perf's 10Nodes_3Gangs shape with 10 gangs x 3 pods; burst (the e2e test's)",
            mode="burst",
            client_qps=PERF_QPS,
            scale=True,
        ),
        *_scale_scenarios(1000),
        *_scale_scenarios(5000),
    )
}
LIVE_GRIDS = {
    "small": ["live/tfjob", "live/synthetic-100nodes"],
    "scale-1000": [n for n in LIVE_SCENARIOS if n.startswith("live/1000nodes-")],
    "scale-5000": [n for n in LIVE_SCENARIOS if n.startswith("live/5000nodes-")],
}
LIVE_GRID = LIVE_GRIDS["small"]


# --- objects --------------------------------------------------------------------------------------------------


def node_spec(node: dict) -> NodeSpec:
    alloc = node["status"]["allocatable"]
    labels = {k: v for k, v in node["metadata"].get("labels", {}).items() if k != "kubernetes.io/hostname"}
    return NodeSpec(
        node["metadata"]["name"],
        cpu=alloc["cpu"],
        memory=alloc["memory"],
        pods=int(alloc.get("pods", 110)),
        gpus=int(alloc.get(GPU_RESOURCE, 0)),
        labels=labels,
        taints=list(node.get("spec", {}).get("taints") or []),
    )


def pod_group_crd() -> dict:
    """scheduler-plugins' PodGroup CRD (scheduling.x-k8s.io), schema-less, with the status subresource."""
    return _crd("scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups", ["pg"])


def tfjob_crd() -> dict:
    """Kubeflow's TFJob CRD, schema-less: only owners for the pods, no operator runs."""
    return _crd("kubeflow.org", "v1", "TFJob", "tfjobs", [])


def _crd(group: str, version: str, kind: str, plural: str, short: list[str]) -> dict:
    names: dict[str, Any] = {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()}
    if short:
        names["shortNames"] = short
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": names,
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


# What gangsolve reads that kube-scheduler's own ClusterRole (system:kube-scheduler) does not grant.
GANGSOLVE_EXTRA_RBAC = [
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "gangsolve-bench"},
        "rules": [
            {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ["list", "watch"]},
            {
                "apiGroups": ["scheduling.k8s.io", "scheduling.x-k8s.io", "scheduling.volcano.sh"],
                "resources": ["podgroups"],
                "verbs": ["list", "watch"],
            },
            {
                "apiGroups": ["scheduling.k8s.io", "scheduling.x-k8s.io", "scheduling.volcano.sh"],
                "resources": ["podgroups/status"],
                "verbs": ["patch"],
            },
            {"apiGroups": ["scheduling.volcano.sh"], "resources": ["queues"], "verbs": ["list", "watch"]},
            {"apiGroups": ["scheduling.volcano.sh"], "resources": ["queues/status"], "verbs": ["patch"]},
            {  # DRA: gangsolve watches every kind; kube-scheduler's role does not read templates
                "apiGroups": ["resource.k8s.io"],
                "resources": ["resourceslices", "deviceclasses", "resourceclaims", "resourceclaimtemplates"],
                "verbs": ["list", "watch"],
            },
        ],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "gangsolve-bench"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gangsolve-bench"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": SCHEDULER_USER}],
    },
]

PLURALS = {
    "Pod": "pods",
    "Node": "nodes",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "PodGroup": "podgroups",
    "PriorityClass": "priorityclasses",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "CustomResourceDefinition": "customresourcedefinitions",
    "TFJob": "tfjobs",
}


def collection(obj: dict) -> str:
    api, kind = obj["apiVersion"], obj["kind"]
    base = "/api/v1" if api == "v1" else f"/apis/{api}"
    ns = obj["metadata"].get("namespace")
    return f"{base}/namespaces/{ns}/{PLURALS[kind]}" if ns else f"{base}/{PLURALS[kind]}"


def body_of(obj: dict) -> dict:
    """The object as a client creates it: no status, no creationTimestamp."""
    kind = obj["kind"]
    if kind == "Node":
        return node_spec(obj).manifest()
    body = {k: v for k, v in obj.items() if k != "status"}
    if kind == "PriorityClass":
        # Placement scenarios measure placement: no scheduler may preempt (gangsolve reads the class's policy as
        # kube-scheduler does), or background pods would be evicted and the runs would not place onto the same
        # free capacity. Preemption has its own scenarios (live_preemption.py).
        body["preemptionPolicy"] = "Never"
    body["metadata"] = {k: v for k, v in obj["metadata"].items() if k != "creationTimestamp"}
    if kind == "Pod":
        body["spec"] = with_gpu_limits(obj["spec"])
    return body


def with_gpu_limits(spec: dict) -> dict:
    """The API requires limits = requests for extended resources (GPUs); snapshots may carry requests only."""
    containers = []
    for c in spec["containers"]:
        res = c.get("resources") or {}
        gpu = (res.get("requests") or {}).get(GPU_RESOURCE)
        if gpu and GPU_RESOURCE not in (res.get("limits") or {}):
            c = {**c, "resources": {**res, "limits": {**(res.get("limits") or {}), GPU_RESOURCE: gpu}}}
        containers.append(c)
    return {**spec, "containers": containers}


# kube-scheduler's own gang scheduling (KEP-4671; beta and off by default in the pinned v1.37): the
# scheduling.k8s.io/v1beta1 PodGroup API and its GangScheduling plugin behind the GenericWorkload gate, and the
# PodGroup's topology constraint (TopologyAwareWorkloadScheduling, alpha) for co-located gangs. The plugins
# join the default profile when their gates are on.
NATIVE_GANG_API = "scheduling.k8s.io/v1beta1"


def workload_flags(gates: tuple[str, ...], scheduler: bool) -> dict[str, list[str]]:
    """The control plane's flags for the PodGroup API with `gates` on (and kube-scheduler's, if it runs)."""
    gate = "--feature-gates=" + ",".join(f"{g}=true" for g in gates)
    return {
        "extra_apiserver_args": [gate, f"--runtime-config={NATIVE_GANG_API}=true"],
        "extra_scheduler_args": [gate] if scheduler else [],
        "extra_controller_manager_args": [gate],
    }


LIVE_SCHEDULERS = ("kube-scheduler", "kube-scheduler-gang", "gangsolve")


@dataclass
class Arrival:
    """One gang as its controller creates it: group objects first, then the pods."""

    gang: str  # its name in the scenario's Cluster
    groups: list[dict]
    pods: list[dict]


def native_pod_group(gang, pods: list[dict]) -> dict:
    """kube-scheduler's PodGroup for a gang, as its users write one: gang policy with minCount = the gang's
    minimum, the pods' priority class (the scheduler fails a group whose priority differs from its pods'), and
    for a co-located gang the topology constraint in place of per-pod affinity."""
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": gang.need}}}
    classes = {p["spec"].get("priorityClassName") for p in pods}
    if len(classes) == 1 and (priority_class := classes.pop()):
        spec["priorityClassName"] = priority_class
    if gang.colocate:
        spec["schedulingConstraints"] = {"topology": [{"key": gang.colocate}]}
    name = "gang-" + gang.name.split("/", 1)[1]
    return {
        "apiVersion": NATIVE_GANG_API,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": k8s.NAMESPACE},
        "spec": spec,
    }


def arrivals(objs: list[dict], cluster: Cluster, scheduler: str, native_groups: bool = True) -> list[Arrival]:
    """The pending gangs in creation order, with the objects `scheduler`'s users create for each: the PodGroups
    their pods name, or (kube-scheduler-gang, `native_groups`) a native PodGroup made for each gang."""
    scheduler_name = k8s.SCHEDULER if scheduler == "gangsolve" else DEFAULT_SCHEDULER
    pods = {f"{k8s.NAMESPACE}/{p['metadata']['name']}": p for p in pending_pods(objs, scheduler_name)}
    position = {name: i for i, name in enumerate(pods)}
    groups = {o["metadata"]["name"]: o for o in objs if o["kind"] == "PodGroup"}
    out = []
    for gang in sorted(cluster.gangs, key=lambda g: min(position[p.name] for p in g.pods)):
        members = [pods[p.name] for p in sorted(gang.pods, key=lambda p: position[p.name])]
        first = members[0]
        named = (first["spec"].get("schedulingGroup") or {}).get("podGroupName")  # Kubernetes' own PodGroup
        if scheduler == "gangsolve":  # scheduler-plugins' PodGroups: only gangsolve's users have the CRD
            named = named or (first["metadata"].get("labels") or {}).get(k8s.POD_GROUP_LABEL)
        made = [groups[named]] if named in groups else []
        if scheduler == "kube-scheduler-gang" and native_groups and len(members) > 1:
            group = native_pod_group(gang, members)
            made = [group]
            members = [
                {
                    **p,
                    "spec": {
                        **{k: v for k, v in p["spec"].items() if not (gang.colocate and k == "affinity")},
                        "schedulingGroup": {"podGroupName": group["metadata"]["name"]},
                    },
                }
                for p in members
            ]
        out.append(Arrival(gang.name, made, members))
    return out


def own_by_tfjobs(cp: ControlPlane, gangs: list[Arrival]) -> list[Arrival]:
    """The gangs' pods owned by a TFJob each (one per `tf-job-name` label, created here), as the operator
    creates them."""
    cp.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", tfjob_crd())
    cp.wait_for(lambda: served(cp, "/apis/kubeflow.org/v1/tfjobs"), timeout=60, what="the TFJob API")
    uids: dict[str, str] = {}

    def owned(pod: dict) -> dict:
        name = (pod["metadata"].get("labels") or {}).get("tf-job-name")
        if name is None:
            return pod
        if name not in uids:
            ns = k8s.NAMESPACE
            job = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name, "namespace": ns}}
            uids[name] = cp.request("POST", collection(job), {**job, "spec": {}})["metadata"]["uid"]
        owner = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": name, "uid": uids[name], "controller": True}
        return {**pod, "metadata": {**pod["metadata"], "ownerReferences": [owner]}}

    return [replace(a, pods=[owned(p) for p in a.pods]) for a in gangs]


def first_pod_group_served(cp: ControlPlane) -> dict | None:
    """The spec of a scheduling.k8s.io PodGroup as the API server stored it (a field whose feature gate is off is
    dropped or refused, not kept), or None if there is none."""
    listing = cp.get(f"/apis/{NATIVE_GANG_API}/namespaces/{k8s.NAMESPACE}/podgroups?limit=1")  # None: not served
    items = (listing or {}).get("items") or []
    return items[0]["spec"] if items else None


def pending_pods(objs: list[dict], scheduler_name: str) -> list[dict]:
    out = []
    for o in objs:
        if o["kind"] == "Pod" and not o["spec"].get("nodeName"):
            labels = {**o["metadata"].get("labels", {}), PENDING_LABEL: "true"}
            out.append(
                {
                    **o,
                    "metadata": {**o["metadata"], "labels": labels},
                    "spec": {**o["spec"], "schedulerName": scheduler_name},
                }
            )
    return out


# --- talking to the API server --------------------------------------------------------------------------------


async def create(kube: Kube, obj: dict, attempts: int = 20) -> None:
    """Create one object; retried while the API server is busy (429, 5xx) or the connection breaks."""
    path, body = collection(obj), body_of(obj)
    for attempt in range(attempts):
        try:
            await kube.post(path, body)
            return
        except ApiError as e:
            if e.status == 409:  # an earlier attempt got through, its answer did not
                return
            if e.status not in (429, 500, 503, 504) or attempt == attempts - 1:
                raise
        except (aiohttp.ClientError, OSError, TimeoutError):
            if attempt == attempts - 1:
                raise
        await anyio.sleep(0.25)


async def create_all(kube: Kube, objs: Sequence[dict], concurrency: int = CREATE_CONCURRENCY) -> None:
    limiter = anyio.CapacityLimiter(concurrency)

    async def one(obj: dict) -> None:
        async with limiter:
            await create(kube, obj)

    async with anyio.create_task_group() as tg:
        for obj in objs:
            tg.start_soon(one, obj)


async def arrive(
    kube: Kube, gangs: list[Arrival], rate: float | None, created: dict[str, float], concurrency: int
) -> None:
    """Create the gangs in order, pod i at i / rate seconds (or as fast as the API server takes them), each
    gang's group objects before its pods; `created[pod]` is when the API server answered its create."""
    in_flight = anyio.Semaphore(concurrency)
    t0 = time.monotonic()
    i = 0

    async def one(pod: dict) -> None:
        try:
            await create(kube, pod)
            created[pod["metadata"]["name"]] = time.monotonic()
        finally:
            in_flight.release()

    async with anyio.create_task_group() as tg:
        for gang in gangs:
            for group in gang.groups:
                await create(kube, group)
            for pod in gang.pods:
                if rate:
                    await anyio.sleep(max(0.0, t0 + i / rate - time.monotonic()))
                await in_flight.acquire()  # a slow API server slows the arrivals down: the rate achieved is reported
                tg.start_soon(one, pod)
                i += 1


async def connect(kubeconfig: Path, connections: int = CREATE_CONCURRENCY) -> Kube:
    return await Kube.connect(str(kubeconfig), connections=connections, qps=None)


def run_async(kubeconfig: Path, work: Callable[[Kube], Any]) -> Any:
    async def main() -> Any:
        kube = await connect(kubeconfig)
        try:
            return await work(kube)
        finally:
            await kube.close()

    return anyio.run(main)


def list_pods(cp: ControlPlane, query: str = "") -> dict:
    return cp.request("GET", f"/api/v1/namespaces/{k8s.NAMESPACE}/pods{query}")


def prepare(
    cp: ControlPlane, objs: list[dict], scheduler: str, log: Callable[[str], None], definitions: bool = True
) -> None:
    """Everything but the gangs: nodes, priority classes, PDBs (unless `definitions` is false: they come later),
    background pods Running."""
    cp.create_namespace(k8s.NAMESPACE)
    if scheduler == "gangsolve" and any(o["apiVersion"] == "scheduling.x-k8s.io/v1alpha1" for o in objs):
        cp.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", pod_group_crd())
        cp.wait_for(
            lambda: served(cp, "/apis/scheduling.x-k8s.io/v1alpha1/podgroups"), timeout=60, what="the PodGroup API"
        )
    nodes = [o for o in objs if o["kind"] == "Node"]
    rest = [o for o in objs if o["kind"] == "PriorityClass" or (definitions and o["kind"] == "PodDisruptionBudget")]
    background = [o for o in objs if o["kind"] == "Pod" and o["spec"].get("nodeName")]
    log(f"creating {len(nodes)} kwok nodes, {len(background)} background pods")

    async def work(kube: Kube) -> None:
        await create_all(kube, nodes)
        await create_all(kube, rest)

    run_async(cp.kubeconfig, work)
    cp.wait_for(
        lambda: _nodes_ready(cp, len(nodes)), timeout=600, interval=1.0, what="kwok nodes Ready", component="kwok"
    )
    if background:
        run_async(cp.kubeconfig, lambda kube: create_all(kube, background))
        cp.wait_for(
            lambda: _all_running(cp, len(background)),
            timeout=900,
            interval=2.0,
            what="background pods Running",
            component="kwok",
        )


def served(cp: ControlPlane, path: str) -> bool:
    try:
        return cp.get(path) is not None
    except Exception:
        return False


def _nodes_ready(cp: ControlPlane, count: int) -> bool:
    return sum(1 for n in cp.request("GET", "/api/v1/nodes")["items"] if schedulable(n)) >= count


def _all_running(cp: ControlPlane, count: int) -> bool:
    return len(list_pods(cp, "?fieldSelector=status.phase%3DRunning")["items"]) >= count


# --- watching bindings ----------------------------------------------------------------------------------------


class BindWatch(threading.Thread):
    """Watches the pending pods (by label) and records, per pod, when it was first seen bound and Running
    (time.monotonic())."""

    def __init__(self, cp: ControlPlane, resource_version: str) -> None:
        super().__init__(daemon=True, name="bind-watch")
        self.cp = cp
        self.rv = resource_version
        self.ctx = _tls_context(cp.ca.cert, cp.admin_cert)
        self.bound: dict[str, tuple[float, str]] = {}  # pod -> (when, node)
        self.running: dict[str, float] = {}
        self.last_change = time.monotonic()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.errors = 0

    def _see(self, pod: dict) -> None:
        name = pod["metadata"]["name"]
        node = pod.get("spec", {}).get("nodeName")
        now = time.monotonic()
        with self.lock:
            if node and name not in self.bound:
                self.bound[name] = (now, node)
                self.last_change = now
            if pod.get("status", {}).get("phase") == "Running" and name not in self.running:
                self.running[name] = now
                self.last_change = now

    def _relist(self) -> None:
        listing = list_pods(self.cp, f"?labelSelector={PENDING_LABEL}%3Dtrue")
        for pod in listing["items"]:
            self._see(pod)
        self.rv = listing["metadata"]["resourceVersion"]

    def catch_up(self) -> bool:
        """List the pods once: whether that shows a binding or a start the watch had not delivered yet."""
        with self.lock:
            seen = len(self.bound) + len(self.running)
        with contextlib.suppress(Exception):  # the API server is busy: the watch stays the only source
            self._relist()
        with self.lock:
            return len(self.bound) + len(self.running) > seen

    def run(self) -> None:
        while not self.stop.is_set():
            url = (
                f"{self.cp.server}/api/v1/namespaces/{k8s.NAMESPACE}/pods?watch=1&allowWatchBookmarks=true"
                f"&labelSelector={PENDING_LABEL}%3Dtrue&resourceVersion={self.rv}&timeoutSeconds=5"
            )
            try:
                with urllib.request.urlopen(url, timeout=15, context=self.ctx) as resp:
                    for line in resp:
                        event = json.loads(line)
                        obj = event.get("object", {})
                        if event.get("type") == "ERROR":  # 410 Gone: list again
                            self._relist()
                            break
                        self.rv = obj.get("metadata", {}).get("resourceVersion", self.rv)
                        if event.get("type") in ("ADDED", "MODIFIED"):
                            self._see(obj)
                        if self.stop.is_set():
                            break
            except (urllib.error.URLError, OSError, ValueError):
                self.errors += 1
                time.sleep(0.2)
                with contextlib.suppress(Exception):  # the apiserver is busy: try the watch again
                    self._relist()


# --- the scheduler process ------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float | None:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return None


def python_env(cache: Path) -> dict[str, str]:
    """The environment `gangsolve run` starts in: its bytecode compiled once and kept in `cache`, as the
    image compiles it at install time (hack/install-image-deps.sh), whatever PYTHONDONTWRITEBYTECODE says
    here; so a run's start is not spent compiling a thousand modules."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    return env


def warm_bytecode(cache: Path) -> None:
    subprocess.run([sys.executable, "-c", "import gangsolve.live.run"], env=python_env(cache), check=True, cwd=REPO)


class GangsolveRun:
    """`python -m gangsolve run` on the plane as kube-scheduler's user, its log in `log_path`, /metrics on a
    free port."""

    def __init__(self, cp: ControlPlane, time_limit: float, log_path: Path, settings: dict[str, Any]) -> None:
        self.port = free_port()
        self.log_path = log_path
        config = log_path.with_suffix(".yaml")
        config.write_text(yaml.safe_dump(settings))
        self.args = [
            sys.executable,
            "-m",
            "gangsolve",
            "run",
            "--kubeconfig",
            str(cp.scheduler_kubeconfig),
            "--config",
            str(config),
            "--scheduler-name",
            k8s.SCHEDULER,
            "--metrics-addr",
            f"127.0.0.1:{self.port}",
            "--time-limit",
            str(time_limit),
        ]
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 120) -> None:
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            env = python_env(self.log_path.parent / "pycache")
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env)
        deadline = time.monotonic() + timeout
        while self.get("/readyz")[0] != 200:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gangsolve run exited with {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"gangsolve run not ready after {timeout:.0f}s:\n{self.log_tail()}")
            time.sleep(0.05)

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, ""
        except OSError:
            return 0, ""

    def metrics(self) -> dict[str, float]:
        """The unlabelled samples and histogram sums/counts of /metrics, by name."""
        out = {}
        for line in self.get("/metrics")[1].splitlines():
            if line and not line.startswith("#") and "{" not in line:
                name, _, value = line.rpartition(" ")
                with contextlib.suppress(ValueError):
                    out[name] = float(value)
        return out

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def scheduler_config(scenario: LiveScenario) -> dict | None:
    """kube-scheduler's configuration: its defaults, with the scenario's client-side limits."""
    if scenario.client_qps is None:
        return None
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"qps": scenario.client_qps, "burst": int(scenario.client_qps)},
    }


def api_requests(cp: ControlPlane, since: datetime) -> dict[str, int]:
    """The scheduler's API requests received since `since`, from the audit log: `verb resource` -> count."""
    seen: set[str] = set()
    out: dict[str, int] = {}
    for event in cp.audit_events():
        if event.get("user", {}).get("username") != SCHEDULER_USER or event["auditID"] in seen:
            continue
        received = datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))
        if received < since:
            continue
        seen.add(event["auditID"])
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", event.get("requestURI", "?"))
        if ref.get("subresource"):
            resource += "/" + ref["subresource"]
        key = f"{event['verb']} {resource}"
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def keep_logs(cp: ControlPlane, into: Path) -> None:
    """The control plane's component logs (not the audit log) outlive its temporary directory."""
    if cp.workdir is None:
        return
    into.mkdir(parents=True, exist_ok=True)
    for path in (cp.workdir / "logs").glob("*.log"):
        if path.name != "audit.log":
            shutil.copy(path, into / path.name)


# --- one run --------------------------------------------------------------------------------------------------


@dataclass
class Timing:
    t0: float  # monotonic: the first create (stream) or the scheduler's start (burst)
    created: dict[str, float] = field(default_factory=dict)  # pod name -> monotonic
    cpu_start: float = 0.0  # the scheduler's CPU seconds at t0


def run_live(
    scenario: LiveScenario,
    scheduler: str,
    *,
    log_dir: Path,
    quiet: float = 10.0,
    timeout: float | None = None,
    time_limit: float | None = None,
    log: Callable[[str], None] = lambda _m: None,
) -> dict:
    """One scheduler on a fresh control plane: the measured run as a dict (see the module docstring)."""
    scenario_objs = scenario.build()
    cluster = k8s.to_cluster(scenario_objs)  # gangs as the scenario defines them, whatever each scheduler reads
    objs = scenario.users(scenario_objs, scheduler) if scenario.users else scenario_objs
    limit = time_limit or scenario.time_limit
    timeout = timeout or scenario.timeout
    gangs = arrivals(objs, cluster, scheduler, native_groups=scenario.users is None)
    pending = sum(len(a.pods) for a in gangs)
    log_dir.mkdir(parents=True, exist_ok=True)
    native = scheduler == "kube-scheduler-gang"
    flags: dict[str, Any] = {}
    if native or any(o["apiVersion"] == NATIVE_GANG_API for o in objs):
        flags = workload_flags(scenario.native_gates, scheduler != "gangsolve")
    burst = scenario.mode == "burst"
    gs: GangsolveRun | None = None
    with ControlPlane(
        scheduler=scheduler != "gangsolve",
        defer_scheduler=True,
        scheduler_config=scheduler_config(scenario),
        node_leases=not scenario.scale,
        audit_policy=AUDIT_POLICY,
        log=log,
        **flags,
    ) as cp:
        try:
            late = scenario.late_definitions
            prepare(cp, objs, scheduler, log, definitions=not late)
            definitions: list[dict] = []
            if late:  # the PDBs and PodGroups come `late` seconds after the pods
                definitions = [o for o in objs if o["kind"] == "PodDisruptionBudget"]
                definitions += [g for a in gangs for g in a.groups]
                gangs = [replace(a, groups=[]) for a in own_by_tfjobs(cp, gangs)]
            if scheduler == "gangsolve":
                for obj in GANGSOLVE_EXTRA_RBAC:
                    cp.request("POST", collection(obj), obj)
                settings: dict[str, Any] = {}
                if scenario.client_qps:
                    settings = {"kube-api-qps": scenario.client_qps, "kube-api-burst": int(scenario.client_qps)}
                gs = GangsolveRun(cp, limit, log_dir / f"{scenario.name.replace('/', '__')}-gangsolve.log", settings)

            def start_scheduler() -> int:
                if gs is not None:
                    gs.start()
                    assert gs.proc is not None
                    return gs.proc.pid
                cp.start_scheduler()
                return cp.pids()["kube-scheduler"]

            rv = list_pods(cp, "?limit=1")["metadata"]["resourceVersion"]
            watch = BindWatch(cp, rv)
            watch.start()
            concurrency = CREATE_CONCURRENCY if scenario.rate or burst else 8
            created: dict[str, float] = {}
            if burst:
                log(f"{scheduler}: creating {pending} pending pods, then starting the scheduler")
                run_async(cp.kubeconfig, lambda kube: arrive(kube, gangs, None, created, CREATE_CONCURRENCY))
                wall0 = datetime.now(UTC)
                timing = Timing(time.monotonic(), created)
                pid = start_scheduler()
            else:
                pid = start_scheduler()
                log(f"{scheduler}: creating {pending} pending pods at {scenario.rate or 'full'} pods/s")
                wall0 = datetime.now(UTC)
                timing = Timing(time.monotonic(), created, cpu_start=cpu_seconds(pid))
                run_async(cp.kubeconfig, lambda kube: arrive(kube, gangs, scenario.rate, created, concurrency))
            if definitions:
                time.sleep(late)
                run_async(cp.kubeconfig, lambda kube: create_all(kube, definitions))
            with watch.lock:
                watch.last_change = max(watch.last_change, time.monotonic())
            while True:
                time.sleep(0.25)
                cp.check_alive()
                if gs is not None and gs.proc is not None and gs.proc.poll() is not None:
                    raise RuntimeError(f"gangsolve run exited with {gs.proc.returncode}:\n{gs.log_tail()}")
                now = time.monotonic()
                with watch.lock:
                    settled = len(watch.bound) == pending and len(watch.running) == pending
                    idle = now - watch.last_change
                # A scheduler gets FIRST_BIND_WAIT to bind anything at all: starting up (caches synced, a
                # first cycle) is not being idle, and on a loaded machine it takes longer than `quiet`.
                waited = quiet if watch.bound else max(quiet, FIRST_BIND_WAIT)
                if idle >= waited and not settled and watch.catch_up():
                    continue  # the watch had fallen behind (seen at 5,000 nodes): the scheduler was not idle
                if settled or idle >= waited or now - timing.t0 >= timeout:
                    break
            watch.stop.set()
            usage = {"cpu_seconds": cpu_seconds(pid) - timing.cpu_start, "peak_rss_mib": peak_rss_mib(pid)}
            final = {
                f"{k8s.NAMESPACE}/{p['metadata']['name']}": p["spec"]["nodeName"]
                for p in list_pods(cp, f"?labelSelector={PENDING_LABEL}%3Dtrue")["items"]
                if p["spec"].get("nodeName")
            }
            background = len(list_pods(cp, f"?labelSelector=!{PENDING_LABEL}")["items"])
            gs_metrics = gs.metrics() if gs is not None else {}
            requests = api_requests(cp, wall0)
            served = first_pod_group_served(cp)
        finally:
            if gs is not None:
                gs.stop()
            keep_logs(cp, log_dir / f"{scenario.name.replace('/', '__')}-{scheduler}")
    result = summarize(
        scenario,
        scheduler,
        cluster,
        gangs,
        final,
        watch,
        timing,
        gs_metrics,
        timed_out=now - timing.t0 >= timeout,
        time_limit=limit if scheduler == "gangsolve" else None,
    )
    result.update(usage)
    result["api_requests"] = requests
    total = sum(requests.values())
    result["api_requests_per_pod"] = total / len(final) if final else None
    # The metrics assume the background still holds its capacity: say so if anything evicted some of it.
    result["background_pods_lost"] = (
        sum(1 for o in objs if o["kind"] == "Pod" and o["spec"].get("nodeName")) - background
    )
    if served is not None:
        result["pod_group_served"] = served
    if scenario.oracle is not None:
        bound_at = {pod: t - timing.t0 for pod, (t, _node) in watch.bound.items()}
        result["oracle"] = scenario.oracle(scenario_objs, {k.split("/", 1)[1]: v for k, v in final.items()}, bound_at)
    return result


def summarize(
    scenario: LiveScenario,
    scheduler: str,
    cluster: Cluster,
    gangs: list[Arrival],
    final: dict[str, str],
    watch: BindWatch,
    timing: Timing,
    gs_metrics: dict[str, float],
    *,
    timed_out: bool,
    time_limit: float | None,
) -> dict:
    quality = metrics.quality(cluster, final)
    need = {g.name: g.need for g in cluster.gangs}
    t0 = timing.t0

    bind_times = sorted(t - t0 for t, _node in watch.bound.values())
    create_times = sorted(t - t0 for t in timing.created.values())
    last_bind = bind_times[-1] if bind_times else None
    latencies: list[float] = []  # per complete gang: last member created -> its minimum bound
    complete_pods: list[str] = []
    for gang in gangs:
        names = [p["metadata"]["name"] for p in gang.pods]
        bound = sorted(watch.bound[n][0] for n in names if f"{k8s.NAMESPACE}/{n}" in final and n in watch.bound)
        if len(bound) < max(need[gang.gang], 1):
            continue
        complete_pods += [n for n in names if f"{k8s.NAMESPACE}/{n}" in final]
        made = [timing.created[n] for n in names if n in timing.created]
        if made and scenario.mode == "stream":
            latencies.append(max(0.0, bound[max(need[gang.gang], 1) - 1] - max(made)))
    runs = [watch.running.get(n) for n in complete_pods]
    running = [t for t in runs if t is not None]
    all_running = max(running) - t0 if running and len(running) == len(runs) else None
    out: dict[str, Any] = {
        "scheduler": scheduler,
        "mode": scenario.mode,
        "time_limit": time_limit,
        "pending_pods": sum(len(g.pods) for g in gangs),
        "first_bind_seconds": bind_times[0] if bind_times else None,
        "last_bind_seconds": last_bind,
        "pods_per_second": len(bind_times) / last_bind if last_bind else None,
        "all_placeable_running_seconds": all_running,
        "gangs_complete": len(_complete(gangs, final, need)),
        "bound_over_time": [round(t, 3) for t in bind_times],
        "timed_out": timed_out,
        "watch_errors": watch.errors,
        **quality,
    }
    if scenario.mode == "stream":
        span = create_times[-1] - create_times[0] if len(create_times) > 1 else 0.0
        out.update(
            rate=scenario.rate,
            created_over_time=[round(t, 3) for t in create_times],
            arrival_rate=(len(create_times) - 1) / span if span > 0 else None,
            gang_latencies=[round(x, 4) for x in sorted(latencies)],
            gang_latency_p50=metrics.percentile(latencies, 50),
            gang_latency_p99=metrics.percentile(latencies, 99),
            keeps_up=_keeps_up(complete_pods, timing, watch, max((len(g.pods) for g in gangs), default=0)),
        )
    if gs_metrics:
        out["gangsolve_metrics"] = {
            k: v for k, v in gs_metrics.items() if k.startswith("gangsolve_") and not k.endswith("_created")
        }
    return out


def _keeps_up(placeable: list[str], timing: Timing, watch: BindWatch, largest_gang: int) -> bool:
    """When the last pod was created, the scheduler was at most a second of arrivals (and a gang still
    arriving) behind: of the pods that ended up bound, no more than that were still waiting. A scheduler that
    falls behind builds a queue that grows with the stream's length."""
    made = [timing.created[n] for n in placeable if n in timing.created]
    if len(made) < 2:
        return True
    first, last = min(made), max(made)
    per_second = (len(made) - 1) / (last - first) if last > first else math.inf
    bound = sum(1 for n in placeable if n in watch.bound and watch.bound[n][0] <= last)
    return len(made) - bound <= per_second + largest_gang


def _complete(gangs: list[Arrival], final: dict[str, str], need: dict[str, int]) -> set[str]:
    out = set()
    for gang in gangs:
        got = sum(1 for p in gang.pods if f"{k8s.NAMESPACE}/{p['metadata']['name']}" in final)
        if got >= max(need[gang.gang], 1):
            out.add(gang.gang)
    return out


def run_scenarios(
    names: list[str],
    schedulers: list[str],
    log_dir: Path,
    time_limit: float | None = None,
    quiet: float = 10.0,
    log: Callable[[str], None] = lambda _m: None,
    on_run: Callable[[str, str], None] = lambda _s, _r: None,
) -> list[dict]:
    results = []
    if "gangsolve" in schedulers:
        log_dir.mkdir(parents=True, exist_ok=True)
        warm_bytecode(log_dir / "pycache")
    for name in names:
        scenario = LIVE_SCENARIOS[name]
        objs = scenario.build()
        kinds = [o["kind"] for o in objs]
        runs = each_scheduler(
            name,
            schedulers,
            partial(run_live, scenario, log_dir=log_dir, quiet=quiet, time_limit=time_limit, log=log),
            on_run,
        )
        results.append(
            {
                "name": name,
                "description": scenario.description,
                "nodes": scenario.nodes,
                "mode": scenario.mode,
                "rate": scenario.rate,
                "late_definitions": scenario.late_definitions,
                "objects": {
                    "nodes": kinds.count("Node"),
                    "pods": kinds.count("Pod"),
                    "pending_pods": sum(1 for o in objs if o["kind"] == "Pod" and not o["spec"].get("nodeName")),
                    "podgroups": kinds.count("PodGroup"),
                    "pdbs": kinds.count("PodDisruptionBudget"),
                },
                "runs": runs,
            }
        )
    return results


def each_scheduler(
    name: str, schedulers: list[str], run: Callable[[str], dict], on_run: Callable[[str, str], None]
) -> list[dict]:
    """`run(scheduler)` for each scheduler in turn; a run that fails is a result to report, not the end of the
    benchmark."""
    runs = []
    for scheduler in schedulers:
        on_run(name, scheduler)
        try:
            runs.append(run(scheduler))
        except Exception as exc:
            runs.append({"scheduler": scheduler, "error": f"{type(exc).__name__}: {exc}"[:4000]})
    return runs
