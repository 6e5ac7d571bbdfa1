"""Scenario tables for the solver: what a cycle must decide, checked with the independent validator."""

import time
from dataclasses import replace

import pytest
from ortools.sat.python import cp_model

from gangsolve.solver import Cluster, Gang, SolveConfig, Toleration, solve, validate
from gangsolve.solver.greedy import greedy
from gangsolve.solver.pipeline import _exact, warm_start
from gangsolve.solver.problem import Problem
from tests.builders import MASTER_TAINT, gang, node, pod


def run(nodes, gangs, **config):
    cluster = Cluster(tuple(nodes), tuple(gangs))
    placement = solve(cluster, SolveConfig(**config))
    assert validate(cluster, placement) == []
    return placement


def placed(placement):
    return {g.name for g in placement.gangs if g.placed}


def nodes_of(placement, prefix):
    return {n for p, n in placement.bindings.items() if p.startswith(prefix)}


def test_users_tfjob_lands_on_gpu_nodes_only():
    nodes = [
        node("apollo25", cpu=24, taints=[MASTER_TAINT]),
        *(node(f"apollo6{i}", 28, gpus=4, labels={"gpu": "yes"}) for i in (1, 2)),
    ]
    workers = gang("tf/worker", 7, gpus=1, cpu=2, memory_gi=4, node_selector={"gpu": "yes"})
    ps = pod("tf/ps-0", cpu=2, node_selector={"gpu": "yes"})
    job = Gang("tf/mnist", (ps, *workers.pods), 8)
    p = run(nodes, [job])
    assert placed(p) == {"tf/mnist"}
    assert len(p.bindings) == 8
    assert "apollo25" not in p.bindings.values()


def test_gang_that_does_not_fit_takes_nothing_and_says_which_resource():
    nodes = [
        node("apollo25", cpu=24, taints=[MASTER_TAINT]),
        *(node(f"apollo6{i}", 28, gpus=4, labels={"gpu": "yes"}) for i in (1, 2)),
    ]
    job = gang("tf/mnist", 9, gpus=1, cpu=2, node_selector={"gpu": "yes"})
    p = run(nodes, [job])
    assert p.bindings == {}
    (result,) = p.gangs
    assert not result.placed
    assert "needs 9 nvidia.com/gpu, 8 free" in result.reason
    assert "apollo25 excluded by taint node-role.kubernetes.io/master:NoSchedule" in result.reason


def test_two_gangs_never_half_placed():
    # Each gang wants 6 of the 8 GPUs: a per-pod scheduler would split them and deadlock both.
    nodes = [node(f"n{i}", gpus=4) for i in range(2)]
    p = run(nodes, [gang("a", 6, gpus=1), gang("b", 6, gpus=1)])
    assert len(placed(p)) == 1
    loser = ({"a", "b"} - placed(p)).pop()
    assert not any(name.startswith(loser) for name in p.bindings)


def test_maximises_gangs_placed_where_greedy_does_not():
    # Greedy places the oldest gang (2 x 3 GPUs) on both nodes and strands 1 GPU on each; placing the two
    # 4-GPU gangs instead satisfies two gangs.
    nodes = [node("n0", gpus=4), node("n1", gpus=4)]
    gangs = [gang("a-first", 2, gpus=3), gang("b", 1, gpus=4), gang("c", 1, gpus=4)]
    cluster = Cluster(tuple(nodes), tuple(gangs))
    assert len(greedy(Problem(cluster))) == 1
    p = run(nodes, gangs)
    assert placed(p) == {"b", "c"}
    assert p.objective == 2
    assert p.status == "OPTIMAL"


def test_higher_priority_gang_is_never_traded_for_more_lower_ones():
    nodes = [node("n0", gpus=4), node("n1", gpus=4)]
    gangs = [
        gang("low1", 1, gpus=4, priority=0),
        gang("low2", 1, gpus=4, priority=0),
        gang("high", 2, gpus=3, priority=100),
    ]
    p = run(nodes, gangs)
    assert placed(p) == {"high"}


