"""Reservations and backfill: a starving gang that cannot start holds the nodes running pods free first; other
gangs start only where they leave that whole (they end first, or use other capacity). Reservations are held
from their earliest starts here (plan_relaxation 0); the relaxation, on by default, has tests of its own."""

import itertools
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsolve.solver import Cluster, Running, SolveConfig, planning, solve, validate
from gangsolve.solver.explain import _fits_within
from gangsolve.solver.greedy import place_colocated, place_gang
from gangsolve.solver.limits import Limits
from gangsolve.solver.lns import Search
from gangsolve.solver.model import GPU, SHARE, Gang, Queue, Reservation
from gangsolve.solver.pipeline import _placement
from gangsolve.solver.planning import MIN_EXTENSION, expected_end
from gangsolve.solver.problem import Problem
from tests.builders import gang, node
from tests.solver.test_lns import worth
from tests.solver.test_properties import gangs_placed_per_level
from tests.solver.test_shares import frac

HOUR = 3600.0


_BUSY = itertools.count()


def busy(node: str, gpus: int, end: float | None) -> Running:
    """A running pod of its own (preemption tells victims apart by name)."""
    return Running(node, {"cpu": gpus * 1000, "memory": 2**30, "pods": 1, GPU: gpus}, end, name=f"t/busy-{next(_BUSY)}")


def cluster_with(gangs, running, nodes=None, now=0.0) -> Cluster:
    """Two 4-GPU nodes; `running` pods already hold their GPUs (they are in the nodes' `used`)."""
    nodes = nodes or [node("n0", gpus=4), node("n1", gpus=4)]
    used: dict[str, dict[str, int]] = {n.name: {} for n in nodes}
    for r in running:
        for k, q in r.requests.items():
            used[r.node][k] = used[r.node].get(k, 0) + q
    return Cluster(tuple(replace(n, used=used[n.name]) for n in nodes), tuple(gangs), tuple(running), now=now)


def starving(g: Gang, runtime: float | None = HOUR) -> Gang:
    return replace(g, starving=True, runtime=runtime)


def timed(g: Gang, runtime: float | None) -> Gang:
    return replace(g, runtime=runtime)


def test_a_starving_gang_gets_the_nodes_that_free_first_and_only_short_gangs_backfill_them():
    # n0 frees 3 GPUs in 10 minutes, n1 in an hour; a starving 4-GPU pod needs a whole node.
    running = [busy("n0", 3, 600.0), busy("n1", 3, HOUR)]
    big = starving(gang("big", 1, gpus=4))
    short = timed(gang("short", 1, gpus=1), 300.0)  # ends before the reservation starts
    long = timed(gang("long", 1, gpus=1), 2 * HOUR)
    placement = solve(cluster_with([big, short, long], running), SolveConfig(time_limit=0.5, plan_relaxation=0.0))

    assert [(r.gang, r.nodes, r.start, r.gpus) for r in placement.reservations] == [("big", ("n0",), 600.0, 4)]
    assert placement.bindings == {"short-0": "n0", "long-0": "n1"}
    assert validate(cluster_with([big, short, long], running), placement) == []


def test_without_reservations_the_long_gang_takes_the_node_the_big_one_waits_for():
    running = [busy("n0", 3, 600.0), busy("n1", 3, HOUR)]
    big = starving(gang("big", 1, gpus=4))
    long = timed(gang("long", 1, gpus=1), 2 * HOUR)
    cluster = cluster_with([big, long], running)
    placement = solve(cluster, SolveConfig(time_limit=0.5, reservations=0, plan_relaxation=0.0))
    assert placement.reservations == ()
    assert placement.bindings == {"long-0": "n0"}  # best fit: the first node; big now waits 2 h, not 10 min
    held = solve(cluster, SolveConfig(time_limit=0.5, plan_relaxation=0.0))
    assert held.bindings == {"long-0": "n1"}


def test_reservations_for_starving_gangs_only_leave_a_gang_not_yet_starving_a_forecast():
    # The same cluster as above: `big` blocked on a whole node. Not starving, it holds nothing with the option on,
    # so `long` takes the node that frees first (best fit); starving, it holds n0 as it does by default.
    running = [busy("n0", 3, 600.0), busy("n1", 3, HOUR)]
    long = timed(gang("long", 1, gpus=1), 2 * HOUR)
    config = SolveConfig(time_limit=0.5, plan_starving_only=True, plan_relaxation=0.0)
    waiting = solve(cluster_with([timed(gang("big", 1, gpus=4), HOUR), long], running), config)
    assert waiting.reservations == ()
    assert [(r.gang, r.guessed) for r in waiting.forecasts] == [("big", False)]  # forecast as not starving
    assert waiting.bindings == {"long-0": "n0"}
    starved = solve(cluster_with([starving(gang("big", 1, gpus=4)), long], running), config)
    assert [(r.gang, r.nodes, r.start) for r in starved.reservations] == [("big", ("n0",), 600.0)]
    assert starved.bindings == {"long-0": "n1"}
    # A promise, once held, is kept whether or not its gang starves (the option only decides who gets a new one).
    promised = cluster_with([timed(gang("big", 1, gpus=4), HOUR), long], running)
    kept = solve(replace(promised, promised=starved.reservations), config)
    assert [(r.gang, r.nodes, r.start) for r in kept.reservations] == [("big", ("n0",), 600.0)]
    assert kept.bindings == {"long-0": "n1"}


