"""``GET debug/why/{namespace}/{name}`` and the why document (``extender/views/why.py``) over
loopback HTTP with the real service and the embedded backend of ``fixtures/why-cluster.yaml``: the
summary in kube-scheduler's words, reasons grouped per class, the closest nodes ranked by what
they lack, suggestions from the data (the claim and pod holding the devices, the preemption
victims, a missing DeviceClass, the pod's node selector), a bound pod, an unknown pod (404); and
``GET debug/objects`` (resource.k8s.io objects as v1, classic DRA's as held)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient

from extender.backends.embedded import EmbeddedBackend
from extender.core.convert import V1
from extender.server import ServerSettings, create_app
from extender.state import cooperative
from extender.state.service import SchedulingService
from extender.views.debug import DebugViews
from extender.views.why import NODE_SELECTOR_MISMATCH, why

Client = TestClient[Any, Any]
CLUSTER = Path(__file__).parent / "fixtures" / "why-cluster.yaml"
DEMO = Path(__file__).parents[2] / "deploy" / "examples" / "demo-cluster.yaml"
DRA_KINDS = ("DeviceClass", "ResourceSlice", "ResourceClaimTemplate", "ResourceClaim")


@pytest.fixture
def backend() -> EmbeddedBackend:
    return EmbeddedBackend.from_paths(CLUSTER)


@pytest.fixture
async def client(aiohttp_client: Callable[..., Awaitable[Client]], backend: EmbeddedBackend) -> Client:
    service = SchedulingService(backend=backend, hold_seconds=0)
    return await aiohttp_client(create_app(service, ServerSettings(path_prefix="/v1")))


async def get_why(client: Client, name: str, namespace: str = "default") -> dict[str, Any]:
    response = await client.get(f"/v1/debug/why/{namespace}/{name}")
    assert response.status == 200, await response.text()
    answer: dict[str, Any] = orjson.loads(await response.read())
    return answer


async def test_pod_that_fits_nowhere(client: Client) -> None:
    doc = await get_why(client, "big-job")
    assert doc["pod"] == "default/big-job"
    assert doc["uid"] == "uid-big-job"
    assert doc["bound"] is None
    assert doc["error"] == ""
    assert doc["summary"].startswith(
        "0/3 nodes are available: 2 cannot allocate all claims, "
        "1 no devices of the requested device classes on the node."
    )
    assert doc["fits"] == {"count": 0, "nodes": []}
    assert doc["reasons"] == [
        {"reason": "cannot allocate all claims", "outcome": "Failed", "count": 2, "nodes": ["node-a", "node-b"]},
        {
            "reason": "no devices of the requested device classes on the node",
            "outcome": "FailedAndUnresolvable",
            "count": 1,
            "nodes": ["node-c"],
        },
    ]
    assert len(doc["claims"]) == 1 and doc["claims"][0].startswith("default/big-job-gpus-")


async def test_closest_ranks_freeable_before_missing_devices(client: Client) -> None:
    """node-b lacks one device outright; node-a has both, in use: freeing them is the smaller
    change, so node-a comes first; node-c (no GPU at all, unresolvable) last."""
    doc = await get_why(client, "big-job")
    closest = doc["closest"]
    assert [c["node"] for c in closest] == ["node-a", "node-b", "node-c"]
    first = closest[0]
    assert first["message"] == "cannot allocate all claims"
    assert "all are in use" in first["detail"]
    assert (first["devicesShort"], first["devicesMissing"], first["satisfied"], first["requests"]) == (2, 0, 0, 1)
    assert closest[1]["devicesMissing"] == 1
    assert closest[2]["outcome"] == "FailedAndUnresolvable"


async def test_suggestions_name_the_holders_and_the_victims(client: Client) -> None:
    doc = await get_why(client, "big-job")
    kinds = [s["kind"] for s in doc["suggestions"]]
    free = doc["suggestions"][kinds.index("free-devices")]
    assert free["node"] == "node-a"
    assert free["devices"] == 2
    assert free["holders"] == [{"claim": "default/busy", "devices": 2, "pods": ["default/holder"]}]
    assert "held by default/busy (pod default/holder)" in free["message"]
    # node-b cannot be helped by freeing anything: it has one GPU where two are wanted
    too_few = doc["suggestions"][kinds.index("too-few-devices")]
    assert too_few["node"] == "node-b"


async def test_preemption_case(client: Client) -> None:
    doc = await get_why(client, "big-job")
    preempt = next(s for s in doc["suggestions"] if s["kind"] == "preemption")
    assert preempt["node"] == "node-a"
    assert [v["pod"] for v in preempt["victims"]] == ["default/holder"]
    assert preempt["enabled"] is True
    assert doc["preemption"]["helps"] == 1
    assert doc["preemption"]["priority"] == 100
    assert doc["summary"].endswith("preemption: 1/2 nodes would fit after evicting lower-priority pods.")
    assert doc["closest"][0]["preemption"] == "1 pod(s) of lower priority would have to go"


async def test_no_preemption_for_a_pod_of_equal_priority(client: Client) -> None:
    """zoned-job has priority 0, like holder: nobody may go for it."""
    doc = await get_why(client, "zoned-job")
    assert not any(s["kind"] == "preemption" and s.get("victims") for s in doc["suggestions"])


async def test_the_pods_node_selector_is_applied(client: Client) -> None:
    doc = await get_why(client, "zoned-job")
    assert doc["summary"].startswith(f"0/3 nodes are available: 2 {NODE_SELECTOR_MISMATCH}, 1 cannot allocate")
    selector = next(r for r in doc["reasons"] if r["reason"] == NODE_SELECTOR_MISMATCH)
    assert selector == {
        "reason": NODE_SELECTOR_MISMATCH,
        "outcome": "FailedAndUnresolvable",
        "count": 2,
        "nodes": ["node-a", "node-c"],
    }
    # the node the pod may use comes first, although node-a lacks no device outright
    assert doc["closest"][0]["node"] == "node-b"


async def test_node_selector_suggestion_when_the_devices_would_fit_elsewhere(
    client: Client, backend: EmbeddedBackend
) -> None:
    backend.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "pinned", "namespace": "default", "uid": "uid-pinned"},
            "spec": {
                "nodeSelector": {"zone": "c"},
                "containers": [{"name": "main", "image": "busybox"}],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            },
        }
    )
    doc = await get_why(client, "pinned")
    assert doc["fits"]["count"] == 0
    suggestion = next(s for s in doc["suggestions"] if s["kind"] == "node-selector")
    assert suggestion["nodes"] == ["node-b"]
    assert "node-b" in suggestion["message"]


async def test_missing_device_class(client: Client) -> None:
    doc = await get_why(client, "no-class-job")
    assert "tpu.example.com" in doc["error"]
    assert doc["summary"].startswith("0/3 nodes are available: ")
    assert doc["suggestions"] == [
        {
            "kind": "missing-device-class",
            "message": "create DeviceClass tpu.example.com (a request of the pod's claims names it)",
            "deviceClass": "tpu.example.com",
        }
    ]


async def test_pod_that_fits(client: Client) -> None:
    doc = await get_why(client, "small-job")
    assert doc["fits"] == {"count": 1, "nodes": ["node-b"]}
    assert doc["summary"].startswith("1/3 nodes are available: ")
    assert doc["closest"] == []
    assert doc["suggestions"] == []


async def test_bound_pod(client: Client) -> None:
    doc = await get_why(client, "holder")
    assert doc["bound"] == "node-a"
    assert doc["summary"] == "the pod is bound to node node-a"
    assert doc["claims"] == ["default/busy"]
    assert doc["reasons"] == [] and doc["closest"] == []


async def test_unknown_pod_is_404(client: Client) -> None:
    response = await client.get("/v1/debug/why/default/nobody")
    assert response.status == 404
    assert orjson.loads(await response.read()) == {"error": "pod default/nobody not found"}


async def test_not_synced_is_an_error_not_a_guess(backend: EmbeddedBackend) -> None:
    service = SchedulingService(backend=backend, hold_seconds=0)
    backend._synced = False
    pod = backend.get("Pod", "default", "big-job")
    assert pod is not None
    doc = why(DebugViews(service), pod, backend.store.known_node_names())
    assert doc["error"] == "cache not synced yet"
    assert doc["suggestions"][0]["kind"] == "wait"


async def test_why_writes_nothing(client: Client, backend: EmbeddedBackend) -> None:
    await get_why(client, "big-job")
    before = backend.resource_version
    await get_why(client, "big-job")
    await get_why(client, "zoned-job")
    assert backend.resource_version == before  # template claims were made at load


async def test_objects_list_what_the_extender_holds(client: Client, backend: EmbeddedBackend) -> None:
    response = await client.get("/v1/debug/objects")
    assert response.status == 200
    listed = orjson.loads(await response.read())
    assert listed["kind"] == "List" and listed["apiVersion"] == "v1"
    kinds: dict[str, int] = {}
    for item in listed["items"]:
        kinds[item["kind"]] = kinds.get(item["kind"], 0) + 1
    assert kinds == {
        "Node": 3,
        "DeviceClass": 2,
        "ResourceSlice": 3,
        "ResourceClaimTemplate": 2,
        "ResourceClaim": len(backend.list_objects("ResourceClaim")),
        "Pod": 5,
    }
    assert "incomplete" not in listed["metadata"]
    assert {item["apiVersion"] for item in listed["items"] if item["kind"] in DRA_KINDS} == {V1}
    # the list rebuilds the same cluster
    rebuilt = EmbeddedBackend(listed["items"])
    assert set(rebuilt.store.claims) == set(backend.store.claims)


async def test_objects_are_v1_except_classic_dra(aiohttp_client: Callable[..., Awaitable[Client]]) -> None:
    """The demo's classic DRA objects have no v1 form (a claim's ``spec.controller``, a class's
    ``suitableNodes``): they are listed as held, everything else of resource.k8s.io as v1, and
    the list still rebuilds the cluster with both (tests/server/test_debug_claim_v1.py: a v1beta1
    cluster)."""
    backend = EmbeddedBackend.from_paths(DEMO)
    client = await aiohttp_client(create_app(SchedulingService(backend=backend, hold_seconds=0)))
    response = await client.get("/debug/objects")
    assert response.status == 200
    items = orjson.loads(await response.read())["items"]
    as_held = []
    for item in items:
        if item["kind"] in DRA_KINDS and item["apiVersion"] != V1:
            meta = item["metadata"]
            as_held.append((item["kind"], meta.get("namespace", ""), meta["name"]))
            assert item == backend.get(item["kind"], meta.get("namespace", ""), meta["name"])
    assert sorted(as_held) == [
        ("DeviceClass", "", "fpga.example.com"),
        ("ResourceClaim", "default", "fpga"),
        ("ResourceClaim", "default", "fpga-busy"),
        ("ResourceClaim", "default", "mixed-fpga"),
    ]
    rebuilt = EmbeddedBackend(items).store
    fpga = "fpga.example.com"
    assert rebuilt.classes[fpga].suitable_nodes == backend.store.classes[fpga].suitable_nodes is not None
    assert {key: claim.controller for key, claim in rebuilt.claims.items()} == {
        key: claim.controller for key, claim in backend.store.claims.items()
    }


async def test_demo_pods_all_have_a_summary(aiohttp_client: Callable[..., Awaitable[Client]]) -> None:
    backend = EmbeddedBackend.from_paths(DEMO)
    client = await aiohttp_client(create_app(SchedulingService(backend=backend, hold_seconds=0)))
    for key in sorted(backend.store.pods):
        namespace, name = key.split("/")
        response = await client.get(f"/debug/why/{namespace}/{name}")
        assert response.status == 200
        doc = orjson.loads(await response.read())
        assert doc["summary"], key
        if doc["bound"] is None and not doc["error"]:
            assert doc["summary"].startswith(f"{doc['fits']['count']}/4 nodes are available")


async def test_why_lets_the_event_loop_run_between_nodes(backend: EmbeddedBackend) -> None:
    """Explaining is a filter and then an explanation per node (hundreds of milliseconds at
    thousands of nodes, seconds when cold): ``why_cooperatively`` (debug/why, the device map's
    background explanations) must let others run between nodes once a slice of work is over, not
    only inside a search that backtracks. Here every node is past its slice."""
    import asyncio

    service = SchedulingService(backend=backend, hold_seconds=0)
    service.cluster.slice_seconds = 0.0
    turns = 0
    done = False

    async def other_requests() -> None:
        nonlocal turns
        while not done:
            await asyncio.sleep(0)
            turns += 1

    pod = DebugViews(service).pod("default", "big-job")
    assert pod is not None
    expected = why(DebugViews(service), pod, service.store.known_node_names())
    task = asyncio.create_task(other_requests())
    await asyncio.sleep(0)
    turns = 0
    answer = await cooperative.run(why, DebugViews(service), pod, service.store.known_node_names())
    done = True
    await task
    assert answer == expected
    assert turns >= len(service.store.known_node_names()) - 1
