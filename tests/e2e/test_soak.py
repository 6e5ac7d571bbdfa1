"""A churn soak on the real control plane: minutes, bounded loops.

Two replicas elect a leader (one that exits is started again, as its Deployment would); rounds of gangs are
created, deleted and created again under the same names; nodes are cordoned, tainted, deleted and replaced;
a poison pod (cpu 1e16) and a gated pod wait among them; the API server restarts while gangs bind, and the
leader is killed with SIGKILL mid-binding. It runs on a control plane of its own, without kube-scheduler
(tests/e2e/clusters.py says why). After every step, once the cluster has settled: a scheduler is up
and leading, no node is overcommitted (terminating pods counted: assert_cluster_sound), no gang is left
below its minimum, the poison and gated pods are unbound, and what the scheduler holds in memory is only
what exists.
"""

from __future__ import annotations

import itertools
import time

import clusters
import pytest
import yaml
from live_helpers import (
    assert_cluster_sound,
    create,
    delete_pod,
    pod,
    pod_group,
    pods,
    poll,
)

from gangsolve.live.queue import BACKOFF_MAX

pytestmark = pytest.mark.e2e


# This module's control plane, and what the suite installs on it: these override the session's fixtures, and
# every other fixture the soak takes (namespace, nodes, gangsolve processes) follows them.
@pytest.fixture(scope="module")
def control_plane(binaries):
    with clusters.control_plane(binaries, peer=False) as cp:
        yield cp


@pytest.fixture(scope="module")
def scheduler_account(control_plane, helm, tmp_path_factory):
    return clusters.install_scheduler_account(control_plane, helm, tmp_path_factory.mktemp("account"))


@pytest.fixture(scope="module")
def pod_group_crds(control_plane):
    clusters.install_pod_group_crds(control_plane)


GANGS = (("a", 4), ("b", 3), ("c", 2))  # name, size (1 GPU each): 9 GPUs, on nodes of 4
ROUNDS = 8


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


