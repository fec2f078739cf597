"""The device map's read model (``extender/views/devicemap.py``) over tests/state/fixtures/device-states.yaml:
every state on the right device, partitions grouped, filters and paging, pools and pending pods, a
revision that moves with every change, and the incremental upkeep agreeing with a map built afresh
(while re-rendering only the nodes a change concerns)."""

from __future__ import annotations

import asyncio
import copy
import random
from pathlib import Path
from typing import Any

import pytest

from extender.backends.embedded import EmbeddedBackend
from extender.core.model import AllocationResult, DeviceResult
from extender.state.cache.nominations import Nomination
from extender.state.preemption.devices import WAITING_FOR_VICTIMS
from extender.state.service import SchedulingService
from extender.views import devicemap as devicemap_module
from extender.views import why
from extender.views.debug import DebugViews
from extender.views.devicemap import DEVICE_STATES, DeviceMap, NodeFilter, UnknownDeviceClass
from tests import manifests as m
from tests.state import test_preemption as preemption_tests
from tests.timing import TickingClock

CLUSTER = Path(__file__).parent / "fixtures" / "device-states.yaml"


def make(**options: Any) -> tuple[EmbeddedBackend, SchedulingService, DeviceMap]:
    backend = EmbeddedBackend.from_paths(CLUSTER)
    service = SchedulingService(backend=backend, **options)
    return (
        backend,
        service,
        DeviceMap(service.cluster, service.stats, DebugViews(service), clock=lambda: 1_893_457_000.0),
    )


def devices_of(device_map: DeviceMap, node: str) -> dict[str, dict[str, Any]]:
    detail = device_map.node(node)
    assert detail is not None
    return {d["name"]: d for d in detail["devices"]}


def states(device_map: DeviceMap, node: str) -> dict[str, str]:
    page = device_map.nodes(NodeFilter(q=node))
    (found,) = [n for n in page["nodes"] if n["name"] == node]
    return {d["name"]: d["state"] for d in found["devices"]}


def in_flight(service: SchedulingService, claim: str, node: str, *devices: str, tentative: bool = False) -> None:
    """A ledger entry for ``claim`` on ``devices`` of ``node``'s GPU pool: a bind in flight or a hold."""
    stored = service.store.claims[claim]
    result = AllocationResult(
        devices=tuple(DeviceResult(request="gpu", driver="gpu.example.com", pool=node, device=d) for d in devices)
    )
    service.ledger.add(
        claim=stored, pod_key=f"default/pod-of-{stored.name}", pod_uid=f"uid-{stored.name}", node=node,
        result=result, tentative=tentative,
    )  # fmt: skip


def test_every_state_is_shown_on_its_device() -> None:
    _, service, device_map = make()
    in_flight(service, "default/one-gpu", "node-a", "gpu-1")
    in_flight(service, "default/two-gpus", "node-a", "gpu-2", tentative=True)
    nic = DeviceResult(request="nic", driver="nic.example.com", pool="node-a", device="nic-0")
    service.cluster.nominations.add(
        Nomination(
            pod_key="default/urgent", pod_uid="00000000-0000-4000-8000-0000000000b4", priority=100, node="node-a",
            results=(AllocationResult(devices=(nic,)),), victims=(), freed=frozenset(),
            expires=service.cluster.nominations.clock() + 60,
        )
    )  # fmt: skip
    assert states(device_map, "node-a") == {
        "gpu-0": "allocated",
        "gpu-1": "binding",
        "gpu-2": "held",
        "gpu-3": "tainted",
        "nic-0": "nominated",
    }
    nominated = devices_of(device_map, "node-a")["nic-0"]["nomination"]
    assert nominated == {"pod": "default/urgent", "priority": 100, "until": "2030-01-01T00:17:40Z"}
    assert states(device_map, "node-b") == {"gpu-0": "free", "gpu-1": "shared", "gpu-2": "admin"}
    assert states(device_map, "node-c") == {"gpu-0": "free", "gpu-0-half-0": "allocated", "gpu-0-half-1": "free"}
    totals = device_map.summary()["totals"]
    assert totals == {
        "nodes": 4,
        "devices": 11,
        "free": 3,
        "allocated": 2,
        "binding": 1,
        "held": 1,
        "nominated": 1,
        "tainted": 1,
        "shared": 1,
        "admin": 1,
    }
    assert set(DEVICE_STATES) <= set(totals)


