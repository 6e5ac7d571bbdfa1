"""Check a placement against the cluster without the solver: used by tests, benchmarks and the binder's last
check. Returns human-readable violations; an empty list means the placement is sound.

An oracle, written from Kubernetes' own rules (kube-scheduler's NodeUnschedulable, TaintToleration,
NodeAffinity and NodeResourcesFit filters, component-helpers' node affinity matching), the gang rules of the
model and Volcano's queue capability, sharing no code with the solver's constraints, problem arrays or queue
budgets, so a mistake there is caught here.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from fractions import Fraction

from gangsolve.solver.devices import Allocations, DeviceId, DeviceState, consumption
from gangsolve.solver.model import (
    GPU,
    SHARE,
    WHOLE,
    Cluster,
    Gang,
    Node,
    Placement,
    Pod,
    Requirement,
    SelectorTerm,
    Share,
    Taint,
    Toleration,
)

_INT64 = re.compile(r"^[+-]?[0-9]+$")  # Go's strconv.ParseInt(s, 10, 64), which Gt and Lt use


def validate(cluster: Cluster, bindings: Placement | Mapping[str, str]) -> list[str]:
    """Everything wrong with `bindings` (pod -> node); given a Placement, its GPU shares too."""
    shares: Mapping[str, Share] | None = None
    if isinstance(bindings, Placement):
        shares = bindings.shares
        bindings = bindings.bindings
    nodes = {n.name: n for n in cluster.nodes}
    pending = {p.name: (p, gang) for gang in cluster.gangs for p in gang.pods}
    violations: list[str] = []
    placed: dict[str, list[Pod]] = defaultdict(list)  # node -> pods this placement puts there
    per_gang: dict[str, list[str]] = defaultdict(list)  # gang -> nodes of its pods placed now

    for pod_name, node_name in bindings.items():
        if pod_name not in pending:
            violations.append(f"{pod_name}: not a pending pod of this cluster")
            continue
        if node_name not in nodes:
            violations.append(f"{pod_name}: bound to unknown node {node_name}")
            continue
        pod, gang = pending[pod_name]
        why = _filtered_out(pod, nodes[node_name])
        if why:
            violations.append(f"{pod_name} on {node_name}: {why}")
        placed[node_name].append(pod)
        per_gang[gang.name].append(node_name)

    for node_name, pods in placed.items():
        violations += _overcommitted(nodes[node_name], pods)
    for gang in cluster.gangs:
        violations += _gang_violations(gang, per_gang.get(gang.name, []), nodes)
    violations += _over_capability(cluster, bindings)
    if shares is not None:
        violations += validate_shares(cluster, bindings, shares)
    return violations


def validate_shares(cluster: Cluster, bindings: Mapping[str, str], shares: Mapping[str, Share]) -> list[str]:
    """Every placed pod asking for a GPU share (requests[SHARE], or GPU memory) has one GPU of its own node,
    taking what it asks of that GPU (a memory request: that part of the node's GPU memory, rounded up to
    thousandths); no GPU holds more than all of it, bound shares counted; and the GPUs holding shares plus the
    whole GPUs taken (bound and placed) are no more than the node has, so no whole GPU is shared."""
    nodes = {n.name: n for n in cluster.nodes}
    pods = {p.name: p for gang in cluster.gangs for p in gang.pods}
    out = []
    held: dict[tuple[str, int], int] = defaultdict(int)  # (node, gpu) -> thousandths held
    whole: dict[str, int] = defaultdict(int)
    for node in cluster.nodes:
        for gpu, milli in node.gpu_shares.items():
            held[(node.name, gpu)] += milli
        whole[node.name] += node.used.get(GPU, 0)
    for name, node_name in bindings.items():
        pod = pods.get(name)
        if pod is not None and node_name in nodes:
            whole[node_name] += pod.requests.get(GPU, 0)
    for name, share in sorted(shares.items()):
        pod = pods.get(name)
        if pod is None or not (pod.requests.get(SHARE) or pod.gpu_memory):
            out.append(f"{name}: given a GPU share it does not ask for")
            continue
        if bindings.get(name) != share.node or share.node not in nodes:
            out.append(f"{name}: GPU share on {share.node}, pod placed on {bindings.get(name)}")
            continue
        node = nodes[share.node]
        if not 0 <= share.gpu < node.allocatable.get(GPU, 0):
            out.append(f"{name}: GPU {share.gpu} of {share.node}, which has {node.allocatable.get(GPU, 0)}")
        asked = pod.requests.get(SHARE, 0)
        if pod.gpu_memory:
            if node.gpu_memory < pod.gpu_memory:
                out.append(
                    f"{name}: {pod.gpu_memory} MiB of GPU memory on {share.node}, whose GPUs have {node.gpu_memory}"
                )
                continue
            asked = -(-WHOLE * pod.gpu_memory // node.gpu_memory)
        if share.milli != asked:
            out.append(f"{name}: given {share.milli} thousandths of a GPU, asks for {asked}")
        held[(share.node, share.gpu)] += share.milli
    for name in sorted(set(bindings) - set(shares)):
        pod = pods.get(name)
        if pod is not None and (pod.requests.get(SHARE) or pod.gpu_memory):
            out.append(f"{name}: placed on {bindings[name]} without a GPU for its share")
    for (node_name, gpu), milli in sorted(held.items()):
        if milli > WHOLE:
            out.append(f"{node_name}: GPU {gpu} shared past all of it ({milli} thousandths)")
    shared: dict[str, int] = defaultdict(int)
    for node_name, _gpu in held:
        shared[node_name] += 1
    for node_name in sorted(set(shared) | set(whole)):
        gpus = nodes[node_name].allocatable.get(GPU, 0) if node_name in nodes else 0
        if shared[node_name] and shared[node_name] + whole[node_name] > gpus:
            out.append(
                f"{node_name}: a whole GPU shared ({whole[node_name]} whole, {shared[node_name]} shared, {gpus} GPUs)"
            )
    return out


def _over_capability(cluster: Cluster, bindings: Mapping[str, str]) -> list[str]:
    """A queue's capability caps, per resource it names, what its bound pods and those of every queue below it
    (`parent` chains) hold plus what their pods placed now request. A queue already past its cap (the cap was
    lowered) may place nothing more of that resource."""
    declared = {q.name: q for q in cluster.queues}

    def above(name: str) -> list[str]:  # the queue and its ancestors, each once (a loop ends the walk)
        out: list[str] = []
        while name in declared and name not in out:
            out.append(name)
            name = declared[name].parent
        return out or [name]

    holding: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    adding: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for q in cluster.queues:
        for name in above(q.name):
            for resource, amount in q.allocated.items():
                holding[name][resource] += amount
    for gang in cluster.gangs:
        for pod in gang.pods:
            if pod.name in bindings:
                for name in above(gang.queue):
                    for resource, amount in pod.requests.items():
                        adding[name][resource] += amount
    out = []
    for queue in cluster.queues:
        for resource, cap in sorted(queue.capability.items()):
            added = adding[queue.name].get(resource, 0)
            held = holding[queue.name].get(resource, 0)
            if resource == GPU and (adding[queue.name].get(SHARE) or holding[queue.name].get(SHARE)):
                # A queue's GPUs include its shares: counted in thousandths of a GPU.
                added = WHOLE * added + adding[queue.name].get(SHARE, 0)
                held, cap = WHOLE * held + holding[queue.name].get(SHARE, 0), WHOLE * cap
            if added > 0 and held + added > cap:
                out.append(f"queue {queue.name}: {resource} over capability ({held} held + {added} placed > {cap})")
    return out


def _filtered_out(pod: Pod, node: Node) -> str | None:
    """Why kube-scheduler's filters would reject `node` for `pod` whatever its free capacity, or None."""
    if node.unschedulable:
        return "cordoned"
    if not node.ready:
        return "not Ready"
    for taint in node.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not any(_tolerates(t, taint) for t in pod.tolerations):
            return f"taint {taint} not tolerated"
    for key, value in pod.node_selector.items():
        if node.labels.get(key) != value:
            return f"nodeSelector {key}={value} not matched"
    if pod.affinity and not any(_term_matches(term, node) for term in pod.affinity):
        return "required node affinity not matched"
    return None


