"""The time-based mode on a tiny cluster: gang schedulers start jobs whole, per-pod ones strand GPUs."""

from __future__ import annotations

from dataclasses import replace

import pytest
from bench_clusters import cluster_objects, gang, gpu_nodes
from hypothesis import given
from hypothesis import strategies as st

from gangsolve.bench import manifests, openb
from gangsolve.bench.baselines import conservative_backfill, easy_backfill
from gangsolve.bench.scenarios import timeline_annotations
from gangsolve.bench.timeline.simulation import (
    PERIOD,
    TIMELINES,
    TRACE_DAYS,
    TRACE_END,
    TRACE_SEEDS,
    TRACE_START,
    TRACE_TENANTS,
    Job,
    jobs_of,
    parse_settings,
    promise_accuracy,
    simulate,
)
from gangsolve.solver import Cluster, Running
from gangsolve.solver.model import GPU
from tests.builders import gang as solver_gang
from tests.builders import node


def job(name: str, pods: int, gpus: int, arrival: float, duration: float) -> list[dict]:
    notes = {manifests.ARRIVAL_ANNOTATION: str(int(arrival)), manifests.DURATION_ANNOTATION: str(int(duration))}
    return gang(name, pods, gpus, created=arrival, annotations=notes)


def workload() -> list[dict]:
    # 8 GPUs; two jobs of 3 x 2 GPUs arrive together, then a small one.
    return cluster_objects(
        gpu_nodes(2), job("a", 3, 2, 0, 10 * PERIOD), job("b", 3, 2, 0, 10 * PERIOD), job("c", 1, 1, 2 * PERIOD, PERIOD)
    )


def test_gang_scheduler_runs_jobs_whole_and_drains_the_queue():
    result = simulate(workload(), "greedy-gang", time_limit=1)
    s = result["summary"]
    assert (s["jobs"], s["started"]) == (3, 3)
    assert s["queue_delay_p50"] == 0
    assert s["queue_delay_p95"] > 5 * PERIOD
    for c in result["cycles"]:
        assert c["gpu_useful"] == c["gpu_allocation"] <= 1  # nothing half-placed


def test_per_pod_scheduler_strands_gpus_while_a_job_waits():
    result = simulate(workload(), "per-pod-least", time_limit=1)
    first = result["cycles"][0]
    assert first["gpu_allocation"] == 1.0  # a whole, plus one pod of b holding 2 GPUs
    assert first["gpu_useful"] == 0.75
    assert result["summary"]["started"] == 3  # b completes once a leaves


def test_gangsolve_in_the_timeline():
    s = simulate(workload(), "gangsolve", time_limit=0.5)["summary"]
    assert s["started"] == 3
    assert s["cycle_p99"] is not None


def test_a_job_shown_a_start_that_came_and_went_counts_as_starting_when_the_run_ended():
    def shown(name: str, start: float | None, first: float, held: bool = False) -> Job:
        at = {"start": start, "shown": first, "promised": first if held else None}
        return Job(solver_gang(name, 1, 1), arrival=0.0, duration=60.0, declared=60.0, workload=name, **at)

    jobs = [
        shown("on-time", 120.0, 120.0, held=True),
        shown("early", 60.0, 300.0),
        shown("starved", None, 200.0, held=True),  # its start came at 200 s; the run ended at 600 s
        shown("not-yet", None, 900.0, held=True),  # its start is still to come: not judged
    ]
    accuracy = promise_accuracy(jobs, end=600.0)
    assert (accuracy["jobs"], accuracy["unstarted"], accuracy["late"]) == (3, 1, 1)
    assert (accuracy["p5"] < 0, accuracy["max"]) == (True, 400.0)  # at least 400 s late: a lower bound
    held = accuracy["held"]
    assert (held["jobs"], held["unstarted"], held["max"]) == (2, 1, 400.0)


def starved_workload() -> list[dict]:
    # 8 GPUs. A long 1-GPU job runs from the start; a 8-GPU job waits behind it; 1-GPU jobs keep arriving
    # and run 30 minutes each. Without reservations the small ones take every GPU the big one needs.
    jobs = job("long", 1, 1, 0, 40 * PERIOD)
    jobs += job("big", 2, 4, PERIOD, 10 * PERIOD)
    for i in range(12):
        jobs += job(f"small{i:02d}", 1, 1, (2 + 2 * i) * PERIOD, 30 * PERIOD)
    return cluster_objects(gpu_nodes(2), jobs)


