"""Reading celpy's parse trees: the rule names and node shapes of its CEL grammar we rely on.

The checker, the static type and the cost model walk the same trees; these helpers keep the
knowledge of the grammar's shape in one place (``RULES_USED`` is checked against celpy's grammar
when the engine loads, see ``celpy_glue``).
"""

from __future__ import annotations

from typing import Any

import lark

__all__ = [
    "CELPY_MACRO_NAMES",
    "MACROS",
    "RULES_USED",
    "WRAPPERS",
    "bare_ident",
    "call_args",
    "token",
    "unwrap",
]

#: The comprehension macros of CEL (receiver-style: ``list.all(x, p)``).
MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
#: Names celpy's grammar treats as macros; cel-go has neither.
CELPY_MACRO_NAMES = frozenset({"reduce", "min"})


def token(node: Any) -> str:
    return str(node.value) if isinstance(node, lark.Token) else ""


def bare_ident(node: Any) -> str | None:
    """The name when ``node`` is (a chain of single-child wrappers around) a plain identifier."""
    while isinstance(node, lark.Tree):
        if node.data == "ident":
            return token(node.children[0])
        if len(node.children) != 1 or node.data not in WRAPPERS:
            return None
        node = node.children[0]
    return None


WRAPPERS = frozenset(
    {
        "expr",
        "conditionalor",
        "conditionaland",
        "relation",
        "addition",
        "multiplication",
        "unary",
        "member",
        "primary",
        "paren_expr",
    }
)


def unwrap(node: Any) -> Any:
    while isinstance(node, lark.Tree) and node.data in WRAPPERS and len(node.children) == 1:
        node = node.children[0]
    return node


def call_args(node: lark.Tree, index: int) -> list[Any]:
    if len(node.children) > index and isinstance(node.children[index], lark.Tree):
        exprlist = node.children[index]
        if exprlist.data == "exprlist":
            return list(exprlist.children)
    return []


#: Every grammar rule the package's tree walkers name (tests/core/test_cel_engine.py checks that
#: the walkers name no other, the engine checks celpy's grammar defines them all).
RULES_USED = WRAPPERS | frozenset(
    {
        "ident",
        "dot_ident",
        "ident_arg",
        "dot_ident_arg",
        "member_dot",
        "member_dot_arg",
        "member_object",
        "member_index",
        "exprlist",
        "literal",
        "list_lit",
        "map_lit",
        "unary_not",
        "unary_neg",
        "relation_lt",
        "relation_le",
        "relation_gt",
        "relation_ge",
        "relation_eq",
        "relation_ne",
        "relation_in",
        "addition_add",
        "addition_sub",
        "multiplication_mul",
        "multiplication_div",
        "multiplication_mod",
    }
)
