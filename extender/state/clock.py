"""Time in the state layer: deadlines on the service's clock, and the wall clock as the API server
writes it in ``metav1.Time`` fields (``2026-01-02T03:04:05Z``).

Every deadline, TTL and lifetime in ``extender/state`` is measured on one injectable monotonic
clock (``SchedulingService(clock=...)``, kept by ``ClusterView.clock``); waits that must end at such
a deadline use ``timeout_until``, not the event loop's own time, so that a test that moves the clock
moves them too. Times the API server writes (``allocationTimestamp``) are compared with an
injectable wall clock (``SchedulingService(wall_clock=...)``).

A bind stamps a claim's allocation and the pod's PodScheduled condition; formatting the time with
``datetime.now(UTC).strftime`` cost more than the rest of either write's bookkeeping, and the text
only changes once a second, so it is formatted once per second.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import datetime

__all__ = ["epoch_seconds", "timeout_until", "utc_now_text"]

_last: tuple[int, str] = (-1, "")


def utc_now_text() -> str:
    """The current UTC time to the second, RFC 3339 with ``Z``."""
    global _last
    second = int(time.time())
    if second != _last[0]:
        _last = (second, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second)))
    return _last[1]


def epoch_seconds(timestamp: object) -> float | None:
    """A ``metav1.Time`` (RFC 3339, ``Z`` or an offset) as Unix seconds; None if absent or unreadable."""
    if not isinstance(timestamp, str) or not timestamp:
        return None
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def timeout_until(clock: Callable[[], float], until: float) -> asyncio.Timeout:
    """An ``asyncio.timeout`` that expires at ``until`` on ``clock`` (already past: at the next
    turn of the event loop)."""
    return asyncio.timeout(until - clock())
