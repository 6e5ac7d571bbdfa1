"""Node pools: a cycle whose pending gangs fall into groups that can use no node in common is several cycles,
one per group, solved apart and at the same time, each in a process of its own (the walk is Python: one core
per process). `SolveConfig.parallel` says into how many at most; 1 solves the whole cycle as one.

A *pool* is the pending gangs whose pods may use a common node (selectors, node affinity, taints, cordon and
readiness: `problem.eligibility`), joined until no two pools share one, with the nodes those pods may use and
those their gangs' bound members run on (their topology domains are read from them). A node no pending pod may
use is in no pool: nothing this cycle places goes there. Pools are joined into at most `parallel` groups, the
largest first onto the group with the least work so far (pending pods times nodes), and each group is solved
as a cluster of its own: its nodes, the pods running on them, its gangs, their nominations and promises.

Splitting takes from no gang a placement it could have had, as no pod of one group may use another group's
nodes, and never-worse-than-greedy holds group by group, so for the whole. It is not done where something
else ties gangs across pools: more than one queue with pending gangs (fair shares are of the whole cluster), or
a capability on their queue or one above it; nor where one group would hold more than three quarters of the
work, as the others, solved beside it, would save less than splitting costs. The plan's depth (`reservations`,
`forecasts`) then applies per group, as Slurm's `bf_max_job_part` does per partition. Explanations still count
every node of the cluster: each group is given its gangs' exclusions over all of them. A group's process that
dies, or does not answer in time, is killed and its group solved in the scheduler's own process.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from gangsolve.solver import node_table, queues
from gangsolve.solver.cpsat import Stage
from gangsolve.solver.explain import exclusions_of
from gangsolve.solver.greedy import desc
from gangsolve.solver.model import Cluster, Node, Placement, Pod, Running
from gangsolve.solver.problem import GangPart, eligibility, static_key

# A forked child starts with the cluster in memory (where there is no fork, as on Windows, cycles are solved whole).
_FORKS = "fork" in multiprocessing.get_all_start_methods()

# A gang's exclusions, from its parts: the nodes of the whole cluster no pod of it may use, in words (explain.py).
Exclusions = Callable[[tuple[GangPart, ...]], str]


@dataclass(frozen=True)
class Group:
    """Pools solved together: as a cluster of their own, with their gangs' exclusions over every node."""

    cluster: Cluster
    exclusions: Exclusions


@dataclass
class _Places:
    """Where the pending pods may go, over the whole cluster: one *place* per distinct set of static
    constraints (selector, node affinity, tolerations, GPU memory; `problem.exclusion`), its nodes and what
    excluded the others. A group's cycle words its gangs' exclusions from these when it first asks (in its own
    process: most gangs place, and wording what a pool's pods may not use reads every node outside it)."""

    nodes: Sequence[Node]
    index: dict[tuple[object, ...], int]  # place key -> place
    eligible: np.ndarray  # [place, node]
    excluded: list[dict[str, list[int]]]  # per place
    worded: dict[tuple[int, ...], str] = field(default_factory=dict)

    def exclusions(self, parts: tuple[GangPart, ...]) -> str:
        """A gang's exclusions over every node (explain.Explained.outside), from its parts in its pool."""
        places = tuple(self.index[static_key(part.pods[0])] for part in parts)
        if places not in self.worded:
            self.worded[places] = exclusions_of(
                self, tuple(GangPart(c, part.pods) for c, part in zip(places, parts, strict=True))
            )
        return self.worded[places]


def groups(cluster: Cluster, parallel: int) -> list[Group] | None:
    """The cycle split into at most `parallel` groups that share no node, or None where it does not split."""
    if parallel < 2 or len(cluster.gangs) < 2 or not cluster.nodes or not _FORKS or _tied(cluster):
        return None
    index: dict[tuple[object, ...], int] = {}
    pods: list[Pod] = []  # one per place
    gang_places: list[set[int]] = []
    for gang in cluster.gangs:
        own = set()
        for pod in gang.pods:
            key = static_key(pod)
            if key not in index:
                index[key] = len(pods)
                pods.append(pod)
            own.add(index[key])
        gang_places.append(own)
    if len(pods) < 2:
        return None  # every pending pod may go where every other may: one pool
    statics = node_table.table(cluster.nodes).statics
    eligible, excluded = eligibility(statics, cluster.nodes, pods)
    joined = _joined(cluster, _pools(cluster, eligible, gang_places, statics.index), parallel)
    if joined is None:
        return None
    places = _Places(cluster.nodes, index, eligible, excluded)
    return [Group(part, places.exclusions) for part in _clusters_of(cluster, joined)]


