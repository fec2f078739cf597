"""The Kubernetes CEL function library for DRA selectors, as cel-python (celpy) functions.

What lives here:
- the Kubernetes ``quantity`` and ``semver`` libraries, ``ext.Strings``, the k8s ``Lists``
  helpers, ``find``/``findAll``, ``sets.*``, optional values (``optional.of``, ``.?f``,
  ``.orValue``...), and replacements for a few celpy built-ins whose behaviour differs from
  cel-go (``!``, ``+``, ``-``, ordering operators on opaque types);
- the comprehension macros (``all``, ``exists``, ``exists_one``, ``map``, ``filter``) and
  ``cel.bind``, rewritten so that they charge the cost meter;
- ``COST``: the per-evaluation cost meter (see ``extender.core.cel`` for the cost model).

Why module-level named functions: celpy's CompiledRunner transpiles a call to
``<module>.<qualname>(...)``, so lambdas and closures cannot be used (libraries.md §2, caveat a).
Errors are raised as ``ValueError(CelMessage(text))`` (``function_error``): celpy turns the
exception classes it knows into error *values*, which keeps ``||``/``&&`` error absorption
working; the evaluator then reads the exact text back from the ``CelMessage``. Exceeding the
cost budget raises ``CostLimitExceeded`` instead, which celpy does not catch, so it aborts the
whole evaluation as cel-go's cancellation does.
"""

from __future__ import annotations

import builtins
import itertools
import math
import operator
from collections.abc import Callable, Iterable
from typing import Any

import re2
from celpy import celtypes
from celpy.evaluation import CELEvalError

from extender.core.quantity import Quantity
from extender.core.semver import Semver

__all__ = [
    "COST",
    "FUNCTIONS",
    "GLOBAL_NAMESPACES",
    "NAMESPACE_FUNCTIONS",
    "OPTIONAL_NAMESPACE",
    "CelMessage",
    "CostLimitExceeded",
    "CostMeter",
    "OptionalValue",
    "function_error",
    "lazy_and",
    "lazy_condition",
    "lazy_or",
    "result",
    "type_name",
]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
#: CELSelectorExpressionMaxCost.
COST_LIMIT = 1_000_000


class CelMessage(str):
    """The exact cel-style text of a library failure, carried as a ``ValueError`` argument."""


def function_error(message: str) -> ValueError:
    """The exception a library function raises. It must be exactly ``ValueError``: celpy's
    ``result()`` looks exception classes up by identity and turns them into error values
    (subclasses would escape it), and the evaluator reads the ``CelMessage`` back."""
    return ValueError(CelMessage(message))


class CostLimitExceeded(Exception):
    """The evaluation spent more than its budget. Deliberately not a ValueError: celpy must not
    turn it into an absorbable error value."""


class CostMeter:
    """Cost spent by the evaluation in progress.

    One meter per process: evaluations run one at a time on the caller's thread (the core is
    synchronous, and celpy's compiled code shares state the same way, libraries.md §2 caveat b).
    """

    __slots__ = ("limit", "spent")

    def __init__(self, limit: int = COST_LIMIT) -> None:
        self.limit = limit
        self.spent = 0

    def charge(self, amount: int) -> None:
        self.spent += amount
        if self.spent > self.limit:
            raise CostLimitExceeded()


COST = CostMeter()


