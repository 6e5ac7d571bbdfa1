"""An upper bound on gangs placed that holds for the whole cluster, not only the candidate nodes the search
model offers: a linear relaxation with gangs as items and nodes aggregated into types.

Nodes that every pod class sees alike (same eligibility, same count of pods of each class that fit) form a
*node type*; the relaxation decides how many pods of each gang part go to each type, not to each node. Every
constraint is a sum of per-node constraints, so any real placement satisfies it:

- per type and resource, the pods' requests fit the type's free total;
- per type and pod class c, *slot cuts*: a pod that holds k copies of c's request uses k of the slots the
  type's nodes have for c (the sum over its nodes of how many c pods each holds alone). They carry the
  fragmentation the free totals hide: a node with 6 free GPUs holds one 4-GPU pod, not one and a half;
- a co-located gang picks one label value (domain); per domain, the co-located gangs put there fit it by the
  same sums;
- a gang is all-or-nothing: placed[g] is 0 or 1 and its parts' pods reach `need` only when it is 1.

Solved as an LP (HiGHS) when time is short, as a MIP (SCIP; placed[g] integer) when there is time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence

import numpy as np
from ortools.linear_solver.python import model_builder_helper as mbh

from gangsolve.solver import score
from gangsolve.solver.model import Level
from gangsolve.solver.problem import Problem

INF = math.inf
# Co-located gangs' (gang, domain) options past which their domain rows are left out: 30,000 on the synthetic
# cluster of 5,000 nodes (a second to build), 330,000 at 16,384 nodes (seven).
MOST_DOMAIN_OPTIONS = 50_000


def capacity(problem: Problem) -> np.ndarray:
    """cap[c, n]: pods of class c node n holds by its free resources alone (eligibility aside)."""
    free = np.maximum(problem.free, 0)
    cap = np.zeros((len(problem.class_pods), len(problem.nodes)), dtype=np.int64)
    for c in range(len(problem.class_pods)):
        need = problem.demand[c]
        used = need > 0
        cap[c] = np.min(free[:, used] // need[used], axis=1)
    return cap


def copies(problem: Problem) -> np.ndarray:
    """k[c, c0]: how many copies of class c0's request one pod of class c holds, resource by resource."""
    d = problem.demand
    k = np.zeros((len(d), len(d)), dtype=np.int64)
    for c0 in range(len(d)):
        used = d[c0] > 0
        k[:, c0] = np.min(d[:, used] // d[c0, used], axis=1)
    return k


class Relaxation:
    """The aggregated model of one cycle, built once; `bound` solves it for one level at a time."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.cap = capacity(problem)
        self.k = copies(problem)
        self.helper = mbh.ModelBuilderHelper()
        self.gangs = [
            g for g, gang in enumerate(problem.gangs) if score.counted(problem, g) and problem.alone[g] >= gang.need
        ]
        signature = np.concatenate([problem.eligible.T.astype(np.int64), problem.fit.T], axis=1)
        # Rows by their bytes: sorting 16,384 rows of thousands of columns (np.unique) takes a second.
        first: dict[bytes, int] = {}
        inverse = np.array([first.setdefault(row.tobytes(), len(first)) for row in signature], dtype=np.int64)
        self.types = [np.flatnonzero(inverse == t) for t in range(len(first))]
        self.placed: dict[int, int] = {}  # gang -> variable index
        self.integral: list[int] = []  # variables integral in the MIP
        self.held: dict[Level, int] = {}  # level -> row index of "placed at level >= count"
        self._cache: dict[tuple[object, ...], int] = {}
        self._build()

    # --- the model ----------------------------------------------------------------------------------------

    def _var(self, ub: float, integral: bool = True) -> int:
        index: int = self.helper.add_var()
        self.helper.set_var_lower_bound(index, 0.0)
        self.helper.set_var_upper_bound(index, float(ub))
        if integral:
            self.integral.append(index)
        return index

    def _row(self, variables: list[int], coefficients: list[float], lb: float = -INF, ub: float = INF) -> int:
        row: int = self.helper.add_linear_constraint()
        self.helper.set_constraint_lower_bound(row, lb)
        self.helper.set_constraint_upper_bound(row, ub)
        for var, coefficient in zip(variables, coefficients, strict=True):
            self.helper.add_term_to_constraint(row, var, coefficient)
        return row

    def _build(self) -> None:
        """Pods of class c on type t are pooled across gangs (z[c, t]); each gang kind draws its parts' pods from
        its classes' pools (u). Pooling loses nothing: any pools and draws with equal totals split into
        per-gang, per-type counts. Identical gangs (same level, parts and need, not co-located) are one kind
        with a count of gangs placed."""
        problem = self.problem
        kinds: dict[tuple[object, ...], list[int]] = {}
        for g in self.gangs:
            gang = problem.gangs[g]
            shape = tuple((part.cls, len(part.pods)) for part in problem.parts[g])
            key: tuple[object, ...] = (gang.level, shape, gang.need) if not gang.colocate else (g,)
            kinds.setdefault(key, []).append(g)
        drawn: dict[int, list[int]] = {}  # class -> draws on its pool
        self.kinds: list[tuple[Level, list[int], int]] = []  # (level, gangs, placed-count variable)
        for members in kinds.values():
            g = members[0]
            gang, count = problem.gangs[g], len(members)
            flag = self._var(count)
            self.kinds.append((gang.level, members, flag))
            for member in members:
                self.placed[member] = flag
            pods = []
            for part in problem.parts[g]:
                draw = self._var(count * len(part.pods))
                drawn.setdefault(part.cls, []).append(draw)
                pods.append(draw)
                if len(problem.parts[g]) > 1:  # each placed gang gives a part at most its pods
                    self._row([draw, flag], [1.0, -float(len(part.pods))], ub=0.0)
            # need * placed <= pods placed <= size * placed
            self._row([*pods, flag], [1.0] * len(pods) + [-float(gang.need)], lb=0.0)
            self._row([*pods, flag], [1.0] * len(pods) + [-float(len(gang.pods))], ub=0.0)
        on_type: dict[int, tuple[list[int], list[int]]] = {}  # type -> (classes, pool variables)
        for c, draws in drawn.items():
            pools = []
            most = int(sum(self.helper.var_upper_bound(d) for d in draws))
            for t, nodes in enumerate(self.types):
                room = int(problem.fit[c, nodes].sum())
                if room == 0:
                    continue
                pool = self._var(min(room, most))
                classes, variables = on_type.setdefault(t, ([], []))
                classes.append(c)
                variables.append(pool)
                pools.append(pool)
            self._row([*pools, *draws], [1.0] * len(pools) + [-1.0] * len(draws), lb=0.0, ub=0.0)
        for t, (classes, variables) in on_type.items():
            self._fit(self.types[t], np.array(classes), variables)
        self._colocated()

    def _fit(self, nodes: np.ndarray, classes: np.ndarray, variables: list[int]) -> None:
        """Pods of `classes` (one per variable) on the node set `nodes`: resource sums and slot cuts."""
        problem = self.problem
        free = np.maximum(problem.free[nodes], 0).sum(axis=0)
        ub = np.array([self.helper.var_upper_bound(v) for v in variables])
        for r in range(len(problem.resources)):
            coef = problem.demand[classes, r]
            if coef @ ub > free[r]:
                self._scaled_row(variables, coef, int(free[r]))
            # Chvatal-Gomory: per node, pods use floor(request / t) of floor(free / t)
            for t in np.unique(coef[coef > 0])[1:].tolist():
                cg = coef // t
                room = int((np.maximum(problem.free[nodes, r], 0) // t).sum())
                if cg @ ub > room:
                    self._scaled_row(variables, cg, room)
        for c0 in sorted(set(classes.tolist())):
            coef = self.k[classes, c0]
            room = int(self.cap[c0, nodes].sum())
            if coef @ ub > room:
                self._scaled_row(variables, coef, room)

    def _scaled_row(self, variables: list[int], coef: np.ndarray, room: int) -> None:
        """sum coef * x <= room over integers, divided by the coefficients' gcd (rounding the right-hand side
        down stays valid for integer x) so that bytes of memory do not strain the LP's numerics."""
        nonzero = coef > 0
        divisor = int(np.gcd.reduce(coef[nonzero])) if nonzero.any() else 1
        chosen = [v for v, keep in zip(variables, nonzero.tolist(), strict=True) if keep]
        self._row(chosen, (coef[nonzero] // divisor).astype(float).tolist(), ub=float(room // divisor))

    def _colocated(self) -> None:
        """Each co-located gang in one domain of its label, and the gangs of each domain within its room: rows
        that grow as gangs x domains, so past MOST_DOMAIN_OPTIONS they are left out (the bound holds without
        them, looser)."""
        problem = self.problem
        options: dict[int, np.ndarray] = {}
        counted = 0
        for g in self.gangs:
            if problem.gangs[g].colocate:
                options[g] = self._domains(g)
                counted += len(options[g])
                if counted > MOST_DOMAIN_OPTIONS:
                    return
        per_domain: dict[tuple[str, int], list[tuple[int, int]]] = {}  # (label, value) -> (gang, variable)
        for g, ids in options.items():
            choices = []
            for d in ids.tolist():
                var = self._var(1)
                choices.append(var)
                per_domain.setdefault((problem.gangs[g].colocate or "", d), []).append((g, var))
            # one domain exactly when placed
            self._row([*choices, self.placed[g]], [1.0] * len(choices) + [-1.0], lb=0.0, ub=0.0)
        slots = {g: self._least_slots(g) for g in {g for chosen in per_domain.values() for g, _v in chosen}}
        for (key, d), chosen in per_domain.items():
            if len(chosen) < 2:
                continue
            nodes = np.flatnonzero(problem.domains(key) == d)
            free = np.maximum(problem.free[nodes], 0).sum(axis=0)
            variables = [v for _g, v in chosen]
            floors = problem.floor[[g for g, _v in chosen]]
            for r in np.flatnonzero(floors.sum(axis=0) > free).tolist():
                self._scaled_row(variables, floors[:, r], int(free[r]))
            least = np.stack([slots[g] for g, _v in chosen])
            room = self.cap[:, nodes].sum(axis=1)
            own = np.zeros(len(room), dtype=bool)
            own[[part.cls for g, _v in chosen for part in problem.parts[g]]] = True
            for c0 in np.flatnonzero(own & (least.sum(axis=0) > room)).tolist():
                self._scaled_row(variables, least[:, c0], int(room[c0]))

    def _domains(self, g: int) -> np.ndarray:
        """The values of co-located gang g's label whose nodes hold its minimum, pods counted node by node."""
        return self.problem.domains_holding(g)

    def _least_slots(self, g: int) -> np.ndarray:
        """Per class c0, the fewest c0-slots the gang's minimum uses: its `need` pods holding the fewest copies
        of c0's request."""
        problem = self.problem
        rows = np.concatenate(
            [np.repeat(self.k[part.cls][None, :], len(part.pods), axis=0) for part in problem.parts[g]]
        )
        least: np.ndarray = np.sort(rows, axis=0)[: problem.gangs[g].need].sum(axis=0)
        return least

    # --- solving ------------------------------------------------------------------------------------------

    def bound(self, objective: Sequence[Level], held: Mapping[Level, int], seconds: float, mip: bool) -> int | None:
        """An upper bound on gangs placed at the levels of `objective` together, by any placement that places
        at least `held[l]` gangs at each level l in `held`; None when the solver proves nothing in `seconds`.
        Gangs of other levels are left out (they only compete for room)."""
        key = (tuple(objective), tuple(sorted(held.items())), mip)
        if key in self._cache:
            return self._cache[key]
        bound = self._solve(set(objective), held, seconds, mip)
        if bound is not None and not mip:  # an LP either solves or not; a MIP's bound depends on its time
            self._cache[key] = bound
        return bound

    def _solve(self, objective: set[Level], held: Mapping[Level, int], seconds: float, mip: bool) -> int | None:
        helper = self.helper
        for level, count in held.items():
            if level not in self.held:
                flags = [flag for kind_level, _gangs, flag in self.kinds if kind_level == level]
                self.held[level] = self._row(flags, [1.0] * len(flags))
            helper.set_constraint_lower_bound(self.held[level], float(count))
        for level, row in self.held.items():
            if level not in held:
                helper.set_constraint_lower_bound(row, -INF)
        for kind_level, gangs, flag in self.kinds:
            modelled = kind_level in objective or kind_level in held
            helper.set_var_upper_bound(flag, float(len(gangs)) if modelled else 0.0)
            helper.set_var_objective_coefficient(flag, 1.0 if kind_level in objective else 0.0)
        helper.set_maximize(True)
        for var in self.integral:
            helper.set_var_integrality(var, mip)
        # HiGHS solved the LPs of the OpenB trace in 0.3-0.4 s where GLOP took 1.2-4.5 s (and 0.02-0.3 s against
        # GLOP's 0.01-0.15 on the synthetic clusters); SCIP proved the MIPs faster than HiGHS.
        solver = mbh.ModelSolverHelper("scip" if mip else "highs")
        if not mip:
            solver.set_solver_specific_parameters("output_flag=false")  # else HiGHS prints a banner on stdout
        solver.set_time_limit_in_seconds(max(seconds, 0.01))
        try:
            solver.solve(helper)
        except Exception:  # a bound the library cannot compute is no bound; the cycle goes on without it
            return None
        status = solver.status()
        if status == mbh.SolveStatus.INFEASIBLE:
            return 0  # no placement reaches `held` (cannot happen for counts a placement reached)
        if mip and status in (mbh.SolveStatus.OPTIMAL, mbh.SolveStatus.FEASIBLE, mbh.SolveStatus.NOT_SOLVED):
            value = solver.best_objective_bound()
        elif status == mbh.SolveStatus.OPTIMAL:
            value = solver.objective_value()
        else:
            return None
        if not math.isfinite(value):
            return None
        # The solvers work in floating point to a tolerance of 1e-6 or so: a count within it is reached.
        return math.floor(value + 1e-6)


def level_bounds(
    relaxation: Relaxation,
    found: Mapping[Level, int],
    most: Mapping[Level, int],
    seconds: float,
    mip: bool = False,
) -> tuple[dict[Level, int], int]:
    """Per level (highest first in `found`), an upper bound on the gangs placed there by any placement at least
    as good as `found` in strict priority order; and one on the gangs placed in all.

    Such a placement places at least `found` at the highest level. If the bound there equals what was found,
    it places exactly that, hence at least `found` at the next level, and so on: each level is bounded with
    the levels above held at their counts, down to the first level whose bound is above its count (the first
    open level). Below it a placement may trade its gangs for more at the open level, so levels below are
    bounded with only the levels down to the open one held. `most` caps each bound (the gangs there).
    """
    levels = list(found)
    bounds: dict[Level, int] = {}
    held: dict[Level, int] = {}
    opened: Level | None = None
    started = time.perf_counter()
    for level in levels:
        left = seconds - (time.perf_counter() - started)
        bound = relaxation.bound([level], held, left, mip) if left > 0 else None
        bounds[level] = max(found[level], most[level] if bound is None else min(bound, most[level]))
        if opened is None:
            held[level] = found[level]
            if bounds[level] > found[level]:
                opened = level
    total = sum(bounds.values())
    if opened is not None:
        below = levels[levels.index(opened) :]
        left = seconds - (time.perf_counter() - started)
        joint = relaxation.bound(below, held, left, mip) if len(below) > 1 and left > 0 else None
        if joint is not None:
            above = sum(found[level] for level in levels[: levels.index(opened)])
            total = min(total, max(above + joint, sum(found.values())))
    return bounds, total
