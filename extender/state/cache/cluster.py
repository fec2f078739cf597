"""``ClusterView``: the store and the in-flight ledger as one view, for every decision.

The store holds what the watches (or the embedded cluster) show; the ledger what binds and holds
have decided that the store does not show yet. Before any decision the view is brought up to date
(``refresh``: expired ledger entries go, entries the store caught up with go, the slice snapshot
takes in its pending changes, and with all of it the remembered verdicts that depend on them), and
the allocator for a pod is built over both (``allocator``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Collection, Container, Iterable, Mapping
from typing import Any

from extender.core.allocator import Allocator
from extender.core.budget import DEFAULT_FILTER_TIMEOUT_SECONDS, DEFAULT_SLICE_SECONDS, SearchBudget
from extender.core.cel import CelCompileError
from extender.core.model import AllocatedState, DeviceID, Features
from extender.core.pools import PoolNodeSelectionError
from extender.core.scoring import DeviceUsage, node_device_usage
from extender.state import cooperative
from extender.state.backend import Backend
from extender.state.cache.claims import PodClaims, resolve_pod_claims
from extender.state.cache.ledger import InFlightAllocation, InFlightLedger
from extender.state.cache.nominations import Nominations
from extender.state.cache.pods import pod_group_name, pod_identity, pod_uid

__all__ = ["ClusterView", "WatchedSearch"]


def _no_pause() -> bool:
    """``warm_up``'s pace when nothing else may run meanwhile (tests, the CLI)."""
    return False


