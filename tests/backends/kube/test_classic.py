"""Classic DRA against the strict fake API server (Kubernetes 1.31: resource.k8s.io/v1alpha3 only,
DRAControlPlaneController on), with the fake driver controller (tests/fakes/classic_driver.py) and
the fake kube-controller-manager (tests/fakes/claim_controller.py): the golden scenarios of
spec/classic-dra.md §1.7, each asserted on what the API server ends up holding and on the
requests that got there."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from extender.backends.kube import ClusterConfig, KubeBackend, KubeSettings
from extender.core.classic import UNSUITABLE, WAITING_FOR_DRIVER
from extender.core.errors import DeadlineExceeded, PodUnschedulable
from extender.state.service import FilterOutcome, SchedulingService
from tests.classic import (
    DRIVER,
    Outcome,
    allocated_by_driver,
    classic_claim,
    classic_class,
    classic_node,
    gpu_slice,
    pod,
    schedule,
    scheduling_context,
    structured_claim,
    structured_class,
)
from tests.fakes import FakeApiServer
from tests.fakes.claim_controller import ReservationController
from tests.fakes.classic_driver import FakeDriver, running_driver

NODES = ["node-1", "node-2"]
CONTEXTS = r"/podschedulingcontexts"
#: A bound on every wait for a condition: it only keeps a broken test from hanging (a loaded
#: machine may be slow, never this slow); it is never what a test measures.
HANG_GUARD_SECONDS = 30.0


async def eventually(condition: Callable[[], bool]) -> None:
    """Until ``condition()`` holds (``HANG_GUARD_SECONDS`` only against a hang)."""
    async with asyncio.timeout(HANG_GUARD_SECONDS):
        while not condition():
            await asyncio.sleep(0.005)


def cluster(*extra: dict[str, Any], capacity: tuple[int | None, ...] = (2, 2)) -> list[dict[str, Any]]:
    objects = [classic_class(), structured_class()]
    for i, cap in enumerate(capacity, start=1):
        objects += [classic_node(f"node-{i}", cap), gpu_slice(f"node-{i}")]
    return objects + list(extra)


async def serve(aiohttp_server: Any, *, classic: bool = True) -> FakeApiServer:
    fake = FakeApiServer(bookmark_interval=None, resource_versions=("v1alpha3",), classic=classic, minor_version=31)
    await fake.serve_with(aiohttp_server)
    return fake


class Stack:
    def __init__(self, fake: FakeApiServer, backend: KubeBackend, service: SchedulingService, driver: FakeDriver):
        self.fake, self.backend, self.service, self.driver = fake, backend, service, driver

    async def settle(self) -> None:
        """Until the driver, the publisher and the watches have nothing left to do: rounds of
        waiting for each, until a round in which the API server stored nothing new."""
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            while True:
                before = self.fake.storage.rv
                await self.driver.idle()
                await self.service.classic.idle()
                await eventually(self.watches_delivered)
                if self.fake.storage.rv == before:
                    return

    def watches_delivered(self) -> bool:
        """Whether every watch has delivered every change the API server stored for its kind
        (each reflector's last resourceVersion is at least that of the kind's last change)."""
        for reflector in self.backend.reflectors.values():
            group = reflector.resource.api_version.rpartition("/")[0]
            seen = int(reflector.resource_version or 0)
            if self.fake.storage.changes_since((group, reflector.resource.plural), seen):
                return False
        return True

    async def schedule(self, name: str, nodes: list[str] = NODES, attempts: int = 8) -> Outcome:
        raw = self.fake.get_object("Pod", "default", name)
        assert raw is not None
        return await schedule(self.service, raw, nodes, settle=self.settle, attempts=attempts)

    async def bind_while_driver_is_down(self, node: str) -> tuple[FilterOutcome, asyncio.Future[None]]:
        """The driver stopped, p1 filtered over every node, then its bind to ``node`` started and
        got as far as waiting for the driver (selectedNode written): the filter's answer and the
        bind, still running."""
        await self.driver.crash()
        raw = self.fake.get_object("Pod", "default", "p1")
        assert raw is not None
        outcome = await self.service.filter_and_recover(raw, NODES)
        await self.service.classic.idle()
        bind = asyncio.ensure_future(self.service.bind("default", "p1", "uid-p1", node))
        await eventually(lambda: self.service.classic.waiting_for_drivers("default/p1") or bind.done())
        if bind.done():
            bind.result()  # a bind that ended early fails the test with its own error
            raise AssertionError("the bind ended without waiting for the driver")
        return outcome, bind

    def claim(self, name: str) -> dict[str, Any]:
        claim = self.fake.get_object("ResourceClaim", "default", name, group="resource.k8s.io")
        assert claim is not None
        return claim

    def node_of(self, pod_name: str) -> str | None:
        raw = self.fake.get_object("Pod", "default", pod_name)
        return None if raw is None else raw["spec"].get("nodeName")


@contextlib.asynccontextmanager
async def classic_stack(
    fake: FakeApiServer, *objects: dict[str, Any], knobs: dict[str, Any] | None = None, **service_options: Any
) -> AsyncIterator[Stack]:
    for obj in objects:
        fake.put_object(obj)
    backend = KubeBackend(ClusterConfig(host=fake.url), settings=KubeSettings(freeze_gc=False, requeue=None))
    await backend.start()
    await backend.wait_synced(HANG_GUARD_SECONDS)
    service = SchedulingService(backend=backend, hold_seconds=0, **service_options)
    try:
        async with running_driver(fake, DRIVER, **(knobs or {})) as driver:
            yield Stack(fake, backend, service, driver)
    finally:
        await service.classic.stop()
        await backend.stop()


def allocated_node(claim: dict[str, Any]) -> str:
    allocation = claim["status"]["allocation"]
    assert allocation["controller"] == DRIVER
    return str(allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0])


async def test_one_classic_claim_end_to_end(aiohttp_server: Any) -> None:
    """select-immediately and completed: the context is created (POST) with the potential nodes,
    updated (PUT) with the selected node, the driver allocates and reserves, the pod is bound
    and the context deleted (DELETE)."""
    fake = await serve(aiohttp_server)
    async with classic_stack(fake, *cluster(classic_claim("c1"), pod("p1", "c1"))) as s:
        assert s.backend.classic_dra == ""
        outcome = await s.schedule("p1")
        assert [a.error for a in outcome.attempts] == [""] and outcome.node is not None
        assert s.node_of("p1") == outcome.node
        claim = s.claim("c1")
        assert allocated_node(claim) == outcome.node
        assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "p1", "uid": "uid-p1"}]
        await s.settle()
        assert fake.contexts() == []
        writes = [
            (r.method, r.status) for r in fake.requests if CONTEXTS in r.path and not r.is_watch and r.method != "GET"
        ]
        assert ("POST", 201) in writes and ("DELETE", 200) in writes
        assert all(status < 400 for _, status in writes)


async def test_two_claims_ask_first_then_finish(aiohttp_server: Any) -> None:
    fake = await serve(aiohttp_server)
    async with classic_stack(fake, *cluster(classic_claim("c1"), classic_claim("c2"), pod("p1", "c1", "c2"))) as s:
        outcome = await s.schedule("p1")
        assert outcome.attempts[0].error == WAITING_FOR_DRIVER
        assert outcome.node is not None
        assert {allocated_node(s.claim("c1")), allocated_node(s.claim("c2"))} == {outcome.node}


async def test_a_conflicting_update_falls_back_to_server_side_apply(aiohttp_server: Any) -> None:
    """The driver wrote the context's status between our read and our update (409): the bind's
    selectedNode goes out as a forced server-side apply, with the potential nodes kept."""
    fake = await serve(aiohttp_server)
    async with classic_stack(fake, *cluster(classic_claim("c1"), pod("p1", "c1"))) as s:
        raw = fake.get_object("Pod", "default", "p1")
        assert raw is not None
        await s.service.filter_and_recover(raw, NODES)
        await s.settle()
        fake.conflicts(r"/podschedulingcontexts/p1$", times=1)
        await s.service.bind("default", "p1", "uid-p1", "node-2")
        applies = [r for r in fake.requests if r.method == "PATCH" and CONTEXTS in r.path]
        assert len(applies) == 1 and applies[0].status == 200
        assert applies[0].query.get("fieldManager") == "dra-extender" and applies[0].query.get("force") == "true"
        assert applies[0].body["spec"] == {"potentialNodes": NODES, "selectedNode": "node-2"}
        assert s.node_of("p1") == "node-2"


async def test_the_driver_finding_the_selected_node_unsuitable_moves_the_pod(aiohttp_server: Any) -> None:
    fake = await serve(aiohttp_server)
    other = allocated_by_driver(classic_claim("old"), "node-1", reserved_for=("someone",))
    objects = cluster(other, classic_claim("c1"), pod("p1", "c1"), pod("someone", "old"), capacity=(1, 2))
    async with classic_stack(fake, *objects) as s:
        # the driver has not looked at the context when the bind comes
        first, bind = await s.bind_while_driver_is_down("node-1")
        assert first.node_names == NODES
        s.driver.restart()
        with pytest.raises(Exception, match="resource driver reported node node-1 unsuitable for claim default/c1"):
            await bind
        outcome = await s.schedule("p1")
        assert outcome.attempts[0].failed == {"node-1": UNSUITABLE} and outcome.node == "node-2"


async def test_a_slow_driver_times_the_bind_out_then_the_retry_takes_the_fast_path(aiohttp_server: Any) -> None:
    """The driver's Allocate is held until the first attempt has ended, so only the bind's deadline
    can end that attempt (the deadline is short, the driver slower on any machine); then the driver
    allocates for the selected node, and the retry finds the claim allocated there and binds."""
    fake = await serve(aiohttp_server)
    allocate = asyncio.Event()
    async with classic_stack(
        fake,
        *cluster(classic_claim("c1"), pod("p1", "c1")),
        knobs={"allocate_gate": allocate},
        # the context writes must fit in it (under load too); the driver never does
        bind_deadline_seconds=2.0,
    ) as s:

        async def driver_finishes_then_settle() -> None:
            assert not (s.claim("c1").get("status") or {}).get("allocation")  # the gate held it
            allocate.set()
            await eventually(lambda: bool((s.claim("c1").get("status") or {}).get("allocation")))
            await s.settle()

        raw = fake.get_object("Pod", "default", "p1")
        assert raw is not None
        first = await schedule(s.service, raw, NODES, settle=driver_finishes_then_settle, attempts=1)
        assert first.node is None
        node = first.attempts[0].node
        assert (
            first.attempts[0].bind_error == f"timed out waiting for resource driver to allocate claims for node {node}"
        )
        [context] = fake.contexts()
        assert context["spec"]["selectedNode"] == node  # kept, so that the driver could finish
        assert allocated_node(s.claim("c1")) == node
        again = await s.schedule("p1")
        assert again.attempts[0].passing == [node] and again.node == node


async def test_a_driver_that_does_not_reserve(aiohttp_server: Any) -> None:
    fake = await serve(aiohttp_server)
    async with classic_stack(
        fake, *cluster(classic_claim("c1"), pod("p1", "c1")), knobs={"set_reserved_for": False}
    ) as s:
        outcome = await s.schedule("p1")
        assert outcome.node is not None
        assert s.claim("c1")["status"]["reservedFor"] == [{"resource": "pods", "name": "p1", "uid": "uid-p1"}]


async def test_a_driver_that_crashes_and_restarts_during_the_bind_wait(aiohttp_server: Any) -> None:
    fake = await serve(aiohttp_server)
    async with classic_stack(fake, *cluster(classic_claim("c1"), pod("p1", "c1"))) as s:
        _, bind = await s.bind_while_driver_is_down("node-1")
        assert not bind.done()  # it waits for the driver, which is down
        s.driver.restart()  # a restarted controller lists everything and carries on
        await bind
        assert s.node_of("p1") == "node-1" and allocated_node(s.claim("c1")) == "node-1"


async def test_a_mixed_pod_is_scheduled_with_its_structured_claim_written_last(aiohttp_server: Any) -> None:
    """The 1.31 QUIRK case: the structured claim's allocation is written only once the driver
    has allocated the classic claim."""
    fake = await serve(aiohttp_server)
    async with classic_stack(fake, *cluster(classic_claim("c1"), structured_claim("s1"), pod("p1", "c1", "s1"))) as s:
        outcome = await s.schedule("p1")
        assert outcome.node is not None and len(outcome.attempts) == 1
        allocated = [r for r in fake.requests if r.method == "PUT" and r.path.endswith("/status") and r.status == 200]
        by_claim = [r.path.split("/")[-2] for r in allocated if "resourceclaims" in r.path]
        assert by_claim.index("c1") < by_claim.index("s1")  # the driver's write, then ours
        structured = s.claim("s1")["status"]
        assert structured["allocation"]["devices"]["results"][0]["pool"] == outcome.node


async def test_wrong_topology_asks_the_driver_to_deallocate(aiohttp_server: Any) -> None:
    """The claim is allocated on node-1 for nobody and the pod may only use node-2: one status
    write empties reservedFor and sets deallocationRequested; the driver deallocates; the pod is
    allocated on node-2."""
    fake = await serve(aiohttp_server)
    async with classic_stack(fake, *cluster(allocated_by_driver(classic_claim("c1"), "node-1"), pod("p1", "c1"))) as s:
        outcome = await s.schedule("p1", ["node-2"])
        assert outcome.attempts[0].error == "deallocation of ResourceClaim default/c1 requested"
        requests = [r for r in fake.requests if r.method == "PUT" and r.path.endswith("/resourceclaims/c1/status")]
        first = requests[0].body["status"]
        assert first["deallocationRequested"] is True and "reservedFor" not in first and first["allocation"]
        assert outcome.node == "node-2" and allocated_node(s.claim("c1")) == "node-2"


async def test_deallocation_pending_at_filter_time(aiohttp_server: Any) -> None:
    fake = await serve(aiohttp_server)
    claim = allocated_by_driver(classic_claim("c1"), "node-1")
    claim["status"]["deallocationRequested"] = True
    async with classic_stack(fake, *cluster(claim, pod("p1", "c1"))) as s:
        await s.driver.crash()
        outcome = await s.schedule("p1", attempts=1)
        assert outcome.attempts[0].error == "resourceclaim must be reallocated"


async def test_a_stale_context_of_an_older_pod(aiohttp_server: Any) -> None:
    fake = await serve(aiohttp_server)
    stale = scheduling_context("p1", "uid-old", selectedNode="node-1")
    async with classic_stack(fake, *cluster(classic_claim("c1"), pod("p1", "c1"), stale)) as s:
        [context] = fake.contexts()
        outcome = await s.schedule("p1", attempts=1)
        uid = context["metadata"]["uid"]
        assert outcome.attempts[0].error == f"PodSchedulingContext object with UID {uid} is not owned by Pod default/p1"
        assert not (s.claim("c1").get("status") or {}).get("allocation")


async def test_a_pod_deleted_during_the_bind_wait(aiohttp_server: Any) -> None:
    fake = await serve(aiohttp_server)
    async with classic_stack(fake, *cluster(classic_claim("c1"), pod("p1", "c1"))) as s:
        _, bind = await s.bind_while_driver_is_down("node-1")
        fake.delete_object("Pod", "default", "p1")
        # a deleted pod is first marked (deletionTimestamp), then gone, as on a real API server:
        # the bind sees either
        with pytest.raises(Exception, match=r"is being deleted|was deleted"):
            await bind
        await s.settle()
        assert fake.contexts() == []  # the garbage collector took it with its pod
        assert len(s.service.ledger) == 0


async def test_the_last_consumer_leaving_makes_the_controller_manager_request_deallocation(aiohttp_server: Any) -> None:
    """kube-controller-manager 1.31: the bound pod goes, its reservation goes, and in the same
    update deallocationRequested is set; the driver deallocates and drops its finalizer."""
    fake = await serve(aiohttp_server)
    async with classic_stack(fake, *cluster(classic_claim("c1"), pod("p1", "c1"))) as s:
        assert (await s.schedule("p1")).node is not None
        async with ReservationController(fake) as kcm:
            fake.delete_object("Pod", "default", "p1")

            def deallocated() -> bool:
                claim = s.claim("c1")
                return not claim["metadata"].get("finalizers") and not (claim.get("status") or {}).get("allocation")

            # kcm.writes counts a write once its answer is read, which may come after the driver's
            await eventually(lambda: deallocated() and kcm.writes >= 1)
        claim = s.claim("c1")
        assert not claim.get("status", {}).get("allocation") and not claim["metadata"].get("finalizers")
        kcm_writes = [r.body["status"] for r in fake.requests if r.method == "PUT" and r.path.endswith("c1/status")]
        assert {"deallocationRequested": True, **{"allocation": kcm_writes[-2]["allocation"]}} in kcm_writes


async def test_the_controller_manager_reserves_a_claim_for_a_bound_pod(aiohttp_server: Any) -> None:
    fake = await serve(aiohttp_server)
    bound = pod("p1", "c1")
    bound["spec"]["nodeName"] = "node-1"
    objects = cluster(allocated_by_driver(classic_claim("c1"), "node-1"), bound)
    async with classic_stack(fake, *objects), ReservationController(fake) as kcm:
        # kcm.writes counts the write once its answer is read, a little after the server stored it
        await eventually(lambda: s_reserved(fake) and kcm.writes >= 1)
        await kcm.sweep()  # a pass that comes after the reservation: it writes nothing more
        assert s_reserved(fake) and kcm.writes == 1


def s_reserved(fake: FakeApiServer) -> bool:
    claim = fake.get_object("ResourceClaim", "default", "c1", group="resource.k8s.io") or {}
    return [r["uid"] for r in (claim.get("status") or {}).get("reservedFor") or []] == ["uid-p1"]


async def test_a_gate_off_server_degrades_cleanly(aiohttp_server: Any) -> None:
    """1.31 without DRAControlPlaneController: no contexts are served, so none is watched or
    written; spec.controller is dropped by the server, so such a claim is a structured one."""
    fake = await serve(aiohttp_server, classic=False)
    async with classic_stack(fake, *cluster(structured_claim("s1"), pod("p1", "s1"))) as s:
        assert "does not serve podschedulingcontexts" in s.backend.classic_dra
        assert "DRAControlPlaneController" in s.backend.classic_dra
        outcome = await s.schedule("p1")
        assert outcome.node is not None
        assert not [r for r in fake.requests if CONTEXTS in r.path]


async def test_contexts_served_but_forbidden_leave_classic_pods_unschedulable(aiohttp_server: Any) -> None:
    """The base RBAC without the classic overlay: start succeeds, classic pods are told why."""
    fake = await serve(aiohttp_server)
    fake.deny("*", "podschedulingcontexts")
    async with classic_stack(fake, *cluster(classic_claim("c1"), pod("p1", "c1"))) as s:
        assert "grant the extender deploy/classic-dra's permissions" in s.backend.classic_dra
        outcome = await s.schedule("p1", attempts=1)
        assert "DRAControlPlaneController" in outcome.attempts[0].error
        with pytest.raises(PodUnschedulable):
            await s.service.bind("default", "p1", "uid-p1", "node-1")


async def test_a_slow_publish_neither_overtakes_the_bind_nor_outlives_it(aiohttp_server: Any) -> None:
    """filter's potentialNodes publish (a POST the API server holds) is still under way when the
    bind comes: the bind waits for it, then selects the node; no context is left after the bind."""
    fake = await serve(aiohttp_server)
    async with classic_stack(fake, *cluster(classic_claim("c1"), pod("p1", "c1"))) as s:
        post = fake.hold("POST", CONTEXTS)
        raw = fake.get_object("Pod", "default", "p1")
        assert raw is not None
        await s.service.filter_and_recover(raw, NODES)
        await post.arrived()  # the publisher's POST is on its way, unanswered
        bind = asyncio.ensure_future(s.service.bind("default", "p1", "uid-p1", "node-1"))
        await eventually(lambda: s.service.classic.quiesced("default/p1") or bind.done())
        post.release()  # the publish ends only now that the bind is there
        await bind
        await s.settle()
        assert s.node_of("p1") == "node-1" and fake.contexts() == []
        assert not s.service.classic.publishing("default/p1")  # nothing left that could recreate it
        posts = [r for r in fake.requests if r.method == "POST" and CONTEXTS in r.path]
        assert [r.status for r in posts] == [201]  # the publisher's, answered; the bind updated it


async def test_the_bind_deadline_covers_the_context_writes(aiohttp_server: Any) -> None:
    fake = await serve(aiohttp_server)
    async with classic_stack(fake, *cluster(classic_claim("c1"), pod("p1", "c1")), bind_deadline_seconds=1.0) as s:
        raw = fake.get_object("Pod", "default", "p1")
        assert raw is not None
        await s.service.filter_and_recover(raw, NODES)
        await s.settle()
        # the selectedNode update is never answered: only the deadline can end the bind
        fake.hang("PUT", r"/podschedulingcontexts/p1$", times=None)
        async with asyncio.timeout(HANG_GUARD_SECONDS):
            with pytest.raises(DeadlineExceeded, match="while selecting the node"):
                await s.service.bind("default", "p1", "uid-p1", "node-1")
        assert len(s.service.ledger) == 0


async def test_clearing_the_node_by_apply_sends_it_empty(aiohttp_server: Any) -> None:
    """A clear whose update conflicts is applied with selectedNode "" (an omitted field would
    stay: the update that set it made another manager its owner); then the deallocation."""
    fake = await serve(aiohttp_server)
    context = scheduling_context("p1", "uid-p1", selectedNode="node-1", potentialNodes=["node-1"])
    objects = cluster(allocated_by_driver(classic_claim("c1"), "node-1"), pod("p1", "c1"), context)
    async with classic_stack(fake, *objects) as s:
        await s.driver.crash()
        fake.conflicts(r"/podschedulingcontexts/p1$", times=1)
        raw = fake.get_object("Pod", "default", "p1")
        assert raw is not None
        outcome = await s.service.filter_and_recover(raw, ["node-2"])
        assert outcome.error == "deallocation of ResourceClaim default/c1 requested"
        [stored] = fake.contexts()
        assert not stored["spec"].get("selectedNode")
        [apply] = [r for r in fake.requests if r.method == "PATCH" and CONTEXTS in r.path]
        assert apply.body["spec"]["selectedNode"] == ""
        assert s.claim("c1")["status"]["deallocationRequested"] is True
