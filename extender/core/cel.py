"""CEL device selectors: compile once, evaluate per device, cache results per slice.

``SelectorCache`` is the only entry point the allocator needs:
``compile(expression)`` (raises ``CelCompileError``), ``results(expression, slice)`` (one
``bool | CelRuntimeError`` per device of the slice, cached until ``forget_slice(slice)``) and
``stats``.

Engine. Expressions are parsed by celpy's grammar (a private Lark parser, so a celpy
``Environment`` elsewhere in the process cannot swap the tree class under us) and translated to
Python by the CompiledRunner's transpiler (``celpy.evaluation.Transpiler`` phases 1 and 2). The
generated statements are wrapped in one Python function per expression, which takes the device
scope as its argument. Compared with ``CompiledRunner.evaluate`` this avoids re-executing module
code and cloning a celpy ``Activation`` per evaluation (the dominant cost in libraries.md §2), and
keeps nothing in module globals, so programs are re-entrant. Only the cost meter is shared (see
``cel_library.COST``): evaluate on one thread at a time.

Before transpiling, the parse tree is checked and rewritten:
- undeclared variables and functions, bad macro arguments and unknown ``device`` fields are
  compile errors (``device.allowMultipleAllocations`` exists only with consumable capacity);
- a root that is statically not bool is a compile error, as upstream;
- ``cel.bind(x, init, body)`` becomes a one-shot comprehension (``macro_bind``);
- optional syntax ``a.?f`` and ``a[?k]`` is rewritten in the source text to the library
  functions ``__optsel__``/``__optindex__`` (celpy's grammar lacks ``?``); optional entries in
  list/map literals (``[?x]``, ``{?k: v}``) are rejected with a compile error naming them.

Cost (upstream: 1,000,000 per evaluation, enforced at runtime; the scheduler's compile skips
the static estimate, docs/semantics.md §14.4). cel-python tracks no cost, so this module approximates cel-go's
*actual* cost: every evaluation starts at the static node count of the expression (outside
comprehension bodies), each comprehension iteration charges the node count of its body plus
one, and string/list-producing functions and ``+`` charge about one unit per ten elements. Going
over the limit aborts the evaluation with ``operation cancelled: actual cost limit exceeded``.
No compile-time cost rejection is done (the scheduler does not do one either; the apiserver
rejects such selectors at admission).
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
from extender.core import cel_library
from extender.core.cel_library import (
    COST,
    FUNCTIONS,
    GLOBAL_NAMESPACES,
    NAMESPACE_FUNCTIONS,
    CelMessage,
    CostLimitExceeded,
    type_name,
)
from extender.core.model import Device, ResourceSlice, UnparsedVersion
from extender.core.semver import Semver

__all__ = [
    "MAX_EXPRESSION_LENGTH",
    "CelCompileError",
    "CelRuntimeError",
    "SelectorCache",
    "SelectorStats",
]

#: CELSelectorExpressionMaxLength (counted in UTF-8 bytes, as Go's len()).
MAX_EXPRESSION_LENGTH = 10240
#: Compiled programs kept (an LRU); kube-scheduler keeps 10, we keep many more because a
#: cluster's classes and claims reuse a small, stable set of selectors.
DEFAULT_PROGRAM_CACHE_SIZE = 4096

# Every failed evaluation would otherwise be logged at ERROR by celpy (libraries.md §2, caveat d).
logging.getLogger("celpy").setLevel(logging.CRITICAL)
# The transpiled code names functions as ``extender.core.cel_library.<f>``; celpy's own
# ``CompiledRunner.evaluate`` execs it in celpy.evaluation's globals (caveat a).
celpy.evaluation.extender = extender


class CelCompileError(Exception):
    """The expression does not compile; ``message`` is the bare cel-style text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CelRuntimeError(Exception):
    """Evaluating the expression on one device failed; ``message`` is the bare text
    (e.g. ``no such key: model``). Returned as a value by ``SelectorCache.results``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(slots=True)
class SelectorStats:
    """Counters for tests, benchmarks and metrics."""

    compile_hits: int = 0
    compile_misses: int = 0
    result_hits: int = 0
    result_misses: int = 0
    #: per-device CEL views built (at most once per device while its slice is cached)
    views_built: int = 0
    #: result tuples computed without CEL (``device.driver == "..."``)
    fast_path: int = 0
    #: single-device CEL evaluations
    evaluations: int = 0


# --- the device view ----------------------------------------------------------------------------


class _StrictMap(celtypes.MapType):  # type: ignore[misc]
    """A CEL map whose missing keys are errors (``no such key: <k>``). Lookups skip celpy's
    key-type checks: the keys are ours and always strings."""

    def __init__(self) -> None:  # celpy's MapType.__init__ is slow and we fill maps ourselves
        pass

    def get(self, key: Any, default: Any = None) -> Any:
        return dict.__getitem__(self, key)

    def __getitem__(self, key: Any) -> Any:
        return dict.__getitem__(self, key)


_EMPTY_DOMAIN = _StrictMap()


class _DomainMap(celtypes.MapType):  # type: ignore[misc]
    """``device.attributes`` / ``device.capacity``: an unknown domain reads as an empty map,
    while ``in`` and ``size()`` still see only the real domains (upstream's map with default)."""

    def __init__(self) -> None:
        pass

    def get(self, key: Any, default: Any = None) -> Any:
        return dict.get(self, key, _EMPTY_DOMAIN)

    def __getitem__(self, key: Any) -> Any:
        return dict.get(self, key, _EMPTY_DOMAIN)


class _Scope:
    """Variable lookup for transpiled code, in place of celpy's much heavier ``Activation``.

    Transpiled code reads variables as ``activation.<name>`` (and ``resolve_variable`` for a
    leading-dot name); the comprehension macros nest scopes with ``_cel_nested``.
    """

    __slots__ = ("_cel_parent", "_cel_vars")

    def __init__(self, variables: dict[str, Any], parent: _Scope | None = None) -> None:
        self._cel_vars = variables
        self._cel_parent = parent

    def __getattr__(self, name: str) -> Any:
        scope: _Scope | None = self
        while scope is not None:
            variables = scope._cel_vars
            if name in variables:
                return variables[name]
            scope = scope._cel_parent
        if name in _GLOBAL_NAMES:
            return _GLOBAL_NAMES[name]
        raise NameError(name, "")

    def resolve_variable(self, name: str) -> Any:
        return self.__getattr__(name)

    def _cel_nested(self, variables: dict[str, Any]) -> _Scope:
        return _Scope(variables, self)


#: Type names usable as values (``type(x) == string``) and the function namespaces.
_TYPE_IDENTS = frozenset(
    {"bool", "bytes", "double", "duration", "int", "list", "map", "null_type", "string",
     "timestamp", "type", "uint"}
)
_GLOBAL_NAMES: dict[str, Any] = {
    **{name: celpy.evaluation.base_functions[name] for name in _TYPE_IDENTS},
    **GLOBAL_NAMESPACES,
}

_TRUE = celtypes.BoolType(True)
_FALSE = celtypes.BoolType(False)


class _ViewBuilder:
    """Builds per-device views for one slice, sharing converted strings between devices."""

    def __init__(self, slice_: ResourceSlice, *, consumable_capacity: bool) -> None:
        self._driver = slice_.driver
        self._driver_value = celtypes.StringType(slice_.driver)
        self._consumable = consumable_capacity
        self._strings: dict[str, celtypes.StringType] = {}
        self._names: dict[str, tuple[str, str]] = {}

    def build(self, device: Device) -> _Scope | CelRuntimeError:
        attributes = _DomainMap()
        for name, raw in device.attributes.items():
            converted = self._attribute(raw)
            if converted is None:
                return _attribute_error(name, raw)
            domain, ident = self._split(name)
            inner = dict.get(attributes, domain)
            if inner is None:
                inner = _StrictMap()
                dict.__setitem__(attributes, domain, inner)
            dict.__setitem__(inner, ident, converted)
        capacity = _DomainMap()
        for name, entry in device.capacity.items():
            domain, ident = self._split(name)
            inner = dict.get(capacity, domain)
            if inner is None:
                inner = _StrictMap()
                dict.__setitem__(capacity, domain, inner)
            dict.__setitem__(inner, ident, entry.value)
        fields = _StrictMap()
        dict.__setitem__(fields, "driver", self._driver_value)
        dict.__setitem__(fields, "attributes", attributes)
        dict.__setitem__(fields, "capacity", capacity)
        if self._consumable:
            dict.__setitem__(fields, "allowMultipleAllocations",
                             _TRUE if device.allow_multiple_allocations else _FALSE)
        return _Scope({"device": fields})

    def _split(self, name: str) -> tuple[str, str]:
        """(domain, id): qualified names split at the first "/", bare ones get the driver's domain."""
        parts = self._names.get(name)
        if parts is None:
            domain, sep, ident = name.partition("/")
            parts = self._names[name] = (domain, ident) if sep else (self._driver, name)
        return parts

    def _attribute(self, raw: object) -> Any:
        if isinstance(raw, str):
            value = self._strings.get(raw)  # the same strings recur across thousands of devices
            if value is None:
                value = self._strings[raw] = celtypes.StringType(raw)
            return value
        if type(raw) is bool:
            return _TRUE if raw else _FALSE
        if isinstance(raw, int):
            # celpy's IntType() builds a range-checking wrapper per call; the model's ints are
            # int64 already (validated at decode), so construct the value directly.
            return int.__new__(celtypes.IntType, raw)
        if isinstance(raw, Semver):
            return raw
        return None


def _attribute_error(name: str, raw: object) -> CelRuntimeError:
    if isinstance(raw, UnparsedVersion):
        return CelRuntimeError(f"attribute {name}: parse semantic version: {raw.error}")
    return CelRuntimeError(f"attribute {name}: unsupported attribute type {type(raw).__name__}")


#: Attribute value types a device view can hold; anything else (an UnparsedVersion) poisons it.
_VIEWABLE_TYPES = frozenset({str, bool, int, Semver})


def _device_poison(device: Device) -> CelRuntimeError | None:
    """The error every evaluation on this device gets, without building its view."""
    for name, raw in device.attributes.items():
        if type(raw) not in _VIEWABLE_TYPES:
            return _attribute_error(name, raw)
    return None


# --- programs -----------------------------------------------------------------------------------


class _SliceState:
    """Everything cached for one slice object: device views and result tuples per expression."""

    __slots__ = ("_consumable", "_poison", "_slice", "_views", "results")

    def __init__(self, slice_: ResourceSlice, *, consumable_capacity: bool) -> None:
        self._slice = slice_
        self._consumable = consumable_capacity
        self._views: tuple[_Scope | CelRuntimeError, ...] | None = None
        self._poison: tuple[CelRuntimeError | None, ...] | None = None
        self.results: dict[str, tuple[bool | CelRuntimeError, ...]] = {}

    def views(self, stats: SelectorStats) -> tuple[_Scope | CelRuntimeError, ...]:
        if self._views is None:
            builder = _ViewBuilder(self._slice, consumable_capacity=self._consumable)
            self._views = tuple(builder.build(device) for device in self._slice.devices)
            stats.views_built += len(self._views)
        return self._views

    def poison(self) -> tuple[CelRuntimeError | None, ...]:
        if self._poison is None:
            if self._views is not None:
                self._poison = tuple(v if isinstance(v, CelRuntimeError) else None for v in self._views)
            else:
                self._poison = tuple(_device_poison(device) for device in self._slice.devices)
        return self._poison


class _DriverEquals:
    """``device.driver == "<literal>"``, answered with one string comparison per slice."""

    __slots__ = ("driver",)

    def __init__(self, driver: str) -> None:
        self.driver = driver

    def run(self, state: _SliceState, stats: SelectorStats) -> tuple[bool | CelRuntimeError, ...]:
        stats.fast_path += 1
        match = state._slice.driver == self.driver
        # A device whose view cannot be built fails every selector, this one included.
        return tuple(match if error is None else error for error in state.poison())


class _Compiled:
    """A transpiled expression: ``function(scope)`` returns a CEL value or a CELEvalError."""

    __slots__ = ("base_cost", "function")

    def __init__(self, function: Callable[[_Scope], Any], base_cost: int) -> None:
        self.function = function
        self.base_cost = base_cost

    def run(self, state: _SliceState, stats: SelectorStats) -> tuple[bool | CelRuntimeError, ...]:
        views = state.views(stats)
        stats.evaluations += len(views)
        evaluate = self.evaluate
        return tuple(v if isinstance(v, CelRuntimeError) else evaluate(v) for v in views)

    def evaluate(self, scope: _Scope) -> bool | CelRuntimeError:
        COST.spent = self.base_cost
        try:
            value = self.function(scope)
        except CostLimitExceeded:
            return CelRuntimeError("operation cancelled: actual cost limit exceeded")
        except CELEvalError as exc:
            return _runtime_error(exc)
        except RecursionError:
            return CelRuntimeError("max recursion depth exceeded")
        except Exception as exc:  # a fault in a library function must not crash the caller
            return CelRuntimeError(f"internal error: {exc!r}")
        if isinstance(value, (celtypes.BoolType, bool)):
            return bool(value)
        if isinstance(value, CELEvalError):
            return _runtime_error(value)
        return CelRuntimeError(f"CEL result of type {type_name(value)} could not be converted to bool")


_Program = _DriverEquals | _Compiled


def _runtime_error(error: CELEvalError) -> CelRuntimeError:
    """cel-go's text for a celpy error value (celpy keeps the original exception as cause)."""
    args = error.args
    kind = args[1] if len(args) > 1 else None
    details = args[2] if len(args) > 2 and isinstance(args[2], tuple) else ()
    if details and isinstance(details[0], CelMessage):
        return CelRuntimeError(str(details[0]))
    if kind is KeyError and details:
        return CelRuntimeError(f"no such key: {details[0]}")
    if kind is TypeError:
        return CelRuntimeError("no such overload")
    if kind is ZeroDivisionError:
        return CelRuntimeError("division by zero")
    if kind is IndexError:
        return CelRuntimeError("index out of range")
    if kind in (OverflowError, ValueError) and details and "overflow" in str(details[0]):
        return CelRuntimeError("integer overflow")
    if kind is NameError and details:
        return CelRuntimeError(f"undeclared reference to '{details[0]}' (in container '')")
    return CelRuntimeError(str(args[0]) if args else "evaluation error")


# --- compiling ----------------------------------------------------------------------------------

_FAST_LITERAL = r"""(?:"[^"\\\n]*"|'[^'\\\n]*')"""
_FAST_DRIVER = re.compile(
    rf"""\s*(?:device\s*\.\s*driver\s*==\s*(?P<a>{_FAST_LITERAL})|(?P<b>{_FAST_LITERAL})\s*==\s*device\s*\.\s*driver)\s*"""
)

_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
_CELPY_MACRO_NAMES = frozenset({"reduce", "min"})  # celpy treats these as macros; cel-go has none
_NAMESPACE_ONLY = frozenset().union(*NAMESPACE_FUNCTIONS.values()) - {"contains"}
_KNOWN_FUNCTIONS = frozenset(
    name
    for name in (*celpy.evaluation.base_functions, *FUNCTIONS)
    if not name.startswith("_") or name.startswith("__")
) - _NAMESPACE_ONLY - {"!_", "-_", "list", "map", "null_type"}
_DEVICE_FIELDS = frozenset({"driver", "attributes", "capacity"})


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


_PARSER: lark.Lark | None = None


def _parse(text: str) -> TranspilerTree:
    global _PARSER
    if _PARSER is None:
        _PARSER = _parser()
    try:
        return _PARSER.parse(text)
    except lark.exceptions.UnexpectedInput as exc:
        raise CelCompileError(_syntax_error(text, exc)) from None


def _syntax_error(text: str, exc: lark.exceptions.UnexpectedInput) -> str:
    line = getattr(exc, "line", 1) or 1
    column = getattr(exc, "column", 1) or 1
    if isinstance(exc, lark.exceptions.UnexpectedCharacters):
        what = f"token recognition error at: '{exc.char}'"
    elif isinstance(exc, lark.exceptions.UnexpectedEOF) or (
        isinstance(exc, lark.exceptions.UnexpectedToken) and exc.token.type == "$END"
    ):
        what = "unexpected end of input"
    elif isinstance(exc, lark.exceptions.UnexpectedToken):
        what = f"mismatched input '{exc.token}'"
    else:
        what = "syntax error"
    return _located(text, line, column, f"Syntax error: {what}")


def _located(text: str, line: int, column: int, message: str) -> str:
    """cel-go's issue format: location, message, then the source line with a caret."""
    lines = text.splitlines() or [""]
    source = lines[min(max(line, 1), len(lines)) - 1]
    return f"ERROR: <input>:{line}:{column}: {message}\n | {source}\n | {'.' * (column - 1)}^"


def _node_error(text: str, node: lark.Tree, message: str) -> CelCompileError:
    meta = node.meta
    line = getattr(meta, "line", 1) if not meta.empty else 1
    column = getattr(meta, "column", 1) if not meta.empty else 1
    return CelCompileError(_located(text, line, column, message))


def compile_program(expression: str, *, consumable_capacity: bool = True) -> _Program:
    """Compile one selector expression (no caching); raises ``CelCompileError``."""
    size = len(expression.encode("utf-8", "surrogatepass"))
    if size > MAX_EXPRESSION_LENGTH:
        raise CelCompileError(f"expression too long ({size} > {MAX_EXPRESSION_LENGTH})")
    fast = _FAST_DRIVER.fullmatch(expression)
    if fast is not None:
        literal = fast.group("a") or fast.group("b")
        return _DriverEquals(literal[1:-1])
    text = _rewrite_optional_syntax(expression)
    try:
        tree = _parse(text)
        _Checker(text, consumable_capacity=consumable_capacity).check(tree)
        root_type = _static_type(tree)
        if root_type is not None and root_type != "bool":
            raise CelCompileError(f"must evaluate to bool or the unknown type, not {root_type}")
        binds = _rewrite_binds(tree)
        return _transpile(tree, binds)
    except RecursionError:
        raise CelCompileError("expression recursion limit exceeded") from None
    except (CELSyntaxError, CELUnsupportedError) as exc:
        raise CelCompileError(str(exc.args[0] if exc.args else exc)) from None


# --- optional syntax (celpy's grammar has no "?" operators) ---------------------------------------

_IDENT_RE = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*")


def _string_end(text: str, start: int) -> int:
    """Index just after the string literal whose opening quote is at ``start``."""
    quote = text[start]
    delimiter = quote * 3 if text.startswith(quote * 3, start) else quote
    i = start + len(delimiter)
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text.startswith(delimiter, i):
            return i + len(delimiter)
        i += 1
    return len(text)  # unterminated: the parser reports it


def _rewrite_optional_syntax(text: str) -> str:
    """``a.?f`` -> ``a.__optsel__("f")`` and ``a[?k]`` -> ``a.__optindex__(k)``."""
    if "?" not in text:
        return text
    out: list[str] = []
    closers: list[str] = []  # per open bracket: what closes it in the output
    previous = ""  # the last significant character, or "x" after an operand
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "\"'":
            end = _string_end(text, i)
            out.append(text[i:end])
            previous, i = "x", end
            continue
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            out.append(text[i:end])
            i = end
            continue
        after = _skip_space(text, i + 1)
        if ch == "." and after < len(text) and text[after] == "?":
            ident = _IDENT_RE.match(text, _skip_space(text, after + 1))
            if ident is None:
                raise CelCompileError("optional field selection (.?) must be followed by a field name")
            out.append(f'.__optsel__("{ident.group()}")')
            previous, i = "x", ident.end()
            continue
        if ch == "[" and after < len(text) and text[after] == "?":
            if previous not in ("x", ")", "]", "}"):
                raise CelCompileError(
                    "optional list elements ([?x]) are not supported by this CEL engine"
                )
            out.append(".__optindex__(")
            closers.append(")")
            previous, i = "[", after + 1
            continue
        if ch == "?" and previous in ("{", ","):
            raise CelCompileError(
                "optional entries in list or map literals ([?x], {?k: v}) are not supported "
                "by this CEL engine"
            )
        if ch in "([{":
            closers.append({"(": ")", "[": "]", "{": "}"}[ch])
        elif ch in ")]}" and closers:
            closer = closers.pop()
            if ch == "]" and closer == ")":
                ch = ")"
        out.append(ch)
        if not ch.isspace():
            previous = "x" if (ch.isalnum() or ch == "_") else ch
        i += 1
    return "".join(out)


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


# --- static checks --------------------------------------------------------------------------------


def _token(node: Any) -> str:
    return str(node.value) if isinstance(node, lark.Token) else ""


def _bare_ident(node: Any) -> str | None:
    """The name when ``node`` is (a chain of single-child wrappers around) a plain identifier."""
    while isinstance(node, lark.Tree):
        if node.data == "ident":
            return _token(node.children[0])
        if len(node.children) != 1 or node.data not in _WRAPPERS:
            return None
        node = node.children[0]
    return None


_WRAPPERS = frozenset(
    {"expr", "conditionalor", "conditionaland", "relation", "addition", "multiplication",
     "unary", "member", "primary", "paren_expr"}
)


def _unwrap(node: Any) -> Any:
    while isinstance(node, lark.Tree) and node.data in _WRAPPERS and len(node.children) == 1:
        node = node.children[0]
    return node


def _args(node: lark.Tree, index: int) -> list[Any]:
    if len(node.children) > index and isinstance(node.children[index], lark.Tree):
        exprlist = node.children[index]
        if exprlist.data == "exprlist":
            return list(exprlist.children)
    return []


class _Checker:
    """Rejects what cel-go's checker would (undeclared names, bad macros, unknown device fields)."""

    def __init__(self, text: str, *, consumable_capacity: bool) -> None:
        self._text = text
        self._device_fields = _DEVICE_FIELDS | (
            {"allowMultipleAllocations"} if consumable_capacity else set()
        )

    def check(self, tree: lark.Tree) -> None:
        self._visit(tree, {"device": "device"})

    def _undeclared(self, node: lark.Tree, name: str) -> CelCompileError:
        return _node_error(self._text, node, f"undeclared reference to '{name}' (in container '')")

    def _visit(self, node: Any, scope: dict[str, str]) -> None:
        if not isinstance(node, lark.Tree):
            return
        kind = node.data
        if kind in ("ident", "dot_ident"):
            name = _token(node.children[0])
            if name not in scope and name not in _TYPE_IDENTS:
                raise self._undeclared(node, name)
        elif kind in ("ident_arg", "dot_ident_arg"):
            self._function(node, scope)
        elif kind == "member_dot_arg":
            self._method(node, scope)
        elif kind == "member_dot":
            receiver = _bare_ident(node.children[0])
            field = _token(node.children[1])
            if receiver is not None and scope.get(receiver) == "device" and field not in self._device_fields:
                raise _node_error(self._text, node, f"undefined field '{field}'")
            self._visit(node.children[0], scope)
        elif kind == "member_object":
            raise _node_error(self._text, node, "message construction is not supported in selectors")
        else:
            for child in node.children:
                self._visit(child, scope)

    def _function(self, node: lark.Tree, scope: dict[str, str]) -> None:
        name = _token(node.children[0])
        args = _args(node, 1)
        if name == "has":
            target = _unwrap(args[0]) if len(args) == 1 else None
            if not (isinstance(target, lark.Tree) and target.data == "member_dot"):
                raise _node_error(self._text, node, "invalid argument to has() macro")
        elif name == "dyn":
            if len(args) != 1:
                raise _node_error(self._text, node, "found no matching overload for 'dyn'")
        elif name in _MACROS or name in _CELPY_MACRO_NAMES or name not in _KNOWN_FUNCTIONS:
            raise self._undeclared(node, name)
        for arg in args:
            self._visit(arg, scope)

    def _method(self, node: lark.Tree, scope: dict[str, str]) -> None:
        receiver_node = node.children[0]
        method = _token(node.children[1])
        args = _args(node, 2)
        receiver = _bare_ident(receiver_node)
        if method in _MACROS:
            self._macro(node, method, args, scope)
            return
        if receiver == "cel" and "cel" not in scope:
            if method != "bind":
                raise self._undeclared(node, f"cel.{method}")
            if len(args) != 3 or _bare_ident(args[0]) is None:
                raise _node_error(self._text, node, "cel.bind() variable name must be a simple identifier")
            self._visit(args[1], scope)
            self._visit(args[2], {**scope, str(_bare_ident(args[0])): "var"})
            return
        if receiver in NAMESPACE_FUNCTIONS and receiver not in scope:
            if method not in NAMESPACE_FUNCTIONS[receiver]:
                raise self._undeclared(node, f"{receiver}.{method}")
        elif method in _CELPY_MACRO_NAMES:
            raise _node_error(self._text, node, f"function '{method}' is not supported by this CEL engine")
        elif method not in _KNOWN_FUNCTIONS:
            raise self._undeclared(node, method)
        else:
            self._visit(receiver_node, scope)
        for arg in args:
            self._visit(arg, scope)

    def _macro(self, node: lark.Tree, method: str, args: list[Any], scope: dict[str, str]) -> None:
        if len(args) == 3 and method in ("all", "exists", "exists_one", "map", "filter"):
            detail = (
                "map(x, filter, transform)" if method == "map" and _bare_ident(args[1]) is None
                else f"two-variable {method}()"
            )
            raise _node_error(self._text, node, f"{detail} is not supported by this CEL engine")
        if len(args) != 2:
            raise _node_error(self._text, node, f"found no matching overload for '{method}'")
        variable = _bare_ident(args[0])
        if variable is None:
            raise _node_error(self._text, node, "argument must be a simple name")
        self._visit(node.children[0], scope)
        self._visit(args[1], {**scope, variable: "var"})


# --- static result type (enough to reject obviously non-bool selectors) ---------------------------

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
    "size": "int", "int": "int", "uint": "uint", "double": "double", "string": "string",
    "bytes": "bytes", "bool": "bool",
    "quantity": "kubernetes.Quantity", "add": "kubernetes.Quantity", "sub": "kubernetes.Quantity",
    "semver": "kubernetes.Semver",
    "compareTo": "int", "sign": "int", "major": "int", "minor": "int", "patch": "int",
    "asInteger": "int", "asApproximateFloat": "double",
    "charAt": "string", "lowerAscii": "string", "upperAscii": "string", "replace": "string",
    "substring": "string", "trim": "string", "format": "string", "quote": "string",
    "find": "string", "split": "list(string)", "findAll": "list(string)",
    "isQuantity": "bool", "isSemver": "bool", "isInteger": "bool", "isGreaterThan": "bool",
    "isLessThan": "bool", "startsWith": "bool", "endsWith": "bool", "matches": "bool",
    "has": "bool", "hasValue": "bool", "isSorted": "bool", "equivalent": "bool",
    "intersects": "bool", "all": "bool", "exists": "bool", "exists_one": "bool",
    "of": "optional_type", "none": "optional_type", "ofNonZeroValue": "optional_type",
    "__optsel__": "optional_type", "__optindex__": "optional_type",
}
_BINARY_OPS = frozenset({"addition", "multiplication"})


