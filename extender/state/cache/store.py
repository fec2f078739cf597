"""The object store: the decoded, indexed cluster that the verbs read.

Backends feed it raw objects (dicts from orjson or YAML) with ``upsert`` / ``delete`` / ``replace``;
it decodes each object once, at ingest, and keeps:

- DeviceClasses, ResourceClaims (decoded + raw), ResourceClaimTemplates, Nodes (name + labels),
  Pods (raw: the service reads only a few fields), PodGroups (decoded) and which pods name each;
- a ``SliceSnapshot`` of the ResourceSlices, updated incrementally: a changed node-local slice only
  drops the memoised pools of the nodes it concerns, so a warm filter stays warm;
- the ``AllocatedState`` of every allocated claim, updated claim by claim (``AllocationIndex``);
- the shared ``SelectorCache``, told to forget a slice as soon as the slice is replaced;
- DeviceTaintRules, applied to the slices they match (``extender.core.taint_rules``): ``slices``
  holds each slice with the rules' taints, ``unpatched_slices`` as its driver published it, and a
  rule's change re-applies the rules to the slices of its driver and pool only;
- the ``FitCache`` of remembered per-node verdicts, told exactly what each change may affect, and
  each claim's spec as canonical bytes (``claim_specs``), the key of a pod shape there.

Synchronous and single-threaded (one asyncio loop); no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from typing import Any, NamedTuple

import orjson

from extender.core.cel import SelectorCache
from extender.core.convert import decode_object, decode_pod_group
from extender.core.errors import InvalidObject
from extender.core.extended import EXTENDED_CLAIM_ANNOTATION, ExtendedClasses
from extender.core.model import (
    AllocatedState,
    AllocationResult,
    DeviceClass,
    DeviceID,
    DeviceResult,
    DeviceTaintRule,
    NodeInfo,
    PodSchedulingContext,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
    SharedDeviceID,
)
from extender.core.podgroups import PodGroup
from extender.core.pools import SliceSnapshot
from extender.core.preemption import Budget
from extender.core.quantity import Quantity
from extender.core.taint_rules import apply_taint_rules, rule_touches
from extender.state.cache.fit_cache import FitCache

__all__ = ["KINDS", "AllocationIndex", "Holding", "ObjectStore", "object_key"]

#: The kinds the store keeps, by ``kind``.
KINDS = (
    "DeviceClass",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "ResourceSlice",
    "Node",
    "Pod",
    "PodSchedulingContext",
    "PodDisruptionBudget",
    "DeviceTaintRule",
    "PodGroup",
)
_NAMESPACED = frozenset(
    {"ResourceClaim", "ResourceClaimTemplate", "Pod", "PodSchedulingContext", "PodDisruptionBudget", "PodGroup"}
)


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


class Holding(NamedTuple):
    """Who holds devices in the in-use index: a claim's stored allocation, or the in-flight ledger's
    entry for the claim (a bind's or a hold's, not shown by the store yet). Both may hold the
    same devices at once while the store catches up."""

    claim_key: str
    in_flight: bool = False


class AllocationIndex:
    """The ``AllocatedState`` of a set of holdings, kept up to date one holding at a time.

    ``set(key, allocation)`` replaces what one holding (a ``Holding``, or a claim's key) holds and
    returns the devices whose state changed; the state object is updated in place, so a caller
    holding it always sees the current devices (callers use it synchronously). A device held by several claims stays in
    use until the last one lets go, and a second holder of a device already in exclusive use
    changes nothing: that is what a bind's in-flight entry and the claim's own allocation are
    while the store catches up, and remembered verdicts survive it.
    """

    def __init__(self) -> None:
        self.state = AllocatedState()
        self._by_claim: dict[Hashable, AllocationResult] = {}
        # device -> holding -> that holding's non-admin results for the device
        self._holders: dict[DeviceID, dict[Hashable, list[DeviceResult]]] = {}

    def set(self, key: Hashable, allocation: AllocationResult | None) -> set[DeviceID]:
        old = self._by_claim.get(key)
        if old is allocation or (old is not None and allocation is not None and old == allocation):
            return set()
        touched: set[DeviceID] = set()
        if old is not None:
            del self._by_claim[key]
            for result in old.devices:
                if result.admin_access:
                    continue  # admin access does not consume the device
                touched.add(result.device_id)
                holders = self._holders.get(result.device_id)
                if holders is not None:  # None: a second result of this claim on the device
                    holders.pop(key, None)
                    if not holders:
                        del self._holders[result.device_id]
        if allocation is not None:
            self._by_claim[key] = allocation
            for result in allocation.devices:
                if result.admin_access:
                    continue
                touched.add(result.device_id)
                self._holders.setdefault(result.device_id, {}).setdefault(key, []).append(result)
        state = self.state
        shared = _has_shares(old) or _has_shares(allocation)
        changed: set[DeviceID] = set()
        for device in touched:
            before = (device in state.devices, state.consumed_capacity.get(device))
            self._recount(device, old)
            if before != (device in state.devices, state.consumed_capacity.get(device)) or (
                shared and _shares_on(old, device) != _shares_on(allocation, device)
            ):
                changed.add(device)
        return changed

    def without(self, keys: Collection[Hashable]) -> AllocatedState:
        """A copy of the state as if the holdings ``keys`` held nothing (preemption's what-if: the
        devices a set of victims would free), recounted from the remaining holders."""
        state = AllocatedState(
            devices=set(self.state.devices),
            shared_ids=set(self.state.shared_ids),
            consumed_capacity={device: dict(totals) for device, totals in self.state.consumed_capacity.items()},
        )
        touched = {
            result.device_id
            for key in keys
            for result in (self._by_claim[key].devices if key in self._by_claim else ())
            if not result.admin_access
        }
        for device in touched:
            state.devices.discard(device)
            state.consumed_capacity.pop(device, None)
            state.shared_ids -= {share for share in state.shared_ids if share.device == device}
            for key, results in self._holders.get(device, {}).items():
                if key in keys:
                    continue
                for result in results:
                    if result.share_id is None:
                        state.devices.add(device)
                        continue
                    state.shared_ids.add(SharedDeviceID(device, result.share_id))
                    for name, amount in (result.consumed_capacity or {}).items():
                        totals = state.consumed_capacity.setdefault(device, {})
                        previous = totals.get(name)
                        totals[name] = amount if previous is None else previous + amount
        return state

    def _recount(self, device: DeviceID, old: AllocationResult | None) -> None:
        """Make the state's entries for ``device`` agree with its holders (the rules of
        ``AllocatedState.add_allocation``: exclusive use, shares, consumed capacity)."""
        state = self.state
        if old is not None:  # shares the old allocation held; re-added below if still held
            for result in old.devices:
                if result.share_id is not None and result.device_id == device:
                    state.shared_ids.discard(SharedDeviceID(device, result.share_id))
        results = [r for rs in self._holders.get(device, {}).values() for r in rs]
        if any(r.share_id is None for r in results):
            state.devices.add(device)
        else:
            state.devices.discard(device)
        totals: dict[str, Quantity] = {}
        for result in results:
            if result.share_id is None:
                continue
            state.shared_ids.add(SharedDeviceID(device, result.share_id))
            for name, amount in (result.consumed_capacity or {}).items():
                previous = totals.get(name)
                totals[name] = amount if previous is None else previous + amount
        if any(r.share_id is not None and r.consumed_capacity for r in results):
            state.consumed_capacity[device] = totals
        else:
            state.consumed_capacity.pop(device, None)


def _has_shares(allocation: AllocationResult | None) -> bool:
    return allocation is not None and any(r.share_id is not None for r in allocation.devices)


def _shares_on(allocation: AllocationResult | None, device: DeviceID) -> set[str]:
    """The share IDs ``allocation`` holds on ``device`` (what it adds to ``shared_ids``)."""
    if allocation is None:
        return set()
    return {
        r.share_id
        for r in allocation.devices
        if r.device_id == device and r.share_id is not None and not r.admin_access
    }


#: Spec keys whose decoding ``ObjectStore`` keeps for new claims of the same spec: far more than the
#: templates and claim shapes a cluster uses at once.
DECODED_SPECS = 1024


def _spec_key(raw: Mapping[str, Any], spec: Any = None) -> bytes | None:
    """A claim's apiVersion and spec (``raw["spec"]``, or ``spec``) as canonical bytes: equal for
    claims the allocator cannot tell apart (template claims of one template, and the template's
    own claim spec), so they share remembered verdicts. None when the spec is not plain JSON (then
    nothing is shared)."""
    version = str(raw.get("apiVersion") or "").encode()
    try:
        return version + b"\0" + orjson.dumps(raw.get("spec") if spec is None else spec, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # orjson.JSONEncodeError: e.g. non-string keys from YAML
        return None


class ObjectStore:
    """Decoded cluster state; see the module docstring."""

    def __init__(self, *, selectors: SelectorCache | None = None, fits: FitCache | None = None) -> None:
        self.selectors = selectors if selectors is not None else SelectorCache()
        self.fits = fits if fits is not None else FitCache()
        self.classes: dict[str, DeviceClass] = {}
        self.claims: dict[str, ResourceClaim] = {}
        #: Claims whose latest version could not be decoded, with why (``mark_claim_invalid``),
        #: and the devices each still holds.
        self.invalid_claims: dict[str, str] = {}
        self._invalid_held: dict[str, AllocationResult] = {}
        self.raw_claims: dict[str, dict[str, Any]] = {}
        #: Per claim key: its spec as canonical bytes (see ``_spec_key``).
        self.claim_specs: dict[str, bytes] = {}
        self.templates: dict[str, ResourceClaimTemplate] = {}
        self.raw_templates: dict[str, dict[str, Any]] = {}
        #: Per template key: the spec key (``_spec_key``) of the claims it makes.
        self.template_specs: dict[str, bytes] = {}
        #: A decoding of each spec key seen lately (a template's or a claim's), at most
        #: ``DECODED_SPECS``: a claim the resourceclaim controller makes from a template is decoded
        #: from its template's spec, not again (``decode_resource_claim(same_spec_as=)``).
        self._decoded_specs: dict[bytes, ResourceClaim] = {}
        #: Each slice with the DeviceTaintRules' taints on its devices (what every decision reads).
        self.slices: dict[str, ResourceSlice] = {}
        #: Each slice as published; the same object as in ``slices`` where no rule matches it.
        self.unpatched_slices: dict[str, ResourceSlice] = {}
        self.taint_rules: dict[str, DeviceTaintRule] = {}
        self.nodes: dict[str, NodeInfo] = {}
        #: Each Node's name -> one string object for it, kept across the Node's updates: requests
        #: name nodes in freshly parsed strings, which ``VerdictCache.candidates`` maps onto these
        #: (in C, ``map(dict.get)``) so that the caches' keys then compare by identity.
        self.node_names: dict[str, str] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        #: PodDisruptionBudgets (policy/v1), decoded for device-aware preemption's choice.
        self.budgets: dict[str, Budget] = {}
        #: Classic DRA (v1alpha3): each pod's PodSchedulingContext, by the pod's key (the context
        #: is named after its pod), decoded and raw.
        self.scheduling_contexts: dict[str, PodSchedulingContext] = {}
        self.raw_scheduling_contexts: dict[str, dict[str, Any]] = {}
        #: PodGroups (scheduling.k8s.io), decoded, and the keys of the pods that name each group
        #: (``spec.schedulingGroup``, whether the group exists yet or not), by ``namespace/group``.
        self.pod_groups: dict[str, PodGroup] = {}
        self.group_pods: dict[str, dict[str, None]] = {}
        self._pod_group_of: dict[str, str] = {}
        #: Bumped on every change; cheap "did anything change" checks for callers' caches.
        self.revision = 0
        #: The same, by kind: what changed of the kinds a cache depends on (a gang's remembered
        #: answer does not depend on pods' statuses, which change all the time).
        self.kind_changes: dict[str, int] = dict.fromkeys(KINDS, 0)
        #: Told ``(kind, key)`` after a Pod, ResourceClaim or PodSchedulingContext was added,
        #: replaced or deleted (a bind waiting for the resourceclaim controller or for a classic
        #: driver listens here).
        self.claim_listeners: list[Callable[[str, str], None]] = []
        self._snapshot: SliceSnapshot | None = SliceSnapshot(())
        self._pending_slices: list[tuple[ResourceSlice | None, ResourceSlice | None]] = []
        self._allocations = AllocationIndex()  # allocated claims
        self._in_use = AllocationIndex()  # by ``Holding``: allocated claims and in-flight allocations
        #: Claims made for pods' extended resources (annotated, a pod as controller owner): the
        #: owning pod's UID -> the claims' keys, oldest first (normally one; an answer lost to a
        #: create can leave a second) (``extender.core.extended``).
        self.extended_claims: dict[str, dict[str, None]] = {}
        self._extended_classes: ExtendedClasses | None = None

    # --- ingest -------------------------------------------------------------------------------

    def upsert(self, raw: dict[str, Any]) -> None:
        """Add or replace one object. Raises InvalidObject for a malformed class, claim, template or
        node (a malformed slice is kept, marked invalid, and makes its pool invalid)."""
        kind = raw.get("kind")
        if kind not in KINDS:
            raise InvalidObject(f"unsupported kind {kind!r}", obj=str(kind))
        key = object_key(kind, raw)
        if kind == "PodDisruptionBudget":
            self.budgets[key] = _budget(key, raw)
            self._changed(kind)
            return
        if kind == "Pod":
            self.pods[key] = raw
            self._index_group_member(key, raw)
            self._changed(kind)
            for listener in self.claim_listeners:
                listener(kind, key)
            return
        if kind == "PodGroup":
            self.pod_groups[key] = decode_pod_group(raw)  # raises before anything changes
            self._changed(kind)
            return
        spec_key = _spec_key(raw) if kind == "ResourceClaim" else None
        # A claim's spec is immutable: a status update need not decode it again.
        same = self.claims.get(key) if spec_key is not None and self.claim_specs.get(key) == spec_key else None
        if same is not None and self._metadata_only(key, raw):
            # e.g. bind's finalizer write: nothing the allocator reads changed but the version
            self._changed(kind)
            self.claims[key] = dataclasses.replace(same, resource_version=raw["metadata"]["resourceVersion"])
            self.raw_claims[key] = raw
            for listener in self.claim_listeners:
                listener(kind, key)
            return
        if same is None and spec_key is not None:
            same = self._decoded_specs.get(spec_key)  # another claim's, or its template's: the same spec
        obj = decode_object(raw, same_spec_as=same)  # raises before anything changes
        self._changed(kind)
        if isinstance(obj, DeviceClass):
            self.classes[key] = obj
            self._extended_classes = None
            self.fits.clear()
        elif isinstance(obj, ResourceClaim):
            self.invalid_claims.pop(key, None)
            self._invalid_held.pop(key, None)
            self.claims[key] = obj
            self.raw_claims[key] = raw
            if spec_key is None:
                self.claim_specs.pop(key, None)
            else:
                self.claim_specs[key] = spec_key
                self._decoded_spec(spec_key, obj)
            self._claim_allocation(key, obj.allocation)
            self._index_extended_claim(key, raw)
            for listener in self.claim_listeners:
                listener(kind, key)
        elif isinstance(obj, ResourceClaimTemplate):
            self.templates[key] = obj
            self.raw_templates[key] = raw
            template_spec = _spec_key(raw, (raw.get("spec") or {}).get("spec") or {})
            if template_spec is None:
                self.template_specs.pop(key, None)
            else:
                self.template_specs[key] = template_spec
                self._decoded_spec(template_spec, obj.spec)
        elif isinstance(obj, ResourceSlice):
            old = self.slices.get(key)
            self.unpatched_slices[key] = obj
            patched = apply_taint_rules(obj, self.taint_rules.values()) if self.taint_rules else obj
            self.slices[key] = patched
            self._slice_changed(old, patched)
        elif isinstance(obj, DeviceTaintRule):
            previous = self.taint_rules.get(key)
            self.taint_rules[key] = obj
            self._rules_changed(previous, obj)
        elif isinstance(obj, PodSchedulingContext):
            self.scheduling_contexts[key] = obj
            self.raw_scheduling_contexts[key] = raw
            for listener in self.claim_listeners:
                listener(kind, key)
        elif isinstance(obj, NodeInfo):
            old_node = self.nodes.get(key)
            self.nodes[key] = obj
            self.node_names.setdefault(obj.name, obj.name)
            if old_node is None or old_node.labels != obj.labels or old_node.allocatable != obj.allocatable:
                self.fits.drop_nodes((key,))

    def mark_claim_invalid(self, key: str, raw: Mapping[str, Any], reason: str) -> None:
        """A claim arrived (by watch) in a form the decoder cannot read, as the API server would
        never accept: pods that use it get ``Error`` naming ``reason`` (``resolve_pod_claims``), and
        the devices it holds stay in use — those its ``status.allocation`` names as far as they
        can be read, else those of the last version that could be decoded — so that nothing is
        allocated twice. A valid version or a deletion ends it."""
        old = self.claims.pop(key, None)
        self.raw_claims.pop(key, None)
        self.claim_specs.pop(key, None)
        self._changed("ResourceClaim")
        # Held stays held while the claim is unreadable: what it held when it was last readable,
        # what earlier unreadable versions named, and what this one names, together.
        held = _union(
            self._invalid_held.get(key),
            old.allocation if old is not None else None,
            _readable_allocation(raw),
        )
        if held is None:
            self._invalid_held.pop(key, None)
        else:
            self._invalid_held[key] = held
        self.invalid_claims[key] = reason
        self._claim_allocation(key, held)
        for listener in self.claim_listeners:
            listener("ResourceClaim", key)

    def _metadata_only(self, key: str, raw: dict[str, Any]) -> bool:
        """Whether a claim update changes only metadata the model does not keep (finalizers,
        labels, annotations, ...) besides ``resourceVersion``: same status, UID and deletion."""
        old = self.raw_claims.get(key)
        if old is None or raw.get("status") != old.get("status"):
            return False
        meta, old_meta = raw.get("metadata"), old.get("metadata") or {}
        return (
            isinstance(meta, dict)
            and isinstance(meta.get("resourceVersion"), str)
            and meta.get("uid") == old_meta.get("uid")
            and meta.get("deletionTimestamp") == old_meta.get("deletionTimestamp")
        )

    def delete(self, kind: str, namespace: str | None, name: str) -> None:
        """Forget one object; unknown objects are ignored (a watch may repeat a DELETED event)."""
        key = f"{namespace or 'default'}/{name}" if kind in _NAMESPACED else name
        self._changed(kind)
        if kind == "PodDisruptionBudget":
            self.budgets.pop(key, None)
        elif kind == "PodGroup":
            self.pod_groups.pop(key, None)
        elif kind == "Pod":
            self._index_group_member(key, None)
            if self.pods.pop(key, None) is not None:
                for listener in self.claim_listeners:
                    listener(kind, key)
        elif kind == "PodSchedulingContext":
            self.raw_scheduling_contexts.pop(key, None)
            if self.scheduling_contexts.pop(key, None) is not None:
                for listener in self.claim_listeners:
                    listener(kind, key)
        elif kind == "DeviceClass":
            if self.classes.pop(key, None) is not None:
                self._extended_classes = None
                self.fits.clear()
        elif kind == "ResourceClaim":
            self._invalid_held.pop(key, None)
            if self.claims.pop(key, None) is not None or self.invalid_claims.pop(key, None) is not None:
                self._claim_allocation(key, None)
            self._unindex_extended_claim(key, self.raw_claims.pop(key, None))
            self.claim_specs.pop(key, None)
            for listener in self.claim_listeners:
                listener(kind, key)
        elif kind == "ResourceClaimTemplate":
            self.templates.pop(key, None)
            self.raw_templates.pop(key, None)
            self.template_specs.pop(key, None)
        elif kind == "ResourceSlice":
            self.unpatched_slices.pop(key, None)
            old = self.slices.pop(key, None)
            if old is not None:
                self._slice_changed(old, None)
        elif kind == "DeviceTaintRule":
            gone = self.taint_rules.pop(key, None)
            if gone is not None:
                self._rules_changed(gone, None)
        elif kind == "Node" and self.nodes.pop(key, None) is not None:
            self.node_names.pop(key, None)
            self.fits.drop_nodes((key,))

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
            "DeviceTaintRule": self.taint_rules,
            "Node": self.nodes,
            "PodSchedulingContext": self.scheduling_contexts,
            "PodDisruptionBudget": self.budgets,
            "PodGroup": self.pod_groups,
        }[kind]  # type: ignore[assignment]
        return tuple(table)

    def _decoded_spec(self, spec_key: bytes, claim: ResourceClaim) -> None:
        """Remember ``claim``'s spec as the decoding of ``spec_key`` (or mark the one remembered as
        used just now), the least recently used dropped beyond ``DECODED_SPECS``. Only the spec is
        kept of it: a claim's status (up to 256 consumers) need not outlive the claim."""
        specs = self._decoded_specs
        known = specs.pop(spec_key, None)
        if known is None:
            if len(specs) >= DECODED_SPECS:
                del specs[next(iter(specs))]
            known = dataclasses.replace(claim, allocation=None, reserved_for=(), resource_version="")
        specs[spec_key] = known

    def _changed(self, kind: str) -> None:
        self.revision += 1
        self.kind_changes[kind] = self.kind_changes.get(kind, 0) + 1

    def _index_group_member(self, key: str, raw: Mapping[str, Any] | None) -> None:
        """Keep ``group_pods`` up to date for the pod of ``key`` (None: the pod is gone)."""
        group = ""
        if raw is not None:
            spec = raw.get("spec")
            scheduling_group = spec.get("schedulingGroup") if isinstance(spec, dict) else None
            name = scheduling_group.get("podGroupName") if isinstance(scheduling_group, dict) else None
            if isinstance(name, str) and name:
                group = f"{key.partition('/')[0]}/{name}"
        old = self._pod_group_of.get(key, "")
        if old == group:
            return
        if old:
            members = self.group_pods[old]
            del members[key]
            if not members:
                del self.group_pods[old]
            del self._pod_group_of[key]
        if group:
            self.group_pods.setdefault(group, {})[key] = None
            self._pod_group_of[key] = group

    @property
    def extended_classes(self) -> ExtendedClasses:
        """Extended resource name -> DeviceClass name, over the classes as they are now."""
        if self._extended_classes is None:
            self._extended_classes = ExtendedClasses(self.classes.values())
        return self._extended_classes

    def _index_extended_claim(self, key: str, raw: Mapping[str, Any]) -> None:
        meta = raw.get("metadata") or {}
        if (meta.get("annotations") or {}).get(EXTENDED_CLAIM_ANNOTATION) != "true":
            return
        for ref in meta.get("ownerReferences") or []:
            if isinstance(ref, Mapping) and ref.get("controller") and ref.get("kind") == "Pod" and ref.get("uid"):
                self.extended_claims.setdefault(str(ref["uid"]), {})[key] = None

    def _unindex_extended_claim(self, key: str, raw: Mapping[str, Any] | None) -> None:
        for ref in ((raw or {}).get("metadata") or {}).get("ownerReferences") or []:
            uid = ref.get("uid") if isinstance(ref, Mapping) else None
            keys = self.extended_claims.get(str(uid)) if uid else None
            if keys is not None and key in keys:
                del keys[key]
                if not keys:
                    del self.extended_claims[str(uid)]

    def _claim_allocation(self, key: str, allocation: AllocationResult | None) -> None:
        self._allocations.set(key, allocation)
        self.fits.drop_devices(self._in_use.set(Holding(key), allocation))

    def set_in_flight(self, claim_key: str, allocation: AllocationResult | None) -> None:
        """Count (or stop counting) an allocation a bind decided but the store does not show yet:
        ``in_use_state`` includes it. The in-flight ledger calls this for every entry."""
        self.fits.drop_devices(self._in_use.set(Holding(claim_key, in_flight=True), allocation))

    def _rules_changed(self, old: DeviceTaintRule | None, new: DeviceTaintRule | None) -> None:
        """Re-apply the rules to the slices the changed rule matched or matches now."""
        for key, published in self.unpatched_slices.items():
            if not any(rule is not None and rule_touches(rule, published) for rule in (old, new)):
                continue
            before = self.slices[key]
            after = apply_taint_rules(published, self.taint_rules.values())
            if after is not before:
                self.slices[key] = after
                self._slice_changed(before, after)

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
            invalidated = self._snapshot.invalidated
            if invalidated is None:
                self.fits.clear()
            else:
                self.fits.drop_nodes(invalidated)
        assert self._snapshot is not None
        return self._snapshot

    def allocated_state(self) -> AllocatedState:
        """Devices held by allocated claims (admin-access results excluded). The same object is
        updated in place as claims change: read it synchronously, do not keep it across awaits."""
        return self._allocations.state

    def in_use_without(self, claim_keys: Collection[str]) -> AllocatedState:
        """``in_use_state`` as if the claims ``claim_keys`` (and their in-flight entries) held
        nothing: a copy, for preemption's what-ifs."""
        holdings = {Holding(key, in_flight) for key in claim_keys for in_flight in (False, True)}
        return self._in_use.without(holdings)

    def in_use_state(self) -> AllocatedState:
        """``allocated_state`` plus the in-flight allocations (``set_in_flight``): what the
        allocator must treat as taken. Same in-place rules."""
        return self._in_use.state

    def node(self, name: str) -> NodeInfo:
        """The node's labels as last seen; a node we never saw matches by name only."""
        node = self.nodes.get(name)
        if node is None:
            node = NodeInfo(name)
        return node

    def known_node_names(self) -> list[str]:
        """Every node the extender knows, sorted: the Node objects, and the nodes slices name (those
        match by name only, ``node``)."""
        names = set(self.nodes)
        names.update(s.node_name for s in self.slices.values() if s.node_name)
        return sorted(names)

    def device_count(self) -> int:
        return sum(len(s.devices) for s in self.slices.values())


