"""The live GPU-sharing scenario: the OpenB trace's fractional pods (`gpu_milli` below 1000, each asking part of
one GPU, as KAI's `gpu-fraction` annotation) on a sample of the trace's GPU nodes, arriving until they ask
`LOAD` times the GPUs there, and a check of the final placement from the API's objects alone.

The check (`devices`) reads only the nodes (their `nvidia.com/gpu`) and the pods (nodeName, requests and
annotations) by docs/gpu-sharing.md's rules: a fractional pod holds `gpu-fraction` (rounded up to thousandths)
of the GPU its `gangsolve.io/gpu-index` names; no GPU may hold more than all of it, and the GPUs holding shares
plus the whole GPUs requested may be no more than the node has. It shares no code with the scheduler.

kube-scheduler's users ask the same shares its way, DRA consumable capacity (KEP-5075, beta and on by default
in the pinned v1.37): each node's GPUs are devices of a ResourceSlice that may be allocated many times
(`allowMultipleAllocations`) with a capacity `share` of 1000, and each pod has a ResourceClaim asking that many
thousandths of one device (`for_scheduler`). Its placement is checked the same way, from the claims'
allocations (`consumedCapacity` on a device of the pod's node) against the slices' capacities.
"""

from __future__ import annotations

import math
from collections import defaultdict
from fractions import Fraction

import numpy as np

from gangsolve.bench import manifests, openb, sharing

NODES, LOAD, SEED = 64, 1.1, 2023
WHOLE = 1000
INDEX = "gangsolve.io/gpu-index"
FRACTION = "gpu-fraction"
DRIVER = "gpu-share.bench.gangsolve.io"  # kube-scheduler's users' GPUs: devices of this (fake) DRA driver
CAPACITY = "share"  # each device's capacity, in thousandths of the GPU


def objects(nodes: int = NODES, load: float = LOAD, seed: int = SEED) -> list[dict]:
    """`nodes` GPU nodes drawn from the trace's, then its fractional pods drawn with replacement, pending in
    arrival order, until the thousandths of a GPU they ask reach `load` of the nodes' GPUs."""
    rng = np.random.default_rng(seed)
    rows = openb.trace_nodes()
    chosen = [rows[int(i)] for i in sorted(rng.choice(len(rows), nodes, replace=False))]
    objs = openb.node_objects(chosen)
    capacity = WHOLE * sum(int(r["gpu"]) for r in chosen)
    fractional = [a for a in sharing.trace() if a.gpus == 1 and a.milli < WHOLE]
    asked = 0
    while asked < load * capacity:
        ask = fractional[int(rng.integers(len(fractional)))]
        obj = manifests.pod(f"share-{len(objs) - nodes:04d}", ask.cpu_milli, ask.memory_mib, created=len(objs))
        obj["metadata"]["annotations"] = {FRACTION: f"{ask.milli / WHOLE:g}"}
        objs.append(obj)
        asked += ask.milli
    return objs


def for_scheduler(objs: list[dict], scheduler: str) -> list[dict]:
    """What each scheduler's users create: the scenario as it is for gangsolve; for kube-scheduler, its DRA
    form (`as_dra`)."""
    return as_dra(objs) if scheduler == "kube-scheduler" else objs


def as_dra(objs: list[dict], _scheduler: str = "") -> list[dict]:
    """The scenario in DRA consumable capacity: the GPUs as shareable DRA devices (a DeviceClass, a
    ResourceSlice per node, no `nvidia.com/gpu` left on the nodes) and each pod's share as a ResourceClaim of
    its own, asking that capacity of one device. live/openb-shares-dra gives it to every scheduler."""
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }
    out: list[dict] = [device_class]
    for o in objs:
        if o["kind"] == "Node":
            allocatable = dict(o["status"]["allocatable"])
            count = int(allocatable.pop(manifests.GPU, 0))
            out += [{**o, "status": {**o["status"], "allocatable": allocatable}}, _slice(o["metadata"]["name"], count)]
        elif o["kind"] == "Pod" and FRACTION in (o["metadata"].get("annotations") or {}):
            name = o["metadata"]["name"]
            milli = math.ceil(Fraction(o["metadata"]["annotations"][FRACTION]) * WHOLE)
            request = {"deviceClassName": DRIVER, "capacity": {"requests": {CAPACITY: str(milli)}}}
            claim = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": f"{name}-gpu", "namespace": manifests.NAMESPACE},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
            }
            metadata = {k: v for k, v in o["metadata"].items() if k != "annotations"}
            spec = {**o["spec"], "resourceClaims": [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}]}
            out += [claim, {**o, "metadata": metadata, "spec": spec}]
        else:
            out.append(o)
    return out


