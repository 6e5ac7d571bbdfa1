"""`kubectl gangsolve`'s answers, from the offline cycle on snapshots: why, queues and plan (tests/e2e/test_plugin.py
runs it on a real cluster against `gangsolve export` and `gangsolve solve`)."""

import io
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from rich.console import Console

from gangsolve import plugin
from gangsolve.cli import offline_cycle
from gangsolve.edge.snapshot import parse, read
from gangsolve.live.config import build
from gangsolve.render import as_dict
from tests.builders import k8s_node, k8s_pod, k8s_pod_group, k8s_queue

EXAMPLES = Path(__file__).parent.parent / "examples"
NOW = datetime(2026, 1, 1, 1, 0, tzinfo=UTC)
RUNTIME = "gangsolve.io/expected-runtime"


def cycle_of(snapshot, now: datetime = NOW, **settings) -> plugin.Cycle:
    snap = read(str(snapshot)) if isinstance(snapshot, Path) else parse(yaml.safe_dump_all(snapshot))
    decisions = offline_cycle(snap, build(None, settings), now, strict=True)
    return plugin.Cycle(decisions, as_dict(decisions), now)


def test_a_placed_gang_binds_now_on_the_nodes_solve_binds_it_to():
    cycle = cycle_of(EXAMPLES / "tfjob-8.yaml", **{"scheduler-name": "kube-batchd"})
    view = plugin.why(cycle, "default/mnist-worker-3")
    assert view["gang"] == "default/mnist"
    assert (view["state"], view["expectedStart"], view["unblock"]) == (
        "binds now",
        "2026-01-01T01:00:00Z",
        "nothing: it is placed",
    )
    assert view["nodes"] == sorted(set(cycle.answer["bindings"].values())) == ["apollo61", "apollo62"]
    assert plugin.why(cycle, "default/mnist") == view | {"object": "default/mnist"}


def test_a_gang_too_big_says_what_it_lacks_and_has_no_start():
    cycle = cycle_of(EXAMPLES / "tfjob-10.yaml", **{"scheduler-name": "kube-batchd"})
    view = plugin.why(cycle, "default/mnist-ps-0")
    assert view["state"] == "pending"
    assert view["reason"].startswith("needs 9 nvidia.com/gpu, 8 free on nodes matching nodeSelector gpu=yes")
    assert view["unblock"].startswith("9 nvidia.com/gpu free on nodes matching nodeSelector gpu=yes (8 now)")
    assert view["expectedStart"] is None
    assert view["nodes"] == []


def test_a_preempting_gang_waits_for_its_victims():
    cycle = cycle_of(EXAMPLES / "tfjob-preempt.yaml", **{"scheduler-name": "kube-batchd"})
    (preemptor,) = {e["for"] for e in cycle.answer["evictions"]}
    view = plugin.why(cycle, preemptor)
    assert view["state"] == "binds once pods preempted for it are gone"
    for eviction in cycle.answer["evictions"][:5]:
        assert eviction["pod"] in view["unblock"]
    assert view["nodes"] == sorted(set(cycle.answer["nominations"].values()))


def reservation_cluster() -> list[dict]:
    """n0 frees at 01:10 (its pod declares 70 minutes), n1's pod has no estimate: the starving 4-GPU gang `old`
    holds n0 from 01:20 (relaxed, the default), `quick` backfills n0 before it, `long` runs on n1 (as
    tests/test_cli.py)."""
    return [
        k8s_node("n0", gpus=4),
        k8s_node("n1", gpus=4),
        k8s_pod(
            "busy0",
            gpus=3,
            node_name="n0",
            phase="Running",
            created="2026-01-01T00:00:00Z",
            annotations={RUNTIME: "70m"},
        ),
        k8s_pod("busy1", gpus=3, node_name="n1", phase="Running", created="2026-01-01T00:00:00Z"),
        k8s_pod("old", gpus=4, owner="old", created="2025-12-31T23:30:00Z"),
        k8s_pod("quick", gpus=1, owner="quick", created="2026-01-01T00:59:00Z", annotations={RUNTIME: "5m"}),
        k8s_pod("long", gpus=1, owner="long", created="2026-01-01T00:59:30Z", annotations={RUNTIME: "2h"}),
    ]


