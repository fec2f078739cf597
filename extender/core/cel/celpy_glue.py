"""Every contact with cel-python's internals, and the canary that checks them when we load.

cel-python (celpy) is used for two things only: its Lark grammar of CEL, and its transpiler
(``celpy.evaluation.Transpiler`` phases 1 and 2), which turns a parse tree into Python
statements. Neither is a public API, so what this package relies on is listed here and checked
at import against the installed celpy (``Generator.__init__`` runs a canary selector through the
whole path):

- the grammar: parsed with a private ``lark.Lark`` built from celpy's ``cel.lark`` (so a celpy
  ``Environment`` elsewhere in the process cannot swap the tree class under us); its rule names
  must include every rule our tree walkers read (``tree.RULES_USED``);
- the generated code: each line is rewritten with the regular expressions of ``_REWRITES`` —
  comprehension macros to our metered ones, ``has()`` to a CEL bool, eager ``&&``/``||``/``?:``
  to short-circuiting helpers, ``result()`` and library calls to short global names. Each rewrite
  must match in the canary, and no un-rewritten form may remain;
- ``CELEvalError``'s argument layout (message, exception class, exception args), read back for
  cel-go's error texts (``runtime_error_text``);
- celpy's built-in function table (``base_functions``) for the names a selector may call and the
  type values (``int``, ``string``...) it may compare against;
- the ``celpy`` logger, silenced: celpy logs at ERROR for failures that we turn into CEL errors.

The rest of the package uses only celpy's value types (``celpy.celtypes``) and ``CELEvalError``
values, which are its documented runtime representation.

A celpy release that changes any of this makes ``import extender.core.cel`` fail with
``CelEngineError`` naming the installed version and the tested ones, instead of mis-evaluating
selectors silently. pyproject.toml pins cel-python to the tested versions.
"""

from __future__ import annotations

import importlib.metadata
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import celpy
import celpy.evaluation
import lark
from celpy import celtypes
from celpy.evaluation import (
    Activation,
    CELEvalError,
    CELSyntaxError,
    CELUnsupportedError,
    Phase1Transpiler,
    Phase2Transpiler,
    Transpiler,
    TranspilerTree,
)

import extender
from extender.core.cel.cost import COST
from extender.core.cel.errors import CelCompileError, CelEngineError
from extender.core.cel.tree import MACROS, RULES_USED, call_args, token
from extender.core.cel.values import CelMessage

__all__ = [
    "CELPY_VERSION",
    "TESTED_CELPY_VERSIONS",
    "Generator",
    "Node",
    "builtin_names",
    "expr_number",
    "grammar_rules",
    "parse",
    "runtime_error_text",
    "type_values",
]

#: The cel-python releases this package's rewrites were written and tested against.
TESTED_CELPY_VERSIONS = ("0.5.0",)
CELPY_VERSION = importlib.metadata.version("cel-python")

# celpy's function wrappers log at ERROR for every failure they pass on; we turn those into CEL
# error values ourselves, and never run celpy's own runners.
logging.getLogger("celpy").setLevel(logging.CRITICAL)

#: The parse-tree node class (the transpiler annotates its nodes); used to build rewritten nodes.
Node = TranspilerTree


# --- the grammar -------------------------------------------------------------------------------


def _parser() -> lark.Lark:
    grammar = (Path(celpy.evaluation.__file__).parent / "cel.lark").read_text()
    return lark.Lark(
        grammar,
        parser="lalr",
        start="expr",
        g_regex_flags=re.M,
        lexer_callbacks={"IDENT": celpy.CELParser.ambiguous_literals},
        propagate_positions=True,
        maybe_placeholders=False,
        priority="invert",
        tree_class=TranspilerTree,
    )


_PARSER = _parser()


def parse(text: str) -> lark.Tree:
    """celpy's parse tree of ``text``; raises ``lark.exceptions.UnexpectedInput``."""
    return _PARSER.parse(text)


