"""Pods in the embedded cluster: ``bind_pod`` as the binding subresource (sets the node once;
conflicts for a bound, re-created or deleting pod; not found), ``get_pod`` copies, ``observe_pod``
remembering pods from scheduler requests, and pod deletion."""

from __future__ import annotations

import pytest

from extender.backends.embedded import EmbeddedBackend
from extender.core.errors import InvalidObject, ObjectNotFound, WriteConflict

from .helpers import pod

pytestmark = pytest.mark.asyncio


async def test_bind_sets_the_node_and_the_scheduled_condition() -> None:
    backend = EmbeddedBackend([pod()])
    before = backend.resource_version
    await backend.bind_pod("default", "pod-0", "pod-uid-0", "node-1")
    bound = await backend.get_pod("default", "pod-0")
    assert bound is not None
    assert bound["spec"]["nodeName"] == "node-1"
    assert bound["metadata"]["resourceVersion"] == str(before + 1)
    assert [c["type"] for c in bound["status"]["conditions"]] == ["PodScheduled"]
    assert backend.store.pods["default/pod-0"]["spec"]["nodeName"] == "node-1"


@pytest.mark.parametrize("node", ["node-1", "node-2"])
async def test_binding_a_bound_pod_conflicts(node: str) -> None:
    backend = EmbeddedBackend([pod()])
    await backend.bind_pod("default", "pod-0", "pod-uid-0", "node-1")
    with pytest.raises(WriteConflict, match='already assigned to node "node-1"'):
        await backend.bind_pod("default", "pod-0", "pod-uid-0", node)


async def test_binding_with_another_uid_conflicts() -> None:
    backend = EmbeddedBackend([pod()])
    with pytest.raises(WriteConflict, match="UID in precondition: old-uid"):
        await backend.bind_pod("default", "pod-0", "old-uid", "node-1")
    assert "nodeName" not in backend.store.pods["default/pod-0"]["spec"]


async def test_binding_a_missing_pod_is_not_found() -> None:
    backend = EmbeddedBackend()
    with pytest.raises(ObjectNotFound, match='pods "pod-0" not found'):
        await backend.bind_pod("default", "pod-0", "pod-uid-0", "node-1")


async def test_binding_needs_a_node_name() -> None:
    backend = EmbeddedBackend([pod()])
    with pytest.raises(InvalidObject, match=r"target\.name"):
        await backend.bind_pod("default", "pod-0", "pod-uid-0", "")


async def test_binding_a_pod_being_deleted_conflicts() -> None:
    raw = pod()
    raw["metadata"]["finalizers"] = ["example.com/keep"]
    backend = EmbeddedBackend([raw])
    backend.delete_pod("default", "pod-0")
    with pytest.raises(WriteConflict, match="being deleted"):
        await backend.bind_pod("default", "pod-0", "pod-uid-0", "node-1")


async def test_get_pod_returns_a_copy_or_none() -> None:
    backend = EmbeddedBackend([pod()])
    got = await backend.get_pod("default", "pod-0")
    assert got is not None
    got["spec"]["nodeName"] = "mutated"
    again = await backend.get_pod("default", "pod-0")
    assert again is not None
    assert "nodeName" not in again["spec"]
    assert await backend.get_pod("default", "nobody") is None


async def test_an_observed_pod_can_be_bound_without_a_manifest() -> None:
    backend = EmbeddedBackend()
    request_pod = pod()
    del request_pod["apiVersion"], request_pod["kind"]  # the extender JSON carries neither
    backend.observe_pod(request_pod)
    stored = backend.store.pods["default/pod-0"]
    assert stored["kind"] == "Pod"
    assert stored["metadata"]["resourceVersion"] == "1"
    await backend.bind_pod("default", "pod-0", "pod-uid-0", "node-1")
    assert backend.store.pods["default/pod-0"]["spec"]["nodeName"] == "node-1"


async def test_observing_a_known_pod_keeps_the_stored_one() -> None:
    backend = EmbeddedBackend([pod()])
    await backend.bind_pod("default", "pod-0", "pod-uid-0", "node-1")
    version = backend.resource_version
    backend.observe_pod(pod())  # the scheduler's copy has no node yet
    assert backend.resource_version == version
    assert backend.store.pods["default/pod-0"]["spec"]["nodeName"] == "node-1"


async def test_observing_a_recreated_pod_replaces_the_old_one() -> None:
    backend = EmbeddedBackend([pod()])
    await backend.bind_pod("default", "pod-0", "pod-uid-0", "node-1")
    backend.observe_pod(pod(uid="pod-uid-1"))
    stored = backend.store.pods["default/pod-0"]
    assert stored["metadata"]["uid"] == "pod-uid-1"
    assert "nodeName" not in stored["spec"]


async def test_delete_pod_removes_it_from_cluster_and_store() -> None:
    backend = EmbeddedBackend([pod()])
    assert backend.delete_pod("default", "pod-0") is None
    assert backend.store.pods == {}
    assert await backend.get_pod("default", "pod-0") is None
    with pytest.raises(ObjectNotFound):
        backend.delete_pod("default", "pod-0")
