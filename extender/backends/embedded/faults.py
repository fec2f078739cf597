"""Fault injection for the embedded cluster: make chosen reads and writes fail or wait.

Tests arm a fault by operation name; every backend read and write asks the injector first::

    backend.faults.fail("update_claim_status", ApiUnavailable("etcd timeout"), times=1)
    backend.faults.fail("bind_pod", WriteConflict("..."), after=2)   # the third call fails
    backend.faults.delay("update_claim", 0.05)                       # every call waits 50 ms
    backend.faults.hook("bind_pod", some_coroutine_function)         # awaited on every call

The injector also counts calls per operation (``calls``), so a test can assert what was tried.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["OPERATIONS", "FaultInjector"]

#: The operations the embedded backend checks, by method name.
OPERATIONS = frozenset(
    {
        "get_claim",
        "get_pod",
        "update_claim",
        "update_claim_status",
        "bind_pod",
        "create_scheduling_context",
        "update_scheduling_context",
        "update_scheduling_context_status",
        "apply_scheduling_context",
        "delete_scheduling_context",
        "evict_pod",
        "create_claim",
        "remove_claim",
        "patch_pod_status",
    }
)

Hook = Callable[[str], Awaitable[None]]


@dataclass
class _Fault:
    error: Exception
    times: int | None  # None: until cleared
    after: int  # calls that still succeed before this fault fires


class FaultInjector:
    """Armed faults, delays and hooks per operation; see the module docstring."""

    def __init__(self) -> None:
        self._faults: dict[str, list[_Fault]] = {}
        self._delays: dict[str, float] = {}
        self._hooks: dict[str, list[Hook]] = {}
        #: How often each operation was attempted (including the failed attempts).
        self.calls: Counter[str] = Counter()

    def fail(self, operation: str, error: Exception, *, times: int | None = 1, after: int = 0) -> None:
        """Raise ``error`` from the next ``times`` calls of ``operation`` (None: every call until
        ``clear``), after letting ``after`` calls succeed first."""
        _check_operation(operation)
        if times is not None and times < 1:
            raise ValueError("times must be at least 1 (or None for 'until cleared')")
        self._faults.setdefault(operation, []).append(_Fault(error, times, after))

    def delay(self, operation: str, seconds: float) -> None:
        """Make every call of ``operation`` sleep ``seconds`` before it runs (0 removes the delay)."""
        _check_operation(operation)
        if seconds <= 0:
            self._delays.pop(operation, None)
        else:
            self._delays[operation] = seconds

    def hook(self, operation: str, callback: Hook) -> None:
        """Await ``callback(operation)`` at the start of every call (e.g. to wait on an Event)."""
        _check_operation(operation)
        self._hooks.setdefault(operation, []).append(callback)

    def clear(self, operation: str | None = None) -> None:
        """Disarm everything for one operation, or for all of them."""
        if operation is None:
            self._faults.clear()
            self._delays.clear()
            self._hooks.clear()
            return
        self._faults.pop(operation, None)
        self._delays.pop(operation, None)
        self._hooks.pop(operation, None)

    async def check(self, operation: str) -> None:
        """Run at the start of an operation: hooks, delay, then raise an armed fault if one fires.

        Always yields to the loop once, as a real API call would, so concurrent callers interleave.
        """
        self.calls[operation] += 1
        for callback in list(self._hooks.get(operation, ())):
            await callback(operation)
        await asyncio.sleep(self._delays.get(operation, 0))
        error = self._take(operation)
        if error is not None:
            raise error

    def _take(self, operation: str) -> Exception | None:
        faults = self._faults.get(operation)
        if not faults:
            return None
        fault = faults[0]
        if fault.after > 0:
            fault.after -= 1
            return None
        if fault.times is not None:
            fault.times -= 1
            if fault.times == 0:
                faults.pop(0)
        return fault.error


def _check_operation(operation: str) -> None:
    if operation not in OPERATIONS:
        raise ValueError(f"unknown operation {operation!r} (expected one of {', '.join(sorted(OPERATIONS))})")
