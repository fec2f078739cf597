"""What the DRAControlPlaneController gate ("classic DRA", Kubernetes 1.31) changes in the
resource.k8s.io v1alpha3 REST strategies besides serving PodSchedulingContext.

With the gate off, the apiserver's ``dropDisabledFields`` clears the gated fields of a v1alpha3
write before validation and storage, silently (no error, no warning): ``ResourceClaim``
``spec.controller``, ``status.allocation.controller`` and ``status.deallocationRequested``, and
``DeviceClass`` ``spec.suitableNodes``. As upstream, a field the stored object already uses is
kept (so an object written while the gate was on stays as it is). Other versions have no such
fields; the fake leaves their writes alone.
"""

from __future__ import annotations

from typing import Any

__all__ = ["drop_disabled_fields"]

#: (kind, path inside the object) of every field behind the gate.
GATED_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ResourceClaim", ("spec", "controller")),
    ("ResourceClaim", ("status", "allocation", "controller")),
    ("ResourceClaim", ("status", "deallocationRequested")),
    ("DeviceClass", ("spec", "suitableNodes")),
)


def _lookup(obj: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def _in_use(obj: dict[str, Any] | None, path: tuple[str, ...]) -> bool:
    return obj is not None and _lookup(obj, path) not in (None, "", False, {})


def drop_disabled_fields(kind: str, new: dict[str, Any], old: dict[str, Any] | None, *, parts: str = "") -> None:
    """Clear, in place, the gated fields of ``new`` (a v1alpha3 write with the gate off) that
    ``old`` (None on create) does not use. ``parts``: only fields under this top-level key
    ("spec" or "status"; "" for both), as a status write touches only the status."""
    for gated_kind, path in GATED_FIELDS:
        if gated_kind != kind or (parts and path[0] != parts) or _in_use(old, path):
            continue
        parent = _lookup(new, path[:-1])
        if isinstance(parent, dict):
            parent.pop(path[-1], None)
