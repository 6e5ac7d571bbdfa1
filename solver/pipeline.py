"""`solve(cluster, config) -> Placement`: one scheduling cycle, the same function live and offline.

A cycle, in order (each step starts from the best placement so far and never makes it worse):

1. greedy hints: a fixed list of variants, plus the previous cycle's plan where it still holds; the best one
   seeds the search and stays the fallback, so a cycle is never worse than greedy;
2. bounds: the relaxation (bound.py) bounds each priority level; a level whose count reaches its bound is done;
3. a whole-problem CP-SAT solve when the model is small enough to prove optimal;
4. ruin-and-recreate search (lns.py) around pending gangs of the levels still open, until each level is at its
   bound or the search's share of the time limit is spent;
5. CP-SAT improves locality with the gang counts and resources held; the bounds are computed again for the
   placement reached.

Every step keeps the reservations the baseline pass makes for starving gangs (planning.py): each greedy pass,
the warm start and each search step place gangs within `Limits` (limits.py), and both CP-SAT models carry the same
limits as constraints. The bounds relax those limits away, so they stay upper bounds (looser ones).

Steps 1 to 4 decide gangs and resources and read the clock only to stop: a longer time limit runs the same
steps further, so it never returns a worse answer.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import TypeAlias

import numpy as np

from gangsolve.solver import planning, pools, preemption, queues, score, shares
from gangsolve.solver.bound import Relaxation, level_bounds
from gangsolve.solver.budget import (
    BUILD_SECONDS,
    EXACT_WORK,
    FORECAST_SHARE,
    HINT_SHARE,
    LOCALITY_MOST,
    LOCALITY_SHARE,
    MIN_STAGE_SECONDS,
    MIP_FROM,
    MIP_SHARE,
    RESERVE,
    TOPOLOGY_SHARE,
    Budget,
)
from gangsolve.solver.candidates import candidates
from gangsolve.solver.caps import QueueCaps
from gangsolve.solver.cpsat import MAX, MIN, GangModel, Stage, possible_gangs
from gangsolve.solver.explain import Explained, explain
from gangsolve.solver.greedy import OutOfTime, greedy, most_allocated_off_gpus, queue_order, smallest_first_order
from gangsolve.solver.limits import Limits, Plan, Planned
from gangsolve.solver.lns import Search
from gangsolve.solver.model import Cluster, GangResult, Level, Placement, Reservation, SolveConfig
from gangsolve.solver.problem import Counts, GangCounts, Problem

# Per priority level: (gangs placed, upper bound on them, gangs that could be placed at all).
LevelCounts: TypeAlias = dict[Level, tuple[int, int, int]]

_STALL = 50  # steps without improvement that end a search whose levels are all at their bounds
# A whole model with at most this many variables is solved exactly first (for up to budget.EXACT_WORK).
_EXACT_VARIABLES = 20_000


def solve(cluster: Cluster, config: SolveConfig | None = None, previous: Mapping[str, str] | None = None) -> Placement:
    """Place `cluster`'s pending gangs, then preempt for those left out (preemption.py). `previous` (pod ->
    node, typically the last cycle's plan) is a warm start: where those pods are still pending and their nodes
    still hold them, it competes as a hint."""
    config = config or SolveConfig()
    placement = preemption.cycle(cluster, config, Budget.of(config), lambda c, b: _place(c, config, b, previous))
    return shares.finish(cluster, placement)


def _place(cluster: Cluster, config: SolveConfig, budget: Budget, previous: Mapping[str, str] | None) -> Placement:
    """The placement, solved node pool by node pool where the cycle splits into pools (pools.py)."""
    split = pools.groups(cluster, config.parallel)
    if split is None:
        return _place_pool(cluster, config, budget, previous)
    # The pools share the cores: CP-SAT's workers among them.
    inner = replace(config, workers=max(1, config.workers // len(split)))
    placements = pools.solve_apart(
        split,
        lambda group: _place_pool(group.cluster, inner, budget, previous, group.exclusions),
        wait=pools.patience(config.time_limit),
    )
    return pools.merged(cluster, split, placements, budget.elapsed())


def _place_pool(
    cluster: Cluster,
    config: SolveConfig,
    budget: Budget,
    previous: Mapping[str, str] | None,
    exclusions: pools.Exclusions | None = None,
) -> Placement:
    problem = Problem(cluster, config.order)
    begun = time.perf_counter()
    # Queue order, as Volcano allocates, holding reservations for the gangs that cannot start (the plan): the
    # baseline never to fall below. Without reservations it is the plain greedy allocator.
    # Forecasts read the clock only on the wall-clock budget: on a budget of steps they all run, as in the bench.
    seconds = FORECAST_SHARE * config.time_limit if config.steps is None else math.inf
    counts, plan = planning.plan(
        problem,
        config.reservations,
        config.forecasts,
        seconds,
        config.plan_resolution,
        starving_only=config.plan_starving_only,
        # Every reservation is within its queue's fair share (planning.py): where queues compete, relaxing it would
        # lend its room to other queues' gangs while its own waits below its share.
        relaxation=0.0 if queues.competing(problem.gangs) else config.plan_relaxation,
    )
    counts = shares.repair(problem, counts, queue_order(problem))
    took = time.perf_counter() - begun
    stages: list[Stage] = []
    status = "GREEDY"
    levels: LevelCounts = {}
    total = None
    if config.use_cpsat and problem.gangs:
        counts, stages, levels, total = _optimise(problem, plan, counts, took, config, budget, previous or {})
        status = "OPTIMAL" if all(found == bound for found, bound, _most in levels.values()) else "FEASIBLE"
    return _placement(problem, counts, stages, levels, total, status, budget.elapsed(), plan, exclusions)


def _limits(problem: Problem, plan: Plan) -> Limits | None:
    """Fresh limits for one pass over the cycle (None when no reservation limits anything)."""
    return Limits(problem, plan) if plan.checks else None


def _optimise(
    problem: Problem,
    plan: Plan,
    baseline: Counts,
    took: float,
    config: SolveConfig,
    budget: Budget,
    previous: Mapping[str, str],
) -> tuple[Counts, list[Stage], LevelCounts, int]:
    scale = score.gpu_scale(problem)
    order = problem.gang_priority_levels()
    possible = possible_gangs(problem)
    most = {level: sum(1 for g in possible if problem.gangs[g].level == level) for level in order}
    deadline = budget.until(1 - RESERVE)
    search_end = budget.until(1 - RESERVE - _locality_share(problem))
    stages: list[Stage] = []

    begun = time.perf_counter()
    queued = queue_order(problem)
    counts = shares.repair(
        problem, _best_hint(problem, plan, baseline, took, previous, scale, budget, search_end), queued
    )
    stages.append(Stage("hint", "GREEDY", _gangs(problem, counts), sum(most.values()), time.perf_counter() - begun))

    if _nothing_left_to_place(problem, counts):
        # Nothing is left to place: every level and the resources placed are at their most, which no bound or
        # search can better (a stream's cycles: the gang just arrived whole, beside gangs whose members are
        # still being created); only locality may still improve.
        bounds = _found(problem, counts, order)
        total = sum(bounds.values())
        stages.append(Stage("bound", "ALL_PLACED", _gangs(problem, counts), _gangs(problem, counts), 0.0))
    else:
        counts, proving, bounds, total = _prove(
            problem, plan, counts, order, most, queued, scale, config, budget, search_end, deadline
        )
        stages.extend(proving)

    counts, locality = _locality(problem, plan, counts, order, scale, config, budget, deadline)
    stages.extend(locality)
    found = _found(problem, counts, order)
    return counts, stages, {level: (found[level], bounds[level], most[level]) for level in order}, total


def _prove(
    problem: Problem,
    plan: Plan,
    counts: Counts,
    order: list[Level],
    most: dict[Level, int],
    queued: list[int],
    scale: int,
    config: SolveConfig,
    budget: Budget,
    search_end: float,
    deadline: float,
) -> tuple[Counts, list[Stage], dict[Level, int], int]:
    """2-4. Bound the hint's levels, solve exactly where the model is small, search towards the bounds (until
    `search_end`), and bound again at the end (until `deadline`): the placement, its stages and each level's
    bound with their total."""
    stages: list[Stage] = []
    begun = time.perf_counter()
    relaxation = Relaxation(problem)
    bounds, total = level_bounds(relaxation, _found(problem, counts, order), most, budget.left(search_end))
    stages.append(Stage("bound", "LP", _gangs(problem, counts), total, time.perf_counter() - begun))

    if any(_found(problem, counts, order)[level] < bounds[level] for level in order) and not budget.passed(search_end):
        work = budget.up_to(EXACT_WORK)
        counts, proven, stage = _exact(problem, counts, order, search_end, config.workers, plan, work)
        if stage is not None:
            stages.append(stage)
        if proven:
            bounds = _found(problem, counts, order)
            total = sum(bounds.values())

    if not budget.passed(search_end) and budget.may_step(0):  # setting a search up costs 0.2 s on large clusters
        counts, stage, (bounds, total) = _search(
            problem, plan, counts, order, (bounds, total), relaxation, most, budget, search_end, queued, scale
        )
        if stage is not None:
            stages.append(stage)

    begun = time.perf_counter()
    mip = budget.limit >= MIP_FROM
    seconds = budget.seconds(MIP_SHARE, deadline) if mip else budget.left(deadline)
    final = level_bounds(relaxation, _found(problem, counts, order), most, seconds, mip=mip)
    bounds, total = _tighter((bounds, total), final)
    stages.append(Stage("bound", "MIP" if mip else "LP", _gangs(problem, counts), total, time.perf_counter() - begun))
    return counts, stages, bounds, total


def _search(
    problem: Problem,
    plan: Plan,
    counts: Counts,
    order: list[Level],
    bounded: tuple[dict[Level, int], int],
    relaxation: Relaxation,
    most: dict[Level, int],
    budget: Budget,
    search_end: float,
    queued: list[int],
    scale: int,
) -> tuple[Counts, Stage | None, tuple[dict[Level, int], int]]:
    """4. Ruin-and-recreate steps from `counts` until every level is at its bound (`bounded`, tightened as
    levels close) or the search's time or steps are spent: the placement, its stage (None without a step) and
    the bounds."""
    bounds, total = bounded
    begun = time.perf_counter()
    search = Search(problem, counts, limits=_limits(problem, plan))
    stalled, ended = 0, "TIME_LIMIT"
    while not budget.passed(search_end) and budget.may_step(search.steps):
        found = _found(problem, search.counts, order)
        open_levels = {level for level in order if found[level] < bounds[level]}
        # Once every level is at its bound, steps may still place more resources, until they stop doing so;
        # they no longer move gangs for nothing then (a cycle's answer should not change without a reason).
        step = search.step(open_levels or set(order), drift=bool(open_levels))
        if step is None or (not open_levels and stalled >= _STALL):
            ended = "AT_BOUND"  # every level's count is proven optimal; nothing more to place, or stalled
            break
        stalled = 0 if step.improved else stalled + 1
        now = _found(problem, search.counts, order)
        if {level for level in order if now[level] < bounds[level]} != open_levels:
            # A level reached its bound: the levels below are now bounded with it held at its count.
            closed = level_bounds(relaxation, now, most, budget.left(search_end))
            bounds, total = _tighter((bounds, total), closed)
    if problem.shared:  # the search keeps each GPU's room (shares.restore); where it could not, repair cuts
        repaired = shares.repair(problem, search.counts, queued)
        # The shares repair takes off may cost far more GPUs than the gangs it keeps are worth (score.pays).
        better = score.rank(problem, repaired, scale) >= score.rank(problem, counts, scale) and score.pays(
            problem, counts, repaired, search.rate
        )
        counts = repaired if better else counts
    else:
        counts = search.counts
    if ended == "TIME_LIMIT" and not budget.may_step(search.steps):
        ended = "STEP_LIMIT"
    stage = None
    if search.steps:
        detail = f"{search.steps} steps, {search.improvements} improving"
        seconds = time.perf_counter() - begun
        stage = Stage("search", ended, _gangs(problem, counts), total, seconds, detail)
    return counts, stage, (bounds, total)


def _nothing_left_to_place(problem: Problem, counts: Counts) -> bool:
    """Every gang's pods placed, but for gangs with fewer pods than they need (members not created yet)."""
    return all(
        sum(counts.get(g, {}).values()) == len(gang.pods) or len(gang.pods) < max(gang.need, 1)
        for g, gang in enumerate(problem.gangs)
    )


