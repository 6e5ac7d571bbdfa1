"""The cluster store: relevant changes only, relists, assumed placements (assume -> confirmed | forget)."""

import pytest

from gangsolve.edge import schema
from gangsolve.edge.errors import InputError
from gangsolve.edge.gangs import build_cluster
from gangsolve.live.messages import Event, Resync
from gangsolve.live.store import ClusterStore
from tests.builders import k8s_node, k8s_pod, k8s_pod_group
from tests.live.resources import NODE, POD, VPG, XPG


def with_uid(obj, uid="u1"):
    obj["metadata"]["uid"] = uid
    return obj


def test_only_relevant_changes_start_a_cycle():
    s = ClusterStore()
    assert s.apply(Resync(NODE, [k8s_node("n1", gpus=4)]))
    p = with_uid(k8s_pod("p", gpus=1))
    assert s.apply(Event(POD, "ADDED", p))
    g = s.generation
    # gangsolve's own condition write, and a node heartbeat: no new cycle.
    conditioned = {**p, "status": {**p["status"], "conditions": [{"type": "PodScheduled", "status": "False"}]}}
    assert not s.apply(Event(POD, "MODIFIED", conditioned))
    node = s.node("n1")
    beat = {
        **node,
        "status": {**node["status"], "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "later"}]},
    }
    assert not s.apply(Event(NODE, "MODIFIED", beat))
    assert s.generation == g
    assert s.pod("default/p") is conditioned  # the newest object is kept all the same
    # A taint, a phase or a binding is relevant.
    assert s.apply(Event(NODE, "MODIFIED", {**beat, "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}))
    assert s.apply(Event(POD, "MODIFIED", {**conditioned, "spec": {**p["spec"], "nodeName": "n1"}}))
    assert s.generation == g + 2
    assert [x["metadata"]["name"] for x in s.pods_on("n1")] == ["p"]


def test_relist_drops_what_went_missing_per_api_group():
    s = ClusterStore()
    s.apply(Resync(XPG, [k8s_pod_group("a", 2)]))
    s.apply(Resync(VPG, [k8s_pod_group("b", 2, volcano=True)]))
    assert len(s.pod_groups()) == 2
    assert s.apply(Resync(XPG, []))  # a's deletion was missed while disconnected
    assert [k[2] for k in s.pod_groups()] == ["b"]
    assert list(s.snapshot().pod_groups) == [("scheduling.volcano.sh", "default", "b")]


def test_assumed_pods_look_bound_until_the_watch_confirms():
    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node("n1", gpus=1)]))
    p, q = with_uid(k8s_pod("p", gpus=1), "up"), with_uid(k8s_pod("q", gpus=1), "uq")
    s.apply(Resync(POD, [p, q]))
    s.assume("default/p", [("default/p", "up", "n1")])
    snap = s.snapshot()
    assert next(x for x in snap.pods if x["metadata"]["name"] == "p")["spec"]["nodeName"] == "n1"
    assert p["spec"].get("nodeName") is None  # the stored object itself is never changed
    cluster = build_cluster(snap, "gangsolve", strict=False)
    assert [g.name for g in cluster.gangs] == ["default/q"]  # p is not planned again
    assert cluster.nodes[0].used["nvidia.com/gpu"] == 1  # and its GPU is taken

    s.apply(Event(POD, "MODIFIED", {**p, "spec": {**p["spec"], "nodeName": "n1"}}))  # confirmed
    assert not s.is_assumed("default/p")
    assert s.counts()["assumed"] == 0


def test_forget_frees_the_capacity_and_starts_a_cycle_once():
    s = ClusterStore()
    s.apply(Resync(POD, [with_uid(k8s_pod("p"))]))
    s.assume("g", [("default/p", "u1", "n1")])
    g = s.generation
    s.forget("default/p", "u1")
    assert not s.is_assumed("default/p")
    assert s.generation == g + 1
    s.forget("default/p", "u1")  # twice is harmless
    assert s.generation == g + 1


def test_forget_of_another_uid_leaves_the_assumption():
    s = ClusterStore()
    s.apply(Resync(POD, [with_uid(k8s_pod("p"), "new")]))
    s.assume("g", [("default/p", "new", "n1")])
    s.forget("default/p", "old")  # a late answer about the pod that was replaced
    assert s.is_assumed("default/p")


def test_deleted_or_replaced_pod_drops_its_assumption():
    s = ClusterStore()
    p = with_uid(k8s_pod("p"), "old")
    s.apply(Resync(POD, [p]))
    s.assume("g", [("default/p", "old", "n1")])
    s.apply(Event(POD, "MODIFIED", with_uid(k8s_pod("p"), "new")))  # deleted and created again under the name
    assert not s.is_assumed("default/p")
    s.assume("g", [("default/p", "new", "n1")])
    s.apply(Event(POD, "DELETED", s.pod("default/p")))
    assert not s.is_assumed("default/p")
    assert s.pod("default/p") is None


def test_memory_is_only_what_exists():
    """Churn: pods created, assumed, failed and deleted under the same names leave nothing behind."""
    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node("n1")]))
    for round_ in range(50):
        pods = [with_uid(k8s_pod(f"p{i}", node_name="n1" if i % 2 else None), f"{round_}-{i}") for i in range(20)]
        for p in pods:
            s.apply(Event(POD, "ADDED", p))
        for p in pods[::2]:
            key = f"default/{p['metadata']['name']}"
            s.assume("g", [(key, p["metadata"]["uid"], "n1")])
            s.forget(key, p["metadata"]["uid"])
            s.nominate([(key, p["metadata"]["uid"], "n1")])
        s.evict((f"default/{p['metadata']['name']}", p["metadata"]["uid"]) for p in pods[1::2])
        for p in pods:
            s.apply(Event(POD, "DELETED", p))
    assert s.counts() == {
        "Pod": 0,
        "Node": 1,
        "PodDisruptionBudget": 0,
        "PodGroup": 0,
        "PriorityClass": 0,
        "Queue": 0,
        "ResourceSlice": 0,
        "DeviceClass": 0,
        "ResourceClaim": 0,
        "ResourceClaimTemplate": 0,
        "assumed": 0,
        "assumed_claims": 0,
        "nominated": 0,
        "evicting": 0,
    }
    assert s.pods_on("n1") == []


def test_a_pod_group_is_decoded_as_it_arrives_not_by_every_cycle(monkeypatch):
    """A stream has a PodGroup per gang: each is decoded once per change, and a cycle's view reads the result
    (an unreadable one still stops the cycle that reads it, naming the object and field)."""
    decoded = []
    check = schema.check
    monkeypatch.setattr(schema, "check", lambda obj, kind=None: decoded.append(kind) or check(obj, kind))
    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node("n1")]))
    s.apply(Resync(XPG, [k8s_pod_group(f"g{i}", 2) for i in range(3)]))
    s.apply(Resync(POD, [k8s_pod(f"g0-{i}", labels={"scheduling.x-k8s.io/pod-group": "g0"}) for i in range(2)]))
    groups_decoded = decoded.count("PodGroup")
    for _ in range(3):
        cluster = build_cluster(s.view("gangsolve").snapshot, "gangsolve")
        assert [(g.name, g.min_member) for g in cluster.gangs] == [("default/g0", 2)]
    assert groups_decoded == 3
    assert decoded.count("PodGroup") == 3
    s.apply(Event(XPG, "MODIFIED", k8s_pod_group("g0", "two")))
    with pytest.raises(InputError, match="minMember"):
        build_cluster(s.view("gangsolve").snapshot, "gangsolve")
