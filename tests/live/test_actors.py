"""The solver and binder actors on the fake client: assume -> last check -> bind all -> forget on failure."""

from __future__ import annotations

import math

import anyio
import pytest

from gangsolve.edge.snapshot import Snapshot
from gangsolve.live.binder import BinderActor
from gangsolve.live.channels import Latest
from gangsolve.live.fence import Unfenced
from gangsolve.live.messages import Bound, CycleResult, Event, GangPlan, Resync
from gangsolve.live.metrics import Metrics
from gangsolve.live.queue import SchedulingQueue
from gangsolve.live.store import ClusterStore
from tests.builders import k8s_node, k8s_pdb, k8s_pod, k8s_pod_group
from tests.live.actors import run_cycle, solver_actor
from tests.live.fake_kube import FakeKube
from tests.live.resources import NODE, PDB, POD


class Fence:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def remaining(self) -> float:
        return self.seconds


def store_with_gang(n_pods: int = 3, gpus: int = 4) -> ClusterStore:
    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node("n1", gpus=gpus)]))
    pods = []
    for i in range(n_pods):
        p = k8s_pod(f"w{i}", gpus=1, labels={"job": "j"})
        p["metadata"]["uid"] = f"u{i}"
        pods.append(p)
    s.apply(Resync(POD, pods))
    s.apply(Resync(PDB, [k8s_pdb("j", n_pods, {"job": "j"})]))
    return s


def assumed_plan(s: ClusterStore, n: int, node: str = "n1") -> GangPlan:
    pods = tuple((f"default/w{i}", f"u{i}", node) for i in range(n))
    s.assume("default/j", pods)
    return GangPlan("default/j", pods, 0.0)


def streams():
    return anyio.create_memory_object_stream[Bound](math.inf)


# ---------------------------------------------------------------------------------------------- binder


@pytest.mark.asyncio
async def test_binder_binds_the_whole_gang_and_keeps_assumptions_until_the_watch_confirms():
    s, kube = store_with_gang(), FakeKube()
    send, receive = streams()
    b = BinderActor(kube, s, SchedulingQueue(), Metrics(), Unfenced())
    assert await b.bind_gang(assumed_plan(s, 3), send)
    assert sorted(kube.bindings) == [("w0", "n1"), ("w1", "n1"), ("w2", "n1")]
    assert sorted(receive.receive_nowait().pod for _ in range(3)) == ["default/w0", "default/w1", "default/w2"]
    assert all(s.is_assumed(f"default/w{i}") for i in range(3))


