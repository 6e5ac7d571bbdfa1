"""`solve(cluster, config) -> Placement`: one scheduling cycle, the same function live and offline."""

from __future__ import annotations

import time
from typing import TypeAlias

from gangsolve.solver import planning, score
from gangsolve.solver.candidates import candidates
from gangsolve.solver.cpsat import MAX, MIN, MIN_STAGE_SECONDS, GangModel, Stage, possible_gangs, relaxed_bound
from gangsolve.solver.explain import explain
from gangsolve.solver.greedy import Counts, greedy, most_allocated, node_scores, smallest_first_order
from gangsolve.solver.model import Cluster, GangResult, Level, Placement, Reservation, SolveConfig
from gangsolve.solver.problem import Problem

# Per priority level: (gangs placed, upper bound on them, gangs that could be placed at all).
LevelCounts: TypeAlias = dict[Level, tuple[int, int, int]]

# Leave this share of the time limit for reading the solution and explaining pending gangs (about 0.4 s
# at 5,000 nodes and 1,000 gangs).
_RESERVE = 0.15


def solve(cluster: Cluster, config: SolveConfig | None = None) -> Placement:
    config = config or SolveConfig()
    started = time.perf_counter()
    deadline = started + config.time_limit * (1 - _RESERVE)
    problem = Problem(cluster)
    scale = score.gpu_scale(problem)
    begun = time.perf_counter()
    # Queue order, as Volcano allocates, holding reservations for starving gangs that cannot start: the
    # baseline never to fall below. Without reservations it is the plain greedy allocator.
    counts, plan = planning.plan(problem, config.reservations)
    greedy_seconds = time.perf_counter() - begun
    stages: list[Stage] = []
    status = "GREEDY"
    levels: LevelCounts = {}
    if config.use_cpsat and problem.gangs:
        counts = _best_hint(problem, plan, counts, started, greedy_seconds, config, scale)
        counts, stages, levels = _optimise(problem, plan, counts, config, deadline)
        status = "OPTIMAL" if all(found == bound for found, bound, _most in levels.values()) else "FEASIBLE"
    return _placement(problem, plan, counts, stages, levels, status, time.perf_counter() - started)


# No single greedy wins everywhere: small gangs first places more where GPUs run out, queue order where big
# pods need whole nodes, MostAllocated where cpu or memory runs out before GPUs (the OpenB trace).
_HINT_SHARE = 0.4


def _best_hint(
    problem: Problem,
    plan: planning.Plan,
    baseline: Counts,
    started: float,
    took: float,
    config: SolveConfig,
    scale: int,
) -> Counts:
    """The best of several greedy variants, tried while they take under _HINT_SHARE of the time limit."""
    best = baseline

    def key(counts: Counts) -> tuple[tuple[int, ...], int]:
        return score.rank(problem, counts, scale), -score.locality(problem, counts)

    small = smallest_first_order(problem)
    for order, scorer in ((small, most_allocated), (None, most_allocated), (small, node_scores)):
        if time.perf_counter() - started + took > _HINT_SHARE * config.time_limit:
            break  # another pass (estimated by the last one's time) would eat into the solver's time
        begun = time.perf_counter()
        limits = planning.Limits(problem, plan) if plan.checks else None
        best = max((best, greedy(problem, order, scorer, limits)), key=key)
        took = time.perf_counter() - begun
    return best


# Most of the time goes to the gang counts; the resource and locality tiers get capped shares, as their bounds
# are weak and their gains small next to placing another gang.
_TIER_SHARE = {"resources": 0.15, "locality": 0.05}


def _optimise(
    problem: Problem, plan: planning.Plan, hint: Counts, config: SolveConfig, deadline: float
) -> tuple[Counts, list[Stage], LevelCounts]:
    """The staged CP-SAT solve. Returns the placement, the stages, and per priority level (found, bound)."""
    cands, pruned = candidates(problem, hint, config)
    model = GangModel(problem, cands, hint)
    limits = planning.Limits(problem, plan)
    for k, check in enumerate(plan.checks):
        model.limit([g for g in range(len(problem.gangs)) if limits.subject(g, k)], check.room)
    levels = problem.gang_priority_levels()
    stages: list[Stage] = []
    possible = possible_gangs(problem)
    maxima = {level: sum(1 for g in possible if problem.gangs[g].level == level) for level in levels}
    weights = _level_weights(levels, maxima)
    # The gang counts come first: the later tiers get their share only out of time the counts leave.
    later_tiers = min(sum(_TIER_SHARE.values()) * config.time_limit, 0.3 * (deadline - time.perf_counter()))
    if weights is not None:
        # One solve for every priority level: each level's weight exceeds everything below it can add up to.
        expr = model.gangs_expr(weights)
        current = sum(w * score.placed_at(problem, model.counts, level) for level, w in weights.items())
        top = sum(w * maxima[level] for level, w in weights.items())
        seconds = deadline - time.perf_counter() - later_tiers
        stage = model.solve_stage("gangs", expr, MAX, current, top, seconds, deadline, config.workers)
        stages.append(stage)
        bound = stage.bound
        if pruned and stage.status != "SKIPPED":
            bound = relaxed_bound(problem, weights, _BOUND_SHARE * config.time_limit) or top
        bounds = _decode(bound, levels, weights, maxima)
    else:  # too many levels for exact weights: one stage per level, highest first
        bounds = {}
        for i, level in enumerate(levels):
            expr = model.gangs_expr({level: 1})
            current = score.placed_at(problem, model.counts, level)
            seconds = (deadline - time.perf_counter() - later_tiers) / (len(levels) - i)
            stage = model.solve_stage(
                f"priority {level[0]}{' starving' if level[1] else ''}",
                expr,
                MAX,
                current,
                maxima[level],
                seconds,
                deadline,
                config.workers,
            )
            stages.append(stage)
            bounds[level] = stage.bound
            if pruned and stage.status != "SKIPPED":
                bounds[level] = relaxed_bound(problem, {level: 1}, _BOUND_SHARE * config.time_limit) or maxima[level]

    scale = score.gpu_scale(problem)
    expr, bound = model.resource_expr(scale)
    seconds = min(deadline - time.perf_counter(), _TIER_SHARE["resources"] * config.time_limit)
    current = score.resources(problem, model.counts, scale)
    stages.append(model.solve_stage("resources", expr, MAX, current, bound, seconds, deadline, config.workers))

    seconds = min(deadline - time.perf_counter(), _TIER_SHARE["locality"] * config.time_limit)
    current = score.locality(problem, model.counts)
    if seconds < MIN_STAGE_SECONDS:  # its variables alone take time to build: don't start what can't finish
        stages.append(Stage("locality", "NO_TIME", current, len(model.counts), 0.0))
    else:
        expr, bound = model.locality_expr()
        stages.append(model.solve_stage("locality", expr, MIN, current, bound, seconds, deadline, config.workers))
    found = {level: score.placed_at(problem, model.counts, level) for level in levels}
    return (
        model.counts,
        stages,
        {level: (found[level], max(bounds[level], found[level]), maxima[level]) for level in levels},
    )


