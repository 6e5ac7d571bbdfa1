"""What preemption reads from a snapshot: every bound pod with its priority, gang and minimum (by the same
rules as pending gangs), the PDBs that guard it (not those that define a gang) and what they allow, its start,
whether it is protected or leaving; pending pods' nominations and whether they may preempt."""

from gangsolve.edge.gangs import build_cluster
from gangsolve.edge.snapshot import Snapshot
from tests.builders import k8s_node, k8s_pdb, k8s_pod, k8s_pod_group

PG = "scheduling.x-k8s.io/pod-group"


def snapshot(*objs) -> Snapshot:
    snap = Snapshot()
    for o in objs:
        snap.add(o)
    return snap


def priority_class(name: str, value: int, policy: str | None = None) -> dict:
    obj = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}
    if policy:
        obj["preemptionPolicy"] = policy
    return obj


def running(name: str, **kw) -> dict:
    pod = k8s_pod(name, node_name="n", phase="Running", gpus=1, **kw)
    pod["status"]["startTime"] = "2026-01-01T10:00:00Z"
    return pod


def by_name(cluster):
    return {r.name: r for r in cluster.running}


def test_running_pods_join_the_gang_of_their_pending_members_with_its_minimum():
    cluster = build_cluster(
        snapshot(
            k8s_node("n", gpus=8),
            k8s_pod_group("train", 3),
            *(running(f"w{i}", labels={PG: "train"}, priority=5) for i in range(2)),
            k8s_pod("w2", gpus=1, labels={PG: "train"}),
            running("solo", priority=7),
            running("job-a", owner="job"),
            running("job-b", owner="job"),
        )
    )
    pods = by_name(cluster)
    assert cluster.gangs[0].name == "default/train"
    assert pods["default/w0"].gang == "default/train"  # the pending gang's name: this cycle's placement is seen
    assert pods["default/w0"].min_member == 3
    assert pods["default/w0"].priority == 5
    assert pods["default/solo"].gang == ""  # alone
    assert pods["default/job-a"].gang == pods["default/job-b"].gang == "default/job"
    assert pods["default/w0"].started == 1767261600.0  # 2026-01-01T10:00:00Z


def test_another_schedulers_pods_join_their_podgroup_else_no_gang():
    cluster = build_cluster(
        snapshot(
            k8s_node("n", gpus=8),
            k8s_pod_group("vj", 2, volcano=True),
            *(
                running(f"v{i}", scheduler="volcano", annotations={"scheduling.k8s.io/group-name": "vj"})
                for i in range(2)
            ),
            running("d0", scheduler="default-scheduler", owner="deploy"),
        )
    )
    pods = by_name(cluster)
    assert pods["default/v0"].gang == "default/vj"
    assert pods["default/v0"].min_member == 2
    assert pods["default/d0"].gang == ""


def test_kube_schedulers_pods_join_their_upstream_pod_group_if_it_is_a_gang():
    def group(name, policy):
        meta = {"name": name, "namespace": "default"}
        spec = {"schedulingPolicy": policy}
        return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": meta, "spec": spec}

    def member(name, group_name):
        return running(name, scheduler="default-scheduler", schedulingGroup={"podGroupName": group_name})

    cluster = build_cluster(
        snapshot(
            k8s_node("n", gpus=8),
            group("train", {"gang": {"minCount": 3}}),
            *(member(f"t{i}", "train") for i in range(4)),
            group("web", {"basic": {}}),  # scheduled pod by pod: no gang
            *(member(f"w{i}", "web") for i in range(2)),
            member("lost", "gone"),  # its PodGroup is not in the snapshot
        )
    )
    pods = by_name(cluster)
    assert {pods[f"default/t{i}"].gang for i in range(4)} == {"default/train"}
    assert pods["default/t0"].min_member == 3
    assert pods["default/w0"].gang == pods["default/w1"].gang == pods["default/lost"].gang == ""


def test_pdbs_that_define_a_gang_are_its_minimum_and_others_are_budgets():
    guard = k8s_pdb("web", 2, {"app": "web"})
    guard["status"] = {"disruptionsAllowed": 1}
    cluster = build_cluster(
        snapshot(
            k8s_node("n", gpus=8),
            k8s_pdb("tf", 2, {"tf-job-name": "tf"}),  # the legacy gang convention
            *(running(f"tf-{i}", labels={"tf-job-name": "tf"}) for i in range(2)),
            guard,
            *(running(f"web-{i}", scheduler="default-scheduler", labels={"app": "web"}) for i in range(3)),
            k8s_pdb("api", 1, {"app": "api"}),  # no status: two bound, one must stay
            *(running(f"api-{i}", scheduler="default-scheduler", labels={"app": "api"}) for i in range(2)),
        )
    )
    pods = by_name(cluster)
    assert pods["default/tf-0"].gang == "default/tf"
    assert pods["default/tf-0"].min_member == 2
    assert pods["default/tf-0"].pdbs == ()
    assert pods["default/web-0"].pdbs == ("default/web",)
    assert cluster.budgets == {"default/web": 1, "default/api": 1}


def test_protected_and_leaving_pods():
    leaving = running("leaving", priority=1)
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T11:00:00Z"
    cluster = build_cluster(
        snapshot(
            k8s_node("n", gpus=8),
            priority_class("system-node-critical", 2000001000),
            running("dns", scheduler="default-scheduler", priorityClassName="system-node-critical"),
            running("vip", scheduler="default-scheduler", priority=2000000000),
            running("normal", priority=1),
            leaving,
        )
    )
    pods = by_name(cluster)
    assert pods["default/dns"].protected
    assert pods["default/vip"].protected
    assert not pods["default/normal"].protected
    assert not pods["default/normal"].leaving
    assert pods["default/leaving"].leaving


def test_preemption_policy_from_the_pod_else_its_priority_class_and_nominations():
    nominated = k8s_pod("nominated", priorityClassName="batch")
    nominated["status"]["nominatedNodeName"] = "n"
    cluster = build_cluster(
        snapshot(
            k8s_node("n"),
            priority_class("batch", 10, "Never"),
            k8s_pod("by-class", priorityClassName="batch"),
            k8s_pod("by-pod", priorityClassName="batch", preemptionPolicy="PreemptLowerPriority"),
            k8s_pod("default"),
            nominated,
        )
    )
    gangs = {g.name: g for g in cluster.gangs}
    assert not gangs["default/by-class"].preempts
    assert gangs["default/by-pod"].preempts
    assert gangs["default/default"].preempts
    assert cluster.nominated == {"default/nominated": "n"}