def test_holders_claims_and_pods() -> None:
    _, service, device_map = make()
    in_flight(service, "default/one-gpu", "node-a", "gpu-1")
    node_a = devices_of(device_map, "node-a")
    assert node_a["gpu-0"]["claims"] == [
        {"claim": "team-a/train", "pods": ["team-a/trainer"], "request": "gpu", "adminAccess": False,
         "state": "allocated"}
    ]  # fmt: skip
    assert node_a["gpu-1"]["claims"][0]["claim"] == "default/one-gpu"
    assert node_a["gpu-1"]["claims"][0]["state"] == "binding"
    assert node_a["gpu-1"]["pods"] == ["default/pod-of-one-gpu"]
    assert node_a["gpu-3"]["taints"] == [{"key": "maintenance", "value": "fan", "effect": "NoSchedule"}]
    page = device_map.nodes(NodeFilter(q="node-a"))["nodes"][0]
    gpu_0 = next(d for d in page["devices"] if d["name"] == "gpu-0")
    assert gpu_0 == {
        "id": "gpu.example.com/node-a/gpu-0",
        "driver": "gpu.example.com",
        "pool": "node-a",
        "name": "gpu-0",
        "state": "allocated",
        "group": None,
        "use": "",
        "claims": ["team-a/train"],
        "pods": ["team-a/trainer"],
        "taints": [],
    }
    node_b = devices_of(device_map, "node-b")
    assert node_b["gpu-1"]["use"] == "2 claims, memory 30Gi/80Gi"
    assert node_b["gpu-1"]["claims"][0]["claim"] == "team-b/share-1"
    assert node_b["gpu-2"]["claims"][0]["adminAccess"] is True
    assert node_b["gpu-0"]["capacity"] == {"memory": "80Gi"}


def test_partitions_are_grouped_by_their_counter_set() -> None:
    _, _, device_map = make()
    node_c = devices_of(device_map, "node-c")
    assert {d["group"] for d in node_c.values()} == {"gpu-0-counters"}
    # half of the counters are used by the allocated half: the whole GPU cannot be had now
    assert node_c["gpu-0"]["use"].startswith("unavailable: counter set gpu-0-counters has 20Gi memory left")
    assert node_c["gpu-0-half-1"]["use"] == ""
    assert devices_of(device_map, "node-a")["gpu-1"]["group"] is None


def test_a_hold_placed_by_filter_shows_as_held_then_goes_with_its_ttl() -> None:
    now = [0.0]
    backend, service, device_map = make(hold_seconds=2.0)
    service.ledger._clock = lambda: now[0]  # the ledger's own clock: holds expire with it
    pod = backend.store.pods["default/urgent"]
    outcome = service.filter(pod, ["node-a"])  # one node passes: the pod's NIC is held there
    assert outcome.node_names == ["node-a"]
    before = device_map.revision()
    assert states(device_map, "node-a")["nic-0"] == "held"
    now[0] = 10.0
    assert device_map.revision() != before  # the hold expired: a change the page must hear of
    assert states(device_map, "node-a")["nic-0"] == "free"


def test_revision_moves_with_the_store_the_ledger_and_bind_counters() -> None:
    backend, service, device_map = make()
    first = device_map.revision()
    assert device_map.revision() == first
    in_flight(service, "default/one-gpu", "node-a", "gpu-1")
    second = device_map.revision()
    assert second > first
    service.ledger.drop("default/one-gpu")
    third = device_map.revision()
    assert third > second
    node = backend.get("Node", None, "node-d")
    assert node is not None
    node["metadata"]["labels"]["zone"] = "d"
    backend.apply(node)
    assert device_map.revision() > third
    before = device_map.revision()
    service.stats.count_bind_failure("DoesNotFit")
    assert device_map.revision() > before
    assert device_map.summary()["revision"] == device_map.revision()


