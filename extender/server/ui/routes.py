"""HTTP of the device map (docs/ui.md): the page, its static files, the JSON endpoints and the
server-sent events that say when to fetch them again.

Routes, under the path prefix:

- ``GET ui`` -> 302 to ``ui/``; ``GET ui/`` -> ``static/index.html``; ``GET ui/static/{name}`` ->
  a file of ``static/`` (a plain file name only: no directories, no dot files);
- ``GET ui/api/summary``, ``ui/api/nodes``, ``ui/api/nodes/{node}``, ``ui/api/pools``,
  ``ui/api/pending``: JSON from ``extender.views.devicemap.DeviceMap``; a bad query value is 400
  ``{"error": ...}`` naming it, an unknown node 404;
- ``GET ui/api/events``: ``text/event-stream``, the revision when it opens and whenever it changes.

The event stream reads the map's revision on a timer (a few attribute reads: cheap) rather than
doing any work per change; each open stream ends when its client goes away or the app shuts down
(``on_shutdown``), so that a browser left open never holds the server's stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import structlog
from aiohttp import web

from extender.server.keys import SERVICE, VIEWS
from extender.server.middleware import json_body_response, json_error, json_response
from extender.server.wire import BadRequest
from extender.views.devicemap import MAX_PAGE, DeviceMap, NodeFilter, UnknownDeviceClass

__all__ = ["STATIC_DIR", "UI", "UiState", "add_routes"]

log = structlog.get_logger()

#: The page's files (written by hand, no build step), shipped as package data.
STATIC_DIR = Path(__file__).resolve().parent / "static"
_CONTENT_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".css": "text/css",
    ".json": "application/json",
    ".map": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".txt": "text/plain",
}
_TEXT = frozenset({".html", ".js", ".mjs", ".css", ".json", ".map", ".svg", ".txt"})
#: A static file's name: letters, digits, dots, dashes and underscores, not starting with a dot.
_STATIC_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$")
_NO_CACHE = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}


@dataclass(slots=True, eq=False)
class UiState:
    """What the device map's handlers share: the read model (made at its first use, from the
    store as it is then: an app whose map is never asked for pays nothing), the open event streams
    (each one's stop signal), and the stream's timing (tests shorten it)."""

    make_map: Callable[[], DeviceMap]
    static_dir: Path = STATIC_DIR
    #: How often a stream looks at the revision: also the least time between two events.
    tick_seconds: float = 0.25
    keepalive_seconds: float = 15.0
    #: Awaited by a stream for its next tick instead of ``tick_seconds`` (it gets the stream's stop
    #: signal); tests drive the streams with it, one tick when they say.
    ticks: Callable[[asyncio.Event], Awaitable[object]] | None = None
    #: Monotonic seconds for the keepalive.
    clock: Callable[[], float] = time.monotonic
    streams: set[asyncio.Event] = field(default_factory=set)
    #: The pools' JSON per list object of the map (kept with the object, so its id stays its own).
    encoded_pools: dict[int, tuple[object, bytes]] = field(default_factory=dict)
    made: DeviceMap | None = None

    @property
    def device_map(self) -> DeviceMap:
        if self.made is None:
            self.made = self.make_map()
        return self.made


UI = web.AppKey("ui", UiState)


def add_routes(app: web.Application, prefix: str) -> None:
    """Register the device map's routes under ``prefix`` (normalised: ends with ``/``)."""
    service = app[SERVICE]

    def preemptions() -> dict[str, int]:
        return {"preemptions": service.preemption.stats.preemptions.get("started", 0)}

    app[UI] = UiState(
        lambda: DeviceMap(
            service.cluster, service.stats, app[VIEWS], extra_counters=preemptions, rejected=service.rejected
        )
    )
    router = app.router
    router.add_get(f"{prefix}ui", redirect_to_page, name="ui_redirect")
    router.add_get(f"{prefix}ui/", page, name="ui_page")
    router.add_get(f"{prefix}ui/static/{{name}}", static_file, name="ui_static")
    router.add_get(f"{prefix}ui/api/summary", summary, name="ui_summary")
    router.add_get(f"{prefix}ui/api/nodes", nodes, name="ui_nodes")
    router.add_get(f"{prefix}ui/api/nodes/{{node}}", node, name="ui_node")
    router.add_get(f"{prefix}ui/api/pools", pools, name="ui_pools")
    router.add_get(f"{prefix}ui/api/pending", pending, name="ui_pending")
    router.add_get(f"{prefix}ui/api/events", events, name="ui_events")
    app.on_shutdown.append(_on_shutdown)


# --- the page and its files -------------------------------------------------------------------------


async def redirect_to_page(request: web.Request) -> web.StreamResponse:
    """``ui`` -> ``ui/``: the page's relative links (``static/app.js``, ``api/...``) need the slash."""
    location = request.rel_url.path + "/"
    if request.rel_url.query_string:
        location += "?" + request.rel_url.query_string
    raise web.HTTPFound(location)


async def page(request: web.Request) -> web.Response:
    return _file(request.app[UI].static_dir, "index.html")


async def static_file(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if not _STATIC_NAME.match(name) or ".." in name:
        return json_error(404, f"no such file: {name!r} (the device map's files have plain names)")
    return _file(request.app[UI].static_dir, name)


def _file(directory: Path, name: str) -> web.Response:
    """A file of the static directory, or 404 naming what is missing. The path is resolved and must
    stay inside the directory (no link or name leads out of it)."""
    root = directory.resolve()
    path = (root / name).resolve()
    if path.parent != root or not path.is_file():
        if name == "index.html":
            return json_error(404, f"the device map's page is not installed ({root / name} is missing)")
        return json_error(404, f"no such file: {name!r}")
    suffix = path.suffix.lower()
    content_type = _CONTENT_TYPES.get(suffix, "application/octet-stream")
    return web.Response(
        body=path.read_bytes(),
        content_type=content_type,
        charset="utf-8" if suffix in _TEXT else None,
        headers=_NO_CACHE,
    )


# --- JSON ---------------------------------------------------------------------------------------------


def _map(request: web.Request) -> DeviceMap:
    return request.app[UI].device_map


def _int(request: web.Request, name: str, default: int, *, low: int, high: int | None = None) -> int:
    text = request.query.get(name, "")
    if text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f"query parameter {name}={text!r} is not a whole number") from None
    if value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise BadRequest(f"query parameter {name}={value} is out of range ({bound})")
    return value


def _text(request: web.Request, name: str, *, limit: int = 253) -> str:
    value = request.query.get(name, "")
    if len(value) > limit:
        raise BadRequest(f"query parameter {name} is longer than {limit} characters")
    return value


def node_filter(request: web.Request) -> NodeFilter:
    """The filters of ``ui/api/nodes`` (docs/ui.md); BadRequest for a malformed ``label``."""
    label = _text(request, "label", limit=317)
    key, sep, value = label.partition("=")
    key = key.strip()
    if label and not key:
        raise BadRequest(f"query parameter label={label!r}: give key=value, or key for any value")
    return NodeFilter(
        driver=_text(request, "driver"),
        device_class=_text(request, "deviceClass"),
        namespace=_text(request, "namespace"),
        label_key=key,
        label_value=value if sep else None,
        q=_text(request, "q"),
    )


async def summary(request: web.Request) -> web.Response:
    device_map = _map(request)
    await device_map.prepare()  # the first one renders every node: not in one stretch of the loop
    return json_response(device_map.summary())


async def nodes(request: web.Request) -> web.Response:
    offset = _int(request, "offset", 0, low=0)
    limit = _int(request, "limit", 50, low=1, high=MAX_PAGE)
    chosen = node_filter(request)
    device_map = _map(request)
    if chosen.filters_devices:  # a device filter looks at every node
        await device_map.prepare(chosen.device_class)
    try:
        answer = device_map.nodes(chosen, offset=offset, limit=limit)
    except UnknownDeviceClass as exc:
        raise BadRequest(str(exc)) from exc
    return json_response(answer)


async def node(request: web.Request) -> web.Response:
    name = request.match_info["node"]
    answer = _map(request).node(name)
    if answer is None:
        return json_error(404, f"node {name} not found: the extender knows no such node")
    return json_response(answer)


async def pools(request: web.Request) -> web.Response:
    """The pools change seldom and are many (over a megabyte of JSON at 5000 nodes): their list is
    encoded once per list object the map gives (a new one when the slices change)."""
    state = request.app[UI]
    answer = state.device_map.pools(_text(request, "driver"))
    listed = answer["pools"]
    cached = state.encoded_pools.get(id(listed))
    if cached is None or cached[0] is not listed:
        if len(state.encoded_pools) >= 8:
            state.encoded_pools.clear()
        cached = state.encoded_pools[id(listed)] = (listed, orjson.dumps(listed))
    body = b'{"revision":' + str(answer["revision"]).encode() + b',"pools":' + cached[1] + b"}"
    return json_body_response(body)


async def pending(request: web.Request) -> web.Response:
    return json_response(await _map(request).pending_explained(_text(request, "namespace")))


# --- server-sent events -------------------------------------------------------------------------------


def _event(revision: int) -> bytes:
    return b"event: revision\ndata: " + orjson.dumps({"revision": revision}) + b"\n\n"


async def events(request: web.Request) -> web.StreamResponse:
    """The revision when the stream opens, then each new one (at most one per tick), and a comment
    every ``keepalive_seconds`` so that proxies keep the connection; ends on disconnect or shutdown."""
    state = request.app[UI]
    device_map = state.device_map
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",  # nginx and the like: pass events through as they come
        }
    )
    await response.prepare(request)
    stop = asyncio.Event()
    state.streams.add(stop)
    clock = state.clock
    try:
        sent = device_map.revision()
        await response.write(b"retry: 2000\n" + _event(sent))
        last_write = clock()
        while not stop.is_set():
            if state.ticks is not None:
                await state.ticks(stop)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=state.tick_seconds)
            transport = request.transport
            if stop.is_set() or transport is None or transport.is_closing():
                break
            revision = device_map.revision()
            if revision != sent:
                await response.write(_event(revision))
                sent, last_write = revision, clock()
            elif clock() - last_write >= state.keepalive_seconds:
                await response.write(b": keepalive\n\n")
                last_write = clock()
    except (ConnectionError, RuntimeError) as exc:  # the client went away mid-write
        log.debug("ui.events_closed", error=str(exc))
    finally:
        state.streams.discard(stop)
    return response


async def _on_shutdown(app: web.Application) -> None:
    """Every open event stream ends now (aiohttp would otherwise wait for it), and so do the
    pending pods' explanations."""
    state = app[UI]
    for stop in tuple(state.streams):
        stop.set()
    if state.made is not None:
        await state.made.stop()
