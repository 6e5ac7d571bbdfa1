"""Why a gang stays pending, in words a user can act on: which resource is short and by how much, which
constraint excluded which nodes, or which other gangs took the room this cycle."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from gangsolve.solver.greedy import place_colocated, place_gang
from gangsolve.solver.limits import Limits
from gangsolve.solver.model import PODS, SHARE, Node, Pod
from gangsolve.solver.problem import Counts, GangPart, Problem, eligible_to_any

_BINARY = (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def quantity(resource: str, value: int) -> str:
    """A readable Kubernetes quantity: cpu from millicores, memory-like resources from bytes."""
    if resource in ("cpu", SHARE):  # a GPU share is in thousandths of a GPU, as cpu in millicores
        return str(value // 1000) if value % 1000 == 0 else f"{value}m"
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        for suffix, size in _BINARY:
            if value >= size and value % size == 0:
                return f"{value // size}{suffix}"
        for suffix, size in _BINARY:
            if value >= size:
                return f"{value / size:.1f}{suffix}"
    return str(value)


def _where(pod: Pod) -> str:
    parts = []
    if pod.node_selector:
        parts.append("nodeSelector " + ",".join(f"{k}={v}" for k, v in sorted(pod.node_selector.items())))
    if pod.affinity:
        parts.append("required node affinity")
    return "on nodes matching " + " and ".join(parts) if parts else "on schedulable nodes"


# What placing a gang alone reads of it (`_shape`).
Shape = tuple[tuple[tuple[int, int, int], ...], int, str | None, tuple[str, ...], tuple[str, ...]]


@dataclass
class Explained:
    """What explaining one cycle's gangs derives once and reuses: a large cluster's pending gangs repeat a few
    shapes (one job template, many jobs), and trying a gang alone on the free capacity is the costly part."""

    exclusions: dict[tuple[int, ...], str] = field(default_factory=dict)  # by the gang's pod classes
    alone: dict[Shape, bool] = field(default_factory=dict)  # fits_alone, by the gang's shape
    free: dict[tuple[int, ...], np.ndarray] = field(default_factory=dict)  # free totals on the classes' nodes
    # For a node pool's problem (pools.py), which holds only the pool's nodes: a gang's exclusions (from its
    # parts) over every node of the cluster.
    outside: Callable[[tuple[GangPart, ...]], str] | None = None


def _exclusions(problem: Problem, g: int, cache: Explained) -> str:
    """Nodes no pod of the gang may use, grouped by the first constraint that rules them out."""
    parts = problem.parts[g]
    key = tuple(part.cls for part in parts)
    if key not in cache.exclusions:
        outside = cache.outside
        cache.exclusions[key] = exclusions_of(problem, parts) if outside is None else outside(parts)
    return cache.exclusions[key]


def _shape(problem: Problem, g: int) -> Shape:
    """What placing the gang alone reads of it: its parts' pod classes, sizes and priorities (the order parts
    are placed in), its need, its topology levels and where its bound members are."""
    gang = problem.gangs[g]
    parts = tuple((part.cls, len(part.pods), part.pods[0].priority) for part in problem.parts[g])
    return parts, gang.need, gang.colocate, gang.preferred, tuple(sorted(gang.bound_nodes))


class Filed(Protocol):
    """What exclusions read: the nodes, and per pod class the nodes it may use and what excluded the others
    (a Problem, or the whole cluster's classes where a pool's problem holds only its own nodes: pools.py)."""

    nodes: Sequence[Node]
    eligible: np.ndarray
    excluded: list[dict[str, list[int]]]


def exclusions_of(problem: Filed, parts: tuple[GangPart, ...]) -> str:
    """Nodes no pod of `parts` may use, grouped by the first constraint that rules them out."""
    eligible = eligible_to_any(problem.eligible, [part.cls for part in parts])
    pod = parts[0].pods[0]
    phrases = []
    by_reason = problem.excluded[parts[0].cls]
    for reason, members in sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        if reason.startswith("nodeSelector") and pod.node_selector:
            continue  # already said by "on nodes matching nodeSelector ..."
        names = [problem.nodes[n].name for n in sorted(members) if not eligible[n]]  # no other part may use
        if not names:
            continue
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        phrases.append(
            f"{shown} excluded by {reason}" if len(names) == 1 else f"{len(names)} nodes ({shown}) excluded by {reason}"
        )
    return "; ".join(phrases)


def _shortage(problem: Problem, g: int, cache: Explained) -> str | None:
    """The first resource the gang's minimum needs more of than the free total on its eligible nodes."""
    gang = problem.gangs[g]
    parts = sorted(problem.parts[g], key=lambda part: -part.pods[0].priority)
    need = max(gang.need, 1)
    required = np.zeros(len(problem.resources), dtype=np.int64)
    classes = []
    for part in parts:
        k = min(need, len(part.pods))
        required += problem.demand[part.cls] * k
        classes.append(part.cls)
        need -= k
        if need == 0:
            break
    key = tuple(sorted(set(classes)))
    if key not in cache.free:  # a sum over every node: once per set of classes, not once per gang
        available = eligible_to_any(problem.eligible, key)
        cache.free[key] = np.maximum(problem.free[available], 0).sum(axis=0)
    free = cache.free[key]
    # Scarce resources first: GPUs, then extended resources, then the rest.
    order = sorted(
        range(len(problem.resources)),
        key=lambda r: (not problem.gpus[r], problem.resources[r] in (PODS, "cpu", "memory"), r),
    )
    for r in order:
        if required[r] > free[r]:
            name = problem.resources[r]
            return (
                f"needs {quantity(name, int(required[r]))} {name}, {quantity(name, int(free[r]))} free "
                f"{_where(parts[0].pods[0])}"
            )
    return None


