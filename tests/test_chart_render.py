"""The Helm chart rendered and linted by the real helm, no cluster needed: lint, objects, options, schema."""

from __future__ import annotations

import pytest
import yaml

from tests.helm import CHART, CRD_NAME, Helm, only, render


@pytest.mark.parametrize(
    "sets",
    [
        (),
        (
            "replicaCount=3",
            "serviceMonitor.enabled=true",
            "groupLabel=job",
            "podDisruptionBudget.minAvailable=1",
            "crds.installPodGroup=false",
            "dashboard.enabled=true",
            "planPage.enabled=true",
        ),
    ],
)
def test_helm_lint_is_clean(helm: Helm, sets: tuple[str, ...]) -> None:
    args = ["lint", str(CHART), "--strict"]
    for s in sets:
        args += ["--set", s]
    out = helm(*args)
    assert "1 chart(s) linted, 0 chart(s) failed" in out.stdout
    assert "[WARNING]" not in out.stdout
    assert "[ERROR]" not in out.stdout


def test_template_renders_the_scheduler_deployment(helm: Helm) -> None:
    docs = render(helm)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(
        [
            "ServiceAccount",
            "ConfigMap",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Service",
            "Deployment",
            "PodDisruptionBudget",
            "CustomResourceDefinition",
        ]
    )
    deploy = only(docs, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    # One replica: no leader election; the flags are the ones `gangsolve run` takes.
    assert deploy["spec"]["replicas"] == 1
    assert container["args"] == [
        "--scheduler-name=gangsolve",
        "--config=/etc/gangsolve/config.yaml",
        "--metrics-addr=0.0.0.0:8080",
    ]
    assert container["image"] == "gangsolve:0.1.0"
    assert pod["serviceAccountName"] == only(docs, "ServiceAccount")["metadata"]["name"] == "gs-gangsolve"
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["ports"] == [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]
    assert container["resources"]["requests"]
    assert container["resources"]["limits"]["memory"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/etc/gangsolve"]["readOnly"] is True
    assert "/tmp" in mounts
    config = yaml.safe_load(only(docs, "ConfigMap")["data"]["config.yaml"])
    assert config == {
        "lease-name": "gs-gangsolve",
        "lease-namespace": "gangsolve-system",
        "time-limit": 2,
        "log-format": "json",
        "shutdown-grace": 20,
    }
    # SIGKILL never cuts the scheduler's own shutdown grace short.
    assert pod["terminationGracePeriodSeconds"] == 30
    assert only(docs, "Service")["spec"]["ports"][0]["targetPort"] == "metrics"
    assert only(docs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    crd = only(docs, "CustomResourceDefinition")
    assert crd["metadata"]["name"] == CRD_NAME
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_template_options(helm: Helm) -> None:
    docs = render(
        helm,
        "replicaCount=2",
        "groupLabel=training.example.com/job",
        "schedulerName=batch",
        "serviceMonitor.enabled=true",
        "crds.installPodGroup=false",
        "--set-json=config.time-limit=0.5",
        "--set-json=config.shutdown-grace=45.5",
        "podDisruptionBudget.minAvailable=1",
        "metrics.port=9090",
        "image.tag=dev",
    )
    (container,) = only(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    # More than one replica turns leader election on.
    assert container["args"] == [
        "--scheduler-name=batch",
        "--group-label=training.example.com/job",
        "--config=/etc/gangsolve/config.yaml",
        "--leader-elect",
        "--metrics-addr=0.0.0.0:9090",
    ]
    assert container["image"] == "gangsolve:dev"
    assert not [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    monitor = only(docs, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["selector"]["matchLabels"] == only(docs, "Service")["spec"]["selector"]
    assert only(docs, "PodDisruptionBudget")["spec"] == {
        "minAvailable": 1,
        "selector": only(docs, "Deployment")["spec"]["selector"],
    }
    assert yaml.safe_load(only(docs, "ConfigMap")["data"]["config.yaml"])["time-limit"] == 0.5
    assert only(docs, "Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 56
    # Leader election with one replica, on request.
    (one,) = only(render(helm, "leaderElection.enabled=true"), "Deployment")["spec"]["template"]["spec"]["containers"]
    assert "--leader-elect" in one["args"]


def test_the_page_of_the_plan_is_one_flag_and_no_permission_more(helm: Helm) -> None:
    def rbac(docs: list[dict]) -> list[tuple[str, list[dict]]]:
        return [(d["kind"], d["rules"]) for d in docs if d["kind"] in ("ClusterRole", "Role")]

    off, on = render(helm), render(helm, "planPage.enabled=true")
    (container,) = only(on, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert "--plan-page" in container["args"]
    (without,) = only(off, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert "--plan-page" not in without["args"]
    assert rbac(on) == rbac(off)
    assert len(rbac(on)) == 2
    # Nothing else changes: the same objects, the same Service and port.
    assert sorted(d["kind"] for d in on) == sorted(d["kind"] for d in off)
    assert only(on, "Service") == only(off, "Service")


@pytest.mark.parametrize(
    "bad",
    [
        "replicaCount=-1",
        "replicaCount=0",
        "notAValue=1",
        "config.bogus=1",
        "config.time-limit=0",
        "config.log-format=xml",
        "config.lease-duration=7.5",
        "image.pullPolicy=Sometimes",
        "metrics.port=70000",
        "schedulerName=Not_A_Name",
        "podDisruptionBudget.maxUnavailable=lots",
        "rbac.create=maybe",
        "planPage.enabled=yes",
        "planPage.path=/plan",
    ],
)
def test_values_schema_rejects_bad_values(helm: Helm, bad: str) -> None:
    out = helm("template", "gs", str(CHART), "--set", bad, check=False)
    assert out.returncode != 0
    assert "values don't meet the specifications of the schema" in out.stderr, out.stderr
