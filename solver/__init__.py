"""The optimization core: plain data in, placement out. No Kubernetes, YAML or I/O imports.

placement = solve(Cluster(nodes, gangs), SolveConfig(time_limit=2))
assert not validate(cluster, placement)
"""

from typing import TYPE_CHECKING, Any

from gangsolve.solver.model import (
    GPU,
    Cluster,
    Gang,
    GangResult,
    Node,
    Placement,
    Pod,
    Queue,
    QueueResult,
    Requirement,
    Reservation,
    Running,
    SelectorTerm,
    SolveConfig,
    Taint,
    Toleration,
)
from gangsolve.solver.validate import validate

if TYPE_CHECKING:
    from gangsolve.solver.pipeline import solve


def __getattr__(name: str) -> Any:
    # OR-Tools takes a second or more to import (it loads pandas): the pipeline is loaded on first use, so that
    # reading snapshots, and rejecting bad ones, stays fast.
    if name == "solve":
        from gangsolve.solver.pipeline import solve

        return solve
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "GPU",
    "Cluster",
    "Gang",
    "GangResult",
    "Node",
    "Placement",
    "Pod",
    "Queue",
    "QueueResult",
    "Requirement",
    "Reservation",
    "Running",
    "SelectorTerm",
    "SolveConfig",
    "Taint",
    "Toleration",
    "solve",
    "validate",
]
