"""Which pods are ours and which gang each joins: the six rules, minimums, bound members, namespaces."""

from datetime import UTC

import pytest

from gangsolve.edge.errors import InputError, describe
from gangsolve.edge.gangs import (
    POD_GROUP_LABEL,
    STARVATION_FLOOR,
    STARVATION_SECONDS,
    Origin,
    build_cluster,
    build_with_origins,
    gated,
    starvation_age,
)
from gangsolve.edge.snapshot import Snapshot
from tests.builders import k8s_node, k8s_pdb, k8s_pod, k8s_pod_group


def snapshot(*objs) -> Snapshot:
    snap = Snapshot()
    for o in objs:
        snap.add(o)
    return snap


def gangs(*objs, **kw):
    return {g.name: g for g in build_cluster(snapshot(*objs), **kw).gangs}


def test_only_pending_pods_of_our_scheduler_are_placed():
    result = gangs(
        k8s_pod("ours"),
        k8s_pod("theirs", scheduler="default-scheduler"),
        k8s_pod("bound", node_name="n"),
        k8s_pod("done", phase="Succeeded"),
    )
    assert list(result) == ["default/ours"]


def test_rule1_scheduler_plugins_pod_group():
    result = gangs(
        k8s_pod_group("train", 3),
        *(k8s_pod(f"w{i}", labels={"scheduling.x-k8s.io/pod-group": "train"}) for i in range(4)),
    )
    assert result["default/train"].min_member == 3
    assert len(result["default/train"].pods) == 4


def test_rule2_volcano_annotation():
    result = gangs(
        k8s_pod_group("job", 2, volcano=True),
        *(k8s_pod(f"w{i}", annotations={"scheduling.k8s.io/group-name": "job"}) for i in range(2)),
    )
    assert result["default/job"].min_member == 2


def test_rule3_pdb_with_percentage():
    result = gangs(
        k8s_pdb("tf", "75%", {"job": "tf"}),
        *(k8s_pod(f"w{i}", labels={"job": "tf"}) for i in range(4)),
    )
    assert result["default/tf"].min_member == 3


def test_rule3_first_pdb_by_name_whether_it_selects_by_labels_or_expressions():
    by_expression = k8s_pdb("a-expr", 1, {})
    by_expression["spec"]["selector"] = {"matchExpressions": [{"key": "job", "operator": "In", "values": ["tf"]}]}
    result = gangs(
        k8s_pdb("c-labels", 1, {"job": "tf"}),
        by_expression,
        k8s_pdb("b-other", 1, {"job": "other"}),
        *(k8s_pod(f"w{i}", labels={"job": "tf"}) for i in range(2)),
        k8s_pod("x", labels={"job": "other"}),
    )
    assert sorted(result) == ["default/a-expr", "default/b-other"]
    assert len(result["default/a-expr"].pods) == 2


def test_rule4_group_label():
    pods = [k8s_pod(f"w{i}", labels={"team": "x"}, annotations={"gangsolve.io/min-available": "2"}) for i in range(3)]
    assert gangs(*pods, group_label="team")["default/x"].min_member == 2


def test_rule5_owner_and_rule6_alone():
    result = gangs(k8s_pod("a", owner="job1"), k8s_pod("b", owner="job1"), k8s_pod("solo"))
    assert len(result["default/job1"].pods) == 2
    assert result["default/job1"].min_member == 1
    assert result["default/solo"].min_member == 1


def test_rules_apply_in_order():
    # A pod with both a PodGroup label and a PDB selecting it belongs to the PodGroup.
    result = gangs(
        k8s_pod_group("pg", 1),
        k8s_pdb("pdb", 1, {"app": "x"}),
        k8s_pod("p", labels={"app": "x", "scheduling.x-k8s.io/pod-group": "pg"}),
    )
    assert list(result) == ["default/pg"]


def test_every_gang_names_the_rule_that_defined_it():
    upstream = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": "up"}}
    upstream["spec"] = {"schedulingPolicy": {"gang": {"minCount": 1}}}
    snap = snapshot(
        upstream,
        k8s_pod("u", schedulingGroup={"podGroupName": "up"}),
        k8s_pod_group("pg", 1),
        k8s_pod("g", labels={POD_GROUP_LABEL: "pg"}),
        k8s_pod_group("vg", 1, volcano=True),
        k8s_pod("v", annotations={"scheduling.k8s.io/group-name": "vg"}),
        k8s_pdb("guard", 1, {"app": "guarded"}),
        k8s_pod("d", labels={"app": "guarded"}),
        k8s_pod("l", labels={"team": "t"}),
        k8s_pod("o", owner="job1"),
        k8s_pod("s"),
    )
    cluster, origins = build_with_origins(snap, group_label="team")
    assert origins == {
        "default/up": Origin("upstream"),
        "default/pg": Origin("podgroup"),
        "default/vg": Origin("volcano"),
        "default/guard": Origin("pdb"),
        "default/t": Origin("label"),
        "default/job1": Origin("owner"),
        "default/s": Origin("single"),
    }
    assert set(origins) == {g.name for g in cluster.gangs}


