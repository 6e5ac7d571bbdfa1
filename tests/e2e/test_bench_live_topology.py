"""live/topology at its smallest (two blocks, 48 nodes) on real control planes: kube-scheduler with pod
affinity, kube-scheduler's native topology-aware gang scheduling, and `gangsolve run`. Asserts what the oracle
reads from the bindings, never how long anything took."""

from __future__ import annotations

import dataclasses

import pytest

from gangsolve.bench import manifests
from gangsolve.bench.live import LIVE_SCHEDULERS, live_topology, peers
from gangsolve.bench.live.live_scenarios import LIVE_SCENARIOS
from gangsolve.bench.live.runs import run_live
from gangsolve.bench.report import tables

pytestmark = pytest.mark.e2e

TINY = dataclasses.replace(
    LIVE_SCENARIOS["live/topology-seed1"], nodes=48, build=lambda: live_topology.objects(48, seed=48)
)


def run_each(schedulers, logs) -> dict[str, dict]:
    return {
        s: run_live(TINY, s, log_dir=logs, quiet=5, log=lambda m: print(f"[live] {m}", flush=True)) for s in schedulers
    }


@pytest.fixture(scope="module")
def runs(binaries, tmp_path_factory) -> dict[str, dict]:
    return run_each(LIVE_SCHEDULERS, tmp_path_factory.mktemp("live-logs"))


@pytest.mark.parametrize("scheduler", LIVE_SCHEDULERS)
def test_every_scheduler_keeps_gangs_in_one_block(runs, scheduler):
    r = runs[scheduler]
    oracle = r["oracle"]
    assert oracle["required_violations"] == 0
    assert oracle["gangs_placed"] >= 1
    # The oracle (PodGroups and node labels) and the bench's metrics (the solver's model of the same objects)
    # count the same gangs and pods.
    assert oracle["gangs_placed"] == r["gangs_complete"]
    assert oracle["pods_bound"] == r["pods_placed"]
    assert oracle["partial_gangs"] == r["partial_gangs"]
    assert oracle["blocks_per_gang"] in (None, 1.0)
    assert r["violations"] == []
    assert r["background_pods_lost"] == 0


@pytest.mark.parametrize("scheduler", ["kube-scheduler-gang", "gangsolve"])
def test_gang_schedulers_leave_no_partial_gang(runs, scheduler):
    assert runs[scheduler]["oracle"]["partial_gangs"] == 0
    # The API server kept the topology constraint (with its gate off it drops the field): the peer was asked
    # for one block, not merely lucky.
    assert runs[scheduler]["pod_group_served"]["schedulingConstraints"] == {
        "topology": [{"key": manifests.BLOCK_LABEL}]
    }


def test_per_pod_users_create_no_pod_group(runs):
    assert "pod_group_served" not in runs["kube-scheduler"]


def test_report_shows_the_oracle_table(runs):
    live = [{"name": "live/topology", "runs": [runs[s] for s in LIVE_SCHEDULERS]}]
    rows = tables.live_topology_rows(live)
    assert [r[1] for r in rows] == list(LIVE_SCHEDULERS)
    assert all(r[6] == "0" for r in rows)  # required-level violations


REAL = ("volcano", "kai-quota", "kueue-tas")  # each real peer's users ask for one block in its own API


@pytest.fixture(scope="module")
def peer_runs(binaries, tmp_path_factory) -> dict[str, dict]:
    built = [s for s in REAL if peers.not_run(TINY, s) is None]
    return run_each(built, tmp_path_factory.mktemp("peer-logs"))


@pytest.mark.parametrize("peer", REAL)
def test_every_real_peer_keeps_gangs_whole_in_one_block(peer_runs, peer):
    if peer not in peer_runs:
        pytest.skip(peers.not_run(TINY, peer) or "not run")
    r = peer_runs[peer]
    oracle = r["oracle"]
    assert oracle["required_violations"] == 0
    assert oracle["gangs_placed"] >= 1
    assert oracle["partial_gangs"] == 0
    assert oracle["blocks_per_gang"] in (None, 1.0)
    assert r["violations"] == []
    # Each was told the topology its own way, and the record says how.
    if peer == "volcano":
        assert r["peer"]["hypernodes"] == 2 * 3 + 2 + 1  # 6 racks, 2 blocks, 1 zone at 48 nodes
        assert any(
            p["name"] == "network-topology-aware" for t in r["peer"]["scheduler_conf"]["tiers"] for p in t["plugins"]
        )
    if peer == "kai-quota":
        assert [level["nodeLabel"] for level in r["peer"]["topology"]["levels"]][1:3] == [
            manifests.BLOCK_LABEL,
            manifests.RACK_LABEL,
        ]