def _charge_size(value: object) -> None:
    """cel-go charges size-dependent functions about one unit per ten characters or elements."""
    if isinstance(value, (str, list, dict)):
        COST.charge(1 + len(value) // 10)


def _int_value(value: int) -> celtypes.IntType:
    """A CEL int. celpy's ``IntType()`` builds a range-checking wrapper on every call."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise function_error("integer overflow")
    return int.__new__(celtypes.IntType, value)


def _no_overload() -> ValueError:
    return function_error("no such overload")


# --- type names (for error texts) ---------------------------------------------------------------


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


def _is_int(value: object) -> bool:
    return isinstance(value, celtypes.IntType) and not isinstance(value, celtypes.BoolType)


def _is_str(value: object) -> bool:
    return isinstance(value, str)


def _as_bool(value: object) -> celtypes.BoolType:
    if isinstance(value, (celtypes.BoolType, bool)):
        return celtypes.BoolType(bool(value))
    raise _no_overload()


# --- quantity library ---------------------------------------------------------------------------


def quantity(text: Any) -> Quantity:
    if not _is_str(text):
        raise _no_overload()
    try:
        return Quantity.parse(str(text))
    except ValueError as exc:
        raise function_error(str(exc)) from None


def isQuantity(text: Any) -> celtypes.BoolType:
    if not _is_str(text):
        raise _no_overload()
    try:
        Quantity.parse(str(text))
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _quantity(value: Any) -> Quantity:
    if not isinstance(value, Quantity):
        raise _no_overload()
    return value


def sign(value: Any) -> celtypes.IntType:
    return _int_value(_quantity(value).sign())


def _int64_value(q: Quantity) -> int | None:
    """Quantity.AsInt64: the exact integer value when it has one and fits in int64."""
    return q.as_int64()


def isInteger(value: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_int64_value(_quantity(value)) is not None)


def asInteger(value: Any) -> celtypes.IntType:
    exact = _int64_value(_quantity(value))
    if exact is None:
        raise function_error("cannot convert value to integer")
    return _int_value(exact)


def asApproximateFloat(value: Any) -> celtypes.DoubleType:
    return celtypes.DoubleType(_quantity(value).as_approximate_float())


def _quantity_operand(value: Any) -> Quantity:
    """The right operand of add/sub: a quantity or an int (upstream's quantity_add_int)."""
    if isinstance(value, Quantity):
        return value
    if _is_int(value):
        return Quantity.from_int(int(value))
    raise _no_overload()


def add(left: Any, right: Any) -> Quantity:
    return _quantity(left) + _quantity_operand(right)


def sub(left: Any, right: Any) -> Quantity:
    return _quantity(left) - _quantity_operand(right)


# --- semver library -----------------------------------------------------------------------------


def _normalize_flag(normalize: Any) -> bool:
    if not isinstance(normalize, (celtypes.BoolType, bool)):
        raise _no_overload()
    return bool(normalize)


def semver(text: Any, normalize: Any = False) -> Semver:
    if not _is_str(text):
        raise _no_overload()
    try:
        return Semver.parse(str(text), normalize=_normalize_flag(normalize))
    except ValueError as exc:
        raise function_error(str(exc)) from None


def isSemver(text: Any, normalize: Any = False) -> celtypes.BoolType:
    if not _is_str(text):
        raise _no_overload()
    try:
        Semver.parse(str(text), normalize=_normalize_flag(normalize))
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _semver(value: Any) -> Semver:
    if not isinstance(value, Semver):
        raise _no_overload()
    return value


def major(value: Any) -> celtypes.IntType:
    return _int_value(_semver(value).major)


def minor(value: Any) -> celtypes.IntType:
    return _int_value(_semver(value).minor)


def patch(value: Any) -> celtypes.IntType:
    return _int_value(_semver(value).patch)


# --- shared by quantity and semver: x.f(y) is f(x, y), so dispatch on the operand types ----------


def _compare(left: Any, right: Any) -> int:
    if isinstance(left, Quantity) and isinstance(right, Quantity):
        return left.compare(right)
    if isinstance(left, Semver) and isinstance(right, Semver):
        return left.compare(right)
    raise _no_overload()


def compareTo(left: Any, right: Any) -> celtypes.IntType:
    return _int_value(_compare(left, right))


def isGreaterThan(left: Any, right: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_compare(left, right) > 0)


def isLessThan(left: Any, right: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_compare(left, right) < 0)


# --- operators that differ from celpy's defaults ------------------------------------------------

_OPAQUE = (Quantity, Semver)


def logical_not(value: Any) -> Any:
    """``!x``; celpy's version rejects the plain Python bool its own ``has()`` returns."""
    if isinstance(value, CELEvalError):
        return value
    return celtypes.BoolType(not _as_bool(value))


def _ordered(op: Callable[[Any, Any], Any], left: Any, right: Any) -> Any:
    # cel-go has no ordering operators on Quantity/Semver (use compareTo/isLessThan).
    if isinstance(left, _OPAQUE) or isinstance(right, _OPAQUE):
        raise _no_overload()
    if isinstance(left, CELEvalError):
        return left
    if isinstance(right, CELEvalError):
        return right
    return TRUE if op(left, right) else FALSE


def less(left: Any, right: Any) -> Any:
    return _ordered(operator.lt, left, right)


def less_equal(left: Any, right: Any) -> Any:
    return _ordered(operator.le, left, right)


def greater(left: Any, right: Any) -> Any:
    return _ordered(operator.gt, left, right)


def greater_equal(left: Any, right: Any) -> Any:
    return _ordered(operator.ge, left, right)


def plus(left: Any, right: Any) -> Any:
    """``+``: no overload for opaque types (use ``add``); strings and lists charge their size."""
    if isinstance(left, _OPAQUE) or isinstance(right, _OPAQUE):
        raise _no_overload()
    value = operator.add(left, right)
    _charge_size(value)
    return value


def minus(left: Any, right: Any) -> Any:
    if isinstance(left, _OPAQUE) or isinstance(right, _OPAQUE):
        raise _no_overload()
    return operator.sub(left, right)


TRUE = celtypes.BoolType(True)
FALSE = celtypes.BoolType(False)

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
    first = result(scope, left)
    if _truth(first) is False:
        return FALSE
    second = result(scope, right)
    truth = _truth(second)
    if truth is False:
        return FALSE
    if _truth(first) is None:
        return _not_bool(first)
    return TRUE if truth else _not_bool(second)


def lazy_or(scope: Any, left: Callable[[Any], Any], right: Callable[[Any], Any]) -> Any:
    """``a || b``: true wins over errors; ``b`` is skipped when ``a`` is true."""
    first = result(scope, left)
    if _truth(first) is True:
        return TRUE
    second = result(scope, right)
    truth = _truth(second)
    if truth is True:
        return TRUE
    if _truth(first) is None:
        return _not_bool(first)
    return FALSE if truth is False else _not_bool(second)


def lazy_condition(
    scope: Any, condition: Callable[[Any], Any], then: Callable[[Any], Any], otherwise: Callable[[Any], Any]
) -> Any:
    """``c ? a : b``: only the chosen branch is evaluated; an error condition is the result."""
    chosen = result(scope, condition)
    truth = _truth(chosen)
    if truth is None:
        return _not_bool(chosen)
    return result(scope, then if truth else otherwise)


def _numeric(value: Any) -> int | float | None:
    if isinstance(value, (celtypes.BoolType, bool)) or not isinstance(value, (int, float)):
        return None
    return int(value) if isinstance(value, int) else float(value)


def _cel_equal(left: Any, right: Any) -> bool:
    """cel-go's heterogeneous equality: values of different types are unequal, except numbers,
    which compare by value across int, uint and double."""
    try:
        return bool(left == right)
    except TypeError:
        a, b = _numeric(left), _numeric(right)
        return a is not None and b is not None and a == b


def equal(left: Any, right: Any) -> Any:
    if isinstance(left, CELEvalError):
        return left
    if isinstance(right, CELEvalError):
        return right
    return TRUE if _cel_equal(left, right) else FALSE


def not_equal(left: Any, right: Any) -> Any:
    if isinstance(left, CELEvalError):
        return left
    if isinstance(right, CELEvalError):
        return right
    return FALSE if _cel_equal(left, right) else TRUE


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
            raise _no_overload() from None
    if isinstance(container, list):
        return TRUE if any(_equal(element, item) for element in container) else FALSE
    raise _no_overload()


# --- ext.Strings (version 2+) -------------------------------------------------------------------


def _string(value: Any) -> str:
    if not _is_str(value):
        raise _no_overload()
    return str(value)


def _int(value: Any) -> int:
    if not _is_int(value):
        raise _no_overload()
    return int(value)


def _string_result(text: str) -> celtypes.StringType:
    _charge_size(text)
    return celtypes.StringType(text)


def charAt(text: Any, index: Any) -> celtypes.StringType:
    s, i = _string(text), _int(index)
    if i < 0 or i > len(s):
        raise function_error(f"index out of range: {i}")
    return celtypes.StringType(s[i : i + 1])


def indexOf(target: Any, item: Any, offset: Any = None) -> celtypes.IntType:
    if isinstance(target, list):  # k8s Lists library
        if offset is not None:
            raise _no_overload()
        for position, element in enumerate(target):
            if _equal(element, item):
                return _int_value(position)
        return _int_value(-1)
    s, sub = _string(target), _string(item)
    start = 0 if offset is None else _int(offset)
    if start < 0 or start > len(s):
        raise function_error(f"index out of range: {start}")
    return _int_value(s.find(sub, start))


def lastIndexOf(target: Any, item: Any, offset: Any = None) -> celtypes.IntType:
    if isinstance(target, list):
        if offset is not None:
            raise _no_overload()
        for position in range(len(target) - 1, -1, -1):
            if _equal(target[position], item):
                return _int_value(position)
        return _int_value(-1)
    s, sub = _string(target), _string(item)
    if offset is None:
        return _int_value(s.rfind(sub))
    end = _int(offset)
    if end < 0 or end > len(s):
        raise function_error(f"index out of range: {end}")
    # cel-go: the match may start at or before ``offset``.
    return _int_value(s.rfind(sub, 0, end + len(sub)))


def lowerAscii(text: Any) -> celtypes.StringType:
    s = _string(text)
    return _string_result(s.translate(_ASCII_LOWER))


def upperAscii(text: Any) -> celtypes.StringType:
    s = _string(text)
    return _string_result(s.translate(_ASCII_UPPER))


_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}
_ASCII_UPPER = {c: c - 32 for c in range(ord("a"), ord("z") + 1)}


def replace(text: Any, old: Any, new: Any, limit: Any = None) -> celtypes.StringType:
    s, o, n = _string(text), _string(old), _string(new)
    count = -1 if limit is None else _int(limit)
    return _string_result(s.replace(o, n, count if count >= 0 else -1))


def split(text: Any, separator: Any, limit: Any = None) -> celtypes.ListType:
    s, sep = _string(text), _string(separator)
    count = -1 if limit is None else _int(limit)
    if count == 0:
        return celtypes.ListType([])
    if sep == "":
        # Go's strings.SplitN with an empty separator splits into UTF-8 sequences.
        parts = list(s) if count < 0 or count >= len(s) else [*s[: count - 1], s[count - 1 :]]
    else:
        parts = s.split(sep, count - 1 if count > 0 else -1)
    _charge_size(parts)
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


def substring(text: Any, start: Any, end: Any = None) -> celtypes.StringType:
    s = _string(text)
    begin = _int(start)
    stop = len(s) if end is None else _int(end)
    if begin < 0 or begin > len(s):
        raise function_error(f"index out of range: {begin}")
    if stop < 0 or stop > len(s):
        raise function_error(f"index out of range: {stop}")
    if begin > stop:
        raise function_error(f"invalid substring range. start: {begin}, end: {stop}")
    return _string_result(s[begin:stop])


def trim(text: Any) -> celtypes.StringType:
    # Go's strings.TrimSpace: Unicode white space.
    return _string_result(_string(text).strip())


def join(items: Any, separator: Any = None) -> celtypes.StringType:
    if not isinstance(items, list):
        raise _no_overload()
    sep = "" if separator is None else _string(separator)
    if not all(_is_str(item) for item in items):
        raise _no_overload()
    return _string_result(sep.join(items))


def reverse(value: Any) -> Any:
    if _is_str(value):
        return _string_result(str(value)[::-1])
    if isinstance(value, list):
        return celtypes.ListType(list(reversed(value)))
    raise _no_overload()


def quote(namespace: Any, text: Any) -> celtypes.StringType:
    """``strings.quote(s)``: a double-quoted CEL string literal."""
    if namespace is not STRINGS_NAMESPACE:
        raise _no_overload()
    s = _string(text)
    escaped = "".join(_QUOTE_ESCAPES.get(ch, ch) for ch in s)
    return _string_result(f'"{escaped}"')


_QUOTE_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}


