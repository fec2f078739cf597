"""What of a device a selector reads, when that can be known before it runs.

Most selectors read a few fixed fields: ``device.driver``, ``device.attributes["<domain>"].<id>``
(or ``["<id>"]``), ``device.capacity["<domain>"].<id>``, ``device.allowMultipleAllocations``. A
CEL expression is a pure function of what it reads, so its verdict on a device is a function of
those values alone; and across a cluster's devices they take few distinct values (a model, a
memory size, an index 0-7), while everything else about the devices (a UUID, a serial) differs.
``device_reads`` finds those paths in the parse tree, and ``Compiled.run`` evaluates the selector
once per distinct combination of values instead of once per device: a selector no pod used before,
over 15 000 nodes x 8 GPUs, is a few dozen evaluations instead of 120 000.

The analysis is conservative: any other use of ``device`` (the whole ``attributes`` map, a domain
map as a value, a comprehension over it, a variable named ``device``, a field of something else
named ``device``) or a key that is not a plain string literal gives None, and the selector is
evaluated device by device as before.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import lark

from extender.core.cel.tree import bare_ident, token, unwrap
from extender.core.quantity import Quantity
from extender.core.semver import Semver

__all__ = ["KeyReader", "Path", "device_reads", "key_reader"]

#: A field of ``device``: ``("driver",)``, ``("allowMultipleAllocations",)`` or
#: ``("attributes" | "capacity", domain, id)``.
Path = tuple[str, ...]

_SCALAR_FIELDS = frozenset({"driver", "allowMultipleAllocations"})
_MAP_FIELDS = frozenset({"attributes", "capacity"})
#: A string literal without escapes, prefixes or triple quotes: its text is its value.
_PLAIN_STRING = re.compile(r"""^(?:"[^"\\\n]*"|'[^'\\\n]*')$""")
#: Two sentinels, so that "no such domain" and "no such key in the domain" stay apart.
_NO_DOMAIN = object()
_NO_KEY = object()


def device_reads(tree: lark.Tree) -> tuple[Path, ...] | None:
    """The device paths ``tree`` reads (sorted, without repeats), or None if it uses ``device``
    in any other way."""
    paths: set[Path] = set()
    matched = 0
    pending: list[Any] = [tree]
    while pending:
        node = pending.pop()
        if not isinstance(node, lark.Tree):
            continue
        if node.data in ("member_dot", "member_index"):
            path = _path(node)
            if path is not None:
                paths.add(path)
                matched += 1
                continue
        pending.extend(node.children)
    mentions = sum(1 for value in tree.scan_values(lambda v: isinstance(v, lark.Token) and str(v) == "device"))
    return tuple(sorted(paths)) if mentions == matched else None


def _path(node: lark.Tree) -> Path | None:
    """The path when ``node`` is exactly one of the recognised reads of ``device``."""
    head = node.children[0]
    if node.data == "member_dot":
        name = token(node.children[1])
        if bare_ident(head) == "device":
            return (name,) if name in _SCALAR_FIELDS else None
        domain = _domain(unwrap(head))
        return (*domain, name) if domain is not None and name else None
    key = _string(node.children[1])
    domain = _domain(unwrap(head))
    return (*domain, key) if domain is not None and key is not None else None


def _domain(node: Any) -> tuple[str, str] | None:
    """``(field, domain)`` when ``node`` is ``device.attributes["<domain>"]`` or the capacity's."""
    if not isinstance(node, lark.Tree) or node.data != "member_index":
        return None
    inner = unwrap(node.children[0])
    if not isinstance(inner, lark.Tree) or inner.data != "member_dot" or bare_ident(inner.children[0]) != "device":
        return None
    field, domain = token(inner.children[1]), _string(node.children[1])
    return (field, domain) if field in _MAP_FIELDS and domain is not None else None


def _string(node: Any) -> str | None:
    literal = unwrap(node)
    if not isinstance(literal, lark.Tree) or literal.data != "literal" or len(literal.children) != 1:
        return None
    text = token(literal.children[0])
    return text[1:-1] if _PLAIN_STRING.match(text) else None


KeyReader = Callable[[dict[str, Any]], "tuple[Any, ...] | None"]


def key_reader(paths: tuple[Path, ...]) -> KeyReader:
    """A function from a device's view (its ``device`` map) to the values it holds at ``paths``,
    as a key that two devices share only if no selector reading those paths can tell them apart;
    None for a value of a type not known to key exactly. The key may still be unhashable (a list
    attribute holding such a value): a TypeError where it is used."""
    getters = tuple(_getter(path) for path in paths)

    def read(fields: dict[str, Any]) -> tuple[Any, ...] | None:
        key: list[Any] = []
        for get in getters:
            value = get(fields)
            keyer = _KEYERS.get(type(value))
            if keyer is None:
                keyer = _KEYERS[type(value)] = _keyer_for(type(value))
            if keyer is _unkeyable:
                return None
            key.append(keyer(value))
        return tuple(key)

    return read


def _getter(path: Path) -> Callable[[dict[str, Any]], Any]:
    if len(path) == 1:
        (name,) = path
        return lambda fields: dict.get(fields, name, _NO_KEY)
    field, domain_name, ident = path

    def get(fields: dict[str, Any]) -> Any:
        domain = dict.get(dict.get(fields, field) or _EMPTY, domain_name, _NO_DOMAIN)
        return domain if domain is _NO_DOMAIN else dict.get(domain, ident, _NO_KEY)

    return get


_EMPTY: dict[str, Any] = {}


def _keyer_for(kind: type) -> Callable[[Any], Any]:
    """How to key a value of ``kind``: with its type (``True == 1`` in Python, not in CEL), as a
    builtin value where the type is celpy's (whose strings and ints hash in Python code), by its
    written form too where its ``==`` ignores it; ``_unkeyable`` for a type not known here."""
    if issubclass(kind, str):
        return lambda value: (kind, str.__str__(value))
    if issubclass(kind, int):
        return lambda value: (kind, int.__index__(value))
    if kind is Semver or kind is object or issubclass(kind, (float, bytes)):  # object: the sentinels
        return lambda value: (kind, value)
    if kind is Quantity:  # == ignores the written form, which ``string()`` shows
        return lambda value: (kind, value.exact_key())
    if issubclass(kind, list):
        return _list
    return _unkeyable


def _unkeyable(value: Any) -> Any:
    raise TypeError(f"no exact key for a {type(value).__name__}")


#: type -> its keyer (``_keyer_for``), learnt as types are met.
_KEYERS: dict[type, Callable[[Any], Any]] = {}


def _list(value: list[Any]) -> Any:
    items: list[Any] = []
    for item in value:
        keyer = _KEYERS.get(type(item))
        if keyer is None:
            keyer = _KEYERS[type(item)] = _keyer_for(type(item))
        if keyer is _unkeyable:
            return [value]  # unhashable: the device is evaluated on its own
        items.append(keyer(item))
    return type(value), tuple(items)