@pytest.mark.asyncio
async def test_a_failed_bind_forgets_that_pod_with_back_off_and_plans_again():
    s, kube = store_with_gang(), FakeKube()
    kube.fail = {"/w1/": 409}
    metrics = Metrics()
    b = BinderActor(kube, s, SchedulingQueue(), metrics, Unfenced())
    g = s.generation
    assert not await b.bind_gang(assumed_plan(s, 3), streams()[0])
    assert not s.is_assumed("default/w1")
    assert s.generation > g
    assert set(b.queue.backing_off()) == {"default/w1"}
    assert metrics.bind_errors.labels("conflict")._value.get() == 1


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda s: s.apply(Event(POD, "DELETED", s.pod("default/w2"))), "pod default/w2 is gone"),
        (
            lambda s: s.apply(
                Event(
                    POD,
                    "MODIFIED",
                    {**s.pod("default/w2"), "metadata": {**s.pod("default/w2")["metadata"], "uid": "someone-else"}},
                )
            ),
            "pod default/w2 was replaced",
        ),
        (
            lambda s: s.apply(
                Event(
                    POD,
                    "MODIFIED",
                    {
                        **s.pod("default/w2"),
                        "metadata": {**s.pod("default/w2")["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"},
                    },
                )
            ),
            "pod default/w2 is bound or terminating",
        ),
        (lambda s: s.apply(Event(NODE, "DELETED", s.node("n1"))), "node n1 is gone"),
        (lambda s: s.apply(Event(NODE, "MODIFIED", k8s_node("n1", gpus=4, unschedulable=True))), "cordoned"),
        (lambda s: s.apply(Event(NODE, "MODIFIED", k8s_node("n1", gpus=4, ready=False))), "not Ready"),
        (
            lambda s: s.apply(
                Event(NODE, "MODIFIED", k8s_node("n1", gpus=4, taints=[{"key": "maint", "effect": "NoSchedule"}]))
            ),
            "taint maint:NoSchedule",
        ),
        (  # another scheduler bound a 2-GPU pod there meanwhile: 3 + 2 > 4
            lambda s: s.apply(
                Event(
                    POD,
                    "ADDED",
                    k8s_pod("other", gpus=2, scheduler="default-scheduler", node_name="n1", phase="Running"),
                )
            ),
            "nvidia.com/gpu overcommitted",
        ),
        (  # a terminating pod still holds its GPUs
            lambda s: s.apply(
                Event(
                    POD,
                    "ADDED",
                    {
                        **k8s_pod("old", gpus=2, node_name="n1", phase="Running"),
                        "metadata": {
                            "name": "old",
                            "namespace": "default",
                            "deletionTimestamp": "2026-01-01T00:00:00Z",
                        },
                    },
                )
            ),
            "nvidia.com/gpu overcommitted",
        ),
    ],
)
@pytest.mark.asyncio
async def test_the_last_check_refuses_a_gang_whose_world_changed(change, reason):
    s, kube = store_with_gang(), FakeKube()
    plan_ = assumed_plan(s, 3)
    change(s)
    b = BinderActor(kube, s, SchedulingQueue(), Metrics(), Unfenced())
    assert reason in (b.last_check(plan_) or "")
    assert not await b.bind_gang(plan_, streams()[0])
    assert kube.bindings == []
    assert not any(s.is_assumed(f"default/w{i}") for i in range(3))
    assert b.queue.backing_off() == {}  # planned again at once: nothing was refused by the API server


@pytest.mark.parametrize(("pods", "fits"), [(3, False), (2, True)])
def test_other_plans_assumed_on_the_node_count_in_the_last_check(pods, fits):
    s = store_with_gang(n_pods=3, gpus=4)
    x = k8s_pod("x", gpus=2)
    x["metadata"]["uid"] = "ux"
    s.apply(Event(POD, "ADDED", x))
    s.assume("default/x", [("default/x", "ux", "n1")])  # an earlier cycle's plan, not bound yet
    b = BinderActor(FakeKube(), s, SchedulingQueue(), Metrics(), Unfenced())
    why = b.last_check(assumed_plan(s, pods))
    assert why is None if fits else "nvidia.com/gpu overcommitted" in why