def _static_type(node: Any) -> str | None:
    """The type cel-go's checker would infer for ``node``, or None for dyn/unknown."""
    node = _unwrap(node)
    if not isinstance(node, lark.Tree):
        return None
    kind = node.data
    if kind == "literal":
        return _LITERAL_TYPES.get(node.children[0].type)
    if kind in ("conditionalor", "conditionaland", "relation"):
        return "bool"
    if kind == "unary":
        operand = _static_type(node.children[1])
        return "bool" if node.children[0].data == "unary_not" else operand
    if kind in _BINARY_OPS:
        left = _static_type(node.children[0].children[0])
        right = _static_type(node.children[1])
        return left if left is not None and left == right and left != "bool" else None
    if kind == "expr" and len(node.children) == 3:
        then, otherwise = _static_type(node.children[1]), _static_type(node.children[2])
        return then if then == otherwise else None
    if kind == "list_lit":
        items = _args(node, 0) if node.children else []
        return f"list({_common(_static_type(item) for item in items)})"
    if kind == "map_lit":
        inits = list(node.children[0].children) if node.children else []
        keys = _common(_static_type(k) for k in inits[::2])
        values = _common(_static_type(v) for v in inits[1::2])
        return f"map({keys}, {values})"
    if kind in ("ident_arg", "dot_ident_arg"):
        return _RESULT_TYPES.get(_token(node.children[0]))
    if kind == "member_dot_arg":
        method = _token(node.children[1])
        if method in ("map", "filter"):
            return "list(dyn)" if method == "map" else _static_type(node.children[0])
        return _RESULT_TYPES.get(method)
    if kind == "member_dot" and _bare_ident(node.children[0]) == "device":
        return {
            "driver": "string",
            "attributes": "map(string, map(string, dyn))",
            "capacity": "map(string, map(string, kubernetes.Quantity))",
            "allowMultipleAllocations": "bool",
        }.get(_token(node.children[1]))
    if kind == "ident" and _token(node.children[0]) == "device":
        return "kubernetes.DRADevice"
    return None


