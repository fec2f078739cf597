"""Resource pools as one node sees them (docs/semantics.md §4).

``SliceSnapshot`` indexes an immutable set of ResourceSlices once; ``pools_for(node)`` gathers the
pools relevant to a node, applying the generation rules (highest wins, obsolete pools dropped),
completeness (``resourceSliceCount``) and validity checks, in the deterministic 1.36 order:
pools by (driver, pool name), binding-condition pools last; slices by name; devices as listed.

The result is memoised per node (name + labels) for the snapshot's lifetime, so a warm filter pays
one dict lookup per node. Changed slices make a new snapshot incrementally (``with_changes``): the
nodes they concern lose their memoised pools (``invalidated``), the others keep them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from extender.core.model import (
    AllocatedState,
    CounterSet,
    Device,
    DeviceID,
    Features,
    NodeInfo,
    ResourceSlice,
)
from extender.core.nodeselector import node_matches
from extender.core.quantity import Quantity

__all__ = [
    "CounterKey",
    "DeviceEntry",
    "NodeView",
    "Pool",
    "PoolNodeSelectionError",
    "SliceSnapshot",
    "counters_left",
    "device_matches_node",
    "gather_pools",
    "pool_status",
]

#: Identifies one counter set: (slice name, set name) for the 1.34 per-slice layout, where a slice
#: holds both devices and sharedCounters; ("", set name) for the 1.35 per-pool layout.
CounterKey = tuple[str, str]


class PoolNodeSelectionError(Exception):
    """A slice's node selector is malformed (upstream: fatal for the attempt)."""


@dataclass(frozen=True, slots=True, eq=False)
class DeviceEntry:
    """A device together with where it lives; built once per pool, reused by every allocation."""

    id: DeviceID
    device: Device
    slice: ResourceSlice
    index: int  # position in slice.devices (selector results are aligned with it)
    #: Counter sets this device draws from, resolved to their keys: ((key, counters), ...).
    counters: tuple[tuple[CounterKey, Mapping[str, Quantity]], ...] = ()
    #: No counters, taints or multiple allocations: taking it needs no check beyond "free" and
    #: "selected" (the allocator's first-path shortcut relies on this).
    plain: bool = True


@dataclass(slots=True, eq=False, kw_only=True)
class Pool:
    driver: str
    name: str
    generation: int
    incomplete: bool = False
    invalid_reason: str | None = None
    #: Device slices targeting the node, sorted by name.
    slices: tuple[ResourceSlice, ...] = ()
    #: Devices of ``slices`` in order, as entries (only devices that target the node).
    entries: tuple[DeviceEntry, ...] = ()
    #: Every device of the pool's current generation, on any node: consumption of allocated ones
    #: reduces the shared counters available here.
    all_entries: tuple[DeviceEntry, ...] = ()
    counter_sets: dict[CounterKey, CounterSet] = field(default_factory=dict)
    has_binding_conditions: bool = False

    @property
    def usable(self) -> bool:
        return not self.incomplete and self.invalid_reason is None


@dataclass(frozen=True, slots=True, eq=False)
class NodeView:
    """What the allocator needs of one node, prepared once per snapshot: its pools, the devices of
    the usable pools flattened in search order, and where counter-consuming devices live."""

    pools: tuple[Pool, ...]
    devices: tuple[DeviceEntry, ...]
    has_invalid_pool: bool
    #: id(entry) -> its pool, for entries that consume shared counters.
    counter_pools: Mapping[int, Pool]

    @classmethod
    def of(cls, pools: tuple[Pool, ...]) -> NodeView:
        usable = [p for p in pools if p.usable]
        return cls(
            pools=pools,
            devices=tuple(e for p in usable for e in p.entries),
            has_invalid_pool=any(p.invalid_reason is not None for p in pools),
            counter_pools={id(e): p for p in usable if p.counter_sets for e in p.entries if e.counters},
        )


