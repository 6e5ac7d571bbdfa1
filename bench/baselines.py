"""Per-pod scheduling as kube-scheduler does it without gangs: one pod at a time, filter then score.

Pods are taken in queue order (PrioritySort: priority, then creation time). Filter: NodeUnschedulable,
TaintToleration, NodeAffinity/nodeSelector and NodeResourcesFit (every requested resource, pods included).
Score: NodeResourcesFit with the LeastAllocated strategy (kube-scheduler's default, cpu and memory weight 1) or
MostAllocated (the bin-packing configuration GPU clusters use, here with nvidia.com/gpu weighted too); ties are
broken at random, as kube-scheduler's selectHost does. Each pod binds on its own, so a gang can end up partly
placed: those pods hold resources (GPUs) that do nothing until the rest of their gang arrives.

Simplifications, all in the baseline's favour: every feasible node is scored (no percentageOfNodesToScore),
and a gang's co-location rule is honoured as the required inter-pod affinity (topologyKey) a user would write.

`easy_backfill` and `conservative_backfill` are the batch schedulers' baselines for the time-based mode: Slurm's
backfill on gangs, with a reservation for the queue's head only (EASY) or for every job (conservative);
`proportion`, Volcano's allocation across weighted queues.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gangsolve.solver import greedy
from gangsolve.solver.greedy import place_colocated, place_gang
from gangsolve.solver.model import GPU, Cluster, Eviction
from gangsolve.solver.problem import GangCounts, Problem

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


# --- preemption, as kube-scheduler does it ----------------------------------------------------------------------
#
# One scheduling round of the pending pods (queue order), with the preemption kube-scheduler runs when a pod (or,
# with GenericWorkload, a pod group) does not fit. Victims are not gone yet when a round ends: the caller removes
# them before the next round, as the kubelet does after their grace period; nominated pods bind then.
#
# Per pod (DefaultPreemption, pkg/scheduler/framework/preemption): a pod that fits nowhere, may preempt and has
# no victim of its own still leaving, tries candidate nodes (from a random offset, at least 100 or 10% of the
# nodes, stopping once enough are found with one that violates no PDB). On each: every lower-priority pod is
# removed; if the pod fits then, victims are reprieved one by one, most important first (higher priority, then
# earlier start), PDB-violating ones first, as long as the pod still fits. The node chosen: fewest PDB
# violations, lowest highest victim priority, lowest sum of priorities, fewest victims, latest earliest start.
# Filters count pods nominated to a node with at least the pod's priority; a pod tries its nominated node first.
#
# Workload-aware (GenericWorkload, KEP-5710, PodGroup preemption): a gang that the pod group algorithm cannot
# place removes every lower-priority victim in the cluster at once (a running gang whose PodGroup has
# disruptionMode All is one victim, as its users configure it; other pods are victims alone), places the gang
# pod by pod (filter, LeastAllocated score), and if that works reprieves victims most important first
# (priority, then groups before pods, bigger first, earlier start), PDB-violating ones first, whenever every
# proposed pod still fits with the victim back.


@dataclass(frozen=True)
class Round:
    bindings: dict[str, str]
    nominations: dict[str, str]  # every pending pod nominated after this round
    evictions: list[Eviction]


class _Victims:
    """The running pods that could be victims, as vectors of the problem's resources, per node and per unit."""

    def __init__(self, problem: Problem, cluster: Cluster) -> None:
        self.pods = [r for r in cluster.running if not r.leaving and r.node in problem.node_index]
        self.node = np.array([problem.node_index[r.node] for r in self.pods], dtype=np.int64)
        self.vec = np.zeros((len(self.pods), len(problem.resources)), dtype=np.int64)
        for i, r in enumerate(self.pods):
            for k, q in r.requests.items():
                if k in problem.res_index:
                    self.vec[i, problem.res_index[k]] = q
            self.vec[i, problem.res_index["pods"]] = 1
        self.on_node: dict[int, list[int]] = {}
        for i, n in enumerate(self.node.tolist()):
            self.on_node.setdefault(n, []).append(i)
        self.alive = np.ones(len(self.pods), dtype=bool)
        # Pods still leaving (victims of an earlier round), per node: a pod nominated there waits for them.
        self.leaving: dict[str, list[int]] = {}
        for r in cluster.running:
            if r.leaving:
                self.leaving.setdefault(r.node, []).append(r.priority)
        self.allowance = dict(cluster.budgets)

    def violating(self, order: list[list[int]]) -> tuple[list[list[int]], list[list[int]], list[int]]:
        """kube-scheduler's FilterVictimsWithPDBViolation over victims (each a list of pods), in order: those
        with a pod beyond its PDB's allowance, the others, and each violating victim's count."""
        allowed = dict(self.allowance)
        bad, good, counts = [], [], []
        for victim in order:
            count = 0
            for i in victim:
                over = False
                for b in self.pods[i].pdbs:
                    allowed[b] = allowed.get(b, 0) - 1
                    over |= allowed[b] < 0
                count += over
            if count:
                bad.append(victim)
                counts.append(count)
            else:
                good.append(victim)
        return bad, good, counts

    def spend(self, victims: list[int]) -> None:
        for i in victims:
            self.alive[i] = False
            for b in self.pods[i].pdbs:
                self.allowance[b] = self.allowance.get(b, 0) - 1


