"""`gangsolve solve` end to end: the users' examples, the JSON contract, and bad input."""

import io
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import yaml
from click.testing import CliRunner
from rich.console import Console

from gangsolve.cli import cli
from gangsolve.solver import SolveConfig
from tests.builders import k8s_list, k8s_node, k8s_pdb, k8s_pod, k8s_pod_group, k8s_queue

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
            "rule": "pdb",
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


def test_a_higher_priority_tfjob_preempts_a_whole_lower_one_and_spares_the_pdb_guarded_pod():
    result = solve(str(EXAMPLES / "tfjob-preempt.yaml"), "--scheduler-name", "kube-batchd", "-o", "json")
    assert result.exit_code == 0, result.output
    plan = orjson.loads(result.stdout)
    assert plan["bindings"] == {}  # nothing binds before its victims are gone
    assert sorted(plan["nominations"]) == ["default/mnist-ps-0", *(f"default/mnist-worker-{i}" for i in range(7))]
    assert set(plan["nominations"].values()) == {"apollo61", "apollo62"}
    evicted = sorted(e["pod"] for e in plan["evictions"])
    assert evicted == ["default/resnet-ps-0", *(f"default/resnet-worker-{i}" for i in range(3))]
    assert {(e["for"], e["node"]) for e in plan["evictions"]} == {("default/mnist", "apollo61")}
    assert all(e["reason"] for e in plan["evictions"])
    table = solve(str(EXAMPLES / "tfjob-preempt.yaml"), "--scheduler-name", "kube-batchd").stdout
    assert "Evictions" in table
    assert "8 nominated, 4 to evict" in table
    off = orjson.loads(
        solve(
            str(EXAMPLES / "tfjob-preempt.yaml"), "--scheduler-name", "kube-batchd", "--no-preemption", "-o", "json"
        ).stdout
    )
    assert off["evictions"] == []
    assert off["nominations"] == {}


def tenants(state=None, reclaimable=None) -> str:
    """One 4-GPU node held by queue team-b's two Volcano gangs (2 pods of 1 GPU each) while team-a asked for
    nothing; now team-a's gang of 2 waits. Equal weights: fair shares of 2 GPUs each."""
    objs = [
        k8s_node("n", gpus=4),
        k8s_queue("team-a", state=state),
        k8s_queue("team-b", reclaimable=reclaimable),
        k8s_pod_group("a1", 2, volcano=True, queue="team-a"),
    ]
    objs += [k8s_pod(f"a1-{i}", gpus=1, annotations={"scheduling.k8s.io/group-name": "a1"}) for i in range(2)]
    for gang in ("b1", "b2"):
        objs.append(k8s_pod_group(gang, 2, volcano=True, queue="team-b"))
        objs += [
            k8s_pod(
                f"{gang}-{i}",
                gpus=1,
                node_name="n",
                phase="Running",
                annotations={"scheduling.k8s.io/group-name": gang},
            )
            for i in range(2)
        ]
    return yaml.safe_dump(k8s_list(*objs))


def test_a_queue_below_its_fair_share_reclaims_a_whole_gang_and_the_plan_shows_it():
    plan = orjson.loads(solve("-", "-o", "json", input=tenants()).stdout)
    evicted = sorted(e["pod"] for e in plan["evictions"])
    assert evicted in (["default/b1-0", "default/b1-1"], ["default/b2-0", "default/b2-1"])  # one gang, whole
    assert {e["for"] for e in plan["evictions"]} == {"default/a1"}
    assert all(e["reason"].startswith("reclaimed from queue team-b, past its fair share") for e in plan["evictions"])
    assert plan["nominations"] == {"default/a1-0": "n", "default/a1-1": "n"}
    table = solve("-", input=tenants()).stdout
    assert "Evictions" in table
    assert "reclaimed from queue team-b" in table
    # Not from a queue that is not reclaimable; a closed queue admits no new gang at all.
    assert orjson.loads(solve("-", "-o", "json", input=tenants(reclaimable=False)).stdout)["evictions"] == []
    closed = orjson.loads(solve("-", "-o", "json", input=tenants(state="Closed")).stdout)
    assert closed["evictions"] == []
    assert closed["nominations"] == {}
    assert [g["reason"] for g in closed["gangs"]] == ["queue team-a is closed: it admits no new gangs"]


