"""live/openb-shares at its smallest (8 of the trace's nodes) on real control planes: `gangsolve run` with the
`gpu-fraction` annotation, and kube-scheduler with the same shares as DRA consumable capacity (ResourceClaims
on shareable devices); then gangsolve on those same DRA objects (live/openb-shares-dra). Asserts what the API's
objects show after each run (no GPU past all of it, no whole GPU shared, every share bound with a GPU of its
node), never how long anything took."""

from __future__ import annotations

import dataclasses

import pytest

from gangsolve.bench.live import live_sharing
from gangsolve.bench.live.live_scenarios import LIVE_SCENARIOS
from gangsolve.bench.live.runs import run_live

pytestmark = pytest.mark.e2e

TINY = dataclasses.replace(LIVE_SCENARIOS["live/openb-shares"], nodes=8, build=lambda: live_sharing.objects(8))
TINY_DRA = dataclasses.replace(
    LIVE_SCENARIOS["live/openb-shares-dra"], nodes=8, build=lambda: live_sharing.objects(8)
)  # gangsolve on the very objects kube-scheduler gets


@pytest.fixture(scope="module")
def runs(binaries, tmp_path_factory) -> dict[str, dict]:
    logs = tmp_path_factory.mktemp("live-logs")
    out = {
        s: run_live(TINY, s, log_dir=logs, quiet=5, log=lambda m: print(f"[live] {m}", flush=True))
        for s in ("gangsolve", "kube-scheduler")
    }
    out["gangsolve-dra"] = run_live(TINY_DRA, "gangsolve", log_dir=logs, quiet=5, log=print)
    return out


@pytest.mark.parametrize("scheduler", ["gangsolve", "kube-scheduler", "gangsolve-dra"])
def test_shares_never_pass_all_of_a_gpu(runs, scheduler):
    r = runs[scheduler]
    check = r["api_check"]
    assert check["devices_over_100"] == 0
    assert check["nodes_with_a_whole_gpu_shared"] == 0
    assert check["fractional_pods_without_a_gpu_index"] == 0
    assert check["gpus"] == runs["gangsolve"]["api_check"]["gpus"]  # the same GPUs, as each one's users see them
    assert check["fractional_pods_bound"] == r["pods_placed"] == len(r["bound_over_time"])
    # The pods ask 110% of the GPUs: most are placed, not all; most of the GPUs' thousandths are held.
    assert 0 < r["pods_placed"] < r["pending_pods"]
    assert check["gpu_thousandths_held"] > 0.7 * 1000 * check["gpus"]


def test_gangsolve_writes_each_shares_gpu_and_kube_scheduler_each_claims_allocation(runs):
    gs, ks = runs["gangsolve"]["api_requests"], runs["kube-scheduler"]["api_requests"]
    assert gs["patch pods/status"] >= gs["create pods/binding"] == runs["gangsolve"]["pods_placed"]
    assert ks["update resourceclaims/status"] == ks["create pods/binding"] == runs["kube-scheduler"]["pods_placed"]


def test_gangsolve_on_the_dra_form_writes_each_claims_allocation_before_its_bind(runs):
    gs = runs["gangsolve-dra"]["api_requests"]
    assert gs["update resourceclaims/status"] == gs["create pods/binding"] == runs["gangsolve-dra"]["pods_placed"]
