"""A small HTTP/1.1 client for the service benchmark: keep-alive connections over asyncio streams.

kube-scheduler talks to an extender through Go's net/http, which costs it well under 0.1 ms of
CPU per request. aiohttp's client costs about 0.5 ms per request on the 2-CPU benchmark machine,
and the client shares those two CPUs with the server under test, so with aiohttp the benchmark
mostly measured itself at high rates. This client does only what the benchmark needs: POST or GET
with a body of bytes, responses with ``Content-Length`` (what aiohttp's server sends for
``web.Response``), a pool of persistent connections for concurrent requests. Anything else (chunked
bodies, redirects, TLS, a closed connection) is an error or a reconnect, never silently ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType

__all__ = ["HttpError", "LeanClient"]


class HttpError(Exception):
    """The server answered something this client does not handle, or the connection broke."""


_Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class LeanClient:
    """``async with LeanClient(host, port, size) as client: status, body = await client.post(...)``."""

    def __init__(self, host: str, port: int, size: int = 4) -> None:
        self.host = host
        self.port = port
        self.size = size
        self._idle: asyncio.LifoQueue[_Connection] = asyncio.LifoQueue()
        self._open: list[_Connection] = []
        self._slots = asyncio.Semaphore(size)
        self._host_header = f"Host: {host}:{port}\r\n".encode()

    async def __aenter__(self) -> LeanClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        for _, writer in self._open:
            writer.close()
        for _, writer in self._open:
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        self._open.clear()

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        return await self.request("POST", path, body)

    async def get(self, path: str) -> tuple[int, bytes]:
        return await self.request("GET", path, b"")

    async def request(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        head = (
            f"{method} {path} HTTP/1.1\r\n".encode()
            + self._host_header
            + b"Content-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
        )
        async with self._slots:
            connection = await self._connection()
            try:
                status, payload, keep_alive = await self._exchange(connection, head + body)
            except BaseException:
                self._discard(connection)
                raise
            if keep_alive:
                self._idle.put_nowait(connection)
            else:
                self._discard(connection)
            return status, payload

    async def _connection(self) -> _Connection:
        if not self._idle.empty():
            return self._idle.get_nowait()
        connection = await asyncio.open_connection(self.host, self.port)
        self._open.append(connection)
        return connection

    def _discard(self, connection: _Connection) -> None:
        connection[1].close()
        if connection in self._open:
            self._open.remove(connection)

    @staticmethod
    async def _exchange(connection: _Connection, request: bytes) -> tuple[int, bytes, bool]:
        reader, writer = connection
        writer.write(request)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            raise HttpError(f"connection closed before an answer: {exc}") from exc
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise HttpError(f"not an HTTP/1.x status line: {lines[0]!r}")
        status = int(parts[1])
        length: int | None = None
        keep_alive = True
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection":
                keep_alive = value.strip().lower() != b"close"
            elif name == b"transfer-encoding":
                raise HttpError(f"unsupported Transfer-Encoding: {value.strip()!r}")
        if length is None:
            raise HttpError("answer without Content-Length")
        try:
            payload = await reader.readexactly(length)
        except asyncio.IncompleteReadError as exc:
            raise HttpError("connection closed in the middle of an answer") from exc
        return status, payload, keep_alive