def _fits(demand: np.ndarray, room: np.ndarray) -> bool:
    return bool(np.all(room[demand > 0] >= demand[demand > 0]))


class _Holds:
    """Pods nominated to nodes: filters count those of at least the scheduled pod's priority."""

    def __init__(self, problem: Problem, nominated: dict[str, str], pods: dict[str, tuple[int, int]]) -> None:
        self.problem = problem
        self.by_pod: dict[str, tuple[int, int, np.ndarray]] = {}  # pod -> (node, priority, demand)
        for name, node in nominated.items():
            if name in pods and node in problem.node_index:
                g, p = pods[name]
                cls = problem.parts[g][p].cls
                self.by_pod[name] = (problem.node_index[node], problem.gangs[g].priority, problem.demand[cls])

    def view(self, free: np.ndarray, priority: int, exclude: set[str]) -> np.ndarray:
        out = free.copy()
        for name, (n, prio, demand) in self.by_pod.items():
            if prio >= priority and name not in exclude:
                out[n] -= demand
        return out


def _pod_index(problem: Problem) -> dict[str, tuple[int, int]]:
    return {
        pod.name: (g, p) for g, parts in enumerate(problem.parts) for p, part in enumerate(parts) for pod in part.pods
    }


def _best(problem: Problem, cls: int, room: np.ndarray, rng: np.random.Generator, prefer: int | None) -> int | None:
    """kube-scheduler's choice for one pod: its nominated node if it passes the filters, else the best
    LeastAllocated score (ties at random)."""
    feasible = problem.fits(cls, room) > 0
    if prefer is not None and feasible[prefer]:
        return prefer
    nodes = np.flatnonzero(feasible)
    if not len(nodes):
        return None
    scores = node_scores(problem, cls, room, nodes, LEAST_ALLOCATED)
    best = nodes[scores == scores.max()]
    return int(best[rng.integers(len(best))]) if len(best) > 1 else int(best[0])


