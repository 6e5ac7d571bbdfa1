"""The objective tiers, evaluated on a placement in plain Python: used to compare CP-SAT with its hint, to
skip stages the hint already wins, and by the benchmarks."""

from __future__ import annotations

import numpy as np

from gangsolve.solver.model import SHARE, Level
from gangsolve.solver.problem import Counts, Problem


def counted(problem: Problem, g: int) -> bool:
    """Gangs whose placement is an all-or-nothing decision this cycle (not yet at their minimum)."""
    gang = problem.gangs[g]
    return bool(gang.pods) and gang.need > 0


def placed_at(problem: Problem, counts: Counts, level: Level) -> int:
    return sum(1 for g in counts if counted(problem, g) and problem.gangs[g].level == level)


def gpu_scale(problem: Problem) -> int:
    """A weight for one GPU larger than all the cpu millicores any placement can add up to."""
    cpu = problem.res_index.get("cpu")
    if cpu is None:
        return 1
    return int(sum(problem.demand[part.cls, cpu] * len(part.pods) for parts in problem.parts for part in parts)) + 1


def pod_weight(problem: Problem, cls: int, scale: int) -> int:
    """Resources placed, GPUs first: one pod's weight in the resource tier."""
    cpu = problem.res_index.get("cpu")
    return int(problem.gpu_demand[cls]) * scale + (int(problem.demand[cls, cpu]) if cpu is not None else 0)


def gpu_weights(problem: Problem) -> np.ndarray:
    """What one pod of each class takes of the GPUs (in milli-GPUs where pods share GPUs)."""
    share = problem.res_index.get(SHARE) if problem.shared else None
    weights: np.ndarray = problem.gpu_demand if share is None else problem.demand[:, share]
    return weights


def gpus(problem: Problem, counts: Counts) -> int:
    """The GPUs the pods of `counts` take (as `gpu_weights` counts them)."""
    weights = gpu_weights(problem)
    return sum(int(weights[problem.parts[g][p].cls]) * k for g, c in counts.items() for (p, _n), k in c.items())


def gangs(problem: Problem, counts: Counts) -> int:
    return sum(1 for g in counts if counted(problem, g))


def gpus_per_gang(problem: Problem, counts: Counts) -> int:
    """The GPUs a gang of `counts` takes on average (at least 1): the most GPUs one more gang placed may
    leave idle. Counting gangs alone, the smallest first wins: on OpenB's shared GPUs at 130% load, 40 more
    pods placed for 750 fewer GPUs."""
    return max(1, round(gpus(problem, counts) / max(gangs(problem, counts), 1)))


def pays(problem: Problem, base: Counts, counts: Counts, rate: int) -> bool:
    """Whether `counts` leaves at most `rate` GPUs idle per gang it places beyond `base` (as `gpus` counts)."""
    return pays_for(gangs(problem, counts) - gangs(problem, base), gpus(problem, counts) - gpus(problem, base), rate)


def pays_for(gangs_gained: int, gpus_gained: int, rate: int) -> bool:
    return gangs_gained <= 0 or gpus_gained >= -rate * gangs_gained


def resources(problem: Problem, counts: Counts, scale: int) -> int:
    return sum(
        k * pod_weight(problem, problem.parts[g][p].cls, scale) for g, c in counts.items() for (p, _n), k in c.items()
    )


def empty_gpu_nodes(problem: Problem) -> np.ndarray:
    empty: np.ndarray = (problem.gpu_allocatable > 0) & (problem.free @ problem.gpus == problem.gpu_allocatable)
    return empty


def locality(problem: Problem, counts: Counts) -> int:
    """Nodes spanned, summed over gangs, plus empty GPU nodes that GPU pods were put on (lower is better)."""
    empty = empty_gpu_nodes(problem)
    spanned = sum(len({n for (_p, n) in c}) for c in counts.values())
    opened = {
        n for g, c in counts.items() for (p, n) in c if empty[n] and problem.gpu_demand[problem.parts[g][p].cls] > 0
    }
    return spanned + len(opened)


def topology_levels(problem: Problem) -> int:
    """How many preferred topology levels the deepest gang has: the locality tier's lexicographic steps."""
    return max((len(gang.preferred) for gang in problem.gangs), default=0)


def spanned(problem: Problem, g: int, level: int, nodes: set[int]) -> int:
    """Domains of gang g's `level`-th preferred label that `nodes` span (a node without the label counts as
    a domain of its own); 0 when the gang has no such level."""
    preferred = problem.gangs[g].preferred
    if level >= len(preferred):
        return 0
    domain = problem.domains(preferred[level])
    return len({int(domain[n]) if domain[n] >= 0 else -1 - n for n in nodes})


def topology(problem: Problem, counts: Counts) -> tuple[int, ...]:
    """The locality tier's first steps: per preferred level (widest first), the domains placed gangs span,
    summed over gangs (lower is better, compared lexicographically)."""
    nodes = {g: {n for (_p, n) in c} for g, c in counts.items()}
    return tuple(
        sum(spanned(problem, g, level, used) for g, used in nodes.items()) for level in range(topology_levels(problem))
    )


def rank(problem: Problem, counts: Counts, scale: int) -> tuple[int, ...]:
    """The lexicographic worth of a placement: gangs placed per priority level (highest first), then
    resources placed. Higher is better."""
    levels = problem.gang_priority_levels()
    return (*(placed_at(problem, counts, level) for level in levels), resources(problem, counts, scale))