def test_a_relaxed_reservation_is_held_later_so_a_gang_that_ends_before_then_starts_now():
    # n0 frees 3 GPUs at 600 s: `big` fits there then. Held from 600 s, only one of the two 15-minute gangs starts
    # now (on n1); relaxed (held from twice its wait, 1,200 s), the other runs on n0 until 900 s as well.
    running = [busy("n0", 3, 600.0), busy("n1", 3, HOUR)]
    gangs = [starving(gang("big", 1, gpus=4)), timed(gang("mid1", 1, gpus=1), 900.0)]
    gangs.append(timed(gang("mid2", 1, gpus=1), 900.0))
    cluster = cluster_with(gangs, running)
    held = solve(cluster, SolveConfig(time_limit=0.5, plan_relaxation=0.0))
    assert [(r.nodes, r.start) for r in held.reservations if r.gang == "big"] == [(("n0",), 600.0)]
    assert len(held.bindings) == 1
    assert {r.earliest for r in held.reservations} == {None}  # each held from its earliest start
    relaxed = solve(cluster, SolveConfig(time_limit=0.5, plan_relaxation=1.0))
    big = [(r.nodes, r.start, r.earliest) for r in relaxed.reservations if r.gang == "big"]
    assert big == [(("n0",), 1200.0, 600.0)]  # and it could start at 600 s
    assert sorted(relaxed.bindings.values()) == ["n0", "n1"]
    assert validate(cluster, relaxed) == []
    # A cycle later (at 300 s) its wait is shorter: the hold moves sooner (to twice the 300 s left), never later.
    later = solve(replace(cluster, now=300.0, promised=relaxed.reservations), SolveConfig(plan_relaxation=1.0))
    assert [r.start for r in later.reservations if r.gang == "big"] == [900.0]


def test_where_queues_compete_a_reservation_is_held_from_its_earliest_start_however_relaxed():
    # The cluster above, `big` in team-a's queue and the 15-minute gangs in team-b's: every reservation is within
    # its queue's fair share, and relaxed, its room would go to the other queue's gangs. Held from 600 s, as R = 0.
    running = [busy("n0", 3, 600.0), busy("n1", 3, HOUR)]
    gangs = [replace(starving(gang("big", 1, gpus=4)), queue="team-a")]
    gangs += [replace(timed(gang(f"mid{i}", 1, gpus=1), 900.0), queue="team-b") for i in (1, 2)]
    cluster = replace(cluster_with(gangs, running), queues=(Queue("team-a"), Queue("team-b")))
    relaxed = solve(cluster, SolveConfig(time_limit=0.5, plan_relaxation=1.0))
    assert [(r.nodes, r.start, r.earliest) for r in relaxed.reservations if r.gang == "big"] == [(("n0",), 600.0, None)]
    assert len(relaxed.bindings) == 1
    # One queue alone: relaxed as above.
    alone = replace(cluster, gangs=tuple(replace(g, queue="team-a") for g in cluster.gangs))
    assert [r.start for r in solve(alone, SolveConfig(time_limit=0.5, plan_relaxation=1.0)).reservations] == [1200.0]


def test_a_relaxed_hold_that_another_hold_would_push_back_stays_at_its_earliest_start():
    # One node, free at 600 s. `long` (10 h) is relaxed to 1,200 s; `short` (10 minutes) fits at 600 s and ends
    # by then. Relaxed to 1,200 s it would not fit until `long` ends (37,200 s): it is held at 600 s.
    running = [busy("n0", 4, 600.0)]
    long = starving(gang("long", 1, gpus=4), 10 * HOUR)
    short = starving(gang("short", 1, gpus=4), 600.0)
    cluster = cluster_with([long, short], running, nodes=[node("n0", gpus=4)])
    relaxed = solve(cluster, SolveConfig(time_limit=0.5, plan_relaxation=1.0))
    assert [(r.gang, r.start) for r in relaxed.reservations] == [("long", 1200.0), ("short", 600.0)]
    assert validate(cluster, relaxed) == []


def test_a_relaxed_hold_is_at_most_the_relaxation_times_its_runtime_past_its_earliest_start():
    # n0 frees its 4 GPUs at 10,000 s. `short` runs 300 s: relaxed by its wait it would be held from 20,000 s,
    # 9,700 s past its earliest start for a 5-minute job; it is held from 10,300 s. `long` (10 h) may be held
    # as late as its wait allows (20,000 s).
    running = [busy("n0", 4, 10_000.0)]
    for runtime, start in ((300.0, 10_300.0), (10 * HOUR, 20_000.0)):
        cluster = cluster_with([starving(gang("g", 1, gpus=4), runtime)], running, nodes=[node("n0", gpus=4)])
        relaxed = solve(cluster, SolveConfig(time_limit=0.5, plan_relaxation=1.0))
        assert [(r.gang, r.start) for r in relaxed.reservations] == [("g", start)]


