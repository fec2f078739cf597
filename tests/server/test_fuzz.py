"""Bad input never hurts (issue 13, part 5): hypothesis throws random and adversarial JSON at every
endpoint of the real server (the real service on the Kubernetes backend, over the strict fake API
server) — wrong types, huge numbers, deep nesting, long strings, unicode, duplicated keys, missing
fields, 10,000 node names, oversized bodies, odd paths. Every answer is below 500 and JSON, every
refusal names its problem in ``{"error": ...}``, nothing is logged as a crash, and the cluster is
untouched: not one write reaches the API server, the ledger stays empty.

The stack runs on an event loop of its own thread and is asked over real HTTP, so each example is
one request, as from kube-scheduler or curl."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import http.client
import json
import threading
import traceback
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
import structlog
from aiohttp import web
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from extender.backends.kube import ClusterConfig, KubeBackend, KubeSettings, WatchSettings
from extender.core.errors import ExtenderError
from extender.server import ServerSettings, create_app
from extender.state.service import SchedulingService
from tests import manifests as m
from tests.fakes import FakeApiServer

MAX_BODY = 256 * 1024
NAMES = ["node-1", "node-2", "", "node-1\x00", "ñødé", "a" * 300, "../etc", "node-2 "]


@dataclass
class Stack:
    port: int
    fake: FakeApiServer
    service: SchedulingService
    crashes: list[dict[str, Any]]


def _serve(ready: threading.Event, box: dict[str, Any], stop: asyncio.Event | None = None) -> None:
    async def main() -> None:
        async with FakeApiServer.running(bookmark_interval=None) as fake:
            objects = m.cluster(m.claim("c1"), m.pod("p1", "c1"), m.template("t1"), m.pod("p2", templates=("t1",)))
            for obj in objects:
                fake.put_object(obj)
            settings = KubeSettings(
                watch=WatchSettings(backoff_initial=0.01, backoff_max=0.05, jitter=0),
                freeze_gc=False,
                requeue=None,
                events=True,
            )
            backend = KubeBackend(ClusterConfig(host=fake.url), settings=settings)
            service = SchedulingService(backend=backend, hold_seconds=0)
            app = create_app(service, ServerSettings(max_body_bytes=MAX_BODY))
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            while not backend.synced:
                await asyncio.sleep(0.01)
            halt = asyncio.Event()
            box.update(
                port=runner.addresses[0][1], fake=fake, service=service, halt=halt, loop=asyncio.get_running_loop()
            )
            ready.set()
            await halt.wait()
            await runner.cleanup()

    asyncio.run(main())


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    crashes: list[dict[str, Any]] = []

    def record_crashes(_logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
        if str(event.get("event", "")).endswith("crashed") or method in ("error", "exception", "critical"):
            crashes.append({**event, "exc_info": traceback.format_exc(limit=-3)})
        return event

    previous = structlog.get_config()
    structlog.configure(processors=[*previous["processors"][:-1], record_crashes, previous["processors"][-1]])
    try:  # the global logging configuration is put back whatever happens: later tests log too
        ready, box = threading.Event(), {}
        thread = threading.Thread(target=_serve, args=(ready, box), daemon=True)
        thread.start()
        assert ready.wait(30), "the stack did not start"
        yield Stack(box["port"], box["fake"], box["service"], crashes)
        box["loop"].call_soon_threadsafe(box["halt"].set)
        thread.join(10)
    finally:
        structlog.configure(**previous)


def request(stack: Stack, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", stack.port, timeout=60)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def encode(body: Any) -> bytes:
    """The stdlib's JSON: integers of any size, lone surrogates escaped (orjson refuses both)."""
    return json.dumps(body).encode()


def check(status: int, raw: bytes) -> Any:
    """Below 500, JSON, and a refusal names its problem."""
    assert status < 500, raw[:500]
    with contextlib.suppress(InvalidArgument):  # outside a hypothesis example
        event(f"HTTP {status}")
    answer = orjson.loads(raw)
    if status >= 400:
        assert isinstance(answer, dict) and set(answer) == {"error"}, answer
        assert isinstance(answer["error"], str) and answer["error"].strip(), answer
    return answer


