"""The validator is the oracle of every solver test: each Kubernetes rule it checks, with a placement that keeps
the rule and one that breaks it (written by hand, not by the solver)."""

import pytest

from gangsolve.solver import Cluster, Gang, Node, Pod, Requirement, SelectorTerm, Taint, Toleration, validate
from tests.builders import gang, node, pod

NO_SCHEDULE = Taint("dedicated", "gpu", "NoSchedule")


def check(nodes, gangs, bindings):
    return validate(Cluster(tuple(nodes), tuple(gangs)), bindings)


def one_pod(**kw):
    return [Gang("g", (pod("p", **kw),), 1)]


@pytest.mark.parametrize(
    ("taint", "tolerations", "sound"),
    [
        (NO_SCHEDULE, (), False),
        (Taint("dedicated", "gpu", "NoExecute"), (), False),
        (Taint("dedicated", "gpu", "PreferNoSchedule"), (), True),  # only lowers a score
        (NO_SCHEDULE, (Toleration("dedicated", "Equal", "gpu"),), True),
        (NO_SCHEDULE, (Toleration("dedicated", "", "gpu"),), True),  # an empty operator means Equal
        (NO_SCHEDULE, (Toleration("dedicated", "Equal", "cpu"),), False),
        (NO_SCHEDULE, (Toleration("dedicated", "Exists"),), True),
        (NO_SCHEDULE, (Toleration("", "Exists"),), True),  # tolerates everything
        (NO_SCHEDULE, (Toleration("other", "Exists"),), False),
        (NO_SCHEDULE, (Toleration("dedicated", "Exists", effect="NoExecute"),), False),
        (NO_SCHEDULE, (Toleration("dedicated", "Exists", effect="NoSchedule"),), True),
    ],
)
def test_taints_and_tolerations(taint, tolerations, sound):
    violations = check([node("n", taints=[taint])], one_pod(tolerations=tolerations), {"p": "n"})
    assert (violations == []) == sound, violations
    if not sound:
        assert violations == [f"p on n: taint {taint} not tolerated"]


@pytest.mark.parametrize(
    ("req", "sound"),
    [
        (Requirement("zone", "In", ("a", "b")), True),
        (Requirement("zone", "In", ("b",)), False),
        (Requirement("zone", "NotIn", ("b",)), True),
        (Requirement("zone", "NotIn", ("a",)), False),
        (Requirement("missing", "NotIn", ("a",)), True),  # a missing label is not in any set
        (Requirement("zone", "Exists"), True),
        (Requirement("missing", "Exists"), False),
        (Requirement("missing", "DoesNotExist"), True),
        (Requirement("zone", "DoesNotExist"), False),
        (Requirement("cores", "Gt", ("63",)), True),
        (Requirement("cores", "Gt", ("64",)), False),
        (Requirement("cores", "Lt", ("65",)), True),
        (Requirement("cores", "Lt", ("64",)), False),
        (Requirement("zone", "Gt", ("1",)), False),  # not an integer: never greater
        (Requirement("cores", "Gt", ("1", "2")), False),  # Gt takes exactly one value
        (Requirement("missing", "Lt", ("100",)), False),
    ],
)
def test_required_node_affinity_expressions(req, sound):
    n = node("n", labels={"zone": "a", "cores": "64"})
    violations = check([n], one_pod(affinity=(SelectorTerm((req,)),)), {"p": "n"})
    assert (violations == []) == sound, violations


def test_affinity_terms_are_ored_and_match_fields_read_the_node_name():
    n = node("n1", labels={"zone": "a"})
    by_name = SelectorTerm(match_fields=(Requirement("metadata.name", "In", ("n1",)),))
    other_name = SelectorTerm(match_fields=(Requirement("metadata.name", "In", ("n2",)),))
    wrong_zone = SelectorTerm((Requirement("zone", "In", ("b",)),))
    assert check([n], one_pod(affinity=(wrong_zone, by_name)), {"p": "n1"}) == []
    assert check([n], one_pod(affinity=(wrong_zone, other_name)), {"p": "n1"}) == [
        "p on n1: required node affinity not matched"
    ]
    assert check([n], one_pod(affinity=(SelectorTerm(),)), {"p": "n1"}) != []  # an empty term matches nothing


