"""The selector cache: compiled programs (an LRU) and per-slice results.

``SelectorCache`` is the only entry point the allocator needs: ``compile(expression)`` (raises
``CelCompileError``), ``results(expression, slice)`` (one ``bool | CelRuntimeError`` per device
of the slice, cached until ``forget_slice(slice)``), ``table(expression)`` and ``stats``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence

from extender.core.cel.compiler import compile_program
from extender.core.cel.errors import CelRuntimeError
from extender.core.cel.programs import Program, SliceState
from extender.core.cel.stats import SelectorStats
from extender.core.model import ResourceSlice

__all__ = ["DEFAULT_PROGRAM_CACHE_SIZE", "SelectorCache"]

#: Compiled programs kept (an LRU); kube-scheduler keeps 10, we keep many more because a
#: cluster's classes and claims reuse a small, stable set of selectors.
DEFAULT_PROGRAM_CACHE_SIZE = 4096


class SelectorCache:
    """Compiled selectors (LRU) and per-slice results; see the module docstring.

    Not thread-safe: use it from one thread (the core is synchronous).
    """

    def __init__(self, *, consumable_capacity: bool = True, max_programs: int = DEFAULT_PROGRAM_CACHE_SIZE) -> None:
        self._consumable = consumable_capacity
        self._max_programs = max_programs
        self._programs: OrderedDict[str, Program] = OrderedDict()
        self._slices: dict[ResourceSlice, SliceState] = {}
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
            state = self._slices[slice] = SliceState(slice, consumable_capacity=self._consumable)
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

    def _program(self, expression: str) -> Program:
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