def _tighter(old: tuple[dict[Level, int], int], new: tuple[dict[Level, int], int]) -> tuple[dict[Level, int], int]:
    """Bounds for a placement no worse than the one `old` was computed for hold for it too: keep the lower."""
    return {level: min(bound, new[0][level]) for level, bound in old[0].items()}, min(old[1], new[1])


def _found(problem: Problem, counts: Counts, order: list[Level]) -> dict[Level, int]:
    return {level: score.placed_at(problem, counts, level) for level in order}


def _gangs(problem: Problem, counts: Counts) -> int:
    return score.gangs(problem, counts)


# --- 1. hints -------------------------------------------------------------------------------------------------

# No single greedy wins everywhere: small gangs first places more where GPUs run out (the synthetic clusters),
# queue order with MostAllocated where single pods of many shapes compete (the OpenB trace). Both place each
# gang's minimum before extra pods of elastic gangs. (Smallest first with best fit never placed more than
# with MostAllocated on the benchmark's scenarios.)
# Where gangs keep to one domain of a required level and prefer few of a narrower one, a third pass chooses the
# required domain where the gang fits in one preferred domain first, as Volcano and KAI do, before the tightest:
# fewer racks per gang, and a cycle of one arriving gang cannot tell the passes apart by gangs placed.
_VARIANTS = (("smallest", most_allocated_off_gpus, False), ("queue", most_allocated_off_gpus, False))
_GATHERING = ("smallest", most_allocated_off_gpus, True)