# --- strategies ------------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
    | st.sampled_from(["", "default", "node-1", "c1", "p1", "uid-p1", "\u202e\u0000", "💥" * 20])
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=30,
)
#: Pod-like objects: the keys the service reads, with values of any type.
pods = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.fixed_dictionaries(
            {},
            optional={
                "name": st.sampled_from(["p1", "p2", "ghost"]) | json_values,
                "namespace": st.sampled_from(["default", "other"]) | json_values,
                "uid": st.sampled_from(["uid-p1", "uid-p2", "x"]) | json_values,
                "annotations": json_values,
            },
        ),
        "spec": st.fixed_dictionaries(
            {},
            optional={
                "resourceClaims": json_values
                | st.lists(
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "name": json_values,
                            "resourceClaimName": st.sampled_from(["c1", "nope"]) | json_values,
                            "resourceClaimTemplateName": st.sampled_from(["t1", "nope"]) | json_values,
                        },
                    ),
                    max_size=3,
                ),
                "nodeName": json_values,
            },
        ),
        "status": json_values,
    },
)
#: Paths into a pod that the service reads, for ``mutated_pods``.
POD_PATHS = [
    ("metadata",),
    ("metadata", "name"),
    ("metadata", "namespace"),
    ("metadata", "uid"),
    ("metadata", "annotations"),
    ("metadata", "annotations", "dra-extender.io/scoring"),
    ("spec",),
    ("spec", "nodeName"),
    ("spec", "resourceClaims"),
    ("spec", "resourceClaims", 0),
    ("spec", "resourceClaims", 0, "name"),
    ("spec", "resourceClaims", 0, "resourceClaimName"),
    ("spec", "resourceClaims", 0, "resourceClaimTemplateName"),
    ("status",),
    ("status", "resourceClaimStatuses"),
    ("status", "resourceClaimStatuses", 0),
    ("status", "resourceClaimStatuses", 0, "resourceClaimName"),
]


def _mutate(pod: dict[str, Any], changes: list[tuple[tuple[Any, ...], Any, bool]]) -> dict[str, Any]:
    """``pod`` with each (path, value, delete) applied where the path exists."""
    pod = copy.deepcopy(pod)
    for path, value, delete in changes:
        target: Any = pod
        for step in path[:-1]:
            try:
                target = target[step]
            except (KeyError, IndexError, TypeError):
                break
        else:
            last = path[-1]
            if isinstance(target, dict) or (isinstance(target, list) and isinstance(last, int) and last < len(target)):
                if delete and isinstance(target, dict):
                    target.pop(last, None)
                else:
                    target[last] = value
    return pod


BASE_PODS = [
    m.pod("p1", "c1"),
    m.pod("p2", templates=("t1",)),
    m.pod("ghost", "c1", "nope"),
    {
        **m.pod("p2", templates=("t1",)),
        "status": {"resourceClaimStatuses": [{"name": "t0", "resourceClaimName": "c1"}]},
    },
]
#: Real pods with a few fields changed to values of any type, or removed: most reach the service.
mutated_pods = st.builds(
    _mutate,
    st.sampled_from(BASE_PODS),
    st.lists(st.tuples(st.sampled_from(POD_PATHS), json_values, st.booleans()), max_size=3),
)
node_names = st.lists(st.sampled_from(NAMES) | st.text(max_size=20), max_size=6) | json_values
node_lists = st.fixed_dictionaries(
    {},
    optional={
        "items": json_values
        | st.lists(
            st.fixed_dictionaries(
                {},
                optional={"metadata": st.fixed_dictionaries({}, optional={"name": json_values, "labels": json_values})},
            ),
            max_size=4,
        )
    },
)
extender_args = st.fixed_dictionaries(
    {}, optional={"Pod": mutated_pods | pods | json_values, "NodeNames": node_names, "Nodes": node_lists | json_values}
)
#: Well-formed requests around real pods: what reaches the service and its claim rules.
near_valid_args = st.fixed_dictionaries(
    {
        "Pod": mutated_pods,
        "NodeNames": st.lists(st.sampled_from(["node-1", "node-2", "node-3", "ñødé"]), min_size=1, max_size=4),
    }
)
binding_args = st.fixed_dictionaries(
    {},
    optional={
        "PodName": st.sampled_from(["ghost", "p1"]) | json_values,
        "PodNamespace": st.sampled_from(["default", "nowhere"]) | json_values,
        "PodUID": st.sampled_from(["wrong-uid", "x"]) | json_values,
        "Node": st.sampled_from(NAMES) | json_values,
    },
)
FUZZ = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _exception_names(base: type[BaseException]) -> set[str]:
    names, todo = set(), [base]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return names


#: What an answered error may be counted as: the service's own errors (and filter's ``Error``
#: outcome). Any other class in ``verb_errors`` or ``binds`` is a crash, whatever the logs say.
EXPECTED_ERRORS = _exception_names(ExtenderError) | {"Error", ""}


def crashes_counted(stack: Stack) -> list[str]:
    """The error classes the server's metrics counted that are not the service's own errors."""
    _, raw = request(stack, "GET", "/metrics")
    odd = []
    for line in raw.decode().splitlines():
        if line.startswith(("dra_extender_verb_errors_total{", "dra_extender_binds_total{")):
            reason = line.partition('reason="')[2].partition('"')[0]
            if reason not in EXPECTED_ERRORS:
                odd.append(line)
    return odd


