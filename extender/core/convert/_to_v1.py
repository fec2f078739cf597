"""Conversion of raw ResourceClaim and ResourceClaimTemplate objects of any served version into
resource.k8s.io/v1 JSON: what ``GET /debug/resourceclaims/...`` answers (DESIGN.md, Contracts).

Pure dict-to-dict functions: the input is never changed, the output shares nothing with it. The
mapping follows the apiserver's conversions (kubernetes/kubernetes ``pkg/apis/resource/v1beta1``,
``v1alpha3`` and ``v1beta2`` ``conversion.go``, through the internal type that v1 mirrors):

- v1 — a deep copy, unchanged.
- v1beta2 — the same shape as v1 (upstream converts it field by field): only ``apiVersion`` changes.
- v1beta1 and the v1alpha3 of 1.32/1.33 — flat requests: the ExactDeviceRequest fields
  (``deviceClassName``, ``selectors``, ``allocationMode``, ``count``, ``adminAccess``,
  ``tolerations``, ``capacity``) move under ``exactly``; ``firstAvailable`` subrequests have the
  same shape in every version and are kept. Constraints, config, the whole status
  (``allocation`` with ``devices.results``/``config``, ``nodeSelector``, ``allocationTimestamp``;
  ``reservedFor``; ``devices`` with ``conditions``, ``data``, ``networkData``) and metadata have
  identical shapes and are copied. Every field has a v1 place: lossless. (Upstream never carries
  anything of a claim in annotations; the only such trick, ``resource.k8s.io/basic-device-names``,
  was for ResourceSlices in a prototype.)
- v1alpha3 of 1.31 (classic DRA) — ``spec.controller``, ``status.allocation.controller`` and
  ``status.deallocationRequested`` have no place in v1 and are dropped, as the apiserver dropped
  them when it removed the fields in 1.32 (no annotation, no other carrier). This is the one loss.
  ``adminAccess`` was a plain bool then; the value is kept as written.

What an older version lacks (``status.devices`` before 1.32, ``firstAvailable`` and tolerations
before 1.33, capacity requests, ``shareID``, ``consumedCapacity``, ``allocationTimestamp`` before
1.34) is simply absent from its objects and so from the result: nothing is invented or defaulted.

Edge cases, chosen to match the apiserver where it has an answer and our decoders where it has none:

- a flat request with ``firstAvailable`` and also a flat field with a value gets both ``exactly`` and
  ``firstAvailable``, as upstream does ("it might be invalid but that will be caught in validation");
  flat fields without a value (``""``, ``0``, ``false``, ``[]``, ``{}``, null) beside
  ``firstAvailable`` are left out, as the decoder ignores them there (upstream would still create
  ``exactly`` for a non-nil empty list or ``adminAccess: false``, and then reject the claim);
- a flat request with neither becomes ``exactly: {}`` (upstream: neither, which v1 validation
  rejects), so that the document still decodes as ``decode_resource_claim`` read the original (an
  empty class name, kept for the allocator to report);
- no defaults are applied (a claim read from an apiserver has them already; the decoders apply them
  to manifests); unknown fields are kept where they are; ``kind`` is filled in when missing.

The envelope is checked as the decoders check it: ``apiVersion`` falls back to the keyword
``api_version``, then v1; an unsupported version, another kind, or a non-object raise
``errors.InvalidObject``. A malformed body below the envelope is converted as far as its shape
allows (non-object requests are copied as they are), never rejected: validation is the decoders' job.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ._base import FLAT_VERSIONS, V1, V1ALPHA3, RawDict, check_type, object_dict

__all__ = ["resource_claim_template_to_v1", "resource_claim_to_v1"]

#: The ExactDeviceRequest fields that v1beta1/v1alpha3 write on the request itself, in v1's order.
_EXACT_FIELDS = ("deviceClassName", "selectors", "allocationMode", "count", "adminAccess", "tolerations", "capacity")


def resource_claim_to_v1(raw: Mapping[str, Any], *, api_version: str | None = None) -> RawDict:
    """A resource.k8s.io/v1 ResourceClaim equivalent to ``raw`` (any served version)."""
    body = object_dict(raw, "ResourceClaim")
    version = check_type(body, "ResourceClaim", api_version)
    out = _envelope(body, "ResourceClaim")
    if version in FLAT_VERSIONS:
        if isinstance(out.get("spec"), dict):
            out["spec"] = _claim_spec(out["spec"], version)
        status = out.get("status")
        if version == V1ALPHA3 and isinstance(status, dict):
            status.pop("deallocationRequested", None)
            allocation = status.get("allocation")
            if isinstance(allocation, dict):
                allocation.pop("controller", None)
    return out


def resource_claim_template_to_v1(raw: Mapping[str, Any], *, api_version: str | None = None) -> RawDict:
    """A resource.k8s.io/v1 ResourceClaimTemplate equivalent to ``raw``: its ``spec.spec`` is a claim
    spec, converted as :func:`resource_claim_to_v1` converts a claim's."""
    body = object_dict(raw, "ResourceClaimTemplate")
    version = check_type(body, "ResourceClaimTemplate", api_version)
    out = _envelope(body, "ResourceClaimTemplate")
    template = out.get("spec")
    if version in FLAT_VERSIONS and isinstance(template, dict) and isinstance(template.get("spec"), dict):
        template["spec"] = _claim_spec(template["spec"], version)
    return out


def _envelope(body: RawDict, kind: str) -> RawDict:
    """A deep copy with ``apiVersion`` v1 first and ``kind`` second, the rest in its order."""
    rest = copy.deepcopy({key: value for key, value in body.items() if key not in ("apiVersion", "kind")})
    return {"apiVersion": V1, "kind": body.get("kind") or kind, **rest}


def _claim_spec(spec: RawDict, version: str) -> RawDict:
    """A flat-version claim spec (already a private copy) in v1's shape."""
    if version == V1ALPHA3:
        spec.pop("controller", None)
    devices = spec.get("devices")
    if isinstance(devices, dict) and isinstance(devices.get("requests"), list):
        devices["requests"] = [_request(item) for item in devices["requests"]]
    return spec


def _request(item: object) -> object:
    if not isinstance(item, dict):
        return item
    first_available = item.get("firstAvailable")
    out: RawDict = {}
    if "name" in item:
        out["name"] = item["name"]
    if not first_available or any(_has_value(item.get(field)) for field in _EXACT_FIELDS):
        out["exactly"] = {field: item[field] for field in _EXACT_FIELDS if field in item}
    if first_available is not None:
        out["firstAvailable"] = first_available
    for key, value in item.items():
        if key not in _EXACT_FIELDS and key not in out:
            out[key] = value  # unknown to this version: kept where it was
    return out


def _has_value(value: object) -> bool:
    """Whether a flat field says something beside ``firstAvailable``: upstream's
    ``hasAnyMainRequestFieldsSet`` asks for non-zero values, our decoder's check (``_claims``)
    also ignores empty lists and ``adminAccess: false``; this follows the decoder, so that the
    converted document decodes as the original did."""
    return value not in (None, "", 0, [], {})
