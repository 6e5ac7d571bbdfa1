"""A placement for people (a table) and for programs (JSON of a stable shape).

Names come from the snapshot: in the table they are plain text (never rich markup) with control characters
escaped, so a pod named `x[/]` or carrying a terminal escape prints as itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import orjson
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gangsolve import reservations
from gangsolve.errors import printable
from gangsolve.solver.devices import Allocations
from gangsolve.solver.model import Placement


def as_dict(
    placement: Placement,
    gated: Mapping[str, Sequence[str]] | None = None,
    waiting: Mapping[str, str] | None = None,
    allocations: Allocations | None = None,
) -> dict:
    """`gated`: pods held back by scheduling gates (pod -> gate names), never placed. `waiting`: pods that join
    no gang yet (pod -> why: their PodGroup does not exist, their gang definition or their ResourceClaim may
    still come, or a claim uses what gangsolve does not model). `allocations`: the devices of the claims of the
    pods placed (Dynamic Resource Allocation)."""
    return {
        "bindings": dict(placement.bindings),
        "gangs": [
            {
                "name": g.name,
                "placed": g.placed,
                "minMember": g.min_member,
                "pods": g.pods,
                "placedPods": g.placed_pods,
                "priority": g.priority,
                "reason": g.reason,
            }
            for g in placement.gangs
        ],
        "status": placement.status,
        "objective": placement.objective,
        "bestBound": placement.best_bound,
        "solveSeconds": round(placement.solve_seconds, 4),
        "stages": list(placement.stages),
        "levels": list(placement.levels),
        "gated": {pod: list(gates) for pod, gates in (gated or {}).items()},
        "waiting": dict(waiting or {}),
        "allocations": {
            claim: [{"request": r, "driver": d[0], "pool": d[1], "device": d[2]} for r, d in devices]
            for claim, devices in (allocations or {}).items()
        },
        "nominations": dict(placement.nominations),
        "evictions": [
            {"pod": e.pod, "node": e.node, "for": e.preemptor, "reason": e.reason} for e in placement.evictions
        ],
        "reservations": [reservations.as_json(r) for r in placement.reservations],
    }


def to_json(
    placement: Placement,
    gated: Mapping[str, Sequence[str]] | None = None,
    waiting: Mapping[str, str] | None = None,
    allocations: Allocations | None = None,
) -> bytes:
    return orjson.dumps(as_dict(placement, gated, waiting, allocations), option=orjson.OPT_INDENT_2) + b"\n"


def _text(value: str, style: str = "") -> Text:
    return Text(printable(value), style=style)


def print_table(
    placement: Placement,
    console: Console,
    gated: Mapping[str, Sequence[str]] | None = None,
    waiting: Mapping[str, str] | None = None,
    allocations: Allocations | None = None,
) -> None:
    table = Table(title="Gangs", title_justify="left", show_lines=False)
    for column in ("GANG", "PRIORITY", "MIN", "PODS", "PLACED", "REASON", "RESERVATION"):
        table.add_column(column, overflow="fold")
    reserved = {r.gang: r for r in placement.reservations}
    for g in placement.gangs:
        placed = _text(str(g.placed_pods), "green" if g.placed else "red")
        planned = _text(reservations.message(reserved[g.name])) if g.name in reserved else ""
        table.add_row(
            _text(g.name), str(g.priority), str(g.min_member), str(g.pods), placed, _text(g.reason or ""), planned
        )
    console.print(table)
    if placement.bindings:
        bindings = Table(title="Bindings", title_justify="left")
        bindings.add_column("POD")
        bindings.add_column("NODE")
        for pod, node in placement.bindings.items():
            bindings.add_row(_text(pod), _text(node))
        console.print(bindings)
    if allocations:
        devices = Table(title="Allocations (ResourceClaim: driver/pool/device)", title_justify="left")
        devices.add_column("CLAIM")
        devices.add_column("DEVICES", overflow="fold")
        for claim, got in allocations.items():
            devices.add_row(_text(claim), _text(", ".join("/".join(d) for _r, d in got)))
        console.print(devices)
    if placement.nominations:
        nominated = Table(title="Nominated (bind once the pods preempted for them are gone)", title_justify="left")
        nominated.add_column("POD")
        nominated.add_column("NODE")
        for pod, node in placement.nominations.items():
            nominated.add_row(_text(pod), _text(node))
        console.print(nominated)
    if placement.evictions:
        evicted = Table(title="Evictions", title_justify="left")
        for column in ("POD", "NODE", "FOR", "REASON"):
            evicted.add_column(column, overflow="fold")
        for e in placement.evictions:
            evicted.add_row(_text(e.pod), _text(e.node), _text(e.preemptor), _text(e.reason))
        console.print(evicted)
    if gated:
        held = Table(title="Gated (not planned until their scheduling gates are removed)", title_justify="left")
        held.add_column("POD")
        held.add_column("GATES", overflow="fold")
        for pod, gates in gated.items():
            held.add_row(_text(pod), _text(", ".join(gates)))
        console.print(held)
    if waiting:
        table = Table(title="Waiting (in no gang yet)", title_justify="left")
        table.add_column("POD")
        table.add_column("WHY", overflow="fold")
        for pod, why in waiting.items():
            table.add_row(_text(pod), _text(why))
        console.print(table)
    gangs_placed = sum(1 for g in placement.gangs if g.placed)
    summary = (
        f"{gangs_placed}/{len(placement.gangs)} gangs placed, {len(placement.bindings)} pods bound"
        + (f", {len(placement.nominations)} nominated" if placement.nominations else "")
        + (f", {len(placement.evictions)} to evict" if placement.evictions else "")
        + (f", {len(gated)} pods gated" if gated else "")
        + (f", {len(waiting)} waiting for their gang" if waiting else "")
        + f" · status {placement.status} · objective {placement.objective}, bound {placement.best_bound} · "
        f"{placement.solve_seconds:.2f}s"
    )
    console.print(Text(summary))
