"""Kubernetes objects to solver types: quantities, effective requests, node state, constraints."""

import pytest

from gangsolve import cycle
from gangsolve.edge import objects, schema
from gangsolve.edge.errors import InputError
from gangsolve.edge.gangs import build_cluster
from gangsolve.edge.quantity import MAX_UNITS, SUPPORTED_OBJECTS, parse_quantity, to_units
from gangsolve.edge.snapshot import Snapshot
from gangsolve.solver.model import GPU
from tests.builders import k8s_node, k8s_pod, k8s_queue

GI = 2**30


@pytest.mark.parametrize(
    ("resource", "text", "units"),
    [
        ("cpu", "500m", 500),
        ("cpu", "2", 2000),
        ("cpu", "0.1", 100),
        ("cpu", "1e3", 1_000_000),
        ("cpu", 1.5, 1500),
        ("memory", "4Gi", 4 * GI),
        ("memory", "1G", 10**9),
        ("memory", "128974848", 128974848),
        ("memory", "1.5Ki", 1536),
        ("nvidia.com/gpu", "8", 8),
        ("cpu", "100u", 1),  # fractions round up: never hand out less than asked
    ],
)
def test_quantities(resource, text, units):
    assert to_units(resource, text) == units


@pytest.mark.parametrize("bad", ["abc", "4GiB", "", "1..2", "Gi", "--1", True])
def test_bad_quantities_are_rejected(bad):
    with pytest.raises(ValueError, match="does not parse"):
        parse_quantity(bad)


@pytest.mark.parametrize(
    ("resource", "text"),
    [("memory", "64Ti"), ("cpu", "70368744177.664"), ("nvidia.com/gpu", str(MAX_UNITS)), ("memory", MAX_UNITS)],
)
def test_the_largest_quantity(resource, text):
    assert to_units(resource, text) == MAX_UNITS
    assert MAX_UNITS * SUPPORTED_OBJECTS < 2**63  # sums over the largest cluster fit the solver's int64


@pytest.mark.parametrize(
    ("resource", "value"),
    [
        ("memory", "64Ti1"),
        ("memory", "65Ti"),
        ("cpu", "70368744178"),
        ("memory", "8Ei"),
        ("cpu", "1e16"),
        ("nvidia.com/gpu", 2**63),
        ("memory", "1e999999999"),
        ("memory", 1e300),
    ],
)
def test_quantities_beyond_the_maximum_are_rejected(resource, value):
    with pytest.raises(ValueError, match=r"above the most gangsolve represents|does not parse"):
        to_units(resource, value)


@pytest.mark.parametrize(
    "bad", [float("nan"), float("inf"), float("-inf"), "nan", "Infinity", "1" + "0" * 999_999 + "Ei"]
)
def test_non_finite_and_overflowing_quantities_are_rejected(bad):
    with pytest.raises(ValueError, match="quantity"):
        to_units("cpu", bad)


