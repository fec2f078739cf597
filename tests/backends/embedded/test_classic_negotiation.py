"""Classic DRA end to end in the embedded backend: the service negotiates with the simulated driver
controller through PodSchedulingContexts (spec/classic-dra.md §1.3, §1.6; the golden scenarios of
§1.7 that need no API server)."""

from __future__ import annotations

import asyncio
import copy
import re
from collections.abc import Callable
from typing import Any

import pytest

from extender.backends.embedded import EmbeddedBackend
from extender.backends.embedded.classic_driver import ClassicDriver
from extender.core.classic import UNSUITABLE, WAITING_FOR_DRIVER
from extender.core.errors import ApiUnavailable, InvalidObject
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
    schedule,
    scheduling_context,
    structured_claim,
    structured_class,
)

NODES = ["node-1", "node-2"]
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


class Harness:
    def __init__(self, *objects: dict[str, Any], capacity: tuple[int | None, ...] = (2, 2), **options: Any) -> None:
        self.backend = EmbeddedBackend(copy.deepcopy(cluster(*objects, capacity=capacity)))
        self.service = SchedulingService(backend=self.backend, hold_seconds=0, **options)

    @property
    def driver(self) -> ClassicDriver:
        return self.backend.classic_driver(DRIVER)

    async def settle(self) -> None:
        await quiet(self.service.classic.idle, self.driver.idle)

    async def schedule(self, name: str, nodes: list[str] = NODES, attempts: int = 8) -> Any:
        raw = self.backend.get("Pod", "default", name)
        assert raw is not None
        return await schedule(self.service, raw, nodes, settle=self.settle, attempts=attempts)

    def claim(self, name: str) -> dict[str, Any]:
        claim = self.backend.get("ResourceClaim", "default", name)
        assert claim is not None
        return claim

    def context(self, pod_name: str) -> dict[str, Any] | None:
        return self.backend.get("PodSchedulingContext", "default", pod_name)

    def node_of(self, pod_name: str) -> str | None:
        raw = self.backend.get("Pod", "default", pod_name)
        return None if raw is None else raw["spec"].get("nodeName")

    async def bind_waiting_for_the_driver(self, node: str) -> asyncio.Future[None]:
        """p1's bind to ``node``, started and run as far as waiting for the driver (selectedNode
        written); still running."""
        bind = asyncio.ensure_future(self.service.bind("default", "p1", "uid-p1", node))
        await eventually(lambda: self.service.classic.waiting_for_drivers("default/p1") or bind.done())
        if bind.done():
            bind.result()  # a bind that ended early fails the test with its own error
            raise AssertionError("the bind ended without waiting for the driver")
        return bind


def allocated_node(claim: dict[str, Any]) -> str:
    allocation = claim["status"]["allocation"]
    assert allocation["controller"] == DRIVER
    return str(allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0])


async def test_one_classic_claim_is_allocated_by_its_driver_for_the_selected_node() -> None:
    """select-immediately, then completed: the first attempt passes every node (no information is
    needed for one claim), bind selects the node, the driver allocates and reserves, the pod is
    bound and the context deleted."""
    h = Harness(classic_claim("c1"), pod("p1", "c1"))
    events: list[tuple[str, str, dict[str, Any]]] = []
    h.backend.add_listener(lambda event, obj: events.append((event, obj["kind"], obj)))
    outcome = await h.schedule("p1")
    assert [a.error for a in outcome.attempts] == [""]
    assert outcome.attempts[0].passing == NODES
    node = outcome.node
    assert node is not None and h.node_of("p1") == node
    claim = h.claim("c1")
    assert allocated_node(claim) == node
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "p1", "uid": "uid-p1"}]
    # the context: created by filter with the potential nodes, selectedNode set by bind, deleted after
    contexts = [(e, o.get("spec", {})) for e, k, o in events if k == "PodSchedulingContext"]
    assert contexts[0][0] == "ADDED" and contexts[0][1]["potentialNodes"] == NODES
    assert any(spec.get("selectedNode") == node for _, spec in contexts)
    assert contexts[-1][0] == "DELETED" and h.context("p1") is None
    assert h.service.classic.stats.deleted == 1
    # never a structured device for it: the ledger holds nothing, the claim names no devices
    assert not claim["status"]["allocation"].get("devices", {}).get("results")
    assert len(h.service.ledger) == 0


