"""The watched resources the live tests feed the store, by name (one place instead of one per test file)."""

from __future__ import annotations

from gangsolve.live.messages import Resource
from gangsolve.live.watchers import RESOURCES


def _by(api_version: str, kind: str) -> Resource:
    return next(r for r in RESOURCES if r.api_version.startswith(api_version) and r.kind == kind)


POD = _by("v1", "Pod")
NODE = _by("v1", "Node")
PDB = _by("policy/", "PodDisruptionBudget")
PRIORITY_CLASS = _by("scheduling.k8s.io/", "PriorityClass")
XPG = _by("scheduling.x-k8s.io/", "PodGroup")  # scheduler-plugins' coscheduling
VPG = _by("scheduling.volcano.sh/", "PodGroup")
KPG = _by("scheduling.k8s.io/v1beta1", "PodGroup")  # Kubernetes' own (KEP-4671)
QUEUE = _by("scheduling.volcano.sh/", "Queue")
SLICE = _by("resource.k8s.io/", "ResourceSlice")
CLASS = _by("resource.k8s.io/", "DeviceClass")
CLAIM = _by("resource.k8s.io/", "ResourceClaim")
