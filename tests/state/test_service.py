"""SchedulingService over the embedded backend: filter / prioritize / bind semantics, without HTTP.

Covers claim resolution answers (Error vs FailedNodes vs FailedAndUnresolvableNodes), template
claims created by the embedded controller, shared and pre-allocated claims, bind writes and
idempotency, exact rollback on injected failures, and concurrent binds racing for devices.
The HTTP mapping of these answers is tested in tests/server/.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from extender.backends.embedded import EmbeddedBackend
from extender.core.answers import CANNOT_ALLOCATE, NO_CLASS_DEVICES, NOT_AVAILABLE
from extender.core.errors import DoesNotFit, ExtenderError, WriteConflict
from extender.core.model import AllocationResult, DeviceResult
from extender.state.cache import cluster as cluster_module
from extender.state.service import DELETE_PROTECTION_FINALIZER, SchedulingService
from extender.views.debug import DebugViews
from tests.manifests import claim, cluster, node, pod, template


def service(objects: list[dict[str, Any]], **options: Any) -> SchedulingService:
    return SchedulingService(backend=EmbeddedBackend(copy.deepcopy(objects)), **options)


NODES = ["node-1", "node-2"]
ALLOCATION_ON_NODE_2 = AllocationResult(
    devices=(DeviceResult(request="gpus", driver="gpu.example.com", pool="node-2", device="gpu-0"),)
)


def test_pod_without_claims_passes_every_node() -> None:
    svc = service(cluster(pod("plain")))
    outcome = svc.filter(pod("plain"), NODES)
    assert outcome.node_names == NODES and not outcome.failed and not outcome.error


def test_failed_versus_unresolvable() -> None:
    objects = cluster(claim("big", count=3), claim("wrong-class", cls="gpu"), nodes=2, gpus=2)
    objects.append(node("node-3"))  # a node without any GPU
    svc = service(objects)
    out = svc.filter(pod("p", "big"), [*NODES, "node-3"])
    assert out.node_names == []
    assert out.failed == {"node-1": CANNOT_ALLOCATE, "node-2": CANNOT_ALLOCATE}
    assert out.unresolvable == {"node-3": NO_CLASS_DEVICES}


def test_missing_claim_and_template_claims_answer_error() -> None:
    svc = service(cluster())
    assert "not found" in svc.filter(pod("p", "nope"), NODES).error
    # a template that does not exist: the controller cannot create the claim yet
    assert "ResourceClaim not created yet" in svc.filter(pod("q", templates=("missing",)), NODES).error


def test_template_claim_is_created_and_allocated() -> None:
    svc = service(cluster(template("one-gpu")))
    p = pod("trainer", templates=("one-gpu",))
    outcome = svc.filter(p, NODES)
    assert outcome.node_names == NODES, outcome
    stored = svc.store.pods["default/trainer"]
    statuses = stored["status"]["resourceClaimStatuses"]
    assert statuses[0]["name"] == "t0" and statuses[0]["resourceClaimName"].startswith("trainer-t0-")


async def test_bind_writes_claim_then_binds_and_is_idempotent() -> None:
    svc = service(cluster(claim("c1"), pod("p", "c1")))
    assert svc.filter(pod("p", "c1"), NODES).node_names == NODES
    await svc.bind("default", "p", "uid-p", "node-2")
    raw = DebugViews(svc).claim("default", "c1")
    assert raw is not None
    assert DELETE_PROTECTION_FINALIZER in raw["metadata"]["finalizers"]
    results = raw["status"]["allocation"]["devices"]["results"]
    assert [(r["pool"], r["device"]) for r in results] == [("node-2", "gpu-0")]
    assert raw["status"]["allocation"]["allocationTimestamp"]
    assert raw["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "uid-p"}]
    assert DebugViews(svc).pod("default", "p")["spec"]["nodeName"] == "node-2"  # type: ignore[index]
    assert len(svc.ledger) == 0 and svc.stats.allocations == 1
    rv = raw["metadata"]["resourceVersion"]
    await svc.bind("default", "p", "uid-p", "node-2")  # a retry after success
    assert DebugViews(svc).claim("default", "c1")["metadata"]["resourceVersion"] == rv  # type: ignore[index]
    assert svc.stats.allocations == 1


async def test_bind_checks_the_pod_uid() -> None:
    svc = service(cluster(claim("c1"), pod("p", "c1")))
    with pytest.raises(WriteConflict, match="re-created"):
        await svc.bind("default", "p", "some-other-uid", "node-1")


async def test_shared_claim_gets_a_second_consumer_without_reallocation() -> None:
    svc = service(cluster(claim("shared"), pod("a", "shared"), pod("b", "shared")))
    await svc.bind("default", "a", "uid-a", "node-1")
    allocation = copy.deepcopy(DebugViews(svc).claim("default", "shared")["status"]["allocation"])  # type: ignore[index]
    # the allocated claim pins pod b to node-1
    out = svc.filter(pod("b", "shared"), NODES)
    assert out.node_names == ["node-1"] and out.unresolvable == {"node-2": NOT_AVAILABLE}
    await svc.bind("default", "b", "uid-b", "node-1")
    raw = DebugViews(svc).claim("default", "shared")
    assert raw["status"]["allocation"] == allocation  # type: ignore[index]
    assert [r["name"] for r in raw["status"]["reservedFor"]] == ["a", "b"]  # type: ignore[index]


async def test_devices_of_bound_claims_are_used() -> None:
    svc = service(cluster(claim("c1", 2), claim("c2"), pod("a", "c1"), pod("b", "c2"), nodes=1, gpus=2))
    await svc.bind("default", "a", "uid-a", "node-1")
    assert svc.filter(pod("b", "c2"), ["node-1"]).failed == {"node-1": CANNOT_ALLOCATE}
    with pytest.raises(DoesNotFit):
        await svc.bind("default", "b", "uid-b", "node-1")


async def test_concurrent_binds_never_hand_out_a_device_twice() -> None:
    """200 pods, each with its own one-GPU claim, race for 50 GPUs (5 nodes x 10)."""
    pods = [pod(f"p{i}", f"c{i}") for i in range(200)]
    objects = cluster(*(claim(f"c{i}") for i in range(200)), *pods, nodes=5, gpus=10)
    svc = service(objects)
    svc.backend.faults.delay("update_claim_status", 0.001)  # type: ignore[attr-defined]

    async def one(i: int) -> bool:
        try:
            await svc.bind("default", f"p{i}", f"uid-p{i}", f"node-{i % 5 + 1}")
        except ExtenderError:
            return False
        return True

    outcomes = await asyncio.gather(*(one(i) for i in range(200)))
    assert sum(outcomes) == 50
    devices = []
    for i in range(200):
        raw = DebugViews(svc).claim("default", f"c{i}")
        allocation = (raw or {}).get("status", {}).get("allocation")
        if allocation:
            devices += [(r["pool"], r["device"]) for r in allocation["devices"]["results"]]
            assert raw["status"]["reservedFor"][0]["uid"] == f"uid-p{i}"  # type: ignore[index]
        else:
            assert not (raw or {}).get("status", {}).get("reservedFor")
    assert len(devices) == 50 and len(set(devices)) == 50
    assert len(svc.ledger) == 0


async def test_a_bind_settles_its_own_ledger_entries_and_leaves_the_others_to_refresh() -> None:
    """After its writes a bind drops its own entries (the store shows them allocated), looking at
    no other bind's: with hundreds in flight, a look at all of them per bind cost each bind time
    in proportion to the others. ``ClusterView.refresh``, before every decision, settles theirs."""
    svc = service(cluster(claim("c1"), claim("c2"), pod("a", "c1"), pod("b", "c2")))
    other = svc.store.claims["default/c2"]
    svc.ledger.add(claim=other, pod_key="default/b", pod_uid="uid-b", node="node-2", result=ALLOCATION_ON_NODE_2)
    svc.cluster.refresh()  # looked at once: c2 is not allocated, so the entry stays in flight

    async def recreate_c2(_operation: str) -> None:
        # after a's decision (whose refresh looks at every changed claim), before its end
        raw = copy.deepcopy(svc.store.raw_claims["default/c2"])
        raw["metadata"]["uid"] = "re-created"  # the store now shows another claim of that name
        svc.store.upsert(raw)

    async def settle_the_unchecked(_operation: str) -> None:
        # the finalizer write, before c1 is allocated: c1's entry is looked at (and kept) here, so
        # only the bind's own claims, named at its end, can settle it there
        svc.cluster.refresh()

    svc.backend.faults.hook("update_claim", settle_the_unchecked)  # type: ignore[attr-defined]
    svc.backend.faults.hook("bind_pod", recreate_c2)  # type: ignore[attr-defined]
    await svc.bind("default", "a", "uid-a", "node-1")
    assert svc.ledger.get("default/c1") is None  # the bind's own entry: settled by the bind
    assert svc.ledger.get("default/c2") is not None  # another bind's: left to the next refresh
    svc.cluster.refresh()
    assert len(svc.ledger) == 0


def test_prioritize_scores_every_node() -> None:
    svc = service(cluster(claim("c1"), claim("held", 1), nodes=2, gpus=2))
    scores = dict(svc.prioritize(pod("p", "c1"), NODES))
    assert set(scores) == set(NODES) and all(0 <= s <= 10 for s in scores.values())


def test_explain_names_the_reason() -> None:
    svc = service(cluster(claim("big", count=3)))
    report = DebugViews(svc).explain(pod("p", "big"), ["node-1"])
    entry = report["nodes"][0]
    assert entry["outcome"] == "Failed" and entry["reason"] == CANNOT_ALLOCATE
    assert "needs 3" in str(entry)


PINNED_TO_NODE_3 = {
    "devices": {"results": [{"request": "gpus", "driver": "gpu.example.com", "pool": "node-3", "device": "gpu-0"}]},
    "nodeSelector": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-3"]}]}]
    },
}


async def test_claim_pinned_elsewhere_and_unused_is_deallocated_so_the_pod_can_move() -> None:
    """Spec §20: upstream's PostFilter deallocates such a claim; the extender does it from filter."""
    stuck = claim("stuck")
    stuck["status"] = {"allocation": PINNED_TO_NODE_3}
    svc = service(cluster(stuck, pod("p", "stuck")))
    outcome = await svc.filter_and_recover(pod("p", "stuck"), NODES)
    assert outcome.error == "deallocation of ResourceClaim default/stuck completed"
    assert not DebugViews(svc).claim("default", "stuck")["status"].get("allocation")  # type: ignore[index]
    again = await svc.filter_and_recover(pod("p", "stuck"), NODES)
    assert again.node_names == NODES and not again.error


