"""Kueue, the real peer, on a ControlPlane: where hack/build-peers.sh put its manager, the CRDs, ClusterRole,
webhook configurations and manager configuration its own Helm chart installs, and the process itself.

Kueue does not bind pods: it admits whole workloads against quota and kube-scheduler places their pods. Its
users label each pod with a LocalQueue (`kueue.x-k8s.io/queue-name`) and a gang's pods with a pod group
(`kueue.x-k8s.io/pod-group-name`, `kueue.x-k8s.io/pod-group-total-count`); Kueue's pod webhook gates them
(scheduling gate `kueue.x-k8s.io/admission`) until their Workload is admitted, then lifts the gates and adds the
ResourceFlavor's node labels. All-or-nothing is Kueue's waitForPodsReady with blockAdmission: one admitted
workload at a time until its pods are Ready.

Its webhooks run on loopback. The chart points them (and its CRDs' conversion webhooks) at a Service, which a
control plane without kube-proxy cannot reach; here they name https://127.0.0.1:PORT instead, with a CA made
for the run. Kueue's own certificate management stays on (the chart's default, and the manager refuses to start
without it unless a fixed directory holds a metrics certificate): it finds our CA and serving certificate
already in its Secret, valid for its Service name, and keeps them, so the webhook server on loopback serves the
certificate the API server trusts.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gangsolve.bench.devcluster.controlplane import LOOPBACK, Component, ControlPlane, ControlPlaneError, free_port
from gangsolve.bench.devcluster.crds import install as install_crds
from gangsolve.bench.devcluster.volcano import helm_template, pinned_build, require_built
from gangsolve.edge.quantity import parse_quantity

API = "kueue.x-k8s.io/v1beta2"
NAMESPACE = "kueue-system"  # the chart's namespace: Kueue keeps its certificate Secret there
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
POD_GROUP_NAME_LABEL = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_TOTAL_COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
REQUIRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
COMPONENT = "kueue"
# The chart's names: the certificate rotator derives the webhook configurations' names from the Service's.
SERVICE = "kueue-webhook-service"
SECRET = "kueue-webhook-server-cert"
CA_NAME = "kueue-ca"  # the rotator keeps a CA only if it is valid for this name
MANAGER_ROLES = ("kueue-manager-role", "kueue-manager-secrets-role")
DEFAULT_FLAVOR = "default-flavor"
GPU = "nvidia.com/gpu"
# Kueue's documented all-or-nothing set-up ("Setup All-or-nothing with ready Pods"): admit one workload at a
# time until its pods are Ready, evict and requeue one that is not Ready within the timeout (its default).
WAIT_FOR_PODS_READY = {
    "timeout": "5m",
    "blockAdmission": True,
    "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 60, "backoffMaxSeconds": 3600},
}
# Kueue's fair sharing between the ClusterQueues of a cohort, with both preemption strategies its configuration
# reference lists (in its order), and admission fair sharing (LocalQueues ordered by their decayed usage).
FAIR_SHARING = {"preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]}
ADMISSION_FAIR_SHARING = {"usageHalfLifeTime": "168h", "usageSamplingInterval": "5m", "resourceWeights": {GPU: 1}}


@dataclass(frozen=True)
class Kueue:
    """Kueue's manager at the pinned version and the Helm chart of the same release, as built into the cache."""

    version: str
    home: Path  # <cache>/bin/kueue-<version>: kueue and chart/

    @property
    def binary(self) -> Path:
        return self.home / "kueue"

    @property
    def chart(self) -> Path:
        return self.home / "chart"

    @classmethod
    def locate(cls) -> Kueue:
        found = cls(*pinned_build("KUEUE_VERSION", "kueue"))
        how = "from its Go module (hack/build-peers.sh; about 12 minutes on 2 cores)"
        require_built("Kueue's manager", found.version, (found.binary,), found.chart, how)
        return found

    def render_chart(self, helm: Path) -> list[dict]:
        """Every object the chart installs by default, as helm renders them."""
        return helm_template(helm, self.chart, "kueue", NAMESPACE)


