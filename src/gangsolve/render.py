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
from gangsolve.edge import dra_capacity, reservations
from gangsolve.edge.errors import InputError, printable
from gangsolve.solver.devices import DeviceId
from gangsolve.solver.explain import quantity
from gangsolve.solver.model import WHOLE, QueueResult, Resources


def quantities(amounts: Resources) -> dict[str, str]:
    """Base units as Kubernetes quantities (`500m` cpu, `4Gi` memory), as Volcano writes a Queue's status."""
    return {r: quantity(r, q) for r, q in sorted(amounts.items())}


def queue_dict(q: QueueResult) -> dict:
    return {
        "name": q.name,
        "parent": q.parent,
        "weight": q.weight,
        "capability": quantities(q.capability),
        "allocated": quantities(q.allocated),
        "share": q.share,
        "fairShare": q.fair_share,
        "usage": q.usage,
    }


def as_dict(decisions: Decisions) -> dict:
    """The cycle's decisions, and besides them: each gang's `rule`, the gang rule that defined it (upstream,
    podgroup, volcano, pdb, label, owner, single); `gated`, pods held back by scheduling gates (pod -> gate
    names), never placed; `waiting`, pods that join no gang yet (pod -> why: their PodGroup does not exist, their
    gang definition or their ResourceClaim may still come, or a claim uses what gangsolve does not model);
    `allocations`, the devices of the claims of the pods placed (Dynamic Resource Allocation); `gpuShares`, the
    GPU each fractional pod placed takes part of (node, index, share); `skipped`,
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
            claim: [_device(decisions, claim, r, d) for r, d in devices]
            for claim, devices in decisions.allocations.items()
        },
        "gpuShares": {
            pod: {"node": share.node, "gpu": share.gpu, "share": share.milli / WHOLE}
            for pod, share in sorted(placement.shares.items())
        },
        "nominations": dict(placement.nominations),
        "evictions": [
            {"pod": e.pod, "node": e.node, "for": e.preemptor, "reason": e.reason} for e in placement.evictions
        ],
        "reservations": [reservations.as_json(r) for r in placement.reservations],
        "plan": reservations.plan_json(placement, decisions.cluster.gangs, decisions.cluster.now),
        "skipped": [{"object": e.obj, "reason": _reason(e)} for e in decisions.skipped],
    }


def _device(decisions: Decisions, claim: str, request: str, device: DeviceId) -> dict[str, object]:
    """One device of a claim's allocation; with what it consumes of a shared device."""
    out: dict[str, object] = {"request": request, "driver": device[0], "pool": device[1], "device": device[2]}
    consumed = dra_capacity.consumed_capacity(claim, request, device, decisions.devices)
    if consumed is not None:
        out["consumedCapacity"] = consumed
    return out


