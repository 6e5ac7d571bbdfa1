"""Feedback on the fake client: what pods and PodGroups say, written once per change, fenced, and forgotten
with the objects it was about."""

from __future__ import annotations

import math

import anyio
import pytest

from gangsolve.edge.snapshot import Snapshot
from gangsolve.live.channels import Latest
from gangsolve.live.feedback import Feedback
from gangsolve.live.fence import Unfenced
from gangsolve.live.messages import Bound, CycleResult, Event, Resync
from gangsolve.live.metrics import Metrics
from gangsolve.live.queue import SchedulingQueue
from gangsolve.live.store import ClusterStore
from tests.builders import k8s_node, k8s_pod, k8s_pod_group, k8s_queue
from tests.live.actors import run_cycle
from tests.live.fake_kube import FakeKube
from tests.live.resources import KPG, NODE, POD, QUEUE, XPG


class NoLease:
    def remaining(self) -> float:
        return 0.0


def with_uid(obj: dict, uid: str) -> dict:
    obj["metadata"]["uid"] = uid
    return obj


def feedback(store: ClusterStore, kube: FakeKube, fence=None) -> Feedback:
    return Feedback(kube, store, Metrics(), fence or Unfenced(), identity="t", scheduler_name="gangsolve")


def cycle(store: ClusterStore, queue: SchedulingQueue | None = None) -> CycleResult:
    snap = store.snapshot()
    d = run_cycle(snap)
    skipped = tuple((e.obj, str(e)) for e in d.skipped)
    backing_off = (queue or SchedulingQueue()).backing_off()
    return CycleResult(snap, d.cluster, d.placement, skipped, backing_off, d.waiting, origins=d.origins)


def oversized_gang(store: ClusterStore, uid_prefix: str = "u") -> None:
    store.apply(Resync(NODE, [k8s_node("n1", gpus=2)]))
    pods = [
        with_uid(k8s_pod(f"w{i}", gpus=1, labels={"scheduling.x-k8s.io/pod-group": "pg"}), f"{uid_prefix}{i}")
        for i in range(3)
    ]
    store.apply(Resync(POD, pods))


@pytest.mark.asyncio
async def test_pending_pods_get_the_reason_once_and_an_event():
    s, kube = ClusterStore(), FakeKube()
    oversized_gang(s)
    s.apply(Resync(XPG, [with_uid(k8s_pod_group("pg", 3), "pg1")]))
    fb = feedback(s, kube)
    await fb.apply(cycle(s))
    conditions = [(p, b) for p, b in kube.patches if p.endswith("/status") and "/pods/" in p]
    assert len(conditions) == 3
    _path, body = conditions[0]
    assert body["metadata"]["uid"].startswith("u")  # a precondition: never written onto a recreated pod
    assert "needs 3 nvidia.com/gpu, 2 free" in body["status"]["conditions"][0]["message"]
    assert {e["reason"] for e in kube.events} == {"FailedScheduling"}
    (status,) = [b for p, b in kube.patches if "/podgroups/" in p]
    assert status["status"]["phase"] == "Pending"
    await fb.apply(cycle(s))  # nothing changed: nothing written again
    assert len(kube.patches) == 4


def tfjob_pod(name: str, node_name=None) -> dict:
    pod = with_uid(k8s_pod(name, gpus=1, created="2026-01-01T00:00:00Z", node_name=node_name), f"u-{name}")
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "mnist", "uid": "tf1", "controller": True}
    ]
    return pod


@pytest.mark.asyncio
async def test_pods_of_a_training_job_without_a_gang_definition_say_what_keeps_it_whole():
    """Past its definition grace, a TFJob with no PodGroup or PDB has a minimum of 1: two of its three pods fit
    and are placed, so part of it runs. Every pod gets an event saying what to do, and the one left pending
    says it in its condition too, the cycle its gang was placed in and those after."""
    s, kube = ClusterStore(), FakeKube()
    s.apply(Resync(NODE, [k8s_node("n1", gpus=2)]))
    s.apply(Resync(POD, [tfjob_pod(f"w{i}") for i in range(3)]))
    fb = feedback(s, kube)
    result = cycle(s)
    placed = sorted(result.placement.bindings)
    assert len(placed) == 2
    await fb.apply(result)
    says = "no PodGroup or PDB defines the gang of TFJob mnist: its minimum is 1, so part of it may run; create a"
    events = [e for e in kube.events if e["reason"] == "NoGangDefinition"]
    assert sorted(e["regarding"]["name"] for e in events) == ["w0", "w1", "w2"]
    assert all(e["type"] == "Warning" and e["note"].startswith(says) for e in events)
    (condition,) = [b["status"]["conditions"][0] for p, b in kube.patches if "/pods/" in p]
    assert condition["message"].startswith("placed 2 of 3 pending pods (minMember reached)")
    assert f"; {says}" in condition["message"]
    for key in placed:  # bound: the next cycle has the third pod alone, and it still says so
        s.apply(Event(POD, "MODIFIED", tfjob_pod(key.split("/")[1], node_name="n1")))
    await fb.apply(cycle(s))
    _first, (_path, body) = [(p, b) for p, b in kube.patches if "/pods/" in p]
    assert body["status"]["conditions"][0]["message"].startswith("needs 1 nvidia.com/gpu, 0 free")
    assert f"; {says}" in body["status"]["conditions"][0]["message"]


