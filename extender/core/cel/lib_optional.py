"""Optional values (cel-go's OptionalTypes): ``optional.of``/``none``/``ofNonZeroValue``,
``.hasValue()``, ``.value()``, ``.orValue()``, ``.or()``, and the ``a.?f`` / ``a[?k]`` selections
the compiler rewrites to ``__optsel__`` / ``__optindex__``."""

from __future__ import annotations

import operator
from typing import Any

from celpy import celtypes

from extender.core.cel.values import (
    OPTIONAL_NAMESPACE,
    cel_equal,
    function_error,
    int_arg,
    no_overload,
)
from extender.core.quantity import Quantity
from extender.core.semver import Semver

__all__ = [
    "OptionalValue",
    "hasValue",
    "none",
    "of",
    "ofNonZeroValue",
    "optional_index",
    "optional_or",
    "optional_select",
    "orValue",
    "value",
]


class OptionalValue:
    """A CEL ``optional_type`` value: ``optional.of(v)`` or ``optional.none()``.

    Selecting a field or index on an optional keeps the chain optional (``a.?b.c``): an empty
    optional stays empty, a present one selects strictly on the value it holds.
    """

    __slots__ = ("_present", "_value")

    def __init__(self, value: Any = None, *, present: bool = True) -> None:
        self._value = value
        self._present = present

    @property
    def present(self) -> bool:
        return self._present

    @property
    def value(self) -> Any:
        return self._value

    def get(self, key: Any, default: Any = None) -> OptionalValue:  # member selection ``.f``
        if not self._present:
            return self
        return OptionalValue(_select(self._value, key))

    def __getitem__(self, key: Any) -> OptionalValue:  # index ``[k]``
        if not self._present:
            return self
        return OptionalValue(operator.getitem(self._value, key))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OptionalValue):
            return False
        if not (self._present and other._present):
            return self._present == other._present
        return cel_equal(self._value, other._value)

    def __hash__(self) -> int:
        return hash(self._present)

    def __repr__(self) -> str:
        return f"optional.of({self._value!r})" if self._present else "optional.none()"


_NONE = OptionalValue(present=False)


def _select(target: Any, key: Any) -> Any:
    getter = getattr(target, "get", None)
    if getter is None or not isinstance(target, dict):
        raise no_overload()
    return getter(key)


def of(namespace: Any, value: Any) -> OptionalValue:
    if namespace is not OPTIONAL_NAMESPACE:
        raise no_overload()
    return OptionalValue(value)


def none(namespace: Any) -> OptionalValue:
    if namespace is not OPTIONAL_NAMESPACE:
        raise no_overload()
    return _NONE


def ofNonZeroValue(namespace: Any, value: Any) -> OptionalValue:
    if namespace is not OPTIONAL_NAMESPACE:
        raise no_overload()
    if value is None or (not isinstance(value, (Quantity, Semver, OptionalValue)) and not value):
        return _NONE
    return OptionalValue(value)


def _optional(value: Any) -> OptionalValue:
    if not isinstance(value, OptionalValue):
        raise no_overload()
    return value


def hasValue(value: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_optional(value).present)


def value(optional: Any) -> Any:
    opt = _optional(optional)
    if not opt.present:
        raise function_error("optional.none() dereference")
    return opt.value


def orValue(optional: Any, default: Any) -> Any:
    opt = _optional(optional)
    return opt.value if opt.present else default


def optional_or(optional: Any, other: Any) -> OptionalValue:
    opt = _optional(optional)
    return opt if opt.present else _optional(other)


def optional_select(target: Any, key: Any) -> OptionalValue:
    """``target.?key``: present when the map has the key (the device's domain maps always do)."""
    if isinstance(target, OptionalValue):
        if not target.present:
            return target
        target = target.value
    if not isinstance(target, dict):
        raise no_overload()
    try:
        return OptionalValue(target[key])
    except KeyError:
        return _NONE


def optional_index(target: Any, key: Any) -> OptionalValue:
    """``target[?key]`` on maps and lists."""
    if isinstance(target, OptionalValue):
        if not target.present:
            return target
        target = target.value
    if isinstance(target, dict):
        return optional_select(target, key)
    if isinstance(target, list):
        index = int_arg(key)
        return OptionalValue(target[index]) if 0 <= index < len(target) else _NONE
    raise no_overload()
