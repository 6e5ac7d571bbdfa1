"""Placement quality from a cluster and the bindings a scheduler chose, the same way for every scheduler.

A gang counts when it still needs pods to reach its minimum this cycle (as the solver's objective counts
them). It is *placed* when it got at least that many pods, *partial* when it got some but fewer: a partial
gang's pods hold resources (its GPUs are *stranded*) yet cannot start, which only per-pod scheduling does.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from gangsolve.bench.manifests import BLOCK_LABEL, RACK_LABEL
from gangsolve.solver.greedy import place_colocated, place_gang
from gangsolve.solver.model import GPU, Cluster, Gang, Node
from gangsolve.solver.problem import Problem
from gangsolve.solver.validate import validate


def percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def quality(cluster: Cluster, bindings: dict[str, str]) -> dict:
    by_gang: dict[str, list[tuple[str, int]]] = defaultdict(list)  # gang -> (node, GPUs) of its placed pods
    pods = {pod.name: (gang, pod) for gang in cluster.gangs for pod in gang.pods}
    for pod_name, node in bindings.items():
        gang, pod = pods[pod_name]
        by_gang[gang.name].append((node, pod.requests.get(GPU, 0)))

    levels = sorted({g.priority for g in cluster.gangs}, reverse=True)
    counted = [g for g in cluster.gangs if g.pods and g.need > 0]
    placed_by_priority = dict.fromkeys(levels, 0)
    placed = partial = stranded = 0
    spans = []
    for gang in counted:
        got = by_gang.get(gang.name, [])
        if not got:
            continue
        if len(got) >= gang.need:
            placed += 1
            placed_by_priority[gang.priority] += 1
            if gang.min_member > 1:
                spans.append(len({n for n, _ in got} | set(gang.bound_nodes)))
        else:
            partial += 1
            stranded += sum(gpus for _, gpus in got)

    total_gpus = sum(n.allocatable.get(GPU, 0) for n in cluster.nodes)
    running_gpus = sum(n.used.get(GPU, 0) for n in cluster.nodes)
    placed_gpus = sum(gpus for got in by_gang.values() for _, gpus in got)
    hard = [v for v in validate(cluster, bindings) if ": partial gang (" not in v]
    return {
        "gangs": len(counted),
        "gangs_placed": placed,
        "placed_by_priority": {str(level): placed_by_priority[level] for level in levels},
        "pods": sum(len(g.pods) for g in cluster.gangs),
        "pods_placed": len(bindings),
        "gpus_total": total_gpus,
        "gpus_running": running_gpus,
        "gpus_placed": placed_gpus,
        "gpus_demanded": sum(p.requests.get(GPU, 0) for g in cluster.gangs for p in g.pods),
        "cpu_placed": sum(pods[name][1].requests.get("cpu", 0) for name in bindings),  # millicores
        "gpu_allocation": (running_gpus + placed_gpus) / total_gpus if total_gpus else None,
        # Allocated to pods that can run: without the GPUs partial gangs strand.
        "gpu_useful": (running_gpus + placed_gpus - stranded) / total_gpus if total_gpus else None,
        "partial_gangs": partial,
        "stranded_gpus": stranded,
        "nodes_per_gang": float(np.mean(spans)) if spans else None,  # multi-pod gangs placed this cycle
        "violations": hard,  # capacity, taints, selectors, co-location: must stay empty for every scheduler
        **topology(cluster, bindings),
    }


def topology(cluster: Cluster, bindings: dict[str, str]) -> dict:
    """Where the clusters have racks and blocks: how many of each a placed gang of more than one pod spans
    (mean, p95; bound members count), and the racks left partly used: some of their GPUs held, some free
    (fragmentation: a whole-rack gang can no longer go there)."""
    nodes = {n.name: n for n in cluster.nodes}
    if not any(RACK_LABEL in n.labels for n in cluster.nodes):
        return {}
    out: dict = {}
    placed: dict[str, list[str]] = defaultdict(list)
    gang_of = {pod.name: gang for gang in cluster.gangs for pod in gang.pods}
    for pod, node in bindings.items():
        placed[gang_of[pod].name].append(node)
    gangs = {g.name: g for g in cluster.gangs}
    for name, key in (("racks", RACK_LABEL), ("blocks", BLOCK_LABEL)):
        spans: list[float] = [
            len({nodes[n].labels.get(key, n) for n in [*got, *gangs[g].bound_nodes] if n in nodes})
            for g, got in placed.items()
            if len(got) >= gangs[g].need and len(got) + len(gangs[g].bound_nodes) > 1
        ]
        out[f"{name}_per_gang"] = float(np.mean(spans)) if spans else None
        out[f"{name}_per_gang_p95"] = percentile(spans, 95)
    held: dict[str, int] = defaultdict(int)
    total: dict[str, int] = defaultdict(int)
    for n in cluster.nodes:
        rack = n.labels.get(RACK_LABEL)
        if rack is not None:
            total[rack] += n.allocatable.get(GPU, 0)
            held[rack] += n.used.get(GPU, 0)
    pods = {pod.name: pod for gang in cluster.gangs for pod in gang.pods}
    for pod, node in bindings.items():
        rack = nodes[node].labels.get(RACK_LABEL)
        if rack is not None:
            held[rack] += pods[pod].requests.get(GPU, 0)
    out["racks_partly_used"] = sum(1 for r, t in total.items() if 0 < held[r] < t)
    out["racks"] = len(total)
    return out


def priority_key(result: dict) -> tuple[int, ...]:
    """Gangs placed per priority level, highest level first: compared lexicographically."""
    return tuple(v for _level, v in sorted(result["placed_by_priority"].items(), key=lambda kv: -int(kv[0])))


def worth(result: dict) -> tuple[int, ...]:
    """The solver's objective in order: gangs placed per priority level, then resources placed (GPUs, then
    cpu). A longer time limit must never give less."""
    return (*priority_key(result), result["gpus_placed"], result["cpu_placed"])


def gap(placed: int, bound: int | None) -> float | None:
    """Share of gangsolve's bound on gangs placed that a placement misses (negative: beats the bound, which only
    a scheduler ignoring priority order can: the bound is on placements at least as good in priority order)."""
    if bound is None or bound == 0:
        return None
    return (bound - placed) / bound


def runnable(nodes: Sequence[Node], gangs: Sequence[Gang]) -> list[str]:
    """The gangs that fit on the idle cluster on their own (placed as greedy gang allocation would)."""
    problem = Problem(Cluster(tuple(replace(n, used={}) for n in nodes), tuple(gangs)))
    out = []
    for g, gang in enumerate(problem.gangs):
        free = problem.free.copy()
        counts = place_colocated(problem, g, free) if gang.colocate else place_gang(problem, g, free)
        if counts is not None:
            out.append(gang.name)
    return out