class Soak:
    def __init__(self, cp, namespace, factory, make_nodes, config):
        self.cp, self.ns, self.factory, self.make_nodes, self.config = cp, namespace, factory, make_nodes, config
        self.tag = {"gangsolve.dev/test": namespace}
        self.replicas = [factory("--config", str(config), "--leader-elect") for _ in range(2)]
        self.nodes = make_nodes(4, gpus=4, labels=self.tag)

    @property
    def scheduler(self) -> str:
        return self.replicas[0].scheduler_name

    def leader(self):
        return poll(
            lambda: next((g for g in self.replicas if g.alive() and g.metric("gangsolve_leader") == 1), None),
            timeout=30,
            what="a leader",
        )

    def create_gangs(self) -> None:
        for name, size in GANGS:
            if self.cp.get(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{self.ns}/podgroups/{name}") is None:
                create(self.cp, self.ns, pod_group("scheduling.x-k8s.io", name, size))
            for i in range(size):
                labels = {"scheduling.x-k8s.io/pod-group": name, "job": name}
                create(
                    self.cp,
                    self.ns,
                    pod(f"{name}-{i}", scheduler=self.scheduler, gpus=1, node_selector=self.tag, labels=labels),
                )

    def delete_gangs(self) -> None:
        for name, size in GANGS:
            for i in range(size):
                delete_pod(self.cp, self.ns, f"{name}-{i}")
        poll(
            lambda: not [p for p in pods(self.cp, self.ns, "job") if p["metadata"]["name"][0] in "abc"],
            timeout=60,
            what="the gangs' pods gone",
        )

    def revive(self) -> None:
        """As a Deployment would: a replica that exited (a leader that lost its lease exits 1) is started again."""
        for g in [g for g in self.replicas if not g.alive()]:
            self.replicas.remove(g)
            self.replicas.append(
                self.factory("--config", str(self.config), "--leader-elect", scheduler_name=self.scheduler)
            )

    def settled(self) -> None:
        """Every gang bound whole (they all fit on the healthy nodes), then the invariants."""

        def whole() -> bool:
            self.revive()
            items = pods(self.cp, self.ns)
            for name, size in GANGS:
                members = [p for p in items if (p["metadata"].get("labels") or {}).get("job") == name]
                if len(members) != size or not all(p["spec"].get("nodeName") for p in members):
                    return False
            return True

        poll(whole, timeout=90, what="every gang bound whole")
        assert any(g.alive() for g in self.replicas)
        self.leader()
        assert_cluster_sound(self.cp)
        for name in ("poison", "gated"):
            obj = self.cp.get(f"/api/v1/namespaces/{self.ns}/pods/{name}")
            assert obj is not None
            assert not obj["spec"].get("nodeName"), f"{name} was bound"


def test_churn_soak(control_plane, make_nodes, namespace, pod_group_crds, gangsolve_factory, tmp_path):
    config = tmp_path / "gangsolve.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "lease-duration": 4,
                "renew-deadline": 3,
                "retry-period": 0.5,
                "kube-api-qps": 20,
                "kube-api-burst": 5,
                "resync-period": 5,
            }
        )
    )
    soak = Soak(control_plane, namespace, gangsolve_factory, make_nodes, config)
    poison = pod("poison", scheduler=soak.scheduler, cpu="1e16", node_selector=soak.tag)
    gated = pod("gated", scheduler=soak.scheduler, gpus=1, node_selector=soak.tag)
    gated["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
    create(control_plane, namespace, poison)
    create(control_plane, namespace, gated)
    started = time.monotonic()

    held: list[dict[str, float]] = []
    rss: dict[int, list[int]] = {}  # leader pid -> its resident memory after each round it led
    steps = itertools.cycle(["cordon", "taint", "replace node", "restart apiserver", "kill leader"])
    for round_ in range(ROUNDS):
        soak.create_gangs()
        step = next(steps)
        if step == "cordon":
            control_plane.kubectl("cordon", soak.nodes[0])
        elif step == "taint":
            control_plane.kubectl("uncordon", soak.nodes[0])
            control_plane.kubectl("taint", "node", soak.nodes[1], "maintenance=soon:NoSchedule")
        elif step == "replace node":
            control_plane.kubectl("taint", "node", soak.nodes[1], "maintenance-")
            control_plane.delete_node(soak.nodes[2])
            soak.nodes[2] = make_nodes(1, gpus=4, labels=soak.tag)[0]
        elif step == "restart apiserver":
            control_plane.restart_apiserver()
        else:  # SIGKILL the leader while the round's gangs bind; a new process takes its place
            victim = soak.leader()
            victim.kill()
            soak.replicas.remove(victim)
            soak.replicas.append(
                gangsolve_factory("--config", str(config), "--leader-elect", scheduler_name=soak.scheduler)
            )
        soak.settled()
        leader = soak.leader()
        # Assumptions end once the watch shows the binds; the gauge follows at the next cycle.
        poll(
            lambda g=leader: g.metric("gangsolve_held_objects", 'kind="assumed"') == 0,
            timeout=30,
            what="no assumption left",
        )
        held.append(
            {
                k: leader.metric("gangsolve_held_objects", f'kind="{k}"') or 0
                for k in ("Pod", "assumed", "backoff", "feedback")
            }
        )
        rss.setdefault(leader.proc.pid, []).append(_rss_kib(leader.proc.pid))
        print(f"round {round_} ({step}): held {held[-1]}, leader RSS {rss[leader.proc.pid][-1] // 1024} MiB")
        soak.delete_gangs()

    # Memory holds what exists, round after round: the same pods (9 gang pods, poison, gated, whatever else is
    # in the cluster), no assumption left over, at most the gated pod backing off, feedback records bounded.
    assert len({h["Pod"] for h in held[2:]}) == 1, held
    assert max(h["backoff"] for h in held) <= 1, held
    assert max(h["feedback"] for h in held[2:]) <= held[2]["feedback"] + 2, held
    # The gated pod is never bound, and never hammered: a refused bind backs off up to 10 s (none is tried
    # at all once gates are read as "not ready to schedule").
    attempts = [
        e
        for e in control_plane.audit_events()
        if (e.get("objectRef") or {}).get("subresource") == "binding"
        and e["objectRef"].get("namespace") == namespace
        and e["objectRef"].get("name") == "gated"
    ]
    assert len(attempts) <= 4 + (time.monotonic() - started) / BACKOFF_MAX, len(attempts)
    # A leader's resident memory, from its second round on, grows by less than 30 MiB.
    assert any(len(series) >= 3 for series in rss.values()), rss
    for series in rss.values():
        if len(series) >= 3:
            assert series[-1] - series[1] < 30 * 1024, rss