def test_default_scheduler_name_leaves_kube_batchd_pods_alone_and_says_which_name_they_use():
    result = solve(str(EXAMPLES / "tfjob-8.yaml"), "-o", "json")
    assert result.exit_code == 0
    plan = orjson.loads(result.stdout)
    assert plan["bindings"] == {}
    assert plan["gangs"] == []
    assert result.stderr == "hint: 8 pending pods name kube-batchd, none gangsolve: try --scheduler-name kube-batchd\n"


def test_a_tfjob_whose_pdb_has_a_typo_is_named_with_the_gang_that_fell_back():
    """Two mistakes that would otherwise cost a gang in silence: a PDB of a misspelled kind, and so a TFJob that
    falls back to a minimum of 1. The plan itself is unchanged; stderr says what to fix."""
    pods = []
    for i in range(3):
        pod = k8s_pod(f"mnist-worker-{i}", gpus=1, labels={"job": "mnist"})
        pod["metadata"]["ownerReferences"] = [
            {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "mnist", "uid": "u1", "controller": True}
        ]
        pods.append(pod)
    typo = {**k8s_pdb("mnist", 3, {"job": "mnist"}), "kind": "PodDisruptonBudget"}
    text = yaml.safe_dump(k8s_list(k8s_node("n", gpus=8), typo, *pods))
    result = solve("-", "-o", "json", input=text)
    assert result.exit_code == 0, result.output
    (gang,) = orjson.loads(result.stdout)["gangs"]
    assert (gang["rule"], gang["minMember"]) == ("owner", 1)
    assert result.stderr.splitlines() == [
        "warning: PodDisruptonBudget default/mnist ignored: gangsolve reads no kind PodDisruptonBudget "
        "(did you mean PodDisruptionBudget?)",
        "warning: gang default/mnist: no PodGroup or PDB defines the gang of TFJob mnist: its minimum is 1, so part "
        "of it may run; create a PodGroup (minMember) or a PodDisruptionBudget (minAvailable) for its pods to keep "
        "it whole",
    ]
    fixed = solve("-", "-o", "json", input=text.replace("PodDisruptonBudget", "PodDisruptionBudget"))
    assert [(g["rule"], g["minMember"]) for g in orjson.loads(fixed.stdout)["gangs"]] == [("pdb", 3)]
    table = solve("-", input=text).stdout.splitlines()  # piped: plain text, one line a row
    assert table[1].split()[:2] == ["GANG", "RULE"]
    assert table[2].split()[:2] == ["default/mnist", "owner"]


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


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # what the README's `kubectl get` writes on a cluster that serves no upstream PodGroup API
        ("", "error: snapshot: no nodes and no pods (`kubectl get` writes nothing when a kind it names is not served)"),
        (yaml.safe_dump(k8s_list(k8s_pdb("mnist", 8, {"app": "mnist"}))), "error: snapshot: no nodes and no pods"),
        (yaml.safe_dump_all([k8s_pod("p", gpus=1), k8s_pod("q")]), "error: snapshot: 2 pods but no node to run on"),
    ],
)
def test_a_snapshot_without_nodes_is_an_error_that_says_how_to_make_one(text, message):
    """An empty plan (`0/0 gangs placed`, exit 0) would read as "nothing to do"; it is a snapshot missing its
    cluster, and `gangsolve export` makes one that is not."""
    result = solve("-", "-o", "json", input=text)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith(message)
    assert result.stderr.strip().endswith("make one of your cluster with `gangsolve export -o snap.json`")
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_cluster_with_nothing_pending_is_an_empty_plan():
    plan = orjson.loads(solve("-", "-o", "json", input=yaml.safe_dump(k8s_node("n"))).stdout)
    assert (plan["bindings"], plan["gangs"]) == ({}, [])


