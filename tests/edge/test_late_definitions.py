"""Gang definitions that arrive after their pods: pods that may still get one wait for it (a bounded grace from
their creation) instead of being grouped by the fallback rules and bound in part."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson
import pytest
from click.testing import CliRunner

from gangsolve.cli import cli
from gangsolve.edge.gangs import Grace, build_cluster, build_with_origins, waiting
from gangsolve.edge.snapshot import Snapshot, parse
from gangsolve.solver import solve
from tests.builders import k8s_list, k8s_node, k8s_pdb, k8s_pod

CREATED = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
STAMP = "2026-01-01T12:00:00Z"


def owned(name: str, kind: str, owner: str, **kw) -> dict:
    pod = k8s_pod(name, gpus=1, created=STAMP, labels={"job": owner}, **kw)
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "kubeflow.org/v1", "kind": kind, "name": owner, "uid": f"uid-{owner}", "controller": True}
    ]
    return pod


def snap(*pods: dict, pdbs: tuple[dict, ...] = ()) -> Snapshot:
    return Snapshot(nodes=[k8s_node("n1", gpus=8)], pods=list(pods), pdbs=list(pdbs))


def at(seconds: float) -> datetime:
    return CREATED + timedelta(seconds=seconds)


def test_pods_of_a_training_job_wait_for_their_definition_then_fall_back():
    s = snap(*(owned(f"w{i}", "TFJob", "mnist") for i in range(3)))
    assert build_cluster(s, now=at(5)).gangs == ()
    why = waiting(s, now=at(5))
    assert set(why) == {"default/w0", "default/w1", "default/w2"}
    assert why["default/w0"].reason == (
        "waiting up to 10s from its creation for its gang definition (a PodDisruptionBudget or PodGroup) of TFJob mnist"
    )
    assert why["default/w0"].until == at(10)
    # The definition never came: the owner's pods form one gang, of minimum 1 (the fallback rule).
    (gang,) = build_cluster(s, now=at(10)).gangs
    assert (gang.name, len(gang.pods), gang.min_member) == ("default/mnist", 3, 1)
    assert waiting(s, now=at(10)) == {}


NO_DEFINITION = (
    "no PodGroup or PDB defines the gang of TFJob mnist: its minimum is 1, so part of it may run; create a "
    "PodGroup (minMember) or a PodDisruptionBudget (minAvailable) for its pods to keep it whole"
)


def fallback(s: Snapshot, **kw) -> str | None:
    (origin,) = build_with_origins(s, **kw)[1].values()
    return origin.fallback


def test_a_training_job_that_falls_back_to_a_minimum_of_one_says_what_keeps_it_whole():
    """The failure a gang scheduler exists to prevent, so the gang says so (live: in its pods' condition and
    an event; offline: a warning)."""
    pods = [owned(f"w{i}", "TFJob", "mnist") for i in range(3)]
    assert fallback(snap(*pods), now=at(10)) == NO_DEFINITION
    assert fallback(snap(*pods)) == NO_DEFINITION  # offline without a clock: the fallback applies at once
    assert fallback(snap(*pods, pdbs=(k8s_pdb("mnist", 3, {"job": "mnist"}),)), now=at(10)) is None
    pods[0]["metadata"]["annotations"]["gangsolve.io/min-available"] = "1"  # asked for: nothing to warn about
    assert fallback(snap(*pods), now=at(10)) is None


@pytest.mark.parametrize(
    ("pods", "says"),
    [
        ([owned("a", "Job", "j1"), owned("b", "Job", "j1")], "no PodGroup or PDB defines the gang of Job j1"),
        ([owned("a", "Job", "j1")], None),  # one pod: it is whole
        ([owned("a", "TFJob", "one")], None),
        ([owned("a", "ReplicaSet", "web"), owned("b", "ReplicaSet", "web")], None),  # no job: pods may run apart
        (
            [k8s_pod(f"p{i}", created=STAMP, labels={"team": "t"}) for i in range(2)],
            "no pod of its team group carries the gangsolve.io/min-available annotation: its minimum is 1",
        ),
    ],
)
def test_which_gangs_fall_back(pods, says):
    found = fallback(snap(*pods), group_label="team", now=at(10))
    if says is None:
        assert found is None
    else:
        assert (found or "").startswith(says)


def test_a_definition_that_arrives_in_time_defines_the_gang_at_once():
    s = snap(*(owned(f"w{i}", "PyTorchJob", "bert") for i in range(3)), pdbs=(k8s_pdb("bert", 3, {"job": "bert"}),))
    (gang,) = build_cluster(s, now=at(1)).gangs
    assert (gang.name, gang.min_member) == ("default/bert", 3)
    assert waiting(s, now=at(1)) == {}


@pytest.mark.parametrize(
    ("pods", "waits"),
    [
        ([owned("a", "Job", "j1"), owned("b", "Job", "j1")], True),  # a Job of two pods
        ([owned("a", "Job", "j1")], False),  # a Job of one pod: nothing to wait for
        (
            [
                {
                    **owned("a", "Job", "j1"),
                    "metadata": {
                        **owned("a", "Job", "j1")["metadata"],
                        "labels": {"jobset.sigs.k8s.io/jobset-name": "js"},
                    },
                }
            ],
            True,
        ),
        ([owned("a", "ReplicaSet", "web"), owned("b", "ReplicaSet", "web")], False),  # not a batch job
        ([k8s_pod("lonely", gpus=1, created=STAMP)], False),
    ],
)
def test_which_pods_wait(pods, waits):
    assert bool(waiting(snap(*pods), now=at(1))) == waits


def test_a_kind_the_user_names_waits_too():
    s = snap(owned("a", "RayJob", "r"), owned("b", "RayJob", "r"))
    assert waiting(s, now=at(1)) == {}
    assert set(waiting(s, now=at(1), grace=Grace().with_kinds(["RayJob"]))) == {"default/a", "default/b"}


def test_a_group_label_waits_for_its_min_available_annotation():
    pods = [k8s_pod(f"p{i}", gpus=1, created=STAMP, labels={"team": "t"}) for i in range(2)]
    s = snap(*pods)
    assert (
        "gangsolve.io/min-available annotation of its team group"
        in waiting(s, "gangsolve", "team", at(1))["default/p0"].reason
    )
    pods[1]["metadata"]["annotations"]["gangsolve.io/min-available"] = "2"
    (gang,) = build_cluster(snap(*pods), group_label="team", now=at(1)).gangs
    assert gang.min_member == 2


def test_without_a_clock_or_a_grace_nothing_waits():
    s = snap(*(owned(f"w{i}", "TFJob", "mnist") for i in range(2)))
    assert len(build_cluster(s).gangs) == 1  # offline without --now
    assert len(build_cluster(s, now=at(1), grace=Grace(0)).gangs) == 1


def test_a_definition_arriving_after_some_members_were_bound_places_the_rest_together():
    """Two pods of a TFJob bound (their definition late), then its PDB says all four: the remaining two are
    placed only together, as the minimum still needs both."""
    bound = [owned(f"w{i}", "TFJob", "mnist", node_name="n1", phase="Running") for i in range(2)]
    pending = [owned(f"w{i}", "TFJob", "mnist") for i in range(2, 4)]
    s = Snapshot(nodes=[k8s_node("n1", gpus=3)], pods=[*bound, *pending], pdbs=[k8s_pdb("mnist", 4, {"job": "mnist"})])
    (gang,) = build_cluster(s, now=at(60)).gangs
    assert (gang.min_member, gang.need, len(gang.bound_nodes)) == (4, 2, 2)
    placement = solve(build_cluster(s, now=at(60)))
    assert placement.bindings == {}  # one GPU left: the two must go together, or not at all
    s = Snapshot(nodes=[k8s_node("n1", gpus=4)], pods=s.pods, pdbs=s.pdbs)  # a snapshot is decoded once
    assert set(solve(build_cluster(s, now=at(60))).bindings) == {"default/w2", "default/w3"}


def test_solve_takes_the_exports_time_as_its_clock(tmp_path):
    listing = k8s_list(k8s_node("n1", gpus=8), *(owned(f"w{i}", "TFJob", "mnist") for i in range(2)))
    listing["metadata"] = {"annotations": {"gangsolve.io/snapshot-time": "2026-01-01T12:00:05Z"}}
    assert parse(orjson.dumps(listing).decode()).taken_at == at(5)
    path = tmp_path / "snap.json"
    path.write_bytes(orjson.dumps(listing))
    out = CliRunner().invoke(cli, ["solve", str(path), "-o", "json"])
    assert out.exit_code == 0, out.output
    assert "TFJob mnist" in orjson.loads(out.stdout)["waiting"]["default/w0"]
    later = CliRunner().invoke(cli, ["solve", str(path), "-o", "json", "--now", "2026-01-01T12:01:00Z"])
    assert orjson.loads(later.stdout)["waiting"] == {}
    bad = {**listing, "metadata": {"annotations": {"gangsolve.io/snapshot-time": "yesterday"}}}
    path.write_bytes(orjson.dumps(bad))
    out = CliRunner().invoke(cli, ["solve", str(path)])
    assert out.exit_code == 2
    assert "gangsolve.io/snapshot-time" in out.stderr