def test_cordoned_and_not_ready_nodes_are_never_used():
    nodes = [node("cordoned", gpus=8, unschedulable=True), node("down", gpus=8, ready=False), node("ok", gpus=2)]
    p = run(nodes, [gang("g", 4, gpus=1)])
    assert p.bindings == {}
    assert "cordoned" in p.gangs[0].reason
    assert "not Ready" in p.gangs[0].reason


def test_toleration_lets_a_pod_onto_a_tainted_node():
    nodes = [node("master", taints=[MASTER_TAINT])]
    tolerating = gang("t", 1, tolerations=(Toleration("node-role.kubernetes.io/master", "Exists"),))
    p = run(nodes, [tolerating, gang("plain", 1)])
    assert placed(p) == {"t"}


def test_capacity_held_by_bound_pods_counts():
    busy = node("busy", gpus=4)
    busy = type(busy)(busy.name, busy.allocatable, busy.labels, used={"nvidia.com/gpu": 3, "pods": 3})
    p = run([busy], [gang("g", 2, gpus=1)])
    assert p.bindings == {}


def test_pod_slots_count():
    p = run([node("n", pods=2)], [gang("g", 3, cpu=0.1)])
    assert p.bindings == {}


def test_extras_beyond_min_are_placed_when_they_fit():
    p = run([node("n", gpus=4)], [gang("g", 6, min_member=2, gpus=1)])
    (result,) = p.gangs
    assert result.placed
    assert result.placed_pods == 4
    assert "placed 4 of 6" in result.reason


def test_bound_members_count_toward_min():
    # 3 of 4 members already run: the last one alone satisfies the gang.
    g = gang("g", 1, min_member=4, gpus=1, bound_nodes=("n", "n", "n"))
    p = run([node("n", gpus=4)], [g])
    assert p.gangs[0].placed
    assert len(p.bindings) == 1


def test_gang_with_fewer_pods_than_min_waits_with_a_reason():
    p = run([node("n", gpus=8)], [gang("g", 3, min_member=4, gpus=1)])
    assert p.bindings == {}
    assert "fewer than minMember 4" in p.gangs[0].reason


def test_hard_colocation_on_one_node():
    nodes = [node("n0", gpus=4), node("n1", gpus=4), node("n2", gpus=8)]
    p = run(nodes, [gang("g", 6, gpus=1, colocate="kubernetes.io/hostname")])
    assert nodes_of(p, "g") == {"n2"}


def test_hard_colocation_in_one_zone():
    nodes = [node(f"a{i}", gpus=4, labels={"zone": "a"}) for i in range(2)] + [
        node(f"b{i}", gpus=4, labels={"zone": "b"}) for i in range(3)
    ]
    p = run(nodes, [gang("g", 10, gpus=1, colocate="zone")])
    assert nodes_of(p, "g") <= {"b0", "b1", "b2"}
    assert len(p.bindings) == 10


def test_colocation_that_no_domain_holds_stays_pending():
    nodes = [node("n0", gpus=4), node("n1", gpus=4)]
    p = run(nodes, [gang("g", 6, gpus=1, colocate="kubernetes.io/hostname")])
    assert p.bindings == {}
    assert "kubernetes.io/hostname" in p.gangs[0].reason


def test_resources_tier_prefers_the_gang_with_more_gpus():
    # Only one of the two single-pod gangs fits; both count 1 gang, the 4-GPU one places more GPUs.
    p = run([node("n", gpus=4, cpu=4)], [gang("cpu-heavy", 1, cpu=3), gang("gpu-heavy", 1, cpu=3, gpus=4)])
    assert placed(p) == {"gpu-heavy"}


def test_locality_prefers_fewer_nodes_and_partly_used_gpu_nodes():
    partly = node("partly", gpus=8)
    partly = type(partly)(partly.name, partly.allocatable, partly.labels, used={"nvidia.com/gpu": 4, "pods": 4})
    nodes = [node("empty1", gpus=8), node("empty2", gpus=8), partly]
    p = run(nodes, [gang("g", 4, gpus=1)])
    assert nodes_of(p, "g") == {"partly"}


def test_cpu_pods_keep_off_gpu_nodes_when_they_can():
    p = run([node("gpu", gpus=8), node("cpu")], [gang("web", 2, cpu=1)])
    assert nodes_of(p, "web") == {"cpu"}


