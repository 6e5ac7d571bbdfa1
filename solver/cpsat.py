"""The CP-SAT model of one cycle and its lexicographic solve.

Variables: x[g, p, n] = pods of gang g's part p on node n (integer, only on candidate nodes); placed[g] = gang g
reaches its minimum; where pending pods ask for GPU shares, their devices (shares.DeviceVars). Constraints:
all-or-nothing per gang, node capacity per resource, each share on one device, each queue's capability per
resource, one label domain per co-located gang, starving gangs the hint placed stay placed. Objectives in
strict order, each a stage that holds the earlier stages' values: gangs placed per level (priority, then within
fair share, then starving; one weighted stage when exact weights fit), resources placed (GPUs first), then
locality. Each stage starts from the best placement
so far as a complete hint and keeps it when CP-SAT finds nothing better in its time.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
from ortools.sat.python import cp_model

from gangsolve.solver import score
from gangsolve.solver.budget import MIN_STAGE_SECONDS
from gangsolve.solver.model import GPU, Level
from gangsolve.solver.problem import Counts, Problem, eligible_to_any
from gangsolve.solver.shares import DeviceVars

MAX, MIN = "max", "min"


def cpsat_solver(work: float, deadline: float, workers: int) -> cp_model.CpSolver:
    """A CP-SAT solver that stops after `work` units of deterministic time, so the same model gives the same
    answer; the wall-clock `deadline` only ends a call early when the machine is too slow for its budget."""
    solver = cp_model.CpSolver()
    solver.parameters.max_deterministic_time = max(work, 0.001)
    solver.parameters.max_time_in_seconds = max(deadline - time.perf_counter(), 0.005)
    solver.parameters.num_workers = workers
    solver.parameters.interleave_search = True
    solver.parameters.random_seed = 0
    # Full presolve (probing, repeated passes) took 0.85 s where one light pass took 0.15 s to the same proof
    # at 1,000 nodes, and ate whole cycles at 5,000: the hint already gives the first solution.
    solver.parameters.cp_model_probing_level = 0
    solver.parameters.max_presolve_iterations = 1
    return solver


@dataclass(frozen=True)
class Stage:
    name: str
    status: str  # CP-SAT's status, or SKIPPED when the hint already reaches the stage's bound
    objective: int
    bound: int
    seconds: float
    detail: str = ""  # why a FAILED stage failed; what a search stage did

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {**self.__dict__, "seconds": round(self.seconds, 4)}
        if not self.detail:
            del out["detail"]
        return out


def _sum(variables: list[cp_model.IntVar]) -> cp_model.LinearExpr:
    return cp_model.LinearExpr.sum(variables)


def _weighted(variables: list[cp_model.IntVar], coefficients: list[int]) -> cp_model.LinearExpr:
    return cp_model.LinearExpr.weighted_sum(variables, coefficients)


def add_knapsack_cuts(model: cp_model.CpModel, problem: Problem, placed: dict[int, cp_model.IntVar]) -> None:
    """Placed gangs whose eligible nodes all lie in a set E must fit, at their floor, in E's free total.
    Implied by the per-node constraints, but it hands CP-SAT's relaxation the knapsack structure so it can
    prove the number of gangs placed optimal instead of searching forever."""
    gangs = list(placed)
    masks = {}
    for g in gangs:
        masks[g] = eligible_to_any(problem.eligible, [part.cls for part in problem.parts[g]])
    for area in {m.tobytes(): m for m in masks.values()}.values():
        inside = [g for g in gangs if not (masks[g] & ~area).any()]
        room = np.maximum(problem.free[area], 0).sum(axis=0)
        for r in range(len(problem.resources)):
            floors = [(g, int(problem.floor[g, r])) for g in inside if problem.floor[g, r] > 0]
            if sum(f for _g, f in floors) > room[r]:
                model.add(_weighted([placed[g] for g, _f in floors], [f for _g, f in floors]) <= int(room[r]))


def possible_gangs(problem: Problem) -> list[int]:
    """Gangs deciding all-or-nothing this cycle whose eligible nodes could hold their minimum on their own."""
    return [
        g
        for g, gang in enumerate(problem.gangs)
        if score.counted(problem, g)
        and problem.alone[g] >= gang.need
        and all(bool((problem.floor[g] <= problem.cap_left[r]).all()) for r in problem.cap_rows[g])
    ]


def _domain_of(problem: Problem, g: int, level: int, n: int) -> int:
    """Node n's domain at gang g's `level`-th preferred label; a node without the label is its own."""
    d = int(problem.domains(problem.gangs[g].preferred[level])[n])
    return d if d >= 0 else -1 - n


# (gang, part, class, x's upper bound) of the variables on one node
NodeTerms: TypeAlias = list[tuple[int, int, int, int]]


class GangModel:
    """The placement model over candidate nodes `cands` (gang, part -> nodes), starting from `hint`."""

    def __init__(self, problem: Problem, cands: dict[tuple[int, int], np.ndarray], hint: Counts) -> None:
        self.problem = problem
        self.model = cp_model.CpModel()
        self.x: dict[tuple[int, int, int], cp_model.IntVar] = {}
        self.ub: dict[tuple[int, int, int], int] = {}  # x's upper bounds (the proto's domain is awkward to read)
        self.placed: dict[int, cp_model.IntVar] = {}
        self.counts = hint
        self.failed = False  # a stage failed: later stages keep the placement as it is
        self.spans: dict[tuple[int, int, int], cp_model.IntVar] = {}  # (gang, level, domain) -> gang spans it
        per_node: dict[int, NodeTerms] = {}
        for g in sorted({g for g, _p in cands}):
            self._gang(g, cands, per_node)
        add_knapsack_cuts(self.model, problem, self.placed)
        for n, terms in per_node.items():
            self._node_capacity(n, terms)
        self._queue_caps()
        # Pending shares: which device each takes (no device variables when no pending pod asks for a share).
        self.devices = DeviceVars(self.model, problem, self.x, self.ub) if problem.shared else None
        self._hint()

    def _gang(self, g: int, cands: dict[tuple[int, int], np.ndarray], per_node: dict[int, NodeTerms]) -> None:
        """Gang g's variables: pods per part and candidate node, and placed[g] when it decides all-or-nothing."""
        problem, m = self.problem, self.model
        gang = problem.gangs[g]
        nodes_of = [cands.get((g, p), np.zeros(0, dtype=np.int64)) for p in range(len(problem.parts[g]))]
        bounds_of = [
            np.minimum(problem.fit[part.cls][nodes], len(part.pods))
            for part, nodes in zip(problem.parts[g], nodes_of, strict=True)
        ]
        if sum(int(b.sum()) for b in bounds_of) < max(gang.need, 1):
            return  # its candidates cannot hold the gang's minimum: it stays pending
        keys = []
        for p, (part, nodes, bounds) in enumerate(zip(problem.parts[g], nodes_of, bounds_of, strict=True)):
            for n, ub in zip(nodes.tolist(), bounds.tolist(), strict=True):
                if ub == 0:
                    continue
                self.x[(g, p, n)] = m.new_int_var(0, ub, f"x_{g}_{p}_{n}")
                self.ub[(g, p, n)] = ub
                keys.append((g, p, n))
                per_node.setdefault(n, []).append((g, p, part.cls, ub))
            if int(bounds.sum()) > len(part.pods):
                m.add(_sum([self.x[(g, p, n)] for n in nodes.tolist() if (g, p, n) in self.x]) <= len(part.pods))
        if gang.colocate and gang.bound_nodes:
            keys = self._in_members_domain(g, keys)
        if not keys or not score.counted(problem, g):
            return  # extras of a gang already at its minimum are placed one by one
        placed = m.new_bool_var(f"placed_{g}")
        total = _sum([self.x[k] for k in keys])
        m.add(total >= gang.need * placed)
        m.add(total <= len(gang.pods) * placed)
        self.placed[g] = placed
        if gang.starving and g in self.counts:
            m.add(placed == 1)  # every hint placed starving gangs first, oldest first: keep them placed
        if gang.colocate:
            self._colocate(g, keys, placed)

    def _node_capacity(self, n: int, terms: NodeTerms) -> None:
        """Node n's free capacity holds the pods put on it, per resource it could run out of."""
        problem = self.problem
        demand = problem.demand[[cls for _g, _p, cls, _ub in terms]]  # one row per variable on this node
        most = np.array([ub for *_rest, ub in terms]) @ demand
        for r in np.flatnonzero(most > problem.free[n]).tolist():
            used = np.flatnonzero(demand[:, r] > 0).tolist()
            variables = [self.x[(terms[i][0], terms[i][1], n)] for i in used]
            self.model.add(_weighted(variables, demand[used, r].tolist()) <= int(problem.free[n, r]))

    def _queue_caps(self) -> None:
        """What a capped queue's gangs take stays within what its capability leaves, and what gangs that would
        borrow take within what may be lent, per resource (the rows of problem.cap_left)."""
        problem = self.problem
        by_row: dict[int, list[tuple[int, int, int]]] = {}
        for key in self.x:
            for q in problem.cap_rows[key[0]]:
                if problem.capped[q]:
                    by_row.setdefault(q, []).append(key)
        for q, keys in by_row.items():
            self._within(keys, problem.cap_left[q])

    def limit(
        self,
        gangs: Collection[int],
        room: np.ndarray,
        given_back: Sequence[tuple[int, np.ndarray]] = (),
        whole_held: np.ndarray | None = None,
    ) -> None:
        """Pods of `gangs` together fit, node by node, in `room` (nodes x resources): capacity beyond what is
        free now, e.g. what a reservation leaves at its start for the gangs still running then. `given_back`:
        (gang, capacity) that `room` gains when that gang is placed (a reservation it no longer needs).
        `whole_held`: nodes where each GPU share counts as a whole GPU too (`limits.WholeGpus`)."""
        chosen = set(gangs)
        back = [(self.placed[g], held) for g, held in given_back if g in self.placed]
        per_node: dict[int, list[tuple[int, int, int]]] = {}
        for key in self.x:
            if key[0] in chosen:
                per_node.setdefault(key[2], []).append(key)
        for n, keys in per_node.items():
            self._within(keys, room[n], back, n, whole_held is not None and bool(whole_held[n]))

    def _within(
        self,
        keys: list[tuple[int, int, int]],
        room: np.ndarray,
        back: Sequence[tuple[cp_model.IntVar, np.ndarray]] = (),
        node: int = 0,
        share_as_gpu: bool = False,
    ) -> None:
        """The pods of variables `keys` together take at most `room` of each resource (a constraint only for
        resources they could exceed it in); `back`: (placed variable, capacity per node) that adds to `room` at
        `node` when that gang is placed; `share_as_gpu`: a GPU share takes a whole GPU of `room` too."""
        classes = [self.problem.parts[g][p].cls for g, p, _n in keys]
        demand = self.problem.demand[classes]
        if share_as_gpu:
            demand = demand.copy()
            demand[:, self.problem.res_index[GPU]] += self.problem.share_of[classes] > 0
        most = np.array([self.ub[k] for k in keys]) @ demand
        for r in np.flatnonzero(most > room).tolist():
            used = np.flatnonzero(demand[:, r] > 0).tolist()
            variables = [self.x[keys[i]] for i in used]
            coefficients = demand[used, r].tolist()
            for var, held in back:
                if held[node, r] > 0:
                    variables.append(var)
                    coefficients.append(-int(held[node, r]))
            self.model.add(_weighted(variables, coefficients) <= max(int(room[r]), 0))

    def _in_members_domain(self, g: int, keys: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
        """A co-located gang with members bound places its pods (its extras too) in their domain of its required
        level only: none where they already disagree or run on a node without the label. The keys left."""
        fixed = self.problem.members_domain(g)
        if fixed is None:
            return keys  # its members' nodes are gone: any one domain
        domain = self.problem.domains(self.problem.gangs[g].colocate or "")
        kept = []
        for key in keys:
            if fixed >= 0 and domain[key[2]] == fixed:
                kept.append(key)
            else:
                self.model.add(self.x[key] == 0)
        return kept

    def _colocate(self, g: int, keys: list[tuple[int, int, int]], placed: cp_model.IntVar) -> None:
        """One domain of the gang's required level holds all its pods placed."""
        domain = self.problem.domains(self.problem.gangs[g].colocate or "")
        chosen: dict[int, cp_model.IntVar] = {}
        for key in keys:
            var, n = self.x[key], key[2]
            d = int(domain[n])
            if d < 0:
                self.model.add(var == 0)
                continue
            if d not in chosen:
                chosen[d] = self.model.new_bool_var(f"domain_{g}_{d}")
            self.model.add(var <= self.ub[key] * chosen[d])
        self.model.add(_sum(list(chosen.values())) == placed)

    def _hint(self, extra: dict[cp_model.IntVar, int] | None = None) -> None:
        """A complete hint: every variable gets the current placement's value."""
        self.model.clear_hints()  # type: ignore[no-untyped-call]  # ortools ships this one unannotated
        values = {var.index: self.counts.get(g, {}).get((p, n), 0) for (g, p, n), var in self.x.items()}
        values.update({var.index: int(g in self.counts) for g, var in self.placed.items()})
        if self.spans:
            used = {
                (g, level, _domain_of(self.problem, g, level, n))
                for g, c in self.counts.items()
                for (_p, n) in c
                for level in range(len(self.problem.gangs[g].preferred))
            }
            values.update({var.index: int(key in used) for key, var in self.spans.items()})
        if self.devices is not None:
            values.update({var.index: value for var, value in self.devices.hint(self.counts).items()})
        values.update({var.index: value for var, value in (extra or {}).items()})
        hint = self.model.proto.solution_hint
        hint.vars.extend(values.keys())
        hint.values.extend(values.values())

    # --- the stages -------------------------------------------------------------------------------------------

    def gangs_expr(self, weights: dict[Level, int]) -> cp_model.LinearExpr:
        """Gangs placed, weighted by priority level (levels absent from `weights` count 0)."""
        gangs = [g for g in self.placed if self.problem.gangs[g].level in weights]
        return _weighted([self.placed[g] for g in gangs], [weights[self.problem.gangs[g].level] for g in gangs])

    def resource_expr(self, scale: int) -> tuple[cp_model.LinearExpr, int]:
        """Resources placed, GPUs first; bounded above by every modelled pod placed."""
        problem = self.problem
        keys = list(self.x)
        weights = [score.pod_weight(problem, problem.parts[g][p].cls, scale) for g, p, _n in keys]
        room: dict[tuple[int, int], int] = {}
        for g, p, n in keys:
            room[(g, p)] = room.get((g, p), 0) + self.ub[(g, p, n)]
        bound = sum(
            score.pod_weight(problem, problem.parts[g][p].cls, scale) * min(k, len(problem.parts[g][p].pods))
            for (g, p), k in room.items()
        )
        return _weighted([self.x[k] for k in keys], weights), bound

    def topology_expr(self, level: int) -> tuple[cp_model.LinearExpr, int]:
        """Domains of each gang's `level`-th preferred topology label that it spans, summed over gangs; bounded
        below by one per placed gang that has such a level."""
        problem, m = self.problem, self.model
        for (g, p, n), var in self.x.items():
            if level >= len(problem.gangs[g].preferred):
                continue
            key = (g, level, _domain_of(problem, g, level, n))
            if key not in self.spans:
                self.spans[key] = m.new_bool_var(f"span_{g}_{level}_{key[2]}")
            m.add(var <= self.ub[(g, p, n)] * self.spans[key])
        self._hint()
        terms = [var for (_g, lv, _d), var in self.spans.items() if lv == level]
        return _sum(terms), sum(1 for g in self.counts if level < len(problem.gangs[g].preferred))

    def locality_expr(self) -> tuple[cp_model.LinearExpr, int]:
        """Nodes spanned per gang plus empty GPU nodes broken into; bounded below by one node per placed gang."""
        problem, m = self.problem, self.model
        empty = score.empty_gpu_nodes(problem)
        on: dict[tuple[int, int], cp_model.IntVar] = {}
        opened: dict[int, cp_model.IntVar] = {}
        for (g, p, n), var in self.x.items():
            ub = self.ub[(g, p, n)]
            if (g, n) not in on:
                on[(g, n)] = m.new_bool_var(f"on_{g}_{n}")
            m.add(var <= ub * on[(g, n)])
            if empty[n] and problem.gpu_demand[problem.parts[g][p].cls] > 0:
                if n not in opened:
                    opened[n] = m.new_bool_var(f"opened_{n}")
                m.add(var <= ub * opened[n])
        used = {(g, n) for g, c in self.counts.items() for (_p, n) in c}
        gpu_used = {
            n for g, c in self.counts.items() for (p, n) in c if problem.gpu_demand[problem.parts[g][p].cls] > 0
        }
        hint = {var: int(key in used) for key, var in on.items()}
        hint.update({var: int(n in gpu_used) for n, var in opened.items()})
        self._hint(hint)
        return _sum([*on.values(), *opened.values()]), len(self.counts)

    def solve_stage(
        self,
        name: str,
        expr: cp_model.LinearExpr,
        sense: str,
        current: int,
        bound: int,
        work: float,
        deadline: float,
        workers: int,
    ) -> Stage:
        """Optimise `expr` from the current placement (worth `current`) for `work` units of deterministic time,
        then hold it at the value reached. A failing stage (an invalid or infeasible model, an exception from
        OR-Tools) leaves the placement as it was and ends the model's stages: the cycle keeps what it has."""
        started = time.perf_counter()
        m = self.model
        if self.failed:
            return Stage(name, "NOT_RUN", current, bound, 0.0)
        if current == bound or work <= 0 or deadline - started < MIN_STAGE_SECONDS:
            m.add(expr >= current) if sense == MAX else m.add(expr <= current)
            skipped = "SKIPPED" if current == bound else "NO_TIME"
            return Stage(name, skipped, current, bound, time.perf_counter() - started)
        (m.maximize if sense == MAX else m.minimize)(expr)
        solver = cpsat_solver(work, deadline, workers)
        try:
            status = solver.solve(m)
        except Exception as exc:  # any failure of the library must leave the cycle its placement
            self.failed = True
            return Stage(name, "FAILED", current, bound, time.perf_counter() - started, f"{type(exc).__name__}: {exc}")
        if status in (cp_model.INFEASIBLE, cp_model.MODEL_INVALID):
            # The hint is feasible by construction, so this is a modelling bug; the placement stays as it is.
            self.failed = True
            return Stage(name, "FAILED", current, bound, time.perf_counter() - started, solver.status_name(status))
        value, best = current, bound
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            found = round(solver.objective_value)
            best = round(solver.best_objective_bound)
            if (found > current) if sense == MAX else (found < current):
                value = found
                self.counts = self._read(solver)
                self._hint()
        m.add(expr >= value) if sense == MAX else m.add(expr <= value)
        return Stage(name, solver.status_name(status), value, best, time.perf_counter() - started)

    def _read(self, solver: cp_model.CpSolver) -> Counts:
        counts: Counts = {}
        for (g, p, n), var in self.x.items():
            k = solver.value(var)
            if k:
                counts.setdefault(g, {})[(p, n)] = int(k)
        return counts
