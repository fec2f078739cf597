"""Values and helpers shared by the CEL function library: error texts, type names, argument checks.

Library functions raise ``function_error(text)`` (exactly ``ValueError``, carrying a
``CelMessage``): the evaluation turns it into an error *value*, so ``||``/``&&`` can absorb it,
and the program reads the exact text back when the error reaches the top.
"""

from __future__ import annotations

from typing import Any

from celpy import celtypes

from extender.core.cel.cost import charge_size
from extender.core.quantity import Quantity
from extender.core.semver import Semver

__all__ = [
    "FALSE",
    "INT64_MAX",
    "INT64_MIN",
    "OPAQUE",
    "OPTIONAL_NAMESPACE",
    "SETS_NAMESPACE",
    "STRINGS_NAMESPACE",
    "TRUE",
    "CelMessage",
    "Namespace",
    "as_bool",
    "cel_equal",
    "function_error",
    "int_arg",
    "int_value",
    "is_int",
    "is_str",
    "list_arg",
    "no_overload",
    "string_arg",
    "string_result",
    "type_name",
]

#: Quantity and Semver: opaque to CEL's operators (``<``, ``+``...), reachable through functions.
OPAQUE = (Quantity, Semver)


INT64_MIN = -(2**63)


INT64_MAX = 2**63 - 1


class CelMessage(str):
    """The exact cel-style text of a library failure, carried as a ``ValueError`` argument."""


def function_error(message: str) -> ValueError:
    """The exception a library function raises. It must be exactly ``ValueError``: celpy's
    ``result()`` looks exception classes up by identity and turns them into error values
    (subclasses would escape it), and the evaluator reads the ``CelMessage`` back."""
    return ValueError(CelMessage(message))


def int_value(value: int) -> celtypes.IntType:
    """A CEL int. celpy's ``IntType()`` builds a range-checking wrapper on every call."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise function_error("integer overflow")
    return int.__new__(celtypes.IntType, value)


def no_overload() -> ValueError:
    return function_error("no such overload")


def type_name(value: object) -> str:
    """The CEL name of a runtime value's type, as cel-go prints it."""
    if value is None:
        return "null_type"
    if isinstance(value, bool):  # Python bool from celpy's has(); BoolType is an int subclass
        return "bool"
    for cls, name in _TYPE_NAMES:
        if isinstance(value, cls):
            return name
    return type(value).__name__


_TYPE_NAMES: tuple[tuple[type, str], ...] = (
    (celtypes.BoolType, "bool"),
    (celtypes.UintType, "uint"),
    (celtypes.IntType, "int"),
    (celtypes.DoubleType, "double"),
    (celtypes.StringType, "string"),
    (celtypes.BytesType, "bytes"),
    (celtypes.ListType, "list"),
    (celtypes.MapType, "map"),
    (celtypes.TimestampType, "google.protobuf.Timestamp"),
    (celtypes.DurationType, "google.protobuf.Duration"),
    (Quantity, "kubernetes.Quantity"),
    (Semver, "kubernetes.Semver"),
)


def is_int(value: object) -> bool:
    return isinstance(value, celtypes.IntType) and not isinstance(value, celtypes.BoolType)


def is_str(value: object) -> bool:
    return isinstance(value, str)


def as_bool(value: object) -> celtypes.BoolType:
    if isinstance(value, (celtypes.BoolType, bool)):
        return celtypes.BoolType(bool(value))
    raise no_overload()


TRUE = celtypes.BoolType(True)


FALSE = celtypes.BoolType(False)


def _numeric(value: Any) -> int | float | None:
    if isinstance(value, (celtypes.BoolType, bool)) or not isinstance(value, (int, float)):
        return None
    return int(value) if isinstance(value, int) else float(value)


def cel_equal(left: Any, right: Any) -> bool:
    """cel-go's heterogeneous equality: values of different types are unequal, except numbers,
    which compare by value across int, uint and double."""
    try:
        return bool(left == right)
    except TypeError:
        a, b = _numeric(left), _numeric(right)
        return a is not None and b is not None and a == b


def string_arg(value: Any) -> str:
    if not is_str(value):
        raise no_overload()
    return str(value)


def int_arg(value: Any) -> int:
    if not is_int(value):
        raise no_overload()
    return int(value)


def string_result(text: str) -> celtypes.StringType:
    charge_size(text)
    return celtypes.StringType(text)


def list_arg(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise no_overload()
    return value


class Namespace:
    """The receiver of namespaced functions (``optional.of``, ``strings.quote``, ``sets.*``)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


OPTIONAL_NAMESPACE = Namespace("optional")


STRINGS_NAMESPACE = Namespace("strings")


SETS_NAMESPACE = Namespace("sets")