def _common(types: Iterable[str | None]) -> str:
    seen = set(types)
    if len(seen) == 1:
        only = seen.pop()
        return only if only is not None else "dyn"
    return "dyn"


# --- rewriting and transpiling ----------------------------------------------------------------


def _rewrite_binds(tree: lark.Tree) -> set[int]:
    """Turn each ``cel.bind(x, init, body)`` into a ``(init).map(x, body)`` node whose macro call
    is later redirected to ``macro_bind``. Returns the ids of the rewritten nodes."""
    rewritten: set[int] = set()
    for node in tree.iter_subtrees():
        if node.data != "member_dot_arg" or _token(node.children[1]) != "bind":
            continue
        if _bare_ident(node.children[0]) != "cel":
            continue
        variable, init, body = _args(node, 2)
        parenthesised = TranspilerTree("paren_expr", [init])
        receiver = TranspilerTree("member", [TranspilerTree("primary", [parenthesised])])
        node.children = [
            receiver,
            lark.Token("IDENT", "map"),
            TranspilerTree("exprlist", [variable, body]),
        ]
        rewritten.add(id(node))
    return rewritten


_COSTED = frozenset(
    {"member_dot", "member_dot_arg", "member_index", "ident", "dot_ident", "ident_arg",
     "dot_ident_arg", "literal", "list_lit", "map_lit", "relation_lt", "relation_le",
     "relation_gt", "relation_ge", "relation_eq", "relation_ne", "relation_in", "addition_add",
     "addition_sub", "multiplication_mul", "multiplication_div", "multiplication_mod",
     "unary_not", "unary_neg"}
)


