"""The store's state kept up to date as events arrive: per node the capacity pods bound or assumed there hold,
`freed` when room may have been made, what a cycle for one scheduler reads, and which changes start no cycle.

The model in the property test is the definition, written here from scratch: a node's used cpu is the sum of the
cpu of the pods observed bound to it plus the pods assumed there and not yet seen bound."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gangsolve.live.messages import Event, Resync
from gangsolve.live.store import ClusterStore
from tests.builders import k8s_node, k8s_pdb, k8s_pod, k8s_queue
from tests.live.resources import NODE, PDB, POD, QUEUE, VPG, XPG

NODES = ("n0", "n1", "n2")


def pod(name: str, cpu: int, node: str | None = None, uid: str | None = None, phase: str = "Pending", **kw) -> dict:
    p = k8s_pod(name, cpu=f"{cpu}m", memory="1Mi", node_name=node, phase=phase, **kw)
    p["metadata"]["uid"] = uid or f"uid-{name}"
    return p


def store_with_nodes() -> ClusterStore:
    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node(n) for n in NODES]))
    return s


def used_cpu(s: ClusterStore, node: str) -> int:
    view = s.node_view(node)
    assert view is not None
    return view.used.get("cpu", 0)


def test_binding_confirmed_and_running_start_no_cycle_and_free_nothing():
    s = store_with_nodes()
    p = pod("p", 500)
    s.apply(Event(POD, "ADDED", p))
    s.assume("default/p", [("default/p", "uid-p", "n1")])
    assert used_cpu(s, "n1") == 500
    generation, freed = s.generation, s.freed
    bound = pod("p", 500, node="n1")
    assert not s.apply(Event(POD, "MODIFIED", bound))  # the watch confirms our own binding
    assert not s.apply(Event(POD, "MODIFIED", pod("p", 500, node="n1", phase="Running")))  # kwok starts it
    assert (s.generation, s.freed) == (generation, freed)
    assert used_cpu(s, "n1") == 500  # now held as observed, no longer as assumed
    assert not s.is_assumed("default/p")


def test_another_schedulers_binding_takes_capacity_and_frees_none():
    s = store_with_nodes()
    other = pod("o", 300, scheduler="default-scheduler")
    s.apply(Event(POD, "ADDED", other))
    freed = s.freed
    s.apply(Event(POD, "MODIFIED", pod("o", 300, node="n2", scheduler="default-scheduler")))
    assert used_cpu(s, "n2") == 300
    assert s.freed == freed


def test_capacity_freed_by_a_pod_gone_a_forget_or_a_node_change():
    s = store_with_nodes()
    s.apply(Event(POD, "ADDED", pod("b", 200, node="n0")))
    s.apply(Event(POD, "ADDED", pod("p", 100)))
    freed = s.freed
    s.apply(Event(POD, "DELETED", pod("b", 200, node="n0")))
    assert (s.freed > freed, used_cpu(s, "n0")) == (True, 0)
    freed = s.freed
    s.assume("default/p", [("default/p", "uid-p", "n0")])
    assert s.freed == freed
    s.forget("default/p", "uid-p")
    assert (s.freed > freed, used_cpu(s, "n0")) == (True, 0)
    freed = s.freed
    s.apply(Event(NODE, "MODIFIED", k8s_node("n2", cpu="64")))
    assert s.freed > freed
    assert s.node_view("n2").allocatable["cpu"] == 64000


def test_a_view_for_one_scheduler_reads_what_is_pending_and_what_may_share_its_gangs():
    s = store_with_nodes()
    group = {"scheduling.x-k8s.io/pod-group": "g"}
    s.apply(Event(POD, "ADDED", pod("waiting", 100, labels=group)))
    s.apply(Event(POD, "ADDED", pod("member", 100, node="n2", labels=group)))  # bound, of the same PodGroup
    s.apply(Event(POD, "ADDED", pod("done", 100, node="n2")))  # bound, a gang of its own: not read again
    s.apply(Event(POD, "ADDED", pod("theirs", 700, node="n0", scheduler="default-scheduler")))
    s.apply(Event(POD, "ADDED", pod("pending-there", 10, ns="team")))
    s.apply(Event(POD, "ADDED", pod("guarded", 50, node="n1", scheduler="default-scheduler", ns="team")))
    s.apply(Resync(PDB, [k8s_pdb("budget", 1, {}, ns="team")]))  # may group any pod of its namespace
    view = s.view("gangsolve")
    assert sorted(p["metadata"]["name"] for p in view.snapshot.pods) == [
        "guarded",
        "member",
        "pending-there",
        "waiting",
    ]
    assert {n.name: n.used.get("cpu", 0) for n in view.nodes} == {"n0": 700, "n1": 50, "n2": 200}
    assert len(s.view().snapshot.pods) == 6  # without a scheduler name: every pod


def test_a_bound_pod_that_cannot_be_read_is_left_out_and_named():
    s = store_with_nodes()
    s.apply(Event(POD, "ADDED", pod("fine", 100, node="n0")))
    s.apply(Event(POD, "ADDED", {**pod("bad", 100, node="n0"), "spec": {**pod("bad", 100, node="n0")["spec"]}}))
    bad = pod("bad", 100, node="n0")
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    s.apply(Event(POD, "MODIFIED", bad))
    view = s.view()
    assert [e.obj for e in view.unreadable] == ["Pod default/bad"]
    assert [p["metadata"]["name"] for p in view.snapshot.pods] == ["fine"]
    assert used_cpu(s, "n0") == 100


# ---------------------------------------------------------------------------------------------- the model

ops = st.lists(
    st.tuples(
        st.sampled_from(
            ["add", "bind", "run", "assume", "confirm", "elsewhere", "forget", "delete", "replace", "rebound"]
        ),
        st.integers(0, 5),  # which pod
        st.sampled_from(NODES),
        st.integers(1, 9),  # cpu in hundreds of millicores, for new pods
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(ops)
@example([("add", 0, "n0", 1), ("assume", 0, "n0", 1), ("rebound", 0, "n0", 1)])  # replaced, holding as much
@example([("add", 0, "n0", 1), ("bind", 0, "n0", 1), ("rebound", 0, "n0", 2)])  # replaced, holding more
def test_used_capacity_and_freed_follow_the_definition(steps):
    s = store_with_nodes()
    pods: dict[str, dict] = {}  # name -> {"cpu", "node" (bound), "uid", "phase"}
    assumed: dict[str, str] = {}  # name -> node

    def model() -> dict[str, int]:
        used = dict.fromkeys(NODES, 0)
        for name, p in pods.items():
            if p["node"]:
                used[p["node"]] += p["cpu"]
            elif name in assumed:
                used[assumed[name]] += p["cpu"]
        return used

    def emit(name: str) -> None:
        p = pods[name]
        s.apply(Event(POD, "MODIFIED", pod(name, p["cpu"], node=p["node"], uid=p["uid"], phase=p["phase"])))

    for i, (op, which, node, cpu) in enumerate(steps):
        name = f"p{which}"
        before, freed = model(), s.freed
        if op == "add" and name not in pods:
            pods[name] = {"cpu": cpu * 100, "node": None, "uid": f"{name}-{i}", "phase": "Pending"}
            emit(name)
        elif name not in pods:
            continue
        elif op == "bind" and not pods[name]["node"] and name not in assumed:
            pods[name]["node"] = node  # someone else binds it
            emit(name)
        elif op == "run" and pods[name]["node"]:
            pods[name]["phase"] = "Running"
            emit(name)
        elif op == "assume" and not pods[name]["node"]:
            s.assume("g", [(f"default/{name}", pods[name]["uid"], node)])
            assumed[name] = node
        elif op in ("confirm", "elsewhere") and name in assumed:
            target = assumed.pop(name)
            pods[name]["node"] = target if op == "confirm" else node
            emit(name)
        elif op == "forget" and name in assumed:
            s.forget(f"default/{name}", pods[name]["uid"])
            del assumed[name]
        elif op == "delete":
            p = pods.pop(name)
            assumed.pop(name, None)
            s.apply(Event(POD, "DELETED", pod(name, p["cpu"], node=p["node"], uid=p["uid"])))
        elif op in ("replace", "rebound"):
            # Deleted and created again under its name, seen as one update, as a relist after a watch gap
            # reports it: pending, or already bound (perhaps elsewhere) by another scheduler.
            pods[name] = {
                "cpu": cpu * 100,
                "node": node if op == "rebound" else None,
                "uid": f"{name}-{i}",
                "phase": "Pending",
            }
            assumed.pop(name, None)
            emit(name)
        after = model()
        assert {n: used_cpu(s, n) for n in NODES} == after
        # the nodes a cycle reads, kept in place as their views are rebuilt
        assert [(n.name, n.used.get("cpu", 0)) for n in s.view().nodes] == list(after.items())
        decreased = any(after[n] < before[n] for n in NODES)
        assert (s.freed > freed) == decreased, (op, before, after)
        assert {n for n in NODES for _k, _a in s.assumed_on(n)} == set(assumed.values())


def test_a_view_reads_the_nodes_in_their_order_as_they_come_go_and_change():
    s = store_with_nodes()
    s.apply(Event(POD, "ADDED", pod("p", 200, node="n1")))
    assert [(n.name, n.used.get("cpu", 0)) for n in s.view().nodes] == [("n0", 0), ("n1", 200), ("n2", 0)]
    s.apply(Event(NODE, "DELETED", k8s_node("n0")))
    s.apply(Event(NODE, "ADDED", k8s_node("n3", labels={"rack": "r1"})))
    s.apply(Event(POD, "ADDED", pod("q", 300, node="n3")))
    assert [(n.name, n.used.get("cpu", 0)) for n in s.view().nodes] == [("n1", 200), ("n2", 0), ("n3", 300)]
    s.apply(Event(NODE, "MODIFIED", k8s_node("n1", labels={"rack": "r2"})))
    s.apply(Event(POD, "DELETED", pod("p", 200, node="n1")))
    nodes = s.view().nodes
    assert [(n.name, n.used.get("cpu", 0)) for n in nodes] == [("n1", 0), ("n2", 0), ("n3", 300)]
    assert nodes[0].labels.get("rack") == "r2"


# ---------------------------------------------------------------------------------------------- narrowed views

# Few values, so that pods of one gang (pending and bound) meet often.
member_of = st.one_of(
    st.none(),
    st.tuples(st.just("podgroup"), st.just("a")),
    st.tuples(st.just("volcano"), st.just("a")),
    st.tuples(st.just("owner"), st.just("j1")),
    st.tuples(st.just("label"), st.just("x")),
    st.tuples(st.just("pdb"), st.just("web")),
)
pods_strategy = st.lists(
    st.tuples(
        member_of,
        st.sampled_from(["default", "default", "team"]),
        st.sampled_from([None, "n0"]),  # bound to
        st.sampled_from(["gangsolve", "gangsolve", "default-scheduler"]),
    ),
    max_size=16,
)


@settings(max_examples=300, deadline=None)
@given(pods_strategy)
def test_a_narrowed_view_groups_every_gang_as_the_whole_cluster_does(specs):
    """The oracle is the whole snapshot: gangs.build_cluster on every pod must find the same gangs (members,
    minimum, members already bound) as on the pods the narrowed view reads."""
    from gangsolve.edge.gangs import build_cluster
    from tests.builders import k8s_pod_group

    s = ClusterStore(group_label="team-job")
    s.apply(Resync(NODE, [k8s_node(n) for n in NODES]))
    groups = [k8s_pod_group(n, 2, ns=ns) for n in ("a", "b") for ns in ("default", "team")]
    groups += [k8s_pod_group(n, 2, ns=ns, volcano=True) for n in ("a", "b") for ns in ("default", "team")]
    for g in groups:
        g["metadata"]["uid"] = f"{g['apiVersion']}/{g['metadata']['namespace']}/{g['metadata']['name']}"
    s.apply(Resync(XPG, groups[:4]))
    s.apply(Resync(VPG, groups[4:]))
    s.apply(Resync(PDB, [k8s_pdb("web", 2, {"app": "web"}, ns="team")]))
    for i, (membership, ns, node, scheduler) in enumerate(specs):
        kw: dict = {"labels": {}, "annotations": {}}
        if membership is not None:
            rule, value = membership
            if rule == "podgroup":
                kw["labels"]["scheduling.x-k8s.io/pod-group"] = value
            elif rule == "volcano":
                kw["annotations"]["scheduling.k8s.io/group-name"] = value
            elif rule == "owner":
                kw["owner"] = value
            elif rule == "label":
                kw["labels"]["team-job"] = value
            else:
                kw["labels"]["app"] = value
        s.apply(Event(POD, "ADDED", pod(f"p{i}", 100, node=node, ns=ns, scheduler=scheduler, **kw)))

    def gangs(snapshot) -> list[tuple]:
        cluster = build_cluster(snapshot, "gangsolve", "team-job", strict=False)
        return sorted((g.name, g.min_member, g.bound_nodes, tuple(p.name for p in g.pods)) for g in cluster.gangs)

    assert gangs(s.view("gangsolve").snapshot) == gangs(s.view().snapshot)


def test_while_a_queue_exists_a_view_reads_every_pod_and_a_queue_change_may_free_room():
    s = store_with_nodes()
    s.apply(Event(POD, "ADDED", pod("waiting", 100)))
    s.apply(Event(POD, "ADDED", pod("done", 100, node="n2")))  # a gang of its own: counts toward its queue's usage
    assert [p["metadata"]["name"] for p in s.view("gangsolve").snapshot.pods] == ["waiting"]
    freed = s.freed
    s.apply(Event(QUEUE, "ADDED", k8s_queue("team-a", weight=1, capability={"cpu": "1"})))
    assert s.freed > freed
    view = s.view("gangsolve")
    assert sorted(p["metadata"]["name"] for p in view.snapshot.pods) == ["done", "waiting"]
    assert not view.partial  # whole: a cycle on it may preempt
    freed = s.freed
    s.apply(Event(QUEUE, "MODIFIED", k8s_queue("team-a", weight=1, capability={"cpu": "2"})))  # cap raised
    assert s.freed > freed


def test_a_node_read_between_cycles_does_not_hide_an_assumption_from_the_next_view():
    """The binder's last check reads the node an assumption changed before the next cycle takes its view: the
    view must still show the node with the assumption (its nodes are rebuilt, not the ones cached before)."""
    s = store_with_nodes()
    s.apply(Resync(POD, [pod("p", 500)]))
    assert s.view().nodes[1].used.get("cpu", 0) == 0
    s.assume("default/p", [("default/p", "uid-p", "n1")])
    assert used_cpu(s, "n1") == 500  # (the binder's read)
    assert {n.name: n.used.get("cpu", 0) for n in s.view().nodes}["n1"] == 500
