"""A bind that waited for its template claim keeps the devices it decided before the wait where
they are still a valid allocation of the real claim (``Binder._still_valid``), and decides again
whenever something the decision read may have changed: a device taken meanwhile, a slice
republished, a class changed, a claim made from another spec, devices drawing on shared counters,
a node relabelled, devices held for a preemptor. And the claim's creation wakes the bind only once
the pod's status names the claim (or the watch cannot tell: a re-created pod)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from prometheus_client import generate_latest

from extender.server.metrics import Metrics
from extender.state.cache.nominations import PendingPlan
from extender.state.service import SchedulingService
from tests import manifests as m
from tests.backends.kube.test_backend import assert_consistent, node_of, started, until
from tests.backends.kube.test_template_claims import (
    PATIENT,
    controller_claim,
    count_resolutions,
    name_in_status,
    play_the_controller,
    stack,
    template_pod,
    waiting_for_its_claim,
)
from tests.fakes import FakeApiServer

Device = tuple[str, str, str]


def named_gpu_slice(node_name: str, count: int) -> dict[str, Any]:
    """``m.gpu_slice`` with each GPU's name as an attribute too (a class can select by it)."""
    raw = m.gpu_slice(node_name, count)
    for device in raw["spec"]["devices"]:
        device["attributes"] = {"name": {"string": device["name"]}}
    return raw


Waiting = tuple[Any, SchedulingService, asyncio.Task[None], list[str]]


async def waiting_bind(fake: FakeApiServer, *objects: dict[str, Any], gpus: int = 2) -> Waiting:
    """p1's bind to node-1, waiting for its template claim; and the nodes each allocator run of the
    bind was on (its ``_allocate`` calls)."""
    cluster = m.cluster(m.template("gpu-template"), template_pod("p1"), *objects, nodes=1, gpus=gpus)
    backend = await started(fake, *cluster)
    service = SchedulingService(backend=backend, **PATIENT)
    decided: list[str] = []
    real = service.binder._allocate

    def counting(claims: Any, node_name: str) -> Any:
        decided.append(node_name)
        return real(claims, node_name)

    service.binder._allocate = counting  # type: ignore[method-assign]
    bind = asyncio.create_task(service.bind("default", "p1", "uid-p1", "node-1"))
    await waiting_for_its_claim(service, bind, "default/p1")
    return backend, service, bind, decided


async def decided_again(
    fake: FakeApiServer, service: SchedulingService, bind: asyncio.Task[None], decided: list[str]
) -> None:
    """The bind done, having run the allocator again once its claim existed (twice in all, on
    node-1), keeping nothing it decided before the wait; no device in two claims."""
    await asyncio.wait_for(bind, 30)
    assert decided == ["node-1", "node-1"] and service.stats.claim_decisions_kept == 0
    assert_consistent(fake)


def provisional_devices(service: SchedulingService) -> list[Device]:
    (entry,) = [e for e in service.ledger if e.pod_key == "default/p1"]
    return [(d.device_id.driver, d.device_id.pool, d.device_id.device) for d in entry.result.devices]


def allocated_devices(fake: FakeApiServer, name: str) -> list[Device]:
    claim = fake.get_object("ResourceClaim", "default", name, group="resource.k8s.io")
    assert claim is not None
    results = claim["status"]["allocation"]["devices"]["results"]
    return [(r["driver"], r["pool"], r["device"]) for r in results]


async def test_the_devices_decided_before_the_wait_are_kept(fake: FakeApiServer) -> None:
    backend, service, bind, decided = await waiting_bind(fake)
    try:
        before = provisional_devices(service)
        name = play_the_controller(fake, "p1")
        await asyncio.wait_for(bind, 30)
        assert allocated_devices(fake, name) == before
        assert decided == ["node-1"]  # the allocator ran once: before the wait
        assert service.stats.claim_decisions_kept == 1 and service.stats.claim_waits == 1
        text = generate_latest(Metrics(service).registry).decode()
        assert "dra_extender_bind_claim_decisions_kept_total 1.0" in text
        assert node_of(fake, "p1") == "node-1"
        assert_consistent(fake)
    finally:
        await backend.stop()


async def test_a_device_another_claim_took_meanwhile_is_decided_again(fake: FakeApiServer) -> None:
    """Another scheduler allocated the very GPU the bind had decided on while it waited (the
    watch shows that claim): the bind allocates the other GPU."""
    backend, service, bind, decided = await waiting_bind(fake)
    try:
        (taken,) = provisional_devices(service)
        other = m.claim("elsewhere")
        other["status"] = {
            "allocation": {"devices": {"results": [
                {"request": "gpus", "driver": taken[0], "pool": taken[1], "device": taken[2]}
            ]}}
        }  # fmt: skip
        fake.put_object(other)
        await until(lambda: (c := backend.store.claims.get("default/elsewhere")) is not None and c.allocation)
        name = play_the_controller(fake, "p1")
        await decided_again(fake, service, bind, decided)
        (got,) = allocated_devices(fake, name)
        assert got != taken and got[1] == "node-1"
    finally:
        await backend.stop()


