"""Large-neighbourhood search: improve a complete placement one neighbourhood at a time (ruin and recreate).

A step picks a pending gang at a level not yet at its bound, takes off the gangs on some nodes that could hold
it (and on some roomy nodes where those gangs could go instead), and places them again greedily together with
the target and a few other pending gangs: gangs of higher levels first, then the target, then the rest
smallest first (shuffled a little), each gang at its minimum before any gang's extra pods. The step is kept
when the placement is better in (gangs placed per level, highest first, then GPUs, then resources placed), or
as good and no more scattered over nodes, so the search moves on plateaus. Every gang placed again keeps within
its queue's cap and, with reservations (planning.py), within their limits, as in the greedy passes. With GPU
shares pending, each GPU keeps its room (pods leaving a node give it back: shares.restore), the gangs go back
oldest first and a step may not lower the GPUs placed.

Every choice comes from a generator seeded per cycle and nothing reads the clock, so the steps do not depend
on the time limit: a longer search passes through the placement a shorter one ends on, and since no step makes
the placement worse, more time never gives a worse answer.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from gangsolve.solver import score, shares
from gangsolve.solver.caps import QueueCaps
from gangsolve.solver.cpsat import possible_gangs
from gangsolve.solver.greedy import (
    Scorer,
    add_extras,
    desc,
    most_allocated_off_gpus,
    node_scores,
    place_within,
)
from gangsolve.solver.limits import Limits
from gangsolve.solver.model import GPU, Level
from gangsolve.solver.problem import Counts, Problem

SCORERS: tuple[Scorer, ...] = (node_scores, most_allocated_off_gpus)


@dataclass(frozen=True)
class Step:
    """One neighbourhood: its target gang, the gangs it placed again, whether the placement got strictly better."""

    target: int
    gangs: int
    improved: bool


class Search:
    """The placement being improved (`counts`), the capacity it uses (`used`) and, with reservations, what their
    limits still leave (`limits`, fresh: the search takes `counts` into them)."""

    def __init__(
        self,
        problem: Problem,
        counts: Counts,
        seed: int = 0,
        nodes: int = 16,
        extra: int = 6,
        limits: Limits | None = None,
    ) -> None:
        self.problem = problem
        self.counts: Counts = {g: dict(c) for g, c in counts.items()}
        self.limits = limits
        if limits is not None:
            for g, gang_counts in self.counts.items():
                limits.take(g, gang_counts)
        self.rng = np.random.default_rng(seed)
        self.levels = problem.gang_priority_levels()
        self.scale = score.gpu_scale(problem)
        self.possible = possible_gangs(problem)
        self.empty = score.empty_gpu_nodes(problem)
        self.used = np.zeros_like(problem.free)
        self.on: dict[int, set[int]] = defaultdict(set)  # node -> the gangs of `counts` with pods there
        self.caps = QueueCaps(problem)  # what each queue may still take under its cap, given `counts`
        for g, gang_counts in self.counts.items():
            self._use(g, gang_counts, 1)
        # What is free given `counts`; with shares pending, GPU by GPU (a node's GPUs packed again whenever a
        # step takes pods off it), so that the steps place only what the devices hold.
        self.free = problem.free - self.used
        if problem.shared:
            self._restore(self.free, [n for n, gangs in self.on.items() if gangs], set(), fallback=None)
        self.nodes = nodes  # nodes freed around the target, and roomy nodes offered to the gangs taken off
        self.extra = extra  # other pending gangs offered to a neighbourhood
        # A gang's size: the GPUs its minimum needs, then its share of the free capacity (as smallest_first_order).
        share = (problem.floor / np.maximum(problem.free.sum(axis=0), 1)).sum(axis=1)
        self.size = problem.floor @ problem.gpus + share
        # Gangs and GPUs placed beyond the starting placement: the search buys no gang with more idle GPUs
        # than a gang of it takes (score.pays), over all its steps together.
        self.rate = score.gpus_per_gang(problem, self.counts)
        self.gained = (0, 0)
        self.steps = 0
        self.improvements = 0
        self._reach: dict[int, np.ndarray] = {}

    def _use(self, g: int, gang_counts: dict[tuple[int, int], int], sign: int) -> None:
        for (p, n), k in gang_counts.items():
            self.used[n] += sign * k * self.problem.demand[self.problem.parts[g][p].cls]
            if sign > 0:
                self.on[n].add(g)
            else:
                self.on[n].discard(g)
        self.caps.charge(g, gang_counts, sign)

    def _restore(self, free: np.ndarray, nodes: list[int], off: set[int], fallback: np.ndarray | None) -> None:
        """The GPUs of `nodes` in `free` as the pods of `counts` there, less those of the gangs `off`, leave
        them. Where those pods do not pack again, the node's GPUs stay as in `fallback` (nothing given back; with
        no fallback, nothing left)."""
        problem = self.problem
        gpu = problem.res_index[GPU]
        for n in nodes:
            placed = [
                (problem.parts[g][p].cls, k)
                for g in sorted(self.on[n] - off)
                for (p, m), k in self.counts[g].items()
                if m == n
            ]
            if shares.restore(problem, free, n, placed):
                continue
            if fallback is None:
                free[n, problem.devices] = 0
                free[n, gpu] = min(free[n, gpu], 0)
            else:
                free[n, problem.devices], free[n, gpu] = fallback[n, problem.devices], fallback[n, gpu]

    def reach(self, g: int) -> np.ndarray:
        """Nodes that could hold some pod of gang g if nothing else were placed."""
        if g not in self._reach:
            mask = np.zeros(len(self.problem.nodes), dtype=bool)
            for part in self.problem.parts[g]:
                mask |= self.problem.fit[part.cls] > 0
            self._reach[g] = mask
        return self._reach[g]

    def rank(self, counts: Counts) -> tuple[int, ...]:
        """(gangs placed per level, highest first; resources placed) of the gangs in `counts`."""
        problem = self.problem
        per_level = dict.fromkeys(self.levels, 0)
        for g in counts:
            if score.counted(problem, g):
                per_level[problem.gangs[g].level] += 1
        return (*per_level.values(), score.gpus(problem, counts), score.resources(problem, counts, self.scale))

    # --- choosing a neighbourhood ---------------------------------------------------------------------------

    def pending(self, open_levels: set[Level]) -> list[int]:
        return [g for g in self.possible if g not in self.counts and self.problem.gangs[g].level in open_levels]

    def _pick(self, gangs: list[int]) -> int:
        """A pending gang, higher levels likelier (each level half as likely as the one above)."""
        rank = {level: i for i, level in enumerate(self.levels)}
        weights = np.array([0.5 ** rank[self.problem.gangs[g].level] for g in gangs])
        return gangs[int(self.rng.choice(len(gangs), p=weights / weights.sum()))]

    def _around(self, target: int) -> np.ndarray:
        """Nodes to free for the target: for a co-located gang one label domain that could hold it; otherwise
        `size` nodes that could take its pods, the ones holding more of them likelier."""
        problem = self.problem
        gang = problem.gangs[target]
        reach = self.reach(target)
        if gang.colocate:
            domain = problem.domains(gang.colocate)
            ids = problem.domains_holding(target, reach)
            if len(ids) == 0:
                return np.zeros(0, dtype=np.int64)
            return np.flatnonzero((domain == ids[int(self.rng.integers(len(ids)))]) & reach)
        nodes = np.flatnonzero(reach)
        if len(nodes) <= self.nodes:
            return nodes
        holds = np.zeros(len(nodes))
        for part in problem.parts[target]:
            holds += np.minimum(problem.fit[part.cls, nodes], len(part.pods))
        chosen = self.rng.choice(len(nodes), size=self.nodes, replace=False, p=holds / holds.sum())
        return np.sort(nodes[chosen])

    def _roomy(self, gangs: list[int], taken: np.ndarray) -> np.ndarray:
        """Up to `size` other nodes with free room for pods of `gangs`, the roomier likelier: where the gangs
        taken off can go instead."""
        problem = self.problem
        reach = np.zeros(len(problem.nodes), dtype=bool)
        for g in gangs:
            reach |= self.reach(g)
        nodes = np.flatnonzero(reach & ~taken)
        if len(nodes) == 0:
            return nodes
        free = self.free[nodes]
        room = np.zeros(len(nodes))
        for cls in sorted({part.cls for g in gangs for part in problem.parts[g]}):
            need = problem.demand[cls]
            used = need > 0
            fits = np.min(np.maximum(free[:, used], 0) // need[used], axis=1)
            room += np.where(problem.eligible[cls, nodes], fits, 0)
        nodes, room = nodes[room > 0], room[room > 0]
        if len(nodes) <= self.nodes:
            return nodes
        return nodes[self.rng.choice(len(nodes), size=self.nodes, replace=False, p=room / room.sum())]

    def neighbourhood(self, target: int) -> list[int]:
        """The gangs a step places again: those on the nodes freed for the target, the target, and a few other
        pending gangs that reach those nodes."""
        problem = self.problem
        on = np.zeros(len(problem.nodes), dtype=bool)
        on[self._around(target)] = True
        taken = [g for g, c in self.counts.items() if any(on[n] for (_p, n) in c)]
        for g in taken:
            for _p, n in self.counts[g]:
                on[n] = True
        on[self._roomy(taken, on)] = True
        others = [g for g in self.possible if g not in self.counts and g != target and bool((self.reach(g) & on).any())]
        if len(others) > self.extra:
            others = [others[i] for i in sorted(self.rng.choice(len(others), size=self.extra, replace=False).tolist())]
        return sorted({*taken, target, *others})

    # --- one step -------------------------------------------------------------------------------------------

    def step(self, open_levels: set[Level], drift: bool = True) -> Step | None:
        """Ruin and recreate around a pending gang of `open_levels`; None when there is none. `drift`: keep
        steps that are only as good (and no more scattered), to move on plateaus."""
        pending = self.pending(open_levels)
        if not pending:
            return None
        problem = self.problem
        target = self._pick(pending)
        gangs = self.neighbourhood(target)
        before = {g: self.counts[g] for g in gangs if g in self.counts}
        free = self.free.copy()
        caps = QueueCaps(problem, left=self.caps.left)
        limits = None if self.limits is None else self.limits.copy()
        for g, gang_counts in before.items():
            for (p, n), k in gang_counts.items():
                free[n] += k * problem.demand[problem.parts[g][p].cls]
            caps.charge(g, gang_counts, -1)
            if limits is not None:
                limits.take(g, gang_counts, -1)
        if problem.shared and before:
            touched = sorted({n for gang_counts in before.values() for (_p, n) in gang_counts})
            self._restore(free, touched, set(before), fallback=self.free)
        # Smallest first (a knapsack's rule for the most gangs), shuffled a little so that steps differ. Where
        # shares are pending, oldest first: small shares first open the GPUs that larger ones then miss.
        size = self.size[gangs] * (0.75 + 0.5 * self.rng.random(len(gangs)))
        then = [float(problem.gangs[g].order) for g in gangs] if problem.shared else size
        order = [
            gangs[i]
            for i in sorted(
                range(len(gangs)),
                key=lambda i: (desc(problem.gangs[gangs[i]].level), gangs[i] != target, then[i]),
            )
        ]
        scorer = SCORERS[int(self.rng.integers(len(SCORERS)))]
        after: Counts = {}
        for g in order:
            if not caps.may_start(g):
                continue
            placed = place_within(problem, g, free, limits, scorer, most=max(problem.gangs[g].need, 1), caps=caps)
            if placed is not None:
                after[g] = placed
        add_extras(problem, after, free, order, scorer, caps, limits)
        new, old = self.rank(after), self.rank(before)
        # Starving gangs are served first come first served (every hint places them first, oldest first), as the
        # CP-SAT model keeps them: a step that takes one off is not kept, however many others it places.
        served = all(g in after for g in before if problem.gangs[g].starving)
        # A gang holding a reservation that the placement starts now gave the reservation back, and gangs placed
        # since may run on its room: taken off again, it is held there once more, and must still fit.
        if limits is not None and self.limits is not None:
            served = served and all(limits.fits(g) for g in before if g in self.limits.started and g not in after)
        gained = (
            self.gained[0] + score.gangs(problem, after) - score.gangs(problem, before),
            self.gained[1] + score.gpus(problem, after) - score.gpus(problem, before),
        )
        served = served and score.pays_for(*gained, self.rate)
        if problem.shared:  # shares are small: counting gangs alone trades whole GPUs for many of them
            served = served and score.gpus(problem, after) >= score.gpus(problem, before)
        keep = served and new > old
        if served and new == old and drift:
            # Equal steps are kept when they span no more nodes (the locality tier), so the search moves on
            # plateaus without scattering gangs.
            nodes = sorted({n for c in (before, after) for gang_counts in c.values() for (_p, n) in gang_counts})
            keep = (score.topology(problem, after), self._spread(after, before, nodes)) <= (
                score.topology(problem, before),
                self._spread(before, before, nodes),
            )
        if keep:
            for g in before:
                self._use(g, self.counts.pop(g), -1)
            for g, gang_counts in after.items():
                self.counts[g] = gang_counts
                self._use(g, gang_counts, 1)
            self.limits = limits
            self.gained = gained
            self.free = free
        self.steps += 1
        self.improvements += served and new > old
        return Step(target, len(gangs), served and new > old)

    def _spread(self, placed: Counts, removed: Counts, nodes: list[int]) -> int:
        """The locality tier (score.locality: nodes spanned per gang, plus empty GPU nodes opened) of the gangs
        in `placed`, counting opened nodes among `nodes`, with `removed` taken off the current placement and
        `placed` put on it."""
        problem = self.problem
        index = {n: i for i, n in enumerate(nodes)}
        gpus = self.used[nodes] @ problem.gpus
        for c, sign in ((removed, -1), (placed, 1)):
            for g, gang_counts in c.items():
                for (p, n), k in gang_counts.items():
                    gpus[index[n]] += sign * k * problem.gpu_demand[problem.parts[g][p].cls]
        opened = int((self.empty[nodes] & (gpus > 0)).sum())
        return sum(len({n for (_p, n) in gang_counts}) for gang_counts in placed.values()) + opened
