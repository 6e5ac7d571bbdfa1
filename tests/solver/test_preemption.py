"""Preemption: the victims chosen are the lexicographic optimum, as an exhaustive search over every set of
victims and every placement of the preemptor finds it on small clusters; and on random clusters (hypothesis)
no eviction is futile, of equal or higher priority, of a protected or leaving pod, or leaves a running gang
broken. The oracles here share no code with solver/preemption.py: the search enumerates the definition, and
whether a preemptor fits is the independent validator's answer on the cluster without its victims."""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsolve.solver import GPU, Cluster, Gang, Node, Placement, SolveConfig, solve, validate
from gangsolve.solver.model import Running
from tests.builders import node, pod

GI = 2**30


def running(name, node_name, gpus=1, cpu=1, priority=0, gang="", min_member=1, started=0.0, **kw) -> Running:
    requests = {"cpu": cpu * 1000, "memory": GI, "pods": 1}
    if gpus:
        requests[GPU] = gpus
    return Running(
        node_name, requests, name=name, priority=priority, gang=gang, min_member=min_member, started=started, **kw
    )


def with_running(nodes: list[Node], pods: list[Running]) -> tuple[Node, ...]:
    """The nodes with the running pods' requests as used, as the edge builds them."""
    used: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in pods:
        for k, q in r.requests.items():
            used[r.node][k] += q
    return tuple(replace(n, used=dict(used[n.name])) for n in nodes)


def preemptor(name="team/p", size=2, gpus=2, priority=100, **kw) -> Gang:
    return Gang(name, tuple(pod(f"{name}-{i}", gpus=gpus, priority=priority, order=i, **kw) for i in range(size)), size)


# --- the oracle -----------------------------------------------------------------------------------------------


def victim_key(cluster: Cluster, victims: set[str]) -> tuple[int, ...]:
    """The objective of a set of victims, from the definition: highest priority, gangs touched, pods beyond
    their PDB's allowance, GPUs, pods, and the recency rank (0 for the most recently started running pod)."""
    pods = {r.name: r for r in cluster.running}
    chosen = [pods[v] for v in victims]
    order = sorted((r for r in cluster.running if not r.leaving), key=lambda r: (-r.started, r.name))
    rank = {r.name: i for i, r in enumerate(order)}
    per_pdb: dict[str, int] = defaultdict(int)
    for r in chosen:
        for b in r.pdbs:
            per_pdb[b] += 1
    return (
        max((r.priority for r in chosen), default=-(10**9)),
        len({r.gang or "pod " + r.name for r in chosen}),
        sum(max(0, k - cluster.budgets.get(b, 0)) for b, k in per_pdb.items()),
        sum(r.requests.get(GPU, 0) for r in chosen),
        len(chosen),
        sum(rank[r.name] for r in chosen),
    )


def breaks_a_gang(cluster: Cluster, victims: set[str]) -> bool:
    """Some running gang loses members but not all, and falls below its minimum."""
    members: dict[str, list[Running]] = defaultdict(list)
    for r in cluster.running:
        if not r.leaving:
            members[r.gang or "pod " + r.name].append(r)
    for pods in members.values():
        gone = sum(1 for r in pods if r.name in victims)
        if 0 < gone < len(pods) and len(pods) - gone < pods[0].min_member:
            return True
    return False


def without(cluster: Cluster, victims: set[str]) -> tuple[Node, ...]:
    """The cluster's nodes once `victims` are gone."""
    freed: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in cluster.running:
        if r.name in victims:
            for k, q in r.requests.items():
                freed[r.node][k] += q
    return tuple(replace(n, used={k: q - freed[n.name][k] for k, q in n.used.items()}) for n in cluster.nodes)


def exhaustive(cluster: Cluster, gang: Gang) -> tuple[int, ...] | None:
    """The least victim key over every allowed set of victims under which some placement of the gang's pods
    passes the validator; None when no set of victims makes it fit."""
    allowed = [r.name for r in cluster.running if r.priority < gang.priority and not r.protected and not r.leaving]
    names = [n.name for n in cluster.nodes]
    best = None
    for size in range(len(allowed) + 1):
        for victims in map(set, itertools.combinations(allowed, size)):
            if breaks_a_gang(cluster, victims):
                continue
            key = victim_key(cluster, victims)
            if best is not None and key >= best:
                continue
            trial = Cluster(without(cluster, victims), (gang,))
            for where in itertools.product(names, repeat=len(gang.pods)):
                if not validate(trial, {p.name: n for p, n in zip(gang.pods, where, strict=True)}):
                    best = key
                    break
    return best


