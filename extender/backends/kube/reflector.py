"""Our reflector: keep one kind of object in the store with paged LIST, then WATCH (kopf's split).

- ``iter_lines``: split a byte stream into lines ourselves; aiohttp's line reader gives up on lines
  above its buffer size, and one ResourceSlice event can be megabytes.
- ``Reflector._list``: paged LIST (``limit``/``continue``) → ``sink.fill(kind, items, pacer)`` the
  first time (nothing is answered from the kind yet: the event loop runs between objects), then
  ``sink.replace(kind, items)`` at once on a re-list → synced.
- ``Reflector._watch``: one WATCH from a resourceVersion with bookmarks; takes the rv from every
  event (BOOKMARK included); ends quietly when the stream drops or goes silent; raises ``Gone`` on
  410 (as HTTP status or as an ERROR event).
- ``Reflector._list_then_watch``: list, then watch again and again from the last rv; a dropped or
  failed watch resumes from that rv (with backoff when it brought nothing); ``Gone`` returns so the
  caller re-lists.
- ``Reflector.run``: the trivial forever loop, sleeping ``Backoff.next()`` after a failed LIST, or
  after a LIST or WATCH refused with 401/403 (as client-go does; the kind is not synced until a
  LIST succeeds again). Other errors that are not ``Transient`` (an unexpected status, a bug)
  propagate: the backend's guarded task logs them and stops being ready.

Time comes from injected ``sleep`` and ``clock``; ``max_cycles`` bounds the number of LIST and
WATCH requests so tests can run the loop to completion.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import orjson
import structlog

from extender.core.errors import ApiUnavailable, Transient
from extender.state.cooperative import Pacer

from .client import KubeClient
from .errors import AccessDenied, Gone

__all__ = [
    "Backoff",
    "Reflector",
    "Resource",
    "Sink",
    "WatchSettings",
    "iter_lines",
]

log = structlog.get_logger()

Sleep = Callable[[float], Awaitable[None]]
#: How long a first list fills the store before it lets the event loop run (``Sink.fill``).
FILL_SLICE_SECONDS = 0.005
_OBJECT_EVENTS = frozenset({"ADDED", "MODIFIED", "DELETED"})


@dataclass(frozen=True, slots=True)
class WatchSettings:
    """How reflectors list, watch and back off. Times in seconds."""

    backoff_initial: float = 0.5
    """First delay after a failure: long enough not to hammer a restarting apiserver."""
    backoff_factor: float = 2.0
    backoff_max: float = 30.0
    """Cap: a recovered server is noticed within this long (client-go caps at 30 s too)."""
    jitter: float = 0.2
    """Each delay is scaled by a random factor in [1 - jitter, 1 + jitter] so that the reflectors
    of many replicas (and our five kinds) do not reconnect in lockstep."""
    page_size: int = 500
    """Items per LIST page: client-go's default; keeps apiserver memory per request bounded."""
    timeout_seconds: int = 300
    """Server-side watch duration (``timeoutSeconds``); the stream then ends and we re-watch."""
    inactivity_timeout: float = 330.0
    """Client-side: a watch silent for this long is treated as dropped. Longer than
    ``timeout_seconds`` because a quiet kind may legitimately send nothing until the server ends
    the watch (bookmarks are not guaranteed)."""


class Backoff:
    """Capped exponential delays with jitter; ``reset`` after a success."""

    def __init__(self, settings: WatchSettings, rng: random.Random | None = None) -> None:
        self.settings = settings
        self._rng = rng if rng is not None else random.Random()
        self._failures = 0

    def next(self) -> float:
        s = self.settings
        base = min(s.backoff_max, s.backoff_initial * s.backoff_factor**self._failures)
        if base < s.backoff_max:
            self._failures += 1
        return base * (1.0 + s.jitter * self._rng.uniform(-1.0, 1.0)) if s.jitter else base

    def reset(self) -> None:
        self._failures = 0


@dataclass(frozen=True, slots=True)
class Resource:
    """One kind to reflect: ``Resource("ResourceSlice", "resource.k8s.io/v1", "resourceslices")``."""

    kind: str
    api_version: str
    plural: str
    field_selector: str | None = None

    @property
    def path(self) -> str:
        prefix = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        return f"{prefix}/{self.plural}"

    @property
    def name(self) -> str:
        """As RBAC and error messages spell it: ``resourceslices.resource.k8s.io``, ``pods``."""
        group = self.api_version.rpartition("/")[0]
        return f"{self.plural}.{group}" if group else self.plural


