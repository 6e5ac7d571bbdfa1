"""Queues and reservations in one cluster: every path of the pipeline keeps each queue within its capability
and leaves every reservation whole at once, with the oracles of both (written from their definitions, not with
the solver's code)."""

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsolve.solver import GPU, Queue, SolveConfig, solve, validate
from tests.builders import gang, node
from tests.solver.test_planning import HOUR, busy, cluster_with, previous_plans, reservation_violations, timed_clusters
from tests.solver.test_queues import QUEUES, held, per_level, queues


def within_caps(cluster, bindings) -> bool:
    holds = held(cluster, bindings)
    return all(holds[q.name][r] <= cap for q in cluster.queues for r, cap in q.capability.items())


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timed_clusters(), queues(), st.integers(1, 2), st.data())
def test_every_path_keeps_the_caps_and_the_reservations_together(timed, queue_list, most, data):
    gangs = tuple(replace(g, queue=data.draw(st.sampled_from(QUEUES))) for g in timed.gangs)
    cluster = replace(timed, gangs=gangs, queues=tuple(queue_list))
    placement = solve(
        cluster, SolveConfig(time_limit=0.3, reservations=most), previous=data.draw(previous_plans(cluster))
    )
    greedy = solve(cluster, SolveConfig(use_cpsat=False, reservations=most))
    for result in (placement, greedy):
        assert validate(cluster, result) == []
        assert reservation_violations(cluster, result) == []
        assert within_caps(cluster, result.bindings)
    assert per_level(cluster, placement.bindings) >= per_level(cluster, greedy.bindings)
    # A gang that preempts to start now (nominated) gives its reservation back, as one placed now does.
    started = {g.name for g in placement.gangs if g.placed_pods} | {p.rsplit("-", 1)[0] for p in placement.nominations}
    assert placement.reservations == tuple(r for r in greedy.reservations if r.gang not in started)


def three_nodes_and_a_reservation(*gangs, capability):
    """Three 4-GPU nodes with 1 GPU free each; n0 frees 3 more in 10 minutes, so a starving 4-GPU gang of queue
    b holds it from then; queue a is capped at `capability` GPUs."""
    running = [busy("n0", 3, 600.0), busy("n1", 3, HOUR), busy("n2", 3, HOUR)]
    big = replace(gang("big", 1, gpus=4), starving=True, runtime=HOUR, queue="b")
    cluster = cluster_with([big, *gangs], running, [node(f"n{i}", gpus=4) for i in range(3)])
    return replace(cluster, queues=(Queue("a", capability={GPU: capability}), Queue("b")))


def test_a_capped_elastic_gang_keeps_within_its_cap_and_off_the_reserved_node():
    # Alone, the reservation would let it take n1 and n2, and the cap 1 GPU anywhere: together, 1 GPU off n0;
    # the GPU the cap leaves goes to the other queue's gang, which keeps off n0 too.
    elastic = replace(gang("elastic", 3, min_member=1, gpus=1), runtime=2 * HOUR, queue="a")
    other = replace(gang("other", 1, gpus=1), runtime=2 * HOUR, queue="b")
    cluster = three_nodes_and_a_reservation(elastic, other, capability=1)
    for config in (SolveConfig(time_limit=0.5), SolveConfig(use_cpsat=False)):
        placement = solve(cluster, config)
        assert [(r.gang, r.nodes, r.start) for r in placement.reservations] == [("big", ("n0",), 600.0)]
        mine = [n for p, n in placement.bindings.items() if p.startswith("elastic-")]
        assert len(mine) == 1
        assert placement.bindings["other-0"] != "n0"
        assert set(placement.bindings.values()) == {"n1", "n2"}
        assert reservation_violations(cluster, placement) == []
        assert validate(cluster, placement) == []
    uncapped = solve(three_nodes_and_a_reservation(elastic, capability=3), SolveConfig(time_limit=0.5))
    assert sorted(uncapped.bindings.values()) == ["n1", "n2"]  # the reservation alone: n0 stays free


def test_a_gang_its_queue_cap_holds_back_holds_no_reservation():
    running = [busy("n0", 3, 600.0), busy("n1", 3, HOUR)]
    capped = replace(gang("capped", 1, gpus=4), starving=True, runtime=HOUR, queue="a")
    long = replace(gang("long", 1, gpus=1), runtime=2 * HOUR, queue="b")
    cluster = replace(cluster_with([capped, long], running), queues=(Queue("a", capability={GPU: 2}), Queue("b")))
    placement = solve(cluster, SolveConfig(time_limit=0.5))
    assert placement.reservations == ()
    assert "long-0" in placement.bindings  # nothing held for a gang that could not start at any time
    assert "capability" in {g.name: g.reason for g in placement.gangs}["capped"]
