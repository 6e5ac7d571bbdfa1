"""The snapshot actor's cache: relevant changes only, relists, and assumed placements (assume -> Added | forget)."""

from gangsolve.gangs import build_cluster
from gangsolve.live.cache import ClusterCache
from gangsolve.live.watchers import RESOURCES, Event, Resync
from tests.builders import k8s_node, k8s_pod, k8s_pod_group

POD, NODE = RESOURCES[0], RESOURCES[1]
XPG = next(r for r in RESOURCES if r.api_version.startswith("scheduling.x-k8s.io"))
VPG = next(r for r in RESOURCES if r.api_version.startswith("scheduling.volcano.sh"))


def with_uid(obj, uid="u1"):
    obj["metadata"]["uid"] = uid
    return obj


def test_only_relevant_changes_start_a_cycle():
    c = ClusterCache()
    assert c.apply(Resync(NODE, [k8s_node("n1", gpus=4)]))
    p = with_uid(k8s_pod("p", gpus=1))
    assert c.apply(Event(POD, "ADDED", p))
    v = c.version
    # gangsolve's own condition write, and a node heartbeat: no new cycle.
    conditioned = {**p, "status": {**p["status"], "conditions": [{"type": "PodScheduled", "status": "False"}]}}
    assert not c.apply(Event(POD, "MODIFIED", conditioned))
    node = c.node("n1")
    beat = {
        **node,
        "status": {**node["status"], "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "later"}]},
    }
    assert not c.apply(Event(NODE, "MODIFIED", beat))
    assert c.version == v
    assert c.pod("default/p") is conditioned  # the newest object is kept all the same
    # A taint, a phase or a binding is relevant.
    assert c.apply(Event(NODE, "MODIFIED", {**beat, "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}))
    assert c.apply(Event(POD, "MODIFIED", {**conditioned, "spec": {**p["spec"], "nodeName": "n1"}}))
    assert c.version == v + 2


def test_relist_drops_what_went_missing_per_api_group():
    c = ClusterCache()
    c.apply(Resync(XPG, [k8s_pod_group("a", 2)]))
    c.apply(Resync(VPG, [k8s_pod_group("b", 2, volcano=True)]))
    assert len(c.objects["PodGroup"]) == 2
    assert c.apply(Resync(XPG, []))  # a's deletion was missed while disconnected
    assert [k[2] for k in c.objects["PodGroup"]] == ["b"]
    assert list(c.snapshot().pod_groups) == [("scheduling.volcano.sh", "default", "b")]


def test_assumed_pods_look_bound_until_the_watch_confirms():
    c = ClusterCache()
    c.apply(Resync(NODE, [k8s_node("n1", gpus=1)]))
    p, q = with_uid(k8s_pod("p", gpus=1), "up"), with_uid(k8s_pod("q", gpus=1), "uq")
    c.apply(Resync(POD, [p, q]))
    c.assume("default/p", "n1", "up", "default/p")
    snap = c.snapshot()
    assert next(x for x in snap.pods if x["metadata"]["name"] == "p")["spec"]["nodeName"] == "n1"
    assert p["spec"].get("nodeName") is None  # the cached object itself is never changed
    cluster = build_cluster(snap, "gangsolve", strict=False)
    assert [g.name for g in cluster.gangs] == ["default/q"]  # p is not planned again
    assert cluster.nodes[0].used["nvidia.com/gpu"] == 1  # and its GPU is taken

    c.apply(Event(POD, "MODIFIED", {**p, "spec": {**p["spec"], "nodeName": "n1"}}))  # Added
    assert c.assumed == {}


def test_forget_frees_the_capacity_and_starts_a_cycle():
    c = ClusterCache()
    c.apply(Resync(POD, [with_uid(k8s_pod("p"))]))
    c.assume("default/p", "n1", "u1", "g")
    v = c.version
    c.forget("default/p")
    assert c.assumed == {}
    assert c.version == v + 1
    c.forget("default/p")  # twice is harmless
    assert c.version == v + 1


def test_deleted_or_replaced_pod_drops_its_assumption():
    c = ClusterCache()
    p = with_uid(k8s_pod("p"), "old")
    c.apply(Resync(POD, [p]))
    c.assume("default/p", "n1", "old", "g")
    c.apply(Event(POD, "MODIFIED", with_uid(k8s_pod("p"), "new")))  # deleted and created again under the name
    assert c.assumed == {}
    c.assume("default/p", "n1", "new", "g")
    c.apply(Event(POD, "DELETED", c.pod("default/p")))
    assert c.assumed == {}
    assert c.pod("default/p") is None