async def test_two_classic_claims_wait_for_information_then_schedule() -> None:
    """ask, then finish: with two pending claims the first attempt only publishes potentialNodes
    and answers Error; once the driver has answered for both, the pod is scheduled."""
    h = Harness(classic_claim("c1"), classic_claim("c2"), pod("p1", "c1", "c2"))
    outcome = await h.schedule("p1")
    assert outcome.attempts[0].error == WAITING_FOR_DRIVER
    assert outcome.node is not None and len(outcome.attempts) == 2
    assert {allocated_node(h.claim("c1")), allocated_node(h.claim("c2"))} == {outcome.node}


async def test_a_full_node_is_unsuitable_and_the_pod_spills_over() -> None:
    """node-1 holds one allocation and offers one: the driver lists it as unsuitable, filter
    refuses it as unresolvable, the pod goes to node-2."""
    other = allocated_by_driver(classic_claim("old"), "node-1", reserved_for=("someone",))
    h = Harness(other, classic_claim("c1"), pod("p1", "c1"), capacity=(1, 2))
    first = await h.service.filter_and_recover(h.backend.get("Pod", "default", "p1"), NODES)  # type: ignore[arg-type]
    assert first.node_names == NODES  # nothing known yet: every node passes
    await h.settle()
    context = h.context("p1")
    assert context is not None
    assert context["status"]["resourceClaims"] == [{"name": "c0", "unsuitableNodes": ["node-1"]}]
    outcome = await h.schedule("p1")
    assert outcome.attempts[0].failed == {"node-1": UNSUITABLE}
    assert outcome.node == "node-2"


async def test_the_driver_reporting_the_selected_node_unsuitable_moves_the_pod() -> None:
    """The bind selected node-1 before the driver had answered; the driver finds node-1 full, says
    so and allocates nothing; the bind fails naming it, the next attempt goes to node-2."""
    other = allocated_by_driver(classic_claim("old"), "node-1", reserved_for=("someone",))
    h = Harness(other, classic_claim("c1"), pod("p1", "c1"), capacity=(1, 2))
    h.driver.knobs.recheck_seconds = 60
    raw = h.backend.get("Pod", "default", "p1")
    assert raw is not None
    # the driver has not looked yet when the bind comes (it is stopped until the bind selected node-1)
    await h.driver.stop()
    assert (await h.service.filter_and_recover(raw, NODES)).node_names == NODES
    await h.service.classic.idle()
    bind = await h.bind_waiting_for_the_driver("node-1")
    h.driver.start()
    with pytest.raises(Exception, match="resource driver reported node node-1 unsuitable for claim default/c1"):
        await bind
    await h.settle()
    assert "selectedNode" not in (h.context("p1") or {}).get("spec", {})  # cleared, best effort
    outcome = await h.schedule("p1")
    assert outcome.node == "node-2"


async def test_a_pod_needing_a_full_node_stays_pending_as_unsuitable() -> None:
    others = [allocated_by_driver(classic_claim(f"old{i}"), f"node-{i}", reserved_for=("x",)) for i in (1, 2)]
    h = Harness(*others, classic_claim("c1"), pod("p1", "c1"), capacity=(1, 1))
    outcome = await h.schedule("p1")
    assert outcome.node is None
    assert outcome.attempts[-1].failed == dict.fromkeys(NODES, UNSUITABLE)
    assert "allocation" not in h.claim("c1").get("status", {})


async def test_a_pod_with_a_classic_and_a_structured_claim_is_scheduled() -> None:
    """The 1.31 QUIRK case (the in-tree plugin triggered without information, or waited forever):
    the structured claim is decided at bind and held in the ledger while the driver allocates the
    classic one, then both are written and the pod bound."""
    h = Harness(classic_claim("c1"), structured_claim("s1"), pod("p1", "c1", "s1"))
    outcome = await h.schedule("p1")
    assert outcome.node is not None and len(outcome.attempts) == 1
    assert allocated_node(h.claim("c1")) == outcome.node
    structured = h.claim("s1")["status"]
    assert structured["allocation"]["devices"]["results"][0]["pool"] == outcome.node
    assert structured["reservedFor"] == [{"resource": "pods", "name": "p1", "uid": "uid-p1"}]