def test_a_higher_priority_gang_is_never_held_back_by_a_lower_reservation():
    running = [busy("n0", 3, 600.0), busy("n1", 4, HOUR)]
    big = starving(gang("big", 1, gpus=4))
    urgent = timed(gang("urgent", 1, gpus=1, priority=10), 2 * HOUR)
    placement = solve(cluster_with([big, urgent], running), SolveConfig(time_limit=0.5, plan_relaxation=0.0))
    assert placement.bindings == {"urgent-0": "n0"}
    lower = timed(gang("lower", 1, gpus=1), 2 * HOUR)
    placement = solve(cluster_with([big, lower], running), SolveConfig(time_limit=0.5, plan_relaxation=0.0))
    assert placement.bindings == {}
    assert placement.reservations[0].nodes == ("n0",)
    reason = {g.name: g.reason for g in placement.gangs}["lower"]
    assert reason.startswith("fits the free capacity now, but would still be running when a reservation")


def test_a_start_that_counts_on_a_guessed_end_is_shown_not_held():
    # The cluster of the first test, n0's pod on a guessed runtime (no declared one): `big` would count on it
    # ending in 10 minutes, so it gets a forecast, and `long` takes n0 (best fit) as if there were no plan.
    running = [replace(busy("n0", 3, 600.0), guessed=True), busy("n1", 3, HOUR)]
    big = starving(gang("big", 1, gpus=4))
    long = timed(gang("long", 1, gpus=1), 2 * HOUR)
    placement = solve(cluster_with([big, long], running), SolveConfig(time_limit=0.5, plan_relaxation=0.0))
    assert placement.reservations == ()
    assert placement.bindings == {"long-0": "n0"}
    assert [(r.gang, r.start, r.guessed) for r in placement.forecasts] == [("big", HOUR, True)]  # `long` took n0
    # The same end declared: held, and `long` keeps off n0.
    declared = solve(
        cluster_with([big, long], [busy("n0", 3, 600.0), running[1]]), SolveConfig(time_limit=0.5, plan_relaxation=0.0)
    )
    assert [(r.gang, r.nodes, r.start) for r in declared.reservations] == [("big", ("n0",), 600.0)]
    assert declared.bindings == {"long-0": "n1"}


def test_a_gang_whose_own_runtime_is_a_guess_holds_nothing():
    running = [busy("n0", 3, 600.0), busy("n1", 3, HOUR)]
    big = replace(starving(gang("big", 1, gpus=4)), guessed=True)
    placement = solve(cluster_with([big], running), SolveConfig(time_limit=0.5, plan_relaxation=0.0))
    assert placement.reservations == ()
    assert [(r.gang, r.start, r.guessed) for r in placement.forecasts] == [("big", 600.0, True)]


def test_a_gang_started_on_a_guessed_runtime_is_not_counted_on_to_end_before_a_reservation():
    # `short` would end before big's reservation at 600 s by its estimate, but the estimate is a guess: it may
    # not take the GPU of n0 the reservation needs, and waits (n1 is full).
    running = [busy("n0", 3, 600.0), busy("n1", 4, HOUR)]
    big = starving(gang("big", 1, gpus=4))
    short = replace(timed(gang("short", 1, gpus=1), 300.0), guessed=True)
    placement = solve(cluster_with([big, short], running), SolveConfig(time_limit=0.5, plan_relaxation=0.0))
    assert [(r.gang, r.nodes, r.start) for r in placement.reservations] == [("big", ("n0",), 600.0)]
    assert placement.bindings == {}
    declared = solve(
        cluster_with([big, replace(short, guessed=False)], running), SolveConfig(time_limit=0.5, plan_relaxation=0.0)
    )
    assert declared.bindings == {"short-0": "n0"}


def test_a_gang_without_an_estimate_may_backfill_only_capacity_the_reservation_leaves():
    running = [busy("n0", 2, 600.0), busy("n1", 4, HOUR)]
    big = starving(gang("big", 1, gpus=3))  # at 600 s n0 has 4 free: one GPU is left over
    unknown = [timed(gang(f"u{i}", 1, gpus=1), None) for i in range(2)]
    placement = solve(cluster_with([big, *unknown], running), SolveConfig(time_limit=0.5, plan_relaxation=0.0))
    assert len(placement.bindings) == 1
    assert placement.reservations[0].start == 600.0


def test_running_pods_without_an_estimate_leave_the_gang_waiting_for_one():
    running = [busy("n0", 4, None), busy("n1", 4, None)]
    placement = solve(
        cluster_with([starving(gang("big", 1, gpus=4))], running), SolveConfig(time_limit=0.5, plan_relaxation=0.0)
    )
    assert [(r.gang, r.nodes, r.start) for r in placement.reservations] == [("big", (), None)]


def test_a_gang_that_can_never_fit_holds_nothing():
    running = [busy("n0", 3, 600.0)]
    placement = solve(
        cluster_with([starving(gang("huge", 1, gpus=8))], running), SolveConfig(time_limit=0.5, plan_relaxation=0.0)
    )
    assert placement.reservations == ()


