"""kwok configuration: the Stage objects that make fake nodes Ready and scheduled pods Running.

The kwok binary ships no stages of its own; it reads them from `--config` (a multi-document YAML of
`kwok.x-k8s.io/v1alpha1` Stage objects). The templates below are Go templates evaluated by kwok against
the object, with kwok's helper functions (Now, Quote, YAML, NodeConditions, NodeIP, NodeName, NodeIPsWith,
PodIPsWith). Their result is merged into the object's status.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

# Nodes carrying this annotation are the ones kwok manages (the controller is started with the matching
# --manage-nodes-with-annotation-selector), so real nodes and other kwok instances are left alone.
MANAGED_ANNOTATION = ("kwok.x-k8s.io/node", "fake")

# Refreshes the conditions now and then; liveness itself comes from the node Lease that kwok renews
# (--node-lease-duration-seconds), which is what the node lifecycle controller watches.
_NODE_HEARTBEAT = """\
{{ $now := Now }}
{{ $since := or .metadata.creationTimestamp $now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $since | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
"""

_NODE_READY = (
    _NODE_HEARTBEAT
    + """\
addresses:
{{ with .status.addresses }}
{{ YAML . 1 }}
{{ else }}
- address: {{ NodeIP | Quote }}
  type: InternalIP
- address: {{ NodeName | Quote }}
  type: Hostname
{{ end }}
capacity:
{{ with .status.capacity }}
{{ YAML . 1 }}
{{ else }}
  cpu: "32"
  memory: 256Gi
  pods: "110"
{{ end }}
allocatable:
{{ with .status.allocatable }}
{{ YAML . 1 }}
{{ else }}
{{ with .status.capacity }}
{{ YAML . 1 }}
{{ else }}
  cpu: "32"
  memory: 256Gi
  pods: "110"
{{ end }}
{{ end }}
nodeInfo:
  architecture: amd64
  operatingSystem: linux
  kubeletVersion: {{ printf "kwok-%s" Version | Quote }}
  kubeProxyVersion: {{ printf "kwok-%s" Version | Quote }}
  containerRuntimeVersion: {{ printf "kwok-%s" Version | Quote }}
  kernelVersion: {{ printf "kwok-%s" Version | Quote }}
  bootID: ""
  machineID: ""
  osImage: ""
  systemUUID: ""
phase: Running
"""
)

_POD_RUNNING = """\
{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: ContainersReady
{{ range .spec.readinessGates }}
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: {{ .conditionType | Quote }}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  started: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
initContainerStatuses:
{{ range .spec.initContainers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  state:
    terminated:
      exitCode: 0
      reason: Completed
      startedAt: {{ $now | Quote }}
      finishedAt: {{ $now | Quote }}
{{ end }}
{{ with NodeIPsWith .spec.nodeName }}
hostIP: {{ index . 0 | Quote }}
hostIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
{{ with PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" )
     ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
"""

# A pod whose containers have ended; the PLACEHOLDERS are filled in by `_pod_ended`.
_POD_ENDED = """\
{{ $now := Now }}
{{ $started := or .status.startTime $now }}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  started: false
  restartCount: 0
  state:
    terminated:
      exitCode: EXIT_CODE
      reason: EXIT_REASON
      startedAt: {{ $started | Quote }}
      finishedAt: {{ $now | Quote }}
{{ end }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  reason: POD_REASON
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  reason: POD_REASON
  type: ContainersReady
phase: PHASE
"""


def _pod_ended(phase: str, exit_code: int, exit_reason: str) -> str:
    reason = "PodCompleted" if phase == "Succeeded" else "PodFailed"
    filled = _POD_ENDED.replace("EXIT_CODE", str(exit_code)).replace("EXIT_REASON", exit_reason)
    return filled.replace("POD_REASON", reason).replace("PHASE", phase)


_POD_SUCCEEDED = _pod_ended("Succeeded", 0, "Completed")

# What kubelet makes of a pod being deleted while a finalizer holds it that waits for the pod to stop (Kueue's,
# on the pods it manages): its containers killed, the pod Failed; the finalizer's owner then lets it go. Other
# finalizers (the tests' own) keep a deleted pod terminating, holding its capacity, for as long as they stay.
STOP_FIRST_FINALIZERS = ("kueue.x-k8s.io/managed",)
_POD_KILLED = _pod_ended("Failed", 137, "Error")


def _stage(
    name: str,
    kind: str,
    match: list[dict[str, Any]],
    nxt: dict[str, Any],
    delay_ms: int | None = None,
    jitter_ms: int | None = None,
    weight: int | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": kind},
        "selector": {"matchExpressions": match},
        "next": nxt,
    }
    if weight is not None:
        spec["weight"] = weight
    if delay_ms is not None:
        spec["delay"] = {"durationMilliseconds": delay_ms}
        if jitter_ms is not None:
            spec["delay"]["jitterDurationMilliseconds"] = jitter_ms
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name}, "spec": spec}


_READY_STATUS = '.status.conditions.[] | select( .type == "Ready" ) | .status'


def stages(*, job_pods_complete_after_ms: int | None = None) -> list[dict[str, Any]]:
    """The Stage objects for nodes and pods.

    Nodes: a node whose Ready condition is not True gets Ready conditions, addresses, capacity/allocatable
    (kept as given at creation) and nodeInfo; a Ready node gets its conditions refreshed every ~10 min.
    Pods: a pending pod bound to a managed node becomes Running and Ready at once; a pod being deleted is
    removed, or, while a finalizer that waits for it to stop holds it, Failed (its containers killed, as
    kubelet does) until it goes. With `job_pods_complete_after_ms`, running pods owned by a Job succeed after that delay
    (off by default: gang workloads should keep their place until the test deletes them).
    """
    result = [
        _stage(
            "gangsolve-node-ready",
            "Node",
            [{"key": _READY_STATUS, "operator": "NotIn", "values": ["True"]}],
            {"statusTemplate": _NODE_READY},
        ),
        _stage(
            "gangsolve-node-heartbeat",
            "Node",
            [
                {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                {"key": _READY_STATUS, "operator": "In", "values": ["True"]},
            ],
            {"statusTemplate": _NODE_HEARTBEAT},
            delay_ms=600_000,
            jitter_ms=610_000,
        ),
        _stage(
            "gangsolve-pod-running",
            "Pod",
            [
                {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
                {"key": _READY_STATUS, "operator": "NotIn", "values": ["True"]},
            ],
            {"statusTemplate": _POD_RUNNING},
        ),
        _stage(
            "gangsolve-pod-delete",
            "Pod",
            [{"key": ".metadata.deletionTimestamp", "operator": "Exists"}],
            {"delete": True},
        ),
        # Weighted: where both match, kwok takes only the stages of weight above 0.
        _stage(
            "gangsolve-pod-killed",
            "Pod",
            [
                {"key": ".metadata.deletionTimestamp", "operator": "Exists"},
                {"key": ".metadata.finalizers.[]", "operator": "In", "values": list(STOP_FIRST_FINALIZERS)},
                {"key": ".status.phase", "operator": "NotIn", "values": ["Failed", "Succeeded"]},
            ],
            {"statusTemplate": _POD_KILLED},
            weight=1,
        ),
    ]
    if job_pods_complete_after_ms is not None:
        result.append(
            _stage(
                "gangsolve-job-pod-succeeded",
                "Pod",
                [
                    {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                    {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                    {"key": ".metadata.ownerReferences.[].kind", "operator": "In", "values": ["Job"]},
                ],
                {"statusTemplate": _POD_SUCCEEDED},
                delay_ms=job_pods_complete_after_ms,
            )
        )
    return result


class _Dumper(yaml.SafeDumper):
    """Writes multi-line strings (the templates) as literal blocks, so kwok.yaml reads like the source."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def write_config(path: Path, *, job_pods_complete_after_ms: int | None = None) -> Path:
    """Write the kwok --config file (all stages, one YAML document each)."""
    docs = stages(job_pods_complete_after_ms=job_pods_complete_after_ms)
    path.write_text(yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False))
    return path
