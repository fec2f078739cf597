"""What bind (and the PostFilter-style recovery) writes to ResourceClaims, and how it is undone.

The write protocol of the in-tree plugin's PreBind (docs/pipeline.md, "the writes"):

1. the delete-protection finalizer with a normal update, if the claim lacks it;
2. ``status.allocation`` plus a ``status.reservedFor`` entry for the pod in one status update,
   guarded by the resourceVersion: a claim another scheduler allocated meanwhile is never
   overwritten (``got allocated elsewhere``);
3. (the pod binding, by the caller).

A shared claim that is allocated already only gets the pod's ``reservedFor`` entry. Every step
retries on a write conflict with a fresh copy, through one helper (``retry_on_conflict``), five
attempts as client-go's ``retry.DefaultRetry``; ``Written`` records what a bind wrote (or sent: an
unanswered request may have been carried out) so that ``roll_back`` undoes exactly that, newest
first, each undo checking the claim as it is now.
"""

from __future__ import annotations

import asyncio
import copy
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
import structlog

from extender.core.convert import encode_allocation_result
from extender.core.errors import (
    ExtenderError,
    NotLeader,
    ObjectNotFound,
    OutcomeUnknown,
    Transient,
    WriteConflict,
)
from extender.core.model import AllocationResult, ResourceClaim
from extender.state.backend import Backend
from extender.state.cache.pods import pod_identity
from extender.state.cache.store import ObjectStore
from extender.state.clock import utc_now_text

__all__ = [
    "DELETE_PROTECTION_FINALIZER",
    "WRITE_ATTEMPTS",
    "Written",
    "deallocate",
    "delete_claim",
    "delete_claim_with_uid",
    "json_copy",
    "retry_on_conflict",
    "roll_back",
    "sent",
    "write_allocation",
    "write_reservation",
]

log = structlog.get_logger()

DELETE_PROTECTION_FINALIZER = "resource.kubernetes.io/delete-protection"
#: client-go's retry.DefaultRetry: 5 attempts on conflict, 10 ms apart, jitter 0.1.
WRITE_ATTEMPTS = 5
RETRY_SECONDS = 0.01
RETRY_JITTER = 0.1

T = TypeVar("T")


async def retry_on_conflict(step: Callable[[int], Awaitable[T]], *, what: str, claim: str) -> T:
    """``await step(attempt)`` until it does not raise ``WriteConflict``, at most ``WRITE_ATTEMPTS``
    times, 10 ms apart with 10 % jitter (client-go's ``retry.DefaultRetry``); then
    ``WriteConflict("<what>: conflict")``. Other errors pass through at once."""
    for attempt in range(WRITE_ATTEMPTS):
        if attempt:
            await asyncio.sleep(RETRY_SECONDS * (1 + RETRY_JITTER * random.random()))
        try:
            return await step(attempt)
        except WriteConflict:
            continue
    raise WriteConflict(f"{what}: conflict", claim=claim)


@dataclass(slots=True)
class Written:
    """One claim write a bind made, so a failure can undo exactly it."""

    claim_key: str
    added_finalizer: bool = False
    set_allocation: bool = False
    added_reservation: bool = False
    #: The bind created the claim (a pod's extended-resource claim): the undo deletes it.
    created: bool = False
    #: Its UID once the API server answered the create (the delete's precondition).
    created_uid: str = ""
    #: The UID of the consumer whose reservation this bind added, when not the pod (a PodGroup).
    consumer_uid: str = ""

    @property
    def wrote(self) -> bool:
        return self.added_finalizer or self.set_allocation or self.added_reservation or self.created


async def sent(write: Awaitable[T], record: Written, *flags: str) -> T:
    """``await write`` with ``flags`` of ``record`` already set: a write whose answer is lost may
    have been made, and the undo must look. A write that certainly was not made (``_not_made``)
    has its flags put back, else the undo could remove what another writer put there (a
    reservation of the same pod made by an earlier leader, say)."""
    try:
        return await write
    except ExtenderError as exc:
        if _not_made(exc):
            for flag in flags:
                setattr(record, flag, False)
        raise


def _not_made(exc: ExtenderError) -> bool:
    """Whether a failed write certainly did not happen: a conflict, a missing object, a replica
    that may not write, or an answer the API server gives before it acts (4xx, 503). A 500, 502
    or 504 may come while the write goes on (an etcd timeout, the timeout filter), and an answer
    lost says nothing: those count as made."""
    if isinstance(exc, OutcomeUnknown):
        return False
    if isinstance(exc, WriteConflict | ObjectNotFound | NotLeader):
        return True
    status = getattr(exc.__cause__, "status", None)  # the kube backend chains the HTTP answer
    return isinstance(status, int) and (status < 500 or status == 503)


