"""Fixtures of the kube backend's tests: the strict fake API server, served on loopback."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes import FakeApiServer


@pytest.fixture
async def fake(aiohttp_server: Any) -> FakeApiServer:
    server = FakeApiServer(bookmark_interval=None)
    await server.serve_with(aiohttp_server)
    return server
