"""What a live run creates, as clients create it: the scenario's nodes (kwok), priority classes, PDBs and
background pods; then the pending gangs as each scheduler's users write them, created in order at the scenario's
rate."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import anyio

from gangsolve.bench import manifests, tenants
from gangsolve.bench.devcluster import ControlPlane, NodeSpec, crds, kai, kueue, volcano
from gangsolve.bench.devcluster.fake_nodes import GPU_RESOURCE, schedulable
from gangsolve.live.kube import ApiError, Kube
from gangsolve.solver import Cluster
from gangsolve.solver.model import DEFAULT_QUEUE

DEFAULT_SCHEDULER = "default-scheduler"
PENDING_LABEL = "bench.gangsolve.io/pending"  # marks the pods under test (not the background)
SCHEDULER_USER = "system:kube-scheduler"  # every scheduler under test runs as kube-scheduler's user
CREATE_CONCURRENCY = 64  # requests in flight while creating objects


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
    "Queue": "queues",
    "PriorityClass": "priorityclasses",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "CustomResourceDefinition": "customresourcedefinitions",
    "TFJob": "tfjobs",
    "DeviceClass": "deviceclasses",
    "ResourceSlice": "resourceslices",
    "ResourceClaim": "resourceclaims",
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
        "metadata": {"name": name, "namespace": manifests.NAMESPACE},
        "spec": spec,
    }


def scheduler_name(scheduler: str) -> str:
    """The schedulerName the pods of `scheduler`'s users name."""
    if scheduler.startswith("volcano"):  # Volcano under any of its configurations
        return volcano.SCHEDULER_NAME
    if scheduler.startswith("kai"):  # KAI under any of its queue set-ups
        return kai.SCHEDULER_NAME
    return manifests.SCHEDULER if scheduler == "gangsolve" else DEFAULT_SCHEDULER


def volcano_members(gang, members: list[dict], topology: tuple[str, ...] = ()) -> tuple[dict, list[dict]]:
    """A gang as Volcano's users submit it (Kubeflow's training-operator with gang scheduling on): a Volcano
    PodGroup with minMember = the gang's minimum (and, where the scenario's gangs ask for a level of `topology`,
    that level's HyperNode tier as the highest allowed), and the pods naming it in their group-name annotation."""
    name = "gang-" + gang.name.split("/", 1)[1]
    tier = volcano.tier_of(gang.colocate, topology) if gang.colocate in topology else None
    group = volcano.pod_group(name, gang.need, members, manifests.NAMESPACE, gang.queue, highest_tier=tier)
    return group, volcano.label_members(members, name)


def arrivals(
    objs: list[dict], cluster: Cluster, scheduler: str, native_groups: bool = True, topology: tuple[str, ...] = ()
) -> list[Arrival]:
    """The pending gangs in creation order, with the objects `scheduler`'s users create for each: the PodGroups
    their pods name, or (kube-scheduler-gang, `native_groups`) a native PodGroup made for each gang, or
    (volcano) a Volcano PodGroup for each gang, single pods included (vc-scheduler binds no pod without one), or
    (kueue) no object but the LocalQueue and pod-group labels on the pods, or (kai) a KAI PodGroup for each gang,
    single pods included, the pods naming it and KAI's default queue. Where the scenario's gangs ask for a level
    of its `topology` on their definitions, each peer's definition asks for it in its own terms."""
    pods = {f"{manifests.NAMESPACE}/{p['metadata']['name']}": p for p in pending_pods(objs, scheduler_name(scheduler))}
    position = {name: i for i, name in enumerate(pods)}
    groups = {o["metadata"]["name"]: o for o in objs if o["kind"] == "PodGroup"}
    out = []
    for gang in sorted(cluster.gangs, key=lambda g: min(position[p.name] for p in g.pods)):
        members = [pods[p.name] for p in sorted(gang.pods, key=lambda p: position[p.name])]
        first = members[0]
        named = (first["spec"].get("schedulingGroup") or {}).get("podGroupName")  # Kubernetes' own PodGroup
        if scheduler == "gangsolve":  # scheduler-plugins' PodGroups: only gangsolve's users have the CRD
            named = named or (first["metadata"].get("labels") or {}).get(manifests.POD_GROUP_LABEL)
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
        if scheduler.startswith("volcano"):
            group, members = volcano_members(gang, members, topology)
            made = [group]
        if scheduler.startswith("kai"):
            name = "gang-" + gang.name.split("/", 1)[1]
            queue = kai.DEFAULT_QUEUE if gang.queue == DEFAULT_QUEUE else gang.queue  # a tenant's: kai.team_queues
            # A gang kept in one domain asks KAI's Topology (`peers.kai_levels` builds it from every level a gang
            # names) through its PodGroup; its pods then carry no pod affinity for it.
            levels = {
                "required": gang.colocate,
                "preferred": gang.preferred[-1] if gang.preferred and gang.preferred[-1] in topology else None,
            }
            made = [kai.pod_group(name, gang.need, members, manifests.NAMESPACE, queue, **levels)]
            if gang.colocate:
                members = [{**p, "spec": {k: v for k, v in p["spec"].items() if k != "affinity"}} for p in members]
            members = kai.label_members(members, name, queue)
        if scheduler.startswith("kueue"):
            # Under TAS a co-located gang asks Kueue for its rack; Kueue alone cannot see pod affinity.
            required = gang.colocate if scheduler == "kueue-tas" else None
            queue = "bench" if gang.queue == DEFAULT_QUEUE else gang.queue  # a team's: kueue.team_queues
            made, members = [], kueue.label_members(members, "gang-" + gang.name.split("/", 1)[1], queue, required)
        out.append(Arrival(gang.name, made, members))
    return out