def test_gated_pods_are_reported_not_placed():
    docs = [
        k8s_node("n", gpus=4),
        k8s_pod("held", gpus=1, schedulingGates=[{"name": "kueue.x-k8s.io/admission"}]),
        k8s_pod("free", gpus=1),
    ]
    plan = orjson.loads(solve("-", "-o", "json", input=yaml.safe_dump_all(docs)).stdout)
    assert plan["bindings"] == {"default/free": "n"}
    assert [g["name"] for g in plan["gangs"]] == ["default/free"]
    assert plan["gated"] == {"default/held": ["kueue.x-k8s.io/admission"]}
    table = solve("-", input=yaml.safe_dump_all(docs)).stdout
    assert "Gated" in table
    assert "kueue.x-k8s.io/admission" in table
    assert "1 pods gated" in table


def test_other_kinds_are_ignored():
    text = yaml.safe_dump(k8s_list({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}, k8s_node("n")))
    assert solve("-", input=text).exit_code == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: [unclosed", "error: snapshot: invalid YAML/JSON at line 2, column 1"),
        (
            yaml.safe_dump(k8s_list(k8s_node("n"), k8s_pod("p", cpu="2x"))),
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


def _pod_group(name: str) -> dict:
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": name}}


def _priority_class(name: str, value) -> dict:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}


def _pdb(min_available) -> dict:
    return k8s_pdb("b", min_available, {"app": "x"})


def _mutated(change) -> list[dict]:
    """A valid two-object snapshot (a 4-GPU node, a 1-GPU pod) after `change(node, pod, objs)`."""
    node, pod = k8s_node("n", gpus=4), k8s_pod("p", gpus=1)
    objs = [node, pod]
    change(node, pod, objs)
    return objs


def _requests(pod: dict) -> dict:
    return pod["spec"]["containers"][0]["resources"]["requests"]


_AFFINITY = ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
# Each of these ended in a traceback (exit 1), a hang, or was silently accepted.
BAD_SNAPSHOTS = {
    "status as a list": (
        lambda n, p, o: n.__setitem__("status", [1]),
        "Node n: status: expected object | null, got array",
    ),
    "taints as a map": (
        lambda n, p, o: n["spec"].__setitem__("taints", {"a": "b"}),
        "Node n: spec.taints: expected array | null, got object",
    ),
    "tolerations as a map": (
        lambda n, p, o: p["spec"].__setitem__("tolerations", {"a": "b"}),
        "Pod default/p: spec.tolerations: expected array | null, got object",
    ),
    "annotations as a string": (
        lambda n, p, o: p["metadata"].__setitem__("annotations", "x"),
        "Pod default/p: metadata.annotations: expected object | null, got str",
    ),
    "namespace not a string": (
        lambda n, p, o: p["metadata"].__setitem__("namespace", 5),
        "Pod 5/p: metadata.namespace: expected a string, got 5",
    ),
    "map key not a string": (
        lambda n, p, o: p["metadata"].__setitem__("labels", {1: "a"}),
        "Pod default/p: metadata.labels: a key: expected str, got int",
    ),
    "affinity terms as a string": (
        lambda n, p, o: p["spec"].__setitem__("affinity", {_AFFINITY[1]: {_AFFINITY[2]: {"nodeSelectorTerms": "t"}}}),
        f"Pod default/p: spec.{'.'.join(_AFFINITY)}.nodeSelectorTerms: expected array | null, got str",
    ),
    "cpu 1e16": (
        lambda n, p, o: _requests(p).__setitem__("cpu", "1e16"),
        "Pod default/p: spec.containers[0].resources.requests.cpu: quantity '1e16' is above the most gangsolve "
        "represents (70368744177664 millicores)",
    ),
    "memory 8Ei": (
        lambda n, p, o: _requests(p).__setitem__("memory", "8Ei"),
        "Pod default/p: spec.containers[0].resources.requests.memory: quantity '8Ei' is above the most",
    ),
    "int64-sized GPU count": (
        lambda n, p, o: _requests(p).__setitem__("nvidia.com/gpu", str(2**63 - 1)),
        "Pod default/p: spec.containers[0].resources.requests.nvidia.com/gpu: quantity '9223372036854775807' is above",
    ),
    "half a GPU": (
        lambda n, p, o: _requests(p).__setitem__("nvidia.com/gpu", "1.5"),
        "Pod default/p: spec.containers[0].resources.requests.nvidia.com/gpu: invalid value '1.5': must be an integer",
    ),
    "500m GPUs": (
        lambda n, p, o: _requests(p).__setitem__("nvidia.com/gpu", "500m"),
        "Pod default/p: spec.containers[0].resources.requests.nvidia.com/gpu: invalid value '500m': must be an integer",
    ),
    "GPU request below its limit": (
        lambda n, p, o: p["spec"]["containers"][0]["resources"].update(
            requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "2"}
        ),
        "Pod default/p: spec.containers[0].resources.requests.nvidia.com/gpu: must be equal to nvidia.com/gpu limit "
        "of '2'",
    ),
    "int64-sized node GPUs": (
        lambda n, p, o: n["status"]["allocatable"].__setitem__("nvidia.com/gpu", 2**62),
        "Node n: status.allocatable.nvidia.com/gpu: quantity 4611686018427387904 is above the most",
    ),
    "containers adding up past the maximum": (
        lambda n, p, o: p["spec"].__setitem__("containers", [{"resources": {"requests": {"memory": "60Ti"}}}] * 2),
        "Pod default/p: spec.containers: requests add up to 131941395333120 memory, above the most",
    ),
    ".nan": (
        lambda n, p, o: _requests(p).__setitem__("cpu", float("nan")),
        "Pod default/p: spec.containers[0].resources.requests.cpu: quantity nan does not parse",
    ),
    ".inf": (
        lambda n, p, o: _requests(p).__setitem__("memory", float("inf")),
        "Pod default/p: spec.containers[0].resources.requests.memory: quantity inf does not parse",
    ),
    "PriorityClass value: high": (
        lambda n, p, o: (o.append(_priority_class("pc", "high")), p["spec"].__setitem__("priorityClassName", "pc")),
        "PriorityClass pc: value: expected int, got str",
    ),
    "spec.priority beyond int32": (
        lambda n, p, o: p["spec"].__setitem__("priority", 2**31),
        "Pod default/p: spec.priority: expected int <= 2147483647",
    ),
    "creationTimestamp without a zone": (
        lambda n, p, o: p["metadata"].__setitem__("creationTimestamp", "2026-01-01T00:00:00"),
        "Pod default/p: metadata.creationTimestamp: expected datetime with a timezone component",
    ),
    "label value nested 1,000 deep": (
        lambda n, p, o: p["metadata"]["labels"].__setitem__("app", "DEEP"),
        "Pod default/p: metadata.labels.app: expected str, got array",
    ),
    "minMember nested 1,000 deep": (
        lambda n, p, o: o.append({**_pod_group("g"), "spec": {"minMember": "DEEP"}}),
        "PodGroup default/g: spec.minMember: expected int | str | null, got array",
    ),
    "duplicate PodGroups": (
        lambda n, p, o: o.extend([_pod_group("g"), _pod_group("g")]),
        "PodGroup default/g: metadata.name: duplicate object in snapshot",
    ),
    "duplicate PriorityClasses": (
        lambda n, p, o: o.extend([_priority_class("pc", 1), _priority_class("pc", 2)]),
        "PriorityClass pc: metadata.name: duplicate object in snapshot",
    ),
    "PDB percentage above 100%": (
        lambda n, p, o: o.append(_pdb("150%")),
        "PodDisruptionBudget default/b: spec.minAvailable: a percentage must be between 0% and 100%, got '150%'",
    ),
    "PDB percentage below 0%": (
        lambda n, p, o: o.append(_pdb("-5%")),
        "PodDisruptionBudget default/b: spec.minAvailable: expected a number or a percentage, got '-5%'",
    ),
    "containers as a map": (
        lambda n, p, o: p["spec"].__setitem__("containers", {"main": {"resources": {"requests": {"cpu": "64"}}}}),
        "Pod default/p: spec.containers: expected array | null, got object",
    ),
    "label value not a string": (
        lambda n, p, o: p["metadata"]["labels"].__setitem__("gpu", True),
        "Pod default/p: metadata.labels.gpu: expected str, got bool",
    ),
    "name with a newline and a terminal escape": (
        lambda n, p, o: (p["metadata"].__setitem__("name", "p\n\x1b[2J"), _requests(p).__setitem__("cpu", "x")),
        "Pod default/p\\n\\x1b[2J: spec.containers[0].resources.requests.cpu: quantity 'x' does not parse",
    ),
}


