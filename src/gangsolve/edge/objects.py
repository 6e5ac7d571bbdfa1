"""Kubernetes Node and Pod objects, as gangsolve.edge.schema decodes them, to the solver's types: the one place
the API's shapes meet ours.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime

import msgspec

from gangsolve.edge import schema, shares, usage
from gangsolve.edge.errors import InputError, shown
from gangsolve.edge.quantity import HUGEPAGES, MAX_UNITS, overcommits, parse_duration, whole_pages
from gangsolve.edge.schema import units
from gangsolve.solver.model import PODS, SHARE, Node, Pod, Queue, Requirement, SelectorTerm, Taint, Toleration
from gangsolve.solver.queues import ROOT

CLOSED_STATES = ("Closed", "Closing")  # a Queue's status.state in which Volcano admits no new jobs
_INTEGER = re.compile(r"^[+-]?[0-9]{1,18}$")  # what Gt and Lt compare (an int64, as Go parses it)
PriorityClasses = Mapping[str, schema.PriorityClass]


def node(obj: schema.Node) -> Node:
    status = obj.status
    allocatable = (
        units(obj, "status.capacity", status.capacity)
        if status.allocatable is msgspec.UNSET
        else units(obj, "status.allocatable", status.allocatable)
    )
    ready = any(c.type == "Ready" and c.status == "True" for c in status.conditions or ())
    return Node(
        name=str(obj.metadata.name),
        allocatable=allocatable,
        labels=dict(obj.metadata.labels),
        taints=tuple(Taint(t.key, t.value or "", t.effect) for t in obj.spec.taints or ()),
        unschedulable=bool(obj.spec.unschedulable),
        ready=ready,
        gpu_memory=shares.gpu_memory(obj),
    )


def _container_requests(obj: schema.Pod, field: str, container: schema.Container) -> dict[str, int]:
    # The API server defaults a missing request to the limit; snapshots written by hand may lack that step.
    resources = container.resources or _NO_RESOURCES
    limits = units(obj, f"{field}.resources.limits", resources.limits)
    requests = units(obj, f"{field}.resources.requests", resources.requests)
    _check_resources(obj, f"{field}.resources", resources, requests, limits)
    return {**limits, **requests}


def _check_resources(
    obj: schema.Pod,
    field: str,
    given: schema.ResourceRequirements,
    requests: Mapping[str, int],
    limits: Mapping[str, int],
) -> None:
    """What the API server holds a container's (or the overhead's) resources to beyond each quantity: no
    overcommit of extended resources and hugepages (a request equals its limit), hugepages in whole pages and
    only beside cpu or memory. (A request without its limit, which it also refuses, is read: synthetic snapshots
    carry requests only.)"""
    for name, amount in requests.items():
        if name in limits and amount != limits[name] and not overcommits(name):
            message = f"must be equal to {name} limit of {shown((given.limits or {})[name])}"
            raise InputError(obj.describe(), f"{field}.requests.{name}", message)
    for kind, amounts, quantities in (("requests", requests, given.requests), ("limits", limits, given.limits)):
        for name, amount in amounts.items():
            if name.startswith(HUGEPAGES) and not whole_pages(name, amount):
                message = f"{shown((quantities or {})[name])} is not positive integer multiple of {name}"
                raise InputError(obj.describe(), f"{field}.{kind}.{name}", message)
    hugepages = any(name.startswith(HUGEPAGES) for name in (*requests, *limits))
    if hugepages and not {"cpu", "memory"} & {*requests, *limits}:
        raise InputError(obj.describe(), field, "HugePages require cpu or memory")


_NO_RESOURCES = schema.ResourceRequirements()


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + v


# Requests by the pod's resource fields: a cluster's pods repeat a few shapes tens of thousands of times, and
# reading one is most of what the edge spends on a bound pod. Only readable shapes are kept (a bad one raises,
# naming each pod that has it); bounded, as the live scheduler runs for weeks.
_REQUESTS: dict[tuple, dict[str, int]] = {}
_REQUESTS_KEPT = 4096


def _resources_key(containers: list[schema.Container] | None) -> tuple:
    return tuple(
        (
            tuple((c.resources.requests or {}).items()) if c.resources else (),
            tuple((c.resources.limits or {}).items()) if c.resources else (),
            c.restartPolicy,
        )
        for c in containers or ()
    )


def pod_requests(obj: schema.Pod) -> dict[str, int]:
    """Effective requests as kube-scheduler computes them: the containers' sum (plus sidecars), raised to any
    init container's request (plus the sidecars started before it), plus the pod overhead; and one pod slot.
    A GPU fraction (annotation `gpu-fraction`) adds its milli-GPU as SHARE; a share asked as memory depends on
    the node, and is added where the node is known (gangs.py)."""
    spec = obj.spec
    key = (_resources_key(spec.containers), _resources_key(spec.initContainers), tuple((spec.overhead or {}).items()))
    known = _REQUESTS.get(key)
    if known is None:
        if len(_REQUESTS) >= _REQUESTS_KEPT:
            _REQUESTS.clear()
        known = _REQUESTS[key] = _read_requests(obj)
    requests = dict(known)
    share = shares.asked(obj, requests)  # from the annotations, which the shape leaves out
    if share is not None and share.milli:
        requests[SHARE] = share.milli
    return requests


def _read_requests(obj: schema.Pod) -> dict[str, int]:
    spec = obj.spec
    total: dict[str, int] = {}
    for i, c in enumerate(spec.containers or ()):
        _add(total, _container_requests(obj, f"spec.containers[{i}]", c))
    sidecars: dict[str, int] = {}
    peak: dict[str, int] = {}
    for i, c in enumerate(spec.initContainers or ()):
        req = _container_requests(obj, f"spec.initContainers[{i}]", c)
        if c.restartPolicy == "Always":  # a sidecar runs alongside everything after it
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
    overhead = units(obj, "spec.overhead", spec.overhead)
    _check_resources(obj, "spec.overhead", schema.ResourceRequirements(limits=spec.overhead), {}, overhead)
    _add(total, overhead)
    total[PODS] = 1
    for k, v in total.items():
        if v > MAX_UNITS:  # each quantity is in range, their sum need not be
            raise InputError(
                obj.describe(),
                "spec.containers",
                f"requests add up to {v} {k}, above the most gangsolve represents ({MAX_UNITS})",
            )
    return {k: v for k, v in total.items() if v or k == PODS}


_AFFINITY = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"


def _requirements(
    obj: schema.Object, field: str, given: list[schema.NodeSelectorRequirement] | None
) -> tuple[Requirement, ...]:
    """Node selector requirements, with the values each operator takes as the API server validates them."""
    out = []
    for i, r in enumerate(given or ()):
        op, values = r.operator, tuple(r.values or ())
        if op in ("In", "NotIn") and not values:
            raise InputError(obj.describe(), f"{field}[{i}].values", f"{op} needs at least one value")
        if op in ("Exists", "DoesNotExist") and values:
            raise InputError(obj.describe(), f"{field}[{i}].values", f"{op} takes no values")
        if op in ("Gt", "Lt") and (len(values) != 1 or not _INTEGER.match(values[0])):
            raise InputError(obj.describe(), f"{field}[{i}].values", f"{op} takes one integer, got {shown(values)}")
        out.append(Requirement(r.key, op, values))
    return tuple(out)


def selector_terms(
    obj: schema.Object, field: str, terms: list[schema.NodeSelectorTerm] | None
) -> tuple[SelectorTerm, ...]:
    """A core/v1 NodeSelector's terms (`field` names them in errors)."""
    return tuple(
        SelectorTerm(
            _requirements(obj, f"{field}[{i}].matchExpressions", t.matchExpressions),
            _requirements(obj, f"{field}[{i}].matchFields", t.matchFields),
        )
        for i, t in enumerate(terms or ())
    )


