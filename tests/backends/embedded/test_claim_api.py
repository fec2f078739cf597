"""ResourceClaim writes in the embedded cluster, with the API server's rules: resourceVersion
preconditions (409 conflicts), ObjectNotFound, spec immutability, the status rules
(reservedFor cap, unique uids, requires an allocation, no new consumers while deleting, allocation
immutable once set), finalizers and deletion, deep copies on read, and the store kept in sync."""

from __future__ import annotations

from typing import Any

import pytest

from extender.backends.embedded import EmbeddedBackend
from extender.core.errors import InvalidObject, ObjectNotFound, WriteConflict

from .helpers import allocation, basic_backend, claim, consumer

pytestmark = pytest.mark.asyncio

PROTECTION = "resource.kubernetes.io/delete-protection"


async def allocate(backend: EmbeddedBackend, *consumers: dict[str, Any], name: str = "claim-0") -> dict[str, Any]:
    current = await backend.get_claim("default", name)
    current["status"] = {"allocation": allocation(), "reservedFor": list(consumers)}
    return await backend.update_claim_status(current)


# --- update_claim (PUT) -------------------------------------------------------------------------


async def test_adding_a_finalizer_bumps_the_resource_version_and_feeds_the_store() -> None:
    backend = basic_backend()
    current = await backend.get_claim("default", "claim-0")
    before = int(current["metadata"]["resourceVersion"])
    current["metadata"]["finalizers"] = [PROTECTION]
    current["metadata"]["labels"] = {"a": "b"}
    stored = await backend.update_claim(current)
    assert int(stored["metadata"]["resourceVersion"]) == backend.resource_version > before
    assert stored["metadata"]["finalizers"] == [PROTECTION]
    assert stored["metadata"]["labels"] == {"a": "b"}
    assert backend.store.raw_claims["default/claim-0"]["metadata"]["finalizers"] == [PROTECTION]
    assert backend.store.claims["default/claim-0"].resource_version == stored["metadata"]["resourceVersion"]


async def test_update_replaces_user_metadata_and_keeps_system_metadata() -> None:
    backend = basic_backend()
    current = await backend.get_claim("default", "claim-0")
    uid, created = current["metadata"]["uid"], current["metadata"]["creationTimestamp"]
    current["metadata"]["annotations"] = {"x": "y"}
    stored = await backend.update_claim(current)
    stored["metadata"].pop("annotations")  # an absent field is removed by the next PUT
    stored["metadata"]["creationTimestamp"] = "1999-01-01T00:00:00Z"
    again = await backend.update_claim(stored)
    assert "annotations" not in again["metadata"]
    assert again["metadata"]["uid"] == uid
    assert again["metadata"]["creationTimestamp"] == created


async def test_update_ignores_the_status_in_its_input() -> None:
    backend = basic_backend()
    current = await backend.get_claim("default", "claim-0")
    current["status"] = {"allocation": allocation()}
    current["metadata"]["finalizers"] = [PROTECTION]
    stored = await backend.update_claim(current)
    assert "allocation" not in (stored.get("status") or {})
    assert backend.store.claims["default/claim-0"].allocation is None


async def test_a_no_op_update_keeps_the_resource_version() -> None:
    backend = basic_backend()
    current = await backend.get_claim("default", "claim-0")
    stored = await backend.update_claim(current)
    assert stored["metadata"]["resourceVersion"] == current["metadata"]["resourceVersion"]
    status = await backend.update_claim_status(current)
    assert status["metadata"]["resourceVersion"] == current["metadata"]["resourceVersion"]


async def test_stale_resource_version_conflicts_and_changes_nothing() -> None:
    backend = basic_backend()
    first = await backend.get_claim("default", "claim-0")
    second = await backend.get_claim("default", "claim-0")
    first["metadata"]["finalizers"] = [PROTECTION]
    await backend.update_claim(first)
    version = backend.resource_version
    second["metadata"]["labels"] = {"late": "writer"}
    with pytest.raises(WriteConflict, match="the object has been modified"):
        await backend.update_claim(second)
    with pytest.raises(WriteConflict):
        await backend.update_claim_status({**second, "status": {"allocation": allocation()}})
    assert backend.resource_version == version
    assert backend.store.claims["default/claim-0"].allocation is None


async def test_uid_precondition_conflicts() -> None:
    backend = basic_backend()
    current = await backend.get_claim("default", "claim-0")
    current["metadata"]["uid"] = "someone-else"
    with pytest.raises(WriteConflict, match="Precondition failed: UID"):
        await backend.update_claim(current)


async def test_missing_resource_version_is_invalid() -> None:
    backend = basic_backend()
    current = await backend.get_claim("default", "claim-0")
    del current["metadata"]["resourceVersion"]
    with pytest.raises(InvalidObject, match="must be specified for an update"):
        await backend.update_claim(current)


async def test_writes_to_missing_claims_are_not_found() -> None:
    backend = basic_backend()
    ghost = claim("ghost")
    ghost["metadata"]["resourceVersion"] = "1"
    with pytest.raises(ObjectNotFound, match='"ghost" not found'):
        await backend.update_claim(ghost)
    with pytest.raises(ObjectNotFound):
        await backend.update_claim_status(ghost)
    with pytest.raises(ObjectNotFound):
        await backend.get_claim("default", "ghost")