@pytest.mark.asyncio
async def test_a_pod_group_deleted_and_created_again_gets_its_status_again():
    s, kube = ClusterStore(), FakeKube()
    oversized_gang(s)
    s.apply(Resync(XPG, [with_uid(k8s_pod_group("pg", 3), "first")]))
    fb = feedback(s, kube)
    await fb.apply(cycle(s))
    s.apply(Resync(XPG, [with_uid(k8s_pod_group("pg", 3), "second")]))  # same name, a new object
    await fb.apply(cycle(s))
    statuses = [b["metadata"]["uid"] for p, b in kube.patches if "/podgroups/" in p]
    assert statuses == ["first", "second"]


@pytest.mark.asyncio
async def test_what_was_written_is_forgotten_with_the_objects():
    s, kube = ClusterStore(), FakeKube()
    fb = feedback(s, kube)
    for round_ in range(20):
        oversized_gang(s, uid_prefix=f"r{round_}-")
        s.apply(Resync(XPG, [with_uid(k8s_pod_group("pg", 3), f"pg-{round_}")]))
        await fb.apply(cycle(s))
        assert fb.written() == 4  # three pods and one PodGroup: only what exists now


@pytest.mark.asyncio
async def test_what_was_written_about_a_pod_is_forgotten_once_it_is_bound():
    s, kube = ClusterStore(), FakeKube()
    oversized_gang(s)
    fb = feedback(s, kube)
    await fb.apply(cycle(s))
    assert fb.written() == 3  # each pod marked Unschedulable
    s.apply(Event(NODE, "MODIFIED", k8s_node("n1", gpus=3)))
    bound = [with_uid(k8s_pod(f"w{i}", gpus=1, node_name="n1"), f"u{i}") for i in range(3)]
    for pod in bound:
        s.apply(Event(POD, "MODIFIED", pod))
    await fb.apply(cycle(s))
    assert fb.written() == 0  # bound: never written Unschedulable again, so nothing to remember


@pytest.mark.asyncio
async def test_no_write_once_leadership_has_run_out():
    s, kube = ClusterStore(), FakeKube()
    oversized_gang(s)
    await feedback(s, kube, NoLease()).apply(cycle(s))
    assert kube.patches == []
    assert kube.events == []
    assert {c[2]["timeout"] for c in kube.calls} <= {0.0}


@pytest.mark.asyncio
async def test_a_pod_placed_by_a_newer_cycle_is_not_marked_unschedulable():
    s, kube = ClusterStore(), FakeKube()
    oversized_gang(s)
    result = cycle(s)
    s.assume("default/pg", [(f"default/w{i}", f"u{i}", "n1") for i in range(3)])
    await feedback(s, kube).apply(result)
    assert [p for p, _b in kube.patches if "/pods/" in p] == []


@pytest.mark.asyncio
async def test_pods_backing_off_say_so():
    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node("n1", gpus=4)]))
    s.apply(Resync(POD, [with_uid(k8s_pod("p", gpus=1), "up")]))
    s.assume("default/p", [("default/p", "up", "n1")])
    s.forget("default/p", "up")
    q = SchedulingQueue()
    q.back_off("default/p", "up")
    reasons = feedback(s, FakeKube()).reasons(cycle(s, q))
    assert reasons == {"default/p": "binding failed; trying again in 1s"}


def test_pods_naming_a_missing_pod_group_say_what_they_wait_for():
    snap = Snapshot(
        pods=[
            k8s_pod("a", labels={"scheduling.x-k8s.io/pod-group": "pg"}),
            k8s_pod("b", annotations={"scheduling.k8s.io/group-name": "vg"}),
            k8s_pod("c", scheduler="someone-else", labels={"scheduling.x-k8s.io/pod-group": "pg"}),
        ]
    )
    d = run_cycle(snap)
    reasons = feedback(ClusterStore(), FakeKube()).reasons(CycleResult(snap, d.cluster, d.placement, waiting=d.waiting))
    assert reasons == {
        "default/a": "waiting for PodGroup default/pg (scheduling.x-k8s.io) to exist",
        "default/b": "waiting for PodGroup default/vg (scheduling.volcano.sh) to exist",
    }