def _single_pod(problem: Problem, g: int) -> str | None:
    """A pod no eligible node can hold even when empty of other pending work."""
    for part in problem.parts[g]:
        if problem.fit[part.cls].any():
            continue
        eligible = problem.eligible[part.cls]
        if not eligible.any():
            return f"no node is eligible for pod {part.pods[0].name}"
        demand = problem.demand[part.cls]
        for r in np.flatnonzero(demand > 0):
            largest = int(np.max(problem.free[eligible, r]))
            if largest < demand[r]:
                name = problem.resources[r]
                return (
                    f"pod {part.pods[0].name} needs {quantity(name, int(demand[r]))} {name}, "
                    f"at most {quantity(name, max(largest, 0))} free on one node {_where(part.pods[0])}"
                )
    return None


def _over_capability(problem: Problem, g: int, counts: Counts) -> str | None:
    """Why the gang's minimum may not be placed whatever the free capacity: it would take its queue past its
    capability, or borrow capacity held for queues below their fair share (with this cycle's placement)."""
    queue = problem.gangs[g].queue
    if any(q.closed for q in problem.cluster.queues if q.name == queue):
        return f"queue {queue} is closed: it admits no new gangs"
    for row in problem.cap_rows[g]:
        if not problem.capped[row]:
            continue
        left = problem.cap_left[row].copy()
        for h, gang_counts in counts.items():
            if row in problem.cap_rows[h]:
                for (p, _n), k in gang_counts.items():
                    left -= k * problem.demand[problem.parts[h][p].cls]
        for r in np.flatnonzero(problem.floor[g] > left).tolist():
            name = problem.resources[r]
            needs = f"needs {quantity(name, int(problem.floor[g, r]))} {name}"
            if row >= problem.borrow_row:
                return (
                    f"queue {problem.gangs[g].queue} is at its fair share: {needs}, and the free capacity is held "
                    "for queues below theirs"
                )
            left_ = quantity(name, max(int(left[r]), 0))
            return f"held by queue {problem.queue_names[row]}'s capability: {needs}, {left_} left under its cap"
    return None


