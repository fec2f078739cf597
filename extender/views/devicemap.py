"""The device map: a read model of the cluster's devices for ``/ui/`` (docs/ui.md); no HTTP here.

``DeviceMap`` answers what the page shows: a summary (revision, counters, device totals per state,
facets), a page of nodes with their devices' states, one node in detail, the pools and their status,
and the pending pods (with the extender's explanation for the first ones).

A device's state comes from who holds it: allocated claims (the store), in-flight binds and
tentative holds (the ledger), admin-access claims, and from the device itself (taints, multiple
allocations). ``device_state`` says which, in this order: ``binding``, ``held`` (an in-flight entry
of the ledger), ``shared`` (a device that allows several allocations, held by at least one), ``allocated``,
``nominated`` (held for a preemptor by a nomination, ``state/cache/nominations.py``), ``admin`` (held only by
admin-access claims), ``tainted`` (NoSchedule/NoExecute), ``free``.

Cost (docs/performance.md, "Device map"): nothing is rebuilt for the whole cluster per request.

- Who holds which device is kept up to date claim by claim: the store tells its claim listeners
  of every claim and pod change, and the listener only notes the key; the next read applies them.
  The ledger is small (binds in flight and holds): it is re-read when its change counter moves, and
  compared with what was read before; so are the nominations (devices held for preemptors).
- Each node is rendered once (its devices as JSON-ready dicts, counts per state) and kept until
  something it shows changes: a holder of a device of one of its pools (which marks exactly the
  nodes that rendered that pool), or its view of the slices (a new ``NodeView`` object: slices or
  labels changed). Whether the slices, nodes or classes may have changed is known without looking at
  them: the store's revision moved by more than the number of claim and pod changes it announced.
- The summary's totals are kept as a sum that each re-rendered node corrects; facets and pools are
  kept until the slices or nodes change.

So after a bind, a page of 50 nodes and the summary cost the nodes whose pools the bind touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog

from extender.core.allocator import BLOCKING_TAINT_EFFECTS
from extender.core.cel import CelCompileError
from extender.core.convert import encode_attribute_value
from extender.core.model import Device, DeviceClass, DeviceID, ResourceSlice
from extender.core.pools import CounterKey, DeviceEntry, NodeView, Pool, PoolNodeSelectionError, counters_left
from extender.core.quantity import Quantity
from extender.state import cooperative
from extender.state.cache.claims import pod_claim_refs
from extender.state.cache.cluster import ClusterView
from extender.state.cache.pods import deleting, finished, pod_priority
from extender.state.clock import epoch_seconds
from extender.state.filter.rejected import RejectedPods
from extender.state.stats import ServiceStats
from extender.views import why as why_module
from extender.views.debug import DebugViews
from extender.views.holders import Holder, claim_holders, in_flight_holders

__all__ = [
    "BLOCKING_TAINT_EFFECTS",
    "DEVICE_STATES",
    "EXPLAINED_PODS",
    "EXPLAIN_SHARE",
    "MAX_PAGE",
    "DeviceMap",
    "Holder",
    "NodeFilter",
    "UnknownDeviceClass",
    "counters_left",
    "device_state",
    "device_use",
    "is_pending",
    "pool_summaries",
]

log = structlog.get_logger()

#: Every state a device can be in, in the order the totals list them.
DEVICE_STATES = ("free", "allocated", "binding", "held", "nominated", "tainted", "shared", "admin")
_STATE_INDEX = {state: i for i, state in enumerate(DEVICE_STATES)}
#: Taint effects that keep a device from new allocations (``None`` effects and others do not).
#: The largest page of nodes one request may ask for.
MAX_PAGE = 500
#: Pending pods explained in the list (each explanation is a filter over every node).
EXPLAINED_PODS = 20
#: The most of the time explanations are made in (the rest is the scheduler's).
EXPLAIN_SHARE = 0.2
#: Label keys left out of the facets: one value per node says nothing a filter needs.
_UNIQUE_LABELS = frozenset({"kubernetes.io/hostname"})
#: A label key with more distinct values than this is left out of the facets too.
MAX_FACET_VALUES = 64
#: Pending claim changes noted before a read; past this the next read rebuilds the holders.
_MAX_NOTED = 20_000
#: Filtered node lists remembered per revision.
_FILTER_CACHE_SIZE = 16
_MISSING: Any = object()


class UnknownDeviceClass(ValueError):
    """A ``deviceClass`` filter names a class the store does not have."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFilter:
    """What a page of nodes is narrowed to (docs/ui.md): device filters keep only some devices of a
    node (and drop nodes left with none), node filters keep only some nodes."""

    driver: str = ""
    device_class: str = ""
    namespace: str = ""
    label_key: str = ""
    label_value: str | None = None  # None: the node has the label, with any value
    q: str = ""

    @property
    def filters_devices(self) -> bool:
        return bool(self.driver or self.device_class or self.namespace)

    @property
    def filters_nodes(self) -> bool:
        return bool(self.label_key or self.q)

    def selects_node(self, name: str, labels: Mapping[str, str]) -> bool:
        if self.q and self.q.lower() not in name.lower():
            return False
        if self.label_key:
            value = labels.get(self.label_key)
            if value is None or (self.label_value is not None and value != self.label_value):
                return False
        return True


# --- pure parts ---------------------------------------------------------------------------------


