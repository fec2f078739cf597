"""bench/http_client.py: the benchmark's lean HTTP/1.1 client against a real aiohttp server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from bench.http_client import HttpError, LeanClient


async def _echo(request: web.Request) -> web.Response:
    body = await request.read()
    return web.Response(body=body.upper(), status=201 if body else 200)


async def _closing(request: web.Request) -> web.Response:
    return web.Response(body=b"bye", headers={"Connection": "close"})


async def _chunked(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    response.enable_chunked_encoding()
    await response.prepare(request)
    await response.write(b"part")
    await response.write_eof()
    return response


async def _slow(request: web.Request) -> web.Response:
    await asyncio.sleep(0.05)
    return web.Response(body=b"done")


@pytest.fixture
async def server() -> AsyncIterator[TestServer]:
    app = web.Application()
    app.router.add_post("/echo", _echo)
    app.router.add_get("/echo", _echo)
    app.router.add_get("/closing", _closing)
    app.router.add_get("/chunked", _chunked)
    app.router.add_get("/slow", _slow)
    test_server = TestServer(app, host="127.0.0.1")
    await test_server.start_server()
    yield test_server
    await test_server.close()


async def test_requests_share_keep_alive_connections(server: TestServer) -> None:
    async with LeanClient("127.0.0.1", server.port, size=2) as client:
        assert await client.post("/echo", b"abc") == (201, b"ABC")
        assert await client.get("/echo") == (200, b"")
        assert await client.post("/missing", b"x") == (404, b"404: Not Found")
        assert len(client._open) == 1  # one connection served all three


async def test_concurrent_requests_use_at_most_size_connections(server: TestServer) -> None:
    async with LeanClient("127.0.0.1", server.port, size=3) as client:
        answers = await asyncio.gather(*(client.get("/slow") for _ in range(7)))
        assert answers == [(200, b"done")] * 7
        assert len(client._open) <= 3


async def test_a_connection_the_server_closes_is_not_reused(server: TestServer) -> None:
    async with LeanClient("127.0.0.1", server.port, size=1) as client:
        assert await client.get("/closing") == (200, b"bye")
        assert client._open == []
        assert await client.post("/echo", b"again") == (201, b"AGAIN")


async def test_an_answer_it_cannot_read_is_an_error_and_drops_the_connection(server: TestServer) -> None:
    async with LeanClient("127.0.0.1", server.port, size=1) as client:
        with pytest.raises(HttpError, match="Transfer-Encoding"):
            await client.get("/chunked")
        assert client._open == []
        assert await client.post("/echo", b"ok") == (201, b"OK")