def _affinity(obj: schema.Pod) -> tuple[SelectorTerm, ...]:
    affinity = obj.spec.affinity
    node_affinity = affinity.nodeAffinity if affinity is not None else None
    required = node_affinity.requiredDuringSchedulingIgnoredDuringExecution if node_affinity is not None else None
    return selector_terms(obj, _AFFINITY, required.nodeSelectorTerms if required is not None else None)


def _tolerations(obj: schema.Pod) -> tuple[Toleration, ...]:
    return tuple(
        Toleration(key=t.key or "", operator=t.operator or "Equal", value=t.value or "", effect=t.effect or "")
        for t in obj.spec.tolerations or ()
    )


def pod_key(obj: dict) -> str:
    """`namespace/name` of an API object (a pod's key wherever pods are filed: the store, the edge, the solver)."""
    meta = obj["metadata"]
    return f"{meta.get('namespace') or ''}/{meta['name']}"


def priority(obj: schema.Pod | schema.PodGroup, classes: PriorityClasses) -> int:
    """spec.priority as admission set it, else the named PriorityClass, else the global default, else 0."""
    spec = obj.spec
    if spec.priority is not None:
        return spec.priority
    name = spec.priorityClassName
    if name:
        if name not in classes:
            raise InputError(obj.describe(), "spec.priorityClassName", f"PriorityClass {name!r} not in snapshot")
        return classes[name].value
    return max((c.value for c in classes.values() if c.globalDefault), default=0)


