"""cel-go's ``ext.Strings`` library (version 2 and later, as Kubernetes enables it), with the k8s
list overloads of ``indexOf``/``lastIndexOf``, and ``strings.quote``."""

from __future__ import annotations

import builtins
import math
from typing import Any

from celpy import celtypes

from extender.core.cel.cost import charge_size
from extender.core.cel.values import (
    STRINGS_NAMESPACE,
    cel_equal,
    function_error,
    int_arg,
    int_value,
    is_int,
    is_str,
    no_overload,
    string_arg,
    string_result,
)

__all__ = [
    "charAt",
    "format",
    "indexOf",
    "join",
    "lastIndexOf",
    "lowerAscii",
    "quote",
    "replace",
    "reverse",
    "split",
    "substring",
    "trim",
    "upperAscii",
]


def charAt(text: Any, index: Any) -> celtypes.StringType:
    s, i = string_arg(text), int_arg(index)
    if i < 0 or i > len(s):
        raise function_error(f"index out of range: {i}")
    return celtypes.StringType(s[i : i + 1])


def indexOf(target: Any, item: Any, offset: Any = None) -> celtypes.IntType:
    if isinstance(target, list):  # k8s Lists library
        if offset is not None:
            raise no_overload()
        for position, element in enumerate(target):
            if cel_equal(element, item):
                return int_value(position)
        return int_value(-1)
    s, sub = string_arg(target), string_arg(item)
    start = 0 if offset is None else int_arg(offset)
    if start < 0 or start > len(s):
        raise function_error(f"index out of range: {start}")
    return int_value(s.find(sub, start))


def lastIndexOf(target: Any, item: Any, offset: Any = None) -> celtypes.IntType:
    if isinstance(target, list):
        if offset is not None:
            raise no_overload()
        for position in range(len(target) - 1, -1, -1):
            if cel_equal(target[position], item):
                return int_value(position)
        return int_value(-1)
    s, sub = string_arg(target), string_arg(item)
    if offset is None:
        return int_value(s.rfind(sub))
    end = int_arg(offset)
    if end < 0 or end > len(s):
        raise function_error(f"index out of range: {end}")
    # cel-go: the match may start at or before ``offset``.
    return int_value(s.rfind(sub, 0, end + len(sub)))


def lowerAscii(text: Any) -> celtypes.StringType:
    s = string_arg(text)
    return string_result(s.translate(_ASCII_LOWER))


def upperAscii(text: Any) -> celtypes.StringType:
    s = string_arg(text)
    return string_result(s.translate(_ASCII_UPPER))


_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


_ASCII_UPPER = {c: c - 32 for c in range(ord("a"), ord("z") + 1)}


def replace(text: Any, old: Any, new: Any, limit: Any = None) -> celtypes.StringType:
    s, o, n = string_arg(text), string_arg(old), string_arg(new)
    count = -1 if limit is None else int_arg(limit)
    return string_result(s.replace(o, n, count if count >= 0 else -1))


def split(text: Any, separator: Any, limit: Any = None) -> celtypes.ListType:
    s, sep = string_arg(text), string_arg(separator)
    count = -1 if limit is None else int_arg(limit)
    if count == 0:
        return celtypes.ListType([])
    if sep == "":
        # Go's strings.SplitN with an empty separator splits into UTF-8 sequences.
        parts = list(s) if count < 0 or count >= len(s) else [*s[: count - 1], s[count - 1 :]]
    else:
        parts = s.split(sep, count - 1 if count > 0 else -1)
    charge_size(parts)
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


def substring(text: Any, start: Any, end: Any = None) -> celtypes.StringType:
    s = string_arg(text)
    begin = int_arg(start)
    stop = len(s) if end is None else int_arg(end)
    if begin < 0 or begin > len(s):
        raise function_error(f"index out of range: {begin}")
    if stop < 0 or stop > len(s):
        raise function_error(f"index out of range: {stop}")
    if begin > stop:
        raise function_error(f"invalid substring range. start: {begin}, end: {stop}")
    return string_result(s[begin:stop])


def trim(text: Any) -> celtypes.StringType:
    # Go's strings.TrimSpace: Unicode white space.
    return string_result(string_arg(text).strip())


def join(items: Any, separator: Any = None) -> celtypes.StringType:
    if not isinstance(items, list):
        raise no_overload()
    sep = "" if separator is None else string_arg(separator)
    if not all(is_str(item) for item in items):
        raise no_overload()
    return string_result(sep.join(items))


def reverse(value: Any) -> Any:
    if is_str(value):
        return string_result(str(value)[::-1])
    if isinstance(value, list):
        return celtypes.ListType(list(reversed(value)))
    raise no_overload()


def quote(namespace: Any, text: Any) -> celtypes.StringType:
    """``strings.quote(s)``: a double-quoted CEL string literal."""
    if namespace is not STRINGS_NAMESPACE:
        raise no_overload()
    s = string_arg(text)
    escaped = "".join(_QUOTE_ESCAPES.get(ch, ch) for ch in s)
    return string_result(f'"{escaped}"')


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
    fmt = string_arg(template)
    if not isinstance(args, list):
        raise no_overload()
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
    return string_result("".join(out))


def _format_one(verb: str, precision: int | None, value: Any) -> str:
    if verb == "s":
        return _format_string(value)
    if verb == "d":
        if not is_int(value) and not isinstance(value, celtypes.UintType):
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
        return (
            repr(float(value))
            if math.isfinite(value)
            else ("NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf"))
        )
    return str(value)