def chosen_key(cluster: Cluster, placement: Placement) -> tuple[int, ...] | None:
    if not placement.evictions and not placement.nominations:
        return None
    return victim_key(cluster, {e.pod for e in placement.evictions})


# --- hand-made cases ------------------------------------------------------------------------------------------


def three_nodes(pods: list[Running], gang: Gang, **cluster_kw) -> Cluster:
    nodes = [node(f"n{i}", cpu=8, gpus=4) for i in range(3)]
    return Cluster(with_running(nodes, pods), (gang,), tuple(pods), **cluster_kw)


def test_a_gang_is_evicted_whole_or_kept_at_its_minimum():
    # Every GPU is taken, each node by two pods of gang a (min 6 of 6 running) and two of gang b (min 1).
    pods = [running(f"t/a-{i}", f"n{i % 3}", gang="t/a", min_member=6) for i in range(6)]
    pods += [running(f"t/b-{i}", f"n{i % 3}", gang="t/b", min_member=1) for i in range(6)]
    cluster = three_nodes(pods, preemptor(size=2, gpus=2))
    placement = solve(cluster, SolveConfig(time_limit=5))
    victims = {e.pod for e in placement.evictions}
    assert len(victims) == 4
    assert all(v.startswith("t/b-") for v in victims)
    assert not breaks_a_gang(cluster, victims)
    assert chosen_key(cluster, placement) == exhaustive(cluster, preemptor(size=2, gpus=2))


def test_fewest_victim_gangs_before_fewest_gpus():
    # n0: one 4-GPU pod alone; n1: four 1-GPU pods alone. The preemptor needs 4 GPUs on one node.
    pods = [running("t/big", "n0", gpus=4), *[running(f"t/small-{i}", "n1") for i in range(4)]]
    pods += [running(f"t/high-{i}", "n2", priority=100) for i in range(4)]
    cluster = three_nodes(pods, preemptor(size=1, gpus=4))
    placement = solve(cluster, SolveConfig(time_limit=5))
    assert {e.pod for e in placement.evictions} == {"t/big"}
    assert placement.nominations == {"team/p-0": "n0"}


def test_the_lowest_priority_first_even_at_more_gpus():
    pods = [running(f"t/mid-{i}", "n0", priority=50) for i in range(4)]
    pods += [running(f"t/low-{i}", "n1", gpus=2, priority=0, gang="t/low", min_member=2) for i in range(2)]
    pods += [running(f"t/low2-{i}", "n2", gpus=2, priority=0, gang="t/low2", min_member=2) for i in range(2)]
    gang = preemptor(size=2, gpus=1)
    cluster = three_nodes(pods, gang)
    placement = solve(cluster, SolveConfig(time_limit=5))
    victims = {e.pod for e in placement.evictions}
    assert victims in ({"t/low-0", "t/low-1"}, {"t/low2-0", "t/low2-1"})  # priority 0, one gang of 4 GPUs
    assert chosen_key(cluster, placement) == exhaustive(cluster, gang)


def test_pdb_violations_before_gpus():
    # Both nodes' pods are alone; those on n0 are guarded by a PDB that allows no disruption.
    pods = [running(f"t/guarded-{i}", "n0", gpus=2, pdbs=("t/web",)) for i in range(2)]
    pods += [running(f"t/free-{i}", "n1", gpus=4) for i in range(1)]
    pods += [running(f"t/high-{i}", "n2", gpus=4, priority=100) for i in range(1)]
    gang = preemptor(size=1, gpus=4)
    cluster = three_nodes(pods, gang, budgets={"t/web": 0})
    placement = solve(cluster, SolveConfig(time_limit=5))
    assert {e.pod for e in placement.evictions} == {"t/free-0"}
    assert chosen_key(cluster, placement) == exhaustive(cluster, gang)


def test_the_most_recently_started_go_first():
    pods = [running(f"t/old-{i}", "n0", started=100.0 + i) for i in range(4)]
    pods += [running(f"t/new-{i}", "n1", started=900.0 + i) for i in range(4)]
    pods += [running(f"t/high-{i}", "n2", priority=100) for i in range(4)]
    cluster = three_nodes(pods, preemptor(size=1, gpus=1))
    placement = solve(cluster, SolveConfig(time_limit=5))
    assert {e.pod for e in placement.evictions} == {"t/new-3"}