def fits_alone(problem: Problem, g: int, cache: Explained | None = None) -> bool:
    """Whether the gang's minimum fits the cycle's free capacity with no other gang placed."""
    if cache is None:
        return _fits_alone(problem, g)
    key = _shape(problem, g)
    if key not in cache.alone:
        cache.alone[key] = _fits_alone(problem, g)
    return cache.alone[key]


def _fits_alone(problem: Problem, g: int) -> bool:
    return _fits_in(problem, g, problem.free, problem.fit)


def _fits_within(problem: Problem, g: int, limits: Limits) -> bool:
    """Whether the gang's minimum fits with no other gang placed and the reservations' limits held."""
    return _fits_in(problem, g, limits.room_for(g, problem.free.copy()))


def _fits_in(problem: Problem, g: int, room: np.ndarray, fit: np.ndarray | None = None) -> bool:
    """Whether the gang's minimum fits `room` with no other gang placed (as the greedy pass places it); `fit`:
    the pods of each class each node holds in `room`, where known already."""
    gang, parts = problem.gangs[g], problem.parts[g]
    need = max(gang.need, 1)
    if gang.colocate:
        return place_colocated(problem, g, room.copy()) is not None
    # Per part, what each node holds of it (at most the part's pods): each part alone places the sum, since a
    # greedy pass fills nodes one class at a time. Together they place no more, so below the minimum it does
    # not fit; one class is exact.
    holds = [np.minimum(problem.fits(p.cls, room) if fit is None else fit[p.cls], len(p.pods)) for p in parts]
    if sum(min(len(p.pods), int(h.sum())) for p, h in zip(parts, holds, strict=True)) < need:
        return False
    if len(parts) == 1:
        return True
    # Parts are placed one after another, highest priority first: the pods placed before a part take at most as
    # many nodes, each costing it at most what that node held for it. If the gang fits even so, it fits.
    surely, before = 0, 0
    for i in sorted(range(len(parts)), key=lambda i: (-parts[i].pods[0].priority, i)):
        lost = int(np.sort(holds[i])[max(len(holds[i]) - before, 0) :].sum()) if before else 0
        surely += min(len(parts[i].pods), int(holds[i].sum()) - lost)
        before += len(parts[i].pods)
    return surely >= need or place_gang(problem, g, room.copy()) is not None


def explain(
    problem: Problem,
    g: int,
    counts: Counts,
    cache: Explained | None = None,
    limits: Limits | None = None,
) -> str:
    """`cache` (shared across the gangs of one cycle) saves re-deriving what gangs of one shape share.
    `limits`: the cycle's reservations, which a gang may fit beside now but would still be running into."""
    gang = problem.gangs[g]
    total = len(gang.pods) + len(gang.bound_nodes)
    placed = sum(counts.get(g, {}).values())
    if total < gang.min_member:
        return f"gang has {total} pods, fewer than minMember {gang.min_member}: waiting for more members"
    if placed:
        return f"placed {placed} of {len(gang.pods)} pending pods (minMember reached); no room for the rest this cycle"
    capped = _over_capability(problem, g, counts)
    if capped:
        return capped
    cache = Explained() if cache is None else cache
    excluded = _exclusions(problem, g, cache)
    why = _shortage(problem, g, cache) or _single_pod(problem, g)
    if why is None:
        alone = fits_alone(problem, g, cache)
        if alone and limits is not None and not _fits_within(problem, g, limits):
            why = (
                "fits the free capacity now, but would still be running when a reservation for a gang waiting "
                "longer needs those nodes"
            )
        elif alone:
            why = (
                "fits the free capacity on its own, but gangs placed this cycle (higher priority or better fit) took it"
            )
        elif gang.colocate:
            why = f"no single {gang.colocate} value has room for {max(gang.need, 1)} pods together"
        else:
            why = f"free capacity is fragmented: no packing of {max(gang.need, 1)} pods onto nodes fits"
    return why + (f"; {excluded}" if excluded else "")
