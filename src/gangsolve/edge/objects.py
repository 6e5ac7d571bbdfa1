"""Kubernetes Node and Pod objects (as dicts) to the solver's types: the one place the API's shapes meet ours.

The objects have passed gangsolve.edge.schema.check: every field read here has its API type (or is absent/null).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

from gangsolve.edge import schema
from gangsolve.edge.errors import InputError, describe, shown
from gangsolve.edge.quantity import MAX_UNITS, to_units
from gangsolve.solver.model import PODS, Node, Pod, Queue, Requirement, SelectorTerm, Taint, Toleration

FINISHED = ("Succeeded", "Failed")  # pods in these phases hold no capacity
MAX_WEIGHT = 65535  # Volcano's Queue CRD: weight from 1 to 65535
CLOSED_STATES = ("Closed", "Closing")  # a Queue's status.state in which Volcano admits no new jobs
_INTEGER = re.compile(r"^[+-]?[0-9]{1,18}$")  # what Gt and Lt compare (an int64, as Go parses it)


def _get(obj: Mapping, path: str, default=None):
    cur = obj
    for key in path.split("."):
        if not isinstance(cur, dict) or key not in cur:  # API objects are dicts (dict, not the slower Mapping ABC)
            return default
        cur = cur[key]
    return cur if cur is not None else default


def resources(obj: dict, field: str, raw: Mapping | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, value in (raw or {}).items():
        try:
            out[name] = to_units(name, value)
        except ValueError as exc:
            raise InputError(describe(obj), f"{field}.{name}", str(exc)) from None
    return out


def node(obj: dict) -> Node:
    status = obj.get("status") or {}
    where = "status.allocatable" if "allocatable" in status else "status.capacity"
    allocatable = resources(obj, where, status.get("allocatable", status.get("capacity")))
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])
    taints = tuple(Taint(t["key"], t.get("value") or "", t["effect"]) for t in _get(obj, "spec.taints", []))
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
    for k, v in total.items():
        if v > MAX_UNITS:  # each quantity is in range, their sum need not be
            raise InputError(
                describe(obj),
                "spec.containers",
                f"requests add up to {v} {k}, above the most gangsolve represents ({MAX_UNITS})",
            )
    return {k: v for k, v in total.items() if v or k == PODS}


_AFFINITY = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"


def _requirements(obj: dict, field: str, raw: list[dict] | None) -> tuple[Requirement, ...]:
    """Node selector requirements, with the values each operator takes as the API server validates them."""
    out = []
    for i, r in enumerate(raw or []):
        op, values = r["operator"], tuple(r.get("values") or ())
        if op in ("In", "NotIn") and not values:
            raise InputError(describe(obj), f"{field}[{i}].values", f"{op} needs at least one value")
        if op in ("Exists", "DoesNotExist") and values:
            raise InputError(describe(obj), f"{field}[{i}].values", f"{op} takes no values")
        if op in ("Gt", "Lt") and (len(values) != 1 or not _INTEGER.match(values[0])):
            raise InputError(describe(obj), f"{field}[{i}].values", f"{op} takes one integer, got {shown(values)}")
        out.append(Requirement(r["key"], op, values))
    return tuple(out)


def selector_terms(obj: dict, field: str, terms: list[dict] | None) -> tuple[SelectorTerm, ...]:
    """A core/v1 NodeSelector's terms (`field` names them in errors)."""
    return tuple(
        SelectorTerm(
            _requirements(obj, f"{field}[{i}].matchExpressions", t.get("matchExpressions")),
            _requirements(obj, f"{field}[{i}].matchFields", t.get("matchFields")),
        )
        for i, t in enumerate(terms or [])
    )


def _affinity(obj: dict) -> tuple[SelectorTerm, ...]:
    return selector_terms(obj, _AFFINITY, _get(obj, _AFFINITY, []))


