"""Feeding the store from watches and from our own writes, without going back in time.

Two sources write the same objects into ``ObjectStore``: the reflectors (LIST and WATCH) and the
writers (a claim as the API server returned it after our update, upserted at once so the next
filter sees it without waiting for the watch). Their deliveries can cross: the watch may bring
the pre-write version after the write's answer, or a DELETED event may beat the answer of a write
that came before it. ``StoreFeeder`` therefore remembers the last resourceVersion applied per
object (deleted ones too, as tombstones) and skips anything not newer. resourceVersions are
opaque by contract but are etcd revisions in practice; a non-numeric one is always applied.

It also spots devices freeing up (a claim losing its allocation or deleted while allocated, a
slice added or with more devices) and calls ``on_freed`` (the requeuer's ``nudge``), and drops
``metadata.managedFields`` (never read; a large share of each object's memory).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

import structlog

from extender.core.errors import InvalidObject
from extender.state.cache.store import ObjectStore, object_key

__all__ = ["StoreFeeder", "resource_version"]

log = structlog.get_logger()

#: Deleted objects remembered per kind (their final resourceVersion), oldest dropped first.
MAX_TOMBSTONES = 10_000


def resource_version(obj: dict[str, Any]) -> int | None:
    text = (obj.get("metadata") or {}).get("resourceVersion")
    try:
        return int(text) if text else None
    except (TypeError, ValueError):
        return None


class StoreFeeder:
    """The reflectors' sink and the writers' entry into ``store``; see the module docstring."""

    def __init__(self, store: ObjectStore, *, on_freed: Callable[[str], None] | None = None) -> None:
        self.store = store
        self.on_freed = on_freed
        self._versions: dict[str, dict[str, int]] = {}
        self._tombstones: dict[str, OrderedDict[str, int]] = {}
        #: Objects the store refused (InvalidObject), by kind; logged once each.
        self.rejected: dict[str, int] = {}

    # --- Sink protocol --------------------------------------------------------------------------

    def replace(self, kind: str, items: list[dict[str, Any]]) -> None:
        """A (re-)list: the store holds exactly ``items`` of this kind afterwards, except where
        it already holds a newer version of an object (written by us since the list was served).
        At once: the store may be answering requests (a re-list after a watch expired)."""
        for _ in self._replacing(kind, items):
            pass

    async def fill(self, kind: str, items: list[dict[str, Any]], pause: Callable[[], Awaitable[None]]) -> None:
        """``replace`` for a kind nothing is answered from yet (before its first complete list,
        ``Backend.synced`` is false and every verb refuses), awaiting ``pause()`` after each
        object: decoding 15 000 slices takes seconds, during which /healthz and the other kinds'
        watches must go on. Nothing else changes this kind meanwhile (its watch starts after)."""
        for _ in self._replacing(kind, items):
            await pause()

    def _replacing(self, kind: str, items: list[dict[str, Any]]) -> Iterator[None]:
        """``replace``'s work, one object at a time (a step after each)."""
        versions = self._versions.setdefault(kind, {})
        keep: dict[str, dict[str, Any]] = {}
        for raw in items:
            raw.setdefault("kind", kind)
            try:
                keep[object_key(kind, raw)] = raw
            except InvalidObject as exc:
                self._reject(kind, raw, exc)
        for key in [k for k in self._present(kind) if k not in keep]:
            self._delete(kind, key)
            versions.pop(key, None)
            yield
        self._tombstones.pop(kind, None)
        for key, raw in keep.items():
            version = resource_version(raw)
            known = versions.get(key)
            if version is not None and known is not None and version < known and key in self._present(kind):
                continue
            stones = self._tombstones.get(kind)
            gone = stones.get(key) if stones is not None else None
            if version is not None and gone is not None and version <= gone:
                continue  # our own DELETE (``removed``) while a fill paused: not back from the list
            self._upsert(kind, key, raw, version)
            yield

    def apply(self, event: str, obj: dict[str, Any]) -> None:
        """One watch event (ADDED, MODIFIED, DELETED)."""
        kind = str(obj.get("kind") or "")
        try:
            key = object_key(kind, obj)
        except InvalidObject as exc:
            self._reject(kind, obj, exc)
            return
        version = resource_version(obj)
        if self._stale(kind, key, version):
            return
        if event == "DELETED":
            self._delete(kind, key)
            self._versions.get(kind, {}).pop(key, None)
            if version is not None:
                self._tombstone(kind, key, version)
        else:
            self._upsert(kind, key, obj, version)

    # --- writers --------------------------------------------------------------------------------

    def written(self, obj: dict[str, Any]) -> None:
        """An object as the API server returned it after our write."""
        self.apply("MODIFIED", obj)

    def removed(self, obj: dict[str, Any]) -> None:
        """An object our DELETE removed (the API server's answer): gone from the store at once,
        and no event of the version we knew or older brings it back."""
        kind = str(obj.get("kind") or "")
        try:
            key = object_key(kind, obj)
        except InvalidObject:
            return
        versions = [v for v in (resource_version(obj), self._versions.get(kind, {}).get(key)) if v is not None]
        self._delete(kind, key)
        self._versions.get(kind, {}).pop(key, None)
        if versions:
            self._tombstone(kind, key, max(versions))

    # --- internals ------------------------------------------------------------------------------

    def _tombstone(self, kind: str, key: str, version: int) -> None:
        """Remember that ``key`` was deleted at ``version``: no older event brings it back."""
        stones = self._tombstones.setdefault(kind, OrderedDict())
        stones[key] = version
        stones.move_to_end(key)
        while len(stones) > MAX_TOMBSTONES:
            stones.popitem(last=False)

    def _stale(self, kind: str, key: str, version: int | None) -> bool:
        if version is None:
            return False
        known = self._versions.get(kind, {}).get(key)
        if known is None:
            stones = self._tombstones.get(kind)
            known = stones.get(key) if stones is not None else None
        return known is not None and version <= known

    def count(self, kind: str) -> int:
        return len(self._present(kind))

    def _present(self, kind: str) -> Mapping[str, object]:
        if kind == "ResourceClaim" and self.store.invalid_claims:
            return {**self.store.claims, **self.store.invalid_claims}  # a re-list forgets both
        tables: dict[str, Mapping[str, object]] = {
            "Pod": self.store.pods,
            "DeviceClass": self.store.classes,
            "ResourceClaim": self.store.claims,
            "ResourceClaimTemplate": self.store.templates,
            "ResourceSlice": self.store.slices,
            "Node": self.store.nodes,
            "PodSchedulingContext": self.store.scheduling_contexts,
            "PodDisruptionBudget": self.store.budgets,
            "DeviceTaintRule": self.store.taint_rules,
        }
        return tables.get(kind, {})

    def _upsert(self, kind: str, key: str, raw: dict[str, Any], version: int | None) -> None:
        meta = raw.get("metadata")
        if isinstance(meta, dict):
            meta.pop("managedFields", None)
        freed = self._frees(kind, key, raw)
        try:
            self.store.upsert(raw)
        except InvalidObject as exc:
            self._reject(kind, raw, exc)
            if kind == "ResourceClaim":
                # Not usable, but what it holds stays held: nothing may be allocated twice.
                self.store.mark_claim_invalid(key, raw, exc.reason)
                if version is not None:  # an older version arriving later must not undo this one
                    self._versions.setdefault(kind, {})[key] = version
            else:
                # Keep no stale copy of an object we can no longer read: forget it (a slice is
                # never refused: it is kept, marked invalid, and makes its pool invalid).
                self._delete(kind, key)
            return
        if version is not None:
            self._versions.setdefault(kind, {})[key] = version
        stones = self._tombstones.get(kind)
        if stones is not None:
            stones.pop(key, None)
        if freed and self.on_freed is not None:
            self.on_freed(freed)

    def _delete(self, kind: str, key: str) -> None:
        freed = ""
        if kind == "ResourceClaim":
            old = self.store.claims.get(key)
            if old is not None and old.allocation is not None:
                freed = f"claim {key} deleted"
        elif kind == "DeviceTaintRule" and key in self.store.taint_rules:
            freed = f"device taint rule {key} deleted"  # its devices may be usable again
        namespace, _, name = key.rpartition("/")
        self.store.delete(kind, namespace or None, name)
        if freed and self.on_freed is not None:
            self.on_freed(freed)

    def _frees(self, kind: str, key: str, raw: dict[str, Any]) -> str:
        """Why this new version frees devices, or ""."""
        if kind == "ResourceClaim":
            old = self.store.claims.get(key)
            if old is not None and old.allocation is not None and not (raw.get("status") or {}).get("allocation"):
                return f"claim {key} deallocated"
        elif kind == "ResourceSlice":
            old_slice = self.store.slices.get(key)
            devices = (raw.get("spec") or {}).get("devices") or ()
            if old_slice is None:
                return f"slice {key} added"
            if len(devices) > len(old_slice.devices):
                return f"slice {key} grew"
        return ""

    def _reject(self, kind: str, raw: dict[str, Any], exc: InvalidObject) -> None:
        self.rejected[kind] = self.rejected.get(kind, 0) + 1
        name = (raw.get("metadata") or {}).get("name") if isinstance(raw, dict) else None
        log.warning("watch.object_rejected", kind=kind, name=name, reason=exc.reason)