def _tied(cluster: Cluster) -> bool:
    """Whether queues tie the pending gangs together across nodes (see the module's docstring)."""
    pending = {g.queue for g in cluster.gangs if g.pods}
    if len(pending) != 1:
        return len(pending) > 1
    declared = queues.queues_of(cluster)
    return any(declared[q].capability for q in queues.Tree(declared).path(pending.pop()) if q in declared)


# A pool or a group of them: its gangs and its nodes, as indices into the cluster's.
Pool = tuple[list[int], list[int]]
_WORTH = 0.75  # the most of a cycle's work one group may hold for the split to pay (`_joined`)


def patience(time_limit: float) -> float:
    """How long a group's process may take to answer (`solve_apart`): a cycle keeps to its time limit but for
    the steps not cut by it (on a step budget, or the walk on a huge cluster), so a generous multiple, and more."""
    return 5 * time_limit + 30.0


def _pools(
    cluster: Cluster, eligible: np.ndarray, gang_places: Sequence[set[int]], index: Mapping[str, int]
) -> list[Pool]:
    """The pools, each with its gangs and nodes in ascending order, ordered by their first gang."""
    places, gangs = eligible.shape[0], len(cluster.gangs)
    parent = list(range(places + gangs))  # union-find: the places, then the gangs

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def join(a: int, b: int) -> None:
        a, b = root(a), root(b)
        parent[max(a, b)] = min(a, b)

    # Nodes alike for every place (the same places may use them) join those places once.
    packed = np.ascontiguousarray(np.packbits(eligible, axis=0).T)  # per node, its places as bits
    width, raw = packed.shape[1], packed.tobytes()
    patterns: dict[bytes, int] = {}
    node_pattern = [patterns.setdefault(raw[i : i + width], len(patterns)) for i in range(0, len(raw), width)]
    members = [np.flatnonzero(np.unpackbits(np.frombuffer(bits, np.uint8), count=places)) for bits in patterns]
    for found in members:
        for c in found[1:]:
            join(int(found[0]), int(c))
    extra: list[tuple[int, int]] = []  # (gang, node) of bound members on nodes no pending pod may use
    for g, gang in enumerate(cluster.gangs):
        for c in gang_places[g]:
            join(places + g, c)
        for name in gang.bound_nodes:
            n = index.get(name)
            if n is None:
                continue
            found = members[node_pattern[n]]
            if len(found):
                join(places + g, int(found[0]))
            else:
                extra.append((g, n))
    by_root: dict[int, Pool] = {}
    for g in range(gangs):
        by_root.setdefault(root(places + g), ([], []))[0].append(g)
    pattern_root = [root(int(found[0])) if len(found) else -1 for found in members]
    for n, p in enumerate(node_pattern):
        if pattern_root[p] in by_root:  # (every place is some gang's: only nodes no place may use are left out)
            by_root[pattern_root[p]][1].append(n)
    for g, n in extra:
        by_root[root(places + g)][1].append(n)
    return sorted(((gs, sorted(set(ns))) for gs, ns in by_root.values()), key=lambda pool: pool[0][0])


def _joined(cluster: Cluster, pools: list[Pool], parallel: int) -> list[Pool] | None:
    """The pools joined into at most `parallel` groups of about equal work: the largest first, each onto the
    group with the least so far. Work is pending pods times nodes (the walk tries each pod's nodes). None
    where one group would hold more than `_WORTH` of the work: the others, solved beside it, would save less
    than splitting and merging cost (on the synthetic mix, a tainted pool of a tenth of the nodes)."""
    pods = [len(g.pods) for g in cluster.gangs]

    def work(pool: Pool) -> int:
        return sum(pods[g] for g in pool[0]) * max(len(pool[1]), 1)

    count = min(parallel, sum(1 for pool in pools if pool[1]))  # a pool of no node joins a group, makes none
    if count < 2:
        return None
    bins: list[tuple[list[int], list[int]]] = [([], []) for _ in range(count)]
    loads = [0] * len(bins)
    for pool in sorted(pools, key=lambda pool: (-work(pool), pool[0][0])):
        i = loads.index(min(loads))
        bins[i][0].extend(pool[0])
        bins[i][1].extend(pool[1])
        loads[i] += work(pool)
    if max(loads) > _WORTH * sum(loads):
        return None
    return sorted(((sorted(gs), sorted(ns)) for gs, ns in bins), key=lambda pool: pool[0][0])


