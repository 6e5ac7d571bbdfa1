"""The real peers without running them: where the bench finds Volcano, Kueue and KAI and says why it does not
run them, the PodGroups and pod-group labels their users create, Kueue's configuration, queues, certificates and
webhooks, KAI's scheduler configuration and queues, how the report names a peer's configuration, and the build
script's bad input."""

from __future__ import annotations

import json
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest

from gangsolve.bench import manifests, scenarios
from gangsolve.bench.devcluster import kai, kueue, volcano
from gangsolve.bench.live.live_scenarios import LIVE_SCENARIOS
from gangsolve.bench.live.runs import peer_not_run
from gangsolve.bench.report.tables import peer_notes

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def unbuilt_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """versions.env pinning Volcano, Kueue and KAI releases that no cache holds."""
    text = (REPO / "hack" / "versions.env").read_text()
    pinned = tmp_path / "versions.env"
    unbuilt = {
        "VOLCANO_": "VOLCANO_VERSION=v0.0.0-unbuilt",
        "KUEUE_": "KUEUE_VERSION=v0.0.0-unbuilt",
        "KAI_": "KAI_VERSION=v0.0.0-unbuilt",
    }
    pinned.write_text(
        "\n".join(
            next((pin for prefix, pin in unbuilt.items() if line.startswith(prefix)), line)
            for line in text.splitlines()
        )
    )
    monkeypatch.setenv("GANGSOLVE_VERSIONS_ENV", str(pinned))
    monkeypatch.setenv("GANGSOLVE_CACHE", str(tmp_path / "cache"))
    return "v0.0.0-unbuilt"


def test_an_unbuilt_peer_is_named_with_the_command_that_builds_it(unbuilt_version: str) -> None:
    with pytest.raises(volcano.PeerMissing, match=rf"vc-scheduler {unbuilt_version} is not built.*`make peers`"):
        volcano.Volcano.locate()
    why = peer_not_run(LIVE_SCENARIOS["live/tfjob"], "volcano")
    assert why is not None
    assert "make peers" in why
    assert peer_not_run(LIVE_SCENARIOS["live/tfjob"], "kube-scheduler") is None  # not a peer: always runs
    with pytest.raises(volcano.PeerMissing, match=rf"Kueue's manager {unbuilt_version} is not built.*`make peers`"):
        kueue.Kueue.locate()
    why = peer_not_run(LIVE_SCENARIOS["live/tfjob"], "kueue")
    assert why is not None
    assert "Kueue's manager" in why
    with pytest.raises(volcano.PeerMissing, match=rf"KAI's scheduler {unbuilt_version} is not built.*`make peers`"):
        kai.Kai.locate()
    why = peer_not_run(LIVE_SCENARIOS["live/tfjob"], "kai")
    assert why is not None
    assert "KAI's scheduler" in why


def test_on_the_topology_scenario_each_peers_users_ask_for_one_block_in_their_own_api() -> None:
    from gangsolve.bench.live.populate import arrivals

    scenario = LIVE_SCENARIOS["live/topology-seed1"]
    objs = scenario.build()
    cluster = manifests.to_cluster(objs)
    assert all(g.colocate == manifests.BLOCK_LABEL for g in cluster.gangs if len(g.pods) > 1)
    asked = {}
    for peer in ("volcano", "kai", "kueue-tas"):
        users = scenario.users(objs, peer)
        assert not any(o["kind"] == "PodGroup" for o in users)  # no scheduling.k8s.io PodGroups: not their API
        assert not any("schedulingGroup" in o["spec"] for o in users if o["kind"] == "Pod")
        asked[peer] = arrivals(users, cluster, peer, native_groups=False, topology=scenario.topology)
    for gang in asked["volcano"]:
        (group,) = gang.groups
        assert group["spec"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 2}  # racks 1, blocks 2
    for gang in asked["kai"]:
        (group,) = gang.groups
        assert group["spec"]["topologyConstraint"] == {
            "topology": kai.TOPOLOGY,
            "requiredTopologyLevel": manifests.BLOCK_LABEL,
            "preferredTopologyLevel": manifests.RACK_LABEL,
        }
    for gang in asked["kueue-tas"]:
        assert gang.groups == []
        for pod in gang.pods:
            assert pod["metadata"]["annotations"][kueue.REQUIRED_TOPOLOGY_ANNOTATION] == manifests.BLOCK_LABEL
    why = peer_not_run(scenario, "kueue")
    assert why is not None
    assert "kueue-tas" in why
    # Elsewhere Volcano's users keep the pod affinity (its predicates read it): no HyperNodes they did not ask for.
    synthetic = scenarios.synthetic(100, 40, seed=100)
    for gang in arrivals(synthetic, manifests.to_cluster(synthetic), "volcano"):
        assert "networkTopology" not in gang.groups[0]["spec"]


def test_kais_users_keep_a_synthetic_gang_in_its_rack_through_kais_topology_not_pod_affinity() -> None:
    from gangsolve.bench.live.peers import kai_levels
    from gangsolve.bench.live.populate import arrivals

    synthetic = scenarios.synthetic(100, 40, seed=100)
    cluster = manifests.to_cluster(synthetic)
    kept = {g.name for g in cluster.gangs if g.colocate == manifests.RACK_LABEL}
    assert kept  # the mix has co-located gangs
    # the Topology holds the rack: the synthetic scenarios declare no levels, the gangs' definitions name it
    assert kai_levels((), synthetic) == (manifests.RACK_LABEL,)
    assert (
        kai_levels(LIVE_SCENARIOS["live/topology-seed1"].topology, synthetic)
        == LIVE_SCENARIOS["live/topology-seed1"].topology
    )  # already there: not added twice
    for gang in arrivals(synthetic, cluster, "kai-quota"):
        (group,) = gang.groups
        if gang.gang in kept:
            assert group["spec"]["topologyConstraint"] == {
                "topology": kai.TOPOLOGY,
                "requiredTopologyLevel": manifests.RACK_LABEL,
            }
            assert all("affinity" not in p["spec"] for p in gang.pods)
        else:
            assert "topologyConstraint" not in group["spec"]


