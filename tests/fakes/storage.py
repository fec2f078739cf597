"""The fake's etcd: objects per collection, one global resourceVersion counter, and a change log.

Every write takes the next resourceVersion (as an etcd revision), and is appended to a single
ordered change log that LIST (consistent snapshots for ``continue`` tokens and
``resourceVersionMatch=Exact``) and WATCH (replay after a resourceVersion) read from. Compaction
forgets the log up to a resourceVersion; reading from before it is ``410 Expired`` as on a
cluster whose etcd (or watch cache) has moved on.

Stored objects are never mutated after they are committed (the log keeps references to them); a
write always commits a fresh dict. Nothing here knows HTTP or validation rules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .status import expired, internal_error

__all__ = ["Change", "Collection", "Key", "Storage"]

#: (group, plural) of a collection.
Collection = tuple[str, str]
#: (namespace, name) inside a collection; namespace is "" for cluster-scoped objects.
Key = tuple[str, str]


@dataclass(frozen=True)
class Change:
    """One committed write: ``obj`` is the object after it (for DELETED the last state, carrying
    the deletion's resourceVersion, as watch DELETED events do); ``prev`` the object before."""

    rv: int
    type: str
    collection: Collection
    key: Key
    obj: dict[str, Any]
    prev: dict[str, Any] | None


class Storage:
    """Objects, the resourceVersion counter and the change log; see the module docstring."""

    def __init__(self, *, first_resource_version: int = 1000, retain_changes: int | None = None) -> None:
        #: The resourceVersion of the latest write (etcd's current revision).
        self.rv = first_resource_version
        #: Reads from a resourceVersion below this are 410 Expired.
        self.compacted = first_resource_version
        #: Keep at most this many changes; older ones are compacted away automatically.
        self.retain_changes = retain_changes
        self._objects: dict[Collection, dict[Key, dict[str, Any]]] = {}
        self._log: list[Change] = []
        self._listeners: list[Callable[[Change], None]] = []

    # --- reads ----------------------------------------------------------------------------------

    def get(self, collection: Collection, key: Key) -> dict[str, Any] | None:
        return self._objects.get(collection, {}).get(key)

    def current(self, collection: Collection) -> dict[Key, dict[str, Any]]:
        """The live objects of a collection (do not mutate)."""
        return self._objects.get(collection, {})

    def snapshot(self, collection: Collection, rv: int) -> dict[Key, dict[str, Any]]:
        """The collection as it was at resourceVersion ``rv``: the current objects with every later
        change undone. 410 Expired when ``rv`` is older than the compacted log."""
        if rv >= self.rv:
            return dict(self.current(collection))
        self.check_not_compacted(rv, "The resourceVersion for the provided list is too old.")
        state = dict(self.current(collection))
        for change in reversed(self._log):
            if change.rv <= rv:
                break
            if change.collection != collection:
                continue
            if change.prev is None:
                state.pop(change.key, None)
            else:
                state[change.key] = change.prev
        return state

    def changes_since(self, collection: Collection, rv: int) -> list[Change]:
        """Changes of a collection after ``rv``, oldest first; 410 when ``rv`` predates the log."""
        self.check_not_compacted(rv, f"too old resource version: {rv} ({self.compacted})")
        return [c for c in self._log if c.rv > rv and c.collection == collection]

    def check_not_compacted(self, rv: int, message: str) -> None:
        if rv < self.compacted:
            raise expired(message)

    # --- writes ---------------------------------------------------------------------------------

    def commit(
        self, collection: Collection, key: Key, obj: dict[str, Any] | None, *, final: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Store ``obj`` under ``key`` (or remove the key when ``obj`` is None, with ``final`` the
        object's last state) with the next resourceVersion; returns what was committed."""
        objects = self._objects.setdefault(collection, {})
        prev = objects.get(key)
        self.rv += 1
        if obj is None:
            if prev is None:
                raise internal_error("fake storage: delete of a missing key")
            committed = _with_rv(final if final is not None else prev, self.rv)
            del objects[key]
            kind = "DELETED"
        else:
            committed = _with_rv(obj, self.rv)
            objects[key] = committed
            kind = "ADDED" if prev is None else "MODIFIED"
        change = Change(self.rv, kind, collection, key, committed, prev)
        self._log.append(change)
        if self.retain_changes is not None and len(self._log) > self.retain_changes:
            self.compact(self._log[len(self._log) - self.retain_changes - 1].rv)
        for listener in list(self._listeners):
            listener(change)
        return committed

    def compact(self, rv: int | None = None) -> None:
        """Forget the change log up to ``rv`` (default: everything, as right after a restart)."""
        target = self.rv if rv is None else min(rv, self.rv)
        self.compacted = max(self.compacted, target)
        self._log = [c for c in self._log if c.rv > self.compacted]

    # --- change listeners (watches) -------------------------------------------------------------

    def subscribe(self, listener: Callable[[Change], None]) -> None:
        self._listeners.append(listener)

    def unsubscribe(self, listener: Callable[[Change], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)


def _with_rv(obj: dict[str, Any], rv: int) -> dict[str, Any]:
    metadata = dict(obj.get("metadata") or {})
    metadata["resourceVersion"] = str(rv)
    return {**obj, "metadata": metadata}
