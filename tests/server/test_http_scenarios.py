"""Issue-level scenarios over real loopback HTTP, app + service + embedded backend together:
200 concurrent binds racing for 50 devices, shared claims across pods, a pre-allocated claim
pinned to a node, and rollback of an injected write failure answered as ``Error``.
Semantics in depth are in tests/state/test_service.py; wire details in test_routes.py."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient

from extender.backends.embedded import EmbeddedBackend
from extender.core.answers import NOT_AVAILABLE
from extender.core.errors import ApiUnavailable
from extender.server import ServerSettings, create_app
from extender.state.service import SchedulingService
from tests.manifests import claim, cluster, pod

Client = TestClient[Any, Any]
Factory = Callable[[list[dict[str, Any]]], Awaitable[tuple[Client, EmbeddedBackend]]]


@pytest.fixture
def make_client(aiohttp_client: Callable[..., Awaitable[Client]]) -> Factory:
    async def make(objects: list[dict[str, Any]]) -> tuple[Client, EmbeddedBackend]:
        backend = EmbeddedBackend(copy.deepcopy(objects))
        client = await aiohttp_client(create_app(SchedulingService(backend=backend), ServerSettings()))
        return client, backend

    return make


async def call(client: Client, verb: str, body: Any) -> Any:
    response = await client.post(f"/{verb}", data=orjson.dumps(body))
    assert response.status == 200, await response.text()
    return orjson.loads(await response.read())


def bind_args(name: str, node: str) -> dict[str, str]:
    return {"PodName": name, "PodNamespace": "default", "PodUID": f"uid-{name}", "Node": node}


async def test_200_concurrent_binds_for_50_devices(make_client: Factory) -> None:
    pods = [pod(f"p{i}", f"c{i}") for i in range(200)]
    client, backend = await make_client(cluster(*(claim(f"c{i}") for i in range(200)), *pods, nodes=5, gpus=10))
    answers = await asyncio.gather(*(call(client, "bind", bind_args(f"p{i}", f"node-{i % 5 + 1}")) for i in range(200)))
    assert sum(1 for a in answers if a["Error"] == "") == 50
    assert all("no longer fits" in a["Error"] for a in answers if a["Error"])
    taken = []
    for i in range(200):
        raw = backend.get("ResourceClaim", "default", f"c{i}")
        allocation = (raw or {}).get("status", {}).get("allocation")
        if allocation:
            taken += [(r["pool"], r["device"]) for r in allocation["devices"]["results"]]
    assert len(taken) == 50 and len(set(taken)) == 50


async def test_shared_claim_and_pinned_preallocation(make_client: Factory) -> None:
    client, _ = await make_client(cluster(claim("shared"), pod("a", "shared"), pod("b", "shared")))
    nodes = ["node-1", "node-2"]
    first = await call(client, "filter", {"Pod": pod("a", "shared"), "NodeNames": nodes})
    assert first["NodeNames"] == nodes
    assert (await call(client, "bind", bind_args("a", "node-2")))["Error"] == ""
    second = await call(client, "filter", {"Pod": pod("b", "shared"), "NodeNames": nodes})
    assert second["NodeNames"] == ["node-2"]
    assert second["FailedAndUnresolvableNodes"] == {"node-1": NOT_AVAILABLE}
    assert (await call(client, "bind", bind_args("b", "node-2")))["Error"] == ""
    raw = orjson.loads(await (await client.get("/debug/resourceclaims/default/shared")).read())
    assert [r["name"] for r in raw["status"]["reservedFor"]] == ["a", "b"]


async def test_injected_write_failure_is_rolled_back_and_answered_as_error(make_client: Factory) -> None:
    client, backend = await make_client(cluster(claim("c1"), pod("p", "c1")))
    backend.faults.fail("update_claim_status", ApiUnavailable("etcd is having a bad day"))
    answer = await call(client, "bind", bind_args("p", "node-1"))
    assert "etcd is having a bad day" in answer["Error"]
    raw = orjson.loads(await (await client.get("/debug/resourceclaims/default/c1")).read())
    assert not raw.get("status", {}).get("allocation")
    assert "resource.kubernetes.io/delete-protection" not in (raw["metadata"].get("finalizers") or [])
    assert (await call(client, "bind", bind_args("p", "node-1")))["Error"] == ""
    assert (await call(client, "bind", bind_args("p", "node-1")))["Error"] == ""  # idempotent
