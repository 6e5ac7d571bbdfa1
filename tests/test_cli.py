"""`gangsolve solve` end to end: the users' examples, the JSON contract, and bad input."""

import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import yaml
from click.testing import CliRunner

from gangsolve.cli import cli
from tests.builders import k8s_list, k8s_node, k8s_pod

EXAMPLES = Path(__file__).parent.parent / "examples"


def solve(*args, input=None):
    return CliRunner().invoke(cli, ["solve", *args], input=input)


def test_users_tfjob_all_eight_on_gpu_nodes():
    result = solve(str(EXAMPLES / "tfjob-8.yaml"), "--scheduler-name", "kube-batchd", "-o", "json")
    assert result.exit_code == 0, result.output
    plan = orjson.loads(result.stdout)
    assert len(plan["bindings"]) == 8
    assert set(plan["bindings"].values()) <= {"apollo61", "apollo62"}
    assert plan["gangs"] == [
        {
            "name": "default/mnist",
            "placed": True,
            "minMember": 8,
            "pods": 8,
            "placedPods": 8,
            "priority": 0,
            "reason": "",
        }
    ]
    assert plan["status"] == "OPTIMAL"
    assert plan["objective"] == 1
    assert plan["bestBound"] == 1
    assert isinstance(plan["solveSeconds"], float)


def test_users_tfjob_with_nine_workers_places_nothing_and_names_the_gpu():
    result = solve(str(EXAMPLES / "tfjob-10.yaml"), "--scheduler-name", "kube-batchd", "-o", "json")
    plan = orjson.loads(result.stdout)
    assert plan["bindings"] == {}
    (gang,) = plan["gangs"]
    assert not gang["placed"]
    assert gang["reason"].startswith("needs 9 nvidia.com/gpu, 8 free on nodes matching nodeSelector gpu=yes")
    assert "apollo25 excluded by taint node-role.kubernetes.io/master:NoSchedule" in gang["reason"]


def test_default_scheduler_name_leaves_kube_batchd_pods_alone():
    plan = orjson.loads(solve(str(EXAMPLES / "tfjob-8.yaml"), "-o", "json").stdout)
    assert plan["bindings"] == {}
    assert plan["gangs"] == []


def test_table_output_for_people():
    result = solve(str(EXAMPLES / "tfjob-10.yaml"), "--scheduler-name", "kube-batchd")
    assert result.exit_code == 0
    assert "default/mnist" in result.stdout
    assert "0/1 gangs placed" in result.stdout


def test_stdin_and_multi_document_yaml():
    docs = [k8s_node("n", gpus=4), k8s_pod("p", gpus=2)]
    result = solve("-", "-o", "json", input=yaml.safe_dump_all(docs))
    assert orjson.loads(result.stdout)["bindings"] == {"default/p": "n"}


def test_json_list_snapshot():
    text = orjson.dumps(k8s_list(k8s_node("n"), k8s_pod("p"))).decode()
    assert orjson.loads(solve("-", "-o", "json", input=text).stdout)["bindings"] == {"default/p": "n"}


def test_empty_snapshot_is_an_empty_plan():
    plan = orjson.loads(solve("-", "-o", "json", input="").stdout)
    assert plan["bindings"] == {}
    assert plan["gangs"] == []


def test_pods_without_any_node_wait():
    result = solve("-", "-o", "json", input=yaml.safe_dump(k8s_pod("p", gpus=1)))
    assert result.exit_code == 0, result.output
    (gang,) = orjson.loads(result.stdout)["gangs"]
    assert not gang["placed"]
    assert gang["reason"]


def test_other_kinds_are_ignored():
    text = yaml.safe_dump(k8s_list({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}, k8s_node("n")))
    assert solve("-", input=text).exit_code == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: [unclosed", "error: snapshot: invalid YAML/JSON at line 2, column 1"),
        (
            yaml.safe_dump(k8s_list(k8s_pod("p", cpu="2x"))),
            "error: Pod default/p: spec.containers[0].resources.requests.cpu: quantity '2x' does not parse",
        ),
        (
            yaml.safe_dump(k8s_list(k8s_node("n"), k8s_node("n"))),
            "error: Node n: metadata.name: duplicate object in snapshot",
        ),
        (
            yaml.safe_dump(k8s_list(k8s_node("n", gpus="many"))),
            "error: Node n: status.allocatable.nvidia.com/gpu: quantity 'many' does not parse",
        ),
        (yaml.safe_dump(k8s_list({"kind": "Pod", "metadata": {}})), "error: Pod <unnamed>: metadata.name: missing"),
    ],
)
def test_bad_input_is_one_line_exit_2_nothing_on_stdout(text, message):
    # A real process, so we see exactly what a user sees: no traceback, stdout empty.
    proc = subprocess.run(
        [sys.executable, "-m", "gangsolve", "solve", "-", "-o", "json"], input=text, capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith(message)
    assert len(proc.stderr.strip().splitlines()) == 1


def test_missing_file():
    proc = subprocess.run([sys.executable, "-m", "gangsolve", "solve", "nope.yaml"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "cannot read nope.yaml" in proc.stderr
    assert proc.stdout == ""


def test_now_marks_long_pending_gangs_starving():
    # An old 4-GPU gang and two new 1-GPU gangs compete for 4 GPUs: by count the two new ones win,
    # unless the old one has waited past the starvation age.
    docs = [
        k8s_node("n", gpus=4),
        k8s_pod("old", gpus=4, owner="old", created="2026-01-01T00:00:00Z"),
        k8s_pod("new", gpus=1, owner="new", created="2026-01-01T00:55:00Z"),
        k8s_pod("new2", gpus=1, owner="new2", created="2026-01-01T00:56:00Z"),
    ]
    text = yaml.safe_dump_all(docs)
    fresh = orjson.loads(solve("-", "-o", "json", input=text).stdout)
    assert set(fresh["bindings"]) == {"default/new", "default/new2"}  # two gangs beat one
    aged = orjson.loads(solve("-", "-o", "json", "--now", "2026-01-01T01:00:00Z", input=text).stdout)
    assert set(aged["bindings"]) == {"default/old"}  # waited an hour: it goes first
    assert [lv["starving"] for lv in aged["levels"]] == [True, False]
