"""Compiling one selector: length limit, the ``device.driver == "..."`` shortcut, optional
syntax, parsing, static checks, ``cel.bind``, then celpy's transpiler through ``celpy_glue``.

``cel.bind(x, init, body)`` becomes a one-shot comprehension (``macro_bind``): the tree node is
rewritten to ``(init).map(x, body)`` and its macro call redirected.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import lark

from extender.core.cel import macros as macro_library
from extender.core.cel import operators
from extender.core.cel.celpy_glue import Generator, Node, parse
from extender.core.cel.checks import Checker, static_type
from extender.core.cel.cost import static_cost
from extender.core.cel.environment import FOLDABLE, FUNCTIONS
from extender.core.cel.errors import CelCompileError
from extender.core.cel.programs import Compiled, DriverEquals, Program
from extender.core.cel.reads import device_reads
from extender.core.cel.syntax import rewrite_optional_syntax, syntax_error
from extender.core.cel.tree import MACROS, bare_ident, call_args, token

__all__ = ["MAX_EXPRESSION_LENGTH", "compile_program", "make_generator"]

#: CELSelectorExpressionMaxLength (counted in UTF-8 bytes, as Go's len()).
MAX_EXPRESSION_LENGTH = 10240

_FAST_LITERAL = r"""(?:"[^"\\\n]*"|'[^'\\\n]*')"""
_FAST_DRIVER = re.compile(
    rf"""\s*(?:device\s*\.\s*driver\s*==\s*(?P<a>{_FAST_LITERAL})|(?P<b>{_FAST_LITERAL})\s*==\s*device\s*\.\s*driver)\s*"""
)


def make_generator(**helpers: Callable[..., Any]) -> Generator:
    """The generator over this package's library; ``helpers`` replace the short-circuit helpers
    (tests use it to inject a fault). Runs the canary: raises ``CelEngineError``."""
    return Generator(
        FUNCTIONS,
        macros={
            name: getattr(macro_library, f"macro_{name}")
            for name in ("all", "exists", "exists_one", "map", "filter", "bind")
        },
        helpers={
            "result": operators.result,
            "lazy_and": operators.lazy_and,
            "lazy_or": operators.lazy_or,
            "lazy_condition": operators.lazy_condition,
            **helpers,
        },
        foldable=FOLDABLE,
    )


# Built at import, so that a celpy whose internals moved stops the import (CelEngineError).
_GENERATOR = make_generator()


def compile_program(expression: str, *, consumable_capacity: bool = True) -> Program:
    """Compile one selector expression (no caching); raises ``CelCompileError``."""
    size = len(expression.encode("utf-8", "surrogatepass"))
    if size > MAX_EXPRESSION_LENGTH:
        raise CelCompileError(f"expression too long ({size} > {MAX_EXPRESSION_LENGTH})")
    fast = _FAST_DRIVER.fullmatch(expression)
    if fast is not None:
        literal = fast.group("a") or fast.group("b")
        return DriverEquals(literal[1:-1])
    text = rewrite_optional_syntax(expression)
    try:
        try:
            tree = parse(text)
        except lark.exceptions.UnexpectedInput as exc:
            raise CelCompileError(syntax_error(text, exc)) from None
        Checker(text, consumable_capacity=consumable_capacity).check(tree)
        root_type = static_type(tree)
        if root_type is not None and root_type != "bool":
            raise CelCompileError(f"must evaluate to bool or the unknown type, not {root_type}")
        reads = device_reads(tree)  # before the binds are rewritten: the tree as written
        binds = _rewrite_binds(tree)
        function = _GENERATOR.program(tree, lambda node: _macro_of(node, binds))
        return Compiled(function, static_cost(tree), reads)
    except RecursionError:
        raise CelCompileError("expression recursion limit exceeded") from None


def _macro_of(node: lark.Tree, binds: set[int]) -> tuple[str, int] | None:
    """(macro, cost per iteration) for a comprehension node, else None."""
    if node.data != "member_dot_arg" or token(node.children[1]) not in MACROS:
        return None
    body = call_args(node, 2)[1]
    macro = "bind" if id(node) in binds else token(node.children[1])
    return macro, static_cost(body) + 1


def _rewrite_binds(tree: lark.Tree) -> set[int]:
    """Turn each ``cel.bind(x, init, body)`` into a ``(init).map(x, body)`` node whose macro call
    is redirected to ``macro_bind``. Returns the ids of the rewritten nodes."""
    rewritten: set[int] = set()
    for node in tree.iter_subtrees():
        if node.data != "member_dot_arg" or token(node.children[1]) != "bind":
            continue
        if bare_ident(node.children[0]) != "cel":
            continue
        variable, init, body = call_args(node, 2)
        parenthesised = Node("paren_expr", [init])
        receiver = Node("member", [Node("primary", [parenthesised])])
        node.children = [
            receiver,
            lark.Token("IDENT", "map"),
            Node("exprlist", [variable, body]),
        ]
        rewritten.add(id(node))
    return rewritten