def chart_manager_config(chart: list[dict]) -> dict[str, Any]:
    """The manager configuration the chart installs (its ConfigMap's controller_manager_config.yaml)."""
    config_map = next(d for d in chart if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "kueue-manager-config")
    return yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])


def manager_config(
    chart_conf: dict[str, Any],
    *,
    webhook_port: int,
    health_port: int,
    cert_dir: Path,
    qps: float | None = None,
    block_admission: bool = True,
    fair: bool = False,
) -> dict[str, Any]:
    """The chart's configuration as the bench runs it: waitForPodsReady for all-or-nothing gangs (without
    `block_admission`: admitting on while earlier workloads wait for their pods, evicting those not Ready within
    the timeout), the pod integration only (the bench's users create plain pods), one process on loopback (no
    leader election, webhook and probes on 127.0.0.1, no metrics or visibility server: nothing here reads them),
    the scenario's client QPS where it sets one; with `fair`, fair sharing and admission fair sharing."""
    conf = {k: v for k, v in chart_conf.items() if k not in ("leaderElection", "metrics")}
    conf.update(
        {
            "namespace": NAMESPACE,
            "leaderElection": {"leaderElect": False},
            "health": {"healthProbeBindAddress": f"{LOOPBACK}:{health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"host": LOOPBACK, "port": webhook_port, "certDir": str(cert_dir)},
            "integrations": {"frameworks": ["pod"]},
            "waitForPodsReady": {**WAIT_FOR_PODS_READY, "blockAdmission": block_admission},
            "featureGates": {"VisibilityOnDemand": False},
        }
    )
    if qps is not None:
        conf["clientConnection"] = {"qps": qps, "burst": int(qps)}
    if fair:
        conf["fairSharing"] = FAIR_SHARING
        conf["admissionFairSharing"] = ADMISSION_FAIR_SHARING
    return conf


# --- certificates -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WebhookCerts:
    ca: bytes
    ca_key: bytes
    cert: bytes
    key: bytes


def webhook_certs(days: int = 3650) -> WebhookCerts:
    """A CA named as Kueue's rotator names its own, and a serving certificate from it good for both the Service
    name the rotator checks and 127.0.0.1, where the API server calls the webhooks."""

    def key_pem(key: rsa.RSAPrivateKey) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
        )

    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    until = now + datetime.timedelta(days=days)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kueue"), x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)]
    )
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )  # digital signature, certificate and CRL signing
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(CA_NAME)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{SERVICE}.{NAMESPACE}.svc")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(f"{SERVICE}.{NAMESPACE}.svc"), x509.IPAddress(ipaddress.ip_address(LOOPBACK))]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return WebhookCerts(ca.public_bytes(pem), key_pem(ca_key), leaf.public_bytes(pem), key_pem(key))


# --- the chart's objects, pointed at loopback ---------------------------------------------------------------------


def on_loopback(chart: list[dict], webhook_port: int, ca: bytes) -> list[dict]:
    """The chart's webhook configurations and CRDs with every Service reference replaced by the URL of the
    webhook server on loopback, and `ca` as their CA bundle."""
    bundle = base64.b64encode(ca).decode()

    def client_config(config: dict) -> dict:
        path = config["service"].get("path", "/")
        return {"url": f"https://{LOOPBACK}:{webhook_port}{path}", "caBundle": bundle}

    out = []
    for obj in chart:
        kind = obj["kind"]
        if kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            hooks = [{**h, "clientConfig": client_config(h["clientConfig"])} for h in obj["webhooks"]]
            out.append({**obj, "metadata": {"name": obj["metadata"]["name"]}, "webhooks": hooks})
        elif kind == "CustomResourceDefinition":
            conversion = obj["spec"].get("conversion") or {}
            if conversion.get("strategy") == "Webhook":
                webhook = {
                    **conversion["webhook"],
                    "clientConfig": client_config(conversion["webhook"]["clientConfig"]),
                }
                obj = {**obj, "spec": {**obj["spec"], "conversion": {**conversion, "webhook": webhook}}}
            out.append(obj)
    return out


