"""Queues on random clusters (hypothesis): no queue ever holds more than its capability (the validator, written
separately, says so); the solver is never worse than the greedy allocator under the same caps; and weighted fair
shares, computed here from their definition, are honoured: each queue gets its fair share (down to a whole
gang) before any queue borrows, and capacity nobody is owed is still used."""

from collections import defaultdict
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsolve.solver import GPU, Cluster, Gang, Queue, SolveConfig, solve, validate
from gangsolve.solver.node_table import schedulable
from gangsolve.solver.queues import deserved, rank
from tests.builders import node, pod
from tests.solver.test_planning import busy, cluster_with
from tests.solver.test_properties import gangs, nodes

QUEUES = ("a", "b", "c")


@st.composite
def queues(draw):
    out = []
    for name in QUEUES:
        capability = {}
        if draw(st.booleans()):
            capability[GPU] = draw(st.integers(0, 24))
        if draw(st.integers(0, 3)) == 0:
            capability["cpu"] = draw(st.integers(0, 16)) * 1000
        out.append(Queue(name, weight=draw(st.integers(1, 4)), capability=capability))
    return out


def with_queues(gang_list, draw):
    return [
        Gang(g.name, g.pods, g.min_member, g.bound_nodes, g.colocate, queue=draw(st.sampled_from(QUEUES)))
        for g in gang_list
    ]


def held(cluster: Cluster, bindings) -> dict[str, dict[str, int]]:
    """Per queue, what its pods placed by `bindings` request, summed here from the pods."""
    out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for g in cluster.gangs:
        for p in g.pods:
            if p.name in bindings:
                for r, q in p.requests.items():
                    out[g.queue][r] += q
    return out


def per_level(cluster: Cluster, bindings) -> tuple[int, ...]:
    """Gangs placed per level of the solver's order (priority, within fair share, starving), highest first:
    gangs deciding all-or-nothing this cycle that reached their minimum (an elastic gang whose bound members
    already reach it places extras, not a gang)."""
    ranked = rank(cluster)
    counts: dict[tuple, int] = defaultdict(int)
    for g in ranked:
        placed = sum(p.name in bindings for p in g.pods)
        counts[g.level] += int(g.need > 0 and placed >= g.need)
    return tuple(counts[level] for level in sorted(counts, reverse=True))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes(), gangs(), queues(), st.data())
def test_capability_is_never_exceeded_and_the_solver_never_loses_to_greedy(node_list, gang_list, queue_list, data):
    cluster = Cluster(tuple(node_list), tuple(with_queues(gang_list, data.draw)), queues=tuple(queue_list))
    placement = solve(cluster, SolveConfig(time_limit=0.5))
    greedy = solve(cluster, SolveConfig(use_cpsat=False))
    for result in (placement, greedy):
        assert validate(cluster, result) == []
        for queue in queue_list:
            for resource, cap in queue.capability.items():
                assert held(cluster, result.bindings)[queue.name][resource] <= cap
    assert per_level(cluster, placement.bindings) >= per_level(cluster, greedy.bindings)
    for result, gang in zip(placement.gangs, cluster.gangs, strict=True):
        assert result.placed_pods in (0, *range(gang.need, len(gang.pods) + 1))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes(), gangs(), queues(), st.data())
def test_the_validator_catches_a_queue_over_its_capability(node_list, gang_list, queue_list, data):
    """Take a sound placement, lower a queue's capability below what it was given: the validator must say so."""
    cluster = Cluster(tuple(node_list), tuple(with_queues(gang_list, data.draw)), queues=tuple(queue_list))
    bindings = solve(cluster, SolveConfig(use_cpsat=False)).bindings
    given_ = held(cluster, bindings)
    for queue in queue_list:
        for resource, amount in given_[queue.name].items():
            if amount > 0:
                lowered = Queue(queue.name, queue.weight, {**queue.capability, resource: amount - 1})
                others = tuple(q for q in queue_list if q.name != queue.name)
                violations = validate(Cluster(cluster.nodes, cluster.gangs, queues=(*others, lowered)), bindings)
                assert f"queue {queue.name}: {resource} over capability" in "\n".join(violations)


def max_min_fair(total: int, weights: dict[str, int], demands: dict[str, int]) -> dict[str, float]:
    """Weighted max-min fairness by its definition: raise every unsatisfied queue's share in proportion to its
    weight until the total is spent; a queue stops at its demand (progressive filling, event by event)."""
    fair = dict.fromkeys(weights, 0.0)
    left = float(total)
    active = {q for q in weights if demands[q] > 0}
    while active and left > 1e-9:
        step = min(left / sum(weights[q] for q in active), *((demands[q] - fair[q]) / weights[q] for q in active))
        for q in active:
            fair[q] += step * weights[q]
        left -= step * sum(weights[q] for q in active)
        active = {q for q in active if demands[q] - fair[q] > 1e-9}
    return fair


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(1, 6),
    st.dictionaries(st.sampled_from(QUEUES), st.integers(1, 4), min_size=2),
    st.lists(st.tuples(st.sampled_from(QUEUES), st.integers(1, 6)), max_size=24),
    st.booleans(),
)
def test_each_queue_gets_its_weighted_fair_share_before_any_queue_borrows(n_nodes, weights, gang_specs, use_cpsat):
    """One-GPU pods on identical 8-GPU nodes (any gang fits wherever as many GPUs are free, so nothing is lost
    to fragmentation): every queue holds its weighted fair share of the GPUs, down to less than one of its
    gangs, or all it asked for; and no GPU stays idle that a pending gang could use."""
    nodes_ = tuple(node(f"n{i}", cpu=64, gpus=8) for i in range(n_nodes))
    gang_list = tuple(
        Gang(
            f"g{i}",
            tuple(pod(f"g{i}-{k}", cpu=0.1, gpus=1, order=i) for k in range(size)),
            size,
            queue=q,
        )
        for i, (q, size) in enumerate(gang_specs)
        if q in weights
    )
    cluster = Cluster(nodes_, gang_list, queues=tuple(Queue(q, w) for q, w in weights.items()))
    placement = solve(cluster, SolveConfig(time_limit=0.5, use_cpsat=use_cpsat))
    assert validate(cluster, placement) == []
    gpus = {q: held(cluster, placement.bindings)[q][GPU] for q in weights}
    demand = {q: sum(len(g.pods) for g in gang_list if g.queue == q) for q in weights}
    biggest = {q: max((len(g.pods) for g in gang_list if g.queue == q), default=0) for q in weights}
    fair = max_min_fair(8 * n_nodes, weights, demand)
    for q in weights:
        assert gpus[q] == demand[q] or gpus[q] > fair[q] - biggest[q], (q, gpus, fair)
    idle = 8 * n_nodes - sum(gpus.values())
    pending = [len(g.pods) for g in gang_list if not any(p.name in placement.bindings for p in g.pods)]
    assert all(size > idle for size in pending), "work-conserving: a pending gang fits the idle GPUs"