def test_filters_keep_devices_and_nodes() -> None:
    _, _, device_map = make()

    def shown(node_filter: NodeFilter) -> dict[str, list[str]]:
        return {n["name"]: [d["name"] for d in n["devices"]] for n in device_map.nodes(node_filter)["nodes"]}

    assert shown(NodeFilter(driver="nic.example.com")) == {"node-a": ["nic-0"]}
    assert shown(NodeFilter(device_class="big-gpu")) == {"node-b": ["gpu-0", "gpu-1"]}
    assert shown(NodeFilter(device_class="nic")) == {"node-a": ["nic-0"]}
    assert shown(NodeFilter(namespace="team-b")) == {"node-b": ["gpu-1"]}
    assert shown(NodeFilter(namespace="default")) == {"node-b": ["gpu-2"], "node-c": ["gpu-0-half-0"]}
    assert set(shown(NodeFilter(label_key="zone", label_value="b"))) == {"node-b", "node-c"}
    assert set(shown(NodeFilter(label_key="rack"))) == {"node-a"}
    assert set(shown(NodeFilter(label_key="zone", label_value="z"))) == set()
    assert set(shown(NodeFilter(q="-C"))) == {"node-c"}
    assert shown(NodeFilter(label_key="zone", label_value="b", device_class="big-gpu")) == {
        "node-b": ["gpu-0", "gpu-1"]
    }
    # node filters alone keep a node's every device, and nodes without any
    assert shown(NodeFilter(q="node-d")) == {"node-d": []}
    page = device_map.nodes(NodeFilter(namespace="team-b"))["nodes"][0]
    assert page["counts"] == {"shared": 1}
    with pytest.raises(UnknownDeviceClass, match="no-such-class"):
        device_map.nodes(NodeFilter(device_class="no-such-class"))


def test_the_class_filter_reads_the_selector_cache() -> None:
    _, service, device_map = make()
    service.cluster.warm_up()  # as the server does at start: every class selector on every slice
    stats = service.store.selectors.stats
    misses = stats.result_misses
    device_map.nodes(NodeFilter(device_class="big-gpu"))
    device_map.nodes(NodeFilter(device_class="gpu"), offset=1)
    assert stats.result_misses == misses


def test_paging() -> None:
    _, _, device_map = make()
    page = device_map.nodes(offset=1, limit=2)
    assert (page["total"], page["offset"], page["limit"]) == (4, 1, 2)
    assert [n["name"] for n in page["nodes"]] == ["node-b", "node-c"]
    assert device_map.nodes(offset=10)["nodes"] == []
    filtered = device_map.nodes(NodeFilter(driver="gpu.example.com"), offset=1, limit=1)
    assert filtered["total"] == 3 and [n["name"] for n in filtered["nodes"]] == ["node-b"]
    assert device_map.nodes(limit=10_000)["limit"] == devicemap_module.MAX_PAGE


def test_pools_and_their_status() -> None:
    backend, _, device_map = make()
    pools = {(p["driver"], p["pool"]): p for p in device_map.pools()["pools"]}
    assert pools[("gpu.example.com", "node-d")]["status"] == "incomplete"
    assert pools[("gpu.example.com", "node-d")]["reason"] == "1 of 2 slices of generation 1"
    assert pools[("gpu.example.com", "node-c")] == {
        "driver": "gpu.example.com",
        "pool": "node-c",
        "node": "node-c",
        "generation": 1,
        "slices": 2,
        "expectedSlices": 2,
        "devices": 3,
        "status": "complete",
        "reason": "",
    }
    backend.apply(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "node-d-nics"},
            "spec": {
                "driver": "nic.example.com",
                "nodeName": "node-d",
                "pool": {"name": "node-d", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "nic-0"}, {"name": "nic-0"}],
            },
        }
    )
    invalid = next(p for p in device_map.pools("nic.example.com")["pools"] if p["pool"] == "node-d")
    assert invalid["status"] == "invalid" and "duplicate device name 'nic-0'" in invalid["reason"]
    assert {p["driver"] for p in device_map.pools("nic.example.com")["pools"]} == {"nic.example.com"}
    detail = device_map.node("node-d")
    assert detail is not None
    assert {(p["driver"], p["status"]) for p in detail["pools"]} == {
        ("gpu.example.com", "incomplete"),
        ("nic.example.com", "invalid"),
    }
    assert detail["devices"] == []  # neither pool can be allocated from


