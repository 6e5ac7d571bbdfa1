"""The static scale targets follow the cluster's size: 5 s and 1 GiB from 5,000 nodes, 5 s and 2 GiB from 16,384,
20 s and 6 GiB from 65,536 (issue 26's frontier scale)."""

from __future__ import annotations

import pytest

from gangsolve.bench.report import targets
from gangsolve.bench.scenarios import FRONTIER, GRIDS, SCENARIOS


def _results(nodes: int, cycle: float, rss: float) -> dict:
    run = {"scheduler": "gangsolve", "cycle_p99": cycle, "peak_rss_mib": rss, "gangs": 3, "pods": 9}
    sc = {"name": f"synthetic/{nodes}nodes", "nodes": nodes, "contended": False, "objects": {"pods": 9}}
    return {"scenarios": [sc | {"runs": [run]}]}


@pytest.mark.parametrize(
    ("nodes", "cycle", "rss", "expected"),
    [
        (1000, 30.0, 9000.0, {"cycle p99 <= 1 s (1,000 nodes, 200 gangs)": False}),
        (5000, 4.0, 1500.0, {"cycle p99 <= 5 s (5,000 nodes)": True, "peak RSS <= 1 GiB (5,000 nodes)": False}),
        (16384, 4.0, 1500.0, {"cycle p99 <= 5 s (16,384 nodes)": True, "peak RSS <= 2 GiB (16,384 nodes)": True}),
        (65536, 21.0, 5000.0, {"cycle p99 <= 20 s (65,536 nodes)": False, "peak RSS <= 6 GiB (65,536 nodes)": True}),
    ],
)
def test_each_size_is_held_to_its_own_targets(nodes: int, cycle: float, rss: float, expected: dict) -> None:
    found = {t["target"]: t["met"] for t in targets.check_targets(_results(nodes, cycle, rss))}
    assert {k: v for k, v in found.items() if k.startswith(("cycle p99", "peak RSS"))} == expected


def test_frontier_sizes_are_run_by_name_only() -> None:
    frontier = {
        "synthetic/16384nodes",
        "synthetic/65536nodes",
        "kube-perf/16384nodes-1000x3",
        "kube-perf/16384nodes-3x1000",
        "pools/16384nodes",
        "pools/65536nodes",
    }
    assert frontier == FRONTIER
    assert set(SCENARIOS) >= FRONTIER
    assert not FRONTIER & set(GRIDS["full"])
