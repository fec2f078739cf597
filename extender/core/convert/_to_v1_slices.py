"""Conversion of raw ResourceSlice and DeviceClass objects of any served version into
resource.k8s.io/v1 JSON: what ``GET /debug/objects`` answers for them (DESIGN.md, Contracts).

The same kind of pure dict-to-dict functions as ``_to_v1`` (claims): the input is never changed,
the output shares nothing with it. The mapping follows the apiserver's conversions (kubernetes/
kubernetes ``pkg/apis/resource/v1beta1/conversion.go``, ``Convert_v1beta1_ResourceSliceSpec_To_...``
and ``Convert_v1beta1_Device_To_...``, through the internal type that v1 mirrors).

ResourceSlice:

- v1 — a deep copy, unchanged.
- v1beta2 — the same shape as v1 (devices flat, ``nodeName``/``allNodes`` pointers, upstream
  converts it field by field): only ``apiVersion`` changes.
- v1beta1 and v1alpha3 — every field of ``basic`` moves onto the device itself, in v1's order
  (``attributes``, ``capacity``, ``consumesCounters``, ``nodeName``, ``nodeSelector``, ``allNodes``,
  ``taints``, ``bindsToNode``, ``bindingConditions``, ``bindingFailureConditions``,
  ``allowMultipleAllocations``; a field unknown to us inside ``basic`` follows them, on the
  device). v1alpha3's bare capacity quantities become ``{value: q}`` (a hand-written v1beta1
  manifest's too: the decoders read both). The slice's plain ``nodeName``/``allNodes`` become v1's
  pointers as upstream converts them: ``""``/``false`` (and null) mean unset and are left out, any
  other value is kept. ``nodeSelector``, ``perDeviceNodeSelection``, ``sharedCounters``, the pool,
  the driver and metadata have identical shapes and are copied. Every field has a v1 place:
  lossless (upstream carries nothing of a slice in annotations; ``resource.k8s.io/basic-device-names``
  was a prototype's).

DeviceClass: ``selectors``, ``config`` and ``extendedResourceName`` have the same shape in every
version, so only ``apiVersion`` changes — except v1alpha3's ``spec.suitableNodes`` (classic DRA,
1.31), which has no place in v1 and is dropped, as the apiserver dropped it in 1.32. That is the one
loss; the debug endpoints answer such a class as stored (``extender.views.debug.without_v1_form``).

What an older version lacks (shared counters, taints, binding conditions, consumable capacity,
``extendedResourceName``...) is absent from its objects and so from the result: nothing is invented
or defaulted. Edge cases:

- a v1beta1/v1alpha3 device-level field that v1 gives a meaning to (``attributes`` beside
  ``basic``, say) is dropped: the decoders, like the apiserver, never read it there, and moving it
  would give it a meaning; other unknown fields stay where they are; ``kind`` is filled in when
  missing;
- a device without ``basic`` becomes a device with its name only, as the decoders read it;
- malformed parts (a non-object device or ``basic``, a non-list ``devices``) are copied as they
  are, never rejected: validation is the decoders' job. The field paths of a malformed slice's
  ``invalid_reason`` lose their ``basic.`` segment after conversion; nothing else of the decoded
  model changes.

The envelope is checked as the decoders check it: ``apiVersion`` falls back to the keyword
``api_version``, then v1; an unsupported version, another kind, or a non-object raise
``errors.InvalidObject``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._base import FLAT_VERSIONS, V1ALPHA3, RawDict, check_type, object_dict
from ._to_v1 import _envelope

__all__ = ["device_class_to_v1", "resource_slice_to_v1"]

#: The fields of a v1 Device besides ``name``, in v1's order: what v1beta1/v1alpha3 write in ``basic``.
_DEVICE_FIELDS = (
    "attributes",
    "capacity",
    "consumesCounters",
    "nodeName",
    "nodeSelector",
    "allNodes",
    "taints",
    "bindsToNode",
    "bindingConditions",
    "bindingFailureConditions",
    "allowMultipleAllocations",
)


def resource_slice_to_v1(raw: Mapping[str, Any], *, api_version: str | None = None) -> RawDict:
    """A resource.k8s.io/v1 ResourceSlice equivalent to ``raw`` (any served version)."""
    body = object_dict(raw, "ResourceSlice")
    version = check_type(body, "ResourceSlice", api_version)
    out = _envelope(body, "ResourceSlice")
    spec = out.get("spec")
    if version in FLAT_VERSIONS and isinstance(spec, dict):
        _slice_spec(spec)
    return out


def device_class_to_v1(raw: Mapping[str, Any], *, api_version: str | None = None) -> RawDict:
    """A resource.k8s.io/v1 DeviceClass equivalent to ``raw``; a v1alpha3 class loses
    ``spec.suitableNodes`` (no v1 place)."""
    body = object_dict(raw, "DeviceClass")
    version = check_type(body, "DeviceClass", api_version)
    out = _envelope(body, "DeviceClass")
    spec = out.get("spec")
    if version == V1ALPHA3 and isinstance(spec, dict):
        spec.pop("suitableNodes", None)
    return out


def _slice_spec(spec: RawDict) -> None:
    """A flat-version slice spec (already a private copy), rewritten in place in v1's shape."""
    # Plain values upstream turns into pointers: the zero value (or null) becomes "unset".
    if "nodeName" in spec and (spec["nodeName"] is None or spec["nodeName"] == ""):
        del spec["nodeName"]
    if "allNodes" in spec and (spec["allNodes"] is None or spec["allNodes"] is False):
        del spec["allNodes"]
    devices = spec.get("devices")
    if isinstance(devices, list):
        spec["devices"] = [_device(item) for item in devices]


def _device(item: object) -> object:
    if not isinstance(item, dict):
        return item
    basic = item.get("basic")
    if basic is None:
        basic = {}
    elif not isinstance(basic, dict):
        return item  # malformed: copied as it is
    out: RawDict = {}
    if "name" in item:
        out["name"] = item["name"]
    for field in _DEVICE_FIELDS:
        if field in basic:
            out[field] = basic[field]
    for key, value in basic.items():
        if key != "name" and key not in out:
            out[key] = value  # unknown to us inside basic: a device field of a later version
    capacity = out.get("capacity")
    if isinstance(capacity, dict):
        out["capacity"] = {name: _capacity(value) for name, value in capacity.items()}
    for key, value in item.items():
        if key != "basic" and key not in _DEVICE_FIELDS and key not in out:
            out[key] = value  # unknown to this version: kept where it was
    return out


def _capacity(value: object) -> object:
    """v1alpha3's bare quantity (a string, or a number as the apiserver also accepts) as v1's
    ``{value: q}``; anything else as it is."""
    if isinstance(value, str) or (isinstance(value, int | float) and not isinstance(value, bool)):
        return {"value": value}
    return value
