"""Taints and tolerations: NoSchedule and NoExecute taints repel pods that do not tolerate them."""

from __future__ import annotations

from gangsolve.solver.model import Taint, Toleration

BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")  # PreferNoSchedule only lowers a score


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.operator == "Exists":
        return not toleration.key or toleration.key == taint.key
    return toleration.key == taint.key and toleration.value == taint.value


def untolerated(tolerations: tuple[Toleration, ...], taints: tuple[Taint, ...]) -> Taint | None:
    """The first blocking taint that no toleration matches, or None when the pod may land."""
    for taint in taints:
        if taint.effect in BLOCKING_EFFECTS and not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None