async def test_claim_pinned_elsewhere_but_in_use_is_left_alone() -> None:
    stuck = claim("busy")
    stuck["status"] = {
        "allocation": PINNED_TO_NODE_3,
        "reservedFor": [{"resource": "pods", "name": "other", "uid": "uid-other"}],
    }
    svc = service(cluster(stuck, pod("p", "busy")))
    outcome = await svc.filter_and_recover(pod("p", "busy"), NODES)
    assert outcome.node_names == [] and not outcome.error
    assert outcome.unresolvable == {"node-1": NOT_AVAILABLE, "node-2": NOT_AVAILABLE}
    assert DebugViews(svc).claim("default", "busy")["status"]["allocation"]  # type: ignore[index]


async def test_warm_up_fills_the_caches_a_first_filter_needs() -> None:
    svc = service(cluster(claim("c1"), nodes=3, gpus=2))
    assert not svc.warmed
    report = await svc.warm_up()
    assert report == {"nodes": 3, "evaluations": 6} and svc.warmed
    misses = svc.store.selectors.stats.result_misses
    assert svc.filter(pod("p", "c1"), ["node-1", "node-2", "node-3"]).node_names
    assert svc.store.selectors.stats.result_misses == misses  # nothing left to evaluate


async def test_after_the_warm_up_a_first_prioritize_computes_no_device_usage(monkeypatch: pytest.MonkeyPatch) -> None:
    """Device usage is per node, whatever the pod: counted at the warm-up, a new shape's first
    prioritize over 15 000 nodes only scores them."""
    svc = service(cluster(claim("c1"), nodes=3, gpus=2))
    await svc.warm_up()
    assert all(svc.store.fits.usage(name) is not None for name in ["node-1", "node-2", "node-3"])
    counted: list[str] = []
    real = cluster_module.node_device_usage
    monkeypatch.setattr(cluster_module, "node_device_usage", lambda *a, **k: counted.append("x") or real(*a, **k))
    hosts, scores = svc.prioritize_columns(pod("p", "c1"), ["node-1", "node-2", "node-3"])
    assert list(hosts) == ["node-1", "node-2", "node-3"] and len(scores) == 3 and counted == []