async def test_spec_is_immutable() -> None:
    backend = basic_backend()
    current = await backend.get_claim("default", "claim-0")
    current["spec"]["devices"]["requests"][0]["exactly"]["count"] = 3
    with pytest.raises(InvalidObject, match=r"spec: .*field is immutable"):
        await backend.update_claim(current)


async def test_spec_in_its_defaulted_form_is_the_same_spec() -> None:
    backend = basic_backend()
    current = await backend.get_claim("default", "claim-0")
    exactly = current["spec"]["devices"]["requests"][0]["exactly"]
    exactly.update(allocationMode="ExactCount", count=1)  # what the apiserver's defaulting writes
    current["metadata"]["finalizers"] = [PROTECTION]
    stored = await backend.update_claim(current)
    assert "count" not in stored["spec"]["devices"]["requests"][0]["exactly"]


async def test_a_different_api_version_is_refused() -> None:
    backend = basic_backend()
    current = await backend.get_claim("default", "claim-0")
    current["apiVersion"] = "resource.k8s.io/v1beta2"
    with pytest.raises(InvalidObject, match="does not convert"):
        await backend.update_claim(current)


async def test_get_claim_returns_a_copy() -> None:
    backend = basic_backend()
    current = await backend.get_claim("default", "claim-0")
    current["metadata"]["labels"] = {"mutated": "yes"}
    current["spec"]["devices"]["requests"].clear()
    again = await backend.get_claim("default", "claim-0")
    assert "labels" not in again["metadata"]
    assert again["spec"]["devices"]["requests"]


# --- update_claim_status (PUT /status) ----------------------------------------------------------


async def test_status_write_takes_only_the_status() -> None:
    backend = basic_backend()
    current = await backend.get_claim("default", "claim-0")
    current["metadata"]["labels"] = {"ignored": "yes"}
    current["spec"]["devices"]["requests"][0]["exactly"]["count"] = 5
    current["status"] = {"allocation": allocation(), "reservedFor": [consumer(1)]}
    stored = await backend.update_claim_status(current)
    assert "labels" not in stored["metadata"]
    assert "count" not in stored["spec"]["devices"]["requests"][0]["exactly"]
    decoded = backend.store.claims["default/claim-0"]
    assert decoded.allocation is not None
    assert [c.uid for c in decoded.reserved_for] == ["uid-1"]
    assert len(backend.store.allocated_state().devices) == 1


async def test_reserved_for_holds_at_most_256_consumers() -> None:
    backend = basic_backend()
    stored = await allocate(backend, *(consumer(i) for i in range(256)))
    assert len(stored["status"]["reservedFor"]) == 256
    stored["status"]["reservedFor"].append(consumer(256))
    with pytest.raises(InvalidObject, match=r"status\.reservedFor: Too many: 257: must have at most 256 items"):
        await backend.update_claim_status(stored)


async def test_reserved_for_uids_are_unique() -> None:
    backend = basic_backend()
    twin = {**consumer(2), "uid": "uid-1"}
    with pytest.raises(InvalidObject, match=r'status\.reservedFor\[1\]\.uid: Duplicate value: "uid-1"'):
        await allocate(backend, consumer(1), twin)


async def test_reserved_for_entries_need_resource_name_and_uid() -> None:
    backend = basic_backend()
    with pytest.raises(InvalidObject, match=r"status\.reservedFor\[0\]\.uid: Required value"):
        await allocate(backend, {"resource": "pods", "name": "p"})


async def test_reserved_for_requires_an_allocation() -> None:
    backend = basic_backend()
    current = await backend.get_claim("default", "claim-0")
    current["status"] = {"reservedFor": [consumer(1)]}
    with pytest.raises(InvalidObject, match="may not be specified when `allocated` is not set"):
        await backend.update_claim_status(current)


async def test_allocation_is_immutable_once_set() -> None:
    backend = basic_backend()
    stored = await allocate(backend, consumer(1))
    stored["status"]["allocation"] = allocation(device="gpu-1")
    with pytest.raises(InvalidObject, match=r"status\.allocation: .*field is immutable"):
        await backend.update_claim_status(stored)


async def test_allocation_may_be_cleared_and_set_again() -> None:
    backend = basic_backend()
    stored = await allocate(backend, consumer(1))
    stored["status"] = {}
    cleared = await backend.update_claim_status(stored)
    assert backend.store.claims["default/claim-0"].allocation is None
    cleared["status"] = {"allocation": allocation(device="gpu-1")}
    await backend.update_claim_status(cleared)
    decoded = backend.store.claims["default/claim-0"].allocation
    assert decoded is not None
    assert decoded.devices[0].device == "gpu-1"


async def test_same_allocation_with_consumers_added_is_accepted() -> None:
    backend = basic_backend()
    stored = await allocate(backend, consumer(1))
    stored["status"]["reservedFor"].append(consumer(2))
    stored = await backend.update_claim_status(stored)
    assert [c["uid"] for c in stored["status"]["reservedFor"]] == ["uid-1", "uid-2"]


