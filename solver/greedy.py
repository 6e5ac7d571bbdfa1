"""The greedy gang allocator, as kube-batch and Volcano allocate: gangs in priority order, pods placed best-fit,
committed only when the gang reaches its minimum, otherwise discarded.

It is the CP-SAT model's hint and fallback, so gangsolve is never worse than it, and the `greedy-gang`
baseline of the benchmarks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol
from weakref import WeakKeyDictionary

import numpy as np

from gangsolve.solver.caps import QueueCaps
from gangsolve.solver.limits import Limits
from gangsolve.solver.model import Level
from gangsolve.solver.problem import Counts, GangCounts, Problem, Rows, eligible_to_any, rows_of


class Scorer(Protocol):
    """Scores nodes (of `rows`) for one pod of class `cls` given the free capacity; lower is better."""

    def __call__(self, problem: Problem, cls: int, free: np.ndarray, rows: Rows = ...) -> np.ndarray: ...


def queue_order(problem: Problem) -> list[int]:
    """Gangs in scheduling-queue order: by level (priority; gangs within their queue's fair share first; starving
    gangs first), then the poorest queue's first (its weighted dominant share), then by the problem's order (the
    largest expansion factor first, or none), then the oldest member."""
    if problem not in _queue_orders:  # sorted once a cycle: every pass and check walks it (0.1 s at 10,000 gangs)
        gangs = problem.gangs
        by_expansion = problem.order == "expansion"

        def key(g: int) -> tuple[object, ...]:
            gang = gangs[g]
            return (desc(gang.level), gang.share, -gang.expansion if by_expansion else 0.0, gang.order, gang.name)

        _queue_orders[problem] = tuple(sorted(range(len(gangs)), key=key))
    return list(_queue_orders[problem])


_queue_orders: WeakKeyDictionary[Problem, tuple[int, ...]] = WeakKeyDictionary()


def desc(level: Level) -> Level:
    """A level's sort key, highest first."""
    return (-level[0], -level[1], -level[2])


def smallest_first_order(problem: Problem) -> list[int]:
    """Gangs by level, then by the least they need (GPUs, then their share of the cluster): when the aim is
    the number of gangs placed, small gangs first is what a knapsack would do. Starving gangs keep their
    queue order: they are owed a place, first come first served."""
    gangs = problem.gangs
    share = (problem.floor / np.maximum(problem.free.sum(axis=0), 1)).sum(axis=1)

    def key(g: int) -> tuple[object, ...]:
        size = (0, 0.0) if gangs[g].starving else (int(problem.floor[g] @ problem.gpus), float(share[g]))
        return (desc(gangs[g].level), *size, gangs[g].order, gangs[g].name)

    return sorted(range(len(gangs)), key=key)


def most_allocated(problem: Problem, cls: int, free: np.ndarray, rows: Rows = slice(None)) -> np.ndarray:
    """Lower is better: kube-scheduler's MostAllocated, the node left most used across the resources the pod
    asks for. Packs cpu and memory as tightly as GPUs, which wins where they run out first."""
    demand = problem.demand[cls]
    asked = np.flatnonzero(demand)
    left = np.subtract(rows_of(free, rows)[:, asked], demand[asked], order="F")
    left = np.multiply(left, rows_of(problem.inv_allocatable, rows)[:, asked], order="F")
    return _row_sums(left) / len(asked)  # the mean, as mean(axis=1) computes it


def most_allocated_off_gpus(problem: Problem, cls: int, free: np.ndarray, rows: Rows = slice(None)) -> np.ndarray:
    """MostAllocated, but pods without GPUs keep off GPU nodes: a parameter server packed onto a GPU node
    takes the memory that node's GPU pods need."""
    scores = most_allocated(problem, cls, free, rows)
    if problem.gpu_demand[cls] == 0:
        scores += 1e4 * (rows_of(problem.gpu_allocatable, rows) > 0)
    return scores


# node_scores weighs each GPU a node would have left at this, and each resource's share left over at most 1: with
# fewer resources than this, the GPU term alone orders nodes that differ in free GPUs (`_batches` relies on it).
GPU_WEIGHT = 10.0


