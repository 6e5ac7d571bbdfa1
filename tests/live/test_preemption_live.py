"""Preemption in the live scheduler, on the fake client: the store shows nominations and victims in flight
until the watch has them, the solver actor decides and records them, the binder nominates first and then
evicts (DisruptionTarget, then a delete with the uid as precondition), forgets what it could not do, and
feedback says Preempted on each victim."""

from __future__ import annotations

import math

import anyio
import pytest

from gangsolve.live.binder import BinderActor
from gangsolve.live.channels import Latest
from gangsolve.live.fence import Unfenced
from gangsolve.live.messages import Bound, CycleResult, Event, Evicted, GangPlan, Preemption, Resync, Victim
from gangsolve.live.metrics import Metrics
from gangsolve.live.queue import SchedulingQueue
from gangsolve.live.store import ClusterStore
from tests.builders import k8s_node, k8s_pod
from tests.live.actors import solver_actor
from tests.live.fake_kube import FakeKube
from tests.live.resources import NODE, POD


def with_uid(pod: dict, uid: str) -> dict:
    pod["metadata"]["uid"] = uid
    return pod


def busy_store() -> ClusterStore:
    """One 4-GPU node full of a low-priority gang (owner job `low`, min 1), and a pending high-priority pod."""
    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node("n1", gpus=4)]))
    victims = [
        with_uid(k8s_pod(f"low-{i}", gpus=1, node_name="n1", phase="Running", owner="low", priority=0), f"v{i}")
        for i in range(4)
    ]
    for i, v in enumerate(victims):  # low-3 started last
        v["status"]["startTime"] = f"2026-01-01T10:0{i}:00Z"
    s.apply(Resync(POD, [*victims, with_uid(k8s_pod("high", gpus=2, priority=100), "h")]))
    return s


def test_the_store_shows_a_nomination_until_the_watch_has_it_and_a_cleared_one_as_cleared():
    s = busy_store()
    s.nominate([("default/high", "h", "n1")])
    assert s.snapshot().pods[-1]["status"]["nominatedNodeName"] == "n1"
    observed = {**s.pod("default/high"), "status": {"phase": "Pending", "nominatedNodeName": "n1"}}
    s.apply(Event(POD, "MODIFIED", observed))
    assert s.counts()["nominated"] == 0
    s.nominate([("default/high", "h", None)])  # cleared: hidden at once, though the object still says n1
    assert s.snapshot().pods[-1]["status"]["nominatedNodeName"] is None
    s.forget_nomination("default/high", "h")  # the patch failed: what the API server has shows again
    assert s.snapshot().pods[-1]["status"]["nominatedNodeName"] == "n1"


