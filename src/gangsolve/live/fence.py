"""The fence every writer checks: while leader election is on, no write to the API server as the scheduler may
start once the lease's validity has run out (the elector is the fence); without it, the one replica is always
valid."""

from __future__ import annotations

import math
from typing import Protocol


class Fence(Protocol):
    def remaining(self) -> float:
        """Seconds this replica may still write as the scheduler (0 when it may not)."""
        ...


class Unfenced:
    """The fence of the only replica (no leader election): always valid."""

    def remaining(self) -> float:
        return math.inf