async def test_a_slice_republished_meanwhile_is_decided_again(fake: FakeApiServer) -> None:
    """The driver republished node-1's slice with one GPU fewer (the one decided on, say): nothing
    decided before may be trusted, whichever device changed."""
    backend, service, bind, decided = await waiting_bind(fake)
    try:
        (held,) = provisional_devices(service)
        smaller = m.gpu_slice("node-1", 2)
        smaller["spec"]["devices"] = [d for d in smaller["spec"]["devices"] if d["name"] != held[2]]
        smaller["spec"]["pool"]["generation"] = 2
        fake.put_object(smaller)
        await until(lambda: len(backend.store.slices["node-1-gpus"].devices) == 1)
        # the node's devices as the next request will see them: only the change count tells now
        backend.store.snapshot().node_view(backend.store.node("node-1"), service.cluster.features)
        name = play_the_controller(fake, "p1")
        await decided_again(fake, service, bind, decided)
        (got,) = allocated_devices(fake, name)
        assert got != held
    finally:
        await backend.stop()


async def test_a_class_changed_meanwhile_is_decided_again(fake: FakeApiServer) -> None:
    """The DeviceClass now selects only the GPUs the bind had not decided on: the slices are as
    they were, but what the class allows is not."""
    backend, service, bind, decided = await waiting_bind(fake, named_gpu_slice("node-1", 2), gpus=0)
    try:
        (held,) = provisional_devices(service)
        narrowed = m.gpu_class()
        others = f'device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].name != "{held[2]}"'
        narrowed["spec"]["selectors"] = [{"cel": {"expression": others}}]
        fake.put_object(narrowed)
        await until(lambda: "!=" in str(backend.store.classes["gpu"]))
        name = play_the_controller(fake, "p1")
        await decided_again(fake, service, bind, decided)
        (got,) = allocated_devices(fake, name)
        assert got != held
    finally:
        await backend.stop()


async def test_a_claim_made_from_another_spec_is_decided_again(fake: FakeApiServer) -> None:
    """The template was changed to two GPUs after the bind decided from it, and the controller
    made the claim from the new spec: the decision for one GPU does not fit it."""
    backend, service, bind, decided = await waiting_bind(fake)
    try:
        pod = fake.get_object("Pod", "default", "p1")
        assert pod is not None
        fake.put_object(controller_claim(pod, spec=m.claim("unused", count=2)["spec"]))
        fake.put_object(name_in_status(pod, "p1-t0-abcde"))
        await decided_again(fake, service, bind, decided)
        assert len(allocated_devices(fake, "p1-t0-abcde")) == 2
    finally:
        await backend.stop()


def partitioned_slice(node_name: str) -> dict[str, Any]:
    """``m.gpu_slice`` as two halves of one GPU's memory: each partition draws 4Gi of its 8Gi."""
    raw = m.gpu_slice(node_name, 0)
    half = {"counterSet": "gpu-0-memory", "counters": {"memory": {"value": "4Gi"}}}
    raw["spec"]["sharedCounters"] = [{"name": "gpu-0-memory", "counters": {"memory": {"value": "8Gi"}}}]
    raw["spec"]["devices"] = [{"name": f"gpu-0-part-{i}", "consumesCounters": [half]} for i in range(2)]
    return raw


async def test_devices_drawing_on_shared_counters_are_decided_again(fake: FakeApiServer) -> None:
    """Other allocations since may have drawn on the same counters: only the allocator can tell."""
    backend, service, bind, decided = await waiting_bind(fake, partitioned_slice("node-1"), gpus=0)
    try:
        assert provisional_devices(service)[0][2].startswith("gpu-0-part-")
        name = play_the_controller(fake, "p1")
        await decided_again(fake, service, bind, decided)
        assert allocated_devices(fake, name)[0][2].startswith("gpu-0-part-")
    finally:
        await backend.stop()


async def test_the_claim_wakes_its_bind_only_once_the_pod_status_names_it(fake: FakeApiServer) -> None:
    """The resourceclaim controller creates the claim, then records it in the pod's status: the
    claim alone cannot end the wait, so it does not wake the bind (each wake resolves the pod's
    claims again); the status does."""
    backend, service, bind, _ = await waiting_bind(fake)
    try:
        resolved = count_resolutions(service)
        pod = fake.get_object("Pod", "default", "p1")
        assert pod is not None
        fake.put_object(controller_claim(pod))
        (event,) = service.binder._claim_waiters["default/p1"]
        woken: list[bool] = []
        wake = event.set
        event.set = lambda: (woken.append(True), wake())[1]  # type: ignore[method-assign]
        await until(lambda: "default/p1-t0-abcde" in backend.store.claims)  # its event was handled
        assert woken == [] and resolved == [] and not bind.done()
        fake.put_object(name_in_status(pod, "p1-t0-abcde"))
        await asyncio.wait_for(bind, 30)
        assert resolved == ["p1"]  # one resolution: the one that found the claim
        assert service.stats.claim_decisions_kept == 1
        assert_consistent(fake)
    finally:
        await backend.stop()


