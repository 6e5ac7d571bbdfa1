"""Fields the Kubernetes API does not know, as `kubectl apply` would refuse them (`gangsolve solve` only).

The schema (gangsolve.edge.schema) decodes only the fields gangsolve reads and ignores the rest, so a typo such
as `nodeSelectr` would pass without a word. Each struct the schema decodes is an API type: beside the fields it
decodes, the API type has the fields listed in OTHER_FIELDS (from the Kubernetes client's models, which a test
holds them to, and an e2e test to an export of the pinned API server; for the PodGroups and Volcano's Queue,
their CRDs). A key that is neither is unknown. Fields gangsolve does not decode are not descended into: a typo
there changes nothing gangsolve reads.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import msgspec

from gangsolve.edge import schema
from gangsolve.edge.errors import describe, printable
from gangsolve.edge.snapshot import Snapshot

_OBJECT = ("apiVersion",)  # besides kind, metadata: decoded on every object
# The API type's fields that the struct does not decode, by struct
OTHER_FIELDS: dict[type, tuple[str, ...]] = {
    schema.OwnerReference: ("apiVersion", "blockOwnerDeletion"),
    schema.Metadata: (
        "deletionGracePeriodSeconds", "finalizers", "generateName", "generation", "managedFields",
        "resourceVersion", "selfLink", "uid",
    ),
    schema.ResourceRequirements: ("claims",),
    schema.Container: (
        "args", "command", "env", "envFrom", "image", "imagePullPolicy", "lifecycle", "livenessProbe", "name",
        "ports", "readinessProbe", "resizePolicy", "restartPolicyRules", "securityContext", "startupProbe",
        "stdin", "stdinOnce", "terminationMessagePath", "terminationMessagePolicy", "tty", "volumeDevices",
        "volumeMounts", "workingDir",
    ),
    schema.NodeAffinity: ("preferredDuringSchedulingIgnoredDuringExecution",),
    schema.Affinity: ("podAffinity", "podAntiAffinity"),
    schema.Toleration: ("tolerationSeconds",),
    schema.PodSpec: (
        "activeDeadlineSeconds", "automountServiceAccountToken", "dnsConfig", "dnsPolicy", "enableServiceLinks",
        "ephemeralContainers", "hostAliases", "hostIPC", "hostNetwork", "hostPID", "hostUsers", "hostname",
        "hostnameOverride", "imagePullSecrets", "os", "readinessGates", "resources", "restartPolicy",
        "runtimeClassName", "securityContext", "serviceAccount", "serviceAccountName", "setHostnameAsFQDN",
        "shareProcessNamespace", "subdomain", "terminationGracePeriodSeconds", "topologySpreadConstraints",
        "volumes",
    ),
    schema.PodStatus: (
        "allocatedResources", "conditions", "containerStatuses", "ephemeralContainerStatuses",
        "extendedResourceClaimStatus", "hostIP", "hostIPs", "initContainerStatuses", "message",
        "nodeAllocatableResourceClaimStatuses", "observedGeneration", "podIP", "podIPs", "qosClass", "reason",
        "resize", "resources",
    ),
    schema.Pod: _OBJECT,
    schema.Taint: ("timeAdded",),
    schema.NodeSpec: ("configSource", "externalID", "podCIDR", "podCIDRs", "providerID"),
    schema.NodeCondition: ("lastHeartbeatTime", "lastTransitionTime", "message", "reason"),
    schema.NodeStatus: (
        "addresses", "config", "daemonEndpoints", "declaredFeatures", "features", "images", "nodeInfo", "phase",
        "runtimeHandlers", "volumesAttached", "volumesInUse",
    ),
    schema.Node: _OBJECT,
    schema.PodDisruptionBudgetSpec: ("unhealthyPodEvictionPolicy",),
    schema.PodDisruptionBudgetStatus: (
        "conditions", "currentHealthy", "desiredHealthy", "disruptedPods", "expectedPods", "observedGeneration",
    ),
    schema.PodDisruptionBudget: _OBJECT,
    # Three PodGroups in one struct: scheduler-plugins', Volcano's and Kubernetes' own (scheduling.k8s.io)
    schema.PodGroupSpec: (
        "minResources", "scheduleTimeoutSeconds", "minTaskMember", "networkTopology", "subGroupPolicy",
        "podGroupTemplateRef", "disruptionMode", "resourceClaims",
    ),
    schema.PodGroup: ("status",),
    schema.PriorityClass: (*_OBJECT, "description"),
    schema.QueueSpec: (
        "extendClusters", "deserved", "hierarchy", "hierarchyWeights", "affinity", "type", "parent", "priority",
        "dequeueStrategy",
    ),
    schema.QueueStatus: ("unknown", "pending", "running", "inqueue", "completed", "reservation", "allocated"),
    schema.Queue: _OBJECT,
    schema.DeviceCapacity: ("requestPolicy",),
    schema.DeviceTaint: ("timeAdded",),
    schema.DeviceCounterConsumption: ("counters",),
    schema.Device: ("bindingConditions", "bindingFailureConditions", "bindsToNode", "nodeAllocatableResourceMappings"),
    schema.ResourceSliceSpec: ("sharedCounters",),
    schema.ResourceSlice: _OBJECT,
    schema.DeviceClassSpec: ("config",),
    schema.DeviceClass: _OBJECT,
    schema.DeviceToleration: ("tolerationSeconds",),
    schema.DeviceClaim: ("config",),
    schema.DeviceRequestAllocationResult: (
        "bindingConditions", "bindingFailureConditions", "consumedCapacity", "shareID", "tolerations",
    ),
    schema.DeviceAllocationResult: ("config",),
    schema.AllocationResult: ("allocationTimestamp",),
    schema.ResourceClaimStatus: ("devices",),
    schema.ResourceClaim: _OBJECT,
    schema.ResourceClaimTemplateSpec: ("metadata",),
    schema.ResourceClaimTemplate: _OBJECT,
}  # fmt: skip


class Shape(msgspec.Struct, frozen=True):
    """What a struct's keys may be, and the structs its decoded fields hold (one, a list or a map of them)."""

    known: frozenset[str]
    one: dict[str, type]
    many: dict[str, type]  # a list's items or a map's values