def _static_cost(node: Any) -> int:
    """Nodes evaluated once per pass over ``node``; comprehension bodies are charged per iteration
    by the macros, so they are left out here."""
    if not isinstance(node, lark.Tree):
        return 0
    cost = 1 if node.data in _COSTED or (node.data in ("conditionalor", "conditionaland", "expr")
                                          and len(node.children) > 1) else 0
    children = list(node.children)
    if node.data == "member_dot_arg" and _token(children[1]) in _MACROS:
        children = [children[0], *_args(node, 2)[:1]]
    return cost + sum(_static_cost(child) for child in children)


_MACRO_CALL = re.compile(
    r"celpy\.evaluation\.macro_(\w+)\(activation, '(\w+)', ex_(\d+)_x, ex_(\d+)_l\)"
)
_HAS_LINE = re.compile(r"^(ex_\d+ = lambda activation: )(not isinstance\(.*\))$")
_EAGER_LOGIC = re.compile(
    r"celpy\.celtypes\.logical_(and|or)\(celpy\.evaluation\.result\(activation, (ex_\d+_l)\), "
    r"celpy\.evaluation\.result\(activation, (ex_\d+_r)\)\)"
)
_EAGER_CONDITION = re.compile(
    r"celpy\.celtypes\.logical_condition\(celpy\.evaluation\.result\(activation, (ex_\d+_c)\), "
    r"celpy\.evaluation\.result\(activation, (ex_\d+_l)\), "
    r"celpy\.evaluation\.result\(activation, (ex_\d+_r)\)\)"
)
_LIBRARY = "extender.core.cel_library"
#: Functions worth calling at compile time when their only argument is a literal.
_FOLDABLE = frozenset({"quantity", "semver"})


