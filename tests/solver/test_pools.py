"""Node pools solved apart (solver/pools.py): which gangs and nodes make a pool, when a cycle does not split,
and that a split cycle answers as the whole one would wherever the answer does not depend on the search:
the greedy allocator's bindings and every gang's reason, on random clusters of pools, in forked processes."""

import multiprocessing
import os
import time
from dataclasses import replace
from unittest.mock import patch

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsolve.solver import Cluster, Gang, Queue, Running, SolveConfig, Taint, Toleration, pools, solve, validate
from tests.builders import gang, node, pod
from tests.solver.test_properties import gangs_placed_per_level

POOL = "pool"
DEDICATED = Taint("dedicated", "team", "NoSchedule")


def _two_pools(**gang_kw) -> Cluster:
    nodes = [node(f"a{i}", gpus=8, labels={POOL: "a"}) for i in range(3)]
    nodes += [node(f"b{i}", gpus=8, labels={POOL: "b"}) for i in range(2)]
    nodes.append(node("tainted", gpus=8, labels={POOL: "a"}, taints=(DEDICATED,)))  # no pending pod tolerates it
    gangs = [
        gang("ga", 2, gpus=8, node_selector={POOL: "a"}, **gang_kw),
        gang("ga2", 3, gpus=8, node_selector={POOL: "a"}, **gang_kw),
        gang("gb", 2, gpus=8, node_selector={POOL: "b"}, **gang_kw),
        gang("gb2", 3, gpus=8, node_selector={POOL: "b"}, **gang_kw),
    ]
    return Cluster(tuple(nodes), tuple(gangs))


def _shape(groups):
    return [
        (sorted(g.name for g in group.cluster.gangs), sorted(n.name for n in group.cluster.nodes)) for group in groups
    ]


def test_gangs_that_share_no_node_are_pools_and_nodes_no_pending_pod_may_use_are_in_none():
    groups = pools.groups(_two_pools(), 2)
    assert _shape(groups) == [(["ga", "ga2"], ["a0", "a1", "a2"]), (["gb", "gb2"], ["b0", "b1"])]
    assert pools.groups(_two_pools(), 1) is None  # one process: the cycle is solved whole


def test_a_gang_that_may_use_both_pools_joins_them():
    cluster = _two_pools()
    anywhere = gang("any", 1, gpus=1)
    assert pools.groups(Cluster(cluster.nodes, (*cluster.gangs, anywhere)), 2) is None


def test_a_pool_with_most_of_the_work_is_solved_whole():
    """Solving the small pools beside the largest saves at most their share: under a quarter, not worth it."""
    cluster = _two_pools()
    big = [gang(f"more{i}", 2, gpus=8, node_selector={POOL: "a"}) for i in range(4)]
    assert pools.groups(Cluster(cluster.nodes, (*cluster.gangs, *big)), 2) is None


def test_more_pools_than_processes_are_joined_evenly():
    nodes = [node(f"{p}{i}", gpus=8, labels={POOL: p}) for p in "abcd" for i in range(2)]
    gangs = [gang(f"g{p}", 2, gpus=8, node_selector={POOL: p}) for p in "abcd"]
    groups = pools.groups(Cluster(tuple(nodes), tuple(gangs)), 2)
    assert [len(group.cluster.gangs) for group in groups] == [2, 2]
    assert sorted(n.name for group in groups for n in group.cluster.nodes) == sorted(n.name for n in nodes)


def test_gangs_no_node_may_take_join_a_group_and_make_none():
    cluster = _two_pools()
    nowhere = gang("nowhere", 2, gpus=8, node_selector={POOL: "c"})  # no node is in pool c
    groups = pools.groups(Cluster(cluster.nodes, (*cluster.gangs, nowhere)), 3)
    assert len(groups) == 2
    assert "nowhere" in {g.name for group in groups for g in group.cluster.gangs}


