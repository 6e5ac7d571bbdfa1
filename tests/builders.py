"""Test builders for solver types and Kubernetes objects, in the spirit of kube-scheduler's MakePod()."""

from __future__ import annotations

from gangsolve.solver.model import GPU, Gang, Node, Pod, Taint

GI = 2**30


def node(
    name: str, cpu: int = 32, gpus: int = 0, memory_gi: int = 256, pods: int = 110, labels=None, taints=(), **kw
) -> Node:
    allocatable = {"cpu": cpu * 1000, "memory": memory_gi * GI, "pods": pods}
    if gpus:
        allocatable[GPU] = gpus
    return Node(name, allocatable, {"kubernetes.io/hostname": name, **(labels or {})}, tuple(taints), **kw)


def pod(name: str, cpu: float = 1, gpus: int = 0, memory_gi: int = 1, **kw) -> Pod:
    requests = {"cpu": int(cpu * 1000), "memory": memory_gi * GI, "pods": 1}
    if gpus:
        requests[GPU] = gpus
    return Pod(name, requests, **kw)


def gang(name: str, size: int, min_member: int | None = None, **pod_kw) -> Gang:
    priority = pod_kw.pop("priority", 0)
    colocate = pod_kw.pop("colocate", None)
    bound = pod_kw.pop("bound_nodes", ())
    pods = tuple(pod(f"{name}-{i}", priority=priority, order=i, **pod_kw) for i in range(size))
    return Gang(name, pods, size if min_member is None else min_member, tuple(bound), colocate)


MASTER_TAINT = Taint("node-role.kubernetes.io/master", "", "NoSchedule")


# --- Kubernetes objects ---------------------------------------------------------------------------------------


def k8s_node(
    name: str,
    cpu="32",
    memory="256Gi",
    gpus=None,
    pods="110",
    labels=None,
    taints=None,
    ready=True,
    unschedulable=False,
) -> dict:
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods}
    if gpus is not None:
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def k8s_pod(
    name: str,
    ns: str = "default",
    cpu="1",
    memory="1Gi",
    gpus=None,
    scheduler="gangsolve",
    node_name=None,
    phase="Pending",
    labels=None,
    annotations=None,
    owner=None,
    priority=None,
    created=None,
    **spec,
) -> dict:
    requests = {"cpu": cpu, "memory": memory}
    if gpus is not None:
        requests["nvidia.com/gpu"] = str(gpus)
    meta = {"name": name, "namespace": ns, "labels": labels or {}, "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": owner, "uid": f"uid-{owner}", "controller": True}
        ]
    if created:
        meta["creationTimestamp"] = created
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "main", "resources": {"requests": requests}}],
            **spec,
        },
        "status": {"phase": phase},
    }
    if node_name:
        obj["spec"]["nodeName"] = node_name
    if priority is not None:
        obj["spec"]["priority"] = priority
    return obj


def k8s_pod_group(
    name: str, min_member, ns: str = "default", volcano: bool = False, annotations=None, queue=None
) -> dict:
    api = "scheduling.volcano.sh/v1beta1" if volcano else "scheduling.x-k8s.io/v1alpha1"
    spec = {"minMember": min_member, **({"queue": queue} if queue is not None else {})}
    return {
        "apiVersion": api,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations or {}},
        "spec": spec,
    }


def k8s_queue(name: str, weight=None, capability=None, guarantee=None, reclaimable=None) -> dict:
    """A Volcano Queue (scheduling.volcano.sh/v1beta1)."""
    spec: dict = {}
    if weight is not None:
        spec["weight"] = weight
    if capability is not None:
        spec["capability"] = capability
    if guarantee is not None:
        spec["guarantee"] = {"resource": guarantee}
    if reclaimable is not None:
        spec["reclaimable"] = reclaimable
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def k8s_pdb(name: str, min_available, match_labels: dict, ns: str = "default") -> dict:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": match_labels}},
    }


def k8s_list(*items: dict) -> dict:
    return {"apiVersion": "v1", "kind": "List", "items": list(items)}