async def test_the_warm_up_lets_the_event_loop_run_as_it_goes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seconds of work at 15 000 nodes: with a slice of 0 s it pauses after every step, and a task
    started with it runs between its steps instead of after it."""
    monkeypatch.setattr("extender.state.service.WARM_UP_SLICE_SECONDS", 0.0)
    svc = service(cluster(claim("c1"), nodes=4, gpus=2))
    turns: list[bool] = []

    async def other() -> None:
        while not svc.warmed:
            turns.append(svc.warmed)
            await asyncio.sleep(0)

    beside = asyncio.create_task(other())
    assert await svc.warm_up() == {"nodes": 4, "evaluations": 8}
    await beside
    assert len(turns) >= 8  # at least one turn per node and per slice


def test_a_slice_changed_while_the_warm_up_paused_is_skipped() -> None:
    """What the store drops during a pause is not evaluated (its selector results would outlive it)."""
    svc = service(cluster(claim("c1"), nodes=3, gpus=2))
    steps: list[int] = []

    def pace() -> bool:  # at the first pause after the nodes, the watch drops node-3's slice
        steps.append(1)
        if len(steps) == 4:
            svc.backend.delete("ResourceSlice", None, "node-3-gpus")  # type: ignore[attr-defined]
        return True

    assert svc.cluster.warm_up(pace) == {"nodes": 3, "evaluations": 4}
    assert len(steps) == 3 + 2  # a step per node, then per slice still current


async def test_explain_reports_a_claim_pinned_elsewhere() -> None:
    svc = service(cluster(claim("shared"), pod("a", "shared"), pod("b", "shared")))
    await svc.bind("default", "a", "uid-a", "node-2")
    report = DebugViews(svc).explain(pod("b", "shared"), ["node-1"])
    entry = report["nodes"][0]
    assert entry["fits"] is False and entry["outcome"] == "FailedAndUnresolvable"
    assert entry["unavailableClaim"] == "default/shared" and NOT_AVAILABLE in entry["message"]


GPU_0_OF_NODE_1 = {"request": "gpus", "driver": "gpu.example.com", "pool": "node-1", "device": "gpu-0"}


def test_a_claim_at_its_consumer_limit_answers_error() -> None:
    full = claim("popular")
    full["status"] = {
        "allocation": {"devices": {"results": [GPU_0_OF_NODE_1]}},
        "reservedFor": [{"resource": "pods", "name": f"p{i}", "uid": f"uid-{i}"} for i in range(256)],
    }
    svc = service(cluster(full))
    outcome = svc.filter(pod("newcomer", "popular"), NODES)
    assert outcome.error == "resource claim default/popular is already reserved for 256 consumers, the maximum"
    # one of the 256 consumers itself is fine
    assert svc.filter(pod("p7", "popular", uid="uid-7"), NODES).node_names == NODES


def test_a_claim_being_allocated_for_another_pod_answers_error() -> None:
    svc = service(cluster(claim("c1"), pod("a", "c1"), pod("b", "c1")))
    from extender.core.model import AllocationResult

    svc.ledger.add(
        claim=svc.store.claims["default/c1"],
        pod_key="default/a",
        pod_uid="uid-a",
        node="node-1",
        result=AllocationResult(devices=()),
    )
    assert svc.filter(pod("b", "c1"), NODES).error == "resource claim default/c1 is in the process of being allocated"


async def test_a_pod_deleted_mid_bind_leaves_nothing_behind() -> None:
    svc = service(cluster(claim("c1"), pod("p", "c1")))
    backend = svc.backend

    async def delete_the_pod(_operation: str) -> None:
        backend.delete_pod("default", "p")  # type: ignore[attr-defined]

    backend.faults.hook("bind_pod", delete_the_pod)  # type: ignore[attr-defined]
    with pytest.raises(ExtenderError):
        await svc.bind("default", "p", "uid-p", "node-1")
    raw = DebugViews(svc).claim("default", "c1")
    assert raw is not None and not raw.get("status", {}).get("allocation")
    assert not raw.get("status", {}).get("reservedFor")
    assert DELETE_PROTECTION_FINALIZER not in (raw["metadata"].get("finalizers") or [])
    assert len(svc.ledger) == 0
