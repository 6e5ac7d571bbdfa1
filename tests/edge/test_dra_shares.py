"""DRA consumable capacity offline (KEP-5075): shared devices hold claims' shares up to their capacity, rounded
by the requestPolicy as Kubernetes does; whole-device requests and shares never mix on one device."""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction

import jsonschema
import orjson
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from gangsolve.cli import cli
from gangsolve.edge import dra, dra_capacity
from gangsolve.edge.gangs import build_cluster, waiting
from gangsolve.edge.quantity import parse_quantity
from gangsolve.edge.snapshot import Snapshot
from gangsolve.solver import SolveConfig, solve, validate
from gangsolve.solver.devices import Capacity, allocate
from gangsolve.solver.validate import validate_devices
from tests.builders import DRIVER, k8s_device_class, k8s_gpu, k8s_list, k8s_node, k8s_pod, k8s_slice, with_claims
from tests.test_docs import SCHEMA


def shared_gpu(name: str, share: str = "1000", policy: dict | None = None, **capacity: str) -> dict:
    """A device that allows multiple allocations, with a capacity `share` (and `capacity`'s others)."""
    caps = {"share": {"value": share, **({"requestPolicy": policy} if policy else {})}}
    caps.update({k: {"value": v} for k, v in capacity.items()})
    return {"name": name, "allowMultipleAllocations": True, "capacity": caps}


def share_claim(name: str, share: str | None = "500", count: int = 1, **more: str) -> dict:
    """A claim asking `share` (None: nothing, a whole device) of `count` devices of the class."""
    exactly: dict = {"deviceClassName": DRIVER, "count": count}
    asked = ({"share": share} if share is not None else {}) | more
    if asked:
        exactly["capacity"] = {"requests": asked}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}},
    }


def allocated(claim: dict, node: str, device: str, consumed: dict | None) -> dict:
    result = {"request": "gpus", "driver": DRIVER, "pool": node, "device": device}
    if consumed is not None:
        result["consumedCapacity"] = consumed
    claim["status"] = {"allocation": {"devices": {"results": [result]}}}
    return claim


def pods(*claims: dict) -> list[dict]:
    """Each claim and a pending pod using it."""
    out = []
    for c in claims:
        name = c["metadata"]["name"]
        out += [c, with_claims(k8s_pod(name), name)]
    return out


def snapshot(*objs: dict) -> Snapshot:
    snap = Snapshot()
    for obj in objs:
        snap.add(obj)
    return snap


def cycle(snap: Snapshot) -> tuple[dict, dict]:
    """One cycle as `gangsolve solve` runs it, checked by both oracles and by the capacity count below."""
    cluster = build_cluster(snap)
    model = dra.model(snap, "gangsolve")
    placement, allocations = allocate(cluster, solve(cluster, SolveConfig(time_limit=1)), model.state)
    assert validate(cluster, placement) == []
    assert validate_devices(model.state, placement, allocations) == []
    return dict(placement.bindings), dict(allocations)


def held(snap: Snapshot, allocations: dict) -> dict[tuple[str, str], Fraction]:
    """Share consumed per (pool, device): the allocated claims' consumedCapacity plus the new allocations' as the
    binder would write them, read back from the written objects only."""
    model = dra.model(snap, "gangsolve")
    out: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
    results = [
        r
        for c in snap.resource_claims.values()
        for r in ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", [])
    ]
    for claim, devices in allocations.items():
        results += dra.allocation_result(claim, devices, "n1", model.state)["devices"]["results"]  # type: ignore[index]
    for r in results:
        out[(r["pool"], r["device"])] += Fraction(parse_quantity(r.get("consumedCapacity", {}).get("share", "1000")))
    return dict(out)


def test_shares_fill_a_device_up_to_its_capacity_and_no_further():
    snap = snapshot(
        k8s_node("n1"),
        k8s_device_class(),
        k8s_slice("n1", [shared_gpu("gpu-0"), shared_gpu("gpu-1")]),
        *pods(*(share_claim(f"c{i}", "300") for i in range(7))),
    )
    bindings, allocations = cycle(snap)
    assert len(bindings) == 6  # three 0.3 shares per device: a seventh fits on neither
    assert all(v <= 1000 for v in held(snap, allocations).values())
    assert sorted(held(snap, allocations).values()) == [900, 900]


