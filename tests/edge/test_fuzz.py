"""Fuzzing every input parser: quantities, snapshot documents, and `gangsolve solve` end to end.

Valid snapshots are mutated (types, sizes, nesting, YAML aliases, unicode and control characters, rich markup,
duplicates, kinds, text cut or corrupted) and fed to the real CLI entry. Whatever the input, the answer is a
plan (exit 0) or one line naming what is wrong (exit 2): never a traceback, never a hang. Each run is bounded
by an alarm (a hang detector, not a speed target). GANGSOLVE_FUZZ_EXAMPLES scales the number of inputs; the
count run is printed at the end of the session.
"""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsolve.cli import cli
from gangsolve.edge.errors import InputError
from gangsolve.edge.gangs import build_cluster
from gangsolve.edge.quantity import MAX_UNITS, parse_quantity, to_units
from gangsolve.edge.snapshot import parse
from tests.builders import (
    k8s_claim,
    k8s_claim_template,
    k8s_device_class,
    k8s_gpu,
    k8s_node,
    k8s_pdb,
    k8s_pod,
    k8s_pod_group,
    k8s_queue,
    k8s_slice,
    with_claims,
)

EXAMPLES = int(os.environ.get("GANGSOLVE_FUZZ_EXAMPLES", "100"))
RUN_SECONDS = 30  # far above any run's time: only a hang trips it
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
RAN: Counter[str] = Counter()  # inputs run, by test and outcome: reported at the end of the session
SLOWEST: dict[str, float] = {}

# --- valid snapshots to start from ----------------------------------------------------------------------------


def _rich_snapshot() -> list[dict]:
    """Every field gangsolve reads, with a valid value."""
    nodes = [
        k8s_node("n0", gpus=8, labels={"zone": "a", "cores": "64"}),
        k8s_node(
            "n1", gpus=4, labels={"zone": "b"}, taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
        ),
        k8s_node("n2", cpu="8", memory="32Gi", ready=False),
        k8s_node("n3", cpu="16", unschedulable=True),
    ]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["32"]}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
                ]
            }
        }
    }
    pods = [
        *(k8s_pod(f"w{i}", gpus=1, labels={"scheduling.x-k8s.io/pod-group": "train"}) for i in range(3)),
        k8s_pod("v0", gpus=2, annotations={"scheduling.k8s.io/group-name": "vjob"}, affinity=affinity),
        k8s_pod(
            "tf0",
            labels={"job": "tf"},
            tolerations=[{"key": "dedicated", "operator": "Exists"}],
            annotations={"scheduling.volcano.sh/queue-name": "team-b"},
        ),
        k8s_pod("tf1", labels={"job": "tf"}, priorityClassName="high", created="2026-01-01T00:00:00Z"),
        k8s_pod("own0", owner="job1", annotations={"gangsolve.io/min-available": "2", "gangsolve.io/colocate": "zone"}),
        k8s_pod(
            "own1", owner="job1", priority=5, nodeSelector={"zone": "a"}, annotations={"gangsolve.io/queue": "team-b"}
        ),
        k8s_pod("bound", gpus=2, node_name="n0", phase="Running", owner="job1"),
        k8s_pod("done", gpus=4, node_name="n0", phase="Succeeded"),
        k8s_pod("gated", schedulingGates=[{"name": "example.com/hold"}]),
        k8s_pod("theirs", scheduler="default-scheduler", node_name="n1", phase="Running", cpu="500m"),
    ]
    pods[-3]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    pods[4]["spec"]["preemptionPolicy"] = "Never"
    pods[4]["status"]["nominatedNodeName"] = "n0"
    pods[-4]["status"]["startTime"] = "2026-01-01T00:00:00Z"
    pods[4]["spec"]["initContainers"] = [
        {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
        {"name": "init", "resources": {"limits": {"memory": "1Gi"}}},
    ]
    pods[4]["spec"]["overhead"] = {"cpu": "10m"}
    return [
        *nodes,
        k8s_pod_group("train", 3, annotations={"gangsolve.io/queue": "default"}),
        k8s_pod_group("vjob", 1, volcano=True, queue="team-a"),
        k8s_queue("team-a", 2, {"nvidia.com/gpu": "8", "cpu": "16"}, {"nvidia.com/gpu": "2"}, reclaimable=False),
        k8s_queue("team-b", capability={"memory": "64Gi"}),
        k8s_pdb("tf", "50%", {"job": "tf"}),
        {**k8s_pdb("guard", 1, {"app": "x"}), "status": {"disruptionsAllowed": 1}},
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "high"},
            "value": 1000,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "d"},
            "globalDefault": True,
        },
        *pods,
    ]


