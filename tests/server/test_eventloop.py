"""The server's event loop choice: uvloop where installed, asyncio's loop when asked or as the
fallback, and clear errors otherwise."""

from __future__ import annotations

import asyncio
import sys

import pytest

from extender.server.eventloop import EVENT_LOOPS, event_loop_name, new_event_loop
from extender.server.settings import ServerSettings

uvloop = pytest.importorskip("uvloop")


def _close(pair: tuple[asyncio.AbstractEventLoop, str]) -> tuple[type, str]:
    loop, name = pair
    try:
        return type(loop), name
    finally:
        loop.close()


def test_auto_prefers_uvloop() -> None:
    assert _close(new_event_loop("auto")) == (uvloop.Loop, "uvloop")
    assert _close(new_event_loop("uvloop")) == (uvloop.Loop, "uvloop")


def test_asyncio_is_asyncios_own_loop() -> None:
    kind, name = _close(new_event_loop("asyncio"))
    assert name == "asyncio" and not issubclass(kind, uvloop.Loop)
    assert issubclass(kind, asyncio.BaseEventLoop)


def test_without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    assert event_loop_name("auto") == "asyncio"
    assert _close(new_event_loop("auto"))[1] == "asyncio"
    with pytest.raises(ValueError, match="event loop uvloop is not available"):
        new_event_loop("uvloop")


def test_unknown_choice() -> None:
    with pytest.raises(ValueError, match="event loop must be one of auto, uvloop, asyncio, not 'trio'"):
        event_loop_name("trio")
    with pytest.raises(ValueError, match="event loop must be one of"):
        ServerSettings(event_loop="trio")
    assert [ServerSettings(event_loop=choice).event_loop for choice in EVENT_LOOPS] == list(EVENT_LOOPS)


def test_an_app_serves_on_uvloop() -> None:
    """The handlers and middleware run unchanged on uvloop (the test suite's own loop is asyncio's)."""
    from aiohttp.test_utils import TestClient, TestServer

    from extender.backends.embedded import EmbeddedBackend
    from extender.server.app import create_app
    from extender.state.service import SchedulingService

    async def scenario() -> tuple[int, object]:
        service = SchedulingService(backend=EmbeddedBackend([]))
        async with TestClient(TestServer(create_app(service))) as client:
            response = await client.post("/filter", json={"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["n1"]})
            return response.status, await response.json()

    loop, _ = new_event_loop("uvloop")
    try:
        status, answer = loop.run_until_complete(scenario())
    finally:
        loop.close()
    assert status == 200
    assert answer == {
        "Nodes": None,
        "NodeNames": ["n1"],
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }
