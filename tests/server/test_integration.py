"""The server with the real ``SchedulingService`` and the embedded backend, over loopback HTTP:
filter / prioritize / bind in both nodeCacheCapable modes on a small cluster, template claims
created on the fly, bind idempotency and UID checks, node labels from a NodeList reaching node
selectors, the debug views after a bind, and metrics that follow the cache. Allocation semantics
themselves are tested in ``tests/core`` and ``tests/state``; the wire details in ``test_routes.py``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient
from structlog.testing import capture_logs

from extender.backends.embedded import EmbeddedBackend
from extender.server import ServerSettings, create_app
from extender.state.service import SchedulingService
from tests.manifests import claim, cluster, pod
from tests.timing import TickingClock

Client = TestClient[Any, Any]
CLUSTER = Path(__file__).parent / "fixtures" / "small-cluster.yaml"
NODES = ["node-1", "node-2"]


@pytest.fixture
def backend() -> EmbeddedBackend:
    return EmbeddedBackend.from_paths(CLUSTER)


@pytest.fixture
async def client(aiohttp_client: Callable[..., Awaitable[Client]], backend: EmbeddedBackend) -> Client:
    # a clock that stands still: a hold lasts until its pod's next request however slow this
    # machine is between two requests (the counts of test_metrics_follow_the_cache depend on it)
    service = SchedulingService(backend=backend, clock=TickingClock())
    return await aiohttp_client(create_app(service, ServerSettings(path_prefix="/v1")))


def stored_pod(backend: EmbeddedBackend, name: str) -> dict[str, Any]:
    raw = backend.get("Pod", "default", name)
    assert raw is not None
    return raw


def node_list(*names: str, **labels: str) -> dict[str, Any]:
    items = [{"metadata": {"name": n, "labels": {"kubernetes.io/hostname": n, **labels}}} for n in names]
    return {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": items}


async def post(client: Client, verb: str, body: Any) -> Any:
    response = await client.post(f"/v1/{verb}", data=orjson.dumps(body))
    assert response.status == 200, await response.text()
    return orjson.loads(await response.read())


async def test_ready_once_loaded(client: Client) -> None:
    assert (await client.get("/v1/readyz")).status == 200


async def test_filter_names_mode(client: Client, backend: EmbeddedBackend) -> None:
    answer = await post(client, "filter", {"Pod": stored_pod(backend, "pod-a"), "NodeNames": NODES})
    assert answer == {
        "Nodes": None,
        "NodeNames": ["node-1"],
        "FailedNodes": {"node-2": "cannot allocate all claims"},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }


async def test_filter_nodes_mode(client: Client, backend: EmbeddedBackend) -> None:
    sent = node_list(*NODES)
    answer = await post(client, "filter", {"Pod": stored_pod(backend, "pod-a"), "Nodes": sent})
    assert answer["NodeNames"] is None
    assert answer["Nodes"]["items"] == [sent["items"][0]]
    assert answer["FailedNodes"] == {"node-2": "cannot allocate all claims"}


async def test_pod_without_claims_passes_every_node(client: Client) -> None:
    pod = {"metadata": {"name": "plain", "namespace": "default", "uid": "uid-p"}, "spec": {"containers": []}}
    answer = await post(client, "filter", {"Pod": pod, "NodeNames": NODES})
    assert (answer["NodeNames"], answer["FailedNodes"], answer["Error"]) == (NODES, {}, "")


async def test_node_labels_from_a_node_list_reach_node_selectors(client: Client, backend: EmbeddedBackend) -> None:
    pod = stored_pod(backend, "pod-a")
    # node-9 exists only in the request; its label puts it in reach of the two shared GPUs
    answer = await post(client, "filter", {"Pod": pod, "NodeNames": ["node-9"]})
    assert answer["NodeNames"] == []
    answer = await post(client, "filter", {"Pod": pod, "Nodes": node_list("node-9", pool="shared")})
    assert [item["metadata"]["name"] for item in answer["Nodes"]["items"]] == ["node-9"]


async def test_prioritize_scores_every_node(client: Client, backend: EmbeddedBackend) -> None:
    answer = await post(client, "prioritize", {"Pod": stored_pod(backend, "pod-a"), "NodeNames": NODES})
    assert [entry["Host"] for entry in answer] == NODES
    assert all(0 <= entry["Score"] <= 10 for entry in answer)
    assert answer[1]["Score"] == 0  # does not fit there


async def test_filter_prioritize_bind_then_debug(client: Client, backend: EmbeddedBackend) -> None:
    pod = stored_pod(backend, "pod-a")
    assert (await post(client, "filter", {"Pod": pod, "NodeNames": NODES}))["NodeNames"] == ["node-1"]
    bind = {"PodName": "pod-a", "PodNamespace": "default", "PodUID": "uid-a", "Node": "node-1"}
    with capture_logs() as logs:
        assert await post(client, "bind", bind) == {"Error": ""}
    finished = [e for e in logs if e["event"] == "bind.finished"]
    assert [(e["pod"], e["node"], e["outcome"]) for e in finished] == [("default/pod-a", "node-1", "bound")]

    claim = await (await client.get("/v1/debug/resourceclaims/default/two-gpus")).json()
    devices = claim["status"]["allocation"]["devices"]["results"]
    assert sorted(d["device"] for d in devices) == ["gpu-0", "gpu-1"]
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "pod-a", "uid": "uid-a"}]
    assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]
    pod_view = await (await client.get("/v1/debug/pods/default/pod-a")).json()
    assert pod_view["spec"]["nodeName"] == "node-1"
    node_view = await (await client.get("/v1/debug/nodes/node-1")).json()
    assert {d["device"]: d["claims"] for d in node_view["devices"]} == {
        "gpu-0": ["default/two-gpus"],
        "gpu-1": ["default/two-gpus"],
    }

    assert await post(client, "bind", bind) == {"Error": ""}  # a retry after success is a success
    metrics = await (await client.get("/v1/metrics")).text()
    assert "dra_extender_allocations_total 1.0" in metrics
    assert 'dra_extender_binds_total{outcome="bound",reason=""} 2.0' in metrics


async def test_template_claim_is_created_and_sees_used_devices(client: Client, backend: EmbeddedBackend) -> None:
    bind = {"PodName": "pod-a", "PodNamespace": "default", "PodUID": "uid-a", "Node": "node-1"}
    assert await post(client, "bind", bind) == {"Error": ""}  # pod-a is in the manifests: no filter needed
    pod_b = stored_pod(backend, "pod-b")
    answer = await post(client, "filter", {"Pod": pod_b, "NodeNames": NODES})
    assert answer["NodeNames"] == ["node-2"]  # node-1's GPUs went to pod-a
    statuses = stored_pod(backend, "pod-b")["status"]["resourceClaimStatuses"]
    assert [s["name"] for s in statuses] == ["gpu"]
    assert statuses[0]["resourceClaimName"].startswith("pod-b-gpu-")
    bind_b = {"PodName": "pod-b", "PodNamespace": "default", "PodUID": "uid-b", "Node": "node-2"}
    assert await post(client, "bind", bind_b) == {"Error": ""}


async def test_bind_with_a_stale_uid_is_an_error(client: Client) -> None:
    bind = {"PodName": "pod-a", "PodNamespace": "default", "PodUID": "uid-old", "Node": "node-1"}
    answer = await post(client, "bind", bind)
    assert "re-created" in answer["Error"]
    claim = await (await client.get("/v1/debug/resourceclaims/default/two-gpus")).json()
    assert not (claim.get("status") or {}).get("allocation")
    metrics = await (await client.get("/v1/metrics")).text()
    assert 'dra_extender_binds_total{outcome="error",reason="WriteConflict"} 1.0' in metrics


async def test_bind_to_a_node_that_does_not_fit_is_an_error(client: Client) -> None:
    bind = {"PodName": "pod-a", "PodNamespace": "default", "PodUID": "uid-a", "Node": "node-2"}
    answer = await post(client, "bind", bind)
    assert answer["Error"]
    assert (await (await client.get("/v1/debug/pods/default/pod-a")).json())["spec"].get("nodeName") is None


async def test_explain(client: Client, backend: EmbeddedBackend) -> None:
    answer = await post(client, "debug/explain", {"Pod": stored_pod(backend, "pod-a"), "NodeNames": NODES})
    assert answer["pod"] == "default/pod-a"
    assert [(n["outcome"]) for n in answer["nodes"]] == ["Fits", "Failed"]


async def test_metrics_follow_the_cache(client: Client, backend: EmbeddedBackend) -> None:
    await post(client, "filter", {"Pod": stored_pod(backend, "pod-a"), "NodeNames": NODES})
    await post(client, "filter", {"Pod": stored_pod(backend, "pod-a"), "NodeNames": NODES})
    text = await (await client.get("/v1/metrics")).text()
    assert 'dra_extender_cache_objects{kind="slices"} 3.0' in text
    assert 'dra_extender_cache_objects{kind="devices"} 5.0' in text
    # two-gpus, and pod-b's claim that the embedded resourceclaim controller created at load
    assert 'dra_extender_cache_objects{kind="claims"} 2.0' in text
    assert "dra_extender_ready 1.0" in text
    samples = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line.startswith("dra_extender_cel_")
    }
    lookups = sum(v for k, v in samples.items() if k.startswith("dra_extender_cel_result_cache_total"))
    assert lookups > 0
    # The first filter left one node and held the pod's devices there (kube-scheduler binds such a
    # pod without prioritize); the second, a new attempt, gave them back first: that node's verdict
    # was dropped and decided again, every other node's was remembered; its new hold then dropped
    # that node's verdict once more.
    assert 'dra_extender_holds_total{outcome="placed"} 2.0' in text
    assert 'dra_extender_holds_total{outcome="dropped"} 1.0' in text
    assert f'dra_extender_fit_cache_total{{result="hit"}} {float(len(NODES) - 1)}' in text
    assert f'dra_extender_fit_cache_total{{result="miss"}} {float(len(NODES) + 1)}' in text
    assert f"dra_extender_fit_cache_verdicts {float(len(NODES) - 1)}" in text


async def test_with_filter_picks_node_the_filter_answers_one_node_and_counts_it(
    aiohttp_client: Callable[..., Awaitable[Client]],
) -> None:
    objects = cluster(claim("c-p"), pod("p", "c-p"), nodes=3, gpus=2)
    service = SchedulingService(backend=EmbeddedBackend(objects), clock=TickingClock(), filter_picks_node=True)
    picking = await aiohttp_client(create_app(service, ServerSettings(path_prefix="/v1")))
    names = ["node-1", "node-2", "node-3"]
    for _ in range(2):  # the pod's second attempt gives its hold back and picks again
        answer = await post(picking, "filter", {"Pod": stored_pod(service.backend, "p"), "NodeNames": names})
        assert answer["NodeNames"] == ["node-1"] and answer["FailedNodes"] == {} and answer["Error"] == ""
    text = await (await picking.get("/v1/metrics")).text()
    assert "dra_extender_filter_picks_total 2.0" in text
    assert 'dra_extender_holds_total{outcome="placed"} 2.0' in text