def _tolerates(toleration: Toleration, taint: Taint) -> bool:
    """core/v1 Toleration.ToleratesTaint."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator in ("", "Equal"):
        return toleration.value == taint.value
    return toleration.operator == "Exists"


def _term_matches(term: SelectorTerm, node: Node) -> bool:
    """A node selector term: its expressions and fields all hold; an empty term matches no node."""
    if not term.match_expressions and not term.match_fields:
        return False
    fields = {"metadata.name": node.name}
    return all(_holds(r, node.labels.get(r.key)) for r in term.match_expressions) and all(
        _holds(r, fields.get(r.key)) for r in term.match_fields
    )


def _holds(req: Requirement, value: str | None) -> bool:
    """One requirement against the node's value for its key (None when the node has no such label)."""
    if req.operator == "In":
        return value is not None and value in req.values
    if req.operator == "NotIn":
        return value is None or value not in req.values
    if req.operator == "Exists":
        return value is not None
    if req.operator == "DoesNotExist":
        return value is None
    if req.operator in ("Gt", "Lt"):
        if value is None or len(req.values) != 1 or not _INT64.match(value) or not _INT64.match(req.values[0]):
            return False
        have, bound = int(value), int(req.values[0])
        return have > bound if req.operator == "Gt" else have < bound
    return False