def _binding(kind: str, role: dict, user: str) -> dict:
    meta = {"name": role["metadata"]["name"], **({"namespace": NAMESPACE} if kind == "RoleBinding" else {})}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role["kind"], "name": role["metadata"]["name"]},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }


def install(cp: ControlPlane, kueue: Kueue, webhook_port: int, user: str = "system:kube-scheduler") -> WebhookCerts:
    """Kueue's CRDs, the chart's manager roles bound to `user`, its namespace and certificate Secret (holding
    certificates made here), and its webhook configurations pointed at `webhook_port` on loopback.

    Call it after the objects Kueue should not see are created: the pod webhooks fail closed, so every pod
    created outside kube-system and kueue-system needs the manager running."""
    chart = kueue.render_chart(cp.binaries.helm)
    certs = webhook_certs()
    pointed = on_loopback(chart, webhook_port, certs.ca)
    install_crds(cp, *[o for o in pointed if o["kind"] == "CustomResourceDefinition"])
    cp.create_namespace(NAMESPACE)
    for role in (o for o in chart if o["kind"] in ("ClusterRole", "Role") and o["metadata"]["name"] in MANAGER_ROLES):
        if role["kind"] == "ClusterRole":
            cp.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
            cp.request(
                "POST",
                "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                _binding("ClusterRoleBinding", role, user),
            )
        else:
            roles = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}"
            cp.request("POST", f"{roles}/roles", role)
            cp.request("POST", f"{roles}/rolebindings", _binding("RoleBinding", role, user))
    data = {"ca.crt": certs.ca, "ca.key": certs.ca_key, "tls.crt": certs.cert, "tls.key": certs.key}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": NAMESPACE},
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }
    cp.request("POST", f"/api/v1/namespaces/{NAMESPACE}/secrets", secret)
    for obj in pointed:
        if obj["kind"] == "MutatingWebhookConfiguration":
            cp.request("POST", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", obj)
        elif obj["kind"] == "ValidatingWebhookConfiguration":
            cp.request("POST", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", obj)
    return certs


# --- the process --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KueueProcess:
    """Kueue's manager as a component of a ControlPlane (stopped with it, watched by its check_alive)."""

    manager: Component
    health_port: int
    config: dict[str, Any]


def add(
    cp: ControlPlane,
    kueue: Kueue,
    certs: WebhookCerts,
    webhook_port: int,
    *,
    qps: float | None = None,
    block_admission: bool = True,
    fair: bool = False,
) -> KueueProcess:
    """Kueue's manager (the chart's configuration as manager_config changes it, the chart's `--zap-log-level=2`,
    as kube-scheduler's user), added to `cp`, not started; its serving certificate written where the manager
    reads it (in a cluster: the Secret mounted by the kubelet)."""
    assert cp.workdir is not None
    cert_dir = cp.workdir / "kueue-certs"
    cert_dir.mkdir(exist_ok=True)
    (cert_dir / "tls.crt").write_bytes(certs.cert)
    (cert_dir / "tls.key").write_bytes(certs.key)
    (cert_dir / "tls.key").chmod(0o600)
    chart = kueue.render_chart(cp.binaries.helm)
    health = free_port()
    conf = manager_config(
        chart_manager_config(chart),
        webhook_port=webhook_port,
        health_port=health,
        cert_dir=cert_dir,
        qps=qps,
        block_admission=block_admission,
        fair=fair,
    )
    conf_path = cp.workdir / "kueue-config.yaml"
    conf_path.write_text(yaml.safe_dump(conf, sort_keys=False))
    argv: list[str | Path] = [kueue.binary, f"--config={conf_path}", "--zap-log-level=2"]
    env = {"KUBECONFIG": str(cp.scheduler_kubeconfig), "PATH": "/usr/bin:/bin"}
    made = KueueProcess(Component(COMPONENT, argv, cp.workdir / "logs", cp.workdir, env=env), health, conf)
    cp.components[COMPONENT] = made.manager
    return made


def start(cp: ControlPlane, process: KueueProcess, timeout: float = 90.0) -> int:
    """Start the manager; return its pid once it answers /readyz (its webhooks serve: Kueue's readiness waits
    for its certificates and its webhook server)."""
    process.manager.start()
    deadline = time.monotonic() + timeout
    while not _ready(process.health_port):
        if not process.manager.alive():
            assert process.manager.process is not None
            raise process.manager.failure(f"exited with code {process.manager.process.returncode} while starting")
        if time.monotonic() > deadline:
            raise process.manager.failure(f"not ready within {timeout:.0f}s (/readyz)")
        time.sleep(0.2)
    if process.manager.pid is None:
        raise ControlPlaneError("kueue has no pid")
    return process.manager.pid


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/readyz", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


# --- queues -------------------------------------------------------------------------------------------------------


def resource_flavor(
    name: str, node_labels: dict[str, str] | None = None, taints: list[dict] | None = None, topology: str | None = None
) -> dict:
    spec: dict[str, Any] = {}
    if topology:
        spec["topologyName"] = topology
    if node_labels:
        spec["nodeLabels"] = node_labels
    if taints:
        spec["nodeTaints"] = taints
    return {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


@dataclass(frozen=True)
class GpuPool:
    """The GPU nodes of one ResourceFlavor: the labels that select them, their taints, their GPUs for Kueue."""

    flavor: str
    node_labels: dict[str, str]
    taints: list[dict]
    gpus: int
    cpu: Decimal = Decimal(0)  # the pool's free CPU cores and memory bytes (quota of a TAS flavor)
    memory: Decimal = Decimal(0)


def cluster_queue(
    name: str,
    cpu: Decimal,
    memory: Decimal,
    pools: Iterable[GpuPool],
    *,
    cohort: str | None = None,
    fair_weight: str | None = None,
    preemption: dict[str, str] | None = None,
    admission_fair_sharing: bool = False,
) -> dict:
    """A ClusterQueue as Kueue's documentation sets one up for GPUs: CPU and memory under one flavor that names
    no nodes, and GPUs in a resource group of their own with a flavor per GPU pool (so a GPU pod is admitted
    against its pool's GPUs and sent to its nodes). The queueing strategy is the default, BestEffortFIFO."""
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory"],
                "flavors": [
                    {
                        "name": DEFAULT_FLAVOR,
                        "resources": [
                            {"name": "cpu", "nominalQuota": _quantity(cpu)},
                            {"name": "memory", "nominalQuota": _quantity(memory)},
                        ],
                    }
                ],
            }
        ],
    }
    gpu_flavors = [{"name": p.flavor, "resources": [{"name": GPU, "nominalQuota": str(p.gpus)}]} for p in pools]
    if gpu_flavors:
        spec["resourceGroups"].append({"coveredResources": [GPU], "flavors": gpu_flavors})
    if cohort:
        spec["cohortName"] = cohort
    if fair_weight is not None:
        spec["fairSharing"] = {"weight": fair_weight}
    if preemption:
        spec["preemption"] = preemption
    if admission_fair_sharing:  # its LocalQueues ordered by their decayed usage (the manager's admissionFairSharing)
        spec["admissionScope"] = {"admissionMode": "UsageBasedAdmissionFairSharing"}
    return {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


# Fair sharing between teams as Kueue's documentation sets it up: reclaim what others borrowed of one's nominal
# quota whatever their priority, and preempt lower priorities in one's own queue.
TEAM_PREEMPTION = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}