class _Phase1(Phase1Transpiler):  # type: ignore[misc]
    """celpy's phase 1, plus constant hoisting: literals (and ``quantity("...")``/``semver("...")``
    of a literal) are built once at compile time instead of on every evaluation."""

    def __init__(self, facade: Transpiler, constants: dict[str, Any]) -> None:
        super().__init__(facade)
        self.constants = constants

    def _constant(self, tree: TranspilerTree, value: Any) -> None:
        name = f"_k{len(self.constants)}"
        self.constants[name] = value
        tree.transpiled = name

    def literal(self, tree: TranspilerTree) -> None:
        super().literal(tree)
        if tree.transpiled != "None":
            self._constant(tree, eval(tree.transpiled, _EXEC_GLOBALS))

    def ident_arg(self, tree: TranspilerTree) -> None:
        super().ident_arg(tree)
        name = _token(tree.children[0])
        args = _args(tree, 1)
        if name not in _FOLDABLE or len(args) != 1:
            return
        argument = self.constants.get(args[0].transpiled)
        if not isinstance(argument, str):
            return
        try:
            value = FUNCTIONS[name](argument)
        except ValueError:
            return  # invalid text: leave the error to run time, as upstream
        self._constant(tree, value)


def _transpile(tree: TranspilerTree, binds: set[int]) -> _Compiled:
    activation = Activation(functions=FUNCTIONS)
    facade = Transpiler(ast=tree, activation=activation)
    constants: dict[str, Any] = {}
    _Phase1(facade, constants).visit(tree)
    phase2 = Phase2Transpiler(facade)
    phase2.visit(tree)
    statements = phase2.statements(tree)

    macro_costs: dict[int, tuple[str, int]] = {}
    for node in tree.iter_subtrees():
        if node.data == "member_dot_arg" and _token(node.children[1]) in _MACROS:
            body = _args(node, 2)[1]
            macro = "bind" if id(node) in binds else _token(node.children[1])
            macro_costs[node.expr_number] = (macro, _static_cost(body) + 1)

    def redirect(match: re.Match[str]) -> str:
        macro, cost = macro_costs[int(match.group(3))]
        return (f"{_LIBRARY}.macro_{macro}(activation, '{match.group(2)}', "
                f"ex_{match.group(3)}_x, ex_{match.group(4)}_l, {cost})")

    lines = ["def _cel_program(base_activation):"]
    for statement in statements:
        for line in statement.splitlines():
            line = _MACRO_CALL.sub(redirect, line)
            # celpy's has() yields a Python bool; CEL operators want BoolType.
            line = _HAS_LINE.sub(r"\1celpy.celtypes.BoolType(\2)", line)
            # celpy evaluates both sides of &&, || and ?: ; cel-go short-circuits.
            line = _EAGER_LOGIC.sub(r"_lazy_\1(activation, \2, \3)", line)
            line = _EAGER_CONDITION.sub(r"_lazy_condition(activation, \1, \2, \3)", line)
            line = line.replace("celpy.evaluation.result(", "_result(")
            # One global lookup instead of three attribute lookups per library call.
            line = line.replace(f"{_LIBRARY}.", "_L_")
            lines.append("    " + line)
    lines.append("    return CEL")
    namespace: dict[str, Any] = {}
    program_globals = {**_EXEC_GLOBALS, **constants}
    exec(compile("\n".join(lines), "<cel>", "exec"), program_globals, namespace)
    return _Compiled(namespace["_cel_program"], _static_cost(tree))