_BOUND_SHARE = 0.05  # of the time limit, for the whole-cluster bound when candidates were pruned
_MAX_WEIGHT = 2**40  # keep the weighted objective far from int64 and friendly to CP-SAT's LP


def _level_weights(levels: list[Level], maxima: dict[Level, int]) -> dict[Level, int] | None:
    """Mixed-radix weights, lowest level 1: placing one more gang at a level outweighs any change below."""
    weights, w = {}, 1
    for level in reversed(levels):
        weights[level] = w
        w *= maxima[level] + 1
    return weights if w <= _MAX_WEIGHT else None


def _decode(bound: int, levels: list[Level], weights: dict[Level, int], maxima: dict[Level, int]) -> dict[Level, int]:
    """The lexicographically largest per-level counts whose weighted sum stays within `bound`."""
    out = {}
    for level in levels:
        out[level] = min(maxima[level], bound // weights[level])
        bound -= out[level] * weights[level]
    return out


def _gang_bound(levels: LevelCounts) -> int:
    """An upper bound on gangs placed by any placement at least as good in priority order: levels proven at
    their count, the first open level at its bound, every level below at its most."""
    total, open_level = 0, False
    for found, bound, most in levels.values():
        if open_level:
            total += most
        else:
            total += bound
            open_level = bound > found
    return total


def _placement(
    problem: Problem,
    plan: planning.Plan,
    counts: Counts,
    stages: list[Stage],
    levels: LevelCounts,
    status: str,
    seconds: float,
) -> Placement:
    bindings: dict[str, str] = {}
    for g, gang_counts in counts.items():
        for p, part in enumerate(problem.parts[g]):
            pods = iter(part.pods)  # highest priority first
            for n in sorted(n for (q, n) in gang_counts if q == p):
                for _ in range(gang_counts[(p, n)]):
                    bindings[next(pods).name] = problem.nodes[n].name
    results = []
    explained: dict[tuple[int, ...], str] = {}
    for g, gang in enumerate(problem.gangs):
        placed_pods = sum(counts.get(g, {}).values())
        placed = len(gang.bound_nodes) + placed_pods >= gang.min_member and (placed_pods > 0 or gang.need == 0)
        reason = "" if placed_pods == len(gang.pods) else explain(problem, g, counts, explained)
        results.append(
            GangResult(
                name=gang.name,
                placed=placed,
                min_member=gang.min_member,
                pods=len(gang.pods) + len(gang.bound_nodes),
                placed_pods=placed_pods,
                priority=gang.priority,
                reason=reason,
            )
        )
    objective = sum(1 for g in counts if score.counted(problem, g))
    best_bound = _gang_bound(levels) if levels else objective
    return Placement(
        bindings=bindings,
        gangs=tuple(results),
        status=status,
        objective=objective,
        best_bound=max(best_bound, objective),
        solve_seconds=seconds,
        stages=tuple(s.as_dict() for s in stages),
        levels=tuple(
            {"priority": level[0], "starving": bool(level[1]), "placed": f, "bound": b, "gangs": most}
            for level, (f, b, most) in levels.items()
        ),
        reservations=tuple(_reservation(problem, r) for r in plan.reservations),
        backfilled=tuple(
            problem.gangs[g].name
            for g, gang_counts in counts.items()
            if g not in plan.held()
            and {n for (_p, n) in gang_counts} & {n for r in plan.reservations for (_p, n) in r.counts}
        ),
    )


def _reservation(problem: Problem, planned: planning.Planned) -> Reservation:
    nodes = sorted({problem.nodes[n].name for (_p, n) in planned.counts})
    gpus = sum(
        k * int(problem.demand[problem.parts[planned.gang][p].cls, problem.gpu])
        for (p, _n), k in planned.counts.items()
    )
    return Reservation(problem.gangs[planned.gang].name, tuple(nodes), planned.start, gpus)