@pytest.mark.parametrize("device", [0, None])
@pytest.mark.parametrize("share_pending", [False, True])
def test_a_gpu_that_held_a_share_is_whole_again_when_its_last_share_ends(device, share_pending):
    # n0's four GPUs are free but for a share on one of them until 10 minutes from now (its GPU named, or not:
    # then a GPU of its own); n1 is busy for an hour. A 4-GPU pod fits on n0 once the share ends, not before;
    # if the share's GPU never counted as whole again it would wait for n1, an hour.
    share = Running("n0", {SHARE: 500, "cpu": 1000, "pods": 1}, 600.0, name="t/share", gpu=device)
    running = [share, busy("n1", 4, HOUR)]
    nodes = [replace(node("n0", gpus=4), gpu_shares={0 if device is not None else -1: 500}), node("n1", gpus=4)]
    wide = starving(gang("wide", 1, gpus=4))
    gangs = [wide]
    if share_pending:  # then the plan counts shares in milli-GPU too (the SHARE column)
        gangs.append(timed(Gang("small", (frac("small-0", 900),), 1), 300.0))  # ends before the wide pod starts
    cluster = cluster_with(gangs, running, nodes)
    placement = solve(cluster, SolveConfig(time_limit=0.5, plan_relaxation=0.0))
    assert [(r.gang, r.nodes, r.start) for r in placement.reservations] == [("wide", ("n0",), 600.0)]
    assert placement.bindings == ({"small-0": "n0"} if share_pending else {})
    assert validate(cluster, placement) == []


def test_a_gpu_with_shares_of_different_ends_is_whole_again_only_when_the_last_ends():
    first = Running("n0", {SHARE: 300, "pods": 1}, 600.0, name="t/first", gpu=1)
    last = Running("n0", {SHARE: 300, "pods": 1}, 1200.0, name="t/last", gpu=1)
    nodes = [replace(node("n0", gpus=4), gpu_shares={1: 600}), node("n1", gpus=4)]
    running = [first, last, busy("n1", 4, HOUR)]
    placement = solve(
        cluster_with([starving(gang("wide", 1, gpus=4))], running, nodes), SolveConfig(plan_relaxation=0.0)
    )
    assert [(r.nodes, r.start) for r in placement.reservations] == [(("n0",), 1200.0)]


def test_a_gpu_a_share_started_now_opens_is_whole_again_when_it_ends():
    # `b-held` holds n0 from 600 s (its CPU is taken until then), on the one GPU of n0 no pod holds. `a-short`, a
    # share walked first, starts now on that GPU and ends at 300 s, before the hold: the GPU must count as whole
    # again then, or the hold would no longer fit and move (a promise broken by the plan's own bookkeeping).
    n0 = node("n0", cpu=16, gpus=2)
    running = [busy("n0", 1, None), Running("n0", {"cpu": 12000, "pods": 1}, 600.0, name="t/cpu")]
    short = timed(Gang("a-short", (frac("a-short-0", 500),), 1), 300.0)
    held = timed(gang("b-held", 1, gpus=1, cpu=8), HOUR)
    promise = Reservation("b-held", ("n0",), 600.0, 1, {"b-held-0": "n0"}, 600.0 + HOUR)
    cluster = replace(cluster_with([short, held], running, [n0]), promised=(promise,))
    placement = solve(cluster, SolveConfig(time_limit=0.5, plan_relaxation=0.0))
    assert placement.bindings == {"a-short-0": "n0"}
    assert [(r.gang, r.nodes, r.start) for r in placement.reservations] == [("b-held", ("n0",), 600.0)]
    assert validate(cluster, placement) == []


def test_a_gpu_a_share_started_now_joins_is_whole_again_only_when_that_share_ends():
    # n0's GPU 0 holds a share until 600 s, GPU 2 one with no end, GPU 1 is whole. `a-small`, walked first, starts
    # now on GPU 0 (the tightest that holds it) until 1,200 s. The 2-GPU pod then finds two whole GPUs on n0 at
    # 1,200 s, not at 600 s, when GPU 0 still holds `a-small`: were GPU 0 whole again when its running share ends,
    # its start would be one the cluster cannot keep.
    ending = Running("n0", {SHARE: 500, "cpu": 1000, "pods": 1}, 600.0, name="t/ending", gpu=0)
    staying = Running("n0", {SHARE: 200, "cpu": 1000, "pods": 1}, None, name="t/staying", gpu=2)
    nodes = [replace(node("n0", gpus=3), gpu_shares={0: 500, 2: 200}), node("n1", gpus=2)]
    small = timed(Gang("a-small", (frac("a-small-0", 300),), 1), 1200.0)
    pair = timed(gang("b-pair", 1, gpus=2), HOUR)
    cluster = cluster_with([small, pair], [ending, staying, busy("n1", 2, HOUR)], nodes)
    placement = solve(cluster, SolveConfig(time_limit=0.5, plan_relaxation=0.0))
    assert placement.bindings == {"a-small-0": "n0"}
    assert [(r.gang, r.nodes, r.start) for r in placement.reservations] == [("b-pair", ("n0",), 1200.0)]
    assert validate(cluster, placement) == []


