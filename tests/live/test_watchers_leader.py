"""The watcher (list, watch, bookmarks, 410, ERROR events, missing kinds) and the leader elector (take, renew,
lose, release) on the fake client."""

from __future__ import annotations

import math

import anyio
import pytest

from gangsolve.live.kube import ApiError
from gangsolve.live.leader import LeaderElector, LeadershipLost
from gangsolve.live.messages import Event, Resync
from gangsolve.live.watchers import Watcher
from tests.live.fake_kube import FakeKube
from tests.live.resources import POD, XPG  # XPG: an optional CRD


def page(items: list[dict], rv: str, cont: str = "") -> dict:
    return {"kind": "PodList", "metadata": {"resourceVersion": rv, "continue": cont}, "items": items}


def obj(name: str, rv: str) -> dict:
    return {"metadata": {"name": name, "namespace": "default", "resourceVersion": rv}}


def event(etype: str, name: str, rv: str) -> dict:
    return {"type": etype, "object": obj(name, rv)}


async def received(kube: FakeKube, resource, count: int) -> list[Event | Resync]:
    """Run a watcher until it has sent `count` messages."""
    send, receive = anyio.create_memory_object_stream[Event | Resync](math.inf)
    watcher = Watcher(kube, resource)
    out: list[Event | Resync] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(watcher.run, send)
        with anyio.fail_after(5):
            while len(out) < count:
                out.append(await receive.receive())
        tg.cancel_scope.cancel()
    return out


@pytest.mark.asyncio
async def test_lists_every_page_then_watches_from_the_lists_resource_version():
    kube = FakeKube()
    kube.lists[POD.path].extend([page([obj("a", "1"), obj("b", "2")], "10", cont="next"), page([obj("c", "3")], "11")])
    kube.watches[POD.path].append([event("ADDED", "d", "12")])
    resync, added = await received(kube, POD, 2)
    assert isinstance(resync, Resync)
    assert [o["metadata"]["name"] for o in resync.objects] == ["a", "b", "c"]
    assert {o["kind"] for o in resync.objects} == {"Pod"}
    assert isinstance(added, Event)
    assert (added.type, added.obj["metadata"]["name"]) == ("ADDED", "d")
    lists = [c for c in kube.calls if c[0] == "GET"]
    assert [c[2].get("continue") for c in lists] == [None, "next"]
    assert {c[2].get("resourceVersion") for c in lists} == {"0"}  # from the watch cache, as informers list
    watch = next(c for c in kube.calls if c[0] == "WATCH")
    assert watch[2]["resourceVersion"] == "11"
    assert watch[2]["allowWatchBookmarks"] == "true"


@pytest.mark.asyncio
async def test_a_watch_resumes_from_the_last_bookmark():
    kube = FakeKube()
    kube.lists[POD.path].append(page([], "10"))
    kube.watches[POD.path].extend([[{"type": "BOOKMARK", "object": obj("", "20")}], [event("MODIFIED", "a", "21")]])
    _resync, modified = await received(kube, POD, 2)
    assert modified.type == "MODIFIED"
    rvs = [c[2]["resourceVersion"] for c in kube.calls if c[0] == "WATCH"]
    assert rvs[:2] == ["10", "20"]  # the bookmark moved the resume point; nothing was sent for it


@pytest.mark.parametrize(
    "expired",
    [
        [{"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old resource version"}}],
        ApiError(410, b'{"reason":"Expired"}', "WATCH", POD.path),
    ],
)
@pytest.mark.asyncio
async def test_410_gone_lists_again(expired):
    kube = FakeKube()
    kube.lists[POD.path].extend([page([obj("a", "1")], "10"), page([obj("b", "2")], "30")])
    kube.watches[POD.path].append(expired)
    first, second = await received(kube, POD, 2)
    assert [o["metadata"]["name"] for o in first.objects] == ["a"]
    assert isinstance(second, Resync)  # the relist is a full Resync, so deletions missed meanwhile are seen
    assert [o["metadata"]["name"] for o in second.objects] == ["b"]