def test_pending_pods_most_important_first() -> None:
    backend, _, device_map = make()
    pods = device_map.pending()["pods"]
    assert [p["pod"] for p in pods] == ["default/urgent", "default/old", "default/new"]
    assert pods[0]["priority"] == 100 and pods[0]["claims"] == ["default/nic"]
    assert pods[1]["ageSeconds"] == 1_893_457_000.0 - 1_893_456_000.0
    assert all(p["explained"] is False for p in pods)
    assert device_map.pending("team-a")["pods"] == []
    # a pod bound leaves the list; a new one with a template claim joins it
    pod = backend.get("Pod", "default", "old")
    assert pod is not None
    pod["spec"]["nodeName"] = "node-a"
    backend.apply(pod)
    backend.apply(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "gpu", "namespace": "team-b"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}},
        }
    )
    backend.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "notebook", "namespace": "team-b", "uid": "uid-notebook"},
            "spec": {
                "priority": 5,
                "containers": [{"name": "main", "image": "busybox"}],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu"}],
            },
        }
    )
    pods = device_map.pending()["pods"]
    assert [p["pod"] for p in pods] == ["default/urgent", "team-b/notebook", "default/new"]
    (created,) = pods[1]["claims"]  # the resourceclaim controller made it from the template
    assert created.startswith("team-b/notebook-gpu-")
    summary = device_map.summary()
    assert summary["pendingPods"] == 3
    assert summary["counters"]["scheduledPods"] == 2


async def test_the_first_pending_pods_are_explained_once_per_revision(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = EmbeddedBackend.from_paths(CLUSTER)
    service = SchedulingService(backend=backend)
    device_map = DeviceMap(service.cluster, service.stats, DebugViews(service), explain_share=1.0)
    calls: list[str] = []
    real = why.why

    def counted(views: Any, pod: Any, names: Any) -> Any:
        # counted when made: a first try that runs out of its slice is abandoned and made again
        # cooperatively (extender.state.cooperative), however fast the machine
        found = real(views, pod, names)
        calls.append(pod["metadata"]["name"])
        return found

    monkeypatch.setattr(why, "why", counted)
    revision = device_map.revision()
    answer = await device_map.pending_explained()
    assert not any(p["explained"] for p in answer["pods"])  # made in the background, not in the request
    await device_map.settled()
    assert sorted(calls) == ["new", "old", "urgent"]
    assert device_map.revision() == revision + 3  # each explanation made is news for the page
    answer = await device_map.pending_explained()
    assert all(p["explained"] and p["stale"] is False for p in answer["pods"])
    assert all(isinstance(p["summary"], str) and p["summary"] for p in answer["pods"])
    await device_map.settled()
    assert len(calls) == 3  # same state: remembered
    in_flight(service, "default/one-gpu", "node-a", "gpu-1")
    answer = await device_map.pending_explained()
    assert all(p["explained"] and p["stale"] is True for p in answer["pods"])  # the last ones, until remade
    await device_map.settled()
    assert len(calls) == 6
    assert all(p["stale"] is False for p in (await device_map.pending_explained())["pods"])


async def test_only_the_first_pending_pods_are_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devicemap_module, "EXPLAINED_PODS", 2)
    monkeypatch.setattr(
        why, "why", lambda views, pod, names: {"summary": "s", "closest": [{"node": "n", "message": "m"}]}
    )
    _, _, device_map = make()
    await device_map.pending_explained()
    await device_map.settled()
    pods = (await device_map.pending_explained())["pods"]
    assert [p["explained"] for p in pods] == [True, True, False]
    assert pods[0]["closest"] == [{"node": "n", "message": "m"}]