def test_higher_priority_pods_of_a_gang_are_placed_first():
    pods = (pod("g-low", gpus=1, priority=1, order=0), pod("g-high", gpus=1, priority=9, order=1))
    p = run([node("n", gpus=1)], [Gang("g", pods, 1)])
    assert set(p.bindings) == {"g-high"}


def test_a_cycle_with_nothing_left_to_place_proves_it_without_a_bound_or_search():
    """A stream's cycle (gangs that arrived whole and have room, one whose members are still being created):
    every level is at its most, so no bound or search runs; the placement is proven optimal and the locality
    stage still puts each gang on one node."""
    nodes = [node(f"n{i}", gpus=8) for i in range(4)]
    gangs = [gang("a", 3, gpus=2), gang("b", 2, gpus=1), gang("c", 4, min_member=2, gpus=1)]
    gangs.append(gang("d", 1, min_member=2, gpus=1))  # its second member is not created yet
    p = run(nodes, gangs, time_limit=10)
    assert [(s["name"], s["status"]) for s in p.stages][:2] == [("hint", "GREEDY"), ("bound", "ALL_PLACED")]
    assert {s["name"] for s in p.stages}.isdisjoint({"exact", "search"})
    assert p.status == "OPTIMAL"
    assert len(p.bindings) == 9
    assert all(lv["placed"] == lv["bound"] for lv in p.levels)
    assert all(len(nodes_of(p, f"{g}-")) == 1 for g in "abc")


def test_a_gang_best_fit_split_is_moved_whole_onto_one_node_without_a_model():
    """Best fit puts the first pod on the fullest node (room for one) and the rest on the next: the locality
    stage moves the gang onto the node that holds it whole, and needs no model to know it is at its bound."""
    nodes = [node("n0", cpu=1), node("n1", cpu=4)]
    p = run(nodes, [gang("a", 3)], time_limit=10)
    assert nodes_of(p, "a-") == {"n1"}
    assert {s["name"]: s["status"] for s in p.stages}["locality"] == "SKIPPED"


def test_a_split_gpu_gang_is_not_gathered_by_breaking_into_an_empty_gpu_node():
    """Best fit puts a gang's two 2-GPU pods on the two busy nodes with 2 GPUs free each. The empty node would
    hold both, but opening it costs the locality objective the node it saves: the gang stays where it is."""
    busy = [node(f"n{i}", gpus=4, used={"nvidia.com/gpu": 2, "pods": 2}) for i in range(2)]
    p = run([*busy, node("n2", gpus=4)], [gang("a", 2, gpus=2)], time_limit=10)
    assert nodes_of(p, "a-") == {"n0", "n1"}


def test_empty_cluster_is_an_empty_plan():
    p = run([], [])
    assert p.bindings == {}
    assert p.gangs == ()
    assert p.objective == 0


def test_deterministic_for_a_given_input():
    # Every level reaches its bound, so the search ends by itself, not on the clock; the locality stage stops
    # on deterministic time. A roomy time limit keeps the clock from cutting in on a loaded CI machine.
    nodes = [node(f"n{i}", gpus=(4, 8)[i % 2]) for i in range(12)]
    gangs = [gang(f"g{i}", 1 + i % 5, gpus=1 + i % 3, priority=i % 2) for i in range(20)]
    first = run(nodes, gangs, time_limit=10)
    second = run(nodes, gangs, time_limit=10)
    stages = {s["name"]: s["status"] for s in first.stages}
    assert stages["search"] == "AT_BOUND"
    assert stages["locality"] == "FEASIBLE"  # stopped on its budget, not proven
    assert first.bindings == second.bindings
    assert [g.reason for g in first.gangs] == [g.reason for g in second.gangs]


def test_greedy_only_mode_reports_greedy():
    p = run([node("n", gpus=4)], [gang("g", 2, gpus=1)], use_cpsat=False)
    assert p.status == "GREEDY"
    assert placed(p) == {"g"}


