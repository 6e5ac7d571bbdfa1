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

from gangsolve.edge.errors import InputError, describe

Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
Timestamp = Annotated[datetime, msgspec.Meta(tz=True)]  # RFC 3339, with a zone; YAML may hand a datetime
Quantity = str | int | float  # its grammar and range are checked by gangsolve.edge.quantity
Labels = dict[str, str]
Resources = dict[str, Quantity]


class _Struct(msgspec.Struct, omit_defaults=True):
    pass


class OwnerReference(_Struct):
    kind: str | None = None  # the training kinds' pods wait for their gang definition
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


PreemptionPolicy = Literal["Never", "PreemptLowerPriority"]


class SchedulingGate(_Struct):
    name: str


class PodSchedulingGroup(_Struct):
    podGroupName: str | None = None


class PodResourceClaim(_Struct):
    name: str
    resourceClaimName: str | None = None
    resourceClaimTemplateName: str | None = None


class PodSpec(_Struct):
    resourceClaims: list[PodResourceClaim] | None = None  # Dynamic Resource Allocation
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
    preemptionPolicy: PreemptionPolicy | None = None


class PodResourceClaimStatus(_Struct):
    name: str
    resourceClaimName: str | None = None  # the claim made from the pod's template (unset: none was needed)


class PodStatus(_Struct):
    phase: str | None = None
    resourceClaimStatuses: list[PodResourceClaimStatus] | None = None
    nominatedNodeName: str | None = None
    startTime: Timestamp | None = None


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


class PodDisruptionBudgetStatus(_Struct):
    disruptionsAllowed: Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)] | None = None


class PodDisruptionBudget(_Struct):
    metadata: Metadata
    spec: PodDisruptionBudgetSpec | None = None
    status: PodDisruptionBudgetStatus | None = None


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
    queue: str | None = None  # Volcano's PodGroup names its Queue


class PodGroup(_Struct):
    metadata: Metadata
    spec: PodGroupSpec | None = None


class PriorityClass(_Struct):
    metadata: Metadata
    value: Int32 = 0
    globalDefault: bool | None = None
    preemptionPolicy: PreemptionPolicy | None = None


class QueueGuarantee(_Struct):
    resource: Resources | None = None


class QueueSpec(_Struct):
    weight: Int32 | None = None
    capability: Resources | None = None
    guarantee: QueueGuarantee | None = None
    reclaimable: bool | None = None


class QueueStatus(_Struct):
    state: str | None = None  # Open, Closed, Closing, Unknown (Volcano's controller sets it)


class Queue(_Struct):  # scheduling.volcano.sh/v1beta1
    metadata: Metadata
    spec: QueueSpec | None = None
    status: QueueStatus | None = None


# Dynamic Resource Allocation, resource.k8s.io/v1 (as the pinned API server's OpenAPI types it)


Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
Bool = bool  # the attribute's fields are named after their types: aliases keep the names apart


class DeviceAttribute(_Struct):
    int: Int64 | None = None
    bool: Bool | None = None
    string: str | None = None
    version: str | None = None
    ints: list[Int64] | None = None
    bools: list[Bool] | None = None
    strings: list[str] | None = None
    versions: list[str] | None = None


class DeviceCapacity(_Struct):
    value: Quantity


class DeviceTaint(_Struct):
    key: str
    effect: str
    value: str | None = None


class DeviceCounterConsumption(_Struct):
    counterSet: str


class Device(_Struct):
    name: str
    attributes: dict[str, DeviceAttribute] | None = None
    capacity: dict[str, DeviceCapacity] | None = None
    allowMultipleAllocations: bool | None = None
    taints: list[DeviceTaint] | None = None
    consumesCounters: list[DeviceCounterConsumption] | None = None
    nodeName: str | None = None
    nodeSelector: NodeSelector | None = None
    allNodes: bool | None = None


class ResourcePool(_Struct):
    name: str
    generation: Annotated[int, msgspec.Meta(ge=0)] = 0
    resourceSliceCount: Annotated[int, msgspec.Meta(ge=1)] = 1


class ResourceSliceSpec(_Struct):
    driver: str
    pool: ResourcePool
    nodeName: str | None = None
    nodeSelector: NodeSelector | None = None
    allNodes: bool | None = None
    perDeviceNodeSelection: bool | None = None
    devices: list[Device] | None = None


class ResourceSlice(_Struct):
    metadata: Metadata
    spec: ResourceSliceSpec


class CELDeviceSelector(_Struct):
    expression: str


class DeviceSelector(_Struct):
    cel: CELDeviceSelector | None = None


class DeviceClassSpec(_Struct):
    selectors: list[DeviceSelector] | None = None
    extendedResourceName: str | None = None


class DeviceClass(_Struct):
    metadata: Metadata
    spec: DeviceClassSpec | None = None


class DeviceToleration(_Struct):
    key: str | None = None
    operator: Literal["Exists", "Equal", ""] | None = None
    value: str | None = None
    effect: str | None = None


class ExactDeviceRequest(_Struct):
    deviceClassName: str
    selectors: list[DeviceSelector] | None = None
    allocationMode: str | None = None
    count: Annotated[int, msgspec.Meta(ge=1, le=2**31 - 1)] | None = None
    adminAccess: bool | None = None
    tolerations: list[DeviceToleration] | None = None
    capacity: dict[str, Any] | None = None


class DeviceRequest(_Struct):
    name: str
    exactly: ExactDeviceRequest | None = None
    firstAvailable: list[dict[str, Any]] | None = None


class DeviceConstraint(_Struct):
    requests: list[str] | None = None
    matchAttribute: str | None = None
    distinctAttribute: str | None = None


class DeviceClaim(_Struct):
    requests: list[DeviceRequest] | None = None
    constraints: list[DeviceConstraint] | None = None


class ResourceClaimSpec(_Struct):
    devices: DeviceClaim | None = None


class DeviceRequestAllocationResult(_Struct):
    request: str
    driver: str
    pool: str
    device: str
    adminAccess: bool | None = None


class DeviceAllocationResult(_Struct):
    results: list[DeviceRequestAllocationResult] | None = None


class AllocationResult(_Struct):
    devices: DeviceAllocationResult | None = None
    nodeSelector: NodeSelector | None = None


class ResourceClaimConsumerReference(_Struct):
    resource: str
    name: str
    uid: str
    apiGroup: str | None = None


class ResourceClaimStatus(_Struct):
    allocation: AllocationResult | None = None
    reservedFor: list[ResourceClaimConsumerReference] | None = None


class ResourceClaim(_Struct):
    metadata: Metadata
    spec: ResourceClaimSpec | None = None
    status: ResourceClaimStatus | None = None


class ResourceClaimTemplateSpec(_Struct):
    spec: ResourceClaimSpec | None = None


class ResourceClaimTemplate(_Struct):
    metadata: Metadata
    spec: ResourceClaimTemplateSpec | None = None


SCHEMAS: dict[str, type[_Struct]] = {
    "ResourceSlice": ResourceSlice,
    "DeviceClass": DeviceClass,
    "ResourceClaim": ResourceClaim,
    "ResourceClaimTemplate": ResourceClaimTemplate,
    "Node": Node,
    "Pod": Pod,
    "PodDisruptionBudget": PodDisruptionBudget,
    "PodGroup": PodGroup,
    "PriorityClass": PriorityClass,
    "Queue": Queue,
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