async def test_explanations_take_at_most_their_share_of_the_time(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = TickingClock()
    rests: list[float] = []

    def slow(views: Any, pod: Any, names: Any) -> dict[str, Any]:
        clock.advance(0.05)  # each explanation takes 50 ms of the map's timer
        return {"summary": "s", "closest": []}

    async def rest(seconds: float) -> None:
        rests.append(seconds)

    monkeypatch.setattr(why, "why", slow)
    backend = EmbeddedBackend.from_paths(CLUSTER)
    service = SchedulingService(backend=backend)
    device_map = DeviceMap(
        service.cluster, service.stats, DebugViews(service), explain_share=0.25, timer=clock, sleep=rest
    )
    await device_map.pending_explained()
    await device_map.settled()
    # three explanations of 50 ms: a quarter of the time, so 150 ms of rest after each but the last
    assert rests == pytest.approx([0.15, 0.15])
    await device_map.stop()


async def test_stop_ends_the_explanations(monkeypatch: pytest.MonkeyPatch) -> None:
    explained: list[str] = []
    resting, rest_ended = asyncio.Event(), asyncio.Event()

    def counted(views: Any, pod: Any, names: Any) -> dict[str, Any]:
        explained.append(pod["metadata"]["name"])
        return {"summary": "s", "closest": []}

    async def rest(seconds: float) -> None:  # the rest after an explanation lasts until it is ended
        resting.set()
        try:
            await asyncio.Event().wait()
        finally:
            rest_ended.set()

    monkeypatch.setattr(why, "why", counted)
    service = SchedulingService(backend=EmbeddedBackend.from_paths(CLUSTER))
    device_map = DeviceMap(service.cluster, service.stats, DebugViews(service), explain_share=0.25, sleep=rest)
    await device_map.pending_explained()
    await resting.wait()  # one pod explained, two wanted, resting before the next
    await device_map.stop()
    assert rest_ended.is_set()  # the background task was ended, not left behind
    await device_map.settled()  # returns at once: nothing is running
    assert len(explained) == 1  # the other two were never explained


# --- incremental upkeep ----------------------------------------------------------------------------


def _answers(device_map: DeviceMap) -> dict[str, Any]:
    out: dict[str, Any] = {
        "summary": device_map.summary(),
        "nodes": device_map.nodes(limit=500),
        "pools": device_map.pools(),
        "pending": device_map.pending(),
        "filtered": [
            device_map.nodes(f)
            for f in (NodeFilter(namespace="default"), NodeFilter(device_class="big-gpu"), NodeFilter(label_key="zone"))
        ],
    }
    for name in device_map.node_names():
        out[f"node {name}"] = device_map.node(name)
    return out


def _allocate(backend: EmbeddedBackend, claim: str, pool: str, device: str) -> None:
    namespace, name = claim.split("/")
    raw = backend.get("ResourceClaim", namespace, name)
    assert raw is not None
    raw["status"] = {
        "allocation": {"devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": pool,
                                                "device": device}]}},
    }  # fmt: skip
    backend.apply(raw)


@pytest.mark.parametrize("seed", range(4))
def test_incremental_answers_equal_a_fresh_map_through_random_changes(seed: int) -> None:
    rng = random.Random(seed)
    backend, service, device_map = make()
    free = [("node-a", "gpu-1"), ("node-a", "gpu-2"), ("node-b", "gpu-0"), ("node-c", "gpu-0-half-1")]
    claims = ["default/one-gpu", "default/two-gpus"]
    for _ in range(25):
        _answers(device_map)  # read between changes: the upkeep, not a first build, is under test
        change = rng.randrange(7)
        if change == 0 and claims:
            pool, device = free.pop(rng.randrange(len(free))) if free else ("node-b", "gpu-0")
            _allocate(backend, claims.pop(), pool, device)
        elif change == 1:
            pool, device = rng.choice([("node-a", "gpu-1"), ("node-b", "gpu-0"), ("node-a", "gpu-2")])
            in_flight(service, rng.choice(["default/one-gpu", "default/two-gpus"]), pool, device,
                      tentative=rng.random() < 0.5)  # fmt: skip
        elif change == 2:
            for entry in list(service.ledger):
                service.ledger.drop(entry.claim_key)
        elif change == 3:
            node = backend.get("Node", None, rng.choice(["node-a", "node-b", "node-c", "node-d"]))
            assert node is not None
            node["metadata"]["labels"]["zone"] = rng.choice(["a", "b", "c"])
            backend.apply(node)
        elif change == 4:
            slice_ = backend.get("ResourceSlice", None, "node-a-gpus")
            assert slice_ is not None
            devices = slice_["spec"]["devices"]
            devices[3]["taints"] = [] if devices[3].get("taints") else [{"key": "k", "effect": "NoExecute"}]
            backend.apply(slice_)
        elif change == 5:
            pod = backend.get("Pod", "default", rng.choice(["old", "new", "urgent"]))
            if pod is not None:
                pod["spec"]["nodeName"] = "node-a"
                backend.apply(pod)
        else:
            claim = backend.get("ResourceClaim", "team-b", "share-2")
            if claim is not None:
                backend.delete("ResourceClaim", "team-b", "share-2")
        fresh = DeviceMap(service.cluster, service.stats, DebugViews(service), clock=lambda: 1_893_457_000.0)
        assert _answers(device_map) == _answers(fresh)