@pytest.mark.asyncio
async def test_a_gang_is_checked_at_its_turn_so_a_pod_gone_meanwhile_stops_it():
    """At most `concurrency` gangs are checked and bound at once, in plan order: the second gang's last check
    runs once the first gang's binds are done, and sees what changed while they were in flight."""
    s, kube = store_with_gang(n_pods=2, gpus=4), FakeKube()
    kube.gate, kube.held = anyio.Event(), anyio.Event()  # the first gang's bind stays in flight until the gate opens
    s.assume("default/a", (("default/w0", "u0", "n1"),))
    s.assume("default/b", (("default/w1", "u1", "n1"),))
    first = GangPlan("default/a", (("default/w0", "u0", "n1"),), 0.0)
    second = GangPlan("default/b", (("default/w1", "u1", "n1"),), 0.0)
    plans_send, plans_receive = anyio.create_memory_object_stream[GangPlan](math.inf)
    bound_send, _bound_receive = streams()
    b = BinderActor(kube, s, SchedulingQueue(), Metrics(), Unfenced(), concurrency=1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(b.run, plans_receive, bound_send)
        plans_send.send_nowait(first)
        plans_send.send_nowait(second)
        plans_send.close()
        with anyio.fail_after(5):
            await kube.held.wait()  # the first gang's bind is in flight, the second gang waits its turn
        s.apply(Event(POD, "DELETED", s.pod("default/w1")))
        kube.gate.set()
    assert kube.bindings == [("w0", "n1")]
    assert not s.is_assumed("default/w1")


@pytest.mark.asyncio
async def test_nothing_is_bound_without_leadership():
    s, kube = store_with_gang(), FakeKube()
    b = BinderActor(kube, s, SchedulingQueue(), Metrics(), Fence(0))
    assert not await b.bind_gang(assumed_plan(s, 3), streams()[0])
    assert kube.bindings == []
    assert kube.calls == []


@pytest.mark.asyncio
async def test_every_bind_is_bounded_by_the_leases_remaining_validity():
    s, kube = store_with_gang(), FakeKube()
    kube.delay = 0.3  # slower than the lease has left: the calls are cut off, not left in flight
    b = BinderActor(kube, s, SchedulingQueue(), Metrics(), Fence(0.1))
    with anyio.fail_after(2):
        assert not await b.bind_gang(assumed_plan(s, 3), streams()[0])
    assert kube.bindings == []
    assert {c[2]["timeout"] for c in kube.calls} == {0.1}


# ---------------------------------------------------------------------------------------------- solver actor


@pytest.mark.asyncio
async def test_a_cycle_assumes_placed_gangs_and_the_next_cycle_does_not_place_them_again():
    s = store_with_gang(n_pods=3, gpus=4)
    actor = solver_actor(s, resync_period=1)
    send, receive = anyio.create_memory_object_stream[GangPlan](math.inf)
    results: Latest[CycleResult] = Latest()
    await actor.cycle(send, results)
    gang_plan = receive.receive_nowait()
    assert sorted(k for k, _u, _n in gang_plan.pods) == ["default/w0", "default/w1", "default/w2"]
    assert {u for _k, u, _n in gang_plan.pods} == {"u0", "u1", "u2"}
    assert all(s.is_assumed(f"default/w{i}") for i in range(3))
    await actor.cycle(send, results)
    assert receive.statistics().current_buffer_used == 0  # assumed pods count as bound: nothing planned twice
    assert (await results.take()).cluster.gangs == ()


@pytest.mark.asyncio
async def test_the_plan_carries_the_uid_that_was_solved_not_the_current_one():
    s = store_with_gang(n_pods=1, gpus=4)
    actor = solver_actor(s, resync_period=1)
    send, receive = anyio.create_memory_object_stream[GangPlan](math.inf)

    real = actor.store.view

    def view_then_recreate(*args, **kwargs):
        view = real(*args, **kwargs)
        # the pod is deleted and created again under its name while the solver runs
        s.apply(
            Event(
                POD,
                "MODIFIED",
                {**s.pod("default/w0"), "metadata": {**s.pod("default/w0")["metadata"], "uid": "recreated"}},
            )
        )
        return view

    actor.store.view = view_then_recreate  # type: ignore[method-assign]
    await actor.cycle(send, Latest())
    (pod,) = receive.receive_nowait().pods
    assert pod[1] == "u0"
    b = BinderActor(FakeKube(), s, SchedulingQueue(), Metrics(), Unfenced())
    assert b.last_check(GangPlan("default/j", (pod,), 0)) == "pod default/w0 was replaced"


@pytest.mark.asyncio
async def test_a_gang_that_does_not_fit_is_reported_not_planned():
    s = store_with_gang(n_pods=5, gpus=4)
    send, receive = anyio.create_memory_object_stream[GangPlan](math.inf)
    results: Latest[CycleResult] = Latest()
    await solver_actor(s, resync_period=1).cycle(send, results)
    assert receive.statistics().current_buffer_used == 0
    (gang,) = (await results.take()).placement.gangs
    assert not gang.placed
    assert "nvidia.com/gpu" in gang.reason


@pytest.mark.asyncio
async def test_a_cycle_that_fails_costs_that_cycle_not_the_scheduler(monkeypatch):
    import gangsolve.cycle as module

    def broken(*_args, **_kwargs):
        raise OverflowError("Python int too large to convert to C long")

    monkeypatch.setattr(module, "solve", broken)
    s = store_with_gang()
    actor = solver_actor(s, resync_period=1)
    send, _receive = anyio.create_memory_object_stream[GangPlan](math.inf)
    assert await actor.cycle(send, Latest()) is None
    assert actor.metrics.schedule_attempts.labels("error")._value.get() == 1
    assert not any(s.is_assumed(f"default/w{i}") for i in range(3))


@pytest.mark.asyncio
async def test_run_stops_when_cancelled_and_closes_the_plan_stream():
    s = store_with_gang()
    send, receive = anyio.create_memory_object_stream[GangPlan](math.inf)
    async with anyio.create_task_group() as tg:
        tg.start_soon(solver_actor(s, resync_period=1).run, send, Latest())
        with anyio.fail_after(10):
            first = await receive.receive()
        tg.cancel_scope.cancel()
    assert first.gang == "default/j"
    with pytest.raises(anyio.EndOfStream):
        await receive.receive()


def test_an_unreadable_object_is_left_out_and_the_rest_still_scheduled():
    bad = k8s_pod_group("bad", "many")
    snap = Snapshot(
        nodes=[k8s_node("n1", gpus=4)],
        pods=[k8s_pod("ok", gpus=1), k8s_pod("b", gpus=1, labels={"scheduling.x-k8s.io/pod-group": "bad"})],
        pod_groups={("scheduling.x-k8s.io", "default", "bad"): bad},
    )
    decided = run_cycle(snap)
    placement, skipped = decided.placement, decided.skipped
    assert [str(e) for e in skipped] == ["PodGroup default/bad: spec.minMember: expected a whole number, got 'many'"]
    assert placement.bindings == {"default/ok": "n1"}  # b waits for a readable PodGroup


def test_a_poison_pod_is_left_out_and_the_rest_still_scheduled():
    """cpu: 1e16 is valid to the API server; its gang is left out (at the edge, or by the solver's bisection),
    never the cycle."""
    snap = Snapshot(
        nodes=[k8s_node("n1", gpus=4)],
        pods=[k8s_pod("ok", gpus=1), k8s_pod("poison", cpu="1e16"), k8s_pod("also-ok", gpus=1)],
    )
    decided = run_cycle(snap)
    placement, skipped = decided.placement, decided.skipped
    assert placement.bindings == {"default/ok": "n1", "default/also-ok": "n1"}
    assert [e.obj for e in skipped] == ["Pod default/poison"]


@pytest.mark.asyncio
async def test_pods_waiting_for_their_definition_are_planned_when_the_grace_ends_without_any_event():
    from datetime import UTC, datetime

    from gangsolve.edge.gangs import Grace

    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node("n1", gpus=4)]))
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    pods = []
    for i in range(2):
        p = k8s_pod(f"w{i}", gpus=1, created=now)
        p["metadata"].update(
            uid=f"u{i}",
            ownerReferences=[
                {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "mnist", "uid": "tf", "controller": True}
            ],
        )
        pods.append(p)
    s.apply(Resync(POD, pods))
    metrics = Metrics()
    actor = solver_actor(
        s,
        metrics,
        scheduler_name="gangsolve",
        group_label=None,
        time_limit=1,
        debounce=0,
        resync_period=60,
        grace=Grace(2.0),
    )
    send, receive = anyio.create_memory_object_stream[GangPlan](math.inf)
    results: Latest[CycleResult] = Latest()
    async with anyio.create_task_group() as tg:
        tg.start_soon(actor.run, send, results)
        first = await results.take()
        assert set(first.waiting) == {"default/w0", "default/w1"}
        assert receive.statistics().current_buffer_used == 0
        with anyio.fail_after(10):  # well before the 60 s resync: the grace's end wakes the actor
            gang_plan = await receive.receive()
        tg.cancel_scope.cancel()
    assert sorted(k for k, _u, _n in gang_plan.pods) == ["default/w0", "default/w1"]
    # What the grace added to their latency: both waited it out, about 2 s after creation (a whole second).
    samples = {s.name: s.value for m in metrics.registry.collect() for s in m.samples}
    assert samples["gangsolve_definition_wait_seconds_count"] == 2
    assert 2 * 1.0 <= samples["gangsolve_definition_wait_seconds_sum"] <= 2 * 4.0