@pytest.mark.asyncio
async def test_other_error_events_back_off_and_resume_from_the_same_point():
    kube = FakeKube()
    errors = []
    kube.lists[POD.path].append(page([], "10"))
    kube.watches[POD.path].extend(
        [
            [{"type": "ERROR", "object": {"kind": "Status", "code": 500, "message": "etcd leader changed"}}],
            [event("ADDED", "a", "11")],
        ]
    )
    send, receive = anyio.create_memory_object_stream[Event | Resync](math.inf)
    watcher = Watcher(kube, POD, on_error=lambda kind, reason: errors.append((kind, reason)))
    async with anyio.create_task_group() as tg:
        tg.start_soon(watcher.run, send)
        with anyio.fail_after(5):
            await receive.receive()
            added = await receive.receive()
        tg.cancel_scope.cancel()
    assert added.obj["metadata"]["name"] == "a"
    assert errors == [("Pod.v1", "500")]
    assert [c[2]["resourceVersion"] for c in kube.calls if c[0] == "WATCH"][:2] == ["10", "10"]


@pytest.mark.asyncio
async def test_a_kind_not_served_is_an_empty_resync_and_counts_as_synced():
    kube = FakeKube()
    kube.fail = {XPG.path: 404}
    send, receive = anyio.create_memory_object_stream[Event | Resync](math.inf)
    watcher = Watcher(kube, XPG, missing_recheck=60)
    async with anyio.create_task_group() as tg:
        tg.start_soon(watcher.run, send)
        with anyio.fail_after(5):
            resync = await receive.receive()
            await watcher.synced.wait()
        tg.cancel_scope.cancel()
    assert resync == Resync(XPG, [])


# ---------------------------------------------------------------------------------------------- leader


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


LEASES = "/apis/coordination.k8s.io/v1/namespaces/ns/leases"


def elector(kube: FakeKube, identity: str, clock: Clock) -> LeaderElector:
    return LeaderElector(
        kube,
        name="gs",
        namespace="ns",
        identity=identity,
        lease_duration=3,
        renew_deadline=2,
        retry_period=0.05,
        clock=clock,
    )


@pytest.mark.asyncio
async def test_takes_a_missing_lease_and_a_second_candidate_waits_for_it_to_expire():
    kube, clock = FakeKube(), Clock()
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    with anyio.fail_after(5):
        await a.acquire()
    assert kube.objects[f"{LEASES}/gs"]["spec"]["holderIdentity"] == "a"
    assert kube.objects[f"{LEASES}/gs"]["spec"]["leaseDurationSeconds"] == 3
    assert a.remaining() == 2
    assert not await b._try(timeout=None)  # held and fresh
    clock.now += 3.5  # a stops renewing; b has watched the same record for longer than the lease duration
    assert await b._try(timeout=None)
    assert kube.objects[f"{LEASES}/gs"]["spec"]["holderIdentity"] == "b"
    assert kube.objects[f"{LEASES}/gs"]["spec"]["leaseTransitions"] == 1


@pytest.mark.asyncio
async def test_keep_raises_the_moment_leadership_is_no_longer_valid():
    kube, clock = FakeKube(), Clock()
    a = elector(kube, "a", clock)
    await a.acquire()
    kube.steal(f"{LEASES}/gs", "b")  # someone else holds it now: renewals fail
    clock.now += 2.0  # the renew deadline has passed
    with anyio.fail_after(5), pytest.raises(LeadershipLost):
        await a.keep()
    assert a.remaining() == 0
    assert not a.leading


@pytest.mark.asyncio
async def test_renewals_extend_validity_from_when_they_started():
    kube, clock = FakeKube(), Clock()
    a = elector(kube, "a", clock)
    await a.acquire()
    clock.now += 1.5
    async with anyio.create_task_group() as tg:
        tg.start_soon(a.keep)
        with anyio.fail_after(5):
            while a.remaining() <= 0.5:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert a.remaining() == 2  # renewed at 1.5: valid until 3.5
    renewals = [c for c in kube.calls if c[0] == "PUT"]
    assert renewals
    assert all(0 < c[2]["timeout"] <= 0.5 for c in renewals)  # never longer than leadership had left


@pytest.mark.asyncio
async def test_release_hands_the_lease_back():
    kube, clock = FakeKube(), Clock()
    a = elector(kube, "a", clock)
    await a.acquire()
    await a.release()
    assert not kube.objects[f"{LEASES}/gs"]["spec"]["holderIdentity"]
    assert a.remaining() == 0
    b = elector(kube, "b", clock)
    assert await b._try(timeout=None)  # at once: no need to wait for an expiry