async def list_pages(
    client: KubeClient, resource: Resource, *, page_size: int = 500
) -> tuple[list[dict[str, Any]], str]:
    """Every object of ``resource`` by a paged LIST (``limit`` + ``continue``), each with the
    ``apiVersion`` and ``kind`` LIST items lack, and the list's resourceVersion."""
    items: list[dict[str, Any]] = []
    token = ""
    while True:
        params = {"limit": str(page_size)}
        if token:
            params["continue"] = token
        if resource.field_selector:
            params["fieldSelector"] = resource.field_selector
        page = await client.request("GET", resource.path, params=params, verb="list", resource=resource.name)
        for item in page.get("items") or ():
            # LIST items carry no kind/apiVersion; the store and the writers need them.
            item.setdefault("apiVersion", resource.api_version)
            item.setdefault("kind", resource.kind)
            items.append(item)
        meta = page.get("metadata") or {}
        token = meta.get("continue") or ""
        if not token:
            return items, str(meta.get("resourceVersion") or "")


class Sink(Protocol):
    """Where a reflector delivers objects (the backend's store feeder)."""

    def replace(self, kind: str, items: list[dict[str, Any]]) -> None: ...

    async def fill(self, kind: str, items: list[dict[str, Any]], pause: Callable[[], Awaitable[None]]) -> None: ...

    def apply(self, event: str, obj: dict[str, Any]) -> None: ...


