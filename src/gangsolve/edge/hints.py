"""What `gangsolve solve` says besides the plan, where the plan alone would be silent about a mistake.

A snapshot without nodes cannot be solved (`unsolvable`). The other findings are lines for stderr, the exit
code unchanged (`hints`): objects set aside unread that look meant for gangsolve, PDBs that select no pod,
gangs of jobs that need a definition and have none (their minimum is 1, so part of such a job may run), and
pending pods that all name another scheduler.

Objects of other kinds are counted in one `note:` line, by kind: an export of a cluster (`kubectl get all -o
yaml`) holds dozens of kinds gangsolve has no use for, and a warning for each on every ordinary export would
teach users to ignore warnings. What loses a gang is one of gangsolve's kinds misspelled (`PodDisruptonBudget`)
or of an API group it does not read (a PodGroup of `scheduling.sigs.k8s.io`): those are warnings, each object
named.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Mapping

from gangsolve.edge.errors import describe, printable, shown
from gangsolve.edge.gangs import Origin, idle_pdbs
from gangsolve.edge.snapshot import KINDS, Snapshot

EXPORT = "make one of your cluster with `gangsolve export -o snap.json`"
SHOWN = 5  # objects named per warning; the rest are counted
_KINDS = {kind.lower(): kind for kind in KINDS}


def unsolvable(snap: Snapshot) -> str | None:
    """Why the snapshot cannot be solved (it has no nodes) and how to make one that can, or None."""
    if snap.nodes:
        return None
    if snap.pods:
        return f"snapshot: {_count(len(snap.pods), 'pod')} but no node to run on; {EXPORT}"
    return f"snapshot: no nodes and no pods (`kubectl get` writes nothing when a kind it names is not served); {EXPORT}"


def hints(snap: Snapshot, scheduler_name: str, origins: Mapping[str, Origin]) -> list[str]:
    """Warnings (`warning: ...`) and a hint (`hint: ...`), one line each, about the snapshot a cycle decided on
    and the origins of its gangs."""
    suspects = _unread(snap)
    lines = [f"warning: {_listed(names)} ignored: {why}" for why, names in suspects.items()]
    pdbs = idle_pdbs(snap)
    if pdbs:
        lines.append(
            "warning: PodDisruptionBudgets that select no pod, so define no gang (check the selector against the "
            f"pods' labels): {_listed(pdbs)}"
        )
    lines += [f"warning: gang {name}: {o.fallback}" for name, o in sorted(origins.items()) if o.fallback]
    lines += _other_schedulers(snap, scheduler_name)
    lines += _ignored(snap, {name for names in suspects.values() for name in names})
    return [printable(line) for line in lines]


def _ignored(snap: Snapshot, named: set[str]) -> list[str]:
    """One note counting the objects of kinds gangsolve does not read (those not already warned about)."""
    kinds = Counter(
        str(obj.get("kind")) for obj in snap.unread if isinstance(obj.get("kind"), str) and describe(obj) not in named
    )
    if not kinds:
        return []
    listed = [f"{kind} ({n})" for kind, n in sorted(kinds.items())]
    return [f"note: {_count(kinds.total(), 'object')} of kinds gangsolve does not read left out: {_listed(listed)}"]


def _unread(snap: Snapshot) -> dict[str, list[str]]:
    """Why each object set aside unread looks meant for gangsolve -> the objects (the others are left out)."""
    found: dict[str, list[str]] = {}
    for obj in snap.unread:
        kind, api = obj.get("kind"), obj.get("apiVersion")
        if not isinstance(kind, str):
            continue
        if kind in KINDS:
            why = f"gangsolve reads no {kind} of apiVersion {shown(api)}"
        elif close := difflib.get_close_matches(kind.lower(), _KINDS, n=1, cutoff=0.8):
            why = f"gangsolve reads no kind {kind} (did you mean {_KINDS[close[0]]}?)"
        else:
            continue
        found.setdefault(why, []).append(describe(obj))
    return found


def _other_schedulers(snap: Snapshot, scheduler_name: str) -> list[str]:
    """A hint when no pod names `scheduler_name` and pending pods name others: the flag to solve those."""
    pods = snap.decoded(nodes=False).pods
    if any(p.scheduler == scheduler_name for p in pods):
        return []
    pending = Counter(p.scheduler for p in pods if p.waiting_for(p.scheduler)).most_common()
    if not pending:
        return []
    (top, n), *rest = pending
    named = ", ".join([f"{_count(n, 'pending pod')} name{'s' if n == 1 else ''} {top}", *(f"{m} {s}" for s, m in rest)])
    return [f"hint: {named}, none {scheduler_name}: try --scheduler-name {top}"]


def _listed(names: list[str]) -> str:
    more = len(names) - SHOWN
    return ", ".join(names[:SHOWN]) + (f" and {more} more" if more > 0 else "")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