def _one_line_exit_2(result, message: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: {message}"), result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert len(result.stderr) < 500


@pytest.mark.parametrize("case", list(BAD_SNAPSHOTS))
def test_bad_snapshot_is_one_line_exit_2(case):
    change, message = BAD_SNAPSHOTS[case]
    text = yaml.dump(k8s_list(*_mutated(change)))  # YAML carries .nan, .inf and keys that are not strings
    text = text.replace("DEEP", "[" * 990 + "x" + "]" * 990)  # past what the YAML writer can nest
    _one_line_exit_2(solve("-", "-o", "json", input=text), message)


# A billion laughs: under 1 KB of YAML, 9**9 values once its aliases are expanded.
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi", strict=True)
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (ALIAS_BOMB + "kind: Pod\n", "snapshot: YAML aliases expand the document to too many values"),
        (ALIAS_BOMB + "kind: [*i]\n", "snapshot: YAML aliases expand the document to too many values"),
        ("a: &a [*a]\nkind: Pod\n", "snapshot: YAML aliases expand the document to too many values"),
        ("kind: Pod\nmetadata: {name: " + "[" * 1000 + "]" * 1000 + "}\n", "snapshot: invalid YAML/JSON at line 2"),
    ],
    ids=["alias bomb", "alias bomb as a kind", "recursive alias", "1,000 deep"],
)
def test_hostile_yaml_is_one_line_exit_2(text, message):
    _one_line_exit_2(solve("-", "-o", "json", input=text), message)