async def _fresh_claim(backend: Backend, store: ObjectStore, claim: ResourceClaim, attempt: int) -> dict[str, Any]:
    """The claim to modify: the cached copy first (no round trip), the API's after a conflict."""
    if attempt == 0:
        cached = store.raw_claims.get(claim.key)
        if cached is not None:
            return json_copy(cached)
    return await backend.get_claim(claim.namespace, claim.name)


async def write_allocation(
    backend: Backend,
    store: ObjectStore,
    claim: ResourceClaim,
    result: AllocationResult,
    pod: Mapping[str, Any],
    record: Written,
    *,
    consumer: Mapping[str, str] | None = None,
) -> None:
    """Steps 1 and 2 of the protocol for a claim this bind allocates. ``consumer``: the
    ``reservedFor`` entry when it is not the pod (a PodGroup's claim is reserved for the group)."""
    _, name, uid = pod_identity(pod)
    entry = dict(consumer) if consumer is not None else {"resource": "pods", "name": name, "uid": uid}
    if consumer is not None:
        record.consumer_uid = entry["uid"]

    async def step(attempt: int) -> None:
        raw = await _fresh_claim(backend, store, claim, attempt)
        meta = raw.setdefault("metadata", {})
        status = raw.setdefault("status", {})
        if (meta.get("uid") and claim.uid and meta["uid"] != claim.uid) or meta.get("deletionTimestamp"):
            raise Transient(f"claim {claim.key} got deleted in the meantime", claim=claim.key)
        if status.get("allocation"):
            raise Transient(f"claim {claim.key} got allocated elsewhere in the meantime", claim=claim.key)
        finalizers = meta.setdefault("finalizers", [])
        if DELETE_PROTECTION_FINALIZER not in finalizers:
            finalizers.append(DELETE_PROTECTION_FINALIZER)
            # Recorded before the request: an answer lost (or a deadline hit) in flight may hide a
            # write that was made; the undo checks the claim as it is, so a write never made
            # costs a read, and one made is never left behind.
            record.added_finalizer = True
            raw = await sent(backend.update_claim(raw), record, "added_finalizer")
            status = raw.setdefault("status", {})
        allocation = encode_allocation_result(result, str(raw.get("apiVersion") or claim.api_version))
        allocation["allocationTimestamp"] = utc_now_text()
        status["allocation"] = allocation
        status.setdefault("reservedFor", []).append(dict(entry))
        record.set_allocation = True
        record.added_reservation = True
        await sent(backend.update_claim_status(raw), record, "set_allocation", "added_reservation")

    await retry_on_conflict(step, what=f"add allocation and reservation to claim {claim.key}", claim=claim.key)


async def write_reservation(
    backend: Backend, store: ObjectStore, claim: ResourceClaim, pod: Mapping[str, Any], record: Written
) -> None:
    """Add the pod to an allocated (shared) claim's ``reservedFor``."""
    _, name, uid = pod_identity(pod)

    async def step(attempt: int) -> None:
        raw = await _fresh_claim(backend, store, claim, attempt)
        status = raw.setdefault("status", {})
        if not status.get("allocation"):
            raise Transient(f"claim {claim.key} got deallocated in the meantime", claim=claim.key)
        consumers = status.setdefault("reservedFor", [])
        if any(ref.get("uid") == uid for ref in consumers):
            return
        consumers.append({"resource": "pods", "name": name, "uid": uid})
        record.added_reservation = True  # before the request, as in ``write_allocation``
        # The allocation goes back exactly as stored: the API server rejects any change.
        await sent(backend.update_claim_status(raw), record, "added_reservation")

    await retry_on_conflict(step, what=f"add reservation to claim {claim.key}", claim=claim.key)


async def roll_back(backend: Backend, written: list[Written], pod_uid: str) -> None:
    """Undo exactly what a bind wrote, newest first. Failures are logged, not raised: the claim
    controller and the ledger's TTL are the backstop."""
    for record in reversed(written):
        if not record.wrote:
            continue
        try:
            await retry_on_conflict(
                _undo_step(backend, record, pod_uid), what=f"roll back claim {record.claim_key}", claim=record.claim_key
            )
        except ObjectNotFound:
            continue
        except ExtenderError as exc:
            log.warning("bind.rollback_failed", claim=record.claim_key, reason=exc.reason)


def _undo_step(backend: Backend, record: Written, uid: str) -> Callable[[int], Awaitable[None]]:
    async def step(_attempt: int) -> None:
        await _undo(backend, record, uid)

    return step


