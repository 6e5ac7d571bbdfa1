"""Queues' usage histories: how use accrues and decays, the annotation the live scheduler keeps them in, and how
a restarted scheduler (or `solve` on an export) starts from it."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import orjson
import pytest

from gangsolve.edge import usage
from gangsolve.edge.errors import InputError
from gangsolve.edge.gangs import build_cluster
from gangsolve.edge.snapshot import parse
from gangsolve.solver import Queue, QueueResult
from tests.builders import k8s_list, k8s_node, k8s_queue

HOUR = 3600.0
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def test_use_accrues_by_the_integral_of_the_decayed_share():
    # Holding the whole cluster for one half-life: the integral of 0.5^(t/h) over [0, h] is h / (2 ln 2).
    assert usage.accrue(0.0, 1.0, HOUR, HOUR) == pytest.approx(HOUR / (2 * math.log(2)))
    # Held for ever, it tends to h / ln 2; what was there halves each half-life.
    assert usage.accrue(0.0, 1.0, 100 * HOUR, HOUR) == pytest.approx(HOUR / math.log(2))
    assert usage.accrue(1000.0, 0.0, 2 * HOUR, HOUR) == pytest.approx(250.0)
    # Two steps are one: the history does not depend on how often the scheduler looks.
    assert usage.accrue(usage.accrue(50.0, 0.4, 600, HOUR), 0.4, 1200, HOUR) == pytest.approx(
        usage.accrue(50.0, 0.4, 1800, HOUR)
    )
    # No half-life: no history.
    assert usage.accrue(1000.0, 1.0, HOUR, 0.0) == 0.0


def test_the_history_starts_from_the_queue_and_accrues_what_each_cycle_saw():
    history = usage.History(HOUR)
    night = Queue("night", usage=900.0)
    assert history.at(night, 0.0) == 900.0  # first seen: what the annotation said
    results = [QueueResult("night", 1, {}, {}, 1.0, 0.5, parent="dept"), QueueResult("dept", 1, {}, {}, 1.0, 1.0)]
    history.record([night, Queue("dept")], results, 0.0)
    assert set(history.values()) == {"night"}  # a parent's history is its children's
    assert history.at(night, HOUR) == pytest.approx(usage.accrue(900.0, 1.0, HOUR, HOUR))


def test_the_annotation_round_trips_and_a_restart_reads_it_decayed():
    text = usage.write(3600.0, NOW - timedelta(hours=1))
    assert text == "3600.0 2026-12-01T08:00:00Z"
    assert usage.read(text) == (3600.0, NOW - timedelta(hours=1))
    queue = k8s_queue("night")
    queue["metadata"]["annotations"] = {usage.ANNOTATION: text}
    snap = parse(orjson.dumps(k8s_list(k8s_node("n", gpus=8), queue)).decode())
    (read,) = build_cluster(snap, now=NOW, usage_half_life=HOUR).queues
    assert read.usage == pytest.approx(1800.0)  # an hour old: halved
    (off,) = build_cluster(snap, now=NOW).queues
    assert off.usage == 0.0  # no half-life set: fair shares forget


@pytest.mark.parametrize("text", ["lots 2026-12-01T08:00:00Z", "-5 2026-12-01T08:00:00Z", "5 yesterday", "5"])
def test_a_bad_usage_annotation_names_the_queue_and_field(text):
    queue = k8s_queue("night")
    queue["metadata"]["annotations"] = {usage.ANNOTATION: text}
    snap = parse(orjson.dumps(k8s_list(k8s_node("n", gpus=8), queue)).decode())
    with pytest.raises(InputError) as caught:
        build_cluster(snap, now=NOW, usage_half_life=HOUR)
    assert str(caught.value).startswith("Queue night: metadata.annotations.gangsolve.io/usage: expected a number")
