"""A placement for people (a table) and for programs (JSON of a stable shape)."""

from __future__ import annotations

from collections import Counter

import orjson
from rich.console import Console
from rich.table import Table

from gangsolve import reservations
from gangsolve.solver.model import Placement


def as_dict(placement: Placement) -> dict:
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
        "reservations": [reservations.as_json(r) for r in placement.reservations],
    }


def to_json(placement: Placement) -> bytes:
    return orjson.dumps(as_dict(placement), option=orjson.OPT_INDENT_2) + b"\n"


def print_table(placement: Placement, console: Console) -> None:
    nodes_of: dict[str, Counter] = {}
    for pod, node in placement.bindings.items():
        nodes_of.setdefault(pod, Counter())[node] += 1
    table = Table(title="Gangs", title_justify="left", show_lines=False)
    for column in ("GANG", "PRIORITY", "MIN", "PODS", "PLACED", "REASON", "RESERVATION"):
        table.add_column(column, overflow="fold")
    held = {r.gang: r for r in placement.reservations}
    for g in placement.gangs:
        placed = f"[green]{g.placed_pods}[/]" if g.placed else f"[red]{g.placed_pods}[/]"
        planned = reservations.message(held[g.name]) if g.name in held else ""
        table.add_row(g.name, str(g.priority), str(g.min_member), str(g.pods), placed, g.reason or "", planned)
    console.print(table)
    if placement.bindings:
        bindings = Table(title="Bindings", title_justify="left")
        bindings.add_column("POD")
        bindings.add_column("NODE")
        for pod, node in placement.bindings.items():
            bindings.add_row(pod, node)
        console.print(bindings)
    gangs_placed = sum(1 for g in placement.gangs if g.placed)
    console.print(
        f"{gangs_placed}/{len(placement.gangs)} gangs placed, {len(placement.bindings)} pods bound · status "
        f"{placement.status} · objective {placement.objective}, bound {placement.best_bound} · "
        f"{placement.solve_seconds:.2f}s"
    )