async def _undo(backend: Backend, record: Written, uid: str) -> None:
    namespace, _, name = record.claim_key.partition("/")
    if record.consumer_uid:
        # A PodGroup's claim, reserved for the group: other members may be bound on it by now
        # (they add nothing to it), and upstream's Unreserve never takes a group's reservation
        # back either; the next pass plans around it, and deleting the PodGroup frees it.
        return
    if record.created:
        await _undo_create(backend, record)
        return
    raw = await backend.get_claim(namespace, name)
    status = raw.setdefault("status", {})
    consumers = status.get("reservedFor") or []
    if record.added_reservation and any(ref.get("uid") == uid for ref in consumers):
        consumers = [ref for ref in consumers if ref.get("uid") != uid]
        status["reservedFor"] = consumers
        if record.set_allocation and not consumers:
            status.pop("allocation", None)
            status.pop("reservedFor", None)
            status.pop("devices", None)
        raw = await backend.update_claim_status(raw)
    if record.added_finalizer and not (raw.get("status") or {}).get("allocation"):
        finalizers = (raw.get("metadata") or {}).get("finalizers") or []
        if DELETE_PROTECTION_FINALIZER in finalizers:
            raw["metadata"]["finalizers"] = [f for f in finalizers if f != DELETE_PROTECTION_FINALIZER]
            await backend.update_claim(raw)


async def _undo_create(backend: Backend, record: Written) -> None:
    """Delete a claim the bind created (as upstream's Unreserve deletes the extended-resource
    claim): its finalizer off first, then the claim, both only while it has the UID it was created
    with. A create whose answer was lost left no name to delete: the pod's next filter finds the
    claim by its owner and deletes it (``stale_extended_claim``)."""
    if not record.created_uid:
        return
    namespace, _, name = record.claim_key.partition("/")
    await delete_claim_with_uid(backend, namespace, name, record.created_uid)


async def delete_claim_with_uid(backend: Backend, namespace: str, name: str, uid: str) -> None:
    """Delete the claim ``namespace/name`` if it still has ``uid`` (``delete_claim``): a claim gone
    already, or re-created under the name since (another UID), counts as deleted."""
    try:
        raw = await backend.get_claim(namespace, name)
        if uid and (raw.get("metadata") or {}).get("uid") != uid:
            return
        await delete_claim(backend, raw)
    except ObjectNotFound:
        return


async def delete_claim(backend: Backend, raw: dict[str, Any]) -> None:
    """Remove the delete-protection finalizer of the claim ``raw`` (an update) and delete it, with
    its UID as precondition (upstream's ``deleteClaim``)."""
    meta = raw.get("metadata") or {}
    finalizers = meta.get("finalizers") or []
    if DELETE_PROTECTION_FINALIZER in finalizers:
        meta["finalizers"] = [f for f in finalizers if f != DELETE_PROTECTION_FINALIZER]
        raw = await backend.update_claim(raw)
    meta = raw.get("metadata") or {}
    await backend.remove_claim(str(meta.get("namespace") or "default"), str(meta.get("name")), str(meta.get("uid")))


async def deallocate(
    backend: Backend, claim: ResourceClaim, pod_uid: str, *, expected: ResourceClaim | None = None
) -> None:
    """Clear a claim's allocation that only ``pod_uid`` may use (upstream's PostFilter). With
    ``expected``: only while the claim is that one (its UID) with the same devices allocated."""

    async def step(_attempt: int) -> None:
        raw = await backend.get_claim(claim.namespace, claim.name)
        status = raw.setdefault("status", {})
        if not status.get("allocation"):
            return
        if expected is not None and not _same_allocation(raw, expected):
            raise Transient(f"claim {claim.key} got allocated anew in the meantime", claim=claim.key)
        if any(ref.get("uid") != pod_uid for ref in status.get("reservedFor") or []):
            raise Transient(f"claim {claim.key} got a consumer in the meantime", claim=claim.key)
        for key in ("allocation", "reservedFor", "devices"):
            status.pop(key, None)
        await backend.update_claim_status(raw)

    await retry_on_conflict(step, what=f"deallocate claim {claim.key}", claim=claim.key)


def _same_allocation(raw: Mapping[str, Any], claim: ResourceClaim) -> bool:
    """Whether the stored claim ``raw`` is ``claim`` (its UID) with the same devices allocated."""
    if claim.allocation is None or (claim.uid and (raw.get("metadata") or {}).get("uid") != claim.uid):
        return False
    results = (((raw.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    now = sorted((r.get("driver"), r.get("pool"), r.get("device")) for r in results)
    seen = sorted((d.driver, d.pool, d.device) for d in claim.allocation.devices)
    return now == seen


def json_copy(raw: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of a JSON object (what the store keeps), several times cheaper than deepcopy."""
    try:
        copied: dict[str, Any] = orjson.loads(orjson.dumps(raw))
    except TypeError:  # not plain JSON after all (orjson.JSONEncodeError)
        return copy.deepcopy(raw)
    return copied
