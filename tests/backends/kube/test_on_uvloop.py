"""The Kubernetes backend on uvloop, the server's default event loop where it is installed
(``extender.server.eventloop``): a sync, a full bind and a clean stop against the fake API server,
on a loop of uvloop's own. The rest of the suite runs on asyncio's loop."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from extender.server.eventloop import new_event_loop
from extender.state.service import DELETE_PROTECTION_FINALIZER, SchedulingService
from tests import manifests as m
from tests.backends.kube.test_backend import claim_in_fake, node_of, started, writes
from tests.fakes import FakeApiServer

uvloop = pytest.importorskip("uvloop")


def test_sync_bind_and_stop_on_uvloop() -> None:
    async def scenario() -> None:
        assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
        fake = FakeApiServer(bookmark_interval=None)
        servers: list[TestServer] = []

        async def serve(app: Any) -> TestServer:
            server = TestServer(app)
            await server.start_server()
            servers.append(server)
            return server

        await fake.serve_with(serve)
        try:
            backend = await started(fake, *m.cluster(m.claim("c1"), m.pod("p1", "c1")))
            try:
                service = SchedulingService(backend=backend)
                assert service.filter(m.pod("p1", "c1"), ["node-1", "node-2"]).node_names == ["node-1", "node-2"]
                fake.clear_requests()
                await service.bind("default", "p1", "uid-p1", "node-2")
                assert writes(fake) == ["PUT c1", "PUT c1/status", "POST p1/binding"]
                assert claim_in_fake(fake, "c1")["metadata"]["finalizers"] == [DELETE_PROTECTION_FINALIZER]
                assert node_of(fake, "p1") == "node-2"
            finally:
                await backend.stop()
        finally:
            for server in servers:
                await server.close()

    loop, name = new_event_loop("uvloop")
    try:
        assert name == "uvloop"
        loop.run_until_complete(scenario())
    finally:
        loop.close()
