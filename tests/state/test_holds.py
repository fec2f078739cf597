"""Keeping up with kube-scheduler (docs/pipeline.md), in the service: tentative holds placed by
prioritize (one best node) and by a filter that leaves one node, and what becomes of them (kept,
moved, dropped, expired); bind deciding at arrival from the watch cache; a bind of a pod already
being bound refused."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from extender.backends.embedded import EmbeddedBackend
from extender.core.answers import CANNOT_ALLOCATE
from extender.core.errors import Transient
from extender.core.scoring import ScoringPolicy
from extender.state.cache.ledger import InFlightLedger
from extender.state.service import SchedulingService
from extender.views.debug import DebugViews
from tests.manifests import claim, cluster, pod

NODES = ["node-1", "node-2", "node-3"]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def service(objects: list[dict[str, Any]], *, clock: Clock | None = None, **options: Any) -> SchedulingService:
    ledger = InFlightLedger(clock=clock or Clock())
    return SchedulingService(backend=EmbeddedBackend(copy.deepcopy(objects)), ledger=ledger, **options)


def one_gpu_per_node(*pods: str) -> list[dict[str, Any]]:
    return cluster(*(claim(f"c-{p}") for p in pods), *(pod(p, f"c-{p}") for p in pods), nodes=3, gpus=1)


def holds(svc: SchedulingService) -> dict[str, str]:
    """pod key -> node of its tentative entries."""
    return {e.pod_key: e.node for e in svc.ledger if e.tentative}


def test_prioritize_names_one_best_node_and_holds_the_pods_devices_there() -> None:
    svc = service(one_gpu_per_node("p", "q"))
    scores = svc.prioritize(pod("p", "c-p"), NODES)
    # three empty nodes tie; the first gets one point more, so kube-scheduler picks it
    assert [s for _, s in scores] == [scores[0][1], scores[0][1] - 1, scores[0][1] - 1]
    assert holds(svc) == {"default/p": "node-1"}
    assert svc.stats.holds == {"placed": 1}
    # the next pod, before p's bind: node-1's only GPU is taken
    outcome = svc.filter(pod("q", "c-q"), NODES)
    assert outcome.node_names == ["node-2", "node-3"] and outcome.failed == {"node-1": CANNOT_ALLOCATE}


def test_a_bind_to_the_held_node_keeps_it_one_elsewhere_moves_it() -> None:
    svc = service(one_gpu_per_node("p", "q"))
    svc.prioritize(pod("p", "c-p"), NODES)
    asyncio.run(svc.bind("default", "p", "uid-p", "node-1"))
    assert svc.stats.holds == {"placed": 1, "kept": 1} and svc.stats.holds_settled == 1
    assert DebugViews(svc).claim("default", "c-p")["status"]["allocation"]["devices"]["results"][0]["pool"] == "node-1"
    assert len(svc.ledger) == 0  # written: the claim holds the device now
    svc.prioritize(pod("q", "c-q"), ["node-2", "node-3"])
    assert holds(svc) == {"default/q": "node-2"}
    asyncio.run(svc.bind("default", "q", "uid-q", "node-3"))  # kube-scheduler chose otherwise
    assert svc.stats.holds["moved"] == 1 and holds(svc) == {}
    assert svc.filter(pod("r", "c-p"), ["node-2"]).node_names == []  # c-p is allocated on node-1
    assert DebugViews(svc).claim("default", "c-q")["status"]["allocation"]["devices"]["results"][0]["pool"] == "node-3"


def test_the_pods_next_attempt_gives_its_hold_back() -> None:
    svc = service(one_gpu_per_node("p"))
    svc.prioritize(pod("p", "c-p"), NODES)
    assert holds(svc) == {"default/p": "node-1"}
    # a new attempt: the pod's own hold must not hide node-1 from it
    assert svc.filter(pod("p", "c-p"), NODES).node_names == NODES
    assert svc.stats.holds["dropped"] == 1 and holds(svc) == {}


def test_a_hold_without_its_bind_expires() -> None:
    clock = Clock()
    svc = service(one_gpu_per_node("p", "q"), clock=clock, hold_seconds=2.0)
    svc.prioritize(pod("p", "c-p"), NODES)
    assert svc.filter(pod("q", "c-q"), NODES).node_names == ["node-2", "node-3"]
    clock.now += 2.5
    assert svc.filter(pod("q", "c-q"), NODES).node_names == NODES
    assert svc.stats.holds["expired"] == 1 and holds(svc) == {}


def test_a_filter_that_leaves_one_node_holds_it() -> None:
    svc = service(one_gpu_per_node("p", "q"))
    assert svc.filter(pod("p", "c-p"), ["node-2"]).node_names == ["node-2"]  # e.g. a nominated node
    assert holds(svc) == {"default/p": "node-2"}
    assert svc.filter(pod("q", "c-q"), ["node-2"]).node_names == []


def test_with_every_node_at_ten_the_others_lose_a_point() -> None:
    # binpack alone: every node that would be full after the pod scores 10
    svc = service(one_gpu_per_node("p"), scoring=ScoringPolicy.parse("binpack=1"))
    assert [s for _, s in svc.prioritize(pod("p", "c-p"), NODES)] == [10, 9, 9]
    # and where all score 0 (spread with nothing to spread), the first gets 1
    svc = service(one_gpu_per_node("p"), scoring=ScoringPolicy.parse("spread=1"))
    assert [s for _, s in svc.prioritize(pod("p", "c-p"), NODES)] == [1, 0, 0]


def test_holds_off_leaves_scores_and_ledger_alone() -> None:
    svc = service(one_gpu_per_node("p", "q"), hold_seconds=0)
    scores = [s for _, s in svc.prioritize(pod("p", "c-p"), NODES)]
    assert len(set(scores)) == 1 and len(svc.ledger) == 0
    assert svc.filter(pod("q", "c-q"), ["node-1"]).node_names == ["node-1"] and len(svc.ledger) == 0


def test_bind_decides_from_the_watch_cache_without_reading_the_pod() -> None:
    svc = service(one_gpu_per_node("p"))
    backend: EmbeddedBackend = svc.backend  # type: ignore[assignment]
    asyncio.run(svc.bind("default", "p", "uid-p", "node-1"))
    assert backend.faults.calls["get_pod"] == 0
    assert backend.get("Pod", "default", "p")["spec"]["nodeName"] == "node-1"  # type: ignore[index]


def test_bind_reads_the_pod_when_the_cache_has_another_uid() -> None:
    svc = service(one_gpu_per_node("p"))
    backend: EmbeddedBackend = svc.backend  # type: ignore[assignment]
    with pytest.raises(Exception, match="has UID uid-p, not uid-other: it was re-created"):
        asyncio.run(svc.bind("default", "p", "uid-other", "node-1"))
    assert backend.faults.calls["get_pod"] == 1


def test_the_decision_is_in_the_ledger_before_the_first_write() -> None:
    svc = service(one_gpu_per_node("p", "q"), hold_seconds=0)
    backend: EmbeddedBackend = svc.backend  # type: ignore[assignment]
    seen: list[list[str]] = []

    async def during_the_write(_operation: str) -> None:
        # another pod's filter while p's finalizer write is on its way: node-1 is taken already
        seen.append(svc.filter(pod("q", "c-q"), NODES).node_names)

    backend.faults.hook("update_claim", during_the_write)
    asyncio.run(svc.bind("default", "p", "uid-p", "node-1"))
    assert seen == [["node-2", "node-3"]]


def test_a_second_bind_of_a_pod_being_bound_is_refused() -> None:
    svc = service(one_gpu_per_node("p"))
    backend: EmbeddedBackend = svc.backend  # type: ignore[assignment]

    async def main() -> None:
        release, writing = asyncio.Event(), asyncio.Event()

        async def wait(_operation: str) -> None:
            writing.set()  # the first bind has decided and is writing its claim
            await release.wait()

        backend.faults.hook("update_claim", wait)
        first = asyncio.create_task(svc.bind("default", "p", "uid-p", "node-1"))
        await writing.wait()
        with pytest.raises(Transient, match="is being bound already"):
            await svc.bind("default", "p", "uid-p", "node-2")
        release.set()
        await first

    asyncio.run(main())
    results = DebugViews(svc).claim("default", "c-p")["status"]["allocation"]["devices"]["results"]  # type: ignore[index]
    assert [r["pool"] for r in results] == ["node-1"]


def test_a_retry_while_the_bind_still_runs_holds_nothing_and_takes_nothing_away() -> None:
    """kube-scheduler gave up on a slow bind (its extender timeout) and tries the pod again: that
    attempt's filter and prioritize must not replace the running bind's ledger entry with a hold
    elsewhere, which would free the bind's device for another pod."""
    svc = service(one_gpu_per_node("p", "q"))
    backend: EmbeddedBackend = svc.backend  # type: ignore[assignment]

    async def main() -> None:
        release, writing = asyncio.Event(), asyncio.Event()

        async def wait(_operation: str) -> None:
            writing.set()  # the first bind has decided and is writing its claim
            await release.wait()

        backend.faults.hook("update_claim", wait)
        bind = asyncio.create_task(svc.bind("default", "p", "uid-p", "node-1"))
        await writing.wait()
        svc.filter(pod("p", "c-p"), ["node-2"])  # one node left: would hold there
        svc.prioritize(pod("p", "c-p"), ["node-2", "node-3"])
        assert [(e.node, e.tentative) for e in svc.ledger] == [("node-1", False)]
        assert svc.filter(pod("q", "c-q"), NODES).node_names == ["node-2", "node-3"]
        release.set()
        await bind

    asyncio.run(main())
    results = DebugViews(svc).claim("default", "c-p")["status"]["allocation"]["devices"]["results"]  # type: ignore[index]
    assert [r["pool"] for r in results] == ["node-1"]


def test_a_hold_never_replaces_a_binds_entry_in_the_ledger() -> None:
    svc = service(one_gpu_per_node("p"), hold_seconds=0)
    asyncio.run(svc.bind("default", "p", "uid-p", "node-1"))
    claims = svc.store.claims
    ledger = InFlightLedger()
    result = claims["default/c-p"].allocation
    assert result is not None
    bind_entry = ledger.add(claim=claims["default/c-p"], pod_key="default/p", pod_uid="u", node="node-1", result=result)
    hold = ledger.add(
        claim=claims["default/c-p"], pod_key="default/p", pod_uid="u", node="node-2", result=result, tentative=True
    )
    assert hold is None and ledger.get("default/c-p") is bind_entry
    # and a bind entry outlives its TTL while its bind runs
    clock = Clock()
    ledger = InFlightLedger(ttl_seconds=1, clock=clock)
    ledger.add(claim=claims["default/c-p"], pod_key="default/p", pod_uid="u", node="node-1", result=result)
    clock.now += 5
    assert ledger.expire(keep={"u"}) == [] and len(ledger) == 1
    assert len(ledger.expire()) == 1 and len(ledger) == 0


async def test_a_holds_own_search_may_let_the_event_loop_run() -> None:
    """When the remembered verdict cannot give the devices to hold, the hold searches the node itself:
    that search runs inside the filter's cooperative run, so it may pause like the filter's own
    (review of issue 25: the effects were applied outside it)."""
    from extender.state import cooperative
    from extender.state.filter import holds as holds_module

    svc = SchedulingService(
        backend=EmbeddedBackend(copy.deepcopy(cluster(claim("c-p"), pod("p", "c-p"), nodes=1, gpus=1)))
    )
    svc.cluster.slice_seconds = 0.0  # every slice ends at once: a search pauses at its first chance
    seen: list[bool] = []
    real = svc.holds.hold

    def hold(*args: Any, **kwargs: Any) -> None:
        seen.append(cooperative.can_pause())
        real(*args, **kwargs)

    svc.holds.hold = hold  # type: ignore[method-assign]
    original = holds_module._held_devices
    holds_module._held_devices = lambda verdict: None  # type: ignore[assignment]  # force the hold's own search
    try:
        outcome = await svc.filter_and_recover(pod("p", "c-p"), ["node-1"])
    finally:
        holds_module._held_devices = original
    assert outcome.node_names == ["node-1"]
    assert seen == [True]
    assert [e.node for e in svc.ledger if e.tentative] == ["node-1"]
