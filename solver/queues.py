"""Queues: each tenant's capability (a hard cap) and its weighted fair share of the cluster.

Fair shares are Volcano's `proportion`, made weighted max-min fair: per resource, each queue with demand gets
`max(guarantee, min(demand, capability, lambda * weight))`, with one `lambda` that hands out the cluster's
schedulable total (so capacity a queue does not ask for goes to the others). A queue's *share* is its
dominant share: the largest fraction of any resource of the cluster it holds (GPUs, on GPU clusters).

Queues form a tree (Volcano's `spec.parent`; `root` is the top). Fair shares are divided down it: the top
queues divide the cluster as above, each with the demand of all the queues under it; each queue's fair share
is then divided the same way among its children (a queue's own gangs, where it has children too, count as one
more child of weight 1). A queue that sets `deserved` for a resource gets that (within its demand and
capability), not a weighted part. A queue's capability caps what it and every queue under it hold together.

`rank` turns that into the solver's strict order: walking each queue's gangs in queue order, a gang whose
minimum still fits the queue's fair share (with what the queue holds and its earlier fitting gangs) is *fair*
and ranks above every gang of its priority that would borrow; so a queue below its fair share is served
before one above it, and gangs that borrow idle capacity are placed after (the schedule stays
work-conserving). Within a tier, gangs go in order of the weighted dominant share their queue would hold with
them placed, as dominant-resource fairness serves the poorest queue first. Gangs that would borrow are tiered
by queue too, the queue holding the lowest weighted dominant share highest: idle capacity goes first to the
queue furthest below its weight, not to whichever queue has the smallest gangs.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from gangsolve.solver import node_table
from gangsolve.solver.model import GPU, PODS, SHARE, WHOLE, Cluster, Gang, Queue, QueueResult

UNLIMITED = np.iinfo(np.int64).max // 4  # a resource a queue's capability does not name
ROOT = "root"  # Volcano's root queue: the top of the tree, standing for the whole cluster
_EPSILON = 1e-9


def queues_of(cluster: Cluster) -> dict[str, Queue]:
    """Every queue the cluster declares (but `root`, which stands for the cluster), plus an implicit one
    (weight 1, no cap) for each name a gang uses that is not declared (`default` among them)."""
    out = {q.name: q for q in cluster.queues if q.name != ROOT}
    for gang in cluster.gangs:
        out.setdefault(gang.queue, Queue(gang.queue))
    return out


class Tree:
    """The queues as a tree: each queue's parent ("" at the top) and children. A parent the cluster does not
    declare, or one that would close a loop, puts the queue at the top (the edge rejects both)."""

    def __init__(self, queues: Mapping[str, Queue]) -> None:
        self.queues = queues
        self.parent: dict[str, str] = {}

        def declared_parent(name: str) -> str:
            up = queues[name].parent
            return up if up in queues and up != name else ""

        for name in queues:
            up, seen = declared_parent(name), {name}
            while up and up not in seen:
                seen.add(up)
                up = declared_parent(up)
            self.parent[name] = "" if up == name else declared_parent(name)  # back to itself: a loop, cut
        self.children: dict[str, list[str]] = defaultdict(list)
        for name in sorted(queues):
            self.children[self.parent[name]].append(name)

    def path(self, name: str) -> list[str]:
        """The queues from the top down to `name`, itself last."""
        out = [name]
        while self.parent.get(out[-1], ""):
            out.append(self.parent[out[-1]])
        return out[::-1]

    def under(self, name: str) -> list[str]:
        """`name` and every queue below it."""
        out, todo = [], [name]
        while todo:
            q = todo.pop()
            out.append(q)
            todo += self.children.get(q, [])
        return out

    def branch(self, name: str, of: str) -> list[str]:
        """The queues from `name` up to, not including, the nearest queue above both `name` and `of` (their
        common ancestor): what a reclaim by `of` from `name` takes from."""
        above = set(self.path(of))
        return [q for q in reversed(self.path(name)) if q not in above] or [name]

    def kinship(self, name: str, of: str) -> int:
        """How near `name` is to `of`: the depth of their nearest common ancestor (siblings are nearest)."""
        return len(set(self.path(name)) & set(self.path(of)))

    def totals(self, own: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
        """Per queue, `own` (amounts per queue) summed over it and every queue below it."""
        out: dict[str, dict[str, float]] = {}
        for name in self.queues:
            into: dict[str, float] = {}
            for q in self.under(name):
                for r, v in own.get(q, {}).items():
                    into[r] = into.get(r, 0) + v
            out[name] = into
        return out


def _add(into: dict[str, int], more: Mapping[str, int], times: int = 1) -> None:
    for r, q in more.items():
        into[r] = into.get(r, 0) + q * times


def minimum_requests(gang: Gang) -> dict[str, int]:
    """What the gang's minimum asks for: its `need` first pending pods (highest priority, oldest), at least one."""
    pods = sorted(gang.pods, key=lambda p: (-p.priority, p.order, p.name))[: max(gang.need, 1)]
    out: dict[str, int] = {}
    for pod in pods:
        _add(out, pod.requests)
    return out