def _best_hint(
    problem: Problem,
    plan: Plan,
    baseline: Counts,
    took: float,
    previous: Mapping[str, str],
    scale: int,
    budget: Budget,
    search_end: float,
) -> Counts:
    """The best of the baseline (which took `took` seconds), the greedy variants (the first one while it fits
    before `search_end`, the others while they fit in the hints' share; one still walking at `search_end` is
    abandoned) and the warm start, each within the reservations' limits."""

    def key(counts: Counts) -> tuple[tuple[int, ...], tuple[int, ...], int]:
        spans = tuple(-k for k in score.topology(problem, counts))
        return score.rank(problem, counts, scale), spans, -score.locality(problem, counts)

    orders = {"smallest": smallest_first_order(problem), "queue": queue_order(problem)}
    hints = [baseline]
    warm = warm_start(problem, previous, _limits(problem, plan))
    if warm:  # first, so that it wins ties: a plan that still holds is not changed for nothing
        limits = _limits(problem, plan)
        hints.insert(0, greedy(problem, orders["smallest"], most_allocated_off_gpus, True, warm, limits))
    hints_end = budget.until(HINT_SHARE)
    # Where shares are pending, FGD's choice among the best-fit nodes, in queue order, first: the most GPUs.
    variants = ((("queue", shares.fragmentation_growth, False),) if problem.shared else ()) + _VARIANTS
    if any(g.colocate and g.preferred for g in problem.gangs):
        variants += (_GATHERING,)
    for i, (name, scorer, gather) in enumerate(variants):
        if budget.left(hints_end if i else search_end) < took:
            break  # another pass (estimated by the last one's time) would eat into the search's time
        begun = time.perf_counter()
        limits = _limits(problem, plan)
        try:
            hints.append(
                greedy(
                    problem, orders[name], scorer, minimum_first=True, limits=limits, gather=gather, until=search_end
                )
            )
        except OutOfTime:
            break  # slower than its estimate: abandoned rather than overrun the cycle
        took = time.perf_counter() - begun
    # A pass that places more gangs by leaving GPUs idle (small gangs first) must pay for them (score.pays).
    rate = score.gpus_per_gang(problem, baseline)
    return max((hint for hint in hints if score.pays(problem, baseline, hint, rate)), key=key)