def test_node_selector_cordon_and_readiness():
    assert check([node("n", labels={"gpu": "yes"})], one_pod(node_selector={"gpu": "yes"}), {"p": "n"}) == []
    assert check([node("n", labels={"gpu": "no"})], one_pod(node_selector={"gpu": "yes"}), {"p": "n"}) == [
        "p on n: nodeSelector gpu=yes not matched"
    ]
    assert check([node("n", unschedulable=True)], one_pod(), {"p": "n"}) == ["p on n: cordoned"]
    assert check([node("n", ready=False)], one_pod(), {"p": "n"}) == ["p on n: not Ready"]


def test_every_resource_and_pod_slot_counts_with_what_bound_pods_hold():
    held = node("n", cpu=8, gpus=4, pods=3, used={"nvidia.com/gpu": 2, "cpu": 4000, "pods": 1})
    two = [gang("g", 2, gpus=1, cpu=2)]
    assert check([held], two, {"g-0": "n", "g-1": "n"}) == []
    three = [gang("g", 3, gpus=1, cpu=1)]
    assert check([held], three, {"g-0": "n", "g-1": "n", "g-2": "n"}) == [
        "n: nvidia.com/gpu overcommitted (3 requested, 2 free)",
        "n: pods overcommitted (3 requested, 2 free)",
    ]
    rdma = [Gang("g", (Pod("p", {"rdma/hca": 2, "pods": 1}),), 1)]
    with_rdma = Node("r", {"cpu": 8000, "pods": 110, "rdma/hca": 2}, used={"rdma/hca": 1})
    assert check([with_rdma], rdma, {"p": "r"}) == ["r: rdma/hca overcommitted (2 requested, 1 free)"]


def test_a_resource_the_node_lacks_is_overcommitted():
    gpu_pod = one_pod(gpus=1)
    assert check([node("cpu-only")], gpu_pod, {"p": "cpu-only"}) == [
        "cpu-only: nvidia.com/gpu overcommitted (1 requested, 0 free)"
    ]


def test_all_or_nothing_counts_bound_members():
    g = gang("g", 4, min_member=3, gpus=1)
    assert check([node("n", gpus=8)], [g], {"g-0": "n", "g-1": "n"}) == ["g: partial gang (2 of 3 needed pods placed)"]
    assert check([node("n", gpus=8)], [g], {}) == []
    with_bound = gang("g", 2, min_member=3, gpus=1, bound_nodes=("n", "n"))
    assert check([node("n", gpus=8)], [with_bound], {"g-0": "n"}) == []


def test_colocated_gang_shares_one_value_bound_members_included():
    zones = [node("a1", gpus=4, labels={"zone": "a"}), node("b1", gpus=4, labels={"zone": "b"}), node("x", gpus=4)]
    g = gang("g", 2, gpus=1, colocate="zone")
    assert check(zones, [g], {"g-0": "a1", "g-1": "a1"}) == []
    assert check(zones, [g], {"g-0": "a1", "g-1": "b1"}) == ["g: spans zone values ['a', 'b']"]
    assert check(zones, [g], {"g-0": "x", "g-1": "x"}) == ["g: spans zone values ['None']"]
    joining = gang("g", 1, min_member=2, gpus=1, colocate="zone", bound_nodes=("b1",))
    assert check(zones, [joining], {"g-0": "a1"}) == ["g: spans zone values ['a', 'b']"]


def test_unknown_pods_and_nodes():
    assert check([node("n")], one_pod(), {"ghost": "n", "p": "nowhere"}) == [
        "ghost: not a pending pod of this cluster",
        "p: bound to unknown node nowhere",
    ]