def device_matches_node(device: Device, node: NodeInfo) -> bool:
    """Per-device node selection (perDeviceNodeSelection slices)."""
    if device.node_name:
        return device.node_name == node.name
    if device.all_nodes:
        return True
    if device.node_selector is not None:
        return node_matches(device.node_selector, node)
    return False


def _slice_targets_node(s: ResourceSlice, node: NodeInfo) -> bool:
    try:
        if s.node_name:
            return s.node_name == node.name
        if s.all_nodes:
            return True
        if s.node_selector is not None:
            return node_matches(s.node_selector, node)
        if s.per_device_node_selection:
            return any(device_matches_node(d, node) for d in s.devices)
    except ValueError as exc:
        raise PoolNodeSelectionError(f"failed to perform node selection for slice {s.name}: {exc}") from exc
    return False


def _is_counter_slice(s: ResourceSlice) -> bool:
    """A 1.35-layout slice that only carries shared counters: relevant to every node."""
    return bool(s.shared_counters) and not s.devices


class SliceSnapshot:
    """All ResourceSlices at one moment, indexed for per-node pool gathering."""

    __slots__ = ("_by_node", "_by_pool", "_cache", "_others", "invalidated", "slices")
    # A node's view is rebuilt when its labels change (node selectors may match differently).

    def __init__(self, slices: Iterable[ResourceSlice]) -> None:
        self.slices: tuple[ResourceSlice, ...] = tuple(slices)
        self._by_node: dict[str, list[ResourceSlice]] = {}
        self._others: list[ResourceSlice] = []
        self._by_pool: dict[tuple[str, str], list[ResourceSlice]] = {}
        for s in self.slices:
            self._by_pool.setdefault((s.driver, s.pool.name), []).append(s)
            if s.node_name and not s.shared_counters:
                self._by_node.setdefault(s.node_name, []).append(s)
            else:
                self._others.append(s)
        self._cache: dict[str, tuple[Mapping[str, str], Features, NodeView]] = {}
        #: For a snapshot made by ``with_changes``: the nodes whose views it did not keep from the
        #: previous snapshot, so that caches derived from views can drop exactly those; None when
        #: no view was kept (every node may see something new).
        self.invalidated: frozenset[str] | None = None

    def node_view(self, node: NodeInfo, features: Features) -> NodeView:
        """The node's pools and devices, memoised per node name, labels and features."""
        view = self.cached_view(node, features)
        if view is not None:
            return view
        view = NodeView.of(gather_pools(self, node, features))
        # NodeInfo mappings are never changed after construction, so keeping the object is safe.
        self._cache[node.name] = (node.labels, features, view)
        return view

    def cached_view(self, node: NodeInfo, features: Features) -> NodeView | None:
        """The node's view if ``node_view`` has made it already (for these labels and features)."""
        cached = self._cache.get(node.name)
        if (
            cached is not None
            and (cached[1] is features or cached[1] == features)
            and (cached[0] is node.labels or cached[0] == node.labels)
        ):
            return cached[2]
        return None

    def pools_for(self, node: NodeInfo, features: Features) -> tuple[Pool, ...]:
        return self.node_view(node, features).pools

    def with_changes(
        self,
        changes: Iterable[tuple[ResourceSlice | None, ResourceSlice | None]],
        slices: Iterable[ResourceSlice],
    ) -> SliceSnapshot:
        """A snapshot of ``slices`` (the new full set) that keeps this one's memoised node views
        where ``changes`` ((old, new) slice pairs) cannot have altered them.

        A node-local slice concerns its own node, and every node of its pool when the pool spans
        several slices (completeness and shared counters are pool-wide). Any other slice (node
        selector, allNodes, per-device selection, counter-only) may concern every node.
        """
        fresh = SliceSnapshot(slices)
        affected: set[str] = set()
        for pair in changes:
            for s in pair:
                if s is None:
                    continue
                if not s.node_name or s.shared_counters or s.per_device_node_selection:
                    return fresh  # may reach any node: start cold
                affected.add(s.node_name)
                pool = (s.driver, s.pool.name)
                for snapshot in (self, fresh):
                    for other in snapshot._by_pool.get(pool, ()):
                        if other is not s:
                            if not other.node_name or other.shared_counters:
                                return fresh
                            affected.add(other.node_name)
        fresh._cache = {name: entry for name, entry in self._cache.items() if name not in affected}
        fresh.invalidated = frozenset(affected)
        return fresh

    def slices_of_pool(self, driver: str, pool: str) -> list[ResourceSlice]:
        return self._by_pool.get((driver, pool), [])

    def candidate_slices(self, node: NodeInfo) -> list[ResourceSlice]:
        """Slices that may be relevant to the node, in input order (before relevance checks)."""
        own = self._by_node.get(node.name)
        if not own:
            return self._others
        if not self._others:
            return own
        return own + self._others