async def test_an_invalid_allocation_is_refused_by_the_decoder() -> None:
    backend = basic_backend()
    current = await backend.get_claim("default", "claim-0")
    current["status"] = {"allocation": {"devices": {"results": [{"request": "req-0"}]}}}
    version = backend.resource_version
    with pytest.raises(InvalidObject, match="ResourceClaim default/claim-0"):
        await backend.update_claim_status(current)
    assert backend.resource_version == version
    assert backend.get("ResourceClaim", "default", "claim-0").get("status") is None  # type: ignore[union-attr]


# --- finalizers and deletion --------------------------------------------------------------------


async def protected_and_allocated(backend: EmbeddedBackend) -> dict[str, Any]:
    current = await backend.get_claim("default", "claim-0")
    current["metadata"]["finalizers"] = [PROTECTION]
    await backend.update_claim(current)
    return await allocate(backend, consumer(1))


async def test_delete_with_a_finalizer_only_marks_the_claim() -> None:
    backend = basic_backend()
    await protected_and_allocated(backend)
    marked = backend.delete_claim("default", "claim-0")
    assert marked is not None
    assert marked["metadata"]["deletionTimestamp"]
    assert backend.store.claims["default/claim-0"].deletion_timestamp == marked["metadata"]["deletionTimestamp"]
    assert backend.delete_claim("default", "claim-0") == marked  # deleting again changes nothing


async def test_no_new_consumers_while_the_claim_is_being_deleted() -> None:
    backend = basic_backend()
    await protected_and_allocated(backend)
    backend.delete_claim("default", "claim-0")
    current = await backend.get_claim("default", "claim-0")
    current["status"]["reservedFor"].append(consumer(2))
    with pytest.raises(InvalidObject, match="new entries may not be added while"):
        await backend.update_claim_status(current)
    current["status"]["reservedFor"] = []  # removing consumers is fine
    stored = await backend.update_claim_status(current)
    assert stored["status"]["reservedFor"] == []


async def test_no_new_finalizers_while_the_claim_is_being_deleted() -> None:
    backend = basic_backend()
    await protected_and_allocated(backend)
    backend.delete_claim("default", "claim-0")
    current = await backend.get_claim("default", "claim-0")
    current["metadata"]["finalizers"].append("example.com/other")
    with pytest.raises(InvalidObject, match="no new finalizers can be added"):
        await backend.update_claim(current)


async def test_removing_the_last_finalizer_deletes_a_claim_being_deleted() -> None:
    backend = basic_backend()
    await protected_and_allocated(backend)
    backend.delete_claim("default", "claim-0")
    current = await backend.get_claim("default", "claim-0")
    current["metadata"]["finalizers"] = []
    final = await backend.update_claim(current)
    assert int(final["metadata"]["resourceVersion"]) == backend.resource_version
    assert backend.get("ResourceClaim", "default", "claim-0") is None
    assert "default/claim-0" not in backend.store.claims
    assert backend.store.allocated_state().devices == set()
    with pytest.raises(ObjectNotFound):
        await backend.get_claim("default", "claim-0")


async def test_removing_the_finalizer_of_a_live_claim_keeps_it() -> None:
    backend = basic_backend()
    current = await protected_and_allocated(backend)
    current["metadata"]["finalizers"] = []
    await backend.update_claim(current)
    assert "default/claim-0" in backend.store.claims


async def test_delete_without_finalizers_removes_at_once() -> None:
    backend = basic_backend()
    assert backend.delete_claim("default", "claim-0") is None
    assert backend.store.claims == {}
    with pytest.raises(ObjectNotFound):
        backend.delete_claim("default", "claim-0")


# --- apply and listeners ------------------------------------------------------------------------


async def test_apply_creates_and_replaces_with_preconditions() -> None:
    backend = basic_backend()
    events: list[tuple[str, str]] = []
    backend.add_listener(lambda event, obj: events.append((event, obj["metadata"]["name"])))
    created = backend.apply(claim("claim-1"))
    assert "default/claim-1" in backend.store.claims
    replacement = claim("claim-1", status={"allocation": allocation()})
    replaced = backend.apply(replacement)
    assert replaced["metadata"]["uid"] == created["metadata"]["uid"]
    assert backend.store.claims["default/claim-1"].allocation is not None
    stale = claim("claim-1")
    stale["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    with pytest.raises(WriteConflict):
        backend.apply(stale)
    backend.delete_claim("default", "claim-1")
    assert events == [("ADDED", "claim-1"), ("MODIFIED", "claim-1"), ("DELETED", "claim-1")]


async def test_apply_of_an_invalid_object_changes_nothing() -> None:
    backend = basic_backend()
    bad = claim()
    bad["spec"] = {"devices": {"requests": [{"name": "req-0", "exactly": {"count": "many"}}]}}
    version = backend.resource_version
    with pytest.raises(InvalidObject, match="ResourceClaim default/claim-0"):
        backend.apply(bad)
    assert backend.resource_version == version
    assert backend.get("ResourceClaim", "default", "claim-0")["spec"] == claim()["spec"]  # type: ignore[index]
