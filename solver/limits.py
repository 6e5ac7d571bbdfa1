"""The plan a cycle's baseline pass makes (planning.py), and the limits it sets every other pass.

A `Plan` is the pending gangs' reservations, one `Check` per reservation start, and the forecasts; `Limits` holds
a pass (a greedy variant, a search step, the warm start) to the checks, as CP-SAT holds its model to them with
constraints.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import numpy as np

from gangsolve.solver.model import GPU, SHARE
from gangsolve.solver.problem import GangCounts, Problem

FOREVER = math.inf


@dataclass(frozen=True)
class Planned:
    gang: int
    start: float | None  # None: it would fit once running pods without an estimate end
    counts: GangCounts  # the nodes it takes at `start` (empty when start is None)
    # The earliest it could start, where the plan holds it later (`SolveConfig.plan_relaxation`); None: `start`.
    earliest: float | None = None


@dataclass(frozen=True)
class Check:
    """Gangs started now that still run at `time` must fit, per node and resource, in `room`."""

    time: float
    room: np.ndarray  # nodes x resources: free at `time` once the reservations active then are held
    ceiling: int  # gangs of a higher priority are not held back


@dataclass
class Plan:
    reservations: list[Planned] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    # Gangs past the reservations: when they are expected to start, holding nothing (no check, no promise).
    forecasts: list[Planned] = field(default_factory=list)
    guessed: set[int] = field(default_factory=set)  # forecast, not held, as their start counts on a guess

    def held(self) -> set[int]:
        return {r.gang for r in self.reservations}


class Limits:
    """The reservations' capacity limits during one pass: what each check still has room for, given the gangs
    the pass has placed so far."""

    def __init__(self, problem: Problem, plan: Plan) -> None:
        self.problem = problem
        self.plan = plan
        self.rooms = [c.room.copy() for c in plan.checks]
        self.ends = np.array(
            [problem.cluster.now + (gang.runtime if gang.runtime is not None else FOREVER) for gang in problem.gangs]
        )
        # What the checks count on: a gang whose runtime is a guess may run on past any reservation's start, so
        # it backfills only where it leaves every reservation whole for ever (a guess never delays a promise).
        self.counted_ends = np.where([gang.guessed for gang in problem.gangs], FOREVER, self.ends)
        self.priority = np.array([gang.priority for gang in problem.gangs], dtype=np.int64)
        self.reserved = reserved_at_checks(problem, plan)
        self.whole = WholeGpus.of(problem, self.reserved, len(plan.checks))
        self.started: set[int] = set()  # gangs holding a reservation that this pass starts now after all

    def copy(self) -> Limits:
        """The same limits with rooms of their own (a search step tries a change on a copy)."""
        other = Limits.__new__(Limits)
        other.__dict__.update(self.__dict__)
        other.rooms = [room.copy() for room in self.rooms]
        other.started = set(self.started)
        other.whole = self.whole.copy() if self.whole is not None else None
        return other

    def running_at(self, g: int, k: int) -> bool:
        return bool(self.counted_ends[g] > self.plan.checks[k].time)

    def subject(self, g: int, k: int) -> bool:
        """Whether gang g, started now, must keep within check k. A gang holding a reservation too: started
        now after all, it must not push another's later; it may count on what its own reservation holds."""
        return self.running_at(g, k) and self.priority[g] <= self.plan.checks[k].ceiling

    def holds_back(self, g: int) -> bool:
        """Whether some check holds gang g back (`room_for` is less than free capacity)."""
        return any(self.subject(g, k) for k in range(len(self.rooms)))

    def room_for(self, g: int, free: np.ndarray) -> np.ndarray:
        """Where gang g may go now: free capacity within every check it is subject to (a copy), or `free`
        itself when no check holds it back."""
        own = dict(self.reserved.get(g, [])) if g not in self.started else {}
        room = free
        milli = self._least_share(g)
        for k in range(len(self.rooms)):
            if self.subject(g, k):
                check = self.rooms[k] + own[k] if k in own else self.rooms[k]
                room = np.minimum(room, check)
                if milli and self.whole is not None:
                    # Each share counts as a whole GPU where a reservation holds whole ones (`WholeGpus`): as many
                    # shares as the check has GPUs left, of the gang's least share each.
                    nodes = self.whole.holding(k)
                    gpus = check[nodes, self.whole.gpu]
                    share = self.problem.res_index[SHARE]
                    room[nodes, share] = np.minimum(room[nodes, share], np.maximum(gpus, 0) * milli)
        return room

    def _least_share(self, g: int) -> int:
        """The least GPU share (milli-GPU) one of gang g's pods asks for; 0: none asks for a share."""
        if not self.problem.shared:
            return 0
        shares = [int(self.problem.share_of[part.cls]) for part in self.problem.parts[g]]
        return min((m for m in shares if m), default=0)

    def take(self, g: int, counts: GangCounts, sign: int = 1) -> None:
        """Pods of gang g start with `counts` (sign 1), or are taken off again (-1): they hold room at every
        check while they run, whether or not they are subject to it. A gang holding a reservation that starts
        now gives the reservation back (and takes it again when taken off)."""
        whole = self.whole
        for (p, n), k in counts.items():
            cls = self.problem.parts[g][p].cls
            demand = sign * k * self.problem.demand[cls]
            share = whole is not None and bool(self.problem.share_of[cls])
            for c, room in enumerate(self.rooms):
                if self.running_at(g, c):
                    room[n] -= demand
                    if whole is not None and share:
                        whole.shares[c][n] += sign * k
                        whole.settle(self.rooms, c, [n])
        if g in self.reserved and (sign > 0) != (g in self.started):
            for k, held in self.reserved[g]:
                self.rooms[k] += sign * held
                if whole is not None:  # its whole GPUs no longer held (or held again)
                    whole.held[k] -= sign * held[:, whole.gpu]
                    whole.settle(self.rooms, k, np.flatnonzero(held[:, whole.gpu]))
            if sign > 0:
                self.started.add(g)
            else:
                self.started.discard(g)

    def fits(self, g: int) -> bool:
        """Whether gang g's reservation, held (g not started now), fits on its nodes at every check it is active at."""
        return all(bool((self.rooms[k][held.any(axis=1)] >= 0).all()) for k, held in self.reserved.get(g, []))

    def blocked(self, g: int, free: np.ndarray) -> None:
        """Gang g does not fit now (greedy calls this): plain limits do nothing."""