def test_queues_tie_pools_together():
    cluster = _two_pools()
    two_queues = (replace(cluster.gangs[0], queue="team-x"), *cluster.gangs[1:])
    assert pools.groups(Cluster(cluster.nodes, two_queues), 2) is None  # fair shares are of the whole cluster
    capped = Cluster(cluster.nodes, cluster.gangs, queues=(Queue("default", capability={"nvidia.com/gpu": 16}),))
    assert pools.groups(capped, 2) is None  # a cap counts what every pool places
    uncapped = Cluster(cluster.nodes, cluster.gangs, queues=(Queue("default", weight=3),))
    assert pools.groups(uncapped, 2) is not None


def test_a_bound_members_node_goes_with_its_gang_and_running_pods_with_their_nodes():
    cluster = _two_pools()
    cordoned = node("old", gpus=8, labels={POOL: "b", "rack": "r1"}, unschedulable=True)
    elastic = Gang(
        "elastic", tuple(pod(f"e{i}", gpus=8, node_selector={POOL: "b"}) for i in range(2)), 1, ("old",), "rack"
    )
    gpus = {"nvidia.com/gpu": 8}
    running = (Running("old", gpus, name="ns/r"), Running("a0", gpus, name="ns/s"))
    split = pools.groups(Cluster((*cluster.nodes, cordoned), (*cluster.gangs, elastic), running), 2)
    by_gang = {g.name: group.cluster for group in split for g in group.cluster.gangs}
    assert "old" in {n.name for n in by_gang["elastic"].nodes}
    assert [r.name for r in by_gang["elastic"].running] == ["ns/r"]
    assert [r.name for r in by_gang["ga"].running] == ["ns/s"]


def test_a_split_cycle_is_solved_in_other_processes_and_merged():
    cluster = _two_pools()
    placement = solve(cluster, SolveConfig(time_limit=2, parallel=2, steps=50))
    whole = solve(cluster, SolveConfig(time_limit=2, steps=50))
    assert validate(cluster, placement) == []
    stages = [s for s in placement.stages if s["name"] == "pool"]
    assert [s["detail"] for s in stages] == [
        "pool 1 of 2: 2 gangs on 3 of 6 nodes",
        "pool 2 of 2: 2 gangs on 2 of 6 nodes",
    ]
    # One gang of each pool fits (24 and 16 GPUs free; of pool a's, the one placing more GPUs), as whole.
    assert sorted(placement.bindings) == sorted(whole.bindings) == ["ga2-0", "ga2-1", "ga2-2", "gb-0", "gb-1"]
    assert placement.objective == whole.objective == 2
    assert [(g.name, g.placed) for g in placement.gangs] == [("ga", False), ("ga2", True), ("gb", True), ("gb2", False)]
    # The reasons count the nodes outside each gang's pool too, as the whole cycle's do (the tainted node's first
    # exclusion is its taint; it is in no pool).
    assert placement.gangs[3].reason == (
        "needs 24 nvidia.com/gpu, 16 free on nodes matching nodeSelector pool=b; "
        "tainted excluded by taint dedicated=team:NoSchedule"
    )
    assert [g.reason for g in placement.gangs] == [g.reason for g in whole.gangs]


def test_a_group_whose_process_fails_is_solved_in_this_one(monkeypatch):
    """A child that dies gives no answer: the parent solves that group itself (and raises what it raises)."""
    parent = os.getpid()

    def dying(group):
        if os.getpid() != parent:
            os._exit(1)
        return solve(group.cluster, SolveConfig(use_cpsat=False))

    split = pools.groups(_two_pools(), 2)
    answers = pools.solve_apart(split, dying, wait=60)
    assert [sorted(a.bindings) for a in answers] == [["ga-0", "ga-1"], ["gb-0", "gb-1"]]
    assert os.getpid() == parent


def test_a_group_whose_process_does_not_answer_in_time_is_solved_in_this_one():
    """A forked child can hang (a lock another thread of the parent held at the fork): it is killed once the
    wait is over, and the parent solves its group."""
    parent = os.getpid()

    def hanging(group):
        if os.getpid() != parent:
            time.sleep(600)
        return solve(group.cluster, SolveConfig(use_cpsat=False))

    started = time.monotonic()
    answers = pools.solve_apart(pools.groups(_two_pools(), 2), hanging, wait=1)
    assert time.monotonic() - started < 30
    assert [sorted(a.bindings) for a in answers] == [["ga-0", "ga-1"], ["gb-0", "gb-1"]]
    assert multiprocessing.active_children() == []


