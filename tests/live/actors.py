"""Actors as the live tests build them: settings by name, as `gangsolve run` takes them from its config."""

from __future__ import annotations

from datetime import UTC, datetime

from gangsolve import cycle
from gangsolve.cycle import Decisions, Rules
from gangsolve.edge.estimates import Estimator
from gangsolve.edge.gangs import STARVATION_SECONDS, Grace
from gangsolve.edge.snapshot import Snapshot
from gangsolve.live.metrics import Metrics
from gangsolve.live.queue import SchedulingQueue
from gangsolve.live.solver_actor import FIRST_CYCLE_GANGS, SolverActor
from gangsolve.live.store import ClusterStore
from gangsolve.solver import SolveConfig


def solver_actor(
    store: ClusterStore,
    metrics: Metrics | None = None,
    *,
    queue: SchedulingQueue | None = None,
    scheduler_name: str = "gangsolve",
    group_label: str | None = None,
    time_limit: float = 1.0,
    debounce: float = 0.0,
    cycle_interval: float = 0.0,
    resync_period: float = 3600.0,
    grace: Grace | None = None,
    preemption: bool = True,
    estimator: Estimator | None = None,
    reservations: int = SolveConfig.reservations,
    plan_relaxation: float = SolveConfig.plan_relaxation,
    starvation: float = STARVATION_SECONDS,
    plan_page: bool = False,
    first_cycle_gangs: int = FIRST_CYCLE_GANGS,
    parallel: int = 1,
) -> SolverActor:
    return SolverActor(
        store,
        queue or SchedulingQueue(resync_period),
        metrics or Metrics(),
        Rules(scheduler_name, group_label, grace or Grace(), starvation),
        SolveConfig(
            time_limit=time_limit,
            preemption=preemption,
            reservations=reservations,
            plan_relaxation=plan_relaxation,
            parallel=parallel,
        ),
        debounce=debounce,
        cycle_interval=cycle_interval,
        estimator=estimator,
        plan_page=plan_page,
        first_cycle_gangs=first_cycle_gangs,
    )


def run_cycle(snapshot: Snapshot, time_limit: float = 1.0) -> Decisions:
    """A whole cycle on a snapshot, as the live scheduler's is (bad objects left out, the live clock)."""
    return cycle.run(snapshot, Rules(), SolveConfig(time_limit=time_limit, reservations=0), now=datetime.now(UTC))
