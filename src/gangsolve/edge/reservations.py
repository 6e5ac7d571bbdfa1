"""What reservations look like to people and programs: the text of a pending gang's condition and PodGroup
status, the JSON of `gangsolve solve`, and the figures the metrics export.

The live scheduler calls these with each cycle's Placement; they read nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, tzinfo

from gangsolve.solver.model import Gang, Placement, Reservation

MAX_NODES_SHOWN = 5
WAITING_FOR_ESTIMATE = (
    "waiting for an estimate: running pods on the nodes it needs declare no runtime "
    "(annotation gangsolve.io/expected-runtime or activeDeadlineSeconds) and no default is configured"
)
# Learned and default runtimes are guesses: the plan shows a start on them but holds nothing (planning.py).
GUESSED = (
    " (a forecast on runtimes nobody declared: nothing is held for it; "
    "declare gangsolve.io/expected-runtime to have it held)"
)


def start_rfc3339(reservation: Reservation) -> str | None:
    return rfc3339(reservation.start)


def message(reservation: Reservation, now: float | None = None, tz: tzinfo = UTC) -> str:
    """`expected to start at about 14:05 UTC on nodes a, b (16 GPUs held)`, the date added when the start is
    not on the day of `now`, and when its room frees where the plan holds it later; or why there is no time yet."""
    if reservation.start is None:
        return WAITING_FOR_ESTIMATE
    nodes = list(reservation.nodes[:MAX_NODES_SHOWN])
    if len(reservation.nodes) > MAX_NODES_SHOWN:
        nodes.append(f"{len(reservation.nodes) - MAX_NODES_SHOWN} more")
    when = _when(reservation.start, now, tz)
    notes = [f"{reservation.gpus} GPU{'' if reservation.gpus == 1 else 's'} held"] if reservation.gpus else []
    if reservation.earliest is not None:  # held later than it could start (SolveConfig.plan_relaxation)
        room = _when(reservation.earliest, now, tz)
        notes.append(f"its room frees at about {room}, and gangs that end by {when} may use it first")
    held = f" ({'; '.join(notes)})" if notes else ""
    if not reservation.held:
        held = GUESSED if reservation.guessed else " (a forecast: nothing is held for it yet)"
    noun = "node" if len(reservation.nodes) == 1 else "nodes"
    return f"expected to start at about {when} on {noun} {', '.join(nodes)}{held}"


def _when(seconds: float, now: float | None, tz: tzinfo) -> str:
    """`14:05 UTC`, or `2026-01-02 14:05 UTC` when not on the day of `now`."""
    at = datetime.fromtimestamp(seconds, tz)
    same_day = now is not None and datetime.fromtimestamp(now, tz).date() == at.date()
    return at.strftime("%H:%M %Z" if same_day else "%Y-%m-%d %H:%M %Z")


def pending_message(reason: str, reservation: Reservation | None, now: float | None = None) -> str:
    """A pending gang's condition message: why it cannot start now, then when it is expected to."""
    if reservation is None:
        return reason
    planned = message(reservation, now)
    return f"{reason}; {planned}" if reason else planned


def rfc3339(seconds: float | None) -> str | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def plan_json(placement: Placement, gangs: Iterable[Gang], now: float) -> list[dict]:
    """The plan, one entry per planned gang: those starting now (their bindings, ending after their estimated
    runtime), those holding a reservation (start null while what they wait for has no expected end), then the
    forecasts past the plan's depth (`held` false). `guessed`: a time of the entry rests on a runtime nobody
    declared (learned or the default): a forecast's start, or the end of a gang starting now."""
    out = []
    for gang in gangs:
        pods = {p.name: placement.bindings[p.name] for p in gang.pods if p.name in placement.bindings}
        if pods:
            end = now + gang.runtime if gang.runtime is not None else None
            out.append(
                {
                    "gang": gang.name,
                    "start": rfc3339(now),
                    "end": rfc3339(end),
                    "pods": pods,
                    "held": True,
                    "guessed": end is not None and gang.guessed,
                }
            )
    for r in (*placement.reservations, *placement.forecasts):
        out.append(
            {
                "gang": r.gang,
                "start": rfc3339(r.start),
                "end": rfc3339(r.end),
                "pods": dict(r.bindings),
                "held": r.held,
                "guessed": r.guessed,
                **_earliest(r),
            }
        )
    return out


def _earliest(reservation: Reservation) -> dict[str, str | None]:
    """When a relaxed reservation's gang could start, where the plan holds it later (SolveConfig.plan_relaxation)."""
    return {"earliest": rfc3339(reservation.earliest)} if reservation.earliest is not None else {}


def as_json(reservation: Reservation) -> dict:
    return {
        "gang": reservation.gang,
        "nodes": list(reservation.nodes),
        "start": start_rfc3339(reservation),
        "gpus": reservation.gpus,
        **_earliest(reservation),
    }


def figures(placement: Placement) -> dict[str, int]:
    """What a cycle's metrics report: gangs holding a reservation, the GPUs they hold, gangs waiting for an
    estimate, and gangs started by backfill."""
    timed = [r for r in placement.reservations if r.start is not None]
    return {
        "reservations": len(timed),
        "reserved_gpus": sum(r.gpus for r in timed),
        "waiting_for_estimate": len(placement.reservations) - len(timed),
        "backfilled_gangs": len(placement.backfilled),
    }