def _users_snapshot() -> list[dict]:
    items = yaml.safe_load((Path(__file__).parents[2] / "examples" / "tfjob-8.yaml").read_text())["items"]
    for obj in items:
        if obj["kind"] == "Pod":
            obj["spec"]["schedulerName"] = "gangsolve"
    return items


def _dra_snapshot() -> list[dict]:
    """Devices in ResourceSlices (node-local, a pool for a node selector), a DeviceClass, claims (one allocated,
    one by matchAttribute, one with a selector), a template, pods using them."""
    shared = k8s_slice(
        None,
        [k8s_gpu("net-0")],
        pool="net",
        nodeSelector={
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
        },
    )
    return [
        k8s_node("n0", labels={"zone": "a"}),
        k8s_node("n1"),
        k8s_device_class(),
        k8s_slice("n0", [k8s_gpu(f"gpu-{i}", pcie_root=f"r{i // 2}") for i in range(4)]),
        shared,
        k8s_claim("a", count=2, match="gpu.example.com/pcieRoot"),
        k8s_claim("b", selectors=['device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0']),
        k8s_claim("c", allocated=[("n0", "gpu-3")], node="n0"),
        k8s_claim_template("t", count=1),
        with_claims(k8s_pod("p0", labels={"job": "d"}), "a"),
        with_claims(k8s_pod("p1", labels={"job": "d"}), "b", templates={"t": None}),
        with_claims(k8s_pod("p2"), "c"),
        k8s_pdb("d", 2, {"job": "d"}),
    ]


def _shares_snapshot() -> list[dict]:
    """GPU shares: nodes with and without the GPU memory label, bound pods holding shares of named (and
    unnamed) GPUs, pending fractions, memory requests and whole GPUs in one gang."""
    memory = {"nvidia.com/gpu.memory": "81920"}
    return [
        k8s_node("n0", gpus=4, labels=memory),
        k8s_node("n1", gpus=2, labels={"nvidia.com/gpu.memory": "24576"}),
        k8s_node("n2", gpus=1),
        k8s_pod(
            "held", node_name="n0", phase="Running", annotations={"gpu-fraction": "0.5", "gangsolve.io/gpu-index": "1"}
        ),
        k8s_pod(
            "mem", node_name="n1", phase="Running", annotations={"gpu-memory": "8192", "gangsolve.io/gpu-index": "0"}
        ),
        k8s_pod("unnamed", node_name="n2", phase="Running", annotations={"gpu-fraction": "0.25"}),
        k8s_pod("f0", annotations={"gpu-fraction": "0.5"}),
        k8s_pod("f1", annotations={"gpu-fraction": ".75"}, labels={"scheduling.x-k8s.io/pod-group": "mix"}),
        k8s_pod("m0", annotations={"gpu-memory": "20000"}, labels={"scheduling.x-k8s.io/pod-group": "mix"}),
        k8s_pod("w0", gpus=1, labels={"scheduling.x-k8s.io/pod-group": "mix"}),
        k8s_pod_group("mix", 3),
    ]


def _dra_shares_snapshot() -> list[dict]:
    """DRA consumable capacity: shared devices (one with a requestPolicy of each kind), a claim allocated with
    consumedCapacity, pending claims asking capacity (and one asking a whole device)."""
    policies = [
        {"default": "100", "validRange": {"min": "100", "max": "1000", "step": "50"}},
        {"default": "250", "validValues": ["250", "500", "1000"]},
        None,
    ]
    devices = [
        {
            "name": f"gpu-{i}",
            "allowMultipleAllocations": True,
            "capacity": {
                "share": {"value": "1000", **({"requestPolicy": policy} if policy else {})},
                "memory": {"value": "80Gi"},
            },
        }
        for i, policy in enumerate(policies)
    ]
    devices.append({"name": "gpu-3", "allowMultipleAllocations": True, "capacity": {"share": {"value": "1000"}}})
    held = k8s_claim("held", allocated=[("n0", "gpu-0")], node="n0")
    result = held["status"]["allocation"]["devices"]["results"][0]
    result.update(consumedCapacity={"share": "300", "memory": "0"}, shareID="2b1f8a8e-5d0e-4a51-9a7e-1c2d3e4f5a6b")
    claims = []
    for name, asked in (("s0", {"share": "300"}), ("s1", {"share": "251", "memory": "8Gi"}), ("w", None)):
        claim = k8s_claim(name, count=2, match="gpu.example.com/pcieRoot") if name == "s0" else k8s_claim(name)
        if asked:
            claim["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": asked}
        claims += [claim, with_claims(k8s_pod(f"p-{name}"), name)]
    return [k8s_node("n0"), k8s_device_class(), k8s_slice("n0", devices), held, *claims]


