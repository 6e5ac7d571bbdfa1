"""Check a placement against the cluster without the solver: used by tests, benchmarks and the binder's last
check. Returns human-readable violations; an empty list means the placement is sound."""

from __future__ import annotations

from collections import defaultdict

from gangsolve.solver.model import Cluster, Placement
from gangsolve.solver.problem import exclusion


def validate(cluster: Cluster, bindings: Placement | dict[str, str]) -> list[str]:
    if isinstance(bindings, Placement):
        bindings = dict(bindings.bindings)
    nodes = {n.name: n for n in cluster.nodes}
    pods = {p.name: (p, gang) for gang in cluster.gangs for p in gang.pods}
    violations: list[str] = []
    added: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    per_gang: dict[str, list[str]] = defaultdict(list)

    for pod_name, node_name in bindings.items():
        if pod_name not in pods:
            violations.append(f"{pod_name}: not a pending pod of this cluster")
            continue
        if node_name not in nodes:
            violations.append(f"{pod_name}: bound to unknown node {node_name}")
            continue
        pod, gang = pods[pod_name]
        node = nodes[node_name]
        why = exclusion(pod, node)
        if why is not None:
            violations.append(f"{pod_name} on {node_name}: {why}")
        for r, q in pod.requests.items():
            added[node_name][r] += q
        if "pods" not in pod.requests:
            added[node_name]["pods"] += 1
        per_gang[gang.name].append(node_name)

    for node_name, extra in added.items():
        node = nodes[node_name]
        for r, q in extra.items():
            if q > node.free(r) and q > 0:
                violations.append(f"{node_name}: {r} overcommitted ({q} requested, {node.free(r)} free)")

    for gang in cluster.gangs:
        got = per_gang.get(gang.name, [])
        if got and len(got) < gang.need:
            violations.append(f"{gang.name}: partial gang ({len(got)} of {gang.need} needed pods placed)")
        if gang.colocate and got:
            values = {nodes[n].labels.get(gang.colocate) for n in [*got, *gang.bound_nodes] if n in nodes}
            if len(values) != 1 or None in values:
                violations.append(f"{gang.name}: spans {gang.colocate} values {sorted(map(str, values))}")
    return violations
