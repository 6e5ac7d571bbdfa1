"""What of an object matters to a scheduling decision: the store starts a cycle only when that changes."""

from __future__ import annotations

from gangsolve.edge import shares
from gangsolve.edge.snapshot import DRA_KINDS


def _ready(node: dict) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions if isinstance(c, dict))


def fingerprint(kind: str, obj: dict) -> object:
    """What of an object matters to a scheduling decision; a change elsewhere starts no cycle. A bound pod's
    phase does not matter (it holds its capacity until it finishes, and finished pods are never watched)."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    if kind == "Pod":
        return (
            meta.get("uid"),
            meta.get("labels"),
            _annotations(meta, spec),
            meta.get("ownerReferences"),
            meta.get("deletionTimestamp"),
            spec,
            None if spec.get("nodeName") else status.get("phase"),
        )
    if kind == "Node":
        return (
            meta.get("labels"),
            spec.get("taints"),
            spec.get("unschedulable"),
            status.get("allocatable", status.get("capacity")),
            _ready(obj),
        )
    if kind == "PriorityClass":
        return (obj.get("value"), obj.get("globalDefault"))
    if kind == "ResourceClaim":  # its allocation and reservations decide which devices are free
        return (
            meta.get("uid"),
            meta.get("deletionTimestamp"),
            spec,
            status.get("allocation"),
            status.get("reservedFor"),
        )
    if kind in DRA_KINDS:
        return spec
    if kind == "Queue":  # its state (Open, Closed) is in its status; what it holds is ours to write
        return (meta.get("labels"), meta.get("annotations"), spec, status.get("state"))
    return (meta.get("labels"), meta.get("annotations"), spec)  # PDB, PodGroup: not their status


def _annotations(meta: dict, spec: dict) -> dict:
    """A pod's annotations, but the GPU index the binder writes before the bind: it is news once bound only."""
    return {k: v for k, v in (meta.get("annotations") or {}).items() if k != shares.INDEX or spec.get("nodeName")}
