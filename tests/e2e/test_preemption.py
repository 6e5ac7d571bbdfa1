"""Preemption on the real control plane: a high-priority TFJob evicts a low-priority one whole on the users'
cluster, victims under a PDB are spared when others will do, preemptionPolicy Never and futile preemptions
evict nothing, and a preemptor deleted (or placed elsewhere) while its victims leave releases what was held.

Victims carry a test finalizer where a test must see them leaving: kwok removes a deleted pod at once, the
finalizer keeps it terminating (holding its capacity, as a real kubelet does during the grace period) until
the test lets it go."""

from __future__ import annotations

import contextlib
import secrets

import pytest
import yaml
from live_helpers import bound, create, delete_pod, events, pod, pods, poll, running
from test_live_scheduling import tfjob, users_cluster

from gangsolve.bench.devcluster import ApiError, ControlPlane

pytestmark = pytest.mark.e2e

HOLD = "gangsolve.dev/e2e-hold"


@pytest.fixture
def classes(control_plane: ControlPlane) -> dict[str, str]:
    """PriorityClasses of this test: low (100), high (1000), never (1000, preemptionPolicy Never)."""
    suffix = secrets.token_hex(3)
    names = {}
    for role, value, policy in (("low", 100, None), ("high", 1000, None), ("never", 1000, "Never")):
        name = f"{role}-{suffix}"
        body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}}
        body["value"] = value
        if policy:
            body["preemptionPolicy"] = policy
        create(control_plane, "", body)
        names[role] = name
    yield names
    for name in names.values():
        with contextlib.suppress(ApiError):
            control_plane.request("DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")


def with_class(obj: dict, priority_class: str, hold: bool = False) -> dict:
    obj["spec"]["priorityClassName"] = priority_class
    if hold:
        obj["metadata"]["finalizers"] = [HOLD]
    return obj


def hold(cp: ControlPlane, namespace: str, names: list[str]) -> None:
    """Keep these pods terminating once deleted, until `release`."""
    for name in names:
        cp.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            {"metadata": {"finalizers": [HOLD]}},
            content_type="application/merge-patch+json",
        )


def release(cp: ControlPlane, namespace: str) -> None:
    """Let every held pod of the namespace go."""
    for p in pods(cp, namespace):
        if HOLD in (p["metadata"].get("finalizers") or []):
            with contextlib.suppress(ApiError):
                cp.request(
                    "PATCH",
                    f"/api/v1/namespaces/{namespace}/pods/{p['metadata']['name']}",
                    {"metadata": {"finalizers": None}},
                    content_type="application/merge-patch+json",
                )


@pytest.fixture
def held(control_plane, namespace):
    yield
    release(control_plane, namespace)


def by_name(items: list[dict]) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in items}


