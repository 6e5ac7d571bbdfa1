"""The live scale curve: each scheduler's decision times, read from its own Prometheus histogram or its log, and
the table that sets one shape's runs at several sizes side by side."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gangsolve.bench.devcluster import kai, volcano
from gangsolve.bench.live.live_scenarios import LIVE_GRIDS, LIVE_SCENARIOS
from gangsolve.bench.live.measurements import decision_times, session_times
from gangsolve.bench.report import curves, plots, tables

# Volcano's session histogram as vc-scheduler writes it (milliseconds), one label set.
VOLCANO = """# HELP volcano_e2e_scheduling_latency_milliseconds Duration of a single scheduling session.
# TYPE volcano_e2e_scheduling_latency_milliseconds histogram
volcano_e2e_scheduling_latency_milliseconds_bucket{le="1"} 0
volcano_e2e_scheduling_latency_milliseconds_bucket{le="10"} 60
volcano_e2e_scheduling_latency_milliseconds_bucket{le="100"} 99
volcano_e2e_scheduling_latency_milliseconds_bucket{le="1000"} 100
volcano_e2e_scheduling_latency_milliseconds_bucket{le="+Inf"} 100
volcano_e2e_scheduling_latency_milliseconds_sum 2500
volcano_e2e_scheduling_latency_milliseconds_count 100
# HELP volcano_open_session_duration_milliseconds Opening a session.
# TYPE volcano_open_session_duration_milliseconds histogram
volcano_open_session_duration_milliseconds_bucket{le="+Inf"} 7
volcano_open_session_duration_milliseconds_sum 70
volcano_open_session_duration_milliseconds_count 7
"""

# kube-scheduler's attempts: two label sets whose buckets add up; one slow attempt past the last bucket.
KUBE = """# HELP scheduler_scheduling_attempt_duration_seconds [STABLE] Scheduling attempt latency in seconds
# TYPE scheduler_scheduling_attempt_duration_seconds histogram
scheduler_scheduling_attempt_duration_seconds_bucket{profile="default-scheduler",result="scheduled",le="0.001"} 10
scheduler_scheduling_attempt_duration_seconds_bucket{profile="default-scheduler",result="scheduled",le="0.01"} 90
scheduler_scheduling_attempt_duration_seconds_bucket{profile="default-scheduler",result="scheduled",le="+Inf"} 98
scheduler_scheduling_attempt_duration_seconds_sum{profile="default-scheduler",result="scheduled"} 0.5
scheduler_scheduling_attempt_duration_seconds_count{profile="default-scheduler",result="scheduled"} 98
scheduler_scheduling_attempt_duration_seconds_bucket{profile="default-scheduler",result="unschedulable",le="0.001"} 0
scheduler_scheduling_attempt_duration_seconds_bucket{profile="default-scheduler",result="unschedulable",le="0.01"} 0
scheduler_scheduling_attempt_duration_seconds_bucket{profile="default-scheduler",result="unschedulable",le="+Inf"} 2
scheduler_scheduling_attempt_duration_seconds_sum{profile="default-scheduler",result="unschedulable"} 1.5
scheduler_scheduling_attempt_duration_seconds_count{profile="default-scheduler",result="unschedulable"} 2
# HELP scheduler_podgroup_scheduling_attempt_duration_seconds [ALPHA] Pod group attempts
# TYPE scheduler_podgroup_scheduling_attempt_duration_seconds histogram
scheduler_podgroup_scheduling_attempt_duration_seconds_bucket{le="+Inf"} 0
scheduler_podgroup_scheduling_attempt_duration_seconds_sum 0
scheduler_podgroup_scheduling_attempt_duration_seconds_count 0
"""


def test_decisions_count_mean_and_the_bucket_that_holds_99_percent_in_seconds():
    d = decision_times(VOLCANO, "volcano_e2e_scheduling_latency_milliseconds", unit=0.001)
    assert d == {
        "metric": "volcano_e2e_scheduling_latency_milliseconds",
        "count": 100,
        "mean_seconds": pytest.approx(0.025),
        "p99_at_most_seconds": pytest.approx(0.1),  # 99 of 100 within 100 ms, not all within 10 ms
        "total_seconds": pytest.approx(2.5),
        "open_seconds": 0.0,
    }


def test_label_sets_add_up_and_a_p99_past_the_last_bucket_has_no_bound():
    d = decision_times(KUBE, "scheduler_scheduling_attempt_duration_seconds")
    assert d is not None
    assert d["count"] == 100
    assert d["mean_seconds"] == pytest.approx(0.02)
    assert d["p99_at_most_seconds"] is None  # 98 of 100 within 10 ms: the 99th is in +Inf


def test_a_family_that_counted_nothing_or_is_absent_gives_none():
    assert decision_times(KUBE, "scheduler_podgroup_scheduling_attempt_duration_seconds") is None
    assert decision_times(KUBE, "volcano_e2e_scheduling_latency_milliseconds") is None
    assert decision_times("", "scheduler_scheduling_attempt_duration_seconds") is None


def _run(scheduler: str, cpu: float, decisions: dict | None) -> dict:
    return {
        "scheduler": scheduler,
        "pods_placed": 3000,
        "pods_per_second": 100.0,
        "first_bind_seconds": 2.0,
        "cpu_seconds": cpu,
        "peak_rss_mib": 500.0,
        "decisions": decisions,
        # what the other live tables read
        **{"pending_pods": 3000, "last_bind_seconds": 30.0, "gangs_complete": 1000, "gangs": 1000},
        **{"partial_gangs": 0, "stranded_gpus": 0, "gpu_useful": None, "api_requests_per_pod": 1.0, "violations": []},
    }


def test_the_curve_sets_one_shape_side_by_side_across_sizes():
    cycle = {
        "metric": "gangsolve_scheduling_cycle_duration_seconds",
        **{"count": 12, "mean_seconds": 0.5, "p99_at_most_seconds": None, "total_seconds": 6.0, "open_seconds": 0.0},
    }
    session = {
        "metric": "vc-scheduler log",
        **{"count": 0, "mean_seconds": None, "p99_at_most_seconds": None, "total_seconds": 30.0, "open_seconds": 30.0},
    }
    live = [
        {"name": f"live/{n}nodes-1000x3-burst", "mode": "burst", "runs": [_run("gangsolve", n / 1000, cycle)]}
        for n in (16384, 1000)
    ]
    live[0]["runs"].append(_run("volcano", 9.0, session))
    live += [
        {"name": "live/1000nodes-3x1000-burst", "mode": "burst", "runs": [_run("gangsolve", 1.0, None)]},  # one size
        {"name": "live/tfjob", "mode": "stream", "runs": [_run("gangsolve", 1.0, None)]},
    ]
    rows = curves.curve_rows(live)
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("1000x3-burst", "gangsolve", "1,000"),
        ("1000x3-burst", "gangsolve", "16,384"),
        ("1000x3-burst", "volcano", "16,384"),
    ]
    # 6 s deciding and 1 CPU s for 3,000 pods: 2 ms and 0.33 ms a pod
    assert rows[0][5:11] == ("cycle", "12", "500ms", "-", "2.00", "0.3")
    assert rows[1][10] == "5.5"
    assert rows[2][5:10] == ("session", "0 +1 open", "-", "-", "10.00")  # the whole run in one open session
    assert "16,384" in tables.markdown({"scenarios": [], "live": live})


def test_the_curve_is_drawn_with_each_peer_variant_in_its_peers_colour(tmp_path):
    live = [
        {"name": f"live/{n}nodes-1000x3-burst", "mode": "burst", "runs": [_run(s, n / 1000, None) for s in PEERS]}
        for n in (1000, 5000)
    ]
    (path,) = plots.plot_curves(live, tmp_path)
    assert path.name == "scale-curve-1000x3-burst.png"
    assert path.read_bytes()[:4] == b"\x89PNG"
    assert plots.color("kueue-unblocked") == plots.color("kueue") is not None
    assert plots.color("volcano-reclaim") == plots.color("volcano") != plots.color("kai-quota")
    assert plots.color("kube-scheduler-gang") != plots.color("kube-scheduler")  # a colour of its own
    assert plots.color("someone-else") is None


PEERS = ("gangsolve", "kube-scheduler", "kube-scheduler-gang", "volcano", "kai-quota", "kueue-unblocked")


def test_sessions_pair_by_id_and_one_still_open_counts_until_the_log_ends():
    t = [datetime(2026, 12, 6, 1, 0, s) for s in range(60)]
    marks = [(t[0], "a", True), (t[2], "a", False), (t[3], "b", True), (t[4], "c", False), (t[7], "b", False)]
    marks += [(t[10], "d", True), (t[40], "x", False)]  # d still open 30 s later; x never opened
    figures = session_times("log", marks)
    assert figures == {
        "metric": "log",
        "count": 2,
        "mean_seconds": pytest.approx(3.0),
        "p99_at_most_seconds": pytest.approx(4.0),
        "total_seconds": pytest.approx(2 + 4 + 30),
        "open_seconds": pytest.approx(30.0),
    }
    # Still open when the log ends: counted to its last line, not to the session's own opening mark.
    assert session_times("log", [(t[5], "e", True)], until=t[50])["open_seconds"] == pytest.approx(45.0)
    assert session_times("log", [(t[5], "e", True)])["open_seconds"] == 0.0
    assert session_times("log", []) is None


def test_volcano_and_kai_session_marks_from_their_logs():
    vc = "\n".join(
        [
            "I1206 01:15:48.794030   19953 session.go:279] Open Session cbd65ee2-3a9d with <1000> Job and <2> Queues.",
            "I1206 01:15:50.000000   19953 allocate.go:100] something else",
            "I1206 01:16:31.626145   19953 session.go:577] Close Session cbd65ee2-3a9d",
        ]
    )
    assert volcano.last_logged(vc + "\n  a continuation line", 2026) == datetime(2026, 12, 6, 1, 16, 31, 626145)
    assert list(volcano.session_marks(vc, 2026)) == [
        (datetime(2026, 12, 6, 1, 15, 48, 794030), "cbd65ee2-3a9d", True),
        (datetime(2026, 12, 6, 1, 16, 31, 626145), "cbd65ee2-3a9d", False),
    ]
    log = "\n".join(
        [
            "2026-12-06T01:07:13.869Z\tINFO\tscheduler/scheduler.go:124\t[\x1b[31m0yFbjX\x1b[0m] Start scheduling ...",
            "2026-12-06T01:07:13.900Z\tINFO\tframework/session.go:80\t[0yFbjX] Taking cluster snapshot ...",
            "2026-12-06T01:07:13.873Z\tINFO\tscheduler/scheduler.go:146\t[\x1b[31m0yFbjX\x1b[0m] End scheduling ...",
        ]
    )
    assert [(m[1], m[2]) for m in kai.session_marks(log)] == [("0yFbjX", True), ("0yFbjX", False)]
    assert kai.last_logged(log) == datetime(2026, 12, 6, 1, 7, 13, 873000, tzinfo=UTC)


def test_the_curve_grid_is_one_shape_at_every_live_size():
    grid = LIVE_GRIDS["scale-curve"]
    assert [LIVE_SCENARIOS[n].nodes for n in grid] == [1000, 5000, 16384]
    assert {n.split("nodes-", 1)[1] for n in grid} == {"1000x3-burst"}


def test_cpu_seconds_count_the_children_a_scheduler_waited_for():
    """gangsolve solves node pools in forked processes: their CPU is the scheduler's too."""
    import os
    import subprocess
    import sys

    from gangsolve.bench.live.measurements import cpu_seconds

    before = cpu_seconds(os.getpid())
    busy = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass"
    subprocess.run([sys.executable, "-c", busy], check=True)  # waited for: its CPU joins ours
    assert cpu_seconds(os.getpid()) - before >= 0.4