BASES = [
    _rich_snapshot(),
    _users_snapshot(),
    [k8s_node("n", gpus=4), k8s_pod("p", gpus=1)],
    _dra_snapshot(),
    _shares_snapshot(),
    _dra_shares_snapshot(),
]

# --- values and mutations -------------------------------------------------------------------------------------

INTERESTING = [
    *("1e16", "8Ei", "64Ti", "65Ti", str(MAX_UNITS), str(2**63), "70368744177.664", "1e999999999", "-1", "0"),
    *(".5", "1m", "100u", "1n", "nan", "Infinity", "1_000", " 1 ", "1e-999", "١٢", "2x", "", "0x10", "+5"),
    *("150%", "-5%", "50%", "%", "5.5%", "100%", "0%", "[/]", "[bold red]x[/]", "[link=x]y", ":smile:"),
    *("\x1b[2J", "a\nb", "\r", "\x00", "\u202e", "\u2028", "\ud7ff", "x" * 5000, "😀" * 50),
    *("2026-01-01T00:00:00", "2026-01-01T00:00:00Z", "yesterday", "2026-13-45T99:99:99Z", "2026-01-01T00:00:00+25:00"),
    *("In", "NotIn", "Gt", "Lt", "Exists", "DoesNotExist", "Foo", "NoSchedule", "NoExecute", "Always", "Equal"),
    *("Never", "PreemptLowerPriority"),
    *("default", "kube-system", "a/b", "Pending", "Running", "Succeeded", "True", "Ready", "gangsolve", "List"),
    *("Node", "Pod", "PodGroup", "PodDisruptionBudget", "PriorityClass", "v1", "policy/v1", "scheduling.x-k8s.io/v1"),
    *("ResourceSlice", "ResourceClaim", "DeviceClass", "resource.k8s.io/v1", "All", "ExactCount", "gpu.example.com"),
    *("share", "validRange", "validValues", "requestPolicy", "consumedCapacity", "allowMultipleAllocations"),
    *('device.driver == "gpu.example.com"', "1/0 == 1", 'device.attributes["x"].y', "(((", "quantity('x') == 1"),
    *('semver("1.2") == semver("1.2.3")', "device.capacity", "size(device.attributes) > 0", "true"),
    *("gpu-fraction", "gpu-memory", "gangsolve.io/gpu-index", "nvidia.com/gpu.memory", "0.5", "1.0", "1.5", "0.0001"),
    *("0.", "1e-3", "81920", "999999999", "4", "-1", "00.5", "0.5 "),
]
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-10, 10),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(INTERESTING),
)
VALUES = st.recursive(
    LEAVES,
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6) | st.integers(0, 3), kids, max_size=3)
    ),
    max_leaves=6,
)
DEEP = "DEEPLYNESTEDVALUE"  # replaced in the text by a list nested `depth` deep (past what YAML writers nest)


def _like(value: object) -> st.SearchStrategy:
    if isinstance(value, bool):
        return st.booleans()
    if isinstance(value, int):
        return st.integers(-5, 10) | st.integers(-(2**40), 2**40)
    if isinstance(value, str):
        return (
            st.sampled_from(INTERESTING) | st.text(max_size=8) | st.from_regex(r"\A[0-9]{1,15}(m|Ki|Gi|Ti|k|M|G|E)?\Z")
        )
    if isinstance(value, list):
        return st.lists(st.just(value[0]) if value else VALUES, max_size=4).map(copy.deepcopy)
    return VALUES


def _positions(tree) -> list[tuple[object, object]]:
    """Every (container, key-or-index) in `tree`: the places a mutation can change. A container met again (an
    alias made by an earlier mutation) is not walked twice."""
    out, stack, seen = [], [tree], set()
    while stack:
        node = stack.pop()
        if not isinstance(node, dict | list) or id(node) in seen:
            continue
        seen.add(id(node))
        for k in list(node) if isinstance(node, dict) else range(len(node)):
            out.append((node, k))
            stack.append(node[k])
    return out