def test_a_starving_gang_outranks_more_gangs_of_its_priority():
    # Two small gangs or the one big gang fit; the count alone prefers the two, unless the big one starves.
    nodes = [node("n0", gpus=4), node("n1", gpus=4)]
    small = [gang("s1", 1, gpus=4), gang("s2", 1, gpus=4)]
    assert placed(run(nodes, [*small, gang("big", 2, gpus=3)])) == {"s1", "s2"}
    starving = Gang("big", gang("big", 2, gpus=3).pods, 2, starving=True)
    p = run(nodes, [*small, starving])
    assert placed(p) == {"big"}
    assert [lv["starving"] for lv in p.levels] == [True, False]


def test_starving_never_outranks_a_higher_priority():
    nodes = [node("n0", gpus=4)]
    starving_low = Gang("old", gang("old", 1, gpus=4).pods, 1, starving=True)
    assert placed(run(nodes, [starving_low, gang("high", 1, gpus=4, priority=5)])) == {"high"}


def _raises(*args, **kwargs):
    raise RuntimeError("ortools failed")


def _infeasible(*args, **kwargs):
    return cp_model.INFEASIBLE


@pytest.mark.parametrize(
    ("where", "failure"),
    [
        ((cp_model.CpSolver, "solve"), _raises),  # an exception from the solver
        ((cp_model.CpSolver, "solve"), _infeasible),  # a status the hint rules out
        ((cp_model.CpModel, "new_bool_var"), _raises),  # an exception while building the model
    ],
)
def test_a_failing_cpsat_stage_keeps_the_placement_it_has(monkeypatch, where, failure):
    # Whatever CP-SAT stage fails, the cycle answers with the best placement it already had instead of raising.
    nodes = [node("n0", gpus=4), node("n1", gpus=4)]
    gangs = [gang("a-first", 2, gpus=3), gang("b", 1, gpus=4), gang("c", 1, gpus=4)]
    monkeypatch.setattr(*where, failure)
    p = run(nodes, gangs, time_limit=2)
    failed = [s for s in p.stages if s["status"] == "FAILED"]
    assert failed
    assert all(s.get("detail") for s in failed)
    assert p.objective >= len(greedy(Problem(Cluster(tuple(nodes), tuple(gangs)))))
    assert len(p.bindings) >= 2


def test_the_previous_plan_is_kept_where_it_still_holds():
    nodes = [node(f"n{i}", gpus=4) for i in range(4)]
    gangs = [gang("g", 4, gpus=1), gang("h", 2, gpus=2)]
    cluster = Cluster(tuple(nodes), tuple(gangs))
    previous = {**{f"g-{i}": "n2" for i in range(4)}, "h-0": "n3", "h-1": "n3"}
    p = solve(cluster, SolveConfig(time_limit=2), previous=previous)
    assert validate(cluster, p) == []
    assert dict(p.bindings) == previous


def test_a_previous_plan_that_no_longer_holds_is_dropped_whole():
    # n2 now runs other pods: the gang planned there no longer fits and is dropped whole (not kept in part);
    # the other gang's plan still holds; a pod that is gone and a node that is gone are ignored.
    busy = node("n2", gpus=4)
    busy = type(busy)(busy.name, busy.allocatable, busy.labels, used={"nvidia.com/gpu": 3, "pods": 3})
    nodes = [node("n0", gpus=4), node("n1", gpus=4), busy, node("n3", gpus=4)]
    gangs = [gang("g", 4, gpus=1), gang("h", 2, gpus=2)]
    cluster = Cluster(tuple(nodes), tuple(gangs))
    previous = {**{f"g-{i}": "n2" for i in range(4)}, "h-0": "n3", "h-1": "n3", "gone-0": "n9", "g-0-old": "n0"}
    problem = Problem(cluster)
    assert warm_start(problem, previous) == {1: {(0, problem.node_index["n3"]): 2}}
    p = solve(cluster, SolveConfig(time_limit=2), previous=previous)
    assert validate(cluster, p) == []
    assert placed(p) == {"g", "h"}