@functools.cache
def _shape(struct: type) -> Shape:
    info = msgspec.inspect.type_info(struct)
    assert isinstance(info, msgspec.inspect.StructType)
    one: dict[str, type] = {}
    many: dict[str, type] = {}
    for field in info.fields:
        for kind in field.type.types if isinstance(field.type, msgspec.inspect.UnionType) else (field.type,):
            if isinstance(kind, msgspec.inspect.StructType):
                one[field.encode_name] = kind.cls
            elif isinstance(kind, msgspec.inspect.ListType | msgspec.inspect.DictType):
                items = kind.item_type if isinstance(kind, msgspec.inspect.ListType) else kind.value_type
                if isinstance(items, msgspec.inspect.StructType):
                    many[field.encode_name] = items.cls
    known = frozenset(f.encode_name for f in info.fields) | frozenset(OTHER_FIELDS.get(struct, ()))
    return Shape(known, one, many)


def in_snapshot(snap: Snapshot) -> list[str]:
    """`Kind namespace/name: field: unknown field` for each field of the snapshot's objects that their API type
    does not have, in the order of the snapshot's kinds."""
    return [
        f"{describe(obj)}: {printable(field)}: unknown field"
        for obj in snap.objects()
        for field in _unknown(obj, schema.SCHEMAS[obj["kind"]], "")
    ]


def _unknown(value: object, struct: type, path: str) -> Iterator[str]:
    """Each key of `value` (at `path`) that `struct`'s API type does not have, in the order they are written."""
    if not isinstance(value, dict):
        return  # a type error, which decoding reports
    shape = _shape(struct)
    for key, child in value.items():
        here = f"{path}.{key}" if path else str(key)
        if key not in shape.known:
            yield here
        elif key in shape.one:
            yield from _unknown(child, shape.one[key], here)
        elif key in shape.many and isinstance(child, list):
            for i, item in enumerate(child):
                yield from _unknown(item, shape.many[key], f"{here}[{i}]")
        elif key in shape.many and isinstance(child, dict):
            for name, item in child.items():
                yield from _unknown(item, shape.many[key], f"{here}.{name}")