def grammar_rules() -> frozenset[str]:
    """The node names celpy's grammar can produce (rule names and aliases)."""
    names = {str(rule.origin.name) for rule in _PARSER.rules}
    names.update(str(rule.alias) for rule in _PARSER.rules if rule.alias)
    return frozenset(names)


def expr_number(node: lark.Tree) -> int:
    """The number phase 1 gave a node (its generated names are ``ex_<n>...``)."""
    return int(node.expr_number)


# --- built-ins and error values ------------------------------------------------------------------


def builtin_names() -> frozenset[str]:
    """Names in celpy's built-in function table."""
    return frozenset(celpy.evaluation.base_functions)


def type_values(names: Iterable[str]) -> dict[str, Any]:
    """The values of type identifiers (``int``, ``string``...), as celpy represents them."""
    return {name: celpy.evaluation.base_functions[name] for name in names}


def runtime_error_text(error: CELEvalError) -> str:
    """cel-go's text for a celpy error value (celpy keeps the exception class and its args)."""
    args = error.args
    kind = args[1] if len(args) > 1 else None
    details = args[2] if len(args) > 2 and isinstance(args[2], tuple) else ()
    if details and isinstance(details[0], CelMessage):
        return str(details[0])
    if kind is KeyError and details:
        return f"no such key: {details[0]}"
    if kind is TypeError:
        return "no such overload"
    if kind is ZeroDivisionError:
        return "division by zero"
    if kind is IndexError:
        return "index out of range"
    if kind in (OverflowError, ValueError) and details and "overflow" in str(details[0]):
        return "integer overflow"
    if kind is NameError and details:
        return f"undeclared reference to '{details[0]}' (in container '')"
    return str(args[0]) if args else "evaluation error"


# --- the generated code --------------------------------------------------------------------------

#: celpy's call of a comprehension macro: redirected to our metered macros (and ``cel.bind``).
_MACRO_CALL = re.compile(r"celpy\.evaluation\.macro_(\w+)\(activation, '(\w+)', ex_(\d+)_x, ex_(\d+)_l\)")
#: celpy's ``has()`` yields a Python bool; CEL operators want BoolType.
_HAS_LINE = re.compile(r"^(ex_\d+ = lambda activation: )(not isinstance\(.*\))$")
#: celpy evaluates both sides of ``&&``/``||`` and both branches of ``?:``; cel-go short-circuits.
_EAGER_LOGIC = re.compile(
    r"celpy\.celtypes\.logical_(and|or)\(celpy\.evaluation\.result\(activation, (ex_\d+_l)\), "
    r"celpy\.evaluation\.result\(activation, (ex_\d+_r)\)\)"
)
_EAGER_CONDITION = re.compile(
    r"celpy\.celtypes\.logical_condition\(celpy\.evaluation\.result\(activation, (ex_\d+_c)\), "
    r"celpy\.evaluation\.result\(activation, (ex_\d+_l)\), "
    r"celpy\.evaluation\.result\(activation, (ex_\d+_r)\)\)"
)
#: celpy's ``result()`` logs per call; ours does not.
_RESULT_CALL = re.compile(r"celpy\.evaluation\.result\(")
#: A call of one of our library functions, by module path and qualified name.
_LIBRARY_CALL = re.compile(r"\bextender(?:\.\w+)+")

#: The rewrites the canary must see match, by name.
_REWRITES = ("macro", "has", "and", "or", "condition", "result", "library")
#: Forms that must not survive rewriting (celpy's macros, eager logic and logging result()).
_LEFTOVERS = ("celpy.evaluation.macro_", "celpy.celtypes.logical_", "celpy.evaluation.result(")

#: Exercises every rewrite; true on every correct engine.
_CANARY = '([1, 2].all(x, x > 0) && has({"a": 1}.a)) ? !(false || [0].exists(y, y == 1)) : false'

MacroOf = Callable[[lark.Tree], "tuple[str, int] | None"]