_EXEC_GLOBALS: dict[str, Any] = {
    **vars(celpy.evaluation),
    "extender": extender,
    "_result": cel_library.result,
    "_lazy_and": cel_library.lazy_and,
    "_lazy_or": cel_library.lazy_or,
    "_lazy_condition": cel_library.lazy_condition,
    **{f"_L_{name}": value for name, value in vars(cel_library).items() if not name.startswith("__")},
}


# --- the cache ------------------------------------------------------------------------------------


class SelectorCache:
    """Compiled selectors (LRU) and per-slice results; see the module docstring.

    Not thread-safe: use it from one thread (the core is synchronous).
    """

    def __init__(self, *, consumable_capacity: bool = True,
                 max_programs: int = DEFAULT_PROGRAM_CACHE_SIZE) -> None:
        self._consumable = consumable_capacity
        self._max_programs = max_programs
        self._programs: OrderedDict[str, _Program] = OrderedDict()
        self._slices: dict[ResourceSlice, _SliceState] = {}
        # The same result tuples indexed by expression first, so a caller that checks one
        # expression on many slices (a filter over every node) pays one dict lookup per slice.
        self._tables: dict[str, dict[ResourceSlice, tuple[bool | CelRuntimeError, ...]]] = {}
        self.stats = SelectorStats()

    def compile(self, expression: str) -> None:
        """Compile (once) and cache; raises ``CelCompileError``. Failures are not cached."""
        self._program(expression)

    def results(self, expression: str, slice: ResourceSlice) -> Sequence[bool | CelRuntimeError]:
        """One entry per ``slice.devices[i]``: the selector's verdict or its runtime error."""
        state = self._slices.get(slice)
        if state is not None:
            cached = state.results.get(expression)
            if cached is not None:
                self.stats.result_hits += 1
                return cached
        program = self._program(expression)
        if state is None:
            state = self._slices[slice] = _SliceState(slice, consumable_capacity=self._consumable)
        self.stats.result_misses += 1
        computed = program.run(state, self.stats)
        state.results[expression] = computed
        self._tables.setdefault(expression, {})[slice] = computed
        return computed

    def table(self, expression: str) -> Mapping[ResourceSlice, Sequence[bool | CelRuntimeError]]:
        """The cached results of one expression, by slice (read-only view; misses are absent:
        call ``results`` for them). Lookups through it are not counted in ``stats``."""
        return self._tables.setdefault(expression, {})

    def forget_slice(self, slice: ResourceSlice) -> None:
        """Drop the views and results of a slice the store replaced or deleted."""
        state = self._slices.pop(slice, None)
        if state is not None:
            for expression in state.results:
                table = self._tables.get(expression)
                if table is not None:
                    table.pop(slice, None)

    def _program(self, expression: str) -> _Program:
        program = self._programs.get(expression)
        if program is not None:
            self._programs.move_to_end(expression)
            self.stats.compile_hits += 1
            return program
        self.stats.compile_misses += 1
        program = compile_program(expression, consumable_capacity=self._consumable)
        self._programs[expression] = program
        if len(self._programs) > self._max_programs:
            self._programs.popitem(last=False)
        return program


# Keep the library module referenced for readers: the transpiled code calls into it by name.
_ = cel_library
