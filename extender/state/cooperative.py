"""Run a synchronous decision without stalling the event loop: ``await run(fn, *args)``.

The allocator is pure and synchronous, and it runs on the event loop's thread: the store, the
ledger and the caches it reads are changed in place by the watches and other requests, so it may
not run on another thread (docs/reliability.md, "why not a thread"). Most decisions take
microseconds to a few milliseconds; a search that backtracks badly can take seconds, and with it
every request of the process — ``/healthz`` included — would wait.

So ``run`` tries ``fn`` synchronously first. The allocator's ``SearchBudget`` calls
``slice_ended()`` every few milliseconds of work (``extender.core.budget``):

- on that first try it raises ``_Reschedule``: the decision is abandoned (nothing it did is
  lost but a few milliseconds: decisions change nothing before their search ends, and the caches
  they filled stay filled) and ``run`` starts ``fn`` again in a greenlet;
- inside the greenlet it switches back to ``run``, which awaits one turn of the event loop (other
  requests, watch events, ``/healthz``) and switches into the greenlet again, where the search
  goes on where it was.

The greenlet (the ``greenlet`` package, which SQLAlchemy's asyncio layer rests on) keeps the
search's Python stack while it is paused, so the allocator stays one plain recursive function.
What a paused search read may change meanwhile: callers check afterwards whether it did
(``VerdictCache.verdicts``, ``Binder``). Called outside ``run`` (tests, explain, the CLI),
``slice_ended`` does nothing and the search simply runs to its end.

``Pacer`` is the same idea for loops of small steps rather than one search: after each step,
``await pacer()`` (async code) or ``pacer.step()`` (code under ``run``) lets the event loop run
once a slice of work is used up; the read models (listing, explain, the device map) use it.

``slice_ended(resume_after)`` may name what ``run`` awaits, after its turn of the loop, before the
search goes on: ``ClusterView.on_pause`` uses it so that a test holds a search at a chosen pause
while other requests run, instead of racing it with sleeps.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

import greenlet

__all__ = ["Pacer", "can_pause", "run", "slice_ended"]

P = ParamSpec("P")
T = TypeVar("T")

#: True while ``run`` tries a decision synchronously (a slice's end then reschedules it).
_FIRST_TRY: contextvars.ContextVar[bool] = contextvars.ContextVar("dra_extender_first_try", default=False)


class _Reschedule(BaseException):
    """The synchronous try ran out of its slice. A BaseException, so that no ``except Exception``
    on the way out mistakes it for a failure of the decision."""


class _Cooperative(greenlet.greenlet):  # type: ignore[misc]  # greenlet's types say Any
    """A decision that yields to the event loop at every slice's end."""


def can_pause() -> bool:
    """Whether ``slice_ended`` would let the event loop run now (inside ``run``'s greenlet)."""
    return isinstance(greenlet.getcurrent(), _Cooperative)


#: What a pause may ask ``run`` to await before the search goes on (``slice_ended``).
ResumeAfter = Callable[[], Awaitable[object]]


class _Pause:
    """What the search's greenlet hands ``run`` when it pauses."""

    __slots__ = ("resume_after",)

    def __init__(self, resume_after: ResumeAfter | None) -> None:
        self.resume_after = resume_after


def slice_ended(resume_after: ResumeAfter | None = None) -> None:
    """The ``SearchBudget`` hook: let the event loop run (see the module docstring); inside ``run``,
    the search goes on after one turn of the loop and, if given, once ``resume_after()`` is done."""
    current = greenlet.getcurrent()
    if isinstance(current, _Cooperative):
        parent = current.parent
        assert parent is not None
        parent.switch(_Pause(resume_after))  # back to ``run``, which switches in again later
    elif _FIRST_TRY.get():
        raise _Reschedule


async def run(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)``, letting the event loop run every slice (module docstring)."""
    token = _FIRST_TRY.set(True)
    try:
        return fn(*args, **kwargs)
    except _Reschedule:
        pass
    finally:
        _FIRST_TRY.reset(token)
    await asyncio.sleep(0)  # the try took a slice already: let the loop run before the next one
    child = _Cooperative(lambda: fn(*args, **kwargs))
    child.gr_context = contextvars.copy_context()  # the request's log context, not an empty one
    try:
        result = child.switch()
        while not child.dead:
            await asyncio.sleep(0)
            if isinstance(result, _Pause) and result.resume_after is not None:
                await result.resume_after()
            result = child.switch()
    finally:
        if not child.dead:  # cancelled while paused: unwind the search (its finally blocks run)
            child.throw(greenlet.GreenletExit)
    return result  # type: ignore[no-any-return]


class Pacer:
    """Lets the event loop run after every ``seconds`` of work done in small steps: call it after
    each step. ``clock`` (seconds) is injectable; a step never pauses before its slice is used up."""

    __slots__ = ("_clock", "_deadline", "_seconds")

    def __init__(self, seconds: float, *, clock: Callable[[], float] = time.perf_counter) -> None:
        self._seconds = seconds
        self._clock = clock
        self._deadline = clock() + seconds

    def _due(self) -> bool:
        if self._clock() < self._deadline:
            return False
        self._deadline = self._clock() + self._seconds
        return True

    async def __call__(self) -> None:
        """In async code: one turn of the event loop once the slice is used up."""
        if self._due():
            await asyncio.sleep(0)

    def step(self) -> bool:
        """In code that ``run`` may pause (a synchronous explanation, say): ``slice_ended`` once
        the slice is used up; nothing outside ``run``. Whether the event loop may have run (what
        the caller read of shared state before may have changed)."""
        if self._due():
            slice_ended()
            return can_pause()
        return False
