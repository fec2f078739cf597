"""Shared pieces of the decoders: API versions, the field-error type, typed getters for raw JSON
values, cached quantity/semver parsing, and the small structures every kind uses (metadata, node
selectors, tolerations, opaque configuration).

Raw objects are plain ``dict``/``list`` trees as produced by orjson or ``yaml.safe_load``. Getters
raise ``FieldError(path, reason)``; the public decoders turn that into ``errors.InvalidObject``
(classes, claims, templates) or into ``ResourceSlice.invalid_reason`` (slices).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import sys
from collections.abc import Callable, Mapping
from functools import lru_cache
from types import TracebackType
from typing import Any, TypeAlias, TypeVar

from extender.core.errors import InvalidObject
from extender.core.model import (
    DeviceToleration,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    OpaqueConfig,
    UnparsedVersion,
)
from extender.core.quantity import Quantity
from extender.core.semver import Semver

#: A JSON object as decoded by orjson / PyYAML.
RawDict: TypeAlias = dict[str, Any]

GROUP = "resource.k8s.io"
V1 = "resource.k8s.io/v1"
V1BETA2 = "resource.k8s.io/v1beta2"
V1BETA1 = "resource.k8s.io/v1beta1"
V1ALPHA3 = "resource.k8s.io/v1alpha3"
#: Every resource.k8s.io version whose DRA objects we decode, newest first.
SERVED_VERSIONS = (V1, V1BETA2, V1BETA1, V1ALPHA3)
#: Versions with flat requests, ``basic`` devices and non-pointer slice ``nodeName``/``allNodes``.
FLAT_VERSIONS = frozenset((V1BETA1, V1ALPHA3))

_EMPTY: RawDict = {}

#: Driver, pool, device and attribute names repeat across thousands of devices: intern them.
sys_intern = sys.intern


class FieldError(Exception):
    """A malformed field: ``path`` is the JSON field path as the apiserver would name it."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}" if path else reason)
        self.path = path
        self.reason = reason


class reported_as:
    """Turn a ``FieldError`` raised inside into ``InvalidObject`` naming the object.

    A class rather than a ``contextmanager`` generator: every decoded object enters one, and a
    bind decodes its claim twice (each write comes back through the store)."""

    __slots__ = ("obj",)

    def __init__(self, obj: str) -> None:
        self.obj = obj

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if isinstance(exc, FieldError):
            raise InvalidObject(exc.reason, path=exc.path, obj=self.obj) from None


# --- typed getters ----------------------------------------------------------------------------


def mapping(raw: object, path: str) -> RawDict:
    """A JSON object; ``None`` (absent) reads as empty."""
    if raw is None:
        return _EMPTY
    if isinstance(raw, dict):
        return raw
    raise FieldError(path, "must be an object")


def sequence(raw: object, path: str) -> list[Any]:
    """A JSON array; ``None`` (absent) reads as empty."""
    if raw is None:
        return []
    if isinstance(raw, list | tuple):
        return list(raw) if isinstance(raw, tuple) else raw
    raise FieldError(path, "must be a list")


def string(raw: object, path: str) -> str:
    """A string; ``None`` (absent) reads as ``""``, as Go's zero value."""
    if raw is None:
        return ""
    if isinstance(raw, str):
        return raw
    raise FieldError(path, "must be a string")


def required_string(raw: object, path: str) -> str:
    value = string(raw, path)
    if not value:
        raise FieldError(path, "required")
    return value


def optional_string(raw: object, path: str) -> str | None:
    """A string pointer: absent or empty reads as ``None``."""
    return string(raw, path) or None


def boolean(raw: object, path: str) -> bool | None:
    """A ``*bool``: ``None`` when absent, so callers can tell "unset" from ``false``."""
    if raw is None or isinstance(raw, bool):
        return raw
    raise FieldError(path, "must be a boolean")


def integer(raw: object, path: str) -> int | None:
    """An int64; ``None`` when absent. Booleans are not integers here (YAML ``true`` is not 1)."""
    if raw is None:
        return None
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    raise FieldError(path, "must be an integer")


def strings(raw: object, path: str) -> tuple[str, ...]:
    """A list of strings."""
    items = sequence(raw, path)
    for index, item in enumerate(items):
        if not isinstance(item, str):
            raise FieldError(f"{path}[{index}]", "must be a string")
    return tuple(items)