def node_scores(problem: Problem, cls: int, free: np.ndarray, rows: Rows = slice(None)) -> np.ndarray:
    """Lower is better. GPU pods fill the node with the fewest free GPUs left; pods without GPUs keep off GPU
    nodes; then best fit: the least capacity left over, each resource as a share of the node."""
    demand = problem.demand[cls]
    sub = rows_of(free, rows)
    left = np.multiply(np.subtract(sub, demand, order="F"), rows_of(problem.inv_allocatable, rows), order="F")
    score = _row_sums(left)
    gpus = problem.gpu_demand[cls]
    if gpus > 0:
        score += GPU_WEIGHT * (sub @ problem.gpus - gpus)
    else:
        score += 1e4 * (rows_of(problem.gpu_allocatable, rows) > 0)
    return score


def _row_sums(values: np.ndarray) -> np.ndarray:
    """Each row's sum, column after column: numpy sums a Fortran-ordered array's rows that way, where a C-ordered
    row of 8 or more columns is summed pairwise (other numbers). Scores made in Fortran order are not copied."""
    total: np.ndarray = np.asfortranarray(values).sum(axis=1)
    return total


_USED = 1e6  # locality: a node the gang already uses beats any best-fit difference


def place_gang(
    problem: Problem,
    g: int,
    free: np.ndarray,
    allowed: np.ndarray | None = None,
    scorer: Scorer = node_scores,
    most: int | None = None,
    counts: GangCounts | None = None,
    later: bool = False,
) -> GangCounts | None:
    """Place gang g's pods on `free` (updated in place) best-fit, at most `most` of them (default: all), adding
    to `counts` (pods already placed: the gang's extras). Returns the counts, or None (and `free` untouched)
    when fewer than the gang's need fit. `later`: `free` is capacity at a later time, which may exceed what is
    free now, so every eligible node is considered."""
    gang = problem.gangs[g]
    already = dict(counts or {})
    counts = dict(already)
    used_nodes = np.zeros(len(problem.nodes), dtype=bool)
    used_nodes[[n for (_p, n) in counts]] = True
    placed = sum(counts.values())
    most = sum(len(part.pods) for part in problem.parts[g]) if most is None else most
    # With shares pending, the rows of the nodes taken from, as they were (a gang that does not fit gives them
    # back whole: which GPU a share took is not undone by arithmetic).
    kept: dict[int, np.ndarray] | None = {} if problem.shared else None
    # Higher-priority parts first, so the gang's most important members get the room.
    parts = sorted(enumerate(problem.parts[g]), key=lambda ip: (-ip[1].pods[0].priority, ip[0]))
    for p, part in parts:
        left = min(len(part.pods) - sum(k for (q, _n), k in counts.items() if q == p), most - placed)
        # Only nodes that hold such a pod with nothing else placed can (free only shrinks from there).
        scored = None
        if allowed is None:
            rows = np.flatnonzero(problem.eligible[part.cls]) if later else problem.fitting(part.cls)
            scored = (
                None if later or problem.shared or not _keeps_scores(problem) else _scored(problem, part.cls, scorer)
            )
        else:
            rows = allowed[problem.eligible[part.cls, allowed] if later else problem.fit[part.cls, allowed] > 0]
        batches: Iterable[Batch] = _batches(problem, part.cls, free, rows, scorer, used_nodes, scored)
        if len(problem.parts[g]) == 1:  # counted in full first: a gang that cannot reach its need scores nothing
            batches = list(batches)
            if placed + min(left, sum(int(fit.sum()) for _rows, fit, _score in batches)) < max(gang.need, 1):
                break  # one pod class: every node takes what it holds, so this is all that can be placed
        for batch, fit, score in batches if left else ():
            if not len(batch):
                continue
            took = _fill(problem, part.cls, free, batch, fit, scorer, used_nodes, left, score, kept)
            for n, k in took:
                counts[(p, n)] = counts.get((p, n), 0) + k
                placed += k
                left -= k
            if left == 0:
                break  # before the next batch is counted
    if placed < max(gang.need, 1):
        if kept is not None:
            for n, row in kept.items():
                free[n] = row
            return None
        for (p, n), k in counts.items():
            free[n] += problem.demand[problem.parts[g][p].cls] * (k - already.get((p, n), 0))
        return None
    return counts


# A batch of `_batches`: nodes, how many pods of the class each holds, and their scores if known (else None).
Batch = tuple[np.ndarray, np.ndarray, np.ndarray | None]


