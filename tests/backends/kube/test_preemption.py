"""Device-aware preemption against the strict fake API server (issue 15): the Eviction API with
PodDisruptionBudgets, the fake kube-controller-manager that deallocates a victim's claim only after
the victim is gone, and the preemptor's answers in between."""

from __future__ import annotations

from typing import Any

from extender.state.preemption.devices import WAITING_FOR_VICTIMS
from extender.state.service import SchedulingService
from tests import manifests as m
from tests.backends.kube.test_backend import started, until
from tests.fakes import FakeApiServer
from tests.fakes.claim_controller import ReservationController

NODES = ["node-1", "node-2"]


def running(name: str, priority: int, *claims: str) -> dict[str, Any]:
    pod = m.pod(name, *claims)
    pod["spec"]["priority"] = priority
    pod["metadata"]["labels"] = {"app": name}
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    return pod


def budget(app: str, allowed: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": f"pdb-{app}", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": app}}, "maxUnavailable": allowed},
        "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1},
    }


async def low_cluster(fake: FakeApiServer, *extra: dict[str, Any]) -> SchedulingService:
    objects = m.cluster(*[m.claim(f"lc{i}") for i in range(1, 5)], *extra)
    objects += [running(f"low-{i}", 100, f"lc{i}") for i in range(1, 5)]
    backend = await started(fake, *objects)
    service = SchedulingService(backend=backend, hold_seconds=0)
    for i, node in zip(range(1, 5), ["node-1", "node-1", "node-2", "node-2"], strict=True):
        await service.bind("default", f"low-{i}", f"uid-low-{i}", node)
    return service


async def filter_pod(fake: FakeApiServer, service: SchedulingService, name: str) -> Any:
    raw = fake.get_object("Pod", "default", name)
    assert raw is not None
    return await service.filter_and_recover(raw, NODES)


def pods(fake: FakeApiServer) -> set[str]:
    return {p["metadata"]["name"] for p in fake.objects("Pod")}


async def eventually(check: Any) -> None:
    """Until the watches show ``check()`` (``until``: a bound against a hang, never a timing)."""
    await until(lambda: bool(check()))


async def test_evict_wait_for_the_controller_then_bind(fake: FakeApiServer) -> None:
    service = await low_cluster(fake, m.claim("hc"), running("high", 1000, "hc"))
    first = await filter_pod(fake, service, "high")
    [node] = [n for n, r in first.failed.items() if r.startswith(WAITING_FOR_VICTIMS)]
    evictions = [r for r in fake.requests if r.path.endswith("/eviction")]
    assert len(evictions) == 1 and evictions[0].status == 201
    victim = evictions[0].path.split("/")[-2]
    await eventually(lambda: victim not in {p["metadata"]["name"] for p in service.store.pods.values()})
    # the victim is gone, its claim not yet deallocated: Error, so that backoff retries
    waiting = await filter_pod(fake, service, "high")
    assert waiting.error == f"waiting for devices of preempted pods on node {node} to be deallocated"
    patches = [r for r in fake.requests if r.method == "PATCH" and r.path.endswith("/pods/high/status")]
    assert patches and patches[0].body["status"]["nominatedNodeName"] == node
    async with ReservationController(fake):
        claim = f"lc{victim.split('-')[1]}"
        await eventually(
            lambda: (
                not (
                    service.store.claims[f"default/{claim}"].allocation
                    if f"default/{claim}" in service.store.claims
                    else None
                )
            )
        )
    ready = await filter_pod(fake, service, "high")
    assert ready.node_names == [node]
    await service.bind("default", "high", "uid-high", node)
    assert fake.get_object("Pod", "default", "high")["spec"]["nodeName"] == node  # type: ignore[index]
    assert pods(fake) == {"high", "low-1", "low-2", "low-3", "low-4"} - {victim}
    await service.backend.stop()


async def test_a_freed_claim_a_running_pod_took_since_is_not_waited_for(fake: FakeApiServer) -> None:
    """The victim is gone and, before the controller deallocated its claim, another pod sharing that
    claim was bound and reserved it: the claim stays allocated for good. The preemptor does not
    wait for a deallocation that will never come (until its nomination's lifetime ends): its
    nomination goes, and its next attempt preempts anew."""
    service = await low_cluster(fake, m.claim("hc"), running("high", 1000, "hc"))
    first = await filter_pod(fake, service, "high")
    [node] = [n for n, r in first.failed.items() if r.startswith(WAITING_FOR_VICTIMS)]
    [eviction] = [r for r in fake.requests if r.path.endswith("/eviction")]
    victim = eviction.path.split("/")[-2]
    claim = f"lc{victim.split('-')[1]}"
    await eventually(lambda: f"default/{victim}" not in service.store.pods)
    waiting = await filter_pod(fake, service, "high")
    assert waiting.error == f"waiting for devices of preempted pods on node {node} to be deallocated"
    fake.put_object(running("taker", 100, claim))
    await eventually(lambda: "default/taker" in service.store.pods)
    await service.bind("default", "taker", "uid-taker", node)  # it reserves the allocated claim
    await eventually(lambda: "uid-taker" in {r.uid for r in service.store.claims[f"default/{claim}"].reserved_for})
    again = await filter_pod(fake, service, "high")
    assert not again.error.endswith("to be deallocated")
    assert "uid-high" not in service.cluster.nominations.by_uid
    anew = await filter_pod(fake, service, "high")
    assert any(r.startswith(WAITING_FOR_VICTIMS) for r in anew.failed.values())
    assert len([r for r in fake.requests if r.path.endswith("/eviction")]) == 2
    await service.backend.stop()


async def test_a_disruption_budget_makes_the_choice_fall_on_another_pod(fake: FakeApiServer) -> None:
    protected = [budget(f"low-{i}", 0) for i in (1, 2, 3)]
    service = await low_cluster(fake, m.claim("hc"), running("high", 1000, "hc"), *protected)
    outcome = await filter_pod(fake, service, "high")
    assert any(r.startswith(WAITING_FOR_VICTIMS) for r in outcome.failed.values())
    refused = [r for r in fake.requests if r.path.endswith("/eviction") and r.status == 429]
    done = [r.path.split("/")[-2] for r in fake.requests if r.path.endswith("/eviction") and r.status == 201]
    assert done == ["low-4"] and len(refused) >= 1
    await service.backend.stop()


async def test_equal_priority_sends_no_eviction(fake: FakeApiServer) -> None:
    service = await low_cluster(fake, m.claim("hc"), running("peer", 100, "hc"))
    outcome = await filter_pod(fake, service, "peer")
    assert outcome.node_names == []
    assert not [r for r in fake.requests if r.path.endswith("/eviction")]
    await service.backend.stop()


async def test_a_claim_whose_pod_is_gone_is_waited_for_not_preempted_around(fake: FakeApiServer) -> None:
    """low-4 was deleted; the controller-manager has not deallocated its claim yet. The pod of
    higher priority waits (Error) for that device instead of evicting anyone."""
    service = await low_cluster(fake, m.claim("hc"), running("high", 1000, "hc"))
    fake.delete_object("Pod", "default", "low-4")
    await eventually(lambda: "default/low-4" not in service.store.pods)
    outcome = await filter_pod(fake, service, "high")
    assert outcome.error == "waiting for devices of deleted pods on node node-2 to be deallocated"
    assert not [r for r in fake.requests if r.path.endswith("/eviction")]
    await service.backend.stop()