def string_map(raw: object, path: str) -> dict[str, str]:
    """A ``map[string]string`` (labels, annotations)."""
    items = mapping(raw, path)
    for key, value in items.items():
        if not isinstance(value, str):
            raise FieldError(f"{path}[{key}]", "must be a string")
    return dict(items)


def timestamp(raw: object, path: str) -> str | None:
    """A ``metav1.Time`` kept as its RFC 3339 text. PyYAML turns unquoted timestamps into
    ``datetime`` objects, which are formatted back the way the apiserver writes them."""
    if raw is None or raw == "":
        return None
    if isinstance(raw, str):
        return raw
    if isinstance(raw, datetime.datetime):
        offset = raw.utcoffset()
        if offset is None or offset == datetime.timedelta(0):
            return raw.strftime("%Y-%m-%dT%H:%M:%SZ")
        return raw.isoformat()
    raise FieldError(path, "must be a timestamp string")


def limit(items: list[Any] | Mapping[str, Any], maximum: int, path: str) -> None:
    if len(items) > maximum:
        raise FieldError(path, f"must have at most {maximum} items")


# --- quantities and versions (cached: the same few texts repeat across thousands of devices) ----


@lru_cache(maxsize=8192)
def _parse_quantity(text: str) -> Quantity:
    return Quantity.parse(text)


def quantity(raw: object, path: str) -> Quantity:
    """A ``resource.Quantity``: a string, or a plain number as the apiserver also accepts."""
    try:
        if isinstance(raw, str):
            return _parse_quantity(raw.strip())
        if raw is None:
            raise FieldError(path, "required")
        return Quantity.from_json(raw)
    except ValueError as exc:
        raise FieldError(path, str(exc)) from None


def quantity_map(raw: object, path: str) -> dict[str, Quantity]:
    """``map[QualifiedName]Quantity`` with interned keys."""
    return {sys_intern(name): quantity(value, f"{path}[{name}]") for name, value in mapping(raw, path).items()}


@lru_cache(maxsize=8192)
def parse_version(text: str) -> Semver | UnparsedVersion:
    """A ``version`` attribute. Unparsable text is kept (see ``UnparsedVersion``) so that the CEL
    layer can fail the way upstream does, on evaluation, instead of the device vanishing."""
    try:
        return Semver.parse(text)
    except ValueError as exc:
        return UnparsedVersion(text, str(exc))


# --- object envelope ----------------------------------------------------------------------------


def object_dict(raw: object, kind: str) -> RawDict:
    if not isinstance(raw, dict):
        raise InvalidObject(f"must be a JSON object, not {type(raw).__name__}", obj=kind)
    return raw


def check_type(raw: RawDict, kind: str, api_version: str | None) -> str:
    """Check ``apiVersion``/``kind`` and return the version the object is written in.

    List responses omit ``apiVersion``/``kind`` on their items, so a missing apiVersion falls back
    to the caller's ``api_version`` (what it listed), else to v1; a missing kind is accepted.
    """
    version = raw.get("apiVersion") or api_version or V1
    if version not in SERVED_VERSIONS:
        raise InvalidObject(
            f"unsupported apiVersion {version!r} (expected one of {', '.join(SERVED_VERSIONS)})",
            path="apiVersion",
            obj=kind,
        )
    found = raw.get("kind")
    if found is not None and found != kind:
        raise InvalidObject(f"expected kind {kind}, got {found!r}", path="kind", obj=kind)
    return str(version)


def object_name(raw: RawDict, kind: str, *, namespaced: bool) -> tuple[RawDict, str, str]:
    """(metadata, name, namespace) with a clear error when the name is missing. Namespaced objects
    without a namespace are in ``default``, as ``kubectl apply`` would put them."""
    with reported_as(kind):
        meta = mapping(raw.get("metadata"), "metadata")
        name = string(meta.get("name"), "metadata.name")
        namespace = string(meta.get("namespace"), "metadata.namespace") if namespaced else ""
    if not name:
        raise InvalidObject("required", path="metadata.name", obj=kind)
    if namespaced and not namespace:
        namespace = "default"
    return meta, name, namespace