def _clusters_of(cluster: Cluster, groups: list[Pool]) -> list[Cluster]:
    """Each group as a cluster of its own: its nodes, the pods running there, its gangs and what names them."""
    group_of = {cluster.nodes[n].name: i for i, (_gangs, nodes) in enumerate(groups) for n in nodes}
    running: list[list[Running]] = [[] for _ in groups]
    for r in cluster.running:  # one pass: a large cluster runs hundreds of thousands of pods
        i = group_of.get(r.node)
        if i is not None:
            running[i].append(r)
    out = []
    for (gangs, nodes), on_nodes in zip(groups, running, strict=True):
        kept = tuple(cluster.gangs[g] for g in gangs)
        names = {g.name for g in kept}
        pods = {pod.name for g in kept for pod in g.pods}
        out.append(
            replace(
                cluster,
                nodes=tuple(cluster.nodes[n] for n in nodes),
                gangs=kept,
                running=tuple(on_nodes),
                nominated={pod: node for pod, node in cluster.nominated.items() if pod in pods},
                promised=tuple(r for r in cluster.promised if r.gang in names),
            )
        )
    return out


def solve_apart(groups: Sequence[Group], solve: Callable[[Group], Placement], wait: float) -> list[Placement]:
    """`solve` of each group, each in a forked process, all at once. A group whose process fails, or has not
    answered `wait` seconds from the start (a child forked while another thread held a lock it needs waits for
    ever), is solved in this one afterwards (so an error in it is raised here, with its traceback)."""
    context = multiprocessing.get_context("fork")  # the cluster is there already: nothing is sent but the answer
    until = time.monotonic() + wait
    running = []
    for group in groups:
        receive, send = context.Pipe(duplex=False)
        process = context.Process(target=_child, args=(solve, group, send), daemon=True)
        process.start()
        send.close()
        running.append((process, receive))
    out = []
    for group, (process, receive) in zip(groups, running, strict=True):
        placement = None
        try:
            if receive.poll(max(until - time.monotonic(), 0)):
                placement = receive.recv()
        except EOFError:  # it died (killed, out of memory) before answering
            pass
        if placement is None:
            process.kill()
        process.join()
        receive.close()
        out.append(placement if isinstance(placement, Placement) else solve(group))
    return out


def _child(solve: Callable[[Group], Placement], group: Group, send: multiprocessing.connection.Connection) -> None:
    try:
        answer: Placement | None = solve(group)
    except BaseException:  # solved again in the parent, which raises it there
        answer = None
    send.send(answer)
    send.close()


def merged(cluster: Cluster, groups: Sequence[Group], placements: Sequence[Placement], seconds: float) -> Placement:
    """The groups' placements as one: gangs in the cluster's order, the plan in queue order, levels summed, and
    each group's stages after one that names it."""
    results = {r.name: r for p in placements for r in p.gangs}
    ranked = {g.name: (desc(g.level), g.share, g.order, g.name) for g in queues.rank(cluster)}
    levels: dict[tuple[int, int, int], dict[str, int]] = {}
    for p in placements:
        for level in p.levels:
            key = (level["priority"], level["fairShareTier"], level["starving"])
            into = levels.setdefault(key, {**level, "placed": 0, "bound": 0, "gangs": 0})
            for count in ("placed", "bound", "gangs"):
                into[count] += level[count]
    statuses = {p.status for p in placements}
    status = statuses.pop() if len(statuses) == 1 else "FEASIBLE"  # some groups proven, others not
    stages: list[Mapping[str, object]] = []
    for i, (group, p) in enumerate(zip(groups, placements, strict=True)):
        detail = (
            f"pool {i + 1} of {len(groups)}: {len(group.cluster.gangs)} gangs on {len(group.cluster.nodes)} of "
            f"{len(cluster.nodes)} nodes"
        )
        stage = Stage("pool", p.status, p.objective, p.best_bound, p.solve_seconds, detail)
        stages.append(stage.as_dict())
        stages.extend(p.stages)
    bindings = {pod: node for p in placements for pod, node in p.bindings.items()}
    return Placement(
        bindings=bindings,
        gangs=tuple(results[g.name] for g in cluster.gangs if g.name in results),
        status=status,
        objective=sum(p.objective for p in placements),
        best_bound=sum(p.best_bound for p in placements),
        solve_seconds=seconds,
        stages=tuple(stages),
        levels=tuple(levels[key] for key in sorted(levels, reverse=True)),
        reservations=tuple(sorted((r for p in placements for r in p.reservations), key=lambda r: ranked[r.gang])),
        forecasts=tuple(sorted((r for p in placements for r in p.forecasts), key=lambda r: ranked[r.gang])),
        backfilled=tuple(sorted((g for p in placements for g in p.backfilled), key=lambda g: ranked[g])),
        queues=queues.report(cluster, bindings),
        shares={pod: share for p in placements for pod, share in p.shares.items()},
    )
