"""gangsolve run under faults: kube-apiserver restarted, a pod deleted while its gang is being bound, SIGTERM
during binding, and two replicas electing a leader."""

from __future__ import annotations

import pytest
import yaml
from live_helpers import (
    bound,
    create,
    delete_pod,
    events,
    pod,
    pod_group,
    pods,
    poll,
    running,
)

pytestmark = pytest.mark.e2e


def gang(cp, namespace, scheduler, name, size, tag, gpus=1):
    create(cp, namespace, pod_group("scheduling.x-k8s.io", name, size))
    for i in range(size):
        create(
            cp,
            namespace,
            pod(
                f"{name}-{i}",
                scheduler=scheduler,
                gpus=gpus,
                node_selector={"gangsolve.dev/test": tag},
                labels={"scheduling.x-k8s.io/pod-group": name, "job": name},
            ),
        )


def job_running(cp, namespace, name, size):
    return len(running(pods(cp, namespace, f"job={name}"))) == size


def test_recovers_from_apiserver_restart(control_plane, make_nodes, namespace, pod_group_crds, gangsolve_factory):
    g = gangsolve_factory()
    make_nodes(2, gpus=4, labels={"gangsolve.dev/test": namespace})
    gang(control_plane, namespace, g.scheduler_name, "before", 4, namespace)
    poll(lambda: job_running(control_plane, namespace, "before", 4), timeout=60, what="the first gang to run")

    control_plane.restart_apiserver()
    gang(control_plane, namespace, g.scheduler_name, "after", 4, namespace)
    poll(lambda: job_running(control_plane, namespace, "after", 4), timeout=90, what="a gang created after the restart")
    assert g.alive()
    assert "watch connection lost" in g.log() or "watch failed" in g.log()


def test_pod_deleted_while_its_gang_is_being_bound(
    control_plane, make_nodes, namespace, pod_group_crds, tmp_path, gangsolve_factory
):
    """Binds are slowed (a client-side API rate of 2 calls a second) so the test can delete a pod of the gang
    mid-way. The binds already made stand (Kubernetes cannot bind atomically), the deleted pod's bind fails and
    is not retried, no pod is bound twice, and when the job controller's replacement appears it completes the
    gang."""
    config = tmp_path / "gangsolve.yaml"
    config.write_text(yaml.safe_dump({"bind-concurrency": 1, "kube-api-qps": 2, "kube-api-burst": 1}))
    g = gangsolve_factory("--config", str(config))
    make_nodes(2, gpus=4, labels={"gangsolve.dev/test": namespace})
    gang(control_plane, namespace, g.scheduler_name, "job", 6, namespace)
    poll(lambda: bound(pods(control_plane, namespace, "job=job")), timeout=60, what="the first bind")
    victim = next(
        p["metadata"]["name"] for p in pods(control_plane, namespace, "job=job") if not p["spec"].get("nodeName")
    )
    delete_pod(control_plane, namespace, victim)
    poll(lambda: len(bound(pods(control_plane, namespace, "job=job"))) == 5, timeout=30, what="the other five bound")
    poll(
        lambda: "bind failed" in g.log() or "gang partly failed" in g.log() or "not bound" in g.log(),
        timeout=10,
        what="the failed bind to be logged",
    )

    # The job controller replaces the pod: gangsolve places it, completing the gang without a restart.
    create(
        control_plane,
        namespace,
        pod(
            victim,
            scheduler=g.scheduler_name,
            gpus=1,
            node_selector={"gangsolve.dev/test": namespace},
            labels={"scheduling.x-k8s.io/pod-group": "job", "job": "job"},
        ),
    )
    poll(lambda: job_running(control_plane, namespace, "job", 6), timeout=60, what="the whole gang running")
    # Events trail the binds (they share the client's rate limit): wait for all, then check none is doubled.
    scheduled = poll(
        lambda: (
            (uids := [e["regarding"]["uid"] for e in events(control_plane, namespace, "Scheduled")])
            and len(uids) >= 6
            and uids
        ),
        timeout=30,
        what="six Scheduled events",
    )
    assert len(scheduled) == len(set(scheduled)) == 6, scheduled  # one bind per pod, never two