def _device_text(decisions: Decisions, claim: str, request: str, device: DeviceId) -> str:
    """`driver/pool/device`, with what the claim consumes of a shared one: `(memory 20Gi)`."""
    consumed = dra_capacity.consumed_capacity(claim, request, device, decisions.devices, show=dra_capacity.readable)
    share = f" ({', '.join(f'{n} {q}' for n, q in consumed.items())})" if consumed else ""
    return "/".join(device) + share


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
    reserved = {r.gang: r for r in (*placement.reservations, *placement.forecasts)}
    gangs = [
        (
            g.name,
            decisions.origins[g.name].rule,
            str(g.priority),
            str(g.min_member),
            str(g.pods),
            _text(str(g.placed_pods), "green" if g.placed else "red"),
            g.reason or "",
            reservations.message(reserved[g.name]) if g.name in reserved else "",
        )
        for g in placement.gangs
    ]
    columns = ("GANG", "RULE", "PRIORITY", "MIN", "PODS", "PLACED", "REASON", "EXPECTED START")
    print_rows(console, "Gangs", columns, gangs, wrap={"REASON", "EXPECTED START"})
    if any(q.name != "default" or q.capability or q.weight != 1 for q in placement.queues):
        print_rows(
            console,
            "Queues (shares: the largest fraction of any resource held)",
            ("QUEUE", "WEIGHT", "CAPABILITY", "ALLOCATED", "SHARE", "FAIR SHARE"),
            (
                (
                    q.name,
                    str(q.weight),
                    _listed(q.capability) or "-",
                    _listed(q.allocated) or "-",
                    f"{q.share:.1%}",
                    f"{q.fair_share:.1%}",
                )
                for q in placement.queues
            ),
            wrap={"CAPABILITY", "ALLOCATED"},
        )
    if placement.bindings:
        print_rows(console, "Bindings", ("POD", "NODE"), ((p, n) for p, n in placement.bindings.items()))
    if allocations:
        print_rows(
            console,
            "Allocations (ResourceClaim: driver/pool/device)",
            ("CLAIM", "DEVICES"),
            (
                (claim, ", ".join(_device_text(decisions, claim, r, d) for r, d in got))
                for claim, got in allocations.items()
            ),
            wrap={"DEVICES"},
        )
    if placement.shares:
        print_rows(
            console,
            "GPU shares (the GPU each fractional pod takes part of)",
            ("POD", "NODE", "GPU", "SHARE"),
            ((p, s.node, str(s.gpu), f"{s.milli / WHOLE:g}") for p, s in sorted(placement.shares.items())),
        )
    if placement.nominations:
        print_rows(
            console,
            "Nominated (bind once the pods preempted for them are gone)",
            ("POD", "NODE"),
            ((p, n) for p, n in placement.nominations.items()),
        )
    if placement.evictions:
        rows = ((e.pod, e.node, e.preemptor, e.reason) for e in placement.evictions)
        print_rows(console, "Evictions", ("POD", "NODE", "FOR", "REASON"), rows, wrap={"REASON"})
    if gated:
        title = "Gated (not planned until their scheduling gates are removed)"
        print_rows(console, title, ("POD", "GATES"), ((p, ", ".join(g)) for p, g in gated.items()), wrap={"GATES"})
    if waiting:
        print_rows(console, "Waiting (in no gang yet)", ("POD", "WHY"), waiting.items(), wrap={"WHY"})
    if decisions.skipped:
        left_out = ((e.obj, _reason(e)) for e in decisions.skipped)
        print_rows(console, "Skipped (unreadable, left out)", ("OBJECT", "REASON"), left_out, wrap={"REASON"})
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
    console.print(Text(summary), soft_wrap=not console.is_terminal)


Cell = str | Text  # text from the snapshot, shown as itself (never markup); a Text may carry a colour


def print_rows(
    console: Console,
    title: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[Cell]],
    wrap: Collection[str] = (),
) -> None:
    """A table of names and values, without its empty columns. On a terminal, a rich table whose `wrap` columns
    wrap between words and whose others are shown whole, never split inside a word (the table grows past the
    terminal's width rather); elsewhere (a pipe, a file) plain text, one line a row, columns aligned by spaces,
    for grep and awk."""
    cells = [[c if isinstance(c, Text) else _text(c) for c in row] for row in rows]
    shown = [i for i in range(len(columns)) if not cells or any(row[i].plain for row in cells)]
    header = [columns[i] for i in shown]
    body = [[row[i] for i in shown] for row in cells]
    if not console.is_terminal:
        _print_plain(console, title, header, body)
        return
    table = Table(title=title, title_justify="left")
    for i, column in enumerate(header):
        words = [w for row in body for w in (row[i].plain.split() if column in wrap else [row[i].plain])]
        table.add_column(column, no_wrap=column not in wrap, min_width=max(map(len, [column, *words])))
    for row in body:
        table.add_row(*row)
    narrowest = sum(column.min_width or 0 for column in table.columns) + 3 * len(header) + 1  # padding, rules
    if narrowest > console.width:
        table.width = narrowest  # rich would split words to fit the terminal
    console.print(table, crop=False)


def _print_plain(console: Console, title: str, header: list[str], body: list[list[Text]]) -> None:
    lines = [header, *([cell.plain for cell in row] for row in body)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    console.out(title, highlight=False)
    for line in lines:
        console.out(
            "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip(), highlight=False
        )
    console.out("", highlight=False)
