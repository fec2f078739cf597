"""docs/preemption.md's worked example, step by step over HTTP against its cluster file: the answers
the document shows are the ones the extender gives."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
from aiohttp.test_utils import TestClient

from extender.backends.embedded import EmbeddedBackend
from extender.server import ServerSettings, create_app
from extender.state.service import SchedulingService

ROOT = Path(__file__).parent.parent
CLUSTER = ROOT / "docs" / "examples" / "preemption-cluster.yaml"
DOC = ROOT / "docs" / "preemption.md"


async def post(client: TestClient, path: str, body: dict[str, Any]) -> Any:
    response = await client.post(path, data=orjson.dumps(body), headers={"Content-Type": "application/json"})
    assert response.status == 200, await response.text()
    return orjson.loads(await response.read())


async def test_the_worked_example(aiohttp_client: Callable[..., Awaitable[TestClient]]) -> None:
    backend = EmbeddedBackend.from_paths(CLUSTER)
    client = await aiohttp_client(create_app(SchedulingService(backend=backend), ServerSettings()))
    pod = backend.get("Pod", "default", "urgent")
    request = {"Pod": pod, "NodeNames": ["node-1"]}
    explained = await post(client, "/debug/explain", request)
    assert [v["pod"] for v in explained["preemption"]["nodes"]["node-1"]["victims"]] == ["default/batch-1"]
    first = await post(client, "/filter", request)
    assert first["FailedNodes"] == {"node-1": "waiting for preempted pods to release devices (1 being evicted)"}
    # batch-2's budget made the choice fall on batch-1
    assert backend.get("Pod", "default", "batch-1") is None and backend.get("Pod", "default", "batch-2") is not None
    assert backend.get("Pod", "default", "urgent")["status"]["nominatedNodeName"] == "node-1"  # type: ignore[index]
    second = await post(client, "/filter", request)
    assert second["NodeNames"] == ["node-1"]
    bound = await post(
        client, "/bind", {"PodName": "urgent", "PodNamespace": "default", "PodUID": "uid-urgent", "Node": "node-1"}
    )
    assert bound == {"Error": ""}
    claim = backend.get("ResourceClaim", "default", "urgent-gpu")
    assert claim is not None and claim["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
    text = DOC.read_text()
    for shown in ('"node-1": "waiting for preempted pods to release devices (1 being evicted)"', '"device": "gpu-0"'):
        assert shown in text, shown