def format(template: Any, args: Any) -> celtypes.StringType:
    """``"...".format([args])`` for the common verbs %s %d %f %e %x %X %o %b %%."""
    fmt = _string(template)
    if not isinstance(args, list):
        raise _no_overload()
    out: list[str] = []
    position = 0
    i = 0
    while i < len(fmt):
        ch = fmt[i]
        if ch != "%":
            out.append(ch)
            i += 1
            continue
        i += 1
        precision: int | None = None
        if i < len(fmt) and fmt[i] == ".":
            j = i + 1
            while j < len(fmt) and fmt[j].isdigit():
                j += 1
            precision = int(fmt[i + 1 : j] or "0")
            i = j
        if i >= len(fmt):
            raise function_error("unexpected end of format string")
        verb = fmt[i]
        i += 1
        if verb == "%":
            out.append("%")
            continue
        if position >= len(args):
            raise function_error(f"index {position} out of range")
        out.append(_format_one(verb, precision, args[position]))
        position += 1
    return _string_result("".join(out))


def _format_one(verb: str, precision: int | None, value: Any) -> str:
    if verb == "s":
        return _format_string(value)
    if verb == "d":
        if not _is_int(value) and not isinstance(value, celtypes.UintType):
            raise function_error("error during formatting: decimal clause can only be used on integers")
        return str(int(value))
    if verb in "fe":
        if not isinstance(value, (int, float)) or isinstance(value, (bool, celtypes.BoolType)):
            raise function_error("error during formatting: fixed-point clause can only be used on doubles")
        digits = 6 if precision is None else precision
        return f"{float(value):.{digits}{verb}}"
    if verb in "xXob":
        if isinstance(value, str):
            data = value.encode()
            text = data.hex()
            return text.upper() if verb == "X" else text
        if not isinstance(value, int) or isinstance(value, celtypes.BoolType):
            raise function_error(f"error during formatting: only integers can be formatted with %{verb}")
        spec = {"x": "x", "X": "X", "o": "o", "b": "b"}[verb]
        return ("-" if value < 0 else "") + _builtin_format(abs(int(value)), spec)
    raise function_error(f'could not parse formatting clause: unrecognized formatting clause "{verb}"')