def team_queues(
    teams: dict[str, str],
    cpu: Decimal,
    memory: Decimal,
    pools: list[GpuPool],
    cohort: str = "teams",
    *,
    namespace: str | None = None,
    caps: dict[str, int] | None = None,
) -> list[dict]:
    """One ClusterQueue per team (team -> its fair-sharing weight) in one cohort, each with its weight's share
    of the capacity as its nominal quota (GPUs split whole by largest remainder) and free to borrow the rest,
    up to its GPU cap where `caps` gives one (a borrowing limit of the cap less its quota), fair sharing and
    admission fair sharing on; a LocalQueue named after the team in `namespace` (else the team's own); the
    ResourceFlavors first."""
    weights = {team: Decimal(w) for team, w in teams.items()}
    total = sum(weights.values())
    out = [resource_flavor(DEFAULT_FLAVOR), *(resource_flavor(p.flavor, p.node_labels, p.taints) for p in pools)]
    gpus = {p.flavor: _split(p.gpus, weights) for p in pools}
    for team, weight in teams.items():
        shares = [GpuPool(p.flavor, p.node_labels, p.taints, gpus[p.flavor][team]) for p in pools]
        queue = cluster_queue(
            team,
            cpu * weights[team] / total,
            memory * weights[team] / total,
            shares,
            cohort=cohort,
            fair_weight=weight,
            preemption=TEAM_PREEMPTION,
            admission_fair_sharing=True,
        )
        if caps and team in caps:
            for flavor in queue["spec"]["resourceGroups"][-1]["flavors"]:
                for r in flavor["resources"]:
                    r["borrowingLimit"] = str(max(0, caps[team] - int(r["nominalQuota"])))
        out += [queue, local_queue(team, namespace or team, team)]
    return out