class _FoldingPhase1(Phase1Transpiler):  # type: ignore[misc]
    """celpy's phase 1, plus constant hoisting: literals (and ``f("...")`` of a literal, for the
    foldable functions) are built once at compile time instead of on every evaluation."""

    def __init__(self, facade: Transpiler, generator: Generator, constants: dict[str, Any]) -> None:
        super().__init__(facade)
        self._generator = generator
        self.constants = constants

    def _constant(self, tree: TranspilerTree, value: Any) -> None:
        name = f"_k{len(self.constants)}"
        self.constants[name] = value
        tree.transpiled = name

    def literal(self, tree: TranspilerTree) -> None:
        super().literal(tree)
        if tree.transpiled != "None":
            self._constant(tree, eval(tree.transpiled, self._generator.globals))

    def ident_arg(self, tree: TranspilerTree) -> None:
        super().ident_arg(tree)
        function = self._generator.foldable.get(token(tree.children[0]))
        args = call_args(tree, 1)
        if function is None or len(args) != 1:
            return
        argument = self.constants.get(args[0].transpiled)
        if not isinstance(argument, str):
            return
        try:
            value = function(argument)
        except ValueError:
            return  # invalid text: leave the error to run time, as upstream
        self._constant(tree, value)


class Generator:
    """Turns parse trees into Python functions of one scope argument, calling our library.

    ``functions``: CEL function name -> implementation (what celpy's transpiler may call);
    ``macros``: macro name (``all``, ``bind``...) -> implementation, called as
    ``f(scope, variable, body, source, cost)``; ``helpers``: ``result``, ``lazy_and``,
    ``lazy_or``, ``lazy_condition``; ``foldable``: function names evaluated at compile time when
    their only argument is a string literal. Runs the canary; raises ``CelEngineError``.
    """

    def __init__(
        self,
        functions: Mapping[str, Callable[..., Any]],
        macros: Mapping[str, Callable[..., Any]],
        helpers: Mapping[str, Callable[..., Any]],
        foldable: Iterable[str] = (),
    ) -> None:
        self._functions = dict(functions)
        self.foldable = {name: self._functions[name] for name in foldable}
        self._aliases: dict[str, str] = {}
        self.globals: dict[str, Any] = {**vars(celpy.evaluation), "extender": extender}
        for name in ("result", "lazy_and", "lazy_or", "lazy_condition"):
            self.globals[f"_{name}"] = helpers[name]
        for function in (*self._functions.values(), *macros.values()):
            qualified = f"{function.__module__}.{function.__qualname__}"
            alias = f"_L_{function.__qualname__}"
            self._aliases[qualified] = alias
            self.globals[alias] = function
        self._macros = {name: f"_L_{function.__qualname__}" for name, function in macros.items()}
        self._canary()

    def program(self, tree: lark.Tree, macro_of: MacroOf) -> Callable[[Any], Any]:
        """The function computing ``tree`` on a scope; raises ``CelCompileError`` for what the
        transpiler does not support."""
        function, _, _ = self._generate(tree, macro_of)
        return function

    def _generate(self, tree: lark.Tree, macro_of: MacroOf) -> tuple[Callable[[Any], Any], str, dict[str, int]]:
        """The function, its source and how often each rewrite matched."""
        try:
            facade = Transpiler(ast=tree, activation=Activation(functions=self._functions))
            constants: dict[str, Any] = {}
            _FoldingPhase1(facade, self, constants).visit(tree)
            phase2 = Phase2Transpiler(facade)
            phase2.visit(tree)
            statements = phase2.statements(tree)
        except (CELSyntaxError, CELUnsupportedError) as exc:
            raise CelCompileError(str(exc.args[0] if exc.args else exc)) from None
        macros: dict[int, tuple[str, int]] = {}
        for node in tree.iter_subtrees():
            found = macro_of(node)
            if found is not None:
                macros[expr_number(node)] = found
        counts = dict.fromkeys(_REWRITES, 0)
        lines = ["def _cel_program(base_activation):"]
        for statement in statements:
            lines.extend("    " + self._rewrite(line, macros, counts) for line in statement.splitlines())
        lines.append("    return CEL")
        source = "\n".join(lines)
        namespace: dict[str, Any] = {}
        exec(compile(source, "<cel>", "exec"), {**self.globals, **constants}, namespace)
        return namespace["_cel_program"], source, counts

    def _rewrite(self, line: str, macros: Mapping[int, tuple[str, int]], counts: dict[str, int]) -> str:
        def macro_call(match: re.Match[str]) -> str:
            macro, cost = macros[int(match.group(3))]
            return (
                f"{self._macros[macro]}(activation, '{match.group(2)}', "
                f"ex_{match.group(3)}_x, ex_{match.group(4)}_l, {cost})"
            )

        def library_call(match: re.Match[str]) -> str:
            return self._aliases.get(match.group(), match.group())

        line, counts["macro"] = _count(counts["macro"], _MACRO_CALL.subn(macro_call, line))
        line, counts["has"] = _count(counts["has"], _HAS_LINE.subn(r"\1celpy.celtypes.BoolType(\2)", line))

        def lazy_logic(match: re.Match[str]) -> str:
            counts[match.group(1)] += 1
            return f"_lazy_{match.group(1)}(activation, {match.group(2)}, {match.group(3)})"

        line = _EAGER_LOGIC.sub(lazy_logic, line)
        line, counts["condition"] = _count(
            counts["condition"], _EAGER_CONDITION.subn(r"_lazy_condition(activation, \1, \2, \3)", line)
        )
        line, counts["result"] = _count(counts["result"], _RESULT_CALL.subn("_result(", line))
        line, counts["library"] = _count(counts["library"], _LIBRARY_CALL.subn(library_call, line))
        return line

    def _canary(self) -> None:
        missing = RULES_USED - grammar_rules()
        if missing:
            raise _mismatch(f"its grammar lacks the rules {sorted(missing)}")
        try:
            tree = parse(_CANARY)
            function, source, counts = self._generate(tree, _canary_macro)
        except Exception as exc:  # any failure here means the internals moved
            raise _mismatch(f"compiling the canary selector failed: {exc!r}") from exc
        unmatched = [name for name, count in counts.items() if count == 0]
        if unmatched:
            raise _mismatch(f"the rewrites {unmatched} no longer match its generated code")
        left = [form for form in _LEFTOVERS if form in source]
        if left:
            raise _mismatch(f"its generated code still contains {left} after rewriting")
        # The canary is metered like any evaluation: from zero, not from what the last evaluation
        # left on the meter (one that ran out of its budget leaves it over the limit).
        spent, COST.spent = COST.spent, 0
        try:
            value = function(_CanaryScope({}))
        except Exception as exc:
            raise _mismatch(f"running the canary selector failed: {exc!r}") from exc
        finally:
            COST.spent = spent
        if not (isinstance(value, (celtypes.BoolType, bool)) and value):
            raise _mismatch(f"the canary selector evaluated to {value!r}, not true")


