"""Minimum runtimes: a running pod younger than its guard is no victim, of preemption or of reclaim; a Queue's
own minimum overrides the scheduler's for its pods; without a clock nothing is guarded."""

from __future__ import annotations

from dataclasses import replace

from gangsolve.solver import Cluster, Queue, SolveConfig, solve
from gangsolve.solver.planning import expected_end, overran
from tests.builders import node
from tests.solver.test_preemption import preemptor, running, with_running
from tests.solver.test_reclaim import team_b_holds_everything

CONFIG = SolveConfig(time_limit=1.0, steps=20)
NOW = 10_000.0


def reclaim_case(started: float, min_runtime: float | None = None) -> Cluster:
    """team-b holds both nodes (gangs started at `started`); team-a, below its fair share, asks for 8 GPUs."""
    cluster = team_b_holds_everything()
    running_ = tuple(replace(r, started=started) for r in cluster.running)
    queues = tuple(replace(q, min_runtime=min_runtime) if q.name == "team-b" else q for q in cluster.queues)
    return replace(cluster, running=running_, queues=queues, now=NOW)


def test_reclaim_waits_for_the_minimum_runtime():
    guarded = replace(CONFIG, reclaim_min_runtime=600)
    assert solve(reclaim_case(started=NOW - 300), CONFIG).evictions  # no guard: reclaimed
    assert not solve(reclaim_case(started=NOW - 300), guarded).evictions  # 5 minutes old: kept
    assert solve(reclaim_case(started=NOW - 900), guarded).evictions  # 15 minutes old: reclaimed
    # The victims' queue says how long its pods are kept, either way.
    assert not solve(reclaim_case(started=NOW - 900, min_runtime=3600), guarded).evictions
    assert solve(reclaim_case(started=NOW - 300, min_runtime=0), guarded).evictions
    # No clock, no guard.
    assert solve(replace(reclaim_case(started=NOW - 300), now=0.0), guarded).evictions


def preemption_case(started: float) -> Cluster:
    pods = [running("low-0", "n0", gpus=8, gang="low", started=started, queue="batch")]
    gang = replace(preemptor("team/p", size=1, gpus=8), queue="batch")
    return Cluster(
        with_running([node("n0", cpu=64, gpus=8)], pods), (gang,), tuple(pods), queues=(Queue("batch"),), now=NOW
    )


def test_preemption_waits_for_its_own_minimum_runtime():
    assert solve(preemption_case(NOW - 60), CONFIG).evictions  # the default: none
    guarded = replace(CONFIG, preempt_min_runtime=300)
    young = solve(preemption_case(NOW - 60), guarded)
    assert not young.evictions
    assert not young.bindings
    assert solve(preemption_case(NOW - 600), guarded).evictions
    # The reclaim guard is not preemption's.
    assert solve(preemption_case(NOW - 60), replace(CONFIG, reclaim_min_runtime=3600)).evictions


def test_reclaim_is_not_worth_it_when_the_plan_expects_room_soon():
    """team-b's gangs (started 100 minutes ago) end in 2 minutes: team-a's gang waits for that rather than
    throw away 100 minutes of 8 GPUs' work; ending in 5 hours, reclaiming saves more than it loses."""
    cluster = reclaim_case(started=NOW - 6000)
    soon = replace(cluster, running=tuple(replace(r, end=NOW + 120) for r in cluster.running))
    assert not solve(soon, CONFIG).evictions
    late = replace(cluster, running=tuple(replace(r, end=NOW + 5 * 3600) for r in cluster.running))
    assert solve(late, CONFIG).evictions
    # Without expected ends it may wait for ever: reclaimed.
    assert solve(cluster, CONFIG).evictions


def test_work_lost_counts_seconds_not_whole_minutes():
    """team-b's gangs started 50 s ago and end in 20 s: waiting costs team-a's 8 GPUs 20 s each, evicting them
    throws away 50 s of theirs, so team-a waits. Counted in whole minutes the victims had run nothing, and every
    such reclaim looked free (what a cluster whose jobs run seconds, or a sped-up timeline, would see)."""
    cluster = reclaim_case(started=NOW - 50)
    soon = replace(cluster, running=tuple(replace(r, end=NOW + 20) for r in cluster.running))
    assert not solve(soon, CONFIG).evictions
    # Ending in 100 s, the wait costs more than the 50 s run: reclaimed.
    later = replace(cluster, running=tuple(replace(r, end=NOW + 100) for r in cluster.running))
    assert solve(later, CONFIG).evictions