def test_pods_of_an_unreadable_pod_group_say_why():
    bad = k8s_pod_group("bad", "many")
    snap = Snapshot(
        nodes=[k8s_node("n1", gpus=4)],
        pods=[k8s_pod("b", gpus=1, labels={"scheduling.x-k8s.io/pod-group": "bad"})],
        pod_groups={("scheduling.x-k8s.io", "default", "bad"): bad},
    )
    d = run_cycle(snap)
    result = CycleResult(snap, d.cluster, d.placement, tuple((e.obj, str(e)) for e in d.skipped), waiting=d.waiting)
    assert feedback(ClusterStore(), FakeKube()).reasons(result) == {
        "default/b": (
            "PodGroup default/bad (scheduling.x-k8s.io) cannot be read: "
            "PodGroup default/bad: spec.minMember: expected a whole number, got 'many'"
        )
    }


@pytest.mark.asyncio
async def test_scheduled_events_for_bound_pods():
    from gangsolve.live.channels import Latest
    from gangsolve.live.messages import Bound

    s, kube = ClusterStore(), FakeKube()
    s.apply(Resync(POD, [with_uid(k8s_pod("p"), "up")]))
    send, receive = anyio.create_memory_object_stream[Bound](math.inf)
    async with anyio.create_task_group() as tg:
        tg.start_soon(feedback(s, kube).run, Latest(), receive)
        send.send_nowait(Bound("default/p", "up", "n1"))
        send.send_nowait(Bound("default/gone", "ug", "n1"))  # deleted since: the event still names it
        with anyio.fail_after(5):
            while len(kube.events) < 2:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert sorted(e["note"] for e in kube.events) == [
        "Successfully assigned default/gone to n1",
        "Successfully assigned default/p to n1",
    ]
    assert {e["regarding"]["uid"] for e in kube.events} == {"up", "ug"}


@pytest.mark.asyncio
async def test_pod_group_status_follows_its_members_between_cycles():
    """Bindings and pods starting to run start no cycle; the PodGroup's phase follows them all the same."""
    s, kube = ClusterStore(), FakeKube()
    s.apply(Resync(NODE, [k8s_node("n1", gpus=4)]))
    labels = {"scheduling.x-k8s.io/pod-group": "pg"}
    pods = [with_uid(k8s_pod(f"w{i}", gpus=1, labels=labels), f"u{i}") for i in range(2)]
    s.apply(Resync(POD, pods))
    s.apply(Resync(XPG, [with_uid(k8s_pod_group("pg", 2), "pg1")]))
    fb = feedback(s, kube)
    await fb.apply(cycle(s))
    s.assume("default/pg", [(f"default/w{i}", f"u{i}", "n1") for i in range(2)])
    async with anyio.create_task_group() as tg:
        tg.start_soon(fb.run, Latest(), anyio.create_memory_object_stream[Bound](math.inf)[1])
        for p in pods:
            running = {**p, "spec": {**p["spec"], "nodeName": "n1"}, "status": {"phase": "Running"}}
            assert not s.apply(Event(POD, "MODIFIED", running))  # our binding confirmed, running: no cycle
        with anyio.fail_after(10):
            while not any(b["status"]["phase"] == "Running" for p, b in kube.patches if "/podgroups/" in p):
                await anyio.sleep(0.1)
        tg.cancel_scope.cancel()
    assert [b["status"]["running"] for p, b in kube.patches if "/podgroups/" in p][-1] == 2


@pytest.mark.asyncio
async def test_each_victim_gets_a_preempted_event_naming_the_gang_and_node():
    from gangsolve.live.messages import Evicted, Victim

    s, kube = ClusterStore(), FakeKube()
    send, receive = anyio.create_memory_object_stream[Evicted](math.inf)
    send.send_nowait(Evicted(Victim("default/low-0", "v0", "n1", "default/urgent", "room")))
    send.close()
    await feedback(s, kube)._scheduled_events(receive)
    (event,) = kube.events
    assert (event["type"], event["reason"], event["action"]) == ("Normal", "Preempted", "Preempting")
    assert event["note"] == "Preempted by gang default/urgent on node n1"
    assert event["regarding"]["name"] == "low-0"
    assert event["regarding"]["uid"] == "v0"


@pytest.mark.asyncio
async def test_every_victim_gets_its_preempted_event_however_many_at_once():
    from gangsolve.live.messages import Evicted, Victim

    s, kube = ClusterStore(), FakeKube()
    fb = Feedback(kube, s, Metrics(), Unfenced(), identity="t", scheduler_name="gangsolve", events_per_second=1.0)
    send, receive = anyio.create_memory_object_stream[Evicted](math.inf)
    for i in range(200):  # far beyond the rate's burst (5 events): FailedScheduling ones would be dropped
        send.send_nowait(Evicted(Victim(f"default/low-{i}", f"v{i}", "n1", "default/urgent", "room")))
    send.close()
    await fb._scheduled_events(receive)
    assert sorted(e["regarding"]["uid"] for e in kube.events) == sorted(f"v{i}" for i in range(200))
    assert {e["reason"] for e in kube.events} == {"Preempted"}