def _batches(
    problem: Problem,
    cls: int,
    free: np.ndarray,
    rows: np.ndarray,
    scorer: Scorer,
    used_nodes: np.ndarray,
    scored: Scored | None = None,
) -> Iterator[Batch]:
    """The nodes of `rows` that hold a pod of class `cls`, and how many each holds, in batches, each node of a
    batch scoring better than every node of the batches after it: the nodes the gang uses already, then for a
    GPU pod the nodes with the fewest free GPUs (node_scores, whose GPU terms outweigh the rest), for a pod
    without GPUs the nodes without GPUs (the scorers that keep such pods off GPU nodes), then the others. A
    gang filled by the first batches never scores the rest, on a large cluster most nodes; a pod without GPUs
    does not even count what the GPU nodes hold, which filling a batch does not change (the batches share no
    node). `scored`: what the nodes of `rows` (the class's `fitting` nodes) hold and score, kept up to date here
    instead of counted and scored anew."""
    if scorer in _OFF_GPUS_FIRST and not problem.shared and problem.gpu_demand[cls] == 0:
        used, off = used_nodes[rows], problem.gpu_allocatable[rows] == 0
        groups = (used, ~used & off, ~used & ~off)
        if scored is None:
            for group in groups:
                yield (*_holding(problem, cls, free, rows[group]), None)
            return
        scored.refresh(problem, free)
        holds = scored.fit > 0
        for group in groups:
            at = np.flatnonzero(group & holds)
            yield rows[at], scored.fit[at], scored.score[at]
        return
    score: np.ndarray | None = None
    if scored is None:
        rows, fit = _holding(problem, cls, free, rows)
    else:
        scored.refresh(problem, free)
        at = np.flatnonzero(scored.fit > 0)
        rows, fit, score = rows[at], scored.fit[at], scored.score[at]
    gpu_first = scorer is node_scores and not problem.shared and len(problem.resources) < GPU_WEIGHT
    if not gpu_first and not used_nodes.any():  # a gang's first pods: one batch
        yield rows, fit, score
        return
    used = used_nodes[rows]
    first, rest = np.flatnonzero(used), np.flatnonzero(~used)
    if not gpu_first or not len(rest):
        batches = [first, rest]
    else:
        gpus = free[rows[rest]][:, problem.gpu_columns].sum(axis=1)  # every node of `rows` holds the pod's GPUs
        fewest = gpus == gpus.min()
        batches = [first, rest[fewest], rest[~fewest]]
    for batch in batches:
        yield rows[batch], fit[batch], None if score is None else score[batch]


# Scorers whose penalty for a GPU node outweighs the rest of the score of a pod without GPUs.
_OFF_GPUS_FIRST = (node_scores, most_allocated_off_gpus)


