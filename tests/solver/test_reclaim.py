"""Reclaim: a queue below its fair share evicts whole gangs of its own priority from reclaimable queues past
theirs. On hand-made clusters and on random ones (hypothesis), over repeated cycles: no eviction is futile,
victims come only from reclaimable queues past their fair share and go whole, the queue taken from stays at or
above its fair share and the reclaiming queue within its own, and no two queues reclaim from each other; with
starving gangs, which may cross fair shares, every queue a reclaim touches ends nearer its fair share. The
oracles share no code with the solver: fair shares are weighted max-min fairness by progressive filling
(test_queues.max_min_fair), whether the preemptors fit is the validator's answer without their victims."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gangsolve.solver import GPU, Cluster, Gang, Queue, SolveConfig, solve, validate
from gangsolve.solver.model import Placement, Running
from tests.builders import node, pod
from tests.solver.test_preemption import running, with_running, without
from tests.solver.test_queues import max_min_fair

CONFIG = SolveConfig(time_limit=1.0, steps=20)


def allocated(pods: list[Running]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in pods:
        for k, q in r.requests.items():
            out[r.queue][k] += q
    return out


def cluster_of(nodes, pods: list[Running], gangs, queues: list[Queue], nominated=None) -> Cluster:
    held = allocated(pods)
    return Cluster(
        with_running(nodes, pods),
        tuple(gangs),
        tuple(pods),
        nominated=nominated or {},
        queues=tuple(replace(q, allocated=dict(held[q.name])) for q in queues),
    )


def team_b_holds_everything(reclaimable=True, priority=0, a_holds=0, a_wants=8):
    """Two 8-GPU nodes; team-b holds every GPU free of team-a as gangs of two 2-GPU pods, team-a (equal weight)
    holds `a_holds` GPUs and asks for a gang of two pods of `a_wants / 2` GPUs."""
    nodes = [node(f"n{i}", cpu=64, gpus=8) for i in range(2)]
    pods = [running(f"a/r{i}", "n0", gpus=2, gang=f"a/r{i}", queue="team-a") for i in range(a_holds // 2)]
    slots = [n for n in ("n0", "n1") for _ in range(4)][a_holds // 2 :]
    for j in range(len(slots) // 2):
        for k in range(2):
            pods.append(
                running(
                    f"b/g{j}-{k}", slots[2 * j + k], gpus=2, gang=f"b/g{j}", min_member=2, started=j, queue="team-b"
                )
            )
    pods = [replace(r, priority=priority) if r.queue == "team-b" else r for r in pods]
    want = Gang("a/x", tuple(pod(f"a/x-{i}", gpus=a_wants // 2, order=i) for i in range(2)), 2, queue="team-a")
    queues = [Queue("team-a"), Queue("team-b", reclaimable=reclaimable)]
    return cluster_of(nodes, pods, [want], queues)


def test_a_queue_below_its_fair_share_reclaims_whole_gangs_down_to_the_others_fair_share():
    cluster = team_b_holds_everything()
    placement = solve(cluster, CONFIG)
    victims = {e.pod for e in placement.evictions}
    # Fair shares 8 and 8: team-b gives back two whole gangs (8 GPUs) and keeps exactly its fair share.
    assert len(victims) == 4
    gangs = {r.gang for r in cluster.running if r.name in victims}
    assert len(gangs) == 2
    assert all(r.name in victims for r in cluster.running if r.gang in gangs), "whole gangs only"
    assert set(placement.nominations) == {"a/x-0", "a/x-1"}
    assert not validate(Cluster(without(cluster, victims), cluster.gangs), placement.nominations)
    assert all("reclaimed from queue team-b" in e.reason for e in placement.evictions)
    assert placement.gangs[0].reason.startswith("reclaiming 4 pods of 2 gangs")


def test_no_reclaim_from_a_queue_that_is_not_reclaimable_or_of_another_priority():
    assert not solve(team_b_holds_everything(reclaimable=False), CONFIG).evictions
    assert not solve(team_b_holds_everything(priority=1), CONFIG).evictions
    # A lower priority is priority preemption's, as before: team-b's gangs go however fair shares stand.
    assert solve(team_b_holds_everything(priority=-1), CONFIG).evictions
    assert not solve(team_b_holds_everything(), replace(CONFIG, preemption=False)).evictions


def test_no_reclaim_past_the_reclaiming_queues_own_fair_share():
    # team-a holds 4 of its 8: a gang of 4 more fits its share, a gang of 8 more would pass it.
    assert len(solve(team_b_holds_everything(a_holds=4, a_wants=4), CONFIG).evictions) == 2
    assert not solve(team_b_holds_everything(a_holds=4, a_wants=8), CONFIG).evictions


def whole_nodes(a_holds: int, b_holds: int, a_wants: int, starving: bool, b_wants: int = 0) -> Cluster:
    """Three 8-GPU nodes shared by team-a and team-b (equal weights): each holds whole nodes as gangs of one
    8-GPU pod; team-a (or team-b, with `b_wants`) asks for a gang of 8-GPU pods."""
    nodes = [node(f"n{i}", cpu=64, gpus=8) for i in range(3)]
    owners = ["team-a"] * (a_holds // 8) + ["team-b"] * (b_holds // 8)
    pods = [running(f"{q}/r{i}", f"n{i}", gpus=8, gang=f"{q}/r{i}", started=i, queue=q) for i, q in enumerate(owners)]
    queue, wants = ("team-b", b_wants) if b_wants else ("team-a", a_wants)
    pending = Gang(
        f"{queue}/x",
        tuple(pod(f"{queue}/x-{i}", gpus=8, order=i) for i in range(wants // 8)),
        wants // 8,
        queue=queue,
        starving=starving,
    )
    return cluster_of(nodes, pods, [pending], [Queue("team-a"), Queue("team-b")])


def test_a_starving_gang_wider_than_its_queues_shortfall_reclaims_when_both_queues_end_nearer_their_shares():
    # Fair shares 12 and 12 GPUs. team-a, holding nothing, asks for 16: within its share it cannot fit, so a
    # gang that is not starving reclaims nothing.
    assert not solve(whole_nodes(0, 24, 16, starving=False), CONFIG).evictions
    # Starving, it takes two of team-b's gangs: team-a ends 4 past its share (from 12 short), team-b 4 short
    # (from 12 past).
    cluster = whole_nodes(0, 24, 16, starving=True)
    placement = solve(cluster, CONFIG)
    assert len(placement.evictions) == 2
    assert all("reclaimed from queue team-b" in e.reason for e in placement.evictions)
    assert set(placement.nominations) == {"team-a/x-0", "team-a/x-1"}
    assert not validate(Cluster(without(cluster, {e.pod for e in placement.evictions}), cluster.gangs), {})
    # Not nearer, no reclaim: 24 would leave team-a as far past its share (12) as it is short of it now.
    assert not solve(whole_nodes(0, 24, 24, starving=True), CONFIG).evictions


def test_no_reclaim_back_once_both_queues_are_nearer_their_shares():
    # The state the reclaim above leaves: team-a 16, team-b 8. Taking team-a's gang of 16 for team-b's 8 would
    # leave team-b 4 past (as far as it is short now) and team-a 12 short (from 4 past): no reclaim, starving or
    # not.
    for starving in (False, True):
        assert not solve(whole_nodes(16, 8, 0, starving=starving, b_wants=8), CONFIG).evictions


def test_room_a_reclaim_frees_goes_only_to_gangs_still_within_their_queues_share():
    """Three 8-GPU nodes; fair shares q0 7, q1 7, q2 10 GPUs. q0's starving gang of 8 reclaims q1's gang of 2 x 8
    (q0 from 5 short to 3 past, q1 from 13 past to 3 short), which frees a node more than it needs. q2's gang of
    8 (within q2's share) may have it; q0's gang of 2 may not: q0 is past its share once its starving gang is in,
    though it was within before the reclaim."""
    nodes = [node(f"n{i}", cpu=256, gpus=8) for i in range(3)]
    pods = [
        running("r0-0", "n0", gpus=2, gang="r0", queue="q0"),
        running("r1-0", "n0", gpus=2, gang="r1", queue="q1"),
        running("r2-0", "n1", gpus=8, gang="r2", min_member=2, queue="q1"),
        running("r2-1", "n2", gpus=8, gang="r2", min_member=2, queue="q1"),
        running("r3-0", "n0", gpus=2, gang="r3", queue="q1"),
        running("r4-0", "n0", gpus=2, gang="r4", queue="q2"),
    ]
    gangs = [
        Gang("p0", (pod("p0-0", gpus=8, order=0),), 1, queue="q0", starving=True),
        Gang("p1", (pod("p1-0", gpus=2, order=1),), 1, queue="q0"),
        Gang("p2", (pod("p2-0", gpus=8, order=2),), 1, queue="q2"),
    ]
    cluster = cluster_of(nodes, pods, gangs, [Queue("q0", 1), Queue("q1", 1), Queue("q2", 2)])
    assert fair_gpus(cluster) == {"q0": 7.0, "q1": 7.0, "q2": 10.0}
    placement = solve(cluster, CONFIG)
    assert {e.pod for e in placement.evictions} == {"r2-0", "r2-1"}
    assert set(placement.nominations) == {"p0-0", "p2-0"}
    assert "p1-0" not in placement.bindings


def test_a_closed_queue_admits_no_new_gang():
    nodes = [node("n0", gpus=8)]
    gang = Gang("a/x", (pod("a/x-0", gpus=1),), 1, queue="team-a")
    for closed in (False, True):
        cluster = Cluster(tuple(nodes), (gang,), queues=(Queue("team-a", closed=closed), Queue("team-b")))
        for use_cpsat in (True, False):
            placement = solve(cluster, replace(CONFIG, use_cpsat=use_cpsat))
            assert bool(placement.bindings) is not closed
            if closed:
                assert placement.gangs[0].reason == "queue team-a is closed: it admits no new gangs"


# --- random clusters over repeated cycles -----------------------------------------------------------------------

QUEUES = ("q0", "q1", "q2")
NODE_GPUS = 8


@dataclass
class World:
    """Gangs running and pending, cycle after cycle: evicted gangs queue again, nominated gangs bind once their
    victims are gone (next cycle), as the live scheduler and the controllers do."""

    nodes: list
    queues: list[Queue]
    running: list[Running]
    pending: dict[str, Gang]
    nominated: dict[str, str] = field(default_factory=dict)
    clock: int = 100

    def cluster(self) -> Cluster:
        return cluster_of(self.nodes, self.running, self.pending.values(), self.queues, self.nominated)

    def apply(self, cluster: Cluster, placement: Placement) -> None:
        victims = {e.pod for e in placement.evictions}
        for gang_name in {r.gang for r in self.running if r.name in victims}:
            members = [r for r in self.running if r.gang == gang_name]
            pods = tuple(pod(r.name, gpus=r.requests[GPU], order=self.clock) for r in members)
            self.pending[gang_name] = Gang(gang_name, pods, len(pods), queue=members[0].queue)  # created again
        self.running = [r for r in self.running if r.name not in victims]
        for gang in list(self.pending.values()):
            if all(p.name in placement.bindings for p in gang.pods):
                self.clock += 1
                for p in gang.pods:
                    self.running.append(
                        running(
                            p.name,
                            placement.bindings[p.name],
                            gpus=p.requests[GPU],
                            gang=gang.name,
                            min_member=gang.min_member,
                            started=self.clock,
                            queue=gang.queue,
                        )
                    )
                del self.pending[gang.name]
        self.nominated = dict(placement.nominations)


def fair_gpus(cluster: Cluster) -> dict[str, float]:
    weights = {q.name: q.weight for q in cluster.queues}
    demand = {q.name: q.allocated.get(GPU, 0) for q in cluster.queues}
    for g in cluster.gangs:
        demand[g.queue] += sum(p.requests.get(GPU, 0) for p in g.pods)
    return max_min_fair(sum(n.allocatable[GPU] for n in cluster.nodes), weights, demand)


@st.composite
def worlds(draw, starving: bool = False) -> World:
    """Random worlds; with `starving`, each pending gang may be starving (reclaim may then cross fair shares),
    every queue is reclaimable, and pods are wider and more, so that whole gangs often cannot fit what a queue is
    short of."""
    widths = (2, 4, 8) if starving else (1, 2, 4)
    nodes = [node(f"n{i}", cpu=256, gpus=NODE_GPUS) for i in range(draw(st.integers(1, 3)))]
    queues = [Queue(q, weight=draw(st.integers(1, 3)), reclaimable=starving or draw(st.booleans())) for q in QUEUES]
    free = {n.name: NODE_GPUS for n in nodes}
    pods: list[Running] = []
    for j in range(draw(st.integers(4, 12) if starving else st.integers(0, 8))):
        queue, size, gpus = draw(st.sampled_from(QUEUES)), draw(st.integers(1, 2)), draw(st.sampled_from(widths))
        where = []
        for _ in range(size):
            fits = [n for n, f in free.items() if f >= gpus]
            if not fits:
                break
            where.append(fits[0])
            free[fits[0]] -= gpus
        if len(where) < size:
            for n in where:
                free[n] += gpus
            continue
        for k, n in enumerate(where):
            pods.append(running(f"r{j}-{k}", n, gpus=gpus, gang=f"r{j}", min_member=size, started=j, queue=queue))
    pending = {}
    for j in range(draw(st.integers(1, 4))):
        queue, size, gpus = draw(st.sampled_from(QUEUES)), draw(st.integers(1, 2)), draw(st.sampled_from(widths))
        pods_ = tuple(pod(f"p{j}-{k}", gpus=gpus, order=j) for k in range(size))
        hungry = starving and draw(st.booleans())
        pending[f"p{j}"] = Gang(f"p{j}", pods_, size, queue=queue, starving=hungry)
    return World(nodes, queues, pods, pending)


def gpus_of(cluster: Cluster, queue: str, pods) -> int:
    """The GPUs the queue's pending pods among `pods` ask for."""
    return sum(p.requests[GPU] for g in cluster.gangs if g.queue == queue for p in g.pods if p.name in pods)


def check_reclaim(cluster: Cluster, placement: Placement) -> dict[str, int]:
    """What holds of every reclaim here (every gang has priority 0): a valid placement; no futile eviction (every
    preemptor fits on its nominated nodes once every victim is gone); victims of the preemptor's priority, from
    another queue, whole gangs only. Returns the GPUs taken from each queue."""
    assert validate(cluster, placement) == []
    victims = {e.pod for e in placement.evictions}
    assert not validate(Cluster(without(cluster, victims), cluster.gangs), {**placement.nominations})
    nominated_gangs = {g.name for g in cluster.gangs if any(p.name in placement.nominations for p in g.pods)}
    assert {e.preemptor for e in placement.evictions} <= nominated_gangs
    pods = {r.name: r for r in cluster.running}
    gang_of = {g.name: g for g in cluster.gangs}
    taken: dict[str, int] = defaultdict(int)
    for e in placement.evictions:
        victim, reclaimer = pods[e.pod], gang_of[e.preemptor]
        assert victim.priority == reclaimer.priority
        assert victim.queue != reclaimer.queue
        taken[victim.queue] += victim.requests[GPU]
    for gang in {pods[v].gang for v in victims}:
        assert all(r.name in victims for r in cluster.running if r.gang == gang), "whole gangs only"
    return taken


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_reclaim_is_never_futile_takes_whole_gangs_of_queues_past_their_share_and_never_goes_back(world):
    reclaims: set[tuple[str, str]] = set()  # (queue reclaiming, queue taken from), over every cycle
    for _cycle in range(4):
        cluster = world.cluster()
        placement = solve(cluster, CONFIG)
        taken = check_reclaim(cluster, placement)
        fair = fair_gpus(cluster)
        queues = {q.name: q for q in cluster.queues}
        pods = {r.name: r for r in cluster.running}
        gang_of = {g.name: g for g in cluster.gangs}
        for e in placement.evictions:
            victim, reclaimer = pods[e.pod], gang_of[e.preemptor]
            assert queues[victim.queue].reclaimable
            assert queues[victim.queue].allocated[GPU] > fair[victim.queue], "taken from a queue past its share"
            reclaims.add((reclaimer.queue, victim.queue))
        # The queue taken from stays at or above its fair share; each reclaiming queue stays within its own.
        for queue, gpus in taken.items():
            assert queues[queue].allocated[GPU] - gpus >= fair[queue] - 1e-6
        placed = {*placement.bindings, *placement.nominations}
        for queue in {gang_of[e.preemptor].queue for e in placement.evictions}:
            assert queues[queue].allocated.get(GPU, 0) + gpus_of(cluster, queue, placed) <= fair[queue] + 1e-6
        world.apply(cluster, placement)
    event(f"queue pairs reclaiming: {len(reclaims)}")
    assert not any((b, a) in reclaims for a, b in reclaims), f"reclaim back and forth: {reclaims}"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds(starving=True))
