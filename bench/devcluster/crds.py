"""The CustomResourceDefinitions gangsolve's users install (PodGroups, Volcano's Queue, Kubeflow's TFJob),
schema-less with the status subresource, for the live bench and the end-to-end tests alike."""

from __future__ import annotations

from functools import partial
from typing import Any

from gangsolve.bench.devcluster.controlplane import ApiError, ControlPlane

# The PodGroup APIs served by CRDs: scheduler-plugins' and Volcano's (Kubernetes' own is built in).
POD_GROUP_APIS = {"scheduling.x-k8s.io": "v1alpha1", "scheduling.volcano.sh": "v1beta1"}


def pod_group_crd(group: str = "scheduling.x-k8s.io") -> dict:
    """A PodGroup CRD: scheduler-plugins' (short name pg) or Volcano's (vpg)."""
    short = "pg" if group == "scheduling.x-k8s.io" else "vpg"
    return crd(group, POD_GROUP_APIS[group], "PodGroup", short_names=[short])


def queue_crd() -> dict:
    """Volcano's Queue CRD (cluster-scoped)."""
    return crd("scheduling.volcano.sh", "v1beta1", "Queue", scope="Cluster", short_names=["q"])


def tfjob_crd() -> dict:
    """Kubeflow's TFJob CRD: only owners for the pods, no operator runs."""
    return crd("kubeflow.org", "v1", "TFJob")


def crd(
    group: str, version: str, kind: str, *, scope: str = "Namespaced", short_names: list[str] | None = None
) -> dict:
    plural = kind.lower() + "s"
    names: dict[str, Any] = {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()}
    if short_names:
        names["shortNames"] = short_names
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": scope,
            "names": names,
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }


def install(cp: ControlPlane, *crds: dict) -> None:
    """Create the CRDs (one already there is fine) and return once the API server serves each."""
    for definition in crds:
        try:
            cp.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", definition)
        except ApiError as e:
            if e.status != 409:
                raise
    for definition in crds:
        spec = definition["spec"]
        path = f"/apis/{spec['group']}/{spec['versions'][0]['name']}/{spec['names']['plural']}"
        cp.wait_for(partial(served, cp, path), timeout=60, what=f"the {spec['group']} {spec['names']['kind']} API")


def served(cp: ControlPlane, path: str) -> bool:
    """Whether the API server serves `path` yet (a new CRD's storage answers 404 or 429 while it starts)."""
    try:
        return cp.get(path) is not None
    except Exception:
        return False
