"""Static checks on a parsed selector: what cel-go's checker rejects at compile time (undeclared
names and functions, bad macro arguments, unknown ``device`` fields) and a root that is
statically not bool."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import lark

from extender.core.cel.environment import (
    DEVICE_FIELDS,
    KNOWN_FUNCTIONS,
    NAMESPACE_FUNCTIONS,
    TYPE_IDENTS,
)
from extender.core.cel.errors import CelCompileError
from extender.core.cel.syntax import node_error
from extender.core.cel.tree import CELPY_MACRO_NAMES, MACROS, bare_ident, call_args, token, unwrap

__all__ = ["Checker", "static_type"]


class Checker:
    """Rejects what cel-go's checker would (undeclared names, bad macros, unknown device fields)."""

    def __init__(self, text: str, *, consumable_capacity: bool) -> None:
        self._text = text
        self._device_fields = DEVICE_FIELDS | ({"allowMultipleAllocations"} if consumable_capacity else set())

    def check(self, tree: lark.Tree) -> None:
        self._visit(tree, {"device": "device"})

    def _undeclared(self, node: lark.Tree, name: str) -> CelCompileError:
        return node_error(self._text, node, f"undeclared reference to '{name}' (in container '')")

    def _visit(self, node: Any, scope: dict[str, str]) -> None:
        if not isinstance(node, lark.Tree):
            return
        kind = node.data
        if kind in ("ident", "dot_ident"):
            name = token(node.children[0])
            if name not in scope and name not in TYPE_IDENTS:
                raise self._undeclared(node, name)
        elif kind in ("ident_arg", "dot_ident_arg"):
            self._function(node, scope)
        elif kind == "member_dot_arg":
            self._method(node, scope)
        elif kind == "member_dot":
            receiver = bare_ident(node.children[0])
            field = token(node.children[1])
            if receiver is not None and scope.get(receiver) == "device" and field not in self._device_fields:
                raise node_error(self._text, node, f"undefined field '{field}'")
            self._visit(node.children[0], scope)
        elif kind == "member_object":
            raise node_error(self._text, node, "message construction is not supported in selectors")
        else:
            for child in node.children:
                self._visit(child, scope)

    def _function(self, node: lark.Tree, scope: dict[str, str]) -> None:
        name = token(node.children[0])
        args = call_args(node, 1)
        if name == "has":
            target = unwrap(args[0]) if len(args) == 1 else None
            if not (isinstance(target, lark.Tree) and target.data == "member_dot"):
                raise node_error(self._text, node, "invalid argument to has() macro")
        elif name == "dyn":
            if len(args) != 1:
                raise node_error(self._text, node, "found no matching overload for 'dyn'")
        elif name in MACROS or name in CELPY_MACRO_NAMES or name not in KNOWN_FUNCTIONS:
            raise self._undeclared(node, name)
        for arg in args:
            self._visit(arg, scope)

    def _method(self, node: lark.Tree, scope: dict[str, str]) -> None:
        receiver_node = node.children[0]
        method = token(node.children[1])
        args = call_args(node, 2)
        receiver = bare_ident(receiver_node)
        if method in MACROS:
            self._macro(node, method, args, scope)
            return
        if receiver == "cel" and "cel" not in scope:
            if method != "bind":
                raise self._undeclared(node, f"cel.{method}")
            if len(args) != 3 or bare_ident(args[0]) is None:
                raise node_error(self._text, node, "cel.bind() variable name must be a simple identifier")
            self._visit(args[1], scope)
            self._visit(args[2], {**scope, str(bare_ident(args[0])): "var"})
            return
        if receiver in NAMESPACE_FUNCTIONS and receiver not in scope:
            if method not in NAMESPACE_FUNCTIONS[receiver]:
                raise self._undeclared(node, f"{receiver}.{method}")
        elif method in CELPY_MACRO_NAMES:
            raise node_error(self._text, node, f"function '{method}' is not supported by this CEL engine")
        elif method not in KNOWN_FUNCTIONS:
            raise self._undeclared(node, method)
        else:
            self._visit(receiver_node, scope)
        for arg in args:
            self._visit(arg, scope)

    def _macro(self, node: lark.Tree, method: str, args: list[Any], scope: dict[str, str]) -> None:
        if len(args) == 3 and method in ("all", "exists", "exists_one", "map", "filter"):
            detail = (
                "map(x, filter, transform)"
                if method == "map" and bare_ident(args[1]) is None
                else f"two-variable {method}()"
            )
            raise node_error(self._text, node, f"{detail} is not supported by this CEL engine")
        if len(args) != 2:
            raise node_error(self._text, node, f"found no matching overload for '{method}'")
        variable = bare_ident(args[0])
        if variable is None:
            raise node_error(self._text, node, "argument must be a simple name")
        self._visit(node.children[0], scope)
        self._visit(args[1], {**scope, variable: "var"})