def condition(p: dict, kind: str) -> dict | None:
    return next((c for c in (p.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def test_a_high_priority_tfjob_preempts_a_low_priority_one_whole(
    control_plane, make_nodes, namespace, gangsolve_factory, classes, held
):
    g = gangsolve_factory()
    _master, gpu_nodes = users_cluster(make_nodes, namespace)
    # A notebook (another scheduler's pod, one GPU, a PDB allowing no disruption) on the second GPU node.
    notebook = pod("notebook", scheduler="default-scheduler", gpus=1, labels={"app": "notebook"})
    notebook["spec"]["nodeName"] = gpu_nodes[1]
    create(control_plane, namespace, with_class(notebook, classes["low"]))
    create(
        control_plane,
        namespace,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "notebook"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "notebook"}}},
        },
    )
    # The low-priority TFJob resnet (3 GPU workers and a parameter server), placed by gangsolve.
    resnet = tfjob(control_plane, namespace, g.scheduler_name, namespace, 3, "resnet", classes["low"])
    hold(control_plane, namespace, resnet)
    poll(lambda: len(running(pods(control_plane, namespace, "tf-job-name=resnet"))) == 4, what="resnet running")

    # The high-priority TFJob mnist: 7 GPU workers, 4 GPUs free. Only evicting resnet makes room.
    tfjob(control_plane, namespace, g.scheduler_name, namespace, 7, "mnist", classes["high"])

    # resnet's four pods leave, each marked as preempted; mnist is nominated, not bound, while they do.
    def leaving():
        victims = pods(control_plane, namespace, "tf-job-name=resnet")
        ok = len(victims) == 4 and all(p["metadata"].get("deletionTimestamp") for p in victims)
        return victims if ok else None

    victims = poll(leaving, timeout=60, what="resnet's pods terminating")
    for v in victims:
        target = condition(v, "DisruptionTarget")
        assert target is not None
        assert target["status"] == "True"
        assert target["reason"] == "PreemptionByScheduler"
        assert "mnist" in target["message"]
    nominated = poll(
        lambda: (
            all(
                (p.get("status") or {}).get("nominatedNodeName")
                for p in pods(control_plane, namespace, "tf-job-name=mnist")
            )
            and pods(control_plane, namespace, "tf-job-name=mnist")
        ),
        timeout=30,
        what="mnist nominated",
    )
    assert {p["status"]["nominatedNodeName"] for p in nominated} == set(gpu_nodes)
    assert not bound(nominated)  # the victims still hold their GPUs
    assert by_name(pods(control_plane, namespace))["notebook"]["status"]["phase"] == "Running"

    release(control_plane, namespace)
    done = poll(
        lambda: (
            len(running(pods(control_plane, namespace, "tf-job-name=mnist"))) == 8
            and pods(control_plane, namespace, "tf-job-name=mnist")
        ),
        timeout=60,
        what="mnist running",
    )
    assert all(not (p.get("status") or {}).get("nominatedNodeName") for p in done)  # binding cleared it
    assert not pods(control_plane, namespace, "tf-job-name=resnet")
    assert by_name(pods(control_plane, namespace))["notebook"]["status"]["phase"] == "Running"
    preempted = poll(
        lambda: (
            len(events(control_plane, namespace, "Preempted")) >= 4 and events(control_plane, namespace, "Preempted")
        ),
        timeout=30,
        what="Preempted events",
    )
    assert {e["regarding"]["name"] for e in preempted} == set(resnet)
    assert {e["reportingController"] for e in preempted} == {"gangsolve"}
    assert g.metric("gangsolve_preemption_victims_total") == 4


def full_node(cp, make_nodes, namespace, classes, pods_spec):
    """One 4-GPU node of this test, filled by other schedulers' low-priority pods bound to it directly."""
    (node,) = make_nodes(1, gpus=4, labels={"gangsolve.dev/test": namespace})
    for name, labels in pods_spec:
        p = pod(name, scheduler="default-scheduler", gpus=1, labels=labels)
        p["spec"]["nodeName"] = node
        create(cp, namespace, with_class(p, classes["low"]))
    poll(lambda: len(running(pods(cp, namespace))) == len(pods_spec), what="the node's pods running")
    return node


def gang(cp, namespace, scheduler, name, size, gpus, priority_class):
    """A gang of `size` pods (owner rule, min-available annotation = all of them), `gpus` each."""
    owner = create(cp, namespace, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": owner["metadata"]["uid"]}
    for i in range(size):
        p = pod(
            f"{name}-{i}",
            scheduler=scheduler,
            gpus=gpus,
            labels={"gang": name},
            annotations={"gangsolve.io/min-available": str(size)},
            node_selector={"gangsolve.dev/test": namespace},
            owner=ref,
        )
        create(cp, namespace, with_class(p, priority_class))


def test_victims_under_a_pdb_are_spared_when_others_will_do(
    control_plane, make_nodes, namespace, gangsolve_factory, classes
):
    g = gangsolve_factory()
    guarded = {"app": "guarded"}
    full_node(
        control_plane,
        make_nodes,
        namespace,
        classes,
        [("guarded-0", guarded), ("guarded-1", guarded), ("plain-0", {}), ("plain-1", {})],
    )
    create(
        control_plane,
        namespace,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "guarded"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": guarded}},
        },
    )
    gang(control_plane, namespace, g.scheduler_name, "train", 1, 2, classes["high"])
    poll(lambda: len(running(pods(control_plane, namespace, "gang=train"))) == 1, timeout=60, what="train running")
    left = {p["metadata"]["name"] for p in pods(control_plane, namespace) if "gang" not in p["metadata"]["labels"]}
    assert left == {"guarded-0", "guarded-1"}


