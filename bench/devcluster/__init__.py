"""A real local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
kwok) for gangsolve's tests and demos. See docs/dev-cluster.md."""

from gangsolve.bench.devcluster.binaries import Binaries, BinariesMissing
from gangsolve.bench.devcluster.controlplane import ApiError, ControlPlane, ControlPlaneError
from gangsolve.bench.devcluster.fake_nodes import GPU_RESOURCE, NodeSpec, Taint

__all__ = [
    "GPU_RESOURCE",
    "ApiError",
    "Binaries",
    "BinariesMissing",
    "ControlPlane",
    "ControlPlaneError",
    "NodeSpec",
    "Taint",
]
