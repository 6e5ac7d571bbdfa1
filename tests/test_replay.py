"""A live cycle replays offline exactly: `gangsolve solve --config` reads the settings `gangsolve run` reads,
and `gangsolve export` writes the succeeded pods the runtime history learns from, which `solve` learns from."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
import yaml
from click.testing import CliRunner

from gangsolve.cli import cli
from gangsolve.live import export as export_module
from gangsolve.live.watchers import RESOURCES, succeeded_pods
from tests.builders import k8s_list, k8s_node, k8s_pod, k8s_pod_group
from tests.live.fake_kube import FakeKube

ROOT = Path(__file__).resolve().parents[1]
NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


def stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def run_solve(*args: str):
    return CliRunner().invoke(cli, ["solve", *args, "--time-limit", "0.5", "-o", "json"])


def solve(*args: str) -> dict:
    result = run_solve(*args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def solve_fails(*args: str) -> str:
    """What `solve` says on stderr, when it exits 2."""
    result = run_solve(*args)
    assert result.exit_code == 2
    return result.stderr


def write(path: Path, data: dict) -> str:
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_solve_reads_the_settings_file_run_reads_and_its_flags_win(tmp_path: Path) -> None:
    example = str(ROOT / "examples" / "tfjob-8.yaml")  # its pods name kube-batchd
    settings = write(tmp_path / "config.yaml", {"scheduler-name": "kube-batchd", "leader-elect": True})
    assert len(solve(example, "--config", settings)["bindings"]) == 8
    assert solve(example, "--config", settings, "--scheduler-name", "gangsolve")["gangs"] == []

    bad = write(tmp_path / "bad.yaml", {"time-limit": "soon"})
    assert (
        solve_fails(example, "--config", bad) == f"error: config {bad}: time-limit: expected a number > 0, got 'soon'\n"
    )


def succeeded(name: str, minutes: float, owner: str, scheduler: str = "gangsolve") -> dict:
    pod = k8s_pod(name, gpus=1, owner=owner, phase="Succeeded", node_name="n1", scheduler=scheduler)
    started = NOW - timedelta(hours=3)
    pod["metadata"]["uid"] = f"uid-{name}"
    pod["status"].update(
        startTime=stamp(started),
        containerStatuses=[
            {"name": "main", "state": {"terminated": {"finishedAt": stamp(started + timedelta(minutes=minutes))}}}
        ],
    )
    return pod


def cluster(*history: dict) -> dict:
    """One 4-GPU node: a Job's pod of ours running 3 GPUs for 5 minutes, declaring no runtime, and a gang
    needing the whole node pending for two hours (starving): its reservation starts when the running pod is
    expected to end, which only the Job template's history (`train-*`) can say."""
    running = k8s_pod("train-run", gpus=3, owner="train-x1y2z", node_name="n1", phase="Running")
    running["status"]["startTime"] = stamp(NOW - timedelta(minutes=5))
    big = k8s_pod("big-0", gpus=4, labels={GROUP_LABEL: "big"}, created=stamp(NOW - timedelta(hours=2)))
    return k8s_list(k8s_node("n1", gpus=4), running, big, k8s_pod_group("big", 1), *history)


def reservation_start(tmp_path: Path, snapshot: dict, *args: str) -> str | None:
    """The start the plan shows the big gang: a reservation's while no end is known (start null), a forecast's
    once the history gives the running pod one (a learned runtime is a guess: nothing is held on it)."""
    out = solve(write(tmp_path / "snap.yaml", snapshot), "--now", stamp(NOW), *args)
    (planned,) = [p for p in out["plan"] if p["gang"] == "default/big"]
    assert planned["held"] == (planned["start"] is None)
    assert out["reservations"] == (
        [{"gang": "default/big", "nodes": [], "start": None, "gpus": 0}] if planned["held"] else []
    )
    return planned["start"]


def test_solve_learns_runtimes_from_the_succeeded_pods_of_its_scheduler(tmp_path: Path) -> None:
    """The live scheduler learns the same runs: tests/live/test_reservations.py expects the same start."""
    runs = [succeeded(f"train-{i}", 20, "train-a1b2c") for i in range(2)]
    others = succeeded("train-other", 600, "train-a1b2c", scheduler="default-scheduler")  # not ours
    assert reservation_start(tmp_path, cluster()) is None  # no estimate for the running pod
    expected = stamp(NOW - timedelta(minutes=5) + timedelta(minutes=20))
    assert reservation_start(tmp_path, cluster(*runs, others)) == expected

    # The settings file's workload label names another workload: no history for this one.
    settings = write(tmp_path / "config.yaml", {"workload-label": "app", "reservations": 1})
    for pod in runs:
        pod["metadata"]["labels"]["app"] = "other"
    assert reservation_start(tmp_path, cluster(*runs), "--config", settings) is None


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("startTime", "yesterday", "status.startTime: invalid RFC3339 encoded datetime"),
        ("containerStatuses", 5, "status.containerStatuses: expected a list, got 5"),
        ("containerStatuses", [{"state": {"terminated": {"finishedAt": 5}}}], "not an RFC 3339 time: 5"),
    ],
)
def test_a_succeeded_pod_that_cannot_be_read_is_an_error_unless_skipping(
    tmp_path: Path, field: str, value: object, error: str
) -> None:
    bad = succeeded("train-bad", 20, "train-a1b2c")
    bad["status"][field] = value
    path = write(tmp_path / "snap.yaml", cluster(bad))
    message = solve_fails(path, "--now", stamp(NOW))
    assert message.startswith("error: Pod default/train-bad: ")
    assert message.endswith(error + "\n")
    assert reservation_start(tmp_path, cluster(bad), "--skip-invalid") is None


class ListingKube(FakeKube):
    async def close(self) -> None:
        pass


def test_export_writes_the_succeeded_pods_of_the_scheduler_named(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = ListingKube()
    running = k8s_pod("train-run", gpus=3, node_name="n1", phase="Running")
    done = succeeded("train-0", 20, "train-a1b2c", scheduler="batch")
    kube.lists["/api/v1/nodes"].append({"kind": "NodeList", "metadata": {"resourceVersion": "1"}, "items": []})
    pods = kube.lists["/api/v1/pods"]  # the watched pods first, then the succeeded ones
    for items in ([running], [done]):
        pods.append({"kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": items})
    for r in RESOURCES:
        if not r.optional and r.path not in kube.lists:
            kube.lists[r.path].append({"metadata": {"resourceVersion": "1"}, "items": []})

    async def connect(_kubeconfig: str | None, context: str | None = None) -> FakeKube:
        return kube

    monkeypatch.setattr(export_module.Kube, "connect", connect)
    listing = json.loads(anyio.run(export_module.export, None, "batch"))
    assert [o["metadata"]["name"] for o in listing["items"] if o["kind"] == "Pod"] == ["train-run", "train-0"]
    selectors = [q.get("fieldSelector") for _m, path, q in kube.calls if path == "/api/v1/pods"]
    assert selectors == [RESOURCES[0].field_selector, succeeded_pods("batch").field_selector]
