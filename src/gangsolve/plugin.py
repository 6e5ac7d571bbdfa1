"""`kubectl gangsolve`: why a job is pending, the queues, and the plan, from the cluster of the current kubeconfig
context.

Read-only: it lists what the scheduler reads (`gangsolve export`) and runs the offline cycle on it (`gangsolve
solve`), so its answers are solve's on an export of the same cluster. Every view is made from solve's JSON
(`render.as_dict`) and the gangs' members, nothing else.
"""

from __future__ import annotations

import gc
import importlib
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING

import click
import orjson
from rich.console import Console

from gangsolve import cpsat_import
from gangsolve.cli import Seconds, fail, given_flags, offline_cycle
from gangsolve.edge.errors import InputError, printable
from gangsolve.edge.reservations import WAITING_FOR_ESTIMATE

if TYPE_CHECKING:
    from gangsolve.cycle import Decisions


def planned_starts(answer: dict) -> dict[str, dict]:
    """Planned gang -> its planned start (RFC 3339, None while waiting for an estimate) and nodes, from solve's
    JSON plan (the gangs starting now included)."""
    return {
        p["gang"]: {"start": p["start"], "earliest": p.get("earliest"), "nodes": sorted(set(p["pods"].values()))}
        for p in answer["plan"]
    }


@dataclass(frozen=True)
class Cycle:
    """What the plugin answers from: the offline cycle on the cluster, solve's JSON of it, and when it listed."""

    decisions: Decisions
    answer: dict
    taken_at: datetime

    @property
    def now(self) -> str:
        return self.taken_at.strftime("%Y-%m-%dT%H:%M:%SZ")

    # Looked up once a cycle: `plan` views every gang, of thousands on a large cluster.
    @cached_property
    def gangs(self) -> dict[str, dict]:
        return {g["name"]: g for g in self.answer["gangs"]}

    @cached_property
    def members(self) -> dict[str, list[str]]:
        return {g.name: [p.name for p in g.pods] for g in self.decisions.cluster.gangs}

    @cached_property
    def gang_of_pod(self) -> dict[str, str]:
        return {pod: gang for gang, pods in self.members.items() for pod in pods}

    @cached_property
    def queue_of(self) -> dict[str, str]:
        return {g.name: g.queue for g in self.decisions.cluster.gangs}

    @cached_property
    def planned(self) -> dict[str, dict]:
        return planned_starts(self.answer)

    @cached_property
    def victims(self) -> dict[str, list[str]]:
        """Gang -> the pods evicted to make room for it."""
        found: dict[str, list[str]] = {}
        for eviction in self.answer["evictions"]:
            found.setdefault(eviction["for"], []).append(eviction["pod"])
        return found


# What would unblock a gang, by the solver's reason (solver/explain.py words them).
UNBLOCK: list[tuple[str, Callable[[re.Match], str]]] = [
    (r"queue (\S+) is closed", lambda m: f"queue {m[1]} opened again"),
    (
        r"queue (\S+) is at its fair share",
        lambda m: f"other queues using less than their fair shares, or queue {m[1]} weighted higher",
    ),
    (r"held by queue (\S+)'s capability", lambda m: f"queue {m[1]}'s pods ending, or its capability raised"),
    (r"gang has \d+ pods, fewer than minMember (\d+)", lambda m: f"the job creating its pods ({m[1]} at least)"),
    (
        r"no node is eligible for pod (\S+)",
        lambda m: f"a node that pod {m[1]}'s selector, affinity and tolerations accept",
    ),
    (r"pod (\S+) needs (\S+ \S+), at most", lambda m: f"a node with {m[2]} free for pod {m[1]}"),
    (
        r"needs (\S+) (\S+), (\S+) free ([^;]+)",
        lambda m: f"{m[1]} {m[2]} free {m[4]} ({m[3]} now): pods ending there, nodes added, or a smaller job",
    ),
    (r"free capacity is fragmented", lambda m: "pods ending on the nodes it would fill"),
    (r"no single (\S+) value has room", lambda m: f"room for all its pods within one {m[1]}"),
]


def unblock(reason: str) -> str:
    for pattern, say in UNBLOCK:
        found = re.search(pattern, reason)
        if found:
            return say(found)
    return "what the reason names"


def gang_view(cycle: Cycle, name: str) -> dict:
    """One gang: its state this cycle, why, what would unblock it, and when it is expected to start."""
    answer, gang = cycle.answer, cycle.gangs[name]
    pods = cycle.members[name]
    evictions = cycle.victims.get(name, [])
    planned = cycle.planned.get(name)
    nodes = sorted({answer["bindings"].get(p) or answer["nominations"].get(p) for p in pods} - {None})
    if evictions:  # nominated: its pods bind to `nodes` once the victims are gone
        state, start = "binds once pods preempted for it are gone", cycle.now
        why_not = f"the evictions of {_some(evictions)}"
    elif gang["placed"]:
        state, start, why_not = "binds now", cycle.now, "nothing: it is placed"
    elif planned and planned["start"]:
        state, start, nodes = "reserved", planned["start"], planned["nodes"]
        # Held later than it could start (relaxed): what it waits for ends by the earliest start.
        why_not = f"the running pods on {_some(nodes)} ending (expected by {planned['earliest'] or start})"
    elif planned:
        state, start, nodes, why_not = "waiting for an estimate", None, planned["nodes"], WAITING_FOR_ESTIMATE
    else:
        state, start, why_not = "pending", None, unblock(gang["reason"])
    return {
        "gang": name,
        "queue": cycle.queue_of[name],
        "priority": gang["priority"],
        "minMember": gang["minMember"],
        "pods": gang["pods"],
        "placedPods": gang["placedPods"],
        "state": state,
        "reason": gang["reason"],
        "unblock": why_not,
        "expectedStart": start,
        "nodes": nodes,
    }