_builtin_format = builtins.format


def _format_string(value: Any) -> str:
    if isinstance(value, (celtypes.BoolType, bool)):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ", ".join(_format_string(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_format_string(k)}: {_format_string(v)}" for k, v in value.items()) + "}"
    if isinstance(value, float):
        return repr(float(value)) if math.isfinite(value) else ("NaN" if math.isnan(value) else
                                                                  ("+Inf" if value > 0 else "-Inf"))
    return str(value)


# --- k8s Lists and Regex libraries ------------------------------------------------------------


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise _no_overload()
    return value


def _equal(a: Any, b: Any) -> bool:
    return _cel_equal(a, b)


def isSorted(items: Any) -> celtypes.BoolType:
    values = _list(items)
    try:
        return celtypes.BoolType(all(_ordered(operator.le, a, b) for a, b in itertools.pairwise(values)))
    except TypeError:
        raise _no_overload() from None


def sum(items: Any) -> Any:
    values = _list(items)
    if not values:
        return _int_value(0)
    total = values[0]
    for value in values[1:]:
        total = plus(total, value)
    return total


def find(text: Any, pattern: Any) -> celtypes.StringType:
    s, p = _string(text), _string(pattern)
    try:
        match = re2.search(p, s)
    except re2.error as exc:
        raise function_error(f"invalid regex: {exc}") from None
    return celtypes.StringType(match.group(0) if match else "")