def warm_start(problem: Problem, previous: Mapping[str, str], limits: Limits | None = None) -> Counts:
    """The gangs of `previous` (pod -> node) that it placed whole and that still fit there: pods still pending,
    nodes still eligible, capacity still free (within `limits`), the gang's minimum reached, one domain for
    co-located gangs, its queue's cap. Gangs are taken in queue order; one that no longer fits is dropped whole."""
    where = {
        pod.name: (g, p) for g, parts in enumerate(problem.parts) for p, part in enumerate(parts) for pod in part.pods
    }
    per_gang: dict[int, GangCounts] = {}
    for pod, node in previous.items():
        if pod in where and node in problem.node_index:
            g, p = where[pod]
            key = (p, problem.node_index[node])
            per_gang.setdefault(g, {})[key] = per_gang.get(g, {}).get(key, 0) + 1
    free = problem.free.copy()
    caps = QueueCaps(problem)
    counts: Counts = {}
    for g in queue_order(problem):
        gang_counts = per_gang.get(g)
        if not gang_counts or sum(gang_counts.values()) < max(problem.gangs[g].need, 1):
            continue
        use = np.zeros_like(free)
        for (p, n), k in gang_counts.items():
            use[n] += k * problem.demand[problem.parts[g][p].cls]
        nodes = sorted({n for (_p, n) in gang_counts})
        eligible = all(problem.eligible[problem.parts[g][p].cls, n] for (p, n) in gang_counts)
        room = free if limits is None else limits.room_for(g, free)
        if not eligible or (use[nodes] > room[nodes]).any() or not _one_domain(problem, g, nodes):
            continue
        if not caps.take(g, gang_counts):
            continue
        free -= use
        if limits is not None:
            limits.take(g, gang_counts)
        counts[g] = gang_counts
    return counts


