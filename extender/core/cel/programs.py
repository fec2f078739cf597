"""Compiled selectors and what they run on: per-slice state (views, poison, result tuples), the
``device.driver == "..."`` shortcut, and transpiled programs metered for cost."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celpy import celtypes
from celpy.evaluation import CELEvalError

from extender.core.cel.celpy_glue import runtime_error_text
from extender.core.cel.cost import COST, CostLimitExceeded
from extender.core.cel.errors import CelRuntimeError
from extender.core.cel.reads import KeyReader, Path, key_reader
from extender.core.cel.stats import SelectorStats
from extender.core.cel.values import type_name
from extender.core.cel.view import Scope, ViewBuilder, device_poison
from extender.core.model import ResourceSlice

__all__ = ["MEMO_SIZE", "Compiled", "DriverEquals", "Program", "SliceState"]

#: Value combinations a selector remembers its verdict for (``Compiled``): a cluster's devices
#: take a few dozen; a selector reading a unique field (a UUID) stops remembering here.
MEMO_SIZE = 4096


class SliceState:
    """Everything cached for one slice object: device views and result tuples per expression."""

    __slots__ = ("_consumable", "_poison", "_slice", "_views", "driver", "results")

    def __init__(self, slice_: ResourceSlice, *, consumable_capacity: bool) -> None:
        self._slice = slice_
        self.driver = slice_.driver
        self._consumable = consumable_capacity
        self._views: tuple[Scope | CelRuntimeError, ...] | None = None
        self._poison: tuple[CelRuntimeError | None, ...] | None = None
        self.results: dict[str, tuple[bool | CelRuntimeError, ...]] = {}

    def views(self, stats: SelectorStats) -> tuple[Scope | CelRuntimeError, ...]:
        if self._views is None:
            builder = ViewBuilder(self._slice, consumable_capacity=self._consumable)
            self._views = tuple(builder.build(device) for device in self._slice.devices)
            stats.views_built += len(self._views)
        return self._views

    def poison(self) -> tuple[CelRuntimeError | None, ...]:
        if self._poison is None:
            if self._views is not None:
                self._poison = tuple(v if isinstance(v, CelRuntimeError) else None for v in self._views)
            else:
                self._poison = tuple(device_poison(device) for device in self._slice.devices)
        return self._poison


class DriverEquals:
    """``device.driver == "<literal>"``, answered with one string comparison per slice."""

    __slots__ = ("driver",)

    def __init__(self, driver: str) -> None:
        self.driver = driver

    def run(self, state: SliceState, stats: SelectorStats) -> tuple[bool | CelRuntimeError, ...]:
        stats.fast_path += 1
        match = state.driver == self.driver
        # A device whose view cannot be built fails every selector, this one included.
        return tuple(match if error is None else error for error in state.poison())


class Compiled:
    """A transpiled expression: ``function(scope)`` returns a CEL value or a CELEvalError.

    ``reads`` (``reads.device_reads``): the device paths the expression reads, when that is all
    it reads of the device; the verdict is then remembered per combination of their values
    (``memo``, up to ``MEMO_SIZE`` combinations), so that devices alike but for what the
    expression does not look at are evaluated once."""

    __slots__ = ("_read_key", "base_cost", "function", "memo", "reads")

    def __init__(self, function: Callable[[Scope], Any], base_cost: int, reads: tuple[Path, ...] | None = None) -> None:
        self.function = function
        self.base_cost = base_cost
        self.reads = reads
        self._read_key: KeyReader | None = key_reader(reads) if reads is not None else None
        self.memo: dict[tuple[Any, ...], bool | CelRuntimeError] = {}

    def run(self, state: SliceState, stats: SelectorStats) -> tuple[bool | CelRuntimeError, ...]:
        views = state.views(stats)
        evaluate = self.evaluate
        read_key = self._read_key
        if read_key is None:
            stats.evaluations += len(views)
            return tuple(v if isinstance(v, CelRuntimeError) else evaluate(v) for v in views)
        memo = self.memo
        out: list[bool | CelRuntimeError] = []
        for view in views:
            if isinstance(view, CelRuntimeError):
                out.append(view)
                continue
            key = read_key(view.device_fields())
            try:
                verdict = memo.get(key) if key is not None else None
            except TypeError:  # an unhashable value (``read_key``)
                key = verdict = None
            if verdict is None:
                verdict = evaluate(view)
                stats.evaluations += 1
                if key is not None and len(memo) < MEMO_SIZE and not _depends_on_the_caller(verdict):
                    memo[key] = verdict
            else:
                stats.memo_hits += 1
            out.append(verdict)
        return tuple(out)

    def evaluate(self, scope: Scope) -> bool | CelRuntimeError:
        COST.spent = self.base_cost
        try:
            value = self.function(scope)
        except CostLimitExceeded:
            return CelRuntimeError("operation cancelled: actual cost limit exceeded")
        except CELEvalError as exc:
            return runtime_error(exc)
        except RecursionError:
            return CelRuntimeError(_RECURSION)
        except Exception as exc:  # a fault in a library function must not crash the caller
            return CelRuntimeError(f"{_INTERNAL}{exc!r}")
        if isinstance(value, (celtypes.BoolType, bool)):
            return bool(value)
        if isinstance(value, CELEvalError):
            return runtime_error(value)
        return CelRuntimeError(f"CEL result of type {type_name(value)} could not be converted to bool")


Program = DriverEquals | Compiled

#: Outcomes that depend on where the evaluation ran, not on the device: how deep the stack was
#: (a filter deep in the allocator is deeper than the warm-up), a fault of a library function.
_RECURSION = "max recursion depth exceeded"
_INTERNAL = "internal error: "


def _depends_on_the_caller(verdict: bool | CelRuntimeError) -> bool:
    return isinstance(verdict, CelRuntimeError) and (
        verdict.message == _RECURSION or verdict.message.startswith(_INTERNAL)
    )


def runtime_error(error: CELEvalError) -> CelRuntimeError:
    """The error a selector reports for a celpy error value, in cel-go's words."""
    return CelRuntimeError(runtime_error_text(error))