async def test_a_node_relabelled_meanwhile_is_decided_again(fake: FakeApiServer) -> None:
    """Slices can select their nodes by label: a node whose labels changed is decided for again."""
    backend, service, bind, decided = await waiting_bind(fake)
    try:
        relabelled = m.node("node-1")
        relabelled["metadata"]["labels"]["zone"] = "b"
        fake.put_object(relabelled)
        await until(lambda: backend.store.node("node-1").labels.get("zone") == "b")
        backend.store.snapshot().node_view(backend.store.node("node-1"), service.cluster.features)
        play_the_controller(fake, "p1")
        await decided_again(fake, service, bind, decided)
    finally:
        await backend.stop()


async def test_devices_held_for_a_preemptor_mean_deciding_again(fake: FakeApiServer) -> None:
    """Preemption's plans and nominations hold devices against lower-priority pods (on any node
    of a shared pool): the allocator weighs them, so the bind asks it again."""
    backend, service, bind, decided = await waiting_bind(fake)
    try:
        service.cluster.nominations.plan(
            PendingPlan("default/urgent", "uid-urgent", 1000, "node-1", (), (), expires=float("inf"))
        )
        play_the_controller(fake, "p1")
        await decided_again(fake, service, bind, decided)
    finally:
        await backend.stop()


async def test_a_bind_for_a_pod_the_watch_shows_an_earlier_incarnation_of_is_woken_by_its_claim(
    fake: FakeApiServer,
) -> None:
    """The pod was deleted and made again under its name; the watch still shows the earlier pod,
    so the bind read the new one from the API, whose status names its claim already. The claim's
    creation must wake the bind: the earlier pod's status cannot say whether the claim is named."""
    backend, service = await stack(fake, **PATIENT)
    try:
        pod = fake.get_object("Pod", "default", "p1")
        assert pod is not None
        fake.put_object(name_in_status(pod, "p1-t0-abcde"))
        await until(lambda: bool((backend.store.pods["default/p1"].get("status") or {}).get("resourceClaimStatuses")))
        earlier = template_pod("p1")
        earlier["metadata"]["uid"] = "uid-earlier"
        backend.store.upsert(earlier)  # as if the watch lagged behind the re-creation
        bind = asyncio.create_task(service.bind("default", "p1", "uid-p1", "node-1"))
        await waiting_for_its_claim(service, bind, "default/p1")
        fake.put_object(controller_claim(pod))
        await asyncio.wait_for(bind, 30)
        assert node_of(fake, "p1") == "node-1"
        assert_consistent(fake)
    finally:
        await backend.stop()


async def test_a_bind_resolves_the_pods_claims_once_before_its_wait_and_once_when_woken(fake: FakeApiServer) -> None:
    """At arrival the decision resolves the pod's claims and finds the template claim not created;
    nothing changed since, so the wait does not resolve them again before its first wake-up."""
    backend, service = await stack(fake, **PATIENT)
    try:
        resolved = count_resolutions(service)
        bind = asyncio.create_task(service.bind("default", "p1", "uid-p1", "node-1"))
        await waiting_for_its_claim(service, bind, "default/p1")
        assert resolved == ["p1"]  # the decision's
        play_the_controller(fake, "p1")
        await asyncio.wait_for(bind, 30)
        assert resolved == ["p1", "p1"]  # and the wake-up that found the claim
        assert node_of(fake, "p1") == "node-1" and service.stats.claim_decisions_kept == 1
        assert_consistent(fake)
    finally:
        await backend.stop()


async def test_a_decision_on_an_older_copy_of_the_pod_leaves_the_wait_to_resolve_its_claims(
    fake: FakeApiServer,
) -> None:
    """A bind can hold an older copy of its pod than the store (it read the pod from the API while
    the watch brought the status naming the claim, or it waited for a lock): what its decision
    found says nothing of the store's pod, so the wait resolves the claims at once rather than
    wait for an event that came before it."""
    backend, service = await stack(fake, **PATIENT)
    try:
        stored = backend.store.pods["default/p1"]
        older = copy.deepcopy(stored)
        decision = service.binder._decide(older, "node-1")
        assert decision is not None and decision.claims.provisional and decision.revision == -1
        again = service.binder._decide(stored, "node-2")  # node-1's one GPU is the first's
        assert again is not None and again.revision == backend.store.revision
    finally:
        await backend.stop()