def _split(whole: int, weights: dict[str, Decimal]) -> dict[str, int]:
    """`whole` split in proportion to `weights`, whole units, the remainder to the largest fractions."""
    total = sum(weights.values())
    exact = {k: whole * w / total for k, w in weights.items()}
    out = {k: int(v) for k, v in exact.items()}
    for k in sorted(exact, key=lambda k: exact[k] - out[k], reverse=True)[: whole - sum(out.values())]:
        out[k] += 1
    return out


def local_queue(name: str, namespace: str, cluster_queue_name: str) -> dict:
    return {
        "apiVersion": API,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue_name},
    }


def _quantity(value: Decimal) -> str:
    return format(value.normalize(), "f")


def free_capacity(objs: list[dict]) -> tuple[Decimal, Decimal, list[GpuPool]]:
    """What the scenario's nodes leave free after its background pods (which Kueue does not manage, so they are
    not in its quota): CPU cores, memory bytes, and the GPU nodes grouped into pools by GPU model label and
    taints, each with its free GPUs."""
    nodes = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Node"}
    used: dict[str, dict[str, Decimal]] = {}
    for pod in (o for o in objs if o["kind"] == "Pod" and o["spec"].get("nodeName")):
        on = used.setdefault(pod["spec"]["nodeName"], {})
        for container in pod["spec"]["containers"]:
            for r, q in ((container.get("resources") or {}).get("requests") or {}).items():
                on[r] = on.get(r, Decimal(0)) + parse_quantity(q)
    cpu = memory = Decimal(0)
    pools: dict[tuple, GpuPool] = {}
    for name, node in nodes.items():
        alloc = node["status"]["allocatable"]
        taken = used.get(name, {})
        gpus = int(parse_quantity(alloc.get(GPU, "0")) - taken.get(GPU, Decimal(0)))
        free_cpu = parse_quantity(alloc["cpu"]) - taken.get("cpu", Decimal(0))
        free_memory = parse_quantity(alloc["memory"]) - taken.get("memory", Decimal(0))
        cpu, memory = cpu + free_cpu, memory + free_memory
        if not parse_quantity(alloc.get(GPU, "0")):
            continue
        labels = node["metadata"].get("labels") or {}
        selector = {k: v for k, v in labels.items() if k in GPU_POOL_LABELS}
        taints = [t for t in node.get("spec", {}).get("taints") or [] if t.get("effect") in ("NoSchedule", "NoExecute")]
        key = (tuple(sorted(selector.items())), tuple(sorted((t["key"], t.get("value", "")) for t in taints)))
        pool = pools.get(key)
        flavor = pool.flavor if pool else _flavor_name(selector, len(pools))
        before = pool or GpuPool(flavor, selector, taints, 0)
        pools[key] = GpuPool(
            flavor, selector, taints, before.gpus + gpus, before.cpu + free_cpu, before.memory + free_memory
        )
    return cpu, memory, list(pools.values())


# Node labels that tell GPU pools apart (a ResourceFlavor's nodeLabels): the GPU model (the synthetic clusters'
# and GPU operator's), or the users' `gpu: yes`.
GPU_POOL_LABELS = ("nvidia.com/gpu.product", "gpu")


