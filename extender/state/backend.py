"""The one seam between the scheduling service and a cluster: the ``Backend`` protocol.

It lives in the state layer because the service depends on it; the implementations sit above, in
``extender.backends`` (which re-exports it as ``extender.backends.base.Backend``), so imports keep
pointing downward only.

Two implementations: ``extender.backends.embedded`` (an in-memory cluster loaded from manifests,
which also plays the resourceclaim controller) and ``extender.backends.kube`` (watches and writes
against an API server). The service and the server never know which one they run on.

Reads go to ``backend.store`` (an ``ObjectStore`` the backend keeps filled). Writes go through
the async methods below, which behave like the API server: every object carries a
``metadata.resourceVersion``; an update with a stale one raises ``WriteConflict``; a missing
object raises ``ObjectNotFound``; a temporary failure raises ``ApiUnavailable``. A successful write
returns the object as stored and — in the embedded backend at once, in the kube backend when the
watch delivers it — updates ``store``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from extender.state.cache.store import ObjectStore

__all__ = ["Backend"]


@runtime_checkable
class Backend(Protocol):
    store: ObjectStore

    @property
    def synced(self) -> bool:
        """True once the store holds a complete view of the cluster (every watch listed)."""
        ...

    async def start(self) -> None:
        """Begin feeding the store (spawn watches); returns once started, not once synced."""
        ...

    async def wait_synced(self, timeout: float | None = None) -> None:
        """Return once ``synced`` (raises TimeoutError after ``timeout``, or the sync's failure)."""
        ...

    async def stop(self) -> None:
        """Stop background work; idempotent."""
        ...

    async def ensure_leader(self) -> None:
        """Return if this replica may write to the cluster now; raise ``NotLeader`` if it may not
        (or cannot prove it may). The service asks before it decides or writes anything."""
        ...

    async def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """The claim as the source of truth has it now (not the cache). ObjectNotFound if absent."""
        ...

    async def update_claim(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Replace a claim's metadata and spec (as PUT .../resourceclaims/NAME; status ignored),
        guarded by ``metadata.resourceVersion``. Used to add the delete-protection finalizer."""
        ...

    async def update_claim_status(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Replace a claim's status (as PUT .../resourceclaims/NAME/status; metadata and spec
        ignored), guarded by ``metadata.resourceVersion``."""
        ...

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod as the source of truth has it now, or None."""
        ...

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Create the pod's ``binding`` subresource. WriteConflict when the pod is already bound
        (to any node) or its UID differs (the pod was re-created); ObjectNotFound if absent."""
        ...

    @property
    def classic_dra(self) -> str:
        """Whether classic DRA (v1alpha3 claims allocated by a driver's controller, negotiated
        through PodSchedulingContexts) can be driven here: "" if so, else why not (the text pods
        with such claims get)."""
        ...

    @property
    def pod_groups(self) -> str:
        """Whether PodGroups (scheduling.k8s.io) are seen here: "" if so, else why not (then every
        pod is scheduled on its own)."""
        ...

    async def create_scheduling_context(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Create a PodSchedulingContext (POST; status is dropped, as the API server's strategy
        does). WriteConflict if one of that name exists."""
        ...

    async def update_scheduling_context(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Replace a PodSchedulingContext's metadata and spec (PUT; status kept), guarded by
        ``metadata.resourceVersion``. ObjectNotFound if absent."""
        ...

    async def apply_scheduling_context(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply of a PodSchedulingContext's spec (forced, as field manager
        ``kube-scheduler`` did): the fallback when an update conflicts. Creates it if absent."""
        ...

    async def delete_scheduling_context(self, namespace: str, name: str) -> None:
        """Delete a PodSchedulingContext; ObjectNotFound if absent."""
        ...

    async def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        """Evict a pod through the Eviction API (``pods/eviction``), so that the API server enforces
        PodDisruptionBudgets: ``EvictionRefused`` when one forbids it (HTTP 429), ``ObjectNotFound``
        when the pod is gone, ``WriteConflict`` when its UID differs."""
        ...

    async def set_nominated_node(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Set a pod's ``status.nominatedNodeName`` (as kube-scheduler does for a preemptor)."""
        ...

    @property
    def claim_api_version(self) -> str:
        """The resource.k8s.io version claims are created in (``create_claim``)."""
        ...

    async def create_claim(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Create a ResourceClaim (``metadata.generateName`` names it); returns it as stored."""
        ...

    async def remove_claim(self, namespace: str, name: str, uid: str) -> None:
        """Delete a ResourceClaim if it still has ``uid``; ObjectNotFound if absent,
        WriteConflict if another claim has the name now."""
        ...

    async def patch_pod_status(self, namespace: str, name: str, uid: str, status: dict[str, Any]) -> None:
        """Merge ``status`` into the status of the pod with ``uid`` (a JSON merge patch of
        ``pods/status``): ObjectNotFound if gone, WriteConflict if re-created."""
        ...

    def record_event(self, namespace: str, name: str, uid: str, *, kind: str, reason: str, message: str) -> None:
        """Record an Event on a pod, in the background (failures are logged, never raised)."""
        ...

    def observe_nodes(self, raw_nodes: Sequence[Mapping[str, Any]]) -> None:
        """Node objects a request carried (nodeCacheCapable: false; already type-checked). The
        embedded backend takes their labels, as the cluster it plays; the kube backend adds only
        nodes its watch has not shown yet (the watch is the truth for the others)."""
        ...

    def observe_pod(self, raw_pod: dict[str, Any]) -> None:
        """A pod seen in a filter or prioritize request. The embedded backend remembers it (bind
        carries only its identity) and creates its template claims like the resourceclaim
        controller would; the kube backend ignores it (its watch sees pods)."""
        ...
