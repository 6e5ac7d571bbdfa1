"""A placement for people (a table) and for programs (JSON of a stable shape).

Names come from the snapshot: in the table they are plain text (never rich markup) with control characters
escaped, so a pod named `x[/]` or carrying a terminal escape prints as itself.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

import orjson
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gangsolve.cycle import Decisions
from gangsolve.edge import reservations
from gangsolve.edge.errors import InputError, printable
from gangsolve.solver.explain import quantity
from gangsolve.solver.model import QueueResult, Resources


def quantities(amounts: Resources) -> dict[str, str]:
    """Base units as Kubernetes quantities (`500m` cpu, `4Gi` memory), as Volcano writes a Queue's status."""
    return {r: quantity(r, q) for r, q in sorted(amounts.items())}


def queue_dict(q: QueueResult) -> dict:
    return {
        "name": q.name,
        "weight": q.weight,
        "capability": quantities(q.capability),
        "allocated": quantities(q.allocated),
        "share": q.share,
        "fairShare": q.fair_share,
    }


def as_dict(decisions: Decisions) -> dict:
    """The cycle's decisions, and besides them: each gang's `rule`, the gang rule that defined it (upstream,
    podgroup, volcano, pdb, label, owner, single); `gated`, pods held back by scheduling gates (pod -> gate
    names), never placed; `waiting`, pods that join no gang yet (pod -> why: their PodGroup does not exist, their
    gang definition or their ResourceClaim may still come, or a claim uses what gangsolve does not model);
    `allocations`, the devices of the claims of the pods placed (Dynamic Resource Allocation); `skipped`,
    objects left out as unreadable (`--skip-invalid`) and gangs the solver failed on."""
    placement = decisions.placement
    return {
        "bindings": dict(placement.bindings),
        "gangs": [
            {
                "name": g.name,
                "rule": decisions.origins[g.name].rule,
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
        "queues": [queue_dict(q) for q in placement.queues],
        "gated": {pod: list(gates) for pod, gates in decisions.gated.items()},
        "waiting": {pod: why.reason for pod, why in decisions.waiting.items()},
        "allocations": {
            claim: [{"request": r, "driver": d[0], "pool": d[1], "device": d[2]} for r, d in devices]
            for claim, devices in decisions.allocations.items()
        },
        "nominations": dict(placement.nominations),
        "evictions": [
            {"pod": e.pod, "node": e.node, "for": e.preemptor, "reason": e.reason} for e in placement.evictions
        ],
        "reservations": [reservations.as_json(r) for r in placement.reservations],
        "skipped": [{"object": e.obj, "reason": _reason(e)} for e in decisions.skipped],
    }


def _reason(error: InputError) -> str:
    """Why an object was left out, without its name (it has a column of its own)."""
    return f"{error.field}: {error.message}" if error.field else error.message


def to_json(decisions: Decisions) -> bytes:
    return orjson.dumps(as_dict(decisions), option=orjson.OPT_INDENT_2) + b"\n"


def _text(value: str, style: str = "") -> Text:
    return Text(printable(value), style=style)


def _listed(amounts: Resources) -> str:
    return ", ".join(f"{r}={q}" for r, q in quantities(amounts).items() if r != "pods")


def print_table(decisions: Decisions, console: Console) -> None:
    placement, gated, allocations = decisions.placement, decisions.gated, decisions.allocations
    waiting = {pod: why.reason for pod, why in decisions.waiting.items()}
    table = Table(title="Gangs", title_justify="left", show_lines=False)
    for column in ("GANG", "RULE", "PRIORITY", "MIN", "PODS", "PLACED", "REASON", "RESERVATION"):
        table.add_column(column, overflow="fold", no_wrap=column == "GANG")
    reserved = {r.gang: r for r in placement.reservations}
    for g in placement.gangs:
        placed = _text(str(g.placed_pods), "green" if g.placed else "red")
        planned = _text(reservations.message(reserved[g.name])) if g.name in reserved else ""
        table.add_row(
            _text(g.name),
            decisions.origins[g.name].rule,
            str(g.priority),
            str(g.min_member),
            str(g.pods),
            placed,
            _text(g.reason or ""),
            planned,
        )
    console.print(table)
    if any(q.name != "default" or q.capability or q.weight != 1 for q in placement.queues):
        queues = Table(title="Queues (shares: the largest fraction of any resource held)", title_justify="left")
        for column in ("QUEUE", "WEIGHT", "CAPABILITY", "ALLOCATED", "SHARE", "FAIR SHARE"):
            queues.add_column(column, overflow="fold")
        for q in placement.queues:
            queues.add_row(
                _text(q.name),
                str(q.weight),
                _text(_listed(q.capability) or "-"),
                _text(_listed(q.allocated) or "-"),
                f"{q.share:.1%}",
                f"{q.fair_share:.1%}",
            )
        console.print(queues)
    if placement.bindings:
        _print(console, "Bindings", ("POD", "NODE"), ((p, n) for p, n in placement.bindings.items()))
    if allocations:
        _print(
            console,
            "Allocations (ResourceClaim: driver/pool/device)",
            ("CLAIM", "DEVICES"),
            ((claim, ", ".join("/".join(d) for _r, d in got)) for claim, got in allocations.items()),
            fold={"DEVICES"},
        )
    if placement.nominations:
        _print(
            console,
            "Nominated (bind once the pods preempted for them are gone)",
            ("POD", "NODE"),
            ((p, n) for p, n in placement.nominations.items()),
        )
    if placement.evictions:
        columns = ("POD", "NODE", "FOR", "REASON")
        rows = ((e.pod, e.node, e.preemptor, e.reason) for e in placement.evictions)
        _print(console, "Evictions", columns, rows, fold=set(columns))
    if gated:
        title = "Gated (not planned until their scheduling gates are removed)"
        _print(console, title, ("POD", "GATES"), ((p, ", ".join(g)) for p, g in gated.items()), fold={"GATES"})
    if waiting:
        _print(console, "Waiting (in no gang yet)", ("POD", "WHY"), waiting.items(), fold={"WHY"})
    if decisions.skipped:
        left_out = ((e.obj, _reason(e)) for e in decisions.skipped)
        _print(console, "Skipped (unreadable, left out)", ("OBJECT", "REASON"), left_out, fold={"REASON"})
    gangs_placed = sum(1 for g in placement.gangs if g.placed)
    summary = (
        f"{gangs_placed}/{len(placement.gangs)} gangs placed, {len(placement.bindings)} pods bound"
        + (f", {len(placement.nominations)} nominated" if placement.nominations else "")
        + (f", {len(placement.evictions)} to evict" if placement.evictions else "")
        + (f", {len(gated)} pods gated" if gated else "")
        + (f", {len(waiting)} waiting for their gang" if waiting else "")
        + (f", {len(decisions.skipped)} objects skipped" if decisions.skipped else "")
        + f" · status {placement.status} · objective {placement.objective}, bound {placement.best_bound} · "
        f"{placement.solve_seconds:.2f}s"
    )
    console.print(Text(summary))


def _print(
    console: Console,
    title: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[str]],
    fold: Collection[str] = (),
) -> None:
    """A table of names and values, each cell as text (never markup); `fold` columns wrap instead of cutting."""
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold" if column in fold else "ellipsis")
    for row in rows:
        table.add_row(*(_text(cell) for cell in row))
    console.print(table)
