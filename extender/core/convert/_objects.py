"""Node decoding, the public NodeSelector decoder and ``decode_object``, which dispatches on kind."""

from __future__ import annotations

from collections.abc import Callable

from extender.core.errors import InvalidObject
from extender.core.extended import scalar_allocatable
from extender.core.model import (
    DeviceClass,
    DeviceTaintRule,
    NodeInfo,
    NodeSelector,
    PodSchedulingContext,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)

from ._base import GROUP, node_selector, object_dict, object_name, reported_as, string_map
from ._claims import decode_device_class, decode_resource_claim, decode_resource_claim_template
from ._scheduling import decode_pod_scheduling_context
from ._slices import decode_resource_slice
from ._taint_rules import decode_device_taint_rule

__all__ = ["DecodedObject", "decode_node", "decode_node_selector", "decode_object"]

DecodedObject = (
    DeviceClass
    | ResourceClaim
    | ResourceClaimTemplate
    | ResourceSlice
    | NodeInfo
    | PodSchedulingContext
    | DeviceTaintRule
)

_DRA_DECODERS: dict[str, Callable[[object], DecodedObject]] = {
    "DeviceClass": decode_device_class,
    "ResourceClaim": decode_resource_claim,
    "ResourceClaimTemplate": decode_resource_claim_template,
    "ResourceSlice": decode_resource_slice,
    "DeviceTaintRule": decode_device_taint_rule,
    "PodSchedulingContext": decode_pod_scheduling_context,
}


def decode_node(raw: object) -> NodeInfo:
    """A core/v1 Node, reduced to what node matching needs: name and labels."""
    body = object_dict(raw, "Node")
    version = body.get("apiVersion")
    if version not in (None, "v1"):
        raise InvalidObject(f"unsupported apiVersion {version!r} (expected v1)", path="apiVersion", obj="Node")
    kind = body.get("kind")
    if kind not in (None, "Node"):
        raise InvalidObject(f"expected kind Node, got {kind!r}", path="kind", obj="Node")
    meta, name, _ = object_name(body, "Node", namespaced=False)
    with reported_as(f"Node {name}"):
        status = body.get("status")
        allocatable = scalar_allocatable(status.get("allocatable")) if isinstance(status, dict) else {}
        return NodeInfo(
            name=name,
            labels=string_map(meta.get("labels"), "metadata.labels"),
            allocatable=allocatable,
            soft_taints=_soft_taints(body.get("spec")),
        )


def _soft_taints(spec: object) -> tuple[tuple[str, str], ...]:
    """``spec.taints`` of effect PreferNoSchedule as (key, value). Read leniently: the node's labels
    are what matching needs, and a taint the API server would not have accepted must not cost
    them; such a PreferNoSchedule taint is kept with its fields as text, so that only a toleration
    of every key tolerates it (a filter then leaves the choice to kube-scheduler)."""
    taints = spec.get("taints") if isinstance(spec, dict) else None
    if not isinstance(taints, list):
        return ()
    return tuple(
        (_text(taint.get("key")), _text(taint.get("value")))
        for taint in taints
        if isinstance(taint, dict) and taint.get("effect") == "PreferNoSchedule"
    )


def _text(value: object) -> str:
    return value if isinstance(value, str) else ("" if value is None else f"\x00{value!r}")


def decode_node_selector(raw: object) -> NodeSelector:
    """A core/v1 NodeSelector on its own (``{nodeSelectorTerms: [...]}``); raises ``InvalidObject``."""
    with reported_as("NodeSelector"):
        return node_selector(raw, "")


def decode_object(raw: object, *, same_spec_as: ResourceClaim | None = None) -> DecodedObject:
    """Decode any supported object by its ``kind``; other kinds raise ``InvalidObject``.
    ``same_spec_as``: for a ResourceClaim, see ``decode_resource_claim``."""
    body = object_dict(raw, "object")
    kind = body.get("kind")
    if kind == "Node":
        return decode_node(body)
    decoder = _DRA_DECODERS.get(kind) if isinstance(kind, str) else None
    if decoder is None:
        raise InvalidObject(f"unsupported kind {kind!r}", path="kind", obj=_describe(body))
    version = body.get("apiVersion")
    if not isinstance(version, str) or not version.startswith(f"{GROUP}/"):
        raise InvalidObject(
            f"unsupported apiVersion {version!r} for {kind} (expected {GROUP}/<version>)",
            path="apiVersion",
            obj=_describe(body),
        )
    if same_spec_as is not None and kind == "ResourceClaim":
        return decode_resource_claim(body, same_spec_as=same_spec_as)
    return decoder(body)


def _describe(body: dict[str, object]) -> str:
    meta = body.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    kind = body.get("kind")
    label = kind if isinstance(kind, str) and kind else "object"
    return f"{label} {name}" if isinstance(name, str) and name else label