def _relevant(s: ResourceSlice, node: NodeInfo, features: Features) -> bool:
    if not features.partitionable_devices and (s.per_device_node_selection or s.shared_counters):
        return False
    if _is_counter_slice(s):
        return True
    return _slice_targets_node(s, node)


def gather_pools(snapshot: SliceSnapshot, node: NodeInfo, features: Features) -> tuple[Pool, ...]:
    """Spec §4 steps 1-5 for one node. Raises PoolNodeSelectionError for malformed node selectors."""
    groups: dict[tuple[str, str], list[ResourceSlice]] = {}
    for s in snapshot.candidate_slices(node):
        if not _relevant(s, node, features):
            continue
        key = (s.driver, s.pool.name)
        group = groups.get(key)
        if group is None or s.pool.generation > group[0].pool.generation:
            groups[key] = [s]
        elif s.pool.generation == group[0].pool.generation:
            group.append(s)
        # lower generation: dropped

    pools: list[Pool] = []
    for (driver, pool_name), relevant in groups.items():
        relevant.sort(key=lambda s: s.name)
        generation = relevant[0].pool.generation
        expected = relevant[0].pool.resource_slice_count
        all_current = relevant
        if len(relevant) == expected and any(s.shared_counters for s in relevant):
            # Counters are pool-wide: devices of this generation on other nodes draw from them too.
            everything = snapshot.slices_of_pool(driver, pool_name)
            all_current = sorted((s for s in everything if s.pool.generation == generation), key=lambda s: s.name)
        elif len(relevant) != expected:
            everything = snapshot.slices_of_pool(driver, pool_name)
            if any(s.pool.generation > generation for s in everything):
                continue  # obsolete: a newer generation is being published elsewhere
            all_current = sorted((s for s in everything if s.pool.generation == generation), key=lambda s: s.name)
            if len(all_current) != expected:
                pools.append(Pool(driver=driver, name=pool_name, generation=generation, incomplete=True))
                continue
        pools.append(_build_pool(driver, pool_name, generation, relevant, all_current, node, features))

    pools.sort(key=lambda p: (p.has_binding_conditions, p.driver, p.name))
    return tuple(pools)