class ClusterView:
    """The backend's store plus the ledger; see the module docstring."""

    def __init__(
        self,
        backend: Backend,
        ledger: InFlightLedger,
        features: Features,
        *,
        filter_timeout_seconds: float = DEFAULT_FILTER_TIMEOUT_SECONDS,
        slice_seconds: float = DEFAULT_SLICE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        binding: Container[str] = (),
    ) -> None:
        self.backend = backend
        self.store = backend.store
        self.ledger = ledger
        self.features = features
        #: Each node's search budget (upstream's ``filterTimeout``; 0: none) and the longest the
        #: allocator works before it lets the event loop run (``extender.core.budget``).
        self.filter_timeout_seconds = filter_timeout_seconds
        self.slice_seconds = slice_seconds
        #: Monotonic seconds for the search budgets (node deadlines, slices) and the nominations;
        #: tests inject a clock they move themselves.
        self.clock = clock
        #: Awaited at every pause of a ``WatchedSearch`` (after the event loop's turn) before the
        #: search goes on; None in production. Tests hold a search at a chosen pause here while
        #: other requests run, instead of racing it with sleeps.
        self.on_pause: Callable[[WatchedSearch], Awaitable[object]] | None = None
        #: Told of the entries ``refresh`` let expire (the holds count theirs).
        self.on_expired: Callable[[list[InFlightAllocation]], None] = lambda _entries: None
        #: UIDs of pods whose bind is running: their entries do not expire (``refresh``).
        self.binding = binding
        #: Devices held for preemptors (``state/preemption/devices.py``), by every pod's filter and bind.
        self.nominations = Nominations(clock)
        # In-flight allocations hold their devices like allocated claims do (and so change what
        # fits where): the store counts them in ``in_use_state``.
        ledger.listeners.append(self._in_flight_changed)
        for entry in ledger:
            self.store.set_in_flight(entry.claim_key, entry.result)
        # claims changed since the last ``refresh``: the ledger looks at their entries only
        self._changed_claims: set[str] = set()
        self.store.claim_listeners.append(self._claim_changed)

    def _claim_changed(self, kind: str, key: str) -> None:
        if kind == "ResourceClaim":
            self._changed_claims.add(key)

    def _in_flight_changed(self, entry: InFlightAllocation, added: bool) -> None:
        self.store.set_in_flight(entry.claim_key, entry.result if added else None)

    def refresh(self) -> None:
        """Bring the ledger and the slice snapshot up to date. Their changes reach the FitCache
        here, so this runs before remembered verdicts are read."""
        expired = self.ledger.expire(keep=self.binding)
        if expired:
            self.on_expired(expired)
        changed, self._changed_claims = self._changed_claims, set()
        self.ledger.reconcile(self.store.claims, unreadable=self.store.invalid_claims, changed=changed)
        self.store.snapshot()

    def nominated_state(self, pod_uid: str, priority: int, node: str) -> AllocatedState | None:
        """What is in use on ``node`` for a pod that must leave nominated devices alone (those held
        for a preemptor of equal or higher priority), or None when none are held against it."""
        if not self.nominations:
            return None
        if not self.nominations.against(pod_uid, priority, node):
            return None
        return self.nominations.hold(self.store.in_use_without(()), pod_uid, priority)

    def allocator(
        self,
        claims: PodClaims,
        *,
        refresh: bool = True,
        budget: SearchBudget | None = None,
        allocated: AllocatedState | None = None,
    ) -> Allocator:
        """The allocator for a pod's claims over the cluster as it is now (``refresh=False`` for
        callers that have just refreshed), with ``budget`` (default: the service's per-node limit,
        never yielding; ``WatchedSearch.budget`` for one that lets the event loop run), over
        ``allocated`` instead of the store's in-use state if given (``nominated_state``)."""
        if refresh:
            self.refresh()
        store = self.store
        if budget is None:
            budget = self.budget()
        return Allocator(
            claims.to_allocate,
            classes=store.classes,
            snapshot=store.snapshot(),
            allocated=store.in_use_state() if allocated is None else allocated,
            features=self.features,
            selectors=store.selectors,
            preallocated=claims.allocated,
            budget=budget,
        )

    def budget(self, seconds: float | None = None) -> SearchBudget:
        """A search budget on this view's clock that never lets others run: ``seconds`` per node,
        the service's ``filter_timeout_seconds`` unless given."""
        limit = self.filter_timeout_seconds if seconds is None else seconds
        return SearchBudget(limit, slice_seconds=self.slice_seconds, clock=self.clock)

    def watched_search(
        self, nodes: Collection[str], *, on_first_pause: Callable[[], None] | None = None
    ) -> WatchedSearch:
        """A budget for a search over ``nodes`` that may let the event loop run, and afterwards
        which of those nodes' inputs stayed as they were (``WatchedSearch``); ``on_first_pause``
        runs just before the search first lets others run."""
        return WatchedSearch(self, nodes, on_first_pause)

    def pod(self, pod: Mapping[str, Any]) -> Mapping[str, Any]:
        """The pod of a request as the backend holds it (it may carry status the request's copy
        lacks); the embedded backend remembers pods it sees here."""
        self.backend.observe_pod(dict(pod))
        namespace, name, uid = pod_identity(pod)
        stored = self.store.pods.get(f"{namespace}/{name}")
        if stored is not None and pod_uid(stored) == uid:
            return stored
        return pod

    def claims(self, pod: Mapping[str, Any], *, from_templates: bool = True) -> PodClaims:
        """``resolve_pod_claims`` over this view (template claims from their templates where they
        do not exist yet, unless ``from_templates`` is off)."""
        group = None
        group_name = pod_group_name(pod)
        if group_name and self.backend.pod_groups == "":
            group = self.store.pod_groups.get(f"{pod_identity(pod)[0]}/{group_name}")
        return resolve_pod_claims(
            pod,
            self.store,
            self.ledger,
            from_templates=from_templates,
            classic_dra=self.backend.classic_dra,
            group=group,
        )

    def warm_up(self, pace: Callable[[], bool] = _no_pause) -> dict[str, int]:
        """Fill the caches a first filter and prioritize would fill: every node's pools and device
        usage, every class selector on every slice, so the first pod after (re)start costs what
        the next ones cost. CEL errors are cached as values and surface when a pod reaches the
        device, as usual.

        ``pace`` is called after each step and says whether it let the event loop run
        (``cooperative.Pacer.step`` under ``cooperative.run``: at 15 000 nodes this is seconds of
        work, which must not stop the event loop). The store may change while it pauses, so each
        step reads it afresh: the current snapshot and allocations, and only slices still current."""
        store = self.store
        names = store.known_node_names()
        self.count_usage([name for name in names if store.fits.usage(name) is None], pace)
        evaluations = 0
        for device_class in list(store.classes.values()):
            for expression in device_class.selectors:
                if expression is None:
                    continue
                for key, slice_ in list(store.slices.items()):
                    if store.slices.get(key) is not slice_:
                        continue  # changed or gone while the warm-up paused
                    try:
                        store.selectors.results(expression, slice_)
                    except CelCompileError:
                        break  # reported when a pod uses the class
                    evaluations += len(slice_.devices)
                    pace()
        return {"nodes": len(names), "evaluations": evaluations}

    def count_usage(self, names: Iterable[str], pace: Callable[[], bool] = _no_pause) -> dict[str, DeviceUsage]:
        """Each node's device usage (``core.scoring.node_device_usage``), counted now and
        remembered in the FitCache, where scoring finds it. ``pace`` as for ``warm_up``: after a
        pause the snapshot and the allocations are read afresh. A node whose pools cannot be
        gathered (a malformed node selector) is left out: reported when a pod tries it."""
        store, fits = self.store, self.store.fits
        out: dict[str, DeviceUsage] = {}
        shared: set[DeviceID] | None = None  # devices some claim holds a share of, while no pause
        for name in names:
            try:
                snapshot, node, allocated = store.snapshot(), store.node(name), store.in_use_state()
                view = snapshot.node_view(node, self.features)
                if shared is None:
                    shared = {share.device for share in allocated.shared_ids}
                out[name] = usage = node_device_usage(snapshot, node, allocated, self.features, shared_devices=shared)
                fits.remember_usage(name, view, usage)
            except ValueError:
                pass
            if pace():
                shared = None
        return out