def own_by_tfjobs(cp: ControlPlane, gangs: list[Arrival]) -> list[Arrival]:
    """The gangs' pods owned by a TFJob each (one per `tf-job-name` label, created here), as the operator
    creates them."""
    crds.install(cp, crds.tfjob_crd())
    uids: dict[str, str] = {}

    def owned(pod: dict) -> dict:
        name = (pod["metadata"].get("labels") or {}).get("tf-job-name")
        if name is None:
            return pod
        if name not in uids:
            ns = manifests.NAMESPACE
            job = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name, "namespace": ns}}
            uids[name] = cp.request("POST", collection(job), {**job, "spec": {}})["metadata"]["uid"]
        owner = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": name, "uid": uids[name], "controller": True}
        return {**pod, "metadata": {**pod["metadata"], "ownerReferences": [owner]}}

    return [replace(a, pods=[owned(p) for p in a.pods]) for a in gangs]


def first_pod_group_served(cp: ControlPlane) -> dict | None:
    """The spec of a scheduling.k8s.io PodGroup as the API server stored it (a field whose feature gate is off is
    dropped or refused, not kept), or None if there is none."""
    listing = cp.get(f"/apis/{NATIVE_GANG_API}/namespaces/{manifests.NAMESPACE}/podgroups?limit=1")  # None: not served
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
    gang's group objects before its pods; `created[pod]` is when the API server answered its create.

    A gang's pods wait for its group objects, not the next gang's: a job controller has several workers, so
    one job's PodGroup round trip does not hold up the others' pods (awaited in line, it capped the arrivals of
    schedulers whose users make PodGroups, and theirs only)."""
    in_flight = anyio.Semaphore(concurrency)
    t0 = time.monotonic()
    i = 0

    async def groups_of(gang: Arrival, done: anyio.Event) -> None:
        for group in gang.groups:
            await create(kube, group)
        done.set()

    async def one(pod: dict, groups: anyio.Event) -> None:
        try:
            await groups.wait()
            await create(kube, pod)
            created[pod["metadata"]["name"]] = time.monotonic()
        finally:
            in_flight.release()

    async with anyio.create_task_group() as tg:
        for gang in gangs:
            groups = anyio.Event()
            tg.start_soon(groups_of, gang, groups)
            for pod in gang.pods:
                if rate:
                    await anyio.sleep(max(0.0, t0 + i / rate - time.monotonic()))
                await in_flight.acquire()  # a slow API server slows the arrivals down: the rate achieved is reported
                tg.start_soon(one, pod, groups)
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
    return cp.request("GET", f"/api/v1/namespaces/{manifests.NAMESPACE}/pods{query}")


def prepare(
    cp: ControlPlane, objs: list[dict], scheduler: str, log: Callable[[str], None], definitions: bool = True
) -> None:
    """Everything but the gangs: nodes, priority classes, PDBs (unless `definitions` is false: they come later),
    DRA devices, classes and claims, background pods Running."""
    cp.create_namespace(manifests.NAMESPACE)
    if scheduler == "gangsolve" and any(o["apiVersion"] == "scheduling.x-k8s.io/v1alpha1" for o in objs):
        crds.install(cp, crds.pod_group_crd())
    queues = tenants.queues_of(objs)
    if scheduler == "gangsolve" and queues:  # gangsolve's users share through Volcano's Queues (docs/queues.md)
        crds.install(cp, crds.queue_crd())
    nodes = [o for o in objs if o["kind"] == "Node"]
    rest = [o for o in objs if o["kind"] == "PriorityClass" or (definitions and o["kind"] == "PodDisruptionBudget")]
    rest += queues if scheduler == "gangsolve" else []  # each peer makes its own from them (bench/live/peers.py)
    rest += [o for o in objs if o["kind"] in ("DeviceClass", "ResourceSlice", "ResourceClaim")]  # DRA: devices
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
        # Each look lists every Running pod: at 40,000 pods that costs the API server seconds, which it would
        # otherwise spend on kwok's status updates, so look less often the more there are.
        cp.wait_for(
            lambda: _all_running(cp, len(background)),
            timeout=900,
            interval=max(2.0, len(background) / 2000),
            what="background pods Running",
            component="kwok",
        )


def _nodes_ready(cp: ControlPlane, count: int) -> bool:
    return sum(1 for n in cp.request("GET", "/api/v1/nodes")["items"] if schedulable(n)) >= count


def _all_running(cp: ControlPlane, count: int) -> bool:
    return len(list_pods(cp, "?fieldSelector=status.phase%3DRunning")["items"]) >= count
