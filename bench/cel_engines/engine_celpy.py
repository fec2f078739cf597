"""cel-python 0.5.0 used as shipped: ``celpy.Environment`` with its InterpretedRunner or its
CompiledRunner, and the Kubernetes functions added through ``functions=``.

This is the baseline the dra-extender package improves on (it uses celpy's grammar and
transpiler, but none of its runners). Two constraints of the stock runners shape this module:

- the CompiledRunner's generated code names each function ``<module>.<qualname>`` and runs in
  ``celpy.evaluation``'s globals, so the functions are module-level and this package's top
  name is made reachable from there (no lambdas);
- one process can hold only one runner kind: celpy keeps one Lark parser for all
  Environments, built with the first one's tree class. The benchmark runs every engine in its
  own process anyway.
"""

from __future__ import annotations

import importlib
import logging
import re
from typing import Any, ClassVar

import celpy
import celpy.evaluation
from celpy import celtypes
from celpy.evaluation import CELEvalError

from bench.cel_engines.interface import CompileError, Engine, EvalError, Outcome, Program
from bench.cel_engines.workload import DeviceSpec
from extender.core.quantity import Quantity
from extender.core.semver import Semver

__all__ = ["CelpyCompiled", "CelpyInterpreted"]


# --- the Kubernetes functions: module-level (the CompiledRunner names them), named as in CEL ------


def quantity(text: Any) -> Quantity:
    return Quantity.parse(str(text))


def semver(text: Any) -> Semver:
    return Semver.parse(str(text))


def _compare(left: Any, right: Any) -> int:
    if type(left) is not type(right) or not isinstance(left, Quantity | Semver):
        raise TypeError("no such overload")
    return left.compare(right)


def compareTo(left: Any, right: Any) -> celtypes.IntType:
    return celtypes.IntType(_compare(left, right))


def isGreaterThan(left: Any, right: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_compare(left, right) > 0)


def isLessThan(left: Any, right: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_compare(left, right) < 0)


def asApproximateFloat(value: Any) -> celtypes.DoubleType:
    if not isinstance(value, Quantity):
        raise TypeError("no such overload")
    return celtypes.DoubleType(value.as_approximate_float())


def major(value: Any) -> celtypes.IntType:
    if not isinstance(value, Semver):
        raise TypeError("no such overload")
    return celtypes.IntType(value.major)


FUNCTIONS = {
    function.__name__: function
    for function in (quantity, semver, compareTo, isGreaterThan, isLessThan, asApproximateFloat, major)
}


# --- errors ---------------------------------------------------------------------------------------

_MISSING_MEMBER = re.compile(r"no such member in mapping: (?:StringType\()?'([^']*)'")
_QUOTED_STRING = re.compile(r"StringType\('([^']*)'\)")


def error_value(error: Any) -> EvalError:
    """cel-go's text for the celpy errors the probes meet: celpy says ``no such member in
    mapping: 'K'`` where cel-go says ``no such key: K``; the rest keeps celpy's message."""
    raw = repr(error.args)
    found = _MISSING_MEMBER.search(raw)
    if found:
        return EvalError(f"no such key: {found.group(1)}", raw)
    if "no such key" in raw:
        key = _QUOTED_STRING.search(raw)
        return EvalError(f"no such key: {key.group(1) if key else '?'}", raw)
    if "ZeroDivisionError" in raw:
        return EvalError("division by zero", raw)
    return EvalError(str(error.args[0]) if error.args else "error", raw)


# --- the adapters ---------------------------------------------------------------------------------


class _CelpyProgram(Program):
    __slots__ = ("_runner",)

    def __init__(self, runner: Any) -> None:
        self._runner = runner

    def evaluate(self, view: Any) -> Outcome:
        try:
            value = self._runner.evaluate(view)
        except CELEvalError as exc:
            return error_value(exc)
        except Exception as exc:  # a fault inside the runner: one device's error, as everywhere
            return EvalError(f"internal error: {exc!r}")
        if isinstance(value, CELEvalError):
            return error_value(value)
        if isinstance(value, bool | celtypes.BoolType):
            return bool(value)
        return EvalError(f"result is not bool: {type(value).__name__}")


class _Celpy(Engine):
    """The stock celpy environment with one runner class."""

    runner_class: ClassVar[type]
    #: 20 ** 3 = 8,000 iterations: at the first comparison's rates (about 0.3 to 0.9 ms per
    #: iteration) the full 125,000 took 41 s (compiled) and 109 s (interpreted)
    cost_probe_size = 20

    def __init__(self) -> None:
        # celpy logs an ERROR line for every evaluation that fails; the outcomes are counted.
        logging.getLogger("celpy").setLevel(logging.CRITICAL)
        # The CompiledRunner's code calls "bench.cel_engines.engine_celpy.<function>" from
        # celpy.evaluation's globals.
        top = __name__.partition(".")[0]
        vars(celpy.evaluation).setdefault(top, importlib.import_module(top))
        self._environment = celpy.Environment(runner_class=self.runner_class)
        self._strings: dict[str, celtypes.StringType] = {}

    def compile(self, expression: str) -> Program:
        try:
            ast = self._environment.compile(expression)
            runner = self._environment.program(ast, functions=FUNCTIONS)
        except Exception as exc:  # CELParseError, or the transpiler failing on the tree
            raise CompileError(f"{type(exc).__name__}: {exc}") from None
        return _CelpyProgram(runner)

    def view(self, device: DeviceSpec) -> dict[str, Any]:
        """celpy's own map types, built with their constructors (which check every key): the
        stock way to hand celpy a structured value."""
        string = self._string
        domain = string(device.driver)
        attributes = celtypes.MapType(
            {domain: celtypes.MapType({string(k): self._value(v) for k, v in device.attributes.items()})}
        )
        capacity = celtypes.MapType({domain: celtypes.MapType({string(k): v for k, v in device.capacity.items()})})
        fields = {
            string("driver"): domain,
            string("attributes"): attributes,
            string("capacity"): capacity,
            string("allowMultipleAllocations"): celtypes.BoolType(device.allow_multiple_allocations),
        }
        return {"device": celtypes.MapType(fields)}

    def _string(self, text: str) -> celtypes.StringType:
        value = self._strings.get(text)
        if value is None:
            value = self._strings[text] = celtypes.StringType(text)
        return value

    def _value(self, raw: object) -> Any:
        if isinstance(raw, bool):
            return celtypes.BoolType(raw)
        if isinstance(raw, int):
            return celtypes.IntType(raw)
        if isinstance(raw, str):
            return self._string(raw)
        return raw  # Semver goes in as it is: celpy takes any Python object as a value


class CelpyInterpreted(_Celpy):
    name = "celpy-interp"
    runner_class = celpy.InterpretedRunner


class CelpyCompiled(_Celpy):
    name = "celpy-compiled"
    runner_class = celpy.CompiledRunner
