"""The debug endpoints for classic DRA over loopback HTTP, with the real service and the embedded
backend (its simulated driver controller from tests/classic.py): ``GET
debug/podschedulingcontexts/{namespace}/{name}`` (the context as the store holds it, 404 when
absent) and ``POST debug/explain`` for pods with pending classic claims (the drivers' answers, the
context, the deny-list per node, the wait for the drivers), which writes nothing."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient

from extender.backends.embedded import EmbeddedBackend
from extender.core.classic import EXCLUDED_BY_CLASS, UNSUITABLE, WAITING_FOR_DRIVER
from extender.server import ServerSettings, create_app
from extender.state.service import SchedulingService
from tests.classic import (
    DRIVER,
    allocated_by_driver,
    classic_claim,
    classic_class,
    classic_node,
    gpu_slice,
    pod,
    quiet,
    structured_claim,
    structured_class,
)

Client = TestClient[Any, Any]
NODES = ["node-1", "node-2"]
PREFIX = "/v1"


class Cluster:
    """An embedded classic cluster (one node per capacity) served by the app under ``PREFIX``;
    every PodSchedulingContext event is recorded."""

    def __init__(self, *objects: dict[str, Any], capacity: tuple[int | None, ...] = (2, 2)) -> None:
        manifests = [classic_class(), structured_class()]
        for i, cap in enumerate(capacity, start=1):
            manifests += [classic_node(f"node-{i}", cap), gpu_slice(f"node-{i}")]
        self.backend = EmbeddedBackend(copy.deepcopy([*manifests, *objects]))
        self.service = SchedulingService(backend=self.backend, hold_seconds=0)
        self.context_events: list[tuple[str, dict[str, Any]]] = []
        self.backend.add_listener(self._record)
        self.client: Client | None = None

    def _record(self, event: str, obj: dict[str, Any]) -> None:
        if obj.get("kind") == "PodSchedulingContext":
            self.context_events.append((event, obj))

    async def settle(self) -> None:
        """Until the negotiator's publishes and the driver's answers are done."""
        await quiet(self.service.classic.idle, self.backend.classic_driver(DRIVER).idle)

    def raw_pod(self, name: str) -> dict[str, Any]:
        raw = self.backend.get("Pod", "default", name)
        assert raw is not None
        return raw

    async def post(self, verb: str, body: Any) -> Any:
        assert self.client is not None
        response = await self.client.post(f"{PREFIX}/{verb}", data=orjson.dumps(body))
        assert response.status == 200, await response.text()
        return orjson.loads(await response.read())

    async def filter(self, pod_name: str, nodes: list[str] = NODES) -> Any:
        """A filter as kube-scheduler sends it, then the cluster settled (the context published and
        answered by the driver)."""
        answer = await self.post("filter", {"Pod": self.raw_pod(pod_name), "NodeNames": nodes})
        await self.settle()
        return answer

    async def explain(self, pod_name: str, nodes: list[str] = NODES) -> Any:
        return await self.post("debug/explain", {"Pod": self.raw_pod(pod_name), "NodeNames": nodes})

    async def get_context(self, name: str, namespace: str = "default") -> tuple[int, Any]:
        assert self.client is not None
        response = await self.client.get(f"{PREFIX}/debug/podschedulingcontexts/{namespace}/{name}")
        assert response.content_type == "application/json"
        return response.status, orjson.loads(await response.read())


@pytest.fixture
async def make_cluster(
    aiohttp_client: Callable[..., Awaitable[Client]],
) -> AsyncIterator[Callable[..., Awaitable[Cluster]]]:
    made: list[Cluster] = []

    async def make(*objects: dict[str, Any], capacity: tuple[int | None, ...] = (2, 2)) -> Cluster:
        cluster = Cluster(*objects, capacity=capacity)
        cluster.client = await aiohttp_client(create_app(cluster.service, ServerSettings(path_prefix=PREFIX)))
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:  # no driver re-check timers or publishers outlive the test
        await cluster.service.classic.stop()
        for driver in cluster.backend.classic_drivers.values():
            await driver.stop()


def classic_nodes(answer: Any) -> dict[str, Any]:
    return {entry["node"]: entry for entry in answer["nodes"]}


# --- GET debug/podschedulingcontexts ----------------------------------------------------------------


async def test_an_absent_context_is_a_json_404(make_cluster: Callable[..., Awaitable[Cluster]]) -> None:
    cluster = await make_cluster(classic_claim("c1"), pod("p1", "c1"))
    assert await cluster.get_context("p1") == (404, {"error": "podschedulingcontext default/p1 not found"})
    assert await cluster.get_context("p1", namespace="other") == (
        404,
        {"error": "podschedulingcontext other/p1 not found"},
    )


async def test_the_context_is_served_as_the_store_holds_it(make_cluster: Callable[..., Awaitable[Cluster]]) -> None:
    """The filter publishes potentialNodes, the driver answers in the status: the endpoint shows
    the whole raw object, both halves, as the service's store holds it."""
    cluster = await make_cluster(classic_claim("c1"), pod("p1", "c1"))
    await cluster.filter("p1")
    status, body = await cluster.get_context("p1")
    assert status == 200
    assert body == cluster.service.store.raw_scheduling_contexts["default/p1"]
    assert body["apiVersion"] == "resource.k8s.io/v1alpha3" and body["kind"] == "PodSchedulingContext"
    assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-p1"
    assert body["spec"] == {"potentialNodes": NODES}
    assert body["status"]["resourceClaims"] == [{"name": "c0"}]  # answered: no node is unsuitable
    # without the prefix there is no such route
    assert cluster.client is not None
    assert (await cluster.client.get("/debug/podschedulingcontexts/default/p1")).status == 404


