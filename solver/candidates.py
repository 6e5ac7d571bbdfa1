"""Candidate pruning: which nodes the model may use for each gang part.

On a big cluster most nodes are interchangeable for a given pod class (same free capacity, same eligibility).
Offering every gang every node only multiplies symmetric choices, so each part is offered a few nodes from each
group of identical nodes, best-fit groups first, and consecutive gangs are offered different members of a group
so that together they can still fill it. The greedy hint's nodes are always offered, so the hint stays feasible.
"""

from __future__ import annotations

import numpy as np

from gangsolve.solver.greedy import node_scores
from gangsolve.solver.model import SolveConfig
from gangsolve.solver.problem import Counts, GangCounts, Problem


class CandidatePicker:
    def __init__(self, problem: Problem, config: SolveConfig) -> None:
        self.problem = problem
        self.config = config
        self._groups: dict[int, list[np.ndarray]] = {}
        self._offset: dict[tuple[int, int], int] = {}
        self._fitting: dict[int, np.ndarray] = {}

    def groups(self, cls: int) -> list[np.ndarray]:
        """Nodes that can hold a pod of `cls`, grouped by identical free capacity, best-fit groups first."""
        if cls not in self._groups:
            problem = self.problem
            nodes = self.fitting(cls)
            if len(nodes) == 0:
                self._groups[cls] = []
            else:
                _, first, inverse = np.unique(problem.free[nodes], axis=0, return_index=True, return_inverse=True)
                inverse = inverse.reshape(-1)
                score = node_scores(problem, cls, problem.free)[nodes[first]]
                order = np.lexsort((nodes[first], score))
                members = [nodes[inverse == k] for k in range(len(first))]
                self._groups[cls] = [members[k] for k in order]
        return self._groups[cls]

    def fitting(self, cls: int) -> np.ndarray:
        if cls not in self._fitting:
            self._fitting[cls] = np.flatnonzero(self.problem.fit[cls] > 0)
        return self._fitting[cls]

    def pick(self, cls: int, pods: int, mask: np.ndarray | None = None) -> np.ndarray:
        limit = max(self.config.min_candidates, self.config.candidates_per_pod * pods)
        groups = self.groups(cls)
        every = self.fitting(cls)
        if mask is not None:
            every = every[mask[every]]
        if len(every) <= limit:
            return every
        chosen: list[np.ndarray] = []
        taken = 0
        for k, members in enumerate(groups):
            if mask is not None:
                members = members[mask[members]]
            if len(members) == 0:
                continue
            take = min(pods, len(members), limit - taken)
            start = self._offset.get((cls, k), 0) % len(members)
            chosen.append(np.take(members, range(start, start + take), mode="wrap"))
            self._offset[(cls, k)] = start + take
            taken += take
            if taken >= limit:
                break
        return np.unique(np.concatenate(chosen)) if chosen else np.zeros(0, dtype=np.int64)


def candidates(problem: Problem, hint: Counts, config: SolveConfig) -> tuple[dict[tuple[int, int], np.ndarray], bool]:
    """(gang, part) -> sorted node indices the model may place that part on; and whether any part was
    offered fewer nodes than could hold it (then the model's bound holds for the pruned problem only)."""
    picker = CandidatePicker(problem, config)
    result: dict[tuple[int, int], np.ndarray] = {}
    pruned = False
    for g, gang in enumerate(problem.gangs):
        hinted = hint.get(g, {})
        masks: list[np.ndarray | None] = [None]
        if gang.colocate:
            masks = list(_domain_masks(problem, g, hinted))
        if gang.preferred and hinted:  # a placed gang's locality: fewer of its preferred domains, not others
            masks = list(_preferred_masks(problem, g, hinted, masks))
        for p, part in enumerate(problem.parts[g]):
            picked = [picker.pick(part.cls, len(part.pods), m) for m in masks]
            picked.append(np.array([n for (q, n) in hinted if q == p], dtype=np.int64))
            result[(g, p)] = np.unique(np.concatenate(picked)).astype(np.int64)
            pruned = pruned or len(result[(g, p)]) < len(picker.fitting(part.cls))
    return result, pruned


def _domain_masks(problem: Problem, g: int, hinted: GangCounts, most: int = 4) -> list[np.ndarray]:
    """For a co-located gang: the hint's domain and the few roomiest others, one node mask each."""
    gang = problem.gangs[g]
    domain = problem.domains(gang.colocate or "")
    eligible = np.zeros(len(problem.nodes), dtype=bool)
    for part in problem.parts[g]:
        eligible |= problem.fit[part.cls] > 0
    fixed = problem.members_domain(g)
    if fixed is not None:  # its bound members' domain; none where they disagree or lack the label
        return [domain == fixed] if fixed >= 0 else []
    ids = domain[eligible & (domain >= 0)]
    if len(ids) == 0:
        return []
    gpus = np.bincount(ids, weights=problem.free[eligible & (domain >= 0)] @ problem.gpus)
    pods = np.bincount(ids, weights=problem.free[eligible & (domain >= 0), problem.res_index["pods"]])
    roomiest = list(np.lexsort((np.arange(len(gpus)), -pods, -gpus))[:most])
    roomiest += [int(domain[n]) for (_, n) in hinted]
    return [domain == d for d in sorted({int(d) for d in roomiest})]


def _preferred_masks(
    problem: Problem, g: int, hinted: GangCounts, within: list[np.ndarray | None], most: int = 2
) -> list[np.ndarray]:
    """For a gang with preferred topology levels: the domains of its narrowest preferred level that the hint
    uses and the few that hold most of its pods beside them, inside the hint's required domain (one node
    mask each), so that the locality stage may gather the gang into fewer of them."""
    gang = problem.gangs[g]
    domain = problem.domains(gang.preferred[-1])
    ids = np.where(domain >= 0, domain, int(domain.max(initial=-1)) + 1 + np.arange(len(domain)))
    main = max(problem.parts[g], key=lambda part: len(part.pods)).cls
    nodes = [n for (_p, n) in hinted]
    # The required domain the hint chose (or everything): the stage keeps a gang in its required domain.
    mask = next((m for m in within if m is not None and nodes and m[nodes[0]]), None)
    slots = problem.fit[main] if mask is None else np.where(mask, problem.fit[main], 0)
    room = np.bincount(ids, weights=slots)
    chosen = {int(d) for d in np.argsort(-room, kind="stable")[:most] if room[d] > 0}
    chosen |= {int(ids[n]) for n in nodes}
    return [(ids == d) if mask is None else (mask & (ids == d)) for d in sorted(chosen)]