def why(cycle: Cycle, target: str) -> dict:
    """A gang by name, or a pod: its gang's view, or why it is in none."""
    if target in cycle.members:
        return {"object": target} | gang_view(cycle, target)
    if target in cycle.gang_of_pod:
        return {"object": target} | gang_view(cycle, cycle.gang_of_pod[target])
    answer = cycle.answer
    if target in answer["waiting"]:
        reason = answer["waiting"][target]
        return {"object": target, "state": "waiting for its gang", "reason": reason, "unblock": reason}
    if target in answer["gated"]:
        gates = ", ".join(answer["gated"][target])
        return {
            "object": target,
            "state": "gated",
            "reason": f"scheduling gates: {gates}",
            "unblock": gates + " removed",
        }
    for skipped in answer["skipped"]:
        if skipped["object"] == f"Pod {target}":
            return {"object": target, "state": "left out", "reason": skipped["reason"], "unblock": "the pod fixed"}
    return {"object": target, "state": "not pending", "reason": _not_pending(cycle, target), "unblock": ""}


def _not_pending(cycle: Cycle, target: str) -> str:
    namespace, _, name = target.partition("/")
    for pod in cycle.decisions.snapshot.pods:
        meta = pod.get("metadata") or {}
        if (meta.get("namespace") or "default", meta.get("name")) == (namespace, name):
            spec = pod.get("spec") or {}
            if spec.get("nodeName"):
                return f"bound to node {spec['nodeName']}"
            scheduler = spec.get("schedulerName") or "default-scheduler"
            phase = (pod.get("status") or {}).get("phase") or "Pending"
            return f"phase {phase}, schedulerName {scheduler}"
    fail(f"{target}: no pod or gang of that name (NAMESPACE/NAME)")
    raise AssertionError  # fail exits


def queues(cycle: Cycle) -> list[dict]:
    pending: dict[str, int] = {}
    queue_of = cycle.queue_of
    for g in cycle.answer["gangs"]:
        if not g["placed"]:
            pending[queue_of[g["name"]]] = pending.get(queue_of[g["name"]], 0) + 1
    return [q | {"pendingGangs": pending.get(q["name"], 0)} for q in cycle.answer["queues"]]


def plan(cycle: Cycle) -> list[dict]:
    """Every pending gang, in the order it is expected to start: now, at a planned time, not planned yet."""
    views = [gang_view(cycle, g["name"]) for g in cycle.answer["gangs"]]
    return sorted(
        views, key=lambda v: (v["expectedStart"] is None, v["expectedStart"] or "", -v["priority"], v["gang"])
    )


# --- tables for people ---------------------------------------------------------------------------------------------


def print_why(view: dict, console: Console) -> None:
    for key in ("object", "gang", "queue", "priority", "state", "reason", "unblock", "expectedStart", "nodes"):
        if view.get(key) not in (None, "", []):
            value = ", ".join(view[key]) if isinstance(view[key], list) else str(view[key])
            console.out(f"{key + ':':15}{printable(value)}", highlight=False)


def print_queues(rows: list[dict], console: Console) -> None:
    from gangsolve.render import print_rows

    def listed(amounts: dict[str, str]) -> str:
        return ", ".join(f"{r}={q}" for r, q in amounts.items() if r != "pods") or "-"

    print_rows(
        console,
        "Queues (shares: the largest fraction of any resource held)",
        ("QUEUE", "WEIGHT", "SHARE", "FAIR SHARE", "CAPABILITY", "ALLOCATED", "PENDING GANGS"),
        (
            (
                q["name"],
                str(q["weight"]),
                f"{q['share']:.1%}",
                f"{q['fairShare']:.1%}",
                listed(q["capability"]),
                listed(q["allocated"]),
                str(q["pendingGangs"]),
            )
            for q in rows
        ),
        wrap={"CAPABILITY", "ALLOCATED"},
    )


def print_plan(rows: list[dict], console: Console) -> None:
    from gangsolve.render import print_rows

    print_rows(
        console,
        "Plan (pending gangs, in the order they are expected to start)",
        ("GANG", "QUEUE", "PRIORITY", "PLACED/MIN", "START", "STATE", "NODES", "REASON"),
        (
            (
                v["gang"],
                v["queue"],
                str(v["priority"]),
                f"{v['placedPods']}/{v['minMember']}",
                v["expectedStart"] or "-",
                v["state"],
                _some(v["nodes"]) or "-",
                v["reason"],
            )
            for v in rows
        ),
        wrap={"NODES", "REASON"},
    )