def test_moderate_aliases_are_still_yaml():
    pod = "- {{kind: Pod, metadata: {{name: p{}, labels: *labels}}, spec: {{schedulerName: gangsolve}}}}\n"
    node = "- {kind: Node, metadata: {name: n}}\n"
    docs = "labels: &labels {app: x}\nitems:\n" + node + "".join(pod.format(i) for i in range(3))
    result = solve("-", "-o", "json", input="kind: List\n" + docs)
    assert result.exit_code == 0, result.output
    assert len(orjson.loads(result.stdout)["gangs"]) == 3


def test_time_limit_must_be_a_finite_number():
    for bad in ("nan", "inf", "-1", "0.01"):
        result = solve(str(EXAMPLES / "tfjob-8.yaml"), "--time-limit", bad)
        assert result.exit_code == 2, bad
        assert result.stdout == ""
        assert "--time-limit" in result.stderr


def test_invalid_utf8_on_stdin_is_one_line():
    result = CliRunner().invoke(cli, ["solve", "-"], input=b"kind: Pod\nmetadata: {name: \xff}\n")
    _one_line_exit_2(result, "snapshot: not UTF-8 text")


def _with_typos() -> str:
    pod = k8s_pod("w0", gpus=1)
    pod["spec"]["nodeSelectr"] = {"gpu": "yes"}
    pod["spec"]["containers"][0]["resources"]["limit"] = {"nvidia.com/gpu": "1"}
    return yaml.safe_dump(k8s_list(k8s_node("n", gpus=4), pod))


def test_unknown_fields_are_a_warning_each_and_the_cycle_still_runs():
    result = solve("-", "-o", "json", input=_with_typos())
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        "warning: Pod default/w0: spec.containers[0].resources.limit: unknown field",
        "warning: Pod default/w0: spec.nodeSelectr: unknown field",
    ]
    assert orjson.loads(result.stdout)["bindings"] == {"default/w0": "n"}


def test_strict_refuses_unknown_fields_in_one_line():
    result = solve("-", "--strict", input=_with_typos())
    _one_line_exit_2(result, "Pod default/w0: spec.containers[0].resources.limit: unknown field (and 1 more)")


