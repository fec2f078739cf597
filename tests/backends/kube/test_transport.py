"""HttpPool (extender/backends/kube/transport.py) against a scripted HTTP/1.1 server: length and
chunked answers, connections reused, closed ones replaced, an idle connection closed by the
server retried for PUT and never for POST, malformed answers, timeouts, TLS, and KubeClient's
error mapping on top of it."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from extender.backends.kube import ClusterConfig
from extender.backends.kube.client import KubeClient
from extender.backends.kube.transport import ConnectionLost, HttpPool
from extender.core.errors import ApiUnavailable, WriteConflict

Answer = Callable[[bytes, int], Awaitable[bytes | None]]  # request head, index -> raw answer or None (close)


class Scripted:
    """A server that answers each request with ``answer(head, n)``; counts connections."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length) if length else b""
                self.requests.append(head + body)
                raw = await self.answer(head, len(self.requests) - 1)
                if raw is None:
                    break
                writer.write(raw)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @property
    def port(self) -> int:
        assert self.server is not None
        port: int = self.server.sockets[0].getsockname()[1]
        return port


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[Scripted]]]:
    servers: list[Scripted] = []

    async def start(answer: Answer, *, tls: ssl.SSLContext | None = None) -> Scripted:
        scripted = Scripted(answer)
        scripted.server = await asyncio.start_server(scripted.handle, "127.0.0.1", 0, ssl=tls)
        servers.append(scripted)
        return scripted

    yield start
    for s in servers:
        assert s.server is not None
        s.server.close()


def length_answer(body: bytes, status: int = 200, extra: str = "") -> bytes:
    head = f"HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    return head.encode() + body


def chunked_answer(parts: list[bytes]) -> bytes:
    out = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    for part in parts:
        out += f"{len(part):x}\r\n".encode() + part + b"\r\n"
    return out + b"0\r\n\r\n"


async def test_length_and_chunked_answers_on_one_reused_connection(serve: Callable[..., Awaitable[Scripted]]) -> None:
    async def answer(head: bytes, n: int) -> bytes:
        return length_answer(b'{"n": 0}') if n % 2 == 0 else chunked_answer([b'{"n"', b": ", b"1}"])

    server = await serve(answer)
    pool = HttpPool(f"http://127.0.0.1:{server.port}")
    try:
        bodies = [(await pool.request("GET", f"/x?i={i}", {}, None, timeout=30)).body for i in range(4)]
    finally:
        pool.close()
    assert bodies == [b'{"n": 0}', b'{"n": 1}', b'{"n": 0}', b'{"n": 1}']
    assert server.connections == 1
    assert server.requests[0].startswith(b"GET /x?i=0 HTTP/1.1\r\nHost: 127.0.0.1:")


async def test_connection_close_answers_open_a_new_connection(serve: Callable[..., Awaitable[Scripted]]) -> None:
    async def answer(head: bytes, n: int) -> bytes:
        return length_answer(b"{}", extra="Connection: close\r\n")

    server = await serve(answer)
    pool = HttpPool(f"http://127.0.0.1:{server.port}")
    try:
        for _ in range(3):
            assert (await pool.request("PUT", "/x", {}, b"{}", timeout=30)).status == 200
    finally:
        pool.close()
    assert server.connections == 3


async def test_a_reused_connection_closed_unanswered_is_retried_for_get_never_for_writes(
    serve: Callable[..., Awaitable[Scripted]],
) -> None:
    async def answer(head: bytes, n: int) -> bytes | None:
        return None if n in (1, 4, 6) else length_answer(b"{}")  # these requests find the connection closing

    server = await serve(answer)
    pool = HttpPool(f"http://127.0.0.1:{server.port}")
    try:
        await pool.request("GET", "/a", {}, None, timeout=30)  # 0
        assert (await pool.request("GET", "/b", {}, None, timeout=30)).status == 200  # 1 lost, sent again as 2
        assert server.connections == 2 and len(server.requests) == 3
        await pool.request("GET", "/c", {}, None, timeout=30)  # 3
        for method in ("PUT", "POST"):  # 4 and 6: whether they were acted on is unknown
            with pytest.raises(ConnectionLost):
                await pool.request(method, "/d", {}, b"{}", timeout=30)
            await pool.request("GET", "/e", {}, None, timeout=30)  # on a new connection: 5 and 7
        assert len(server.requests) == 8 and server.connections == 4
    finally:
        pool.close()


