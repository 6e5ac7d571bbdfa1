"""GPU shares through DRA consumable capacity (KEP-5075) on the pinned API server: ResourceSlices of devices that
allow multiple allocations, with a `share` capacity and a requestPolicy; each pod a ResourceClaim asking part of
one device. kube-scheduler places a few first; gangsolve places the rest around them, writing each claim's
allocation (its device, what it consumes) before binding; a scheduler started again reads the shares back from
the claims alone. Every check reads the API objects by the API's rules (the oracle below), not gangsolve's code."""

from __future__ import annotations

import contextlib
from collections import defaultdict
from decimal import Decimal

import pytest
from live_helpers import bound, create, pod, pods, poll

from gangsolve.bench.devcluster import ApiError
from gangsolve.bench.manifests import slice_of

pytestmark = pytest.mark.e2e

DRIVER = "share.e2e.gangsolve.io"
POLICY = {"default": "1000", "validRange": {"min": "100", "max": "1000", "step": "50"}}
DEVICES = 2  # per node


_SCALE = {"m": Decimal("0.001"), "k": Decimal(1000), "M": Decimal(10**6)}


def _quantity(text: str) -> Decimal:
    """The quantities this test writes and reads back (the API server writes 1000 as 1k)."""
    return Decimal(text[:-1]) * _SCALE[text[-1]] if text[-1] in _SCALE else Decimal(text)


def _devices(cp, namespace: str, nodes: list[str]) -> str:
    device_class = f"share-{namespace}"
    create(
        cp,
        namespace,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": device_class},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        },
    )
    for node in nodes:
        devices = [
            {
                "name": f"gpu-{i}",
                "allowMultipleAllocations": True,
                "capacity": {"share": {"value": "1000", "requestPolicy": POLICY}},
            }
            for i in range(DEVICES)
        ]
        create(cp, namespace, slice_of(node, DRIVER, devices))
    return device_class


def _share_pod(cp, namespace: str, name: str, share: str | None, scheduler: str, tag: dict, device_class: str) -> None:
    """A pod and its own claim asking `share` of one device (None: a whole device)."""
    exactly: dict = {"deviceClassName": device_class}
    if share is not None:
        exactly["capacity"] = {"requests": {"share": share}}
    create(
        cp,
        namespace,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
        },
    )
    member = pod(name, scheduler=scheduler, node_selector=tag, cpu="100m")
    member["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": name}]
    create(cp, namespace, member)