def _overcommitted(node: Node, pods: list[Pod]) -> list[str]:
    """NodeResourcesFit: for every resource the new pods request, what bound pods hold plus what they add must
    fit the node's allocatable; every pod takes one of the node's pod slots."""
    adding: dict[str, int] = defaultdict(int)
    for pod in pods:
        for resource, amount in pod.requests.items():
            if resource not in ("pods", SHARE):  # shares are a GPU's parts: validate_shares checks them
                adding[resource] += amount
    adding["pods"] = len(pods)
    out = []
    for resource, amount in sorted(adding.items()):
        if amount <= 0:
            continue
        free = node.allocatable.get(resource, 0) - node.used.get(resource, 0)
        if amount > free:
            out.append(f"{node.name}: {resource} overcommitted ({amount} requested, {free} free)")
    return out


def _gang_violations(gang: Gang, got: list[str], nodes: Mapping[str, Node]) -> list[str]:
    """All or nothing: members placed now plus those bound reach the gang's minimum, or none is placed; a
    co-located gang's members (bound ones too) all sit on nodes sharing one value of its label."""
    out = []
    if got and len(got) + len(gang.bound_nodes) < gang.min_member:
        need = gang.min_member - len(gang.bound_nodes)
        out.append(f"{gang.name}: partial gang ({len(got)} of {need} needed pods placed)")
    if gang.colocate and got:
        values = {nodes[n].labels.get(gang.colocate) for n in [*got, *gang.bound_nodes] if n in nodes}
        if len(values) != 1 or None in values:
            out.append(f"{gang.name}: spans {gang.colocate} values {sorted(map(str, values))}")
    return out


