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


def k8s_queue(
    name: str, weight=None, capability=None, guarantee=None, reclaimable=None, state=None, parent=None, deserved=None
) -> dict:
    """A Volcano Queue (scheduling.volcano.sh/v1beta1); `state` its status.state (Open, Closed...)."""
    spec: dict = {}
    if parent is not None:
        spec["parent"] = parent
    if deserved is not None:
        spec["deserved"] = deserved
    if weight is not None:
        spec["weight"] = weight
    if capability is not None:
        spec["capability"] = capability
    if guarantee is not None:
        spec["guarantee"] = {"resource": guarantee}
    if reclaimable is not None:
        spec["reclaimable"] = reclaimable
    obj = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name}, "spec": spec}
    if state is not None:
        obj["status"] = {"state": state}
    return obj


def k8s_pdb(name: str, min_available, match_labels: dict, ns: str = "default") -> dict:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": match_labels}},
    }


def k8s_list(*items: dict) -> dict:
    return {"apiVersion": "v1", "kind": "List", "items": list(items)}


# --- Dynamic Resource Allocation (resource.k8s.io/v1) ---------------------------------------------------------

DRIVER = "gpu.example.com"


def k8s_gpu(name: str, model="A100", memory="80Gi", pcie_root="root-0", **extra_attributes) -> dict:
    attributes = {"model": {"string": model}, "pcieRoot": {"string": pcie_root}}
    attributes.update({k: v if isinstance(v, dict) else {"string": v} for k, v in extra_attributes.items()})
    return {"name": name, "attributes": attributes, "capacity": {"memory": {"value": memory}}}


def k8s_slice(node: str | None, devices: list[dict], driver=DRIVER, pool=None, generation=0, **spec) -> dict:
    """A ResourceSlice of `node`'s devices (a node-local pool named after the node), or of `spec`'s scope."""
    scope = {"nodeName": node} if node else spec
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{pool or node}-{driver}"},
        "spec": {
            "driver": driver,
            "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
            **scope,
        },
    }


def k8s_device_class(name=DRIVER, *expressions: str) -> dict:
    expressions = expressions or (f'device.driver == "{DRIVER}"',)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]},
    }


def claim_spec(count=1, device_class=DRIVER, selectors=(), match=None, mode=None, requests=None) -> dict:
    """A claim's spec: one request `gpus` (or `requests`), optionally one matchAttribute over all of them."""
    if requests is None:
        exactly = {"deviceClassName": device_class, "count": count}
        if mode:
            exactly = {"deviceClassName": device_class, "allocationMode": mode}
        if selectors:
            exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
        requests = [{"name": "gpus", "exactly": exactly}]
    devices: dict = {"requests": requests}
    if match:
        devices["constraints"] = [{"matchAttribute": match}]
    return {"devices": devices}


def k8s_claim(name: str, ns="default", allocated=None, node=None, **spec) -> dict:
    """A ResourceClaim; `allocated` lists (pool, device) already allocated to it (on `node`)."""
    obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}"},
        "spec": claim_spec(**spec),
    }
    if allocated is not None:
        results = [{"request": "gpus", "driver": DRIVER, "pool": p, "device": d} for p, d in allocated]
        allocation: dict = {"devices": {"results": results}}
        if node:
            allocation["nodeSelector"] = {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            }
        obj["status"] = {"allocation": allocation}
    return obj


def k8s_claim_template(name: str, ns="default", **spec) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"spec": claim_spec(**spec)},
    }


def with_claims(pod: dict, *claims: str, templates: dict[str, str | None] | None = None) -> dict:
    """`pod` using ResourceClaims by name, and templates (reference name -> the claim made from it, or None
    while the controller has not made it)."""
    refs = [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)]
    statuses = []
    for ref, made in (templates or {}).items():
        refs.append({"name": ref, "resourceClaimTemplateName": ref})
        if made is not None:
            statuses.append({"name": ref, "resourceClaimName": made})
    pod["spec"]["resourceClaims"] = refs
    if statuses:
        pod["status"]["resourceClaimStatuses"] = statuses
    return pod
