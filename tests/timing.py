"""Time and pauses under the test's control, so that no test depends on the machine's speed.

- ``TickingClock``: a monotonic clock that moves only when read (``tick`` seconds per read) or when
  the test moves it (``advance``). A search budget on it ends its slices and its node deadlines
  after a fixed amount of *work*, the same on a fast machine and a slow one.
- ``HeldSearch``: holds a search that lets the event loop run (``ClusterView.on_pause``) at the
  pauses the test names; the test then does what must happen "while the search runs", checks, and
  lets the search go on. No sleep decides which task gets there first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from extender.state.cache.cluster import ClusterView, WatchedSearch

__all__ = ["HeldSearch", "TickingClock"]


class TickingClock:
    """Monotonic seconds that advance ``tick`` per read, and by ``advance``."""

    def __init__(self, tick: float = 0.0, start: float = 1000.0) -> None:
        self.tick = tick
        self.now = start
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        self.now += self.tick
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class HeldSearch:
    """Holds the first search that pauses on ``cluster`` (later searches pass freely) at each of
    ``at`` (1 is its first pause): ``await held.reached(n)`` returns once the search waits there,
    ``held.release(n)`` lets it go on. ``pauses`` counts that search's pauses."""

    def __init__(self, cluster: ClusterView, at: Iterable[int] = (1,)) -> None:
        self._reached = {n: asyncio.Event() for n in at}
        self._released = {n: asyncio.Event() for n in at}
        self._search: WatchedSearch | None = None
        self.pauses = 0
        cluster.on_pause = self._paused

    async def _paused(self, search: WatchedSearch) -> None:
        if self._search is None:
            self._search = search
        if search is not self._search:
            return
        self.pauses += 1
        if self.pauses in self._reached:
            self._reached[self.pauses].set()
            await self._released[self.pauses].wait()

    async def reached(self, n: int = 1) -> None:
        """Until the held search waits at its ``n``-th pause (a bound only against a hang)."""
        async with asyncio.timeout(60):
            await self._reached[n].wait()

    def release(self, n: int = 1) -> None:
        self._released[n].set()

    def release_all(self) -> None:
        for event in self._released.values():
            event.set()