def test_sigterm_finishes_binds_in_flight_and_exits_zero(
    control_plane, make_nodes, namespace, pod_group_crds, tmp_path, gangsolve_factory
):
    config = tmp_path / "gangsolve.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "bind-concurrency": 2,
                "kube-api-qps": 3,
                "kube-api-burst": 1,
                "leader-elect": True,
                "lease-duration": 6,
                "renew-deadline": 4,
                "retry-period": 0.5,
            }
        )
    )
    g = gangsolve_factory("--config", str(config))
    make_nodes(2, gpus=4, labels={"gangsolve.dev/test": namespace})
    poll(lambda: g.metric("gangsolve_leader") == 1, timeout=30, what="leadership")
    gang(control_plane, namespace, g.scheduler_name, "job", 6, namespace)
    poll(lambda: bound(pods(control_plane, namespace, "job=job")), timeout=60, what="the first bind")

    assert g.terminate() == 0
    assert len(bound(pods(control_plane, namespace, "job=job"))) == 6  # in-flight binds finished, none dropped
    lease = control_plane.get(gangsolve_factory.lease_path)
    assert not lease["spec"].get("holderIdentity")  # released: a successor need not wait for it to expire
    assert "released the lease" in g.log()


def test_two_replicas_one_binds_and_the_other_takes_over(
    control_plane, make_nodes, namespace, pod_group_crds, tmp_path, gangsolve_factory
):
    config = tmp_path / "gangsolve.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "leader-elect": True,
                "lease-duration": 5,
                "renew-deadline": 3,
                "retry-period": 0.5,
            }
        )
    )
    a = gangsolve_factory("--config", str(config))
    b = gangsolve_factory("--config", str(config))
    make_nodes(2, gpus=4, labels={"gangsolve.dev/test": namespace})
    leader, follower = poll(
        lambda: (a, b) if a.metric("gangsolve_leader") == 1 else (b, a) if b.metric("gangsolve_leader") == 1 else None,
        timeout=30,
        what="a leader",
    )
    gang(control_plane, namespace, a.scheduler_name, "one", 4, namespace)
    poll(lambda: job_running(control_plane, namespace, "one", 4), timeout=60, what="the first gang to run")
    assert leader.metric("gangsolve_pods_bound_total") == 4
    assert follower.metric("gangsolve_pods_bound_total") == 0
    assert follower.metric("gangsolve_leader") == 0

    leader.kill()  # no release: the follower waits for the lease to expire, then leads
    gang(control_plane, namespace, a.scheduler_name, "two", 4, namespace)
    poll(lambda: job_running(control_plane, namespace, "two", 4), timeout=30, what="the follower to take over")
    assert follower.metric("gangsolve_leader") == 1
    assert follower.metric("gangsolve_pods_bound_total") == 4


def test_leader_that_cannot_renew_stops_and_exits(control_plane, make_nodes, namespace, tmp_path, gangsolve_factory):
    """With kube-apiserver gone longer than the renew deadline, the leader stops (exit 1) rather than risk
    binding beside a successor; /healthz says why before that."""
    config = tmp_path / "gangsolve.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "leader-elect": True,
                "lease-duration": 4,
                "renew-deadline": 2,
                "retry-period": 0.5,
            }
        )
    )
    g = gangsolve_factory("--config", str(config))
    poll(lambda: g.metric("gangsolve_leader") == 1, timeout=30, what="leadership")
    control_plane.stop_apiserver(grace=0)
    try:
        poll(lambda: not g.alive(), timeout=20, what="the leader to exit")
    finally:
        control_plane.start_apiserver()
    assert g.proc.returncode == 1
    assert "lost the lease" in g.log()