def test_a_change_re_renders_only_the_nodes_it_concerns(monkeypatch: pytest.MonkeyPatch) -> None:
    backend, service, device_map = make()
    device_map.summary()
    device_map.nodes()
    rendered: list[str] = []
    real = DeviceMap._render

    def counting(self: DeviceMap, name: str) -> Any:
        rendered.append(name)
        return real(self, name)

    monkeypatch.setattr(DeviceMap, "_render", counting)
    device_map.summary()
    device_map.nodes()
    assert rendered == []
    in_flight(service, "default/one-gpu", "node-b", "gpu-0")
    assert device_map.summary()["totals"]["binding"] == 1
    device_map.nodes()
    assert rendered == ["node-b"]
    _allocate(backend, "default/two-gpus", "node-c", "gpu-0-half-1")
    device_map.nodes()
    assert rendered == ["node-b", "node-c"]
    pod = copy.deepcopy(backend.get("Pod", "default", "new"))
    pod["spec"]["nodeName"] = "node-c"
    backend.apply(pod)  # a pod change shows on no node
    device_map.nodes()
    device_map.summary()
    assert rendered == ["node-b", "node-c"]


@pytest.mark.parametrize("then", ["deleted", "readable again, elsewhere"])
def test_the_devices_of_a_claim_that_was_unreadable_are_redrawn_when_it_ends(then: str) -> None:
    """An unreadable claim's devices stay in use (the store keeps what it held); its deletion, or a
    readable version holding other devices, frees them, and the map must redraw them then too."""
    backend, service, device_map = make()
    raw = copy.deepcopy(backend.get("ResourceClaim", "team-a", "train"))
    assert raw is not None
    assert states(device_map, "node-a")["gpu-0"] == "allocated"
    unreadable = copy.deepcopy(raw)
    unreadable["spec"] = {"devices": {"requests": "not a list"}}
    service.store.mark_claim_invalid("team-a/train", unreadable, "spec.devices.requests: not a list")
    assert states(device_map, "node-a")["gpu-0"] == "allocated"
    device_map.summary()
    if then == "deleted":
        service.store.delete("ResourceClaim", "team-a", "train")
    else:
        raw["status"]["allocation"]["devices"]["results"][0]["device"] = "gpu-1"
        service.store.upsert(raw)
    assert states(device_map, "node-a")["gpu-0"] == "free"
    fresh = DeviceMap(service.cluster, service.stats, DebugViews(service), clock=lambda: 1_893_457_000.0)
    assert _answers(device_map) == _answers(fresh)


def test_the_revision_moves_with_everything_the_summary_shows() -> None:
    """Equal revisions must mean equal answers: the backend's sync state (a last kind listed empty,
    or a watch failing for good, changes nothing in the store) and the extra counters move it too."""
    backend, service, _ = make()
    extra = {"preemptions": 0}
    device_map = DeviceMap(service.cluster, service.stats, DebugViews(service), extra_counters=lambda: dict(extra))
    seen = {device_map.revision(): device_map.summary()}
    for change in ("unsynced", "preempted", "synced"):
        if change == "preempted":
            extra["preemptions"] += 1
        else:
            backend._synced = change == "synced"
        summary = device_map.summary()
        assert summary["revision"] not in seen, change
        assert device_map.revision() == summary["revision"]
        seen[summary["revision"]] = summary


async def test_prepare_renders_every_node_letting_the_event_loop_run_between_them() -> None:
    """The first summary of a big cluster renders every node: ``prepare`` does it in slices, the
    event loop running between them, and the answers after it are those of a map never prepared."""
    _, service, device_map = make()
    turns = 0
    stop = False

    async def ticker() -> None:
        nonlocal turns
        while not stop:
            turns += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    before = turns
    await device_map.prepare("gpu", slice_seconds=0.0)  # a pause after every node
    stop = True
    await task
    assert turns - before >= len(device_map.node_names())
    fresh = DeviceMap(service.cluster, service.stats, DebugViews(service), clock=lambda: 1_893_457_000.0)
    assert device_map.summary() == fresh.summary()
    chosen = NodeFilter(device_class="gpu")
    assert device_map.nodes(chosen) == fresh.nodes(chosen)
    # everything is rendered and masked: a second prepare has nothing to do and never pauses
    rendered = device_map._render
    device_map._render = None  # type: ignore[assignment]  # would fail if called
    try:
        turns_before = turns
        await device_map.prepare("gpu", slice_seconds=0.0)
        assert turns == turns_before
    finally:
        device_map._render = rendered  # type: ignore[method-assign]