@pytest.mark.parametrize("runtime", [60.0, 1200.0])
def test_a_share_waits_where_it_would_take_part_of_a_gpu_a_promise_needs_whole(runtime):
    # n0: GPU 0 holds a share until 500 s, GPU 1 one for good and one until 500 s, GPU 2 a whole-GPU pod until
    # 500 s. `b-pair` was promised n0 at 500 s: GPUs 0 and 2, whole by then. A share of 370 fits now only on GPU 0
    # (GPU 1 has 130 left), and two columns alone cannot tell: at 500 s they count two whole GPUs and 2,080
    # milli-GPU on n0. Run past 500 s it would keep GPU 0 from being whole, and the promise would move; so it
    # waits. One that ends first starts.
    running = [
        Running("n0", {SHARE: 320, "cpu": 1000, "pods": 1}, 500.0, name="t/s0", gpu=0),
        Running("n0", {SHARE: 550, "cpu": 1000, "pods": 1}, None, name="t/s1", gpu=1),
        Running("n0", {SHARE: 320, "cpu": 1000, "pods": 1}, 500.0, name="t/s2", gpu=1),
        busy("n0", 1, 500.0),
        busy("n1", 2, HOUR),
    ]
    nodes = [replace(node("n0", gpus=3), gpu_shares={0: 320, 1: 870}), node("n1", gpus=2)]
    small = timed(Gang("a-small", (frac("a-small-0", 370),), 1), runtime)
    pair = timed(gang("b-pair", 1, gpus=2), HOUR)
    promise = Reservation("b-pair", ("n0",), 500.0, 2, {"b-pair-0": "n0"}, 500.0 + HOUR)
    cluster = replace(cluster_with([small, pair], running, nodes), promised=(promise,))
    placement = solve(cluster, SolveConfig(time_limit=0.5, plan_relaxation=0.0))
    assert ("b-pair", ("n0",), 500.0) in [(r.gang, r.nodes, r.start) for r in placement.reservations]
    assert placement.bindings == ({"a-small-0": "n0"} if runtime < 500.0 else {})
    assert validate(cluster, placement) == []


def test_later_reservations_queue_behind_earlier_ones():
    running = [busy("n0", 4, 600.0), busy("n1", 4, HOUR)]
    first = starving(gang("first", 1, gpus=4), runtime=2 * HOUR)
    second = starving(gang("second", 1, gpus=4), runtime=HOUR)
    placement = solve(
        cluster_with([first, second], running), SolveConfig(time_limit=0.5, reservations=2, plan_relaxation=0.0)
    )
    assert [(r.gang, r.nodes, r.start) for r in placement.reservations] == [
        ("first", ("n0",), 600.0),
        ("second", ("n1",), HOUR),
    ]
    one = solve(
        cluster_with([first, second], running), SolveConfig(time_limit=0.5, reservations=1, plan_relaxation=0.0)
    )
    assert [r.gang for r in one.reservations] == ["first"]


def test_every_gang_that_cannot_start_is_planned_in_queue_order_and_none_delays_one_before_it():
    # Not starving, either of them. The small gang fits on n0 now, but it would still run when n0 frees
    # enough for the first gang (in 10 minutes): it waits for n1 instead.
    running = [busy("n0", 3, 600.0), busy("n1", 4, HOUR)]
    fresh = timed(gang("fresh", 1, gpus=4), HOUR)
    small = timed(gang("small", 1, gpus=1), 2 * HOUR)
    placement = solve(cluster_with([fresh, small], running), SolveConfig(time_limit=0.5, plan_relaxation=0.0))
    assert [(r.gang, r.nodes, r.start, r.end) for r in placement.reservations] == [
        ("fresh", ("n0",), 600.0, 600.0 + HOUR),
        ("small", ("n1",), HOUR, 3 * HOUR),
    ]
    assert placement.bindings == {}
    # With a plan one gang deep (Slurm's bf_max_job_test=1), the second gang is not planned and starts now
    # wherever it delays no planned gang: n1 is full, n0 is held.
    one = solve(cluster_with([fresh, small], running), SolveConfig(time_limit=0.5, reservations=1, plan_relaxation=0.0))
    assert [r.gang for r in one.reservations] == ["fresh"]
    assert one.bindings == {}
    # It is still told when it is expected to start, by the same rule, as a forecast that holds nothing.
    assert [(r.gang, r.nodes, r.start, r.held) for r in one.forecasts] == [("small", ("n1",), HOUR, False)]
    none = solve(
        cluster_with([fresh, small], running),
        SolveConfig(time_limit=0.5, reservations=1, forecasts=0, plan_relaxation=0.0),
    )
    assert none.forecasts == ()


