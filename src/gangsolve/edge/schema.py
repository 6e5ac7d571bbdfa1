"""The shape of every field gangsolve reads, decoded in one place before anything reads them.

Each kind gangsolve understands has a small schema (msgspec structs) of just the fields the edge reads, typed as
the Kubernetes API types them; fields it does not read are ignored, whatever they hold. `check(obj)` decodes an
object into its struct, or raises an InputError naming the object and the field; the code after it reads typed
attributes (`pod.spec.nodeSelector`). The values every object of a kind is held to (a PodGroup's minimum, a
PDB's percentages, a Queue's weight and quantities) are checked as it is decoded; a pod's or a node's quantities
as they become units (`units`), since only the objects whose capacity counts are read for them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

from gangsolve.edge.errors import InputError, describe, named, shown
from gangsolve.edge.quantity import to_units

Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
Timestamp = Annotated[datetime, msgspec.Meta(tz=True)]  # RFC 3339, with a zone; YAML may hand a datetime
Quantity = str | int | float  # its grammar and range are checked by gangsolve.edge.quantity
Labels = dict[str, str]
Resources = dict[str, Quantity]


class _Struct(msgspec.Struct, omit_defaults=True, gc=False):  # (no struct holds a cycle: the collector skips them)
    pass


class OwnerReference(_Struct):
    kind: str | None = None  # the training kinds' pods wait for their gang definition
    name: str | None = None
    uid: str | None = None
    controller: bool | None = None


class Metadata(_Struct):
    name: str | None = None
    namespace: str | None = None
    labels_: Labels | None = msgspec.field(default=None, name="labels")
    annotations_: Labels | None = msgspec.field(default=None, name="annotations")
    ownerReferences: list[OwnerReference] | None = None
    creationTimestamp: Timestamp | None = None
    deletionTimestamp: Timestamp | None = None

    @property
    def labels(self) -> Labels:
        return self.labels_ or _NO_LABELS

    @property
    def annotations(self) -> Labels:
        return self.annotations_ or _NO_LABELS

    @property
    def controller(self) -> OwnerReference | None:
        """The controlling ownerReference."""
        return next((ref for ref in self.ownerReferences or () if ref.controller), None)


_NO_LABELS: Labels = {}  # what an absent map reads as (never written to)


class Object(_Struct, kw_only=True):
    """A top-level object: its kind as it was given (absent from objects the API server lists) and metadata."""

    metadata: Metadata
    kind: Any = msgspec.UNSET

    def describe(self) -> str:
        """`Kind namespace/name`, as gangsolve.edge.errors.describe names the object it was decoded from."""
        meta = self.metadata
        kind = "<no kind>" if self.kind is msgspec.UNSET else self.kind
        return named(kind, "<unnamed>" if meta.name is None else meta.name, meta.namespace)

    @property
    def key(self) -> str:
        """`namespace/name`, as gangsolve.edge.objects.pod_key keys the object it was decoded from."""
        return f"{self.metadata.namespace or ''}/{self.metadata.name}"


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


class Pod(Object):
    spec_: PodSpec | None = msgspec.field(default=None, name="spec")
    status_: PodStatus | None = msgspec.field(default=None, name="status")

    @property
    def spec(self) -> PodSpec:
        return self.spec_ or _NO_POD_SPEC

    @property
    def status(self) -> PodStatus:
        return self.status_ or _NO_POD_STATUS

    @property
    def bound(self) -> bool:
        return bool(self.spec.nodeName)

    @property
    def finished(self) -> bool:
        """Succeeded or Failed: it holds no capacity."""
        return self.status.phase in ("Succeeded", "Failed")

    @property
    def terminating(self) -> bool:
        return self.metadata.deletionTimestamp is not None

    @property
    def scheduler(self) -> str:
        name = self.spec.schedulerName
        return "default-scheduler" if name is None else name

    def waiting_for(self, scheduler_name: str) -> bool:
        """Unbound, not finished, not being deleted, and naming `scheduler_name`: gated or not."""
        phase = self.status.phase
        return (
            not self.bound
            and (phase is None or phase == "Pending")
            and self.scheduler == scheduler_name
            and not self.terminating
        )

    def pending_for(self, scheduler_name: str) -> bool:
        """A pod for `scheduler_name` to place now: no scheduling gate holds it (Kueue and others hold pods so)."""
        return self.waiting_for(scheduler_name) and not self.spec.schedulingGates


_NO_POD_SPEC, _NO_POD_STATUS = PodSpec(), PodStatus()


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
    allocatable: Resources | msgspec.UnsetType | None = msgspec.UNSET  # (present, even null: capacity is not read)
    capacity: Resources | None = None
    conditions: list[NodeCondition] | None = None


class Node(Object):
    spec_: NodeSpec | None = msgspec.field(default=None, name="spec")
    status_: NodeStatus | None = msgspec.field(default=None, name="status")

    @property
    def spec(self) -> NodeSpec:
        return self.spec_ or NodeSpec()

    @property
    def status(self) -> NodeStatus:
        return self.status_ or NodeStatus()


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


class PodDisruptionBudget(Object):
    spec_: PodDisruptionBudgetSpec | None = msgspec.field(default=None, name="spec")
    status_: PodDisruptionBudgetStatus | None = msgspec.field(default=None, name="status")

    @property
    def spec(self) -> PodDisruptionBudgetSpec:
        return self.spec_ or PodDisruptionBudgetSpec()


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
    # The CRDs say int32; a string is read if it holds a whole number (absent: 1; null is no number)
    minMember: Int32 | str | msgspec.UnsetType | None = msgspec.UNSET
    # Kubernetes' own PodGroup (scheduling.k8s.io v1beta1, v1alpha2)
    schedulingPolicy: PodGroupSchedulingPolicy | None = None
    schedulingConstraints: PodGroupSchedulingConstraints | None = None
    priority: Int32 | None = None
    priorityClassName: str | None = None
    queue: str | None = None  # Volcano's PodGroup names its Queue


UPSTREAM_GROUP = "scheduling.k8s.io"  # Kubernetes' own PodGroup (KEP-4671)


class PodGroup(Object):
    apiVersion: Any = msgspec.UNSET  # its group tells the three PodGroups apart
    spec_: PodGroupSpec | None = msgspec.field(default=None, name="spec")

    @property
    def group(self) -> str:
        api = self.apiVersion if isinstance(self.apiVersion, str) else ""
        return api.split("/")[0] if "/" in api else ""

    @property
    def min_member(self) -> int | None:
        """The gang's minimum (`check` read it); None for a scheduling.k8s.io PodGroup with a `basic` policy."""
        return _minimum(self)

    @property
    def spec(self) -> PodGroupSpec:
        return self.spec_ or PodGroupSpec()

    @property
    def gang(self) -> GangSchedulingPolicy | None:
        """A scheduling.k8s.io PodGroup's gang policy; None for a `basic` one (no gang)."""
        policy = self.spec.schedulingPolicy
        return policy.gang if policy is not None else None


