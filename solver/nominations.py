"""Nominations: a gang an earlier cycle preempted for (its pods' `status.nominatedNodeName`) binds on its
nominated nodes as soon as it fits there. Until then that capacity is held for it: the placement sees it as
used, so no other gang takes what the victims free. The gang may still be placed elsewhere, which ends the
nomination. A nomination that would not fit even once every leaving pod on its nodes is gone (the node changed,
another scheduler took the room) has gone stale: it is dropped and the gang may preempt again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from gangsolve.solver.model import Cluster, Gang, GangResult, Node, Placement
from gangsolve.solver.problem import exclusion


@dataclass(frozen=True)
class Holds:
    """What the nominations of a cycle became: pods to bind now, pods whose capacity stays held, stale gangs."""

    bind: dict[str, str] = field(default_factory=dict)  # pod -> node
    wait: dict[str, str] = field(default_factory=dict)  # pod -> node
    stale: tuple[str, ...] = ()  # gangs whose nomination was dropped


def gangs_with(cluster: Cluster, pods: Mapping[str, str]) -> set[str]:
    """The gangs with a pod among `pods`."""
    return {g.name for g in cluster.gangs if any(p.name in pods for p in g.pods)}


def _add(into: dict[str, int], requests: Mapping[str, int], sign: int = 1) -> None:
    for r, q in requests.items():
        into[r] = into.get(r, 0) + sign * q


def holds(cluster: Cluster) -> Holds:
    """Sort the nominated gangs, highest priority first: fits on its nominated nodes now (bind), fits there
    once the leaving pods are gone (wait, capacity held), or neither (stale)."""
    nodes = {n.name: n for n in cluster.nodes}
    free: dict[str, dict[str, int]] = {}
    leaving: dict[str, dict[str, int]] = defaultdict(dict)
    for r in cluster.running:
        if r.leaving:
            _add(leaving[r.node], r.requests)
    out = Holds()
    stale: list[str] = []
    for gang in sorted(cluster.gangs, key=lambda g: (-g.priority, -int(g.starving), g.order, g.name)):
        chosen = [(p, cluster.nominated[p.name]) for p in gang.pods if p.name in cluster.nominated]
        if not chosen:
            continue
        adding: dict[str, dict[str, int]] = defaultdict(dict)
        for pod, node in chosen:
            if node in nodes:
                _add(adding[node], {**pod.requests, "pods": 1})
        usable = (
            len(chosen) >= max(gang.need, 1)
            and all(node in nodes and exclusion(pod, nodes[node]) is None for pod, node in chosen)
            and _one_domain(gang, [n for _p, n in chosen], nodes)
        )
        for node in adding:
            free.setdefault(node, {r: nodes[node].free(r) for r in nodes[node].allocatable})
        now = usable and all(_fits(adding[n], free[n], {}) for n in adding)
        later = usable and all(_fits(adding[n], free[n], leaving[n]) for n in adding)
        if not later:
            stale.append(gang.name)
            continue
        for node, need in adding.items():
            _add(free[node], need, -1)
        (out.bind if now else out.wait).update({p.name: n for p, n in chosen})
    return replace(out, stale=tuple(stale))


def _fits(need: Mapping[str, int], free: Mapping[str, int], more: Mapping[str, int]) -> bool:
    return all(q <= free.get(r, 0) + more.get(r, 0) for r, q in need.items() if q > 0)


def _one_domain(gang: Gang, chosen: list[str], nodes: Mapping[str, Node]) -> bool:
    if not gang.colocate:
        return True
    values = {nodes[n].labels.get(gang.colocate) if n in nodes else None for n in [*chosen, *gang.bound_nodes]}
    return len(values) == 1 and None not in values


def with_holds(cluster: Cluster, held: Holds) -> Cluster:
    """The cluster the placement sees: held and bound-now pods use their nodes and count in their queue's
    allocation (against its capability); bound-now gangs are done."""
    pods = {p.name: p for g in cluster.gangs for p in g.pods}
    queue_of = {p.name: g.queue for g in cluster.gangs for p in g.pods}
    extra: dict[str, dict[str, int]] = defaultdict(dict)
    taken: dict[str, dict[str, int]] = defaultdict(dict)
    for name, node in [*held.bind.items(), *held.wait.items()]:
        _add(extra[node], {**pods[name].requests, "pods": 1})
        _add(taken[queue_of[name]], {**pods[name].requests, "pods": 1})
    queues = tuple(
        replace(q, allocated={**q.allocated, **{r: q.allocated.get(r, 0) + v for r, v in taken[q.name].items()}})
        if q.name in taken
        else q
        for q in cluster.queues
    )
    nodes = tuple(
        replace(n, used={**n.used, **{r: n.used.get(r, 0) + q for r, q in extra[n.name].items()}})
        if n.name in extra
        else n
        for n in cluster.nodes
    )
    done = gangs_with(cluster, held.bind)
    gangs = tuple(g for g in cluster.gangs if g.name not in done)
    return replace(cluster, nodes=nodes, gangs=gangs, nominated={}, queues=queues)


def merged(cluster: Cluster, held: Holds, inner: Placement) -> Placement:
    """The placement of the cluster with holds, as a placement of the whole cluster: bound-now gangs placed,
    waiting gangs not placed elsewhere keep their nominations."""
    done = gangs_with(cluster, held.bind)
    waiting = gangs_with(cluster, held.wait)
    results = iter(inner.gangs)
    gangs, nominations, levels = [], {}, [dict(level) for level in inner.levels]
    for gang in cluster.gangs:
        if gang.name in done:
            placed = sum(1 for p in gang.pods if p.name in held.bind)
            gangs.append(
                GangResult(
                    gang.name, True, gang.min_member, len(gang.pods) + len(gang.bound_nodes), placed, gang.priority
                )
            )
            _count_level(levels, gang)
            continue
        result = next(results)
        if gang.name in waiting and not result.placed_pods:
            mine = {p.name: held.wait[p.name] for p in gang.pods if p.name in held.wait}
            nominations.update(mine)
            why = f"nominated to {node_list(mine.values())}: binds once the pods preempted for it are gone"
            result = replace(result, reason=why)
        gangs.append(result)
    return replace(
        inner,
        bindings={**inner.bindings, **held.bind},
        gangs=tuple(gangs),
        objective=inner.objective + len(done),
        best_bound=inner.best_bound + len(done),
        levels=tuple(levels),
        nominations=nominations,
    )


def _count_level(levels: list[dict[str, int]], gang: Gang) -> None:
    """A gang placed outside the placement's model: one more placed, bounded and modelled at its level."""
    for level in levels:
        if level["priority"] == gang.priority and bool(level["starving"]) == gang.starving:
            level.update(placed=level["placed"] + 1, bound=level["bound"] + 1, gangs=level["gangs"] + 1)
            return
    levels.append({"priority": gang.priority, "starving": gang.starving, "placed": 1, "bound": 1, "gangs": 1})
    levels.sort(key=lambda level: (-level["priority"], -int(level["starving"])))


def node_list(names: Iterable[str]) -> str:
    unique = sorted(set(names))
    return ", ".join(unique[:3]) + (f" and {len(unique) - 3} more" if len(unique) > 3 else "")