class WholeGpus:
    """Per check and node, with shares pending: the whole GPUs reservations not started hold there, the shares
    the pass started that still run then, and how much of the check's GPU room those shares are charged.

    The checks see a node's GPUs as two columns, whole GPUs and milli-GPU: a share may open a whole GPU a
    reservation counts on, or keep one it counts on from coming back whole, and the columns cannot tell. So where
    a reservation holds whole GPUs, each share counts as one (more than it may take, never less); where none does
    (any more), none is charged. Kept as counts, any order of takes and undos leaves the same charge."""

    def __init__(self, gpu: int, held: list[np.ndarray]) -> None:
        self.gpu = gpu
        self.held = held
        self.shares = [np.zeros_like(h) for h in held]
        self.charged = [np.zeros_like(h) for h in held]

    @classmethod
    def of(
        cls,
        problem: Problem,
        reserved: dict[int, list[tuple[int, np.ndarray]]],
        checks: int,
        skip: Collection[int] = (),
    ) -> WholeGpus | None:
        """For the reservations `reserved` (but those of gangs in `skip`, started already); None without shares
        pending or checks."""
        if not problem.shared or not checks:
            return None
        gpu = problem.res_index[GPU]
        held = [np.zeros(len(problem.nodes), dtype=np.int64) for _ in range(checks)]
        for g, at in reserved.items():
            if g not in skip:
                for k, capacity in at:
                    held[k] += capacity[:, gpu]
        return cls(gpu, held)

    def copy(self) -> WholeGpus:
        other = WholeGpus(self.gpu, [h.copy() for h in self.held])
        other.shares = [s.copy() for s in self.shares]
        other.charged = [c.copy() for c in self.charged]
        return other

    def holding(self, k: int) -> np.ndarray:
        """The nodes where a reservation not started holds whole GPUs at check k (a mask)."""
        return self.held[k] > 0

    def settle(self, rooms: list[np.ndarray], k: int, nodes: Sequence[int] | np.ndarray) -> None:
        """Charge check k's room on `nodes` what their shares count for now."""
        nodes = np.asarray(nodes, dtype=np.int64)
        due = np.where(self.held[k][nodes] > 0, self.shares[k][nodes], 0)
        rooms[k][nodes, self.gpu] -= due - self.charged[k][nodes]
        self.charged[k][nodes] = due


def reserved_at_checks(problem: Problem, plan: Plan) -> dict[int, list[tuple[int, np.ndarray]]]:
    """Per gang holding a reservation: (check, what the reservation holds per node and resource) for every
    check its reservation is active at, i.e. what it gives back if the gang starts now after all."""
    out: dict[int, list[tuple[int, np.ndarray]]] = {}
    for r in plan.reservations:
        if r.start is None:
            continue
        held = np.zeros_like(problem.free)
        for (p, n), k in r.counts.items():
            held[n] += k * problem.demand[problem.parts[r.gang][p].cls]
        end = r.start + runtime_of(problem, r.gang)
        for k, check in enumerate(plan.checks):
            if r.start <= check.time < end:
                out.setdefault(r.gang, []).append((k, held))
    return out


def runtime_of(problem: Problem, g: int) -> float:
    runtime = problem.gangs[g].runtime
    return runtime if runtime is not None else FOREVER
