"""Kubernetes' own PodGroup (scheduling.k8s.io, KEP-4671) as the first gang rule: minCount, a basic policy,
the group's priority and pods that disagree with it (KEP-5710), its topology constraint (KEP-5732) and
gangsolve's preferred levels, pods waiting for a group not created yet, and bad values."""

import re
from datetime import UTC, datetime

import pytest

from gangsolve.edge.errors import InputError
from gangsolve.edge.gangs import PREFERRED_ANNOTATION, build_cluster, waiting
from gangsolve.edge.snapshot import Snapshot
from tests.builders import k8s_pod, k8s_pod_group

HIGH = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000}


def group(name, min_count=None, version="v1beta1", topology=None, annotations=None, **spec):
    policy = {"gang": {"minCount": min_count}} if min_count is not None else {"basic": {}}
    body = {"schedulingPolicy": policy, **spec}
    if topology:
        body["schedulingConstraints"] = {"topology": [{"key": topology}]}
    meta = {"name": name, "namespace": "default", "annotations": annotations or {}}
    return {"apiVersion": f"scheduling.k8s.io/{version}", "kind": "PodGroup", "metadata": meta, "spec": body}


def member(name, group_name, **kw):
    return k8s_pod(name, schedulingGroup={"podGroupName": group_name}, **kw)


def snapshot(*objs) -> Snapshot:
    snap = Snapshot()
    for o in objs:
        snap.add(o)
    return snap


def gangs(*objs, **kw):
    return {g.name: g for g in build_cluster(snapshot(*objs), **kw).gangs}


@pytest.mark.parametrize("version", ["v1beta1", "v1alpha2"])
def test_a_gang_policy_makes_a_gang_of_min_count(version):
    result = gangs(group("train", 3, version=version), *(member(f"w{i}", "train") for i in range(4)))
    assert result["default/train"].min_member == 3
    assert len(result["default/train"].pods) == 4


def test_it_comes_before_every_other_rule():
    pods = [member(f"w{i}", "train", labels={"scheduling.x-k8s.io/pod-group": "other"}, owner="job") for i in range(2)]
    result = gangs(group("train", 2), k8s_pod_group("other", 5), *pods)
    assert set(result) == {"default/train"}
    assert result["default/train"].min_member == 2


def test_a_basic_policy_means_each_pod_alone():
    result = gangs(group("svc", None), *(member(f"p{i}", "svc", owner="job") for i in range(3)))
    assert sorted(result) == ["default/p0", "default/p1", "default/p2"]
    assert all(g.min_member == 1 for g in result.values())


def test_the_gangs_priority_is_its_pod_groups():
    pods = [member(f"w{i}", "train", priorityClassName="high", priority=1000) for i in range(2)]
    result = gangs(HIGH, group("train", 2, priorityClassName="high", priority=1000), *pods)
    assert result["default/train"].priority == 1000
    # An admitted PodGroup carries spec.priority; one written by hand names only its class.
    result = gangs(HIGH, group("train", 2, priorityClassName="high"), *pods)
    assert result["default/train"].priority == 1000


def test_pods_whose_priority_differs_from_their_groups_wait_and_say_so():
    snap = snapshot(
        HIGH,
        group("train", 2, priorityClassName="high", priority=1000),
        member("w0", "train", priority=1000),
        member("w1", "train", priority=0),
    )
    assert build_cluster(snap).gangs == ()
    why = waiting(snap)
    assert set(why) == {"default/w0", "default/w1"}
    assert "should have the same priority as the pod group's priority, got 0 and 1000" in why["default/w0"].reason
    assert why["default/w0"].until is None


def test_the_topology_constraint_is_the_required_level_and_the_annotation_adds_preferred_levels():
    preferred = {PREFERRED_ANNOTATION: " block, rack ,,rack"}
    result = gangs(
        group("train", 2, topology="zone", annotations=preferred), member("a", "train"), member("b", "train")
    )
    assert result["default/train"].colocate == "zone"
    assert result["default/train"].preferred == ("block", "rack")


def test_a_pod_naming_a_group_not_created_yet_waits_live_and_is_an_error_offline():
    snap = snapshot(member("w0", "later"))
    assert build_cluster(snap, strict=False).gangs == ()
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert "PodGroup default/later (scheduling.k8s.io)" in waiting(snap, now=now)["default/w0"].reason
    with pytest.raises(InputError, match=r"spec.schedulingGroup.podGroupName: names PodGroup default/later"):
        build_cluster(snap)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"schedulingPolicy": {"gang": {"minCount": 0}}}, "spec.schedulingPolicy.gang.minCount"),
        ({"schedulingPolicy": {"gang": {}}}, "spec.schedulingPolicy.gang.minCount"),
        ({"schedulingPolicy": {}}, "spec.schedulingPolicy"),
        ({"schedulingPolicy": {"gang": {"minCount": "2"}}}, "spec.schedulingPolicy.gang.minCount"),
        (
            {"schedulingPolicy": {"basic": {}}, "schedulingConstraints": {"topology": [{}]}},
            "topology[0]: object missing required field key",
        ),
    ],
)
def test_bad_values_name_the_object_and_field(spec, field):
    pg = group("bad", 1)
    pg["spec"] = spec
    with pytest.raises(InputError, match=f"PodGroup default/bad: .*{re.escape(field)}"):
        build_cluster(snapshot(pg))