def test_reclaim_for_starving_gangs_leaves_every_queue_it_touches_nearer_its_fair_share(world):
    crossed = False
    for _cycle in range(4):
        cluster = world.cluster()
        placement = solve(cluster, CONFIG)
        taken = check_reclaim(cluster, placement)
        fair = fair_gpus(cluster)
        gang_of = {g.name: g for g in cluster.gangs}
        # Every queue a reclaim touched (taken from, or reclaiming) ends nearer its fair share than it began
        # (with what this cycle bound for it).
        reclaiming = {gang_of[e.preemptor].queue for e in placement.evictions}
        for q in set(taken) | reclaiming:
            before = sum(r.requests[GPU] for r in cluster.running if r.queue == q)
            before += gpus_of(cluster, q, placement.bindings)
            after = before - taken[q] + gpus_of(cluster, q, placement.nominations)
            assert abs(after - fair[q]) < abs(before - fair[q]) - 1e-6, (q, before, after, fair[q])
            crossed |= (before - fair[q]) * (after - fair[q]) < 0
        world.apply(cluster, placement)
    event(f"a reclaim crossed a fair share: {crossed}")


def test_a_nominated_gang_counts_against_its_queues_capability():
    """A gang binding on its nominated node and another gang of its queue: the cap leaves room for one."""
    nominated = Gang("a/nom", (pod("a/nom-0", gpus=4),), 1, queue="team-a")
    other = Gang("a/other", (pod("a/other-0", gpus=4, order=1),), 1, queue="team-a")
    cluster = Cluster(
        (node("n0", gpus=8),),
        (nominated, other),
        nominated={"a/nom-0": "n0"},
        queues=(Queue("team-a", capability={GPU: 4}),),
    )
    placement = solve(cluster, CONFIG)
    assert placement.bindings == {"a/nom-0": "n0"}
    assert validate(cluster, placement) == []