def findAll(text: Any, pattern: Any, limit: Any = None) -> celtypes.ListType:
    s, p = _string(text), _string(pattern)
    count = -1 if limit is None else _int(limit)
    try:
        matches = [m.group(0) for m in re2.finditer(p, s)]
    except re2.error as exc:
        raise function_error(f"invalid regex: {exc}") from None
    if count >= 0:
        matches = matches[:count]
    _charge_size(matches)
    return celtypes.ListType([celtypes.StringType(m) for m in matches])


def matches(text: Any, pattern: Any) -> celtypes.BoolType:
    s, p = _string(text), _string(pattern)
    try:
        return celtypes.BoolType(re2.search(p, s) is not None)
    except re2.error as exc:
        raise function_error(f"invalid regex: {exc}") from None


# --- sets.* ------------------------------------------------------------------------------------


def _contains_all(container: list[Any], items: list[Any]) -> bool:
    return all(any(_equal(c, i) for c in container) for i in items)


def contains(namespace_or_value: Any, left: Any, right: Any = None) -> celtypes.BoolType:
    """``sets.contains(a, b)``, and the string/list ``x.contains(y)`` celpy provides."""
    if namespace_or_value is SETS_NAMESPACE:
        return celtypes.BoolType(_contains_all(_list(left), _list(right)))
    if right is not None:
        raise _no_overload()
    if _is_str(namespace_or_value) and _is_str(left):
        return celtypes.BoolType(str(left) in str(namespace_or_value))
    if isinstance(namespace_or_value, list):
        return celtypes.BoolType(any(_equal(item, left) for item in namespace_or_value))
    if isinstance(namespace_or_value, dict):
        return celtypes.BoolType(left in namespace_or_value)
    raise _no_overload()