def test_never_equal_or_higher_priority_protected_or_leaving_victims_and_no_futile_preemption():
    pods = [running(f"t/same-{i}", "n0", priority=100) for i in range(4)]
    pods += [running(f"t/critical-{i}", "n1", protected=True) for i in range(4)]
    pods += [running(f"t/leaving-{i}", "n2", leaving=True) for i in range(4)]
    cluster = three_nodes(pods, preemptor(size=1, gpus=1))
    placement = solve(cluster, SolveConfig(time_limit=5))
    assert not placement.evictions
    assert not placement.nominations
    assert not placement.bindings


def test_a_gang_that_cannot_fit_even_with_every_victim_gone_evicts_nothing():
    pods = [running(f"t/low-{i}", f"n{i % 3}") for i in range(12)]
    cluster = three_nodes(pods, preemptor(size=4, gpus=4))  # 16 GPUs asked, 12 there
    placement = solve(cluster, SolveConfig(time_limit=5))
    assert not placement.evictions
    assert not placement.nominations
    assert exhaustive(cluster, preemptor(size=4, gpus=4)) is None


def test_preemption_policy_never_and_the_switch():
    pods = [running(f"t/low-{i}", f"n{i % 3}") for i in range(12)]
    never = Gang("team/p", tuple(pod(f"team/p-{i}", gpus=1, priority=100, preempts=False) for i in range(2)), 2)
    assert not solve(three_nodes(pods, never), SolveConfig(time_limit=2)).evictions
    allowed = three_nodes(pods, preemptor(size=2, gpus=1))
    assert solve(allowed, SolveConfig(time_limit=2)).evictions
    assert not solve(allowed, SolveConfig(time_limit=2, preemption=False)).evictions


def test_gangs_placed_this_cycle_are_never_victims():
    # A pending low-priority member of gang t/low is placed this cycle (n2 has room for it), so the running
    # members of t/low are off limits even though the preemptor could use them.
    pods = [running(f"t/low-{i}", "n0", gang="t/low", min_member=1) for i in range(4)]
    pods += [running(f"t/high-{i}", "n1", priority=100) for i in range(4)]
    pods += [running(f"t/other-{i}", "n2", gang="t/other", min_member=1) for i in range(3)]
    low = Gang("t/low", (pod("t/low-new", gpus=1),), 1, bound_nodes=("n0",) * 4)
    cluster = three_nodes(pods, preemptor(size=1, gpus=2))
    cluster = replace(cluster, gangs=(cluster.gangs[0], low))
    placement = solve(cluster, SolveConfig(time_limit=5))
    assert placement.bindings == {"t/low-new": "n2"}
    assert placement.evictions
    assert all(e.pod.startswith("t/other-") for e in placement.evictions)


# --- nominations ----------------------------------------------------------------------------------------------


def test_a_nominated_gang_binds_on_its_nodes_once_the_victims_are_gone():
    gang = preemptor(size=2, gpus=2)
    nodes = [node(f"n{i}", cpu=8, gpus=4) for i in range(3)]
    others = [running(f"t/x-{i}", f"n{i}", gpus=4) for i in (1, 2)]
    nominated = {"team/p-0": "n0", "team/p-1": "n0"}
    cluster = Cluster(with_running(nodes, others), (gang,), tuple(others), nominated=nominated)
    placement = solve(cluster, SolveConfig(time_limit=2))
    assert placement.bindings == nominated
    assert not placement.nominations
    assert not placement.evictions
    assert placement.gangs[0].placed
    assert placement.objective == 1
    assert not validate(cluster, placement)


def test_held_capacity_is_taken_by_no_other_gang_while_the_victims_leave():
    gang = preemptor(size=1, gpus=4)
    small = Gang("t/small", (pod("t/small-0", gpus=2, priority=500),), 1)  # higher priority, would fit on n0 later
    nodes = [node("n0", cpu=8, gpus=4)]
    victims = [running(f"t/v-{i}", "n0", gpus=2, leaving=True) for i in range(2)]
    cluster = Cluster(with_running(nodes, victims), (gang, small), tuple(victims), nominated={"team/p-0": "n0"})
    placement = solve(cluster, SolveConfig(time_limit=2))
    assert placement.nominations == {"team/p-0": "n0"}
    assert not placement.bindings
    assert not placement.evictions
    # The victims are gone: the preemptor binds there, the other gang still waits.
    gone = Cluster(tuple(nodes), (gang, small), (), nominated={"team/p-0": "n0"})
    placement = solve(gone, SolveConfig(time_limit=2))
    assert placement.bindings == {"team/p-0": "n0"}


