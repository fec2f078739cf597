"""The event loop the server runs on: uvloop where it is installed, the standard one otherwise.

Each scheduled pod costs three HTTP requests, and below our own code most of a request's CPU is
the event loop's transport work (socket reads and writes, callbacks) and aiohttp's protocol
handling on top of it. uvloop does the loop's part in C: on the 2-CPU benchmark machine it cut
the server's CPU per request with a 7 KB body and answer from 0.28-0.35 ms to 0.19 ms
(docs/performance.md). It is a dependency on the platforms it supports; ``auto`` falls back to
asyncio's own loop elsewhere (Windows, PyPy), and ``asyncio`` forces that loop (to rule uvloop out
when debugging).
"""

from __future__ import annotations

import asyncio
import importlib

__all__ = ["EVENT_LOOPS", "event_loop_name", "new_event_loop"]

#: The choices of ``--event-loop``.
EVENT_LOOPS = ("auto", "uvloop", "asyncio")


def event_loop_name(choice: str = "auto") -> str:
    """What ``choice`` runs on here: ``"uvloop"`` or ``"asyncio"``. ValueError for an unknown
    choice, or for ``"uvloop"`` when uvloop cannot be imported (the CLI checks this up front)."""
    if choice not in EVENT_LOOPS:
        raise ValueError(f"event loop must be one of {', '.join(EVENT_LOOPS)}, not {choice!r}")
    if choice == "asyncio":
        return "asyncio"
    try:
        importlib.import_module("uvloop")
    except ImportError as exc:
        if choice == "uvloop":
            raise ValueError(f"event loop uvloop is not available: {exc}") from exc
        return "asyncio"
    return "uvloop"


def new_event_loop(choice: str = "auto") -> tuple[asyncio.AbstractEventLoop, str]:
    """A new event loop for ``choice`` and its name (see ``event_loop_name``)."""
    name = event_loop_name(choice)
    if name == "uvloop":
        loop: asyncio.AbstractEventLoop = importlib.import_module("uvloop").new_event_loop()
        return loop, name
    return asyncio.new_event_loop(), name
