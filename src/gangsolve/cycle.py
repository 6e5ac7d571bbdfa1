"""One scheduling cycle: a snapshot in, decisions out.

`gangsolve solve` and the live solver actor run the same two steps, so a live cycle replays offline exactly:

1. `group`: the snapshot's gangs (the edge's rules), their expected runtimes, and the pending pods that join no
   gang yet. Offline a bad object stops the cycle with one line naming it (`strict`), unless `--skip-invalid`;
   live, and with `--skip-invalid`, it is left out and listed, and everything else is scheduled.
2. `decide`: the solver's placement, a gang the solver fails on left out (found by bisection) rather than the
   whole cycle, then the devices of the placed pods' claims, checked by the device oracle.

The live actor adds only what is live: which gangs to solve again (its queue), the partial views, timing and
the messages to the binder.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from gangsolve.edge import dra
from gangsolve.edge.errors import InputError
from gangsolve.edge.estimates import Estimator, with_estimates
from gangsolve.edge.gangs import STARVATION_SECONDS, Grace, Origin, Waiting, build_with_origins, gated, waiting
from gangsolve.edge.snapshot import Snapshot
from gangsolve.solver import Cluster, Gang, Node, Placement, Pod, SolveConfig
from gangsolve.solver.devices import Allocations, DeviceState, allocate
from gangsolve.solver.validate import validate_devices, validate_shares

logger = logging.getLogger("gangsolve")


@dataclass(frozen=True)
class Rules:
    """How a cycle reads a snapshot: whose pods it schedules and how they become gangs."""

    scheduler_name: str = "gangsolve"
    group_label: str | None = None
    grace: Grace = field(default_factory=Grace)
    starvation: float = STARVATION_SECONDS  # seconds pending before a gang starves (see `gangs.starvation_age`)
    usage_half_life: float = 0.0  # seconds: queues' usage histories decay by half in this long; 0: none kept


@dataclass(frozen=True)
class Grouped:
    """A snapshot's gangs: what `group` made of it."""

    cluster: Cluster  # every node and every pending gang
    origins: dict[str, Origin]  # gang name -> the rule that defined it (and a fallback's warning)
    waiting: dict[str, Waiting]  # pending pods that join no gang yet
    skipped: tuple[InputError, ...]  # objects left out as unreadable
    snapshot: Snapshot  # the snapshot without them


@dataclass(frozen=True)
class Decisions:
    """What one cycle decided."""

    cluster: Cluster  # the gangs solved (less any the solver failed on)
    placement: Placement
    allocations: Allocations  # claim -> the devices chosen for it, for the placed pods' claims
    snapshot: Snapshot  # what it decided on (less the objects left out)
    devices: DeviceState = field(default_factory=DeviceState)  # the devices and claims allocated from
    skipped: tuple[InputError, ...] = ()  # objects (and gangs the solver failed on) left out
    waiting: dict[str, Waiting] = field(default_factory=dict)  # pending pods that join no gang yet
    gated: dict[str, list[str]] = field(default_factory=dict)  # pods held by scheduling gates -> the gates
    origins: dict[str, Origin] = field(default_factory=dict)  # gang name -> the rule that defined it


def solve(cluster: Cluster, config: SolveConfig, previous: Mapping[str, str] | None = None) -> Placement:
    """The solver's pipeline, imported on first use: OR-Tools takes a second to load, and a snapshot that
    cannot be read must be rejected without it."""
    from gangsolve.solver.pipeline import solve as solve_pipeline

    return solve_pipeline(cluster, config, previous)


def load_solver() -> None:
    """Import the solver's pipeline (OR-Tools) now: the live scheduler does it while its caches fill, so the
    first cycle does not."""
    import gangsolve.solver.pipeline  # noqa: F401


def _size(snapshot: Snapshot) -> int:
    return sum(1 for _ in snapshot.objects())


def group(
    snapshot: Snapshot,
    rules: Rules,
    *,
    now: datetime | None,
    estimator: Estimator | None = None,
    strict: bool = False,
    nodes: tuple[Node, ...] | None = None,
    convert_pod: Callable[[dict, Mapping[str, dict], int], Pod] | None = None,
) -> Grouped:
    """The cluster of a snapshot, with every gang (and, with `estimator` and `now`, the expected runtimes of
    gangs and running pods), and the pending pods that join no gang yet. `now` is the cycle's clock: gangs
    pending past the starvation age starve, and pods whose gang definition may still come wait by the grace;
    without it neither happens.

    `strict` (offline, hand-written files): the first object the edge cannot read raises its InputError, and a
    pod naming a PodGroup that does not exist is an error. Otherwise that object is left out and returned with
    its error (a PodGroup with `minMember: many`, a pod asking for more cpu than the model can count, a runtime
    annotation that is no duration): one bad object must not stop everyone else. `nodes` and `convert_pod`: the
    live store's converted nodes and its memo of converted pods (see `build_cluster`)."""
    skipped: list[InputError] = []
    while True:
        try:
            cluster, origins = build_with_origins(
                snapshot,
                rules.scheduler_name,
                rules.group_label,
                strict=strict,
                now=now,
                grace=rules.grace,
                nodes=nodes,
                convert_pod=convert_pod,
                starvation_seconds=rules.starvation,
                usage_half_life=rules.usage_half_life,
            )
            if estimator is not None and now is not None:
                cluster = with_estimates(snapshot, cluster, now, estimator, rules.scheduler_name)
            held = waiting(snapshot, rules.scheduler_name, rules.group_label, now, rules.grace)
            return Grouped(cluster, origins, held, tuple(skipped), snapshot)
        except InputError as exc:
            smaller = snapshot.without(exc.obj)
            if strict or _size(smaller) == _size(snapshot):
                raise  # offline by request, or the error names nothing that can be left out
            skipped.append(exc)
            snapshot = smaller