def big_job_delays(starvation: float) -> dict[str, float]:
    """The big job's delay under each scheduler, gangsolve holding reservations from their earliest starts."""
    big = {}
    for scheduler in ("greedy-gang", "easy-backfill", "gangsolve"):
        settings = {"starvation_age": starvation, "plan_relaxation": 0.0}
        result = simulate(starved_workload(), scheduler, time_limit=0.5, estimates="exact", settings=settings)
        big[scheduler] = result["summary"]["queue_delay_by_size"]["2-8 GPUs"]["p50"]
        assert result["summary"]["started"] == 14
    return big


def test_reservations_start_the_big_job_when_the_long_one_ends():
    big = big_job_delays(30 * 60)
    # EASY reserves for the queue's head at once: the big job (waiting since minute 1) starts when the long one
    # ends at minute 40. gangsolve plans it at once too (it need not starve first) and starts it then. Greedy
    # gang lets small jobs take every freed GPU for longer.
    assert big["easy-backfill"] == 39 * PERIOD
    assert big["gangsolve"] == 39 * PERIOD
    assert big["greedy-gang"] > 43 * PERIOD
    # Relaxed (the default), it is held up to its 10-minute runtime later, so small jobs backfill its GPUs until
    # then; it starts once they end, still before greedy gang starts it.
    relaxed = big_job_delay_with({})
    assert 39 * PERIOD < relaxed <= 49 * PERIOD
    assert relaxed < big["greedy-gang"]


def test_a_gang_passed_over_past_its_share_of_the_age_gets_the_reservation_first_come_first_served_would():
    # At half the age (7.5 minutes for the big job) it starves before any small job has started on the GPUs
    # the long one holds, and gangsolve starts it when the long one ends, as EASY backfill does.
    assert big_job_delays(15 * 60)["gangsolve"] == 39 * PERIOD


def big_job_delay_with(settings: dict) -> float:
    result = simulate(starved_workload(), "gangsolve", time_limit=0.5, estimates="exact", settings=settings)
    assert result["settings"] == settings  # recorded with the run
    return result["summary"]["queue_delay_by_size"]["2-8 GPUs"]["p50"]


def test_settings_reach_gangsolve_and_how_a_timeline_starves_its_gangs():
    held = {"plan_relaxation": 0.0}  # reservations from their earliest starts
    assert big_job_delay_with(held) == 39 * PERIOD
    # No plan: the small jobs take every GPU the big one waits for, as under greedy gang.
    assert big_job_delay_with({"reservations": 0}) == big_job_delays(30 * 60)["greedy-gang"]
    # Reservations for starving gangs only: planned once it starves, which at 15 minutes is before the small jobs
    # hold the GPUs it needs, at 30 minutes (the same for every width) after some do.
    assert big_job_delay_with({**held, "plan_starving_only": True, "starvation_age": 900.0}) == 39 * PERIOD
    late = {**held, "plan_starving_only": True, "starvation_age": 1800.0, "starvation_by_width": False}
    assert big_job_delay_with(late) > 39 * PERIOD


def test_settings_are_typed_and_a_bad_one_is_named():
    assert parse_settings(["reservations=32", "plan_starving_only=true", "starvation_age=2700", "order=arrival"]) == {
        "reservations": 32,
        "plan_starving_only": True,
        "starvation_age": 2700.0,
        "order": "arrival",
    }
    for bad, said in [
        ("reservations=many", "'many' is not a int"),
        ("order=fifo", "'fifo' is not one of expansion, arrival"),
        ("plan_starving_only=yes", "'yes' is not a bool"),
        ("steps=10", "NAME one of"),  # the bench's own budget, not a setting
        ("use_cpsat=false", "NAME one of"),  # greedy gang is a scheduler of its own
        ("nope=1", "NAME one of"),
        ("reservations", "NAME one of"),
    ]:
        with pytest.raises(ValueError, match=said):
            parse_settings([bad])


@given(st.text(max_size=40))
def test_any_setting_text_parses_or_is_refused_in_one_message(text):
    parsed: dict | ValueError
    try:
        parsed = parse_settings([text])
    except ValueError as e:  # the only way it refuses, naming what it was given
        parsed = e
    assert len(parsed) == 1 if isinstance(parsed, dict) else repr(text) in str(parsed)


