"""`solve(cluster, config) -> Placement`: one scheduling cycle, the same function live and offline."""

from __future__ import annotations

import time

from solver import score
from solver.candidates import candidates
from solver.cpsat import MAX, MIN, MIN_STAGE_SECONDS, GangModel, Stage
from solver.explain import explain
from solver.greedy import Counts, greedy, smallest_first_order
from solver.model import Cluster, GangResult, Placement, SolveConfig
from solver.problem import Problem

# Leave this share of the time limit for reading the solution and explaining pending gangs (about 0.4 s
# at 5,000 nodes and 1,000 gangs).
_RESERVE = 0.15


def solve(cluster: Cluster, config: SolveConfig | None = None) -> Placement:
    config = config or SolveConfig()
    started = time.perf_counter()
    deadline = started + config.time_limit * (1 - _RESERVE)
    problem = Problem(cluster)
    scale = score.gpu_scale(problem)
    # The queue-order greedy is the baseline never to fall below; smallest-first often places more gangs.
    tries = [greedy(problem), greedy(problem, smallest_first_order(problem))]
    counts = max(tries, key=lambda c: (score.rank(problem, c, scale), -score.locality(problem, c)))
    stages: list[Stage] = []
    status = "GREEDY"
    if config.use_cpsat and problem.gangs:
        counts, stages = _optimise(problem, counts, config, deadline)
        proven = all(s.status in ("OPTIMAL", "SKIPPED") for s in stages if s.name.startswith("priority "))
        status = "OPTIMAL" if proven else "FEASIBLE"
    return _placement(problem, counts, stages, status, time.perf_counter() - started)


# Most of the time goes to the gang counts; the resource and locality tiers get capped shares, as their bounds
# are weak and their gains small next to placing another gang.
_TIER_SHARE = {"resources": 0.15, "locality": 0.05}


def _optimise(problem: Problem, hint: Counts, config: SolveConfig, deadline: float) -> tuple[Counts, list[Stage]]:
    model = GangModel(problem, candidates(problem, hint, config), hint)
    levels = problem.gang_priority_levels()
    scale = score.gpu_scale(problem)
    stages = []
    for i, level in enumerate(levels):
        expr, bound = model.level_expr(level)
        current = score.placed_at(problem, model.counts, level)
        later_tiers = sum(_TIER_SHARE.values()) * config.time_limit
        seconds = (deadline - time.perf_counter() - later_tiers) / (len(levels) - i)
        stages.append(model.solve_stage(f"priority {level}", expr, MAX, current, bound, seconds, deadline, config.workers))

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
    return model.counts, stages


def _placement(problem: Problem, counts: Counts, stages: list[Stage], status: str, seconds: float) -> Placement:
    bindings: dict[str, str] = {}
    for g, gang_counts in counts.items():
        for p, part in enumerate(problem.parts[g]):
            pods = iter(part.pods)  # highest priority first
            for n in sorted(n for (q, n) in gang_counts if q == p):
                for _ in range(gang_counts[(p, n)]):
                    bindings[next(pods).name] = problem.nodes[n].name
    results = []
    explained: dict = {}
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
    levels = [s for s in stages if s.name.startswith("priority ")]
    objective = sum(1 for g in counts if score.counted(problem, g))
    best_bound = sum(s.bound for s in levels) if levels else objective
    return Placement(
        bindings=bindings,
        gangs=tuple(results),
        status=status,
        objective=objective,
        best_bound=max(best_bound, objective),
        solve_seconds=seconds,
        stages=tuple(s.as_dict() for s in stages),
    )
