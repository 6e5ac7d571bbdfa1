"""Reservations and backfill: a starving gang that cannot start holds the nodes running pods free first; other
gangs start only where they leave that whole (they end first, or use other capacity)."""

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsolve.solver import Cluster, Running, SolveConfig, solve, validate
from gangsolve.solver.model import GPU, Gang
from gangsolve.solver.planning import MIN_EXTENSION, expected_end
from tests.builders import gang, node

HOUR = 3600.0


def busy(name: str, gpus: int, end: float | None) -> Running:
    return Running(name, {"cpu": gpus * 1000, "memory": 2**30, "pods": 1, GPU: gpus}, end)


def cluster_with(gangs, running, nodes=None, now=0.0) -> Cluster:
    """Two 4-GPU nodes; `running` pods already hold their GPUs (they are in the nodes' `used`)."""
    nodes = nodes or [node("n0", gpus=4), node("n1", gpus=4)]
    used: dict[str, dict[str, int]] = {n.name: {} for n in nodes}
    for r in running:
        for k, q in r.requests.items():
            used[r.node][k] = used[r.node].get(k, 0) + q
    return Cluster(tuple(replace(n, used=used[n.name]) for n in nodes), tuple(gangs), tuple(running), now)


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
    placement = solve(cluster_with([big, short, long], running), SolveConfig(time_limit=0.5))

    assert [(r.gang, r.nodes, r.start, r.gpus) for r in placement.reservations] == [("big", ("n0",), 600.0, 4)]
    assert placement.bindings == {"short-0": "n0", "long-0": "n1"}
    assert validate(cluster_with([big, short, long], running), placement) == []


def test_without_reservations_the_long_gang_takes_the_node_the_big_one_waits_for():
    running = [busy("n0", 3, 600.0), busy("n1", 3, HOUR)]
    big = starving(gang("big", 1, gpus=4))
    long = timed(gang("long", 1, gpus=1), 2 * HOUR)
    cluster = cluster_with([big, long], running)
    placement = solve(cluster, SolveConfig(time_limit=0.5, reservations=0))
    assert placement.reservations == ()
    assert placement.bindings == {"long-0": "n0"}  # best fit: the first node; big now waits 2 h, not 10 min
    held = solve(cluster, SolveConfig(time_limit=0.5))
    assert held.bindings == {"long-0": "n1"}


def test_a_higher_priority_gang_is_never_held_back_by_a_lower_reservation():
    running = [busy("n0", 3, 600.0), busy("n1", 4, HOUR)]
    big = starving(gang("big", 1, gpus=4))
    urgent = timed(gang("urgent", 1, gpus=1, priority=10), 2 * HOUR)
    placement = solve(cluster_with([big, urgent], running), SolveConfig(time_limit=0.5))
    assert placement.bindings == {"urgent-0": "n0"}
    lower = timed(gang("lower", 1, gpus=1), 2 * HOUR)
    placement = solve(cluster_with([big, lower], running), SolveConfig(time_limit=0.5))
    assert placement.bindings == {}
    assert placement.reservations[0].nodes == ("n0",)


def test_a_gang_without_an_estimate_may_backfill_only_capacity_the_reservation_leaves():
    running = [busy("n0", 2, 600.0), busy("n1", 4, HOUR)]
    big = starving(gang("big", 1, gpus=3))  # at 600 s n0 has 4 free: one GPU is left over
    unknown = [timed(gang(f"u{i}", 1, gpus=1), None) for i in range(2)]
    placement = solve(cluster_with([big, *unknown], running), SolveConfig(time_limit=0.5))
    assert len(placement.bindings) == 1
    assert placement.reservations[0].start == 600.0


def test_running_pods_without_an_estimate_leave_the_gang_waiting_for_one():
    running = [busy("n0", 4, None), busy("n1", 4, None)]
    placement = solve(cluster_with([starving(gang("big", 1, gpus=4))], running), SolveConfig(time_limit=0.5))
    assert [(r.gang, r.nodes, r.start) for r in placement.reservations] == [("big", (), None)]


def test_a_gang_that_can_never_fit_holds_nothing():
    running = [busy("n0", 3, 600.0)]
    placement = solve(cluster_with([starving(gang("huge", 1, gpus=8))], running), SolveConfig(time_limit=0.5))
    assert placement.reservations == ()