def decide(
    cluster: Cluster,
    snapshot: Snapshot,
    scheduler_name: str,
    config: SolveConfig,
    previous: Mapping[str, str] | None = None,
) -> Decisions:
    """Solve the cluster's gangs, then choose the devices of the placed pods' claims. A gang the solver cannot
    handle is left out (and returned as skipped), not the cycle. `previous` (the last cycle's bindings)
    warm-starts the solver where its gangs are still pending and still fit."""
    skipped: list[InputError] = []
    try:
        placement = solve(cluster, config, previous)
    except Exception as exc:  # a gang the solver cannot handle must not stop the others: find it, leave it out
        solve(replace(cluster, gangs=()), SolveConfig(use_cpsat=False))  # the nodes alone must be solvable
        culprits = _failing_gangs(cluster, list(cluster.gangs))
        if not culprits:
            raise
        logger.error(
            "gangs left out: the solver fails on them",
            exc_info=exc,
            extra={"fields": {"gangs": ",".join(g.name for g in culprits)}},
        )
        skipped = [
            InputError(f"Pod {p.name}", "", f"its gang cannot be solved: {type(exc).__name__}: {exc}")
            for g in culprits
            for p in g.pods
        ]
        cluster = replace(cluster, gangs=tuple(g for g in cluster.gangs if g not in culprits))
        placement = solve(cluster, config, previous)
    placement, allocations = _allocate(snapshot, scheduler_name, cluster, placement)
    devices = dra.model(snapshot, scheduler_name).state
    return Decisions(cluster, placement, allocations, snapshot, devices, tuple(skipped))


def run(
    snapshot: Snapshot,
    rules: Rules,
    config: SolveConfig,
    *,
    now: datetime | None,
    estimator: Estimator | None = None,
    strict: bool = False,
    previous: Mapping[str, str] | None = None,
) -> Decisions:
    """A whole cycle on a snapshot, every gang solved, as `gangsolve solve` runs it: the decisions with what
    grouping found besides the gangs (objects left out, pods waiting for a gang, the rule that defined each
    gang) and the pods held by scheduling gates (the live scheduler leaves those to feedback)."""
    grouped = group(snapshot, rules, now=now, estimator=estimator, strict=strict)
    decided = decide(grouped.cluster, grouped.snapshot, rules.scheduler_name, config, previous)
    return replace(
        decided,
        skipped=grouped.skipped + decided.skipped,
        waiting=grouped.waiting,
        gated=gated(grouped.snapshot, rules.scheduler_name),
        origins=grouped.origins,
    )


def _allocate(
    snapshot: Snapshot, scheduler_name: str, cluster: Cluster, placement: Placement
) -> tuple[Placement, Allocations]:
    """Devices for the claims of the placed pods (gangs whose claims cannot be met are taken off), checked by
    the device oracle; the GPU shares of the pods left, checked by the validator."""
    model = dra.model(snapshot, scheduler_name)
    allocations: Allocations = {}
    if model.claims_of:
        placement, allocations = allocate(cluster, placement, model.state)
        violations = validate_devices(model.state, placement, allocations)
        if violations:
            raise RuntimeError(f"device assignment unsound: {violations[0]}")
    if placement.shares:
        shares = {pod: share for pod, share in placement.shares.items() if pod in placement.bindings}
        placement = replace(placement, shares=shares)
        violations = validate_shares(cluster, placement.bindings, shares)
        if violations:
            raise RuntimeError(f"GPU share assignment unsound: {violations[0]}")
    return placement, allocations


def _failing_gangs(cluster: Cluster, gangs: list[Gang]) -> list[Gang]:
    """The gangs whose (greedy) solve raises, by bisection: a handful of cheap solves, only after a failure."""
    try:
        solve(replace(cluster, gangs=tuple(gangs)), SolveConfig(use_cpsat=False))
        return []
    except Exception:
        if len(gangs) == 1:
            return gangs
    half = len(gangs) // 2
    return _failing_gangs(cluster, gangs[:half]) + _failing_gangs(cluster, gangs[half:])
