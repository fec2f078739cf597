"""``PodGroup`` (scheduling.k8s.io v1alpha2 in 1.36; v1beta1 and v1alpha3 in 1.37) into
``extender.core.podgroups.PodGroup`` (spec/workloads-and-gangs.md §2).

Decoded with the API server's rules where they matter to planning: ``minCount`` at least 1, at
most one topology constraint, at most 4 claims, each naming exactly one of ``resourceClaimName``
and ``resourceClaimTemplateName``, entry names unique. 1.37's v1beta1 renames
``podGroupTemplateRef.workload`` to ``workloadRef`` and makes the disruption mode a union
(``{single: {}}`` | ``{all: {}}``); both spellings are read.
"""

from __future__ import annotations

from extender.core.errors import InvalidObject
from extender.core.podgroups import GANG_TOPOLOGY_ANNOTATION, PodGroup, PodGroupClaim

from ._base import (
    FieldError,
    integer,
    mapping,
    object_dict,
    object_name,
    optional_string,
    reported_as,
    sequence,
    string,
)

__all__ = ["MAX_POD_GROUP_CLAIMS", "POD_GROUP_VERSIONS", "SCHEDULING_GROUP", "decode_pod_group"]

SCHEDULING_GROUP = "scheduling.k8s.io"
#: The versions that serve PodGroups, newest first (discovery prefers them in this order).
POD_GROUP_VERSIONS = (f"{SCHEDULING_GROUP}/v1beta1", f"{SCHEDULING_GROUP}/v1alpha3", f"{SCHEDULING_GROUP}/v1alpha2")
#: ``MaxPodGroupResourceClaims``.
MAX_POD_GROUP_CLAIMS = 4


def decode_pod_group(raw: object, *, api_version: str | None = None) -> PodGroup:
    """Decode a PodGroup; raises ``InvalidObject`` naming the field."""
    body = object_dict(raw, "PodGroup")
    version = body.get("apiVersion") or api_version or POD_GROUP_VERSIONS[-1]
    if version not in POD_GROUP_VERSIONS:
        raise InvalidObject(
            f"unsupported apiVersion {version!r} (expected one of {', '.join(POD_GROUP_VERSIONS)})",
            path="apiVersion",
            obj="PodGroup",
        )
    found = body.get("kind")
    if found is not None and found != "PodGroup":
        raise InvalidObject(f"expected kind PodGroup, got {found!r}", path="kind", obj="PodGroup")
    meta, name, namespace = object_name(body, "PodGroup", namespaced=True)
    with reported_as(f"PodGroup {namespace}/{name}"):
        spec = mapping(body.get("spec"), "spec")
        status = mapping(body.get("status"), "status")
        topology_key, source = _topology(spec, mapping(meta.get("annotations"), "metadata.annotations"))
        priority = integer(spec.get("priority"), "spec.priority")
        return PodGroup(
            namespace=namespace,
            name=name,
            uid=string(meta.get("uid"), "metadata.uid"),
            api_version=str(version),
            resource_version=string(meta.get("resourceVersion"), "metadata.resourceVersion"),
            min_count=_min_count(spec),
            topology_key=topology_key,
            topology_source=source,
            claims=_claims(spec.get("resourceClaims")),
            claim_statuses=_claim_statuses(status.get("resourceClaimStatuses")),
            disruption_all=_disruption_all(spec),
            priority_class_name=string(spec.get("priorityClassName"), "spec.priorityClassName"),
            priority=priority,
            workload=_workload(spec),
            deleting=bool(meta.get("deletionTimestamp")),
        )


def _min_count(spec: dict[str, object]) -> int | None:
    policy = mapping(spec.get("schedulingPolicy"), "spec.schedulingPolicy")
    gang = policy.get("gang")
    if gang is None:
        return None
    if policy.get("basic") is not None:
        raise FieldError("spec.schedulingPolicy", "exactly one of basic and gang may be set")
    count = integer(mapping(gang, "spec.schedulingPolicy.gang").get("minCount"), "spec.schedulingPolicy.gang.minCount")
    if count is None or count < 1:
        raise FieldError("spec.schedulingPolicy.gang.minCount", "must be greater than or equal to 1")
    return count


def _topology(spec: dict[str, object], annotations: dict[str, object]) -> tuple[str, str]:
    constraints = mapping(spec.get("schedulingConstraints"), "spec.schedulingConstraints")
    topology = sequence(constraints.get("topology"), "spec.schedulingConstraints.topology")
    if len(topology) > 1:
        raise FieldError("spec.schedulingConstraints.topology", "must have at most 1 item")
    if topology:
        key = string(mapping(topology[0], "spec.schedulingConstraints.topology[0]").get("key"), "key")
        if not key:
            raise FieldError("spec.schedulingConstraints.topology[0].key", "required")
        return key, "constraints"
    annotated = annotations.get(GANG_TOPOLOGY_ANNOTATION)
    if annotated is not None:
        key = string(annotated, f"metadata.annotations[{GANG_TOPOLOGY_ANNOTATION}]").strip()
        if key:
            return key, "annotation"
    return "", ""


def _claims(raw: object) -> tuple[PodGroupClaim, ...]:
    items = sequence(raw, "spec.resourceClaims")
    if len(items) > MAX_POD_GROUP_CLAIMS:
        raise FieldError("spec.resourceClaims", f"must have at most {MAX_POD_GROUP_CLAIMS} items")
    claims: list[PodGroupClaim] = []
    for i, item in enumerate(items):
        path = f"spec.resourceClaims[{i}]"
        entry = mapping(item, path)
        name = string(entry.get("name"), f"{path}.name")
        if not name:
            raise FieldError(f"{path}.name", "required")
        if any(c.name == name for c in claims):
            raise FieldError(f"{path}.name", f"Duplicate value: {name!r}")
        claim_name = optional_string(entry.get("resourceClaimName"), f"{path}.resourceClaimName")
        template = optional_string(entry.get("resourceClaimTemplateName"), f"{path}.resourceClaimTemplateName")
        if (claim_name is None) == (template is None):
            raise FieldError(path, "exactly one of resourceClaimName and resourceClaimTemplateName must be set")
        claims.append(PodGroupClaim(name, claim_name, template))
    return tuple(claims)


def _claim_statuses(raw: object) -> tuple[tuple[str, str | None], ...]:
    out: list[tuple[str, str | None]] = []
    for i, item in enumerate(sequence(raw, "status.resourceClaimStatuses")):
        path = f"status.resourceClaimStatuses[{i}]"
        entry = mapping(item, path)
        out.append(
            (
                string(entry.get("name"), f"{path}.name"),
                optional_string(entry.get("resourceClaimName"), f"{path}.resourceClaimName"),
            )
        )
    return tuple(out)


def _disruption_all(spec: dict[str, object]) -> bool:
    mode = spec.get("disruptionMode")
    if mode is None:
        mode = spec.get("disruption")
    if mode is None or mode == "Pod":
        return False
    if mode == "PodGroup":
        return True
    if isinstance(mode, dict):  # v1beta1's union
        return mode.get("all") is not None
    raise FieldError("spec.disruptionMode", f"Unsupported value: {mode!r}: supported values: Pod, PodGroup")


def _workload(spec: dict[str, object]) -> str:
    ref = spec.get("workloadRef")
    if ref is None:
        template_ref = mapping(spec.get("podGroupTemplateRef"), "spec.podGroupTemplateRef")
        ref = template_ref.get("workload")
    return string(mapping(ref, "spec.workloadRef").get("workloadName"), "workloadName")
