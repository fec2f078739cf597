"""Label and field selectors as the apiserver parses them for LIST and WATCH.

Label selectors: ``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``, ``a in (x,y)``, ``a notin (x)``,
comma-separated and ANDed. Field selectors: ``path=value``, ``path==value``, ``path!=value``;
a field the resource does not index is a 400: ``field label not supported: <path>`` for the types
with field selectors of their own (pods, nodes, events, ResourceSlices, ...), ``"<path>" is not a
known field selector: only "metadata.name", "metadata.namespace"`` for the others, as on a real
cluster. A missing field reads as the empty string (``spec.nodeName=`` selects unbound pods).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .resources import ResourceType, field_getter
from .status import bad_request

__all__ = ["Selector", "match_all", "parse_field_selector", "parse_label_selector"]

#: A compiled selector: object -> matches.
Selector = Callable[[dict[str, Any]], bool]

_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s+\(([^)]*)\)\s*$")
_BINARY = re.compile(rf"^\s*({_KEY})\s*(==|!=|=)\s*({_VALUE})\s*$")
_EXISTS = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


def match_all(_obj: dict[str, Any]) -> bool:
    return True


def _split_requirements(text: str) -> list[str]:
    """Split at commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return parts


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _label_requirement(text: str) -> Selector:
    if match := _SET.match(text):
        key, op, values = match.group(1), match.group(3), {v.strip() for v in match.group(4).split(",")}
        if op == "in":
            return lambda obj: key in _labels(obj) and _labels(obj)[key] in values
        return lambda obj: key not in _labels(obj) or _labels(obj)[key] not in values
    if match := _BINARY.match(text):
        key, op, value = match.group(1), match.group(3), match.group(4)
        if op == "!=":
            return lambda obj: _labels(obj).get(key) != value
        return lambda obj: key in _labels(obj) and _labels(obj)[key] == value
    if match := _EXISTS.match(text):
        negate, key = match.group(1) == "!", match.group(2)
        return (lambda obj: key not in _labels(obj)) if negate else (lambda obj: key in _labels(obj))
    raise bad_request(f"unable to parse requirement: {text.strip()!r}: found unexpected token")


def _all_of(selectors: list[Selector]) -> Selector:
    if not selectors:
        return match_all
    return lambda obj: all(s(obj) for s in selectors)


def parse_label_selector(text: str | None) -> Selector:
    """``labelSelector`` query parameter -> predicate; 400 BadRequest when malformed."""
    if not text or not text.strip():
        return match_all
    return _all_of([_label_requirement(part) for part in _split_requirements(text)])


def _field_requirement(getter: Callable[[dict[str, Any]], str], equal: bool, value: str) -> Selector:
    return lambda obj: (getter(obj) == value) == equal


def parse_field_selector(text: str | None, rt: ResourceType) -> Selector:
    """``fieldSelector`` query parameter -> predicate; 400 for malformed or unsupported fields."""
    if not text or not text.strip():
        return match_all
    supported = {"metadata.name", *rt.fields}
    if rt.namespaced:
        supported.add("metadata.namespace")
    selectors: list[Selector] = []
    for part in text.split(","):
        match = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|!=|=)\s*(.*?)\s*$", part)
        if not match:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        path, op, value = match.groups()
        if path not in supported:
            if rt.fields:
                raise bad_request(f"field label not supported: {path}")
            raise bad_request(f'"{path}" is not a known field selector: only "metadata.name", "metadata.namespace"')
        selectors.append(_field_requirement(field_getter(path), op != "!=", value))
    return _all_of(selectors)