def water_fill(total: float, weights: list[float], floors: list[float], caps: list[float]) -> list[float]:
    """Weighted max-min fair division of `total`: `max(floor, min(cap, lambda * weight))` each, with the
    largest `lambda` whose sum is at most `total` (everything each asks for, when that fits)."""

    def given(lam: float) -> list[float]:
        return [max(f, min(c, lam * w)) for w, f, c in zip(weights, floors, caps, strict=True)]

    if sum(given(float("inf"))) <= total:
        return given(float("inf"))
    lo, hi = 0.0, max((c / w for w, c in zip(weights, caps, strict=True) if w > 0), default=0.0)
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sum(given(mid)) <= total else (lo, mid)
    return given(lo)


def demands(cluster: Cluster, queues: Mapping[str, Queue]) -> dict[str, dict[str, int]]:
    """Per queue, what it holds plus what its pending gangs ask for (all their pods): its own, not its children's."""
    demand: dict[str, dict[str, int]] = {name: dict(q.allocated) for name, q in queues.items()}
    for gang in cluster.gangs:
        _add(demand[gang.queue], gang.total_requests)
    return demand


def deserved(cluster: Cluster) -> dict[str, dict[str, float]]:
    """Each queue's fair share per resource of the schedulable total, given what it (and the queues under it)
    holds and asks for, its weight, capability, guarantee and `deserved`, divided down the tree."""
    return _shares(cluster)[0]


def own_deserved(cluster: Cluster) -> dict[str, dict[str, float]]:
    """Each queue's fair share for its own gangs: its fair share, less what its children's take where it has
    any."""
    return deserved_both(cluster)[1]


def deserved_both(cluster: Cluster) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """`deserved` and `own_deserved` from one division of the tree."""
    shares, own = _shares(cluster)
    return shares, {name: own.get(name, {}) if name in own else share for name, share in shares.items()}