def _build_pool(
    driver: str,
    pool_name: str,
    generation: int,
    relevant: list[ResourceSlice],
    all_current: list[ResourceSlice],
    node: NodeInfo,
    features: Features,
) -> Pool:
    pool = Pool(driver=driver, name=pool_name, generation=generation)
    pool.invalid_reason = next((s.invalid_reason for s in all_current if s.invalid_reason), None)

    # Counter sets: per pool (1.35, counter-only slices) or per slice (1.34, beside the devices).
    counter_sets: dict[CounterKey, CounterSet] = {}
    for s in all_current:
        if not s.shared_counters:
            continue
        scope = "" if _is_counter_slice(s) else s.name
        for cs in s.shared_counters:
            key = (scope, cs.name)
            if key in counter_sets and pool.invalid_reason is None:
                pool.invalid_reason = f"duplicate counter set name {cs.name}"
            counter_sets[key] = cs
    pool.counter_sets = counter_sets

    relevant_ids = {id(s) for s in relevant}
    entries: list[DeviceEntry] = []
    all_entries: list[DeviceEntry] = []
    seen_names: set[str] = set()
    for s in all_current:
        if _is_counter_slice(s):
            continue
        targeting = id(s) in relevant_ids
        per_device = s.per_device_node_selection
        for index, device in enumerate(s.devices):
            counters, problem = _resolve_counters(s, device, counter_sets)
            if not features.partitionable_devices:
                # Without the feature, counter references are not validated: such devices are
                # simply never allocatable (the allocator checks entry.counters / consumes_counters).
                counters, problem = (), None
            if problem and pool.invalid_reason is None:
                pool.invalid_reason = problem
            selector = device.node_selector if per_device else s.node_selector
            # A selector with several terms makes building the claim's node selector fail
            # (upstream's fatal "unsupported ResourceSlice.NodeSelector"): never take the shortcut.
            plain = not (
                device.consumes_counters
                or device.taints
                or device.allow_multiple_allocations
                or (selector is not None and len(selector.terms) > 1)
            )
            entry = DeviceEntry(DeviceID(driver, pool_name, device.name), device, s, index, counters, plain)
            all_entries.append(entry)
            if not targeting:
                continue
            if device.name in seen_names and pool.invalid_reason is None:
                pool.invalid_reason = f"duplicate device name {device.name}"
            seen_names.add(device.name)
            if per_device and not _device_targets(device, node):
                continue
            if device.binding_conditions:
                pool.has_binding_conditions = True
            entries.append(entry)
    pool.slices = tuple(s for s in relevant if not _is_counter_slice(s))
    pool.entries = tuple(entries)
    pool.all_entries = tuple(all_entries)
    return pool


def _device_targets(device: Device, node: NodeInfo) -> bool:
    try:
        return device_matches_node(device, node)
    except ValueError as exc:
        raise PoolNodeSelectionError(f"failed to perform node selection for device {device.name}: {exc}") from exc


def _resolve_counters(
    s: ResourceSlice, device: Device, counter_sets: Mapping[CounterKey, CounterSet]
) -> tuple[tuple[tuple[CounterKey, Mapping[str, Quantity]], ...], str | None]:
    if not device.consumes_counters:
        return (), None
    scope = s.name if s.shared_counters else ""
    resolved: list[tuple[CounterKey, Mapping[str, Quantity]]] = []
    for consumption in device.consumes_counters:
        key = (scope, consumption.counter_set)
        counter_set = counter_sets.get(key)
        if counter_set is None:
            return (), f"counter set {consumption.counter_set} not found"
        for counter in consumption.counters:
            if counter not in counter_set.counters:
                return (), f"counter {counter} not found in counter set {consumption.counter_set}"
        resolved.append((key, consumption.counters))
    return tuple(resolved), None


def counters_left(pool: Pool, allocated: AllocatedState) -> dict[CounterKey, dict[str, Quantity]]:
    """The pool's shared counters minus what its devices in use consume: an exclusively allocated
    device, or a shared one in use by any claim (counted once: the 1.37 fix); admin-access
    allocations are not in ``allocated`` and so consume nothing. What the allocator checks a
    partition against, and what the device map shows."""
    left = {key: dict(counter_set.counters) for key, counter_set in pool.counter_sets.items()}
    if not left:
        return left
    shared = {share.device for share in allocated.shared_ids}
    shared.update(allocated.consumed_capacity)
    for entry in pool.all_entries:
        if not entry.counters or (entry.id not in allocated.devices and entry.id not in shared):
            continue
        for key, counters in entry.counters:
            totals = left.get(key)
            if totals is None:
                continue
            for name, amount in counters.items():
                if name in totals:
                    totals[name] = totals[name] - amount
    return left


def pool_status(pool: Pool) -> str:
    """``ok``, ``incomplete`` (not all of its slices published) or ``invalid``: what explain, the
    debug views and the device map say of a pool."""
    if pool.incomplete:
        return "incomplete"
    return "invalid" if pool.invalid_reason is not None else "ok"
