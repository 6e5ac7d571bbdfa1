"""nodeSelector and required node affinity (terms ORed, expressions ANDed, matchFields on metadata.name)."""

from __future__ import annotations

from collections.abc import Mapping

from gangsolve.solver.model import Requirement, SelectorTerm


def _as_int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def requirement_holds(req: Requirement, value: str | None) -> bool:
    """`value` is the node's label (or field) value, None when the node lacks it."""
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        have, bound = _as_int(value), _as_int(req.values[0] if req.values else None)
        if have is None or bound is None:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def term_holds(term: SelectorTerm, node_name: str, labels: Mapping[str, str]) -> bool:
    # A term with no requirements matches nothing, as in kube-scheduler.
    if not term.match_expressions and not term.match_fields:
        return False
    return all(requirement_holds(r, labels.get(r.key)) for r in term.match_expressions) and all(
        requirement_holds(r, node_name if r.key == "metadata.name" else None) for r in term.match_fields
    )


def selector_mismatch(node_selector: Mapping[str, str], labels: Mapping[str, str]) -> str | None:
    """The first nodeSelector pair the node's labels lack, as `key=value`, or None."""
    for key, value in node_selector.items():
        if labels.get(key) != value:
            return f"{key}={value}"
    return None


def affinity_holds(terms: tuple[SelectorTerm, ...], node_name: str, labels: Mapping[str, str]) -> bool:
    return not terms or any(term_holds(t, node_name, labels) for t in terms)


def label_keys(node_selector: Mapping[str, str], terms: tuple[SelectorTerm, ...]) -> frozenset[str]:
    """Every node label key these constraints read (so nodes can be grouped by just those labels)."""
    keys = set(node_selector)
    for term in terms:
        keys.update(r.key for r in term.match_expressions)
    return frozenset(keys)


def reads_node_name(terms: tuple[SelectorTerm, ...]) -> bool:
    return any(term.match_fields for term in terms)