def test_an_error_is_one_line_alone_without_the_warnings():
    text = _with_typos().replace("cpu: '1'", "cpu: lots")
    _one_line_exit_2(solve("-", input=text), "Pod default/w0: spec.containers[0].resources.requests.cpu: quantity")


def test_the_examples_solve_strictly_without_a_warning():
    for example in EXAMPLES.glob("*.yaml"):
        # The users' TFJobs name kube-batchd; the sharing examples name gangsolve.
        scheduler = "gangsolve" if example.name in ("gpu-sharing.yaml", "dra-shares.yaml") else "kube-batchd"
        result = solve(str(example), "--strict", "--scheduler-name", scheduler, "-o", "json")
        assert result.exit_code == 0, result.output
        assert result.stderr == ""


def _table(example: str, console) -> str:
    from gangsolve import cycle, render
    from gangsolve.edge.snapshot import read

    decisions = cycle.run(read(str(EXAMPLES / example)), cycle.Rules("kube-batchd"), SolveConfig(), now=None)
    render.print_table(decisions, console)
    return console.file.getvalue()


def test_piped_the_table_is_plain_aligned_text_without_empty_columns():
    text = _table("tfjob-10.yaml", Console(file=io.StringIO(), width=80))
    lines = text.splitlines()
    assert lines[:2] == ["Gangs", "GANG           RULE  PRIORITY  MIN  PODS  PLACED  REASON"]
    assert lines[2].startswith("default/mnist  pdb   0         10   10    0       needs 9 nvidia.com/gpu, 8 free on")
    assert lines[2].endswith("apollo25 excluded by taint node-role.kubernetes.io/master:NoSchedule")  # one line a row
    assert "RESERVATION" not in text  # no gang has one
    assert not set(text) & set("\x1b┃│━─")


@pytest.mark.parametrize("width", [40, 80, 120])
def test_on_a_terminal_names_are_whole_and_reasons_wrap_between_words(width):
    def table(example: str) -> str:
        return _table(example, Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None))

    unplaced, preempting = table("tfjob-10.yaml"), table("tfjob-preempt.yaml")
    assert "┃ REASON" in unplaced
    assert "node-role.kubernetes.io/master:NoSchedule" in unplaced  # the longest word, on one line
    for name in ("default/mnist-worker-6", "default/resnet-worker-0", "apollo61"):
        assert name in preempting
    assert "RESERVATION" not in unplaced + preempting


def test_names_print_as_themselves_in_the_table():
    # rich markup in a name used to raise MarkupError; a terminal escape must not reach the terminal
    docs = [k8s_node("n[/]", gpus=4), k8s_pod("p[bold]x[/]", gpus=1), k8s_pod("esc", ns="a\x1b[31m", gpus=1)]
    result = solve("-", input=yaml.safe_dump_all(docs))
    assert result.exit_code == 0, result.output
    assert "p[bold]x[/]" in result.stdout
    assert "n[/]" in result.stdout
    assert "\x1b" not in result.stdout
    assert "a\\x1b[31m/esc" in result.stdout


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
    assert set(aged["bindings"]) == {"default/old"}  # waited past the starvation age: it goes first
    assert [lv["starving"] for lv in aged["levels"]] == [True, False]