def _holding(problem: Problem, cls: int, free: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The nodes of `rows` that hold a pod of class `cls` now, and how many each holds (a node that holds none
    now never will in this walk: only the rest are scored)."""
    rows = problem.candidates(cls, free, rows)
    fit = problem.fits(cls, free, rows)
    return rows[fit > 0], fit[fit > 0]


class Scored:
    """For one pod class and scorer, over the nodes that hold such a pod at the cycle's start (`fitting`): how
    many each holds and its score, as of the free capacity last seen on it. A walk changes a few nodes a gang,
    and scoring every node for every gang made the walk grow as gangs x nodes (2.7 ms a gang at 16,384 nodes):
    `refresh` compares the nodes' rows with those last seen and counts and scores again only the changed ones.
    The same numbers as counting and scoring anew: a node's count and score read its own row only."""

    def __init__(self, problem: Problem, cls: int, scorer: Scorer) -> None:
        # (not the problem itself, which keeps this: a cycle of references would outlive the cycle's arrays)
        self.cls, self.scorer = cls, scorer
        self.rows = problem.fitting(cls)
        self.seen: np.ndarray | None = None
        self.fit = np.zeros(0, dtype=np.int64)
        self.score = np.zeros(0)

    def refresh(self, problem: Problem, free: np.ndarray) -> None:
        rows = self.rows
        now = free.take(rows, axis=0)
        if self.seen is None:
            changed: Rows = slice(None)
        else:
            # (the differing cells of both flattened, then their rows: reducing along rows of a few columns is slow)
            changed = np.unique(np.flatnonzero(now.ravel() != self.seen.ravel()) // now.shape[1])
            if not len(changed):
                return
        fit = problem.fits(self.cls, free, rows_of(rows, changed))
        score = self.scorer(problem, self.cls, free, rows_of(rows, changed))
        if self.seen is None:
            self.fit, self.score, self.seen = fit, score, now
        else:
            self.fit[changed], self.score[changed], self.seen[changed] = fit, score, now[changed]


SCORED_KEPT = 8  # classes a cycle keeps `Scored` for at once (each holds a copy of its nodes' free rows)


def _keeps_scores(problem: Problem) -> bool:
    """Whether the walk keeps its scores: only where every pod class fits in what it keeps. Gangs of many
    classes take turns, each class seldom twice in a row, and a class kept and dropped again costs more than
    scoring it anew (the synthetic mix at 16,384 nodes: its walk 3.1-3.5 s, keeping every class 4.2-4.6 s)."""
    return len(problem.class_pods) <= SCORED_KEPT


def _scored(problem: Problem, cls: int, scorer: Scorer) -> Scored:
    """The cycle's `Scored` for this class and scorer: the last SCORED_KEPT used are kept."""
    kept = problem.scored
    key = (cls, scorer)
    found = kept.pop(key, None)
    if not isinstance(found, Scored):
        found = Scored(problem, cls, scorer)
    kept[key] = found  # the most recently used last
    while len(kept) > SCORED_KEPT:
        del kept[next(iter(kept))]
    return found


def _fill(
    problem: Problem,
    cls: int,
    free: np.ndarray,
    rows: np.ndarray,
    fit: np.ndarray,
    scorer: Scorer,
    used_nodes: np.ndarray,
    left: int,
    scores: np.ndarray | None = None,
    kept: dict[int, np.ndarray] | None = None,
) -> list[tuple[int, int]]:
    """Up to `left` pods of class `cls` onto `rows` (which hold `fit` each), each to the best-scoring node
    that holds it (nodes the gang uses first); `free` and `used_nodes` updated. Returns (node, pods) in the
    order taken. `scores`: the nodes' scores, if known. `kept`: each node's row before its first take here
    (with shares pending), for the gang to give back."""
    # Scores once; afterwards only the node just filled changes.
    base = scorer(problem, cls, free, rows) if scores is None else scores
    score = base - _USED * used_nodes[rows]
    if not problem.shared:
        # A node takes all the pods it holds (or all that are left), so a filled node holds none after and no
        # other node's score changes: the nodes in score order, each up to its fit, until `left` are placed.
        # At most `left` nodes are taken: sort only the scores up to the left-th lowest, and of the nodes tied
        # at it only the first `left` (ties as argmin breaks them: the first node; identical nodes all tie).
        order = np.arange(len(score))
        if left < len(score):
            kth = np.partition(score, left - 1)[left - 1]
            order = np.concatenate([np.flatnonzero(score < kth), np.flatnonzero(score == kth)[:left]])
        order = order[np.argsort(score[order], kind="stable")]
        fits = fit[order]
        before = np.cumsum(fits) - fits
        chosen = order[: int(np.searchsorted(before, left))]
        nodes, ks = rows[chosen], np.minimum(fits[: len(chosen)], left - before[: len(chosen)])
        free[nodes] -= ks[:, None] * problem.demand[cls]
        used_nodes[nodes] = True
        return list(zip(nodes.tolist(), ks.tolist(), strict=True))
    took = []
    while left > 0:
        i = int(np.argmin(score))
        if score[i] == np.inf:
            break
        n = int(rows[i])
        k = int(min(left, fit[i]))
        if kept is not None and n not in kept:
            kept[n] = free[n].copy()
        problem.take(cls, free, n, k)
        took.append((n, k))
        used_nodes[n] = True
        left -= k
        if left == 0:
            break  # no node needs scoring again
        row = slice(n, n + 1)  # a view: much cheaper than indexing with [n]
        fit[i] = problem.fits(cls, free, rows=row)[0]
        score[i] = scorer(problem, cls, free, rows=row)[0] - _USED if fit[i] > 0 else np.inf
    return took


def place_colocated(
    problem: Problem,
    g: int,
    free: np.ndarray,
    max_tries: int = 64,
    scorer: Scorer = node_scores,
    most: int | None = None,
    later: bool = False,
    gather: bool = False,
    rooms: DomainRooms | None = None,
) -> GangCounts | None:
    """A gang with topology levels: one value of its required level's label (the tightest domains that could
    hold it tried first; `gather`: those where it fits in one domain of its narrowest preferred level before
    them), and within it as few domains of each preferred level as hold it (`place_in_levels`). `later` as for
    place_gang; `rooms`: the walk's per-domain room, kept as `free` changes (None: summed here)."""
    gang = problem.gangs[g]
    if not gang.colocate:
        return place_in_levels(problem, g, free, None, gang.preferred, scorer, most, later)
    fixed = problem.members_domain(g)
    if fixed is not None:
        if fixed < 0:
            return None  # bound members already disagree: nothing pending can repair that
        candidates = [fixed]
    else:
        # A domain must at least hold `need` of the gang's smallest pods.
        smallest = np.min([problem.demand[part.cls] for part in problem.parts[g]], axis=0) * max(1, gang.need)
        # Per domain, the free capacity and the number of its nodes the gang may use.
        room, size = (rooms or DomainRooms(problem)).of(g, free)
        ok = np.flatnonzero(np.all(room >= smallest, axis=1))
        # Tightest first: fewest GPUs left over, then the smallest domain; gathering, the domains where one of
        # the gang's narrowest preferred domains holds it whole before those (Volcano tries its lowest tier first).
        split = np.zeros(len(ok), dtype=bool)
        if gather and gang.preferred:
            split = ~_one_preferred_holds(problem, g, free, gang.colocate, gang.preferred[-1], ok, most)
        order = np.lexsort((ok, size[ok], room[ok] @ problem.gpus, split))
        candidates = [int(d) for d in ok[order][:max_tries]]
    members = problem.members(gang.colocate)
    for d in candidates:
        counts = place_in_levels(problem, g, free, members[d], gang.preferred, scorer, most, later)
        if counts is not None:
            return counts
    return None


@dataclass
class _Rooms:
    """One label and set of usable nodes in `DomainRooms`: each grouped node's share (free, clipped at 0, if
    usable), their sums per domain, how many usable nodes each domain has, and how many changes they have seen."""

    share: np.ndarray
    room: np.ndarray
    size: np.ndarray
    seen: int


class DomainRooms:
    """Per domain of a co-located gang's required label, the free capacity of the nodes it may use. A walk
    (`greedy`) keeps them, per label and set of pod classes, as of its `changed` nodes, so that each co-located
    gang does not sum every node again (2,000 such gangs at 65,536 nodes: 3 s). Without `changed`, summed anew
    on each call. Sums of integers, so the same as summing anew."""

    def __init__(self, problem: Problem, changed: list[int] | None = None) -> None:
        self.problem, self.changed = problem, changed
        self.kept: dict[tuple[str, tuple[int, ...]], _Rooms] = {}

    def clear(self) -> None:
        self.kept.clear()

    def of(self, g: int, free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Gang g's room per domain of its required label (nodes x resources summed), and its usable nodes there."""
        problem = self.problem
        key = problem.gangs[g].colocate or ""
        classes = tuple(sorted({part.cls for part in problem.parts[g]}))
        nodes, starts = problem.grouped(key)
        changed = self.changed if self.changed is not None else []
        kept = self.kept.get((key, classes))
        if kept is None:
            usable = eligible_to_any(problem.eligible, classes, nodes)
            share = np.maximum(free.take(nodes, axis=0), 0) * usable[:, None]
            kept = _Rooms(share, np.add.reduceat(share, starts), np.add.reduceat(usable, starts), len(changed))
            if self.changed is not None:
                self.kept[(key, classes)] = kept
        elif kept.seen < len(changed):
            nodes_changed = np.unique(changed[kept.seen :])
            kept.seen = len(changed)
            where = problem.grouped_position(key)[nodes_changed]
            where = where[where >= 0]  # the changed nodes that carry the label
            if len(where):
                usable = eligible_to_any(problem.eligible, classes, nodes[where])
                share = np.maximum(free.take(nodes[where], axis=0), 0) * usable[:, None]
                domain = np.searchsorted(starts, where, side="right") - 1
                np.add.at(kept.room, domain, share - kept.share[where])
                kept.share[where] = share
        return kept.room, kept.size


def _one_preferred_holds(
    problem: Problem, g: int, free: np.ndarray, required: str, preferred: str, within: np.ndarray, most: int | None
) -> np.ndarray:
    """Per domain of `required` in `within`: whether one domain of `preferred` inside it holds gang g (or
    `most` of its pods), counted in pods of its largest part, as `fewest_domains` counts."""
    parts = problem.parts[g]
    want = sum(len(part.pods) for part in parts) if most is None else min(most, sum(len(p.pods) for p in parts))
    main = max(parts, key=lambda part: len(part.pods)).cls
    node_pair, outer_of = problem.nested(required, preferred)
    labelled = node_pair >= 0
    room = np.bincount(node_pair[labelled], weights=problem.fits(main, free)[labelled], minlength=len(outer_of))
    holds = np.zeros(int(problem.domains(required).max(initial=-1)) + 1, dtype=bool)
    holds[outer_of[room >= want]] = True
    held: np.ndarray = holds[within]
    return held


def place_in_levels(
    problem: Problem,
    g: int,
    free: np.ndarray,
    allowed: np.ndarray | None,
    levels: tuple[str, ...],
    scorer: Scorer = node_scores,
    most: int | None = None,
    later: bool = False,
) -> GangCounts | None:
    """Place gang g on `allowed` nodes (ascending indices; None: every node) in as few domains of each
    preferred level as hold it, level by level from the widest (`fewest_domains`); a level whose chosen domains
    do not hold the gang after all (its other pod classes) is given up, as a preference may be."""
    if levels:
        narrowed = fewest_domains(problem, g, free, allowed, levels[0], most)
        if narrowed is not None:
            counts = place_in_levels(problem, g, free, narrowed, levels[1:], scorer, most, later)
            if counts is not None:
                return counts
    return place_gang(problem, g, free, allowed=allowed, scorer=scorer, most=most, later=later)


def fewest_domains(
    problem: Problem, g: int, free: np.ndarray, allowed: np.ndarray | None, key: str, most: int | None = None
) -> np.ndarray | None:
    """The nodes of the fewest domains of label `key` (among `allowed`) that hold gang g, chosen as Kueue's
    topology-aware scheduling does (BestFit): the tightest single domain that holds the whole gang; else the
    roomiest domains until they hold it, the last one swapped for the tightest that holds the rest. Room is
    counted in pods of the gang's largest part; a node without the label is a domain of its own. None when
    even all of them do not hold it."""
    parts = problem.parts[g]
    want = sum(len(part.pods) for part in parts) if most is None else min(most, sum(len(p.pods) for p in parts))
    main = max(parts, key=lambda part: len(part.pods)).cls
    nodes = np.arange(len(problem.nodes)) if allowed is None else allowed
    slots = problem.fits(main, free, nodes)
    domain = problem.domains(key)
    ids = domain[nodes]
    ids = np.where(ids >= 0, ids, int(domain.max(initial=-1)) + 1 + np.arange(len(nodes)))
    room = np.bincount(ids, weights=slots)
    if room.sum() < want:
        return None
    holding = np.flatnonzero(room >= want)
    if len(holding):
        chosen = [int(holding[np.argmin(room[holding])])]
    else:
        chosen, left = [], want
        for d in np.argsort(-room, kind="stable").tolist():
            if left <= 0:
                break
            chosen.append(d)
            left -= room[d]
        rest = want - room[chosen[:-1]].sum()
        spare = np.flatnonzero(room >= rest)
        spare = spare[~np.isin(spare, chosen[:-1])]
        chosen[-1] = int(spare[np.argmin(room[spare])])
    return nodes[np.isin(ids, chosen)]


def greedy(
    problem: Problem,
    order: list[int] | None = None,
    scorer: Scorer = node_scores,
    minimum_first: bool = False,
    placed: Counts | None = None,
    limits: Limits | None = None,
    free: np.ndarray | None = None,
    gather: bool = False,
    until: float = math.inf,
) -> Counts:
    """Allocate gangs one at a time (in queue order unless told otherwise), each pod to the node `scorer`
    likes best; a gang that cannot reach its minimum takes nothing. `minimum_first`: every gang gets only its
    minimum, and the pods past it (of elastic gangs) are placed after all gangs had their turn, so that they
    do not take the room another gang needs to start. `placed`: gangs already placed, kept as they are. No
    queue takes more than its capability. `limits`: each gang keeps within the capacity reservations hold for
    later (planning.py). `free`: the capacity to fill, updated in place (default: a copy of the cycle's).
    `gather`: co-located gangs prefer the required domains where one preferred domain holds them
    (`place_colocated`). `until`: the clock reading (time.perf_counter) past which the walk is abandoned
    (OutOfTime), so that a pass slower than foreseen does not overrun the cycle."""
    free = problem.free.copy() if free is None else free
    result: Counts = {g: dict(c) for g, c in (placed or {}).items()}
    for g, gang_counts in result.items():
        for (p, n), k in gang_counts.items():
            problem.take(problem.parts[g][p].cls, free, n, k)
        if limits is not None:
            limits.take(g, gang_counts)
    caps = QueueCaps(problem, placed=result)
    order = queue_order(problem) if order is None else order
    # Gangs of one pod class (and how many they need) that found too little room on `free` itself, no queue cap
    # or reservation in the way: free only shrinks as the walk goes on, so every later such gang finds too little
    # too (a quarter of OpenB's pods at 130%), and what holds it back besides only leaves it less.
    short: set[tuple[int, int]] = set()
    walk = OnePodWalk(problem, scorer)
    for g in order:
        if time.perf_counter() > until:
            raise OutOfTime
        gang = problem.gangs[g]
        if not gang.pods or g in result or not caps.may_start(g):
            continue
        shape = _shape(problem, g)
        if shape in short:
            counts = None
        elif walk.takes(g, limits):
            counts = walk.place(g, free, caps, limits)
        else:
            most = max(gang.need, 1) if minimum_first else None
            counts = place_within(problem, g, free, limits, scorer, most, caps=caps, gather=gather, rooms=walk.rooms)
            walk.changes(counts, capped=bool(caps.rows(g)))
        if counts is not None:
            result[g] = counts
            continue
        if shape is not None and not caps.rows(g) and (limits is None or not limits.holds_back(g)):
            short.add(shape)
        if limits is not None:
            limits.blocked(g, free)
    if minimum_first:
        add_extras(problem, result, free, order, scorer, caps, limits)
    return result


# Scorers whose score of a node reads that node's row only (`OnePodWalk` keeps them).
_ROW_LOCAL = (node_scores, most_allocated, most_allocated_off_gpus)


@dataclass
class _Kept:
    """A pod class in a `OnePodWalk`: its `fitting` nodes, what each holds, their scores (None: scored anew
    for each pod) and how many of the walk's changes they have seen."""

    rows: np.ndarray
    fit: np.ndarray
    score: np.ndarray | None
    seen: int


class OnePodWalk:
    """A walk's gangs of one pod placed without the gang machinery: the pod takes the best-scoring node that
    holds it, as place_within would place it (a property test holds them alike). Per pod class, how many pods
    each node holds (and its score, for scorers that read the node's row only) is kept as of the free capacity
    last seen there and counted again only on the nodes the walk has changed since (`changed`): counting every
    node for every gang made OpenB's 10,944 pods at 130% a 2.9 s walk."""

    def __init__(self, problem: Problem, scorer: Scorer) -> None:
        self.problem, self.scorer = problem, scorer
        self.changed: list[int] = []  # the nodes whose free capacity the walk changed, in order
        self.kept: dict[int, _Kept] = {}  # per pod class
        self.rooms = DomainRooms(problem, self.changed)  # co-located gangs' domains, kept the same way

    def takes(self, g: int, limits: Limits | None) -> bool:
        """Whether gang g is one pod this walk places itself (no reservation holding it back)."""
        gang, parts = self.problem.gangs[g], self.problem.parts[g]
        alone = len(parts) == 1 and len(parts[0].pods) == 1 and gang.need <= 1 and not gang.topology
        return alone and (limits is None or not limits.holds_back(g))

    def changes(self, counts: GangCounts | None, capped: bool) -> None:
        """A gang placed by other means: the nodes it took. One that took room and was turned away by its queue's
        cap had it given back by arithmetic, which leaves shares' GPUs as they were not: counted anew."""
        if counts is not None:
            self.changed.extend(n for (_p, n) in counts)
        elif capped:
            self.kept.clear()
            self.rooms.clear()

    def place(self, g: int, free: np.ndarray, caps: QueueCaps, limits: Limits | None) -> GangCounts | None:
        problem = self.problem
        cls = problem.parts[g][0].cls
        kept = self._kept(cls, free)
        holding = np.flatnonzero(kept.fit > 0)
        if not len(holding):
            return None
        rows = kept.rows[holding]
        scores = kept.score[holding] if kept.score is not None else self.scorer(problem, cls, free, rows)
        n = int(rows[int(np.argmin(scores))])  # ties to the first node, as _fill breaks them
        problem.take(cls, free, n, 1)
        self.changed.append(n)
        found = caps.admit(g, {(0, n): 1}, free)
        if found is not None and limits is not None:
            limits.take(g, found)
        return found

    def _kept(self, cls: int, free: np.ndarray) -> _Kept:
        problem, scorer = self.problem, self.scorer
        kept = self.kept.get(cls)
        if kept is None:
            rows = problem.fitting(cls)
            score = scorer(problem, cls, free, rows) if scorer in _ROW_LOCAL else None
            kept = self.kept[cls] = _Kept(rows, problem.fits(cls, free, rows), score, len(self.changed))
        if kept.seen < len(self.changed) and len(kept.rows):
            nodes = np.unique(self.changed[kept.seen :])
            kept.seen = len(self.changed)
            at = np.minimum(np.searchsorted(kept.rows, nodes), len(kept.rows) - 1)
            at = at[kept.rows[at] == nodes]  # the changed nodes among the class's
            if len(at):
                kept.fit[at] = problem.fits(cls, free, kept.rows[at])
                if kept.score is not None:
                    kept.score[at] = scorer(problem, cls, free, kept.rows[at])
        return kept


class OutOfTime(Exception):
    """A walk passed its `until`."""


def _shape(problem: Problem, g: int) -> tuple[int, int] | None:
    """Gang g's pod class and the pods it needs, if it has one class and is placed node by node (whether it
    fits then depends on its nodes' free capacity only)."""
    gang, parts = problem.gangs[g], problem.parts[g]
    return (parts[0].cls, max(gang.need, 1)) if len(parts) == 1 and not gang.topology else None


def place_within(
    problem: Problem,
    g: int,
    free: np.ndarray,
    limits: Limits | None,
    scorer: Scorer = node_scores,
    most: int | None = None,
    counts: GangCounts | None = None,
    allowed: np.ndarray | None = None,
    caps: QueueCaps | None = None,
    gather: bool = False,
    rooms: DomainRooms | None = None,
) -> GangCounts | None:
    """Gang g placed on `free` (updated in place) as place_gang or place_colocated place it, within what
    `limits` leaves it (the reservations) and what `caps` leaves its queue (pods past the minimum its cap
    does not allow are taken off again); `counts`: pods of the gang already placed, to add extras to (on
    `allowed` nodes); `rooms`: the walk's domain rooms as of `free` (used only where `free` itself is filled)."""
    room = free if limits is None else limits.room_for(g, free)
    if counts is None and problem.gangs[g].topology:
        kept = rooms if room is free else None
        found = place_colocated(problem, g, room, scorer=scorer, most=most, gather=gather, rooms=kept)
    else:
        found = place_gang(problem, g, room, allowed=allowed, scorer=scorer, most=most, counts=counts)
    if found is None:
        return None
    if room is not free:  # placed on a copy: take it from `free` too
        for (p, n), k in _added(found, counts).items():
            problem.take(problem.parts[g][p].cls, free, n, k)
    if caps is not None:
        found = caps.admit(g, found, free, keep=counts)  # what it takes off goes back to `free`
    if found is not None and limits is not None:
        limits.take(g, _added(found, counts))
    return found


def _added(found: GangCounts, counts: GangCounts | None) -> GangCounts:
    """The pods of `found` not already in `counts`."""
    added = {key: k - (counts or {}).get(key, 0) for key, k in found.items()}
    return {key: k for key, k in added.items() if k}


def add_extras(
    problem: Problem,
    counts: Counts,
    free: np.ndarray,
    order: list[int],
    scorer: Scorer,
    caps: QueueCaps,
    limits: Limits | None = None,
) -> None:
    """Pods past their gang's minimum, gang by gang in `order`, where they fit (co-located gangs in their
    domain), their queue's cap (`caps`, which holds `counts`) allows, and within `limits`."""
    for g in order:
        if g not in counts or sum(counts[g].values()) == len(problem.gangs[g].pods):
            continue
        allowed = None
        key = problem.gangs[g].colocate
        if key:
            allowed = problem.members(key)[problem.domains(key)[next(iter(counts[g]))[1]]]
        extended = place_within(problem, g, free, limits, scorer, counts=counts[g], allowed=allowed, caps=caps)
        if extended is not None:
            counts[g] = extended