def test_easy_backfill_lets_only_jobs_that_end_in_time_onto_the_head_reservation():
    held = {"cpu": 3000, "memory": 3 * 2**30, "pods": 3, GPU: 3}
    nodes = (replace(node("n0", gpus=4), used=held), replace(node("n1", gpus=4), used=held))
    running = (Running("n0", held, 600.0), Running("n1", held, 3600.0))
    head = solver_gang("head", 1, gpus=4)
    short = replace(solver_gang("short", 1, gpus=1), runtime=300.0)
    long = replace(solver_gang("long", 1, gpus=1), runtime=7200.0)
    later = replace(solver_gang("later", 1, gpus=1), runtime=7200.0)
    never = solver_gang("never", 1, gpus=8)  # no node has 8 GPUs: it is passed over, not made the head
    bindings = easy_backfill(Cluster(nodes, (never, head, short, long, later), running, now=0.0))
    # The head holds n0 from 600 s: the short job may use it; of the long ones, the first in the queue gets the
    # one GPU free on n1.
    assert bindings == {"short-0": "n0", "long-0": "n1"}


def test_conservative_backfill_lets_no_gang_delay_any_reservation_before_it():
    held = {"cpu": 3000, "memory": 3 * 2**30, "pods": 3, GPU: 3}
    nodes = (replace(node("n0", gpus=4), used=held), replace(node("n1", gpus=4), used=held))
    running = (Running("n0", held, 600.0), Running("n1", held, 3600.0))
    head = replace(solver_gang("head", 1, gpus=4), runtime=7200.0)  # n0 from 600 s
    second = replace(solver_gang("second", 1, gpus=4), runtime=1800.0)  # n1 from 3,600 s, when its pods end
    short = replace(solver_gang("short", 1, gpus=1), runtime=300.0)  # ends before the head's reservation
    long = replace(solver_gang("long", 1, gpus=1), runtime=7200.0)  # would delay both reservations
    never = solver_gang("never", 1, gpus=8)  # no node has 8 GPUs: passed over, reserving nothing
    cluster = Cluster(nodes, (never, head, second, short, long), running, now=0.0)
    # EASY protects only the head: the long job takes n1's free GPU and delays the second gang by two hours.
    assert easy_backfill(cluster) == {"short-0": "n0", "long-0": "n1"}
    # Conservative backfill protects both reservations: only the short job starts now.
    assert conservative_backfill(cluster) == {"short-0": "n0"}


def test_conservative_backfill_without_estimates_never_counts_on_an_end():
    held = {"cpu": 3000, "memory": 3 * 2**30, "pods": 3, GPU: 3}
    nodes = (replace(node("n0", gpus=4), used=held),)
    head = solver_gang("head", 1, gpus=4)  # can start only when the running pod ends: never, as far as is known
    small = solver_gang("small", 1, gpus=1)  # no runtime: holds its GPU for ever, but delays no reservation
    cluster = Cluster(nodes, (head, small), (Running("n0", held, None),), now=0.0)
    assert conservative_backfill(cluster) == {"small-0": "n0"}