def upstream_group(name: str, min_count: int, uid: str, status: dict | None = None) -> dict:
    pg = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }
    if status is not None:
        pg["status"] = status
    return pg


def upstream_member(name: str, uid: str, **kw) -> dict:
    return with_uid(k8s_pod(name, gpus=1, schedulingGroup={"podGroupName": "kpg"}, **kw), uid)


@pytest.mark.asyncio
async def test_an_upstream_pod_group_gets_the_condition_kube_scheduler_writes():
    s, kube = ClusterStore(), FakeKube()
    s.apply(Resync(NODE, [k8s_node("n1", gpus=2)]))
    s.apply(Resync(POD, [upstream_member(f"w{i}", f"u{i}") for i in range(3)]))
    other = {"type": "DisruptionTarget", "status": "False", "reason": "x", "message": ""}
    s.apply(Resync(KPG, [upstream_group("kpg", 3, "g1", {"conditions": [other]})]))
    await feedback(s, kube).apply(cycle(s))
    (status,) = [b["status"] for p, b in kube.patches if "/podgroups/" in p]
    kept, mine = status["conditions"]
    assert kept == other  # a merge patch replaces the list: conditions of others go back as they were
    assert {k: mine[k] for k in ("type", "status", "reason")} == {
        "type": "PodGroupInitiallyScheduled",
        "status": "False",
        "reason": "Unschedulable",
    }
    assert "needs 3 nvidia.com/gpu, 2 free" in mine["message"]


@pytest.mark.asyncio
async def test_an_upstream_pod_group_once_scheduled_stays_so_and_others_pods_groups_are_left_alone():
    s, kube = ClusterStore(), FakeKube()
    s.apply(Resync(NODE, [k8s_node("n1", gpus=1)]))  # the gang no longer fits: still True
    scheduled = {"type": "PodGroupInitiallyScheduled", "status": "True", "reason": "Scheduled", "message": ""}
    s.apply(Resync(POD, [upstream_member("w0", "u0"), upstream_member("w1", "u1", scheduler="default-scheduler")]))
    s.apply(Resync(KPG, [upstream_group("kpg", 2, "g1", {"conditions": [scheduled]})]))
    await feedback(s, kube).apply(cycle(s))
    assert [p for p, _b in kube.patches if "/podgroups/" in p] == []  # kube-scheduler's pods: its status
    s.apply(Resync(POD, [upstream_member("w0", "u0"), upstream_member("w1", "u1")]))
    await feedback(s, kube).apply(cycle(s))
    assert [p for p, _b in kube.patches if "/podgroups/" in p] == []  # True is terminal: nothing to write


@pytest.mark.asyncio
async def test_a_queue_gets_what_its_pods_hold_and_a_gang_its_cap_holds_back_says_so():
    s, kube = ClusterStore(), FakeKube()
    s.apply(Resync(NODE, [k8s_node("n1", gpus=8)]))
    s.apply(Resync(QUEUE, [with_uid(k8s_queue("team", capability={"nvidia.com/gpu": "2"}), "q1")]))
    team = {"gangsolve.io/queue": "team"}
    s.apply(Resync(POD, [with_uid(k8s_pod(f"p{i}", gpus=1, annotations=team), f"u{i}") for i in range(3)]))
    fb = feedback(s, kube)
    result = cycle(s)
    await fb.apply(result)
    (path, body), *_ = [(p, b) for p, b in kube.patches if "/queues/" in p]
    assert path == "/apis/scheduling.volcano.sh/v1beta1/queues/team/status"
    assert body == {
        "metadata": {"uid": "q1"},
        "status": {"allocated": {"cpu": "2", "memory": "2Gi", "nvidia.com/gpu": "2"}},
    }
    (held,) = [b for p, b in kube.patches if "/pods/" in p]
    message = held["status"]["conditions"][0]["message"]
    assert message == "held by queue team's capability: needs 1 nvidia.com/gpu, 0 left under its cap"
    await fb.apply(cycle(s))
    assert len([p for p, _b in kube.patches if "/queues/" in p]) == 1  # unchanged: not written again

    metrics = Metrics()
    metrics.observe_queues(result.cluster, result.placement)
    sample = metrics.registry.get_sample_value
    assert sample("gangsolve_queue_allocated", {"queue": "team", "resource": "nvidia.com/gpu"}) == 2
    assert sample("gangsolve_queue_capability", {"queue": "team", "resource": "nvidia.com/gpu"}) == 2
    assert sample("gangsolve_queue_pending_gangs", {"queue": "team"}) == 1
    assert sample("gangsolve_queue_share", {"queue": "team"}) == 0.25
