"""The selector engine's counters, read by tests, benchmarks and metrics."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SelectorStats"]


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
    #: device verdicts taken from a selector's memo of values it read (``Compiled``)
    memo_hits: int = 0
