"""CEL operators whose celpy defaults differ from cel-go, and the short-circuiting ``&&``, ``||``
and ``?:`` the compiled programs call (celpy evaluates both sides)."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from celpy import celtypes
from celpy.evaluation import CELEvalError

from extender.core.cel.cost import charge_size
from extender.core.cel.values import (
    FALSE,
    OPAQUE,
    TRUE,
    as_bool,
    cel_equal,
    no_overload,
)

__all__ = [
    "contained_in",
    "equal",
    "greater",
    "greater_equal",
    "lazy_and",
    "lazy_condition",
    "lazy_or",
    "less",
    "less_equal",
    "logical_not",
    "minus",
    "not_equal",
    "ordered",
    "plus",
    "result",
]


def logical_not(value: Any) -> Any:
    """``!x``; celpy's version rejects the plain Python bool its own ``has()`` returns."""
    if isinstance(value, CELEvalError):
        return value
    return celtypes.BoolType(not as_bool(value))


def ordered(op: Callable[[Any, Any], Any], left: Any, right: Any) -> Any:
    # cel-go has no ordering operators on Quantity/Semver (use compareTo/isLessThan).
    if isinstance(left, OPAQUE) or isinstance(right, OPAQUE):
        raise no_overload()
    if isinstance(left, CELEvalError):
        return left
    if isinstance(right, CELEvalError):
        return right
    return TRUE if op(left, right) else FALSE


def less(left: Any, right: Any) -> Any:
    return ordered(operator.lt, left, right)


def less_equal(left: Any, right: Any) -> Any:
    return ordered(operator.le, left, right)


def greater(left: Any, right: Any) -> Any:
    return ordered(operator.gt, left, right)


def greater_equal(left: Any, right: Any) -> Any:
    return ordered(operator.ge, left, right)


def plus(left: Any, right: Any) -> Any:
    """``+``: no overload for opaque types (use ``add``); strings and lists charge their size."""
    if isinstance(left, OPAQUE) or isinstance(right, OPAQUE):
        raise no_overload()
    value = operator.add(left, right)
    charge_size(value)
    return value


def minus(left: Any, right: Any) -> Any:
    if isinstance(left, OPAQUE) or isinstance(right, OPAQUE):
        raise no_overload()
    return operator.sub(left, right)


#: The exceptions celpy's ``result()`` turns into error values, with the texts it gives them.
_ABSORBED: dict[type[BaseException], str] = {
    ValueError: "return error for overflow",
    KeyError: "no such key",
    TypeError: "no such overload",
    ZeroDivisionError: "divide by zero",
    OverflowError: "return error for overflow",
    IndexError: "invalid_argument",
    NameError: "undeclared reference",
}


_ABSORBED_TYPES = tuple(_ABSORBED)


def result(scope: Any, expression: Callable[[Any], Any]) -> Any:
    """celpy's ``result()`` without its per-call debug logging: evaluate ``expression`` and turn
    an ordinary failure into a CELEvalError value (so ``||``/``&&`` can absorb it)."""
    try:
        return expression(scope)
    except _ABSORBED_TYPES as exc:
        error = CELEvalError(_ABSORBED.get(type(exc), "evaluation error"), type(exc), exc.args)
        error.__cause__ = exc
        return error


def _truth(value: Any) -> bool | None:
    """True/False for a CEL bool, None for an error or a non-bool."""
    if isinstance(value, (celtypes.BoolType, bool)):
        return bool(value)
    return None


def _not_bool(value: Any) -> Any:
    if isinstance(value, CELEvalError):
        return value
    error = CELEvalError("no such overload", TypeError, ("no such overload",))
    return error


def lazy_and(scope: Any, left: Callable[[Any], Any], right: Callable[[Any], Any]) -> Any:
    """``a && b`` with cel-go's semantics: false wins over errors, and ``b`` is skipped when
    ``a`` is false (celpy evaluates both sides)."""
    return _short_circuit(scope, left, right, False)


def lazy_or(scope: Any, left: Callable[[Any], Any], right: Callable[[Any], Any]) -> Any:
    """``a || b``: true wins over errors; ``b`` is skipped when ``a`` is true."""
    return _short_circuit(scope, left, right, True)


def _short_circuit(scope: Any, left: Callable[[Any], Any], right: Callable[[Any], Any], wins: bool) -> Any:
    """``wins`` decides alone and over errors (false for ``&&``, true for ``||``)."""
    decided = TRUE if wins else FALSE
    first = result(scope, left)
    first_truth = _truth(first)
    if first_truth is wins:
        return decided
    second = result(scope, right)
    truth = _truth(second)
    if truth is wins:
        return decided
    if first_truth is None:
        return _not_bool(first)
    return _not_bool(second) if truth is None else (FALSE if wins else TRUE)


def lazy_condition(
    scope: Any, condition: Callable[[Any], Any], then: Callable[[Any], Any], otherwise: Callable[[Any], Any]
) -> Any:
    """``c ? a : b``: only the chosen branch is evaluated; an error condition is the result."""
    chosen = result(scope, condition)
    truth = _truth(chosen)
    if truth is None:
        return _not_bool(chosen)
    return result(scope, then if truth else otherwise)


def equal(left: Any, right: Any) -> Any:
    if isinstance(left, CELEvalError):
        return left
    if isinstance(right, CELEvalError):
        return right
    return TRUE if cel_equal(left, right) else FALSE


def not_equal(left: Any, right: Any) -> Any:
    same = equal(left, right)
    return same if isinstance(same, CELEvalError) else (FALSE if same else TRUE)


def contained_in(item: Any, container: Any) -> Any:
    """``x in list`` / ``k in map``; a map answers by key, without scanning."""
    if isinstance(item, CELEvalError):
        return item
    if isinstance(container, CELEvalError):
        return container
    if isinstance(container, dict):
        try:
            return TRUE if item in container else FALSE
        except TypeError:
            raise no_overload() from None
    if isinstance(container, list):
        return TRUE if any(cel_equal(element, item) for element in container) else FALSE
    raise no_overload()
