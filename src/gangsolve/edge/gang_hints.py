"""What the pods of one gang share, by the gang rules (docs/gangs.md), read cheaply from one pod: the PodGroup it
names, and the hints the live store indexes pods by, so that a cycle reads the pods that may join a pending gang
and not the tens of thousands a large cluster runs."""

from __future__ import annotations

from gangsolve.edge.gangs import POD_GROUP_LABEL, UPSTREAM_GROUP, VOLCANO_ANNOTATION, upstream_group_name

GroupKey = tuple[str, str, str]  # (api group, namespace, name)


def pod_group_of(pod: dict | None) -> GroupKey | None:
    """The PodGroup a pod names (Kubernetes' own through spec.schedulingGroup first, then scheduler-plugins'
    label, then Volcano's annotation), or None."""
    if pod is None:
        return None
    meta = pod.get("metadata") or {}
    name = upstream_group_name(pod)
    if name:
        return UPSTREAM_GROUP, meta.get("namespace", ""), name
    name = (meta.get("labels") or {}).get(POD_GROUP_LABEL)
    if name:
        return "scheduling.x-k8s.io", meta.get("namespace", ""), name
    name = (meta.get("annotations") or {}).get(VOLCANO_ANNOTATION)
    return ("scheduling.volcano.sh", meta.get("namespace", ""), name) if name else None


Hint = tuple[str, str, str]  # (rule, namespace, value)


def gang_hints(pod: dict, group_label: str | None) -> set[Hint]:
    """What a pod may share with the other members of its gang, by the gang rules (docs/gangs.md): its PodGroup
    (Kubernetes' own, scheduler-plugins' label, Volcano's annotation), its value of the group label, its
    controlling owner.
    (Pods a PDB groups share a namespace with it.) Two pods of one gang share at least one hint; pods sharing
    one need not be of one gang: gangs.build_cluster decides, this only narrows what it reads."""
    meta = pod.get("metadata") or {}
    ns, labels, annotations = meta.get("namespace", ""), meta.get("labels") or {}, meta.get("annotations") or {}
    hints = set()
    upstream = upstream_group_name(pod)
    if upstream:
        hints.add(("upstream", ns, upstream))
    if POD_GROUP_LABEL in labels:
        hints.add(("podgroup", ns, str(labels[POD_GROUP_LABEL])))
    if VOLCANO_ANNOTATION in annotations:
        hints.add(("volcano", ns, str(annotations[VOLCANO_ANNOTATION])))
    if group_label and group_label in labels:
        hints.add(("label", ns, str(labels[group_label])))
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            hints.add(("owner", ns, str(ref.get("uid"))))
    return hints