def _flavor_name(selector: dict[str, str], index: int) -> str:
    value = next(iter(selector.values()), "") if selector else ""
    slug = "".join(c if c.isalnum() else "-" for c in value.lower()).strip("-")
    return f"gpu-{slug}" if slug and slug != "yes" else f"gpu-{index}"


def queues_for(objs: list[dict], namespace: str, queue: str = "bench") -> list[dict]:
    """The ResourceFlavors, one ClusterQueue (quota: what the background leaves free) and the namespace's
    LocalQueue for a scenario's objects."""
    cpu, memory, pools = free_capacity(objs)
    flavors = [resource_flavor(DEFAULT_FLAVOR)]
    flavors += [resource_flavor(p.flavor, p.node_labels, p.taints) for p in pools]
    return [*flavors, cluster_queue(queue, cpu, memory, pools), local_queue(queue, namespace, queue)]


# Kueue's topology-aware scheduling: a Topology whose levels are the bench's block and rack labels where every
# node carries them, and the node's hostname.
TOPOLOGY = "nodes"
HOSTNAME_LABEL = "kubernetes.io/hostname"
LEVEL_LABELS = ("topology.gangsolve.io/block", "topology.gangsolve.io/rack")
CPU_NODES_FLAVOR = "cpu-nodes"