# --- nominations, pool problems, rejected pods ------------------------------------------------------


def _nominated(device_map: DeviceMap) -> dict[str, dict[str, Any]]:
    """Node/device -> device JSON of every device a nomination holds."""
    return {
        f"{node['name']}/{d['name']}": d
        for node in device_map.nodes(limit=500)["nodes"]
        for d in node["devices"]
        if "nomination" in d
    }


async def _preempting(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, DeviceMap, str, list[str]]:
    """A preemption on the embedded backend (tests/state/test_preemption.py): ``high`` evicts one of
    the low pods and has the device freed nominated; the map, the node and the rendered nodes."""
    cluster = await preemption_tests.started(m.claim("hc"), preemption_tests.prio_pod("high", 1000, "hc"))
    service = cluster.service
    device_map = DeviceMap(service.cluster, service.stats, DebugViews(service), rejected=service.rejected)
    device_map.summary()
    device_map.nodes()
    rendered: list[str] = []
    real = DeviceMap._render

    def counting(self: DeviceMap, name: str) -> Any:
        rendered.append(name)
        return real(self, name)

    monkeypatch.setattr(DeviceMap, "_render", counting)
    assert device_map.summary()["totals"]["nominated"] == 0 and not _nominated(device_map)
    outcome = await cluster.filter("high")
    [node] = [n for n, reason in outcome.failed.items() if reason.startswith(WAITING_FOR_VICTIMS)]
    return cluster, device_map, node, rendered


async def test_devices_a_preemption_nominates_show_as_nominated_until_the_preemptor_binds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster, device_map, node, rendered = await _preempting(monkeypatch)
    before = device_map.revision()
    summary = device_map.summary()
    assert summary["totals"]["nominated"] == 1 and summary["totals"]["free"] == 0
    [(where, device)] = _nominated(device_map).items()
    assert where.startswith(f"{node}/") and device["state"] == "nominated"
    assert device["nomination"]["pod"] == "default/high" and device["nomination"]["priority"] == 1000
    assert device_map.node(node)["counts"]["nominated"] == 1  # type: ignore[index]
    assert node in rendered and set(rendered) <= {node}  # the victim's node only (its claim went too)
    # the preemptor's next filter fits there and its bind takes the device: no longer nominated
    assert (await cluster.filter("high")).node_names == [node]
    await cluster.service.bind("default", "high", "uid-high", node)
    assert not cluster.service.cluster.nominations
    after = device_map.summary()
    assert after["revision"] > before
    assert after["totals"]["nominated"] == 0 and not _nominated(device_map)
    assert after["totals"]["allocated"] == 4


