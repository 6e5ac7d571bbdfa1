"""`gangsolve run` settings: defaults < config file < flags; every mistake is one line naming the key."""

import pytest
import yaml
from click.testing import CliRunner

from gangsolve.cli import cli
from gangsolve.live import config
from gangsolve.live.config import Config, ConfigError, build
from gangsolve.solver.model import PLAN_DEPTH


def write(tmp_path, data) -> str:
    path = tmp_path / "gangsolve.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return str(path)


def test_defaults():
    cfg = build()
    assert cfg == Config(identity=cfg.identity)
    assert cfg.scheduler_name == "gangsolve"
    assert not cfg.leader_elect
    assert cfg.metrics_host_port == ("0.0.0.0", 8080)  # not kube-scheduler's old insecure port 10251


def test_identity_is_unique_per_process_even_on_one_host():
    assert build().identity != build().identity


def test_file_then_flags(tmp_path):
    path = write(
        tmp_path,
        {
            "scheduler-name": "from-file",
            "time-limit": 5,
            "leader-elect": True,
            "group-label": "job",
            "log-format": "json",
        },
    )
    cfg = build(path, {"scheduler_name": "from-flag"})
    assert cfg.scheduler_name == "from-flag"
    assert cfg.time_limit == 5.0
    assert cfg.leader_elect
    assert cfg.group_label == "job"
    assert cfg.log_format == "json"


def test_the_queue_order_reaches_the_cycle(tmp_path):
    assert build().solve_config().order == "expansion"
    assert build(write(tmp_path, {"queue-order": "arrival"})).solve_config().order == "arrival"


def test_the_plan_relaxation_reaches_the_cycle(tmp_path):
    assert build().solve_config().plan_relaxation == 1.0
    assert build(write(tmp_path, {"plan-relaxation": 0.5})).solve_config().plan_relaxation == 0.5


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"schedulername": "x"}, "schedulername: unknown key"),
        ({"time-limit": "soon"}, "time-limit: expected a number > 0, got 'soon'"),
        ({"time-limit": 0}, "time-limit: expected a number > 0, got 0"),
        ({"bind-concurrency": 2.5}, "bind-concurrency: expected a whole number >= 1"),
        ({"leader-elect": "yes"}, "leader-elect: expected true or false, got 'yes'"),
        ({"metrics-addr": "localhost"}, "metrics-addr: expected HOST:PORT, got 'localhost'"),
        ({"log-format": "xml"}, "log-format: expected one of text, json, got 'xml'"),
        ({"queue-order": "fifo"}, "queue-order: expected one of expansion, arrival, got 'fifo'"),
        ({"plan-relaxation": -0.5}, "plan-relaxation: expected a number >= 0, got -0.5"),
        ({"leader-elect": True, "lease-duration": 5, "renew-deadline": 5}, "renew-deadline: must be shorter"),
        ({"leader-elect": True, "renew-deadline": 2, "retry-period": 2}, "retry-period: must be shorter"),
        ({"lease-duration": 7.5}, "lease-duration: expected a whole number >= 1, got 7.5"),
        ({"time-limit": float("nan")}, "time-limit: expected a number > 0, got nan"),
        ({"shutdown-grace": float("inf")}, "shutdown-grace: expected a number > 0, got inf"),
        ({"kube-api-qps": -1}, "kube-api-qps: expected a number > 0, got -1"),
        ({"reservations": -1}, "reservations: expected a whole number >= 0, got -1"),
        ({"default-runtime": "1h"}, "default-runtime: expected a number > 0, got '1h'"),
        ({"starvation-age": 0}, "starvation-age: expected a number > 0, got 0"),
        ({"cycle-interval": -1}, "cycle-interval: expected a number >= 0, got -1"),
        ({"workload-label": 7}, "workload-label: expected a string, got 7"),
        ("- a list", "expected a mapping of settings, got list"),
        ("key: [unclosed", "invalid YAML"),
    ],
)
def test_bad_file_names_the_key(tmp_path, data, message):
    with pytest.raises(ConfigError, match=None) as err:
        build(write(tmp_path, data))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def scheduler_of(cfg):
    """The live scheduler `gangsolve run` builds from `cfg`, on a fake API client (nothing is started)."""
    from gangsolve.live.run import Scheduler
    from tests.live.fake_kube import FakeKube

    class Kube(FakeKube):
        def limited(self, *_rate):
            return self

    return Scheduler(cfg, Kube())


@pytest.mark.asyncio
async def test_planning_in_time_settings_reach_the_solver_actor(tmp_path):
    data = {"reservations": 0, "default-runtime": 5400, "workload-label": "app", "starvation-age": 600}
    scheduler = scheduler_of(build(write(tmp_path, data)))
    solver = scheduler.solver
    assert (solver.config.reservations, solver.rules.starvation) == (0, 600.0)
    assert (solver.estimator.default, solver.estimator.label) == (5400.0, "app")
    assert scheduler.succeeded.resource.field_selector == "status.phase=Succeeded,spec.schedulerName=gangsolve"
    defaults = scheduler_of(build()).solver
    assert (defaults.config.reservations, defaults.estimator.default) == (PLAN_DEPTH, None)