# --- the command line ---------------------------------------------------------------------------------------------


def cluster_cycle(kubeconfig: str | None, context: str | None, config_file: str | None, given: dict) -> Cycle:
    """`gangsolve export` of the current context's cluster, then `gangsolve solve --skip-invalid` of it (one bad
    object of a tenant must not hide everyone else's answer, as live)."""
    import anyio

    from gangsolve import render
    from gangsolve.edge.hints import unsolvable
    from gangsolve.edge.snapshot import of_documents
    from gangsolve.live.config import ConfigError, build
    from gangsolve.live.export import listing
    from gangsolve.live.kube import default_kubeconfig

    try:
        cfg = build(config_file, given)
    except ConfigError as exc:
        fail(str(exc))
    kubeconfig = kubeconfig or default_kubeconfig()
    if not kubeconfig:
        fail("no kubeconfig: pass --kubeconfig or set KUBECONFIG")
    # The solver's second of imports, while the API server answers the lists (half their time is its own).
    solver = threading.Thread(target=importlib.import_module, args=("gangsolve.solver.pipeline",), daemon=True)
    solver.start()
    try:
        listed = anyio.run(listing, kubeconfig, cfg.scheduler_name, context)
    except Exception as exc:
        fail(f"cluster: {type(exc).__name__}: {exc}")
    try:
        snap = of_documents([listed])
        missing = unsolvable(snap)
        if missing:
            fail(missing)
        decisions = offline_cycle(snap, cfg, None, strict=False)
    except InputError as exc:
        fail(str(exc))
    return Cycle(decisions, render.as_dict(decisions), snap.taken_at or datetime.now(UTC))


def _some(names: list[str], shown: int = 5) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def cluster_options(command: Callable) -> Callable:
    for option in reversed(
        [
            click.option("--kubeconfig", default=None, help="Kubeconfig file [default: $KUBECONFIG, ~/.kube/config]."),
            click.option("--context", default=None, help="Kubeconfig context [default: its current context]."),
            click.option(
                "--config",
                "config_file",
                default=None,
                metavar="FILE",
                help="The scheduler's settings file (docs/configuration.md), as for `gangsolve solve --config`.",
            ),
            click.option("--scheduler-name", default="gangsolve", show_default=True, help="The scheduler's name."),
            click.option("--group-label", default=None, help="As the scheduler's --group-label."),
            click.option(
                "--time-limit",
                type=Seconds(0.05),
                default=None,
                help="Seconds for the cycle [default: the config's time-limit, else 2, as `gangsolve solve`].",
            ),
            click.option("--output", "-o", type=click.Choice(["table", "json"]), default="table", show_default=True),
        ]
    ):
        command = option(command)
    return command


def _cycle(ctx: click.Context, kubeconfig, context, config_file, flags: dict) -> Cycle:
    return cluster_cycle(kubeconfig, context, config_file, given_flags(ctx, flags))


def _json(value) -> None:
    sys.stdout.buffer.write(orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n")


@click.group()
def plugin() -> None:
    """What gangsolve would do on the cluster of your kubeconfig's current context (read-only): it lists what the
    scheduler reads and runs one offline cycle, as `gangsolve export` then `gangsolve solve`."""


@plugin.command("why")
@click.argument("target", metavar="NAMESPACE/POD-OR-GANG")
@cluster_options
@click.pass_context
def why_command(ctx, target: str, kubeconfig, context, config_file, output: str, **flags) -> None:
    """Why a pod or gang is pending, what would unblock it, and when it is expected to start."""
    if target.count("/") != 1 or not all(target.split("/")):
        fail(f"{target}: expected NAMESPACE/NAME")
    view = why(_cycle(ctx, kubeconfig, context, config_file, flags), target)
    if output == "json":
        _json(view)
        return
    print_why(view, Console())


@plugin.command("queues")
@cluster_options
@click.pass_context
def queues_command(ctx, kubeconfig, context, config_file, output: str, **flags) -> None:
    """Each queue's share against its fair share, its weight and cap, and its pending gangs."""
    rows = queues(_cycle(ctx, kubeconfig, context, config_file, flags))
    if output == "json":
        _json(rows)
        return
    print_queues(rows, Console())


@plugin.command("plan")
@cluster_options
@click.pass_context
def plan_command(ctx, kubeconfig, context, config_file, output: str, **flags) -> None:
    """The pending gangs in the order they are expected to start, with their starts and nodes."""
    rows = plan(_cycle(ctx, kubeconfig, context, config_file, flags))
    if output == "json":
        _json(rows)
        return
    print_plan(rows, Console())


def main() -> None:
    # One short run over the whole cluster: on 50,000 pods the cyclic collector, walking every object decoded so
    # far each time enough new ones pile up, took more CPU than decoding them. Nothing here is long-lived.
    gc.disable()
    cpsat_import.install()
    plugin(prog_name="kubectl gangsolve")