async def test_two_classic_claims_and_a_structured_one_are_scheduled() -> None:
    """The other QUIRK case: two informed classic claims and one structured claim never reached
    selectedNode in 1.31 (Pending forever); here the second attempt binds."""
    h = Harness(classic_claim("c1"), classic_claim("c2"), structured_claim("s1"), pod("p1", "c1", "c2", "s1"))
    outcome = await h.schedule("p1")
    assert outcome.attempts[0].error == WAITING_FOR_DRIVER
    assert outcome.node is not None
    assert "allocation" in h.claim("s1")["status"]


async def test_a_classic_claim_beside_an_allocated_structured_one_follows_it() -> None:
    """The structured claim is allocated on node-2 already: only node-2 passes, the driver
    allocates there."""
    h = Harness(structured_claim("s1"), pod("p0", "s1"), classic_claim("c1"))
    assert (await h.schedule("p0", ["node-2"])).node == "node-2"
    h.backend.apply(pod("p1", "s1", "c1"))
    outcome = await h.schedule("p1")
    assert outcome.attempts[0].passing == ["node-2"]
    assert outcome.node == "node-2" and allocated_node(h.claim("c1")) == "node-2"


async def test_a_driver_that_does_not_reserve_gets_the_reservation_from_the_bind() -> None:
    """DontSetReservedFor: the driver allocates only; the bind adds the pod to reservedFor."""
    h = Harness(classic_claim("c1"), pod("p1", "c1"))
    h.driver.knobs.set_reserved_for = False
    outcome = await h.schedule("p1")
    assert outcome.node is not None
    assert h.claim("c1")["status"]["reservedFor"] == [{"resource": "pods", "name": "p1", "uid": "uid-p1"}]


async def test_a_driver_slower_than_the_bind_deadline_is_caught_up_with_on_the_next_attempt() -> None:
    """The bind gives up waiting (Error), keeping selectedNode; the driver allocates later, and the
    next attempt finds the claim allocated for that node (the fast path) and binds there. The
    driver's Allocate is held until the first attempt has ended, so only the (short) deadline can
    end that attempt, on any machine."""
    h = Harness(classic_claim("c1"), pod("p1", "c1"), bind_deadline_seconds=1.0)
    allocate = asyncio.Event()
    h.driver.knobs.allocate_gate = allocate

    async def driver_finishes_then_settle() -> None:
        assert "allocation" not in h.claim("c1").get("status", {})  # the gate held it
        allocate.set()
        await eventually(lambda: "allocation" in h.claim("c1").get("status", {}))
        await h.settle()

    raw = h.backend.get("Pod", "default", "p1")
    assert raw is not None
    outcome = await schedule(h.service, raw, NODES, settle=driver_finishes_then_settle, attempts=1)
    assert outcome.node is None
    first = outcome.attempts[0]
    assert first.bind_error == f"timed out waiting for resource driver to allocate claims for node {first.node}"
    context = h.context("p1")
    assert context is not None and context["spec"]["selectedNode"] == first.node
    assert allocated_node(h.claim("c1")) == first.node
    again = await h.schedule("p1")
    assert again.attempts[0].passing == [first.node] and again.node == first.node


async def test_a_context_of_an_older_pod_of_the_same_name_is_not_used() -> None:
    stale = scheduling_context("p1", "uid-old", uid="ctx-old", selectedNode="node-1")
    h = Harness(classic_claim("c1"), pod("p1", "c1"), stale)
    outcome = await h.schedule("p1", attempts=1)
    assert outcome.attempts[0].error == "PodSchedulingContext object with UID ctx-old is not owned by Pod default/p1"
    assert "allocation" not in h.claim("c1").get("status", {})