def test_the_same_cluster_gives_the_same_reservations():
    running = [busy("n0", 3, 600.0), busy("n1", 2, 1200.0)]
    gangs = [starving(gang("big", 1, gpus=4)), timed(gang("s", 3, min_member=1, gpus=1), 900.0)]
    first = solve(cluster_with(gangs, running), SolveConfig(time_limit=0.5, plan_relaxation=0.0))
    again = solve(cluster_with(gangs, running, now=60.0), SolveConfig(time_limit=0.5, plan_relaxation=0.0))
    assert first.reservations == again.reservations


def test_an_overrun_estimate_is_extended_never_ended():
    assert expected_end(0.0, 600.0, 300.0) == 600.0
    assert expected_end(0.0, 600.0, 600.0) == 900.0  # half the time it has run so far
    assert expected_end(0.0, 60.0, 100.0) == 100.0 + MIN_EXTENSION
    assert expected_end(0.0, 600.0, 4000.0) == 6000.0
    assert expected_end(0.0, None, 10.0) is None


def test_extra_pods_of_an_elastic_gang_keep_off_reserved_capacity():
    # n0 frees its last GPU in 10 minutes, for the starving 4-GPU gang; the elastic gang runs two hours, so its
    # pods past the minimum (placed after every gang's minimum) may not take n0's 3 free GPUs either.
    running = [busy("n0", 1, 600.0), busy("n1", 2, HOUR)]
    big = starving(gang("big", 1, gpus=4))
    elastic = timed(gang("elastic", 4, min_member=1, gpus=1), 2 * HOUR)
    cluster = cluster_with([big, elastic], running)
    placement = solve(cluster, SolveConfig(time_limit=0.5, plan_relaxation=0.0))
    assert placement.reservations[0].nodes == ("n0",)
    assert sorted(placement.bindings.values()) == ["n1", "n1"]
    assert reservation_violations(cluster, placement) == []


# --- the properties: no placement the pipeline returns delays a reservation ------------------------------------


def reservation_violations(cluster: Cluster, placement) -> list[str]:
    """An oracle from the definition, sharing no code with the planner: at each reservation's start T, on every
    node, what still runs then (running pods not yet ended, gangs started now that run past T and are not of a
    higher priority than every reservation active at T) plus the pods of the reservations active at T fit the
    node's allocatable, resource by resource. Preemption's victims are gone by then, and its nominated pods
    count as started. A guess is never waited for: a guessed end never comes, a gang started now on a guessed
    runtime runs past every reservation's start, and a gang with a guessed runtime holds no reservation."""
    gangs = {g.name: g for g in cluster.gangs}
    evicted = {e.pod for e in placement.evictions}
    pods = {p.name: (g, p) for g in cluster.gangs for p in g.pods}
    nodes = {n.name: n for n in cluster.nodes}

    def runtime(g):  # a guessed runtime is not counted on: the gang may run on past any reservation's start
        return float("inf") if g.runtime is None or g.guessed else g.runtime

    out = []
    for reservation in placement.reservations:
        if reservation.start is None:
            continue
        if gangs[reservation.gang].guessed and reservation.start > cluster.now:
            out.append(f"{reservation.gang}: held for {reservation.start:g} on a guessed runtime")
        at = reservation.start
        active = [
            r
            for r in placement.reservations
            if r.start is not None and r.start <= at < r.start + runtime(gangs[r.gang])
        ]
        ceiling = max(gangs[r.gang].priority for r in active)
        use = {name: dict(n.used) for name, n in nodes.items()}

        def add(node, requests, sign, use=use):
            for k, q in requests.items():
                use[node][k] = use[node].get(k, 0) + sign * q

        for r in cluster.running:
            if (r.end is not None and r.end <= at and not r.guessed) or r.name in evicted:  # a guess never ends
                add(r.node, r.requests, -1)
        for r in active:
            for pod_name, node_name in r.bindings.items():
                add(node_name, pods[pod_name][1].requests, +1)
        for pod_name, node_name in {**placement.bindings, **placement.nominations}.items():
            g, p = pods[pod_name]
            if cluster.now + runtime(g) > at and g.priority <= ceiling:
                add(node_name, p.requests, +1)
        for name, used in use.items():
            for k, q in used.items():
                if q > nodes[name].allocatable.get(k, 0):
                    out.append(f"at {at:g} ({reservation.gang}): {name} {k} {q} > {nodes[name].allocatable.get(k, 0)}")
    return out


RUNTIMES = (300.0, 900.0, 3600.0, 14400.0, None)


