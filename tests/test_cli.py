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
        k8s_pod("new", gpus=1, owner="new", created="2026-01-01T01:25:00Z"),
        k8s_pod("new2", gpus=1, owner="new2", created="2026-01-01T01:26:00Z"),
    ]
    text = yaml.safe_dump_all(docs)
    fresh = orjson.loads(solve("-", "-o", "json", input=text).stdout)
    assert set(fresh["bindings"]) == {"default/new", "default/new2"}  # two gangs beat one
    aged = orjson.loads(solve("-", "-o", "json", "--now", "2026-01-01T01:30:00Z", input=text).stdout)
    assert set(aged["bindings"]) == {"default/old"}  # waited past the hour: it goes first
    assert [lv["starving"] for lv in aged["levels"]] == [True, False]


def test_now_reserves_nodes_for_a_starving_gang_from_running_pods_expected_ends():
    # n0 frees at 01:10 (its pod declares 70 minutes), n1 runs a pod without an estimate: the old 4-GPU gang
    # holds n0 from 01:10; a new gang expected to run 2 h keeps off n0, one of 5 minutes backfills it.
    runtime = "gangsolve.io/expected-runtime"
    docs = [
        k8s_node("n0", gpus=4),
        k8s_node("n1", gpus=4),
        k8s_pod(
            "busy0",
            gpus=3,
            node_name="n0",
            phase="Running",
            created="2026-01-01T00:00:00Z",
            annotations={runtime: "70m"},
        ),
        k8s_pod("busy1", gpus=3, node_name="n1", phase="Running", created="2026-01-01T00:00:00Z"),
        k8s_pod("old", gpus=4, owner="old", created="2025-12-31T23:30:00Z"),
        k8s_pod("quick", gpus=1, owner="quick", created="2026-01-01T00:59:00Z", annotations={runtime: "5m"}),
        k8s_pod("long", gpus=1, owner="long", created="2026-01-01T00:59:30Z", annotations={runtime: "2h"}),
    ]
    text = yaml.safe_dump_all(docs)
    out = orjson.loads(solve("-", "-o", "json", "--now", "2026-01-01T01:00:00Z", input=text).stdout)
    assert out["reservations"] == [{"gang": "default/old", "nodes": ["n0"], "start": "2026-01-01T01:10:00Z", "gpus": 4}]
    assert out["bindings"] == {"default/quick": "n0", "default/long": "n1"}

    wide = CliRunner().invoke(cli, ["solve", "-", "--now", "2026-01-01T01:00:00Z"], input=text, env={"COLUMNS": "300"})
    assert "reserved 4 GPUs on node n0 from about 2026-01-01 01:10 UTC" in wide.stdout

    # Without an estimate for n0's pod either, the old gang waits for one, and nothing is held.
    docs[2]["metadata"]["annotations"] = {}
    out = orjson.loads(solve("-", "-o", "json", "--now", "2026-01-01T01:00:00Z", input=yaml.safe_dump_all(docs)).stdout)
    assert out["reservations"] == [{"gang": "default/old", "nodes": [], "start": None, "gpus": 0}]
    # A configured default gives both running pods an end: n0 (started first, same default) is as good as n1.
    out = orjson.loads(
        solve(
            "-",
            "-o",
            "json",
            "--now",
            "2026-01-01T01:00:00Z",
            "--default-runtime",
            "90m",
            input=yaml.safe_dump_all(docs),
        ).stdout
    )
    assert [r["start"] for r in out["reservations"]] == ["2026-01-01T01:30:00Z"]


@pytest.mark.parametrize(
    ("annotation", "flags", "message"),
    [
        (
            "soon",
            [],
            "error: Pod default/p: metadata.annotations.gangsolve.io/expected-runtime: expected a duration such as "
            "90m or 1h30m, got 'soon'",
        ),
        (
            "0s",
            [],
            "error: Pod default/p: metadata.annotations.gangsolve.io/expected-runtime: must be positive, got '0s'",
        ),
        ("1h", ["--default-runtime", "-5m"], "error: --default-runtime: must be positive, got '-5m'"),
    ],
)
def test_bad_runtimes_are_one_line_exit_2(annotation, flags, message):
    docs = [k8s_node("n0", gpus=4), k8s_pod("p", gpus=1, annotations={"gangsolve.io/expected-runtime": annotation})]
    proc = subprocess.run(
        [sys.executable, "-m", "gangsolve", "solve", "-", "--now", "2026-01-01T01:00:00Z", *flags],
        input=yaml.safe_dump_all(docs),
        capture_output=True,
        text=True,
    )
    assert (proc.returncode, proc.stdout, proc.stderr.strip()) == (2, "", message)