async def test_more_than_128_passing_nodes_publish_a_sorted_sample_of_128() -> None:
    objects = [classic_class(), classic_claim("c1"), pod("p1", "c1")]
    names = [f"n{i:03d}" for i in range(200)]
    objects += [classic_node(name) for name in names]
    backend = EmbeddedBackend(objects)
    service = SchedulingService(backend=backend, hold_seconds=0)
    await backend.classic_driver(DRIVER).stop()  # only the publishing is looked at
    raw = backend.get("Pod", "default", "p1")
    assert raw is not None
    assert (await service.filter_and_recover(raw, names)).node_names == names
    await service.classic.idle()
    context = backend.get("PodSchedulingContext", "default", "p1")
    assert context is not None
    published = context["spec"]["potentialNodes"]
    assert len(published) == 128 and published == sorted(published) and set(published) <= set(names)
    # a second filter over the same nodes does not publish another sample
    writes = service.classic.stats.publishes.get("potentialNodes")
    await service.filter_and_recover(raw, names)
    await service.classic.idle()
    assert service.classic.stats.publishes.get("potentialNodes") == writes


async def test_a_claim_allocated_where_the_pod_cannot_go_is_given_back_to_its_driver() -> None:
    """wrong-topology: the claim is allocated on node-1 for nobody; the pod may only use node-2:
    the filter asks the driver to deallocate (reservedFor emptied, deallocationRequested set in one
    write), answers Error, the driver deallocates, and the pod is then allocated on node-2."""
    h = Harness(allocated_by_driver(classic_claim("c1"), "node-1"), pod("p1", "c1"))
    outcome = await h.schedule("p1", ["node-2"])
    errors = [a.error for a in outcome.attempts if a.error]
    assert errors[0] == "deallocation of ResourceClaim default/c1 requested"
    assert outcome.node == "node-2" and allocated_node(h.claim("c1")) == "node-2"
    assert h.service.classic.stats.deallocations == 1 and h.driver.stats.deallocations == 1


async def test_a_pod_deleted_while_its_bind_waits_for_the_driver_fails_the_bind() -> None:
    h = Harness(classic_claim("c1"), pod("p1", "c1"))
    await h.driver.stop()
    raw = h.backend.get("Pod", "default", "p1")
    assert raw is not None
    await h.service.filter_and_recover(raw, NODES)
    bind = await h.bind_waiting_for_the_driver("node-1")
    h.backend.delete_pod("default", "p1")
    with pytest.raises(Exception, match="was deleted"):
        await bind
    assert h.context("p1") is None  # the garbage collector took it with its pod
    assert len(h.service.ledger) == 0


async def test_deallocation_requested_at_filter_time_answers_error() -> None:
    claim = allocated_by_driver(classic_claim("c1"), "node-1")
    claim["status"]["deallocationRequested"] = True
    h = Harness(claim, pod("p1", "c1"))
    await h.driver.stop()
    outcome = await h.schedule("p1", attempts=1)
    assert outcome.attempts[0].error == "resourceclaim must be reallocated"


def test_structured_pods_are_untouched_by_the_negotiation() -> None:
    h = Harness(structured_claim("s1"), pod("p1", "s1"))
    raw = h.backend.get("Pod", "default", "p1")
    assert raw is not None
    assert h.service.filter(raw, NODES).node_names == NODES
    assert h.context("p1") is None and not h.service.classic.stats.publishes


async def test_the_embedded_cluster_refuses_what_1_31_refuses() -> None:
    h = Harness(allocated_by_driver(classic_claim("c1"), "node-1", reserved_for=("p",)))
    claim = h.claim("c1")
    claim["status"]["deallocationRequested"] = True  # with the consumer still there
    with pytest.raises(InvalidObject, match=re.escape("deallocation cannot be requested while `reservedFor` is set")):
        await h.backend.update_claim_status(claim)
    claim["status"] = {"deallocationRequested": True}
    with pytest.raises(InvalidObject, match=re.escape("`allocation` must be set when `deallocationRequested` is set")):
        await h.backend.update_claim_status(claim)


async def test_the_flag_goes_only_with_the_allocation() -> None:
    claim = allocated_by_driver(classic_claim("c1"), "node-1")
    claim["status"]["deallocationRequested"] = True
    h = Harness(claim)
    await h.driver.stop()  # it would deallocate the claim itself
    stored = h.claim("c1")
    del stored["status"]["deallocationRequested"]

    with pytest.raises(InvalidObject, match="may not be cleared when `allocation` is set"):
        await h.backend.update_claim_status(stored)
    stored["status"] = {}
    assert (await h.backend.update_claim_status(stored))["status"] == {}