def test_estimate_modes_declare_the_true_a_noisy_or_no_runtime():
    objs = TIMELINES["timeline/synthetic-100nodes"].build(1)
    _nodes, exact, _queues = jobs_of(objs, "exact", seed=1)
    _nodes, noisy, _queues = jobs_of(objs, "noisy", seed=1)
    _nodes, absent, _queues = jobs_of(objs, "absent", seed=1)
    assert all(j.declared == round(j.duration) for j in exact)
    ratios = [j.duration / j.declared for j in noisy]
    assert 0.5 < sorted(ratios)[len(ratios) // 2] < 2  # the median noise factor is near 1 (lognormal, sigma 1)
    assert max(ratios) > 3
    assert min(ratios) < 1 / 3
    assert all(j.declared is None for j in absent)
    assert len({j.workload for j in exact}) > 5  # the history learns per job template


def test_each_openb_trace_seed_is_its_own_workload_of_full_windows():
    """Seeds 1 to TRACE_SEEDS lay different windows of the trace over each other, every window inside its
    steady part (seed 5 once repeated seed 1's); the seed after them starts over."""

    def workload(seed: int) -> list[tuple[float, float, int]]:
        objs = TIMELINES["timeline/openb-trace"].build(seed)
        _nodes, jobs, _queues = jobs_of(objs, "exact", seed=seed)
        return sorted((j.arrival, j.duration, j.gpus) for j in jobs)

    span = TRACE_DAYS * 86400
    assert TRACE_START + (TRACE_SEEDS + TRACE_TENANTS) * span <= TRACE_END  # the last seed's windows end in time
    seen = []
    for seed in range(1, TRACE_SEEDS + 1):
        jobs = workload(seed)
        assert len(jobs) > 100 * TRACE_TENANTS  # about 200 whole-GPU pods a window where arrivals are steady
        assert jobs not in seen, f"seed {seed} repeats an earlier seed's workload"
        seen.append(jobs)
    assert workload(TRACE_SEEDS + 1) == seen[0]


def test_an_evicted_job_starves_from_its_pods_new_creation_not_from_its_arrival():
    """Its controller creates the pods again, and the live scheduler counts a gang's wait for the starvation age
    from its pods' creation: a job evicted at minute 40, pending since minute 0, starves 30 minutes later, not
    at once."""
    # Two 4-GPU nodes: job a and a long job run from the start, and a job of 2 x 4 GPUs keeps the queue (and
    # the cycles) going while they do.
    objs = cluster_objects(
        gpu_nodes(2), job("a", 1, 1, 0, 100 * PERIOD), job("long", 1, 1, 0, 100 * PERIOD), job("big", 2, 4, 0, PERIOD)
    )
    waiting: dict[float, bool] = {}  # job a's starving flag each minute it waits after its eviction
    waited: dict[float, float] = {}  # and its wait then (the expansion order's)

    def schedule(cluster: Cluster, _snapshot: str, _limit: float) -> tuple[dict[str, str], dict]:
        if cluster.now == 0:
            small = [g for g in cluster.gangs if not g.name.endswith("/big")]
            return {p.name: f"n{i}" for i, g in enumerate(small) for p in g.pods}, {}
        if cluster.now == 40 * PERIOD:
            return {}, {"evictions": [r.name for r in cluster.running if r.gang.endswith("/a")]}
        for g in cluster.gangs:
            if g.name.endswith("/a"):
                waiting[cluster.now] = g.starving
                waited[cluster.now] = g.waited
        return {}, {}

    simulate(objs, schedule, time_limit=0.5, estimates="exact")
    assert all(wait == minute - 40 * PERIOD for minute, wait in waited.items())
    assert waiting, "job a waited after its eviction"
    assert not any(starving for minute, starving in waiting.items() if minute <= 70 * PERIOD)
    assert all(starving for minute, starving in waiting.items() if minute > 70 * PERIOD)
    assert max(waiting) > 70 * PERIOD


def test_timeline_targets_hold_gangsolve_to_the_best_peer_per_figure_by_median_and_per_seed():
    from gangsolve.bench.report import targets

    def run(scheduler, p50, p95, jct, useful):
        s = {"queue_delay_p50": p50, "queue_delay_p95": p95, "jct_mean": jct, "gpu_useful_mean": useful}
        return {"scheduler": scheduler, "summary": s}

    def seed(n, mine, greedy, conservative):
        runs = [run("gangsolve", *mine), run("greedy-gang", *greedy), run("conservative-backfill", *conservative)]
        return {"name": "timeline/x", "seed": n, "estimates": "exact", "runs": runs}

    timeline = [
        # greedy has the best median, conservative the best tail; gangsolve beats each on both seeds but one:
        # its p95 on seed 2 is 5% above conservative's (within 10%), and its median p95 still the lowest.
        seed(1, (80, 900, 1000, 0.90), (90, 2000, 1100, 0.89), (500, 1000, 1200, 0.88)),
        seed(2, (100, 1050, 1000, 0.90), (110, 2000, 1100, 0.91), (600, 1000, 1200, 0.88)),
        seed(3, (90, 950, 1000, 0.90), (100, 2000, 1100, 0.89), (550, 1000, 1200, 0.88)),
    ]
    found = []
    targets.timeline_targets(timeline, lambda target, scenario, measured, met: found.append((target, scenario, met)))
    medians = {t: met for t, scenario, met in found if "median of 3" in scenario}
    assert medians == {
        "timeline: median p50 queue delay at most the best peer's": True,
        "timeline: median p95 queue delay at most the best peer's": True,
        "timeline: median mean JCT at most the best peer's": True,
        "timeline: median useful GPU at least the best peer's minus 0.5 points": True,
    }
    per_seed = [(t, scenario) for t, scenario, met in found if "each seed" in t and not met]
    assert per_seed == []
    # 20% above the best peer's p95 on one seed is a miss, and so is the median once it is above.
    timeline[1]["runs"][0]["summary"]["queue_delay_p95"] = 1200
    timeline[2]["runs"][0]["summary"]["queue_delay_p95"] = 1200
    found.clear()
    targets.timeline_targets(timeline, lambda target, scenario, measured, met: found.append((target, scenario, met)))
    missed = {(t, scenario) for t, scenario, met in found if not met}
    assert missed == {
        ("timeline, each seed: p95 queue delay at most 10% above the best peer's", "timeline/x seed 2 exact"),
        ("timeline, each seed: p95 queue delay at most 10% above the best peer's", "timeline/x seed 3 exact"),
        ("timeline: median p95 queue delay at most the best peer's", "timeline/x exact (median of 3 seeds)"),
    }


def test_the_plan_cost_comparison_plans_on_a_busy_cluster_and_keeps_every_placement_valid(monkeypatch):
    from gangsolve.bench.static import plan_cost

    monkeypatch.setitem(plan_cost.SIZES, 30, 40)
    results = plan_cost.compare(30, seeds=1, repeat=1, time_limit=0.3)
    off, on = results.values()
    assert off.reservations == [0]  # the plan off plans nothing
    assert on.reservations[0] > 0  # running pods with ends and gangs left pending: some are planned
    assert off.violations == on.violations == 0
    rows = plan_cost.table({30: results})
    assert [r[1] for r in rows[1:]] == list(results)


# --- GPU shares over time -------------------------------------------------------------------------------------

SHARE_SCHEDULERS = ("gangsolve", "greedy-gang", "fgd")  # each chooses the GPU of every share it places


def share_job(name: str, milli: int, arrival: float, duration: float) -> list[dict]:
    """A job of one trace-like pod asking `milli` thousandths of one GPU (1000: a whole GPU)."""
    pod = openb.TracePod(name, 1000, 1024, 1, "", int(duration), int(arrival), milli)
    return openb.job_objects(name, [pod], arrival, timeline_annotations(arrival, duration))


def on_two_gpus(scheduler, *jobs: list[dict]) -> dict:
    return simulate(cluster_objects(gpu_nodes(1, gpus=2), *jobs), scheduler, time_limit=0.5, estimates="exact")


@pytest.mark.parametrize("scheduler", SHARE_SCHEDULERS)
def test_two_shares_past_one_gpu_keep_a_whole_gpu_pod_waiting(scheduler):
    """Two 0.6 shares cannot share a GPU: on a 2-GPU node they take one each (1.2 GPUs allocated), and a 1-GPU
    job arriving a minute later waits until they end; no binding the GPUs cannot hold."""
    s = share_job("s1", 600, 0, 10 * PERIOD) + share_job("s2", 600, 0, 10 * PERIOD)
    result = on_two_gpus(scheduler, s, share_job("w", 1000, PERIOD, PERIOD))
    assert [c["gpu_allocation"] for c in result["cycles"][:10]] == pytest.approx([0.6] * 10)
    assert result["summary"]["started"] == 3
    assert result["summary"]["queue_delay_mean"] == pytest.approx(9 * PERIOD / 3)
    assert result["summary"]["bindings_refused"] == 0


@pytest.mark.parametrize("scheduler", SHARE_SCHEDULERS)
def test_shares_that_fit_one_gpu_leave_the_other_whole(scheduler):
    """Two half shares go on one GPU, so a 1-GPU job arriving a minute later starts at once on the other."""
    s = share_job("s1", 500, 0, 10 * PERIOD) + share_job("s2", 500, 0, 10 * PERIOD)
    result = on_two_gpus(scheduler, s, share_job("w", 1000, PERIOD, PERIOD))
    assert result["cycles"][1]["gpu_allocation"] == pytest.approx(1.0)
    assert result["summary"]["queue_delay_mean"] == 0
    assert result["summary"]["bindings_refused"] == 0


def test_a_share_the_gpus_cannot_hold_is_refused_not_bound():
    """A scheduler that binds shares by totals alone: the simulation puts each on the tightest GPU that holds it
    and refuses a binding none holds (three 0.6 shares on two GPUs), counting it; that job starts later."""

    def by_totals(cluster, _snapshot, _limit):
        return {p.name: cluster.nodes[0].name for g in cluster.gangs for p in g.pods}, {}

    result = on_two_gpus(by_totals, *(share_job(f"s{i}", 600, 0, 2 * PERIOD) for i in range(3)))
    assert result["summary"]["bindings_refused"] == 2  # at minutes 0 and 1; the two first end at minute 2
    assert result["summary"]["started"] == 3
    assert max(c["gpu_allocation"] for c in result["cycles"]) == pytest.approx(0.6)
