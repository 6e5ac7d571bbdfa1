"""Gang definitions created after their pods, on the real control plane: a training operator creates a job's
pods and its PodDisruptionBudget (or PodGroup) in separate calls. No gang is ever bound below its minimum;
a pod whose definition never comes is scheduled by its fallback rule once its grace has passed."""

from __future__ import annotations

import random
import time

import pytest
import yaml
from live_helpers import bound, create, pod, pod_group, pods, poll

from gangsolve.bench.devcluster import ApiError

pytestmark = pytest.mark.e2e

TFJOB_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "tfjobs.kubeflow.org"},
    "spec": {
        "group": "kubeflow.org",
        "scope": "Namespaced",
        "names": {"kind": "TFJob", "listKind": "TFJobList", "plural": "tfjobs", "singular": "tfjob"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }
        ],
    },
}


@pytest.fixture(scope="module")
def tfjob_crd(control_plane):
    try:
        control_plane.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", TFJOB_CRD)
    except ApiError as e:
        if e.status != 409:
            raise

    def served() -> bool:
        try:
            return control_plane.get("/apis/kubeflow.org/v1/tfjobs") is not None
        except ApiError:  # 429 while the new storage initializes
            return False

    poll(served, timeout=60, what="the TFJob API")


def tfjob(cp, namespace: str, name: str, scheduler: str, workers: int, tag: dict) -> list[str]:
    """A TFJob object and its workers, as its operator creates them (owned by it, labelled with its name)."""
    job = create_raw(
        cp,
        f"/apis/kubeflow.org/v1/namespaces/{namespace}/tfjobs",
        {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name}, "spec": {}},
    )
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": name, "uid": job["metadata"]["uid"]}
    names = [f"{name}-worker-{i}" for i in range(workers)]
    for n in names:
        create(
            cp,
            namespace,
            pod(n, scheduler=scheduler, gpus=1, node_selector=tag, owner=owner, labels={"tf-job-name": name}),
        )
    return names


def create_raw(cp, path: str, body: dict) -> dict:
    return cp.request("POST", path, body)


def pdb(name: str, min_available: int) -> dict:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"tf-job-name": name}}},
    }


def bound_counts(cp, namespace: str, seconds: float) -> set[int]:
    """How many pods of the namespace were bound, sampled every 0.1 s for `seconds`."""
    seen = set()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        seen.add(len(bound(pods(cp, namespace))))
        time.sleep(0.1)
    return seen


def test_a_pdb_created_after_its_pods_is_never_preempted_by_a_partial_bind(
    control_plane, make_nodes, namespace, tfjob_crd, gangsolve_factory
):
    """Four one-GPU workers on a node of three GPUs: grouped by their owner with a minimum of 1, three would
    be bound; with the PDB (all four) none may be. The PDB comes 1-3 s after the pods, several times."""
    g = gangsolve_factory()
    tag = {"gangsolve.dev/test": namespace}
    make_nodes(1, gpus=3, labels=tag)
    rng = random.Random(18)
    for round_ in range(4):
        name = f"mnist-{round_}"
        tfjob(control_plane, namespace, name, g.scheduler_name, 4, tag)
        early = bound_counts(control_plane, namespace, rng.uniform(1, 3))
        create(control_plane, namespace, pdb(name, 4))
        later = bound_counts(control_plane, namespace, 1.5)
        assert early | later == {0}, f"round {round_}: pods bound before or after their PDB arrived"
        for n in [p["metadata"]["name"] for p in pods(control_plane, namespace)]:
            control_plane.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{n}?gracePeriodSeconds=0")
        poll(lambda: not pods(control_plane, namespace), timeout=30, what="the round's pods gone")
    # With room for the whole gang, it is bound whole.
    name = "mnist-last"
    tfjob(control_plane, namespace, name, g.scheduler_name, 4, tag)
    create(control_plane, namespace, pdb(name, 4))
    make_nodes(1, gpus=1, labels=tag)
    poll(lambda: len(bound(pods(control_plane, namespace))) == 4, timeout=60, what="the whole gang bound")


def test_a_pod_group_created_after_its_pods(control_plane, make_nodes, namespace, pod_group_crds, gangsolve_factory):
    g = gangsolve_factory()
    tag = {"gangsolve.dev/test": namespace}
    make_nodes(1, gpus=3, labels=tag)
    for i in range(4):
        create(
            control_plane,
            namespace,
            pod(
                f"w{i}",
                scheduler=g.scheduler_name,
                gpus=1,
                node_selector=tag,
                labels={"scheduling.x-k8s.io/pod-group": "late"},
            ),
        )
    assert bound_counts(control_plane, namespace, 2) == {0}
    create(control_plane, namespace, pod_group("scheduling.x-k8s.io", "late", 4))
    assert bound_counts(control_plane, namespace, 1.5) == {0}  # 4 of 3 GPUs: nothing
    make_nodes(1, gpus=1, labels=tag)
    poll(lambda: len(bound(pods(control_plane, namespace))) == 4, timeout=60, what="the whole gang bound")


def test_a_definition_that_never_comes_lets_the_fallback_rule_apply_after_the_grace(
    control_plane, make_nodes, namespace, tfjob_crd, gangsolve_factory, tmp_path
):
    config = tmp_path / "gangsolve.yaml"
    config.write_text(yaml.safe_dump({"definition-grace": 4}))
    g = gangsolve_factory("--config", str(config))
    tag = {"gangsolve.dev/test": namespace}
    make_nodes(1, gpus=4, labels=tag)
    created = time.monotonic()
    tfjob(control_plane, namespace, "no-pdb", g.scheduler_name, 2, tag)
    # creationTimestamp has whole seconds: the grace ends 3-4 s after the pods were created.
    assert bound_counts(control_plane, namespace, 2.5) == {0}
    conditions = (
        poll(
            lambda: [
                c
                for p in pods(control_plane, namespace)
                for c in p["status"].get("conditions") or []
                if c["type"] == "PodScheduled" and "gang definition" in c.get("message", "")
            ],
            timeout=10,
            what="the pods to say what they wait for",
        )
        if len(bound(pods(control_plane, namespace))) == 0
        else []
    )
    poll(lambda: len(bound(pods(control_plane, namespace))) == 2, timeout=30, what="both pods bound")
    assert time.monotonic() - created >= 3
    assert not conditions or "TFJob no-pdb" in conditions[0]["message"]
