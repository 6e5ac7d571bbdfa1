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


def tas_best_fit(cluster: Cluster, levels: tuple[str, ...] = ()) -> dict[str, str]:
    """Kueue's topology-aware scheduling with its default BestFit algorithm, one gang at a time in queue order
    (priority, then creation), each admitted whole or not at all, as Kueue admits a workload.

    A gang's levels are its required level (gangsolve's `colocate`; Kueue's podset-required-topology), its
    preferred levels (podset-preferred-topology; Kueue prefers one, the rest come from `levels`, widest first),
    then the node. Capacity is counted in the gang's pods per domain. At the required level, the domain with
    the least room that still holds the whole gang; no such domain and the gang waits. At each level below,
    within the domains chosen so far, the roomiest domains until they hold it, the last of them swapped for
    the tightest domain that holds what is left (BestFit); a single domain that holds it all is taken first.
    At the node level, each chosen node gets as many pods as it holds, the last one the rest."""
    problem = Problem(cluster)
    free = problem.free.copy()
    bindings: dict[str, str] = {}
    order = sorted(range(len(problem.gangs)), key=lambda g: (-problem.gangs[g].priority, problem.gangs[g].order))
    for g in order:
        gang = problem.gangs[g]
        if not gang.pods:
            continue
        keys = [gang.colocate] if gang.colocate else []
        keys += [k for k in (*gang.preferred, *levels) if k not in keys]
        trial = free.copy()
        placed: list[tuple[str, int]] = []
        for part in problem.parts[g]:
            want = len(part.pods)
            room = problem.fits(part.cls, trial)
            nodes = _descend(problem, [*keys, None], room, want, required=bool(gang.colocate))
            if nodes is None:
                break
            left = want
            for n in sorted(np.flatnonzero(nodes), key=lambda n: (-room[n], n)):
                k = int(min(left, room[n]))
                trial[n] -= k * problem.demand[part.cls]
                placed += [(pod.name, int(n)) for pod in part.pods[want - left : want - left + k]]
                left -= k
        if len(placed) >= max(gang.need, 1):
            free = trial
            bindings.update({name: problem.nodes[n].name for name, n in placed})
    return bindings


def _descend(
    problem: Problem, keys: list[str | None], room: np.ndarray, want: int, required: bool
) -> np.ndarray | None:
    """The nodes BestFit picks for `want` pods, level by level (`None`: the node level), or None."""
    chosen = np.ones(len(problem.nodes), dtype=bool)
    for depth, key in enumerate(keys):
        ids = np.arange(len(problem.nodes)) if key is None else _domain_ids(problem, key)
        narrowed = _best_fit(ids, room, chosen, want, required=required and depth == 0)
        if narrowed is None:
            return None
        chosen = narrowed
    return chosen


def _domain_ids(problem: Problem, key: str) -> np.ndarray:
    """Per node, its domain of label `key`; a node without the label is a domain of its own."""
    domain = problem.domains(key)
    return np.where(domain >= 0, domain, int(domain.max(initial=-1)) + 1 + np.arange(len(domain)))


def _best_fit(ids: np.ndarray, room: np.ndarray, within: np.ndarray, want: int, required: bool) -> np.ndarray | None:
    """The nodes of the domains BestFit picks among `within` for `want` pods (see tas_best_fit)."""
    per_domain = np.bincount(ids, weights=np.where(within, room, 0))
    whole = np.flatnonzero(per_domain >= want)
    if len(whole):
        return (ids == whole[np.argmin(per_domain[whole])]) & within
    if required or per_domain.sum() < want:
        return None
    chosen: list[int] = []
    for d in np.argsort(-per_domain, kind="stable").tolist():
        chosen.append(d)
        if per_domain[chosen].sum() >= want:
            break
    rest = want - per_domain[chosen[:-1]].sum()
    spare = [d for d in np.flatnonzero(per_domain >= rest).tolist() if d not in chosen[:-1]]
    chosen[-1] = min(spare, key=lambda d: (per_domain[d], d))
    return np.isin(ids, chosen) & within