def device_state(device: Device, holders: Sequence[Holder], taken: bool = False, nominated: bool = False) -> str:
    """The state of one device held by ``holders`` (module docstring); ``taken`` says the store
    counts it in use although no known claim holds it (a claim that arrived unreadable);
    ``nominated`` that a nomination holds it for a preemptor."""
    binding = held = allocated = admin = False
    for holder in holders:
        if holder.admin_access:
            admin = True
        elif holder.kind == "binding":
            binding = True
        elif holder.kind == "held":
            held = True
        else:
            allocated = True
    if binding:
        return "binding"
    if held:
        return "held"
    if allocated:
        return "shared" if device.allow_multiple_allocations else "allocated"
    if taken:
        return "allocated"
    if nominated:
        return "nominated"
    if admin:
        return "admin"
    if any(taint.effect in BLOCKING_TAINT_EFFECTS for taint in device.taints):
        return "tainted"
    return "free"


def device_use(
    entry: DeviceEntry,
    state: str,
    holders: Sequence[Holder],
    consumed: Mapping[str, Quantity] | None,
    left: Mapping[CounterKey, Mapping[str, Quantity]],
) -> str:
    """What the page says of a device's use: for a shared device, how many claims hold it and how
    much of its consumable capacity they use; for a free partition whose counter set its siblings
    have used up, that it cannot be allocated now and why; else nothing."""
    device = entry.device
    waiting = sorted({condition for h in holders for condition in h.waiting})
    if state == "binding" and waiting:
        return f"waiting for {', '.join(waiting)}"
    if device.allow_multiple_allocations:
        claims = len({h.claim for h in holders if not h.admin_access})
        if not claims:
            return ""
        parts = [f"{claims} claim{'s' if claims != 1 else ''}"]
        for name, amount in sorted((consumed or {}).items()):
            capacity = device.capacity.get(name)
            parts.append(f"{name} {amount}/{capacity.value}" if capacity is not None else f"{name} {amount}")
        return ", ".join(parts)
    if state in ("free", "tainted") and entry.counters:
        for key, needs in entry.counters:
            available = left.get(key, {})
            for name, amount in needs.items():
                have = available.get(name)
                if have is not None and have < amount:
                    return f"unavailable: counter set {key[1]} has {have} {name} left, the device needs {amount}"
    return ""