def equivalent(namespace: Any, left: Any, right: Any) -> celtypes.BoolType:
    if namespace is not SETS_NAMESPACE:
        raise _no_overload()
    a, b = _list(left), _list(right)
    return celtypes.BoolType(_contains_all(a, b) and _contains_all(b, a))


def intersects(namespace: Any, left: Any, right: Any) -> celtypes.BoolType:
    if namespace is not SETS_NAMESPACE:
        raise _no_overload()
    a, b = _list(left), _list(right)
    return celtypes.BoolType(any(_equal(x, y) for x in a for y in b))


# --- optional values ----------------------------------------------------------------------------


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
        return _equal(self._value, other._value)

    def __hash__(self) -> int:
        return hash(self._present)

    def __repr__(self) -> str:
        return f"optional.of({self._value!r})" if self._present else "optional.none()"


_NONE = OptionalValue(present=False)


def _select(target: Any, key: Any) -> Any:
    getter = getattr(target, "get", None)
    if getter is None or not isinstance(target, dict):
        raise _no_overload()
    return getter(key)


class _Namespace:
    """The receiver of namespaced functions (``optional.of``, ``strings.quote``, ``sets.*``)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


OPTIONAL_NAMESPACE = _Namespace("optional")
STRINGS_NAMESPACE = _Namespace("strings")
SETS_NAMESPACE = _Namespace("sets")
#: Names resolvable in every expression besides its variables.
GLOBAL_NAMESPACES: dict[str, _Namespace] = {
    "optional": OPTIONAL_NAMESPACE,
    "strings": STRINGS_NAMESPACE,
    "sets": SETS_NAMESPACE,
}
#: namespace -> functions that may be called on it.
NAMESPACE_FUNCTIONS: dict[str, frozenset[str]] = {
    "optional": frozenset({"of", "none", "ofNonZeroValue"}),
    "strings": frozenset({"quote"}),
    "sets": frozenset({"contains", "equivalent", "intersects"}),
}


def of(namespace: Any, value: Any) -> OptionalValue:
    if namespace is not OPTIONAL_NAMESPACE:
        raise _no_overload()
    return OptionalValue(value)


def none(namespace: Any) -> OptionalValue:
    if namespace is not OPTIONAL_NAMESPACE:
        raise _no_overload()
    return _NONE


def ofNonZeroValue(namespace: Any, value: Any) -> OptionalValue:
    if namespace is not OPTIONAL_NAMESPACE:
        raise _no_overload()
    if value is None or (not isinstance(value, (Quantity, Semver, OptionalValue)) and not value):
        return _NONE
    return OptionalValue(value)


def _optional(value: Any) -> OptionalValue:
    if not isinstance(value, OptionalValue):
        raise _no_overload()
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
        raise _no_overload()
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
        index = _int(key)
        return OptionalValue(target[index]) if 0 <= index < len(target) else _NONE
    raise _no_overload()


# --- comprehension macros, charging the cost meter ----------------------------------------------

Scope = Any  # extender.core.cel._Scope; kept loose to avoid an import cycle
Body = Callable[[Scope], Any]


def _iteration_range(source: Any) -> Iterable[Any]:
    if isinstance(source, (list, dict)):  # a map iterates over its keys
        return list(source)
    if isinstance(source, CELEvalError):
        raise TypeError("no such overload")
    raise _no_overload()


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
        if _as_bool(body(scope._cel_nested({name: item}))):
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
        if _as_bool(body(scope._cel_nested({name: item}))):
            values.append(item)
    return celtypes.ListType(values)


def macro_bind(scope: Scope, name: str, body: Body, source: Body, cost: int) -> Any:
    """``cel.bind(name, init, body)``: ``source`` computes ``init`` (the rewrite wraps it as a
    single-element "range"), evaluated once and lazily errors like any value."""
    COST.charge(cost)
    return body(scope._cel_nested({name: source(scope)}))


#: CEL function name -> implementation, layered over celpy's built-ins.
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "!_": logical_not,
    "_==_": equal,
    "_!=_": not_equal,
    "_in_": contained_in,
    "_+_": plus,
    "_-_": minus,
    "_<_": less,
    "_<=_": less_equal,
    "_>_": greater,
    "_>=_": greater_equal,
    # quantity
    "quantity": quantity,
    "isQuantity": isQuantity,
    "sign": sign,
    "isInteger": isInteger,
    "asInteger": asInteger,
    "asApproximateFloat": asApproximateFloat,
    "add": add,
    "sub": sub,
    # semver
    "semver": semver,
    "isSemver": isSemver,
    "major": major,
    "minor": minor,
    "patch": patch,
    # both
    "compareTo": compareTo,
    "isGreaterThan": isGreaterThan,
    "isLessThan": isLessThan,
    # strings
    "charAt": charAt,
    "indexOf": indexOf,
    "lastIndexOf": lastIndexOf,
    "lowerAscii": lowerAscii,
    "upperAscii": upperAscii,
    "replace": replace,
    "split": split,
    "substring": substring,
    "trim": trim,
    "join": join,
    "reverse": reverse,
    "format": format,
    "quote": quote,
    # lists, regex, sets
    "isSorted": isSorted,
    "sum": sum,
    "find": find,
    "findAll": findAll,
    "matches": matches,
    "contains": contains,
    "equivalent": equivalent,
    "intersects": intersects,
    # optional
    "of": of,
    "none": none,
    "ofNonZeroValue": ofNonZeroValue,
    "hasValue": hasValue,
    "value": value,
    "orValue": orValue,
    "or": optional_or,
    "__optsel__": optional_select,
    "__optindex__": optional_index,
}
