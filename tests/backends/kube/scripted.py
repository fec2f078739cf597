"""A scripted list/watch endpoint for reflector tests (not the strict fake API server).

Each LIST answers the next queued page (or an HTTP status); each WATCH plays the next queued
script: event dicts become one JSON line each, ``Raw`` bytes go out as given, ``Close`` ends the
stream abruptly, ``Hang`` keeps it open silently, ``Fail(code)`` answers the watch request with
that HTTP status before streaming. Every request's query is recorded. When the scripts run out,
LIST answers 500 and WATCH hangs, so a test bounded by ``max_cycles`` never spins.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

__all__ = ["Close", "Fail", "Hang", "Raw", "ScriptedApi", "status"]


@dataclass(frozen=True)
class Close:
    """Cut the stream (no terminating chunk)."""


@dataclass(frozen=True)
class Hang:
    seconds: float = 3600.0


@dataclass(frozen=True)
class Raw:
    data: bytes


@dataclass(frozen=True)
class Fail:
    code: int
    message: str = "injected"


def status(code: int, message: str = "injected", reason: str = "") -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "message": message,
        "reason": reason,
    }


@dataclass
class ScriptedApi:
    lists: list[dict[str, Any] | Fail] = field(default_factory=list)
    watches: list[list[Any]] = field(default_factory=list)
    requests: list[dict[str, str]] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v1/{plural}", self.handle)
        app.router.add_get("/apis/{group}/{version}/{plural}", self.handle)
        return app

    def page(self, items: list[dict[str, Any]], rv: str, cont: str = "") -> dict[str, Any]:
        meta = {"resourceVersion": rv, **({"continue": cont} if cont else {})}
        return {"kind": "List", "apiVersion": "v1", "metadata": meta, "items": items}

    async def handle(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        self.requests.append(query)
        if query.get("watch") not in ("true", "1"):
            answer = self.lists.pop(0) if self.lists else Fail(500, "no list scripted")
            if isinstance(answer, Fail):
                return web.json_response(status(answer.code, answer.message), status=answer.code)
            return web.Response(body=orjson.dumps(answer), content_type="application/json")
        script = self.watches.pop(0) if self.watches else [Hang()]
        if script and isinstance(script[0], Fail):
            return web.json_response(status(script[0].code, script[0].message), status=script[0].code)
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        response.content_type = "application/json"
        await response.prepare(request)
        for item in script:
            if isinstance(item, Close):
                assert request.transport is not None
                request.transport.close()
                return response
            if isinstance(item, Hang):
                await asyncio.sleep(item.seconds)
                continue
            data = item.data if isinstance(item, Raw) else orjson.dumps(item) + b"\n"
            await response.write(data)
        await response.write_eof()
        return response
