"""What the API server checks when a ResourceClaim is updated, as pure functions on raw dicts.

The embedded cluster is strict on purpose: a write that the real API server would reject must fail
here too, so the scheduling service cannot come to rely on something a cluster refuses. Messages
follow apimachinery's field errors (``<path>: <Type>: <detail>``) behind the object's identity;
every failure is an ``InvalidObject`` (HTTP 422 Invalid on a real cluster).
"""

from __future__ import annotations

from typing import Any

from extender.core.convert import decode_allocation_result, decode_resource_claim
from extender.core.errors import InvalidObject

__all__ = [
    "MAX_RESERVED_FOR",
    "check_metadata",
    "check_no_new_finalizers",
    "check_spec_unchanged",
    "check_status_update",
]

#: resource.ResourceClaimReservedForMaxSize.
MAX_RESERVED_FOR = 256


def check_metadata(meta: dict[str, Any], obj: str) -> None:
    """Shapes of the user-settable metadata fields an update replaces."""
    for field in ("labels", "annotations"):
        value = meta.get(field)
        if value is None:
            continue
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise InvalidObject("Invalid value: must map strings to strings", path=f"metadata.{field}", obj=obj)
    finalizers = meta.get("finalizers")
    if finalizers is not None and (
        not isinstance(finalizers, list) or not all(isinstance(f, str) and f for f in finalizers)
    ):
        raise InvalidObject("Invalid value: must be a list of non-empty strings", path="metadata.finalizers", obj=obj)
    owners = meta.get("ownerReferences")
    if owners is not None and (not isinstance(owners, list) or not all(isinstance(o, dict) for o in owners)):
        raise InvalidObject("Invalid value: must be a list of objects", path="metadata.ownerReferences", obj=obj)


def check_no_new_finalizers(old_meta: dict[str, Any], new_finalizers: list[str], obj: str) -> None:
    """An object being deleted may lose finalizers but never gain one."""
    if not old_meta.get("deletionTimestamp"):
        return
    old = set(old_meta.get("finalizers") or ())
    added = [f for f in new_finalizers if f not in old]
    if added:
        found = ", ".join(f'"{f}"' for f in added)
        raise InvalidObject(
            "Forbidden: no new finalizers can be added if the object is being deleted, "
            f"found new finalizers []string{{{found}}}",
            path="metadata.finalizers",
            obj=obj,
        )


def check_spec_unchanged(old: dict[str, Any], new_spec: Any, obj: str) -> None:
    """A claim's spec is immutable. Compared after decoding (which applies the apiserver's
    defaults), so a client echoing the defaulted form of the same spec is not refused."""
    if new_spec == old.get("spec"):
        return
    before = decode_resource_claim(old)
    try:
        after = decode_resource_claim({**old, "spec": new_spec, "status": {}})
    except InvalidObject:
        after = None
    if after is None or (before.requests, before.constraints, before.config) != (
        after.requests,
        after.constraints,
        after.config,
    ):
        raise InvalidObject('Invalid value: "object": field is immutable', path="spec", obj=obj)


def check_status_update(old: dict[str, Any], status: Any, obj: str) -> None:
    """The status rules of ``validateResourceClaimStatusUpdate`` (the allocation result itself is
    checked by the decoder when the store ingests the object)."""
    if not isinstance(status, dict):
        raise InvalidObject("Invalid value: must be an object", path="status", obj=obj)
    reserved = status.get("reservedFor") or []
    if not isinstance(reserved, list):
        raise InvalidObject("Invalid value: must be a list", path="status.reservedFor", obj=obj)
    if len(reserved) > MAX_RESERVED_FOR:
        raise InvalidObject(
            f"Too many: {len(reserved)}: must have at most {MAX_RESERVED_FOR} items", path="status.reservedFor", obj=obj
        )
    seen: set[str] = set()
    for index, entry in enumerate(reserved):
        path = f"status.reservedFor[{index}]"
        if not isinstance(entry, dict):
            raise InvalidObject("Invalid value: must be an object", path=path, obj=obj)
        for field in ("resource", "name", "uid"):
            if not isinstance(entry.get(field), str) or not entry.get(field):
                raise InvalidObject("Required value", path=f"{path}.{field}", obj=obj)
        uid = entry["uid"]
        if uid in seen:
            raise InvalidObject(f'Duplicate value: "{uid}"', path=f"{path}.uid", obj=obj)
        seen.add(uid)

    allocation = status.get("allocation")
    old_status = old.get("status") or {}
    old_allocation = old_status.get("allocation")
    if reserved:
        if allocation is None:
            raise InvalidObject(
                "Forbidden: may not be specified when `allocated` is not set", path="status.reservedFor", obj=obj
            )
        if (old.get("metadata") or {}).get("deletionTimestamp") or status.get("deallocationRequested"):
            before = {_consumer_key(e) for e in old_status.get("reservedFor") or () if isinstance(e, dict)}
            if any(_consumer_key(e) not in before for e in reserved):
                raise InvalidObject(
                    "Forbidden: new entries may not be added while `deallocationRequested` or "
                    "`deletionTimestamp` are set",
                    path="status.reservedFor",
                    obj=obj,
                )
    _check_deallocation_request(old_status, status, obj)
    if old_allocation is not None and allocation is not None and not _same_allocation(old_allocation, allocation):
        raise InvalidObject('Invalid value: "object": field is immutable', path="status.allocation", obj=obj)


def _check_deallocation_request(old_status: dict[str, Any], status: dict[str, Any], obj: str) -> None:
    """v1alpha3 (classic DRA): ``deallocationRequested`` asks the driver to deallocate. As 1.31's
    validation: it needs an allocation (reported on ``status``), may not be newly set beside
    consumers, and goes only together with the allocation."""
    path = "status.deallocationRequested"
    requested, was = bool(status.get("deallocationRequested")), bool(old_status.get("deallocationRequested"))
    if requested and status.get("allocation") is None:
        raise InvalidObject(
            "Forbidden: `allocation` must be set when `deallocationRequested` is set", path="status", obj=obj
        )
    if requested and not was and status.get("reservedFor"):
        raise InvalidObject(
            "Forbidden: deallocation cannot be requested while `reservedFor` is set", path=path, obj=obj
        )
    if was and not requested and status.get("allocation") is not None:
        raise InvalidObject("Forbidden: may not be cleared when `allocation` is set", path=path, obj=obj)


def _consumer_key(entry: dict[str, Any]) -> tuple[str, str, str, str]:
    return (entry.get("apiGroup") or "", entry.get("resource") or "", entry.get("name") or "", entry.get("uid") or "")


def _same_allocation(old: Any, new: Any) -> bool:
    if old == new:
        return True
    try:
        return decode_allocation_result(old) == decode_allocation_result(new)
    except InvalidObject:
        return False
