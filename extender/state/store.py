"""The object store: the decoded, indexed cluster that the verbs read.

Backends feed it raw objects (dicts from orjson or YAML) with ``upsert`` / ``delete`` / ``replace``;
it decodes each object once, at ingest, and keeps:

- DeviceClasses, ResourceClaims (decoded + raw), ResourceClaimTemplates, Nodes (name + labels),
  Pods (raw: the service reads only a few fields);
- a ``SliceSnapshot`` of the ResourceSlices, updated incrementally: a changed node-local slice only
  drops the memoised pools of the nodes it concerns, so a warm filter stays warm;
- the ``AllocatedState`` of every allocated claim, rebuilt lazily after claims change;
- the shared ``SelectorCache``, told to forget a slice as soon as the slice is replaced.

Synchronous and single-threaded (one asyncio loop); no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from extender.core.cel import SelectorCache
from extender.core.convert import decode_object
from extender.core.errors import InvalidObject
from extender.core.model import (
    AllocatedState,
    DeviceClass,
    NodeInfo,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)
from extender.core.pools import SliceSnapshot

__all__ = ["KINDS", "ObjectStore", "object_key"]

#: The kinds the store keeps, by ``kind``.
KINDS = ("DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice", "Node", "Pod")
_NAMESPACED = frozenset({"ResourceClaim", "ResourceClaimTemplate", "Pod"})


def object_key(kind: str, raw: Mapping[str, Any]) -> str:
    """``namespace/name`` for namespaced kinds, ``name`` otherwise."""
    meta = raw.get("metadata") or {}
    if not isinstance(meta, dict):
        raise InvalidObject(f"metadata must be an object, not {type(meta).__name__}", obj=kind)
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidObject("metadata.name is required", obj=kind)
    if kind in _NAMESPACED:
        return f"{meta.get('namespace') or 'default'}/{name}"
    return name


class ObjectStore:
    """Decoded cluster state; see the module docstring."""

    def __init__(self, *, selectors: SelectorCache | None = None) -> None:
        self.selectors = selectors if selectors is not None else SelectorCache()
        self.classes: dict[str, DeviceClass] = {}
        self.claims: dict[str, ResourceClaim] = {}
        self.raw_claims: dict[str, dict[str, Any]] = {}
        self.templates: dict[str, ResourceClaimTemplate] = {}
        self.raw_templates: dict[str, dict[str, Any]] = {}
        self.slices: dict[str, ResourceSlice] = {}
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        #: Bumped on every change; cheap "did anything change" checks for callers' caches.
        self.revision = 0
        self._snapshot: SliceSnapshot | None = SliceSnapshot(())
        self._pending_slices: list[tuple[ResourceSlice | None, ResourceSlice | None]] = []
        self._allocated: AllocatedState | None = None

    # --- ingest -------------------------------------------------------------------------------

    def upsert(self, raw: dict[str, Any]) -> None:
        """Add or replace one object. Raises InvalidObject for a malformed class, claim, template or
        node (a malformed slice is kept, marked invalid, and makes its pool invalid)."""
        kind = raw.get("kind")
        if kind not in KINDS:
            raise InvalidObject(f"unsupported kind {kind!r}", obj=str(kind))
        key = object_key(kind, raw)
        if kind == "Pod":
            self.pods[key] = raw
            self.revision += 1
            return
        obj = decode_object(raw)  # raises before anything changes
        self.revision += 1
        if isinstance(obj, DeviceClass):
            self.classes[key] = obj
        elif isinstance(obj, ResourceClaim):
            self.claims[key] = obj
            self.raw_claims[key] = raw
            self._allocated = None
        elif isinstance(obj, ResourceClaimTemplate):
            self.templates[key] = obj
            self.raw_templates[key] = raw
        elif isinstance(obj, ResourceSlice):
            old = self.slices.get(key)
            self.slices[key] = obj
            self._slice_changed(old, obj)
        elif isinstance(obj, NodeInfo):
            self.nodes[key] = obj

    def delete(self, kind: str, namespace: str | None, name: str) -> None:
        """Forget one object; unknown objects are ignored (a watch may repeat a DELETED event)."""
        key = f"{namespace or 'default'}/{name}" if kind in _NAMESPACED else name
        self.revision += 1
        if kind == "Pod":
            self.pods.pop(key, None)
        elif kind == "DeviceClass":
            self.classes.pop(key, None)
        elif kind == "ResourceClaim":
            if self.claims.pop(key, None) is not None:
                self._allocated = None
            self.raw_claims.pop(key, None)
        elif kind == "ResourceClaimTemplate":
            self.templates.pop(key, None)
            self.raw_templates.pop(key, None)
        elif kind == "ResourceSlice":
            old = self.slices.pop(key, None)
            if old is not None:
                self._slice_changed(old, None)
        elif kind == "Node":
            self.nodes.pop(key, None)

    def replace(self, kind: str, items: Iterable[dict[str, Any]]) -> None:
        """Make the store hold exactly ``items`` of this kind (after a LIST / re-list)."""
        items = list(items)
        keep = set()
        for raw in items:
            raw.setdefault("kind", kind)
            keep.add(object_key(kind, raw))
        for key in list(self._keys(kind)):
            if key not in keep:
                namespace, _, name = key.rpartition("/")
                self.delete(kind, namespace or None, name)
        for raw in items:
            self.upsert(raw)

    def _keys(self, kind: str) -> Iterable[str]:
        table: Mapping[str, object] = {
            "Pod": self.pods,
            "DeviceClass": self.classes,
            "ResourceClaim": self.claims,
            "ResourceClaimTemplate": self.templates,
            "ResourceSlice": self.slices,
            "Node": self.nodes,
        }[kind]  # type: ignore[assignment]
        return tuple(table)

    def _slice_changed(self, old: ResourceSlice | None, new: ResourceSlice | None) -> None:
        if old is not None:
            self.selectors.forget_slice(old)
        self._pending_slices.append((old, new))

    # --- reads --------------------------------------------------------------------------------

    def snapshot(self) -> SliceSnapshot:
        """The slices as one snapshot; changes since the last call are applied incrementally."""
        if self._pending_slices:
            assert self._snapshot is not None
            self._snapshot = self._snapshot.with_changes(self._pending_slices, self.slices.values())
            self._pending_slices = []
        assert self._snapshot is not None
        return self._snapshot

    def allocated_state(self) -> AllocatedState:
        """Devices held by allocated claims (admin-access results excluded), rebuilt lazily."""
        if self._allocated is None:
            state = AllocatedState()
            for claim in self.claims.values():
                if claim.allocation is not None:
                    state.add_allocation(claim.allocation)
            self._allocated = state
        return self._allocated

    def node(self, name: str) -> NodeInfo:
        """The node's labels as last seen; a node we never saw matches by name only."""
        node = self.nodes.get(name)
        if node is None:
            node = NodeInfo(name)
        return node

    def device_count(self) -> int:
        return sum(len(s.devices) for s in self.slices.values())