def test_the_plan_lists_gangs_binding_now_then_reserved_ones_by_start():
    cycle = cycle_of(reservation_cluster())
    rows = plugin.plan(cycle)
    assert [(r["gang"], r["expectedStart"], r["nodes"]) for r in rows] == [
        ("default/long", "2026-01-01T01:00:00Z", ["n1"]),
        ("default/quick", "2026-01-01T01:00:00Z", ["n0"]),
        ("default/old", "2026-01-01T01:20:00Z", ["n0"]),
    ]
    old = plugin.why(cycle, "default/old")
    assert old["state"] == "reserved"
    assert old["unblock"] == "the running pods on n0 ending (expected by 2026-01-01T01:10:00Z)"


def test_a_starving_gang_without_estimates_says_how_to_give_one():
    docs = reservation_cluster()
    docs[2]["metadata"]["annotations"] = {}
    view = plugin.why(cycle_of(docs), "default/old")
    assert view["state"] == "waiting for an estimate"
    assert "gangsolve.io/expected-runtime" in view["unblock"]
    assert view["expectedStart"] is None
    assert plugin.plan(cycle_of(docs))[-1]["gang"] == "default/old"  # no start: last


def test_queues_show_shares_against_fair_shares_and_pending_gangs():
    docs = [k8s_node("n", gpus=4), k8s_queue("team-a"), k8s_queue("team-b", weight=3)]
    for gang, queue, bound in (("a1", "team-a", None), ("b1", "team-b", "n"), ("b2", "team-b", "n")):
        docs.append(k8s_pod_group(gang, 2, volcano=True, queue=queue))
        docs += [
            k8s_pod(
                f"{gang}-{i}",
                gpus=1,
                node_name=bound,
                phase="Running" if bound else "Pending",
                annotations={"scheduling.k8s.io/group-name": gang},
            )
            for i in range(2)
        ]
    cycle = cycle_of(docs, preemption=False)
    rows = {q["name"]: q for q in plugin.queues(cycle)}
    assert rows["team-a"]["pendingGangs"] == 1
    assert rows["team-b"]["pendingGangs"] == 0
    assert rows["team-b"]["share"] == 1.0
    assert rows["team-a"]["fairShare"] + rows["team-b"]["fairShare"] == pytest.approx(1.0, abs=0.01)
    assert rows["team-b"]["allocated"]["nvidia.com/gpu"] == "4"
    # Its GPUs are held by pods that declare no runtime: it waits for an estimate; its reason still says what
    # would unblock it.
    a1 = plugin.why(cycle, "default/a1-0")
    assert a1["state"] == "waiting for an estimate"
    assert plugin.unblock(a1["reason"]).startswith("2 nvidia.com/gpu free on schedulable nodes (0 now)")


def test_pods_in_no_gang_say_why():
    docs = reservation_cluster()
    docs.append(k8s_pod("gated", gpus=1, owner="gated", schedulingGates=[{"name": "kueue.x-k8s.io/admission"}]))
    docs.append(k8s_pod("other", gpus=1, scheduler="default-scheduler"))
    cycle = cycle_of(docs)
    gated = plugin.why(cycle, "default/gated")
    assert (gated["state"], gated["unblock"]) == ("gated", "kueue.x-k8s.io/admission removed")
    assert plugin.why(cycle, "default/busy0")["reason"] == "bound to node n0"
    assert plugin.why(cycle, "default/other")["reason"] == "phase Pending, schedulerName default-scheduler"
    with pytest.raises(SystemExit) as exit:
        plugin.why(cycle, "default/nothing")
    assert exit.value.code == 2


def test_a_target_that_is_no_namespaced_name_is_one_line_exit_2():
    result = CliRunner().invoke(plugin.plugin, ["why", "mnist"])
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", "error: mnist: expected NAMESPACE/NAME\n")


def _plain(print_table, rows) -> list[str]:
    out = io.StringIO()
    print_table(rows, Console(file=out, width=200))
    return out.getvalue().splitlines()


def test_tables_for_people_are_plain_aligned_text_when_piped():
    cycle = cycle_of(reservation_cluster())
    lines = _plain(plugin.print_plan, plugin.plan(cycle))
    assert lines[0] == "Plan (pending gangs, in the order they are expected to start)"
    assert lines[1].split() == ["GANG", "QUEUE", "PRIORITY", "PLACED/MIN", "START", "STATE", "NODES", "REASON"]
    assert [line.split()[0] for line in lines[2:5]] == ["default/long", "default/quick", "default/old"]
    assert lines[4].split()[4:8] == ["2026-01-01T01:20:00Z", "reserved", "n0", "needs"]
    why = _plain(plugin.print_why, plugin.why(cycle, "default/old"))
    assert why[0].split() == ["object:", "default/old"]
    assert "unblock:       the running pods on n0 ending (expected by 2026-01-01T01:10:00Z)" in why