def _oracle(cp, namespace: str) -> dict[tuple[str, str], Decimal]:
    """What each shared device holds, from the API objects alone; asserts the API's rules: every bound pod's
    claim allocated on its node and reserved for it; each share consumes at least what it asks, rounded up to
    the policy's step; no device over its capacity; a device allocated whole (a request without capacity
    requests) holds nothing else; claims of pods not bound hold nothing."""
    slices = cp.request("GET", "/apis/resource.k8s.io/v1/resourceslices")["items"]
    capacity = {
        (s["spec"]["pool"]["name"], d["name"]): _quantity(d["capacity"]["share"]["value"])
        for s in slices
        if s["spec"]["driver"] == DRIVER
        for d in s["spec"]["devices"]
    }
    claims = {
        c["metadata"]["name"]: c
        for c in cp.request("GET", f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims")["items"]
    }
    held: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    holders: dict[tuple[str, str], list[bool]] = defaultdict(list)  # per device: each allocation, whole or not
    for p in pods(cp, namespace):
        name, node = p["metadata"]["name"], p["spec"].get("nodeName")
        status = claims[name].get("status") or {}
        if not node:
            assert not status.get("reservedFor"), f"{name} not bound, its claim reserved"
            continue
        assert [r["uid"] for r in status["reservedFor"]] == [p["metadata"]["uid"]], name
        (result,) = status["allocation"]["devices"]["results"]
        assert result["pool"] == node, f"{name} on {node}, its device on {result['pool']}"
        asked = claims[name]["spec"]["devices"]["requests"][0]["exactly"].get("capacity")
        consumed = _quantity(result["consumedCapacity"]["share"])
        device = (result["pool"], result["device"])
        if asked is None:
            assert consumed == capacity[device], f"{name}: a whole device, consuming {consumed}"
        else:
            want = _quantity(asked["requests"]["share"])
            assert consumed >= max(want, Decimal(100)), f"{name}: {consumed}"
            assert (consumed - 100) % 50 == 0, f"{name}: {consumed} off the policy's step"
        assert result.get("shareID"), f"{name}: a share without its ID"
        held[device] += consumed
        holders[device].append(asked is None)
    for device, total in held.items():
        assert total <= capacity[device], f"{device} holds {total} of {capacity[device]}"
        assert not any(holders[device]) or len(holders[device]) == 1, f"{device} given whole and shared"
    return dict(held)


def test_dra_shares_placed_beside_kube_schedulers_and_read_back_after_a_restart(
    control_plane, gangsolve_factory, make_nodes, namespace
):
    cp = control_plane
    tag = {"gangsolve.dev/test": namespace}
    nodes = make_nodes(2, gpus=0, labels=tag)
    device_class = _devices(cp, namespace, nodes)
    try:
        # kube-scheduler first: two shares it allocates its way.
        for name, share in (("kube-a", "300"), ("kube-b", "420")):
            _share_pod(cp, namespace, name, share, "default-scheduler", tag, device_class)
        poll(lambda: len(bound(pods(cp, namespace))) == 2, timeout=60, what="kube-scheduler binds its two shares")
        assert sum(_oracle(cp, namespace).values()) == 300 + 450  # 420 rounded up to the step

        # gangsolve: shares of several sizes, a whole device, and a share no device's policy allows.
        scheduler = gangsolve_factory.scheduler_name
        mine = {"a": "600", "b": "400", "c": "230", "d": "500", "whole": None, "too-big": "1200"}
        for name, share in mine.items():
            _share_pod(cp, namespace, name, share, scheduler, tag, device_class)
        first = gangsolve_factory()
        poll(lambda: len(bound(pods(cp, namespace))) == 7, timeout=90, what="gangsolve binds its five good pods")
        held = _oracle(cp, namespace)
        assert sum(held.values()) == 300 + 450 + 600 + 400 + 250 + 500 + 1000

        def too_big() -> str:
            got = cp.get(f"/api/v1/namespaces/{namespace}/pods/too-big") or {}
            conditions = (got.get("status") or {}).get("conditions") or []
            return next((c.get("message", "") for c in conditions if c["type"] == "PodScheduled"), "")

        poll(lambda: "outside the requestPolicy" in too_big(), timeout=30, what="the share too big reported")

        # A new scheduler process knows what the devices hold only from the claims: shares of one size (the
        # largest some device still holds, a step of the policy) fill exactly what is left, and no more.
        assert first.terminate() == 0
        left = [1000 - held.get((n, f"gpu-{i}"), Decimal(0)) for n in nodes for i in range(DEVICES)]
        size = next(s for s in (300, 250, 200, 150, 100) if any(room >= s for room in left))
        room = sum(int(r // size) for r in left)
        for i in range(room + 3):
            _share_pod(cp, namespace, f"filler-{i}", str(size), scheduler, tag, device_class)
        gangsolve_factory(scheduler_name=scheduler)
        poll(lambda: len(bound(pods(cp, namespace))) == 7 + room, timeout=90, what="the fillers that fit bound")
        poll(
            lambda: all(
                (p.get("status") or {}).get("conditions")
                for p in pods(cp, namespace)
                if p["metadata"]["name"].startswith("filler") and not p["spec"].get("nodeName")
            ),
            timeout=30,
            what="the fillers left over reported",
        )
        assert len(bound(pods(cp, namespace))) == 7 + room  # none past the devices' room
        _oracle(cp, namespace)
    finally:
        for node in nodes:
            with contextlib.suppress(ApiError):
                cp.request("DELETE", f"/apis/resource.k8s.io/v1/resourceslices/{node}-{DRIVER}")
        with contextlib.suppress(ApiError):
            cp.request("DELETE", f"/apis/resource.k8s.io/v1/deviceclasses/{device_class}")