def untouched(stack: Stack) -> None:
    """No write reached the API server (Events included), nothing is in flight, and nothing
    crashed (neither in the logs nor in the metrics' error classes)."""
    writes = [f"{r.method} {r.path}" for r in stack.fake.requests if r.method in ("PUT", "POST", "PATCH", "DELETE")]
    assert writes == []
    assert len(stack.service.ledger) == 0
    crashes, stack.crashes[:] = list(stack.crashes), []
    assert crashes == [], crashes[:3]
    assert crashes_counted(stack) == []


# --- the endpoints ---------------------------------------------------------------------------


@FUZZ
@given(
    verb=st.sampled_from(["filter", "prioritize", "debug/explain"]),
    body=near_valid_args | extender_args | json_values,
)
def test_filter_prioritize_explain(stack: Stack, verb: str, body: Any) -> None:
    check(*request(stack, "POST", f"/{verb}", encode(body)))
    untouched(stack)


@FUZZ
@given(body=binding_args | json_values)
def test_bind(stack: Stack, body: Any) -> None:
    # a request for a real pod with its own UID would be a valid bind: not bad input
    if isinstance(body, dict) and body.get("PodName") in ("p1", "p2"):
        assume(body.get("PodUID") != f"uid-{body['PodName']}")
    status, raw = request(stack, "POST", "/bind", encode(body))
    answer = check(status, raw)
    if status == 200:
        assert answer["Error"], answer  # no such pod, wrong UID...: never a success
    untouched(stack)


@FUZZ
@given(
    kind=st.sampled_from(["resourceclaims", "pods", "nodes"]),
    parts=st.lists(st.text(max_size=30) | st.sampled_from(["default", "c1", "..", "%2F", "p1"]), max_size=3),
)
def test_debug_views(stack: Stack, kind: str, parts: list[str]) -> None:
    path = f"/debug/{kind}/" + "/".join(urllib.parse.quote(p, safe="") for p in parts)
    check(*request(stack, "GET", path))
    untouched(stack)


@FUZZ
@given(raw=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_bytes_that_are_not_json(stack: Stack, raw: bytes) -> None:
    for verb in ("filter", "prioritize", "bind", "debug/explain"):
        check(*request(stack, "POST", f"/{verb}", raw))
    untouched(stack)


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 5000 + b"]" * 5000,  # deeper than any parser's limit
        b'{"Pod": ' + b'{"a": ' * 400 + b"1" + b"}" * 400 + b', "NodeNames": []}',  # deep, but legal JSON
        b'{"Pod": {"metadata": {"name": "p1", "name": "p2", "uid": "uid-p2"}}, "NodeNames": ["node-1"]}',
        b'{"Pod": {"metadata": {"name": "p1"}}, "NodeNames": ["node-1"], "NodeNames": 7}',
        b'{"Pod": {"metadata": {"name": "p1", "uid": "uid-p1"}}, "NodeNames": [' + b'"n",' * 9999 + b'"n"]}',
        orjson.dumps({"Pod": m.pod("p1", "c1"), "NodeNames": [f"node-{i}" for i in range(10_000)]}),
        orjson.dumps({"Pod": m.pod("p1", "c1"), "NodeNames": ["x" * 200_000]}),
        orjson.dumps({"Pod": m.pod("p1", "c1"), "NodeNames": ["node-1"], "pad": "x" * (MAX_BODY + 1)}),
        b'{"Pod": {"metadata": {"name": "p1", "uid": 1e999}}, "NodeNames": ["node-1"]}',
        b'{"Pod": {"metadata": {"name": "p1", "uid": 123456789012345678901234567890}}, "NodeNames": []}',
        '{"Pod": {"metadata": {"name": "p\ud800"}}, "NodeNames": []}'.encode("utf-8", "surrogatepass"),
    ],
    ids=[
        "nesting-5000",
        "nesting-400",
        "duplicate-key-pod",
        "duplicate-key-names",
        "10000-same-names",
        "10000-node-names",
        "long-name",
        "oversized",
        "huge-float",
        "huge-int",
        "lone-surrogate",
    ],
)
@pytest.mark.parametrize("verb", ["filter", "prioritize", "bind", "debug/explain"])
def test_adversarial_bodies(stack: Stack, verb: str, body: bytes) -> None:
    check(*request(stack, "POST", f"/{verb}", body))
    untouched(stack)


def test_the_service_still_works_afterwards(stack: Stack) -> None:
    status, raw = request(stack, "POST", "/filter", orjson.dumps({"Pod": m.pod("p1", "c1"), "NodeNames": NAMES[:2]}))
    assert (status, orjson.loads(raw)["NodeNames"]) == (200, ["node-1", "node-2"])