class PriorityClass(Object):
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
    parent: str | None = None  # the queue it belongs to (Volcano's hierarchical queues); `root` is the top
    deserved: Resources | None = None  # its fair share, where set (Volcano's capacity plugin)


class QueueStatus(_Struct):
    state: str | None = None  # Open, Closed, Closing, Unknown (Volcano's controller sets it)


class Queue(Object):  # scheduling.volcano.sh/v1beta1
    spec_: QueueSpec | None = msgspec.field(default=None, name="spec")
    status_: QueueStatus | None = msgspec.field(default=None, name="status")

    @property
    def spec(self) -> QueueSpec:
        return self.spec_ or QueueSpec()

    @property
    def state(self) -> str | None:
        return self.status_.state if self.status_ is not None else None


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


class CapacityRequestPolicyRange(_Struct):
    min: Quantity
    max: Quantity | None = None
    step: Quantity | None = None


class CapacityRequestPolicy(_Struct):
    default: Quantity | None = None
    validValues: list[Quantity] | None = None
    validRange: CapacityRequestPolicyRange | None = None


class DeviceCapacity(_Struct):
    value: Quantity
    requestPolicy: CapacityRequestPolicy | None = None


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


class ResourceSlice(Object):
    spec: ResourceSliceSpec


class CELDeviceSelector(_Struct):
    expression: str


class DeviceSelector(_Struct):
    cel: CELDeviceSelector | None = None


class DeviceClassSpec(_Struct):
    selectors: list[DeviceSelector] | None = None
    extendedResourceName: str | None = None


class DeviceClass(Object):
    spec: DeviceClassSpec | None = None


class DeviceToleration(_Struct):
    key: str | None = None
    operator: Literal["Exists", "Equal", ""] | None = None
    value: str | None = None
    effect: str | None = None


class CapacityRequirements(_Struct):
    requests: dict[str, Quantity] | None = None


class ExactDeviceRequest(_Struct):
    deviceClassName: str
    selectors: list[DeviceSelector] | None = None
    allocationMode: str | None = None
    count: Annotated[int, msgspec.Meta(ge=1, le=2**31 - 1)] | None = None
    adminAccess: bool | None = None
    tolerations: list[DeviceToleration] | None = None
    capacity: CapacityRequirements | None = None


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
    consumedCapacity: dict[str, Quantity] | None = None
    shareID: str | None = None


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


class ResourceClaim(Object):
    spec: ResourceClaimSpec | None = None
    status: ResourceClaimStatus | None = None


class ResourceClaimTemplateSpec(_Struct):
    spec: ResourceClaimSpec | None = None