def is_pending(pod: Mapping[str, Any]) -> bool:
    """A pod kube-scheduler still has to place that uses resource claims: no ``spec.nodeName``,
    not finished, not being deleted."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName") or not spec.get("resourceClaims"):
        return False
    return not deleting(pod) and not finished(pod)


def _uses_claims_on_node(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    return bool(spec.get("nodeName") and spec.get("resourceClaims")) and not finished(pod)


def _pod_claims(pod: Mapping[str, Any], namespace: str) -> tuple[list[str], list[str]]:
    """The keys of the claims a pod names (template claims once created), and the templates of
    those not created yet."""
    claims: list[str] = []
    templates: list[str] = []
    for ref in pod_claim_refs(pod):
        if ref.claim:
            claims.append(f"{namespace}/{ref.claim}")
        elif ref.template is not None:
            templates.append(f"{namespace}/{ref.template}")
    return claims, templates


def pool_summaries(slices: Iterable[ResourceSlice], view_of: Callable[[str], NodeView | None]) -> list[dict[str, Any]]:
    """Every pool with its status (docs/ui.md, ``ui/api/pools``), sorted by driver and pool name.

    Only the newest generation counts. ``incomplete``: it has not as many slices as
    ``resourceSliceCount``; ``invalid``: a slice was malformed, a device name repeats, a counter
    reference is broken (for a node-local pool, the reason the allocator gives in the node's view,
    ``view_of(node)``)."""
    groups: dict[tuple[str, str], list[ResourceSlice]] = {}
    for s in slices:
        groups.setdefault((s.driver, s.pool.name), []).append(s)
    out: list[dict[str, Any]] = []
    for (driver, name), members in sorted(groups.items()):
        generation = max(s.pool.generation for s in members)
        current = sorted((s for s in members if s.pool.generation == generation), key=lambda s: s.name)
        expected = current[0].pool.resource_slice_count
        nodes = {s.node_name for s in current}
        node = next(iter(nodes)) if len(nodes) == 1 else None
        status, reason = "complete", ""
        if len(current) != expected:
            status = "incomplete"
            reason = f"{len(current)} of {expected} slices of generation {generation}"
        else:
            problem = next((s.invalid_reason for s in current if s.invalid_reason), None)
            if problem is None and node is not None:
                view = view_of(node)
                pool = next((p for p in view.pools if p.driver == driver and p.name == name), None) if view else None
                problem = pool.invalid_reason if pool is not None else None
            if problem is None and node is None:
                seen: set[str] = set()
                for s in current:
                    for device in s.devices:
                        if device.name in seen:
                            problem = f"duplicate device name {device.name}"
                            break
                        seen.add(device.name)
                    if problem:
                        break
            if problem:
                status, reason = "invalid", problem
        out.append(
            {
                "driver": driver,
                "pool": name,
                "node": node,
                "generation": generation,
                "slices": len(current),
                "expectedSlices": expected,
                "devices": sum(len(s.devices) for s in current),
                "status": status,
                "reason": reason,
            }
        )
    return out


def _taint_json(device: Device) -> list[dict[str, str]]:
    return [{"key": t.key, "value": t.value, "effect": t.effect} for t in device.taints]


def _unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


# --- the read model -----------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class _Row:
    """What filters need of one rendered device."""

    entry: DeviceEntry
    namespaces: frozenset[str]
    local: bool
    state: str


@dataclass(slots=True, eq=False)
class _NodeRender:
    name: str
    view: NodeView | None
    labels: Mapping[str, str]
    rows: tuple[_Row, ...]
    devices: tuple[dict[str, Any], ...]
    #: ``{"name", "labels", "counts", "devices"}``: the page's JSON for the node, shared (read-only).
    json: dict[str, Any]
    #: Per state (``DEVICE_STATES`` order), this node's own devices (node-local slices).
    local_counts: tuple[int, ...]
    #: The pools whose devices are shown: a change of any of their devices' holders redraws the node.
    pools: tuple[tuple[str, str], ...]
    #: Per class name: the class object the mask was made for, and per row whether it selects it.
    class_masks: dict[str, tuple[DeviceClass, tuple[bool, ...]]] = field(default_factory=dict)
    #: Per device filter (driver, class, namespace): the page JSON it leaves (None: no device).
    filtered: dict[tuple[str, str, str], dict[str, Any] | None] = field(default_factory=dict)


@dataclass(slots=True, eq=False)
class _Pending:
    key: str
    uid: str
    namespace: str
    priority: int
    created: float | None
    claims: tuple[str, ...]
    templates: tuple[str, ...]


def _counts(states: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for state in states:
        counts[state] = counts.get(state, 0) + 1
    return {state: counts[state] for state in DEVICE_STATES if state in counts}


#: How long ``DeviceMap.prepare`` works before it lets the event loop run (the allocator's slice).
PREPARE_SLICE_SECONDS = 0.01


class DeviceMap:
    """The read model behind ``/ui/`` over one service's cluster; see the module docstring.

    ``cluster`` is the service's ``ClusterView``; ``stats`` its counters; ``views`` its debug
    views (for the pending pods' explanations); ``extra_counters`` more counters for the summary
    (e.g. preemptions; each only grows: their sum is part of the revision); ``explain_share`` the
    most of the time the pending pods' explanations may take (``pending_explained``); ``rejected``
    the pods the service's last filter found no node for (listed and explained first)."""

    def __init__(
        self,
        cluster: ClusterView,
        stats: ServiceStats,
        views: DebugViews,
        *,
        extra_counters: Callable[[], Mapping[str, int]] | None = None,
        clock: Callable[[], float] = time.time,
        explain_share: float = EXPLAIN_SHARE,
        rejected: RejectedPods | None = None,
        timer: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.ledger = cluster.ledger
        self.features = cluster.features
        self.stats = stats
        self.views = views
        self._extra_counters = extra_counters
        self._clock = clock
        # how long each explanation took, and the rest after it (tests inject both)
        self._timer = timer
        self._sleep = sleep
        self._synced = cluster.backend.synced
        self._synced_changes = 0
        # what the listeners noted since the last read
        self._noted_claims: set[str] = set()
        self._noted_pods: set[str] = set()
        self._noted = 0
        self._overflow = False
        self._store_revision = self.store.revision
        self._ledger_changes = -1
        self.nominations = cluster.nominations
        self._nomination_changes = -1
        #: Devices nominations hold: the ``nomination`` JSON of each (preemptor, priority, until).
        self._nominated: dict[DeviceID, dict[str, Any]] = {}
        self.rejected = rejected if rejected is not None else RejectedPods()
        self._rejected_changes = self.rejected.changes
        # who holds what
        self._holders: dict[DeviceID, list[Holder]] = {}
        self._claim_devices: dict[str, tuple[DeviceID, ...]] = {}
        self._claim_namespaces: dict[str, int] = {}
        self._flight: dict[DeviceID, list[Holder]] = {}
        #: Claims last seen unreadable: the store holds devices for them that the map cannot name.
        self._unreadable: set[str] = set()
        # pods
        self._pending: dict[str, _Pending] = {}
        self._pending_sorted: list[_Pending] | None = None
        self._placed: set[str] = set()  # pods on a node that use claims
        self._pod_namespaces: dict[str, int] = {}
        self._pod_namespace_of: dict[str, str] = {}
        # nodes
        self._snapshot: object = None
        self._names_snapshot: object = None
        self._node_keys: set[str] = set()
        self._names: list[str] = []
        self._name_set: frozenset[str] = frozenset()
        self._renders: dict[str, _NodeRender] = {}
        self._dirty: set[str] = set()
        self._pool_nodes: dict[tuple[str, str], set[str]] = {}
        self._structural = True
        # derived, kept until what they depend on changes
        self._totals: list[int] | None = None
        self._remote_states: dict[DeviceID, str] = {}
        self._facets: dict[str, Any] | None = None
        self._pools: tuple[object, list[dict[str, Any]]] | None = None
        self._pools_by_driver: tuple[object, dict[str, list[dict[str, Any]]]] = (None, {})
        self._pool_index: tuple[dict[tuple[str, str], dict[str, Any]], dict[str, list[dict[str, Any]]]] = ({}, {})
        self._filtered: dict[tuple[int, NodeFilter], list[dict[str, Any]]] = {}
        self._node_matches: dict[tuple[str, str | None, str], list[str]] = {}
        # pending pods' explanations: by pod UID, with the data revision they were made at
        self.explain_share = explain_share
        self._explanations: dict[str, tuple[int, dict[str, Any]]] = {}
        self._wanted: dict[str, str] = {}  # UID -> pod key, most important first
        self._explainer: asyncio.Task[None] | None = None
        self._explained = 0
        self._preparing = asyncio.Lock()
        self._rebuild_holders()
        self._rebuild_pods()
        self.store.claim_listeners.append(self._noted_change)

    # --- change tracking ----------------------------------------------------------------------

    def _noted_change(self, kind: str, key: str) -> None:
        """The store's claim listener: note the key only (the store is mid-change)."""
        self._noted += 1
        if self._overflow:
            return
        if kind == "ResourceClaim":
            self._noted_claims.add(key)
        elif kind == "Pod":
            self._noted_pods.add(key)
        if len(self._noted_claims) + len(self._noted_pods) > _MAX_NOTED:
            self._overflow = True
            self._noted_claims.clear()
            self._noted_pods.clear()

    def revision(self) -> int:
        """A number that changes whenever anything the map shows may have changed: the store's
        revision, the ledger's and the nominations' changes, the bind counters, the changes of the
        rejected pods and the explanations made (all only grow). Expired holds and nominations are
        dropped first (``_refresh``), so their end is a change too."""
        self._refresh()
        return self._revision()

    def _refresh(self) -> None:
        self.cluster.refresh()
        if self.nominations:
            self.nominations.expire(self.store.pods)

    def _revision(self) -> int:
        return self._data_revision() + self._explained + self.rejected.changes

    def _data_revision(self) -> int:
        """What the cluster's state alone moves (explanations are made of it): also the backend's
        sync state (it can change with nothing in the store: a last kind listed empty, a watch
        failing for good) and the extra counters (which only grow), as the summary shows both."""
        stats = self.stats
        synced = self.cluster.backend.synced
        if synced != self._synced:
            self._synced, self._synced_changes = synced, self._synced_changes + 1
        extra = sum(self._extra_counters().values()) if self._extra_counters is not None else 0
        return (
            self.store.revision
            + self.ledger.changes
            + self.nominations.changes
            + stats.binds_ok
            + sum(stats.binds_failed.values())
            + self._synced_changes
            + extra
        )

    def _sync(self) -> int:
        """Apply what changed since the last read; returns the revision the answer is of."""
        self._refresh()
        store = self.store
        if store.revision != self._store_revision:
            if store.revision - self._store_revision != self._noted:
                self._structural = True  # slices, nodes, classes or templates may have changed
            self._store_revision = store.revision
            self._noted = 0
            if self._overflow:
                self._overflow = False
                self._rebuild_holders()
                self._rebuild_pods()
                self._dirty.update(self._renders)
            else:
                claims, pods = self._noted_claims, self._noted_pods
                self._noted_claims, self._noted_pods = set(), set()
                for key in claims:
                    self._claim_changed(key)
                for key in pods:
                    self._pod_changed(key)
        if self.ledger.changes != self._ledger_changes:
            self._ledger_changed()
        if self.nominations.changes != self._nomination_changes:
            self._nominations_changed()
        if self.rejected.changes != self._rejected_changes:
            self._rejected_changes = self.rejected.changes
            self._pending_sorted = None  # rejected pods come first
        snapshot = store.snapshot()
        if snapshot is not self._snapshot:
            self._snapshot = snapshot
            self._structural = True
        if self._structural:
            self._restructure()
        return self._revision()

    def _rebuild_holders(self) -> None:
        self._holders, self._claim_devices, self._claim_namespaces = {}, {}, {}
        self._unreadable = set(self.store.invalid_claims)
        for key in self.store.claims:
            self._claim_changed(key)

    def _claim_changed(self, key: str) -> None:
        """Make the holders of one claim's devices agree with the store; mark the nodes of the
        pools concerned for re-rendering."""
        touched: set[DeviceID] = set()
        old = self._claim_devices.pop(key, None)
        namespace = key.partition("/")[0]
        if old is not None:
            self._count(self._claim_namespaces, namespace, -1)
            for device in old:
                holders = self._holders.get(device)
                if holders is not None:
                    holders[:] = [h for h in holders if h.claim != key]
                    if not holders:
                        del self._holders[device]
                touched.add(device)
        claim = self.store.claims.get(key)
        if claim is not None:
            self._count(self._claim_namespaces, namespace, 1)
            devices: list[DeviceID] = []
            for device, holder in claim_holders(claim, self.store.raw_claims.get(key) or {}):
                self._holders.setdefault(device, []).append(holder)
                devices.append(device)
                touched.add(device)
            self._claim_devices[key] = tuple(devices)
        # What an unreadable claim holds is not known here: redraw everything when one starts or
        # stops being unreadable (deleted, or readable again) as well.
        if key in self.store.invalid_claims:
            self._unreadable.add(key)
            self._dirty.update(self._renders)
        elif key in self._unreadable:
            self._unreadable.discard(key)
            self._dirty.update(self._renders)
        self._touched(touched)

    @staticmethod
    def _count(counter: dict[str, int], key: str, delta: int) -> None:
        value = counter.get(key, 0) + delta
        if value > 0:
            counter[key] = value
        else:
            counter.pop(key, None)

    def _device_status(self, device: DeviceID, holders: Sequence[Holder]) -> list[dict[str, Any]]:
        """What the drivers reported for the device in its claims' ``status.devices`` (conditions,
        network data), per claim; [] when nothing was."""
        out: list[dict[str, Any]] = []
        for claim in _unique(h.claim for h in holders):
            for entry in ((self.store.raw_claims.get(claim) or {}).get("status") or {}).get("devices") or []:
                if not isinstance(entry, dict):
                    continue
                if (entry.get("driver"), entry.get("pool"), entry.get("device")) != tuple(device):
                    continue
                reported: dict[str, Any] = {"claim": claim}
                if entry.get("shareID"):
                    reported["shareID"] = entry["shareID"]
                reported["conditions"] = [
                    {k: c.get(k) for k in ("type", "status", "reason", "message") if c.get(k) is not None}
                    for c in entry.get("conditions") or []
                    if isinstance(c, dict)
                ]
                if entry.get("networkData"):
                    reported["networkData"] = entry["networkData"]
                out.append(reported)
        return out

    def _ledger_changed(self) -> None:
        flight = in_flight_holders(self.ledger)
        old = self._flight
        touched = {d for d in old.keys() | flight.keys() if old.get(d) != flight.get(d)}
        self._flight = flight
        self._ledger_changes = self.ledger.changes
        self._touched(touched)

    def _nominations_changed(self) -> None:
        nominated: dict[DeviceID, dict[str, Any]] = {}
        old = self._nominated
        wall, monotonic = self._clock(), self.nominations.clock()
        for nomination in self.nominations.by_uid.values():
            body: dict[str, Any] | None = None
            for result in nomination.results:
                for device in result.devices:
                    device_id = device.device_id
                    if body is None:
                        known = old.get(device_id)
                        if known is not None and known["podUid"] == nomination.pod_uid:
                            body = known  # the same nomination: its time stays as it was shown
                        else:
                            until = datetime.fromtimestamp(round(wall + nomination.expires - monotonic), UTC)
                            body = {
                                "pod": nomination.pod_key,
                                "podUid": nomination.pod_uid,
                                "priority": nomination.priority,
                                "until": until.strftime("%Y-%m-%dT%H:%M:%SZ"),
                            }
                    nominated[device_id] = body
        touched = {d for d in old.keys() | nominated.keys() if old.get(d) is not nominated.get(d)}
        self._nominated = nominated
        self._nomination_changes = self.nominations.changes
        self._touched(touched)

    def _touched(self, devices: Iterable[DeviceID]) -> None:
        pools = {(device.driver, device.pool) for device in devices}
        for pool in pools:
            self._dirty.update(self._pool_nodes.get(pool, ()))
        if pools:
            self._filtered.clear()

    def _rebuild_pods(self) -> None:
        self._pending, self._placed, self._pod_namespaces, self._pod_namespace_of = {}, set(), {}, {}
        for key in self.store.pods:
            self._pod_changed(key)

    def _pod_changed(self, key: str) -> None:
        gone = self._pending.pop(key, None)
        if gone is not None and self._pending_sorted is not None:
            self._pending_sorted.remove(gone)  # the order of the others stands
        self._placed.discard(key)
        namespace = self._pod_namespace_of.pop(key, None)
        if namespace is not None:
            self._count(self._pod_namespaces, namespace, -1)
        pod = self.store.pods.get(key)
        if pod is None:
            return
        pending = is_pending(pod)
        if pending or _uses_claims_on_node(pod):
            namespace = key.partition("/")[0]
            self._pod_namespace_of[key] = namespace
            self._count(self._pod_namespaces, namespace, 1)
        if not pending:
            if _uses_claims_on_node(pod):
                self._placed.add(key)
            return
        meta = pod.get("metadata") or {}
        namespace = key.partition("/")[0]
        claims, templates = _pod_claims(pod, namespace)
        self._pending_sorted = None
        self._pending[key] = _Pending(
            key=key,
            uid=str(meta.get("uid") or ""),
            namespace=namespace,
            priority=pod_priority(pod),
            created=epoch_seconds(meta.get("creationTimestamp")),
            claims=tuple(claims),
            templates=tuple(templates),
        )

    def _restructure(self) -> None:
        """Slices, nodes or classes may have changed: the node names, and every rendered node whose
        view is not the one it was rendered from any more (labels or slices)."""
        self._structural = False
        store = self.store
        keys = store.nodes.keys()
        if self._names and keys == self._node_keys and self._snapshot is self._names_snapshot:
            pass  # same nodes, same slices: the names stand
        else:
            self._names = store.known_node_names()
            self._name_set = frozenset(self._names)
            self._node_keys = set(keys)
            self._names_snapshot = self._snapshot
        snapshot = store.snapshot()
        features = self.features
        for name in list(self._renders):
            render = self._renders[name]
            if name not in self._name_set:
                del self._renders[name]
                continue
            node = store.node(name)
            if render.view is None or snapshot.cached_view(node, features) is not render.view:
                self._dirty.add(name)
        self._pool_nodes = {}
        for name, render in self._renders.items():
            render.filtered.clear()  # a class may have changed
            for pool in render.pools:
                self._pool_nodes.setdefault(pool, set()).add(name)
        self._totals = None
        self._facets = None
        self._filtered.clear()
        self._node_matches.clear()

    # --- rendering ------------------------------------------------------------------------------

    def _node(self, name: str) -> _NodeRender:
        """The node's render, made again if something it shows changed."""
        render = self._renders.get(name)
        if render is not None and name not in self._dirty:
            return render
        fresh = self._render(name)
        self._renders[name] = fresh
        self._dirty.discard(name)
        for pool in fresh.pools:
            self._pool_nodes.setdefault(pool, set()).add(name)
        totals = self._totals
        if totals is not None:
            if render is not None:
                for i, n in enumerate(render.local_counts):
                    totals[i] -= n
            for i, n in enumerate(fresh.local_counts):
                totals[i] += n
            for row in fresh.rows:
                if not row.local:
                    self._remote_states[row.entry.id] = row.state
        return fresh

    def _holders_of(self, device: DeviceID) -> list[Holder]:
        allocated = self._holders.get(device)
        flight = self._flight.get(device)
        if flight is None:
            return allocated or []
        return [*(allocated or ()), *flight]

    def _render(self, name: str) -> _NodeRender:
        store = self.store
        node = store.node(name)
        try:
            view: NodeView | None = store.snapshot().node_view(node, self.features)
        except PoolNodeSelectionError as exc:
            view, problem = None, str(exc)
        else:
            problem = ""
        rows: list[_Row] = []
        devices: list[dict[str, Any]] = []
        local = [0] * len(DEVICE_STATES)
        in_use = store.in_use_state()
        pools: list[tuple[str, str]] = []
        problems: list[dict[str, str]] = []
        nominated = self._nominated
        for pool in view.pools if view is not None else ():
            if not pool.usable:
                problems.append(self._pool_problem(pool))
                continue
            if not pool.entries:
                continue  # nothing of it shown here (a counter-only slice reaches every node's view)
            pools.append((pool.driver, pool.name))
            left = counters_left(pool, in_use) if pool.counter_sets else {}
            for entry in pool.entries:
                device_id = entry.id
                holders = self._holders_of(device_id)
                nomination = nominated.get(device_id) if nominated else None
                state = device_state(entry.device, holders, device_id in in_use.devices, nomination is not None)
                is_local = entry.slice.node_name == name
                if is_local:
                    local[_STATE_INDEX[state]] += 1
                rows.append(_Row(entry, frozenset(h.claim.partition("/")[0] for h in holders), is_local, state))
                devices.append(
                    {
                        "id": str(device_id),
                        "driver": device_id.driver,
                        "pool": device_id.pool,
                        "name": device_id.device,
                        "state": state,
                        "group": entry.counters[0][0][1] if entry.counters else None,
                        "use": device_use(entry, state, holders, in_use.consumed_capacity.get(device_id), left),
                        "claims": _unique(h.claim for h in holders),
                        "pods": _unique(p for h in holders for p in h.pods),
                        "taints": _taint_json(entry.device),
                    }
                )
                if nomination is not None:
                    devices[-1]["nomination"] = {k: v for k, v in nomination.items() if k != "podUid"}
                reported = self._device_status(device_id, holders) if holders else []
                if reported:
                    devices[-1]["deviceStatus"] = reported
        body: dict[str, Any] = {
            "name": name,
            "labels": dict(node.labels),
            "counts": _counts(row.state for row in rows),
            "devices": devices,
            "poolProblems": problems,
        }
        if problem:
            body["error"] = problem
        return _NodeRender(
            name=name,
            view=view,
            labels=node.labels,
            rows=tuple(rows),
            devices=tuple(devices),
            json=body,
            local_counts=tuple(local),
            pools=tuple(pools),
        )

    def _pool_problem(self, pool: Pool) -> dict[str, str]:
        """Why a pool the node's view holds is not offered (as ``pool_summaries`` says it)."""
        if pool.invalid_reason is not None:
            return {"driver": pool.driver, "pool": pool.name, "status": "invalid", "reason": pool.invalid_reason}
        slices = self.store.snapshot().slices_of_pool(pool.driver, pool.name)
        current = [s for s in slices if s.pool.generation == pool.generation]
        expected = current[0].pool.resource_slice_count if current else 0
        reason = f"{len(current)} of {expected} slices of generation {pool.generation}"
        return {"driver": pool.driver, "pool": pool.name, "status": "incomplete", "reason": reason}

    def _class_mask(self, render: _NodeRender, device_class: DeviceClass) -> tuple[bool, ...]:
        """Per row of the node, whether the class's selectors select the device: from the selector
        cache (the results the filter and warm-up left there), evaluated only on a miss."""
        cached = render.class_masks.get(device_class.name)
        if cached is not None and cached[0] is device_class:
            return cached[1]
        selectors = self.store.selectors
        mask = [True] * len(render.rows)
        for expression in device_class.selectors:
            if expression is None:
                mask = [False] * len(render.rows)
                break
            table = selectors.table(expression)
            for i, row in enumerate(render.rows):
                if not mask[i]:
                    continue
                results = table.get(row.entry.slice)
                if results is None:
                    try:
                        results = selectors.results(expression, row.entry.slice)
                    except CelCompileError:
                        mask = [False] * len(render.rows)
                        break
                mask[i] = results[row.entry.index] is True
        masked = tuple(mask)
        render.class_masks[device_class.name] = (device_class, masked)
        return masked

    def _filtered_json(self, render: _NodeRender, node_filter: NodeFilter) -> dict[str, Any] | None:
        """The node's page JSON with only the devices the filter keeps (None: none kept)."""
        keep = [True] * len(render.rows)
        if node_filter.device_class:
            device_class = self.store.classes[node_filter.device_class]
            keep = list(self._class_mask(render, device_class))
        for i, row in enumerate(render.rows):
            if not keep[i]:
                continue
            wrong_driver = node_filter.driver and row.entry.id.driver != node_filter.driver
            if wrong_driver or (node_filter.namespace and node_filter.namespace not in row.namespaces):
                keep[i] = False
        if not any(keep):
            return None
        devices = [d for d, k in zip(render.devices, keep, strict=True) if k]
        states = [row.state for row, k in zip(render.rows, keep, strict=True) if k]
        body = dict(render.json)
        body["devices"] = devices
        body["counts"] = _counts(states)
        return body

    # --- answers --------------------------------------------------------------------------------

    def node_names(self) -> list[str]:
        """Every node the map knows (nodes and the nodes slices name), sorted."""
        self._sync()
        return list(self._names)

    async def prepare(self, device_class: str = "", *, slice_seconds: float = PREPARE_SLICE_SECONDS) -> None:
        """Render every node not rendered yet (and, for ``device_class``, find which of its devices
        the class selects), letting the event loop run after each ``slice_seconds`` of work. The
        first summary or device-filtered page of a big cluster renders every node — about a second
        at 5000 nodes x 12 devices, CEL evaluations of a class not cached yet on top — which would
        hold every other request, ``/healthz`` included, if done inside the answer. After this the
        answer only sums and looks up. Callers of one map take turns (a lock), so a second page
        opened meanwhile waits for the first one's work instead of doing it again."""
        async with self._preparing:
            self._sync()
            pace = cooperative.Pacer(slice_seconds)
            for name in list(self._names):
                if name not in self._name_set:
                    continue  # gone while the loop ran
                render = self._renders.get(name)
                device = self.store.classes.get(device_class) if device_class else None
                if render is not None and name not in self._dirty:
                    if device is None:
                        continue
                    cached = render.class_masks.get(device.name)
                    if cached is not None and cached[0] is device:
                        continue
                render = self._node(name)
                if device is not None:
                    self._class_mask(render, device)
                await pace()

    def summary(self) -> dict[str, Any]:
        revision = self._sync()
        totals = self._current_totals()
        counters: dict[str, int] = {
            "binds": self.stats.binds_ok,
            "bindFailures": sum(self.stats.binds_failed.values()),
            "allocations": self.stats.allocations,
            "scheduledPods": len(self._placed),
            "inFlight": len(self.ledger),
        }
        if self._extra_counters is not None:
            counters.update(self._extra_counters())
        return {
            "revision": revision,
            "synced": self.cluster.backend.synced,
            "counters": counters,
            "totals": totals,
            "pendingPods": len(self._pending),
            "facets": self._current_facets(),
        }

    def _current_totals(self) -> dict[str, int]:
        if self._totals is None:
            self._remote_states = {}
            totals = [0] * len(DEVICE_STATES)
            for name in self._names:
                render = self._node(name)
                for i, n in enumerate(render.local_counts):
                    totals[i] += n
                for row in render.rows:
                    if not row.local:
                        self._remote_states[row.entry.id] = row.state
            self._totals = totals
        else:
            for name in list(self._dirty):
                self._node(name)
        counts = list(self._totals)
        for state in self._remote_states.values():
            counts[_STATE_INDEX[state]] += 1
        body: dict[str, int] = {"nodes": len(self._names), "devices": sum(counts)}
        body.update(zip(DEVICE_STATES, counts, strict=True))
        return body

    def _current_facets(self) -> dict[str, Any]:
        if self._facets is None:
            drivers = sorted({s.driver for s in self.store.slices.values()})
            labels: dict[str, set[str]] = {}
            for name in self._names:
                for key, value in self.store.node(name).labels.items():
                    if key not in _UNIQUE_LABELS:
                        labels.setdefault(key, set()).add(value)
            self._facets = {
                "drivers": drivers,
                "deviceClasses": sorted(self.store.classes),
                "nodeLabels": {k: sorted(v) for k, v in sorted(labels.items()) if len(v) <= MAX_FACET_VALUES},
            }
        namespaces = sorted(self._claim_namespaces.keys() | self._pod_namespaces.keys())
        return {**self._facets, "namespaces": namespaces}

    def nodes(self, node_filter: NodeFilter = NodeFilter(), *, offset: int = 0, limit: int = 50) -> dict[str, Any]:
        """A page of nodes, sorted by name (docs/ui.md). Raises ``UnknownDeviceClass``."""
        if node_filter.device_class and node_filter.device_class not in self.store.classes:
            raise UnknownDeviceClass(f"deviceClass {node_filter.device_class!r}: no such DeviceClass")
        revision = self._sync()
        limit = max(0, min(limit, MAX_PAGE))
        if not node_filter.filters_devices:  # the nodes are known without rendering them
            names = self._named(node_filter) if node_filter.filters_nodes else self._names
            total = len(names)
            page = [self._node(name).json for name in names[offset : offset + limit]]
        else:
            matching = self._matching(revision, node_filter)
            total = len(matching)
            page = matching[offset : offset + limit]
        return {"revision": revision, "total": total, "offset": offset, "limit": limit, "nodes": page}

    def _matching(self, revision: int, node_filter: NodeFilter) -> list[dict[str, Any]]:
        """The nodes a device filter keeps, as page JSON: remembered for the revision; below that,
        the nodes a label or name filter keeps are remembered until nodes change, and each node's
        filtered JSON as long as the node's render stands."""
        key = (revision, node_filter)
        found = self._filtered.get(key)
        if found is not None:
            return found
        names = self._named(node_filter) if node_filter.filters_nodes else self._names
        devices = (node_filter.driver, node_filter.device_class, node_filter.namespace)
        found = []
        renders, dirty = self._renders, self._dirty
        for name in names:
            render = renders.get(name)
            if render is None or name in dirty:
                render = self._node(name)
            cached = render.filtered.get(devices, _MISSING)
            if cached is _MISSING:
                cached = render.filtered[devices] = self._filtered_json(render, node_filter)
            if cached is not None:
                found.append(cached)
        if len(self._filtered) >= _FILTER_CACHE_SIZE:
            self._filtered.clear()
        self._filtered[key] = found
        return found

    def _named(self, node_filter: NodeFilter) -> list[str]:
        key = (node_filter.label_key, node_filter.label_value, node_filter.q)
        names = self._node_matches.get(key)
        if names is None:
            node = self.store.node
            names = [name for name in self._names if node_filter.selects_node(name, node(name).labels)]
            if len(self._node_matches) >= _FILTER_CACHE_SIZE:
                self._node_matches.clear()
            self._node_matches[key] = names
        return names

    def node(self, name: str) -> dict[str, Any] | None:
        """One node with everything about each device, and its pools; None for a node the map does
        not know."""
        revision = self._sync()
        if name not in self._name_set:
            return None
        render = self._node(name)
        devices: list[dict[str, Any]] = []
        for row, body in zip(render.rows, render.devices, strict=True):
            device = row.entry.device
            detail = dict(body)
            detail["slice"] = row.entry.slice.name
            detail["attributes"] = {k: encode_attribute_value(v) for k, v in device.attributes.items()}
            detail["capacity"] = {k: str(v.value) for k, v in device.capacity.items()}
            detail["claims"] = [
                {
                    "claim": h.claim,
                    "pods": list(h.pods),
                    **({"podGroups": list(h.groups)} if h.groups else {}),
                    "request": h.request,
                    "adminAccess": h.admin_access,
                    "state": h.kind,
                }
                for h in self._holders_of(row.entry.id)
            ]
            devices.append(detail)
        self._current_pools()
        by_key, by_node = self._pool_index
        chosen = {id(p): p for p in by_node.get(name, ())}
        chosen.update((id(by_key[key]), by_key[key]) for key in render.pools if key in by_key)
        pools = sorted(chosen.values(), key=lambda p: (p["driver"], p["pool"]))
        return {**render.json, "revision": revision, "devices": devices, "pools": pools}

    def pools(self, driver: str = "") -> dict[str, Any]:
        """Every pool with its status (``pool_summaries``), or those of one driver. The list is the
        same object as long as the slices stay the same (the server keeps its encoding)."""
        revision = self._sync()
        pools = self._current_pools()
        if driver:
            by_driver = self._pools_by_driver
            if by_driver[0] is not pools:
                by_driver = self._pools_by_driver = (pools, {})
            chosen = by_driver[1].get(driver)
            if chosen is None:
                chosen = by_driver[1][driver] = [p for p in pools if p["driver"] == driver]
            pools = chosen
        return {"revision": revision, "pools": pools}

    def _current_pools(self) -> list[dict[str, Any]]:
        snapshot = self.store.snapshot()
        if self._pools is not None and self._pools[0] is snapshot:
            return self._pools[1]
        store, features = self.store, self.features

        def view_of(node: str) -> NodeView | None:
            try:
                return snapshot.node_view(store.node(node), features)
            except PoolNodeSelectionError:
                return None

        pools = pool_summaries(store.slices.values(), view_of)
        self._pools = (snapshot, pools)
        by_node: dict[str, list[dict[str, Any]]] = {}
        for pool in pools:
            if pool["node"] is not None:
                by_node.setdefault(pool["node"], []).append(pool)
        self._pool_index = ({(p["driver"], p["pool"]): p for p in pools}, by_node)
        return pools

    def pending(self, namespace: str = "") -> dict[str, Any]:
        """The pending pods, without explanations: those the last filter found no node for first,
        then most important first."""
        revision = self._sync()
        now = self._clock()
        rejected = self.rejected
        return {
            "revision": revision,
            "pods": [self._pending_json(p, now, p.uid in rejected) for p in self._pending_list(namespace)],
        }

    def _pending_list(self, namespace: str) -> list[_Pending]:
        if self._pending_sorted is None:
            rejected = self.rejected
            self._pending_sorted = sorted(
                self._pending.values(),
                key=lambda p: (p.uid not in rejected, -p.priority, p.created is None, p.created or 0.0, p.key),
            )
        if not namespace:
            return self._pending_sorted
        return [p for p in self._pending_sorted if p.namespace == namespace]

    @staticmethod
    def _pending_json(pending: _Pending, now: float, rejected: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "pod": pending.key,
            "uid": pending.uid,
            "priority": pending.priority,
            "claims": list(pending.claims),
            "ageSeconds": round(max(0.0, now - pending.created), 1) if pending.created is not None else None,
            "rejected": rejected,
            "explained": False,
        }
        if pending.templates:
            body["templates"] = list(pending.templates)
        return body

    async def pending_explained(self, namespace: str = "") -> dict[str, Any]:
        """``pending``, with the first ``EXPLAINED_PODS`` pods' explanations as far as they are
        known (``extender.views.why``). An explanation is a filter over every node explained node
        by node: hundreds of milliseconds at thousands of nodes, too much to pay for every refresh
        of the page. So they are made in the background (``_explain_wanted``), one at a time,
        letting the event loop run, and for at most ``explain_share`` of the time; each one made
        moves the revision, which tells the page to fetch the list again. Until a pod's explanation
        is made afresh for the current state, the last one is shown with ``"stale": true``."""
        answer = self.pending(namespace)
        why: _Why = why_module.why  # looked up now: tests put their own in its place
        current = self._data_revision()
        for body in answer["pods"][:EXPLAINED_PODS]:
            cached = self._explanations.get(body["uid"])
            if cached is not None:
                body.update(cached[1])
                body["stale"] = cached[0] != current
            if cached is None or cached[0] != current:
                self._wanted[body["uid"]] = body["pod"]
        if self._wanted and self._explainer is None:
            self._explainer = asyncio.create_task(self._explain_wanted(why), name="device map: explain pending pods")
        return answer

    async def settled(self) -> None:
        """Wait until the explanations asked for so far are made (tests, benchmarks)."""
        while self._explainer is not None:
            await asyncio.shield(self._explainer)

    async def stop(self) -> None:
        """Stop making explanations (the app is shutting down)."""
        task, self._explainer = self._explainer, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _explain_wanted(self, why: _Why) -> None:
        try:
            while self._wanted:
                uid, key = next(iter(self._wanted.items()))
                del self._wanted[uid]
                self._sync()
                current = self._data_revision()
                cached = self._explanations.get(uid)
                pod = self.store.pods.get(key)
                if (cached is not None and cached[0] == current) or pod is None or not is_pending(pod):
                    continue
                start = self._timer()
                explanation = await self._explain(why, key, pod)
                if len(self._explanations) >= 4 * EXPLAINED_PODS:
                    keep = {p.uid for p in self._pending_list("")[:EXPLAINED_PODS]}
                    self._explanations = {k: v for k, v in self._explanations.items() if k in keep}
                self._explanations[uid] = (current, explanation)
                self._explained += 1  # a new answer: the page hears of it through the revision
                took = self._timer() - start
                if self._wanted and self.explain_share < 1:
                    await self._sleep(took * (1 - self.explain_share) / self.explain_share)
        finally:
            if self._explainer is asyncio.current_task():
                self._explainer = None

    async def _explain(self, why: _Why, key: str, pod: Mapping[str, Any]) -> dict[str, Any]:
        try:
            found = await cooperative.run(why, self.views, pod, self.node_names())
        except Exception as exc:  # one pod's explanation must not take the others down with it
            log.warning("ui.why_failed", pod=key, error=str(exc), error_class=type(exc).__name__)
            return {"explained": False, "error": f"explanation failed: {exc}"}
        return {
            "explained": True,
            "summary": str(found.get("summary", "")),
            "closest": list(found.get("closest") or []),
        }


_Why = Callable[[DebugViews, Mapping[str, Any], Sequence[str]], dict[str, Any]]
