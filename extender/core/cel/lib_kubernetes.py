"""The Kubernetes CEL libraries ``quantity`` and ``semver`` (k8s.io/apiserver/pkg/cel/library).

``x.f(y)`` calls ``f(x, y)``, so the functions both libraries share (``compareTo``,
``isGreaterThan``, ``isLessThan``) dispatch on the operand types.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celpy import celtypes

from extender.core.cel.values import function_error, int_value, is_int, is_str, no_overload
from extender.core.quantity import Quantity
from extender.core.semver import Semver

__all__ = [
    "add",
    "asApproximateFloat",
    "asInteger",
    "compareTo",
    "isGreaterThan",
    "isInteger",
    "isLessThan",
    "isQuantity",
    "isSemver",
    "major",
    "minor",
    "patch",
    "quantity",
    "semver",
    "sign",
    "sub",
]


def quantity(text: Any) -> Quantity:
    if not is_str(text):
        raise no_overload()
    try:
        return Quantity.parse(str(text))
    except ValueError as exc:
        raise function_error(str(exc)) from None


def isQuantity(text: Any) -> celtypes.BoolType:
    return _parses(Quantity.parse, text)


def _parses(parse: Callable[[str], object], text: Any) -> celtypes.BoolType:
    """Whether ``text`` (a string, else no overload) is valid for ``parse``."""
    if not is_str(text):
        raise no_overload()
    try:
        parse(str(text))
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _quantity(value: Any) -> Quantity:
    if not isinstance(value, Quantity):
        raise no_overload()
    return value


def sign(value: Any) -> celtypes.IntType:
    return int_value(_quantity(value).sign())


def _int64_value(q: Quantity) -> int | None:
    """Quantity.AsInt64: the exact integer value when it has one and fits in int64."""
    return q.as_int64()


def isInteger(value: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_int64_value(_quantity(value)) is not None)


def asInteger(value: Any) -> celtypes.IntType:
    exact = _int64_value(_quantity(value))
    if exact is None:
        raise function_error("cannot convert value to integer")
    return int_value(exact)


def asApproximateFloat(value: Any) -> celtypes.DoubleType:
    return celtypes.DoubleType(_quantity(value).as_approximate_float())


def _quantity_operand(value: Any) -> Quantity:
    """The right operand of add/sub: a quantity or an int (upstream's quantity_add_int)."""
    if isinstance(value, Quantity):
        return value
    if is_int(value):
        return Quantity.from_int(int(value))
    raise no_overload()


def add(left: Any, right: Any) -> Quantity:
    return _quantity(left) + _quantity_operand(right)


def sub(left: Any, right: Any) -> Quantity:
    return _quantity(left) - _quantity_operand(right)


def _normalize_flag(normalize: Any) -> bool:
    if not isinstance(normalize, (celtypes.BoolType, bool)):
        raise no_overload()
    return bool(normalize)


def semver(text: Any, normalize: Any = False) -> Semver:
    if not is_str(text):
        raise no_overload()
    try:
        return Semver.parse(str(text), normalize=_normalize_flag(normalize))
    except ValueError as exc:
        raise function_error(str(exc)) from None


def isSemver(text: Any, normalize: Any = False) -> celtypes.BoolType:
    flag = _normalize_flag(normalize)  # a non-bool is no overload, not an invalid version
    return _parses(lambda value: Semver.parse(value, normalize=flag), text)


def _semver(value: Any) -> Semver:
    if not isinstance(value, Semver):
        raise no_overload()
    return value


def major(value: Any) -> celtypes.IntType:
    return int_value(_semver(value).major)


def minor(value: Any) -> celtypes.IntType:
    return int_value(_semver(value).minor)


def patch(value: Any) -> celtypes.IntType:
    return int_value(_semver(value).patch)


def _compare(left: Any, right: Any) -> int:
    if isinstance(left, Quantity) and isinstance(right, Quantity):
        return left.compare(right)
    if isinstance(left, Semver) and isinstance(right, Semver):
        return left.compare(right)
    raise no_overload()


def compareTo(left: Any, right: Any) -> celtypes.IntType:
    return int_value(_compare(left, right))


def isGreaterThan(left: Any, right: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_compare(left, right) > 0)


def isLessThan(left: Any, right: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_compare(left, right) < 0)
