"""One open WATCH stream of the fake apiserver: the queue its events arrive on and the loop that
writes them as newline-delimited JSON (one chunk per event, as the apiserver flushes them).

Events come from the storage's change listener (already filtered and in resourceVersion order)
and from control messages: a bookmark, a clean close (end of the chunked body, as when
``timeoutSeconds`` expires) or an abrupt drop (the TCP connection closed mid-stream, as a network
cut or an apiserver crash looks to the client).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from .resources import ResourceType
from .status import ApiError

__all__ = ["WatchStream"]

#: Messages on a watch queue: ("event", TYPE, obj) | ("bookmark", annotations, rv) | ("close",) | ("drop",)
Message = tuple[Any, ...]


@dataclass(eq=False)
class WatchStream:
    """An open watch: what it watches and how it ends. ``serve`` converts objects to the URL's
    version (raising ApiError when it cannot, which ends the stream with an ERROR event)."""

    request: web.Request
    rt: ResourceType
    version: str
    namespace: str
    bookmarks: bool
    serve: Callable[[dict[str, Any]], dict[str, Any]]
    current_rv: Callable[[], int]
    #: Close the connection abruptly after this many object events (None: never).
    drop_after: int | None = None
    queue: asyncio.Queue[Message] = field(default_factory=asyncio.Queue)
    sent: int = 0
    response: web.StreamResponse | None = None

    def matches(self, resource: str | None) -> bool:
        return resource is None or resource in (self.rt.plural, self.rt.qualified)

    async def start(self) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(self.request)
        self.response = response
        return response

    async def write(self, event_type: str, obj: dict[str, Any]) -> None:
        assert self.response is not None
        await self.response.write(orjson.dumps({"type": event_type, "object": obj}) + b"\n")

    async def write_error(self, error: ApiError) -> None:
        await self.write("ERROR", error.body)

    async def bookmark(self, rv: int, annotations: dict[str, str] | None = None) -> None:
        """A BOOKMARK at ``rv``, which must not be ahead of any event still to be written (a
        client resuming from it would miss that event): callers take it when they enqueue."""
        metadata: dict[str, Any] = {"resourceVersion": str(rv)}
        if annotations:
            metadata["annotations"] = annotations
        await self.write(
            "BOOKMARK", {"kind": self.rt.kind, "apiVersion": self.rt.api_version(self.version), "metadata": metadata}
        )

    async def send_object(self, event_type: str, obj: dict[str, Any]) -> bool:
        """Write one object event; False when the stream must end (conversion failure or an
        injected drop)."""
        try:
            served = self.serve(obj)
        except ApiError as error:
            await self.write_error(error)
            return False
        await self.write(event_type, served)
        self.sent += 1
        if self.drop_after is not None and self.sent >= self.drop_after:
            self.abort()
            return False
        return True

    def abort(self) -> None:
        """Cut the TCP connection without ending the chunked body."""
        transport = self.request.transport
        if transport is not None:
            transport.close()

    async def run(self, *, deadline: float | None, bookmark_interval: float | None) -> None:
        """Write queued messages until a close, a drop, the deadline or a dead connection."""
        loop = asyncio.get_running_loop()
        next_bookmark = loop.time() + bookmark_interval if self.bookmarks and bookmark_interval else None
        while True:
            wake = min((t for t in (deadline, next_bookmark) if t is not None), default=None)
            try:
                if wake is None:
                    message = await self.queue.get()
                else:
                    message = await asyncio.wait_for(self.queue.get(), max(0.0, wake - loop.time()))
            except TimeoutError:
                if deadline is not None and loop.time() >= deadline:
                    break
                # The queue is empty, so every change up to now has been written (or filtered out).
                await self.bookmark(self.current_rv())
                next_bookmark = loop.time() + (bookmark_interval or 0.0)
                continue
            if message[0] == "event":
                if not await self.send_object(message[1], message[2]):
                    return
            elif message[0] == "bookmark":
                if self.bookmarks:
                    await self.bookmark(message[2], message[1])
            elif message[0] == "drop":
                self.abort()
                return
            else:
                break
        assert self.response is not None
        with contextlib.suppress(ConnectionError):
            await self.response.write_eof()
