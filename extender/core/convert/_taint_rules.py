"""DeviceTaintRule decoding (resource.k8s.io/v1beta2 and v1alpha3: the same schema in both)."""

from __future__ import annotations

from extender.core.errors import InvalidObject
from extender.core.model import DeviceTaint, DeviceTaintRule

from ._base import V1ALPHA3, V1BETA2, mapping, object_dict, object_name, optional_string, reported_as, string, timestamp

__all__ = ["decode_device_taint_rule"]

_VERSIONS = (V1BETA2, V1ALPHA3)
#: The effects the API server accepts (validation), of which NoSchedule and NoExecute block.
_EFFECTS = ("None", "NoSchedule", "NoExecute")


def decode_device_taint_rule(raw: object) -> DeviceTaintRule:
    """Decode a DeviceTaintRule; raises ``InvalidObject`` naming the field."""
    body = object_dict(raw, "DeviceTaintRule")
    version = body.get("apiVersion") or V1BETA2
    if version not in _VERSIONS:
        raise InvalidObject(
            f"unsupported apiVersion {version!r} (expected one of {', '.join(_VERSIONS)})",
            path="apiVersion",
            obj="DeviceTaintRule",
        )
    if body.get("kind") not in (None, "DeviceTaintRule"):
        raise InvalidObject(f"expected kind DeviceTaintRule, got {body.get('kind')!r}", path="kind")
    meta, name, _ = object_name(body, "DeviceTaintRule", namespaced=False)
    with reported_as(f"DeviceTaintRule {name}"):
        spec = mapping(body.get("spec"), "spec")
        selector = mapping(spec.get("deviceSelector"), "spec.deviceSelector")
        taint = mapping(spec.get("taint"), "spec.taint")
        key = string(taint.get("key"), "spec.taint.key")
        if not key:
            raise InvalidObject("Required value", path="spec.taint.key", obj=f"DeviceTaintRule {name}")
        effect = string(taint.get("effect"), "spec.taint.effect")
        if effect not in _EFFECTS:
            raise InvalidObject(
                f'Unsupported value: "{effect}": supported values: "{_EFFECTS[0]}", "{_EFFECTS[1]}", "{_EFFECTS[2]}"',
                path="spec.taint.effect",
                obj=f"DeviceTaintRule {name}",
            )
        return DeviceTaintRule(
            name=name,
            driver=optional_string(selector.get("driver"), "spec.deviceSelector.driver"),
            pool=optional_string(selector.get("pool"), "spec.deviceSelector.pool"),
            device=optional_string(selector.get("device"), "spec.deviceSelector.device"),
            taint=DeviceTaint(
                key=key,
                effect=effect,
                value=string(taint.get("value"), "spec.taint.value"),
                time_added=timestamp(taint.get("timeAdded"), "spec.taint.timeAdded"),
            ),
            resource_version=string(meta.get("resourceVersion"), "metadata.resourceVersion"),
        )