def per_pod_preemption(cluster: Cluster, seed: int = 0) -> Round:
    """One round of kube-scheduler with its default preemption, pod by pod (see above)."""
    problem = Problem(cluster)
    rng = np.random.default_rng(seed)
    free = problem.free.copy()
    index = _pod_index(problem)
    victims = _Victims(problem, cluster)
    nominated = {k: v for k, v in cluster.nominated.items() if k in index and v in problem.node_index}
    holds = _Holds(problem, nominated, index)
    bindings: dict[str, str] = {}
    evictions: list[Eviction] = []
    n_nodes = len(problem.nodes)
    wanted = min(n_nodes, max(_MIN_CANDIDATES, n_nodes * _CANDIDATE_PERCENT // 100))
    next_pod = [[0] * len(parts) for parts in problem.parts]
    for g, p in queue(problem):
        part, gang = problem.parts[g][p], problem.gangs[g]
        pod = part.pods[next_pod[g][p]]
        next_pod[g][p] += 1
        demand = problem.demand[part.cls]
        room = holds.view(free, pod.priority, {pod.name})
        mine = nominated.get(pod.name)
        n = _best(problem, part.cls, room, rng, problem.node_index[mine] if mine else None)
        if n is not None:
            free[n] -= demand
            bindings[pod.name] = problem.nodes[n].name
            nominated.pop(pod.name, None)
            holds.by_pod.pop(pod.name, None)
            continue
        if not pod.preempts:
            continue
        if mine and any(prio < pod.priority for prio in victims.leaving.get(mine, ())):
            continue  # its own victims are still leaving
        candidates = []
        offset = int(rng.integers(n_nodes)) if n_nodes else 0
        clean = False
        for k in range(n_nodes):
            n = (offset + k) % n_nodes
            if not problem.eligible[part.cls, n]:
                continue
            lower = [
                i for i in victims.on_node.get(n, ()) if victims.alive[i] and victims.pods[i].priority < pod.priority
            ]
            if not lower:
                continue
            cur = room[n] + victims.vec[lower].sum(axis=0)
            if not _fits(demand, cur):
                continue
            order = sorted(lower, key=lambda i: (-victims.pods[i].priority, victims.pods[i].started))
            bad, good, _counts = victims.violating([[i] for i in order])
            chosen, violations = [], 0
            for victim in [*bad, *good]:
                i = victim[0]
                if _fits(demand, cur - victims.vec[i]):
                    cur -= victims.vec[i]  # reprieved
                else:
                    chosen.append(i)
                    violations += victim in bad
            candidates.append((n, chosen, violations))
            clean |= violations == 0
            if clean and len(candidates) >= wanted:
                break
        if not candidates:
            continue
        n, chosen, _v = min(candidates, key=lambda c: _node_order(victims, c))
        node = problem.nodes[n].name
        victims.spend(chosen)
        evictions += [Eviction(victims.pods[i].name, node, gang.name, f"pod {pod.name}") for i in chosen]
        for other, (m, prio, _demand) in list(holds.by_pod.items()):
            if m == n and prio < pod.priority:  # lower-priority pods nominated there may no longer fit
                del holds.by_pod[other]
                nominated.pop(other, None)
        nominated[pod.name] = node
        holds.by_pod[pod.name] = (n, pod.priority, demand)
    return Round(bindings, nominated, evictions)


_MIN_CANDIDATES = 100  # DefaultPreemptionArgs: minCandidateNodesAbsolute
_CANDIDATE_PERCENT = 10  # minCandidateNodesPercentage


def _node_order(victims: _Victims, candidate: tuple[int, list[int], int]) -> tuple[float, ...]:
    """pickOneNodeForPreemption's criteria, as a key to minimise."""
    _n, chosen, violations = candidate
    prios = [victims.pods[i].priority for i in chosen]
    earliest = min((victims.pods[i].started for i in chosen), default=0.0)
    return (violations, max(prios, default=-(2**31)), sum(p + 2**31 for p in prios), len(chosen), -earliest)


def workload_preemption(cluster: Cluster, seed: int = 0) -> Round:
    """One round of kube-scheduler with GenericWorkload: gangs scheduled as pod groups, workload-aware
    preemption for those that do not fit (see above)."""
    problem = Problem(cluster)
    rng = np.random.default_rng(seed)
    free = problem.free.copy()
    index = _pod_index(problem)
    victims = _Victims(problem, cluster)
    nominated = {k: v for k, v in cluster.nominated.items() if k in index and v in problem.node_index}
    holds = _Holds(problem, nominated, index)
    units: dict[str, list[int]] = {}
    for i, r in enumerate(victims.pods):
        units.setdefault(r.gang or f"pod {r.name}", []).append(i)
    bindings: dict[str, str] = {}
    evictions: list[Eviction] = []
    for g in sorted(range(len(problem.gangs)), key=lambda g: (-problem.gangs[g].priority, problem.gangs[g].order)):
        gang = problem.gangs[g]
        if not gang.pods or gang.need == 0:
            continue
        own = {pod.name for part in problem.parts[g] for pod in part.pods}
        room = holds.view(free, gang.priority, own)
        placed = _place_group(problem, g, room.copy(), rng, nominated)
        if len(placed) >= gang.need:
            for name, n in placed:
                free[n] -= problem.demand[problem.parts[g][index[name][1]].cls]
                bindings[name] = problem.nodes[n].name
                nominated.pop(name, None)
                holds.by_pod.pop(name, None)
            continue
        if not gang.preempts:
            continue
        ongoing = any(
            any(prio < gang.priority for prio in victims.leaving.get(nominated[name], ()))
            for name in own
            if name in nominated
        )
        if ongoing:
            continue
        potential = [
            members
            for members in units.values()
            if all(victims.alive[i] for i in members) and max(victims.pods[i].priority for i in members) < gang.priority
        ]
        if not potential:
            continue
        cap = room.copy()
        for members in potential:
            np.add.at(cap, victims.node[members], victims.vec[members])
        proposal = _place_group(problem, g, cap.copy(), rng, nominated)
        if len(proposal) < gang.need:
            continue  # it would not fit even with every victim gone: no preemption
        use = np.zeros_like(cap)
        for name, n in proposal:
            use[n] += problem.demand[problem.parts[g][index[name][1]].cls]
        rows = np.flatnonzero(use.any(axis=1))

        order = sorted(
            potential,
            key=lambda m: (
                -max(victims.pods[i].priority for i in m),
                -(2 if victims.pods[m[0]].gang else 1),
                -len(m),
                min(victims.pods[i].started for i in m),
            ),
        )
        bad, good, _counts = victims.violating(order)
        chosen: list[int] = []
        for members in [*bad, *good]:
            np.subtract.at(cap, victims.node[members], victims.vec[members])
            if not _all_fit(use[rows], cap[rows]):
                np.add.at(cap, victims.node[members], victims.vec[members])
                chosen += members
        victims.spend(chosen)
        evictions += [Eviction(victims.pods[i].name, victims.pods[i].node, gang.name, "pod group") for i in chosen]
        for name, n in proposal:
            nominated[name] = problem.nodes[n].name
            holds.by_pod[name] = (n, gang.priority, problem.demand[problem.parts[g][index[name][1]].cls])
    return Round(bindings, nominated, evictions)


def _all_fit(use: np.ndarray, cap: np.ndarray) -> bool:
    """Every proposed pod still passes NodeResourcesFit where it was put."""
    return bool(np.all((use == 0) | (cap >= use)))


def _place_group(
    problem: Problem, g: int, room: np.ndarray, rng: np.random.Generator, nominated: dict[str, str]
) -> list[tuple[str, int]]:
    """The pod group algorithm: each pod in turn filtered and scored (its nominated node first), assumed."""
    out = []
    for part in problem.parts[g]:
        for pod in part.pods:
            mine = nominated.get(pod.name)
            n = _best(problem, part.cls, room, rng, problem.node_index[mine] if mine else None)
            if n is None:
                continue
            room[n] -= problem.demand[part.cls]
            out.append((pod.name, n))
    return out


def _place_later(problem: Problem, g: int, room: np.ndarray) -> GangCounts | None:
    """Gang g placed whole, best-fit, in `room` (left untouched): capacity free now or at a later time, which may
    exceed what is free now."""
    if problem.gangs[g].topology:
        return place_colocated(problem, g, room.copy(), later=True)
    return place_gang(problem, g, room.copy(), later=True)


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
            counts = _place_later(problem, g, free)
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
                head = _place_later(problem, g, room)
                if head is not None:
                    shadow = t
                    spare = room.copy()
                    take(g, head, [spare])
                    break
            # A gang that does not fit even once everything known to end has ended holds nothing: the next
            # blocked gang becomes the head (Slurm skips jobs that cannot run).
            continue
        ends_in_time = end_of(g) <= shadow
        counts = _place_later(problem, g, free if ends_in_time else np.minimum(free, spare))
        if counts is not None:
            take(g, counts, [free] if ends_in_time else [free, spare])
            result[g] = counts
    return {pod: node for g, gang_counts in result.items() for pod, node in problem.bindings(g, gang_counts).items()}


CONSERVATIVE_DEPTH = 100  # pending gangs planned per cycle, as Slurm's bf_max_job_test bounds its backfill


def conservative_backfill(cluster: Cluster, depth: int = CONSERVATIVE_DEPTH) -> dict[str, str]:
    """Conservative backfill, as Slurm's sched/backfill plans every job it tests, on gangs.

    Gangs are taken in queue order (priority, then submission), the first `depth` of them. Each gets a
    reservation at the earliest time at which, for its whole estimated runtime, the estimated ends of running
    pods and the reservations of the gangs before it leave room for it, on the nodes it would then take (each
    pod best-fit, as the greedy gang allocator places it); the gangs whose reservation starts now start. So a
    gang never delays the reservation of a gang before it, whatever its size. Pods without an estimated end are
    never assumed to end, and a gang without a runtime estimate holds its nodes for ever; a gang that fits at
    no time is passed over.
    """
    problem = Problem(cluster)
    now = cluster.now
    # Free capacity as a step function of time: from times[k] until times[k + 1], free[k] (nodes x resources).
    releases: dict[float, np.ndarray] = {}
    for running in cluster.running:
        n = problem.node_index.get(running.node)
        if n is None or running.end is None:
            continue
        at = releases.setdefault(max(running.end, now), np.zeros_like(problem.free))
        for r, q in running.requests.items():
            if r in problem.res_index:
                at[n, problem.res_index[r]] += q
    times = [now, *sorted(t for t in releases if t > now)]
    free = [problem.free + releases.get(now, 0)]
    for t in times[1:]:
        free.append(free[-1] + releases[t])

    def plan(g: int) -> tuple[int, GangCounts] | None:
        """The first step at which the gang fits for its whole runtime, and where."""
        runtime = problem.gangs[g].runtime
        for k, start in enumerate(times):
            end = start + runtime if runtime is not None else np.inf
            last = int(np.searchsorted(times, end, side="left"))  # steps [k, last) overlap [start, end)
            counts = _place_later(problem, g, np.minimum.reduce(free[k : max(last, k + 1)]))
            if counts is not None:
                return k, counts
        return None

    def reserve(g: int, k: int, counts: GangCounts) -> None:
        """Take the gang's room from step k until its estimated end (a new step there, if there is none)."""
        runtime = problem.gangs[g].runtime
        last = len(times)
        if runtime is not None:
            end = times[k] + runtime
            last = int(np.searchsorted(times, end, side="left"))
            if last == len(times) or times[last] != end:
                times.insert(last, end)
                free.insert(last, free[last - 1].copy())
        used = np.zeros_like(problem.free)
        for (p, n), count in counts.items():
            used[n] += count * problem.demand[problem.parts[g][p].cls]
        for step in range(k, last):
            free[step] = free[step] - used

    started: dict[int, GangCounts] = {}
    order = sorted(range(len(problem.gangs)), key=lambda g: (-problem.gangs[g].priority, problem.gangs[g].order))
    for g in [g for g in order if problem.gangs[g].pods][:depth]:
        planned = plan(g)
        if planned is None:
            continue  # fits at no time (Slurm skips jobs that cannot run)
        k, counts = planned
        reserve(g, k, counts)
        if k == 0:
            started[g] = counts
    return {pod: node for g, counts in started.items() for pod, node in problem.bindings(g, counts).items()}


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


# --- Volcano's proportion plugin, as a peer ---------------------------------------------------------------------


def proportion(cluster: Cluster) -> dict[str, str]:
    """Volcano's allocate action with its default plugins (proportion, gang, priority, binpack-like best fit):
    each queue *deserves* a share of every resource by weight (capped at what it requests and its capability,
    what one queue does not request going to the others, round after round); queues are served in order of
    their share (allocated / deserved, lowest first), one job at a time, highest priority then oldest; a job is
    allocated whole (greedy, best fit) only if its queue stays within what it deserves."""
    problem = Problem(cluster)
    queues = {q.name: q for q in cluster.queues}
    names = sorted({g.queue for g in cluster.gangs} | set(queues))
    res = problem.resources
    total = np.maximum(problem.allocatable[[i for i, n in enumerate(cluster.nodes) if n.ready]].sum(axis=0), 0)
    allocated = {n: _vector(res, queues[n].allocated if n in queues else {}) for n in names}
    request = {n: allocated[n].astype(float) for n in names}
    for g, gang in enumerate(problem.gangs):
        for part in problem.parts[g]:
            request[gang.queue] = request[gang.queue] + problem.demand[part.cls] * len(part.pods)
    weight = {n: float(queues[n].weight if n in queues else 1) for n in names}
    cap = {n: _vector(res, queues[n].capability, np.inf) if n in queues else np.full(len(res), np.inf) for n in names}
    parent = {n: queues[n].parent if n in queues and queues[n].parent in queues else "" for n in names}
    deserved = _deserved_tree(total.astype(float), names, parent, weight, request, cap)

    jobs = {
        n: sorted(
            (g for g, gang in enumerate(problem.gangs) if gang.queue == n and gang.pods),
            key=lambda g: (-problem.gangs[g].priority, problem.gangs[g].order),
        )
        for n in names
    }
    free = problem.free.copy()
    bindings: dict[str, str] = {}
    while any(jobs.values()):
        n = min((n for n in names if jobs[n]), key=lambda n: (_share(allocated[n], deserved[n]), n))
        g = jobs[n].pop(0)
        need = problem.floor[g]
        asked = need > 0
        if ((allocated[n] + need)[asked] > deserved[n][asked] + 1e-9).any():
            continue  # would take the queue past what it deserves: Volcano's proportion does not allocate it
        above, up = [], parent[n]
        while up and up not in above:
            above.append(up)
            up = parent[up]
        held = {a: sum((allocated[q] for q in names if a in _ancestors(q, parent)), np.zeros(len(res))) for a in above}
        if any(((held[a] + need)[asked] > cap[a][asked]).any() for a in above):
            continue  # a department's capability (Volcano's hierarchical capacity checks every level)
        counts = place_gang(problem, g, free, scorer=greedy.node_scores)
        if counts is None:
            continue
        for (p, node), k in counts.items():
            pods = iter(problem.parts[g][p].pods)
            allocated[n] = allocated[n] + k * problem.demand[problem.parts[g][p].cls]
            for _ in range(k):
                bindings[next(p for p in pods if p.name not in bindings).name] = problem.nodes[node].name
    return bindings


def _ancestors(name: str, parent: dict[str, str]) -> list[str]:
    out, up = [], parent.get(name, "")
    while up and up not in out:
        out.append(up)
        up = parent.get(up, "")
    return out


def _deserved_tree(
    total: np.ndarray,
    names: list[str],
    parent: dict[str, str],
    weight: dict[str, float],
    request: dict[str, np.ndarray],
    cap: dict[str, np.ndarray],
) -> dict[str, np.ndarray]:
    """proportion's `deserved`, divided level by level when queues have parents (as Volcano's capacity plugin
    with hierarchy divides a parent's among its children): a queue requests what it and the queues under it
    request, each capped by its capability."""
    asked = {n: request[n].copy() for n in names}
    for n in sorted(names, key=lambda n: -len(_ancestors(n, parent))):  # the deepest first
        asked[n] = np.minimum(asked[n], cap[n])
        if parent[n]:
            asked[parent[n]] = asked[parent[n]] + asked[n]
    out: dict[str, np.ndarray] = {}
    level = [("", total)]
    while level:
        up, given = level.pop()
        kids = [n for n in names if parent[n] == up]
        if kids:
            split = _deserved(given, kids, weight, {n: asked[n] for n in kids})
            out |= split
            level += list(split.items())
    return out


def _vector(resources: list[str], amounts, missing: float = 0.0) -> np.ndarray:
    return np.array([amounts.get(r, missing) for r in resources], dtype=float)


def _share(allocated: np.ndarray, deserved: np.ndarray) -> float:
    has = deserved > 0
    return float((allocated[has] / deserved[has]).max()) if has.any() else 0.0


def _deserved(
    total: np.ndarray, names: list[str], weight: dict[str, float], request: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """proportion's loop: hand the remaining capacity out by weight to the queues not yet at their request,
    capping each at its request, until nothing remains or every queue is met."""
    deserved = {n: np.zeros_like(total) for n in names}
    met: set[str] = {n for n in names if not (request[n] > 0).any()}
    remaining = total.copy()
    while len(met) < len(names) and (remaining > 1e-9).any():
        active = [n for n in names if n not in met]
        weights = sum(weight[n] for n in active)
        handed = np.zeros_like(total)
        for n in active:
            grown = np.minimum(deserved[n] + remaining * weight[n] / weights, request[n])
            handed += grown - deserved[n]
            deserved[n] = grown
            if (grown >= request[n] - 1e-9).all():
                met.add(n)
        remaining = remaining - handed
        if not (handed > 1e-9).any():
            break
    return deserved
