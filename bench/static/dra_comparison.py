"""GPUs as DRA devices against GPUs as an extended resource: the same synthetic clusters, side by side.

Each pair is one seeded synthetic cluster twice: as generated (`nvidia.com/gpu` in allocatable and requests)
and through `scenarios.as_dra` (ResourceSlices, a DeviceClass with a CEL selector, a ResourceClaim per pod).
A cycle is what the live scheduler does with a snapshot: build the cluster (for DRA: evaluate the selectors,
turn devices into capacity), solve, and (DRA) choose each claim's devices. Both variants run alternately in
one process, so machine load falls on both alike. Every cycle is checked by the validator, and the DRA ones by
the device oracle too. Where the gangs placed differ, the placements are compared on what the objective ranks
(gangs placed per priority, then GPUs, then cpu placed), counted from the extended-resource pods: an equally
good set is a tie the solver broke another way, not a gang lost.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from gangsolve.bench import manifests
from gangsolve.bench.scenarios import as_dra, synthetic
from gangsolve.edge import dra, objects, schema
from gangsolve.edge.gangs import build_cluster
from gangsolve.edge.snapshot import parse
from gangsolve.solver import SolveConfig, solve, validate
from gangsolve.solver.devices import allocate
from gangsolve.solver.model import GPU, Placement
from gangsolve.solver.validate import validate_devices

SIZES = {100: 20, 1000: 200}  # nodes -> pending gangs, as the synthetic scenarios


@dataclass
class Variant:
    gangs: list[int]  # gangs placed, per seed
    placed: list[frozenset[str]]  # which gangs, per seed
    worth: list[tuple[int, ...]]  # what the objective ranks, per seed (gangs per priority, GPUs, cpu placed)
    cycles: list[float]  # seconds, every cycle of every seed
    violations: int = 0
    devices_twice: int = 0
    unallocated: int = 0


def cycle(text: bytes, time_limit: float, settings: Mapping[str, Any]) -> tuple[float, Placement, list[str], list[str]]:
    snap = parse(text.decode())
    start = time.perf_counter()
    cluster = build_cluster(snap, manifests.SCHEDULER)
    placement = solve(cluster, SolveConfig(**{**settings, "time_limit": time_limit}))
    state = dra.model(snap, manifests.SCHEDULER).state
    placement, allocations = allocate(cluster, placement, state)
    seconds = time.perf_counter() - start
    return seconds, placement, validate(cluster, placement), validate_devices(state, placement, allocations)


def worth(placement: Placement, requests: dict[str, dict[str, int]]) -> tuple[int, ...]:
    """Gangs placed per priority (highest first), then GPUs and cpu placed, by the extended-resource pods."""
    levels: dict[int, int] = {}
    for g in placement.gangs:
        levels[g.priority] = levels.get(g.priority, 0) + int(g.placed and g.placed_pods > 0)
    bound = [requests[p] for p in placement.bindings]
    gpus = sum(r.get(GPU, 0) for r in bound)
    cpu = sum(r.get("cpu", 0) for r in bound)
    return (*(levels[k] for k in sorted(levels, reverse=True)), gpus, cpu)


def compare(
    nodes: int, seeds: int, repeat: int, time_limit: float, settings: Mapping[str, Any] | None = None
) -> dict[str, Variant]:
    """Both encodings of each seed's cluster, cycle by cycle; `settings`: SolveConfig fields (the bench's `--set`)."""
    out = {"extended": Variant([], [], [], []), "dra": Variant([], [], [], [])}
    for seed in range(seeds):
        objs = synthetic(nodes, SIZES[nodes], seed=nodes + seed)
        requests = {
            objects.pod_key(o): objects.pod_requests(schema.check(o, "Pod")) for o in objs if o["kind"] == "Pod"
        }
        texts = {"extended": manifests.dumps(objs), "dra": orjson.dumps(manifests.as_list(as_dra(objs)))}
        for _ in range(repeat):
            for name, text in texts.items():
                seconds, placement, violations, device_violations = cycle(text, time_limit, settings or {})
                v = out[name]
                v.cycles.append(seconds)
                v.violations += len(violations)
                v.devices_twice += sum("allocated twice" in d or "allocated already" in d for d in device_violations)
                v.unallocated += sum("unallocated" in d for d in device_violations)
                if len(v.placed) <= seed:
                    placed = frozenset(g.name for g in placement.gangs if g.placed and g.placed_pods)
                    v.placed.append(placed)
                    v.gangs.append(len(placed))
                    v.worth.append(worth(placement, requests))
    return out


def table(results: dict[int, dict[str, Variant]]) -> list[list[str]]:
    rows = [
        [
            "nodes",
            "GPUs as",
            "gangs placed (median)",
            "same gangs as extended",
            "as good as extended",
            "cycle p50",
            "cycle p99",
            "p50 ratio",
            "devices twice",
            "bound unallocated",
        ]
    ]
    for nodes, variants in results.items():
        base = statistics.median(variants["extended"].cycles)
        for name, v in variants.items():
            same = sum(a == b for a, b in zip(v.placed, variants["extended"].placed, strict=True))
            good = sum(a >= b for a, b in zip(v.worth, variants["extended"].worth, strict=True))
            p50 = statistics.median(v.cycles)
            rows.append(
                [
                    f"{nodes:,}",
                    name,
                    f"{statistics.median(v.gangs):g}",
                    f"{same}/{len(v.placed)} seeds",
                    f"{good}/{len(v.worth)} seeds",
                    f"{p50:.2f} s",
                    f"{float(np.percentile(v.cycles, 99)):.2f} s",
                    f"{p50 / base:.2f}x",
                    str(v.devices_twice) if name == "dra" else "-",
                    str(v.unallocated) if name == "dra" else "-",
                ]
            )
    return rows
