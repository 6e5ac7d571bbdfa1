"""The chart's `config:` values (values.schema.json) are settings `gangsolve run --config` accepts."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from gangsolve.live import config

CHART = Path(__file__).resolve().parents[1] / "charts" / "gangsolve"


def _sample(prop: dict, definitions: dict):
    if "$ref" in prop:
        prop = definitions[prop["$ref"].rsplit("/", 1)[1]]
    if "enum" in prop:
        return prop["enum"][-1]
    if prop["type"] == "array":
        return ["Notebook"]
    return {"integer": 3, "number": 1.5, "boolean": False, "string": "app"}[prop["type"]]


def test_every_config_key_the_chart_allows_is_a_scheduler_setting(tmp_path: Path) -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    props = schema["properties"]["config"]["properties"]
    values = {key: _sample(prop, schema["definitions"]) for key, prop in props.items()}
    # The chart adds the Lease's name and namespace itself.
    values.update(
        {
            "lease-name": "gs-gangsolve",
            "lease-namespace": "gangsolve-system",
            "lease-duration": 15,
            "renew-deadline": 10,
        }
    )
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(values))
    cfg = config.build(str(path))
    assert cfg.lease_namespace == "gangsolve-system"
    assert cfg.time_limit == 1.5
    assert cfg.preemption is False


def test_default_values_config_is_accepted() -> None:
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())["config"]
    assert config.from_mapping(defaults) == {"time_limit": 2.0, "log_format": "json", "shutdown_grace": 20.0}


# What the chart sets itself (flags and the Lease in templates/), so its `config:` leaves them out.
SET_BY_THE_CHART = {
    "kubeconfig",  # in-cluster
    "scheduler-name",
    "group-label",
    "leader-elect",
    "lease-name",
    "lease-namespace",
    "identity",  # each replica its own (the pod name, by default): never one value for all
    "metrics-addr",
    "plan-page",  # planPage.enabled
}


def test_the_chart_lets_users_set_every_other_setting() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    allowed = set(schema["properties"]["config"]["properties"])
    every = {name.replace("_", "-") for name in config.SETTINGS}
    assert allowed | SET_BY_THE_CHART == every
    assert not allowed & SET_BY_THE_CHART
