"""Request middlewares: per-request log context, and errors turned into JSON answers.

Order in the app: ``log_context_middleware`` (outermost, so every event of the request, including
the error middleware's, carries the request id), then ``error_middleware``:

- ``BadRequest`` -> 400 ``{"error": ...}``; HTTP errors raised by aiohttp (404 unknown path, 405
  wrong method, 413 body over ``client_max_size``) -> the same status with a JSON body;
- any other exception on a verb route -> logged with its traceback and answered with HTTP 200 and
  ``Error`` (a non-200 makes the scheduler fail the attempt without our reason); on other routes
  -> 500 ``{"error": ...}``. Never a stack trace on the wire.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

import orjson
import structlog
from aiohttp import web
from aiohttp.typedefs import Handler
from structlog.contextvars import bound_contextvars

from extender.server.keys import METRICS, SETTINGS
from extender.server.wire import BadRequest, binding_result, error_filter_result, error_text

__all__ = ["REQUEST_ID_HEADER", "VERBS", "error_middleware", "json_error", "json_response", "log_context_middleware"]

log = structlog.get_logger()

REQUEST_ID_HEADER = "X-Request-Id"
#: Route names of the extender verbs: their failures are answered in the extender format.
VERBS = frozenset({"filter", "prioritize", "bind"})
#: A caller's request id is echoed into logs only if it looks like an id, not like an injection.
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:/+=-]{1,128}$")


def json_response(body: Any, *, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def json_error(status: int, message: str) -> web.Response:
    return json_response({"error": message}, status=status)


def route_name(request: web.Request) -> str | None:
    """The route's name (``filter``, ``debug_claim``, ...); None for unmatched paths."""
    route = getattr(request.match_info, "route", None)
    name = getattr(route, "name", None)
    return name if isinstance(name, str) else None


@web.middleware
async def log_context_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Bind ``request_id`` (the caller's ``X-Request-Id`` or a new one) and ``verb`` for every log
    event of this request, echo the id back, and time named routes."""
    offered = request.headers.get(REQUEST_ID_HEADER, "")
    request_id = offered if _REQUEST_ID.match(offered) else uuid.uuid4().hex
    verb = route_name(request)
    start = time.perf_counter()
    with bound_contextvars(request_id=request_id, verb=verb):
        try:
            response = await handler(request)
        finally:
            if verb is not None:
                request.app[METRICS].request_seconds.labels(verb).observe(time.perf_counter() - start)
    response.headers[REQUEST_ID_HEADER] = request_id
    return response


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except BadRequest as exc:
        return _refused(request, 400, exc.message)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        response = _refused(request, exc.status, _http_message(request, exc))
        for header in ("Allow",):  # 405 must say what is allowed
            if header in exc.headers:
                response.headers[header] = exc.headers[header]
        return response
    except Exception as exc:
        verb = route_name(request)
        log.exception("request.crashed", path=request.path, error_class=type(exc).__name__)
        request.app[METRICS].errors.labels(verb or "other", type(exc).__name__).inc()
        if verb == "filter":
            return json_response(error_filter_result(None, error_text(exc)))
        if verb == "prioritize":
            return json_response([])  # no opinion: omitted hosts get no extender score
        if verb == "bind":
            return json_response(binding_result(error_text(exc)))
        return json_error(500, error_text(exc))


def _refused(request: web.Request, status: int, message: str) -> web.Response:
    request.app[METRICS].bad_requests.labels(str(status)).inc()
    log.info("request.refused", method=request.method, path=request.path, code=status, error=message)
    return json_error(status, message)


def _http_message(request: web.Request, exc: web.HTTPException) -> str:
    if isinstance(exc, web.HTTPNotFound):
        return f"no such endpoint: {request.path}"
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods))
        return f"method {request.method} is not allowed on {request.path} (allowed: {allowed})"
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        limit = request.app[SETTINGS].max_body_bytes
        return f"request body is larger than the limit of {limit} bytes (--max-body-bytes)"
    return exc.reason