def test_the_exact_stage_fills_the_gangs_it_finds():
    # The exact stage finds both priority-10 gangs and two single pods, but its first answer gave the elastic gang
    # one 0.5-cpu pod of the three and left 0.5 cpu idle, which the search after it did not fill, so a cycle that
    # skipped the stage placed more (16 cpu against 15.5). With the gangs held, the stage now maximizes the
    # resources placed.
    def one(name, order):
        return Gang(name, (pod(f"{name}-0", order=order),), 1)

    def many(name, order, cpus, need):
        pods = tuple(pod(f"{name}-{i}", cpu=c, priority=10, order=order + i) for i, c in enumerate(cpus))
        return Gang(name, pods, need)

    singles = tuple(one(f"single-{i}", 10 * i) for i in range(4))
    elastic, whole = many("elastic", 60, [4, 0.5, 0.5], 1), many("whole", 70, [0.5, 0.5, 4, 4, 4], 5)
    cluster = Cluster((node("n0", cpu=16, pods=16),), (*singles, elastic, whole))
    p = solve(cluster, SolveConfig(time_limit=1.0, steps=100))
    assert [s["name"] for s in p.stages].count("exact") == 1
    assert validate(cluster, p) == []
    assert {b.rsplit("-", 1)[0] for b in p.bindings} >= {"elastic", "whole"}
    assert sum(1 for b in p.bindings if b.startswith("single")) == 2
    assert sum(pod.requests["cpu"] for g in cluster.gangs for pod in g.pods if pod.name in p.bindings) == 16000


def test_a_small_problem_is_solved_exactly_when_the_bound_leaves_a_level_open():
    # From greedy's queue-order placement (the big gang on both nodes), CP-SAT on the whole model finds the two
    # small gangs and proves no placement does better.
    nodes = [node("n0", gpus=4), node("n1", gpus=4)]
    problem = Problem(Cluster(tuple(nodes), (gang("a-first", 2, gpus=3), gang("b", 1, gpus=4), gang("c", 1, gpus=4))))
    levels = problem.gang_priority_levels()
    counts, proven, stage = _exact(problem, greedy(problem), levels, time.perf_counter() + 10, 1)
    assert proven
    assert stage.status == "OPTIMAL"
    assert set(counts) == {1, 2}


def test_by_expansion_factor_a_short_job_that_waited_its_length_goes_before_a_long_one_that_waited_longer():
    # One node, two gangs that each need all of it. First come first served starts the long job that arrived
    # first; by expansion factor, (wait + runtime) / runtime, the short job has waited twice its length
    # (factor 2) and the long one half of the hour its runtime counts as (1.5), so the short one starts.
    nodes = [node("n0", gpus=4)]
    long = replace(gang("a-long", 1, gpus=4), runtime=4 * 3600.0, waited=1800.0)
    short = replace(gang("b-short", 1, gpus=4), runtime=600.0, waited=600.0)
    for use_cpsat in (False, True):
        assert placed(run(nodes, [long, short], use_cpsat=use_cpsat, order="arrival")) == {"a-long"}
        assert placed(run(nodes, [long, short], use_cpsat=use_cpsat, order="expansion")) == {"b-short"}
    # Waiting on, the long job's factor passes the short one's: 2.5 after 90 minutes against 2.
    assert placed(run(nodes, [replace(long, waited=5400.0), short])) == {"a-long"}


def test_the_expansion_factor_counts_a_runtime_between_a_minute_and_an_hour():
    g = gang("g", 1, gpus=1)
    assert replace(g, runtime=7 * 24 * 3600.0, waited=3600.0).expansion == 2.0  # a week's job ages as an hour's
    assert replace(g, runtime=None, waited=3600.0).expansion == 2.0  # so does one of unknown length
    assert replace(g, runtime=5.0, waited=60.0).expansion == 2.0  # and a few seconds' as a minute's
    assert replace(g, runtime=600.0, waited=0.0).expansion == 1.0


def test_a_starving_gang_outranks_one_with_a_larger_expansion_factor():
    # The order by expansion factor is within a level: starving (past the starvation age) still goes first.
    nodes = [node("n0", gpus=4)]
    starving = replace(gang("old", 1, gpus=4), runtime=3600.0, waited=7300.0, starving=True)
    eager = replace(gang("new", 1, gpus=4), runtime=60.0, waited=600.0)  # factor 11 against 3
    assert placed(run(nodes, [starving, eager])) == {"old"}