# --- POST debug/explain -------------------------------------------------------------------------------


async def test_explain_one_pending_classic_claim(make_cluster: Callable[..., Awaitable[Cluster]]) -> None:
    """One claim needs no answer from its driver: every node passes, a node may be selected at
    bind; the driver has not been asked yet (no context)."""
    cluster = await make_cluster(classic_claim("c1"), pod("p1", "c1"))
    answer = await cluster.explain("p1")
    assert answer["error"] == ""
    assert answer["claims"] == ["default/c1"]
    assert answer["classic"] == {
        "claims": [{"claim": "default/c1", "podClaimName": "c0", "driver": DRIVER, "answered": False}],
        "context": None,
        "maySelect": True,
        "message": "the node chosen at bind is selected for the drivers, which allocate the claims for it",
    }
    for name, node in classic_nodes(answer).items():
        assert (node["outcome"], node["fits"], node["message"]) == ("Fits", True, "all claims fit"), name
        assert node["classic"]["reason"] == ""
        [claim] = node["classic"]["claims"]
        assert (claim["claim"], claim["driver"], claim["verdict"]) == ("default/c1", DRIVER, "not-answered")


async def test_explain_after_the_driver_answered(make_cluster: Callable[..., Awaitable[Cluster]]) -> None:
    """Once the context lists the potential nodes and the driver answered: the context's fields,
    the answer, and per node whether the driver was asked about it."""
    cluster = await make_cluster(classic_claim("c1"), pod("p1", "c1"), capacity=(2, 2, 2))
    await cluster.filter("p1", ["node-1", "node-2"])  # node-3 is not published
    answer = await cluster.explain("p1", ["node-1", "node-2", "node-3"])
    assert answer["classic"]["context"] == {"selectedNode": "", "potentialNodes": NODES}
    assert answer["classic"]["claims"][0]["answered"] is True
    assert answer["classic"]["claims"][0]["unsuitableNodes"] == []
    verdicts = {name: node["classic"]["claims"][0]["verdict"] for name, node in classic_nodes(answer).items()}
    assert verdicts == {"node-1": "suitable", "node-2": "suitable", "node-3": "not-asked"}
    assert {node["outcome"] for node in answer["nodes"]} == {"Fits"}


async def test_explain_two_claims_waits_for_the_driver(make_cluster: Callable[..., Awaitable[Cluster]]) -> None:
    """Two pending claims: no node may be selected before the driver answered for both, so the pod
    waits (the filter's Error); once it has, a node may be selected."""
    cluster = await make_cluster(classic_claim("c1"), classic_claim("c2"), pod("p1", "c1", "c2"))
    answer = await cluster.explain("p1")
    assert answer["error"] == WAITING_FOR_DRIVER
    assert answer["claims"] == ["default/c1", "default/c2"]
    classic = answer["classic"]
    assert (classic["maySelect"], classic["message"]) == (False, WAITING_FOR_DRIVER)
    assert classic["waitingFor"] == ["default/c1", "default/c2"]
    assert [c["answered"] for c in classic["claims"]] == [False, False]
    for node in answer["nodes"]:
        assert (node["outcome"], node["fits"], node["message"]) == ("Error", False, WAITING_FOR_DRIVER)
        assert (
            node["detail"]
            == f"no answer yet from the driver of claim default/c1 ({DRIVER}), claim default/c2 ({DRIVER})"
        )
        assert [c["verdict"] for c in node["classic"]["claims"]] == ["not-answered", "not-answered"]

    filtered = await cluster.filter("p1")  # publishes potentialNodes; the driver answers for both
    assert filtered["Error"] == WAITING_FOR_DRIVER
    answer = await cluster.explain("p1")
    assert answer["error"] == ""
    assert answer["classic"]["maySelect"] is True and "waitingFor" not in answer["classic"]
    assert [c["answered"] for c in answer["classic"]["claims"]] == [True, True]
    assert {node["outcome"] for node in answer["nodes"]} == {"Fits"}