@pytest.mark.asyncio
async def test_the_cycle_interval_reaches_the_solver_actor(tmp_path):
    assert scheduler_of(build(write(tmp_path, {"cycle-interval": 0}))).solver.cycle_interval == 0
    assert scheduler_of(build()).solver.cycle_interval == 0.2  # the default: arrivals within it solved together


@pytest.mark.asyncio
async def test_the_solver_workers_reach_each_cycle(tmp_path):
    assert scheduler_of(build(write(tmp_path, {"solver-workers": 3}))).solver.config.workers == 3
    with pytest.raises(ConfigError, match="solver-workers: expected a whole number >= 1, got 0"):
        build(write(tmp_path, {"solver-workers": 0}))


@pytest.mark.asyncio
async def test_the_solver_processes_reach_each_cycle(tmp_path, monkeypatch):
    assert scheduler_of(build(write(tmp_path, {"solver-processes": 4}))).solver.config.parallel == 4
    with pytest.raises(ConfigError, match="solver-processes: expected a whole number >= 1, got 0"):
        build(write(tmp_path, {"solver-processes": 0}))
    monkeypatch.setattr(config, "given_cores", lambda: 3)  # whatever the cores: whole unless asked (it pays only
    assert scheduler_of(build()).solver.config.parallel == 1  # at frontier scale, docs/how-it-works.md)


@pytest.mark.parametrize(
    ("cpu_max", "given"),
    [
        ("max 100000", None),  # no CPU limit: only a share of the machine
        ("150000 100000", 2),  # limits.cpu 1.5: two cores, rounded up
        ("50000 100000", 1),
        ("not a limit", None),
    ],
)
def test_the_cores_given_are_the_cpu_limit(tmp_path, monkeypatch, cpu_max, given):
    monkeypatch.setattr(config.os, "sched_getaffinity", lambda _pid: set(range(8)))
    monkeypatch.setattr(config.os, "cpu_count", lambda: 8)
    (tmp_path / "cpu.max").write_text(cpu_max + "\n")
    assert config.given_cores(tmp_path / "cpu.max") == given


def test_exclusive_cores_are_given_and_cap_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(config.os, "sched_getaffinity", lambda _pid: {2, 3, 4})  # the static CPU manager's cores
    monkeypatch.setattr(config.os, "cpu_count", lambda: 8)
    assert config.given_cores(tmp_path / "absent") == 3
    (tmp_path / "cpu.max").write_text("800000 100000\n")
    assert config.given_cores(tmp_path / "cpu.max") == 3


def test_without_an_affinity_call_the_limit_alone_decides(tmp_path, monkeypatch):
    monkeypatch.delattr(config.os, "sched_getaffinity")  # as on macOS, where `gangsolve solve` also runs
    monkeypatch.setattr(config.os, "cpu_count", lambda: 8)
    assert config.given_cores(tmp_path / "absent") is None
    (tmp_path / "cpu.max").write_text("400000 100000\n")
    assert config.given_cores(tmp_path / "cpu.max") == 4


def test_one_worker_per_core_given_less_one(monkeypatch):
    for given, workers in ((None, 1), (1, 1), (2, 1), (8, 7)):
        monkeypatch.setattr(config, "given_cores", lambda g=given: g)
        assert config.default_workers() == workers


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        build(str(tmp_path / "nope.yaml"))


def test_cli_bad_config_exits_2_with_one_line(tmp_path):
    path = write(tmp_path, {"time-limit": "soon"})
    result = CliRunner().invoke(cli, ["run", "--config", path])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"error: config {path}: time-limit: expected a number > 0, got 'soon'"
    ]


def test_cli_missing_kubeconfig_exits_2(tmp_path):
    for command in ("run", "export"):
        result = CliRunner().invoke(cli, [command, "--kubeconfig", str(tmp_path / "nope")])
        assert result.exit_code == 2
        assert result.stderr.strip() == f"error: kubeconfig {tmp_path / 'nope'}: no such file"


def test_cli_a_file_that_is_no_kubeconfig_exits_2_with_one_line_naming_it(tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text("")  # `touch ~/.kube/config`, or KUBECONFIG=/dev/null
    run = CliRunner().invoke(cli, ["run", "--kubeconfig", str(path)])
    assert run.exit_code == 2
    assert run.stderr.strip().splitlines() == [f"error: kubeconfig: {path}: empty"]
    export = CliRunner().invoke(cli, ["export", "--kubeconfig", str(path)])
    assert export.exit_code == 2
    assert export.stderr.strip().splitlines() == [f"error: export: ConfigException: {path}: empty"]
