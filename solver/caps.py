"""Each queue's capability left as a placement is built gang by gang: a ledger over `Problem.cap_left` (one
row per queue, one per priority for the capacity gangs that would borrow may use) that each pass copies and
charges."""

from __future__ import annotations

import numpy as np

from gangsolve.solver.problem import Counts, GangCounts, Problem


class QueueCaps:
    """What may still be taken per row of `problem.cap_left` (each queue's capability; the capacity gangs that
    would borrow may use), as a placement is built gang by gang."""

    def __init__(self, problem: Problem, left: np.ndarray | None = None, placed: Counts | None = None) -> None:
        self.problem = problem
        self.left = (problem.cap_left if left is None else left).copy()
        for g, counts in (placed or {}).items():
            self.charge(g, counts, 1)

    def rows(self, g: int) -> list[int]:
        """The capped rows gang g draws from."""
        return [r for r in self.problem.cap_rows[g] if self.problem.capped[r]]

    def use(self, g: int, counts: GangCounts, keep: GangCounts | None = None) -> np.ndarray:
        """The resources gang g's pods in `counts` take (less those in `keep`)."""
        problem = self.problem
        out = np.zeros(len(problem.resources), dtype=np.int64)
        for (p, n), k in counts.items():
            out += (k - (keep or {}).get((p, n), 0)) * problem.demand[problem.parts[g][p].cls]
        return out

    def charge(self, g: int, counts: GangCounts, sign: int) -> None:
        """Take gang g's placement `counts` (sign 1) or give it back (-1)."""
        rows = self.rows(g)
        if rows:
            self.left[rows] -= sign * self.use(g, counts)

    def _room(self, g: int) -> np.ndarray | None:
        rows = self.rows(g)
        return self.left[rows].min(axis=0) if rows else None

    def may_start(self, g: int) -> bool:
        """Whether the least gang g's minimum takes (its floor) is within every row it draws from."""
        room = self._room(g)
        return room is None or bool((self.problem.floor[g] <= room).all())

    def take(self, g: int, counts: GangCounts) -> bool:
        """Take gang g's placement `counts` if it is within every row it draws from; whether it was."""
        room = self._room(g)
        if room is not None and (self.use(g, counts) > room).any():
            return False
        self.charge(g, counts, 1)
        return True

    def admit(self, g: int, counts: GangCounts, free: np.ndarray, keep: GangCounts | None = None) -> GangCounts | None:
        """Gang g's placement `counts` (which already took `free`; `keep` is the part of it admitted before)
        within its rows: as it is, or with pods past the gang's minimum taken off (their room given back to
        `free`); None, everything past `keep` given back, when even the minimum does not fit."""
        problem = self.problem
        room = self._room(g)
        if room is None:  # its queue caps nothing
            return counts
        use = self.use(g, counts, keep)
        if (use <= room).all():
            self.left[self.rows(g)] -= use
            return counts
        keep = keep or {}
        counts = dict(counts)
        floor = max(problem.gangs[g].need, 1, sum(keep.values()))
        placed = sum(counts.values())
        for p, n in reversed(list(counts)):
            demand = problem.demand[problem.parts[g][p].cls]
            while counts[(p, n)] > keep.get((p, n), 0) and placed > floor:
                over = use > room
                if not over.any() or not (demand[over] > 0).any():
                    break
                counts[(p, n)] -= 1
                free[n] += demand
                use -= demand
                placed -= 1
        if (use > room).any():
            for (p, n), k in counts.items():
                free[n] += (k - keep.get((p, n), 0)) * problem.demand[problem.parts[g][p].cls]
            return None
        self.left[self.rows(g)] -= use
        return {key: k for key, k in counts.items() if k > 0}
