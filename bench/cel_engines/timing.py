"""Timing helpers shared by the workers: one timed call, and the best of N rounds."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["best_seconds", "timed"]

T = TypeVar("T")


def timed(body: Callable[..., T], *args: Any) -> tuple[float, T]:
    """Seconds for one call of ``body(*args)``, and its result. A collection runs first so that
    garbage left by the previous round is not charged to this one; the gc stays on during the
    call, since every engine allocates per evaluation as it would in production."""
    gc.collect()
    start = time.perf_counter()
    result = body(*args)
    return time.perf_counter() - start, result


def best_seconds(body: Callable[..., object], rounds: int, *args: Any) -> float:
    """The fastest of ``rounds`` calls of ``body(*args)``: the one least disturbed by the machine."""
    return min(timed(body, *args)[0] for _ in range(max(1, rounds)))
