"""Queues: each tenant's capability (a hard cap) and its weighted fair share of the cluster.

Fair shares are Volcano's `proportion`, made weighted max-min fair: per resource, each queue with demand gets
`max(guarantee, min(demand, capability, lambda * weight))`, with one `lambda` that hands out the cluster's
schedulable total (so capacity a queue does not ask for goes to the others). A queue's *share* is its
dominant share: the largest fraction of any resource of the cluster it holds (GPUs, on GPU clusters).

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
from collections.abc import Iterable, Mapping

import numpy as np

from gangsolve.solver.model import PODS, Cluster, Gang, Queue, QueueResult

UNLIMITED = np.iinfo(np.int64).max // 4  # a resource a queue's capability does not name
_EPSILON = 1e-9


def queues_of(cluster: Cluster) -> dict[str, Queue]:
    """Every queue the cluster declares, plus an implicit one (weight 1, no cap) for each name a gang uses
    that is not declared (`default` among them)."""
    out = {q.name: q for q in cluster.queues}
    for gang in cluster.gangs:
        out.setdefault(gang.queue, Queue(gang.queue))
    return out


def schedulable_total(cluster: Cluster) -> dict[str, int]:
    """The allocatable of nodes that can take pods (Ready, not cordoned): what fair shares divide."""
    total: dict[str, int] = defaultdict(int)
    for node in cluster.nodes:
        if node.ready and not node.unschedulable:
            for r, q in node.allocatable.items():
                total[r] += q
    return dict(total)


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


def deserved(cluster: Cluster) -> dict[str, dict[str, float]]:
    """Each queue's fair share per resource of the schedulable total, given what it holds and what its pending
    gangs ask for (all their pods), its weight, capability and guarantee."""
    queues = queues_of(cluster)
    demand: dict[str, dict[str, int]] = {name: dict(q.allocated) for name, q in queues.items()}
    for gang in cluster.gangs:
        for pod in gang.pods:
            _add(demand[gang.queue], pod.requests)
    total = schedulable_total(cluster)
    names = sorted(queues)
    out: dict[str, dict[str, float]] = {name: {} for name in names}
    for r, amount in total.items():
        caps = [float(min(demand[n].get(r, 0), queues[n].capability.get(r, UNLIMITED))) for n in names]
        floors = [float(min(queues[n].guarantee.get(r, 0), c)) for n, c in zip(names, caps, strict=True)]
        weights = [float(max(queues[n].weight, 0)) for n in names]
        for n, value in zip(names, water_fill(float(amount), weights, floors, caps), strict=True):
            out[n][r] = value
    return out


def dominant(amounts: Mapping[str, float], total: Mapping[str, int]) -> float:
    """The largest fraction of any resource of `total` that `amounts` hold."""
    return max((amounts.get(r, 0) / t for r, t in total.items() if t > 0), default=0.0)


def rank(cluster: Cluster) -> tuple[Gang, ...]:
    """The cluster's gangs with `fair` and `share` set (see the module's docstring). With fewer than two
    queues holding pending gangs there is nothing to share: every gang is fair, as without queues."""
    gangs = cluster.gangs
    if len({g.queue for g in gangs if g.pods}) < 2:
        return tuple(dataclasses.replace(g, fair=True, share=0.0, tier=0) for g in gangs)
    queues = queues_of(cluster)
    total = schedulable_total(cluster)
    fair_share = deserved(cluster)
    held_fair = {name: dict(q.allocated) for name, q in queues.items()}  # held plus the fair gangs so far
    held_all = {name: dict(q.allocated) for name, q in queues.items()}  # held plus every gang so far
    ranked = list(gangs)
    order = sorted(range(len(gangs)), key=lambda g: (-gangs[g].priority, -gangs[g].starving, gangs[g].order))
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
    # Borrowing tiers: queues by the weighted dominant share they hold now, the poorest highest.
    poorest = sorted(queues, key=lambda q: (dominant(queues[q].allocated, total) / max(queues[q].weight, 1), q))
    tier = {q: len(poorest) - i for i, q in enumerate(poorest)}
    return tuple(dataclasses.replace(g, tier=len(poorest) + 1 if g.fair else tier[g.queue]) for g in ranked)


def report(cluster: Cluster, bindings: Mapping[str, str]) -> tuple[QueueResult, ...]:
    """Every queue (declared, or named by a gang) after the placement `bindings` (pod -> node)."""
    queues = queues_of(cluster)
    total = schedulable_total(cluster)
    fair_share = deserved(cluster)
    allocated = {name: dict(q.allocated) for name, q in queues.items()}
    for gang in cluster.gangs:
        for pod in gang.pods:
            if pod.name in bindings:
                _add(allocated[gang.queue], pod.requests)
    return tuple(
        QueueResult(
            name=name,
            weight=queues[name].weight,
            capability=dict(queues[name].capability),
            allocated={r: q for r, q in sorted(allocated[name].items()) if q},
            share=round(dominant(allocated[name], total), 4),
            fair_share=round(dominant(fair_share[name], total), 4),
        )
        for name in sorted(queues)
    )


def capability_left(cluster: Cluster, gangs: Iterable[Gang], resources: list[str]) -> tuple[list[str], np.ndarray]:
    """The queues of `gangs` (names, indexed as the rows) and what each may still take per resource
    (`resources` are the columns) under its capability: capability less what it holds; UNLIMITED where the
    capability does not name the resource. A closed queue may take no pod slot: it admits no new gangs."""
    declared = queues_of(cluster)
    names = sorted({g.queue for g in gangs} | set(declared))
    left = np.full((len(names), len(resources)), UNLIMITED, dtype=np.int64)
    for i, name in enumerate(names):
        queue = declared[name] if name in declared else Queue(name)
        for r, cap in queue.capability.items():
            if r in resources:
                left[i, resources.index(r)] = cap - queue.allocated.get(r, 0)
        if queue.closed and PODS in resources:
            left[i, resources.index(PODS)] = 0
    return names, left