async def test_the_negotiation_is_counted_in_the_metrics() -> None:
    from prometheus_client import generate_latest

    from extender.server.metrics import Metrics

    h = Harness(classic_claim("c1"), pod("p1", "c1"))
    metrics = Metrics(h.service)
    assert (await h.schedule("p1")).node is not None
    text = generate_latest(metrics.registry).decode()
    assert 'dra_extender_classic_context_writes_total{field="selectedNode"} 1.0' in text
    assert 'dra_extender_classic_context_writes_total{field="potentialNodes"}' in text
    assert "dra_extender_classic_bind_waits_total 1.0" in text
    assert "dra_extender_classic_contexts_deleted_total 1.0" in text


async def test_two_claims_and_no_node_left_answer_the_reasons_not_waiting() -> None:
    """When no node passes, waiting for drivers that are asked about no node would never end:
    the nodes' reasons are the answer."""
    others = [allocated_by_driver(classic_claim(f"old{i}"), f"node-{i}", reserved_for=("x",)) for i in (1, 2)]
    h = Harness(*others, classic_claim("c1"), classic_claim("c2"), pod("p1", "c1", "c2"), capacity=(1, 1))
    outcome = await h.schedule("p1")
    assert outcome.node is None
    assert outcome.attempts[0].error == WAITING_FOR_DRIVER  # nothing known yet: the drivers are asked
    assert not outcome.attempts[-1].error
    assert outcome.attempts[-1].failed == dict.fromkeys(NODES, UNSUITABLE)


async def test_a_repeated_bind_deletes_the_context_the_first_could_not() -> None:
    h = Harness(classic_claim("c1"), pod("p1", "c1"))
    h.backend.faults.fail("delete_scheduling_context", ApiUnavailable("injected"))
    outcome = await h.schedule("p1")
    assert outcome.node is not None and h.context("p1") is not None  # the delete failed (logged)
    await h.service.bind("default", "p1", "uid-p1", outcome.node)  # kube-scheduler's retry
    assert h.context("p1") is None


async def test_a_deallocation_is_not_requested_while_the_node_stays_selected() -> None:
    """Clearing selectedNode fails: asking for the deallocation now would have the driver allocate
    on the same node again at once, so nothing is written and the attempt fails as before."""
    claim = allocated_by_driver(classic_claim("c1"), "node-1")
    context = scheduling_context("p1", "uid-p1", selectedNode="node-1", potentialNodes=["node-1"])
    h = Harness(claim, pod("p1", "c1"), context)
    h.backend.faults.fail("update_scheduling_context", ApiUnavailable("injected"), times=None)
    raw = h.backend.get("Pod", "default", "p1")
    assert raw is not None
    outcome = await h.service.filter_and_recover(raw, ["node-2"])
    assert not outcome.error and outcome.node_names == []
    assert not h.claim("c1")["status"].get("deallocationRequested")
    h.backend.faults.clear()
    outcome = await h.service.filter_and_recover(raw, ["node-2"])
    assert outcome.error == "deallocation of ResourceClaim default/c1 requested"
    assert "selectedNode" not in (h.context("p1") or {})["spec"]


async def test_a_classic_claim_made_from_a_template() -> None:
    """The resourceclaim controller makes the claim from its template; the driver allocates it
    once it exists (a classic claim is never answered from its template alone)."""
    template = {
        "apiVersion": "resource.k8s.io/v1alpha3",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "fpga", "namespace": "default"},
        "spec": {"spec": classic_claim("x")["spec"]},
    }
    raw = pod("p1")
    raw["spec"]["resourceClaims"] = [{"name": "fpga", "resourceClaimTemplateName": "fpga"}]
    h = Harness(template, raw)
    outcome = await h.schedule("p1")
    assert outcome.node is not None
    [claim] = h.backend.list_objects("ResourceClaim")
    assert allocated_node(claim) == outcome.node
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "p1", "uid": "uid-p1"}]
