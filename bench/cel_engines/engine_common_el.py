"""common-expression-language (module ``cel``: Python bindings of the Rust crate cel-interpreter).

It has no custom types at all (``Failed to convert Python object of type ... to Value``), so
Quantity and Semver are stand-ins: strings tagged with a prefix that cannot occur in a real
attribute, parsed back by the Python functions (memoised). A tagged string is still a string to
the engine: ``q == "x"`` or ``q.startsWith(...)`` would not be a type error here, as they are
in Kubernetes. The functions are untyped and looked up by name at run time, so ``x.f(y)`` is
``f(x, y)`` and every type check happens in Python.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import cel
import cel.stdlib

from bench.cel_engines.interface import CompileError, Engine, EvalError, Outcome, Program
from bench.cel_engines.workload import DeviceSpec
from extender.core.quantity import Quantity
from extender.core.semver import Semver

__all__ = ["CommonExpressionLanguage"]

_QUANTITY_TAG = "\x00quantity:"
_SEMVER_TAG = "\x00semver:"


@functools.lru_cache(maxsize=65536)
def _quantity_of(tagged: object) -> Quantity:
    if not isinstance(tagged, str) or not tagged.startswith(_QUANTITY_TAG):
        raise TypeError("no such overload")
    return Quantity.parse(tagged[len(_QUANTITY_TAG) :])


@functools.lru_cache(maxsize=65536)
def _semver_of(tagged: object) -> Semver:
    if not isinstance(tagged, str) or not tagged.startswith(_SEMVER_TAG):
        raise TypeError("no such overload")
    return Semver.parse(tagged[len(_SEMVER_TAG) :])


def _compare(left: object, right: object) -> int:
    if isinstance(left, str) and left.startswith(_QUANTITY_TAG):
        return _quantity_of(left).compare(_quantity_of(right))
    return _semver_of(left).compare(_semver_of(right))


def _quantity(text: str) -> str:
    Quantity.parse(text)  # raises for an invalid quantity, as Kubernetes' quantity() does
    return _QUANTITY_TAG + text


def _semver(text: str) -> str:
    Semver.parse(text)
    return _SEMVER_TAG + text


def functions() -> dict[str, Callable[..., Any]]:
    """The Kubernetes functions plus the package's own Python strings library (lowerAscii,
    split, ...: Kubernetes has the strings extension)."""
    kubernetes: dict[str, Callable[..., Any]] = {
        "quantity": _quantity,
        "semver": _semver,
        "compareTo": _compare,
        "isGreaterThan": lambda a, b: _compare(a, b) > 0,
        "isLessThan": lambda a, b: _compare(a, b) < 0,
        "asApproximateFloat": lambda q: _quantity_of(q).as_approximate_float(),
        "major": lambda v: _semver_of(v).major,
    }
    return {**cel.stdlib.EXTENSIONS["strings"], **kubernetes}


class CommonExpressionLanguage(Engine):
    name = "common-expression-language"

    def __init__(self) -> None:
        self._functions = functions()

    def compile(self, expression: str) -> Program:
        try:
            return _RustProgram(cel.compile(expression))
        except Exception as exc:
            raise CompileError(str(exc)) from None

    def view(self, device: DeviceSpec) -> Any:
        """A ``cel.Context`` per device: the variables and the functions travel together."""
        attributes = {name: _tagged(value) for name, value in device.attributes.items()}
        capacity = {name: _QUANTITY_TAG + str(value) for name, value in device.capacity.items()}
        fields = {
            "driver": device.driver,
            "attributes": {device.driver: attributes},
            "capacity": {device.driver: capacity},
            "allowMultipleAllocations": device.allow_multiple_allocations,
        }
        return cel.Context(variables={"device": fields}, functions=self._functions)


def _tagged(value: object) -> object:
    return _SEMVER_TAG + str(value) if isinstance(value, Semver) else value


class _RustProgram(Program):
    __slots__ = ("_program",)

    def __init__(self, program: Any) -> None:
        self._program = program

    def evaluate(self, view: Any) -> Outcome:
        try:
            result = self._program.execute(view)
        except KeyError as exc:  # a missing map key comes back as Python's KeyError
            return EvalError(f"no such key: {exc.args[0]}", f"KeyError: {exc}")
        except Exception as exc:
            return EvalError(str(exc), f"{type(exc).__name__}: {exc}")
        if result is True or result is False:
            return result
        return EvalError(f"result is not bool: {type(result).__name__}")
