"""Template claims the resourceclaim controller replaces after their pod's bind (kubernetes#140217,
``state/bind/replaced.py``): the devices move to the claim the pod's status now names, and only
where they can as they are; against the fake API server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from extender.backends.kube import KubeBackend
from extender.state.bind.replaced import REPAIR_WINDOW_SECONDS
from extender.state.service import SchedulingService
from tests.backends.kube.test_backend import assert_consistent, node_of, until
from tests.backends.kube.test_template_claims import (
    PATIENT,
    allocated_devices,
    assert_undone,
    claim_made_for,
    claim_status,
    controller_claim,
    name_in_status,
    stack,
    status_names,
)
from tests.fakes import FakeApiServer

SECOND = "p1-t0-fghij"


async def bound_p1(fake: FakeApiServer) -> tuple[KubeBackend, SchedulingService, str, list[str]]:
    """p1 bound to node-1 with the claim the controller made first: the stack, that claim's name
    and its devices."""
    backend, service = await stack(fake, **PATIENT)
    first = await claim_made_for(fake, backend, service, "p1")
    await service.bind("default", "p1", "uid-p1", "node-1")
    assert node_of(fake, "p1") == "node-1" and service.binder.replaced.watched("default/p1")
    devices = allocated_devices(claim_status(fake, first))
    assert len(devices) == 1
    return backend, service, first, devices


def replace_after_binding(
    fake: FakeApiServer, spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None
) -> None:
    """What the controller does when its informer has lost the first claim: a second one (from the
    template's spec, or ``spec``), named in the pod's status (with ``status`` merged in)."""
    pod = fake.get_object("Pod", "default", "p1")
    assert pod is not None
    second = controller_claim(pod, spec)
    second["metadata"]["name"] = SECOND
    fake.put_object(second)
    pod = name_in_status(pod, SECOND)
    pod["status"].update(status or {})
    fake.put_object(pod)


def moved_after_binding(service: SchedulingService) -> int:
    return service.stats.replaced_claims.get("moved_after_binding", 0)


#: What the kubelet writes before it prepares the pod's claims, and keeps while that fails.
CONTAINER_CREATING = {"containerStatuses": [{"name": "c", "state": {"waiting": {"reason": "ContainerCreating"}}}]}


@pytest.mark.parametrize("status", [{}, CONTAINER_CREATING], ids=["no kubelet", "containers waiting"])
async def test_the_devices_move_to_the_claim_the_status_names_after_the_binding(
    fake: FakeApiServer, status: dict[str, Any]
) -> None:
    backend, service, first, devices = await bound_p1(fake)
    try:
        replace_after_binding(fake, status=status)
        await until(lambda: moved_after_binding(service) == 1)
        await service.binder.replaced.idle()
        second = claim_status(fake, SECOND)
        assert allocated_devices(second) == devices
        assert [c["uid"] for c in second["status"]["reservedFor"]] == ["uid-p1"]
        assert_undone(fake, first)
        await until(lambda: all(e.pod_key != "default/p1" for e in service.ledger))
        # the devices are still taken: p2 finds no GPU on node-1
        assert service.filter(backend.store.pods["default/p2"], ["node-1"]).node_names == []
        assert_consistent(fake)
    finally:
        await backend.stop()


@pytest.mark.parametrize("case", ["another spec", "pod started"])
async def test_no_move_where_the_devices_cannot_go_as_they_are(fake: FakeApiServer, case: str) -> None:
    """A claim made from another spec would need a new decision; a pod the kubelet has started
    uses the claim it prepared. Either way both claims stay as they are."""
    backend, service, first, devices = await bound_p1(fake)
    try:
        if case == "another spec":
            spec = controller_claim({"metadata": {"name": "p1", "uid": "uid-p1"}})["spec"]
            spec["devices"]["requests"][0]["name"] = "other"
            replace_after_binding(fake, spec=spec)
        else:
            replace_after_binding(fake, status={"phase": "Running"})
        await until(lambda: f"default/{SECOND}" in backend.store.claims)
        await until(lambda: status_names(backend.store.pods["default/p1"]) == [SECOND])
        await service.binder.replaced.idle()
        assert moved_after_binding(service) == 0
        assert allocated_devices(claim_status(fake, first)) == devices
        assert not (claim_status(fake, SECOND).get("status") or {}).get("allocation")
        assert_consistent(fake)
    finally:
        await backend.stop()


async def test_a_move_that_cannot_be_written_leaves_the_first_claim_its_devices(fake: FakeApiServer) -> None:
    backend, service, first, devices = await bound_p1(fake)
    try:
        fake.fail("PUT", rf"/resourceclaims/{SECOND}/status$", status=500)
        replace_after_binding(fake)
        await until(lambda: service.stats.replaced_claims.get("failed", 0) == 1)
        await service.binder.replaced.idle()
        assert moved_after_binding(service) == 0
        assert allocated_devices(claim_status(fake, first)) == devices
        assert_undone(fake, SECOND)  # the move's finalizer too
        assert all(e.claim_key != f"default/{SECOND}" for e in service.ledger)
        assert_consistent(fake)
    finally:
        await backend.stop()


async def test_a_replacement_made_during_the_binding_request_is_moved(fake: FakeApiServer) -> None:
    """The bind checked the status before its binding; the controller replaces the claim while the
    binding request is on its way: the move follows once the bind is over."""
    backend, service = await stack(fake, **PATIENT)
    try:
        first = await claim_made_for(fake, backend, service, "p1")
        gate = fake.hold("POST", r"/pods/p1/binding$")
        bind = asyncio.create_task(service.bind("default", "p1", "uid-p1", "node-1"))
        await gate.arrived()
        devices = allocated_devices(claim_status(fake, first))
        replace_after_binding(fake)
        await until(lambda: f"default/{SECOND}" in backend.store.claims)
        await until(lambda: status_names(backend.store.pods["default/p1"]) == [SECOND])
        gate.release()
        await bind
        await until(lambda: moved_after_binding(service) == 1)
        await service.binder.replaced.idle()
        assert allocated_devices(claim_status(fake, SECOND)) == devices
        assert_undone(fake, first)
        assert node_of(fake, "p1") == "node-1"
        assert_consistent(fake)
    finally:
        await backend.stop()


async def test_a_bound_pod_is_watched_for_the_window_only(fake: FakeApiServer) -> None:
    now = [1000.0]
    backend, service = await stack(fake, clock=lambda: now[0], **PATIENT)
    try:
        for pod, node in (("p1", "node-1"), ("p2", "node-2")):
            await claim_made_for(fake, backend, service, pod)
            await service.bind("default", pod, f"uid-{pod}", node)
            assert service.binder.replaced.watched(f"default/{pod}")
            if pod == "p1":
                now[0] += REPAIR_WINDOW_SECONDS - 1  # within p1's window still when p2's bind ends
        assert service.binder.replaced.watched("default/p1") and service.binder.replaced.watched("default/p2")
        now[0] += 2  # p1's window is over, p2's is not: p1's next event forgets it
        pod = fake.get_object("Pod", "default", "p1")
        assert pod is not None
        pod["metadata"].setdefault("labels", {})["touched"] = "yes"
        fake.put_object(pod)
        await until(lambda: not service.binder.replaced.watched("default/p1"))
        assert service.binder.replaced.watched("default/p2")
    finally:
        await backend.stop()
