"""Dynamic Resource Allocation on the pinned API server (resource.k8s.io/v1): ResourceSlices for kwok nodes under
a test driver, a DeviceClass with a CEL selector, claims made from templates by kube-controller-manager. gangsolve
places gangs with their devices and writes each claim's allocation and reservation before binding; the real
kube-scheduler runs on the same kind of objects as the peer; a bind the API server refuses leaves no
reservation behind."""

from __future__ import annotations

import contextlib
from datetime import datetime

import pytest
from live_helpers import bound, create, pod, pods, poll

from gangsolve.bench.devcluster import ApiError
from gangsolve.bench.manifests import slice_of

pytestmark = pytest.mark.e2e

DRIVER = "gpu.e2e.gangsolve.io"
ROOT = f"{DRIVER}/pcieRoot"


def _devices(control_plane, namespace: str, nodes: list[str]) -> str:
    """A DeviceClass of this test's own, and 4 GPUs on two PCIe roots for each node; returns the class."""
    device_class = f"gpu-{namespace}"
    create(
        control_plane,
        namespace,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": device_class},
            "spec": {
                "selectors": [
                    {"cel": {"expression": f'device.driver == "{DRIVER}"'}},
                    {"cel": {"expression": f'device.attributes["{DRIVER}"].owner == "{namespace}"'}},
                ]
            },
        },
    )
    for node in nodes:
        devices = [
            {
                "name": f"gpu-{i}",
                "attributes": {
                    "owner": {"string": namespace},
                    "pcieRoot": {"string": f"pci-{i // 2}"},
                    "model": {"string": "A100"},
                },
                "capacity": {"memory": {"value": "80Gi"}},
            }
            for i in range(4)
        ]
        create(control_plane, namespace, slice_of(node, DRIVER, devices))
    return device_class


def _template(control_plane, namespace: str, device_class: str) -> None:
    """Two GPUs on one PCIe root."""
    create(
        control_plane,
        namespace,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "two-gpus"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [{"name": "gpus", "exactly": {"deviceClassName": device_class, "count": 2}}],
                        "constraints": [{"matchAttribute": ROOT}],
                    }
                }
            },
        },
    )