def test_capacity_a_queue_below_its_share_waits_for_is_not_lent():
    """Two 8-GPU nodes, 12 of their GPUs held by queue a (weight 1). Queue b (weight 1, fair share 8 GPUs) waits
    for an 8-GPU pod that does not fit the 4 free GPUs; queue a's next pod would borrow past its share of 8.
    Lending the 4 GPUs would keep b waiting for as long as a's pod runs: they stay free, and a's pod says why."""
    nodes_ = tuple(replace(node(f"n{i}", gpus=8), used={GPU: gpus, "pods": 1}) for i, gpus in enumerate((4, 8)))
    big = Gang("b/big", (pod("big", gpus=8),), 1, queue="b")
    small = Gang("a/small", (pod("small", gpus=4, order=1),), 1, queue="a")
    held = {GPU: 12, "pods": 2}
    cluster = Cluster(nodes_, (big, small), queues=(Queue("a", allocated=held), Queue("b")))
    for use_cpsat in (True, False):
        placement = solve(cluster, SolveConfig(time_limit=0.5, use_cpsat=use_cpsat))
        assert placement.bindings == {}
        reason = {g.name: g.reason for g in placement.gangs}["a/small"]
        assert reason.startswith("queue a is at its fair share: needs 4 nvidia.com/gpu"), reason
    # Without b's pending gang the same GPUs are lent: the schedule stays work-conserving.
    alone = Cluster(nodes_, (small,), queues=cluster.queues)
    assert solve(alone, SolveConfig(time_limit=0.5)).bindings == {"small": "n0"}


def test_capacity_is_held_for_a_queue_below_its_share_only_against_gangs_of_its_priority_or_below():
    """The same cluster: queue a's pod, now of a higher priority than b's waiting gang, takes the 4 free GPUs,
    as a higher priority is never left pending for a lower one (a bug once held it back); of the same priority
    as b's gang, it waits."""
    nodes_ = tuple(replace(node(f"n{i}", gpus=8), used={GPU: gpus, "pods": 1}) for i, gpus in enumerate((4, 8)))
    held = {GPU: 12, "pods": 2}
    for b_priority, a_placed in ((0, True), (10, False)):
        big = Gang("b/big", (pod("big", gpus=8, priority=b_priority),), 1, queue="b")
        small = Gang("a/small", (pod("small", gpus=4, order=1, priority=10),), 1, queue="a")
        cluster = Cluster(nodes_, (big, small), queues=(Queue("a", allocated=held), Queue("b")))
        for use_cpsat in (True, False):
            placement = solve(cluster, SolveConfig(time_limit=0.5, use_cpsat=use_cpsat, preemption=False))
            assert validate(cluster, placement) == []
            assert placement.bindings == ({"small": "n0"} if a_placed else {}), (b_priority, use_cpsat)


def test_a_preemptor_keeps_within_its_queues_capability():
    """Preemption places gangs too: a higher-priority gang evicts only if its queue's cap leaves it room."""
    urgent = Gang("urgent", (pod("urgent-0", gpus=4, priority=10),), queue="a")
    for cap, evicted in ((2, False), (4, True)):
        cluster = cluster_with([urgent], [busy("n0", 4, None)], [node("n0", gpus=4)])
        cluster = replace(cluster, queues=(Queue("a", capability={GPU: cap}),))
        placement = solve(cluster, SolveConfig(time_limit=0.5))
        assert bool(placement.evictions) == evicted
        assert validate(cluster, placement) == []


def test_fair_shares_divide_only_nodes_that_can_take_pods():
    """A cordoned node and a NotReady one add nothing to what the queues divide: two queues of weight 1 that
    each ask for 16 GPUs share the one usable 8-GPU node, 4 each (12 each if the other nodes counted)."""
    nodes_ = (node("ok", gpus=8), node("cordoned", gpus=8, unschedulable=True), node("down", gpus=8, ready=False))
    gangs_ = tuple(Gang(f"{q}/g", tuple(pod(f"{q}-{i}", gpus=8) for i in range(2)), 2, queue=q) for q in "ab")
    cluster = Cluster(nodes_, gangs_, queues=(Queue("a"), Queue("b")))
    assert schedulable(nodes_)[GPU] == 8
    shares = deserved(cluster)
    assert shares["a"][GPU] == shares["b"][GPU] == 4