_LITERAL_TYPES = {
    "INT_LIT": "int",
    "UINT_LIT": "uint",
    "FLOAT_LIT": "double",
    "STRING_LIT": "string",
    "MLSTRING_LIT": "string",
    "BYTES_LIT": "bytes",
    "BOOL_LIT": "bool",
    "NULL_LIT": "null_type",
}


_RESULT_TYPES = {
    "size": "int",
    "int": "int",
    "uint": "uint",
    "double": "double",
    "string": "string",
    "bytes": "bytes",
    "bool": "bool",
    "quantity": "kubernetes.Quantity",
    "add": "kubernetes.Quantity",
    "sub": "kubernetes.Quantity",
    "semver": "kubernetes.Semver",
    "compareTo": "int",
    "sign": "int",
    "major": "int",
    "minor": "int",
    "patch": "int",
    "asInteger": "int",
    "asApproximateFloat": "double",
    "charAt": "string",
    "lowerAscii": "string",
    "upperAscii": "string",
    "replace": "string",
    "substring": "string",
    "trim": "string",
    "format": "string",
    "quote": "string",
    "find": "string",
    "split": "list(string)",
    "findAll": "list(string)",
    "isQuantity": "bool",
    "isSemver": "bool",
    "isInteger": "bool",
    "isGreaterThan": "bool",
    "isLessThan": "bool",
    "startsWith": "bool",
    "endsWith": "bool",
    "matches": "bool",
    "has": "bool",
    "hasValue": "bool",
    "isSorted": "bool",
    "equivalent": "bool",
    "intersects": "bool",
    "includes": "bool",
    "all": "bool",
    "exists": "bool",
    "exists_one": "bool",
    "of": "optional_type",
    "none": "optional_type",
    "ofNonZeroValue": "optional_type",
    "__optsel__": "optional_type",
    "__optindex__": "optional_type",
}


_BINARY_OPS = frozenset({"addition", "multiplication"})


def static_type(node: Any) -> str | None:
    """The type cel-go's checker would infer for ``node``, or None for dyn/unknown."""
    node = unwrap(node)
    if not isinstance(node, lark.Tree):
        return None
    kind = node.data
    if kind == "literal":
        return _LITERAL_TYPES.get(node.children[0].type)
    if kind in ("conditionalor", "conditionaland", "relation"):
        return "bool"
    if kind == "unary":
        operand = static_type(node.children[1])
        return "bool" if node.children[0].data == "unary_not" else operand
    if kind in _BINARY_OPS:
        left = static_type(node.children[0].children[0])
        right = static_type(node.children[1])
        return left if left is not None and left == right and left != "bool" else None
    if kind == "expr" and len(node.children) == 3:
        then, otherwise = static_type(node.children[1]), static_type(node.children[2])
        return then if then == otherwise else None
    if kind == "list_lit":
        items = call_args(node, 0) if node.children else []
        return f"list({_common(static_type(item) for item in items)})"
    if kind == "map_lit":
        inits = list(node.children[0].children) if node.children else []
        keys = _common(static_type(k) for k in inits[::2])
        values = _common(static_type(v) for v in inits[1::2])
        return f"map({keys}, {values})"
    if kind in ("ident_arg", "dot_ident_arg"):
        return _RESULT_TYPES.get(token(node.children[0]))
    if kind == "member_dot_arg":
        method = token(node.children[1])
        if method in ("map", "filter"):
            return "list(dyn)" if method == "map" else static_type(node.children[0])
        return _RESULT_TYPES.get(method)
    if kind == "member_dot" and bare_ident(node.children[0]) == "device":
        return {
            "driver": "string",
            "attributes": "map(string, map(string, dyn))",
            "capacity": "map(string, map(string, kubernetes.Quantity))",
            "allowMultipleAllocations": "bool",
        }.get(token(node.children[1]))
    if kind == "ident" and token(node.children[0]) == "device":
        return "kubernetes.DRADevice"
    return None


def _common(types: Iterable[str | None]) -> str:
    seen = set(types)
    if len(seen) == 1:
        only = seen.pop()
        return only if only is not None else "dyn"
    return "dyn"