@st.composite
def timed_clusters(draw):
    """Up to 5 nodes of 8 GPUs in two zones, partly busy with pods ending at known times (or never known); up to 8
    gangs of several sizes, priorities and runtimes, some starving, elastic or co-located."""
    nodes = [
        node(f"n{i}", cpu=draw(st.sampled_from((16, 64))), gpus=8, labels={"zone": f"z{i % 2}"})
        for i in range(draw(st.integers(1, 5)))
    ]
    running = []
    for n in nodes:
        left = 8
        while left and draw(st.booleans()):
            gpus = draw(st.integers(1, left))
            end = draw(st.sampled_from((60.0, 600.0, 1800.0, 3600.0, 7200.0, None)))
            guessed = end is not None and draw(st.integers(0, 3)) == 0  # learned or the default, not declared
            running.append(replace(busy(n.name, gpus, end), guessed=guessed))
            left -= gpus
    gangs = []
    for i in range(draw(st.integers(1, 8))):
        size = draw(st.integers(1, 4))
        g = gang(
            f"g{i}",
            size,
            min_member=draw(st.integers(1, size)),
            gpus=draw(st.sampled_from((1, 2, 4, 8))),
            cpu=draw(st.sampled_from((1, 4))),
            priority=draw(st.sampled_from((0, 0, 10))),
            colocate=draw(st.sampled_from((None, None, "zone"))),
        )
        runtime = draw(st.sampled_from(RUNTIMES))
        guessed = runtime is not None and draw(st.integers(0, 3)) == 0
        gangs.append(replace(g, starving=draw(st.booleans()), runtime=runtime, guessed=guessed))
    return cluster_with(gangs, running, nodes)


def previous_plans(cluster: Cluster):
    """A plan from an earlier cycle: any pending pod on any node."""
    names = [p.name for g in cluster.gangs for p in g.pods]
    return (
        st.dictionaries(st.sampled_from(names), st.sampled_from([n.name for n in cluster.nodes]))
        if names
        else st.just({})
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timed_clusters(), st.integers(1, 3), st.data())
def test_no_placement_the_pipeline_returns_delays_a_reservation(cluster, most, data):
    """Every path (hints, warm start from any earlier plan, exact CP-SAT, search, locality) keeps the limits; and
    the cycle is never worse than the queue-order greedy pass holding the same reservations."""
    previous = data.draw(previous_plans(cluster))
    config = SolveConfig(time_limit=0.3, reservations=most, plan_relaxation=0.0)
    placement = solve(cluster, config, previous=previous)
    assert validate(cluster, placement) == []
    assert reservation_violations(cluster, placement) == []

    greedy = solve(cluster, SolveConfig(use_cpsat=False, reservations=most, plan_relaxation=0.0))
    assert reservation_violations(cluster, greedy) == []
    assert gangs_placed_per_level(cluster, placement.bindings) >= gangs_placed_per_level(cluster, greedy.bindings)

    # The same reservations, less those whose gang found room now after all or preempts to start now (in
    # either run: preemption sees each run's own placement).
    def key(r):
        return (r.gang, r.start, tuple(sorted(r.bindings.items())))

    def starting(p):
        return {g.name for g in p.gangs if g.placed_pods} | {pod.rsplit("-", 1)[0] for pod in p.nominations}

    made, kept = {key(r) for r in greedy.reservations}, {key(r) for r in placement.reservations}
    assert all(key(r) in made for r in placement.reservations if r.gang not in starting(greedy))
    assert all(r.gang in starting(placement) for r in greedy.reservations if key(r) not in kept)
    assert placement.objective <= placement.best_bound


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timed_clusters(), st.integers(0, 3))
def test_every_search_step_keeps_the_limits(cluster, seed):
    problem = Problem(cluster)
    counts, plan = planning.plan(problem, 2)
    search = Search(problem, counts, seed=seed, nodes=3, extra=2, limits=Limits(problem, plan))
    every_level = set(problem.gang_priority_levels())
    for _ in range(20):
        if search.step(every_level) is None:
            break
        placement = _placement(problem, search.counts, [], {}, None, "X", 0.0, plan)
        assert reservation_violations(cluster, placement) == []
        assert validate(cluster, placement) == []


def test_a_search_step_takes_a_started_reserved_gang_off_only_where_its_reservation_fits():
    # Found by the property above. `d-elastic` holds n0 and n2 from 300 s; a step starts it now on n1 after all
    # (its reservation given back) and moves `a-forever` and `e-guessed` (never counted on to end) onto n2. A
    # later step that took `d-elastic` off again would bring its reservation back on n2, under those two.
    nodes = [node(f"n{i}", gpus=8, labels={"zone": f"z{i % 2}"}) for i in range(3)]
    gangs = [
        gang("a-forever", 1, gpus=1),
        timed(gang("b-zoned", 1, gpus=8, cpu=4, colocate="zone"), 300.0),
        starving(gang("c-first", 1, gpus=8), 300.0),
        timed(gang("d-elastic", 2, min_member=1, gpus=8, cpu=4), 300.0),
        replace(timed(gang("e-guessed", 1, gpus=1), 300.0), guessed=True),
    ]
    cluster = Cluster(tuple(nodes), tuple(gangs), (), now=0.0)
    problem = Problem(cluster)
    counts, plan = planning.plan(problem, 2)
    assert [(problem.gangs[r.gang].name, r.start) for r in plan.reservations] == [("d-elastic", 300.0)]
    search = Search(problem, counts, seed=0, nodes=3, extra=2, limits=Limits(problem, plan))
    for _ in range(20):
        if search.step(set(problem.gang_priority_levels())) is None:
            break
        placement = _placement(problem, search.counts, [], {}, None, "X", 0.0, plan)
        assert reservation_violations(cluster, placement) == []


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timed_clusters())
def test_more_time_never_gives_a_worse_answer_with_reservations(cluster):
    short = solve(cluster, SolveConfig(time_limit=0.1, reservations=2, plan_relaxation=0.0))
    longer = solve(cluster, SolveConfig(time_limit=1.0, reservations=2, plan_relaxation=0.0))
    assert worth(cluster, longer.bindings) >= worth(cluster, short.bindings)


