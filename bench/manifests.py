"""Kubernetes objects (plain dicts, as `kubectl get -o json` prints them) for benchmark scenarios.

Scenarios are written as objects, not as solver types, so every benchmark goes through the same edge as
production (snapshot -> build_cluster -> Cluster) and any scenario can be saved and replayed with
`gangsolve solve`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson

from gangsolve.edge.gangs import COLOCATE_ANNOTATION, POD_GROUP_LABEL, PREFERRED_ANNOTATION, build_cluster
from gangsolve.edge.snapshot import Snapshot, parse
from gangsolve.solver.model import GPU, Cluster

SCHEDULER = "gangsolve"
NAMESPACE = "bench"
EPOCH = datetime(2024, 1, 1, tzinfo=UTC)
GPU_MODEL_LABEL = "nvidia.com/gpu.product"
RACK_LABEL = "topology.gangsolve.io/rack"
BLOCK_LABEL = "topology.gangsolve.io/block"
ZONE_LABEL = "topology.kubernetes.io/zone"
# Read by the time-based mode only: when a job arrives and how long it runs once started.
ARRIVAL_ANNOTATION = "bench.gangsolve.io/arrival-seconds"
DURATION_ANNOTATION = "bench.gangsolve.io/duration-seconds"


def timestamp(seconds: float) -> str:
    """An RFC 3339 creationTimestamp `seconds` after the benchmark epoch (sorts as text in time order)."""
    return (EPOCH + timedelta(seconds=int(seconds))).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(
    name: str,
    cpu_milli: int,
    memory_mib: int,
    gpus: int = 0,
    labels: dict[str, str] | None = None,
    taints: list[dict] | None = None,
    max_pods: int = 110,
) -> dict:
    allocatable = {"cpu": f"{cpu_milli}m", "memory": f"{memory_mib}Mi", "pods": str(max_pods)}
    if gpus:
        allocatable[GPU] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints} if taints else {},
        "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def pod(
    name: str,
    cpu_milli: int,
    memory_mib: int,
    gpus: int = 0,
    *,
    created: float = 0,
    group: str | None = None,
    priority_class: str | None = None,
    node_selector: dict[str, str] | None = None,
    tolerations: list[dict] | None = None,
    colocate: str | None = None,
    node_name: str | None = None,
    scheduler_name: str = SCHEDULER,
    labels: dict[str, str] | None = None,
) -> dict:
    """A pending pod of our scheduler, or (with `node_name`) a running pod that holds capacity."""
    requests = {"cpu": f"{cpu_milli}m", "memory": f"{memory_mib}Mi"}
    if gpus:
        requests[GPU] = str(gpus)
    meta: dict = {"name": name, "namespace": NAMESPACE, "creationTimestamp": timestamp(created)}
    meta_labels = dict(labels or {})
    if group:
        meta_labels[POD_GROUP_LABEL] = group
    if meta_labels:
        meta["labels"] = meta_labels
    spec: dict = {
        "schedulerName": scheduler_name,
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": requests}}],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    if colocate and group:
        # What a kube-scheduler user writes for "all members in one rack"; gangsolve reads the PodGroup
        # annotation instead, the per-pod baseline emulates this term.
        spec["affinity"] = {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {POD_GROUP_LABEL: group}}, "topologyKey": colocate}
                ]
            }
        }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": "Running" if node_name else "Pending"},
    }


def pod_group(
    name: str, min_member: int, colocate: str | None = None, annotations: dict[str, str] | None = None
) -> dict:
    notes = dict(annotations or {})
    if colocate:
        notes[COLOCATE_ANNOTATION] = colocate
    meta: dict = {"name": name, "namespace": NAMESPACE}
    if notes:
        meta["annotations"] = notes
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": meta,
        "spec": {"minMember": min_member},
    }


def upstream_gang(
    name: str,
    created: float,
    size: int,
    cpu_milli: int,
    memory_mib: int,
    gpus: int,
    priority_class: str,
    required: str | None = None,
    preferred: tuple[str, ...] = (),
) -> list[dict]:
    """A scheduling.k8s.io/v1beta1 PodGroup (a gang of `size`, its priority class, `required` as its topology
    constraint, `preferred` levels as gangsolve's annotation) and its pods, which name it in schedulingGroup."""
    spec: dict = {"schedulingPolicy": {"gang": {"minCount": size}}, "priorityClassName": priority_class}
    if required:
        spec["schedulingConstraints"] = {"topology": [{"key": required}]}
    meta: dict = {"name": name, "namespace": NAMESPACE}
    if preferred:
        meta["annotations"] = {PREFERRED_ANNOTATION: ",".join(preferred)}
    out = [{"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": meta, "spec": spec}]
    for i in range(size):
        member = pod(f"{name}-{i}", cpu_milli, memory_mib, gpus, created=created, priority_class=priority_class)
        member["spec"]["schedulingGroup"] = {"podGroupName": name}
        out.append(member)
    return out


def resource_slice(node: str, driver: str, gpus: int, labels: dict[str, str]) -> dict:
    """A node's GPUs as DRA devices of `driver` (two PCIe roots of half the GPUs each)."""
    model = labels.get(GPU_MODEL_LABEL, "unknown")
    devices = [
        {
            "name": f"gpu-{i}",
            "attributes": {"model": {"string": model}, "pcieRoot": {"string": f"pci-{i * 2 // gpus}"}},
            "capacity": {"memory": {"value": "80Gi"}},
        }
        for i in range(gpus)
    ]
    return slice_of(node, driver, devices)


def slice_of(node: str, driver: str, devices: list[dict]) -> dict:
    """One ResourceSlice holding a node's whole pool of `driver`'s devices."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def resource_claim(
    name: str, device_class: str, count: int, node: str | None = None, devices: list[str] | None = None
) -> dict:
    """A claim for `count` devices of the class; with `node` and `devices`, allocated there already."""
    claim: dict = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": device_class, "count": count}}]}
        },
    }
    if node and devices:
        results = [{"request": "gpus", "driver": device_class, "pool": node, "device": d} for d in devices]
        selector = {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        }
        claim["status"] = {"allocation": {"devices": {"results": results}, "nodeSelector": selector}}
    return claim


def priority_class(name: str, value: int, preemption_policy: str | None = None) -> dict:
    obj = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}
    if preemption_policy:
        obj["preemptionPolicy"] = preemption_policy
    return obj


def as_list(objects: list[dict]) -> dict:
    return {"apiVersion": "v1", "kind": "List", "items": objects}


def dumps(objects: list[dict]) -> bytes:
    """The snapshot file `gangsolve solve` reads (JSON: parsed 20x faster than YAML)."""
    return orjson.dumps(as_list(objects))


def to_snapshot(objects: list[dict]) -> Snapshot:
    """Exactly what `gangsolve solve` would read from the written file."""
    return parse(dumps(objects).decode())


def to_cluster(objects: list[dict]) -> Cluster:
    return build_cluster(to_snapshot(objects), SCHEDULER)