async def test_a_nomination_that_expires_frees_its_devices_on_the_map(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, device_map, node, rendered = await _preempting(monkeypatch)
    nominations = cluster.service.cluster.nominations
    assert device_map.summary()["totals"]["nominated"] == 1
    before = device_map.revision()
    rendered.clear()
    [nomination] = nominations.by_uid.values()
    nominations.clock = lambda: nomination.expires + 1  # its victim is gone: nothing keeps it
    assert device_map.revision() > before  # the event stream's look at the revision sees the end
    summary = device_map.summary()
    assert summary["totals"]["nominated"] == 0 and summary["totals"]["free"] == 1
    assert not _nominated(device_map) and not nominations
    assert rendered == [node]  # exactly the node of the nominated device was redrawn


def test_each_node_says_which_of_its_pools_are_incomplete_or_invalid() -> None:
    backend, _, device_map = make()
    rows = {n["name"]: n for n in device_map.nodes()["nodes"]}
    assert {name: row["poolProblems"] for name, row in rows.items()} == {
        "node-a": [],
        "node-b": [],
        "node-c": [],
        "node-d": [
            {"driver": "gpu.example.com", "pool": "node-d", "status": "incomplete",
             "reason": "1 of 2 slices of generation 1"},
        ],
    }  # fmt: skip
    before = device_map.revision()
    backend.apply(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "node-d-nics"},
            "spec": {
                "driver": "nic.example.com",
                "nodeName": "node-d",
                "pool": {"name": "node-d", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "nic-0"}, {"name": "nic-0"}],
            },
        }
    )
    assert device_map.revision() > before
    detail = device_map.node("node-d")
    assert detail is not None
    problems = {(p["driver"], p["status"]): p["reason"] for p in detail["poolProblems"]}
    assert problems.keys() == {("gpu.example.com", "incomplete"), ("nic.example.com", "invalid")}
    assert "duplicate device name 'nic-0'" in problems[("nic.example.com", "invalid")]
    # the same words as the pools document
    pools = {(p["driver"], p["pool"]): p for p in device_map.pools()["pools"]}
    for p in detail["poolProblems"]:
        summary = pools[(p["driver"], p["pool"])]
        assert (p["status"], p["reason"]) == (summary["status"], summary["reason"])
    [row] = device_map.nodes(NodeFilter(q="node-d"))["nodes"]
    assert row["poolProblems"] == detail["poolProblems"]
    # the missing slice comes: the pool is complete, the warning goes and its device is drawn
    slice_ = backend.get("ResourceSlice", None, "node-d-gpus-1-of-2")
    assert slice_ is not None
    second = copy.deepcopy(slice_)
    second["metadata"] = {"name": "node-d-gpus-2-of-2"}
    second["spec"]["devices"] = [{"name": "gpu-1"}]
    backend.apply(second)
    [row] = device_map.nodes(NodeFilter(q="node-d"))["nodes"]
    assert [p["driver"] for p in row["poolProblems"]] == ["nic.example.com"]
    assert {d["name"] for d in row["devices"]} == {"gpu-0", "gpu-1"}


async def test_pods_the_last_filter_found_no_node_for_are_listed_and_explained_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend, service, _ = make()
    device_map = DeviceMap(
        service.cluster, service.stats, DebugViews(service), explain_share=1.0, rejected=service.rejected
    )
    order = ["default/urgent", "default/old", "default/new"]
    pending = device_map.pending()
    assert [p["pod"] for p in pending["pods"]] == order and not any(p["rejected"] for p in pending["pods"])
    revision = pending["revision"]
    new = backend.get("Pod", "default", "new")
    assert new is not None
    assert service.filter(new, ["node-d"]).node_names == []  # node-d's GPU pool is incomplete
    pending = device_map.pending()
    assert [p["pod"] for p in pending["pods"]] == ["default/new", "default/urgent", "default/old"]
    assert [p["rejected"] for p in pending["pods"]] == [True, False, False]
    assert pending["revision"] > revision
    # rejected again: nothing the list shows changed, nor does the revision
    revision = pending["revision"]
    service.filter(new, ["node-d"])
    assert device_map.revision() == revision
    # the pod explained is the rejected one, not the most important
    explained: list[str] = []
    real = why.why

    def counted(views: Any, pod: Any, names: Any) -> Any:
        found = real(views, pod, names)  # counted when made, not when tried (see above)
        explained.append(pod["metadata"]["name"])
        return found

    monkeypatch.setattr(why, "why", counted)
    monkeypatch.setattr(devicemap_module, "EXPLAINED_PODS", 1)
    await device_map.pending_explained()
    await device_map.settled()
    assert explained == ["new"]
    first = (await device_map.pending_explained())["pods"][0]
    assert first["pod"] == "default/new" and first["explained"] is True and first["rejected"] is True
    # the explanation's own filters do not count as rejections; a filter that finds a node ends it
    assert list(service.rejected.times) == [new["metadata"]["uid"]]
    revision = device_map.revision()
    assert service.filter(new, ["node-a", "node-d"]).node_names == ["node-a"]
    pending = device_map.pending()
    assert [p["pod"] for p in pending["pods"]] == order and pending["revision"] > revision
    # and a bind ends it too
    service.filter(new, ["node-d"])
    assert device_map.pending()["pods"][0]["rejected"] is True
    service.holds.release(new["metadata"]["uid"])
    await service.bind("default", "new", new["metadata"]["uid"], "node-a")
    assert not service.rejected.times