def test_gangs_are_namespaced():
    result = gangs(
        *(k8s_pod(f"w{i}", ns=ns, owner="train") for ns in ("team-a", "team-b") for i in range(2)),
    )
    assert sorted(result) == ["team-a/train", "team-b/train"]


def test_bound_members_count_and_hold_capacity():
    cluster = build_cluster(
        snapshot(
            k8s_node("n", gpus=8),
            k8s_pod_group("train", 3),
            *(
                k8s_pod(
                    f"w{i}", gpus=1, node_name="n", phase="Running", labels={"scheduling.x-k8s.io/pod-group": "train"}
                )
                for i in range(2)
            ),
            k8s_pod("w2", gpus=1, labels={"scheduling.x-k8s.io/pod-group": "train"}),
            k8s_pod("other", gpus=4, node_name="n", phase="Running", scheduler="default-scheduler"),
            k8s_pod("finished", gpus=2, node_name="n", phase="Succeeded"),
        )
    )
    (gang,) = cluster.gangs
    assert gang.bound_nodes == ("n", "n")
    assert gang.need == 1
    assert cluster.nodes[0].used["nvidia.com/gpu"] == 6  # two members and the other scheduler's pod


def test_terminating_pods_hold_capacity_until_gone_but_are_not_members():
    # kube-scheduler counts a pod with a deletionTimestamp until it is gone: its GPUs are not free yet.
    leaving = k8s_pod("leaving", gpus=4, node_name="n", phase="Running", owner="old")
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    pending_and_deleted = k8s_pod("deleted", gpus=1, owner="job")
    pending_and_deleted["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    cluster = build_cluster(snapshot(k8s_node("n", gpus=4), leaving, pending_and_deleted, k8s_pod("new", gpus=4)))
    assert cluster.nodes[0].used["nvidia.com/gpu"] == 4
    assert [g.name for g in cluster.gangs] == ["default/new"]  # the terminating pods are nobody's to place
    from gangsolve.solver import solve

    assert solve(cluster).bindings == {}  # the new 4-GPU pod waits for the terminating one


def test_gated_pods_are_not_planned():
    gated_pod = k8s_pod("held", gpus=1, owner="job", schedulingGates=[{"name": "kueue.x-k8s.io/admission"}])
    snap = snapshot(k8s_node("n", gpus=4), gated_pod, k8s_pod("free", gpus=1, owner="job"))
    (gang,) = build_cluster(snap).gangs
    assert [p.name for p in gang.pods] == ["default/free"]
    assert gated(snap, "gangsolve") == {"default/held": ["kueue.x-k8s.io/admission"]}
    assert gated(snap, "other-scheduler") == {}


def test_non_strict_errors_name_exactly_the_bad_object():
    """The live scheduler leaves out the object an InputError names (matched by `describe`) and tries again."""
    bad_node = k8s_node("n2", gpus=4)
    bad_node["spec"]["taints"] = {"not": "a list"}
    bad_pod = k8s_pod("huge", ns="team-a", cpu="1e16")
    bad_group = k8s_pod_group("pg", "many")
    for bad in (bad_node, bad_pod, bad_group):
        with pytest.raises(InputError) as err:
            build_cluster(snapshot(k8s_node("n"), k8s_pod("fine"), bad), strict=False)
        assert err.value.obj == describe(bad)


def test_objects_listed_without_their_kind_are_checked_as_what_they_were_filed_as():
    # Items of an API server's list carry no kind; the live cache files them by the list they came from.
    pod = k8s_pod("p", cpu="1e16")
    del pod["kind"]
    with pytest.raises(InputError, match=r"spec.containers\[0\].resources.requests.cpu: quantity '1e16' is above"):
        build_cluster(Snapshot(nodes=[k8s_node("n")], pods=[pod]), strict=False)


def test_colocate_annotation_on_pod_group():
    result = gangs(
        k8s_pod_group("pg", 1, annotations={"gangsolve.io/colocate": "topology.kubernetes.io/zone"}),
        k8s_pod("p", labels={"scheduling.x-k8s.io/pod-group": "pg"}),
    )
    assert result["default/pg"].colocate == "topology.kubernetes.io/zone"


def test_queue_order_follows_creation_time():
    result = gangs(k8s_pod("young", created="2026-01-02T00:00:00Z"), k8s_pod("old", created="2026-01-01T00:00:00Z"))
    assert result["default/old"].order < result["default/young"].order


@pytest.mark.parametrize(
    ("objs", "message"),
    [
        ([k8s_pod_group("pg", 0)], "PodGroup default/pg: spec.minMember: must be at least 1, got 0"),
        ([k8s_pod_group("pg", "two")], "PodGroup default/pg: spec.minMember: expected a whole number, got 'two'"),
        (
            [k8s_pod("p", labels={"scheduling.x-k8s.io/pod-group": "gone"})],
            "Pod default/p: metadata.labels.scheduling.x-k8s.io/pod-group: names PodGroup default/gone "
            "(scheduling.x-k8s.io), not in snapshot",
        ),
        (
            [k8s_pod("p", annotations={"gangsolve.io/min-available": "0"})],
            "Pod default/p: metadata.annotations.gangsolve.io/min-available: must be at least 1, got 0",
        ),
        (
            [k8s_pdb("b", "lots", {"a": "b"}), k8s_pod("p", labels={"a": "b"})],
            "PodDisruptionBudget default/b: spec.minAvailable: expected a number or a percentage, got 'lots'",
        ),
        (
            [k8s_pod("p", priorityClassName="missing")],
            "Pod default/p: spec.priorityClassName: PriorityClass 'missing' not in snapshot",
        ),
    ],
)
def test_bad_input_names_object_and_field(objs, message):
    with pytest.raises(InputError) as err:
        build_cluster(snapshot(*objs))
    assert str(err.value) == message


def test_missing_pod_group_waits_in_live_mode():
    assert gangs(k8s_pod("p", labels={"scheduling.x-k8s.io/pod-group": "later"}), strict=False) == {}


def test_gangs_pending_past_the_starvation_age_are_starving():
    from datetime import datetime

    now = datetime(2026, 1, 1, 1, 0, tzinfo=UTC)
    result = gangs(
        k8s_pod("old", owner="a", created="2025-12-31T23:59:00Z"),
        k8s_pod("new", owner="b", created="2026-01-01T00:59:00Z"),
        now=now,
    )
    assert result["default/a"].starving
    assert not result["default/b"].starving
    assert (result["default/a"].waited, result["default/b"].waited) == (3660.0, 60.0)  # the expansion order's wait
    assert not any(
        g.starving or g.waited for g in gangs(k8s_pod("old", created="2026-01-01T00:00:00Z")).values()
    )  # no clock, no age


def test_a_gang_wider_than_a_node_starves_after_its_share_of_the_age():
    from datetime import datetime, timedelta

    now = datetime(2026, 1, 1, 1, 0, tzinfo=UTC)
    # Waited just past half the age: the 16-GPU gang spans two 8-GPU nodes, so half the age is its share.
    created = (now - timedelta(seconds=STARVATION_SECONDS / 2 + 60)).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = gangs(
        k8s_node("n0", gpus=8),
        k8s_node("n1", gpus=4),
        *(k8s_pod(f"wide{i}", gpus=8, labels={POD_GROUP_LABEL: "wide"}, created=created) for i in (0, 1)),
        k8s_pod_group("wide", 2),
        k8s_pod("node", gpus=8, owner="node", created=created),
        now=now,
    )
    assert result["default/wide"].starving
    assert not result["default/node"].starving  # fits one node: it waits the whole age


def test_starvation_age_shrinks_with_the_nodes_a_gang_spans_down_to_the_floor():
    assert starvation_age(1, 8, 1200.0) == starvation_age(8, 8, 1200.0) == 1200.0
    assert starvation_age(16, 8, 1200.0) == 600.0
    assert starvation_age(24, 8, 1200.0) == 400.0
    assert starvation_age(1000, 8, 1200.0) == STARVATION_FLOOR
    assert starvation_age(4, 0, 1200.0) == 1200.0  # no node has GPUs: nothing to scale by


def test_an_age_below_the_floor_holds_for_wide_gangs_too():
    # A wide gang starves no later than a narrow one: an age set below the floor (a compressed timeline's 30 s)
    # is not raised to the floor for it.
    assert starvation_age(1, 8, 30.0) == 30.0
    assert starvation_age(64, 8, 30.0) == 30.0


def test_bad_creation_timestamp_names_the_field():
    with pytest.raises(InputError, match=r"metadata\.creationTimestamp"):
        build_cluster(snapshot(k8s_pod("p", created="yesterday")))
