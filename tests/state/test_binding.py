"""The bind verb at the state level (``state/bind/binder.py``), on the embedded backend: its waits end
on the service's injectable clock, and the binding timeout is measured on its injectable wall clock,
so no test here waits for real time to pass (docs/testing.md).

The bind's protocol (writes, rollback, retries) is tested in test_claim_writes.py and
test_service.py; binding conditions end to end in test_binding_conditions.py.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from extender.backends.embedded import EmbeddedBackend
from extender.core.answers import NOT_AVAILABLE
from extender.state.bind.conditions import BindingConditionsPending
from extender.state.clock import epoch_seconds
from extender.state.service import SchedulingService
from tests.manifests import claim, device_status, gpu_class, node, pod
from tests.state.test_binding_conditions import fabric_slice

NODES = ["node-1", "node-2"]
UID = "uid-p"


class Clock:
    """Seconds that move only when the test says so."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def binding_service(**options: Any) -> tuple[SchedulingService, EmbeddedBackend]:
    """A GPU with a binding condition on node-1, a claim for it and its pod."""
    objects = [gpu_class(), node("node-1"), node("node-2"), fabric_slice("node-1"), claim("c"), pod("p", "c", uid=UID)]
    backend = EmbeddedBackend(copy.deepcopy(objects))
    return SchedulingService(backend=backend, **options), backend


def report(backend: EmbeddedBackend, condition: str, status: str) -> None:
    stored = backend.get("ResourceClaim", "default", "c")
    assert stored is not None
    stored["status"]["devices"] = [device_status(condition, status)]
    backend.apply(stored)


async def test_the_wait_for_binding_conditions_ends_on_the_services_clock() -> None:
    """An hour's wait, ended by moving the injected clock past it: the next claim event finds the
    time up and the bind answers ``BindingConditionsPending``, keeping its writes."""
    clock = Clock(1000.0)
    svc, backend = binding_service(binding_wait_seconds=3600, bind_deadline_seconds=7200, clock=clock)
    bind = asyncio.create_task(svc.bind("default", "p", UID, "node-1"))
    while not svc.binder.waiting_for_conditions("default/p"):
        assert not bind.done(), bind.result()
        await asyncio.sleep(0)
    clock.now += 3601
    report(backend, "example.com/attached", "False")  # a claim event: the wait looks at the clock again
    with pytest.raises(BindingConditionsPending, match="waiting for binding conditions for device on node node-1"):
        await asyncio.wait_for(bind, 30)  # a bound against a hang only
    stored = backend.get("ResourceClaim", "default", "c")
    assert stored is not None and stored["status"]["allocation"]  # kept for the pod's next attempt


async def test_before_its_deadline_a_claim_event_does_not_end_the_wait() -> None:
    clock = Clock(1000.0)
    svc, backend = binding_service(binding_wait_seconds=3600, bind_deadline_seconds=7200, clock=clock)
    bind = asyncio.create_task(svc.bind("default", "p", UID, "node-1"))
    while not svc.binder.waiting_for_conditions("default/p"):
        await asyncio.sleep(0)
    clock.now += 3599
    report(backend, "example.com/attached", "False")
    for _ in range(10):  # the woken bind reads the claim again and goes back to waiting
        await asyncio.sleep(0)
    assert svc.binder.waiting_for_conditions("default/p") and not bind.done()
    report(backend, "example.com/attached", "True")
    await asyncio.wait_for(bind, 30)
    live = backend.get("Pod", "default", "p")
    assert live is not None and live["spec"]["nodeName"] == "node-1"


def test_the_binding_timeout_is_measured_on_the_injected_wall_clock() -> None:
    """``allocationTimestamp`` plus ``binding_timeout_seconds`` against ``wall_clock``: one second
    before, the claim still waits for its conditions (the pod stays pinned to node-1); one second
    after, the claim is unavailable everywhere and PostFilter deallocates it."""
    wall = Clock(0.0)
    svc, backend = binding_service(binding_wait_seconds=0, binding_timeout_seconds=600, wall_clock=wall)
    with pytest.raises(BindingConditionsPending):
        asyncio.run(svc.bind("default", "p", UID, "node-1"))
    stored = backend.get("ResourceClaim", "default", "c")
    assert stored is not None
    allocated_at = epoch_seconds(stored["status"]["allocation"]["allocationTimestamp"])
    assert allocated_at is not None

    wall.now = allocated_at + 599
    attempt = svc.attempt(pod("p", "c", uid=UID), NODES)
    assert attempt.unbindable == () and attempt.outcome.node_names == ["node-1"]

    wall.now = allocated_at + 601
    attempt = svc.attempt(pod("p", "c", uid=UID), NODES)
    assert [(c.key, v.timed_out) for c, v in attempt.unbindable] == [("default/c", True)]
    assert attempt.outcome.unresolvable == dict.fromkeys(NODES, NOT_AVAILABLE)
    outcome = asyncio.run(svc.filter_and_recover(pod("p", "c", uid=UID), NODES))
    assert outcome.error == "deallocation of ResourceClaim default/c completed (device binding timeout: claim=c)"
    stored = backend.get("ResourceClaim", "default", "c")
    assert stored is not None and "allocation" not in stored["status"]
