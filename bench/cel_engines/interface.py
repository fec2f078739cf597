"""The one interface every engine is measured through.

::

    engine = ADAPTER()                   # the environment (functions, types), built once
    program = engine.compile(expr)       # raises CompileError
    view = engine.view(device)           # the per-device context (built once per device)
    program.evaluate(view)               # bool, or an error value (returned, never raised)

The benchmark works slice by slice, because that is how the extender evaluates selectors (one
result tuple per slice, cached): ``engine.prepare(slices)`` turns the neutral descriptions into
what the engine's user would hold (untimed), ``engine.slice_views(prepared)`` builds every
device's view of one slice and ``program.evaluate_slice(views)`` evaluates them. For the stock
engines these are loops over ``view`` and ``evaluate``; the dra-extender adapter maps them onto
the package's own per-slice state, so each engine is measured on its natural path.

An error value is anything with a ``message`` (``EvalError`` here, ``CelRuntimeError`` in the
dra-extender package); messages are cel-go's text where the adapter knows the mapping, and
``EvalError.raw`` keeps what the engine said.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from bench.cel_engines.workload import DeviceSpec, SliceSpec

__all__ = ["CompileError", "Engine", "ErrorValue", "EvalError", "Outcome", "Program", "outcome_key"]


class CompileError(Exception):
    """The expression does not compile in this engine; ``message`` is the engine's text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ErrorValue(Protocol):
    """A runtime error returned as a value."""

    @property
    def message(self) -> str: ...


@dataclass(frozen=True, slots=True)
class EvalError:
    """A runtime error of a stock engine: ``message`` normalised, ``raw`` as the engine said it."""

    message: str
    raw: str = ""


Outcome = bool | ErrorValue


def outcome_key(outcome: Outcome) -> str:
    """``true``, ``false`` or ``error: <message>``: what the outcome tables count."""
    if outcome is True or outcome is False:
        return "true" if outcome else "false"
    return "error: " + outcome.message[:60]


class Program(ABC):
    """A compiled selector."""

    @abstractmethod
    def evaluate(self, view: Any) -> Outcome:
        """The selector on one device's view. Engine faults become error values: one bad
        device must not stop the others, as in the extender."""

    def evaluate_slice(self, views: Any) -> Sequence[Outcome]:
        """The selector on every view of one slice (what ``Engine.slice_views`` returned)."""
        evaluate = self.evaluate
        return [evaluate(view) for view in views]


class Engine(ABC):
    """One CEL engine with the Kubernetes library functions the selectors need."""

    #: the name used on the command line and in the tables
    name: ClassVar[str]
    #: iterations of the cost probe are ``cost_probe_size ** 3``; the stock celpy runners get a
    #: smaller size so that ``--features`` finishes in minutes (they have no limit of their own)
    cost_probe_size: ClassVar[int] = 50

    @abstractmethod
    def compile(self, expression: str) -> Program:
        """Compile one selector; raises ``CompileError``."""

    @abstractmethod
    def view(self, device: DeviceSpec) -> Any:
        """The context a program evaluates one device in."""

    def prepare(self, slices: Sequence[SliceSpec]) -> Sequence[Any]:
        """The input as the engine's user holds it before any selector runs (untimed)."""
        return slices

    def slice_views(self, prepared: Any) -> Any:
        """The views of every device of one prepared slice."""
        view = self.view
        return [view(device) for device in prepared.devices]

    def end_to_end(self, expressions: Sequence[str], prepared: Sequence[Any]) -> int:
        """Compile the selectors, then per slice build the views once and run every selector on
        them; returns how many results were true (so the work cannot be skipped)."""
        programs = [self.compile(expression) for expression in expressions]
        matched = 0
        for item in prepared:
            views = self.slice_views(item)
            for program in programs:
                matched += sum(1 for outcome in program.evaluate_slice(views) if outcome is True)
        return matched

    def extra_timings(self, prepared: Sequence[Any], rounds: int) -> dict[str, float]:
        """Engine-specific figures worth reporting beside the common ones (µs per device)."""
        return {}
