"""The Kubernetes ``Lists`` and ``Regex`` libraries and ``sets.*`` (cel-go ext.Sets)."""

from __future__ import annotations

import itertools
import operator
from typing import Any

import re2
from celpy import celtypes

from extender.core.cel.cost import charge_size
from extender.core.cel.operators import ordered, plus
from extender.core.cel.values import (
    SETS_NAMESPACE,
    cel_equal,
    function_error,
    int_arg,
    int_value,
    is_str,
    list_arg,
    no_overload,
    string_arg,
)

__all__ = [
    "MAX_INCLUDES_VALUES",
    "contains",
    "equivalent",
    "find",
    "findAll",
    "includes",
    "intersects",
    "isSorted",
    "matches",
    "sum",
]


#: ResourceSliceMaxAttributeValuesPerDevice: the longest list ``includes`` accepts.
MAX_INCLUDES_VALUES = 48


def includes(container: Any, value: Any) -> celtypes.BoolType:
    """``x.includes(v)`` (DRA, 1.36, for list-typed attributes): for a list, whether an element
    equals ``v``; for a scalar, whether it equals ``v``; an error for a list of more than 48."""
    if isinstance(container, list):
        if len(container) > MAX_INCLUDES_VALUES:
            raise function_error(
                f"'includes' function cannot be applied to lists longer than {MAX_INCLUDES_VALUES} values"
            )
        return celtypes.BoolType(any(cel_equal(item, value) for item in container))
    return celtypes.BoolType(cel_equal(container, value))


def isSorted(items: Any) -> celtypes.BoolType:
    values = list_arg(items)
    try:
        return celtypes.BoolType(all(ordered(operator.le, a, b) for a, b in itertools.pairwise(values)))
    except TypeError:
        raise no_overload() from None


def sum(items: Any) -> Any:
    values = list_arg(items)
    if not values:
        return int_value(0)
    total = values[0]
    for value in values[1:]:
        total = plus(total, value)
    return total


def find(text: Any, pattern: Any) -> celtypes.StringType:
    s, p = string_arg(text), string_arg(pattern)
    try:
        match = re2.search(p, s)
    except re2.error as exc:
        raise function_error(f"invalid regex: {exc}") from None
    return celtypes.StringType(match.group(0) if match else "")


def findAll(text: Any, pattern: Any, limit: Any = None) -> celtypes.ListType:
    s, p = string_arg(text), string_arg(pattern)
    count = -1 if limit is None else int_arg(limit)
    try:
        matches = [m.group(0) for m in re2.finditer(p, s)]
    except re2.error as exc:
        raise function_error(f"invalid regex: {exc}") from None
    if count >= 0:
        matches = matches[:count]
    charge_size(matches)
    return celtypes.ListType([celtypes.StringType(m) for m in matches])


def matches(text: Any, pattern: Any) -> celtypes.BoolType:
    s, p = string_arg(text), string_arg(pattern)
    try:
        return celtypes.BoolType(re2.search(p, s) is not None)
    except re2.error as exc:
        raise function_error(f"invalid regex: {exc}") from None


def _contains_all(container: list[Any], items: list[Any]) -> bool:
    return all(any(cel_equal(c, i) for c in container) for i in items)


def contains(namespace_or_value: Any, left: Any, right: Any = None) -> celtypes.BoolType:
    """``sets.contains(a, b)``, and the string/list ``x.contains(y)`` celpy provides."""
    if namespace_or_value is SETS_NAMESPACE:
        return celtypes.BoolType(_contains_all(list_arg(left), list_arg(right)))
    if right is not None:
        raise no_overload()
    if is_str(namespace_or_value) and is_str(left):
        return celtypes.BoolType(str(left) in str(namespace_or_value))
    if isinstance(namespace_or_value, list):
        return celtypes.BoolType(any(cel_equal(item, left) for item in namespace_or_value))
    if isinstance(namespace_or_value, dict):
        return celtypes.BoolType(left in namespace_or_value)
    raise no_overload()


def equivalent(namespace: Any, left: Any, right: Any) -> celtypes.BoolType:
    if namespace is not SETS_NAMESPACE:
        raise no_overload()
    a, b = list_arg(left), list_arg(right)
    return celtypes.BoolType(_contains_all(a, b) and _contains_all(b, a))


def intersects(namespace: Any, left: Any, right: Any) -> celtypes.BoolType:
    if namespace is not SETS_NAMESPACE:
        raise no_overload()
    a, b = list_arg(left), list_arg(right)
    return celtypes.BoolType(any(cel_equal(x, y) for x in a for y in b))
