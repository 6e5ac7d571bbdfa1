"""The optimization core: plain data in, placement out. No Kubernetes, YAML or I/O imports.

placement = solve(Cluster(nodes, gangs), SolveConfig(time_limit=2))
assert not validate(cluster, placement)
"""

from gangsolve.solver.model import (
    GPU,
    Cluster,
    Gang,
    GangResult,
    Node,
    Placement,
    Pod,
    Requirement,
    Reservation,
    Running,
    SelectorTerm,
    SolveConfig,
    Taint,
    Toleration,
)
from gangsolve.solver.solve import solve
from gangsolve.solver.validate import validate

__all__ = [
    "GPU",
    "Cluster",
    "Gang",
    "GangResult",
    "Node",
    "Placement",
    "Pod",
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
