"""live/openb-shares: the trace's fractional pods on a sample of its nodes, and the check of the GPUs from the
API's objects alone (written from docs/gpu-sharing.md's rules, not from the scheduler's code)."""

from __future__ import annotations

from gangsolve.bench import manifests
from gangsolve.bench.live import live_sharing, peers
from gangsolve.bench.live.live_scenarios import LIVE_SCENARIOS
from gangsolve.bench.report import tables


def _node(name: str, gpus: int) -> dict:
    return manifests.node(name, 64000, 262144, gpus)


def _share(name: str, node: str | None, fraction: str, index: str | None) -> dict:
    p = manifests.pod(name, 1000, 1024, node_name=node)
    p["metadata"]["annotations"] = {"gpu-fraction": fraction, **({"gangsolve.io/gpu-index": index} if index else {})}
    return p


def test_the_check_counts_gpus_past_all_of_them_whole_gpus_shared_and_shares_without_an_index():
    nodes = [_node("a", 2), _node("b", 1)]
    pods = [
        _share("s1", "a", "0.5", "0"),
        _share("s2", "a", "0.51", "0"),  # GPU 0 of a: 1010 thousandths
        _share("s3", "a", "0.3", "1"),
        _share("s4", "b", "0.2", "0"),
        manifests.pod("w", 1000, 1024, 1, node_name="b"),  # b's only GPU, shared by s4
        _share("s5", "b", "0.1", None),  # no index
        _share("s6", "a", "0.1", "2"),  # a has no GPU 2
        _share("pending", None, "0.5", None),
    ]
    assert live_sharing.devices({"nodes": nodes, "pods": pods}) == {
        "fractional_pods_bound": 6,
        "gpus": 3,
        "gpus_shared": 3,
        "gpu_thousandths_held": 1010 + 300 + 200,
        "devices_over_100": 1,
        "nodes_with_a_whole_gpu_shared": 1,
        "fractional_pods_without_a_gpu_index": 2,
    }


def test_a_sound_placement_passes_the_check():
    nodes = [_node("a", 2)]
    pods = [_share("s1", "a", "0.5", "0"), _share("s2", "a", "0.5", "0"), _share("s3", "a", "1", "1")]
    check = live_sharing.devices({"nodes": nodes, "pods": pods})
    assert (check["devices_over_100"], check["nodes_with_a_whole_gpu_shared"]) == (0, 0)
    assert check["gpu_thousandths_held"] == 2000


def test_the_scenario_is_the_traces_fractional_pods_until_they_ask_the_load():
    objs = live_sharing.objects(nodes=8, load=1.1, seed=1)
    nodes = [o for o in objs if o["kind"] == "Node"]
    pods = [o for o in objs if o["kind"] == "Pod"]
    gpus = sum(int(n["status"]["allocatable"].get(manifests.GPU, 0)) for n in nodes)
    asked = [round(float(p["metadata"]["annotations"]["gpu-fraction"]) * 1000) for p in pods]
    assert len(nodes) == 8
    assert all(0 < a < 1000 for a in asked)
    assert sum(asked) >= 1.1 * 1000 * gpus > sum(asked[:-1])  # drawn until the load, not one more
    assert not any(p["spec"].get("nodeName") for p in pods)


def test_kube_schedulers_users_ask_the_same_shares_as_claims_on_shareable_devices():
    objs = live_sharing.objects(nodes=2, load=0.5, seed=1)
    mine = live_sharing.for_scheduler(objs, "kube-scheduler")
    assert live_sharing.for_scheduler(objs, "gangsolve") is objs
    by_kind: dict[str, list[dict]] = {}
    for o in mine:
        by_kind.setdefault(o["kind"], []).append(o)
    nodes = [o for o in objs if o["kind"] == "Node"]
    assert [s["spec"]["nodeName"] for s in by_kind["ResourceSlice"]] == [n["metadata"]["name"] for n in nodes]
    for node, slice_ in zip(nodes, by_kind["ResourceSlice"], strict=True):
        devices = slice_["spec"]["devices"]
        assert len(devices) == int(node["status"]["allocatable"][manifests.GPU])
        assert all(d["allowMultipleAllocations"] and d["capacity"] == {"share": {"value": "1000"}} for d in devices)
    assert all(manifests.GPU not in n["status"]["allocatable"] for n in by_kind["Node"])  # GPUs only as devices
    pods = [o for o in objs if o["kind"] == "Pod"]
    claims = {c["metadata"]["name"]: c for c in by_kind["ResourceClaim"]}
    for theirs, ours in zip(by_kind["Pod"], pods, strict=True):
        (ref,) = theirs["spec"]["resourceClaims"]
        asked = claims[ref["resourceClaimName"]]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]
        assert asked == {"share": str(round(float(ours["metadata"]["annotations"]["gpu-fraction"]) * 1000))}
        assert "gpu-fraction" not in (theirs["metadata"].get("annotations") or {})


def test_the_check_reads_kube_schedulers_claims_consumed_capacity_on_the_slices_devices():
    objs = live_sharing.for_scheduler(
        [_node("a", 2), manifests.pod("p", 1000, 1024), manifests.pod("q", 1000, 1024)], "kube-scheduler"
    )
    slices = [o for o in objs if o["kind"] == "ResourceSlice"]

    def claim(name: str, device: str, milli: str) -> dict:
        result = {"request": "gpu", "driver": live_sharing.DRIVER, "pool": "a", "device": device}
        return {
            "metadata": {"name": f"{name}-gpu"},
            "status": {"allocation": {"devices": {"results": [{**result, "consumedCapacity": {"share": milli}}]}}},
        }

    def bound(name: str) -> dict:
        p = manifests.pod(name, 1000, 1024, node_name="a")
        p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}]
        return p

    nodes = [o for o in objs if o["kind"] == "Node"]
    pods = [bound("p"), bound("q"), bound("r")]  # r's claim is not allocated
    api = {"nodes": nodes, "pods": pods, "resourceslices": slices}
    check = live_sharing.devices({**api, "resourceclaims": [claim("p", "gpu-0", "600"), claim("q", "gpu-0", "500")]})
    assert check["gpus"] == 2
    assert (check["devices_over_100"], check["gpu_thousandths_held"]) == (1, 1100)
    assert check["fractional_pods_without_a_gpu_index"] == 1
    check = live_sharing.devices({**api, "resourceclaims": [claim("p", "gpu-0", "1k"), claim("q", "gpu-1", "500")]})
    assert (check["devices_over_100"], check["gpus_shared"], check["gpu_thousandths_held"]) == (0, 2, 1500)


def test_gangsolve_and_kube_scheduler_run_it_and_the_report_shows_the_check():
    scenario = LIVE_SCENARIOS["live/openb-shares"]
    assert peers.not_run(scenario, "gangsolve") is None
    assert peers.not_run(scenario, "kube-scheduler") is None
    assert peers.not_run(scenario, "kube-scheduler-gang") is not None
    assert peers.not_run(scenario, "volcano") is not None
    check = live_sharing.devices({"nodes": [_node("a", 2)], "pods": [_share("s1", "a", "0.5", "0")]})
    run = {"scheduler": "gangsolve", "pending_pods": 2, "pods_per_second": 12.34, "api_check": check}
    rows = tables.live_sharing_rows([{"name": "live/openb-shares", "runs": [run]}])
    assert rows == [("live/openb-shares", "gangsolve", "1/2", "12.3", "1/2", "25.0%", "0", "0", "0")]