def test_now_reserves_nodes_for_a_starving_gang_from_running_pods_expected_ends():
    # n0 frees at 01:10 (its pod declares 70 minutes), n1 runs a pod without an estimate: the old 4-GPU gang
    # holds n0 from 01:20 (twice its wait: plan-relaxation 1, the default); a new gang expected to run 2 h keeps
    # off n0, one of 5 minutes backfills it.
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
    old = {"gang": "default/old", "nodes": ["n0"], "start": "2026-01-01T01:20:00Z", "gpus": 4}
    assert out["reservations"] == [{**old, "earliest": "2026-01-01T01:10:00Z"}]  # it could start at 01:10
    assert out["bindings"] == {"default/quick": "n0", "default/long": "n1"}
    # The plan: the gangs starting now, until their estimated ends, and the one waiting (no estimate: no end).
    assert sorted(out["plan"], key=lambda p: (p["start"], p["end"] or "")) == [
        {
            "gang": "default/quick",
            "start": "2026-01-01T01:00:00Z",
            "end": "2026-01-01T01:05:00Z",
            "pods": {"default/quick": "n0"},
            "held": True,
            "guessed": False,
        },
        {
            "gang": "default/long",
            "start": "2026-01-01T01:00:00Z",
            "end": "2026-01-01T03:00:00Z",
            "pods": {"default/long": "n1"},
            "held": True,
            "guessed": False,
        },
        {
            "gang": "default/old",
            "start": "2026-01-01T01:20:00Z",
            "end": None,
            "pods": {"default/old": "n0"},
            "held": True,
            "guessed": False,
            "earliest": "2026-01-01T01:10:00Z",
        },
    ]

    wide = CliRunner().invoke(cli, ["solve", "-", "--now", "2026-01-01T01:00:00Z"], input=text, env={"COLUMNS": "300"})
    assert "expected to start at about 2026-01-01 01:20 UTC on node n0 (4 GPUs held; its room frees at about" in (
        wide.stdout
    )

    # Without an estimate for n0's pod either, the old gang waits for one, and nothing is held.
    docs[2]["metadata"]["annotations"] = {}
    out = orjson.loads(solve("-", "-o", "json", "--now", "2026-01-01T01:00:00Z", input=yaml.safe_dump_all(docs)).stdout)
    assert out["reservations"] == [{"gang": "default/old", "nodes": [], "start": None, "gpus": 0}]
    # A configured default gives both running pods an end (n0, started first, as good as n1), but a guessed
    # one: the old gang is shown that start and holds nothing.
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
    assert out["reservations"] == []
    old = [p for p in out["plan"] if p["gang"] == "default/old"]
    assert [(p["start"], p["held"], p["guessed"]) for p in old] == [("2026-01-01T01:30:00Z", False, True)]
    # A gang starting now on the default runtime: its end is a guess, its start is not.
    alone = yaml.safe_dump_all([k8s_node("n0", gpus=4), k8s_pod("solo", gpus=1, owner="solo")])
    now = ["--now", "2026-01-01T01:00:00Z", "--default-runtime", "1h"]
    out = orjson.loads(solve("-", "-o", "json", *now, input=alone).stdout)
    assert [(p["gang"], p["end"], p["held"], p["guessed"]) for p in out["plan"]] == [
        ("default/solo", "2026-01-01T02:00:00Z", True, True)
    ]


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


def test_bad_input_is_rejected_before_the_solver_is_loaded(tmp_path):
    """OR-Tools takes seconds to import: a bad snapshot is reported without it (the one-line error stays fast)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: List\nitems:\n- kind: Node\n  metadata: {name: a}\n  status: {allocatable: {cpu: zz}}\n")
    probe = (
        "import sys\n"
        "from gangsolve.cli import main\n"
        "try:\n"
        f"    sys.argv = ['gangsolve', 'solve', {str(bad)!r}]\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    print(exc.code, 'ortools' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["2", "False"]
    assert out.stderr.strip() == "error: Node a: status.allocatable.cpu: quantity 'zz' does not parse"


def test_skip_invalid_leaves_a_bad_object_out_as_the_live_scheduler_does():
    """An export with one tenant's bad pod: strict by default (exit 2 naming it), solvable with --skip-invalid."""
    text = orjson.dumps(k8s_list(k8s_node("n", gpus=4), k8s_pod("ok", gpus=1), k8s_pod("poison", cpu="1e16"))).decode()
    strict = solve("-", "-o", "json", input=text)
    assert strict.exit_code == 2
    assert "Pod default/poison" in strict.stderr
    skipping = solve("-", "-o", "json", "--skip-invalid", input=text)
    assert skipping.exit_code == 0
    out = orjson.loads(skipping.stdout)
    assert out["bindings"] == {"default/ok": "n"}
    assert [s["object"] for s in out["skipped"]] == ["Pod default/poison"]
    assert "cpu" in out["skipped"][0]["reason"]
    table = solve("-", "--skip-invalid", input=text)
    assert "Skipped" in table.stdout
    assert "default/poison" in table.stdout
    assert "1 objects skipped" in table.stdout