def test_reclaim_weighs_the_wait_to_the_earliest_start_not_to_a_relaxed_hold():
    """team-b's gangs (started 100 s ago) end in 60 s, when team-a's 10-minute gang could start; relaxed, the plan
    holds it from 120 s. Evicting throws away 800 GPU-seconds, waiting for the earliest start costs 480: team-a
    waits. Counted to the relaxed hold (960) the reclaim looked worth it, though the hold is the plan's choice."""
    cluster = reclaim_case(started=NOW - 100)
    cluster = replace(
        cluster,
        running=tuple(replace(r, end=NOW + 60) for r in cluster.running),
        gangs=tuple(replace(g, runtime=600.0) for g in cluster.gangs),
    )
    relaxed = solve(cluster, replace(CONFIG, plan_relaxation=1.0))
    assert [(r.gang, r.start, r.earliest) for r in relaxed.reservations] == [("a/x", NOW + 120, NOW + 60)]
    assert not relaxed.evictions
    assert not solve(cluster, replace(CONFIG, plan_relaxation=0.0)).evictions  # held from its earliest start
    # Were the earliest start 200 s away (1,600 GPU-seconds of waiting), the reclaim pays either way.
    late = replace(cluster, running=tuple(replace(r, end=NOW + 200) for r in cluster.running))
    assert solve(late, replace(CONFIG, plan_relaxation=1.0)).evictions


def test_a_wait_that_rests_on_a_guessed_end_counts_half():
    """team-b's gangs (started 100 s ago, 800 GPU-seconds of work) end in 150 s, when team-a's 8-GPU gang could
    start: 1,200 GPU-seconds of waiting. Declared, that end is worth the reclaim; guessed (a runtime learned from
    history, or the default), the wait counts 600 and team-a waits for the guess rather than throw work away."""
    cluster = reclaim_case(started=NOW - 100)
    cluster = replace(cluster, gangs=tuple(replace(g, runtime=600.0) for g in cluster.gangs))
    declared = replace(cluster, running=tuple(replace(r, end=NOW + 150) for r in cluster.running))
    assert solve(declared, CONFIG).evictions
    guessed = replace(cluster, running=tuple(replace(r, end=NOW + 150, guessed=True) for r in cluster.running))
    placement = solve(guessed, CONFIG)
    assert not placement.evictions
    assert [(r.gang, r.start, r.guessed) for r in placement.forecasts] == [("a/x", NOW + 150, True)]
    # A guess twice as far away (2,400 GPU-seconds, counted 1,200) pays for the reclaim all the same.
    later = replace(cluster, running=tuple(replace(r, end=NOW + 300, guessed=True) for r in cluster.running))
    assert solve(later, CONFIG).evictions


def test_an_end_extended_past_a_short_estimate_counts_as_a_guess():
    """A pod that outran its declared runtime is expected to run on for a while (`expected_end`'s extension):
    that end is a guess as much as a learned one, and the wait resting on it counts half too."""
    cluster = reclaim_case(started=NOW - 100)
    cluster = replace(cluster, gangs=tuple(replace(g, runtime=600.0) for g in cluster.gangs))
    outran = replace(cluster, running=tuple(replace(r, end=NOW + 150, overran=True) for r in cluster.running))
    assert not solve(outran, CONFIG).evictions
    assert solve(replace(outran, running=tuple(replace(r, overran=False) for r in outran.running)), CONFIG).evictions


def test_overran_says_when_an_estimate_proved_short():
    assert overran(0.0, 100.0, 100.0)  # its end is now: extended from here on
    assert not overran(0.0, 100.0, 99.0)
    assert not overran(0.0, None, 1e9)  # no estimate, nothing to outrun
    assert expected_end(0.0, 100.0, 99.0) == 100.0
    assert expected_end(0.0, 100.0, 400.0) == 600.0  # half its run so far
