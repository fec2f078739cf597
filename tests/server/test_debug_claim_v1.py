"""``GET debug/resourceclaims/{namespace}/{name}`` answers resource.k8s.io/v1 JSON whatever version the
claim is stored in (DESIGN.md, Contracts): a claim loaded as v1beta1 by the embedded backend is shown
with its flat request under ``exactly``, before a bind and after it (``status.allocation``,
``status.reservedFor``, the finalizer), while the backend keeps it as v1beta1. Conversion details
are in tests/core/test_convert_to_v1.py; classic DRA claims (v1alpha3 ``spec.controller``) stay as
stored, which the README's ``classic-claim`` example checks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient

from extender.backends.embedded import EmbeddedBackend
from extender.server import ServerSettings, create_app
from extender.state.service import SchedulingService

Client = TestClient[Any, Any]
CLUSTER = Path(__file__).parent / "fixtures" / "v1beta1-claim.yaml"

EXPECTED_SPEC = {
    "devices": {
        "requests": [
            {
                "name": "gpus",
                "exactly": {
                    "deviceClassName": "gpu.example.com",
                    "selectors": [{"cel": {"expression": 'device.attributes["gpu.example.com"].model == "a100"'}}],
                    "allocationMode": "ExactCount",
                    "count": 2,
                    "tolerations": [{"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}],
                },
            }
        ],
        "config": [{"requests": ["gpus"], "opaque": {"driver": "gpu.example.com", "parameters": {"sharing": "none"}}}],
    }
}


@pytest.fixture
def backend() -> EmbeddedBackend:
    return EmbeddedBackend.from_paths(CLUSTER)


@pytest.fixture
async def client(aiohttp_client: Callable[..., Awaitable[Client]], backend: EmbeddedBackend) -> Client:
    return await aiohttp_client(create_app(SchedulingService(backend=backend), ServerSettings()))


async def post(client: Client, verb: str, body: Any) -> Any:
    response = await client.post(f"/{verb}", data=orjson.dumps(body))
    assert response.status == 200, await response.text()
    return orjson.loads(await response.read())


async def debug_claim(client: Client) -> Any:
    response = await client.get("/debug/resourceclaims/default/two-gpus")
    assert response.status == 200, await response.text()
    return orjson.loads(await response.read())


async def test_a_v1beta1_claim_is_answered_as_v1_before_and_after_bind(
    client: Client, backend: EmbeddedBackend
) -> None:
    before = await debug_claim(client)
    assert (before["apiVersion"], before["kind"]) == ("resource.k8s.io/v1", "ResourceClaim")
    assert before["spec"] == EXPECTED_SPEC
    assert not (before.get("status") or {}).get("allocation")

    pod = backend.get("Pod", "default", "pod-a")
    assert (await post(client, "filter", {"Pod": pod, "NodeNames": ["node-1"]}))["NodeNames"] == ["node-1"]
    bind = {"PodName": "pod-a", "PodNamespace": "default", "PodUID": "uid-a", "Node": "node-1"}
    assert await post(client, "bind", bind) == {"Error": ""}

    claim = await debug_claim(client)
    assert claim["apiVersion"] == "resource.k8s.io/v1"
    assert claim["spec"] == EXPECTED_SPEC
    allocation = claim["status"]["allocation"]
    results = allocation["devices"]["results"]
    assert sorted(r["device"] for r in results) == ["gpu-0", "gpu-1"]  # the a100s
    assert {(r["request"], r["driver"], r["pool"]) for r in results} == {("gpus", "gpu.example.com", "node-1")}
    assert allocation["devices"]["config"] == [
        {
            "source": "FromClaim",
            "requests": ["gpus"],
            "opaque": {"driver": "gpu.example.com", "parameters": {"sharing": "none"}},
        }
    ]
    terms = allocation["nodeSelector"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "pod-a", "uid": "uid-a"}]
    assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]

    stored = backend.get("ResourceClaim", "default", "two-gpus")
    assert stored is not None
    assert stored["apiVersion"] == "resource.k8s.io/v1beta1"  # the view converts; the backend keeps its version
    assert stored["spec"]["devices"]["requests"][0]["deviceClassName"] == "gpu.example.com"
    assert stored["status"]["allocation"] == allocation
