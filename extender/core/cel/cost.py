"""The evaluation cost model (upstream: CELSelectorExpressionMaxCost, 1,000,000 per evaluation,
enforced at run time; the scheduler's compile skips the static estimate, docs/semantics.md §14.4).

cel-python tracks no cost, so this package approximates cel-go's *actual* cost: every evaluation
starts at the static node count of the expression (outside comprehension bodies), each
comprehension iteration charges the node count of its body plus one, and string/list-producing
functions and ``+`` charge about one unit per ten elements. Going over the limit aborts the
evaluation with ``operation cancelled: actual cost limit exceeded``. No compile-time cost
rejection is done (the scheduler does not do one either; the apiserver rejects such selectors
at admission).
"""

from __future__ import annotations

from typing import Any

import lark

from extender.core.cel.tree import MACROS, call_args, token

__all__ = ["COST", "COSTED", "COST_LIMIT", "CostLimitExceeded", "CostMeter", "charge_size", "static_cost"]

#: CELSelectorExpressionMaxCost.
COST_LIMIT = 1_000_000


class CostLimitExceeded(Exception):
    """The evaluation spent more than its budget. Deliberately not a ValueError: the evaluation
    must not turn it into an absorbable error value."""


class CostMeter:
    """Cost spent by the evaluation in progress.

    One meter per process: evaluations run one at a time on the caller's thread (the core is
    synchronous).
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


def charge_size(value: object) -> None:
    """cel-go charges size-dependent functions about one unit per ten characters or elements."""
    if isinstance(value, (str, list, dict)):
        COST.charge(1 + len(value) // 10)


#: Parse-tree nodes that cost one unit each time they are evaluated.
COSTED = frozenset(
    {
        "member_dot",
        "member_dot_arg",
        "member_index",
        "ident",
        "dot_ident",
        "ident_arg",
        "dot_ident_arg",
        "literal",
        "list_lit",
        "map_lit",
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
        "unary_not",
        "unary_neg",
    }
)


def static_cost(node: Any) -> int:
    """Nodes evaluated once per pass over ``node``; comprehension bodies are charged per iteration
    by the macros, so they are left out here."""
    if not isinstance(node, lark.Tree):
        return 0
    cost = (
        1
        if node.data in COSTED or (node.data in ("conditionalor", "conditionaland", "expr") and len(node.children) > 1)
        else 0
    )
    children = list(node.children)
    if node.data == "member_dot_arg" and token(children[1]) in MACROS:
        children = [children[0], *call_args(node, 2)[:1]]
    return cost + sum(static_cost(child) for child in children)
