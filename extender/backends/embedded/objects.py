"""Small helpers for raw Kubernetes objects (plain dicts) held by the embedded cluster."""

from __future__ import annotations

from typing import Any, TypeVar, cast

import orjson

from extender.core.errors import InvalidObject
from extender.state.clock import utc_now_text

__all__ = [
    "CLUSTER_SCOPED",
    "NAMESPACED",
    "ObjectKey",
    "copy_object",
    "describe",
    "key_of",
    "now_timestamp",
]

#: Kinds we know to be namespaced / cluster-scoped; other kinds keep whatever namespace they carry.
NAMESPACED = frozenset({"ResourceClaim", "ResourceClaimTemplate", "Pod", "PodGroup"})
CLUSTER_SCOPED = frozenset({"Node", "Namespace", "DeviceClass", "ResourceSlice"})

#: (kind, namespace, name); namespace is "" for cluster-scoped objects.
ObjectKey = tuple[str, str, str]

_T = TypeVar("_T")

_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_UTC_Z | orjson.OPT_NAIVE_UTC


def copy_object(raw: _T) -> _T:
    """A deep copy as plain JSON data. Also normalises what PyYAML produces beyond JSON:
    unquoted timestamps (``datetime``) become RFC 3339 text as the apiserver writes it."""
    try:
        return cast(_T, orjson.loads(orjson.dumps(raw, option=_OPTIONS)))
    except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
        raise InvalidObject(f"not representable as JSON: {exc}", obj=describe(raw)) from exc


def key_of(raw: dict[str, Any]) -> ObjectKey:
    """The identity of an object, defaulting the namespace of namespaced kinds to ``default``."""
    kind = raw.get("kind")
    if not isinstance(kind, str) or not kind:
        raise InvalidObject("kind is required", obj=describe(raw))
    meta = raw.get("metadata")
    if not isinstance(meta, dict):
        raise InvalidObject("metadata is required", obj=describe(raw))
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidObject("required", path="metadata.name", obj=describe(raw))
    namespace = meta.get("namespace") or ""
    if not isinstance(namespace, str):
        raise InvalidObject("must be a string", path="metadata.namespace", obj=describe(raw))
    if kind in NAMESPACED and not namespace:
        namespace = "default"
    elif kind in CLUSTER_SCOPED:
        namespace = ""
    return kind, namespace, name


def describe(raw: Any) -> str:
    """``Kind ns/name`` (or as much of it as the object has) for error messages."""
    if not isinstance(raw, dict):
        return "object"
    kind = raw.get("kind") if isinstance(raw.get("kind"), str) and raw.get("kind") else "object"
    meta = raw.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return str(kind)
    namespace = meta.get("namespace")
    if not namespace and kind in NAMESPACED:
        namespace = "default"
    if isinstance(namespace, str) and namespace and kind not in CLUSTER_SCOPED:
        return f"{kind} {namespace}/{name}"
    return f"{kind} {name}"


def now_timestamp() -> str:
    """The current time as a ``metav1.Time`` (seconds, UTC, ``Z``)."""
    return utc_now_text()
