"""The scheduling queue: when a gang is tried again.

kube-scheduler keeps its cache, its scheduling queue and its nominator apart; so does gangsolve. The store is the
cache (what the cluster holds, what was assumed); this queue decides what the next cycle solves, and when it is
due:

- **back-off** after a failed bind: the binder's `back_off` keeps that pod out of planning for 1 s, doubling up to
  10 s (kube-scheduler's pod back-off), so a pod the API server keeps refusing cannot make the scheduler hammer
  it. A pod bound, deleted or replaced under its name starts afresh (`prune`).
- **parked gangs**: a gang a cycle left pending waits, with its last result, until it changes (its signature) or
  room may have been made (the store's `freed` moved), as kube-scheduler parks an unschedulable pod until a
  cluster event could make it schedulable. Every gang is solved again after the resync period.
- **again**: a cycle that placed gangs and left others pending solves those again at once (what they waited
  for may be what the placed ones took).
- **grace ends**: when the first pod waiting for its gang definition stops waiting.

Written by the solver actor (parking, timers) and the binder (`back_off`); read by the solver actor.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from gangsolve.solver import Gang, GangResult

BACKOFF_INITIAL = 1.0  # seconds, as kube-scheduler's podInitialBackoffSeconds
BACKOFF_MAX = 10.0  # as its podMaxBackoffSeconds

Signature = tuple  # everything of a gang that decides whether and where it fits


@dataclass
class _Backoff:
    uid: str
    attempts: int
    until: float  # monotonic


@dataclass(frozen=True)
class Parked:
    """A gang a cycle left pending: what it looked like then, and the result it got."""

    signature: Signature
    result: GangResult


class SchedulingQueue:
    def __init__(self, resync_period: float = 300.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.resync_period = resync_period
        self._clock = clock
        self._backoff: dict[str, _Backoff] = {}  # pod key -> kept out of planning until
        self._parked: dict[str, Parked] = {}  # gang name -> how it looked when a cycle left it pending
        self._freed: int | None = None  # the store's `freed` at the last cycle that solved every gang
        self._full_at = -math.inf  # monotonic: when that was
        self._grace_ends = math.inf  # monotonic: when the first pod waiting for its gang definition stops waiting
        self.again = False  # the last cycle placed gangs and left others pending: solve those again at once

    # ------------------------------------------------------------------ back-off (binder)

    def back_off(self, key: str, uid: str) -> None:
        """A bind of this pod failed: keep it out of planning, twice as long as last time for the same pod."""
        previous = self._backoff.get(key)
        attempts = previous.attempts + 1 if previous is not None and previous.uid == uid else 1
        delay = min(BACKOFF_MAX, BACKOFF_INITIAL * 2 ** (attempts - 1))
        self._backoff[key] = _Backoff(uid, attempts, self._clock() + delay)

    def prune(self, pod: Callable[[str], dict | None]) -> None:
        """Forget the back-off of pods bound, deleted or replaced under their name (`pod`: the store's object)."""
        for key, entry in list(self._backoff.items()):
            obj = pod(key)
            if obj is None or obj["metadata"].get("uid") != entry.uid or (obj.get("spec") or {}).get("nodeName"):
                del self._backoff[key]

    def backing_off(self) -> dict[str, float]:
        """Pods held back after a failed bind: key -> seconds left."""
        now = self._clock()
        return {k: b.until - now for k, b in self._backoff.items() if b.until > now}

    def held(self) -> int:
        """Back-off entries in memory."""
        return len(self._backoff)

    # ------------------------------------------------------------------ what to solve (solver actor)

    def full_due(self, freed: int) -> bool:
        """Every gang is worth solving again: room may have been made (`freed`: the store's count), a pod stopped
        waiting for its gang definition, or the resync period passed."""
        now = self._clock()
        return self._freed != freed or now - self._full_at >= self.resync_period or now >= self._grace_ends

    def to_solve(
        self, gangs: Iterable[Gang], signatures: dict[str, Signature], holds: Callable[[Gang], bool], full: bool
    ) -> tuple[Gang, ...]:
        """The gangs that may place differently than last time: all of them when `full`, else those not parked,
        changed since, or holding room that limits the others (`holds`)."""
        if full:
            return tuple(gangs)
        return tuple(
            g for g in gangs if (p := self._parked.get(g.name)) is None or p.signature != signatures[g.name] or holds(g)
        )

    def parked(self, name: str) -> Parked | None:
        return self._parked.get(name)

    def solved(
        self,
        carried: Iterable[str],
        left: Iterable[tuple[str, Signature, GangResult]],
        placed_any: bool,
        full_freed: int | None,
        grace_ends: datetime | None,
    ) -> None:
        """A cycle ended: gangs not solved (`carried`) stay parked; those solved and left pending (`left`: name,
        signature, result) are parked unless it placed gangs, which makes it solve them again at once. A cycle
        that solved every gang passes the store's `freed` it saw (`full_freed`); `grace_ends`: when the first pod
        waiting for its gang definition stops waiting."""
        left = list(left)
        self.again = placed_any and bool(left)
        self._parked = {name: self._parked[name] for name in carried} | {
            name: Parked(signature, result) for name, signature, result in left if not self.again
        }
        now = self._clock()
        if full_freed is not None:
            self._freed, self._full_at = full_freed, now
        if grace_ends is None:
            self._grace_ends = math.inf
        else:
            self._grace_ends = now + (grace_ends - datetime.now(grace_ends.tzinfo)).total_seconds() + 0.05

    def next_wake(self) -> float:
        """Seconds until a cycle is due with no change in the cluster: the resync, a back-off or a grace ending."""
        now = self._clock()
        waits = [b.until - now for b in self._backoff.values() if b.until > now]
        return max(0.0, min([self._full_at + self.resync_period - now, self._grace_ends - now, *waits]))
