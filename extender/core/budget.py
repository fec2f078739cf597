"""How long the allocator may search, and where it may let others run: ``SearchBudget``.

Two limits, both upstream's or in its spirit:

- **per node** (``seconds``): kube-scheduler 1.34+ gives each node's allocation
  ``filterTimeout`` (default 10 s, gate ``DRASchedulerFilterTimeout``) and then fails the attempt
  with ``timed out trying to allocate devices`` (an ``Error``: the pod retries with backoff).
  ``start(node)`` starts a node's clock; ``check()`` raises ``AllocationTimedOut`` past it. The time
  is wall time, as a Go context deadline is: a search that lets others run keeps its clock running.
- **per slice** (``slice_seconds``): the allocator runs on the event loop's thread; every few
  milliseconds of work it calls ``on_slice_end`` — a hook the caller sets. The state layer either
  switches to the event loop there and resumes the search later (``extender.state.cooperative``),
  or, on a first synchronous try, gives up so the request can run again cooperatively. Without a
  hook a search simply runs on (explain, the CLI, tests).

The allocator calls ``start`` once per node and ``check`` every ``CHECK_EVERY`` search steps, so the
cost on a search that ends quickly is a counter test per step and a clock read per node.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from extender.core.errors import AllocationTimedOut

__all__ = ["CHECK_EVERY", "DEFAULT_FILTER_TIMEOUT_SECONDS", "DEFAULT_SLICE_SECONDS", "SearchBudget"]

#: Upstream's ``DynamicResourcesArgs.filterTimeout`` default.
DEFAULT_FILTER_TIMEOUT_SECONDS = 10.0
#: The longest the allocator works before ``on_slice_end``: the event loop's longest stall.
#: bench/loop_stall.py measures 1, 2, 5 and 20 ms (docs/reliability.md).
DEFAULT_SLICE_SECONDS = 0.002
#: Search steps between two ``check`` calls (a power of two: the test is a mask).
CHECK_EVERY = 64


class SearchBudget:
    """See the module docstring. ``seconds`` None or 0: no per-node limit (upstream's 0)."""

    __slots__ = ("_deadline", "_node", "_slice_end", "clock", "on_slice_end", "seconds", "slice_seconds", "slices")

    def __init__(
        self,
        seconds: float | None = DEFAULT_FILTER_TIMEOUT_SECONDS,
        *,
        slice_seconds: float = DEFAULT_SLICE_SECONDS,
        on_slice_end: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.seconds = seconds or None
        self.slice_seconds = slice_seconds
        self.on_slice_end = on_slice_end
        self.clock = clock
        #: How many times ``on_slice_end`` was called (a search that let others run has > 0).
        self.slices = 0
        now = clock()
        self._slice_end = now + slice_seconds
        self._deadline = float("inf")
        self._node = ""

    def start(self, node: str) -> None:
        """A node's search begins: its clock starts (a node boundary is also a place to yield)."""
        now = self.clock()
        if now > self._slice_end:
            now = self._end_slice()
        self._node = node
        self._deadline = now + self.seconds if self.seconds is not None else float("inf")

    def check(self) -> None:
        """Raise ``AllocationTimedOut`` past the node's deadline; at a slice's end, call the hook."""
        now = self.clock()
        if now > self._deadline:
            raise AllocationTimedOut(f"node {self._node}: timed out trying to allocate devices", node=self._node)
        if now > self._slice_end:
            self._end_slice()

    def tick(self) -> None:
        """At a slice's end, call the hook (no deadline: between nodes of the tight loop)."""
        if self.clock() > self._slice_end:
            self._end_slice()

    def _end_slice(self) -> float:
        if self.on_slice_end is not None:
            self.slices += 1
            self.on_slice_end()  # may switch away and come back, or raise
        now = self.clock()
        self._slice_end = now + self.slice_seconds
        return now
