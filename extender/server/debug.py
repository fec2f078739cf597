"""Debug endpoints: ``POST debug/explain``, ``GET debug/why/{namespace}/{name}``, ``GET
debug/objects`` and the read-only views of claims, pods, nodes and PodSchedulingContexts (classic DRA).

They answer from the backend's cache, as JSON. Unknown claims, pods and contexts are 404
``{"error": ...}``; a node with no devices is an empty device list (the node may simply have none).

Versions: a claim is answered as resource.k8s.io/v1 whatever version it is stored in
(``convert.resource_claim_to_v1``), except a classic DRA claim (v1alpha3 ``spec.controller``), shown
as stored since v1 has no place for its driver; a pod is core/v1 as stored; a PodSchedulingContext is
the stored v1alpha3 object, the only version the type ever had (there is no v1 to convert to).
``debug/objects`` answers its DeviceClasses, ResourceSlices, ResourceClaims and ResourceClaimTemplates
as v1 the same way (classic DRA's as stored: ``views.debug.without_v1_form``).
"""

from __future__ import annotations

import time

import structlog
from aiohttp import web

from extender.core.errors import ExtenderError
from extender.server.handlers import read_json
from extender.server.keys import SERVICE, VIEWS
from extender.server.middleware import json_error, json_response, log_context
from extender.server.wire import parse_extender_args
from extender.state import cooperative
from extender.views.listing import held_objects
from extender.views.why import why

__all__ = [
    "debug_claim",
    "debug_node",
    "debug_objects",
    "debug_pod",
    "debug_scheduling_context",
    "debug_why",
    "explain",
]

log = structlog.get_logger()


async def explain(request: web.Request) -> web.Response:
    """ExtenderArgs in; per node, per claim, per request: fits or not and why."""
    service = request.app[SERVICE]
    args = parse_extender_args(await read_json(request))
    start = time.perf_counter()
    with log_context(pod=args.pod_key):
        service.observe_nodes(args.nodes)
        try:
            answer = await request.app[VIEWS].explain_cooperatively(args.pod, args.node_names)
        except ExtenderError as exc:
            answer = {"pod": args.pod_key, "error": exc.reason, "nodes": []}
        log.info(
            "explain.answered",
            pod=args.pod_key,
            nodes=len(args.node_names),
            duration_ms=round((time.perf_counter() - start) * 1000, 3),
        )
    return json_response(answer)


async def debug_why(request: web.Request) -> web.Response:
    """Why the stored pod does not fit, over every node the extender knows (``views/why.py``)."""
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    views = request.app[VIEWS]
    pod = views.pod(namespace, name)
    if pod is None:
        return json_error(404, f"pod {namespace}/{name} not found")
    start = time.perf_counter()
    with log_context(pod=f"{namespace}/{name}"):
        try:
            answer = await cooperative.run(why, views, pod, views.store.known_node_names())
        except ExtenderError as exc:
            answer = {"pod": f"{namespace}/{name}", "error": exc.reason, "summary": exc.reason}
        log.info("why.answered", pod=f"{namespace}/{name}", duration_ms=round((time.perf_counter() - start) * 1000, 3))
    return json_response(answer)


async def debug_objects(request: web.Request) -> web.Response:
    """The objects the extender holds, as one ``kind: List`` (``views/listing.py``). The kube backend
    lists classes and slices from the API server for it: a failure there is a 503 naming it."""
    try:
        listed = await held_objects(request.app[SERVICE].backend)
    except ExtenderError as exc:
        return json_error(503, f"cannot list the objects: {exc}")
    return json_response(listed)


async def debug_claim(request: web.Request) -> web.Response:
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    claim = request.app[VIEWS].claim(namespace, name)
    if claim is None:
        return json_error(404, f"resourceclaim {namespace}/{name} not found")
    return json_response(claim)


async def debug_pod(request: web.Request) -> web.Response:
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    pod = request.app[VIEWS].pod(namespace, name)
    if pod is None:
        return json_error(404, f"pod {namespace}/{name} not found")
    return json_response(pod)


async def debug_pod_group(request: web.Request) -> web.Response:
    """A PodGroup, its members and its gang's open pass (``DebugViews.pod_group``)."""
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    group = request.app[VIEWS].pod_group(namespace, name)
    if group is None:
        return json_error(404, f"podgroup {namespace}/{name} not found")
    return json_response(group)


async def debug_node(request: web.Request) -> web.Response:
    return json_response(request.app[VIEWS].node(request.match_info["node"]))


async def debug_scheduling_context(request: web.Request) -> web.Response:
    """The pod's PodSchedulingContext (classic DRA) as the backend's store holds it: the raw object."""
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    context = request.app[VIEWS].scheduling_context(namespace, name)
    if context is None:
        return json_error(404, f"podschedulingcontext {namespace}/{name} not found")
    return json_response(context)
