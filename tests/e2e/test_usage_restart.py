"""A queue's usage history survives the scheduler: one process writes it on the Queue, and the next one, started
after it stopped, starts from it (issue 24: a team that ran all night yields in the morning, even if the
scheduler restarted in between)."""

from __future__ import annotations

import pytest
import yaml
from live_helpers import bound, create, pod, pods, poll

pytestmark = pytest.mark.e2e
QUEUES = "/apis/scheduling.volcano.sh/v1beta1/queues"


def test_a_restarted_scheduler_starts_from_the_usage_history_it_finds_on_the_queue(
    control_plane, gangsolve_factory, make_nodes, namespace, pod_group_crds, tmp_path
):
    queue = f"q-{namespace}"
    create(
        control_plane,
        namespace,
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": queue}},
    )
    config = tmp_path / "gangsolve.yaml"
    config.write_text(yaml.safe_dump({"usage-half-life": 3600}))
    tag = {"gangsolve.dev/test": namespace}
    make_nodes(1, gpus=8, labels=tag)
    in_queue = {"gangsolve.io/queue": queue}

    def written() -> float:
        text = (control_plane.get(f"{QUEUES}/{queue}")["metadata"].get("annotations") or {}).get("gangsolve.io/usage")
        return float(text.split()[0]) if text else 0.0

    try:
        first = gangsolve_factory("--config", str(config))
        name = first.scheduler_name
        create(control_plane, namespace, pod("busy", scheduler=name, gpus=8, node_selector=tag, annotations=in_queue))
        poll(lambda: bound(pods(control_plane, namespace)), timeout=60, what="the queue's pod bound")
        # A pod that never fits keeps cycles coming, and each cycle accrues what the queue holds.
        create(control_plane, namespace, pod("never", scheduler=name, gpus=64, node_selector=tag))
        poll(lambda: written() >= 1.0, timeout=90, what="a usage history written on the Queue")
        control_plane.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/busy")
        poll(lambda: len(pods(control_plane, namespace)) == 1, timeout=60, what="the queue's pod gone")
        first.stop()
        before = written()

        # Nothing of the queue runs now: whatever history the next process shows, it read from the Queue.
        second = gangsolve_factory("--config", str(config), scheduler_name=name)
        label = f'queue="{queue}"'
        poll(lambda: second.metric("gangsolve_queue_usage", label) is not None, timeout=60, what="the queue's usage")
        shown = second.metric("gangsolve_queue_usage", label)
        assert shown is not None
        # Decayed by a half-life of an hour over the seconds between the two: within 1%.
        assert 0.99 * before <= shown <= before + 0.05
    finally:
        control_plane.request("DELETE", f"{QUEUES}/{queue}")
