"""The aiohttp application: ``create_app`` wires routes, middlewares and the backend's lifecycle.

Nothing happens at import time. Routes (under ``settings.path_prefix``, default ``/``):

- ``POST filter``, ``POST prioritize``, ``POST preempt``, ``POST bind``: the kube-scheduler extender verbs;
- ``POST debug/explain``; ``GET debug/resourceclaims/{namespace}/{name}``,
  ``GET debug/pods/{namespace}/{name}``, ``GET debug/nodes/{node}``, ``GET debug/podgroups/{namespace}/{name}``,
  ``GET debug/podschedulingcontexts/{namespace}/{name}`` (classic DRA), ``GET debug/why/{namespace}/{name}``,
  ``GET debug/objects``;
- ``GET healthz``, ``GET readyz`` (503 until the backend synced), ``GET metrics``;
- ``GET ui/`` and below: the live device map, its JSON and its events (``server/ui/routes.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import AsyncIterator

import structlog
from aiohttp import web

from extender.server import debug, handlers, ui
from extender.server.eventloop import new_event_loop
from extender.server.keys import FILTER_ANSWERS, METRICS, SERVICE, SETTINGS, VIEWS
from extender.server.metrics import Metrics
from extender.server.middleware import request_middleware
from extender.server.settings import ServerSettings, normalize_prefix, ssl_context
from extender.server.wire import EncodedAnswers
from extender.state.service import SchedulingService
from extender.views.debug import DebugViews

__all__ = ["backend_lifecycle", "create_app", "run"]

log = structlog.get_logger()


def create_app(
    service: SchedulingService, settings: ServerSettings | None = None, *, views: DebugViews | None = None
) -> web.Application:
    """The application over ``service``; ``views`` are the read models the debug endpoints and the
    device map answer from (by default over the same service)."""
    settings = settings if settings is not None else ServerSettings()
    app = web.Application(
        middlewares=[request_middleware],
        client_max_size=settings.max_body_bytes,
    )
    app[SERVICE] = service
    app[VIEWS] = views if views is not None else DebugViews(service)
    app[SETTINGS] = settings
    app[METRICS] = Metrics(service)
    app[FILTER_ANSWERS] = EncodedAnswers()
    prefix = normalize_prefix(settings.path_prefix)
    router = app.router
    router.add_post(f"{prefix}filter", handlers.filter_nodes, name="filter")
    router.add_post(f"{prefix}prioritize", handlers.prioritize, name="prioritize")
    router.add_post(f"{prefix}preempt", handlers.preempt, name="preempt")
    router.add_post(f"{prefix}bind", handlers.bind, name="bind")
    router.add_post(f"{prefix}debug/explain", debug.explain, name="explain")
    router.add_get(f"{prefix}debug/resourceclaims/{{namespace}}/{{name}}", debug.debug_claim, name="debug_claim")
    router.add_get(f"{prefix}debug/pods/{{namespace}}/{{name}}", debug.debug_pod, name="debug_pod")
    router.add_get(f"{prefix}debug/nodes/{{node}}", debug.debug_node, name="debug_node")
    router.add_get(f"{prefix}debug/podgroups/{{namespace}}/{{name}}", debug.debug_pod_group, name="debug_pod_group")
    router.add_get(f"{prefix}debug/why/{{namespace}}/{{name}}", debug.debug_why, name="debug_why")
    router.add_get(f"{prefix}debug/objects", debug.debug_objects, name="debug_objects")
    router.add_get(
        f"{prefix}debug/podschedulingcontexts/{{namespace}}/{{name}}",
        debug.debug_scheduling_context,
        name="debug_scheduling_context",
    )
    router.add_get(f"{prefix}healthz", handlers.healthz, name="healthz")
    router.add_get(f"{prefix}readyz", handlers.readyz, name="readyz")
    router.add_get(f"{prefix}metrics", handlers.metrics, name="metrics")
    ui.add_routes(app, prefix)
    app.cleanup_ctx.append(backend_lifecycle)
    return app


async def backend_lifecycle(app: web.Application) -> AsyncIterator[None]:
    """Start the backend (its watches) with the app and stop it on shutdown. The stop half runs
    only if start succeeded (aiohttp's cleanup-context promise)."""
    backend = app[SERVICE].backend
    await backend.start()
    log.info("backend.started", backend=type(backend).__name__)
    warming: asyncio.Task[None] | None = None
    if backend.synced:
        await _warm_up(app)
    else:
        warming = asyncio.create_task(_warm_up_once_synced(app), name="warm caches after sync")
    try:
        yield
    finally:
        if warming is not None:
            warming.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await warming
        await app[SERVICE].stop()
        await backend.stop()
        log.info("backend.stopped", backend=type(backend).__name__)


#: ``gc.set_threshold`` once the caches are warm and frozen (docs/performance.md, "gc is the largest single factor").
GC_THRESHOLDS = (50_000, 20, 20)


async def _warm_up(app: web.Application) -> None:
    """Fill the caches (``SchedulingService.warm_up``, which lets the event loop run as it goes),
    then take them out of the garbage collector's reach. /readyz answers 503 until this is done."""
    start = time.perf_counter()
    service = app[SERVICE]
    # The warm-up makes millions of objects that live as long as the process (device views, node
    # views, selector results at 15 000 nodes): a full collection amid them would stop the event
    # loop for a second or more, however the warm-up paces itself. No collection runs until they
    # are frozen.
    collecting = gc.isenabled()
    gc.disable()
    try:
        warmed = await service.warm_up()
    except Exception:  # an optimisation only: the first requests fill what is missing
        log.exception("caches.warm_up_failed")
        warmed = {}
    finally:
        # The cluster, its decoded model and the warm caches: out of the collector's reach, or
        # every full collection rescans them (over a second at 5000 nodes, seen as filter latency
        # spikes; docs/performance.md). Without a collection first: one found next to nothing to
        # free (70 objects at 15 000 nodes) and stopped the event loop for 2.5 s.
        gc.freeze()
        if collecting:
            gc.enable()
    # Requests allocate many short-lived containers (parsed bodies, answers); with the default
    # generation-0 threshold of 700 the collector runs several times per request. Cycles are rare
    # here and refcounting frees the rest, so collect young objects less often: about 10 % less
    # CPU per scheduled pod at 500 nodes (docs/performance.md), for a few MB at most.
    gc.set_threshold(*GC_THRESHOLDS)
    log.info(
        "caches.warmed",
        duration_ms=round((time.perf_counter() - start) * 1000, 1),
        frozen_objects=gc.get_freeze_count(),
        **warmed,
    )


async def _warm_up_once_synced(app: web.Application, poll_seconds: float = 0.2) -> None:
    """The kube backend syncs after start(): warm the caches as soon as it has (at once where the
    backend can say when, so that the first requests after /readyz find them warm)."""
    backend = app[SERVICE].backend
    with contextlib.suppress(Exception):  # a failed sync: poll until a retry succeeds
        await backend.wait_synced()
    while not backend.synced:
        await asyncio.sleep(poll_seconds)
    await _warm_up(app)


def run(app: web.Application) -> None:
    """Serve until SIGINT/SIGTERM on the app's configured address, with TLS if configured."""
    settings = app[SETTINGS]
    context = ssl_context(settings)
    scheme = "https" if context else "http"
    prefix = normalize_prefix(settings.path_prefix)

    loop, loop_name = new_event_loop(settings.event_loop)

    def started(_text: str) -> None:
        log.info(
            "server.listening",
            url=f"{scheme}://{settings.host}:{settings.port}{prefix}",
            mtls=bool(settings.tls_client_ca_file),
            max_body_bytes=settings.max_body_bytes,
            event_loop=loop_name,
        )

    web.run_app(
        app, host=settings.host, port=settings.port, ssl_context=context, access_log=None, print=started, loop=loop
    )