def validate_devices(
    state: DeviceState, bindings: Placement | Mapping[str, str], allocations: Allocations
) -> list[str]:
    """Dynamic Resource Allocation, checked from the API's rules (resource.k8s.io/v1) and not from the
    assignment's code: every claim of a bound pod is allocated, no other is; no device is allocated twice or
    was allocated already; each device is one its request selects and reachable from the pod's node; an
    ExactCount request has exactly `count` devices, an `All` request every matching device of the node (at
    least one); every matchAttribute constraint holds. A share (a request with capacity requests) is of a device
    that allows multiple allocations, and no device holds more than any of its capacities, counting what
    allocated claims consume; a device given whole (a request without capacity requests) holds nothing else."""
    if isinstance(bindings, Placement):
        bindings = bindings.bindings
    violations: list[str] = []
    owner: dict[DeviceId, str] = {}
    shares: dict[DeviceId, dict[str, Fraction]] = {}  # shared device -> capacity -> consumed, new shares only
    claims = {c.name: c for c in state.claims}
    for name in allocations:
        if name not in claims or claims[name].pod not in bindings:
            violations.append(f"claim {name}: allocated, but its pod is not placed")
    for claim in state.claims:
        node = bindings.get(claim.pod)
        if node is None:
            continue
        if claim.name not in allocations:
            if claim.requests:
                violations.append(f"claim {claim.name}: pod {claim.pod} placed on {node} with the claim unallocated")
            continue
        got: dict[str, list[DeviceId]] = defaultdict(list)
        asked = {r.name: r.capacity for r in claim.requests}
        for request, device in allocations[claim.name]:
            got[request].append(device)
            where = f"claim {claim.name}: device {'/'.join(device)}"
            info = state.devices.get(device)
            if asked.get(request):
                took = consumption(info, asked[request]) if info is not None else None
                if took is None:
                    violations.append(f"{where} cannot hold the share request {request} asks")
                    continue
                if device in owner:
                    violations.append(f"{where} shared, and given whole to {owner[device]}")
                held = shares.setdefault(device, {})
                for name, amount in took.items():
                    held[name] = held.get(name, Fraction(0)) + amount
                continue
            if device in state.allocated:
                violations.append(f"{where} was allocated already")
            if device in owner or device in shares:
                violations.append(f"{where} allocated twice (also to {owner.get(device, 'a share')})")
            owner[device] = claim.name
            if info is None:
                violations.append(f"{where} does not exist")
            elif info.nodes is not None and node not in info.nodes:
                violations.append(f"{where} is not reachable from {node}")
        by_name = {r.name: r for r in claim.requests}
        for request_name in got:
            if request_name not in by_name:
                violations.append(f"claim {claim.name}: devices for unknown request {request_name}")
        for req in claim.requests:
            mine = got.get(req.name, [])
            if any(d not in req.candidates for d in mine):
                violations.append(f"claim {claim.name}: request {req.name} got a device it does not select")
            if req.count > 0 and len(mine) != req.count:
                violations.append(f"claim {claim.name}: request {req.name} got {len(mine)} of {req.count}")
            if req.count == 0:
                every = {d for d in req.candidates if d in state.devices and _reaches(state.devices[d].nodes, node)}
                if not mine or set(mine) != every:
                    violations.append(f"claim {claim.name}: request {req.name} (All) did not get every device")
        for constraint in claim.constraints:
            names = constraint.requests or tuple(by_name)
            values = set()
            for request_name in names:
                for d in got.get(request_name, []):
                    attrs = state.devices[d].attributes if d in state.devices else {}
                    value = attrs.get(constraint.attribute, _MISSING)
                    values.add(repr(value))
            if repr(_MISSING) in values or len(values) > 1:
                violations.append(f"claim {claim.name}: matchAttribute {constraint.attribute} does not hold")
    for device, held in sorted(shares.items()):
        info = state.devices[device]
        before = state.consumed.get(device)
        if before is None and device in state.allocated:
            before = {name: c.value for name, c in info.capacity.items()}  # held without saying: all of it
        for name, amount in sorted(held.items()):
            total = amount + (before or {}).get(name, Fraction(0))
            if total > info.capacity[name].value:
                violations.append(f"device {'/'.join(device)}: {name} {total} over its capacity")
    return violations


_MISSING = object()


def _reaches(nodes: frozenset[str] | None, node: str) -> bool:
    return nodes is None or node in nodes
