"""The live topology scenario: GPU nodes in racks and blocks, gangs that must stay in one block and would rather
use few racks, each scheduler given the constraint the way its own users write it, and an oracle that counts
what the real bindings did from the Kubernetes objects alone.

What each scheduler's users create (`for_scheduler`):

- `gangsolve`: the scenario as it is: a scheduling.k8s.io/v1beta1 PodGroup per gang (gang policy, the pods'
  priority class, `schedulingConstraints.topology` = the block label), gangsolve's preferred-levels annotation
  (the rack label) on it, pods naming it in `spec.schedulingGroup`.
- `kube-scheduler-gang`: the same PodGroups without gangsolve's annotation. The PodGroup API has one required
  topology key and nothing for a preferred level; the GenericWorkload and TopologyAwareWorkloadScheduling
  gates put the GangScheduling, TopologyPlacementGenerator and PodGroupPodsCount plugins in the default
  profile (NodeResourcesFit scores placements MostAllocated), so the default configuration is what its users
  run.
- `kube-scheduler` (no gangs): no PodGroups; each pod carries its job's label, a required inter-pod affinity
  to its job on the block label and a preferred one on the rack label, as a user of plain kube-scheduler
  writes "one block, few racks".
- the real peers: no scheduling.k8s.io PodGroups; each peer's users build its topology from the node labels
  (`LEVELS`) and ask for the block in its own API, on the gang definition bench/live/populate.py makes for it:
  Volcano a HyperNode tree (racks at tier 1, blocks at 2, zones at 3) and a hard network-topology constraint
  at the block's tier (within a HyperNode Volcano tries the lowest tier first, so racks need no separate
  word); KAI a Topology and a PodGroup topology constraint, required block, preferred rack; Kueue's TAS the
  block as the pods' required topology (one of required or preferred is allowed; within the block Kueue packs
  the fewest domains below it).

The oracle (`oracle`) reads only objects: the PodGroups' minCount and topology key, the nodes' labels and the
pods' final nodes. It shares no code with any scheduler or with the solver's validator.
"""

from __future__ import annotations

import copy
from collections import Counter, defaultdict

import numpy as np

from gangsolve.bench import manifests, scenarios

# A 2-core machine runs all three schedulers on this in a few minutes: 96 nodes (768 GPUs) in racks of 8,
# blocks of 3 racks, zones of 2 blocks; about a quarter of the GPUs held (24-28% on
# the three seeds); gangs of 8-64 GPUs asking 130% of what is free.
SHAPE = scenarios.Topology(
    nodes_per_rack=8,
    racks_per_block=3,
    blocks_per_zone=2,
    gang_gpus=(8, 16, 32, 64),
    gang_gpus_p=(0.3, 0.3, 0.25, 0.15),
)
NODES, LOAD = 96, 1.3
SEEDS = (1, 2, 3)  # live/topology-seed1..3: the same shape, three workloads

# kube-scheduler's topology-aware workload scheduling (KEP-5732, alpha in v1.37) needs GenericWorkload (the
# PodGroup API and gang scheduling, beta, off by default) and its own gate, on the API server (or the
# schedulingConstraints field is forbidden), the scheduler and the controller manager.
TOPOLOGY_GATES = ("GenericWorkload", "TopologyAwareWorkloadScheduling")

JOB_LABEL = "job-name"  # what a per-pod user's affinity selects the job's pods by
LEVELS = (manifests.ZONE_LABEL, manifests.BLOCK_LABEL, manifests.RACK_LABEL)  # the nodes' topology, widest first


