"""The in-flight ledger: allocations decided by ``bind`` but not yet visible in the store.

Between choosing devices for a pod and the store showing the claim's new ``status.allocation``
(the embedded backend: the write returns; the kube backend: the watch event arrives), those devices
must count as used, or a concurrent filter or bind could hand them out again. The ledger holds
one entry per claim being allocated; the service adds its devices to the allocated state, and
treats a claim in flight for another pod as "being allocated" (upstream's in-flight map).

An entry is dropped when the store shows the allocation (``reconcile``), on rollback, or after a
TTL, so a crash mid-bind cannot hold devices forever.

Two kinds of entries besides a bind's own:

- *tentative* (``hold``): the devices the service expects a pod to get on the node it scored best
  (or the one node its filter left), from that answer until the pod's ``bind`` arrives (which
  drops the hold and decides for the node kube-scheduler chose), the pod's next ``filter``, or a
  short TTL. kube-scheduler starts the next pod's scheduling cycle before it sends a bind; a hold
  makes that cycle see the pod's devices as taken (docs/pipeline.md).
- *provisional*: for a claim the resourceclaim controller has not created yet, keyed by a
  provisional claim key that no real claim can have; ``reconcile`` leaves them alone (they have
  no claim in the store to compare with), bind replaces them once the claim exists.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from dataclasses import dataclass

from extender.core.model import AllocatedState, AllocationResult, ResourceClaim

__all__ = ["InFlightAllocation", "InFlightLedger"]


@dataclass(frozen=True, slots=True, kw_only=True)
class InFlightAllocation:
    claim_key: str  # namespace/name
    claim_uid: str
    pod_key: str
    pod_uid: str
    node: str
    result: AllocationResult
    expires_at: float
    tentative: bool = False
    provisional: bool = False
    created_at: float = 0.0


class InFlightLedger:
    """Allocations in flight, keyed by claim (``namespace/name``)."""

    def __init__(self, *, ttl_seconds: float = 120.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._entries: dict[str, InFlightAllocation] = {}
        # Looked up on every filter, prioritize and refresh, with a few hundred binds in flight on a
        # busy cluster: the tentative entries by pod, and no entry expiring before this moment (a
        # lower bound: a dropped entry may have set it).
        self._holds: dict[str, dict[str, None]] = {}
        self._next_expiry = float("inf")
        # claim keys of entries added since the last ``reconcile``: checked by the next one even
        # when it is told which claims changed
        self._unchecked: set[str] = set()
        #: Told of every entry added (True) or removed (False): the store counts in-flight devices
        #: as in use, and caches of verdicts depend on that.
        self.listeners: list[Callable[[InFlightAllocation, bool], None]] = []
        #: Bumped on every entry added or removed: a cheap "did anything change" check for readers
        #: (the device map's revision is the store's revision plus this).
        self.changes = 0

    def _changed(self, entry: InFlightAllocation, added: bool = False) -> None:
        self.changes += 1
        if entry.tentative:
            if added:
                self._holds.setdefault(entry.pod_uid, {})[entry.claim_key] = None
            else:
                keys = self._holds.get(entry.pod_uid)
                if keys is not None:
                    keys.pop(entry.claim_key, None)
                    if not keys:
                        del self._holds[entry.pod_uid]
        if added:
            self._unchecked.add(entry.claim_key)
            if entry.expires_at < self._next_expiry:
                self._next_expiry = entry.expires_at
        for listener in self.listeners:
            listener(entry, added)

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[InFlightAllocation]:
        return iter(tuple(self._entries.values()))

    def get(self, claim_key: str) -> InFlightAllocation | None:
        return self._entries.get(claim_key)

    def add(
        self,
        *,
        claim: ResourceClaim,
        pod_key: str,
        pod_uid: str,
        node: str,
        result: AllocationResult,
        tentative: bool = False,
        provisional: bool = False,
        ttl_seconds: float | None = None,
    ) -> InFlightAllocation | None:
        """Record (or replace) the entry of ``claim``; a tentative one is a hold (module docstring)
        and lives ``ttl_seconds`` (default: the ledger's TTL). A hold never replaces a bind's entry
        (None then): that bind's devices stay taken until it is done."""
        replaced = self._entries.get(claim.key)
        if tentative and replaced is not None and not replaced.tentative:
            return None
        now = self._clock()
        entry = InFlightAllocation(
            claim_key=claim.key,
            claim_uid=claim.uid,
            pod_key=pod_key,
            pod_uid=pod_uid,
            node=node,
            result=result,
            expires_at=now + (self.ttl_seconds if ttl_seconds is None else ttl_seconds),
            tentative=tentative,
            provisional=provisional,
            created_at=now,
        )
        self._entries[claim.key] = entry
        if replaced is not None:
            self._changed(replaced)
        self._changed(entry, added=True)
        return entry

    def drop(self, claim_key: str, *, pod_uid: str | None = None) -> InFlightAllocation | None:
        """Drop the entry of ``claim_key`` (only if it is ``pod_uid``'s bind entry, when given)."""
        entry = self._entries.get(claim_key)
        if entry is None or (pod_uid is not None and (entry.pod_uid != pod_uid or entry.tentative)):
            return None
        del self._entries[claim_key]
        self._changed(entry)
        return entry

    def age(self, entry: InFlightAllocation) -> float:
        """Seconds since ``entry`` was added."""
        return self._clock() - entry.created_at

    def holds_of(self, pod_uid: str) -> list[InFlightAllocation]:
        """The tentative entries of one pod (usually none, or one per claim), in no particular order."""
        keys = self._holds.get(pod_uid)
        if not keys:
            return []
        return [self._entries[key] for key in keys]

    def drop_holds(self, pod_uid: str) -> list[InFlightAllocation]:
        """Drop and return the pod's tentative entries."""
        gone = self.holds_of(pod_uid)
        for entry in gone:
            self.drop(entry.claim_key)
        return gone

    def expire(self, *, keep: Container[str] = ()) -> list[InFlightAllocation]:
        """Drop and return the entries older than their TTL, but those of the pods in ``keep``
        (UIDs of pods whose bind is still running: their devices stay taken until it ends)."""
        now = self._clock()
        if now < self._next_expiry:
            return []
        gone = [e for e in self._entries.values() if e.expires_at <= now and (e.tentative or e.pod_uid not in keep)]
        # the earliest expiry of what stays (a bind kept past its TTL keeps this check scanning
        # until it ends: rare, and the answer stays right)
        leaving = {e.claim_key for e in gone}
        self._next_expiry = min(
            (e.expires_at for e in self._entries.values() if e.claim_key not in leaving), default=float("inf")
        )
        for entry in gone:
            del self._entries[entry.claim_key]
            self._changed(entry)
        return gone

    def reconcile(
        self,
        claims: Mapping[str, ResourceClaim],
        *,
        unreadable: Container[str] = (),
        changed: Iterable[str] | None = None,
    ) -> list[InFlightAllocation]:
        """Drop entries the store has caught up with: the claim shows an allocation, or it is gone
        or was re-created (another UID). A claim in ``unreadable`` (its latest version could not be
        decoded) is not gone: its entries stay. ``changed``: the claims that changed since the
        caller's last call, if it knows them; then only their entries and those added since the
        last call are looked at (a busy cluster has hundreds of binds in flight, and this runs
        before every decision). Returns the dropped entries."""
        if changed is None:
            candidates: Iterable[InFlightAllocation] = tuple(self._entries.values())
        else:
            keys = self._unchecked.union(changed)
            candidates = [entry for key in keys if (entry := self._entries.get(key)) is not None]
        self._unchecked.clear()
        done: list[InFlightAllocation] = []
        for entry in candidates:
            if entry.provisional or entry.claim_key in unreadable:
                continue  # no claim to compare with yet: bind replaces it, or the TTL ends it
            claim = claims.get(entry.claim_key)
            if claim is None or claim.uid != entry.claim_uid or claim.allocation is not None:
                done.append(entry)
                del self._entries[entry.claim_key]
                self._changed(entry)
        return done

    def overlay(self, base: AllocatedState) -> AllocatedState:
        """``base`` plus the devices of every entry (a new object when there are entries)."""
        if not self._entries:
            return base
        state = AllocatedState(
            devices=set(base.devices),
            shared_ids=set(base.shared_ids),
            consumed_capacity={k: dict(v) for k, v in base.consumed_capacity.items()},
        )
        for entry in self._entries.values():
            state.add_allocation(entry.result)
        return state