def test_a_nominated_gang_that_fits_elsewhere_first_goes_there_and_its_nomination_ends():
    gang = preemptor(size=1, gpus=4)
    nodes = [node("n0", cpu=8, gpus=4), node("n1", cpu=8, gpus=4)]
    victims = [running(f"t/v-{i}", "n0", gpus=2, leaving=True) for i in range(2)]
    cluster = Cluster(with_running(nodes, victims), (gang,), tuple(victims), nominated={"team/p-0": "n0"})
    placement = solve(cluster, SolveConfig(time_limit=2))
    assert placement.bindings == {"team/p-0": "n1"}
    assert not placement.nominations


def test_a_stale_nomination_is_dropped_and_the_gang_preempts_again():
    # Its nominated node is full of pods that are not leaving (another scheduler took it): the nomination can
    # never bind, so the gang chooses victims anew, here on n1.
    gang = preemptor(size=1, gpus=4)
    nodes = [node("n0", cpu=8, gpus=4), node("n1", cpu=8, gpus=4)]
    pods = [running("t/taken", "n0", gpus=4, priority=1000), running("t/low", "n1", gpus=4)]
    cluster = Cluster(with_running(nodes, pods), (gang,), tuple(pods), nominated={"team/p-0": "n0"})
    placement = solve(cluster, SolveConfig(time_limit=2))
    assert placement.nominations == {"team/p-0": "n1"}
    assert [e.pod for e in placement.evictions] == ["t/low"]


# --- the exhaustive proof on random small clusters ------------------------------------------------------------


@st.composite
def small_clusters(draw):
    """2-3 nodes of 2-4 GPUs filled by running pods of priorities 0/5/10 (some in gangs, some protected, some
    leaving, some under a PDB), and a preemptor of priority 10 with 1-3 pods."""
    nodes, pods = [], []
    for i in range(draw(st.integers(2, 3))):
        gpus = draw(st.sampled_from((2, 4)))
        nodes.append(node(f"n{i}", cpu=16, gpus=gpus))
        left = gpus
        while left > 0 and len(pods) < 9:
            g = draw(st.integers(1, left))
            left -= g
            pods.append(
                running(
                    f"t/r{len(pods)}",
                    f"n{i}",
                    gpus=g,
                    priority=draw(st.sampled_from((0, 0, 5, 10))),
                    gang=draw(st.sampled_from(("", "t/a", "t/b"))),
                    started=float(draw(st.integers(0, 5))),
                    protected=draw(st.integers(0, 9)) == 0,
                    leaving=draw(st.integers(0, 9)) == 0,
                    pdbs=("t/pdb",) if draw(st.booleans()) else (),
                )
            )
    mins = {"t/a": draw(st.integers(1, 4)), "t/b": draw(st.integers(1, 4))}
    pods = [replace(r, min_member=mins.get(r.gang, 1)) for r in pods]
    size = draw(st.integers(1, 3))
    gang = preemptor(size=size, gpus=draw(st.integers(1, 2)), priority=10)
    return Cluster(with_running(nodes, pods), (gang,), tuple(pods), budgets={"t/pdb": draw(st.integers(0, 2))})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_clusters())
def test_the_victims_chosen_are_the_exhaustive_searchs_optimum(cluster):
    placement = solve(cluster, SolveConfig(time_limit=10))
    best = exhaustive(cluster, cluster.gangs[0])
    if best is None:
        assert not placement.evictions
        assert not placement.nominations
        assert not placement.bindings
        return
    if best[4] == 0:  # fits with no victim: placed now
        assert len(placement.bindings) == len(cluster.gangs[0].pods)
        assert not placement.evictions
        return
    assert chosen_key(cluster, placement) == best
    stage = next(s for s in placement.stages if s["name"] == "preemption")
    assert stage["status"] == "OPTIMAL"


# --- invariants on random clusters ----------------------------------------------------------------------------