def preempts(obj: schema.Pod, classes: PriorityClasses) -> bool:
    """spec.preemptionPolicy as admission set it, else its PriorityClass's: anything but Never may preempt."""
    policy = obj.spec.preemptionPolicy
    if policy is None:
        named = classes.get(obj.spec.priorityClassName or "")
        policy = named.preemptionPolicy if named is not None else None
    return policy != "Never"


def pod(obj: dict, classes: Mapping[str, dict], order: int) -> Pod:
    """An API object (as the live scheduler holds it) to the solver's Pod: `to_pod` of its decoded form."""
    return to_pod(schema.check(obj, "Pod"), {n: schema.check(c, "PriorityClass") for n, c in classes.items()}, order)


def to_pod(obj: schema.Pod, classes: PriorityClasses, order: int) -> Pod:
    requests = pod_requests(obj)
    share = shares.asked(obj, requests)
    return Pod(
        name=obj.key,
        requests=requests,
        priority=priority(obj, classes),
        node_selector=dict(obj.spec.nodeSelector or {}),
        affinity=_affinity(obj),
        tolerations=_tolerations(obj),
        order=order,
        preempts=preempts(obj, classes),
        gpu_memory=share.memory if share is not None else 0,
    )


def started(obj: schema.Pod) -> float:
    """When the pod started (status.startTime, else its creation), in seconds since the epoch; 0 if unknown."""
    stamp = obj.status.startTime or obj.metadata.creationTimestamp
    return stamp.timestamp() if stamp else 0.0


# The live scheduler's actors filter the API objects they hold (not decoded, some unreadable) with these two; the
# edge reads the same facts from decoded pods (schema.Pod.waiting_for).


def is_waiting_for(obj: dict, scheduler_name: str) -> bool:
    """Unbound, not finished, not being deleted, and naming `scheduler_name`: gated or not."""
    return (
        not _get(obj, "spec.nodeName")
        and _get(obj, "status.phase", "Pending") == "Pending"
        and _get(obj, "spec.schedulerName", "default-scheduler") == scheduler_name
        and not _get(obj, "metadata.deletionTimestamp")
    )


def is_pending_for(obj: dict, scheduler_name: str) -> bool:
    """A pod for `scheduler_name` to place now: no scheduling gate holds it."""
    return is_waiting_for(obj, scheduler_name) and not _get(obj, "spec.schedulingGates")


def _get(obj: Mapping, path: str, default=None):
    cur = obj
    for key in path.split("."):
        if not isinstance(cur, dict) or key not in cur:  # API objects are dicts (dict, not the slower Mapping ABC)
            return default
        cur = cur[key]
    return cur if cur is not None else default


MIN_RUNTIME_ANNOTATION = "gangsolve.io/min-runtime"  # on a Queue: how long its pods run before they may be evicted


def queue(
    obj: schema.Queue, allocated: Mapping[str, int], now: datetime | None = None, half_life: float = 0.0
) -> Queue:
    """A Volcano Queue; `allocated` is what its bound pods hold (gangsolve counts it, as Volcano does). With a
    `half_life` and the cycle's clock `now`, its usage history (the annotation the live scheduler writes),
    decayed to `now`."""
    spec = obj.spec
    past = 0.0
    if half_life > 0 and now is not None and (text := obj.metadata.annotations.get(usage.ANNOTATION)) is not None:
        try:
            value, at = usage.read(text)
        except ValueError:
            raise InputError(
                obj.describe(),
                f"metadata.annotations.{usage.ANNOTATION}",
                f"expected a number and a time such as '5400.0 2026-12-01T08:00:00Z', got {text!r}",
            ) from None
        past = usage.decayed(value, (now - at).total_seconds(), half_life)
    min_runtime = None
    if (text := obj.metadata.annotations.get(MIN_RUNTIME_ANNOTATION)) is not None:
        try:
            min_runtime = parse_duration(text)
        except ValueError:
            min_runtime = -1.0
        if min_runtime < 0:
            raise InputError(
                obj.describe(),
                f"metadata.annotations.{MIN_RUNTIME_ANNOTATION}",
                f"expected a duration such as 10m or 1h30m, got {text!r}",
            )
    return Queue(
        name=str(obj.metadata.name),
        weight=1 if spec.weight is None else spec.weight,
        capability=units(obj, "spec.capability", spec.capability, whole=False),
        guarantee=units(
            obj, "spec.guarantee.resource", spec.guarantee.resource if spec.guarantee else None, whole=False
        ),
        reclaimable=spec.reclaimable is not False,
        allocated=dict(allocated),
        closed=obj.state in CLOSED_STATES,
        parent="" if spec.parent in (None, "", ROOT) else str(spec.parent),
        deserved=units(obj, "spec.deserved", spec.deserved, whole=False),
        min_runtime=min_runtime,
        usage=past,
    )
