"""The comprehension macros (``all``, ``exists``, ``exists_one``, ``map``, ``filter``) and
``cel.bind``, as the compiled programs call them: each iteration charges the cost meter, and
``all``/``exists`` stop as soon as the answer is known (false/true wins over errors, as cel-go)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from celpy import celtypes
from celpy.evaluation import CELEvalError

from extender.core.cel.cost import COST
from extender.core.cel.operators import result
from extender.core.cel.values import as_bool, no_overload
from extender.core.cel.view import Scope

__all__ = [
    "macro_all",
    "macro_bind",
    "macro_exists",
    "macro_exists_one",
    "macro_filter",
    "macro_map",
]


#: A compiled sub-expression (a comprehension's body or its range), evaluated on a scope.
Body = Callable[[Scope], Any]


def _iteration_range(source: Any) -> Iterable[Any]:
    if isinstance(source, (list, dict)):  # a map iterates over its keys
        return list(source)
    if isinstance(source, CELEvalError):
        raise TypeError("no such overload")
    raise no_overload()


def macro_all(scope: Scope, name: str, body: Body, source: Body, cost: int) -> Any:
    outcome: Any = celtypes.BoolType(True)
    for item in _iteration_range(source(scope)):
        COST.charge(cost)
        outcome = celtypes.logical_and(outcome, result(scope._cel_nested({name: item}), body))
        if outcome is not None and not isinstance(outcome, CELEvalError) and not outcome:
            break  # false wins over errors: stop early
    return outcome


def macro_exists(scope: Scope, name: str, body: Body, source: Body, cost: int) -> Any:
    outcome: Any = celtypes.BoolType(False)
    for item in _iteration_range(source(scope)):
        COST.charge(cost)
        outcome = celtypes.logical_or(outcome, result(scope._cel_nested({name: item}), body))
        if outcome is not None and not isinstance(outcome, CELEvalError) and outcome:
            break  # true wins over errors: stop early
    return outcome


def macro_exists_one(scope: Scope, name: str, body: Body, source: Body, cost: int) -> Any:
    count = 0
    for item in _iteration_range(source(scope)):
        COST.charge(cost)
        if as_bool(body(scope._cel_nested({name: item}))):
            count += 1
    return celtypes.BoolType(count == 1)


def macro_map(scope: Scope, name: str, body: Body, source: Body, cost: int) -> Any:
    values = []
    for item in _iteration_range(source(scope)):
        COST.charge(cost)
        values.append(body(scope._cel_nested({name: item})))
    return celtypes.ListType(values)


def macro_filter(scope: Scope, name: str, body: Body, source: Body, cost: int) -> Any:
    values = []
    for item in _iteration_range(source(scope)):
        COST.charge(cost)
        if as_bool(body(scope._cel_nested({name: item}))):
            values.append(item)
    return celtypes.ListType(values)


def macro_bind(scope: Scope, name: str, body: Body, source: Body, cost: int) -> Any:
    """``cel.bind(name, init, body)``: ``source`` computes ``init`` (the rewrite wraps it as a
    single-element "range"), evaluated once and lazily errors like any value."""
    COST.charge(cost)
    return body(scope._cel_nested({name: source(scope)}))