def test_the_oracle_sees_a_gang_that_runs_into_a_reservation():
    """The oracle itself: the long gang on the reserved node is a violation, on the other node it is not."""
    running = [busy("n0", 3, 600.0), busy("n1", 3, HOUR)]
    big = starving(gang("big", 1, gpus=4))
    long = timed(gang("long", 1, gpus=1), 2 * HOUR)
    cluster = cluster_with([big, long], running)
    placement = solve(cluster, SolveConfig(time_limit=0.5, plan_relaxation=0.0))
    assert placement.bindings == {"long-0": "n1"}
    assert reservation_violations(cluster, placement) == []
    moved = replace(placement, bindings={"long-0": "n0"})
    assert reservation_violations(cluster, moved) == [f"at 600 (big): n0 {GPU} 5 > 4"]


def test_preemption_never_starts_a_gang_a_reservation_holds_back():
    """The preemption stage binds gangs that fit as things are; a gang of the reservation holder's priority that
    the placement kept off the reserved node stays off it (found by the property above)."""
    nodes = [node(f"n{i}", cpu=16, gpus=8) for i in range(3)]
    high = replace(gang("high", 2, gpus=8, priority=10), runtime=300.0)  # takes n0 and n2: it may preempt
    small = replace(gang("small", 1, gpus=1), runtime=300.0)  # would fit on n1 now, but runs past 60 s
    starving = replace(gang("starving", 1, gpus=8), runtime=300.0, starving=True)
    cluster = cluster_with([high, small, starving], [busy("n1", 1, 60.0)], nodes)
    placement = solve(cluster, SolveConfig(time_limit=0.5, reservations=1, plan_relaxation=0.0))
    assert [(r.gang, r.nodes, r.start) for r in placement.reservations] == [("starving", ("n1",), 60.0)]
    assert "small-0" not in placement.bindings
    assert reservation_violations(cluster, placement) == []


def test_a_reserved_gang_started_now_after_all_gives_its_reservation_back():
    # n0 frees 3 GPUs at 600 s and the starving 4-GPU gang holds all of n0 from then; n1 stays busy. A gang
    # running an hour may not take n0's free GPU now: it would still run when the reservation starts.
    big = starving(gang("big", 1, gpus=4))
    long = timed(gang("long", 1, gpus=1), HOUR)
    problem = Problem(cluster_with([big, long], [busy("n0", 3, 600.0), busy("n1", 4, 2 * HOUR)]))
    _counts, plan = planning.plan(problem, 1)
    assert [(problem.gangs[r.gang].name, r.start) for r in plan.reservations] == [("big", 600.0)]
    g_big, g_long = (next(g for g, x in enumerate(problem.gangs) if x.name == name) for name in ("big", "long"))
    n0, n1, gpu = problem.node_index["n0"], problem.node_index["n1"], problem.res_index[GPU]
    limits = Limits(problem, plan)
    assert limits.room_for(g_long, problem.free)[n0, gpu] == 0
    assert limits.room_for(g_big, problem.free)[n0, gpu] == 1  # its own reservation does not hold it back
    # Were a pass to start the big gang now after all (on n1, say), n0 is no longer held for it; taken off
    # again, the reservation holds again.
    limits.take(g_big, {(0, n1): 1})
    assert limits.room_for(g_long, problem.free)[n0, gpu] == 1
    limits.take(g_big, {(0, n1): 1}, -1)
    assert limits.room_for(g_long, problem.free)[n0, gpu] == 0


def test_a_running_pod_with_an_end_is_the_same_pod_otherwise() -> None:
    """`Running.ending` copies without dataclasses.replace: every other field must come along, and the original
    must stay as it was (frozen objects are shared across cycles)."""
    pod = Running(
        "n1", {GPU: 1}, None, name="t/a", priority=5, gang="t/g", min_member=2, pdbs=("t/pdb",), started=3.0,
        protected=True, leaving=True, queue="q", gpu=1,
    )  # fmt: skip
    assert pod.ending(90.0) == replace(pod, end=90.0)
    assert pod.ending(90.0, guessed=True) == replace(pod, end=90.0, guessed=True)
    assert pod.end is None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timed_clusters())
def test_telling_whether_a_gang_fits_within_the_reservations_counts_as_placing_it_would(cluster):
    """A waiting gang's reason says whether a reservation holds it back: for a gang of one pod class the count of
    pods each node holds decides it, the same answer as placing the gang within the reservations' limits."""
    problem = Problem(cluster)
    _counts, plan = planning.plan(problem, 2)
    limits = Limits(problem, plan)
    for g, waiting in enumerate(problem.gangs):
        room = limits.room_for(g, problem.free.copy())
        placed = (place_colocated if waiting.colocate else place_gang)(problem, g, room) is not None
        assert _fits_within(problem, g, limits) == placed
