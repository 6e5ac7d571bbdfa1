"""`gangsolve bench` end to end on a tiny scenario: table, JSON, PNG plots and snapshots."""

from __future__ import annotations

import orjson
from click.testing import CliRunner

from gangsolve.bench.static.runner import PEERS_ONLY, SCHEDULERS
from gangsolve.cli import cli
from gangsolve.edge.gangs import build_cluster
from gangsolve.edge.snapshot import read
from gangsolve.solver.model import PLAN_DEPTH


def test_bench_runs_a_tiny_scenario_end_to_end(tmp_path):
    out, snaps = tmp_path / "out", tmp_path / "snapshots"
    args = [
        "bench",
        "--scenario",
        "synthetic/10nodes",
        "--repeat",
        "2",
        "--out",
        str(out),
        "--write-snapshots",
        str(snaps),
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "gangsolve" in result.output
    assert "Targets" in result.output

    results = orjson.loads((out / "results.json").read_bytes())
    (scenario,) = results["scenarios"]
    assert scenario["name"] == "synthetic/10nodes"
    runs = {r["scheduler"]: r for r in scenario["runs"]}
    assert set(runs) == set(SCHEDULERS) - set(PEERS_ONLY)  # peers run only where a scenario names them
    for r in runs.values():
        assert "error" not in r, r
        assert r["violations"] == []
        assert len(r["cycle_seconds"]) == 2
        assert r["peak_rss_mib"] > 0
    assert runs["gangsolve"]["best_bound"] >= runs["gangsolve"]["gangs_placed"]
    assert runs["gangsolve"]["gap"] is not None
    assert results["targets"]
    for png in ("quality.png", "latency.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    assert "| synthetic/10nodes |" in (out / "results.md").read_text()
    # The snapshot every scheduler saw is kept and reads back as the same cluster.
    cluster = build_cluster(read(str(snaps / "synthetic__10nodes.json")), "gangsolve")
    assert sum(len(g.pods) for g in cluster.gangs) == runs["gangsolve"]["pods"]


def test_unknown_scenario_is_a_usage_error():
    result = CliRunner().invoke(cli, ["bench", "--scenario", "nope/1node"])
    assert result.exit_code == 2
    assert "unknown scenario" in result.output


def test_a_bad_setting_is_a_usage_error_naming_it():
    result = CliRunner().invoke(cli, ["bench", "--scenario", "timeline/synthetic-100nodes", "--set", "depth=3"])
    assert result.exit_code == 2
    assert "--set" in result.output
    assert "'depth=3'" in result.output


def test_list_names_scenarios_and_grids():
    result = CliRunner().invoke(cli, ["bench", "--list"])
    assert result.exit_code == 0
    assert "synthetic/1000nodes" in result.output
    assert "grid quick" in result.output


def test_quality_against_time_runs_gangsolve_at_each_limit(tmp_path):
    out = tmp_path / "out"
    args = ["bench", "--scenario", "synthetic/10nodes", "--scheduler", "gangsolve", "--repeat", "1"]
    args += ["--quality-times", "0.5,0.2", "--quality-repeat", "2", "--out", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    (scenario,) = orjson.loads((out / "results.json").read_bytes())["scenarios"]
    runs = scenario["quality"]
    assert [r["time_limit"] for r in runs] == [0.2, 0.2, 0.5, 0.5]
    for r in runs:
        assert "error" not in r, r
        assert r["best_bound"] >= r["gangs_placed"]
        assert r["gap"] is not None
    targets = orjson.loads((out / "results.json").read_bytes())["targets"]
    assert any(t["target"].startswith("more time never gives a worse answer") for t in targets)
    assert "| synthetic/10nodes | 0.2 s |" in (out / "results.md").read_text()


def test_quality_times_must_be_seconds():
    result = CliRunner().invoke(cli, ["bench", "--quality-times", "1,soon"])
    assert result.exit_code == 2
    assert "--quality-times" in result.output


def test_settings_reach_gangsolve_on_static_scenarios(tmp_path):
    """`--set` was read by the time-based mode only; a static run now gets it too, and records it."""
    out = tmp_path / "out"
    args = ["bench", "--scenario", "synthetic/10nodes", "--scheduler", "gangsolve", "--scheduler", "greedy-gang"]
    result = CliRunner().invoke(cli, [*args, "--set", "reservations=0", "--set", "use_cpsat=false", "--out", str(out)])
    assert result.exit_code == 2  # use_cpsat is the bench's own to set: named, not ignored
    assert "use_cpsat" in result.output
    result = CliRunner().invoke(cli, [*args, "--set", "reservations=0", "--set", "parallel=2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    (scenario,) = orjson.loads((out / "results.json").read_bytes())["scenarios"]
    runs = {r["scheduler"]: r for r in scenario["runs"]}
    assert runs["gangsolve"]["settings"] == {"reservations": 0, "parallel": 2}
    assert "settings" not in runs["greedy-gang"]  # a peer runs as it is


def test_the_side_by_side_comparisons_take_the_settings_given(monkeypatch):
    """`--set` reaches the plan-cost and DRA comparisons' solver (it was read and silently dropped)."""
    from gangsolve.bench.static import dra_comparison, plan_cost

    seen = []
    monkeypatch.setattr(plan_cost, "SIZES", {30: 40})
    monkeypatch.setattr(dra_comparison, "SIZES", {10: 5})
    for module in (plan_cost, dra_comparison):

        def recording(cluster, config, real=module.solve):
            seen.append(config)
            return real(cluster, config)

        monkeypatch.setattr(module, "solve", recording)
    for mode, depths in (("--plan-cost", {0, PLAN_DEPTH}), ("--dra", {PLAN_DEPTH})):
        seen.clear()
        args = ["bench", mode, "1", "--repeat", "1", "--time-limit", "0.3", "--set", "plan_relaxation=0.25"]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output
        assert seen, mode
        assert {(c.plan_relaxation, c.time_limit) for c in seen} == {(0.25, 0.3)}, mode
        assert {c.reservations for c in seen} == depths  # the plan-cost variants keep their own depth