def test_the_store_shows_a_victim_leaving_until_the_watch_shows_it_terminating():
    s = busy_store()
    s.evict([("default/low-0", "v0")])
    leaving = [p for p in s.snapshot().pods if p["metadata"].get("deletionTimestamp")]
    assert [p["metadata"]["name"] for p in leaving] == ["low-0"]
    terminating = {**s.pod("default/low-0")}
    terminating["metadata"] = {**terminating["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}
    s.apply(Event(POD, "MODIFIED", terminating))
    assert s.counts()["evicting"] == 0
    s.evict([("default/low-1", "v1")])
    generation = s.generation
    s.forget_eviction("default/low-1", "v1")
    assert s.generation > generation
    assert not s.snapshot().pods[1]["metadata"].get("deletionTimestamp")


@pytest.mark.asyncio
async def test_a_cycle_that_preempts_records_and_sends_the_preemption():
    s = busy_store()
    actor = solver_actor(
        s, Metrics(), scheduler_name="gangsolve", group_label=None, time_limit=2, debounce=0, resync_period=30
    )
    send, receive = anyio.create_memory_object_stream[GangPlan | Preemption](math.inf)
    await actor.cycle(send, Latest[CycleResult]())
    (sent,) = [receive.receive_nowait()]
    assert isinstance(sent, Preemption)
    assert sent.nominations == (("default/high", "h", "n1"),)
    assert sorted(v.pod for v in sent.victims) == ["default/low-2", "default/low-3"]  # one gang, min 1: two go
    assert all(v.preemptor == "default/high" for v in sent.victims)
    snap = s.snapshot()
    assert {p["metadata"]["name"] for p in snap.pods if p["metadata"].get("deletionTimestamp")} == {"low-2", "low-3"}
    # The next cycle holds the room for it and preempts nothing more.
    await actor.cycle(send, Latest[CycleResult]())
    with pytest.raises(anyio.WouldBlock):
        receive.receive_nowait()
    # With preemption off, nothing is evicted.
    off = busy_store()
    actor = solver_actor(
        off,
        Metrics(),
        scheduler_name="gangsolve",
        group_label=None,
        time_limit=2,
        debounce=0,
        resync_period=30,
        preemption=False,
    )
    await actor.cycle(send, Latest[CycleResult]())
    with pytest.raises(anyio.WouldBlock):
        receive.receive_nowait()


@pytest.mark.asyncio
async def test_a_nominated_pod_no_longer_nominated_and_not_placed_is_cleared():
    s = busy_store()
    stale = {**s.pod("default/high"), "status": {"phase": "Pending", "nominatedNodeName": "gone-node"}}
    s.apply(Event(POD, "MODIFIED", stale))
    actor = solver_actor(
        s, Metrics(), scheduler_name="gangsolve", group_label=None, time_limit=2, debounce=0, resync_period=30
    )
    send, receive = anyio.create_memory_object_stream[GangPlan | Preemption](math.inf)
    await actor.cycle(send, Latest[CycleResult]())
    sent = receive.receive_nowait()
    assert isinstance(sent, Preemption)
    assert sent.nominations == (("default/high", "h", "n1"),)  # the stale one is replaced by a new choice


def preemption() -> Preemption:
    victims = tuple(Victim(f"default/low-{i}", f"v{i}", "n1", "default/high", "room") for i in (2, 3))
    return Preemption((("default/high", "h", "n1"),), victims, 0.0)


@pytest.mark.asyncio
async def test_the_binder_nominates_then_marks_and_deletes_each_victim_with_its_uid():
    s, kube, metrics = busy_store(), FakeKube(), Metrics()
    send, receive = anyio.create_memory_object_stream[Bound | Evicted](math.inf)
    await BinderActor(kube, s, SchedulingQueue(), metrics, Unfenced()).preempt(preemption(), send)
    writes = [(m, p) for m, p, _d in kube.calls]
    assert writes[0] == ("PATCH", "/api/v1/namespaces/default/pods/high/status")
    assert kube.patches[0][1] == {"metadata": {"uid": "h"}, "status": {"nominatedNodeName": "n1"}}
    conditions = {p: b["status"]["conditions"][0] for p, b in kube.patches[1:]}
    assert set(conditions) == {f"/api/v1/namespaces/default/pods/low-{i}/status" for i in (2, 3)}
    assert all(c["type"] == "DisruptionTarget" and c["reason"] == "PreemptionByScheduler" for c in conditions.values())
    assert sorted(kube.deletes) == [
        (f"/api/v1/namespaces/default/pods/low-{i}", {**DELETE, "preconditions": {"uid": f"v{i}"}}) for i in (2, 3)
    ]
    assert sorted(receive.receive_nowait().victim.pod for _ in range(2)) == ["default/low-2", "default/low-3"]
    assert metrics.evictions.labels("evicted")._value.get() == 2


DELETE = {"apiVersion": "v1", "kind": "DeleteOptions"}


@pytest.mark.asyncio
async def test_a_victim_already_gone_is_fine_and_one_that_cannot_be_deleted_is_forgotten():
    s, kube, metrics = busy_store(), FakeKube(), Metrics()
    s.nominate([("default/high", "h", "n1")])
    s.evict([("default/low-2", "v2"), ("default/low-3", "v3")])
    kube.fail = {"/low-2": 404, "/low-3": 500}
    send, _receive = anyio.create_memory_object_stream[Bound | Evicted](math.inf)
    await BinderActor(kube, s, SchedulingQueue(), metrics, Unfenced()).preempt(preemption(), send)
    assert metrics.evictions.labels("gone")._value.get() == 1
    assert metrics.evictions.labels("failed")._value.get() == 1
    assert sum(1 for m, p, _d in kube.calls if m == "PATCH" and "low-3" in p) == 3  # tried three times
    assert s.counts()["evicting"] == 1  # low-2 stays leaving until the watch shows it gone; low-3 runs again


@pytest.mark.asyncio
async def test_without_the_lease_nothing_is_written_and_everything_is_forgotten():
    class Expired:
        def remaining(self) -> float:
            return 0.0

    s, kube = busy_store(), FakeKube()
    s.nominate([("default/high", "h", "n1")])
    s.evict([("default/low-2", "v2"), ("default/low-3", "v3")])
    send, _receive = anyio.create_memory_object_stream[Bound | Evicted](math.inf)
    await BinderActor(kube, s, SchedulingQueue(), Metrics(), Expired()).preempt(preemption(), send)
    assert kube.calls == []
    assert s.counts()["nominated"] == 0
    assert s.counts()["evicting"] == 0
