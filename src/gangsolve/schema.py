"""The shape of every field gangsolve reads, checked in one place before anything reads them.

Each kind gangsolve understands has a small schema (msgspec structs) of just the fields the edge reads, typed as
the Kubernetes API types them; fields it does not read are ignored, whatever they hold. `check(obj)` raises an
InputError naming the object and the field, so the code after it reads plain, well-typed dicts. Values
(quantities, percentages, minimums) are checked where they are read, with the same error shape.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

from gangsolve.errors import InputError, describe

Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
Timestamp = Annotated[datetime, msgspec.Meta(tz=True)]  # RFC 3339, with a zone; YAML may hand a datetime
Quantity = str | int | float  # its grammar and range are checked by gangsolve.quantity
Labels = dict[str, str]
Resources = dict[str, Quantity]


class _Struct(msgspec.Struct, omit_defaults=True):
    pass


class OwnerReference(_Struct):
    name: str | None = None
    uid: str | None = None
    controller: bool | None = None


class Metadata(_Struct):
    name: str | None = None
    namespace: str | None = None
    labels: Labels | None = None
    annotations: Labels | None = None
    ownerReferences: list[OwnerReference] | None = None
    creationTimestamp: Timestamp | None = None
    deletionTimestamp: Timestamp | None = None


class ResourceRequirements(_Struct):
    requests: Resources | None = None
    limits: Resources | None = None


class Container(_Struct):
    resources: ResourceRequirements | None = None
    restartPolicy: str | None = None  # `Always` on an init container makes it a sidecar


class NodeSelectorRequirement(_Struct):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] | None = None


class NodeSelectorTerm(_Struct):
    matchExpressions: list[NodeSelectorRequirement] | None = None
    matchFields: list[NodeSelectorRequirement] | None = None


class NodeSelector(_Struct):
    nodeSelectorTerms: list[NodeSelectorTerm] | None = None


class NodeAffinity(_Struct):
    requiredDuringSchedulingIgnoredDuringExecution: NodeSelector | None = None


class Affinity(_Struct):
    nodeAffinity: NodeAffinity | None = None


class Toleration(_Struct):
    key: str | None = None
    operator: Literal["Exists", "Equal", ""] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""] | None = None


class SchedulingGate(_Struct):
    name: str


class PodSchedulingGroup(_Struct):
    podGroupName: str | None = None


class PodSpec(_Struct):
    schedulingGroup: PodSchedulingGroup | None = None  # Kubernetes' own PodGroup (scheduling.k8s.io)
    nodeName: str | None = None
    schedulerName: str | None = None
    priority: Int32 | None = None
    priorityClassName: str | None = None
    nodeSelector: Labels | None = None
    affinity: Affinity | None = None
    tolerations: list[Toleration] | None = None
    containers: list[Container] | None = None
    initContainers: list[Container] | None = None
    overhead: Resources | None = None
    schedulingGates: list[SchedulingGate] | None = None


class PodStatus(_Struct):
    phase: str | None = None


class Pod(_Struct):
    metadata: Metadata
    spec: PodSpec | None = None
    status: PodStatus | None = None


class Taint(_Struct):
    key: str
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
    value: str | None = None


class NodeSpec(_Struct):
    taints: list[Taint] | None = None
    unschedulable: bool | None = None


class NodeCondition(_Struct):
    type: str
    status: str


class NodeStatus(_Struct):
    allocatable: Resources | None = None
    capacity: Resources | None = None
    conditions: list[NodeCondition] | None = None


class Node(_Struct):
    metadata: Metadata
    spec: NodeSpec | None = None
    status: NodeStatus | None = None


class LabelSelectorRequirement(_Struct):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] | None = None


class LabelSelector(_Struct):
    matchLabels: Labels | None = None
    matchExpressions: list[LabelSelectorRequirement] | None = None


IntOrString = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)] | str  # a count, or a percentage "50%"


class PodDisruptionBudgetSpec(_Struct):
    selector: LabelSelector | None = None
    minAvailable: IntOrString | None = None
    maxUnavailable: IntOrString | None = None


class PodDisruptionBudget(_Struct):
    metadata: Metadata
    spec: PodDisruptionBudgetSpec | None = None


class GangSchedulingPolicy(_Struct):
    minCount: Int32 | None = None


class PodGroupSchedulingPolicy(_Struct):
    gang: GangSchedulingPolicy | None = None
    basic: dict[str, Any] | None = None


class TopologyConstraint(_Struct):
    key: str


class PodGroupSchedulingConstraints(_Struct):
    topology: list[TopologyConstraint] | None = None


class PodGroupSpec(_Struct):
    minMember: Int32 | str | None = None  # the CRDs say int32; a string is read if it holds a whole number
    # Kubernetes' own PodGroup (scheduling.k8s.io v1beta1, v1alpha2)
    schedulingPolicy: PodGroupSchedulingPolicy | None = None
    schedulingConstraints: PodGroupSchedulingConstraints | None = None
    priority: Int32 | None = None
    priorityClassName: str | None = None


class PodGroup(_Struct):
    metadata: Metadata
    spec: PodGroupSpec | None = None


class PriorityClass(_Struct):
    metadata: Metadata
    value: Int32 = 0
    globalDefault: bool | None = None


SCHEMAS: dict[str, type[_Struct]] = {
    "Node": Node,
    "Pod": Pod,
    "PodDisruptionBudget": PodDisruptionBudget,
    "PodGroup": PodGroup,
    "PriorityClass": PriorityClass,
}


def check(obj: dict, kind: str | None = None) -> None:
    """Raise InputError (naming the object and field) unless every field gangsolve reads has its API type.
    `kind` is what the object was filed as (objects listed from the API server may not carry theirs)."""
    schema = SCHEMAS[kind or obj["kind"]]
    try:
        msgspec.convert(obj, schema)
    except msgspec.ValidationError as exc:
        field, message = _where(str(exc))
        if "[...]" in field:
            field = _map_key(obj, schema, field)
        raise InputError(describe(obj), field, message) from None


def timestamp(value: Any) -> datetime:
    """A creationTimestamp as `check` accepted it (RFC 3339 text, or a datetime YAML read unquoted)."""
    result: datetime = msgspec.convert(value, Timestamp)
    return result


_AT = re.compile(r"^(?P<message>.*?) - at (?P<key>`key` in )?`\$(?P<path>[^`]*)`$", re.DOTALL)
_TOKEN = re.compile(r"\.(\w+)|\[(\d+)\]")


def _where(text: str) -> tuple[str, str]:
    """msgspec's `Expected `str`, got `int` - at `$.metadata.labels[...]`` as (field, message)."""
    match = _AT.match(text)
    if not match:
        return "", _sentence(text)
    message, path = _sentence(match["message"]), match["path"].lstrip(".")
    if match["key"]:
        message = f"a key: {message}"
    return path, message