# --- node selectors -------------------------------------------------------------------------------


def node_selector(raw: object, path: str) -> NodeSelector:
    """A core/v1 NodeSelector. Operators are kept as written: a malformed selector must fail at
    node-selection time with upstream's fatal text, not at decode time."""
    terms_path = f"{path}.nodeSelectorTerms" if path else "nodeSelectorTerms"
    terms = sequence(mapping(raw, path).get("nodeSelectorTerms"), terms_path)
    return NodeSelector(tuple(_term(term, f"{terms_path}[{i}]") for i, term in enumerate(terms)))


def _term(raw: object, path: str) -> NodeSelectorTerm:
    body = mapping(raw, path)
    return NodeSelectorTerm(
        match_expressions=_requirements(body.get("matchExpressions"), f"{path}.matchExpressions"),
        match_fields=_requirements(body.get("matchFields"), f"{path}.matchFields"),
    )


def _requirements(raw: object, path: str) -> tuple[NodeSelectorRequirement, ...]:
    result = []
    for index, item in enumerate(sequence(raw, path)):
        item_path = f"{path}[{index}]"
        body = mapping(item, item_path)
        result.append(
            NodeSelectorRequirement(
                key=string(body.get("key"), f"{item_path}.key"),
                operator=string(body.get("operator"), f"{item_path}.operator"),
                values=strings(body.get("values"), f"{item_path}.values"),
            )
        )
    return tuple(result)


# --- small shared structures ----------------------------------------------------------------------


def toleration(raw: object, path: str) -> DeviceToleration:
    body = mapping(raw, path)
    return DeviceToleration(
        key=string(body.get("key"), f"{path}.key"),
        # The apiserver defaults an empty operator to Equal.
        operator=string(body.get("operator"), f"{path}.operator") or "Equal",
        value=string(body.get("value"), f"{path}.value"),
        effect=string(body.get("effect"), f"{path}.effect"),
        toleration_seconds=integer(body.get("tolerationSeconds"), f"{path}.tolerationSeconds"),
    )


def tolerations(raw: object, path: str) -> tuple[DeviceToleration, ...]:
    items = sequence(raw, path)
    limit(items, 16, path)
    return tuple(toleration(item, f"{path}[{i}]") for i, item in enumerate(items))


def opaque(raw: object, path: str) -> OpaqueConfig:
    body = mapping(raw, path)
    parameters = body.get("parameters")
    return OpaqueConfig(
        driver=sys_intern(required_string(body.get("driver"), f"{path}.driver")),
        # Copied so that the model never shares mutable state with the caller's raw object.
        parameters=copy.deepcopy(parameters),
    )


# --- fast construction of frozen dataclasses --------------------------------------------------------

_T = TypeVar("_T")


def fast_constructor(cls: type[_T]) -> Callable[..., _T]:
    """A keyword-only constructor for a frozen, slotted dataclass that sets the slots directly.

    Why: a frozen dataclass's ``__init__`` goes through ``object.__setattr__`` once per field, which
    made ``Device(...)`` half the cost of decoding a slice (~2.5x slower than this). The function is
    generated from ``dataclasses.fields(cls)``, so defaults and default factories stay those of the
    model and new fields are picked up; a class with ``__post_init__`` gets its own constructor back.
    """
    if hasattr(cls, "__post_init__") or not hasattr(cls, "__slots__"):
        return cls
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls, "_UNSET": object()}
    params: list[str] = []
    lines: list[str] = []
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        name = field.name
        namespace[f"_set_{name}"] = getattr(cls, name).__set__
        if field.default is not dataclasses.MISSING:
            namespace[f"_default_{name}"] = field.default
            params.append(f"{name}=_default_{name}")
        elif field.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{name}"] = field.default_factory
            params.append(f"{name}=_UNSET")
            lines.append(f"    if {name} is _UNSET: {name} = _factory_{name}()")
        else:
            params.append(name)
        lines.append(f"    _set_{name}(obj, {name})")
    source = f"def make(*, {', '.join(params)}):\n    obj = _new(_cls)\n" + "\n".join(lines) + "\n    return obj\n"
    exec(source, namespace)  # the same technique dataclasses itself uses to build __init__
    constructor: Callable[..., _T] = namespace["make"]
    return constructor
