"""What the state layer reads of a raw pod (the API server's JSON, as the backend holds it), each
field by name: one place says which fields are read and what their absence means.

Pods stay raw mappings: the scheduler sends them, the watch delivers them, and the writes send
back what was read, so decoding them into a model would copy every pod for a handful of fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "TERMINAL_PHASES",
    "bound_node",
    "deleting",
    "finished",
    "nominated_node",
    "pod_annotations",
    "pod_group_name",
    "pod_identity",
    "pod_key",
    "pod_labels",
    "pod_phase",
    "pod_priority",
    "pod_uid",
    "scheduling_preference",
    "start_time",
    "tolerates_soft_taint",
]

#: Phases of a pod whose containers have all stopped for good: it holds nothing any more.
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def _meta(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("metadata") or {}


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("spec") or {}


def _status(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("status") or {}


def pod_identity(pod: Mapping[str, Any]) -> tuple[str, str, str]:
    """(namespace, name, uid) of a raw pod."""
    meta = _meta(pod)
    return str(meta.get("namespace") or "default"), str(meta.get("name") or ""), str(meta.get("uid") or "")


def pod_key(pod: Mapping[str, Any]) -> str:
    """``namespace/name`` of a raw pod (the namespace "default" when unset)."""
    namespace, name, _ = pod_identity(pod)
    return f"{namespace}/{name}"


def pod_uid(pod: Mapping[str, Any]) -> str:
    """``metadata.uid`` ("" when it has none)."""
    return str(_meta(pod).get("uid") or "")


def pod_priority(pod: Mapping[str, Any]) -> int:
    """``spec.priority`` (admission resolved its PriorityClass into it; 0 when unset)."""
    value = _spec(pod).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def pod_labels(pod: Mapping[str, Any]) -> Mapping[str, str]:
    """``metadata.labels`` ({} when none)."""
    return _meta(pod).get("labels") or {}


def pod_annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """``metadata.annotations`` ({} when none)."""
    return _meta(pod).get("annotations") or {}


def pod_group_name(pod: Mapping[str, Any]) -> str:
    """``spec.schedulingGroup.podGroupName``: the PodGroup the pod belongs to ("" when none)."""
    group = _spec(pod).get("schedulingGroup")
    if not isinstance(group, Mapping):
        return ""
    name = group.get("podGroupName")
    return name if isinstance(name, str) else ""


def deleting(pod: Mapping[str, Any]) -> bool:
    """Whether ``metadata.deletionTimestamp`` is set: the pod is going."""
    return bool(_meta(pod).get("deletionTimestamp"))


def bound_node(pod: Mapping[str, Any]) -> str:
    """``spec.nodeName``: the node the pod is bound to ("" while it is not)."""
    return str(_spec(pod).get("nodeName") or "")


def pod_phase(pod: Mapping[str, Any]) -> str:
    """``status.phase`` ("" when unknown)."""
    return str(_status(pod).get("phase") or "")


def finished(pod: Mapping[str, Any]) -> bool:
    """Whether the pod's phase is terminal (``TERMINAL_PHASES``)."""
    return pod_phase(pod) in TERMINAL_PHASES


def nominated_node(pod: Mapping[str, Any]) -> str:
    """``status.nominatedNodeName`` ("" when none)."""
    return str(_status(pod).get("nominatedNodeName") or "")


def start_time(pod: Mapping[str, Any]) -> str:
    """``status.startTime`` as RFC 3339 text ("" when unknown)."""
    return str(_status(pod).get("startTime") or "")


#: Controllers whose pods kube-scheduler spreads by default (PodTopologySpread's system default
#: constraints, ``ScheduleAnyway``, apply to pods a Service, ReplicationController, ReplicaSet or
#: StatefulSet selects); the pod's controller is how the extender tells, without watching them.
_SPREAD_BY_DEFAULT = frozenset({"ReplicaSet", "StatefulSet", "ReplicationController"})


def scheduling_preference(pod: Mapping[str, Any]) -> str:
    """The first of the pod's own soft scheduling preferences, which kube-scheduler's scores weigh
    ("" when it has none): preferred node affinity, preferred pod affinity or anti-affinity, a
    ``ScheduleAnyway`` topology spread constraint, or (with no constraint of its own) a controller
    whose pods kube-scheduler spreads by default.
    A filter may choose the node itself only for a pod without any (``--filter-picks-node``)."""
    spec = _spec(pod)
    affinity = spec.get("affinity") or {}
    for kind in ("nodeAffinity", "podAffinity", "podAntiAffinity"):
        if (affinity.get(kind) or {}).get("preferredDuringSchedulingIgnoredDuringExecution"):
            return f"preferred {kind}"
    constraints = spec.get("topologySpreadConstraints") or ()
    for constraint in constraints:
        if not isinstance(constraint, Mapping) or constraint.get("whenUnsatisfiable") != "DoNotSchedule":
            return "a ScheduleAnyway topology spread constraint"
    if constraints:
        return ""  # the system defaults apply only to a pod without constraints of its own
    for owner in _meta(pod).get("ownerReferences") or ():
        if isinstance(owner, Mapping) and owner.get("controller") and owner.get("kind") in _SPREAD_BY_DEFAULT:
            return f"spread by default as a {owner['kind']}'s pod"
    return ""


def tolerates_soft_taint(pod: Mapping[str, Any], key: str, value: str) -> bool:
    """Whether one of the pod's tolerations tolerates a ``PreferNoSchedule`` taint ``key=value``
    (core/v1's rule: an empty effect or PreferNoSchedule; an empty key with Exists matches every
    key; Equal, or no operator, compares the value). An operator this code does not know
    (1.35's alpha Lt and Gt) tolerates nothing here: the caller then leaves the choice to
    kube-scheduler."""
    for toleration in _spec(pod).get("tolerations") or ():
        if not isinstance(toleration, Mapping):
            continue
        if toleration.get("effect") not in (None, "", "PreferNoSchedule"):
            continue
        if toleration.get("key") and toleration.get("key") != key:
            continue
        operator = toleration.get("operator") or "Equal"
        if operator == "Exists" or (operator == "Equal" and (toleration.get("value") or "") == value):
            return True
    return False