async def test_malformed_answers_and_timeouts(serve: Callable[..., Awaitable[Scripted]]) -> None:
    never = asyncio.Event()  # "/slow" is answered only after the test: its timeout races nothing

    async def answer(head: bytes, n: int) -> bytes | None:
        if b"/garbage" in head:
            return b"this is not HTTP\r\n\r\n"
        await never.wait()
        return length_answer(b"{}")

    server = await serve(answer)
    pool = HttpPool(f"http://127.0.0.1:{server.port}")
    try:
        with pytest.raises(ConnectionLost, match="malformed"):
            await pool.request("GET", "/garbage", {}, None, timeout=30)
        with pytest.raises(TimeoutError):
            await pool.request("GET", "/slow", {}, None, timeout=0.2)
    finally:
        never.set()
        pool.close()


async def test_kube_client_maps_transport_failures(serve: Callable[..., Awaitable[Scripted]]) -> None:
    async def answer(head: bytes, n: int) -> bytes | None:
        if b"/conflict" in head:
            body = (
                b'{"kind":"Status","apiVersion":"v1","status":"Failure",'
                b'"message":"the object has been modified","reason":"Conflict","code":409}'
            )
            return length_answer(body, 409)
        if b"/close" in head:
            return None
        return length_answer(b"[1, 2]")

    server = await serve(answer)
    client = KubeClient(ClusterConfig(host=f"http://127.0.0.1:{server.port}"))
    try:
        with pytest.raises(WriteConflict, match="modified"):
            await client.request("PUT", "/conflict", body={}, verb="update", resource="things")
        with pytest.raises(ApiUnavailable, match=r"get things: .*closed"):
            await client.request("GET", "/close", verb="get", resource="things")
        with pytest.raises(ApiUnavailable, match="not a JSON object"):
            await client.request("GET", "/list", verb="get", resource="things")
        with pytest.raises(ApiUnavailable, match="list things"):
            unreachable = KubeClient(ClusterConfig(host="http://127.0.0.1:1"))
            await unreachable.request("GET", "/", verb="list", resource="things")
        assert b"User-Agent: dra-extender" in server.requests[0]
        assert b"Content-Type: application/json" in server.requests[0]
    finally:
        await client.close()


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


async def test_https_with_the_cluster_ca(serve: Callable[..., Awaitable[Scripted]], tmp_path: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("openssl command not available")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=apiserver",
             "-addext", "subjectAltName=DNS:kubernetes.default.svc", "-keyout", "key.pem", "-out", "cert.pem",
             cwd=tmp_path)  # fmt: skip
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(str(tmp_path / "cert.pem"), str(tmp_path / "key.pem"))

    async def answer(head: bytes, n: int) -> bytes:
        return length_answer(b'{"ok": true}')

    server = await serve(answer, tls=tls)
    config = ClusterConfig(
        host=f"https://127.0.0.1:{server.port}",
        ca_file=str(tmp_path / "cert.pem"),
        tls_server_name="kubernetes.default.svc",
    )
    client = KubeClient(config)
    try:
        assert await client.request("GET", "/version", verb="get", resource="/version") == {"ok": True}
    finally:
        await client.close()
    wrong = KubeClient(ClusterConfig(host=f"https://127.0.0.1:{server.port}", ca_file=str(tmp_path / "cert.pem")))
    try:
        with pytest.raises(ApiUnavailable):  # the certificate does not name 127.0.0.1
            await wrong.request("GET", "/version", verb="get", resource="/version")
    finally:
        await wrong.close()