def test_volcano_hypernodes_hold_each_rack_block_and_zone_as_the_nodes_labels_say() -> None:
    scenario = LIVE_SCENARIOS["live/topology-seed1"]
    nodes = [o for o in scenario.build() if o["kind"] == "Node"]
    made = {h["metadata"]["name"]: h["spec"] for h in volcano.hypernodes(nodes, scenario.topology)}

    def members(name: str) -> set[str]:  # the nodes a HyperNode holds, by the CRD's member rules
        out: set[str] = set()
        for member in made[name]["members"]:
            selector = member["selector"]
            if member["type"] == "HyperNode":
                out |= members(selector["exactMatch"]["name"])
            else:
                wanted = selector["labelMatch"]["matchLabels"].items()
                out |= {n["metadata"]["name"] for n in nodes if wanted <= n["metadata"]["labels"].items()}
        return out

    for tier, key in ((1, manifests.RACK_LABEL), (2, manifests.BLOCK_LABEL), (3, manifests.ZONE_LABEL)):
        assert volcano.tier_of(key, scenario.topology) == tier
        domains: dict[str, set[str]] = {}
        for n in nodes:
            domains.setdefault(n["metadata"]["labels"][key], set()).add(n["metadata"]["name"])
        held = sorted(sorted(members(name)) for name, spec in made.items() if spec["tier"] == tier)
        assert held == sorted(sorted(d) for d in domains.values())  # one HyperNode per domain, exactly its nodes


def test_volcano_topology_set_up_adds_only_the_guides_plugin_to_the_scoring_tier() -> None:
    conf = {
        "actions": "enqueue, allocate, backfill",
        "tiers": [
            {"plugins": [{"name": "priority"}, {"name": "gang"}]},
            {"plugins": [{"name": "predicates"}, {"name": "binpack"}]},
        ],
    }
    with_plugin = volcano.with_network_topology(conf)
    assert with_plugin["actions"] == conf["actions"]
    assert with_plugin["tiers"][0] == conf["tiers"][0]
    assert with_plugin["tiers"][1]["plugins"][:2] == conf["tiers"][1]["plugins"]
    (added,) = with_plugin["tiers"][1]["plugins"][2:]
    assert added["name"] == "network-topology-aware"
    assert added["arguments"]["hypernode.binpack.resources"] == manifests.GPU


def test_kais_topology_lists_the_levels_widest_first_down_to_the_node() -> None:
    made = kai.topology(LIVE_SCENARIOS["live/topology-seed1"].topology)
    assert made["metadata"]["name"] == kai.TOPOLOGY
    assert [level["nodeLabel"] for level in made["spec"]["levels"]] == [
        manifests.ZONE_LABEL,
        manifests.BLOCK_LABEL,
        manifests.RACK_LABEL,
        "kubernetes.io/hostname",
    ]


def test_a_volcano_pod_group_sums_its_pods_requests_as_min_resources() -> None:
    pods = [
        {"spec": {"priorityClassName": "high", "containers": [{"resources": {"requests": r}}]}}
        for r in ({"cpu": "500m", "memory": "512Mi", "nvidia.com/gpu": "1"}, {"cpu": "1", "memory": "1Gi"})
    ]
    group = volcano.pod_group("g", 2, pods, "ns")
    assert group["metadata"] == {"name": "g", "namespace": "ns"}
    assert group["spec"] == {
        "minMember": 2,
        "queue": "default",
        "minResources": {"cpu": "1.5", "memory": str(3 * 2**29), "nvidia.com/gpu": "1"},
        "priorityClassName": "high",
    }


