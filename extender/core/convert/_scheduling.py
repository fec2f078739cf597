"""``PodSchedulingContext`` (resource.k8s.io/v1alpha3, classic DRA, 1.26-1.31): how the scheduler
and a driver's controller negotiate the node for a pod's classic claims (spec/classic-dra.md §1.2).

Decoded with the API server's own rules, so that an object it would refuse is refused here too:
``spec.potentialNodes`` and each claim's ``unsuitableNodes`` hold at most 128 node names and no
name twice; claim entries are unique by name. The context is named after its pod and the pod is
its controlling owner (``owner_uid``).
"""

from __future__ import annotations

from extender.core.errors import InvalidObject
from extender.core.model import PodSchedulingContext

from ._base import V1ALPHA3, FieldError, check_type, mapping, object_dict, object_name, reported_as, sequence, string

__all__ = ["POD_SCHEDULING_NODE_LIST_MAX_SIZE", "decode_pod_scheduling_context"]

#: ``PodSchedulingNodeListMaxSize`` in the 1.31 code (the KEP text says 256: the code wins).
POD_SCHEDULING_NODE_LIST_MAX_SIZE = 128


def decode_pod_scheduling_context(raw: object, *, api_version: str | None = None) -> PodSchedulingContext:
    """Decode a PodSchedulingContext; raises ``InvalidObject`` naming the field."""
    body = object_dict(raw, "PodSchedulingContext")
    version = check_type(body, "PodSchedulingContext", api_version or V1ALPHA3)
    if version != V1ALPHA3:
        raise InvalidObject(f"PodSchedulingContext exists in {V1ALPHA3} only, not {version}", path="apiVersion")
    meta, name, namespace = object_name(body, "PodSchedulingContext", namespaced=True)
    with reported_as(f"PodSchedulingContext {namespace}/{name}"):
        spec = mapping(body.get("spec"), "spec")
        status = mapping(body.get("status"), "status")
        unsuitable: dict[str, tuple[str, ...]] = {}
        for i, entry in enumerate(sequence(status.get("resourceClaims"), "status.resourceClaims")):
            path = f"status.resourceClaims[{i}]"
            claim_name = string(mapping(entry, path).get("name"), f"{path}.name")
            if not claim_name:
                raise FieldError(f"{path}.name", "required")
            if claim_name in unsuitable:
                raise FieldError(f"{path}.name", f"Duplicate value: {claim_name!r}")
            unsuitable[claim_name] = _node_names(entry.get("unsuitableNodes"), f"{path}.unsuitableNodes")
        return PodSchedulingContext(
            namespace=namespace,
            name=name,
            uid=string(meta.get("uid"), "metadata.uid"),
            owner_uid=_controlling_pod(meta.get("ownerReferences")),
            selected_node=string(spec.get("selectedNode"), "spec.selectedNode"),
            potential_nodes=_node_names(spec.get("potentialNodes"), "spec.potentialNodes"),
            unsuitable_nodes=unsuitable,
            resource_version=string(meta.get("resourceVersion"), "metadata.resourceVersion"),
        )


def _node_names(raw: object, path: str) -> tuple[str, ...]:
    """A set of node names, as the API server validates it: at most 128, none empty, none twice."""
    items = sequence(raw, path)
    if len(items) > POD_SCHEDULING_NODE_LIST_MAX_SIZE:
        raise FieldError(path, f"must have at most {POD_SCHEDULING_NODE_LIST_MAX_SIZE} items")
    seen: set[str] = set()
    for i, item in enumerate(items):
        node = string(item, f"{path}[{i}]")
        if not node:
            raise FieldError(f"{path}[{i}]", "required")
        if node in seen:
            raise FieldError(f"{path}[{i}]", f"Duplicate value: {node!r}")
        seen.add(node)
    return tuple(items)


def _controlling_pod(raw: object) -> str:
    """The UID of the Pod named as controlling owner, or ""."""
    for i, ref in enumerate(sequence(raw, "metadata.ownerReferences")):
        entry = mapping(ref, f"metadata.ownerReferences[{i}]")
        if entry.get("controller") is True and entry.get("kind") == "Pod" and entry.get("apiVersion") == "v1":
            return string(entry.get("uid"), f"metadata.ownerReferences[{i}].uid")
    return ""