def test_preemption_policy_never_waits_and_a_futile_preemption_evicts_nothing(
    control_plane, make_nodes, namespace, gangsolve_factory, classes, tmp_path
):
    config = tmp_path / "gangsolve.yaml"
    config.write_text(yaml.safe_dump({"resync-period": 1}))  # cycles go on while nothing changes
    g = gangsolve_factory("--config", str(config))
    full_node(control_plane, make_nodes, namespace, classes, [(f"low-{i}", {}) for i in range(4)])
    gang(control_plane, namespace, g.scheduler_name, "polite", 2, 1, classes["never"])  # would fit if it preempted
    gang(control_plane, namespace, g.scheduler_name, "huge", 2, 4, classes["high"])  # 8 GPUs: never fits here
    poll(
        lambda: len(events(control_plane, namespace, "FailedScheduling")) >= 4,
        timeout=30,
        what="both gangs explained",
    )
    cycles = g.metric("gangsolve_schedule_attempts_total", 'result="unschedulable"')
    poll(
        lambda: g.metric("gangsolve_schedule_attempts_total", 'result="unschedulable"') >= cycles + 4,
        timeout=90,
        what="more cycles",
    )
    assert len(running(pods(control_plane, namespace, "!gang"))) == 4
    assert not bound(pods(control_plane, namespace, "gang"))
    assert g.metric("gangsolve_preemption_victims_total") == 0
    # The control: the same gang as polite, allowed to preempt, evicts two pods.
    gang(control_plane, namespace, g.scheduler_name, "pushy", 2, 1, classes["high"])
    poll(lambda: len(running(pods(control_plane, namespace, "gang=pushy"))) == 2, timeout=60, what="pushy running")
    assert len(pods(control_plane, namespace, "!gang")) == 2
    assert not bound(pods(control_plane, namespace, "gang=polite"))


def test_a_preemptor_deleted_while_its_victims_leave_frees_what_was_held(
    control_plane, make_nodes, namespace, gangsolve_factory, classes, held
):
    g = gangsolve_factory()
    node = full_node(control_plane, make_nodes, namespace, classes, [(f"low-{i}", {}) for i in range(4)])
    hold(control_plane, namespace, [f"low-{i}" for i in range(4)])
    gang(control_plane, namespace, g.scheduler_name, "urgent", 2, 2, classes["high"])

    def nominated():
        urgent = pods(control_plane, namespace, "gang=urgent")
        return len(urgent) == 2 and all((p.get("status") or {}).get("nominatedNodeName") == node for p in urgent)

    poll(nominated, timeout=60, what="urgent nominated")
    poll(  # all four: it needs the node's 4 GPUs
        lambda: sum(1 for p in pods(control_plane, namespace, "!gang") if p["metadata"].get("deletionTimestamp")) == 4,
        timeout=30,
        what="the victims terminating",
    )

    # The preemptor goes while its victims still hold their GPUs; a lower-priority gang waits meanwhile.
    for i in range(2):
        delete_pod(control_plane, namespace, f"urgent-{i}")
    gang(control_plane, namespace, g.scheduler_name, "later", 4, 1, classes["low"])
    release(control_plane, namespace)
    poll(lambda: len(running(pods(control_plane, namespace, "gang=later"))) == 4, timeout=60, what="later running")
    assert g.metric("gangsolve_preemption_victims_total") == 4  # no second preemption for anyone


def test_a_nominated_gang_that_fits_elsewhere_first_binds_there(
    control_plane, make_nodes, namespace, gangsolve_factory, classes, held
):
    g = gangsolve_factory()
    node = full_node(control_plane, make_nodes, namespace, classes, [(f"low-{i}", {}) for i in range(4)])
    hold(control_plane, namespace, [f"low-{i}" for i in range(4)])
    gang(control_plane, namespace, g.scheduler_name, "urgent", 2, 1, classes["high"])
    poll(
        lambda: all(
            (p.get("status") or {}).get("nominatedNodeName") == node
            for p in pods(control_plane, namespace, "gang=urgent")
        ),
        timeout=60,
        what="urgent nominated",
    )
    (other,) = make_nodes(1, gpus=4, labels={"gangsolve.dev/test": namespace})
    placed = poll(
        lambda: (
            len(bound(pods(control_plane, namespace, "gang=urgent"))) == 2
            and pods(control_plane, namespace, "gang=urgent")
        ),
        timeout=60,
        what="urgent bound",
    )
    assert {p["spec"]["nodeName"] for p in placed} == {other}
    assert all(not (p.get("status") or {}).get("nominatedNodeName") for p in placed)