def _count(total: int, result: tuple[str, int]) -> tuple[str, int]:
    return result[0], total + result[1]


def _canary_macro(node: lark.Tree) -> tuple[str, int] | None:
    if node.data == "member_dot_arg" and token(node.children[1]) in MACROS:
        return token(node.children[1]), 1
    return None


class _CanaryScope:
    """Just enough of a scope for the canary (which reads only macro variables)."""

    def __init__(self, variables: dict[str, Any], parent: _CanaryScope | None = None) -> None:
        self._variables = variables
        self._parent = parent

    def __getattr__(self, name: str) -> Any:
        if name in self._variables:
            return self._variables[name]
        if self._parent is not None:
            return getattr(self._parent, name)
        raise NameError(name, "")

    def resolve_variable(self, name: str) -> Any:
        return self.__getattr__(name)

    def _cel_nested(self, variables: dict[str, Any]) -> _CanaryScope:
        return _CanaryScope(variables, self)


def _mismatch(detail: str) -> CelEngineError:
    return CelEngineError(
        f"cel-python {CELPY_VERSION} is not compatible with this dra-extender: {detail}. "
        f"It is tested with cel-python {', '.join(TESTED_CELPY_VERSIONS)}; install that version "
        "(pip install 'cel-python==" + TESTED_CELPY_VERSIONS[-1] + "')."
    )