def test_best_fit_keeps_a_device_whole_for_a_large_share():
    snap = snapshot(
        k8s_node("n1"),
        k8s_device_class(),
        k8s_slice("n1", [shared_gpu("gpu-0"), shared_gpu("gpu-1")]),
        allocated(share_claim("old", "600"), "n1", "gpu-1", {"share": "600"}),
        *pods(share_claim("small", "400")),
    )
    _bindings, allocations = cycle(snap)
    assert allocations["default/small"] == (("gpus", (DRIVER, "n1", "gpu-1")),)  # the shared one, filled up


def test_a_share_goes_only_to_a_shared_device_with_the_capacity_it_asks():
    plain = {"name": "gpu-0", "capacity": {"share": {"value": "1000"}}}  # allows no multiple allocations
    other = {"name": "gpu-1", "allowMultipleAllocations": True, "capacity": {"memory": {"value": "80Gi"}}}
    snap = snapshot(
        k8s_node("n1"),
        k8s_device_class(),
        k8s_slice("n1", [plain, other, shared_gpu("gpu-2")]),
        *pods(share_claim("a", "500"), share_claim("b", "500"), share_claim("c", "500")),
    )
    bindings, allocations = cycle(snap)
    assert len(bindings) == 2
    assert {d for got in allocations.values() for _r, d in got} == {(DRIVER, "n1", "gpu-2")}


def test_the_solver_sees_shares_that_fit_in_sum_but_not_device_by_device():
    # 0.81 + 0.47 + 0.46 + 0.22 fit two devices in sum, not one by one (0.81 leaves 0.19): the 0.22 share must
    # go to n2's small device, which only it fits.
    snap = snapshot(
        k8s_node("n1"),
        k8s_node("n2"),
        k8s_device_class(),
        k8s_slice("n1", [shared_gpu("gpu-0"), shared_gpu("gpu-1")]),
        k8s_slice("n2", [shared_gpu("gpu-0", share="300")]),
        *pods(*(share_claim(f"s{m}", str(m)) for m in (810, 470, 460, 220))),
    )
    cluster = build_cluster(snap)
    n1 = next(n for n in cluster.nodes if n.name == "n1")
    asked: dict[str, int] = defaultdict(int)
    for pod in (p for g in cluster.gangs for p in g.pods):
        for resource, amount in pod.requests.items():
            asked[resource] += amount
    over = [r for r, q in asked.items() if r.startswith("dra/") and q > n1.allocatable.get(r, 0) - n1.used.get(r, 0)]
    assert over, "the model lets all four onto n1's two devices"
    assert all(" cut " in r for r in over)  # the room summed and the shares of each size do not see it
    bindings, _allocations = cycle(snap)
    assert bindings == {"default/s810": "n1", "default/s470": "n1", "default/s460": "n1", "default/s220": "n2"}


def test_a_whole_device_counts_all_of_one_in_the_room_of_shares():
    # n1's gpu-0 holds 400; a whole-device request and shares of 200, 300 and 500 fit n1's room (600 + 1000)
    # only without the whole device: the shares go to n2.
    snap = snapshot(
        k8s_node("n1"),
        k8s_node("n2"),
        k8s_device_class(),
        k8s_slice("n1", [shared_gpu("gpu-0"), shared_gpu("gpu-1")]),
        k8s_slice("n2", [shared_gpu("gpu-0"), shared_gpu("gpu-1")]),
        allocated(share_claim("old", "400"), "n1", "gpu-0", {"share": "400"}),
        *pods(share_claim("whole", None), *(share_claim(f"s{m}", str(m)) for m in (200, 300, 500))),
    )
    bindings, allocations = cycle(snap)
    assert len(bindings) == 4
    assert allocations["default/whole"] == (("gpus", (DRIVER, "n1", "gpu-1")),) or bindings["default/whole"] == "n2"


