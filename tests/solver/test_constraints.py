"""Each constraint family on its own: tiny feasible and infeasible cases."""

import pytest

from gangsolve.solver.constraints.affinity import affinity_holds, requirement_holds, selector_mismatch
from gangsolve.solver.constraints.taints import untolerated
from gangsolve.solver.model import Requirement, SelectorTerm, Taint, Toleration

MASTER = Taint("node-role.kubernetes.io/master", "", "NoSchedule")


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        (Toleration("node-role.kubernetes.io/master", "Exists"), True),
        (Toleration("node-role.kubernetes.io/master", "Exists", effect="NoSchedule"), True),
        (Toleration("node-role.kubernetes.io/master", "Exists", effect="NoExecute"), False),
        (Toleration("", "Exists"), True),  # empty key with Exists tolerates everything
        (Toleration("node-role.kubernetes.io/master", "Equal", "x"), False),
        (Toleration("other", "Exists"), False),
    ],
)
def test_tolerations(toleration, tolerated):
    assert (untolerated((toleration,), (MASTER,)) is None) == tolerated


def test_equal_toleration_needs_the_value():
    taint = Taint("dedicated", "gpu", "NoExecute")
    assert untolerated((Toleration("dedicated", "Equal", "gpu"),), (taint,)) is None
    assert untolerated((Toleration("dedicated", "Equal", "cpu"),), (taint,)) == taint


def test_prefer_no_schedule_does_not_block():
    assert untolerated((), (Taint("soft", "", "PreferNoSchedule"),)) is None


def test_first_untolerated_taint_is_named():
    taints = (Taint("a", "", "NoSchedule"), Taint("b", "", "NoSchedule"))
    assert untolerated((Toleration("a", "Exists"),), taints) == taints[1]


@pytest.mark.parametrize(
    ("op", "values", "label", "holds"),
    [
        ("In", ("a", "b"), "a", True),
        ("In", ("a",), None, False),
        ("NotIn", ("a",), "b", True),
        ("NotIn", ("a",), None, True),
        ("NotIn", ("a",), "a", False),
        ("Exists", (), "", True),
        ("Exists", (), None, False),
        ("DoesNotExist", (), None, True),
        ("DoesNotExist", (), "x", False),
        ("Gt", ("4",), "8", True),
        ("Gt", ("8",), "8", False),
        ("Lt", ("8",), "4", True),
        ("Gt", ("4",), "many", False),
    ],
)
def test_requirement_operators(op, values, label, holds):
    assert requirement_holds(Requirement("k", op, values), label) is holds


def test_affinity_terms_are_ored_and_expressions_anded():
    zone_a_gpu = SelectorTerm((Requirement("zone", "In", ("a",)), Requirement("gpu", "Exists")))
    zone_b = SelectorTerm((Requirement("zone", "In", ("b",)),))
    terms = (zone_a_gpu, zone_b)
    assert affinity_holds(terms, "n", {"zone": "a", "gpu": "yes"})
    assert not affinity_holds(terms, "n", {"zone": "a"})
    assert affinity_holds(terms, "n", {"zone": "b"})
    assert affinity_holds((), "n", {})  # no affinity: every node


def test_match_fields_on_node_name():
    terms = (SelectorTerm(match_fields=(Requirement("metadata.name", "In", ("n1",)),)),)
    assert affinity_holds(terms, "n1", {})
    assert not affinity_holds(terms, "n2", {})


def test_empty_term_matches_nothing():
    assert not affinity_holds((SelectorTerm(),), "n", {"any": "thing"})


def test_node_selector():
    assert selector_mismatch({"gpu": "yes"}, {"gpu": "yes", "x": "y"}) is None
    assert selector_mismatch({"gpu": "yes"}, {"gpu": "no"}) == "gpu=yes"
