"""The e2e suite's control planes and what the suite installs on each: the scheduler's ServiceAccount and RBAC
as the chart renders them, and the PodGroup and Queue CRDs.

Most tests share one control plane, with the real kube-scheduler running beside gangsolve as the peer. A test
that injects faults into the control plane itself may take one of its own, without the peer: the churn soak
deletes and recreates pods under the same names across API server restarts, which makes kube-scheduler v1.37
exit (its informer's relist reports the two pods as one update, whose node changed; kubernetes/kubernetes#141255),
and every later test would lose its peer.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml
from live_helpers import service_account_kubeconfig

from gangsolve.bench.devcluster import Binaries, ControlPlane, crds
from tests.helm import Helm, render


def _say(msg: str) -> None:
    print(f"[control-plane] {msg}", flush=True)


# The scheduler's identity in the e2e suite: the chart's ServiceAccount (release `gs`, its full name
# `gs-gangsolve`) in a namespace of its own. The API server writes an audit record of every request by a
# ServiceAccount of that namespace, and of nothing else.
SCHEDULER_NAMESPACE = "gangsolve-e2e"
RELEASE = "gs"
FULLNAME = "gs-gangsolve"
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "userGroups": [f"system:serviceaccounts:{SCHEDULER_NAMESPACE}"]},
        {"level": "None"},
    ],
}


# Kubernetes' own PodGroup (scheduling.k8s.io/v1beta1, KEP-4671) and its topology constraint (KEP-5732) are
# off by default in the pinned v1.37: served here, as a cluster that uses them serves them.
WORKLOAD_GATES = "--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true"


@contextmanager
def control_plane(binaries: Binaries, *, peer: bool = True) -> Iterator[ControlPlane]:
    """A started control plane; with `peer`, kube-scheduler runs in it."""
    with ControlPlane(
        binaries=binaries,
        scheduler=peer,
        log=_say,
        audit_policy=AUDIT_POLICY,
        extra_apiserver_args=[WORKLOAD_GATES, "--runtime-config=scheduling.k8s.io/v1beta1=true"],
        extra_scheduler_args=[WORKLOAD_GATES],
        extra_controller_manager_args=[WORKLOAD_GATES],
    ) as cp:
        yield cp


@dataclass(frozen=True)
class SchedulerAccount:
    namespace: str
    name: str  # the ServiceAccount's, also the Lease's: the chart names both after the release
    user: str  # as the API server authenticates it
    kubeconfig: Path
    rbac: list[dict]  # the chart's rendered ClusterRole, Role and their bindings


def install_scheduler_account(cp: ControlPlane, helm: Helm, workdir: Path) -> SchedulerAccount:
    """The chart's ServiceAccount and RBAC, as helm renders them, applied to the control plane."""
    cp.create_namespace(SCHEDULER_NAMESPACE)
    docs = render(
        helm,
        "--show-only=templates/serviceaccount.yaml",
        "--show-only=templates/rbac.yaml",
        namespace=SCHEDULER_NAMESPACE,
        release=RELEASE,
    )
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    kubeconfig = service_account_kubeconfig(cp, SCHEDULER_NAMESPACE, FULLNAME, workdir / "kubeconfig")
    rbac = [d for d in docs if d["kind"] != "ServiceAccount"]
    return SchedulerAccount(
        SCHEDULER_NAMESPACE, FULLNAME, f"system:serviceaccount:{SCHEDULER_NAMESPACE}:{FULLNAME}", kubeconfig, rbac
    )


def install_pod_group_crds(cp: ControlPlane) -> None:
    """The two PodGroup CRDs (scheduler-plugins' and Volcano's) and Volcano's Queue; returns once all are served."""
    crds.install(cp, *(crds.pod_group_crd(group) for group in crds.POD_GROUP_APIS), crds.queue_crd())
