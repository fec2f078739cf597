"""Fixtures for the fake apiserver's own tests: a served fake and an HTTP session to it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from .apiserver import FakeApiServer


@pytest.fixture
async def fake(aiohttp_server: Any) -> FakeApiServer:
    server = FakeApiServer(bookmark_interval=None)
    await server.serve_with(aiohttp_server)
    return server


@pytest.fixture
async def http(fake: FakeApiServer) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(fake.url) as session:
        yield session