@st.composite
def clusters(draw):
    """Up to 6 nodes with running pods of three priorities, several pending gangs (some may not preempt)."""
    nodes, pods = [], []
    for i in range(draw(st.integers(1, 6))):
        gpus = draw(st.sampled_from((0, 4, 8)))
        nodes.append(node(f"n{i}", cpu=16, gpus=gpus, labels={"zone": f"z{i % 2}"}))
        left = gpus
        for _ in range(draw(st.integers(0, 6))):
            g = min(left, draw(st.sampled_from((0, 1, 2, 4))))
            left -= g
            pods.append(
                running(
                    f"t/r{len(pods)}",
                    f"n{i}",
                    gpus=g,
                    cpu=draw(st.sampled_from((1, 2))),
                    priority=draw(st.sampled_from((0, 10, 20))),
                    gang=draw(st.sampled_from(("", "t/a", "t/b", "t/c"))),
                    min_member=draw(st.integers(1, 4)),
                    started=float(draw(st.integers(0, 100))),
                    protected=draw(st.integers(0, 9)) == 0,
                    leaving=draw(st.integers(0, 9)) == 0,
                    pdbs=("t/pdb",) if draw(st.booleans()) else (),
                )
            )
    mins: dict[str, int] = {}
    pods = [replace(r, min_member=mins.setdefault(r.gang, r.min_member)) for r in pods]
    gangs = []
    for g in range(draw(st.integers(1, 4))):
        size = draw(st.integers(1, 4))
        priority = draw(st.sampled_from((10, 20, 30)))
        preempts = draw(st.integers(0, 4)) > 0
        colocate = "zone" if draw(st.integers(0, 3)) == 0 else None
        members = tuple(
            pod(f"p{g}/m{i}", gpus=draw(st.sampled_from((0, 1, 2, 4))), priority=priority, preempts=preempts)
            for i in range(size)
        )
        gangs.append(Gang(f"p{g}/gang", members, draw(st.integers(1, size)), colocate=colocate))
    return Cluster(with_running(nodes, pods), tuple(gangs), tuple(pods), budgets={"t/pdb": draw(st.integers(0, 2))})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_no_futile_broken_or_forbidden_eviction(cluster):
    placement = solve(cluster, SolveConfig(time_limit=3))
    pods = {r.name: r for r in cluster.running}
    gangs = {g.name: g for g in cluster.gangs}
    victims = {e.pod for e in placement.evictions}
    assert len(victims) == len(placement.evictions)
    for e in placement.evictions:
        victim, gang = pods[e.pod], gangs[e.preemptor]
        assert victim.priority < gang.priority
        assert gang.preempts
        assert not victim.protected
        assert not victim.leaving
        assert victim.node == e.node
    assert not breaks_a_gang(cluster, victims)
    assert not validate(cluster, placement.bindings)  # what binds now needs no victim
    assert not set(placement.bindings) & set(placement.nominations)
    # No futile preemption: with the victims gone and this cycle's bindings in place, every nominated gang's
    # pods fit where they are nominated, together.
    nominated = [g for g in cluster.gangs if any(p.name in placement.nominations for p in g.pods)]
    after = Cluster(without(cluster, victims), tuple(cluster.gangs))
    bound = Cluster(_with_bound(after, placement.bindings), tuple(nominated))
    assert not validate(bound, placement.nominations)
    for g in nominated:
        assert sum(1 for p in g.pods if p.name in placement.nominations) >= g.need


def _with_bound(cluster: Cluster, bindings: dict[str, str]) -> tuple[Node, ...]:
    pods = {p.name: p for g in cluster.gangs for p in g.pods}
    added: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for name, where in bindings.items():
        for k, q in {**pods[name].requests, "pods": 1}.items():
            added[where][k] += q
    return tuple(
        replace(n, used={k: n.used.get(k, 0) + added[n.name].get(k, 0) for k in {*n.used, *added[n.name]}})
        for n in cluster.nodes
    )


@pytest.mark.parametrize("size", [1, 3])
def test_a_preemptor_that_fits_without_victims_is_placed_not_preempting(size):
    nodes = [node("n0", cpu=16, gpus=8)]
    pods = [running("t/low", "n0", gpus=2)]
    cluster = Cluster(with_running(nodes, pods), (preemptor(size=size, gpus=2),), tuple(pods))
    placement = solve(cluster, SolveConfig(time_limit=2))
    assert len(placement.bindings) == size
    assert not placement.evictions
