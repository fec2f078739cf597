"""The ``device`` variable a selector sees: per-device views built once per slice.

Views are plain dicts under celpy's map types, filled without celpy's constructors (which
validate every key and are the dominant cost of building a view). ``device.attributes`` and
``device.capacity`` read an unknown domain as an empty map; a missing attribute inside a domain
is ``no such key`` (upstream's behaviour).
"""

from __future__ import annotations

from typing import Any

from celpy import celtypes

from extender.core.cel.celpy_glue import type_values
from extender.core.cel.environment import GLOBAL_NAMESPACES, TYPE_IDENTS
from extender.core.cel.errors import CelRuntimeError
from extender.core.cel.values import FALSE, TRUE
from extender.core.model import Device, ResourceSlice, UnparsedVersion
from extender.core.semver import Semver

__all__ = ["Scope", "ViewBuilder", "device_poison"]


class _StrictMap(celtypes.MapType):  # type: ignore[misc]
    """A CEL map whose missing keys are errors (``no such key: <k>``). Lookups skip celpy's
    key-type checks: the keys are ours and always strings."""

    def __init__(self) -> None:  # celpy's MapType.__init__ is slow and we fill maps ourselves
        pass

    def get(self, key: Any, default: Any = None) -> Any:
        return dict.__getitem__(self, key)

    def __getitem__(self, key: Any) -> Any:
        return dict.__getitem__(self, key)


_EMPTY_DOMAIN = _StrictMap()


class _DomainMap(celtypes.MapType):  # type: ignore[misc]
    """``device.attributes`` / ``device.capacity``: an unknown domain reads as an empty map,
    while ``in`` and ``size()`` still see only the real domains (upstream's map with default)."""

    def __init__(self) -> None:
        pass

    def get(self, key: Any, default: Any = None) -> Any:
        return dict.get(self, key, _EMPTY_DOMAIN)

    def __getitem__(self, key: Any) -> Any:
        return dict.get(self, key, _EMPTY_DOMAIN)


class Scope:
    """Variable lookup for transpiled code, in place of celpy's much heavier ``Activation``.

    Transpiled code reads variables as ``activation.<name>`` (and ``resolve_variable`` for a
    leading-dot name), the protocol of celpy's generated code (see ``celpy_glue``); the
    comprehension macros nest scopes with ``_cel_nested``.
    """

    __slots__ = ("_cel_parent", "_cel_vars")

    def __init__(self, variables: dict[str, Any], parent: Scope | None = None) -> None:
        self._cel_vars = variables
        self._cel_parent = parent

    def __getattr__(self, name: str) -> Any:
        scope: Scope | None = self
        while scope is not None:
            variables = scope._cel_vars
            if name in variables:
                return variables[name]
            scope = scope._cel_parent
        if name in GLOBAL_NAMES:
            return GLOBAL_NAMES[name]
        raise NameError(name, "")

    def resolve_variable(self, name: str) -> Any:
        return self.__getattr__(name)

    def device_fields(self) -> dict[str, Any]:
        """The ``device`` map of a device's view (``ViewBuilder.build``)."""
        fields: dict[str, Any] = self._cel_vars["device"]
        return fields

    def _cel_nested(self, variables: dict[str, Any]) -> Scope:
        return Scope(variables, self)


#: Names every scope resolves after its variables: type values and the function namespaces.
GLOBAL_NAMES: dict[str, Any] = {
    **type_values(TYPE_IDENTS),
    **GLOBAL_NAMESPACES,
}


class ViewBuilder:
    """Builds per-device views for one slice, sharing converted strings between devices."""

    def __init__(self, slice_: ResourceSlice, *, consumable_capacity: bool) -> None:
        self._driver = slice_.driver
        self._driver_value = celtypes.StringType(slice_.driver)
        self._consumable = consumable_capacity
        self._strings: dict[str, celtypes.StringType] = {}
        self._names: dict[str, tuple[str, str]] = {}

    def build(self, device: Device) -> Scope | CelRuntimeError:
        attributes = _DomainMap()
        for name, raw in device.attributes.items():
            converted = self._attribute(raw)
            if converted is None:
                return attribute_error(name, raw)
            domain, ident = self._split(name)
            inner = dict.get(attributes, domain)
            if inner is None:
                inner = _StrictMap()
                dict.__setitem__(attributes, domain, inner)
            dict.__setitem__(inner, ident, converted)
        capacity = _DomainMap()
        for name, entry in device.capacity.items():
            domain, ident = self._split(name)
            inner = dict.get(capacity, domain)
            if inner is None:
                inner = _StrictMap()
                dict.__setitem__(capacity, domain, inner)
            dict.__setitem__(inner, ident, entry.value)
        fields = _StrictMap()
        dict.__setitem__(fields, "driver", self._driver_value)
        dict.__setitem__(fields, "attributes", attributes)
        dict.__setitem__(fields, "capacity", capacity)
        if self._consumable:
            dict.__setitem__(fields, "allowMultipleAllocations", TRUE if device.allow_multiple_allocations else FALSE)
        return Scope({"device": fields})

    def _split(self, name: str) -> tuple[str, str]:
        """(domain, id): qualified names split at the first "/", bare ones get the driver's domain."""
        parts = self._names.get(name)
        if parts is None:
            domain, sep, ident = name.partition("/")
            parts = self._names[name] = (domain, ident) if sep else (self._driver, name)
        return parts

    def _attribute(self, raw: object) -> Any:
        if isinstance(raw, str):
            value = self._strings.get(raw)  # the same strings recur across thousands of devices
            if value is None:
                value = self._strings[raw] = celtypes.StringType(raw)
            return value
        if type(raw) is bool:
            return TRUE if raw else FALSE
        if isinstance(raw, int):
            # celpy's IntType() builds a range-checking wrapper per call; the model's ints are
            # int64 already (validated at decode), so construct the value directly.
            return int.__new__(celtypes.IntType, raw)
        if isinstance(raw, Semver):
            return raw
        if isinstance(raw, tuple):  # a list-typed attribute (KEP-5491): a CEL list
            items = [self._attribute(item) for item in raw]
            return None if any(item is None for item in items) else celtypes.ListType(items)
        return None


def attribute_error(name: str, raw: object) -> CelRuntimeError:
    if isinstance(raw, UnparsedVersion):
        return CelRuntimeError(f"attribute {name}: parse semantic version: {raw.error}")
    if isinstance(raw, tuple):
        broken = next((item for item in raw if isinstance(item, UnparsedVersion)), None)
        if broken is not None:
            return CelRuntimeError(f"attribute {name}: parse semantic version: {broken.error}")
    return CelRuntimeError(f"attribute {name}: unsupported attribute type {type(raw).__name__}")


#: Attribute value types a device view can hold; anything else (an UnparsedVersion) poisons it.
_VIEWABLE_TYPES = frozenset({str, bool, int, Semver})


def _viewable(raw: object) -> bool:
    if type(raw) in _VIEWABLE_TYPES:
        return True
    return type(raw) is tuple and all(type(item) in _VIEWABLE_TYPES for item in raw)


def device_poison(device: Device) -> CelRuntimeError | None:
    """The error every evaluation on this device gets, without building its view."""
    for name, raw in device.attributes.items():
        if not _viewable(raw):
            return attribute_error(name, raw)
    return None
