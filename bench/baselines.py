"""Per-pod scheduling as kube-scheduler does it without gangs: one pod at a time, filter then score.

Pods are taken in queue order (PrioritySort: priority, then creation time). Filter: NodeUnschedulable,
TaintToleration, NodeAffinity/nodeSelector and NodeResourcesFit (every requested resource, pods included).
Score: NodeResourcesFit with the LeastAllocated strategy (kube-scheduler's default, cpu and memory weight 1) or
MostAllocated (the bin-packing configuration GPU clusters use, here with nvidia.com/gpu weighted too); ties are
broken at random, as kube-scheduler's selectHost does. Each pod binds on its own, so a gang can end up partly
placed: those pods hold resources (GPUs) that do nothing until the rest of their gang arrives.

Simplifications, all in the baseline's favour: every feasible node is scored (no percentageOfNodesToScore),
and a gang's co-location rule is honoured as the required inter-pod affinity (topologyKey) a user would write.
"""

from __future__ import annotations

import numpy as np

from gangsolve.solver.model import GPU, Cluster
from gangsolve.solver.problem import Problem

LEAST_ALLOCATED = "LeastAllocated"
MOST_ALLOCATED = "MostAllocated"
MAX_NODE_SCORE = 100
SCORED = {LEAST_ALLOCATED: ("cpu", "memory"), MOST_ALLOCATED: ("cpu", "memory", GPU)}


def queue(problem: Problem) -> list[tuple[int, int]]:
    """(gang, part) of every pending pod, repeated per pod, in kube-scheduler's activeQ order."""
    entries = []
    for g, parts in enumerate(problem.parts):
        for p, part in enumerate(parts):
            for pod in part.pods:
                entries.append((-pod.priority, pod.order, pod.name, g, p))
    entries.sort()
    return [(g, p) for *_key, g, p in entries]


def node_scores(problem: Problem, cls: int, free: np.ndarray, nodes: np.ndarray, strategy: str) -> np.ndarray:
    """NodeResourcesFit scores (0..100, integers as kube-scheduler computes them) of `nodes` for one pod."""
    cols = np.array([problem.res_index[r] for r in SCORED[strategy] if r in problem.res_index], dtype=np.int64)
    capacity = problem.allocatable[np.ix_(nodes, cols)]
    requested = capacity - free[np.ix_(nodes, cols)] + problem.demand[cls, cols]
    safe = np.maximum(capacity, 1)
    if strategy == LEAST_ALLOCATED:
        per_resource = (capacity - requested) * MAX_NODE_SCORE // safe
    else:
        per_resource = requested * MAX_NODE_SCORE // safe
    # Resources a node does not have are left out of its weighted mean (weights are all 1).
    has = capacity > 0
    counted = np.maximum(has.sum(axis=1), 1)
    return np.where(has, per_resource, 0).sum(axis=1) // counted


def per_pod(cluster: Cluster, strategy: str = LEAST_ALLOCATED, seed: int = 0) -> dict[str, str]:
    """Bind pending pods one by one; returns pod -> node for the pods that found a node."""
    problem = Problem(cluster)
    rng = np.random.default_rng(seed)
    free = problem.free.copy()
    bindings: dict[str, str] = {}
    next_pod = [[0] * len(parts) for parts in problem.parts]
    rack: dict[int, int] = {}  # co-located gang -> the label value its first pod landed in
    for g, gang in enumerate(problem.gangs):
        if gang.colocate and gang.bound_nodes and gang.bound_nodes[0] in problem.node_index:
            rack[g] = int(problem.domains(gang.colocate)[problem.node_index[gang.bound_nodes[0]]])

    for g, p in queue(problem):
        part = problem.parts[g][p]
        pod = part.pods[next_pod[g][p]]
        next_pod[g][p] += 1
        feasible = problem.fits(part.cls, free) > 0
        colocate = problem.gangs[g].colocate
        if colocate:  # topologyKey: only nodes with the label, and once placed, only the first pod's value
            domain = problem.domains(colocate)
            feasible &= (domain == rack[g]) if g in rack else (domain >= 0)
        nodes = np.flatnonzero(feasible)
        if len(nodes) == 0:
            continue  # unschedulable this cycle; it would wait in the unschedulable queue
        scores = node_scores(problem, part.cls, free, nodes, strategy)
        best = nodes[scores == scores.max()]
        n = int(best[rng.integers(len(best))]) if len(best) > 1 else int(best[0])
        free[n] -= problem.demand[part.cls]
        bindings[pod.name] = problem.nodes[n].name
        if colocate and g not in rack:
            rack[g] = int(problem.domains(colocate)[n])
    return bindings