def _budget(key: str, raw: Mapping[str, Any]) -> Budget:
    """A PodDisruptionBudget as preemption reads it (leniently: a budget is a hint to the choice;
    the API server's eviction check is the authority)."""
    raw_spec, raw_status = raw.get("spec"), raw.get("status")
    spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
    status: Mapping[str, Any] = raw_status if isinstance(raw_status, Mapping) else {}
    selector = spec.get("selector") if isinstance(spec.get("selector"), Mapping) else None
    allowed = status.get("disruptionsAllowed")
    namespace, _, name = key.partition("/")
    count = allowed if isinstance(allowed, int) and not isinstance(allowed, bool) else 0
    return Budget(namespace, name, selector, count)


def _readable_allocation(raw: Mapping[str, Any]) -> AllocationResult | None:
    """The devices a raw claim's ``status.allocation`` names, read leniently (driver, pool and device
    strings only), or None if it names none that can be read."""
    status = raw.get("status")
    allocation = status.get("allocation") if isinstance(status, Mapping) else None
    devices = allocation.get("devices") if isinstance(allocation, Mapping) else None
    results = devices.get("results") if isinstance(devices, Mapping) else None
    if not isinstance(results, list):
        return None
    held = tuple(
        DeviceResult(
            request=str(r.get("request") or ""),
            driver=r["driver"],
            pool=r["pool"],
            device=r["device"],
            admin_access=r.get("adminAccess") is True,
        )
        for r in results
        if isinstance(r, Mapping) and all(isinstance(r.get(k), str) and r.get(k) for k in ("driver", "pool", "device"))
    )
    return AllocationResult(devices=held) if held else None


def _union(*allocations: AllocationResult | None) -> AllocationResult | None:
    """One allocation holding every device any of ``allocations`` holds (each device once)."""
    seen: dict[DeviceID, DeviceResult] = {}
    for allocation in allocations:
        for result in allocation.devices if allocation is not None else ():
            seen.setdefault(result.device_id, result)
    return AllocationResult(devices=tuple(seen.values())) if seen else None