def objects(nodes: int = NODES, seed: int = 1, load: float = LOAD) -> list[dict]:
    """The topology scenario's cluster and background at `nodes`, and its gangs in arrival order until they ask
    `load` times the GPUs left free (the same contention for every seed)."""
    objs = scenarios.topology(nodes, nodes, seed=seed, shape=SHAPE)  # more gangs than any load here needs
    gpus = {o["metadata"]["name"]: _gpus(o) for o in objs if o["kind"] == "Pod"}
    running = {o["metadata"]["name"] for o in objs if o["kind"] == "Pod" and o["spec"].get("nodeName")}
    free = sum(int(o["status"]["allocatable"].get(manifests.GPU, 0)) for o in objs if o["kind"] == "Node")
    free -= sum(gpus[name] for name in running)
    members: dict[str, list[str]] = defaultdict(list)
    for o in objs:
        if group := ((o.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName"):
            members[group].append(o["metadata"]["name"])
    keep, asked = set(), 0
    for group in members:
        if asked >= load * free:
            break
        keep.add(group)
        asked += sum(gpus[p] for p in members[group])
    return [
        o
        for o in objs
        if (o["kind"] != "PodGroup" or o["metadata"]["name"] in keep)
        and (
            o["kind"] != "Pod"
            or o["metadata"]["name"] in running
            or o["spec"]["schedulingGroup"]["podGroupName"] in keep
        )
    ]


def _gpus(pod: dict) -> int:
    return sum(
        int((c.get("resources") or {}).get("requests", {}).get(manifests.GPU, 0)) for c in pod["spec"]["containers"]
    )


def for_scheduler(objs: list[dict], scheduler: str) -> list[dict]:
    """The scenario's objects as `scheduler`'s users create them (see the module docstring)."""
    if scheduler == "gangsolve":
        return objs
    if scheduler not in ("kube-scheduler", "kube-scheduler-gang"):  # a real peer: its own gang definitions
        return [
            o if o["kind"] != "Pod" else {**o, "spec": {k: v for k, v in o["spec"].items() if k != "schedulingGroup"}}
            for o in objs
            if o["kind"] != "PodGroup"
        ]
    if scheduler == "kube-scheduler-gang":
        out = []
        for o in objs:
            if o["kind"] == "PodGroup":
                o = copy.deepcopy(o)
                o["metadata"].pop("annotations", None)
            out.append(o)
        return out
    groups = {o["metadata"]["name"]: o for o in objs if o["kind"] == "PodGroup"}
    out = []
    for o in objs:
        if o["kind"] == "PodGroup":
            continue
        group = groups.get(((o.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName", ""))
        if o["kind"] == "Pod" and group is not None:
            o = per_pod_affinity(o, group)
        out.append(o)
    return out


def per_pod_affinity(pod: dict, group: dict) -> dict:
    """`pod` without its PodGroup: its job's label, required affinity to the job on the group's topology key,
    preferred affinity on each preferred level (gangsolve's annotation on the group), heaviest first."""
    name = group["metadata"]["name"]
    required = [t["key"] for t in (group["spec"].get("schedulingConstraints") or {}).get("topology", [])]
    preferred = [
        k for k in (group["metadata"].get("annotations") or {}).get(manifests.PREFERRED_ANNOTATION, "").split(",") if k
    ]
    selector = {"matchLabels": {JOB_LABEL: name}}
    affinity: dict = {}
    if required:
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = [
            {"labelSelector": selector, "topologyKey": key} for key in required
        ]
    if preferred:
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": 100 // (i + 1), "podAffinityTerm": {"labelSelector": selector, "topologyKey": key}}
            for i, key in enumerate(preferred)
        ]
    spec = {k: v for k, v in pod["spec"].items() if k != "schedulingGroup"}
    if affinity:
        spec["affinity"] = {"podAffinity": affinity}
    labels = {**(pod["metadata"].get("labels") or {}), JOB_LABEL: name}
    return {**pod, "metadata": {**pod["metadata"], "labels": labels}, "spec": spec}


# --- the oracle -----------------------------------------------------------------------------------------------


def _p95(values: list[int]) -> float | None:
    return float(np.percentile(values, 95)) if values else None


def oracle(
    objs: list[dict],
    bindings: dict[str, str],
    bound_at: dict[str, float] | None = None,
    rack_key: str = manifests.RACK_LABEL,
    block_key: str = manifests.BLOCK_LABEL,
) -> dict:
    """What the bindings did to the scenario's gangs, from its objects alone.

    `objs`: the scenario in its PodGroup form (the gang definitions, whichever scheduler ran); `bindings`:
    pod name (without namespace) -> node; `bound_at`: pod name -> seconds when it was seen bound.

    A gang is *placed* with at least minCount pods bound, *partial* with fewer but some. A *required-level
    violation* is a gang with bound pods on nodes of more than one value of its topology key (or on a node
    without the label). Racks and blocks per gang count distinct label values over placed gangs of more than
    one pod. A placed gang's time to place is when its minCount-th pod was bound."""
    labels = {o["metadata"]["name"]: o["metadata"].get("labels") or {} for o in objs if o["kind"] == "Node"}
    members: dict[str, list[str]] = defaultdict(list)
    for o in objs:
        if o["kind"] == "Pod":
            group = ((o.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
            if group:
                members[group].append(o["metadata"]["name"])
    placed = partial = violations = 0
    racks: list[int] = []
    blocks: list[int] = []
    times: list[float] = []
    per_priority: Counter[str] = Counter()
    for group in (o for o in objs if o["kind"] == "PodGroup"):
        name = group["metadata"]["name"]
        need = group["spec"]["schedulingPolicy"]["gang"]["minCount"]
        nodes = [bindings[p] for p in members[name] if p in bindings]
        if not nodes:
            continue
        for term in (group["spec"].get("schedulingConstraints") or {}).get("topology", []):
            if len({labels[n].get(term["key"]) for n in nodes}) > 1 or any(term["key"] not in labels[n] for n in nodes):
                violations += 1
                break
        if len(nodes) < need:
            partial += 1
            continue
        placed += 1
        per_priority[group["spec"].get("priorityClassName", "")] += 1
        if len(members[name]) > 1:
            racks.append(len({labels[n].get(rack_key) for n in nodes}))
            blocks.append(len({labels[n].get(block_key) for n in nodes}))
        seen = sorted(bound_at[p] for p in members[name] if p in bound_at) if bound_at is not None else []
        if len(seen) >= need:
            times.append(seen[need - 1])
    return {
        "gangs": sum(1 for o in objs if o["kind"] == "PodGroup"),
        "gangs_placed": placed,
        "placed_by_class": dict(per_priority),
        "partial_gangs": partial,
        "pods_bound": sum(1 for ps in members.values() for p in ps if p in bindings),
        "pods": sum(len(ps) for ps in members.values()),
        "required_violations": violations,
        "racks_per_gang": float(np.mean(racks)) if racks else None,
        "racks_per_gang_p95": _p95(racks),
        "blocks_per_gang": float(np.mean(blocks)) if blocks else None,
        "blocks_per_gang_p95": _p95(blocks),
        "time_to_place_p50": float(np.median(times)) if times else None,
        "time_to_place_max": max(times) if times else None,
    }
