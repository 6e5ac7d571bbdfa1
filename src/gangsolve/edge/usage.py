"""A queue's usage history: its dominant share of the cluster over time, decayed by a half-life (as Slurm's
PriorityDecayHalfLife), for fair shares that remember (solver/queues.py scales a queue's weight by it).

The live scheduler keeps it per queue and writes it on the Queue as annotation `gangsolve.io/usage`, the value
(share-seconds) and when it was taken (`"5400.0 2026-12-01T08:00:00Z"`), so a restarted scheduler (and
`gangsolve solve` on an export) starts from it, decayed to its own clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from gangsolve.solver.model import Queue, QueueResult

ANNOTATION = "gangsolve.io/usage"


def decayed(value: float, seconds: float, half_life: float) -> float:
    """`value` after `seconds` of decay (none for a half-life of 0: history is off)."""
    if half_life <= 0:
        return 0.0
    return value * 0.5 ** (max(0.0, seconds) / half_life)


def accrue(value: float, share: float, seconds: float, half_life: float) -> float:
    """The history `seconds` later, the queue having held `share` of the cluster all along: the old value decays
    and the new use decays from when it was spent (the integral of `share` over the interval, decayed)."""
    if half_life <= 0:
        return 0.0
    seconds = max(0.0, seconds)
    kept = 0.5 ** (seconds / half_life)
    # share * integral over the interval of 0.5^((seconds - t) / half_life) dt
    spent = share * half_life / 0.6931471805599453 * (1 - kept)
    return value * kept + spent


def read(text: str) -> tuple[float, datetime]:
    """The annotation's value and time; ValueError when it is not `<number> <RFC 3339 time>`."""
    value, _, at = text.strip().partition(" ")
    number = float(value)
    if not number >= 0 or number == float("inf"):
        raise ValueError(f"not a usage: {text!r}")
    when = datetime.fromisoformat(at.strip().replace("Z", "+00:00"))
    if when.tzinfo is None:
        raise ValueError(f"no time zone: {text!r}")
    return number, when


def write(value: float, at: datetime) -> str:
    return f"{value:.1f} {at.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


class History:
    """Each queue's usage kept between cycles by the live scheduler: a queue first seen starts from its
    annotation (the edge decays it to the cycle's clock); from then on it accrues the share the queue held."""

    def __init__(self, half_life: float) -> None:
        self.half_life = half_life
        self.kept: dict[str, tuple[float, float, float]] = {}  # queue -> (usage, at, share held since)

    def at(self, queue: Queue, now: float) -> float:
        """The queue's usage at `now` (seconds on the cycle's clock)."""
        if queue.name not in self.kept:
            return queue.usage
        value, then, share = self.kept[queue.name]
        return accrue(value, share, now - then, self.half_life)

    def record(self, queues: Sequence[Queue], results: Sequence[QueueResult], now: float) -> None:
        """After a cycle at `now` whose queues carry their usage at `now`: the share each holds from here on. A
        parent queue's usage is its children's together (the solver sums it), so only queues without children
        are kept."""
        usage = {q.name: q.usage for q in queues}
        parents = {r.parent for r in results}
        for r in results:
            if r.name not in parents:
                self.kept[r.name] = (usage.get(r.name, 0.0), now, r.share)

    def values(self) -> dict[str, tuple[float, float]]:
        """queue -> (usage, when), to write on the Queues."""
        return {name: (value, at) for name, (value, at, _share) in self.kept.items()}
