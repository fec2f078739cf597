"""Every route of the app over real loopback HTTP, against a programmable fake service: both
nodeCacheCapable modes, the exact answer shapes, errors and crashes answered with HTTP 200 +
``Error``, every malformed-input case (400/404/405/413, nothing changes), readiness, metrics
families, request ids and log events, the path prefix, and the backend lifecycle.
The real service and embedded backend are exercised in ``test_integration.py``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient
from structlog.contextvars import merge_contextvars
from structlog.testing import capture_logs

from extender.core import errors
from extender.server import ServerSettings, create_app
from extender.state.service import FilterOutcome
from tests.server.fakes import FakeService, node_list, pod

Client = TestClient[Any, Any]
MakeClient = Callable[..., Awaitable[Client]]

BIND = {"PodName": "pod-a", "PodNamespace": "default", "PodUID": "uid-a", "Node": "node-1"}


@pytest.fixture
def fake() -> FakeService:
    return FakeService()


@pytest.fixture
def make_client(aiohttp_client: Any, fake: FakeService) -> MakeClient:
    async def make(**settings: Any) -> Client:
        client: Client = await aiohttp_client(
            create_app(fake.as_service(), ServerSettings(**settings), views=fake.as_views())
        )
        return client

    return make


@pytest.fixture
async def client(make_client: MakeClient) -> Client:
    return await make_client()


async def post(client: Client, path: str, body: Any) -> tuple[int, Any]:
    response = await client.post(path, data=orjson.dumps(body), headers={"Content-Type": "application/json"})
    assert response.content_type == "application/json"
    return response.status, orjson.loads(await response.read())


# --- filter -------------------------------------------------------------------------------------


async def test_filter_node_names_mode_answers_node_names(client: Client, fake: FakeService) -> None:
    fake.outcome = FilterOutcome(
        ["node-2"], failed={"node-1": "cannot allocate all claims"}, unresolvable={"node-3": "x"}
    )
    status, answer = await post(
        client, "/filter", {"Pod": pod(), "Nodes": None, "NodeNames": ["node-1", "node-2", "node-3"]}
    )
    assert status == 200
    assert answer == {
        "Nodes": None,
        "NodeNames": ["node-2"],
        "FailedNodes": {"node-1": "cannot allocate all claims"},
        "FailedAndUnresolvableNodes": {"node-3": "x"},
        "Error": "",
    }
    assert fake.calls == [("filter", "pod-a", ["node-1", "node-2", "node-3"])]


async def test_filter_node_names_is_a_list_even_when_nothing_passes(client: Client, fake: FakeService) -> None:
    fake.outcome = FilterOutcome([], failed={"node-1": "cannot allocate all claims"})
    _, answer = await post(client, "/filter", {"Pod": pod(), "NodeNames": ["node-1"]})
    assert answer["NodeNames"] == []


async def test_filter_nodes_mode_echoes_full_nodes(client: Client, fake: FakeService) -> None:
    sent = node_list("node-1", "node-2")
    fake.outcome = FilterOutcome(["node-2"], failed={"node-1": "cannot allocate all claims"})
    status, answer = await post(client, "/filter", {"Pod": pod(), "Nodes": sent, "NodeNames": None})
    assert status == 200
    assert answer["NodeNames"] is None
    assert answer["Nodes"]["items"] == [sent["items"][1]]
    assert answer["FailedNodes"] == {"node-1": "cannot allocate all claims"}


async def test_a_repeated_filter_outcome_is_answered_with_the_same_bytes(
    client: Client, fake: FakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    import extender.server.handlers as handlers

    written: list[Any] = []
    real = handlers.filter_result

    def counting(*args: Any, **kwargs: Any) -> Any:
        written.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(handlers, "filter_result", counting)
    fake.outcome = FilterOutcome(["node-2"], failed={"node-1": "cannot allocate all claims"})
    body = {"Pod": pod(), "Nodes": None, "NodeNames": ["node-1", "node-2"]}
    first = await post(client, "/filter", body)
    assert await post(client, "/filter", body) == first
    assert len(written) == 1  # the same outcome object: its JSON was reused
    sent = node_list("node-1", "node-2")
    nodes_mode = await post(client, "/filter", {"Pod": pod(), "Nodes": sent, "NodeNames": None})
    assert nodes_mode[1]["Nodes"]["items"] == [sent["items"][1]] and len(written) == 2  # never reused
    fake.outcome = FilterOutcome(["node-1", "node-2"])  # a new outcome: written afresh
    assert (await post(client, "/filter", body))[1]["NodeNames"] == ["node-1", "node-2"]
    assert len(written) == 3
    fake.outcome = FilterOutcome([], error="claim being allocated for another pod")
    await post(client, "/filter", body)
    await post(client, "/filter", body)
    assert len(written) == 5  # errors are not remembered


async def test_nodes_mode_hands_the_node_objects_to_the_service(client: Client, fake: FakeService) -> None:
    """The server writes nothing into the store: the service (its backend) decides what to take
    of the labels (tests/backends/*: the embedded cluster takes them, the kube backend only for
    nodes its watch has not shown)."""
    sent = node_list("node-1", "node-2")
    await post(client, "/filter", {"Pod": pod(), "Nodes": sent})
    await post(client, "/prioritize", {"Pod": pod(), "Nodes": sent})
    await post(client, "/filter", {"Pod": pod(), "NodeNames": ["node-1"]})  # names only: nothing to observe
    assert fake.observed_nodes == ["node-1", "node-2", "node-1", "node-2"]
    assert not fake.store.nodes


async def test_filter_error_is_http_200(client: Client, fake: FakeService) -> None:
    fake.outcome = FilterOutcome([], error="cache not synced yet")
    status, answer = await post(client, "/filter", {"Pod": pod(), "NodeNames": ["node-1"]})
    assert (status, answer["Error"], answer["NodeNames"]) == (200, "cache not synced yet", [])


async def test_filter_crash_is_logged_and_answered_with_error(client: Client, fake: FakeService) -> None:
    fake.raise_on["filter"] = KeyError("internal detail")
    with capture_logs() as logs:
        status, answer = await post(client, "/filter", {"Pod": pod(), "NodeNames": ["node-1"]})
    assert status == 200
    assert "internal error" in answer["Error"]
    assert "internal detail" not in answer["Error"]
    assert answer["NodeNames"] == []
    crashed = [e for e in logs if e["event"] == "filter.crashed"]
    assert crashed and crashed[0]["log_level"] == "error" and crashed[0]["exc_info"] is True


@pytest.mark.parametrize(
    ("exc", "field"),
    [
        (errors.DoesNotFit("cannot allocate all claims", node="node-1"), "FailedNodes"),
        (
            errors.NodeUnresolvable("invalid resource pools were encountered", node="node-1"),
            "FailedAndUnresolvableNodes",
        ),
        (errors.PodUnschedulable("device class x does not exist"), "Error"),
        (errors.ClaimNotCreated("waiting for claim"), "Error"),
    ],
)
async def test_filter_maps_a_raised_extender_error_by_class(
    client: Client, fake: FakeService, exc: errors.ExtenderError, field: str
) -> None:
    fake.raise_on["filter"] = exc
    status, answer = await post(client, "/filter", {"Pod": pod(), "NodeNames": ["node-1"]})
    assert status == 200
    if field == "Error":
        assert answer["Error"] == exc.reason
    else:
        assert answer[field] == {"node-1": exc.reason}
        assert answer["Error"] == ""
    assert answer["NodeNames"] == []


# --- prioritize ---------------------------------------------------------------------------------


async def test_prioritize_answers_a_host_priority_list(client: Client, fake: FakeService) -> None:
    fake.scores = {"node-1": 3, "node-2": 10}
    status, answer = await post(client, "/prioritize", {"Pod": pod(), "NodeNames": ["node-1", "node-2"]})
    assert status == 200
    assert answer == [{"Host": "node-1", "Score": 3}, {"Host": "node-2", "Score": 10}]


async def test_prioritize_nodes_mode(client: Client, fake: FakeService) -> None:
    fake.scores = {"node-2": 4}
    _, answer = await post(client, "/prioritize", {"Pod": pod(), "Nodes": node_list("node-1", "node-2")})
    assert answer == [{"Host": "node-1", "Score": 0}, {"Host": "node-2", "Score": 4}]


@pytest.mark.parametrize("exc", [errors.NotSynced("cache not synced yet"), ZeroDivisionError("bug")])
async def test_prioritize_failure_gives_no_scores(client: Client, fake: FakeService, exc: Exception) -> None:
    fake.raise_on["prioritize"] = exc
    status, answer = await post(client, "/prioritize", {"Pod": pod(), "NodeNames": ["node-1"]})
    assert (status, answer) == (200, [])


# --- bind ---------------------------------------------------------------------------------------


async def test_bind_success(client: Client, fake: FakeService) -> None:
    status, answer = await post(client, "/bind", BIND)
    assert (status, answer) == (200, {"Error": ""})
    assert fake.calls == [("bind", "default", "pod-a", "uid-a", "node-1")]


@pytest.mark.parametrize(
    ("exc", "text"),
    [
        (errors.WriteConflict('pod "default/pod-a" is already bound to node node-2'), "already bound to node node-2"),
        (errors.DoesNotFit("node node-1 no longer fits the pod", node="node-1"), "no longer fits"),
        (errors.NotSynced("cache not synced yet"), "cache not synced yet"),
        (RuntimeError("kaboom"), "internal error in dra-extender (RuntimeError)"),
    ],
)
async def test_bind_failure_is_http_200_with_error(
    client: Client, fake: FakeService, exc: Exception, text: str
) -> None:
    fake.raise_on["bind"] = exc
    status, answer = await post(client, "/bind", BIND)
    assert status == 200
    assert text in answer["Error"]
    assert "kaboom" not in answer["Error"]


# --- debug --------------------------------------------------------------------------------------


async def test_explain(client: Client, fake: FakeService) -> None:
    status, answer = await post(client, "/debug/explain", {"Pod": pod(), "Nodes": node_list("node-1")})
    assert status == 200
    assert answer == {"pod": "default/pod-a", "error": "", "nodes": [{"node": "node-1"}]}


async def test_explain_extender_error_is_reported_in_the_answer(client: Client, fake: FakeService) -> None:
    fake.raise_on["explain"] = errors.PodUnschedulable("device class x does not exist")
    status, answer = await post(client, "/debug/explain", {"Pod": pod(), "NodeNames": ["node-1"]})
    assert (status, answer["error"]) == (200, "device class x does not exist")


async def test_debug_views(client: Client, fake: FakeService) -> None:
    fake.claims["ns/claim-0"] = {"kind": "ResourceClaim", "metadata": {"name": "claim-0"}}
    fake.pods["ns/pod-a"] = pod(namespace="ns")
    response = await client.get("/debug/resourceclaims/ns/claim-0")
    assert (response.status, await response.json()) == (200, fake.claims["ns/claim-0"])
    response = await client.get("/debug/pods/ns/pod-a")
    assert (response.status, (await response.json())["metadata"]["name"]) == (200, "pod-a")
    response = await client.get("/debug/nodes/node-1")
    assert (response.status, (await response.json())["node"]) == (200, "node-1")


async def test_debug_unknown_objects_are_404(client: Client) -> None:
    response = await client.get("/debug/resourceclaims/ns/nope")
    assert (response.status, await response.json()) == (404, {"error": "resourceclaim ns/nope not found"})
    response = await client.get("/debug/pods/ns/nope")
    assert (response.status, await response.json()) == (404, {"error": "pod ns/nope not found"})


async def test_debug_crash_is_a_json_500_without_traceback(client: Client, fake: FakeService) -> None:
    fake.raise_on["explain"] = ValueError("deep internal")
    with capture_logs():
        response = await client.post("/debug/explain", json={"Pod": pod(), "NodeNames": []})
    body = await response.json()
    assert response.status == 500
    assert "Traceback" not in body["error"] and "deep internal" not in body["error"]


# --- health, readiness, metrics -------------------------------------------------------------------


async def test_healthz(client: Client) -> None:
    response = await client.get("/healthz")
    assert (response.status, await response.json()) == (200, {"status": "ok"})


async def test_readyz_follows_backend_sync(client: Client, fake: FakeService) -> None:
    fake.backend.set_synced(False)
    response = await client.get("/readyz")
    assert response.status == 503
    assert (await response.json())["reason"] == "cache not synced yet"
    fake.backend.set_synced(True)
    response = await client.get("/readyz")
    assert (response.status, await response.json()) == (200, {"status": "ready"})


async def test_readyz_waits_for_the_warm_up_after_the_sync(client: Client, fake: FakeService) -> None:
    fake.warmed = False  # synced, the caches not warm yet (``SchedulingService.warm_up`` running)
    response = await client.get("/readyz")
    assert (response.status, await response.json()) == (503, {"status": "not ready", "reason": "caches warming up"})
    assert "dra_extender_ready 0.0" in await (await client.get("/metrics")).text()
    fake.warmed = True
    assert (await client.get("/readyz")).status == 200
    assert "dra_extender_ready 1.0" in await (await client.get("/metrics")).text()


async def test_metrics_text_has_every_family(client: Client, fake: FakeService) -> None:
    fake.outcome = FilterOutcome(["node-1"], failed={"node-2": "cannot allocate all claims"})
    await post(client, "/filter", {"Pod": pod(), "NodeNames": ["node-1", "node-2"]})
    await post(client, "/bind", BIND)
    fake.raise_on["bind"] = errors.WriteConflict("conflict")
    await post(client, "/bind", BIND)
    fake.stats.allocations = 4
    response = await client.get("/metrics")
    assert response.status == 200
    assert response.content_type == "text/plain"
    text = await response.text()
    for line in [
        'dra_extender_request_duration_seconds_count{verb="filter"} 1.0',
        'dra_extender_request_duration_seconds_count{verb="bind"} 2.0',
        'dra_extender_filter_nodes_total{result="passed"} 1.0',
        'dra_extender_filter_nodes_total{result="failed"} 1.0',
        "dra_extender_filter_passed_nodes_count 1.0",
        "dra_extender_filter_failed_nodes_sum 1.0",
        'dra_extender_binds_total{outcome="bound",reason=""} 1.0',
        'dra_extender_binds_total{outcome="error",reason="WriteConflict"} 1.0',
        "dra_extender_allocations_total 4.0",
        "dra_extender_ledger_entries 0.0",
        'dra_extender_cache_objects{kind="slices"} 0.0',
        'dra_extender_cache_objects{kind="devices"} 0.0',
        'dra_extender_cache_objects{kind="claims"} 0.0',
        'dra_extender_cel_compile_cache_total{result="hit"} 0.0',
        'dra_extender_cel_compile_cache_total{result="miss"} 0.0',
        'dra_extender_cel_result_cache_total{result="hit"} 0.0',
        'dra_extender_cel_result_cache_total{result="miss"} 0.0',
        'dra_extender_fit_cache_total{result="hit"} 0.0',
        'dra_extender_fit_cache_total{result="miss"} 0.0',
        "dra_extender_fit_cache_dropped_total 0.0",
        "dra_extender_fit_cache_verdicts 0.0",
        "dra_extender_ready 1.0",
    ]:
        assert line in text, line


async def test_each_app_has_its_own_registry(make_client: MakeClient) -> None:
    first, second = await make_client(), await make_client()
    await post(first, "/bind", BIND)
    assert 'dra_extender_binds_total{outcome="bound",reason=""} 1.0' in await (await first.get("/metrics")).text()
    assert "dra_extender_binds_total{" not in await (await second.get("/metrics")).text()


# --- malformed input ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/filter", "/prioritize", "/bind", "/debug/explain"])
@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "request body is empty"),
        (b" \r\n\t\x0b\x0c", "request body is empty"),  # only ASCII whitespace
        (b"{not json", "request body is not valid JSON"),
        (b"\n{not json\n", "request body is not valid JSON"),
        (b"[1, 2]", "request body must be a JSON object, not an array"),
        (b"null", "request body must be a JSON object, not null"),
    ],
)
async def test_unreadable_bodies_are_400(
    client: Client, fake: FakeService, path: str, body: bytes, message: str
) -> None:
    revision = fake.store.revision
    response = await client.post(path, data=body)
    assert response.status == 400
    assert message in (await response.json())["error"]
    assert fake.calls == [] and fake.store.revision == revision


@pytest.mark.parametrize("path", ["/filter", "/prioritize", "/debug/explain"])
@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"NodeNames": ["node-1"]}, "Pod is required"),
        ({"Pod": pod()}, "one of Nodes or NodeNames is required"),
        ({"Pod": pod(), "NodeNames": [1]}, "NodeNames must be an array of non-empty strings"),
        ({"Pod": {"metadata": {"name": 5}}, "NodeNames": []}, "Pod.metadata.name must be a non-empty string"),
        ({"Pod": pod(), "Nodes": {"items": [{"metadata": {"name": "n", "labels": []}}]}}, "labels must be a JSON"),
    ],
)
async def test_wrong_shapes_are_400(client: Client, fake: FakeService, path: str, body: Any, message: str) -> None:
    status, answer = await post(client, path, body)
    assert status == 400
    assert message in answer["error"]
    assert fake.calls == []
    assert fake.store.nodes == {}


async def test_a_bad_node_late_in_the_list_changes_nothing(client: Client, fake: FakeService) -> None:
    sent = node_list("node-1", "node-2")
    sent["items"][1]["metadata"]["labels"] = {"x": 1}
    status, _ = await post(client, "/filter", {"Pod": pod(), "Nodes": sent})
    assert status == 400
    assert fake.store.nodes == {}  # node-1 was valid, but the request as a whole was refused


@pytest.mark.parametrize("missing", ["PodName", "PodNamespace", "PodUID", "Node"])
async def test_bind_missing_fields_are_400(client: Client, fake: FakeService, missing: str) -> None:
    body = {k: v for k, v in BIND.items() if k != missing}
    status, answer = await post(client, "/bind", body)
    assert (status, answer) == (400, {"error": f"{missing} is required"})
    assert fake.calls == []


async def test_unknown_path_is_a_json_404(client: Client) -> None:
    response = await client.post("/reserve", json={})  # an extension point extenders do not have
    assert (response.status, await response.json()) == (404, {"error": "no such endpoint: /reserve"})


async def test_wrong_method_is_a_json_405(client: Client) -> None:
    response = await client.get("/filter")
    assert response.status == 405
    assert response.headers["Allow"] == "POST"
    assert (await response.json())["error"] == "method GET is not allowed on /filter (allowed: POST)"
    response = await client.post("/healthz")
    assert response.status == 405


async def test_body_over_the_limit_is_a_json_413(make_client: MakeClient, fake: FakeService) -> None:
    client = await make_client(max_body_bytes=1024)
    body = {"Pod": pod(), "Nodes": node_list(*(f"node-{i}" for i in range(50)))}
    response = await client.post("/filter", data=orjson.dumps(body))
    assert response.status == 413
    assert (await response.json())["error"] == "request body is larger than the limit of 1024 bytes (--max-body-bytes)"
    assert fake.calls == [] and fake.store.nodes == {}


async def test_default_limit_takes_5000_full_nodes(client: Client, fake: FakeService) -> None:
    sent = node_list(*(f"node-{i}" for i in range(5000)))
    for item in sent["items"]:  # pad each node to a realistic ~6 KB (images, conditions, annotations)
        item["metadata"]["annotations"] = {"padding": "x" * 6000}
    body = orjson.dumps({"Pod": pod(), "Nodes": sent})
    assert len(body) > 30_000_000
    response = await client.post("/filter", data=body)
    assert response.status == 200
    assert len((await response.json())["Nodes"]["items"]) == 5000


# --- prefix, request ids, logs, lifecycle ---------------------------------------------------------


@pytest.mark.parametrize("prefix", ["/v1", "v1/", "/v1/"])
async def test_path_prefix(make_client: MakeClient, prefix: str) -> None:
    client = await make_client(path_prefix=prefix)
    status, _ = await post(client, "/v1/filter", {"Pod": pod(), "NodeNames": ["node-1"]})
    assert status == 200
    assert (await client.get("/v1/healthz")).status == 200
    assert (await client.get("/v1/debug/nodes/node-1")).status == 200
    assert (await client.post("/filter", json={})).status == 404


async def test_request_id_is_echoed_or_generated(client: Client) -> None:
    response = await client.get("/healthz", headers={"X-Request-Id": "abc-123"})
    assert response.headers["X-Request-Id"] == "abc-123"
    response = await client.get("/healthz")
    generated = response.headers["X-Request-Id"]
    assert len(generated) == 32 and set(generated) <= set("0123456789abcdef")
    assert (await client.get("/healthz")).headers["X-Request-Id"] != generated
    response = await client.get("/healthz", headers={"X-Request-Id": "bad id\twith spaces"})
    assert response.headers["X-Request-Id"] != "bad id\twith spaces"


async def test_filter_logs_one_decision_with_request_context(client: Client, fake: FakeService) -> None:
    fake.outcome = FilterOutcome(
        ["node-1"], failed={"node-2": "cannot allocate all claims"}, unresolvable={"node-3": "x"}
    )
    with capture_logs(processors=[merge_contextvars]) as logs:
        await client.post(
            "/filter",
            json={"Pod": pod(), "NodeNames": ["node-1", "node-2", "node-3"]},
            headers={"X-Request-Id": "req-7"},
        )
    decided = [e for e in logs if e["event"] == "filter.decided"]
    assert len(decided) == 1
    event = decided[0]
    assert event["log_level"] == "debug"  # a pod that fits somewhere: one of tens a second
    assert (event["pod"], event["request_id"], event["verb"]) == ("default/pod-a", "req-7", "filter")
    assert (event["passed"], event["failed"], event["unresolvable"], event["error"]) == (1, 1, 1, "")
    assert isinstance(event["duration_ms"], float)


@pytest.mark.parametrize(
    ("outcome", "error"),
    [
        (FilterOutcome([], failed={"node-1": "cannot allocate all claims"}), ""),
        (FilterOutcome([], error="boom"), "boom"),
    ],
)
async def test_a_filter_that_passes_no_node_is_logged_at_info(
    client: Client, fake: FakeService, outcome: FilterOutcome, error: str
) -> None:
    fake.outcome = outcome
    with capture_logs(processors=[merge_contextvars]) as logs:
        await client.post("/filter", json={"Pod": pod(), "NodeNames": ["node-1"]})
    (event,) = [e for e in logs if e["event"] == "filter.decided"]
    assert (event["log_level"], event["passed"], event["error"]) == ("info", 0, error)


async def test_prioritize_logs_one_event_with_the_best_node(client: Client, fake: FakeService) -> None:
    fake.scores = {"node-1": 3, "node-2": 9, "node-3": 9}
    with capture_logs(processors=[merge_contextvars]) as logs:
        status, answer = await post(client, "/prioritize", {"Pod": pod(), "NodeNames": ["node-1", "node-2", "node-3"]})
    assert status == 200 and answer[1] == {"Host": "node-2", "Score": 9}
    scored = [e for e in logs if e["event"] == "prioritize.scored"]
    assert len(scored) == 1
    event = scored[0]
    assert event["log_level"] == "debug"
    assert (event["pod"], event["verb"], event["nodes"], event["best"], event["score"]) == (
        "default/pod-a", "prioritize", 3, "node-2", 9
    )  # fmt: skip
    assert isinstance(event["duration_ms"], float) and len(event["request_id"]) == 32


async def test_refused_requests_are_logged(client: Client) -> None:
    with capture_logs() as logs:
        await client.post("/bind", json={"PodName": "p"})
    refused = [e for e in logs if e["event"] == "request.refused"]
    assert refused and refused[0]["code"] == 400 and "PodNamespace is required" in refused[0]["error"]


async def test_backend_starts_with_the_app_and_stops_with_it(aiohttp_client: Any, fake: FakeService) -> None:
    client = await aiohttp_client(create_app(fake.as_service(), views=fake.as_views()))
    assert (fake.backend.started, fake.backend.stopped) == (1, 0)
    await client.close()
    assert (fake.backend.started, fake.backend.stopped) == (1, 1)


async def test_caches_are_warmed_once_the_backend_is_synced(aiohttp_client: Any) -> None:
    fake = FakeService()
    await aiohttp_client(create_app(fake, ServerSettings()))
    assert fake.warmed_up == 1


async def test_warm_caches_are_frozen_and_young_objects_collected_less_often(make_client: MakeClient) -> None:
    import gc

    from extender.server.app import GC_THRESHOLDS

    # The collector's settings are the process's: start from the defaults and nothing frozen, not
    # from what an app of an earlier test (any order) left behind, which would pass this test alone.
    gc.set_threshold(700, 10, 10)
    gc.unfreeze()
    client = await make_client()
    status, _ = await post(client, "/filter", {"Pod": pod(), "NodeNames": ["node-1"]})
    assert status == 200
    assert gc.get_threshold() == GC_THRESHOLDS and gc.get_freeze_count() > 0


async def test_each_connection_is_counted_once_whatever_it_carries(client: Client) -> None:
    """``dra_extender_http_connections_total``: kube-scheduler's connection churn made visible
    (two requests on one kept connection count one; another connection counts again)."""
    import aiohttp

    url = str(client.make_url("/"))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as first:
        for _ in range(2):
            async with first.get(url + "healthz") as response:
                assert response.status == 200
                await response.read()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as second:
        async with second.get(url + "healthz") as response:
            await response.read()
        async with second.get(url + "metrics") as response:
            text = await response.text()
    assert "dra_extender_http_connections_total 2.0" in text.splitlines()


def test_a_connection_the_counter_cannot_know_is_left_uncounted_and_fails_nothing() -> None:
    """``Metrics.count_connection`` knows a connection by its TLS object, else its transport, both
    weakly held; an object neither of which can be weakly referenced is not counted (the request
    goes on)."""
    from extender.server.metrics import Metrics

    class Unknowable:
        __slots__ = ()

        def get_extra_info(self, name: str) -> None:
            return None

    class Transport:
        def get_extra_info(self, name: str) -> None:
            return None

    metrics = Metrics(FakeService().as_service())
    metrics.count_connection(Unknowable())  # type: ignore[arg-type]
    kept = Transport()
    metrics.count_connection(kept)  # type: ignore[arg-type]
    metrics.count_connection(kept)  # type: ignore[arg-type]
    assert metrics.registry.get_sample_value("dra_extender_http_connections_total") == 1