class ResourceClaimTemplate(Object):
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


def check(obj: dict, kind: str | None = None) -> Any:
    """The object decoded into the struct of its kind, or InputError (naming the object and field) unless every
    field gangsolve reads has its API type and the values of its kind are in range. `kind` is what the object
    was filed as (objects listed from the API server may not carry theirs)."""
    schema = SCHEMAS[kind or obj["kind"]]
    try:
        decoded = msgspec.convert(obj, schema)
    except msgspec.ValidationError as exc:
        field, message = _where(str(exc))
        if "[...]" in field:
            field = _map_key(obj, schema, field)
        raise InputError(describe(obj), field, message) from None
    values = _VALUES.get(type(decoded))
    if values is not None:
        values(decoded)
    return decoded


INT32_MAX = 2**31 - 1  # minMember, minCount and minAvailable are int32 in the API
MAX_WEIGHT = 65535  # Volcano's Queue CRD: weight from 1 to 65535
_PERCENT = re.compile(r"^[0-9]+%$")  # as the API server validates a PDB's percentages
_WHOLE = re.compile(r"^-?[0-9]{1,18}$")  # anything longer is out of range, or not a number


def positive_int(value: object) -> int:
    """A whole number from 1 to INT32_MAX, given as a number or as text (annotations are text); ValueError
    (the message) otherwise."""
    text = value.strip() if isinstance(value, str) else ""
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    elif _WHOLE.match(text):
        n = int(text)
    else:
        raise ValueError(f"expected a whole number, got {shown(value)}")
    if n < 1:
        raise ValueError(f"must be at least 1, got {n}")
    if n > INT32_MAX:
        raise ValueError(f"must be at most {INT32_MAX}, got {shown(n)}")
    return n


def int_or_percent(value: int | str, total: int) -> int:
    """A PDB's count, or its percentage of `total` rounded up (as the disruption controller does for
    minAvailable); ValueError (the message) for anything else."""
    if isinstance(value, str) and _PERCENT.match(value):
        pct = int(value[:-1])
        if pct > 100:
            raise ValueError(f"a percentage must be between 0% and 100%, got {shown(value)}")
        return math.ceil(pct * total / 100)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise ValueError(f"expected a number or a percentage, got {shown(value)}")


def units(obj: Object, field: str, quantities: Resources | None, *, whole: bool = True) -> dict[str, int]:
    """Quantities in the solver's units (gangsolve.edge.quantity.to_units: `whole` holds them to the API
    server's whole units), or InputError naming the one out of range."""
    out: dict[str, int] = {}
    for name, value in (quantities or {}).items():
        try:
            out[name] = to_units(name, value, whole=whole)
        except ValueError as exc:
            raise InputError(obj.describe(), f"{field}.{name}", str(exc)) from None
    return out


def _read(obj: Object, field: str, value: object, read: Callable[[Any], int]) -> int:
    try:
        return read(value)
    except ValueError as exc:
        raise InputError(obj.describe(), field, str(exc)) from None


def _minimum(pg: PodGroup) -> int | None:
    """The PodGroup's minimum by its API group (see PodGroup.min_member), or InputError naming the field."""
    if pg.group != UPSTREAM_GROUP:
        minimum = pg.spec.minMember
        return _read(pg, "spec.minMember", 1 if minimum is msgspec.UNSET else minimum, positive_int)
    if pg.gang is not None:
        return _read(pg, "spec.schedulingPolicy.gang.minCount", pg.gang.minCount, positive_int)
    if pg.spec.schedulingPolicy is None or not isinstance(pg.spec.schedulingPolicy.basic, dict):
        raise InputError(pg.describe(), "spec.schedulingPolicy", "expected a gang or a basic policy")
    return None


def _pdb_values(pdb: PodDisruptionBudget) -> None:
    for field in ("minAvailable", "maxUnavailable"):
        value = getattr(pdb.spec, field)
        if value is not None:
            _read(pdb, f"spec.{field}", value, lambda v: int_or_percent(v, 0))


def _queue_values(queue: Queue) -> None:
    weight = queue.spec.weight
    if weight is not None and not 1 <= weight <= MAX_WEIGHT:
        raise InputError(queue.describe(), "spec.weight", f"must be from 1 to {MAX_WEIGHT}, got {shown(weight)}")
    units(queue, "spec.capability", queue.spec.capability, whole=False)  # Volcano's CRD takes any quantity
    units(
        queue, "spec.guarantee.resource", queue.spec.guarantee.resource if queue.spec.guarantee else None, whole=False
    )
    units(queue, "spec.deserved", queue.spec.deserved, whole=False)


_VALUES: dict[type, Callable[[Any], object]] = {
    PodGroup: _minimum,
    PodDisruptionBudget: _pdb_values,
    Queue: _queue_values,
}


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
