"""``ClusterView``: the store and the in-flight ledger as one view, for every decision.

The store holds what the watches (or the embedded cluster) show; the ledger what binds and holds
have decided that the store does not show yet. Before any decision the view is brought up to date
(``refresh``: expired ledger entries go, entries the store caught up with go, the slice snapshot
takes in its pending changes, and with all of it the remembered verdicts that depend on them), and
the allocator for a pod is built over both (``allocator``).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from typing import Any

from extender.core.allocator import Allocator
from extender.core.model import Features
from extender.state.backend import Backend
from extender.state.claims import PodClaims, pod_identity, resolve_pod_claims
from extender.state.ledger import InFlightAllocation, InFlightLedger

__all__ = ["ClusterView"]


class ClusterView:
    """The backend's store plus the ledger; see the module docstring."""

    def __init__(self, backend: Backend, ledger: InFlightLedger, features: Features) -> None:
        self.backend = backend
        self.store = backend.store
        self.ledger = ledger
        self.features = features
        #: Told of the entries ``refresh`` let expire (the holds count theirs).
        self.on_expired: Callable[[list[InFlightAllocation]], None] = lambda _entries: None
        #: UIDs of pods whose bind is running: their entries do not expire (``refresh``).
        self.binding: Container[str] = ()
        # In-flight allocations hold their devices like allocated claims do (and so change what
        # fits where): the store counts them in ``in_use_state``.
        ledger.listeners.append(self._in_flight_changed)
        for entry in ledger:
            self.store.set_in_flight(entry.claim_key, entry.result)

    def _in_flight_changed(self, entry: InFlightAllocation, added: bool) -> None:
        self.store.set_in_flight(entry.claim_key, entry.result if added else None)

    def refresh(self) -> None:
        """Bring the ledger and the slice snapshot up to date. Their changes reach the FitCache
        here, so this runs before remembered verdicts are read."""
        expired = self.ledger.expire(keep=self.binding)
        if expired:
            self.on_expired(expired)
        self.ledger.reconcile(self.store.claims)
        self.store.snapshot()

    def allocator(self, claims: PodClaims, *, refresh: bool = True) -> Allocator:
        """The allocator for a pod's claims over the cluster as it is now (``refresh=False`` for
        callers that have just refreshed)."""
        if refresh:
            self.refresh()
        store = self.store
        return Allocator(
            claims.to_allocate,
            classes=store.classes,
            snapshot=store.snapshot(),
            allocated=store.in_use_state(),
            features=self.features,
            selectors=store.selectors,
            preallocated=claims.allocated,
        )

    def pod(self, pod: Mapping[str, Any]) -> Mapping[str, Any]:
        """The pod of a request as the backend holds it (it may carry status the request's copy
        lacks); the embedded backend remembers pods it sees here."""
        self.backend.observe_pod(dict(pod))
        namespace, name, uid = pod_identity(pod)
        stored = self.store.pods.get(f"{namespace}/{name}")
        if stored is not None and pod_identity(stored)[2] == uid:
            return stored
        return pod

    def claims(self, pod: Mapping[str, Any], *, from_templates: bool = True) -> PodClaims:
        """``resolve_pod_claims`` over this view (template claims from their templates where they
        do not exist yet, unless ``from_templates`` is off)."""
        return resolve_pod_claims(pod, self.store, self.ledger, from_templates=from_templates)
