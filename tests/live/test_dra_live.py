"""DRA in the live scheduler, on the fake client: claim allocations assumed in the store, written by the binder
before the bind (finalizer, allocation, reservation, on the resourceVersion the cycle saw), undone when a bind
fails, and refused by the last check when a device went to another claim meanwhile."""

from __future__ import annotations

import copy
import math

import anyio
import pytest

from gangsolve.live.binder import BinderActor
from gangsolve.live.channels import Latest
from gangsolve.live.fence import Unfenced
from gangsolve.live.messages import Bound, CycleResult, Event, GangPlan, Resync
from gangsolve.live.metrics import Metrics
from gangsolve.live.queue import SchedulingQueue
from gangsolve.live.store import ClusterStore
from tests.builders import (
    DRIVER,
    k8s_claim,
    k8s_device_class,
    k8s_gpu,
    k8s_node,
    k8s_pdb,
    k8s_pod,
    k8s_slice,
    with_claims,
)
from tests.live.actors import solver_actor
from tests.live.fake_kube import FakeKube
from tests.live.resources import CLAIM, CLASS, NODE, PDB, POD, SLICE

FINALIZER = "resource.kubernetes.io/delete-protection"


def claim_path(name: str) -> str:
    return f"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/{name}"


def store_and_kube(n_pods: int = 2, gpus: int = 4) -> tuple[ClusterStore, FakeKube]:
    """A node with `gpus` DRA devices and a gang of `n_pods` pods, each with a claim of one device; the fake
    client holds the same claims (so the binder's writes are checked against their resourceVersion)."""
    s, kube = ClusterStore(), FakeKube()
    s.apply(Resync(NODE, [k8s_node("n1")]))
    s.apply(Resync(CLASS, [k8s_device_class()]))
    s.apply(Resync(SLICE, [k8s_slice("n1", [k8s_gpu(f"gpu-{i}") for i in range(gpus)])]))
    pods, claims = [], []
    for i in range(n_pods):
        claim = k8s_claim(f"c{i}")
        claim["metadata"]["resourceVersion"] = "1"
        claims.append(claim)
        kube.objects[claim_path(f"c{i}")] = copy.deepcopy(claim)
        p = with_claims(k8s_pod(f"w{i}", labels={"job": "j"}), f"c{i}")
        p["metadata"]["uid"] = f"u{i}"
        pods.append(p)
    s.apply(Resync(CLAIM, claims))
    s.apply(Resync(POD, pods))
    s.apply(Resync(PDB, [k8s_pdb("j", n_pods, {"job": "j"})]))
    return s, kube


async def one_cycle(s: ClusterStore) -> GangPlan:
    actor = solver_actor(
        s, Metrics(), scheduler_name="gangsolve", group_label=None, time_limit=1, debounce=0, resync_period=1
    )
    send, receive = anyio.create_memory_object_stream[GangPlan](math.inf)
    results: Latest[CycleResult] = Latest()
    await actor.cycle(send, results)
    return receive.receive_nowait()


def devices(plan: GangPlan) -> list[str]:
    return sorted(r["device"] for w in plan.claims for r in (w.allocation or {})["devices"]["results"])


@pytest.mark.asyncio
async def test_a_cycle_plans_the_claims_and_the_next_cycle_sees_their_devices_taken():
    s, _kube = store_and_kube(n_pods=2, gpus=3)
    plan = await one_cycle(s)
    assert [w.claim for w in plan.claims] == ["default/c0", "default/c1"]
    assert [w.resource_version for w in plan.claims] == ["1", "1"]
    assert devices(plan) == ["gpu-0", "gpu-1"]
    assert set(s.devices_in_use()) == {(DRIVER, "n1", "gpu-0"), (DRIVER, "n1", "gpu-1")}
    # A new pod: only gpu-2 is left, though no claim is allocated in the watch yet.
    claim = k8s_claim("late")
    s.apply(Event(CLAIM, "ADDED", claim))
    s.apply(Event(POD, "ADDED", with_claims(k8s_pod("late"), "late")))
    later = await one_cycle(s)
    assert devices(later) == ["gpu-2"]


@pytest.mark.asyncio
async def test_claims_are_written_before_the_binds():
    s, kube = store_and_kube()
    plan = await one_cycle(s)
    assert await BinderActor(kube, s, SchedulingQueue(), Metrics(), Unfenced()).bind_gang(
        plan, anyio.create_memory_object_stream[Bound](math.inf)[0]
    )
    writes = [(m, p) for m, p, _ in kube.calls if m in ("PUT", "POST")]
    first_bind = next(i for i, (_m, p) in enumerate(writes) if p.endswith("/binding"))
    assert all(p.startswith("/apis/resource.k8s.io") for _m, p in writes[:first_bind])
    assert len(writes[:first_bind]) == 4  # per claim: the finalizer, then allocation and reservation
    for i in range(2):
        claim = kube.objects[claim_path(f"c{i}")]
        assert FINALIZER in claim["metadata"]["finalizers"]
        assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": f"w{i}", "uid": f"u{i}"}]
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert result["pool"] == "n1"
        assert claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [
            "n1"
        ]