def test_shares_of_a_claim_with_match_attribute_are_on_devices_of_one_value():
    devices = [shared_gpu(f"gpu-{i}") for i in range(4)]
    for i, d in enumerate(devices):
        d["attributes"] = {"pcieRoot": {"string": f"r{i // 2}"}}
    two = share_claim("two", "300", count=2)
    two["spec"]["devices"]["constraints"] = [{"matchAttribute": f"{DRIVER}/pcieRoot"}]
    snap = snapshot(
        k8s_node("n1"), k8s_device_class(), k8s_slice("n1", devices), *pods(two, share_claim("whole", None))
    )
    bindings, allocations = cycle(snap)  # (a whole request beside it: both kinds of requirement modelled)
    assert len(bindings) == 2
    roots = {int(d[2].split("-")[1]) // 2 for _r, d in allocations["default/two"]}
    assert len(roots) == 1
    assert len({d for _r, d in allocations["default/two"]}) == 2  # two devices, a share of each


def test_shares_of_different_capacities_on_overlapping_devices():
    # gpu-0 has memory and cores, gpu-1 cores only: shares of memory and shares of cores overlap on gpu-0 (each
    # consumes the other capacity's default, 0).
    free = {"default": "0", "validRange": {"min": "0"}}
    both = {"name": "gpu-0", "allowMultipleAllocations": True, "capacity": {}}
    both["capacity"] = {
        "memory": {"value": "80Gi", "requestPolicy": free},
        "cores": {"value": "100", "requestPolicy": free},
    }
    cores = {"name": "gpu-1", "allowMultipleAllocations": True, "capacity": {"cores": {"value": "100"}}}
    snap = snapshot(
        k8s_node("n1"),
        k8s_device_class(),
        k8s_slice("n1", [both, cores]),
        *pods(
            share_claim("m", None, memory="30Gi"),
            share_claim("c1", None, cores="60"),
            share_claim("c2", None, cores="60"),
        ),
    )
    bindings, allocations = cycle(snap)
    assert len(bindings) == 3  # 60 cores on each device; the memory share beside those on gpu-0
    assert {d[2] for got in allocations.values() for _r, d in got} == {"gpu-0", "gpu-1"}


def test_capacity_requests_filter_devices_that_allow_no_multiple_allocations():
    # As Kubernetes reads them there: a device with at least that much, given whole.
    small, big = k8s_gpu("gpu-0", memory="40Gi"), k8s_gpu("gpu-1", memory="80Gi")
    snap = snapshot(
        k8s_node("n1"),
        k8s_device_class(),
        k8s_slice("n1", [small, big]),
        *pods(share_claim("a", None, memory="50Gi"), share_claim("b", None, memory="50Gi"), share_claim("c", None)),
    )
    bindings, allocations = cycle(snap)
    assert len(bindings) == 2  # one of a and b on gpu-1; c on gpu-0
    assert sorted(d[2] for got in allocations.values() for _r, d in got) == ["gpu-0", "gpu-1"]
    model = dra.model(snap, "gangsolve")
    for claim, got in allocations.items():
        result = dra.allocation_result(claim, got, "n1", model.state)["devices"]["results"][0]  # type: ignore[index]
        assert "consumedCapacity" not in result  # a whole device: nothing shared


def test_running_shares_are_counted_from_the_claims_consumed_capacity():
    snap = snapshot(
        k8s_node("n1"),
        k8s_device_class(),
        k8s_slice("n1", [shared_gpu("gpu-0")]),
        allocated(share_claim("old", "700"), "n1", "gpu-0", {"share": "700"}),
        *pods(share_claim("a", "300"), share_claim("b", "100")),
    )
    bindings, allocations = cycle(snap)
    assert len(bindings) == 1
    assert held(snap, allocations) == {("n1", "gpu-0"): 1000}


def test_whole_requests_and_shares_never_mix_on_a_device():
    devices = k8s_slice("n1", [shared_gpu("gpu-0"), shared_gpu("gpu-1")])
    snap = snapshot(
        k8s_node("n1"),
        k8s_device_class(),
        devices,
        allocated(share_claim("old", "100"), "n1", "gpu-0", {"share": "100"}),
        *pods(share_claim("whole-a", None), share_claim("whole-b", None)),
    )
    bindings, allocations = cycle(snap)
    assert len(bindings) == 1  # one device is free; the other holds a share
    ((claim, got),) = allocations.items()
    assert got == (("gpus", (DRIVER, "n1", "gpu-1")),)
    result = dra.allocation_result(claim, got, "n1", dra.model(snap, "gangsolve").state)
    assert result["devices"]["results"][0]["consumedCapacity"] == {"share": "1000"}  # type: ignore[index]
    # And a device held whole takes no share, even one that the capacity it says is left would hold.
    snap = snapshot(
        k8s_node("n1"),
        k8s_device_class(),
        devices,
        allocated(share_claim("old", "100"), "n1", "gpu-0", {"share": "100"}),
        allocated(share_claim("whole", None), "n1", "gpu-1", None),  # (no consumedCapacity said: all of it)
        *pods(share_claim("a", "500"), share_claim("b", "500")),
    )
    bindings, allocations = cycle(snap)
    assert len(bindings) == 1
    assert list(allocations.values()) == [(("gpus", (DRIVER, "n1", "gpu-0")),)]


@pytest.mark.parametrize(
    ("policy", "asked", "consumed"),
    [
        ({"default": "100", "validRange": {"min": "100", "max": "1000", "step": "250"}}, "400", "600"),
        ({"default": "100", "validRange": {"min": "100", "max": "1000", "step": "250"}}, "50", "100"),
        ({"default": "250", "validRange": {"min": "250"}}, "333", "333"),
        ({"default": "250", "validValues": ["250", "500", "1000"]}, "251", "500"),
        (None, "1", "1"),
    ],
)
def test_a_request_is_rounded_up_by_the_request_policy(policy, asked, consumed):
    snap = snapshot(
        k8s_node("n1"),
        k8s_device_class(),
        k8s_slice("n1", [shared_gpu("gpu-0", policy=policy)]),
        *pods(share_claim("c", asked)),
    )
    _bindings, allocations = cycle(snap)
    model = dra.model(snap, "gangsolve")
    result = dra.allocation_result("default/c", allocations["default/c"], "n1", model.state)
    assert result["devices"]["results"][0]["consumedCapacity"] == {"share": consumed}  # type: ignore[index]


def test_capacity_rounding_matches_kubernetes_at_the_edges():
    stepped = Capacity(Fraction(1000), Fraction(100), Fraction(100), Fraction(1000), Fraction(250))
    assert [stepped.consumed(Fraction(x)) for x in (100, 101, 350, 351, 1000)] == [100, 350, 350, 600, None]
    assert stepped.consumed(None) == 100  # the default, for a request that asks nothing
    assert Capacity(Fraction(1000)).consumed(None) == 1000  # no policy: all of it
    assert Capacity(Fraction(8), valid=(Fraction(2), Fraction(4))).consumed(Fraction(5)) is None


@pytest.mark.parametrize(
    ("asked", "reason"),
    [
        ("1001", "outside the requestPolicy or above the capacity of every device it selects"),
        ("2000", "outside the requestPolicy or above the capacity of every device it selects"),
    ],
)
def test_a_share_no_device_holds_is_not_planned_with_the_reason(asked, reason):
    policy = {"default": "100", "validRange": {"min": "100", "max": "900"}} if asked == "1001" else None
    snap = snapshot(
        k8s_node("n1"),
        k8s_device_class(),
        k8s_slice("n1", [shared_gpu("gpu-0", policy=policy)]),
        *pods(share_claim("c", asked), share_claim("fine", "100")),
    )
    bindings, _allocations = cycle(snap)
    assert bindings == {"default/fine": "n1"}
    assert reason in waiting(snap)["default/c"].reason


def test_every_capacity_is_consumed_and_one_not_asked_is_taken_whole():
    # `memory` asked; `cores` not asked and without a policy: a share takes all the cores, as Kubernetes counts.
    snap = snapshot(
        k8s_node("n1"),
        k8s_device_class(),
        k8s_slice("n1", [shared_gpu("gpu-0", memory="80Gi", cores="100")]),
        *pods(share_claim("a", None, memory="10Gi"), share_claim("b", None, memory="10Gi")),
    )
    bindings, allocations = cycle(snap)
    assert len(bindings) == 1
    ((claim, got),) = allocations.items()
    result = dra.allocation_result(claim, got, "n1", dra.model(snap, "gangsolve").state)
    assert result["devices"]["results"][0]["consumedCapacity"] == {  # type: ignore[index]
        "cores": "100",
        "memory": str(10 * 2**30),
        "share": "1000",
    }


def test_solve_json_reports_the_device_and_its_consumed_capacity(tmp_path):
    objs = [
        k8s_node("n1"),
        k8s_device_class(),
        k8s_slice("n1", [shared_gpu("gpu-0")]),
        *pods(share_claim("a", "500"), share_claim("b", "250")),
    ]
    path = tmp_path / "snap.json"
    path.write_bytes(orjson.dumps(k8s_list(*objs)))
    result = CliRunner().invoke(cli, ["solve", str(path), "-o", "json"])
    assert result.exit_code == 0, result.output
    plan = orjson.loads(result.stdout)
    assert plan["allocations"]["default/a"] == [
        {"request": "gpus", "driver": DRIVER, "pool": "n1", "device": "gpu-0", "consumedCapacity": {"share": "500"}}
    ]
    assert plan["allocations"]["default/b"][0]["consumedCapacity"] == {"share": "250"}
    jsonschema.validate(plan, SCHEMA, cls=jsonschema.Draft202012Validator)
    table = CliRunner().invoke(cli, ["solve", str(path)])
    assert "gpu.example.com/n1/gpu-0 (share 500)" in table.stdout


def test_too_big_a_share_is_reported_in_the_units_it_was_asked():
    snap = snapshot(
        k8s_node("n1"),
        k8s_device_class(),
        k8s_slice("n1", [shared_gpu("gpu-0", memory="80Gi")]),
        *pods(share_claim("c", None, memory="100Gi")),
    )
    assert "capacity {memory: 100Gi} is outside" in waiting(snap)["default/c"].reason


@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        (
            "slice",
            {"value": "1Xi"},
            "ResourceSlice n1-gpu.example.com: spec.devices[0].capacity: quantity '1Xi' does not parse",
        ),
        (
            "slice",
            {"value": "1000", "requestPolicy": {"validRange": {"min": "-5"}}},
            "ResourceSlice n1-gpu.example.com: spec.devices[0].capacity.share.requestPolicy.validRange.min: ",
        ),
        (
            "slice",
            {"value": "1000", "requestPolicy": {"validValues": ["500", "100"]}},
            "ResourceSlice n1-gpu.example.com: spec.devices[0].capacity.share.requestPolicy.validValues: ",
        ),
        (
            "claim",
            "half",
            "ResourceClaim default/c: spec.devices.requests[0].exactly.capacity.requests.share: ",
        ),
        (
            "allocated",
            "-1",
            "ResourceClaim default/old: status.allocation.devices.results[0].consumedCapacity.share: ",
        ),
    ],
)
def test_bad_values_are_one_line_naming_object_and_field_and_exit_2(tmp_path, where, value, message):
    device = shared_gpu("gpu-0")
    claim = share_claim("c", "500")
    old = allocated(share_claim("old", "100"), "n1", "gpu-0", {"share": "100"})
    if where == "slice":
        device["capacity"]["share"] = value
    elif where == "claim":
        claim["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["share"] = value
    else:
        old["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]["share"] = value
    objs = [k8s_node("n1"), k8s_device_class(), k8s_slice("n1", [device]), old, *pods(claim)]
    path = tmp_path / "snap.json"
    path.write_bytes(orjson.dumps(k8s_list(*objs)))
    result = CliRunner().invoke(cli, ["solve", str(path)])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: {message}")


def test_the_binders_last_check_refuses_shares_past_a_devices_capacity():
    capacities = {(DRIVER, "n1", "gpu-0"): {"share": {"value": "1k"}}}
    fits = {(DRIVER, "n1", "gpu-0"): [{"share": "600"}, {"share": "400m"}, {"share": "399"}]}
    assert dra_capacity.over_capacity(fits, capacities) is None
    past = {(DRIVER, "n1", "gpu-0"): [{"share": "600"}, {"share": "401"}]}
    assert dra_capacity.over_capacity(past, capacities) == (
        "device gpu.example.com/n1/gpu-0: its shares consume 1001 of share, above its 1k"
    )
    assert "allows no multiple allocations" in (
        dra_capacity.over_capacity({(DRIVER, "n1", "gpu-9"): [{}]}, capacities) or ""
    )


# --- the property: never over capacity, whole and shared never mixed ----------------------------------------------


POLICIES = [
    None,
    {"default": "100", "validRange": {"min": "100", "max": "1000", "step": "200"}},
    {"default": "250", "validValues": ["250", "500", "1000"]},
]


@settings(max_examples=60, deadline=None)
@given(
    nodes=st.lists(st.integers(0, 3), min_size=1, max_size=3),
    running=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3), st.sampled_from([None, 100, 300, 700, 1000]))),
    asks=st.lists(
        st.tuples(
            st.sampled_from([None, 1, 250, 333, 500, 800, 1000, 1200]),
            st.sampled_from([None, 10, 30, 50]),  # memory asked (None: not asked, so all of it)
            st.integers(1, 2),
        ),
        max_size=10,
    ),
    policy=st.sampled_from(POLICIES),
    memory=st.booleans(),  # devices with a second capacity
)
def test_no_device_is_ever_over_capacity_and_whole_never_shares(nodes, running, asks, policy, memory):
    extra = {"memory": "80"} if memory else {}
    objs: list[dict] = [k8s_device_class()]
    for i, count in enumerate(nodes):
        objs.append(k8s_node(f"n{i}"))
        if count:
            objs.append(k8s_slice(f"n{i}", [shared_gpu(f"gpu-{j}", policy=policy, **extra) for j in range(count)]))
    capacity = {"share": 1000, "memory": 80}
    consumed: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    holders: dict[tuple[str, str], list[bool]] = defaultdict(list)  # per device, each allocation: whole?
    for k, (node, device, milli) in enumerate(running):
        if node >= len(nodes) or device >= nodes[node]:
            continue
        key = (f"n{node}", f"gpu-{device}")
        share = 1000 if milli is None else milli
        if any(holders[key]) or (milli is None and holders[key]) or consumed[key]["share"] + share > 1000:
            continue  # a running state that is itself within capacity
        consumed[key]["share"] += share
        holders[key].append(milli is None)
        claim = share_claim(f"old{k}", None if milli is None else str(milli))
        objs.append(allocated(claim, *key, {"share": str(share)}))
    wanted: dict[str, dict[str, int]] = {}
    wholes: set[str] = set()  # claims asking no capacity: whole devices
    for k, (milli, mem, count) in enumerate(asks):
        more = {"memory": str(mem)} if memory and mem is not None else {}
        objs += pods(share_claim(f"c{k}", None if milli is None else str(milli), count, **more))
        wanted[f"default/c{k}"] = {"share": milli or 0, "memory": int(more.get("memory", 0))}
        if milli is None and not more:
            wholes.add(f"default/c{k}")
    snap = snapshot(*objs)
    cluster = build_cluster(snap)
    model = dra.model(snap, "gangsolve")
    placement, allocations = allocate(cluster, solve(cluster, SolveConfig(time_limit=1)), model.state)
    assert validate_devices(model.state, placement, allocations) == []
    # The independent count: what every claim consumes, from the objects as they would be written.
    for claim, devices in allocations.items():
        node = placement.bindings[claim]
        for r in dra.allocation_result(claim, devices, node, model.state)["devices"]["results"]:  # type: ignore[index]
            key = (r["pool"], r["device"])
            assert key[0] == node
            for name, value in r["consumedCapacity"].items():
                assert int(value) >= wanted[claim][name]  # never less than asked
                consumed[key][name] += int(value)
            holders[key].append(claim in wholes)
    assert all(v <= capacity[name] for held in consumed.values() for name, v in held.items())
    assert all(len(h) == 1 for h in holders.values() if any(h))  # a device given whole holds nothing else