# --- random clusters of pools -----------------------------------------------------------------------------------


@st.composite
def pooled_clusters(draw):
    """Nodes in 1-4 pools (by label), some tainted, cordoned or without GPUs; gangs selecting one pool, any
    untainted node, or tolerating the taint; some co-located by rack; some elastic with a member bound."""
    count = draw(st.integers(1, 4))
    nodes = []
    for i in range(draw(st.integers(2, 14))):
        p = draw(st.integers(0, count - 1))
        gpus = draw(st.sampled_from((0, 4, 8)))
        taints = (DEDICATED,) if draw(st.integers(0, 4)) == 0 else ()
        labels = {POOL: f"p{p}", "rack": f"r{p}-{draw(st.integers(0, 1))}"}
        nodes.append(
            node(f"n{i}", cpu=32, gpus=gpus, labels=labels, taints=taints, unschedulable=draw(st.integers(0, 9)) == 0)
        )
    gangs = []
    for g in range(draw(st.integers(1, 10))):
        size = draw(st.integers(1, 6))
        where = draw(st.sampled_from(("pool", "pool", "pool", "anywhere", "tolerates")))
        kw = {}
        if where == "pool":
            kw["node_selector"] = {POOL: f"p{draw(st.integers(0, count))}"}  # p{count}: a pool with no node
        elif where == "tolerates":
            kw["tolerations"] = (Toleration("dedicated", "Equal", "team"),)
            kw["node_selector"] = {POOL: f"p{draw(st.integers(0, count - 1))}"}
        gpus = draw(st.sampled_from((0, 1, 4, 8)))
        pods = tuple(
            pod(
                f"g{g}-{i}",
                cpu=draw(st.sampled_from((1, 4))),
                gpus=gpus,
                order=g * 10 + i,
                priority=draw(st.sampled_from((0, 10))),
                **kw,
            )
            for i in range(size)
        )
        bound = (draw(st.sampled_from([n.name for n in nodes])),) if draw(st.integers(0, 5)) == 0 else ()
        colocate = draw(st.sampled_from((None, None, "rack")))
        gangs.append(Gang(f"g{g}", pods, draw(st.integers(1, size + len(bound))), bound, colocate))
    return Cluster(tuple(nodes), tuple(gangs))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pooled_clusters())
def test_the_greedy_allocator_places_and_explains_alike_split_or_whole(cluster):
    """Greedy's answer is decided gang by gang on the gang's own nodes, so splitting must not change it: the
    same bindings and the same reason for every gang left pending (exclusions counted over every node)."""
    whole = solve(cluster, SolveConfig(use_cpsat=False, reservations=0, forecasts=0))
    with patch.object(pools, "_WORTH", 1.0):  # split wherever pools are, however uneven
        split = solve(cluster, SolveConfig(use_cpsat=False, reservations=0, forecasts=0, parallel=3))
    assert dict(split.bindings) == dict(whole.bindings)
    assert split.gangs == whole.gangs


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pooled_clusters())
def test_a_split_cycle_is_sound_and_never_worse_than_greedy(cluster):
    with patch.object(pools, "_WORTH", 1.0):
        placement = solve(cluster, SolveConfig(time_limit=1, steps=30, parallel=2))
    assert validate(cluster, placement) == []
    greedy = solve(cluster, SolveConfig(use_cpsat=False))
    assert gangs_placed_per_level(cluster, placement.bindings) >= gangs_placed_per_level(cluster, greedy.bindings)
    assert placement.objective <= placement.best_bound
    for result, g in zip(placement.gangs, cluster.gangs, strict=True):
        assert result.name == g.name
        if result.placed_pods < len(g.pods):
            assert result.reason
