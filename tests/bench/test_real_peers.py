"""The real peers without running them: where the bench finds Volcano and says why it does not run it, the
PodGroups its users create, how the report names a peer's configuration, and the build script's bad input."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gangsolve.bench.devcluster import volcano
from gangsolve.bench.live.live_scenarios import LIVE_SCENARIOS
from gangsolve.bench.live.runs import peer_not_run
from gangsolve.bench.report.tables import peer_notes

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def unbuilt_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """versions.env pinning a Volcano release that no cache holds."""
    text = (REPO / "hack" / "versions.env").read_text()
    pinned = tmp_path / "versions.env"
    pinned.write_text(
        "\n".join(
            "VOLCANO_VERSION=v0.0.0-unbuilt" if line.startswith("VOLCANO_") else line for line in text.splitlines()
        )
    )
    monkeypatch.setenv("GANGSOLVE_VERSIONS_ENV", str(pinned))
    monkeypatch.setenv("GANGSOLVE_CACHE", str(tmp_path / "cache"))
    return "v0.0.0-unbuilt"


def test_an_unbuilt_peer_is_named_with_the_command_that_builds_it(unbuilt_version: str) -> None:
    with pytest.raises(volcano.PeerMissing, match=rf"vc-scheduler {unbuilt_version} is not built.*`make peers`"):
        volcano.Volcano.locate()
    why = peer_not_run(LIVE_SCENARIOS["live/tfjob"], "volcano")
    assert why is not None
    assert "make peers" in why
    assert peer_not_run(LIVE_SCENARIOS["live/tfjob"], "kube-scheduler") is None  # not a peer: always runs


def test_volcano_does_not_run_where_the_users_write_only_other_schedulers_objects() -> None:
    why = peer_not_run(LIVE_SCENARIOS["live/topology-seed1"], "volcano")
    assert why is not None
    assert "HyperNodes" in why


def test_a_volcano_pod_group_sums_its_pods_requests_as_min_resources() -> None:
    pods = [
        {"spec": {"priorityClassName": "high", "containers": [{"resources": {"requests": r}}]}}
        for r in ({"cpu": "500m", "memory": "512Mi", "nvidia.com/gpu": "1"}, {"cpu": "1", "memory": "1Gi"})
    ]
    group = volcano.pod_group("g", 2, pods, "ns")
    assert group["metadata"] == {"name": "g", "namespace": "ns"}
    assert group["spec"] == {
        "minMember": 2,
        "queue": "default",
        "minResources": {"cpu": "1.5", "memory": str(3 * 2**29), "nvidia.com/gpu": "1"},
        "priorityClassName": "high",
    }


def test_the_report_says_which_peer_did_not_run_and_how_each_was_configured() -> None:
    conf = {"actions": "enqueue, allocate", "tiers": [{"plugins": [{"name": "gang"}]}, {"plugins": [{"name": "drf"}]}]}
    live = [
        {"name": "live/a", "runs": [{"scheduler": "volcano", "peer": {"version": "v1", "scheduler_conf": conf}}]},
        {"name": "live/b", "runs": [], "not_run": {"volcano": "not built"}},
    ]
    assert peer_notes(live) == [
        "live/b: volcano not run: not built",
        "volcano v1: actions enqueue, allocate; plugin tiers: gang; drf",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bogus"], "unknown peer 'bogus' (known: volcano)"),
        (["volcano", "--source", "/nonexistent"], "--source /nonexistent: not a directory"),
        (["volcano", "--source"], "--source needs a directory"),
        (["volcano", "--source", "{empty}"], "--source {empty}: neither a source tree (go.mod) nor a git repository"),
    ],
)
def test_build_script_refuses_bad_input_in_one_line_with_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    args, message = [a.format(empty=empty) for a in args], message.format(empty=empty)
    done = subprocess.run(
        ["bash", str(REPO / "hack" / "build-peers.sh"), *args],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "GANGSOLVE_CACHE": str(tmp_path), "HOME": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert f"error: {message}" in done.stderr


def test_the_gpu_binpack_variant_changes_only_the_binpack_plugins_arguments() -> None:
    conf = {
        "actions": "enqueue, allocate, backfill",
        "tiers": [{"plugins": [{"name": "gang"}]}, {"plugins": [{"name": "nodeorder"}, {"name": "binpack"}]}],
    }
    packed = volcano.with_gpu_binpack(conf)
    assert packed["tiers"][0] == conf["tiers"][0]
    assert packed["tiers"][1]["plugins"] == [
        {"name": "nodeorder"},
        {"name": "binpack", "arguments": volcano.GPU_BINPACK},
    ]
    assert "arguments" not in conf["tiers"][1]["plugins"][1]  # the chart's configuration is left as it was
    run = {"scheduler": "volcano-gpu-binpack", "peer": {"version": "v1", "scheduler_conf": packed}}
    (note,) = peer_notes([{"name": "live/a", "runs": [run]}])
    assert "binpack (binpack.weight: 10, binpack.cpu: 5" in note
    assert "binpack.resources: nvidia.com/gpu" in note
