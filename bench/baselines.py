"""Per-pod scheduling as kube-scheduler does it without gangs: one pod at a time, filter then score.

Pods are taken in queue order (PrioritySort: priority, then creation time). Filter: NodeUnschedulable,
TaintToleration, NodeAffinity/nodeSelector and NodeResourcesFit (every requested resource, pods included).
Score: NodeResourcesFit with the LeastAllocated strategy (kube-scheduler's default, cpu and memory weight 1) or
MostAllocated (the bin-packing configuration GPU clusters use, here with nvidia.com/gpu weighted too); ties are
broken at random, as kube-scheduler's selectHost does. Each pod binds on its own, so a gang can end up partly
placed: those pods hold resources (GPUs) that do nothing until the rest of their gang arrives.

Simplifications, all in the baseline's favour: every feasible node is scored (no percentageOfNodesToScore),
and a gang's co-location rule is honoured as the required inter-pod affinity (topologyKey) a user would write.

`easy_backfill` is the batch schedulers' baseline for the time-based mode: Slurm's EASY backfill on gangs.
"""

from __future__ import annotations

import numpy as np

from gangsolve.solver.greedy import GangCounts, place_colocated, place_gang
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


def easy_backfill(cluster: Cluster) -> dict[str, str]:
    """EASY backfill, Slurm's default behaviour (sched/backfill with one reservation), on gangs.

    Gangs are taken in queue order (priority, then submission) and start while they fit, each pod best-fit as
    the greedy gang allocator places it. The first gang that does not fit is the queue's head: it gets a
    reservation at its *shadow time*, the earliest time the estimated ends of running pods (and of gangs
    started before it this cycle) free enough capacity for it, on the nodes it would then take; a gang that
    would not fit even then is passed over. Every later gang may start now only if it does not delay the
    head: it is expected to end by the shadow time, or it fits in what the head leaves over at the shadow
    time. Pods without an estimated end are never assumed to end; a gang without a runtime estimate runs for
    ever.
    """
    problem = Problem(cluster)
    now = cluster.now
    free = problem.free.copy()
    releases: list[tuple[float, int, np.ndarray]] = []  # (time, node, capacity given back)
    for running in cluster.running:
        n = problem.node_index.get(running.node)
        if n is not None and running.end is not None:
            vector = np.zeros(len(problem.resources), dtype=np.int64)
            for r, q in running.requests.items():
                if r in problem.res_index:
                    vector[problem.res_index[r]] = q
            releases.append((max(running.end, now), n, vector))

    def place(g: int, room: np.ndarray) -> GangCounts | None:
        room = room.copy()  # what is free now, or at the shadow time (which may exceed what is free now)
        if problem.gangs[g].topology:
            return place_colocated(problem, g, room, later=True)
        return place_gang(problem, g, room, later=True)

    def could_fit(g: int, room: np.ndarray) -> bool:
        """Cheap and necessary: the gang's pods fit node by node, ignoring each other."""
        fit = sum(int(np.minimum(problem.fits(part.cls, room), len(part.pods)).sum()) for part in problem.parts[g])
        return fit >= max(problem.gangs[g].need, 1)

    def take(g: int, counts: GangCounts, into: list[np.ndarray]) -> None:
        for (p, n), k in counts.items():
            for room in into:
                room[n] -= k * problem.demand[problem.parts[g][p].cls]

    def end_of(g: int) -> float:
        runtime = problem.gangs[g].runtime
        return now + runtime if runtime is not None else np.inf

    shadow: float | None = None
    spare = free  # at the shadow time, what the head leaves over
    result: dict[int, GangCounts] = {}
    order = sorted(range(len(problem.gangs)), key=lambda g: (-problem.gangs[g].priority, problem.gangs[g].order))
    for g in order:
        if not problem.gangs[g].pods:
            continue
        if shadow is None:
            counts = place(g, free)
            if counts is not None:
                take(g, counts, [free])
                result[g] = counts
                if end_of(g) < np.inf:
                    for (p, n), k in counts.items():
                        releases.append((end_of(g), n, k * problem.demand[problem.parts[g][p].cls]))
                continue
            # The head: walk the releases in time order until it fits.
            room = free.copy()
            releases.sort(key=lambda e: e[0])
            for i, (t, n, vector) in enumerate(releases):
                room[n] += vector
                if i + 1 < len(releases) and releases[i + 1][0] == t:
                    continue  # more is freed at the same time
                if not could_fit(g, room):
                    continue
                head = place(g, room)
                if head is not None:
                    shadow = t
                    spare = room.copy()
                    take(g, head, [spare])
                    break
            # A gang that does not fit even once everything known to end has ended holds nothing: the next
            # blocked gang becomes the head (Slurm skips jobs that cannot run).
            continue
        ends_in_time = end_of(g) <= shadow
        counts = place(g, free if ends_in_time else np.minimum(free, spare))
        if counts is not None:
            take(g, counts, [free] if ends_in_time else [free, spare])
            result[g] = counts
    bindings: dict[str, str] = {}
    for g, gang_counts in result.items():
        for p, part in enumerate(problem.parts[g]):
            pods = iter(part.pods)
            for n in sorted(n for (q, n) in gang_counts if q == p):
                for _ in range(gang_counts[(p, n)]):
                    bindings[next(pods).name] = problem.nodes[n].name
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
