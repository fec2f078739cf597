"""Fault injection in the embedded backend: armed failures (once, after N successes, until
cleared) for every read and write, hooks and delays that run before the operation, call counts,
and that a failed write changes neither the cluster nor the store."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from extender.backends.embedded import OPERATIONS, EmbeddedBackend, FaultInjector
from extender.core.errors import ApiUnavailable, WriteConflict

from .helpers import basic_backend, pod

pytestmark = pytest.mark.asyncio

PROTECTION = "resource.kubernetes.io/delete-protection"


async def test_a_fault_fires_once_and_changes_nothing() -> None:
    backend = basic_backend()
    current = await backend.get_claim("default", "claim-0")
    current["metadata"]["finalizers"] = [PROTECTION]
    backend.faults.fail("update_claim", ApiUnavailable("etcd is slow"))
    version, revision = backend.resource_version, backend.store.revision
    with pytest.raises(ApiUnavailable, match="etcd is slow"):
        await backend.update_claim(current)
    assert (backend.resource_version, backend.store.revision) == (version, revision)
    stored = await backend.update_claim(current)  # the retry succeeds
    assert stored["metadata"]["finalizers"] == [PROTECTION]
    assert backend.faults.calls["update_claim"] == 2


async def test_after_lets_calls_succeed_first() -> None:
    backend = EmbeddedBackend([pod(), pod("pod-1", uid="uid-1"), pod("pod-2", uid="uid-2")])
    backend.faults.fail("bind_pod", WriteConflict("raced"), after=1)
    await backend.bind_pod("default", "pod-0", "pod-uid-0", "node-1")
    with pytest.raises(WriteConflict, match="raced"):
        await backend.bind_pod("default", "pod-1", "uid-1", "node-1")
    await backend.bind_pod("default", "pod-1", "uid-1", "node-1")
    assert backend.store.pods["default/pod-1"]["spec"]["nodeName"] == "node-1"


async def test_faults_without_a_count_last_until_cleared() -> None:
    backend = basic_backend()
    backend.faults.fail("get_claim", ApiUnavailable("down"), times=None)
    for _ in range(3):
        with pytest.raises(ApiUnavailable):
            await backend.get_claim("default", "claim-0")
    backend.faults.clear("get_claim")
    assert (await backend.get_claim("default", "claim-0"))["metadata"]["name"] == "claim-0"


CONTEXT = {
    "apiVersion": "resource.k8s.io/v1alpha3",
    "kind": "PodSchedulingContext",
    "metadata": {"name": "pod-0", "namespace": "default"},
    "spec": {"selectedNode": "node-1"},
}


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
async def test_every_operation_checks_the_injector(operation: str) -> None:
    backend = basic_backend(pod())
    backend.faults.fail(operation, ApiUnavailable(f"{operation} failed"))
    current = await backend.get_claim("default", "claim-0") if operation != "get_claim" else {}
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "get_claim": lambda: backend.get_claim("default", "claim-0"),
        "get_pod": lambda: backend.get_pod("default", "pod-0"),
        "update_claim": lambda: backend.update_claim(current),
        "update_claim_status": lambda: backend.update_claim_status(current),
        "bind_pod": lambda: backend.bind_pod("default", "pod-0", "pod-uid-0", "node-1"),
        "create_scheduling_context": lambda: backend.create_scheduling_context(CONTEXT),
        "update_scheduling_context": lambda: backend.update_scheduling_context(CONTEXT),
        "update_scheduling_context_status": lambda: backend.update_scheduling_context_status(CONTEXT),
        "apply_scheduling_context": lambda: backend.apply_scheduling_context(CONTEXT),
        "delete_scheduling_context": lambda: backend.delete_scheduling_context("default", "pod-0"),
        "evict_pod": lambda: backend.evict_pod("default", "pod-0", ""),
        "create_claim": lambda: backend.create_claim(
            {**current, "metadata": {"generateName": "x-", "namespace": "default"}}
        ),
        "remove_claim": lambda: backend.remove_claim("default", "claim-0", ""),
        "patch_pod_status": lambda: backend.patch_pod_status("default", "pod-0", "", {"nominatedNodeName": "node-1"}),
    }
    with pytest.raises(ApiUnavailable, match=f"{operation} failed"):
        await calls[operation]()


async def test_hooks_run_before_the_operation() -> None:
    backend = EmbeddedBackend([pod()])
    arrived, release = asyncio.Event(), asyncio.Event()
    seen: list[str] = []

    async def gate(operation: str) -> None:
        seen.append(operation)
        arrived.set()
        await release.wait()

    backend.faults.hook("bind_pod", gate)
    task = asyncio.create_task(backend.bind_pod("default", "pod-0", "pod-uid-0", "node-1"))
    await asyncio.wait_for(arrived.wait(), 30)  # a bound against a hang, not a timing
    assert seen == ["bind_pod"]
    assert "nodeName" not in backend.store.pods["default/pod-0"]["spec"]  # held at the gate
    release.set()
    await task
    assert backend.store.pods["default/pod-0"]["spec"]["nodeName"] == "node-1"


async def test_concurrent_binds_interleave_and_only_one_wins() -> None:
    backend = EmbeddedBackend([pod()])
    backend.faults.delay("bind_pod", 0.001)
    results = await asyncio.gather(
        *(backend.bind_pod("default", "pod-0", "pod-uid-0", f"node-{i}") for i in range(5)),
        return_exceptions=True,
    )
    assert sum(r is None for r in results) == 1
    assert all(isinstance(r, WriteConflict) for r in results if r is not None)


async def test_injector_rejects_unknown_operations_and_bad_counts() -> None:
    faults = FaultInjector()
    with pytest.raises(ValueError, match="unknown operation"):
        faults.fail("delete_everything", ApiUnavailable("x"))
    with pytest.raises(ValueError, match="times"):
        faults.fail("get_pod", ApiUnavailable("x"), times=0)


async def test_clear_all_and_zero_delay_disarm() -> None:
    """A delay of an hour, disarmed by a zero delay or by ``clear()``, never runs. (The 30 s bound
    only keeps a broken disarm from hanging the test: an armed hour cannot pass within it.)"""
    faults = FaultInjector()
    faults.delay("get_pod", 3600)
    faults.delay("get_pod", 0)
    await asyncio.wait_for(faults.check("get_pod"), 30)
    faults.fail("get_pod", ApiUnavailable("x"), times=2)
    faults.delay("get_claim", 3600)
    faults.fail("get_claim", ApiUnavailable("y"))
    faults.clear()
    await asyncio.wait_for(faults.check("get_pod"), 30)
    await asyncio.wait_for(faults.check("get_claim"), 30)
    assert faults.calls == {"get_pod": 2, "get_claim": 1}
