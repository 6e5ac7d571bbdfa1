"""Fields the Kubernetes API types do not have are named; the ones they have, decoded or not, are not."""

from pathlib import Path

import msgspec
import pytest

from gangsolve.edge import schema
from gangsolve.edge.snapshot import Snapshot, read
from gangsolve.edge.unknown_fields import OTHER_FIELDS, in_snapshot
from tests.builders import k8s_node, k8s_pod, k8s_pod_group, k8s_queue

EXAMPLES = sorted(Path(__file__).parents[2].joinpath("examples").glob("*.yaml"))

# The schema's structs and the API types (the Kubernetes client's models) they decode
API_TYPES = {
    schema.OwnerReference: "V1OwnerReference",
    schema.Metadata: "V1ObjectMeta",
    schema.ResourceRequirements: "V1ResourceRequirements",
    schema.Container: "V1Container",
    schema.NodeSelectorRequirement: "V1NodeSelectorRequirement",
    schema.NodeSelectorTerm: "V1NodeSelectorTerm",
    schema.NodeSelector: "V1NodeSelector",
    schema.NodeAffinity: "V1NodeAffinity",
    schema.Affinity: "V1Affinity",
    schema.Toleration: "V1Toleration",
    schema.SchedulingGate: "V1PodSchedulingGate",
    schema.PodSchedulingGroup: "V1PodSchedulingGroup",
    schema.PodResourceClaim: "V1PodResourceClaim",
    schema.PodSpec: "V1PodSpec",
    schema.PodResourceClaimStatus: "V1PodResourceClaimStatus",
    schema.PodStatus: "V1PodStatus",
    schema.Pod: "V1Pod",
    schema.Taint: "V1Taint",
    schema.NodeSpec: "V1NodeSpec",
    schema.NodeCondition: "V1NodeCondition",
    schema.NodeStatus: "V1NodeStatus",
    schema.Node: "V1Node",
    schema.LabelSelectorRequirement: "V1LabelSelectorRequirement",
    schema.LabelSelector: "V1LabelSelector",
    schema.PodDisruptionBudgetSpec: "V1PodDisruptionBudgetSpec",
    schema.PodDisruptionBudgetStatus: "V1PodDisruptionBudgetStatus",
    schema.PodDisruptionBudget: "V1PodDisruptionBudget",
    schema.PriorityClass: "V1PriorityClass",
    schema.DeviceAttribute: "V1DeviceAttribute",
    schema.DeviceCapacity: "V1DeviceCapacity",
    schema.DeviceTaint: "V1DeviceTaint",
    schema.DeviceCounterConsumption: "V1DeviceCounterConsumption",
    schema.Device: "V1Device",
    schema.ResourcePool: "V1ResourcePool",
    schema.ResourceSliceSpec: "V1ResourceSliceSpec",
    schema.ResourceSlice: "V1ResourceSlice",
    schema.CELDeviceSelector: "V1CELDeviceSelector",
    schema.DeviceSelector: "V1DeviceSelector",
    schema.DeviceClassSpec: "V1DeviceClassSpec",
    schema.DeviceClass: "V1DeviceClass",
    schema.DeviceToleration: "V1DeviceToleration",
    schema.ExactDeviceRequest: "V1ExactDeviceRequest",
    schema.DeviceRequest: "V1DeviceRequest",
    schema.DeviceConstraint: "V1DeviceConstraint",
    schema.DeviceClaim: "V1DeviceClaim",
    schema.ResourceClaimSpec: "V1ResourceClaimSpec",
    schema.DeviceRequestAllocationResult: "V1DeviceRequestAllocationResult",
    schema.DeviceAllocationResult: "V1DeviceAllocationResult",
    schema.AllocationResult: "V1AllocationResult",
    schema.ResourceClaimConsumerReference: "V1ResourceClaimConsumerReference",
    schema.ResourceClaimStatus: "V1ResourceClaimStatus",
    schema.ResourceClaim: "ResourceV1ResourceClaim",
    schema.ResourceClaimTemplateSpec: "V1ResourceClaimTemplateSpec",
    schema.ResourceClaimTemplate: "V1ResourceClaimTemplate",
}


@pytest.mark.parametrize("struct", API_TYPES, ids=lambda s: s.__name__)
def test_the_known_fields_are_the_api_types_fields(struct):
    models = pytest.importorskip("kubernetes_asyncio.client.models")
    api = set(getattr(models, API_TYPES[struct]).attribute_map.values())
    decoded = {f.encode_name for f in msgspec.structs.fields(struct)}
    assert decoded | set(OTHER_FIELDS.get(struct, ())) == api


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_the_examples_have_no_unknown_fields(example):
    assert in_snapshot(read(str(example))) == []


def test_what_kubectl_get_prints_beside_the_spec_is_known():
    pod = k8s_pod("w0", owner="job")
    pod["metadata"].update(uid="u", resourceVersion="1", managedFields=[{"manager": "kubectl", "foo": 1}])
    pod["spec"]["volumes"] = [{"name": "v", "anything": {"below": "a field gangsolve does not read"}}]
    pod["spec"]["containers"][0].update(image="pause", env=[{"name": "A", "value": "1"}])
    pod["status"].update(conditions=[], qosClass="Burstable", hostIP="10.0.0.1")
    node = k8s_node("n")
    node["status"].update(nodeInfo={"kubeletVersion": "v1.37.2"}, addresses=[])
    queue = k8s_queue("q", weight=1)
    queue["status"] = {"state": "Open", "running": 2}
    snap = Snapshot(nodes=[node], pods=[pod], pod_groups={("", "default", "g"): k8s_pod_group("g", 2)})
    snap.queues["q"] = queue
    assert in_snapshot(snap) == []


def test_typos_are_named_by_object_and_field():
    pod = k8s_pod("w0")
    pod["metadata"]["lables"] = {"a": "b"}
    pod["spec"]["nodeSelectr"] = {"gpu": "yes"}
    pod["spec"]["containers"][0]["resources"]["request"] = {"cpu": "1"}
    pod["spec"]["tolerations"] = [{"key": "k", "operator": "Exists", "efect": "NoSchedule"}]
    node = k8s_node("n")
    node["status"]["allocatble"] = {"cpu": "1"}
    assert in_snapshot(Snapshot(nodes=[node], pods=[pod])) == [
        "Node n: status.allocatble: unknown field",
        "Pod default/w0: metadata.lables: unknown field",
        "Pod default/w0: spec.containers[0].resources.request: unknown field",
        "Pod default/w0: spec.nodeSelectr: unknown field",
        "Pod default/w0: spec.tolerations[0].efect: unknown field",
    ]
