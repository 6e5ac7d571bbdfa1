"""Unit tests of the dev control plane's pieces that need no binaries (certificates, manifests, config)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from gangsolve.bench.devcluster import GPU_RESOURCE, Binaries, BinariesMissing, NodeSpec, Taint
from gangsolve.bench.devcluster import kwok as kwok_config
from gangsolve.bench.devcluster.binaries import cache_dir, find_versions_file, read_versions
from gangsolve.bench.devcluster.pki import CertificateAuthority, write_service_account_keys

REPO = Path(__file__).resolve().parents[1]


def test_versions_are_pinned_in_one_file() -> None:
    versions = read_versions()
    assert find_versions_file() == REPO / "hack" / "versions.env"
    assert set(versions) >= {
        "KUBERNETES_VERSION",
        "KUBERNETES_STAGING_VERSION",
        "ETCD_VERSION",
        "KWOK_VERSION",
        "HELM_VERSION",
    }
    # v1.X.Y <-> v0.X.Y
    assert versions["KUBERNETES_STAGING_VERSION"] == "v0." + versions["KUBERNETES_VERSION"].split(".", 1)[1]


def test_python_and_build_script_agree_on_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GANGSOLVE_CACHE", str(tmp_path))
    out = subprocess.run(
        ["bash", str(REPO / "hack" / "build-binaries.sh"), "--print-dir"], capture_output=True, text=True, check=True
    )
    assert Path(out.stdout.strip()) == cache_dir() / "bin" == tmp_path / "bin"


def test_missing_binaries_name_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GANGSOLVE_CACHE", str(tmp_path))
    with pytest.raises(BinariesMissing, match="make binaries") as err:
        Binaries.locate()
    assert "kube-apiserver" in str(err.value)
    assert str(tmp_path) in str(err.value)


def test_certificates_chain_to_the_ca(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    ca_cert = x509.load_pem_x509_certificate(ca.pair.cert.read_bytes())
    serving = ca.issue(
        "apiserver", common_name="kube-apiserver", server_names=("localhost",), server_ips=("127.0.0.1",)
    )
    admin = ca.issue("admin", common_name="admin", organization="system:masters")
    for pair in (serving, admin):
        cert = x509.load_pem_x509_certificate(pair.cert.read_bytes())
        cert.verify_directly_issued_by(ca_cert)
        assert pair.key.stat().st_mode & 0o077 == 0
    admin_cert = x509.load_pem_x509_certificate(admin.cert.read_bytes())
    assert admin_cert.subject.get_attributes_for_oid(x509.NameOID.ORGANIZATION_NAME)[0].value == "system:masters"
    san = (
        x509.load_pem_x509_certificate(serving.cert.read_bytes())
        .extensions.get_extension_for_class(x509.SubjectAlternativeName)
        .value
    )
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    admin_usage = admin_cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.ExtendedKeyUsageOID.CLIENT_AUTH in admin_usage
    sa = write_service_account_keys(tmp_path)
    assert b"PRIVATE KEY" in sa.read_bytes()
    assert sa.stat().st_mode & 0o077 == 0


def test_node_manifest_carries_capacity_labels_taints_and_kwok_annotation() -> None:
    spec = NodeSpec(
        "n1",
        cpu="16",
        memory="64Gi",
        pods=20,
        gpus=8,
        labels={"pool": "a"},
        taints=["gpu=true:NoSchedule", Taint("spot", effect="PreferNoSchedule"), {"key": "x", "effect": "NoExecute"}],
        extra_resources={"example.com/fpga": "2"},
    )
    m = spec.manifest()
    key, value = kwok_config.MANAGED_ANNOTATION
    assert m["metadata"]["annotations"][key] == value
    assert m["metadata"]["labels"]["pool"] == "a"
    assert m["metadata"]["labels"]["kubernetes.io/hostname"] == "n1"
    assert (
        m["status"]["capacity"]
        == m["status"]["allocatable"]
        == {"cpu": "16", "memory": "64Gi", "pods": "20", GPU_RESOURCE: "8", "example.com/fpga": "2"}
    )
    assert m["spec"]["taints"] == [
        {"key": "gpu", "value": "true", "effect": "NoSchedule"},
        {"key": "spot", "effect": "PreferNoSchedule"},
        {"key": "x", "effect": "NoExecute"},
    ]
    assert "nvidia.com/gpu" not in NodeSpec("cpu-only").capacity()


def test_kwok_stops_a_pod_a_stop_first_finalizer_holds_before_it_deletes_it() -> None:
    """A deleted pod that Kueue's finalizer holds must reach a terminal phase, as kubelet would take it there, or
    Kueue never lets it go and it holds its node's GPUs for good; any other finalizer keeps it Running."""
    by_name = {s["metadata"]["name"]: s["spec"] for s in kwok_config.stages()}
    killed, delete = by_name["gangsolve-pod-killed"], by_name["gangsolve-pod-delete"]
    assert killed["weight"] > delete.get("weight", 0)  # where both match, kwok takes only weights above 0
    match = {e["key"]: e for e in killed["selector"]["matchExpressions"]}
    assert match[".metadata.finalizers.[]"]["values"] == ["kueue.x-k8s.io/managed"]
    assert "Failed" in match[".status.phase"]["values"]  # once stopped, the delete stage alone matches
    assert "phase: Failed" in killed["next"]["statusTemplate"]


def test_kwok_config_has_node_and_pod_stages(tmp_path: Path) -> None:
    docs = list(yaml.safe_load_all(kwok_config.write_config(tmp_path / "kwok.yaml").read_text()))
    assert all(d["apiVersion"] == "kwok.x-k8s.io/v1alpha1" and d["kind"] == "Stage" for d in docs)
    kinds = [d["spec"]["resourceRef"]["kind"] for d in docs]
    assert kinds.count("Node") == 2
    assert kinds.count("Pod") == 3
    with_jobs = kwok_config.stages(job_pods_complete_after_ms=1000)
    assert len(with_jobs) == len(docs) + 1
