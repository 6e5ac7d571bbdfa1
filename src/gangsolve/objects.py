"""Kubernetes Node and Pod objects (as dicts) to the solver's types: the one place the API's shapes meet ours."""

from __future__ import annotations

from collections.abc import Mapping

from gangsolve.errors import InputError, describe
from gangsolve.quantity import to_units
from gangsolve.solver.model import PODS, Node, Pod, Requirement, SelectorTerm, Taint, Toleration

FINISHED = ("Succeeded", "Failed")  # pods in these phases hold no capacity


def _get(obj: Mapping, path: str, default=None):
    cur = obj
    for key in path.split("."):
        if not isinstance(cur, Mapping) or key not in cur:
            return default
        cur = cur[key]
    return cur if cur is not None else default


def resources(obj: dict, field: str, raw: Mapping | None) -> dict[str, int]:
    out: dict[str, int] = {}
    if raw is None:
        return out
    if not isinstance(raw, Mapping):
        raise InputError(describe(obj), field, "expected a map of resource quantities")
    for name, value in raw.items():
        try:
            out[name] = to_units(name, value)
        except ValueError as exc:
            raise InputError(describe(obj), f"{field}.{name}", str(exc)) from None
    return out


def node(obj: dict) -> Node:
    status = obj.get("status") or {}
    where = "status.allocatable" if "allocatable" in status else "status.capacity"
    allocatable = resources(obj, where, status.get("allocatable", status.get("capacity")))
    conditions = status.get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions if isinstance(c, Mapping))
    taints = tuple(
        Taint(str(t.get("key", "")), str(t.get("value", "") or ""), str(t.get("effect", "")))
        for t in _get(obj, "spec.taints", [])
    )
    return Node(
        name=obj["metadata"]["name"],
        allocatable=allocatable,
        labels=dict(_get(obj, "metadata.labels", {})),
        taints=taints,
        unschedulable=bool(_get(obj, "spec.unschedulable", False)),
        ready=ready,
    )


def _container_requests(obj: dict, field: str, container: Mapping) -> dict[str, int]:
    # The API server defaults a missing request to the limit; snapshots written by hand may lack that step.
    limits = resources(obj, f"{field}.resources.limits", _get(container, "resources.limits"))
    requests = resources(obj, f"{field}.resources.requests", _get(container, "resources.requests"))
    return {**limits, **requests}


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + v


def pod_requests(obj: dict) -> dict[str, int]:
    """Effective requests as kube-scheduler computes them: the containers' sum (plus sidecars), raised to any
    init container's request (plus the sidecars started before it), plus the pod overhead; and one pod slot."""
    spec = obj.get("spec") or {}
    total: dict[str, int] = {}
    for i, c in enumerate(spec.get("containers") or []):
        _add(total, _container_requests(obj, f"spec.containers[{i}]", c))
    sidecars: dict[str, int] = {}
    peak: dict[str, int] = {}
    for i, c in enumerate(spec.get("initContainers") or []):
        req = _container_requests(obj, f"spec.initContainers[{i}]", c)
        if c.get("restartPolicy") == "Always":  # a sidecar runs alongside everything after it
            _add(sidecars, req)
            step = dict(sidecars)
        else:
            step = dict(req)
            _add(step, sidecars)
        for k, v in step.items():
            peak[k] = max(peak.get(k, 0), v)
    _add(total, sidecars)
    for k, v in peak.items():
        total[k] = max(total.get(k, 0), v)
    _add(total, resources(obj, "spec.overhead", spec.get("overhead")))
    total[PODS] = 1
    return {k: v for k, v in total.items() if v or k == PODS}


def _requirements(obj: dict, field: str, raw) -> tuple[Requirement, ...]:
    out = []
    for i, r in enumerate(raw or []):
        op = r.get("operator")
        if op not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
            raise InputError(describe(obj), f"{field}[{i}].operator", f"unknown operator {op!r}")
        out.append(Requirement(str(r.get("key", "")), op, tuple(str(v) for v in r.get("values") or ())))
    return tuple(out)


def _affinity(obj: dict) -> tuple[SelectorTerm, ...]:
    base = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
    terms = _get(obj, base, [])
    return tuple(
        SelectorTerm(
            _requirements(obj, f"{base}[{i}].matchExpressions", t.get("matchExpressions")),
            _requirements(obj, f"{base}[{i}].matchFields", t.get("matchFields")),
        )
        for i, t in enumerate(terms)
    )


def _tolerations(obj: dict) -> tuple[Toleration, ...]:
    return tuple(
        Toleration(
            key=str(t.get("key", "") or ""),
            operator=str(t.get("operator", "Equal") or "Equal"),
            value=str(t.get("value", "") or ""),
            effect=str(t.get("effect", "") or ""),
        )
        for t in _get(obj, "spec.tolerations", [])
    )


def pod_key(obj: dict) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


def priority(obj: dict, classes: Mapping[str, dict]) -> int:
    """spec.priority as admission set it, else the named PriorityClass, else the global default, else 0."""
    value = _get(obj, "spec.priority")
    if isinstance(value, int):
        return value
    name = _get(obj, "spec.priorityClassName")
    if name:
        if name not in classes:
            raise InputError(describe(obj), "spec.priorityClassName", f"PriorityClass {name!r} not in snapshot")
        return int(classes[name].get("value", 0))
    defaults = [int(c.get("value", 0)) for c in classes.values() if c.get("globalDefault")]
    return max(defaults, default=0)


def pod(obj: dict, classes: Mapping[str, dict], order: int) -> Pod:
    selector = _get(obj, "spec.nodeSelector", {})
    if not isinstance(selector, Mapping):
        raise InputError(describe(obj), "spec.nodeSelector", "expected a map of labels")
    return Pod(
        name=pod_key(obj),
        requests=pod_requests(obj),
        priority=priority(obj, classes),
        node_selector={str(k): str(v) for k, v in selector.items()},
        affinity=_affinity(obj),
        tolerations=_tolerations(obj),
        order=order,
    )


def is_bound(obj: dict) -> bool:
    return bool(_get(obj, "spec.nodeName"))


def is_finished(obj: dict) -> bool:
    return _get(obj, "status.phase") in FINISHED


def is_pending_for(obj: dict, scheduler_name: str) -> bool:
    return (
        not is_bound(obj)
        and _get(obj, "status.phase", "Pending") == "Pending"
        and _get(obj, "spec.schedulerName", "default-scheduler") == scheduler_name
        and not _get(obj, "metadata.deletionTimestamp")
    )