def _one_domain(problem: Problem, g: int, nodes: list[int]) -> bool:
    key = problem.gangs[g].colocate
    if not key:
        return True
    domain = problem.domains(key)
    bound = [problem.node_index[n] for n in problem.gangs[g].bound_nodes if n in problem.node_index]
    values = {int(domain[n]) for n in [*nodes, *bound]}
    return len(values) == 1 and -1 not in values


# --- 3. the whole problem, exactly ------------------------------------------------------------------------------


def _exact(
    problem: Problem,
    counts: Counts,
    order: list[Level],
    deadline: float,
    workers: int,
    plan: Plan | None = None,
    work: float = EXACT_WORK,
) -> tuple[Counts, bool, Stage | None]:
    """CP-SAT on every fitting node when the model is small: the gangs per level, as one objective with
    mixed-radix weights (one more gang at a level outweighs any change below it), then, with those held, the
    resources placed. Returns the placement, whether its gang counts are proven optimal (among placements that
    keep the reservations), and the stage (None when not run)."""
    cands = {
        (g, p): np.flatnonzero(problem.fit[part.cls] > 0)
        for g in range(len(problem.gangs))
        for p, part in enumerate(problem.parts[g])
    }
    if sum(len(nodes) for nodes in cands.values()) > _EXACT_VARIABLES:
        return counts, False, None
    begun = time.perf_counter()
    try:
        model = GangModel(problem, cands, counts)
        _limit(model, problem, plan)
        weights, w = {}, 1
        for level in reversed(order):
            weights[level] = w
            w *= sum(1 for g in model.placed if problem.gangs[g].level == level) + 1
        if w > _MAX_WEIGHT:
            return counts, False, None
        current = sum(weights[problem.gangs[g].level] for g in counts if g in model.placed)
        expr = model.gangs_expr(weights)
    except Exception as exc:  # building the model failed: keep the placement, as for a failing stage
        return counts, False, _failed("exact", exc, begun)
    stage = model.solve_stage("exact", expr, MAX, current, w - 1, work, deadline, workers)
    if model.counts is not counts:
        # A new set of gangs came with whatever resources CP-SAT first found for them, which the search after it
        # may not refill (it meets an elastic gang's minimum with its first pods), so a shorter cycle that skipped
        # this stage could place more GPUs on as many gangs.
        scale = score.gpu_scale(problem)
        resources, room = model.resource_expr(scale)
        held = score.resources(problem, model.counts, scale)
        filled = model.solve_stage("exact", resources, MAX, held, room, work, deadline, workers)
        detail = f"then resources {filled.status}" + (f": {filled.detail}" if filled.detail else "")
    else:
        detail = stage.detail
    seconds = time.perf_counter() - begun
    exact = Stage(stage.name, stage.status, stage.objective, stage.bound, seconds, detail)
    return model.counts, stage.status == "OPTIMAL", exact


def _failed(name: str, exc: Exception, begun: float) -> Stage:
    return Stage(name, "FAILED", 0, 0, time.perf_counter() - begun, f"{type(exc).__name__}: {exc}")


_MAX_WEIGHT = 2**40  # keep the weighted objective far from int64 and friendly to CP-SAT's LP


# --- 5. locality ------------------------------------------------------------------------------------------------


