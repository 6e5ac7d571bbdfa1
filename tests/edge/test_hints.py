"""What `gangsolve solve` says where the plan alone would be silent: a snapshot without nodes, objects set aside
that look meant for gangsolve (and not the dozens of ordinary kinds an export holds), PDBs selecting no pod,
gangs that fell back to a minimum of 1, and pods that all name another scheduler."""

import pytest

from gangsolve.edge.gangs import Origin
from gangsolve.edge.hints import hints, unsolvable
from gangsolve.edge.snapshot import Snapshot
from tests.builders import k8s_node, k8s_pdb, k8s_pod


def snapshot(*objs) -> Snapshot:
    snap = Snapshot()
    for o in objs:
        snap.add(o)
    return snap


def other(kind: str, name: str = "x", api: str = "v1") -> dict:
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": "default"}}


# What `kubectl get all -o yaml` and friends put in an export besides gangsolve's kinds.
ORDINARY = (
    *("Service", "ConfigMap", "Secret", "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob"),
    *("TFJob", "PyTorchJob", "MPIJob", "TrainJob", "JobSet", "Namespace", "ServiceAccount", "Role", "RoleBinding"),
    *("ClusterRole", "Endpoints", "EndpointSlice", "Event", "Lease", "PersistentVolumeClaim", "PersistentVolume"),
    *("StorageClass", "Ingress", "IngressClass", "NetworkPolicy", "HorizontalPodAutoscaler", "LimitRange"),
    *("ResourceQuota", "CSINode", "RuntimeClass", "PodTemplate", "ControllerRevision", "LocalQueue", "ClusterQueue"),
    *("Workload", "PriorityLevelConfiguration", "DeviceTaintRule", "VolumeAttachment"),
)


def test_ordinary_kinds_are_one_note_not_a_warning_each():
    objs = [other(kind) for kind in ORDINARY] + [other("Service", "y")]
    (line,) = hints(snapshot(k8s_node("n"), *objs), "gangsolve", {})
    assert line == (
        f"note: {len(ORDINARY) + 1} objects of kinds gangsolve does not read left out: CSINode (1), ClusterQueue (1), "
        f"ClusterRole (1), ConfigMap (1), ControllerRevision (1) and {len(ORDINARY) - 5} more"
    )


@pytest.mark.parametrize(
    ("obj", "line"),
    [
        (
            other("PodDisruptonBudget", "mnist", "policy/v1"),
            "warning: PodDisruptonBudget default/mnist ignored: gangsolve reads no kind PodDisruptonBudget "
            "(did you mean PodDisruptionBudget?)",
        ),
        (other("pods"), "warning: pods default/x ignored: gangsolve reads no kind pods (did you mean Pod?)"),
        (
            other("PodGroup", "mnist", "scheduling.sigs.k8s.io/v1alpha1"),
            "warning: PodGroup default/mnist ignored: gangsolve reads no PodGroup of apiVersion "
            "'scheduling.sigs.k8s.io/v1alpha1'",
        ),
    ],
)
def test_an_object_that_looks_meant_for_gangsolve_is_named(obj, line):
    assert hints(snapshot(k8s_node("n"), obj), "gangsolve", {}) == [line]


def test_many_objects_of_one_mistake_share_a_line():
    typos = [other("PodDisruptonBudget", f"p{i}", "policy/v1") for i in range(7)]
    (line,) = hints(snapshot(k8s_node("n"), *typos), "gangsolve", {})
    assert line.startswith("warning: PodDisruptonBudget default/p0, PodDisruptonBudget default/p1, ")
    assert "PodDisruptonBudget default/p4 and 2 more ignored: " in line


def test_pdbs_selecting_no_pod_are_named():
    snap = snapshot(
        k8s_node("n"),
        k8s_pdb("typo", 8, {"app": "mnsit"}),
        k8s_pdb("done", 1, {"app": "old"}),
        k8s_pdb("ok", 1, {"app": "mnist"}),
        k8s_pod("w0", labels={"app": "mnist"}),
        k8s_pod("finished", labels={"app": "old"}, phase="Succeeded"),
    )
    assert hints(snap, "gangsolve", {}) == [
        "warning: PodDisruptionBudgets that select no pod, so define no gang (check the selector against the "
        "pods' labels): default/done, default/typo"
    ]


def test_a_gang_that_fell_back_is_named_with_what_to_do():
    origins = {"default/mnist": Origin("owner", "no PodGroup or PDB defines ..."), "default/b": Origin("pdb")}
    assert hints(snapshot(k8s_node("n")), "gangsolve", origins) == [
        "warning: gang default/mnist: no PodGroup or PDB defines ..."
    ]


def test_pending_pods_that_all_name_another_scheduler_get_the_flag_to_solve_them():
    pods = [k8s_pod(f"w{i}", scheduler="kube-batchd") for i in range(8)]
    pods += [k8s_pod("web", scheduler="default-scheduler"), k8s_pod("ran", scheduler="kube-batchd", node_name="n")]
    assert hints(snapshot(k8s_node("n"), *pods), "gangsolve", {}) == [
        "hint: 8 pending pods name kube-batchd, 1 default-scheduler, none gangsolve: try --scheduler-name kube-batchd"
    ]
    one = snapshot(k8s_node("n"), k8s_pod("w", scheduler="kube-batchd"))
    assert hints(one, "gangsolve", {}) == [
        "hint: 1 pending pod names kube-batchd, none gangsolve: try --scheduler-name kube-batchd"
    ]
    # A pod of ours, even bound, says the name is right: nothing pending for us is no mistake.
    assert hints(snapshot(k8s_node("n"), *pods, k8s_pod("ours", node_name="n")), "gangsolve", {}) == []


def test_a_snapshot_without_nodes_cannot_be_solved():
    assert unsolvable(snapshot(k8s_node("n"))) is None
    assert unsolvable(snapshot(k8s_pod("p"))).startswith("snapshot: 1 pod but no node to run on; make one")
    assert unsolvable(Snapshot()).startswith("snapshot: no nodes and no pods")


def test_names_print_as_themselves():
    assert hints(snapshot(k8s_node("n"), other("PodGrup", "x\x1b[2J")), "gangsolve", {}) == [
        "warning: PodGrup default/x\\x1b[2J ignored: gangsolve reads no kind PodGrup (did you mean PodGroup?)"
    ]