class WatchedSearch:
    """A search that may pause (``extender.state.cooperative``), and what changed meanwhile.

    ``budget`` is the ``SearchBudget`` to give the allocator. At the first slice's end — before
    anything else may run — every watched node registers its current view with the FitCache
    (``FitCache.depends``), the registration remembered verdicts use, and its change mark is
    noted; whatever the store or the ledger then changes drops exactly the nodes it concerns, which
    moves their marks. After the search, ``unchanged()`` says which nodes' answers are still
    current: all of them if the search never paused, else those whose mark did not move."""

    __slots__ = ("_cluster", "_nodes", "_on_first_pause", "_registered", "budget")

    def __init__(
        self, cluster: ClusterView, nodes: Collection[str], on_first_pause: Callable[[], None] | None = None
    ) -> None:
        self._cluster = cluster
        self._nodes = nodes
        self._on_first_pause = on_first_pause
        self._registered: dict[str, tuple[int, int]] | None = None
        self.budget = SearchBudget(
            cluster.filter_timeout_seconds,
            slice_seconds=cluster.slice_seconds,
            on_slice_end=self._slice_ended,
            clock=cluster.clock,
        )

    @property
    def paused(self) -> bool:
        """Whether the search let others run (the watch began at its first pause)."""
        return self._registered is not None

    def _slice_ended(self) -> None:
        if self._registered is None and cooperative.can_pause():
            self._registered = self._register()
            if self._on_first_pause is not None:
                self._on_first_pause()
        on_pause = self._cluster.on_pause
        cooperative.slice_ended(None if on_pause is None else lambda: on_pause(self))

    def _register(self) -> dict[str, tuple[int, int]]:
        store, features = self._cluster.store, self._cluster.features
        snapshot, fits = store.snapshot(), store.fits  # nothing ran since the search began: its snapshot
        marks: dict[str, tuple[int, int]] = {}
        for name in self._nodes:
            try:
                view = snapshot.node_view(store.node(name), features)
            except PoolNodeSelectionError:
                continue  # unwatchable: never counted as unchanged after a pause
            fits.depends(name, view)  # from now on, every change to its inputs drops it
            marks[name] = fits.change_mark(name)
        return marks

    def unchanged(self) -> set[str] | None:
        """None if the search never paused (every answer is current); else the watched nodes whose
        inputs did not change while it was paused."""
        if not self.paused:
            return None
        store = self._cluster.store
        store.snapshot()  # slice changes that arrived meanwhile drop the nodes they concern
        marks = self._registered or {}
        return {name for name, mark in marks.items() if store.fits.change_mark(name) == mark}
