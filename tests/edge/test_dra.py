"""Dynamic Resource Allocation offline: devices as capacity, claims allocated with their gangs, CEL selectors,
what is not supported reported per pod, and the JSON contract."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from gangsolve.cli import cli
from gangsolve.edge import dra
from gangsolve.edge.cel import CelError, compile_selector, device_input
from gangsolve.edge.gangs import build_cluster, waiting
from gangsolve.edge.snapshot import Snapshot
from gangsolve.solver import SolveConfig, solve, validate
from gangsolve.solver.devices import allocate
from gangsolve.solver.validate import validate_devices
from tests.builders import (
    DRIVER,
    k8s_claim,
    k8s_claim_template,
    k8s_device_class,
    k8s_gpu,
    k8s_list,
    k8s_node,
    k8s_pdb,
    k8s_pod,
    k8s_slice,
    with_claims,
)

ROOT = f"{DRIVER}/pcieRoot"


def snapshot(*objs: dict) -> Snapshot:
    snap = Snapshot()
    for obj in objs:
        snap.add(obj)
    return snap


def gpus(node: str, n: int, per_root: int | None = None, **kw) -> dict:
    return k8s_slice(node, [k8s_gpu(f"gpu-{i}", pcie_root=f"r{i // (per_root or n)}", **kw) for i in range(n)])


def gang(name: str, size: int, claim: dict | None = None, **claim_spec) -> list[dict]:
    """A PDB gang of `size` pods, each with its own claim."""
    out = [k8s_pdb(name, size, {"job": name})]
    for i in range(size):
        out.append(k8s_claim(f"{name}-{i}", **claim_spec))
        out.append(with_claims(k8s_pod(f"{name}-{i}", labels={"job": name}), f"{name}-{i}"))
    return out


def cycle(snap: Snapshot) -> tuple[dict, dict, dict]:
    """One cycle as `gangsolve solve` runs it; every result is checked by both oracles."""
    cluster = build_cluster(snap)
    model = dra.model(snap, "gangsolve")
    placement, allocations = allocate(cluster, solve(cluster, SolveConfig(time_limit=1)), model.state)
    assert validate(cluster, placement) == []
    assert validate_devices(model.state, placement, allocations) == []
    return dict(placement.bindings), dict(allocations), {g.name: g for g in placement.gangs}


def test_a_gang_goes_only_where_its_devices_are():
    # n0 has cpu and memory to spare but no devices: kube-scheduler's DRA filter rejects it, and so do we.
    snap = snapshot(k8s_node("n0"), k8s_node("n1"), k8s_device_class(), gpus("n1", 4), *gang("job", 2, count=2))
    bindings, allocations, _ = cycle(snap)
    assert bindings == {"default/job-0": "n1", "default/job-1": "n1"}
    assert sorted(d for got in allocations.values() for _r, d in got) == [(DRIVER, "n1", f"gpu-{i}") for i in range(4)]


def test_a_gang_whose_devices_do_not_exist_together_is_not_placed_at_all():
    snap = snapshot(k8s_node("n1"), k8s_device_class(), gpus("n1", 4), *gang("job", 3, count=2))
    bindings, allocations, gangs = cycle(snap)
    assert bindings == {}
    assert allocations == {}
    assert "dra/gpu.example.com" in gangs["default/job"].reason


def test_devices_of_allocated_claims_are_never_allocated_again():
    held = k8s_claim("theirs", allocated=[("n1", "gpu-0"), ("n1", "gpu-1"), ("n1", "gpu-2")], node="n1")
    snap = snapshot(k8s_node("n1"), k8s_node("n2"), k8s_device_class(), gpus("n1", 4), gpus("n2", 2), held)
    for obj in gang("job", 2, count=1):
        snap.add(obj)
    bindings, allocations, _ = cycle(snap)
    devices = [d for got in allocations.values() for _r, d in got]
    assert (DRIVER, "n1", "gpu-0") not in devices
    assert len(set(devices)) == 2
    assert sorted(bindings.values()) in (["n1", "n2"], ["n2", "n2"])


def test_match_attribute_keeps_a_claim_on_one_pcie_root():
    # n1: roots of 2 and 2 GPUs; n2: one root of 3 and one of 1. Claims of 2 GPUs on one root: n1 holds 2, n2 1.
    n2 = k8s_slice("n2", [k8s_gpu(f"gpu-{i}", pcie_root="r0" if i < 3 else "r1") for i in range(4)])
    snap = snapshot(k8s_node("n1"), k8s_node("n2"), k8s_device_class(), gpus("n1", 4, per_root=2), n2)
    for obj in gang("job", 3, count=2, match=ROOT):
        snap.add(obj)
    bindings, allocations, _ = cycle(snap)
    assert sorted(bindings.values()) == ["n1", "n1", "n2"]
    for got in allocations.values():
        assert len({d[2] for _r, d in got}) == 2
    n2_claim = next(got for claim, got in allocations.items() if bindings[claim] == "n2")
    assert {d[2] for _r, d in n2_claim} <= {"gpu-0", "gpu-1", "gpu-2"}  # never the lone gpu-3


def test_match_attribute_cannot_be_met_leaves_the_gang_pending():
    snap = snapshot(k8s_node("n1"), k8s_device_class(), gpus("n1", 4, per_root=1), *gang("job", 1, count=2, match=ROOT))
    bindings, _allocations, gangs = cycle(snap)
    assert bindings == {}
    assert "one gpu.example.com/pcieRoot" in gangs["default/job"].reason


def test_overlapping_selectors_are_counted_exactly():
    # n1: 2 GPUs of 80Gi and 2 of 16Gi. A pod asking for 2 of 80Gi and one asking for 2 of any fit together
    # (the big ones to the first), a third asking for 1 of any does not: the unions say so before the solve.
    big = 'device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0'
    devices = [k8s_gpu(f"gpu-{i}", memory="80Gi" if i < 2 else "16Gi") for i in range(4)]
    snap = snapshot(k8s_node("n1"), k8s_device_class(), k8s_slice("n1", devices))
    for name, spec in (("a", {"count": 2, "selectors": [big]}), ("b", {"count": 2}), ("c", {"count": 1})):
        snap.add(k8s_claim(name, **spec))
        snap.add(with_claims(k8s_pod(name), name))
    cluster = build_cluster(snap)
    assert cluster.nodes[0].allocatable["dra/gpu.example.com|gpu.example.com#1"] == 4
    bindings, allocations, _ = cycle(snap)
    assert len(bindings) == 2
    assert "default/a" in bindings
    assert {d[2] for _r, d in allocations["default/a"]} == {"gpu-0", "gpu-1"}


def test_all_takes_every_matching_device_of_the_node():
    snap = snapshot(k8s_node("n1"), k8s_node("n2"), k8s_device_class(), gpus("n1", 4), gpus("n2", 2))
    snap.add(k8s_claim("n2-0-held", allocated=[("n2", "gpu-0")], node="n2"))
    snap.add(k8s_claim("whole", mode="All"))
    snap.add(with_claims(k8s_pod("whole"), "whole"))
    bindings, allocations, _ = cycle(snap)
    assert bindings == {"default/whole": "n1"}  # n2 has a device allocated already
    assert len(allocations["default/whole"]) == 4


def test_a_pod_with_an_allocated_claim_goes_where_the_allocation_is():
    snap = snapshot(k8s_node("n1"), k8s_node("n2"), k8s_device_class(), gpus("n1", 1), gpus("n2", 1))
    snap.add(k8s_claim("shared", allocated=[("n2", "gpu-0")], node="n2"))
    snap.add(with_claims(k8s_pod("user"), "shared"))
    bindings, allocations, _ = cycle(snap)
    assert bindings == {"default/user": "n2"}
    assert allocations == {}  # nothing new to allocate; the binder reserves the claim for the pod


def test_a_claim_from_a_template_is_planned_once_it_exists():
    base = [k8s_node("n1"), k8s_device_class(), gpus("n1", 2), k8s_claim_template("one-gpu")]
    before = snapshot(*base, with_claims(k8s_pod("p"), templates={"one-gpu": None}))
    assert build_cluster(before).gangs == ()
    assert "template default/one-gpu" in waiting(before)["default/p"].reason
    after = snapshot(*base, k8s_claim("p-one-gpu-x"), with_claims(k8s_pod("p"), templates={"one-gpu": "p-one-gpu-x"}))
    bindings, allocations, _ = cycle(after)
    assert bindings == {"default/p": "n1"}
    assert list(allocations) == ["default/p-one-gpu-x"]


@pytest.mark.parametrize(
    ("claim", "reason"),
    [
        (k8s_claim("x", selectors=["device.driver.frobnicate()"]), "is not supported or does not compile"),
        (k8s_claim("x", selectors=["device.attributes['gpu.example.com'].nope == 1"]), "failed on device"),
        (k8s_claim("x", selectors=['device.driver + "x"']), "not a bool"),
        (k8s_claim("x", device_class="missing"), "DeviceClass missing does not exist"),
        (
            k8s_claim("x", requests=[{"name": "r", "firstAvailable": [{"name": "a", "deviceClassName": DRIVER}]}]),
            "firstAvailable is not supported",
        ),
        (
            k8s_claim("x", requests=[{"name": "r", "exactly": {"deviceClassName": DRIVER, "adminAccess": True}}]),
            "adminAccess is not supported",
        ),
    ],
)
def test_what_cannot_be_modelled_is_reported_for_the_pod(claim, reason):
    snap = snapshot(k8s_node("n1"), k8s_device_class(), gpus("n1", 2), claim, with_claims(k8s_pod("p"), "x"))
    snap.add(k8s_claim("ok"))
    snap.add(with_claims(k8s_pod("fine"), "ok"))
    bindings, _allocations, _ = cycle(snap)
    assert bindings == {"default/fine": "n1"}  # the others are planned as usual
    assert reason in waiting(snap)["default/p"].reason


def test_an_unallocated_claim_shared_by_pending_pods_is_reported():
    snap = snapshot(k8s_node("n1"), k8s_device_class(), gpus("n1", 2), k8s_claim("x"))
    snap.add(with_claims(k8s_pod("a"), "x"))
    snap.add(with_claims(k8s_pod("b"), "x"))
    assert "shared by several pending pods" in waiting(snap)["default/a"].reason


def test_devices_reachable_from_several_nodes_are_allocated_once():
    selector = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}]}
    shared = k8s_slice(None, [k8s_gpu("net-0")], pool="fabric", nodeSelector=selector)
    snap = snapshot(
        k8s_node("n1", labels={"rack": "r1"}), k8s_node("n2", labels={"rack": "r1"}), k8s_device_class(), shared
    )
    for name in ("a", "b"):
        snap.add(k8s_claim(name))
        snap.add(with_claims(k8s_pod(name), name))
    bindings, allocations, _ = cycle(snap)
    assert len(bindings) == 1  # both nodes see the device in the model; the assignment hands it out once
    assert [d for got in allocations.values() for _r, d in got] == [(DRIVER, "fabric", "net-0")]


def test_only_the_newest_generation_of_a_pool_counts():
    old = k8s_slice("n1", [k8s_gpu(f"gpu-{i}") for i in range(8)], generation=1)
    old["metadata"]["name"] = "old"
    snap = snapshot(k8s_node("n1"), k8s_device_class(), old, k8s_slice("n1", [k8s_gpu("gpu-0")], generation=2))
    assert build_cluster(snap).nodes[0].allocatable.get("dra/gpu.example.com") is None  # no pod asks yet
    snap.add(k8s_claim("x"))
    snap.add(with_claims(k8s_pod("p"), "x"))
    assert build_cluster(snap).nodes[0].allocatable["dra/gpu.example.com"] == 1


def test_solve_json_has_the_allocations(tmp_path):
    path = tmp_path / "snap.json"
    objs = [k8s_node("n1"), k8s_device_class(), gpus("n1", 2), *gang("job", 2)]
    path.write_bytes(orjson.dumps(k8s_list(*objs)))
    result = CliRunner().invoke(cli, ["solve", str(path), "-o", "json"])
    assert result.exit_code == 0, result.output
    plan = orjson.loads(result.stdout)
    assert plan["allocations"] == {
        "default/job-0": [{"request": "gpus", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}],
        "default/job-1": [{"request": "gpus", "driver": DRIVER, "pool": "n1", "device": "gpu-1"}],
    }


def test_a_bad_slice_is_one_line_and_exit_2(tmp_path):
    bad = gpus("n1", 1)
    bad["spec"]["devices"][0]["capacity"]["memory"]["value"] = "80Xi"
    path = tmp_path / "snap.json"
    path.write_bytes(orjson.dumps(k8s_list(k8s_node("n1"), k8s_device_class(), bad, *gang("job", 1))))
    result = CliRunner().invoke(cli, ["solve", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "error: ResourceSlice n1-gpu.example.com: spec.devices[0].capacity: quantity '80Xi' does not parse"
    )


# --- the CEL subset -------------------------------------------------------------------------------------------

DEVICE = device_input(
    DRIVER,
    {
        "name": "gpu-0",
        "attributes": {
            "model": {"string": "A100"},
            "cores": {"int": 108},
            "mig": {"bool": False},
            "driverVersion": {"version": "535.104.5"},
            "numa.example.com/node": {"int": 1},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    },
)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        (f'device.driver == "{DRIVER}"', True),
        ('device.attributes["gpu.example.com"].model == "A100"', True),
        ('device.attributes["gpu.example.com"].cores > 100 && !device.attributes["gpu.example.com"].mig', True),
        ('device.attributes["numa.example.com"].node == 1', True),
        ('device.attributes["other.example.com"].size() == 0', True),  # an unknown domain is an empty map
        ('has(device.attributes["gpu.example.com"].uuid)', False),
        ('device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0', True),
        ('device.capacity["gpu.example.com"].memory.isGreaterThan(quantity("80Gi"))', False),
        ('device.capacity["gpu.example.com"].memory == quantity("80Gi")', True),
        ('device.capacity["gpu.example.com"].memory.asInteger() == 85899345920', True),
        ('device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("535.54.3"))', True),
        ('semver("1.0.0-alpha").isLessThan(semver("1.0.0"))', True),
        ('device.attributes["gpu.example.com"].driverVersion.major() == 535', True),
        ('cel.bind(g, device.attributes["gpu.example.com"], g.model.startsWith("A") && g.cores == 108)', True),
        ('device.attributes["gpu.example.com"].?uuid.orValue("none") == "none"', True),
        ('device.attributes["gpu.example.com"].model.lowerAscii() == "a100"', True),
        ('device.attributes["gpu.example.com"].model.matches("^A[0-9]+$")', True),
        ("device.allowMultipleAllocations", False),
    ],
)
def test_the_supported_cel_subset(expression, expected):
    assert compile_selector(expression).matches(DEVICE) is expected


@pytest.mark.parametrize(
    "expression",
    [
        'device.attributes["gpu.example.com"].model.find("A")',  # Kubernetes' regex library
        'isIP("10.0.0.1")',  # the IP library
        "[1, 2].sum() == 3",  # the lists library
        'device.attributes["gpu.example.com"].model.includes("A100")',  # list attributes (alpha)
        "device.driver ==",
    ],
)
def test_outside_the_subset_does_not_compile(expression):
    with pytest.raises(CelError):
        compile_selector(expression)


@pytest.mark.parametrize(
    "expression",
    [
        'device.attributes["gpu.example.com"].uuid == "x"',
        'quantity("80Xi") == device.capacity["gpu.example.com"].memory',
        'semver("v1") == semver("1.0.0")',
    ],
)
def test_evaluation_errors_are_errors_not_false(expression):
    with pytest.raises(CelError):
        compile_selector(expression).matches(DEVICE)


# --- property: whatever the devices and claims, no device twice and every claim of a bound pod met ----------

CLAIMS = st.fixed_dictionaries(
    {
        "count": st.integers(1, 4),
        "big": st.booleans(),
        "match": st.booleans(),
        "all": st.integers(0, 9).map(lambda n: n == 0),
    }
)


@settings(max_examples=40, deadline=None)
@given(
    nodes=st.lists(st.tuples(st.integers(0, 6), st.integers(1, 3), st.integers(0, 2)), min_size=1, max_size=4),
    gangs=st.lists(st.tuples(st.integers(1, 3), CLAIMS), min_size=1, max_size=5),
    shared=st.integers(0, 2),
    held=st.integers(0, 3),
)
def test_no_device_twice_and_no_pod_bound_with_an_unmet_claim(nodes, gangs, shared, held):
    big = 'device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0'
    objs: list[dict] = [k8s_device_class()]
    for i, (count, roots, small) in enumerate(nodes):
        objs.append(k8s_node(f"n{i}", labels={"rack": "r"}))
        devices = [
            k8s_gpu(f"gpu-{j}", pcie_root=f"r{j % roots}", memory="16Gi" if j < small else "80Gi") for j in range(count)
        ]
        if devices:
            objs.append(k8s_slice(f"n{i}", devices))
    selector = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r"]}]}]}
    if shared:
        objs.append(k8s_slice(None, [k8s_gpu(f"net-{j}") for j in range(shared)], pool="net", nodeSelector=selector))
    if held and nodes[0][0]:
        objs.append(k8s_claim("held", allocated=[("n0", f"gpu-{j}") for j in range(min(held, nodes[0][0]))]))
    for g, (size, spec) in enumerate(gangs):
        claim = {"mode": "All"} if spec["all"] else {"count": spec["count"]}
        if spec["big"]:
            claim["selectors"] = [big]
        if spec["match"]:
            claim["match"] = ROOT
        objs += gang(f"g{g}", size, **claim)
    cycle(snapshot(*objs))  # asserts both oracles


# --- the validator catches what the assignment must never do ---------------------------------------------------


def test_the_device_oracle_catches_double_allocation_and_broken_constraints():
    snap = snapshot(k8s_node("n1"), k8s_node("n2"), k8s_device_class(), gpus("n1", 4, per_root=2))
    for obj in gang("job", 2, count=2, match=ROOT):
        snap.add(obj)
    build_cluster(snap)
    state = dra.model(snap, "gangsolve").state
    bindings = {"default/job-0": "n1", "default/job-1": "n1"}
    d = [(DRIVER, "n1", f"gpu-{i}") for i in range(4)]
    good = {"default/job-0": (("gpus", d[0]), ("gpus", d[1])), "default/job-1": (("gpus", d[2]), ("gpus", d[3]))}
    assert validate_devices(state, bindings, good) == []
    twice = {**good, "default/job-1": (("gpus", d[0]), ("gpus", d[1]))}
    assert any("allocated twice" in v for v in validate_devices(state, bindings, twice))
    split = {"default/job-0": (("gpus", d[0]), ("gpus", d[2])), "default/job-1": (("gpus", d[1]), ("gpus", d[3]))}
    assert any("matchAttribute" in v for v in validate_devices(state, bindings, split))
    assert any("unallocated" in v for v in validate_devices(state, bindings, {"default/job-0": good["default/job-0"]}))
    elsewhere = {"default/job-0": "n2", "default/job-1": "n1"}
    assert any("not reachable from n2" in v for v in validate_devices(state, elsewhere, good))
    assert any(
        "got 1 of 2" in v
        for v in validate_devices(state, bindings, {**good, "default/job-0": good["default/job-0"][:1]})
    )


def test_devices_count_as_gpus_in_the_objective_as_nvidia_gpu_does():
    # Room for one of two single-pod gangs (cpu): the one with more GPUs wins the resource tier, though it came
    # second; with the GPUs as DRA devices as with nvidia.com/gpu.
    first = {"created": "2026-01-01T00:00:00Z", "cpu": "6"}
    second = {"created": "2026-01-01T00:01:00Z", "cpu": "6"}
    extended = snapshot(
        k8s_node("n1", cpu="8", gpus=4), k8s_pod("small", gpus=1, **first), k8s_pod("large", gpus=3, **second)
    )
    devices = snapshot(
        k8s_node("n1", cpu="8"),
        k8s_device_class(),
        gpus("n1", 4),
        k8s_claim("small", count=1),
        k8s_claim("large", count=3),
        with_claims(k8s_pod("small", **first), "small"),
        with_claims(k8s_pod("large", **second), "large"),
    )
    assert dict(solve(build_cluster(extended), SolveConfig(time_limit=1)).bindings) == {"default/large": "n1"}
    assert cycle(devices)[0] == {"default/large": "n1"}


def test_a_node_with_devices_held_is_not_empty_and_an_empty_one_is_kept_whole():
    # n2 is untouched, n1 runs a pod holding one of its GPUs: a one-GPU pod goes to n1, as with nvidia.com/gpu.
    extended = snapshot(
        k8s_node("n2", gpus=4),
        k8s_node("n1", gpus=4),
        k8s_pod("running", gpus=1, node_name="n1", phase="Running"),
        k8s_pod("new", gpus=1),
    )
    running = with_claims(k8s_pod("running", node_name="n1", phase="Running"), "running")
    devices = snapshot(
        k8s_node("n2"),
        k8s_node("n1"),
        k8s_device_class(),
        gpus("n2", 4),
        gpus("n1", 4),
        k8s_claim("running", allocated=[("n1", "gpu-0")], node="n1"),
        running,
        k8s_claim("new", count=1),
        with_claims(k8s_pod("new"), "new"),
    )
    assert dict(solve(build_cluster(extended), SolveConfig(time_limit=1)).bindings) == {"default/new": "n1"}
    bindings, allocations, _ = cycle(devices)
    assert bindings == {"default/new": "n1"}
    assert allocations["default/new"][0][1] != (DRIVER, "n1", "gpu-0")


def test_a_pod_without_devices_keeps_off_nodes_with_devices_as_off_gpu_nodes():
    # n1 has GPUs (as DRA devices), n2 none: a cpu-only pod leaves n1 to GPU pods, though n1 is the fuller.
    extended = snapshot(k8s_node("n1", cpu="8", gpus=4), k8s_node("n2"), k8s_pod("cpu-only"), k8s_pod("gpu", gpus=1))
    devices = snapshot(
        k8s_node("n1", cpu="8"),
        k8s_node("n2"),
        k8s_device_class(),
        gpus("n1", 4),
        k8s_pod("cpu-only"),
        k8s_claim("gpu", count=1),
        with_claims(k8s_pod("gpu"), "gpu"),
    )
    want = {"default/cpu-only": "n2", "default/gpu": "n1"}
    assert dict(solve(build_cluster(extended), SolveConfig(time_limit=1)).bindings) == want
    assert cycle(devices)[0] == want
