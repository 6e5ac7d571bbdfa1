"""`gangsolve bench` end to end on a tiny scenario: table, JSON, PNG plots and snapshots."""

from __future__ import annotations

import orjson
from click.testing import CliRunner

from gangsolve.bench.runner import SCHEDULERS
from gangsolve.cli import cli
from gangsolve.gangs import build_cluster
from gangsolve.snapshot import read


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
    assert set(runs) == set(SCHEDULERS)
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


def test_list_names_scenarios_and_grids():
    result = CliRunner().invoke(cli, ["bench", "--list"])
    assert result.exit_code == 0
    assert "synthetic/1000nodes" in result.output
    assert "grid quick" in result.output
