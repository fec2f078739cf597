"""A search that would run for minutes never stalls the process (issue 13, part 2), over loopback
HTTP with the real service: while a pathological pod's filter is paused, ``/healthz`` answers and
other pods are filtered and bound; the pathological filter ends with upstream's ``node N: timed out
trying to allocate devices`` once the node's budget is spent. A long search that completes is
remembered only if nothing it read changed while it paused (a bind on its node during the pause
makes its verdict stale), and a long bind decision is used only if its node did not change
meanwhile.

No test here races the search against the wall clock (issue 22): the searches run on a
``TickingClock`` (their slices and node deadlines end after a fixed amount of work) and the test
holds a search at a pause of its choosing (``HeldSearch``) while the other requests run. How long
the loop is held between two pauses is measured by bench/loop_stall.py, not asserted here."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient

from extender.backends.embedded import EmbeddedBackend
from extender.core.errors import Transient
from extender.server import ServerSettings, create_app
from extender.state.service import SchedulingService
from tests import manifests as m
from tests.pathological import counter_pool, greedy_claim
from tests.timing import HeldSearch, TickingClock

Client = TestClient[Any, Any]


def cluster(*, devices: int = 30, units: int = 7) -> list[dict[str, Any]]:
    """node-1: the counter pool the greedy claim backtracks in (and no GPUs); node-2: two GPUs."""
    return [
        m.gpu_class(),
        m.node("node-1"),
        *counter_pool("node-1", devices=devices, units=units),
        m.node("node-2"),
        m.gpu_slice("node-2", 2),
        greedy_claim("greedy", units=units),
        m.pod("greedy", "greedy"),
        m.claim("c1"),
        m.pod("p1", "c1"),
        m.claim("c2"),
        m.pod("p2", "c2"),
    ]


#: The searches' clock moves 0.1 ms per read: a 2 ms slice ends every 20 reads of the clock (the
#: allocator reads it every 64 steps), whatever the machine's speed.
TICK = 0.0001


def service_for(objects: list[dict[str, Any]], **options: Any) -> SchedulingService:
    options.setdefault("clock", TickingClock(TICK))
    return SchedulingService(backend=EmbeddedBackend(objects), hold_seconds=0, **options)


async def serve(
    aiohttp_client: Callable[..., Awaitable[Client]], objects: list[dict[str, Any]], **options: Any
) -> tuple[Client, SchedulingService]:
    service = service_for(objects, **options)
    return await aiohttp_client(create_app(service, ServerSettings())), service


async def post(client: Client, verb: str, body: Any) -> Any:
    response = await client.post(f"/{verb}", data=orjson.dumps(body))
    assert response.status == 200, await response.text()
    return orjson.loads(await response.read())


def nics_on(node: str) -> list[dict[str, Any]]:
    """A class "nic" and one NIC on ``node``: what p1 takes there while the greedy search runs (the
    greedy claim's class does not match it)."""
    nic_class = m.gpu_class()
    nic_class["metadata"]["name"] = "nic"
    nic_class["spec"]["selectors"][0]["cel"]["expression"] = 'device.driver == "nic.example.com"'
    nics = m.gpu_slice(node, 1)
    nics["metadata"]["name"] = f"{node}-nics"
    pool = {"name": f"{node}-nics", "generation": 1, "resourceSliceCount": 1}
    nics["spec"].update(driver="nic.example.com", pool=pool)
    return [nic_class, nics, m.claim("nic-claim", cls="nic"), m.pod("p3", "nic-claim")]


def bind_body(pod: str, node: str) -> dict[str, Any]:
    return {"PodName": pod, "PodNamespace": "default", "PodUID": f"uid-{pod}", "Node": node}


def filter_body(pod: str, claim: str, nodes: list[str]) -> dict[str, Any]:
    return {"Pod": m.pod(pod, claim), "NodeNames": nodes}


async def healthy(client: Client) -> bool:
    response = await client.get("/healthz")
    return response.status == 200


async def test_a_search_that_would_take_minutes_never_stalls_the_loop(
    aiohttp_client: Callable[..., Awaitable[Client]],
) -> None:
    clock = TickingClock(TICK)
    client, service = await serve(aiohttp_client, cluster(), filter_timeout_seconds=1.5, clock=clock)
    held = HeldSearch(service.cluster, at=(1, 50))
    greedy = asyncio.create_task(post(client, "filter", filter_body("greedy", "greedy", ["node-1", "node-2"])))
    await held.reached(1)
    # the search is paused: the process answers, another pod is filtered and bound meanwhile
    assert not greedy.done() and await healthy(client)
    other = await post(client, "filter", filter_body("p1", "c1", ["node-1", "node-2"]))
    assert other["NodeNames"] == ["node-1", "node-2"]  # one partition fits p1 as well as a GPU
    assert await post(client, "bind", bind_body("p1", "node-2")) == {"Error": ""}
    held.release(1)
    await held.reached(50)  # it paused every slice since, and the loop still serves
    assert not greedy.done() and await healthy(client)
    clock.advance(2.0)  # node-1's budget of 1.5 s is spent
    held.release(50)
    answer = await greedy
    assert answer["Error"] == "node node-1: timed out trying to allocate devices"
    assert answer["NodeNames"] is None or answer["NodeNames"] == []


async def test_a_long_search_that_ends_is_answered_and_remembered(
    aiohttp_client: Callable[..., Awaitable[Client]],
) -> None:
    # 5 units in 20 partitions: many slices of backtracking, within the budget
    client, service = await serve(aiohttp_client, cluster(devices=20, units=5))
    held = HeldSearch(service.cluster, at=())
    answer = await post(client, "filter", filter_body("greedy", "greedy", ["node-1", "node-2"]))
    assert held.pauses > 10  # a long search: it let the loop run again and again
    assert answer["NodeNames"] == [] and answer["FailedNodes"] == {
        "node-1": "cannot allocate all claims",
        "node-2": "cannot allocate all claims",
    }
    fits = service.store.fits
    misses = fits.stats.misses
    again = await post(client, "filter", filter_body("greedy", "greedy", ["node-1", "node-2"]))
    assert again == answer and fits.stats.misses == misses and fits.stats.stale == 0  # remembered


async def test_a_verdict_whose_node_changed_during_the_pause_is_not_remembered(
    aiohttp_client: Callable[..., Awaitable[Client]],
) -> None:
    client, service = await serve(aiohttp_client, cluster(devices=20, units=5) + nics_on("node-1"))
    held = HeldSearch(service.cluster)
    greedy = asyncio.create_task(post(client, "filter", filter_body("greedy", "greedy", ["node-1"])))
    await held.reached()
    assert not greedy.done()
    assert (await post(client, "filter", filter_body("p3", "nic-claim", ["node-1"])))["NodeNames"] == ["node-1"]
    await post(client, "bind", bind_body("p3", "node-1"))
    held.release()
    answer = await greedy
    assert answer["FailedNodes"] == {"node-1": "cannot allocate all claims"}
    assert service.store.fits.stats.stale == 1  # answered, but not kept: node-1's devices changed


async def test_a_long_bind_decision_on_a_node_that_changed_meanwhile_is_refused(
    aiohttp_client: Callable[..., Awaitable[Client]],
) -> None:
    # the greedy pod's bind decides at length (it would not fit, as it happens); p3's bind on the
    # same node meanwhile changes what that decision read: it is not used
    client, service = await serve(aiohttp_client, cluster(devices=20, units=5) + nics_on("node-1"))
    held = HeldSearch(service.cluster)
    bind = asyncio.create_task(post(client, "bind", bind_body("greedy", "node-1")))
    await held.reached()
    assert not bind.done()
    await post(client, "bind", bind_body("p3", "node-1"))
    held.release()
    answer = await bind
    assert answer == {"Error": "node node-1: its devices changed during a long allocation; try again"}
    assert len(service.ledger) == 0 or all(e.pod_uid != "uid-greedy" for e in service.ledger)


def first_available_claim(name: str, *, units: int = 5) -> dict[str, Any]:
    """Its first alternative backtracks through the counter pool for many slices and fails, its
    second fits at once: a search that succeeds after many pauses."""
    return {
        "apiVersion": m.V1,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "fa",
                        "firstAvailable": [
                            {"name": "many", "deviceClassName": "gpu", "count": units + 1},
                            {"name": "one", "deviceClassName": "gpu", "count": 1},
                        ],
                    }
                ]
            }
        },
    }


