"""live/openb-shares at its smallest (8 of the trace's nodes) on a real control plane with `gangsolve run`:
asserts what the API's nodes and pods show after the run (no GPU past all of it, no whole GPU shared, every
share bound with a GPU index of its node), never how long anything took."""

from __future__ import annotations

import dataclasses

import pytest

from gangsolve.bench.live import live_sharing
from gangsolve.bench.live.live_scenarios import LIVE_SCENARIOS
from gangsolve.bench.live.runs import run_live

pytestmark = pytest.mark.e2e

TINY = dataclasses.replace(LIVE_SCENARIOS["live/openb-shares"], nodes=8, build=lambda: live_sharing.objects(8))


def test_gangsolve_shares_the_traces_gpus_live_and_never_past_all_of_one(binaries, tmp_path):
    r = run_live(TINY, "gangsolve", log_dir=tmp_path, quiet=5, log=lambda m: print(f"[live] {m}", flush=True))
    check = r["api_check"]
    assert check["devices_over_100"] == 0
    assert check["nodes_with_a_whole_gpu_shared"] == 0
    assert check["fractional_pods_without_a_gpu_index"] == 0
    assert check["fractional_pods_bound"] == r["pods_placed"] == len(r["bound_over_time"])
    # The pods ask 110% of the GPUs: most are placed, not all; most of the GPUs' thousandths are held.
    assert 0 < r["pods_placed"] < r["pending_pods"]
    assert check["gpu_thousandths_held"] > 0.7 * 1000 * check["gpus"]
    assert r["api_requests"]["patch pods"] == r["api_requests"]["create pods/binding"] == r["pods_placed"]
