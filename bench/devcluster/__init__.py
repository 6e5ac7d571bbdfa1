"""A real local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
kwok) for gangsolve's tests and demos. See docs/dev-cluster.md."""

from gangsolve.bench.devcluster.binaries import Binaries, BinariesMissing
from gangsolve.bench.devcluster.controlplane import (
    GPU_RESOURCE,
    ApiError,
    ControlPlane,
    ControlPlaneError,
    NodeSpec,
    Taint,
)

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