def aba_cluster() -> list[dict[str, Any]]:
    """Pod a: node-1's only NIC (picked first) and a long first-available search; pod b: the NIC."""
    objects = cluster(devices=20, units=5) + nics_on("node-1")
    objects += [first_available_claim("fa-a"), m.claim("nic-a", cls="nic"), m.pod("a", "nic-a", "fa-a")]
    objects += [m.claim("nic-b", cls="nic"), m.pod("b", "nic-b")]
    objects += [first_available_claim("fa-d"), m.claim("nic-d", cls="nic"), m.pod("d", "nic-d", "fa-d")]
    return objects


def devices_given_twice(service: SchedulingService) -> dict[str, list[str]]:
    owners: dict[str, list[str]] = {}
    for key, claim in service.store.claims.items():
        for result in claim.allocation.devices if claim.allocation is not None else ():
            owners.setdefault(f"{result.driver}/{result.pool}/{result.device}", []).append(key)
    return {device: keys for device, keys in owners.items() if len(keys) > 1}


async def test_a_paused_bind_never_gives_a_device_taken_meanwhile() -> None:
    """Pod a's bind picks the NIC, then searches on; b's bind takes the NIC; then any filter
    registers node-1 again with the same view. The paused decision must still count as stale
    (the FitCache's change mark moved: it never comes back), else the NIC goes to both."""
    service = service_for(aba_cluster())
    held = HeldSearch(service.cluster)
    bind_a = asyncio.create_task(service.bind("default", "a", "uid-a", "node-1"))
    await held.reached()
    assert not bind_a.done()
    await service.bind("default", "b", "uid-b", "node-1")
    service.filter(m.pod("p1", "c1"), ["node-1"])  # registers node-1 again
    held.release()
    with pytest.raises(Transient, match="its devices changed during a long allocation"):
        await bind_a
    assert devices_given_twice(service) == {}


async def test_a_paused_filter_verdict_is_not_remembered_once_its_node_changed() -> None:
    service = service_for(aba_cluster())
    held = HeldSearch(service.cluster)
    filter_a = asyncio.create_task(service.filter_and_recover(m.pod("a", "nic-a", "fa-a"), ["node-1"]))
    await held.reached()
    await service.bind("default", "b", "uid-b", "node-1")  # the only NIC is gone
    service.filter(m.pod("p1", "c1"), ["node-1"])
    held.release()
    assert (await filter_a).node_names == ["node-1"]  # as of when its search began
    assert service.store.fits.stats.stale == 1
    # the same shape for another pod is decided afresh, not passed from a stale verdict
    assert service.filter(m.pod("d", "nic-d", "fa-d"), ["node-1"]).node_names == []