def tas_queues_for(objs: list[dict], namespace: str, queue: str = "bench") -> list[dict]:
    """The same quota for topology-aware scheduling (TAS), where Kueue picks every pod's node from the nodes'
    free capacity before it admits: a Topology (racks and blocks where the nodes have them, then nodes), and
    every flavor a TAS flavor in one resource group
    (a TAS pod set takes all its resources from one flavor): one per GPU pool (its free CPU, memory and GPUs)
    and last one over every node (`kubernetes.io/os: linux`, which every kubelet sets: a TAS flavor must name a
    node label) for the CPU-only nodes' CPU and memory. A ClusterQueue of TAS flavors only
    gives every workload TAS without annotations (Kueue's implied, unconstrained topology request)."""
    cpu, memory, pools = free_capacity(objs)
    rest_cpu, rest_memory = cpu - sum(p.cpu for p in pools), memory - sum(p.memory for p in pools)
    nodes = [o for o in objs if o["kind"] == "Node"]
    levels = [k for k in LEVEL_LABELS if nodes and all(k in (n["metadata"].get("labels") or {}) for n in nodes)]
    topology = {
        "apiVersion": API,
        "kind": "Topology",
        "metadata": {"name": TOPOLOGY},
        "spec": {"levels": [{"nodeLabel": level} for level in (*levels, HOSTNAME_LABEL)]},
    }
    flavors = [resource_flavor(p.flavor, p.node_labels, p.taints, TOPOLOGY) for p in pools]
    flavors.append(resource_flavor(CPU_NODES_FLAVOR, {"kubernetes.io/os": "linux"}, topology=TOPOLOGY))

    def quota(name: str, cpu: Decimal, memory: Decimal, gpus: int) -> dict:
        resources = [("cpu", _quantity(cpu)), ("memory", _quantity(memory)), (GPU, str(gpus))]
        return {"name": name, "resources": [{"name": r, "nominalQuota": q} for r, q in resources]}

    spec = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory", GPU],
                "flavors": [
                    *(quota(p.flavor, p.cpu, p.memory, p.gpus) for p in pools),
                    quota(CPU_NODES_FLAVOR, rest_cpu, rest_memory, 0),
                ],
            }
        ],
    }
    cq = {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": queue}, "spec": spec}
    return [topology, *flavors, cq, local_queue(queue, namespace, queue)]


# Where pending work may take the place of running work of lower priority, as Kueue's preemption guide sets a
# ClusterQueue up for it.
PREEMPTION = {"withinClusterQueue": "LowerPriority"}


def with_preemption(queues: list[dict]) -> list[dict]:
    """`queues` with every ClusterQueue preempting within itself by priority (`PREEMPTION`)."""
    return [
        {**q, "spec": {**q["spec"], "preemption": PREEMPTION}} if q["kind"] == "ClusterQueue" else q for q in queues
    ]


def create_queues(cp: ControlPlane, queues: list[dict], timeout: float = 60.0) -> None:
    """Create the flavors and queues (through Kueue's webhooks) and wait until Kueue has taken in every
    ClusterQueue: Active, or (held) inactive for no reason but its stop policy."""
    plural = {
        "Topology": "topologies",
        "ResourceFlavor": "resourceflavors",
        "ClusterQueue": "clusterqueues",
        "LocalQueue": "localqueues",
    }
    for obj in queues:
        ns = obj["metadata"].get("namespace")
        base = f"/apis/{API}" + (f"/namespaces/{ns}" if ns else "")
        cp.request("POST", f"{base}/{plural[obj['kind']]}", obj)
    for obj in (q for q in queues if q["kind"] == "ClusterQueue"):
        name = obj["metadata"]["name"]
        expected = ("False", "Stopped") if obj["spec"].get("stopPolicy", "None") != "None" else ("True", None)
        cp.wait_for(
            partial(_taken_in, cp, name, expected),
            timeout=timeout,
            what=f"ClusterQueue {name} taken in by Kueue",
            component=COMPONENT,
        )


def _taken_in(cp: ControlPlane, name: str, expected: tuple[str, str | None]) -> bool:
    return _active(cp.get(f"/apis/{API}/clusterqueues/{name}")) == expected


def held(queue: dict) -> dict:
    """`queue` as created to admit nothing yet (a ClusterQueue with `stopPolicy: Hold`; others as they are)."""
    if queue["kind"] != "ClusterQueue":
        return queue
    return {**queue, "spec": {**queue["spec"], "stopPolicy": "Hold"}}


def release(cp: ControlPlane, queues: list[dict]) -> None:
    """Let the held ClusterQueues admit (`stopPolicy: None`)."""
    for queue in (q for q in queues if q["kind"] == "ClusterQueue"):
        path = f"/apis/{API}/clusterqueues/{queue['metadata']['name']}"
        cp.request("PATCH", path, {"spec": {"stopPolicy": "None"}}, "application/merge-patch+json")


def _active(cq: dict | None) -> tuple[str, str | None] | None:
    """A ClusterQueue's Active condition: (status, reason when not active), None before Kueue wrote one."""
    conditions = ((cq or {}).get("status") or {}).get("conditions") or []
    active = next((c for c in conditions if c["type"] == "Active"), None)
    if active is None:
        return None
    return (active["status"], None if active["status"] == "True" else active.get("reason"))


def queued(obj: dict) -> bool:
    """Whether `obj` is a pod its user gave to Kueue (it names a LocalQueue)."""
    return obj["kind"] == "Pod" and QUEUE_NAME_LABEL in (obj["metadata"].get("labels") or {})


def label_members(
    members: list[dict], group: str | None, queue: str = "bench", required_topology: str | None = None
) -> list[dict]:
    """A gang's pods as Kueue's users write them: the LocalQueue label, and for a gang of more than one pod the
    pod-group name and total count (Kueue admits the group whole: it has no minimum below the count). With
    `required_topology` (a co-located gang under TAS) the pods ask Kueue for one domain of that level instead
    of asking kube-scheduler through pod affinity, which Kueue's TAS does not read."""
    out = []
    for p in members:
        labels = {**(p["metadata"].get("labels") or {}), QUEUE_NAME_LABEL: queue}
        annotations = dict(p["metadata"].get("annotations") or {})
        spec = p["spec"]
        if group is not None and len(members) > 1:
            labels[POD_GROUP_NAME_LABEL] = group
            annotations[POD_GROUP_TOTAL_COUNT_ANNOTATION] = str(len(members))
        if required_topology:
            annotations[REQUIRED_TOPOLOGY_ANNOTATION] = required_topology
            spec = {k: v for k, v in spec.items() if k != "affinity"}
        meta = {**p["metadata"], "labels": labels, **({"annotations": annotations} if annotations else {})}
        out.append({**p, "metadata": meta, "spec": spec})
    return out
