"""A keep-alive HTTP/1.1 connection pool for the API server's ordinary (non-watch) requests.

Every bound pod costs three API writes, all on the path that decides how fast pods are scheduled.
aiohttp's client spends about 0.45 ms of CPU per request on this 2-CPU machine (URL objects,
request and response objects, timers, tracing hooks); the same request through an asyncio
protocol and ``httptools`` (llhttp, the C parser uvicorn and uvloop's authors maintain) costs about
a third of that (docs/pipeline.md). So ``request()`` goes through ``HttpPool``; watches keep
aiohttp's streaming client (``KubeClient.stream``), where the per-request cost does not matter.

What the pool does, and no more: one host (http or https, with the cluster's TLS context and
server name), a bounded number of connections reused LIFO, ``Content-Length`` and chunked
responses (the parser's work), a total timeout per request, and one retry on a fresh connection
when a reused one turns out closed (the server's keep-alive timeout raced our request): for any
request not written yet, and, once written, only for GET and HEAD before any byte of the answer
came (as Go's net/http). A write is never sent twice: whether the server acted on it is unknown,
and the caller decides. No redirects, no proxies (as
the aiohttp session it sits beside, which does not read the proxy environment either), no
compression (nothing asks for it).
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

import httptools

from extender.tlsverify import as_kubernetes_verifies

__all__ = ["ConnectionLost", "HttpPool", "Response"]

#: Methods sent again after a reused connection closed on them before answering (safe methods:
#: the server changed nothing whatever it did with the first one).
_RESEND = frozenset({"GET", "HEAD"})


class ConnectionLost(ConnectionError):
    """The connection closed (or the answer was malformed) before a whole answer arrived."""

    def __init__(self, message: str, *, answered: bool, sent: bool = True) -> None:
        super().__init__(message)
        #: Whether any byte of an answer had arrived (then the request is not sent again).
        self.answered = answered
        #: Whether the request had been written at all.
        self.sent = sent


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes


class _Connection(asyncio.Protocol):
    """One connection: write a request, parse one answer at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[tuple[int, bytes, bool]] | None = None
        self._chunks: list[bytes] = []
        self._answered = False

    # --- asyncio.Protocol -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's are not asyncio.Transport

    def data_received(self, data: bytes) -> None:
        self._answered = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ConnectionLost(f"malformed answer: {exc}", answered=True))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        reason = f"connection closed: {exc}" if exc else "connection closed by the server"
        self._fail(ConnectionLost(reason, answered=self._answered))

    # --- httptools callbacks --------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._chunks = []

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)

    def on_message_complete(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            status = self._parser.get_status_code()
            waiter.set_result((status, b"".join(self._chunks), self._parser.should_keep_alive()))
        self._chunks = []

    # --- use ------------------------------------------------------------------------------------

    def _fail(self, error: ConnectionLost) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    async def exchange(self, request: bytes) -> tuple[int, bytes, bool]:
        """(status, body, keep-alive) for one request."""
        if self.closed or self.transport is None or self.transport.is_closing():
            raise ConnectionLost("connection closed before the request", answered=False, sent=False)
        self._answered = False
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        try:
            return await self._waiter
        finally:
            self._waiter = None

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class HttpPool:
    """Connections to the server at ``base_url``; ``await request(...)`` returns a ``Response``."""

    def __init__(
        self,
        base_url: str,
        *,
        ssl_context: ssl.SSLContext | bool = False,
        server_hostname: str | None = None,
        limit: int = 100,
        connect_timeout: float = 10.0,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        default_port = self.port == (443 if parts.scheme == "https" else 80)
        host_header = f"[{self.host}]" if ":" in self.host else self.host
        self._host_header = (host_header if default_port else f"{host_header}:{self.port}").encode()
        if parts.scheme == "https":
            self._ssl: ssl.SSLContext | None = (
                ssl_context
                if isinstance(ssl_context, ssl.SSLContext)
                else as_kubernetes_verifies(ssl.create_default_context())
            )
        else:
            self._ssl = None
        self._server_hostname = server_hostname
        self._connect_timeout = connect_timeout
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()
        self._slots = asyncio.Semaphore(limit)

    async def request(
        self, method: str, target: str, headers: dict[str, str], body: bytes | None, *, timeout: float
    ) -> Response:
        """One request: ``target`` is the path with its query; raises ``ConnectionLost``,
        ``TimeoutError`` or ``OSError`` (connect) when no whole answer came."""
        lines = [f"{method} {self.prefix}{target} HTTP/1.1".encode(), b"Host: " + self._host_header]
        lines.extend(f"{name}: {value}".encode() for name, value in headers.items())
        if body is not None:
            lines.append(b"Content-Length: " + str(len(body)).encode())
        data = b"\r\n".join(lines) + b"\r\n\r\n" + (body or b"")
        async with asyncio.timeout(timeout), self._slots:
            for attempt in range(2):
                connection, reused = await self._connection(fresh=attempt > 0)
                try:
                    status, payload, keep_alive = await connection.exchange(data)
                except ConnectionLost as exc:
                    self._discard(connection)
                    resend = not exc.sent or (not exc.answered and method in _RESEND)
                    if reused and attempt == 0 and resend:
                        continue  # the server closed an idle connection as we reused it
                    raise
                except BaseException:
                    self._discard(connection)  # a timeout or cancellation mid-answer
                    raise
                if keep_alive and not connection.closed:
                    self._idle.append(connection)
                else:
                    self._discard(connection)
                return Response(status, payload)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _connection(self, *, fresh: bool = False) -> tuple[_Connection, bool]:
        while self._idle and not fresh:
            connection = self._idle.pop()
            if not connection.closed:
                return connection, True
            self._open.discard(connection)
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self._connect_timeout):
            _, protocol = await loop.create_connection(
                _Connection,
                self.host,
                self.port,
                ssl=self._ssl,
                server_hostname=(self._server_hostname or self.host) if self._ssl is not None else None,
            )
        self._open.add(protocol)
        return protocol, False

    def _discard(self, connection: _Connection) -> None:
        connection.close()
        self._open.discard(connection)

    def close(self) -> None:
        for connection in self._open:
            connection.close()
        self._open.clear()
        self._idle.clear()