@pytest.mark.asyncio
async def test_a_failed_bind_undoes_the_claims_allocation_and_reservation():
    s, kube = store_and_kube()
    kube.fail = {"/w1/binding": 409}
    plan = await one_cycle(s)
    b = BinderActor(kube, s, SchedulingQueue(), Metrics(), Unfenced())
    assert not await b.bind_gang(plan, anyio.create_memory_object_stream[Bound](math.inf)[0])
    undone = kube.objects[claim_path("c1")]
    assert not undone["status"].get("reservedFor")
    assert "allocation" not in undone["status"]
    assert FINALIZER not in undone["metadata"].get("finalizers", [])
    kept = kube.objects[claim_path("c0")]  # w0 was bound: its claim stays
    assert kept["status"]["reservedFor"][0]["uid"] == "u0"
    assert not s.is_assumed("default/w1")
    assert (DRIVER, "n1", devices(plan)[1]) not in s.devices_in_use()  # its assumed allocation is dropped


@pytest.mark.asyncio
async def test_a_claim_changed_since_the_cycle_stops_the_gang_before_any_bind():
    s, kube = store_and_kube()
    plan = await one_cycle(s)
    kube.objects[claim_path("c1")]["metadata"]["resourceVersion"] = "7"  # someone wrote it meanwhile
    b = BinderActor(kube, s, SchedulingQueue(), Metrics(), Unfenced())
    assert not await b.bind_gang(plan, anyio.create_memory_object_stream[Bound](math.inf)[0])
    assert kube.bindings == []
    for name in ("c0", "c1"):  # whatever was written before the refusal is undone
        status = kube.objects[claim_path(name)].get("status") or {}
        assert not status.get("reservedFor")
        assert "allocation" not in status
    assert set(b.queue.backing_off()) == {"default/w0", "default/w1"}


@pytest.mark.asyncio
async def test_the_last_check_refuses_a_device_another_claim_took():
    s, kube = store_and_kube(n_pods=1)
    plan = await one_cycle(s)
    (device,) = devices(plan)
    theirs = k8s_claim("theirs", allocated=[("n1", device)], node="n1")
    s.apply(Event(CLAIM, "ADDED", theirs))
    b = BinderActor(kube, s, SchedulingQueue(), Metrics(), Unfenced())
    assert b.last_check(plan) == f"device {DRIVER}/n1/{device} is allocated to ResourceClaim default/theirs"
    assert not await b.bind_gang(plan, anyio.create_memory_object_stream[Bound](math.inf)[0])
    assert kube.bindings == []
    assert not [c for c in kube.calls if c[0] == "PUT"]


def test_a_claim_allocation_stays_assumed_until_the_watch_shows_it():
    s, _kube = store_and_kube(n_pods=1)
    allocation = {"devices": {"results": [{"request": "gpus", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]}}
    s.assume("g", [("default/w0", "u0", "n1")], [("default/w0", "default/c0", allocation)])
    assert s.snapshot().resource_claims[("default", "c0")]["status"]["allocation"] == allocation
    observed = k8s_claim("c0", allocated=[("n1", "gpu-0")], node="n1")
    s.apply(Event(CLAIM, "MODIFIED", observed))
    assert s.counts()["assumed_claims"] == 0
    s.assume("g", [("default/w0", "u0", "n1")], [("default/w0", "default/c1", allocation)])
    s.forget("default/w0", "u0")
    assert s.counts()["assumed_claims"] == 0


def share_store(asked: str) -> tuple[ClusterStore, FakeKube]:
    """One node with one shared device (capacity `share` 1000) and a pod whose claim asks `asked` of it."""
    s, kube = ClusterStore(), FakeKube()
    s.apply(Resync(NODE, [k8s_node("n1")]))
    s.apply(Resync(CLASS, [k8s_device_class()]))
    device = {"name": "gpu-0", "allowMultipleAllocations": True, "capacity": {"share": {"value": "1000"}}}
    s.apply(Resync(SLICE, [k8s_slice("n1", [device])]))
    claim = k8s_claim("c0")
    claim["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"share": asked}}
    claim["metadata"]["resourceVersion"] = "1"
    kube.objects[claim_path("c0")] = copy.deepcopy(claim)
    s.apply(Resync(CLAIM, [claim]))
    p = with_claims(k8s_pod("w0"), "c0")
    p["metadata"]["uid"] = "u0"
    s.apply(Resync(POD, [p]))
    return s, kube


def their_share(consumed: str) -> dict:
    theirs = k8s_claim("theirs", allocated=[("n1", "gpu-0")], node="n1")
    theirs["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] = {"share": consumed}
    return theirs


@pytest.mark.asyncio
async def test_the_last_check_counts_shares_of_a_device_against_its_capacity():
    s, kube = share_store("600")
    plan = await one_cycle(s)
    (write,) = plan.claims
    (result,) = write.allocation["devices"]["results"]  # type: ignore[index]
    assert result["consumedCapacity"] == {"share": "600"}
    assert result["shareID"]
    b = BinderActor(kube, s, SchedulingQueue(), Metrics(), Unfenced())
    s.apply(Event(CLAIM, "ADDED", their_share("400")))  # another scheduler's share, beside ours: it fits
    assert b.last_check(plan) is None
    s.apply(Event(CLAIM, "MODIFIED", their_share("401")))  # one thousandth too much
    assert b.last_check(plan) == f"device {DRIVER}/n1/gpu-0: its shares consume 1001 of share, above its 1000"
    assert not await b.bind_gang(plan, anyio.create_memory_object_stream[Bound](math.inf)[0])
    assert kube.bindings == []