def test_the_report_says_which_peer_did_not_run_and_how_each_was_configured() -> None:
    conf = {"actions": "enqueue, allocate", "tiers": [{"plugins": [{"name": "gang"}]}, {"plugins": [{"name": "drf"}]}]}
    live = [
        {"name": "live/a", "runs": [{"scheduler": "volcano", "peer": {"version": "v1", "scheduler_conf": conf}}]},
        {"name": "live/b", "runs": [], "not_run": {"volcano": "not built"}},
    ]
    assert peer_notes(live) == [
        "live/b: volcano not run: not built",
        "volcano v1: actions enqueue, allocate; plugin tiers: gang; drf",
    ]
    topology = {"levels": [{"nodeLabel": "block"}, {"nodeLabel": "kubernetes.io/hostname"}]}
    live[0]["runs"] = [
        {"scheduler": "volcano", "peer": {"version": "v1", "scheduler_conf": conf, "hypernodes": 18}},
        {"scheduler": "kai", "peer": {"version": "v2", "scheduler_conf": conf, "topology": topology}},
    ]
    notes = peer_notes(live)
    assert notes[1].endswith("drf; 18 HyperNodes from the nodes' topology labels")
    assert notes[2].endswith("drf; Topology levels block, kubernetes.io/hostname")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bogus"], "unknown peer 'bogus' (known: volcano kueue kai)"),
        (["volcano", "--source", "/nonexistent"], "--source /nonexistent: not a directory"),
        (["volcano", "--source"], "--source needs a directory"),
        (["volcano", "--source", "{empty}"], "--source {empty}: neither a source tree (go.mod) nor a git repository"),
    ],
)
def test_build_script_refuses_bad_input_in_one_line_with_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    args, message = [a.format(empty=empty) for a in args], message.format(empty=empty)
    done = subprocess.run(
        ["bash", str(REPO / "hack" / "build-peers.sh"), *args],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "GANGSOLVE_CACHE": str(tmp_path), "HOME": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert f"error: {message}" in done.stderr


def test_the_gpu_binpack_variant_changes_only_the_binpack_plugins_arguments() -> None:
    conf = {
        "actions": "enqueue, allocate, backfill",
        "tiers": [{"plugins": [{"name": "gang"}]}, {"plugins": [{"name": "nodeorder"}, {"name": "binpack"}]}],
    }
    packed = volcano.with_gpu_binpack(conf)
    assert packed["tiers"][0] == conf["tiers"][0]
    assert packed["tiers"][1]["plugins"] == [
        {"name": "nodeorder"},
        {"name": "binpack", "arguments": volcano.GPU_BINPACK},
    ]
    assert "arguments" not in conf["tiers"][1]["plugins"][1]  # the chart's configuration is left as it was
    run = {"scheduler": "volcano-gpu-binpack", "peer": {"version": "v1", "scheduler_conf": packed}}
    (note,) = peer_notes([{"name": "live/a", "runs": [run]}])
    assert "binpack (binpack.weight: 10, binpack.cpu: 5" in note
    assert "binpack.resources: nvidia.com/gpu" in note


# --- Kueue ------------------------------------------------------------------------------------------------------

CHART_CONF = {  # the shape of the chart's controller_manager_config.yaml
    "apiVersion": "config.kueue.x-k8s.io/v1beta2",
    "kind": "Configuration",
    "controller": {"groupKindConcurrency": {"Pod": 5}},
    "health": {"healthProbeBindAddress": ":8081"},
    "integrations": {"frameworks": ["batch/job", "pod", "deployment"]},
    "internalCertManagement": {"enable": True, "webhookServiceName": kueue.SERVICE, "webhookSecretName": kueue.SECRET},
    "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
    "metrics": {"bindAddress": ":8443"},
    "webhook": {"port": 9443},
}


def test_kueue_runs_the_charts_configuration_with_pods_ready_gangs_on_loopback(tmp_path: Path) -> None:
    conf = kueue.manager_config(CHART_CONF, webhook_port=1234, health_port=5678, cert_dir=tmp_path, qps=5000.0)
    assert conf["waitForPodsReady"] == kueue.WAIT_FOR_PODS_READY
    assert conf["waitForPodsReady"]["blockAdmission"] is True  # admission one gang at a time: Kueue's all-or-nothing
    assert conf["integrations"] == {"frameworks": ["pod"]}
    assert conf["webhook"] == {"host": "127.0.0.1", "port": 1234, "certDir": str(tmp_path)}
    assert conf["health"] == {"healthProbeBindAddress": "127.0.0.1:5678"}
    assert conf["leaderElection"] == {"leaderElect": False}
    assert conf["clientConnection"] == {"qps": 5000.0, "burst": 5000}
    # What the chart sets and the bench has no reason to change stays: its certificate management, concurrency.
    assert conf["internalCertManagement"] == CHART_CONF["internalCertManagement"]
    assert conf["controller"] == CHART_CONF["controller"]
    assert "fairSharing" not in conf
    assert "admissionFairSharing" not in conf
    unblocked = kueue.manager_config(
        CHART_CONF, webhook_port=1, health_port=2, cert_dir=tmp_path, block_admission=False
    )
    assert unblocked["waitForPodsReady"] == {**kueue.WAIT_FOR_PODS_READY, "blockAdmission": False}
    fair = kueue.manager_config(CHART_CONF, webhook_port=1, health_port=2, cert_dir=tmp_path, fair=True)
    assert fair["fairSharing"]["preemptionStrategies"] == ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
    assert fair["admissionFairSharing"]["usageHalfLifeTime"] == "168h"
    assert "clientConnection" not in fair  # the chart's own limits where the scenario sets none
    assert CHART_CONF["integrations"]["frameworks"] == ["batch/job", "pod", "deployment"]  # the chart's is untouched


def _gpu_node(name: str, model: str, gpus: int, taints: list[dict] | None = None) -> dict:
    return manifests.node(name, 32000, 256 * 1024, gpus, {manifests.GPU_MODEL_LABEL: model}, taints)


def test_kueue_quota_is_what_the_background_leaves_free_per_gpu_pool() -> None:
    taint = {"key": "dedicated", "value": "h100", "effect": "NoSchedule"}
    objs = [
        _gpu_node("a-0", "A100", 8),
        _gpu_node("a-1", "A100", 8),
        _gpu_node("h-0", "H100", 8, [taint]),
        manifests.node("cpu-0", 64000, 256 * 1024),
        manifests.pod("bg-0", 4000, 32 * 1024, 3, node_name="a-0"),
        manifests.pod("bg-1", 1000, 1024, node_name="cpu-0"),
        manifests.pod("pending", 1000, 1024, 1),  # not bound: not taken from the quota
    ]
    queues = kueue.queues_for(objs, "bench")
    kinds = [q["kind"] for q in queues]
    assert kinds == ["ResourceFlavor"] * 3 + ["ClusterQueue", "LocalQueue"]
    flavors = {q["metadata"]["name"]: q["spec"] for q in queues if q["kind"] == "ResourceFlavor"}
    assert flavors == {
        "default-flavor": {},  # CPU and memory: no node labels, so no node selector added to CPU-only pods
        "gpu-a100": {"nodeLabels": {manifests.GPU_MODEL_LABEL: "A100"}},
        "gpu-h100": {"nodeLabels": {manifests.GPU_MODEL_LABEL: "H100"}, "nodeTaints": [taint]},
    }
    (cq,) = [q for q in queues if q["kind"] == "ClusterQueue"]
    cpu_memory, gpus = cq["spec"]["resourceGroups"]
    assert cpu_memory["coveredResources"] == ["cpu", "memory"]
    assert cpu_memory["flavors"][0]["resources"] == [
        {"name": "cpu", "nominalQuota": str(32 * 3 + 64 - 4 - 1)},
        {"name": "memory", "nominalQuota": str((4 * 256 * 1024 - 32 * 1024 - 1024) * 2**20)},
    ]
    assert gpus == {
        "coveredResources": ["nvidia.com/gpu"],
        "flavors": [
            {"name": "gpu-a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "13"}]},
            {"name": "gpu-h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "8"}]},
        ],
    }
    local = queues[-1]
    assert (local["metadata"], local["spec"]) == ({"name": "bench", "namespace": "bench"}, {"clusterQueue": "bench"})
    assert kueue.held(cq)["spec"]["stopPolicy"] == "Hold"
    assert "stopPolicy" not in cq["spec"]
    assert kueue.held(local) is local


def test_kueue_users_label_a_gang_as_a_pod_group_and_a_single_pod_only_with_its_queue() -> None:
    members = [{"metadata": {"name": f"p{i}", "labels": {"app": "x"}}, "spec": {}} for i in range(3)]
    group = kueue.label_members(members, "gang-a")
    for p in group:
        assert p["metadata"]["labels"] == {
            "app": "x",
            kueue.QUEUE_NAME_LABEL: "bench",
            kueue.POD_GROUP_NAME_LABEL: "gang-a",
        }
        assert p["metadata"]["annotations"] == {kueue.POD_GROUP_TOTAL_COUNT_ANNOTATION: "3"}
    (single,) = kueue.label_members(members[:1], "gang-b")
    assert single["metadata"]["labels"] == {"app": "x", kueue.QUEUE_NAME_LABEL: "bench"}
    assert "annotations" not in single["metadata"]
    assert members[0]["metadata"]["labels"] == {"app": "x"}  # the scenario's objects are left as they were


def test_kueue_users_create_no_group_object_and_leave_the_pods_to_kube_scheduler() -> None:
    from gangsolve.bench.live.populate import arrivals

    objs = scenarios.synthetic(100, 40, seed=100)
    cluster = manifests.to_cluster(objs)
    for arrival in arrivals(objs, cluster, "kueue"):
        assert arrival.groups == []
        for p in arrival.pods:
            assert p["spec"]["schedulerName"] == "default-scheduler"
            assert p["metadata"]["labels"][kueue.QUEUE_NAME_LABEL] == "bench"
            if len(arrival.pods) > 1:
                assert p["metadata"]["labels"][kueue.POD_GROUP_NAME_LABEL] == "gang-" + arrival.gang.split("/")[1]


def test_kueue_webhooks_and_conversions_call_loopback_with_the_runs_ca() -> None:
    service = {"service": {"name": kueue.SERVICE, "namespace": kueue.NAMESPACE, "path": "/mutate--v1-pod"}}
    chart = [
        {
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "kueue-mutating-webhook-configuration", "namespace": kueue.NAMESPACE},
            "webhooks": [{"name": "mpod.kb.io", "clientConfig": service, "failurePolicy": "Fail"}],
        },
        {
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "workloads.kueue.x-k8s.io"},
            "spec": {
                "conversion": {
                    "strategy": "Webhook",
                    "webhook": {"clientConfig": {"service": {**service["service"], "path": "/convert"}}},
                }
            },
        },
        {"kind": "CustomResourceDefinition", "metadata": {"name": "topologies.kueue.x-k8s.io"}, "spec": {}},
        {"kind": "Deployment", "metadata": {"name": "kueue-controller-manager"}},  # the bench runs the process
    ]
    hook, workloads, topologies = kueue.on_loopback(chart, 9443, b"CA")
    assert hook["metadata"] == {"name": "kueue-mutating-webhook-configuration"}  # cluster-scoped: no namespace
    assert hook["webhooks"] == [
        {
            "name": "mpod.kb.io",
            "failurePolicy": "Fail",
            "clientConfig": {"url": "https://127.0.0.1:9443/mutate--v1-pod", "caBundle": "Q0E="},
        }
    ]
    assert workloads["spec"]["conversion"]["webhook"]["clientConfig"] == {
        "url": "https://127.0.0.1:9443/convert",
        "caBundle": "Q0E=",
    }
    assert topologies == chart[2]


def test_kueue_certificates_pass_its_rotators_checks_and_the_api_servers() -> None:
    """Kueue's rotator keeps a Secret's certificates only if the CA is valid for `kueue-ca` and the serving
    certificate for its Service's name; the API server calls 127.0.0.1."""
    import ipaddress

    from cryptography import x509

    certs = kueue.webhook_certs()
    ca = x509.load_pem_x509_certificate(certs.ca)
    leaf = x509.load_pem_x509_certificate(certs.cert)
    leaf.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName
    ) == [kueue.CA_NAME]
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == [f"{kueue.SERVICE}.{kueue.NAMESPACE}.svc"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert leaf.not_valid_after_utc.year - leaf.not_valid_before_utc.year >= 9  # beyond the rotator's lookahead


def test_the_report_shows_kueues_admission_settings_and_quotas() -> None:
    objs = [_gpu_node("a-0", "A100", 8)]
    conf = kueue.manager_config(CHART_CONF, webhook_port=1, health_port=2, cert_dir=Path("certs"))
    run = {
        "scheduler": "kueue",
        "peer": {"version": "v9", "manager_config": conf, "queues": kueue.queues_for(objs, "b")},
    }
    (note,) = peer_notes([{"name": "live/a", "runs": [run]}])
    assert note.startswith("kueue v9: waitForPodsReady (timeout 5m, blockAdmission True); frameworks pod; ")
    assert "ClusterQueue bench (BestEffortFIFO): default-flavor cpu=32, memory=" in note
    assert note.endswith("; gpu-a100 nvidia.com/gpu=8")


def test_kueue_tas_gives_each_pool_one_flavor_with_all_its_resources_on_a_node_topology() -> None:
    """A TAS pod set takes all its resources from one flavor, and a TAS flavor must name a node label: each GPU
    pool's flavor holds its free CPU, memory and GPUs; the last flavor, over every node, the CPU-only nodes'."""
    objs = [
        _gpu_node("a-0", "A100", 8),
        manifests.node("cpu-0", 64000, 256 * 1024),
        manifests.pod("bg-0", 4000, 32 * 1024, 3, node_name="a-0"),
        manifests.pod("bg-1", 1000, 1024, node_name="cpu-0"),
    ]
    topology, a100, cpu_nodes, cq, local = kueue.tas_queues_for(objs, "bench")
    assert (topology["kind"], topology["spec"]) == ("Topology", {"levels": [{"nodeLabel": "kubernetes.io/hostname"}]})
    assert a100["spec"] == {"topologyName": "nodes", "nodeLabels": {manifests.GPU_MODEL_LABEL: "A100"}}
    assert cpu_nodes["spec"] == {"topologyName": "nodes", "nodeLabels": {"kubernetes.io/os": "linux"}}
    (group,) = cq["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
    quotas = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]} for f in group["flavors"]}
    assert quotas == {
        "gpu-a100": {"cpu": "28", "memory": str((256 - 32) * 2**30), "nvidia.com/gpu": "5"},
        "cpu-nodes": {"cpu": "63", "memory": str((256 - 1) * 2**30), "nvidia.com/gpu": "0"},
    }
    assert [f["name"] for f in group["flavors"]][-1] == "cpu-nodes"  # GPU pools first: CPU pods fall through
    assert local["spec"] == {"clusterQueue": "bench"}