def _sentence(text: str) -> str:
    text = text.replace("`", "")
    return text[:1].lower() + text[1:]


def _map_key(obj: dict, schema: type[_Struct], field: str) -> str:
    """msgspec names a map's bad value `labels[...]`: find its key by checking the map one entry at a time
    (only on the error path, so the cost does not matter)."""
    head, _, tail = field.partition("[...]")
    tokens = [name or int(index) for name, index in _TOKEN.findall("." + head)]
    entries = _walk(obj, tokens)
    if isinstance(entries, dict):
        for key, value in entries.items():
            try:
                msgspec.convert(_replaced(obj, tokens, {key: value}), schema)
            except msgspec.ValidationError:
                return f"{head}.{key}{tail}"
    return field


def _walk(obj: Any, tokens: list[str | int]) -> Any:
    for token in tokens:
        obj = obj[token]
    return obj


def _replaced(obj: Any, tokens: list[str | int], value: Any) -> Any:
    """A copy of `obj` with the value at `tokens` replaced, sharing everything off that path."""
    if not tokens:
        return value
    first, rest = tokens[0], tokens[1:]
    if isinstance(obj, dict):
        return {**obj, first: _replaced(obj[first], rest, value)}
    return [_replaced(item, rest, value) if i == first else item for i, item in enumerate(obj)]
