"""The cycle's time budget: on a budget of steps, what each stage gets does not depend on the clock."""

import time

from gangsolve.solver import SolveConfig
from gangsolve.solver.budget import SAFETY, Budget


def test_a_step_budget_grants_the_same_whatever_the_clock_says():
    late = Budget(2.0, steps=100, start=time.perf_counter() - 1_000)  # started long ago: every share is spent
    fresh = Budget(2.0, steps=100)
    for budget in (late, fresh):
        assert budget.seconds(0.1, until=budget.until(0.85)) == 0.1 * 2.0
        assert budget.fixed_work(0.25) == fresh.work(0.25 * 2.0)
        assert budget.up_to(5.0) == fresh.work(2.0)
        assert budget.until(0.4) == budget.until(0.85) == budget.start + SAFETY
    assert fresh.may_step(99)
    assert not fresh.may_step(100)


def test_on_the_clock_a_stage_gets_its_share_or_what_is_left():
    budget = Budget.of(SolveConfig(time_limit=2.0))
    assert budget.until(0.5) == budget.start + 1.0
    assert budget.seconds(0.1, until=budget.until(0.85)) == 0.1 * 2.0
    assert 0 < budget.seconds(0.9, until=budget.until(0.5)) <= 1.0
    assert budget.fixed_work(0.25) is None
    assert budget.up_to(5.0) == 5.0
    assert budget.may_step(10**9)
    placement = budget.part(0.7)
    assert (placement.limit, placement.start) == (2.0 * 0.7, budget.start)
