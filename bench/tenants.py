"""Tenants sharing a cluster through queues, in the time-based and live timelines: the workload, and how fairly
each scheduler shared the GPUs over time (Volcano's `proportion` allocation, re-implemented for the time-based
mode, is in bench/baselines.py; the live mode runs the real Volcano and KAI).

Three teams, Volcano Queues of weights 1:2:4 (team-a also capped at 24 GPUs), each submitting far more than its
weighted share in bursts; or a queue tree: two departments, two teams each, one department idle for the first
half then busy.
Fairness is measured against weighted max-min fairness computed here from its definition (not with the
solver's code): each cycle, the cluster's GPUs divided between the tenants that have demand (GPUs held plus
GPUs their pending jobs ask for) in proportion to their weights, no tenant getting more than its demand; in a
tree, level by level (a department's share divided among its teams).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gangsolve.bench import manifests, placement_metrics
from gangsolve.solver.model import GPU


@dataclass(frozen=True)
class Tenant:
    """A Volcano Queue and the work its team submits: `offered` GPU load (a share of the cluster's GPUs) from
    `start` (a share of the horizon) on; a department's queue (`parent` of others) submits nothing itself."""

    queue: str
    weight: int
    offered: float = 0.0
    parent: str = ""
    capability: dict[str, str] | None = None
    start: float = 0.0


# Three teams weighted 1:2:4, team-a also capped at 24 GPUs (of 128, above its fair share of 18).
TEAMS = (
    Tenant("team-a", 1, 0.5, capability={GPU: "24"}),
    Tenant("team-b", 2, 0.6),
    Tenant("team-c", 4, 0.9),
)
# Two departments of equal weight under the root, two teams each; department B is capped at 96 GPUs (of 128)
# and idle for the first half of the window, then busy: its teams must get their half back from A's.
DEPARTMENTS = (
    Tenant("dept-a", 1),
    Tenant("a1", 1, 0.5, parent="dept-a"),
    Tenant("a2", 1, 0.5, parent="dept-a"),
    Tenant("dept-b", 1, capability={GPU: "96"}),
    Tenant("b1", 1, 0.5, parent="dept-b", start=0.5),
    Tenant("b2", 2, 0.7, parent="dept-b", start=0.5),
)
# Three teams of equal weight: team-night has the cluster to itself for the first half (it ran all night), then
# the two day teams burst past their shares; with a usage history, team-night should yield to them.
OVERNIGHT = (
    Tenant("team-night", 1, 0.9),
    Tenant("team-day1", 1, 0.6, start=0.5),
    Tenant("team-day2", 1, 0.6, start=0.5),
)
QUEUE_API = "scheduling.volcano.sh/v1beta1"
NODES = 16  # 8-GPU nodes
BURSTS = 6  # per tenant, over the arrival window
BURST_MINUTES = 10  # a burst's jobs arrive within this long
HOUR_CYCLES = 60  # a sliding window for GPU-hours shares (cycles are a minute)


def queues_of(objs: list[dict]) -> list[dict]:
    """The teams' Volcano Queues among a scenario's objects (each scheduler's users write the teams from these)."""
    return [o for o in objs if o["kind"] == "Queue" and o["apiVersion"] == QUEUE_API]


def queue_object(name: str, weight: int, capability: dict[str, str] | None = None, parent: str = "") -> dict:
    spec: dict = {"weight": weight, **({"capability": capability} if capability else {})}
    if parent:
        spec["parent"] = parent
    return {"apiVersion": QUEUE_API, "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def tenants_timeline(
    horizon: float, n_nodes: int = NODES, seed: int = 11, tenants: tuple[Tenant, ...] = TEAMS
) -> list[dict]:
    """`n_nodes` 8-GPU nodes; each tenant's jobs arrive in bursts over its part of `horizon` seconds (gangs of
    1-4 pods of 1-8 GPUs, durations log-normal, median 20 minutes, 5 to 60), GPU-seconds `offered` x the
    cluster's over that part."""
    rng = np.random.default_rng(seed)
    objs: list[dict] = [queue_object(t.queue, t.weight, t.capability, t.parent) for t in tenants]
    objs += [manifests.node(f"gpu-{i:03d}", 64_000, 512 * 1024, gpus=8) for i in range(n_nodes)]
    capacity = 8 * n_nodes
    j = 0
    for t in (t for t in tenants if t.offered > 0):
        tenant, first = t.queue, t.start * horizon
        budget = t.offered * capacity * (horizon - first)  # GPU-seconds this tenant submits
        starts = np.sort(rng.uniform(first, horizon - BURST_MINUTES * 60, size=BURSTS))
        per_burst = budget / BURSTS
        for start in starts:
            spent = 0.0
            while spent < per_burst:
                pods = int(rng.choice([1, 2, 4]))
                gpus = int(rng.choice([1, 2, 4, 8]))
                duration = float(np.clip(rng.lognormal(np.log(1200), 0.7), 300, 3600))
                arrival = float(start + rng.uniform(0, BURST_MINUTES * 60))
                spent += pods * gpus * duration
                name = f"{tenant}-{j:04d}"
                j += 1
                notes = {
                    manifests.ARRIVAL_ANNOTATION: str(int(arrival)),
                    manifests.DURATION_ANNOTATION: str(int(duration)),
                    "gangsolve.io/queue": tenant,
                }
                objs.append(manifests.pod_group(name, pods, annotations=notes))
                objs += [
                    manifests.pod(f"{name}-{i}", 4000, 32 * 1024, gpus, created=arrival, group=name)
                    for i in range(pods)
                ]
    return objs


# --- how fairly the GPUs were shared --------------------------------------------------------------------------


def fair_split(capacity: float, weights: dict[str, int], demands: dict[str, float]) -> dict[str, float]:
    """Weighted max-min fairness by progressive filling: raise every tenant with unmet demand in proportion to
    its weight until the capacity is spent; a tenant stops at its demand."""
    fair = dict.fromkeys(weights, 0.0)
    left = capacity
    active = {t for t in weights if demands.get(t, 0) > 0}
    while active and left > 1e-9:
        step = min(left / sum(weights[t] for t in active), *((demands[t] - fair[t]) / weights[t] for t in active))
        for t in active:
            fair[t] += step * weights[t]
        left -= step * sum(weights[t] for t in active)
        active = {t for t in active if demands[t] - fair[t] > 1e-9}
    return fair


def up_the_tree(amounts: dict[str, float], parents: dict[str, str]) -> dict[str, float]:
    """Per queue, `amounts` (per queue) summed over it and every queue below it (`parents`: queue -> parent)."""
    out = dict.fromkeys(parents, 0.0)
    for q, v in amounts.items():
        seen = set()
        while q in parents and q not in seen:
            seen.add(q)
            out[q] += v
            q = parents[q]
    return out


def tree_split(
    capacity: float, weights: dict[str, int], parents: dict[str, str], demands: dict[str, float], caps: dict[str, float]
) -> dict[str, float]:
    """Fair shares down the queue tree: the top queues divide `capacity` by weight (`fair_split`), each asking
    for what the queues under it ask for together (at most its cap); each queue's share is divided among its
    children the same way. Flat queues (no parents) give `fair_split` itself."""
    asked = {q: min(v, caps.get(q, v)) for q, v in up_the_tree(demands, parents).items()}
    fair: dict[str, float] = {}
    level = [("", capacity)]
    while level:
        parent, given = level.pop()
        kids = [q for q in weights if parents.get(q, "") == parent]
        if kids:
            split = fair_split(given, {q: weights[q] for q in kids}, {q: asked[q] for q in kids})
            fair |= split
            level += list(split.items())
    return fair


def fairness(
    cycles: list[dict],
    weights: dict[str, int],
    capacity: int,
    window: tuple[float, float],
    parents: dict[str, str] | None = None,
    caps: dict[str, float] | None = None,
) -> dict:
    """Per queue (every level of the tree: a department holds what its teams hold), over the cycles of the
    steady `window` (seconds): GPU-hours share against its weighted fair share (the largest gap over any hour in
    which it always had demand, and over the whole window); its p95 queue delay is added by the caller. Jain's
    index over the queues at the bottom of the tree of GPU-hours / fair GPU-hours."""
    steady = [c for c in cycles if window[0] <= c["time"] < window[1]]
    parents = parents or dict.fromkeys(weights, "")
    caps = caps or {}
    out: dict[str, dict] = {}
    ratios = []
    held_all = [up_the_tree(c["held"], parents) for c in steady]
    demand_all = [up_the_tree(c["demand"], parents) for c in steady]
    fair_all = [tree_split(capacity, weights, parents, c["demand"], caps) for c in steady]
    leaves = set(weights) - set(parents.values())
    # The first cycle at which every team has work (the day teams have come): from there, a queue holding more
    # than its fair share must come down to it, and how long that takes is how soon it yields.
    everyone = next((i for i, d in enumerate(demand_all) if all(d.get(t, 0) > 0 for t in leaves)), None)
    for t in weights:
        held = np.array([h.get(t, 0) for h in held_all], dtype=float)
        fair = np.array([f[t] for f in fair_all])
        has = np.array([d.get(t, 0) > 0 for d in demand_all], dtype=bool)
        worst = 0.0
        for s in range(max(0, len(steady) - HOUR_CYCLES + 1)):
            if has[s : s + HOUR_CYCLES].all():
                gap = (held[s : s + HOUR_CYCLES].sum() - fair[s : s + HOUR_CYCLES].sum()) / (HOUR_CYCLES * capacity)
                worst = max(worst, abs(gap))
        gpu_hours, fair_hours = held[has].sum(), fair[has].sum()
        out[t] = {
            "parent": parents.get(t, ""),
            "weight": weights[t],
            "share": float(gpu_hours / (has.sum() * capacity)) if has.any() else 0.0,
            "fair_share": float(fair_hours / (has.sum() * capacity)) if has.any() else 0.0,
            "max_hourly_deviation": float(worst),
            # GPUs it held on average before every team had work (the cluster's, for the team that ran alone)
            "held_before_all_came": float(held[:everyone].mean()) if everyone else 0.0,
            **_first_hour(held, fair, everyone, capacity),
            **_yielded(steady, held, fair, everyone),
        }
        if fair_hours > 0 and t in leaves:
            ratios.append(gpu_hours / fair_hours)
    jain = float(sum(ratios) ** 2 / (len(ratios) * sum(r * r for r in ratios))) if ratios else None
    return {"tenants": out, "jain": jain}


def _first_hour(held: np.ndarray, fair: np.ndarray, everyone: int | None, capacity: int) -> dict:
    """Its share of the cluster, and its instantaneous fair share, over the hour from the first cycle every team
    had work (None: no such cycle): a queue that had the cluster yields if it holds less than its fair share."""
    if everyone is None:
        return {"first_hour_share": None, "first_hour_fair_share": None}
    hour = slice(everyone, everyone + HOUR_CYCLES)
    return {
        "first_hour_share": float(held[hour].mean() / capacity),
        "first_hour_fair_share": float(fair[hour].mean() / capacity),
    }


def _yielded(steady: list[dict], held: np.ndarray, fair: np.ndarray, everyone: int | None) -> dict:
    """Whether the queue held more than its fair share (whole GPUs) when every team had work, and if so the
    seconds until it first held no more (None: not within the window)."""
    if everyone is None or held[everyone] <= np.ceil(fair[everyone]):
        return {"over_when_all_came": False, "yielded_after": None}
    down = np.flatnonzero(held[everyone:] <= np.ceil(fair[everyone:]))
    after = float(steady[everyone + down[0]]["time"] - steady[everyone]["time"]) if len(down) else None
    return {"over_when_all_came": True, "yielded_after": after}


def tenant_delays(jobs, queue_of: dict[str, str]) -> dict[str, float | None]:
    """p95 queue delay (arrival to start) per tenant."""
    delays: dict[str, list[float]] = {}
    for j in jobs:
        if j.start is not None:
            delays.setdefault(queue_of[j.gang.name], []).append(j.start - j.arrival)
    return {t: placement_metrics.percentile(d, 95) for t, d in delays.items()}


# --- report -----------------------------------------------------------------------------------------------------

TENANT_COLUMNS = (
    "scenario",
    "scheduler",
    "tenant (weight)",
    "GPU-hours share",
    "fair share",
    "max hourly gap",
    "down to fair share after",
    "first hour all had work: share / fair",
    "Jain",
    "queue delay p95",
    "GPU alloc (mean)",
    "cap violations",
)


def tenant_rows(timeline: list[dict]) -> list[tuple[str, ...]]:
    return [
        row
        for sc in timeline
        for r in sc["runs"]
        for row in _rows(
            f"{sc['name']} seed {sc['seed']} {sc['estimates']}",
            r["scheduler"],
            r["summary"],
            f"{r['summary'].get('gpu_allocation_mean', 0):.1%}",
        )
    ]


# The live tenants timelines' columns: GPU useful and the work evictions threw away in place of GPUs allocated.
LIVE_TENANT_COLUMNS = (*TENANT_COLUMNS[:-2], "GPU useful (lost to evictions)", TENANT_COLUMNS[-1])


def live_tenant_rows(live: list[dict]) -> list[tuple[str, ...]]:
    return [
        row
        for sc in live
        for r in sc["runs"]
        if r.get("timeline")
        for row in _rows(
            sc["name"],
            r["scheduler"],
            r["timeline"],
            f"{r['timeline']['gpu_useful_mean']:.1%} ({r['timeline']['gpu_lost_mean']:.1%})",
        )
    ]


def _rows(scenario: str, scheduler: str, summary: dict, gpus: str) -> list[tuple[str, ...]]:
    """One row per queue of a run whose summary measured fairness (none otherwise)."""
    fair = summary.get("fairness")
    if not fair:
        return []
    rows: list[tuple[str, ...]] = []
    for t, f in fair["tenants"].items():
        delay = summary["tenant_delay_p95"].get(t)
        rows.append(
            (
                scenario,
                scheduler,
                f"{f['parent'] + '/' if f.get('parent') else ''}{t} ({f['weight']})",
                f"{f['share']:.1%}",
                f"{f['fair_share']:.1%}",
                f"{100 * f['max_hourly_deviation']:.1f} pp",
                came_down_after(f),
                _first(f),
                f"{fair['jain']:.3f}",
                "-" if delay is None else f"{delay:.0f}s",
                gpus,
                str(summary["capability_violations"]),
            )
        )
    return rows


def _first(f: dict) -> str:
    """Its share over the first hour every team had work, against its instantaneous fair share then ('-' when
    that hour never came, or in results from before this was measured)."""
    if f.get("first_hour_share") is None:
        return "-"
    return f"{f['first_hour_share']:.1%} / {f['first_hour_fair_share']:.1%}"


def came_down_after(f: dict) -> str:
    """How soon a queue over its fair share when every team had work came down to it: '-' when it was not over
    (or in results from before this was measured), 'not in window' when it never did."""
    if not f.get("over_when_all_came"):
        return "-"
    return "not in window" if f["yielded_after"] is None else f"{f['yielded_after'] / 60:.0f} min"
