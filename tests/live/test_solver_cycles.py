"""When the solver actor solves, and what: at once for a gang with all its members, not before the debounce for a
gang still missing some; only new or changed gangs while nothing freed capacity; every gang again once something
did; and every cycle still reports every waiting gang."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import anyio
import pytest

import gangsolve.cycle as module
from gangsolve.edge.gangs import Grace
from gangsolve.live.channels import Latest
from gangsolve.live.messages import CycleResult, Event, GangPlan, Resync
from gangsolve.live.metrics import Metrics
from gangsolve.live.solver_actor import FIRST_CYCLE_GANGS, SolverActor
from gangsolve.live.store import ClusterStore
from tests.builders import k8s_node, k8s_pod, k8s_pod_group
from tests.live.actors import solver_actor
from tests.live.resources import NODE, POD, XPG


def member(name: str, group: str, gpus: int = 1, node: str | None = None) -> dict:
    p = k8s_pod(name, gpus=gpus, node_name=node, labels={"scheduling.x-k8s.io/pod-group": group})
    p["metadata"]["uid"] = f"uid-{name}"
    return p


def actor(
    store: ClusterStore,
    debounce: float = 0.0,
    resync: float = 3600.0,
    cycle_interval: float = 0.0,
    first_cycle_gangs: int = FIRST_CYCLE_GANGS,
) -> SolverActor:
    return solver_actor(
        store,
        Metrics(),
        scheduler_name="gangsolve",
        group_label=None,
        time_limit=1,
        debounce=debounce,
        cycle_interval=cycle_interval,
        resync_period=resync,
        first_cycle_gangs=first_cycle_gangs,
    )


@pytest.fixture
def solved(monkeypatch) -> list[list[str]]:
    """The gangs each solve was given."""
    calls: list[list[str]] = []
    real = module.solve

    def counting(cluster, config=None, previous=None):
        if config is None or config.use_cpsat:
            calls.append(sorted(g.name for g in cluster.gangs))
        return real(cluster, config, previous)

    monkeypatch.setattr(module, "solve", counting)
    return calls


@pytest.mark.asyncio
async def test_a_gang_that_did_not_fit_waits_for_freed_capacity_and_is_still_reported(solved):
    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node("n1", gpus=2)]))
    s.apply(Resync(XPG, [k8s_pod_group("big", 3), k8s_pod_group("small", 1)]))
    s.apply(Resync(POD, [member(f"big-{i}", "big") for i in range(3)] + [member("run", "x", gpus=1, node="n1")]))
    a = actor(s)
    send, receive = anyio.create_memory_object_stream[GangPlan](math.inf)
    results: Latest[CycleResult] = Latest()
    await a.cycle(send, results)
    assert solved == [["default/big"]]
    assert not (await results.take()).placement.gangs[0].placed

    s.apply(Event(POD, "ADDED", member("small-0", "small")))  # a new gang; nothing freed
    await a.cycle(send, results)
    assert solved[-1] == ["default/small"]  # only what changed is solved
    result = await results.take()
    assert {g.name: r.placed for g, r in zip(result.cluster.gangs, result.placement.gangs, strict=True)} == {
        "default/small": True,
        "default/big": False,  # carried over with its last result, and its reason
    }
    assert result.carried == 1
    assert "nvidia.com/gpu" in result.placement.gangs[1].reason
    assert receive.receive_nowait().gang == "default/small"

    s.apply(Event(POD, "DELETED", member("run", "x", node="n1")))  # a GPU freed: every gang is tried again
    await a.cycle(send, results)
    assert solved[-1] == ["default/big"]  # (small is assumed: bound as far as a cycle can tell)


@pytest.mark.asyncio
async def test_a_waiting_gang_that_changes_is_solved_again(solved):
    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node("n1", gpus=2)]))
    s.apply(Resync(XPG, [k8s_pod_group("g", 3)]))
    s.apply(Resync(POD, [member(f"g-{i}", "g") for i in range(3)]))
    a = actor(s)
    send, receive = anyio.create_memory_object_stream[GangPlan](math.inf)
    await a.cycle(send, Latest())
    s.apply(Event(XPG, "MODIFIED", k8s_pod_group("g", 2)))  # elastic now: two of three will do
    await a.cycle(send, Latest())
    assert solved == [["default/g"], ["default/g"]]
    assert len(receive.receive_nowait().pods) == 2


@pytest.mark.asyncio
async def test_a_complete_gang_does_not_wait_out_the_debounce():
    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node("n1", gpus=4)]))
    s.apply(Resync(XPG, [k8s_pod_group("g", 3)]))
    s.apply(Resync(POD, [member(f"g-{i}", "g") for i in range(2)]))
    send, receive = anyio.create_memory_object_stream[GangPlan](math.inf)
    async with anyio.create_task_group() as tg:
        tg.start_soon(actor(s, debounce=30).run, send, Latest())
        await anyio.sleep(0.5)
        assert receive.statistics().current_buffer_used == 0  # two of three members: it waits
        started = anyio.current_time()
        s.apply(Event(POD, "ADDED", member("g-2", "g")))
        with anyio.fail_after(10):
            gang_plan = await receive.receive()
        tg.cancel_scope.cancel()
    assert gang_plan.gang == "default/g"
    assert len(gang_plan.pods) == 3
    assert anyio.current_time() - started < 10  # not the 30 s debounce


@pytest.mark.asyncio
async def test_gangs_arriving_within_the_cycle_interval_are_solved_together(solved):
    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node("n1", gpus=8)]))
    s.apply(Resync(XPG, [k8s_pod_group(name, 2) for name in ("a", "b", "c")]))
    s.apply(Resync(POD, [member(f"a-{i}", "a") for i in range(2)]))
    send, receive = anyio.create_memory_object_stream[GangPlan](math.inf)
    async with anyio.create_task_group() as tg:
        tg.start_soon(actor(s, cycle_interval=2.0).run, send, Latest())
        with anyio.fail_after(10):
            first = await receive.receive()  # the first cycle does not wait
        started = anyio.current_time()
        for name in ("b", "c"):  # complete gangs, each of which alone would start a cycle at once
            s.apply(Event(POD, "ADDED", member(f"{name}-0", name)))
            s.apply(Event(POD, "ADDED", member(f"{name}-1", name)))
            await anyio.sleep(0.3)
        with anyio.fail_after(10):
            later = {(await receive.receive()).gang for _ in range(2)}
        waited = anyio.current_time() - started
        tg.cancel_scope.cancel()
    assert first.gang == "default/a"
    assert later == {"default/b", "default/c"}
    assert solved == [["default/a"], ["default/b", "default/c"]]  # one cycle for both
    assert waited >= 1.5  # the interval, less the first plan's way out of its cycle


@pytest.mark.asyncio
async def test_the_first_cycle_solves_the_first_gangs_in_queue_order_and_the_next_the_rest_at_once(solved):
    """After a start with many gangs waiting (room for all), binding starts after a cycle of a few gangs, not of
    all: the first cycle takes the first in queue order (priority, then the oldest member), the next one, at once,
    the rest."""
    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node("n1", gpus=8)]))
    s.apply(Resync(XPG, [k8s_pod_group(name, 1) for name in "abcde"]))
    pods = []
    for i, name in enumerate("edcba"):  # e is the oldest, then d, ...
        pod = member(f"{name}-0", name)
        pod["metadata"]["creationTimestamp"] = f"2026-01-01T00:00:0{i}Z"
        if name == "a":
            pod["spec"]["priority"] = 1000  # the youngest, but the highest priority
        pods.append(pod)
    s.apply(Resync(POD, pods))
    send, receive = anyio.create_memory_object_stream[GangPlan](math.inf)
    async with anyio.create_task_group() as tg:
        tg.start_soon(actor(s, first_cycle_gangs=2, cycle_interval=0.2).run, send, Latest())
        with anyio.fail_after(20):
            gangs = [(await receive.receive()).gang for _ in range(5)]
        await anyio.sleep(0.5)
        tg.cancel_scope.cancel()
    # The second cycle solves every gang (one that does is due): a and e are assumed, so it sees the rest.
    assert solved == [["default/a", "default/e"], ["default/b", "default/c", "default/d"]]
    assert set(gangs[:2]) == {"default/a", "default/e"}


@pytest.mark.asyncio
async def test_gangs_the_first_cycle_left_are_solved_at_once_even_when_it_placed_nothing(solved):
    """Room enough in all, but on no node the gangs may take: the first cycle places nothing, so nothing in the
    store changes; the gangs it left must still be solved (and told why they wait) at once, not at the next event
    or resync."""
    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node("n1", gpus=8)]))
    s.apply(Resync(XPG, [k8s_pod_group(name, 1) for name in "abc"]))
    pods = [member(f"{name}-0", name) for name in "abc"]
    for pod in pods:
        pod["spec"]["nodeSelector"] = {"zone": "nowhere"}
    s.apply(Resync(POD, pods))
    async with anyio.create_task_group() as tg:
        tg.start_soon(
            actor(s, first_cycle_gangs=1).run, anyio.create_memory_object_stream[GangPlan](math.inf)[0], Latest()
        )
        with anyio.fail_after(10):
            while len(solved) < 2:
                await anyio.sleep(0.05)
        tg.cancel_scope.cancel()
    assert solved == [["default/a"], ["default/a", "default/b", "default/c"]]  # every gang, a again with them


@pytest.mark.asyncio
async def test_gangs_that_compete_for_room_are_all_weighed_in_the_first_cycle(solved):
    """Together they ask for more than is free (which of them to place is the question): no first cut."""
    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node("n1", gpus=2)]))
    s.apply(Resync(XPG, [k8s_pod_group(name, 1) for name in "abc"]))
    s.apply(Resync(POD, [member(f"{name}-0", name) for name in "abc"]))
    send, _receive = anyio.create_memory_object_stream[GangPlan](math.inf)
    a = actor(s, first_cycle_gangs=1)
    await a.cycle(send, Latest(), await a.prepare())
    assert solved == [["default/a", "default/b", "default/c"]]


@pytest.mark.asyncio
async def test_changes_that_cannot_make_room_start_no_solve(solved):
    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node("n1", gpus=1)]))
    s.apply(Resync(XPG, [k8s_pod_group("g", 2)]))
    s.apply(Resync(POD, [member(f"g-{i}", "g") for i in range(2)]))
    send, _receive = anyio.create_memory_object_stream[GangPlan](math.inf)
    async with anyio.create_task_group() as tg:
        tg.start_soon(actor(s).run, send, Latest())
        await anyio.sleep(0.5)
        assert solved == [["default/g"]]
        other = k8s_pod("other", gpus=None, scheduler="default-scheduler")
        other["metadata"]["uid"] = "uid-other"
        s.apply(Event(POD, "ADDED", other))  # another scheduler's pod arrives and is bound
        s.apply(Event(POD, "MODIFIED", {**other, "spec": {**other["spec"], "nodeName": "n1"}}))
        await anyio.sleep(0.5)
        tg.cancel_scope.cancel()
    assert solved == [["default/g"]]


@pytest.mark.asyncio
async def test_a_gang_that_lost_to_a_gang_placed_beside_it_is_solved_again_against_what_is_left(solved):
    """Two gangs that each fit alone, room for one: the cycle places one and can only say the other lost to it;
    the next cycle, at once and with no event, solves the loser again and says what it lacks."""
    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node("n1", gpus=2)]))
    s.apply(Resync(XPG, [k8s_pod_group("a", 2), k8s_pod_group("b", 2)]))
    s.apply(Resync(POD, [member(f"{g}-{i}", g) for g in "ab" for i in range(2)]))
    send, receive = anyio.create_memory_object_stream[GangPlan](math.inf)
    results: Latest[CycleResult] = Latest()
    async with anyio.create_task_group() as tg:
        tg.start_soon(actor(s).run, send, results)
        with anyio.fail_after(20):
            while len(solved) < 2:
                await anyio.sleep(0.05)
        await anyio.sleep(0.5)  # and no third solve: the loser now waits for capacity to be freed
        tg.cancel_scope.cancel()
    winner = receive.receive_nowait().gang
    loser = ({"default/a", "default/b"} - {winner}).pop()
    assert solved == [["default/a", "default/b"], [loser]]
    result = await results.take()
    (reason,) = [r.reason for r in result.placement.gangs if r.name == loser]
    assert "nvidia.com/gpu" in reason
    assert "placed this cycle" not in reason


@pytest.mark.asyncio
async def test_pods_waiting_for_their_gang_definition_are_reported_and_placed_when_the_grace_ends():
    """Pods of a Job that may still get a PodGroup or PDB join no gang yet: no gang to solve, but a cycle must
    still report them waiting and wake when their grace ends, with nothing else happening."""
    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node("n1", gpus=2)]))
    s.apply(Resync(POD, []))
    a = solver_actor(
        s,
        Metrics(),
        scheduler_name="gangsolve",
        group_label=None,
        time_limit=1,
        debounce=0.0,
        resync_period=3600.0,
        grace=Grace(seconds=1.0),
    )
    send, receive = anyio.create_memory_object_stream[GangPlan](math.inf)
    results: Latest[CycleResult] = Latest()
    async with anyio.create_task_group() as tg:
        tg.start_soon(a.run, send, results)
        await anyio.sleep(0.3)  # the first cycle: nothing pending
        created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for i in range(2):
            p = k8s_pod(f"j-{i}", gpus=1, owner="j", created=created)
            p["metadata"]["uid"] = f"uid-j-{i}"
            s.apply(Event(POD, "ADDED", p))
        with anyio.fail_after(10):
            while not (r := await results.take()).waiting:
                pass
            assert set(r.waiting) == {"default/j-0", "default/j-1"}
            gang_plan = await receive.receive()  # the grace ends: grouped by their owner, placed whole
        tg.cancel_scope.cancel()
    assert gang_plan.gang == "default/j"
    assert len(gang_plan.pods) == 2


@pytest.mark.asyncio
async def test_the_implicit_queue_reports_every_pod_of_ours_it_holds_even_when_a_cycle_reads_only_what_is_pending():
    # Without Queue objects a cycle reads only pending pods and their gangs' (a partial view); what the implicit
    # `default` queue holds is still every bound or assumed pod of ours, and a cycle with nothing pending keeps
    # reporting it rather than dropping the queue's series (the dashboard's queue panels went blank).
    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node("n1", gpus=8)]))
    s.apply(Resync(XPG, [k8s_pod_group("new", 2), k8s_pod_group("old", 1)]))
    pods = [member("new-0", "new"), member("new-1", "new"), member("old-0", "old", gpus=3, node="n1")]
    pods.append(k8s_pod("other", gpus=1, node_name="n1", scheduler="default-scheduler"))
    for p in pods:  # one priority: nothing to preempt, so every cycle reads a partial view
        p["spec"]["priority"] = 0
    s.apply(Resync(POD, pods))
    a = actor(s)
    send, _receive = anyio.create_memory_object_stream[GangPlan](math.inf)
    results: Latest[CycleResult] = Latest()
    sample = a.metrics.registry.get_sample_value

    def held() -> float | None:
        return sample("gangsolve_queue_allocated", {"queue": "default", "resource": "nvidia.com/gpu"})

    await a.cycle(send, results)
    assert a.whole_views == 0
    assert (await results.take()).placement.bindings.keys() == {"default/new-0", "default/new-1"}
    assert held() == 5  # the bound gang the view did not read, and the two pods placed; not the other scheduler's
    assert sample("gangsolve_queue_share", {"queue": "default"}) == 5 / 8

    s.apply(Event(NODE, "MODIFIED", k8s_node("n1", gpus=16)))  # room freed: a full cycle, with nothing pending
    await a.cycle(send, results)
    assert (await results.take()).cluster.gangs == ()
    assert held() == 5  # the placed pods are assumed: still held

    s.apply(Event(POD, "DELETED", pods[2]))  # the old gang ended
    await a.cycle(send, results)
    assert held() == 2