def _locality(
    problem: Problem,
    plan: Plan,
    counts: Counts,
    order: list[Level],
    scale: int,
    config: SolveConfig,
    budget: Budget,
    deadline: float,
) -> tuple[Counts, list[Stage]]:
    """The locality tier, on candidate nodes, with every level's count, the resources placed and the
    reservations' limits held: the domains gangs span at each preferred topology level, widest first (one
    `topology` stage each), then nodes spanned per gang and empty GPU nodes broken into (`locality`)."""
    begun = time.perf_counter()
    seconds = budget.seconds(max(LOCALITY_MOST, _locality_share(problem)), deadline)
    counts = _one_node_each(problem, plan, counts, deadline)
    current = score.locality(problem, counts)
    levels = score.topology_levels(problem)
    if not levels and current == len(counts):  # one node per gang, no empty GPU node opened: the bound
        return counts, [Stage("locality", "SKIPPED", current, current, time.perf_counter() - begun)]
    # Picking candidates and building the model take about 100 us a variable: don't start what cannot finish.
    variables = sum(
        min(len(problem.fitting(part.cls)), max(config.min_candidates, config.candidates_per_pod * len(part.pods)))
        for parts in problem.parts
        for part in parts
    )
    if seconds < MIN_STAGE_SECONDS + BUILD_SECONDS * variables:
        return counts, [Stage("locality", "NO_TIME", current, len(counts), time.perf_counter() - begun)]
    cands, _pruned = candidates(problem, counts, config)
    stages: list[Stage] = []
    try:
        model = GangModel(problem, cands, counts)
        _limit(model, problem, plan)
        for level in order:
            model.model.add(model.gangs_expr({level: 1}) >= score.placed_at(problem, counts, level))
        resources, _room = model.resource_expr(scale)
        model.model.add(resources >= score.resources(problem, counts, scale))
        work = budget.work(seconds) / (1 + levels)  # an equal share for each stage
        spans = score.topology(problem, counts)
        for tier in range(levels):
            expr, bound = model.topology_expr(tier)
            stage = model.solve_stage("topology", expr, MIN, spans[tier], bound, work, deadline, config.workers)
            keys = sorted({g.preferred[tier] for g in problem.gangs if tier < len(g.preferred)})
            stages.append(_timed(stage, begun, f"level {tier + 1}: {', '.join(keys)}"))
            begun = time.perf_counter()
        expr, bound = model.locality_expr()
    except Exception as exc:  # building the model failed: keep the placement, as for a failing stage
        return (model.counts if stages else counts), [*stages, _failed("locality", exc, begun)]
    current = score.locality(problem, model.counts)
    stage = model.solve_stage("locality", expr, MIN, current, bound, work, deadline, config.workers)
    return model.counts, [*stages, _timed(stage, begun)]


def _one_node_each(problem: Problem, plan: Plan, counts: Counts, deadline: float = math.inf) -> Counts:
    """Each placed gang spread over several nodes moved whole onto one node that holds it, where nothing else
    decides where a gang may go (no reservations, shares, topology or co-location): the locality stage's
    bound, one node per gang, without a model. Best fit put a stream's small gangs partly on the fullest node.
    The gang's own nodes first, then the others, each by best fit; an empty GPU node is not broken into. Each
    move reads every node, so past `deadline` the gangs left stay where they are (3 s at 65,536 nodes)."""
    if problem.shared or plan.checks or score.topology_levels(problem):
        return counts
    empty = score.empty_gpu_nodes(problem)
    free = problem.free.copy()
    for g, gang_counts in counts.items():
        for (p, n), k in gang_counts.items():
            problem.take(problem.parts[g][p].cls, free, n, k)
    moved = dict(counts)
    for g, gang_counts in counts.items():
        nodes = sorted({n for (_p, n) in gang_counts})
        if len(nodes) == 1 or problem.gangs[g].colocate:
            continue
        if time.perf_counter() > deadline:
            break
        pods: dict[int, int] = {}
        for (p, n), k in gang_counts.items():
            pods[p] = pods.get(p, 0) + k
            free[n] += k * problem.demand[problem.parts[g][p].cls]  # its own room back, while it moves
        use = sum(k * problem.demand[problem.parts[g][p].cls] for p, k in pods.items())
        asked = np.flatnonzero(use)
        holds = (free[:, asked] >= use[asked]).all(axis=1)
        for p in pods:
            holds &= problem.eligible[problem.parts[g][p].cls]
        if use @ problem.gpus > 0:
            holds &= ~empty
        own = [n for n in nodes if holds[n]]
        rows = np.array(own) if own else np.flatnonzero(holds)
        if len(rows):
            left = ((free[rows] - use) * problem.inv_allocatable[rows]).sum(axis=1)
            target = int(rows[int(np.argmin(left))])
            moved[g] = {(p, target): k for p, k in pods.items()}
        for (p, n), k in moved[g].items():
            problem.take(problem.parts[g][p].cls, free, n, k)
    return moved