async def test_explain_a_full_node_is_unsuitable(make_cluster: Callable[..., Awaitable[Cluster]]) -> None:
    """node-1 offers one allocation and holds one: the driver lists it as unsuitable, explain says
    so for the node (the filter's unresolvable reason) and names the claim and its driver."""
    other = allocated_by_driver(classic_claim("old"), "node-1", reserved_for=("someone",))
    cluster = await make_cluster(other, classic_claim("c1"), pod("p1", "c1"), capacity=(1, 2))
    await cluster.filter("p1")
    answer = await cluster.explain("p1")
    assert answer["error"] == ""
    assert answer["classic"]["claims"][0]["unsuitableNodes"] == ["node-1"]
    nodes = classic_nodes(answer)
    full = nodes["node-1"]
    assert (full["outcome"], full["fits"], full["reason"], full["message"]) == (
        "FailedAndUnresolvable",
        False,
        UNSUITABLE,
        UNSUITABLE,
    )
    assert full["detail"] == f"claim default/c1 (driver {DRIVER}): {UNSUITABLE}"
    assert full["classic"] == {
        "reason": UNSUITABLE,
        "claims": [{"claim": "default/c1", "driver": DRIVER, "verdict": "unsuitable", "message": UNSUITABLE}],
    }
    assert (nodes["node-2"]["outcome"], nodes["node-2"]["classic"]["claims"][0]["verdict"]) == ("Fits", "suitable")


async def test_explain_a_node_the_class_excludes(make_cluster: Callable[..., Awaitable[Cluster]]) -> None:
    """A class's suitableNodes is the static pre-filter: node-2 lacks the label, whatever the driver says."""
    picky = classic_class("picky", suitable={"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["node-1"]}
    ]}]})  # fmt: skip
    cluster = await make_cluster(picky, classic_claim("c1", cls="picky"), pod("p1", "c1"))
    answer = await cluster.explain("p1")
    nodes = classic_nodes(answer)
    assert nodes["node-1"]["outcome"] == "Fits"
    excluded = nodes["node-2"]
    assert (excluded["outcome"], excluded["reason"], excluded["classic"]["reason"]) == (
        "FailedAndUnresolvable",
        EXCLUDED_BY_CLASS,
        EXCLUDED_BY_CLASS,
    )
    assert excluded["classic"]["claims"][0]["verdict"] == "excluded-by-class"


async def test_explain_a_mixed_pod_keeps_the_structured_explanation(
    make_cluster: Callable[..., Awaitable[Cluster]],
) -> None:
    """A structured claim beside a classic one: the structured claim is explained per request as
    for any pod; the classic one beside it."""
    cluster = await make_cluster(classic_claim("c1"), structured_claim("s1"), pod("p1", "c1", "s1"))
    answer = await cluster.explain("p1")
    assert answer["claims"] == ["default/s1", "default/c1"]  # structured claims first
    for node in answer["nodes"]:
        assert (node["outcome"], node["message"]) == ("Fits", "all claims fit")
        assert node["classic"]["claims"][0]["claim"] == "default/c1"
    assert [c["claim"] for c in answer["classic"]["claims"]] == ["default/c1"]


async def test_explain_writes_nothing(make_cluster: Callable[..., Awaitable[Cluster]]) -> None:
    """Explain is read-only: no context is created (a filter would publish potentialNodes), none
    changed, and no publish is queued, for one claim or for two (waiting)."""
    cluster = await make_cluster(
        classic_claim("c1"), pod("p1", "c1"), classic_claim("c2"), classic_claim("c3"), pod("p2", "c2", "c3")
    )
    for name in ("p1", "p2"):
        await cluster.explain(name)
        await cluster.settle()
        assert await cluster.get_context(name) == (404, {"error": f"podschedulingcontext default/{name} not found"})
    assert cluster.context_events == []
    assert cluster.service.classic.stats.publishes == {}
    # with a context present (a filter made it), explain leaves it as it is
    await cluster.filter("p1", ["node-1"])
    before = cluster.backend.get("PodSchedulingContext", "default", "p1")
    events = len(cluster.context_events)
    await cluster.explain("p1", ["node-1", "node-2"])  # another node set: a filter would publish it
    await cluster.settle()
    assert cluster.backend.get("PodSchedulingContext", "default", "p1") == before
    assert len(cluster.context_events) == events
