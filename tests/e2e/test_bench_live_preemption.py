"""The live preemption benchmark on the users' cluster (TFJob mnist, high priority, waits for 7 of the 8 GPUs
that TFJob resnet and a PDB-guarded notebook hold), once per scheduler on its own control plane. Asserts what the
API shows at the end (victims gone, the Preempted events that name whom they made room for, bindings), never how
long anything took."""

from __future__ import annotations

import pytest

from gangsolve.bench.live import peers
from gangsolve.bench.live.live_preemption import PEERS, run_scenarios
from gangsolve.bench.static.preemption_rounds import PREEMPTION_SCHEDULERS
from tests.e2e.live_helpers import bench_runs

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def runs(binaries, tmp_path_factory) -> dict[str, dict]:
    return bench_runs(
        run_scenarios, "live/preempt-tfjob", list(PREEMPTION_SCHEDULERS), tmp_path_factory.mktemp("live-logs")
    )


@pytest.mark.parametrize("scheduler", PREEMPTION_SCHEDULERS)
def test_every_scheduler_places_mnist_and_names_the_gang_each_victim_made_room_for(runs, scheduler):
    r = runs[scheduler]
    assert r["preemptors_placed"] == 1
    assert r["pods_bound"] == r["pending_pods"] == 8
    assert r["pods_evicted"] >= 1
    assert r["unattributed_evictions"] == 0  # every victim's Preempted event names mnist (a pod, group or gang)
    assert r["futile_evictions"] == 0
    assert r["seconds_to_placement"] is not None


def test_gangsolve_evicts_resnet_whole_and_spares_the_notebook(runs):
    gs = runs["gangsolve"]
    # resnet (3 one-GPU workers and a ps) frees 3 GPUs on gpu-0, gpu-1 has 3 free: 7 workers fit without the
    # notebook, whose PDB allows no disruption.
    assert (gs["pods_evicted"], gs["gpus_evicted"], gs["victim_gangs"]) == (4, 3, 1)
    assert gs["victim_gangs_broken"] == 0
    assert gs["pdb_violations"] == 0


def test_workload_aware_preemption_breaks_no_gang_either(runs):
    wap = runs["kube-scheduler-wap"]
    assert wap["victim_gangs_broken"] == 0  # resnet's PodGroup says disruptionMode All
    assert wap["gpus_evicted"] >= runs["gangsolve"]["gpus_evicted"]


# Each real peer once: Kueue's two set-ups share how its users' running work goes through it.
SMOKE = tuple(p for p in PEERS if p != "kueue-tas")


@pytest.fixture(scope="module")
def peer_runs(binaries, tmp_path_factory) -> dict[str, dict]:
    return bench_runs(run_scenarios, "live/preempt-tfjob", list(SMOKE), tmp_path_factory.mktemp("peer-logs"))


@pytest.mark.parametrize("peer", SMOKE)
def test_each_real_peer_places_mnist_by_evicting_only_resnet(peer_runs, peer):
    if peer not in peer_runs:
        pytest.skip(f"{peer} is not built (`make peers`)")
    r = peer_runs[peer]
    assert r["preemptors_placed"] == 1
    assert r["pods_bound"] == r["pending_pods"] == 8
    # resnet's three GPU workers must go (the notebook is another scheduler's pod); its parameter server may
    # go too: Volcano, whose chart turns the gang plugin's say over victims off, left it running in one of
    # three runs here, its gang broken. Kueue's victims must go too: its finalizer holds them until they stop.
    assert (r["gpus_evicted"], r["victim_gangs"]) == (3, 1)
    assert r["pods_evicted"] in (3, 4)
    assert r["futile_evictions"] == 0
    assert r["unattributed_evictions"] == 0  # each victim's node holds a pod of mnist at the end


@pytest.fixture(scope="module")
def kueue_spread(binaries, tmp_path_factory) -> dict[str, dict]:
    return bench_runs(
        run_scenarios, "live/preempt-perf-100nodes-1x100-vs-5gangs", ["kueue"], tmp_path_factory.mktemp("kueue-logs")
    )


def test_kueue_admits_scheduler_perfs_spread_gangs_and_preempts_them_whole(kueue_spread):
    """The five running gangs of 100 go through Kueue as one template each (kept to their nodes by a label, one
    a node by anti-affinity); Kueue's quota has no room for the 100-pod preemptor, so it evicts them whole."""
    if peers.not_built("kueue"):
        pytest.skip("kueue is not built (`make peers`)")
    r = kueue_spread["kueue"]  # a KeyError if the bench declined to run it
    assert r["preemptors_placed"] == 1
    assert r["pods_bound"] == r["pending_pods"] == 100
    assert (r["pods_evicted"], r["victim_gangs"], r["victim_gangs_broken"]) == (500, 5, 0)
    assert r["futile_evictions"] == 0