def test_effective_requests_sum_containers_raise_to_init_and_add_overhead():
    pod = k8s_pod("p")
    pod["spec"]["containers"] = [
        {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
        {"name": "b", "resources": {"requests": {"cpu": "500m"}, "limits": {"memory": "2Gi", "nvidia.com/gpu": "1"}}},
    ]
    pod["spec"]["initContainers"] = [{"name": "init", "resources": {"requests": {"cpu": "4", "memory": "1Gi"}}}]
    pod["spec"]["overhead"] = {"cpu": "100m"}
    req = objects.pod_requests(schema.check(pod, "Pod"))
    # cpu: max(1 + 0.5, 4) + 0.1; memory: 1Gi + 2Gi (limit as request) > init 1Gi
    assert req == {"cpu": 4100, "memory": 3 * GI, "nvidia.com/gpu": 1, "pods": 1}


def test_sidecar_init_containers_add_to_the_whole_pod():
    pod = k8s_pod("p", cpu="1", memory="1Gi")
    pod["spec"]["initContainers"] = [
        {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
        {"name": "setup", "resources": {"requests": {"cpu": "1500m"}}},
    ]
    # the peak is while setup runs beside the sidecar: 1.5 + 1 = 2.5, more than containers 1 + sidecar 1
    assert objects.pod_requests(schema.check(pod, "Pod"))["cpu"] == 2500


def test_bad_request_names_pod_and_field():
    pod = k8s_pod("worker-0", ns="team-a", cpu="lots")
    with pytest.raises(InputError) as err:
        objects.pod_requests(schema.check(pod, "Pod"))
    assert (
        str(err.value)
        == "Pod team-a/worker-0: spec.containers[0].resources.requests.cpu: quantity 'lots' does not parse"
    )


def test_pods_of_one_shape_are_read_alike_and_each_bad_one_is_named():
    # Requests are remembered by the pod's resource fields: a second pod of the same shape must get the same
    # requests (a copy it may change), and a second bad pod must be named, not the first.
    first, second = (schema.check(k8s_pod(name, ns="team-a", cpu="2", gpus=1), "Pod") for name in ("w0", "w1"))
    got = objects.pod_requests(first)
    got["cpu"] = 0
    assert (
        objects.pod_requests(second) == objects.pod_requests(first) == {"cpu": 2000, "memory": 2**30, GPU: 1, "pods": 1}
    )
    for name in ("bad-0", "bad-1"):
        with pytest.raises(InputError, match=rf"^Pod team-a/{name}: spec.containers\[0\]"):
            objects.pod_requests(schema.check(k8s_pod(name, ns="team-a", cpu="lots"), "Pod"))


def _pod_with(resources: dict, **spec) -> dict:
    pod = k8s_pod("w0")
    pod["spec"]["containers"] = [{"name": "main", "resources": resources}]
    pod["spec"].update(spec)
    return pod


@pytest.mark.parametrize(
    ("resources", "field", "message"),
    [
        ({"requests": {"nvidia.com/gpu": "1.5"}}, "requests.nvidia.com/gpu", "invalid value '1.5': must be an integer"),
        ({"limits": {"nvidia.com/gpu": "500m"}}, "limits.nvidia.com/gpu", "invalid value '500m': must be an integer"),
        ({"limits": {"example.com/fpga": 0.5}}, "limits.example.com/fpga", "invalid value 0.5: must be an integer"),
        (
            {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}},
            "requests.nvidia.com/gpu",
            "must be equal to nvidia.com/gpu limit of '2'",
        ),
        (
            {"requests": {"memory": "1Gi", "hugepages-2Mi": "2Mi"}, "limits": {"hugepages-2Mi": "4Mi"}},
            "requests.hugepages-2Mi",
            "must be equal to hugepages-2Mi limit of '4Mi'",
        ),
        (
            {"limits": {"memory": "1Gi", "hugepages-2Mi": "3Mi"}},
            "limits.hugepages-2Mi",
            "'3Mi' is not positive integer multiple of hugepages-2Mi",
        ),
        ({"limits": {"hugepages-1Gi": "1Gi"}}, "", "HugePages require cpu or memory"),
    ],
)
def test_resources_the_api_server_refuses_are_refused(resources, field, message):
    with pytest.raises(InputError) as err:
        objects.pod_requests(schema.check(_pod_with(resources), "Pod"))
    where = "spec.containers[0].resources" + (f".{field}" if field else "")
    assert str(err.value) == f"Pod default/w0: {where}: {message}"


@pytest.mark.parametrize(
    ("resources", "requests"),
    [
        ({"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": 2}}, {"nvidia.com/gpu": 2}),
        ({"requests": {"nvidia.com/gpu": "1000m"}}, {"nvidia.com/gpu": 1}),  # a request alone: synthetic snapshots
        ({"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}}, {"cpu": 500}),
        ({"limits": {"cpu": "1", "hugepages-2Mi": "4Mi"}}, {"hugepages-2Mi": 4 * 2**20}),
        ({"requests": {"example.kubernetes.io/thing": "0.5"}}, {"example.kubernetes.io/thing": 1}),  # native
    ],
)
def test_resources_the_api_server_accepts_are_read(resources, requests):
    got = objects.pod_requests(schema.check(_pod_with(resources), "Pod"))
    assert {k: got[k] for k in requests} == requests


def test_overhead_and_nodes_hold_extended_resources_to_whole_units():
    pod = _pod_with({}, overhead={"cpu": "100m", "example.com/slot": "0.5"})
    with pytest.raises(InputError, match=r"^Pod default/w0: spec.overhead.example.com/slot: invalid value '0.5'"):
        objects.pod_requests(schema.check(pod, "Pod"))
    node = k8s_node("n", gpus="1.5")
    with pytest.raises(InputError, match=r"^Node n: status.allocatable.nvidia.com/gpu: invalid value '1.5'"):
        objects.node(schema.check(node, "Node"))
    with pytest.raises(InputError, match=r"^Node n: status.allocatable.pods: invalid value '110.5'"):
        objects.node(schema.check(k8s_node("n", pods="110.5"), "Node"))


def test_a_queue_may_cap_a_fraction_of_a_gpu_as_its_crd_allows():
    queue = schema.check(k8s_queue("q", capability={"nvidia.com/gpu": "1.5"}), "Queue")
    assert "nvidia.com/gpu" in objects.queue(queue, {}).capability


def test_a_pod_the_api_server_would_refuse_is_left_out_live_and_named():
    bad = k8s_pod("w0", gpus="1.5")
    grouped = cycle.group(Snapshot(nodes=[k8s_node("n", gpus=4)], pods=[bad, k8s_pod("w1")]), cycle.Rules(), now=None)
    assert [str(e) for e in grouped.skipped] == [
        "Pod default/w0: spec.containers[0].resources.requests.nvidia.com/gpu: invalid value '1.5': must be an integer"
    ]
    assert [p.name for g in grouped.cluster.gangs for p in g.pods] == ["default/w1"]


def test_node_state():
    obj = k8s_node(
        "n", gpus=4, taints=[{"key": "k", "value": "v", "effect": "NoExecute"}], ready=False, unschedulable=True
    )
    n = objects.node(schema.check(obj, "Node"))
    assert n.allocatable["nvidia.com/gpu"] == 4
    assert n.allocatable["pods"] == 110
    assert not n.ready
    assert n.unschedulable
    assert str(n.taints[0]) == "k=v:NoExecute"


def test_node_without_conditions_is_not_ready():
    obj = k8s_node("n")
    del obj["status"]["conditions"]
    assert not objects.node(schema.check(obj, "Node")).ready


def test_pod_constraints_and_priority_class():
    obj = k8s_pod("p", nodeSelector={"gpu": "yes"}, tolerations=[{"operator": "Exists"}], priorityClassName="high")
    obj["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
                ]
            }
        }
    }
    pod = objects.pod(obj, {"high": priority_class("high", 1000)}, order=3)
    assert pod.name == "default/p"
    assert pod.priority == 1000
    assert pod.order == 3
    assert pod.node_selector == {"gpu": "yes"}
    assert pod.tolerations[0].operator == "Exists"
    assert pod.tolerations[0].key == ""
    assert [len(t.match_expressions) for t in pod.affinity] == [1, 0]
    assert pod.affinity[1].match_fields[0].values == ("n1",)