@st.composite
def mutated_snapshots(draw) -> str:
    objs = copy.deepcopy(draw(st.sampled_from(BASES)))
    depth, aliased = 0, False
    for _ in range(draw(st.integers(1, 4))):
        op = draw(
            st.sampled_from(
                ["like", "like", "like", "set", "set", "delete", "duplicate", "share", "bomb", "deep", "grow"]
            )
        )
        places = _positions(objs)
        if not places:
            break
        container, key = draw(st.sampled_from(places))
        if op == "like":  # a value of the same type: the snapshot often stays valid, and the solver runs
            container[key] = draw(_like(container[key]))
        elif op == "set":
            container[key] = draw(VALUES)
        elif op == "delete":
            del container[key]
        elif op == "duplicate":
            objs.append(copy.deepcopy(draw(st.sampled_from(objs))) if objs else {})
        elif op == "share":  # the same object twice: a YAML anchor and alias
            container[key], aliased = draw(st.sampled_from(places))[0], True
        elif op == "bomb":  # width**levels values from a handful of aliases
            width, levels = draw(st.integers(2, 9)), draw(st.integers(1, 9))
            value: object = ["x"] * width
            for _ in range(levels):
                value = [value] * width
            container[key], aliased = value, True
        elif op == "deep":
            depth = draw(st.integers(1, 1200))
            container[key] = DEEP
        else:  # many objects at once: sizes
            count = draw(st.integers(1, 300))
            objs.extend(k8s_pod(f"many-{i}", gpus=i % 3) for i in range(count))
    shape = draw(st.sampled_from(["list", "stream", "items"] if aliased else ["list", "stream", "json", "items"]))
    try:
        if shape == "json":
            text = orjson.dumps({"apiVersion": "v1", "kind": "List", "items": objs}).decode()
        elif shape == "stream":
            text = yaml.dump_all(objs if isinstance(objs, list) else [objs])
        else:
            text = yaml.dump({"apiVersion": "v1", "kind": "List", "items": objs} if shape == "list" else objs)
    except (TypeError, RecursionError, orjson.JSONEncodeError):  # nan, non-string keys, cycles: YAML carries them
        try:
            text = yaml.dump(objs)
        except RecursionError:
            text = yaml.dump([])
    nested = "[" * depth + "]" * depth
    text = text.replace(f'"{DEEP}"', nested).replace(DEEP, nested)
    if draw(st.integers(0, 9)) == 0:  # the text itself corrupted: cut short, or a character put in
        at = draw(st.integers(0, len(text)))
        text = text[:at] if draw(st.booleans()) else text[:at] + draw(st.characters()) + text[at:]
    return text


# --- running the CLI ------------------------------------------------------------------------------------------


@contextmanager
def alarm(seconds: int) -> Iterator[None]:
    def timed_out(_signum, _frame):
        raise TimeoutError(f"run took more than {seconds}s")

    previous = signal.signal(signal.SIGALRM, timed_out)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run_solve(text: str, *args: str, test: str) -> None:
    started = time.perf_counter()
    with alarm(RUN_SECONDS):
        result = CliRunner().invoke(cli, ["solve", "-", "--time-limit", "0.2", *args], input=text)
    SLOWEST[test] = max(SLOWEST.get(test, 0.0), time.perf_counter() - started)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        RAN[f"{test}: traceback"] += 1
        pytest.fail(
            "".join(traceback.format_exception(*result.exc_info)) + f"\ninput ({len(text)} chars): {text[:2000]!r}"
        )
    RAN[f"{test}: exit {result.exit_code}"] += 1
    assert result.exit_code in (0, 2), result.output
    if result.exit_code == 2:
        assert result.stdout == ""
        assert result.stderr.startswith("error: ")
        assert len(result.stderr.splitlines()) == 1, result.stderr
        assert "\x1b" not in result.stderr
    elif "json" in args:
        assert set(orjson.loads(result.stdout)) >= {"bindings", "gangs", "status", "gated"}
    else:
        assert "gangs placed" in result.stdout
        assert "\x1b" not in result.stdout  # no escape from the input reaches the terminal


def summary() -> str:
    """What ran, for the end of the session (tests/edge/conftest.py prints it)."""
    slowest = ", ".join(f"{t} {s:.2f}s" for t, s in sorted(SLOWEST.items()))
    return f"fuzz: {sum(RAN.values())} inputs run: {dict(sorted(RAN.items()))}; slowest run: {slowest}"