def test_later_reservations_queue_behind_earlier_ones():
    running = [busy("n0", 4, 600.0), busy("n1", 4, HOUR)]
    first = starving(gang("first", 1, gpus=4), runtime=2 * HOUR)
    second = starving(gang("second", 1, gpus=4), runtime=HOUR)
    placement = solve(cluster_with([first, second], running), SolveConfig(time_limit=0.5, reservations=2))
    assert [(r.gang, r.nodes, r.start) for r in placement.reservations] == [
        ("first", ("n0",), 600.0),
        ("second", ("n1",), HOUR),
    ]
    one = solve(cluster_with([first, second], running), SolveConfig(time_limit=0.5, reservations=1))
    assert [r.gang for r in one.reservations] == ["first"]


def test_only_starving_gangs_hold_reservations():
    running = [busy("n0", 3, 600.0), busy("n1", 4, HOUR)]
    fresh = timed(gang("fresh", 1, gpus=4), HOUR)
    small = timed(gang("small", 1, gpus=1), 2 * HOUR)
    placement = solve(cluster_with([fresh, small], running), SolveConfig(time_limit=0.5))
    assert placement.reservations == ()
    assert len(placement.bindings) == 1


def test_the_same_cluster_gives_the_same_reservations():
    running = [busy("n0", 3, 600.0), busy("n1", 2, 1200.0)]
    gangs = [starving(gang("big", 1, gpus=4)), timed(gang("s", 3, min_member=1, gpus=1), 900.0)]
    first = solve(cluster_with(gangs, running), SolveConfig(time_limit=0.5))
    again = solve(cluster_with(gangs, running, now=60.0), SolveConfig(time_limit=0.5))
    assert first.reservations == again.reservations


def test_an_overrun_estimate_is_extended_never_ended():
    assert expected_end(0.0, 600.0, 300.0) == 600.0
    assert expected_end(0.0, 600.0, 600.0) == 900.0  # half the time it has run so far
    assert expected_end(0.0, 60.0, 100.0) == 100.0 + MIN_EXTENSION
    assert expected_end(0.0, 600.0, 4000.0) == 6000.0
    assert expected_end(0.0, None, 10.0) is None


# --- the property: a placement never delays a reservation ------------------------------------------------------


@st.composite
def timed_clusters(draw):
    nodes = [node(f"n{i}", cpu=64, gpus=8) for i in range(draw(st.integers(1, 5)))]
    running = []
    for n in nodes:
        left = 8
        while left and draw(st.booleans()):
            gpus = draw(st.integers(1, left))
            running.append(busy(n.name, gpus, float(draw(st.sampled_from((60, 600, 1800, 3600, 7200))))))
            left -= gpus
    big = starving(gang("big", draw(st.integers(1, 3)), gpus=draw(st.sampled_from((4, 8)))), HOUR)
    others = [
        timed(
            gang(f"g{i}", draw(st.integers(1, 3)), gpus=draw(st.sampled_from((1, 2)))),
            float(draw(st.sampled_from((300, 900, 3600, 14400)))),
        )
        for i in range(draw(st.integers(0, 6)))
    ]
    return cluster_with([big, *others], running, nodes)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timed_clusters())
def test_gangs_started_now_leave_the_reservation_room_at_its_start(cluster):
    """An oracle from the definition: at the reservation's start, its nodes' GPUs (running pods ended by then
    given back, gangs started now and still running held) hold the reserved gang."""
    placement = solve(cluster, SolveConfig(time_limit=0.3, reservations=1))
    assert validate(cluster, placement) == []
    if not placement.reservations or placement.reservations[0].start is None:
        return
    reservation = placement.reservations[0]
    start = reservation.start
    gangs = {g.name: g for g in cluster.gangs}
    free = {n.name: n.allocatable[GPU] - n.used.get(GPU, 0) for n in cluster.nodes}
    for r in cluster.running:
        if r.end is not None and r.end <= start:
            free[r.node] += r.requests[GPU]
    pods = {p.name: (g, p) for g in cluster.gangs for p in g.pods}
    for pod_name, node_name in placement.bindings.items():
        g, p = pods[pod_name]
        if g.runtime is None or cluster.now + g.runtime > start:
            free[node_name] -= p.requests[GPU]
    big = gangs[reservation.gang]
    per_pod = big.pods[0].requests[GPU]
    assert sum(free[n] // per_pod for n in reservation.nodes) >= big.need
    assert reservation.gpus == big.need * per_pod
