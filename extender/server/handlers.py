"""Handlers of the extender verbs and the health, readiness and metrics endpoints.

Each verb handler is thin: body -> typed request (``wire``) -> service -> answer (``wire``) ->
``orjson``. A well-formed verb request is always answered with HTTP 200: the service's transient
and fatal problems, and any unexpected exception (logged with its traceback), go in ``Error``.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from extender.core.answers import NOT_SYNCED
from extender.core.errors import ExtenderError
from extender.server.keys import FILTER_ANSWERS, METRICS, SERVICE
from extender.server.middleware import json_body_response, json_response, log_context
from extender.server.wire import (
    BadRequest,
    EncodedAnswers,
    ExtenderArgs,
    WireField,
    binding_result,
    encode_priority_columns,
    error_filter_result,
    error_text,
    filter_result,
    parse_binding_args,
    parse_extender_args,
    parse_preemption_args,
    preemption_result,
    wire_field,
)
from extender.state.service import DuplicateNodes, FilterOutcome

__all__ = [
    "bind",
    "filter_nodes",
    "healthz",
    "metrics",
    "preempt",
    "prioritize",
    "read_json",
    "readyz",
]

log = structlog.get_logger()


async def read_json(request: web.Request) -> Any:
    """The parsed body; BadRequest if empty or not JSON (413 is raised by ``read`` itself)."""
    body = await request.read()
    if not body or body.isspace():  # not body.strip(): no copy of a body with a trailing newline
        raise BadRequest("request body is empty; expected a JSON object")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from exc


def _duration_ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 3)


async def filter_nodes(request: web.Request) -> web.Response:
    service, metrics = request.app[SERVICE], request.app[METRICS]
    args = parse_extender_args(await read_json(request))
    pod_key = args.pod_key
    start = time.perf_counter()
    with log_context(pod=pod_key):
        try:
            service.observe_nodes(args.nodes)
            outcome = await service.filter_and_recover(args.pod, args.node_names)
        except Exception as exc:
            metrics.errors_by("filter", type(exc).__name__).inc()
            answer = _filter_answer_for(args, exc)
            log.info("filter.decided", pod=pod_key, error=answer["Error"], duration_ms=_duration_ms(start))
            return json_response(answer)
        body = _encoded_filter_answer(request.app[FILTER_ANSWERS], args, outcome)
        if outcome.error:
            metrics.errors_by("filter", "Error").inc()
        metrics.observe_filter(
            passed=len(outcome.node_names), failed=len(outcome.failed), unresolvable=len(outcome.unresolvable)
        )
        # Every pod that fits somewhere is filtered at kube-scheduler's pace (tens a second, one
        # line each at a few tens of microseconds): debug; a pod that fits nowhere, at info.
        (log.info if outcome.error or not outcome.node_names else log.debug)(
            "filter.decided",
            pod=pod_key,
            nodes=len(args.node_names),
            passed=len(outcome.node_names),
            failed=len(outcome.failed),
            unresolvable=len(outcome.unresolvable),
            error=outcome.error,
            duration_ms=_duration_ms(start),
        )
    return json_body_response(body)


def _encoded_filter_answer(answers: EncodedAnswers, args: ExtenderArgs, outcome: FilterOutcome) -> bytes:
    """The filter answer's JSON, the remembered bytes when the service repeats an outcome."""
    # a picked outcome is made afresh for each pod (``--filter-picks-node``): never asked again
    reusable = args.node_list is None and args.names_given and not outcome.error and not outcome.picked
    if reusable and (body := answers.get(outcome)) is not None:
        return body
    answer = filter_result(
        args, outcome.node_names, failed=outcome.failed, unresolvable=outcome.unresolvable, error=outcome.error
    )
    body = orjson.dumps(answer)
    if reusable:
        answers.put(outcome, body)
    return body


def _filter_answer_for(args: ExtenderArgs, exc: Exception) -> dict[str, Any]:
    """The service promises not to raise; if it does anyway, answer by the error's wire field.
    A per-node error can only be placed when it names the one node asked about."""
    field = wire_field(exc)
    node = exc.node if isinstance(exc, ExtenderError) else None
    if field is WireField.ERROR or node is None or args.node_names != [node]:
        if not isinstance(exc, ExtenderError):
            log.exception("filter.crashed", pod=args.pod_key)
        return error_filter_result(args, error_text(exc))
    reasons = {node: error_text(exc)}
    if field is WireField.FAILED_AND_UNRESOLVABLE_NODES:
        return filter_result(args, [], failed={}, unresolvable=reasons)
    return filter_result(args, [], failed=reasons, unresolvable={})