def _slice(node: str, gpus: int) -> dict:
    devices = [
        {"name": f"gpu-{i}", "allowMultipleAllocations": True, "capacity": {CAPACITY: {"value": str(WHOLE)}}}
        for i in range(gpus)
    ]
    return manifests.slice_of(node, DRIVER, devices)


def devices(api: dict[str, list[dict]]) -> dict:
    """The GPUs as the API's objects (`nodes`, `pods`, `resourceclaims`, `resourceslices`) show them after the
    run: fractional pods bound, GPUs shared, thousandths held, and what breaks the rules (GPUs past all of them,
    whole GPUs shared, fractional pods bound without a GPU of their node: no index, or no allocated claim).
    A GPU is a node's `nvidia.com/gpu` (gangsolve's users) or a device of a node's ResourceSlice with capacity
    `share` (kube-scheduler's)."""
    nodes, pods = api["nodes"], api["pods"]
    gpus = {n["metadata"]["name"]: int((n["status"].get("allocatable") or {}).get(manifests.GPU, 0)) for n in nodes}
    capacity = {  # (node, device) -> thousandths, of the DRA form's devices
        (s["spec"]["nodeName"], d["name"]): _quantity(d["capacity"][CAPACITY]["value"])
        for s in api.get("resourceslices") or []
        if s["spec"].get("driver") == DRIVER
        for d in s["spec"].get("devices") or []
    }
    for node, _device in capacity:
        gpus[node] = gpus.get(node, 0) + 1
    claims = {c["metadata"]["name"]: c for c in api.get("resourceclaims") or []}
    held: dict[tuple[str, int | str], int] = defaultdict(int)
    whole: dict[str, int] = defaultdict(int)
    fractional = without_index = 0
    for p in pods:
        node = p["spec"].get("nodeName")
        if not node or node not in gpus or (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        annotations = p["metadata"].get("annotations") or {}
        for c in p["spec"].get("containers") or []:
            whole[node] += int(((c.get("resources") or {}).get("requests") or {}).get(manifests.GPU, 0))
        if p["spec"].get("resourceClaims"):
            fractional += 1
            shares = _allocated(claims.get(f"{p['metadata']['name']}-gpu"), node)
            without_index += not shares
            for device, milli in shares:
                held[(node, device)] += milli
            continue
        if FRACTION not in annotations:
            continue
        fractional += 1
        index = annotations.get(INDEX, "")
        if not index.isdigit() or int(index) >= gpus[node]:
            without_index += 1
            continue
        held[(node, int(index))] += math.ceil(Fraction(annotations[FRACTION]) * WHOLE)
    shared: dict[str, int] = defaultdict(int)
    for node, _index in held:
        shared[node] += 1
    return {
        "fractional_pods_bound": fractional,
        "gpus": sum(gpus.values()),
        "gpus_shared": len(held),
        "gpu_thousandths_held": sum(held.values()),
        "devices_over_100": sum(1 for key, milli in held.items() if milli > capacity.get(key, WHOLE)),
        "nodes_with_a_whole_gpu_shared": sum(1 for n in shared if shared[n] + whole[n] > gpus[n]),
        "fractional_pods_without_a_gpu_index": without_index,
    }


def _allocated(claim: dict | None, node: str) -> list[tuple[str, int]]:
    """(device, thousandths consumed) of a claim's allocation on `node`'s devices of the driver."""
    allocation = ((claim or {}).get("status") or {}).get("allocation") or {}
    return [
        (r["device"], _quantity(r.get("consumedCapacity", {}).get(CAPACITY, "0")))
        for r in (allocation.get("devices") or {}).get("results") or []
        if r.get("driver") == DRIVER and r.get("pool") == node
    ]


def _quantity(text: str) -> int:
    """A whole quantity as the API server writes it back (`470`, `1k`)."""
    scale = {"k": 10**3, "M": 10**6}.get(text[-1:], 1)
    return int(Fraction(text[:-1] if scale > 1 else text) * scale)