async def iter_lines(chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    """Non-empty lines (without the newline) from arbitrary chunks, whatever their length."""
    buffer = bytearray()
    async for chunk in chunks:
        if not chunk:
            continue
        scan = len(buffer)  # only the new bytes can hold a newline we have not seen
        buffer += chunk
        start = 0
        while (end := buffer.find(b"\n", scan)) >= 0:
            line = bytes(buffer[start:end]).strip()
            if line:
                yield line
            start = scan = end + 1
        if start:
            del buffer[:start]
    tail = bytes(buffer).strip()
    if tail:
        yield tail


class _Stop(Exception):
    """max_cycles reached (tests only)."""


class Reflector:
    """Keeps one kind in ``sink``; see the module docstring. ``run()`` is meant for a named task."""

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        sink: Sink,
        *,
        settings: WatchSettings = WatchSettings(),
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        max_cycles: int | None = None,
        on_synced: Callable[[Reflector], None] | None = None,
        on_list_failed: Callable[[Reflector], None] | None = None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.sink = sink
        self.settings = settings
        self.max_cycles = max_cycles
        self._sleep = sleep
        self._clock = clock
        self._backoff = Backoff(settings, rng)
        self._on_synced = on_synced
        #: Called when a LIST fails, or a LIST or WATCH is refused (before the backoff's sleep).
        self._on_list_failed = on_list_failed
        #: True from the first complete LIST on (a re-list keeps serving the old, complete view).
        self.synced = False
        #: The last resourceVersion seen (list, event or bookmark): where a watch resumes.
        self.resource_version = ""
        #: LIST and WATCH requests started (what ``max_cycles`` bounds).
        self.cycles = 0
        self.lists = 0
        self.events = 0
        self.list_seconds = 0.0
        self._quiet_gones = 0
        #: Why the last LIST failed ("" once one succeeds): what /readyz says while not synced.
        self.problem = ""

    # --- the loop -------------------------------------------------------------------------------

    async def run(self) -> None:
        """List and watch until cancelled (or ``max_cycles``); a refused request is retried too
        (``_refused``). Other errors that are not transient propagate."""
        try:
            while True:
                try:
                    await self._list_then_watch()
                except Transient as exc:  # the LIST failed (5xx, 429, timeout, 410 twice)
                    self.problem = f"list {self.resource.name} failed, retrying: {exc.reason}"
                    if self._on_list_failed is not None:
                        self._on_list_failed(self)
                    delay = self._backoff.next()
                    log.warning(
                        "watch.list_failed", resource=self.resource.name, reason=exc.reason, retry_in_s=round(delay, 2)
                    )
                    await self._sleep(delay)
                except AccessDenied as exc:
                    await self._refused(exc)
        except _Stop:
            return

    async def _list_then_watch(self) -> None:
        self.resource_version = await self._list()
        while True:
            try:
                events = await self._watch(self.resource_version)
            except Gone as exc:
                log.info("watch.expired", resource=self.resource.name, rv=self.resource_version, reason=exc.reason)
                if self._quiet_gones >= 1:
                    # A second 410 with nothing in between: do not re-list in a tight loop.
                    await self._sleep(self._backoff.next())
                self._quiet_gones += 1
                return  # the caller re-lists
            except Transient as exc:
                delay = self._backoff.next()
                log.warning(
                    "watch.failed",
                    resource=self.resource.name,
                    rv=self.resource_version,
                    reason=exc.reason,
                    retry_in_s=round(delay, 2),
                )
                await self._sleep(delay)
                continue
            if events:
                self._backoff.reset()
            else:
                # Ended before delivering anything: do not reconnect in a tight loop.
                await self._sleep(self._backoff.next())

    async def _refused(self, exc: AccessDenied) -> None:
        """A LIST or WATCH answered 401/403. client-go's reflector retries those with backoff, and
        so does this one: RBAC applied after the Deployment, a token being rotated or an
        authenticating webhook that blinks must not need a restart. The kind counts as not synced
        until a LIST succeeds again (what it holds may be stale: no change reaches it), so filter
        answers "not synced" meanwhile and /readyz says why; the client logged the refusal, once
        per identity, verb and resource."""
        self.synced = False
        self.problem = f"{exc.reason}; retrying"
        if self._on_list_failed is not None:
            self._on_list_failed(self)
        delay = self._backoff.next()
        log.debug("watch.refused", resource=self.resource.name, reason=exc.reason, retry_in_s=round(delay, 2))
        await self._sleep(delay)

    def _next_cycle(self) -> None:
        if self.max_cycles is not None and self.cycles >= self.max_cycles:
            raise _Stop
        self.cycles += 1

    # --- LIST -----------------------------------------------------------------------------------

    async def _list(self) -> str:
        """Every object, page by page; hands them to the sink at once and returns the list's rv."""
        self._next_cycle()
        started = self._clock()
        try:
            items, version = await self._list_pages()
        except Gone:
            # The continue token expired between pages: start over, once.
            items, version = await self._list_pages()
        if not version:
            raise ApiUnavailable(f"list {self.resource.name}: the answer has no resourceVersion")
        if self.synced:  # a re-list: the store is answering requests, so all at once
            self.sink.replace(self.resource.kind, items)
        else:  # nothing is answered from this kind yet: let the event loop run as it fills
            await self.sink.fill(self.resource.kind, items, Pacer(FILL_SLICE_SECONDS))
        self.problem = ""
        self.lists += 1
        self.list_seconds = self._clock() - started
        self._backoff.reset()
        log.info(
            "watch.listed",
            resource=self.resource.name,
            items=len(items),
            rv=version,
            duration_ms=round(self.list_seconds * 1000, 1),
        )
        if not self.synced:
            self.synced = True
            if self._on_synced is not None:
                self._on_synced(self)
        return version

    async def _list_pages(self) -> tuple[list[dict[str, Any]], str]:
        return await list_pages(self.client, self.resource, page_size=self.settings.page_size)

    # --- WATCH ----------------------------------------------------------------------------------

    async def _watch(self, since: str) -> int:
        """One watch stream from ``since``; returns how many events it delivered."""
        self._next_cycle()
        params = {
            "watch": "true",
            "resourceVersion": since,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self.settings.timeout_seconds),
        }
        if self.resource.field_selector:
            params["fieldSelector"] = self.resource.field_selector
        delivered = 0
        async with self.client.stream(
            self.resource.path,
            params=params,
            verb="watch",
            resource=self.resource.name,
            inactivity_timeout=self.settings.inactivity_timeout,
        ) as response:
            try:
                async for line in iter_lines(response.content.iter_any()):
                    if self._handle(line):
                        delivered += 1
                        self._quiet_gones = 0
            except (TimeoutError, aiohttp.ClientError) as exc:
                # A dropped or silent stream is normal: the caller resumes from our rv.
                log.info(
                    "watch.dropped", resource=self.resource.name, rv=self.resource_version, error=type(exc).__name__
                )
        return delivered

    def _handle(self, line: bytes) -> bool:
        """Apply one event line; True when it was an event we understood (bookmarks count)."""
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ApiUnavailable(f"watch {self.resource.name}: an event is not JSON: {line[:80]!r}") from exc
        kind = event.get("type") if isinstance(event, dict) else None
        obj = event.get("object") if isinstance(event, dict) else None
        if not isinstance(obj, dict):
            obj = {}
        if kind == "ERROR":
            code = obj.get("code")
            self.client.fail(
                code if isinstance(code, int) else 500,
                str(obj.get("message") or obj.get("reason") or "watch error"),
                obj,
                verb="watch",
                resource=self.resource.name,
            )
        if kind not in _OBJECT_EVENTS and kind != "BOOKMARK":
            log.warning("watch.unknown_event", resource=self.resource.name, type=str(kind))
            return False
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind != "BOOKMARK":
            obj.setdefault("apiVersion", self.resource.api_version)
            obj.setdefault("kind", self.resource.kind)
            self.sink.apply(str(kind), obj)
            self.events += 1
        if version:
            self.resource_version = str(version)
        return True
