"""What the plan costs a cycle: the same busy synthetic clusters solved with the plan off and on, side by side.

Each seed is one synthetic cluster (the static scenarios' nodes and background load) with many pending gangs,
where every running pod has an expected end and every gang a runtime estimate, so that the plan has something
to plan from: without ends a cycle plans nothing, and costs nothing more. Both variants run alternately in one
process, so machine load falls on both alike; every cycle is checked by the validator. The planning pass (the
queue-order walk that makes the reservations) is timed on its own as well as the whole cycle.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import orjson

from gangsolve.bench import manifests
from gangsolve.bench.scenarios import synthetic
from gangsolve.edge.gangs import build_cluster
from gangsolve.edge.snapshot import parse
from gangsolve.solver import Cluster, SolveConfig, planning, solve, validate
from gangsolve.solver.model import PLAN_DEPTH
from gangsolve.solver.problem import Problem

SIZES = {1000: 1000, 5000: 1000}  # nodes -> pending gangs
RUNTIMES = (600.0, 1800.0, 3600.0, 4 * 3600.0)


@dataclass
class Variant:
    cycles: list[float] = field(default_factory=list)  # seconds, every cycle of every seed
    planning: list[float] = field(default_factory=list)  # seconds of the planning pass alone
    gangs: list[int] = field(default_factory=list)  # gangs placed, per cycle
    reservations: list[int] = field(default_factory=list)  # planned gangs holding a reservation, per cycle
    violations: int = 0


def busy_cluster(nodes: int, gangs: int, seed: int) -> Cluster:
    """The synthetic cluster, its running pods given ends from 5 minutes to 6 hours away and its gangs runtimes."""
    cluster = build_cluster(parse(orjson.dumps(synthetic(nodes, gangs, seed)).decode()), manifests.SCHEDULER)
    rng = np.random.default_rng(seed)
    running = tuple(replace(r, end=cluster.now + float(rng.uniform(300, 6 * 3600))) for r in cluster.running)
    timed = tuple(replace(g, runtime=float(rng.choice(RUNTIMES))) for g in cluster.gangs)
    return replace(cluster, running=running, gangs=timed)


def compare(
    nodes: int, seeds: int, repeat: int, time_limit: float, settings: Mapping[str, Any] | None = None
) -> dict[str, Variant]:
    """Each seed's cluster solved with the plan off and on, alternately; `settings`: SolveConfig fields (the
    bench's `--set`: `plan_relaxation`, `forecasts`, ...; `reservations` is the variant's)."""
    variants = {"no plan": Variant(), f"plan ({PLAN_DEPTH} gangs)": Variant()}
    depths = {"no plan": 0, f"plan ({PLAN_DEPTH} gangs)": PLAN_DEPTH}
    for seed in range(1, seeds + 1):
        cluster = busy_cluster(nodes, SIZES[nodes], seed)
        for _ in range(repeat):
            for name, variant in variants.items():
                config = SolveConfig(**{**(settings or {}), "time_limit": time_limit, "reservations": depths[name]})
                begun = time.perf_counter()
                planning.plan(Problem(cluster), config.reservations, relaxation=config.plan_relaxation)
                variant.planning.append(time.perf_counter() - begun)
                begun = time.perf_counter()
                placement = solve(cluster, config)
                variant.cycles.append(time.perf_counter() - begun)
                variant.gangs.append(sum(1 for g in placement.gangs if g.placed and g.placed_pods))
                variant.reservations.append(sum(1 for r in placement.reservations if r.start is not None))
                variant.violations += len(validate(cluster, placement))
    return variants


def _p99(values: list[float]) -> float:
    return float(np.percentile(values, 99))


def table(results: dict[int, dict[str, Variant]]) -> list[list[str]]:
    rows = [
        [
            "nodes",
            "variant",
            "cycles",
            "cycle p50",
            "cycle p99",
            "planning p50",
            "planning p99",
            "gangs placed",
            "reservations",
        ]
    ]
    for nodes, variants in results.items():
        for name, v in variants.items():
            rows.append(
                [
                    f"{nodes:,}",
                    name,
                    str(len(v.cycles)),
                    f"{statistics.median(v.cycles):.2f} s",
                    f"{_p99(v.cycles):.2f} s",
                    f"{statistics.median(v.planning):.3f} s",
                    f"{_p99(v.planning):.3f} s",
                    f"{statistics.median(v.gangs):g}",
                    f"{statistics.median(v.reservations):g}",
                ]
            )
    return rows