def _gang(control_plane, namespace: str, name: str, size: int, scheduler: str, tag: dict) -> None:
    create(
        control_plane,
        namespace,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name},
            "spec": {"minAvailable": size, "selector": {"matchLabels": {"job": name}}},
        },
    )
    for i in range(size):
        member = pod(f"{name}-{i}", scheduler=scheduler, labels={"job": name}, node_selector=tag)
        member["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]
        create(control_plane, namespace, member)


def _claims(control_plane, namespace: str) -> dict[str, dict]:
    items = control_plane.request("GET", f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims")["items"]
    return {c["metadata"]["name"]: c for c in items}


def _claim_of(p: dict, claims: dict[str, dict]) -> dict | None:
    for status in (p.get("status") or {}).get("resourceClaimStatuses") or []:
        if status.get("resourceClaimName") in claims:
            return claims[status["resourceClaimName"]]
    return None


def _cleanup(control_plane, namespace: str, nodes: list[str], device_class: str) -> None:
    for node in nodes:
        with contextlib.suppress(ApiError):
            control_plane.request("DELETE", f"/apis/resource.k8s.io/v1/resourceslices/{node}-{DRIVER}")
    with contextlib.suppress(ApiError):
        control_plane.request("DELETE", f"/apis/resource.k8s.io/v1/deviceclasses/{device_class}")


def _check_allocations(control_plane, namespace: str) -> tuple[list[dict], dict[str, dict]]:
    """Every bound pod's claim allocated with 2 GPUs of one root on its node and reserved for it (with the
    finalizer); no device in two claims; claims of pods not bound hold nothing."""
    items, claims = pods(control_plane, namespace), _claims(control_plane, namespace)
    seen: set[tuple[str, str, str]] = set()
    for p in items:
        claim = _claim_of(p, claims)
        node = p["spec"].get("nodeName")
        if not node:
            assert claim is None or not (claim.get("status") or {}).get("reservedFor"), p["metadata"]["name"]
            continue
        assert claim is not None, f"{p['metadata']['name']} bound without its claim"
        status = claim.get("status") or {}
        results = status["allocation"]["devices"]["results"]
        assert [r["uid"] for r in status["reservedFor"]] == [p["metadata"]["uid"]]
        assert "resource.kubernetes.io/delete-protection" in claim["metadata"].get("finalizers", [])
        assert len(results) == 2
        assert {r["pool"] for r in results} == {node}
        assert len({int(r["device"].split("-")[1]) // 2 for r in results}) == 1  # one PCIe root
        for r in results:
            device = (r["driver"], r["pool"], r["device"])
            assert device not in seen, f"{device} allocated twice"
            seen.add(device)
    return items, claims


def test_gangs_are_placed_with_their_devices_and_claims_are_written_before_binds(
    control_plane, gangsolve_factory, make_nodes, namespace
):
    tag = {"gangsolve.dev/test": namespace}
    nodes = make_nodes(2, gpus=0, labels=tag)  # no nvidia.com/gpu: the GPUs exist only as DRA devices
    device_class = _devices(control_plane, namespace, nodes)
    try:
        _template(control_plane, namespace, device_class)
        g = gangsolve_factory()
        # 2 nodes x 2 roots = 4 claims of two GPUs on one root: the gang of 3 fits, the gang of 2 then does not.
        _gang(control_plane, namespace, "first", 3, g.scheduler_name, tag)
        poll(lambda: len(bound(pods(control_plane, namespace))) == 3, timeout=60, what="the first gang bound")
        _gang(control_plane, namespace, "second", 2, g.scheduler_name, tag)
        poll(
            lambda: all(_claim_of(p, _claims(control_plane, namespace)) for p in pods(control_plane, namespace)),
            timeout=30,
            what="the second gang's claims made",
        )
        poll(
            lambda: any(
                c["type"] == "PodScheduled" and c["status"] == "False"
                for p in pods(control_plane, namespace)
                if p["metadata"]["name"].startswith("second")
                for c in (p.get("status") or {}).get("conditions") or []
            ),
            timeout=30,
            what="the second gang reported pending",
        )
        # A selector the API server accepts that fails on a device (no such attribute): reported on the pod.
        bad = 'device.attributes["gpu.e2e.gangsolve.io"].nosuch == "x"'
        create(
            control_plane,
            namespace,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "bad"},
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {
                                    "deviceClassName": device_class,
                                    "selectors": [{"cel": {"expression": bad}}],
                                },
                            }
                        ]
                    }
                },
            },
        )
        lone = pod("bad-cel", scheduler=g.scheduler_name, node_selector=tag)
        lone["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "bad"}]
        create(control_plane, namespace, lone)

        def reported() -> str:
            got = control_plane.get(f"/api/v1/namespaces/{namespace}/pods/bad-cel") or {}
            conditions = (got.get("status") or {}).get("conditions") or []
            return next((c.get("message", "") for c in conditions if c["type"] == "PodScheduled"), "")

        poll(lambda: "failed on device" in reported(), timeout=30, what="the bad selector reported on its pod")
        assert "nosuch" in reported()
        items, _claims_now = _check_allocations(control_plane, namespace)
        assert sorted(p["metadata"]["name"] for p in bound(items)) == ["first-0", "first-1", "first-2"]

        # Claims written before binds: each pod's claim status write precedes its binding in the audit log.
        records = control_plane.audit_events()
        when: dict[tuple[str, str], datetime] = {}
        for e in records:
            ref = e.get("objectRef") or {}
            if ref.get("namespace") != namespace or e.get("stage") != "ResponseComplete":
                continue
            key = (ref.get("resource", ""), ref.get("subresource", ""))
            if key in (("resourceclaims", "status"), ("pods", "binding")) and e["responseStatus"]["code"] < 300:
                name = ref["name"] if key[0] == "pods" else ref["name"].rsplit("-gpus-", 1)[0]
                stamp = datetime.fromisoformat(e["requestReceivedTimestamp"].replace("Z", "+00:00"))
                when.setdefault((key[0], name), stamp)
        for name in ("first-0", "first-1", "first-2"):
            assert when[("resourceclaims", name)] < when[("pods", name)], name
    finally:
        _cleanup(control_plane, namespace, nodes, device_class)


def test_kube_scheduler_on_the_same_objects_binds_part_of_a_gang(control_plane, make_nodes, namespace):
    """The peer: kube-scheduler allocates the same claims pod by pod. It places the first gang's 3 pods too,
    then one pod of the second gang, which cannot run without its partner: the partial gang gangsolve avoids."""
    tag = {"gangsolve.dev/test": namespace}
    nodes = make_nodes(2, gpus=0, labels=tag)
    device_class = _devices(control_plane, namespace, nodes)
    try:
        _template(control_plane, namespace, device_class)
        _gang(control_plane, namespace, "first", 3, "default-scheduler", tag)
        poll(lambda: len(bound(pods(control_plane, namespace))) == 3, timeout=60, what="kube-scheduler binds 3")
        _gang(control_plane, namespace, "second", 2, "default-scheduler", tag)
        poll(lambda: len(bound(pods(control_plane, namespace))) == 4, timeout=60, what="kube-scheduler binds 4")
        items, _ = _check_allocations(control_plane, namespace)
        assert len([p for p in bound(items) if p["metadata"]["name"].startswith("second")]) == 1
    finally:
        _cleanup(control_plane, namespace, nodes, device_class)


def test_a_failed_bind_leaves_no_reservation(control_plane, gangsolve_factory, make_nodes, namespace):
    """A ValidatingAdmissionPolicy refuses the binding of one pod: its claim is allocated and reserved first,
    then the binder undoes both (allocation, reservation, finalizer)."""
    tag = {"gangsolve.dev/test": namespace}
    nodes = make_nodes(1, gpus=0, labels=tag)
    device_class = _devices(control_plane, namespace, nodes)
    policy, refusal = f"refuse-binding-{namespace}", f"binding refused in {namespace} (test)"
    admission = "/apis/admissionregistration.k8s.io/v1"
    control_plane.request(
        "POST",
        f"{admission}/validatingadmissionpolicies",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": policy},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods/binding"],
                        }
                    ]
                },
                "validations": [{"expression": f'request.namespace != "{namespace}"', "message": refusal}],
            },
        },
    )
    control_plane.request(
        "POST",
        f"{admission}/validatingadmissionpolicybindings",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": policy},
            "spec": {"policyName": policy, "validationActions": ["Deny"]},
        },
    )
    try:
        # The apiserver loads a new policy through its own informer: until it has, a binding goes through. A
        # dry-run binding of a pod that does not exist tells the two apart (the policy answers before the lookup).
        def policy_active() -> bool:
            try:
                control_plane.request(
                    "POST",
                    f"/api/v1/namespaces/{namespace}/pods/absent/binding?dryRun=All",
                    {
                        "apiVersion": "v1",
                        "kind": "Binding",
                        "metadata": {"name": "absent"},
                        "target": {"kind": "Node", "name": nodes[0]},
                    },
                )
            except ApiError as e:
                return refusal in e.body
            return False

        poll(policy_active, timeout=60, what="the binding policy in force")
        _template(control_plane, namespace, device_class)
        g = gangsolve_factory()

        def refused() -> bool:
            return any(
                (e.get("objectRef") or {}).get("namespace") == namespace
                and (e.get("objectRef") or {}).get("subresource") == "binding"
                and e.get("stage") == "ResponseComplete"
                and e["responseStatus"]["code"] >= 400
                for e in control_plane.audit_events()
            )

        _gang(control_plane, namespace, "doomed", 1, g.scheduler_name, tag)
        poll(refused, timeout=60, what="a refused binding")

        def clean() -> bool:
            claims = list(_claims(control_plane, namespace).values())
            return bool(claims) and all(
                not (c.get("status") or {}).get("reservedFor")
                and not (c.get("status") or {}).get("allocation")
                and "resource.kubernetes.io/delete-protection" not in c["metadata"].get("finalizers", [])
                for c in claims
            )

        poll(clean, timeout=30, what="the claim released after the refused bind")
        g.stop()
        assert clean()
        assert not bound(pods(control_plane, namespace))
    finally:
        for kind in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
            with contextlib.suppress(ApiError):
                control_plane.request("DELETE", f"{admission}/{kind}/{policy}")
        _cleanup(control_plane, namespace, nodes, device_class)
