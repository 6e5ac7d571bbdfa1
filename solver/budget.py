"""The time of one cycle, with one owner: its deadlines, its budget of steps and each stage's share.

A cycle runs on the wall clock (live) or on a budget of steps (`SolveConfig.steps`): then the search makes at
most that many steps, every stage runs in full, and CP-SAT stops on the deterministic work its share of the time
limit grants, so the same input gives the same placement however loaded the machine; the clock only ends a
stage past `SAFETY`.

The time limit is shared out from the start of the cycle:

    placement             PLACE_SHARE of the limit when the cycle may preempt, all of it otherwise; of that:
        greedy hints      until HINT_SHARE
        search            until the end less the locality share (LOCALITY_SHARE, TOPOLOGY_SHARE)
        bounds, locality  until the end, 1 - RESERVE (the rest reads the solution and explains pending gangs)
    preemption            until PREEMPTION_END
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from gangsolve.solver.model import SolveConfig

# Leave this share of the time limit for reading the solution and explaining pending gangs (about 0.4 s
# at 5,000 nodes and 1,000 gangs).
RESERVE = 0.15
HINT_SHARE = 0.4  # for the greedy variants (each estimated by the last one's time)
FORECAST_SHARE = 0.1  # of the cycle's time limit, for the plan's forecasts after its reservations
LOCALITY_SHARE = 0.05  # kept from the search for the locality stage at the end ...
LOCALITY_MOST = 0.1  # ... which may take up to this share when the search ended early
# With preferred topology levels, the locality tier is what the user asked for and only CP-SAT reduces it:
# the search leaves it this share.
TOPOLOGY_SHARE = 0.3
MIP_SHARE = 0.05  # for the final bounds as a MIP ...
MIP_FROM = 10.0  # ... when the limit is at least this many seconds (an LP otherwise)
# When a cycle may preempt, the placement gets this share and preemption runs until the end share: victims are
# chosen after the placement, from what it left.
PLACE_SHARE = 0.7
PREEMPTION_END = 0.95

# CP-SAT does 0.3 to 1 unit of deterministic time a wall second here: a stage is granted this many units per
# second of its share.
WORK_PER_SECOND = 0.5
# The victim models are small and usually proven long before: they are granted a ceiling, not an estimate.
VICTIM_WORK_PER_SECOND = 2.0
# A whole model small enough to be solved exactly first gets up to this much work (100 nodes and 20 gangs:
# 2,500 variables, proven optimal in 0.1 units).
EXACT_WORK = 2.0
BUILD_SECONDS = 100e-6  # per model variable, for building the model and its locality objective
MIN_STAGE_SECONDS = 0.02  # a CP-SAT stage with less time left is not started
MIN_VICTIM_SECONDS = 0.01  # nor is a victim model's next objective
SAFETY = 600.0  # seconds: on a budget of steps, the wall clock cuts in only past this


@dataclass(frozen=True)
class Budget:
    """The time limit of a cycle (or of the part of it a stage was given), counted from `start`."""

    limit: float  # seconds
    steps: int | None = None  # the search's steps (SolveConfig.steps); None: the wall clock ends the stages
    start: float = field(default_factory=time.perf_counter)

    @classmethod
    def of(cls, config: SolveConfig) -> Budget:
        """The budget of a cycle starting now."""
        return cls(config.time_limit, config.steps)

    def part(self, share: float) -> Budget:
        """The budget of a part of the cycle given `share` of its time limit, from the same start."""
        return replace(self, limit=self.limit * share)

    # --- the clock

    def until(self, share: float) -> float:
        """The clock reading at which `share` of the time limit is spent; on a budget of steps the clock ends
        nothing, this is only the safety net."""
        return self.start + (self.limit * share if self.steps is None else SAFETY)

    def left(self, until: float) -> float:
        return until - time.perf_counter()

    def passed(self, until: float) -> bool:
        return time.perf_counter() >= until

    def slice(self, until: float, parts: int) -> float:
        """The clock reading at which one of `parts` equal parts of the time left before `until` is spent."""
        now = time.perf_counter()
        return now + (until - now) / parts

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def seconds(self, share: float, until: float) -> float:
        """A stage's `share` of the time limit, in seconds: all of it on a budget of steps, whatever the earlier
        stages took (the same work every run); on the clock, no more than is left before `until`."""
        seconds = share * self.limit
        return seconds if self.steps is not None else min(self.left(until), seconds)

    # --- steps and CP-SAT's work

    def may_step(self, steps: int) -> bool:
        """Whether the search, `steps` steps in, may make another."""
        return self.steps is None or steps < self.steps

    def work(self, seconds: float, rate: float = WORK_PER_SECOND) -> float:
        """CP-SAT's deterministic time for `seconds` of the time limit."""
        return seconds * rate

    def up_to(self, work: float) -> float:
        """`work` units of CP-SAT's deterministic time; on a budget of steps, no more than the whole time limit
        grants (on the clock, the clock ends the call earlier)."""
        return work if self.steps is None else min(work, self.work(self.limit))

    def fixed_work(self, share: float, rate: float = WORK_PER_SECOND) -> float | None:
        """On a budget of steps, the work `share` of the time limit grants; None on the clock, where each call
        gets what the time left grants."""
        return None if self.steps is None else self.work(self.limit * share, rate)