async def prioritize(request: web.Request) -> web.Response:
    """HostPriorityList. It has no Error field and the scheduler ignores prioritize failures, so a
    failure answers ``[]``: no extender score for any node, the same as a neutral opinion."""
    service, metrics = request.app[SERVICE], request.app[METRICS]
    args = parse_extender_args(await read_json(request))
    pod_key = args.pod_key
    start = time.perf_counter()
    with log_context(pod=pod_key):
        try:
            service.observe_nodes(args.nodes)
            hosts, scores = await service.prioritize_cooperatively(args.pod, args.node_names)
        except DuplicateNodes as exc:
            raise BadRequest(str(exc)) from exc
        except Exception as exc:
            metrics.errors_by("prioritize", type(exc).__name__).inc()
            if isinstance(exc, ExtenderError):
                log.info("prioritize.scored", pod=pod_key, error=exc.reason, duration_ms=_duration_ms(start))
            else:
                log.exception("prioritize.crashed", pod=pod_key)
            return json_response([])
        body, best = encode_priority_columns(hosts, scores)
        log.debug(  # one per scheduled pod, as the filter's: bind.finished says where it went, at info
            "prioritize.scored",
            pod=pod_key,
            nodes=len(scores),
            best=best[0] if best else None,
            score=best[1] if best else None,
            duration_ms=_duration_ms(start),
        )
    return json_body_response(body)


async def preempt(request: web.Request) -> web.Response:
    """ExtenderPreemptionResult: kube-scheduler's victims per node, with the device holders that
    must also go (``state/preemption/verb.py``). A failure answers no node (no preemption this time)
    and says why in ``Error``."""
    service, metrics = request.app[SERVICE], request.app[METRICS]
    args = parse_preemption_args(await read_json(request))
    pod_key = args.pod_key
    start = time.perf_counter()
    with log_context(pod=pod_key):
        try:
            outcome = await service.preempt(args.pod, args.victims)
        except Exception as exc:
            metrics.errors_by("preempt", type(exc).__name__).inc()
            if isinstance(exc, ExtenderError):
                log.info("preempt.decided", pod=pod_key, error=exc.reason, duration_ms=_duration_ms(start))
            else:
                log.exception("preempt.crashed", pod=pod_key)
            return json_response(preemption_result({}, error_text(exc)))
        if outcome.error:
            metrics.errors_by("preempt", "Error").inc()
        log.info(
            "preempt.decided",
            pod=pod_key,
            meta=args.meta,
            nodes=len(args.victims),
            returned=len(outcome.victims),
            error=outcome.error,
            duration_ms=_duration_ms(start),
        )
    return json_response(preemption_result(outcome.victims, outcome.error))


async def bind(request: web.Request) -> web.Response:
    """ExtenderBindingResult. The service logs ``bind.finished`` for its own outcomes."""
    service, metrics = request.app[SERVICE], request.app[METRICS]
    args = parse_binding_args(await read_json(request))
    with log_context(pod=args.pod_key, node=args.node):
        try:
            await service.bind(args.pod_namespace, args.pod_name, args.pod_uid, args.node)
        except ExtenderError as exc:
            metrics.binds_by("error", type(exc).__name__).inc()
            return json_response(binding_result(exc.reason))
        except Exception as exc:
            metrics.binds_by("error", type(exc).__name__).inc()
            log.exception("bind.crashed", pod=args.pod_key, node=args.node)
            return json_response(binding_result(error_text(exc)))
    metrics.binds_by("bound", "").inc()
    return json_response(binding_result())


async def healthz(request: web.Request) -> web.Response:
    """Liveness: the process answers HTTP."""
    return json_response({"status": "ok"})


#: /readyz's reason between the sync and the end of the warm-up (``SchedulingService.warm_up``).
WARMING_UP = "caches warming up"


async def readyz(request: web.Request) -> web.Response:
    """Readiness: 503 until the backend's caches have synced (every watch listed) and been warmed
    (a few seconds at 15 000 nodes, with the event loop free meanwhile). ``detail`` says
    why, where the backend can tell (the kube backend's ``not_ready_reason``: a watch refused with
    401/403, the kinds not listed yet); ``reason`` stays the stable text scripts may match."""
    service = request.app[SERVICE]
    backend = service.backend
    if backend.synced and service.warmed:
        return json_response({"status": "ready"})
    if backend.synced:
        return json_response({"status": "not ready", "reason": WARMING_UP}, status=503)
    body = {"status": "not ready", "reason": NOT_SYNCED}
    detail = getattr(backend, "not_ready_reason", "")  # optional: not part of the Backend protocol
    if isinstance(detail, str) and detail:
        body["detail"] = detail
    return json_response(body, status=503)


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text format of this app's registry."""
    body = generate_latest(request.app[METRICS].registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