def test_unknown_affinity_operator_names_the_field():
    obj = k8s_pod("p")
    obj["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]}]
            }
        }
    }
    with pytest.raises(InputError, match=r"matchExpressions\[0\]\.operator: invalid enum value 'Near'"):
        schema.check(obj)


@pytest.mark.parametrize(
    ("operator", "values", "message"),
    [
        ("Gt", ["1", "2"], "Gt takes one integer, got ('1', '2')"),
        ("Lt", ["many"], "Lt takes one integer, got ('many',)"),
        ("In", [], "In needs at least one value"),
        ("Exists", ["a"], "Exists takes no values"),
    ],
)
def test_affinity_values_as_the_api_server_validates_them(operator, values, message):
    obj = k8s_pod("p")
    term = {"matchExpressions": [{"key": "cores", "operator": operator, "values": values}]}
    obj["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    }
    with pytest.raises(InputError) as err:
        objects.pod(obj, {}, 0)
    assert str(err.value).endswith(f"nodeSelectorTerms[0].matchExpressions[0].values: {message}")


def test_global_default_priority_class():
    classes = {"def": schema.check(priority_class("def", 7, globalDefault=True))}
    assert objects.priority(schema.check(k8s_pod("p")), classes) == 7
    assert objects.priority(schema.check(k8s_pod("p", priority=3)), classes) == 3


def priority_class(name: str, value: int, **fields) -> dict:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        **fields,
    }


def test_an_object_decodes_to_typed_attributes_and_its_kind_s_values_are_checked_there():
    pod = schema.check(k8s_pod("p", ns="team", nodeSelector={"gpu": "yes"}, node_name="n1"))
    assert (pod.key, pod.spec.nodeSelector, pod.bound, pod.metadata.labels) == ("team/p", {"gpu": "yes"}, True, {})
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "g"}}
    assert schema.check(group).min_member == 1  # absent: 1
    with pytest.raises(InputError, match=r"^PodGroup g: spec.minMember: expected a whole number, got None$"):
        schema.check({**group, "spec": {"minMember": None}})  # null is no number


def test_a_snapshot_is_decoded_once_for_every_step_of_a_cycle():
    snap = Snapshot(nodes=[k8s_node("n1")], pods=[k8s_pod("p")])
    build_cluster(snap)
    decoded = snap.decoded()
    build_cluster(snap)
    assert snap.decoded() is decoded
    assert snap.decoded(nodes=False) is decoded
    snap.add(k8s_pod("q"))  # a new object: decoded again
    assert [p.key for p in snap.decoded().pods] == ["default/p", "default/q"]


@pytest.mark.parametrize("metadata", [{"name": "p"}, {"name": "p", "namespace": None}, {"name": "p", "namespace": ""}])
def test_a_pod_without_a_namespace_has_one_key_in_the_store_and_the_edge(metadata):
    """The live store keyed such a pod `/p` (`None/p` for a null namespace) and the edge's pod_key raised
    KeyError; the store now uses the edge's."""
    obj = {"kind": "Pod", "metadata": metadata}
    assert objects.pod_key(obj) == schema.check(obj).key == "/p"