def _tolerations(obj: dict) -> tuple[Toleration, ...]:
    return tuple(
        Toleration(
            key=t.get("key") or "",
            operator=t.get("operator") or "Equal",
            value=t.get("value") or "",
            effect=t.get("effect") or "",
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
        return int(classes[name].get("value") or 0)
    defaults = [int(c.get("value") or 0) for c in classes.values() if c.get("globalDefault")]
    return max(defaults, default=0)


def preempts(obj: dict, classes: Mapping[str, dict]) -> bool:
    """spec.preemptionPolicy as admission set it, else its PriorityClass's: anything but Never may preempt."""
    policy = _get(obj, "spec.preemptionPolicy")
    if policy is None:
        policy = (classes.get(_get(obj, "spec.priorityClassName", "")) or {}).get("preemptionPolicy")
    return policy != "Never"


def pod(obj: dict, classes: Mapping[str, dict], order: int) -> Pod:
    return Pod(
        name=pod_key(obj),
        requests=pod_requests(obj),
        priority=priority(obj, classes),
        node_selector=dict(_get(obj, "spec.nodeSelector", {})),
        affinity=_affinity(obj),
        tolerations=_tolerations(obj),
        order=order,
        preempts=preempts(obj, classes),
    )


def nominated_node(obj: dict) -> str | None:
    """The node an earlier preemption nominated this pending pod to (status.nominatedNodeName)."""
    return _get(obj, "status.nominatedNodeName") or None


def started(obj: dict) -> float:
    """When the pod started (status.startTime, else its creation), in seconds since the epoch; 0 if unknown."""
    stamp = _get(obj, "status.startTime") or _get(obj, "metadata.creationTimestamp")
    return _epoch(stamp) if stamp else 0.0


@functools.lru_cache(maxsize=4096)
def _epoch(stamp: object) -> float:
    """Pods started in the same second share a stamp: each is read once."""
    return schema.timestamp(stamp).timestamp()


def is_bound(obj: dict) -> bool:
    return bool(_get(obj, "spec.nodeName"))


def is_finished(obj: dict) -> bool:
    return _get(obj, "status.phase") in FINISHED


def is_terminating(obj: dict) -> bool:
    return bool(_get(obj, "metadata.deletionTimestamp"))


def gates(obj: dict) -> list[str]:
    """The pod's scheduling gates (Kueue and others hold pods this way): no scheduler may place it while any
    remain."""
    return [g["name"] for g in _get(obj, "spec.schedulingGates", [])]


def is_waiting_for(obj: dict, scheduler_name: str) -> bool:
    """Unbound, not finished, not being deleted, and naming `scheduler_name`: gated or not."""
    return (
        not is_bound(obj)
        and _get(obj, "status.phase", "Pending") == "Pending"
        and _get(obj, "spec.schedulerName", "default-scheduler") == scheduler_name
        and not is_terminating(obj)
    )


def is_pending_for(obj: dict, scheduler_name: str) -> bool:
    """A pod for `scheduler_name` to place now."""
    return is_waiting_for(obj, scheduler_name) and not gates(obj)


def queue(obj: dict, allocated: Mapping[str, int]) -> Queue:
    """A Volcano Queue; `allocated` is what its bound pods hold (gangsolve counts it, as Volcano does)."""
    spec = obj.get("spec") or {}
    weight = spec.get("weight")
    weight = 1 if weight is None else weight
    if not 1 <= weight <= MAX_WEIGHT:
        raise InputError(describe(obj), "spec.weight", f"must be from 1 to {MAX_WEIGHT}, got {shown(weight)}")
    return Queue(
        name=obj["metadata"]["name"],
        weight=weight,
        capability=resources(obj, "spec.capability", spec.get("capability")),
        guarantee=resources(obj, "spec.guarantee.resource", (spec.get("guarantee") or {}).get("resource")),
        reclaimable=spec.get("reclaimable") is not False,
        allocated=dict(allocated),
        closed=(obj.get("status") or {}).get("state") in CLOSED_STATES,
    )