def test_kueue_teams_share_one_cohort_fairly_and_reclaim_what_was_lent() -> None:
    pools = [kueue.GpuPool("gpu-a100", {manifests.GPU_MODEL_LABEL: "A100"}, [], 10)]
    teams = {"team-a": "2", "team-b": "1", "team-c": "1"}
    queues = kueue.team_queues(teams, Decimal(40), Decimal(4 * 2**30), pools, caps={"team-b": 4})
    # The flavors the queues name come first: a ClusterQueue naming a missing one is never active.
    assert [q["metadata"]["name"] for q in queues[:2]] == [kueue.DEFAULT_FLAVOR, "gpu-a100"]
    cqs = [q for q in queues if q["kind"] == "ClusterQueue"]
    assert [q["metadata"]["name"] for q in cqs] == ["team-a", "team-b", "team-c"]
    for cq, weight in zip(cqs, ("2", "1", "1"), strict=True):
        spec = cq["spec"]
        assert (spec["cohortName"], spec["fairSharing"]) == ("teams", {"weight": weight})
        assert spec["preemption"] == {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
        assert spec["admissionScope"] == {"admissionMode": "UsageBasedAdmissionFairSharing"}
        assert spec["resourceGroups"][0]["flavors"][0]["resources"] == [  # the weight's share
            {"name": "cpu", "nominalQuota": str(10 * int(weight))},
            {"name": "memory", "nominalQuota": str(int(weight) * 2**30)},
        ]
    gpus = [cq["spec"]["resourceGroups"][1]["flavors"][0]["resources"][0] for cq in cqs]
    # Every GPU given out, whole, by weight (2.5 each for the light teams: the first takes the odd one); a capped
    # team borrows only up to its cap.
    assert [int(g["nominalQuota"]) for g in gpus] == [5, 3, 2]
    assert [g.get("borrowingLimit") for g in gpus] == [None, "1", None]
    locals_ = [q for q in queues if q["kind"] == "LocalQueue"]
    assert [(q["metadata"]["namespace"], q["spec"]["clusterQueue"]) for q in locals_] == [
        ("team-a", "team-a"),
        ("team-b", "team-b"),
        ("team-c", "team-c"),
    ]
    shared = kueue.team_queues(teams, Decimal(40), Decimal(4 * 2**30), pools, namespace="bench")
    assert {q["metadata"]["namespace"] for q in shared if q["kind"] == "LocalQueue"} == {"bench"}


def test_kueue_tas_users_ask_for_a_co_located_gangs_rack_and_the_topology_has_racks() -> None:
    from gangsolve.bench.live.populate import arrivals

    objs = scenarios.synthetic(100, 40, seed=100)  # racks on every node, some gangs co-located by rack
    (topology,) = [q for q in kueue.tas_queues_for(objs, "bench") if q["kind"] == "Topology"]
    assert topology["spec"]["levels"] == [{"nodeLabel": manifests.RACK_LABEL}, {"nodeLabel": "kubernetes.io/hostname"}]
    cluster = manifests.to_cluster(objs)
    colocated = {g.name for g in cluster.gangs if g.colocate}
    assert colocated
    tas, plain = arrivals(objs, cluster, "kueue-tas"), arrivals(objs, cluster, "kueue")
    for with_tas, without in zip(tas, plain, strict=True):
        for p, q in zip(with_tas.pods, without.pods, strict=True):
            asked = (p["metadata"].get("annotations") or {}).get(kueue.REQUIRED_TOPOLOGY_ANNOTATION)
            if with_tas.gang in colocated:
                assert asked == manifests.RACK_LABEL
                assert "affinity" not in p["spec"]  # Kueue's TAS reads the annotation, not pod affinity
                assert "affinity" in q["spec"]  # without TAS kube-scheduler keeps the users' affinity
            else:
                assert asked is None
                assert p["spec"] == q["spec"]


# --- KAI --------------------------------------------------------------------------------------------------------

# The scheduler configuration KAI's operator writes for a binpack shard, from its own test of it
# (pkg/operator/operands/scheduler/resources_test.go at v0.17.0).
KAI_BINPACK_PLUGINS = [
    "predicates",
    "proportion",
    "priority",
    "nodeavailability",
    "resourcetype",
    "podaffinity",
    "elastic",
    "kubeflow",
    "ray",
    "subgrouporder",
    "taskorder",
    "nominatednode",
    "dynamicresources",
    "minruntime",
    "topology",
    "snapshot",
    "sg-nodelocalgreedy",
    "sg-multinodegang",
    "gpupack",
    "nodeplacement",
    "gpusharingorder",
]


def test_kai_runs_the_operators_configuration_for_the_charts_default_shard() -> None:
    chart = [
        {
            "apiVersion": "kai.scheduler/v1",
            "kind": "SchedulingShard",
            "spec": {"placementStrategy": {"gpu": "binpack", "cpu": "binpack"}},
        },
        {
            "apiVersion": "scheduling.run.ai/v2",
            "kind": "Queue",
            "metadata": {"name": "default-parent-queue"},
            "spec": {},
        },
        {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "default-queue"}, "spec": {}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other"}},
    ]
    conf = kai.scheduler_conf(kai.default_shard(chart))
    assert conf["actions"] == "allocate, consolidation, reclaim, preempt, stalegangeviction"
    (tier,) = conf["tiers"]
    assert [p["name"] for p in tier["plugins"]] == KAI_BINPACK_PLUGINS
    placement = next(p for p in tier["plugins"] if p["name"] == "nodeplacement")
    assert placement["arguments"] == {"gpu": "binpack", "cpu": "binpack"}
    assert [q["metadata"]["name"] for q in kai.default_queues(chart)] == ["default-parent-queue", "default-queue"]


def test_kai_spreading_gpus_swaps_the_gpu_plugins_and_drops_consolidation() -> None:
    conf = kai.scheduler_conf({"placementStrategy": {"gpu": "spread", "cpu": "binpack"}})
    names = [p["name"] for p in conf["tiers"][0]["plugins"]]
    assert "gpuspread" in names
    assert not {"gpupack", "gpusharingorder"} & set(names)
    assert conf["actions"] == "allocate, reclaim, preempt, stalegangeviction"
    with pytest.raises(ValueError, match=r"spec.placementStrategy.cpu: 'pack' is not one of"):
        kai.scheduler_conf({"placementStrategy": {"cpu": "pack"}})


def test_the_bench_turns_off_kais_evicting_actions_through_the_shards_action_overrides() -> None:
    shard = {"placementStrategy": {"gpu": "binpack", "cpu": "binpack"}, "actions": {"allocate": {"priority": 50}}}
    quiet = kai.without_evictions(shard)
    assert kai.scheduler_conf(quiet)["actions"] == "stalegangeviction, allocate"  # allocate's priority now 50
    assert shard["actions"] == {"allocate": {"priority": 50}}  # the chart's shard is left as it was
    assert kai.scheduler_conf(kai.without_evictions({}))["actions"] == "allocate, stalegangeviction"
    with pytest.raises(ValueError, match=r"spec.actions.backfill: not one of KAI's actions"):
        kai.scheduler_conf({"actions": {"backfill": {"enabled": True}}})


def test_kai_users_give_every_gang_a_pod_group_and_its_pods_the_queue_and_the_scheduler() -> None:
    from gangsolve.bench.live.populate import arrivals

    objs = scenarios.synthetic(100, 40, seed=100)
    cluster = manifests.to_cluster(objs)
    need = {g.name: g.need for g in cluster.gangs}
    gangs = arrivals(objs, cluster, "kai")
    assert len(gangs) == len(cluster.gangs)
    for arrival in gangs:
        (group,) = arrival.groups  # single pods too: KAI schedules no pod outside a PodGroup
        assert group["apiVersion"] == kai.POD_GROUP_API
        assert group["spec"]["minMember"] == need[arrival.gang]
        assert group["spec"]["queue"] == kai.DEFAULT_QUEUE
        for p in arrival.pods:
            assert p["spec"]["schedulerName"] == kai.SCHEDULER_NAME
            assert p["metadata"]["labels"][kai.QUEUE_LABEL] == kai.DEFAULT_QUEUE
            assert p["metadata"]["annotations"][kai.POD_GROUP_ANNOTATION] == group["metadata"]["name"]


def test_a_kai_pod_group_carries_the_gangs_priority_class_and_leaves_the_pods_as_they_were() -> None:
    members = [{"metadata": {"name": f"p{i}"}, "spec": {"priorityClassName": "high"}} for i in range(2)]
    group = kai.pod_group("g", 2, members, "ns")
    assert group["spec"] == {"minMember": 2, "queue": "default-queue", "priorityClassName": "high"}
    labelled = kai.label_members(members, "g")
    assert labelled[0]["metadata"]["annotations"] == {"pod-group-name": "g"}
    assert members[0]["metadata"] == {"name": "p0"}  # the scenario's objects are left as they were
    mixed = [*members, {"metadata": {"name": "p2"}, "spec": {}}]
    assert "priorityClassName" not in kai.pod_group("g", 3, mixed, "ns")["spec"]


def test_the_report_shows_kais_actions_plugins_and_queues() -> None:
    conf = kai.scheduler_conf({})
    queues = [
        {"name": "default-parent-queue", "resources": {"gpu": {"quota": 0, "limit": -1, "overQuotaWeight": 1}}},
        {"name": "default-queue", "parentQueue": "default-parent-queue", "resources": {"gpu": {"quota": 0}}},
    ]
    run = {"scheduler": "kai", "peer": {"version": "v1", "scheduler_conf": conf, "queues": queues}}
    (note,) = peer_notes([{"name": "live/a", "runs": [run]}])
    assert note.startswith("kai v1: actions allocate, consolidation, reclaim")
    assert "nodeplacement (gpu: binpack, cpu: binpack)" in note
    assert note.endswith(
        "queue default-parent-queue (gpu quota 0 limit -1 weight 1); "
        "queue default-queue under default-parent-queue (gpu quota 0 limit None weight None)"
    )


def test_kai_quota_guarantees_the_free_capacity_in_kais_units_and_keeps_limits_and_weights() -> None:
    unlimited = {"quota": 0, "limit": -1, "overQuotaWeight": 1}
    queues = [
        {
            "kind": "Queue",
            "metadata": {"name": "parent"},
            "spec": {"resources": dict.fromkeys(("cpu", "memory", "gpu"), unlimited)},
        },
        {
            "kind": "Queue",
            "metadata": {"name": "leaf"},
            "spec": {"parentQueue": "parent", "resources": {"gpu": unlimited}},
        },
    ]
    parent, leaf = kai.with_quota(queues, Decimal("12.5"), Decimal(3 * 10**9), 40)
    assert parent["spec"]["resources"] == {
        "cpu": {"quota": 12500, "limit": -1, "overQuotaWeight": 1},
        "memory": {"quota": 3000, "limit": -1, "overQuotaWeight": 1},
        "gpu": {"quota": 40, "limit": -1, "overQuotaWeight": 1},
    }
    assert leaf["spec"] == {
        "parentQueue": "parent",
        "resources": {"gpu": {"quota": 40, "limit": -1, "overQuotaWeight": 1}},
    }
    assert queues[0]["spec"]["resources"]["gpu"]["quota"] == 0  # the chart's queues are left as they were


def test_each_peers_users_name_their_teams_queue_on_the_tenants_timeline() -> None:
    from gangsolve.bench.live.populate import arrivals

    objs = LIVE_SCENARIOS["live/tenants-seed1"].build()
    cluster = manifests.to_cluster(objs)
    team = {g.name: g.queue for g in cluster.gangs}
    assert set(team.values()) == {"team-a", "team-b", "team-c"}
    for arrival in arrivals(objs, cluster, "volcano"):
        assert arrival.groups[0]["spec"]["queue"] == team[arrival.gang]
    for arrival in arrivals(objs, cluster, "kai"):
        assert arrival.groups[0]["spec"]["queue"] == team[arrival.gang]
        assert {p["metadata"]["labels"][kai.QUEUE_LABEL] for p in arrival.pods} == {team[arrival.gang]}
    for arrival in arrivals(objs, cluster, "kueue"):
        assert {p["metadata"]["labels"][kueue.QUEUE_NAME_LABEL] for p in arrival.pods} == {team[arrival.gang]}


def test_kai_users_write_volcanos_teams_as_leaf_queues_weighted_and_capped() -> None:
    teams = [o for o in LIVE_SCENARIOS["live/tenants-seed1"].build() if o["kind"] == "Queue"]
    queues = {q["metadata"]["name"]: q["spec"] for q in kai.team_queues(teams)}
    assert set(queues) == {"team-a", "team-b", "team-c"}
    for name, weight in (("team-a", 1), ("team-b", 2), ("team-c", 4)):
        spec = queues[name]
        assert spec["parentQueue"] == "default-parent-queue"  # the chart's, which a fresh install creates
        assert {r: v["overQuotaWeight"] for r, v in spec["resources"].items()} == dict.fromkeys(
            ("cpu", "memory", "gpu"), weight
        )
        assert {v["quota"] for v in spec["resources"].values()} == {0}
    assert [queues[t]["resources"]["gpu"]["limit"] for t in ("team-a", "team-b", "team-c")] == [24, -1, -1]


def test_volcano_reclaim_adds_only_the_reclaim_action_and_runs_only_where_teams_share() -> None:
    conf = {"actions": "enqueue, allocate, backfill", "tiers": [{"plugins": [{"name": "proportion"}]}]}
    assert volcano.with_reclaim(conf) == {**conf, "actions": "enqueue, allocate, backfill, reclaim"}
    from gangsolve.bench.live.peers import not_run

    assert "where teams share" in (not_run(LIVE_SCENARIOS["live/timeline-synthetic-seed1"], "volcano-reclaim") or "")
    assert "where teams share" not in (not_run(LIVE_SCENARIOS["live/tenants-seed1"], "volcano-reclaim") or "")


# --- preemption -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("peer", ["volcano", "kai-quota"])
def test_preempting_peers_users_give_every_gang_running_or_pending_the_peers_pod_group(peer: str) -> None:
    from gangsolve.bench.live.live_preemption import LIVE_PREEMPTION_SCENARIOS, peer_objects

    objs = LIVE_PREEMPTION_SCENARIOS["live/preempt-gpu-100nodes"].build()
    cluster = manifests.to_cluster(objs)
    minimum = {r.name: r.min_member for r in cluster.running if r.gang}
    minimum |= {p.name: g.min_member for g in cluster.gangs for p in g.pods}
    family = kai if peer.startswith("kai") else volcano
    made = peer_objects(objs, cluster, peer)
    groups = {o["metadata"]["name"]: o["spec"] for o in made if o["kind"] == "PodGroup"}
    assert all(o["apiVersion"] == family.POD_GROUP_API for o in made if o["kind"] == "PodGroup")
    annotation = kai.POD_GROUP_ANNOTATION if peer.startswith("kai") else volcano.GROUP_NAME_ANNOTATION
    pods = [o for o in made if o["kind"] == "Pod"]
    assert len(pods) == sum(1 for o in objs if o["kind"] == "Pod")
    for pod in pods:
        assert pod["spec"]["schedulerName"] == family.SCHEDULER_NAME
        group = groups[pod["metadata"]["annotations"][annotation]]
        assert group["minMember"] == minimum.get(f"bench/{pod['metadata']['name']}", 1)  # alone: a group of one
        assert group["priorityClassName"] == pod["spec"]["priorityClassName"]


def test_kueues_users_queue_every_gang_and_their_running_work_goes_through_kueue_pinned_to_its_node() -> None:
    from gangsolve.bench.live.live_preemption import LIVE_PREEMPTION_SCENARIOS, admitted_through_kueue, peer_objects

    objs = LIVE_PREEMPTION_SCENARIOS["live/preempt-gpu-100nodes"].build()
    cluster = manifests.to_cluster(objs)
    made = peer_objects(objs, cluster, "kueue")
    assert not [o for o in made if o["kind"] == "PodGroup"]  # Kueue's users write no gang object
    pods = {o["metadata"]["name"]: o for o in made if o["kind"] == "Pod"}
    assert len(pods) == sum(1 for o in objs if o["kind"] == "Pod")
    assert all(p["metadata"]["labels"][kueue.QUEUE_NAME_LABEL] == "bench" for p in pods.values())
    members: dict[str, list[str]] = {g.name: [p.name for p in g.pods] for g in cluster.gangs}
    for r in cluster.running:
        members.setdefault(r.gang or r.name, []).append(r.name)
    for names in members.values():
        groups = {pods[n.split("/", 1)[1]]["metadata"]["labels"].get(kueue.POD_GROUP_NAME_LABEL) for n in names}
        assert len(groups) == 1  # one pod group per gang of several, none for a pod alone
        assert (None in groups) == (len(names) == 1)
    original = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Pod"}
    labels = {o["metadata"]["name"]: o["metadata"]["labels"] for o in objs if o["kind"] == "Node"}
    for name, pod in pods.items():
        node = original[name]["spec"].get("nodeName")
        if node is None:
            continue
        admitted = admitted_through_kueue(pod, labels)
        assert "nodeName" not in admitted["spec"]  # pending, for Kueue to admit
        selector = admitted["spec"]["nodeSelector"]
        assert selector[kueue.HOSTNAME_LABEL] == node  # and kube-scheduler to bind there
        model = "nvidia.com/gpu.product"  # this cluster's GPU models are Kueue's flavors: the node's one named
        assert selector.get(model) == labels[node].get(model)
        assert admitted["spec"]["schedulerName"] == "default-scheduler"
    queues = kueue.with_preemption(kueue.queues_for(made, "bench"))
    (cq,) = [q for q in queues if q["kind"] == "ClusterQueue"]
    assert cq["spec"]["preemption"] == {"withinClusterQueue": "LowerPriority"}


def test_kueue_runs_only_where_it_can_admit_the_running_work_as_laid_out() -> None:
    from gangsolve.bench.live.live_preemption import LIVE_PREEMPTION_SCENARIOS, kueue_not_run

    def why(name: str, scheduler: str = "kueue") -> str | None:
        objs = LIVE_PREEMPTION_SCENARIOS[name].build()
        return kueue_not_run(objs, manifests.to_cluster(objs), scheduler)

    assert why("live/preempt-tfjob") is None  # resnet's four pods on one node: at most two templates
    assert why("live/preempt-perf-100nodes-1x100-vs-1000pods") is None  # single pods: no group
    # gangs of 100 pods spread one a node: one template, kept to their nodes by a label and anti-affinity
    assert why("live/preempt-perf-100nodes-1x100-vs-5gangs") is None
    assert why("live/preempt-perf-100nodes-10x10-vs-50gangs") is None
    tas = why("live/preempt-perf-100nodes-1x100-vs-5gangs", "kueue-tas")  # TAS picks nodes, reads no anti-affinity
    assert tas is not None
    assert "anti-affinity" in tas
    assert why("live/preempt-gpu-100nodes", "kueue-tas") is None
    # the same gangs with two pods on one node are not spread: a template per node, more than Kueue's 8 roles
    objs = LIVE_PREEMPTION_SCENARIOS["live/preempt-perf-100nodes-1x100-vs-5gangs"].build()
    first = next(o for o in objs if o["kind"] == "Pod" and o["metadata"]["name"] == "low-000-1")
    first["spec"]["nodeName"] = "node-00000"
    wide = kueue_not_run(objs, manifests.to_cluster(objs), "kueue")
    assert wide is not None
    assert "99 pod templates" in wide


def test_kueues_users_write_a_spread_gang_as_one_template_kept_to_its_nodes_one_a_node() -> None:
    from gangsolve.bench.live.live_preemption import (
        LIVE_PREEMPTION_SCENARIOS,
        SPREAD_LABEL,
        peer_objects,
        spread_gangs,
        spread_labels,
        spread_through_kueue,
    )

    objs = LIVE_PREEMPTION_SCENARIOS["live/preempt-perf-100nodes-10x10-vs-50gangs"].build()
    cluster = manifests.to_cluster(objs)
    spread = spread_gangs(objs, cluster)
    assert len(spread) == 50
    assert all(len(names) == 10 for names in spread.values())
    made = {o["metadata"]["name"]: o for o in peer_objects(objs, cluster, "kueue") if o["kind"] == "Pod"}
    labels = {o["metadata"]["name"]: o["metadata"]["labels"] for o in objs if o["kind"] == "Node"}
    nodes = spread_labels([o for o in objs if o["kind"] == "Node"], spread, objs)
    original = {
        f"bench/{o['metadata']['name']}": o["spec"]["nodeName"]
        for o in objs
        if o["kind"] == "Pod" and o["spec"].get("nodeName")
    }
    for gang, names in spread.items():
        pods = [spread_through_kueue(made[n.split("/", 1)[1]], gang, labels) for n in names]
        specs = {json.dumps(p["spec"], sort_keys=True) for p in pods}
        assert len(specs) == 1  # one template: one role of Kueue's pod group
        spec = pods[0]["spec"]
        assert "nodeName" not in spec
        assert spec["schedulerName"] == "default-scheduler"
        key = next(k for k in spec["nodeSelector"] if k.startswith(SPREAD_LABEL))
        # the label is on exactly the nodes the scenario has the gang's pods on
        assert {o["metadata"]["name"] for o in nodes if key in o["metadata"]["labels"]} == {original[n] for n in names}
        (apart,) = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert apart["topologyKey"] == kueue.HOSTNAME_LABEL
        group = pods[0]["metadata"]["labels"][kueue.POD_GROUP_NAME_LABEL]
        assert apart["labelSelector"]["matchLabels"] == {kueue.POD_GROUP_NAME_LABEL: group}


def test_kais_users_put_the_work_they_let_be_preempted_below_100_in_its_order() -> None:
    from gangsolve.bench.live.live_preemption import KAI_PREEMPTIBLE, LIVE_PREEMPTION_SCENARIOS, peer_objects

    objs = LIVE_PREEMPTION_SCENARIOS["live/preempt-gpu-100nodes"].build()
    before = {o["metadata"]["name"]: o["value"] for o in objs if o["kind"] == "PriorityClass"}
    cluster = manifests.to_cluster(objs)
    after = {
        o["metadata"]["name"]: o["value"]
        for o in peer_objects(objs, cluster, "kai-quota")
        if o["kind"] == "PriorityClass"
    }
    assert after[scenarios.HIGH] == before[scenarios.HIGH] >= KAI_PREEMPTIBLE  # the preemptors': as they were
    assert 0 <= after[scenarios.LOW] < after[scenarios.NORMAL] < KAI_PREEMPTIBLE  # the running work's: preemptible
    volcano_classes = peer_objects(objs, cluster, "volcano")
    assert {o["metadata"]["name"]: o["value"] for o in volcano_classes if o["kind"] == "PriorityClass"} == before


def test_volcano_preempts_as_its_guides_enable_it_and_workload_aware_preemption_runs_only_there() -> None:
    conf = {"actions": "enqueue, allocate, backfill", "tiers": []}
    assert volcano.with_preempt(conf)["actions"] == "allocate, preempt, backfill"  # enqueue would block it
    why = peer_not_run(LIVE_SCENARIOS["live/tfjob"], "kube-scheduler-wap")
    assert why is not None
    assert "preemption scenarios only" in why