def _usable(tree: Tree, own: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """Per queue, what it and the queues under it could use: its own demand plus what each child could use,
    capped by its capability (bottom up: a child's cap limits what its parent can pass on)."""
    out: dict[str, dict[str, int]] = {}

    def usable(name: str) -> dict[str, int]:
        if name not in out:
            total = dict(own.get(name, {}))
            for child in tree.children.get(name, []):
                _add(total, usable(child))
            cap = tree.queues[name].capability
            out[name] = {r: min(q, cap.get(r, q)) for r, q in total.items()}
        return out[name]

    for name in tree.queues:
        usable(name)
    return out


def _shares(cluster: Cluster) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    queues = queues_of(cluster)
    tree = Tree(queues)
    own = demands(cluster, queues)
    demand = _usable(tree, own)
    out: dict[str, dict[str, float]] = {name: {} for name in queues}
    own_share: dict[str, dict[str, float]] = {}  # a parent queue's share for its own gangs
    used = tree.totals({name: {"": q.usage} for name, q in queues.items()})

    def history(kids: list[str]) -> list[float]:
        """Slurm's fair-share factor 2^(-U/S) per sibling: U its share of the siblings' past use, S its share of
        their weight. A queue that used more than its weight gets less now, one that used less gets more; no
        history (no use recorded): 1 each."""
        use = [used[n].get("", 0.0) for n in kids]
        weight = [float(max(queues[n].weight, 0)) for n in kids]
        if sum(use) <= 0 or sum(weight) <= 0:
            return [1.0] * len(kids)
        return [2.0 ** -((u / sum(use)) / max(w / sum(weight), 1e-9)) for u, w in zip(use, weight, strict=True)]

    for r, amount in node_table.schedulable(cluster.nodes).items():
        todo = [("", float(amount))]
        while todo:
            parent, given = todo.pop()
            kids = tree.children.get(parent, [])
            if not kids:
                continue
            # A parent's own gangs compete with its children as one more child of weight 1.
            mine = parent and own[parent].get(r, 0) > 0
            weights = [float(max(queues[n].weight, 0)) * f for n, f in zip(kids, history(kids), strict=True)]
            weights += [1.0] if mine else []
            caps = [float(min(demand[n].get(r, 0), queues[n].capability.get(r, UNLIMITED))) for n in kids]
            floors = [float(min(queues[n].guarantee.get(r, 0), c)) for n, c in zip(kids, caps, strict=True)]
            for i, n in enumerate(kids):
                if r in queues[n].deserved:  # a set quota: that much, within its demand and capability
                    caps[i] = floors[i] = max(floors[i], min(caps[i], float(queues[n].deserved[r])))
            if mine:
                caps.append(float(own[parent].get(r, 0)))
                floors.append(0.0)
            split = water_fill(given, weights, floors, caps)
            if mine:
                own_share.setdefault(parent, {})[r] = split.pop()
            for n, value in zip(kids, split, strict=True):
                out[n][r] = value
                todo.append((n, value))
    for parent in tree.children:  # a parent without gangs of its own keeps nothing for them
        if parent and tree.children[parent]:
            own_share.setdefault(parent, {})
    return out, own_share


def dominant(amounts: Mapping[str, float], total: Mapping[str, int]) -> float:
    """The largest fraction of any resource of `total` that `amounts` hold (GPU shares count as GPUs)."""
    if amounts.get(SHARE):
        amounts = {**amounts, GPU: amounts.get(GPU, 0) + amounts[SHARE] / WHOLE}
    return max((amounts.get(r, 0) / t for r, t in total.items() if t > 0), default=0.0)


def queue_key(gang: Gang) -> tuple[int, int, int]:
    """A gang's place in the queue before fair shares reorder it: priority, then starving, then its oldest member."""
    return (-gang.priority, -gang.starving, gang.order)


def competing(gangs: Sequence[Gang]) -> bool:
    """Whether queues compete for the cluster: two or more hold pending gangs (with fewer there is nothing to
    share)."""
    return len({g.queue for g in gangs if g.pods}) > 1


def rank(cluster: Cluster) -> tuple[Gang, ...]:
    """The cluster's gangs with `fair` and `share` set (see the module's docstring). Where queues do not compete
    every gang is fair, as without queues."""
    gangs = cluster.gangs
    if not competing(gangs):
        return tuple(
            g if (g.fair, g.share, g.tier) == (True, 0.0, 0) else dataclasses.replace(g, fair=True, share=0.0, tier=0)
            for g in gangs
        )
    queues = queues_of(cluster)
    total = node_table.schedulable(cluster.nodes)
    fair_share = own_deserved(cluster)
    held_fair = {name: dict(q.allocated) for name, q in queues.items()}  # held plus the fair gangs so far
    held_all = {name: dict(q.allocated) for name, q in queues.items()}  # held plus every gang so far
    ranked = list(gangs)
    order = sorted(range(len(gangs)), key=lambda g: queue_key(gangs[g]))
    for g in order:
        gang = gangs[g]
        q = gang.queue
        need = minimum_requests(gang)
        after = dict(held_fair[q])
        _add(after, need)
        fits = all(after.get(r, 0) <= fair_share[q].get(r, 0.0) * (1 + _EPSILON) for r in need if r in total)
        if fits:
            held_fair[q] = after
        _add(held_all[q], need)
        share = dominant(held_all[q], total) / max(queues[q].weight, 1)
        ranked[g] = dataclasses.replace(gang, fair=fits, share=share)
    # Borrowing tiers: queues by the weighted dominant share they hold now, the poorest highest; in a tree,
    # level by level from the top (the poorest department first, then its poorest team).
    tree = Tree(queues)
    held = tree.totals({name: q.allocated for name, q in queues.items()})

    def poverty(q: str) -> tuple[tuple[float, ...], str]:
        return (tuple(dominant(held[a], total) / max(queues[a].weight, 1) for a in tree.path(q)), q)

    poorest = sorted(queues, key=poverty)
    tier = {q: len(poorest) - i for i, q in enumerate(poorest)}
    return tuple(dataclasses.replace(g, tier=len(poorest) + 1 if g.fair else tier[g.queue]) for g in ranked)


def report(cluster: Cluster, bindings: Mapping[str, str]) -> tuple[QueueResult, ...]:
    """Every queue (declared, or named by a gang) after the placement `bindings` (pod -> node)."""
    queues = queues_of(cluster)
    tree = Tree(queues)
    total = node_table.schedulable(cluster.nodes)
    fair_share = deserved(cluster)
    own = {name: dict(q.allocated) for name, q in queues.items()}
    for gang in cluster.gangs:
        bound = [pod for pod in gang.pods if pod.name in bindings]
        if len(bound) == len(gang.pods):
            _add(own[gang.queue], gang.total_requests)
        else:
            for pod in bound:
                _add(own[gang.queue], pod.requests)
    allocated = tree.totals(own)
    used = tree.totals({name: {"": q.usage} for name, q in queues.items()})
    return tuple(
        QueueResult(
            name=name,
            weight=queues[name].weight,
            capability=dict(queues[name].capability),
            allocated={r: int(q) for r, q in sorted(allocated[name].items()) if q},
            share=round(dominant(allocated[name], total), 4),
            fair_share=round(dominant(fair_share[name], total), 4),
            parent=tree.parent[name],
            usage=round(used[name].get("", 0.0), 1),
        )
        for name in sorted(queues)
    )


def capability_left(cluster: Cluster, gangs: Iterable[Gang], resources: list[str]) -> tuple[list[str], np.ndarray]:
    """The queues of `gangs` (names, indexed as the rows) and what each may still take per resource
    (`resources` are the columns) under its capability: capability less what it and the queues under it hold;
    UNLIMITED where the capability does not name the resource. A closed queue may take no pod slot: it admits
    no new gangs."""
    declared = queues_of(cluster)
    held = Tree(declared).totals({name: q.allocated for name, q in declared.items()})
    names = sorted({g.queue for g in gangs} | set(declared))
    left = np.full((len(names), len(resources)), UNLIMITED, dtype=np.int64)
    for i, name in enumerate(names):
        queue = declared[name] if name in declared else Queue(name)
        for r, cap in queue.capability.items():
            if r in resources:
                left[i, resources.index(r)] = cap - int(held.get(name, {}).get(r, 0))
        if GPU in queue.capability and GPU in resources and SHARE not in queue.capability:
            # Its GPUs include its shares: whole GPUs and shares together within the GPU capability, in milli.
            room = WHOLE * queue.capability[GPU] - int(
                WHOLE * held.get(name, {}).get(GPU, 0) + held.get(name, {}).get(SHARE, 0)
            )
            left[i, resources.index(GPU)] = room // WHOLE
            if SHARE in resources:
                left[i, resources.index(SHARE)] = room
        if queue.closed and PODS in resources:
            left[i, resources.index(PODS)] = 0
    return names, left