@FUZZ
@given(mutated_snapshots(), st.sampled_from([("-o", "json"), ("-o", "table"), ("--now", "2026-01-01T01:00:00Z")]))
def test_solve_on_mutated_snapshots_is_a_plan_or_one_line(text, args):
    run_solve(text, *args, test="cli")


@settings(FUZZ, max_examples=max(3, EXAMPLES // 30))
@given(mutated_snapshots())
def test_solve_as_a_process_on_mutated_snapshots(text):
    """A few runs as users run it: a real process, its exit code and its streams."""
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "gangsolve", "solve", "-", "--time-limit", "0.2", "-o", "json"],
        input=text.encode("utf-8", "surrogatepass"),
        capture_output=True,
        timeout=RUN_SECONDS * 2,
    )
    SLOWEST["process"] = max(SLOWEST.get("process", 0.0), time.perf_counter() - started)
    RAN[f"process: exit {proc.returncode}"] += 1
    assert proc.returncode in (0, 2), proc.stderr.decode(errors="replace")[-3000:]
    assert b"Traceback" not in proc.stderr
    if proc.returncode == 2:
        assert proc.stdout == b""
        assert len(proc.stderr.splitlines()) == 1


# --- parsers on their own -------------------------------------------------------------------------------------


@settings(FUZZ, max_examples=EXAMPLES * 3)
@given(mutated_snapshots(), st.booleans())
def test_a_bad_object_is_named_so_the_live_scheduler_can_leave_it_out(text, strict):
    """parse and build_cluster raise InputError only; in the live scheduler's mode every error names one object
    of the snapshot (as `describe` names it), and leaving that object out makes progress until the rest builds."""
    with alarm(RUN_SECONDS):
        try:
            snap = parse(text)
        except InputError:
            RAN["parse: InputError"] += 1
            return
        for _ in range(len(snap.nodes) + len(snap.pods) + len(snap.pdbs) + 20):
            try:
                build_cluster(snap, strict=strict)
                RAN["build: built"] += 1
                return
            except InputError as exc:
                RAN["build: InputError"] += 1
                if strict:
                    return
                culprit = exc.obj
            smaller = snap.without(culprit)
            if smaller == snap:
                pytest.fail(f"{culprit} names no object of the snapshot")
            snap = smaller
        pytest.fail("leaving out the named objects never let the snapshot build")


@settings(FUZZ, max_examples=EXAMPLES * 3)
@given(st.text(max_size=300) | st.binary(max_size=300).map(lambda b: b.decode("latin-1")))
def test_arbitrary_text_is_a_snapshot_or_an_input_error(text):
    with alarm(RUN_SECONDS):
        try:
            snap = parse(text)
            build_cluster(snap)
            RAN["text: built"] += 1
        except InputError:
            RAN["text: InputError"] += 1


QUANTITY_TEXT = st.from_regex(
    r"\A[+-]?([0-9]{1,25}(\.[0-9]{0,12})?|\.[0-9]{1,12})([eE][+-]?[0-9]{1,12}|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?\Z"
)


@settings(FUZZ, max_examples=EXAMPLES * 5)
@given(
    st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]),
    QUANTITY_TEXT | st.text(max_size=30) | LEAVES | st.sampled_from(INTERESTING),
)
def test_quantities_are_units_in_range_or_a_value_error(resource, value):
    try:
        units = to_units(resource, value)
    except ValueError:
        RAN["quantity: ValueError"] += 1
        return
    RAN["quantity: units"] += 1
    assert isinstance(units, int)
    assert 0 <= units <= MAX_UNITS
    assert units >= parse_quantity(value) * (1000 if resource == "cpu" else 1)  # never less than asked


@settings(FUZZ, max_examples=EXAMPLES * 3)
@given(st.integers(0, MAX_UNITS), st.sampled_from(["", "Ki", "Mi", "Gi", "m", "k", "M", "G"]))
def test_quantities_round_trip(n, suffix):
    scale = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "k": 10**3, "M": 10**6, "G": 10**9}
    RAN["quantity: round trip"] += 1
    if suffix == "m":
        assert to_units("cpu", f"{n}m") == n
        return
    if n * scale[suffix] <= MAX_UNITS:
        assert to_units("memory", f"{n}{suffix}") == n * scale[suffix]
    else:
        with pytest.raises(ValueError, match="above the most gangsolve represents"):
            to_units("memory", f"{n}{suffix}")