def _locality_share(problem: Problem) -> float:
    return TOPOLOGY_SHARE if score.topology_levels(problem) else LOCALITY_SHARE


def _timed(stage: Stage, begun: float, detail: str = "") -> Stage:
    """The stage with its time counted from `begun` (building its part of the model included)."""
    text = "; ".join(t for t in (detail, stage.detail) if t)
    return Stage(stage.name, stage.status, stage.objective, stage.bound, time.perf_counter() - begun, text)


def _limit(model: GangModel, problem: Problem, plan: Plan | None) -> None:
    """The reservations' limits as constraints: per check, the gangs subject to it fit in its room, which a
    gang holding a reservation gives back when it is placed now after all."""
    limits = _limits(problem, plan) if plan is not None else None
    if limits is None:
        return
    given_back: dict[int, list[tuple[int, np.ndarray]]] = {}
    for g, held in limits.reserved.items():
        for k, capacity in held:
            given_back.setdefault(k, []).append((g, capacity))
    for k, check in enumerate(limits.plan.checks):
        subject = [g for g in range(len(problem.gangs)) if limits.subject(g, k)]
        model.limit(subject, check.room, given_back.get(k, []), limits.whole.holding(k) if limits.whole else None)


# --- the answer -------------------------------------------------------------------------------------------------


def _placement(
    problem: Problem,
    counts: Counts,
    stages: list[Stage],
    levels: LevelCounts,
    total: int | None,
    status: str,
    seconds: float,
    plan: Plan | None = None,
    exclusions: pools.Exclusions | None = None,
) -> Placement:
    bindings = {
        pod: node for g, gang_counts in counts.items() for pod, node in problem.bindings(g, gang_counts).items()
    }
    results = []
    explained = Explained(outside=exclusions)
    plan = plan or Plan()
    limits = _limits(problem, plan)
    for g, gang in enumerate(problem.gangs):
        placed_pods = sum(counts.get(g, {}).values())
        placed = len(gang.bound_nodes) + placed_pods >= gang.min_member and (placed_pods > 0 or gang.need == 0)
        reason = "" if placed_pods == len(gang.pods) else explain(problem, g, counts, explained, limits)
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
    objective = _gangs(problem, counts)
    reserved = {n for r in plan.reservations if r.gang not in counts for (_p, n) in r.counts}
    return Placement(
        bindings=bindings,
        gangs=tuple(results),
        status=status,
        objective=objective,
        best_bound=max(objective if total is None else total, objective),
        solve_seconds=seconds,
        stages=tuple(s.as_dict() for s in stages),
        levels=tuple(
            {
                "priority": level[0],
                "fairShareTier": level[1],
                "starving": bool(level[2]),
                "placed": f,
                "bound": b,
                "gangs": most,
            }
            for level, (f, b, most) in levels.items()
        ),
        queues=queues.report(problem.cluster, bindings),
        # A gang started after all (a later step found it room now) holds no reservation.
        reservations=tuple(_reservation(problem, r) for r in plan.reservations if r.gang not in counts),
        forecasts=tuple(
            replace(_reservation(problem, r), held=False, guessed=r.gang in plan.guessed)
            for r in plan.forecasts
            if r.gang not in counts
        ),
        backfilled=tuple(
            problem.gangs[g].name
            for g, gang_counts in counts.items()
            if g not in plan.held() and {n for (_p, n) in gang_counts} & reserved
        ),
    )


def _reservation(problem: Problem, planned: Planned) -> Reservation:
    nodes = sorted({problem.nodes[n].name for (_p, n) in planned.counts})
    gpus = sum(k * int(problem.gpu_demand[problem.parts[planned.gang][p].cls]) for (p, _n), k in planned.counts.items())
    bindings = problem.bindings(planned.gang, planned.counts)
    runtime = problem.gangs[planned.gang].runtime
    end = planned.start + runtime if planned.start is not None and runtime is not None else None
    name = problem.gangs[planned.gang].name
    return Reservation(name, tuple(nodes), planned.start, gpus, bindings, end, earliest=planned.earliest)
