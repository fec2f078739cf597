"""The embedded backend: an in-memory cluster loaded from manifests, written like the API server.

``EmbeddedBackend`` is the source of truth for ``serve --cluster``: it holds every object as a raw
dict (JSON data only) under its ``(kind, namespace, name)``, gives each write a new
``metadata.resourceVersion`` from one global counter (as etcd does), fills ``uid`` and
``creationTimestamp`` on creation, and feeds every change to ``self.store`` synchronously, so the
store is up to date when a write returns.

Writes are strict on purpose (where unsure, fail the way the API server fails): stale or missing
resourceVersion → ``WriteConflict`` / ``InvalidObject``, immutable fields and the ResourceClaim
status rules of ``validation.py`` → ``InvalidObject``, absent objects → ``ObjectNotFound``.
Objects with finalizers are only marked deleted (``deletionTimestamp``) and vanish when their last
finalizer is removed. The backend also plays the resourceclaim controller (``claims.py``) for
every pod it loads or observes. ``faults`` injects failures and delays into reads and writes.

Kinds the store does not keep (Namespace, ...) are held too, but only listed, never decoded.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
import structlog

from extender.core.errors import EvictionRefused, InvalidObject, ObjectNotFound, WriteConflict
from extender.manifests import load_manifests
from extender.state.bind.claim_writes import DELETE_PROTECTION_FINALIZER
from extender.state.cache.store import KINDS, ObjectStore

from .claims import claim_from_template, find_pod_claim, generate_name, pending_template_claims, random_suffix
from .classic_driver import CAPACITY_ANNOTATION_PREFIX, ClassicDriver
from .faults import FaultInjector
from .objects import ObjectKey, copy_object, describe, key_of, now_timestamp
from .validation import check_metadata, check_no_new_finalizers, check_spec_unchanged, check_status_update

#: Kinds kept serialized (orjson bytes): nothing edits them in place, and they are most of a
#: cluster's bytes (a ResourceSlice as dicts takes several times its JSON size).
_COMPACT_KINDS = frozenset({"ResourceSlice"})
#: Kinds whose raw objects the store keeps: it must get a copy of its own.
_STORE_KEEPS_RAW = frozenset({"ResourceClaim", "ResourceClaimTemplate", "Pod"})

__all__ = ["EmbeddedBackend", "Listener"]

log = structlog.get_logger()

#: Called after every change with ("ADDED" | "MODIFIED" | "DELETED", a copy of the object).
Listener = Callable[[str, dict[str, Any]], None]

_CLAIMS = "resourceclaims.resource.k8s.io"
_CONTEXTS = "podschedulingcontexts.resource.k8s.io"
#: The metadata a PUT replaces; everything else in metadata is kept from the stored object.
_USER_METADATA = ("labels", "annotations", "finalizers", "ownerReferences")


def _thaw(value: Any) -> dict[str, Any]:
    """A stored object as a dict (those kept serialized are decoded: a copy of their own)."""
    thawed: dict[str, Any] = orjson.loads(value) if isinstance(value, bytes) else value
    return thawed


class EmbeddedBackend:
    """An in-memory cluster implementing the ``Backend`` protocol; see the module docstring."""

    def __init__(
        self,
        objects: Iterable[dict[str, Any]] = (),
        *,
        store: ObjectStore | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], str] = now_timestamp,
        gangs: bool = True,
    ) -> None:
        self.store = store if store is not None else ObjectStore()
        self._gangs = gangs
        self.faults = FaultInjector()
        #: Template claims the controller could not create, as "ns/pod: reason" (newest last).
        self.controller_errors: list[str] = []
        # Objects as stored: dicts, or orjson bytes for the kinds in _COMPACT_KINDS (read them
        # through _stored / _thaw).
        self._objects: dict[ObjectKey, Any] = {}
        #: The same objects by kind, so per-kind scans (a namespace's claims) skip the slices.
        self._by_kind: dict[str, dict[ObjectKey, Any]] = {}
        self._resource_version = 0
        self._rng = rng if rng is not None else random.Random()
        self._clock = clock
        self._listeners: list[Listener] = []
        #: The simulated classic DRA driver controllers, by driver name (``classic_driver``).
        self.classic_drivers: dict[str, ClassicDriver] = {}
        #: Events recorded on pods (``record_event``).
        self.events: list[tuple[str, str, str, str]] = []
        self._synced = False
        self._load(objects)
        self._synced = True

    @classmethod
    def from_paths(cls, *paths: Path | str, **options: Any) -> EmbeddedBackend:
        """Load YAML/JSON manifests (files or directories; multi-document and ``List`` accepted)."""
        return cls(load_manifests(*paths), **options)

    # --- Backend protocol: lifecycle ------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return self._synced

    async def start(self) -> None:
        """Nothing to start: everything was loaded in the constructor."""

    async def wait_synced(self, timeout: float | None = None) -> None:
        """Synced from the constructor on: returns at once."""

    async def stop(self) -> None:
        """Stop the simulated classic drivers (their queues; the cluster keeps its state)."""
        for driver in self.classic_drivers.values():
            await driver.stop()

    # --- Backend protocol: reads ----------------------------------------------------------------

    async def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        await self.faults.check("get_claim")
        claim = self._stored(("ResourceClaim", namespace or "default", name))
        if claim is None:
            raise ObjectNotFound(f'{_CLAIMS} "{name}" not found', claim=f"{namespace}/{name}")
        return copy_object(claim)

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        await self.faults.check("get_pod")
        pod = self._stored(("Pod", namespace or "default", name))
        return None if pod is None else copy_object(pod)

    # --- Backend protocol: writes ---------------------------------------------------------------

    async def update_claim(self, raw: dict[str, Any]) -> dict[str, Any]:
        """PUT the claim: labels, annotations, finalizers and ownerReferences are taken from
        ``raw``; its spec must equal the stored one; its status is ignored."""
        await self.faults.check("update_claim")
        old = self._claim_for_write(raw)
        obj = describe(old)
        meta_in = raw.get("metadata") or {}
        check_metadata(meta_in, obj)
        check_spec_unchanged(old, raw.get("spec"), obj)
        check_no_new_finalizers(old["metadata"], list(meta_in.get("finalizers") or ()), obj)
        new = copy_object(old)
        for field in _USER_METADATA:
            if meta_in.get(field):
                new["metadata"][field] = copy_object(meta_in[field])
            else:
                new["metadata"].pop(field, None)
        if new == old:  # a no-op update keeps the resourceVersion, as the API server does
            return copy_object(old)
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            return copy_object(self._remove(key_of(new), new))
        return copy_object(self._commit(new, "MODIFIED"))

    async def update_claim_status(self, raw: dict[str, Any]) -> dict[str, Any]:
        """PUT the claim's status subresource: only ``raw["status"]`` is taken."""
        await self.faults.check("update_claim_status")
        old = self._claim_for_write(raw)
        status = raw.get("status")
        status = {} if status is None else status
        check_status_update(old, status, describe(old))
        new = copy_object(old)
        new["status"] = copy_object(status)
        if new == old or (not status and not old.get("status")):
            return copy_object(old)
        return copy_object(self._commit(new, "MODIFIED"))

    # --- Backend protocol: preemption --------------------------------------------------------------

    async def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        """The Eviction API: a PodDisruptionBudget of the pod's namespace whose ``matchLabels``
        select it and that allows no disruption refuses (``EvictionRefused``, the API server's
        429); otherwise its ``disruptionsAllowed`` goes down by one and the pod is deleted (and
        with it, as the resourceclaim controller would, its reservations: ``_release_claims``)."""
        await self.faults.check("evict_pod")
        key: ObjectKey = ("Pod", namespace or "default", name)
        pod = self._stored(key)
        if pod is None:
            raise ObjectNotFound(f'pods "{name}" not found')
        if uid and pod["metadata"].get("uid") != uid:
            raise WriteConflict(
                f'Operation cannot be fulfilled on pods "{name}": Precondition failed: UID in precondition: '
                f"{uid}, UID in object meta: {pod['metadata'].get('uid')}"
            )
        done = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        if not done and not pod["metadata"].get("deletionTimestamp"):
            budgets = [b for b in self.list_objects("PodDisruptionBudget", key[1]) if _selects(b, pod)]
            for budget in budgets:
                allowed = int((budget.get("status") or {}).get("disruptionsAllowed") or 0)
                if allowed < 1:
                    raise EvictionRefused(
                        "Cannot evict pod as it would violate the pod's disruption budget. "
                        f"(PodDisruptionBudget {key[1]}/{budget['metadata']['name']})"
                    )
            for budget in budgets:
                budget.setdefault("status", {})["disruptionsAllowed"] = int(budget["status"]["disruptionsAllowed"]) - 1
                self.apply(budget)
        self.delete("Pod", key[1], name)

    async def set_nominated_node(self, namespace: str, name: str, uid: str, node: str) -> None:
        pod = self.get("Pod", namespace, name)
        if pod is None or (uid and pod["metadata"].get("uid") != uid):
            raise ObjectNotFound(f'pods "{name}" not found')
        status = pod.setdefault("status", {})
        if node:
            status["nominatedNodeName"] = node
        else:
            status.pop("nominatedNodeName", None)
        self.apply(pod)

    @property
    def claim_api_version(self) -> str:
        return "resource.k8s.io/v1"

    async def create_claim(self, raw: dict[str, Any]) -> dict[str, Any]:
        """POST a claim: ``generateName`` gets a random suffix, as the API server adds one."""
        await self.faults.check("create_claim")
        obj = copy_object(raw)
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
            raise InvalidObject("must be an object with metadata", obj="ResourceClaim")
        obj["kind"] = "ResourceClaim"
        obj.setdefault("apiVersion", self.claim_api_version)
        meta = obj["metadata"]
        namespace = str(meta.get("namespace") or "default")
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = self._unused_name(namespace, str(meta["generateName"]))
        if self._stored(key_of(obj)) is not None:
            raise WriteConflict(
                f'{_CLAIMS} "{meta.get("name")}" already exists', claim=f"{namespace}/{meta.get('name')}"
            )
        for field in ("resourceVersion", "uid", "deletionTimestamp"):
            meta.pop(field, None)
        obj.pop("status", None)
        return copy_object(self._create(obj))

    async def remove_claim(self, namespace: str, name: str, uid: str) -> None:
        await self.faults.check("remove_claim")
        stored = self._stored(("ResourceClaim", namespace or "default", name))
        if stored is None:
            raise ObjectNotFound(f'{_CLAIMS} "{name}" not found', claim=f"{namespace}/{name}")
        if uid and stored["metadata"].get("uid") != uid:
            raise WriteConflict(
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: {stored['metadata'].get('uid')}",
                claim=f"{namespace}/{name}",
            )
        self.delete("ResourceClaim", namespace, name)

    async def patch_pod_status(self, namespace: str, name: str, uid: str, status: dict[str, Any]) -> None:
        await self.faults.check("patch_pod_status")
        pod = self.get("Pod", namespace, name)
        if pod is None:
            raise ObjectNotFound(f'pods "{name}" not found')
        if uid and pod["metadata"].get("uid") != uid:
            raise WriteConflict(
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: {pod['metadata'].get('uid')}"
            )
        current = pod.setdefault("status", {})
        for field, value in status.items():  # a JSON merge patch, one level deep
            if value is None:
                current.pop(field, None)
            else:
                current[field] = copy_object(value)
        self.apply(pod)

    def record_event(self, namespace: str, name: str, uid: str, *, kind: str, reason: str, message: str) -> None:
        """Events are kept in ``events`` (newest last, at most 1000), as ``(pod key, type, reason, message)``."""
        self.events.append((f"{namespace}/{name}", kind, reason, message))
        del self.events[:-1000]

    def _release_claims(self, pod: dict[str, Any]) -> None:
        """The resourceclaim controller's part for a deleted pod: its entries leave the claims'
        ``reservedFor``; a claim left with none is deallocated (delete-protection finalizer
        removed) or, if its driver's controller allocated it (classic DRA), asked to be
        deallocated; a template claim the pod owned is deleted."""
        meta = pod.get("metadata") or {}
        namespace, uid = meta.get("namespace") or "default", meta.get("uid")
        for (_, ns, claim_name), stored in list(self._by_kind.get("ResourceClaim", {}).items()):
            if ns != namespace:
                continue
            claim = _thaw(stored)
            status = claim.get("status") or {}
            reserved = status.get("reservedFor") or []
            owners = claim["metadata"].get("ownerReferences") or ()
            owned = any(r.get("controller") and r.get("uid") == uid for r in owners)
            if not any(r.get("uid") == uid for r in reserved) and not owned:
                continue
            new = copy_object(claim)
            rest = [r for r in reserved if r.get("uid") != uid]
            new_status = new.setdefault("status", {})
            if rest:
                new_status["reservedFor"] = rest
            else:
                new_status.pop("reservedFor", None)
                allocation = new_status.get("allocation") or {}
                finalizers = new["metadata"].get("finalizers") or []
                if allocation.get("controller") and DELETE_PROTECTION_FINALIZER not in finalizers:
                    new_status["deallocationRequested"] = True
                else:
                    new_status.pop("allocation", None)
                    new_status.pop("devices", None)
                    new["metadata"]["finalizers"] = [f for f in finalizers if f != DELETE_PROTECTION_FINALIZER]
            try:
                if new != claim:
                    self._commit(new, "MODIFIED")
                if owned and not rest:
                    self.delete("ResourceClaim", namespace, claim_name)
            except (InvalidObject, ObjectNotFound) as exc:
                log.warning("claim.not_released", claim=f"{namespace}/{claim_name}", reason=exc.reason)

    # --- Backend protocol: classic DRA ------------------------------------------------------------

    @property
    def classic_dra(self) -> str:
        """The embedded cluster serves PodSchedulingContexts and plays the classic drivers whose
        capacity its nodes announce (``classic_driver.py``): classic DRA works here."""
        return ""

    @property
    def pod_groups(self) -> str:
        """PodGroup manifests are loaded like any object; ``gangs=False`` (``--no-gangs``) ignores them."""
        return "" if self._gangs else "gangs are switched off (--no-gangs)"

    async def create_scheduling_context(self, raw: dict[str, Any]) -> dict[str, Any]:
        """POST a PodSchedulingContext: status dropped, as the API server's strategy does."""
        await self.faults.check("create_scheduling_context")
        obj = _context_for_write(raw)
        key = key_of(obj)
        if self._stored(key) is not None:
            raise WriteConflict(f'{_CONTEXTS} "{key[2]}" already exists')
        obj.pop("status", None)
        for field in ("resourceVersion", "uid", "creationTimestamp", "deletionTimestamp"):
            obj["metadata"].pop(field, None)
        return copy_object(self._create(obj))

    async def update_scheduling_context(self, raw: dict[str, Any]) -> dict[str, Any]:
        """PUT a PodSchedulingContext: metadata the user may set and spec from ``raw``, status kept;
        without a resourceVersion the update is unconditional (the strategy allows it)."""
        await self.faults.check("update_scheduling_context")
        obj = _context_for_write(raw)
        old = self._context_for_update(obj)
        new = copy_object(old)
        for field in _USER_METADATA:
            if obj["metadata"].get(field):
                new["metadata"][field] = copy_object(obj["metadata"][field])
            else:
                new["metadata"].pop(field, None)
        new["spec"] = copy_object(obj.get("spec") or {})
        if new == old:
            return copy_object(old)
        return copy_object(self._commit(new, "MODIFIED"))

    async def update_scheduling_context_status(self, raw: dict[str, Any]) -> dict[str, Any]:
        """PUT a PodSchedulingContext's status (what drivers write); spec and metadata kept."""
        await self.faults.check("update_scheduling_context_status")
        obj = _context_for_write(raw)
        old = self._context_for_update(obj)
        new = copy_object(old)
        new["status"] = copy_object(obj.get("status") or {})
        if new == old:
            return copy_object(old)
        return copy_object(self._commit(new, "MODIFIED"))

    async def apply_scheduling_context(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply (forced) of a PodSchedulingContext: created if absent; else the spec
        fields ``raw`` names replace the stored ones (lists whole)."""
        await self.faults.check("apply_scheduling_context")
        obj = _context_for_write(raw)
        old = self._stored(key_of(obj))
        if old is None:
            obj.pop("status", None)
            for field in ("resourceVersion", "uid", "creationTimestamp"):
                obj["metadata"].pop(field, None)
            return copy_object(self._create(obj))
        new = copy_object(old)
        new.setdefault("spec", {}).update(copy_object(obj.get("spec") or {}))
        if new == old:
            return copy_object(old)
        return copy_object(self._commit(new, "MODIFIED"))

    async def delete_scheduling_context(self, namespace: str, name: str) -> None:
        await self.faults.check("delete_scheduling_context")
        if self._stored(("PodSchedulingContext", namespace or "default", name)) is None:
            raise ObjectNotFound(f'{_CONTEXTS} "{name}" not found')
        self.delete("PodSchedulingContext", namespace, name)

    def _context_for_update(self, obj: dict[str, Any]) -> dict[str, Any]:
        key = key_of(obj)
        old = self._stored(key)
        if old is None:
            raise ObjectNotFound(f'{_CONTEXTS} "{key[2]}" not found')
        meta = obj["metadata"]
        if meta.get("resourceVersion") and meta["resourceVersion"] != old["metadata"]["resourceVersion"]:
            raise WriteConflict(_modified(key))
        if meta.get("uid") and meta["uid"] != old["metadata"].get("uid"):
            raise WriteConflict(
                f'Operation cannot be fulfilled on {_CONTEXTS} "{key[2]}": Precondition failed: '
                f"UID in precondition: {meta['uid']}, UID in object meta: {old['metadata'].get('uid')}"
            )
        return old

    def classic_driver(self, name: str) -> ClassicDriver:
        """The simulated controller of driver ``name`` (made on first use; nodes announce its
        capacity with the annotation ``classic.dra-extender.io/<name>``)."""
        driver = self.classic_drivers.get(name)
        if driver is None:
            driver = ClassicDriver(_DriverView(self), name)
            self.classic_drivers[name] = driver
            driver.start()
        return driver

    def _notify_drivers(self, obj: dict[str, Any]) -> None:
        kind = obj.get("kind")
        meta = obj.get("metadata") or {}
        if kind == "Node":
            for annotation in meta.get("annotations") or ():
                if annotation.startswith(CAPACITY_ANNOTATION_PREFIX):
                    self.classic_driver(annotation[len(CAPACITY_ANNOTATION_PREFIX) :])
        if kind not in ("PodSchedulingContext", "ResourceClaim", "Pod"):
            return
        for driver in self.classic_drivers.values():
            driver.notify(str(kind), meta.get("namespace"), str(meta.get("name")))

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Create the pod's binding: set ``spec.nodeName`` and the PodScheduled condition."""
        await self.faults.check("bind_pod")
        if not node:
            raise InvalidObject("Required value", path="target.name", obj=f"Binding {namespace}/{name}")
        pod = self._stored(("Pod", namespace or "default", name))
        if pod is None:
            raise ObjectNotFound(f'pods "{name}" not found', node=node)
        meta = pod["metadata"]
        cannot = f'Operation cannot be fulfilled on pods/binding "{name}"'
        if uid and meta.get("uid") != uid:
            raise WriteConflict(
                f"{cannot}: Precondition failed: UID in precondition: {uid}, UID in object meta: {meta.get('uid')}",
                node=node,
            )
        if meta.get("deletionTimestamp"):
            raise WriteConflict(f"{cannot}: pod {name} is being deleted, cannot be assigned to a host", node=node)
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound:
            raise WriteConflict(f'{cannot}: pod {name} is already assigned to node "{bound}"', node=node)
        new = copy_object(pod)
        new.setdefault("spec", {})["nodeName"] = node
        conditions = [
            c for c in new.setdefault("status", {}).get("conditions") or () if c.get("type") != "PodScheduled"
        ]
        conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": self._clock()})
        new["status"]["conditions"] = conditions
        self._commit(new, "MODIFIED")

    def observe_nodes(self, raw_nodes: Sequence[Mapping[str, Any]]) -> None:
        """Take the labels of the Node objects a request carried, as the cluster it plays: a node
        whose labels differ is written (created if new); an unchanged one costs a comparison."""
        for raw in raw_nodes:
            meta = raw.get("metadata") or {}
            name, labels = meta.get("name"), meta.get("labels") or {}
            if not isinstance(name, str) or not name:
                continue
            stored = self.store.nodes.get(name)
            if stored is not None and stored.labels == labels:
                continue
            node = self.get("Node", None, name) or {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
            node["metadata"]["labels"] = dict(labels)
            node["metadata"].pop("resourceVersion", None)
            try:
                self.apply(node)
            except (InvalidObject, WriteConflict) as exc:
                log.warning("node.not_stored", node=name, reason=exc.reason)

    async def ensure_leader(self) -> None:
        """One process, one replica: always the leader."""

    def observe_pod(self, raw_pod: dict[str, Any]) -> None:
        """Remember a pod from a scheduler request and create its template claims.

        A pod we already hold (same namespace, name and UID) is kept as stored: it may carry a
        status written here. A pod with the same name but another UID was re-created and replaces
        the stored one.
        """
        if not isinstance(raw_pod, dict):
            raise InvalidObject("must be an object", obj="Pod")
        key = key_of({**raw_pod, "kind": "Pod"})
        stored = self._stored(key)
        uid = (raw_pod.get("metadata") or {}).get("uid")
        if stored is None or (uid and stored["metadata"].get("uid") != uid):
            # Copied only when new: this runs on every filter and prioritize request.
            pod = copy_object(raw_pod)
            pod.setdefault("apiVersion", "v1")
            pod["kind"] = "Pod"
            self._create(pod)
        self._sync_pod_claims(key)

    # --- more writes, for tests and tools -------------------------------------------------------

    def apply(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Create or replace an object whole (status included), like a restore from etcd. A given
        resourceVersion or uid must match the stored object. Pods get their template claims."""
        obj = copy_object(raw)
        if not isinstance(obj, dict):
            raise InvalidObject("must be an object")
        key = key_of(obj)
        old = self._stored(key)
        if old is None:
            stored = self._create(obj)
        else:
            meta, old_meta = obj["metadata"], old["metadata"]
            if meta.get("resourceVersion") and meta["resourceVersion"] != old_meta["resourceVersion"]:
                raise WriteConflict(_modified(key), claim=_claim_label(key))
            if meta.get("uid") and meta["uid"] != old_meta.get("uid"):
                raise WriteConflict(
                    f"Precondition failed: UID in precondition: {meta['uid']}, "
                    f"UID in object meta: {old_meta.get('uid')}"
                )
            for field in ("uid", "creationTimestamp"):
                if old_meta.get(field):
                    meta[field] = old_meta[field]
            self._set_namespace(key, obj)
            stored = self._commit(obj, "MODIFIED")
        if key[0] == "Pod":
            self._sync_pod_claims(key)
            stored = _thaw(self._objects[key])
        return copy_object(stored)

    def delete(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """Delete an object: one with finalizers only gets a ``deletionTimestamp`` (returned as
        stored); one without is removed (None). ObjectNotFound if absent."""
        key = key_of({"kind": kind, "metadata": {"name": name, "namespace": namespace or ""}})
        obj = self._stored(key)
        if obj is None:
            raise ObjectNotFound(f'{kind} "{name}" not found')
        if not obj["metadata"].get("finalizers"):
            self._remove(key, copy_object(obj))
            return None
        if obj["metadata"].get("deletionTimestamp"):
            return copy_object(obj)
        new = copy_object(obj)
        new["metadata"]["deletionTimestamp"] = self._clock()
        new["metadata"]["deletionGracePeriodSeconds"] = 0
        return copy_object(self._commit(new, "MODIFIED"))

    def delete_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.delete("Pod", namespace, name)

    def delete_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.delete("ResourceClaim", namespace, name)

    # --- synchronous reads for tests and tools --------------------------------------------------

    @property
    def resource_version(self) -> int:
        """The global counter: the resourceVersion of the latest write."""
        return self._resource_version

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """A copy of one object as stored, or None."""
        key = key_of({"kind": kind, "metadata": {"name": name, "namespace": namespace or ""}})
        obj = self._stored(key)
        return None if obj is None else copy_object(obj)

    def list_objects(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Copies of every object of a kind (optionally in one namespace), in creation order."""
        return [
            copy_object(_thaw(obj))
            for (_, ns, _), obj in self._by_kind.get(kind, {}).items()
            if namespace is None or ns == namespace
        ]

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(event, object)`` after every change (a watch for tests and tools)."""
        self._listeners.append(listener)

    # --- internals ------------------------------------------------------------------------------

    def _load(self, objects: Iterable[dict[str, Any]]) -> None:
        pods: list[ObjectKey] = []
        for raw in objects:
            obj = copy_object(raw)
            if not isinstance(obj, dict):
                raise InvalidObject(f"must be an object, not {type(raw).__name__}")
            key = key_of(obj)
            if key in self._objects:
                raise InvalidObject("defined more than once", obj=describe(obj))
            self._create(obj)
            if key[0] == "Pod":
                pods.append(key)
        for key in pods:
            self._sync_pod_claims(key)

    def _create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a new object, filling the fields the API server sets on creation."""
        key = key_of(obj)
        meta = obj["metadata"]
        self._set_namespace(key, obj)
        if not meta.get("uid"):
            meta["uid"] = str(uuid.uuid4())
        if not meta.get("creationTimestamp"):
            meta["creationTimestamp"] = self._clock()
        return self._commit(obj, "ADDED")

    @staticmethod
    def _set_namespace(key: ObjectKey, obj: dict[str, Any]) -> None:
        if key[1]:
            obj["metadata"]["namespace"] = key[1]
        else:
            obj["metadata"].pop("namespace", None)

    def _commit(self, obj: dict[str, Any], event: str) -> dict[str, Any]:
        """Give ``obj`` the next resourceVersion, feed the store, then keep it. The store decodes
        first, so an object it rejects (InvalidObject) changes nothing."""
        key = key_of(obj)
        version = self._resource_version + 1
        obj["metadata"]["resourceVersion"] = str(version)
        if key[0] in KINDS:
            # The store keeps the raw claims, templates and pods it is given: those need a copy of
            # their own; of the other kinds it keeps only the decoded model.
            self.store.upsert(copy_object(obj) if key[0] in _STORE_KEEPS_RAW else obj)
        self._resource_version = version
        stored = orjson.dumps(obj) if key[0] in _COMPACT_KINDS else obj
        self._objects[key] = stored
        self._by_kind.setdefault(key[0], {})[key] = stored
        self._notify(event, obj)
        return obj

    def _remove(self, key: ObjectKey, final: dict[str, Any]) -> dict[str, Any]:
        self._resource_version += 1
        final["metadata"]["resourceVersion"] = str(self._resource_version)
        del self._objects[key]
        del self._by_kind[key[0]][key]
        if key[0] in KINDS:
            self.store.delete(key[0], key[1] or None, key[2])
        self._notify("DELETED", final)
        return final

    def _stored(self, key: ObjectKey) -> dict[str, Any] | None:
        """The stored object as a dict (the dict itself for mutable kinds), or None."""
        value = self._objects.get(key)
        return None if value is None else _thaw(value)

    def _notify(self, event: str, obj: dict[str, Any]) -> None:
        self._notify_drivers(obj)
        if event == "DELETED" and obj.get("kind") == "Pod":
            self._collect_contexts(obj)
            self._release_claims(obj)
        for listener in self._listeners:
            listener(event, copy_object(obj))

    def _collect_contexts(self, pod: dict[str, Any]) -> None:
        """The garbage collector's part for a deleted pod: the PodSchedulingContext it controls goes
        with it (the embedded cluster runs no other owner-reference collection)."""
        meta = pod.get("metadata") or {}
        key: ObjectKey = ("PodSchedulingContext", meta.get("namespace") or "default", str(meta.get("name")))
        context = self._stored(key)
        if context is not None and any(
            ref.get("controller") and ref.get("uid") == meta.get("uid")
            for ref in context["metadata"].get("ownerReferences") or ()
        ):
            self.delete(*key)

    def _claim_for_write(self, raw: dict[str, Any]) -> dict[str, Any]:
        """The stored claim an update names, after the API server's preconditions."""
        if not isinstance(raw, dict):
            raise InvalidObject("must be an object", obj="ResourceClaim")
        if raw.get("kind") not in (None, "ResourceClaim"):
            raise InvalidObject(f"expected kind ResourceClaim, got {raw.get('kind')!r}", obj=describe(raw))
        key = key_of({**raw, "kind": "ResourceClaim"})
        old = self._stored(key)
        if old is None:
            raise ObjectNotFound(f'{_CLAIMS} "{key[2]}" not found', claim=_claim_label(key))
        if raw.get("apiVersion") and raw["apiVersion"] != old.get("apiVersion"):
            # The API server would convert; the embedded cluster keeps one version per object.
            raise InvalidObject(
                f"apiVersion {raw['apiVersion']} differs from the stored {old.get('apiVersion')} "
                "(the embedded cluster does not convert between versions)",
                obj=describe(old),
            )
        meta = raw["metadata"]
        version = meta.get("resourceVersion")
        if not version:
            raise InvalidObject(
                "Invalid value: 0x0: must be specified for an update",
                path="metadata.resourceVersion",
                obj=describe(old),
            )
        if version != old["metadata"]["resourceVersion"]:
            raise WriteConflict(_modified(key), claim=_claim_label(key))
        uid = meta.get("uid")
        if uid and uid != old["metadata"].get("uid"):
            raise WriteConflict(
                f'Operation cannot be fulfilled on {_CLAIMS} "{key[2]}": Precondition failed: '
                f"UID in precondition: {uid}, UID in object meta: {old['metadata'].get('uid')}",
                claim=_claim_label(key),
            )
        return old

    def _sync_pod_claims(self, key: ObjectKey) -> None:
        """The resourceclaim controller for one pod: create missing template claims, then record
        every claim found or created in ``status.resourceClaimStatuses``."""
        pod = _thaw(self._objects[key])
        pending = pending_template_claims(pod)
        if not pending:
            return
        namespace, uid = key[1], pod["metadata"].get("uid") or ""
        recorded: list[dict[str, str]] = []
        for pod_claim_name, template_name in pending:
            claims = (obj for (_, ns, _), obj in self._by_kind.get("ResourceClaim", {}).items() if ns == namespace)
            claim = find_pod_claim(claims, uid, pod_claim_name)
            if claim is None:
                template = self._stored(("ResourceClaimTemplate", namespace, template_name))
                if template is None:
                    continue  # not created yet: the service answers "claim not created yet"
                name = self._unused_name(namespace, generate_name(key[2], pod_claim_name))
                try:
                    claim = self._create(claim_from_template(template, pod, pod_claim_name, name))
                except InvalidObject as exc:
                    self.controller_errors.append(f"{namespace}/{key[2]}: {exc.reason}")
                    continue
            recorded.append({"name": pod_claim_name, "resourceClaimName": claim["metadata"]["name"]})
        if not recorded:
            return
        new = copy_object(pod)
        statuses = new.setdefault("status", {}).setdefault("resourceClaimStatuses", [])
        statuses.extend(recorded)
        self._commit(new, "MODIFIED")

    def _unused_name(self, namespace: str, base: str) -> str:
        while True:
            name = base + random_suffix(self._rng)
            if ("ResourceClaim", namespace, name) not in self._objects:
                return name


def _selects(budget: dict[str, Any], pod: dict[str, Any]) -> bool:
    """Whether a PodDisruptionBudget's ``spec.selector.matchLabels`` select the pod (an empty or
    missing selector selects nothing, as 1.36 reads it; ``matchExpressions`` are not read)."""
    selector = (budget.get("spec") or {}).get("selector") or {}
    wanted = selector.get("matchLabels") or {}
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())


def _context_for_write(raw: dict[str, Any]) -> dict[str, Any]:
    """A copy of a PodSchedulingContext a write carries, checked for kind and name."""
    if not isinstance(raw, dict) or not isinstance(raw.get("metadata"), dict):
        raise InvalidObject("must be an object with metadata", obj="PodSchedulingContext")
    if raw.get("kind") not in (None, "PodSchedulingContext"):
        raise InvalidObject(f"expected kind PodSchedulingContext, got {raw.get('kind')!r}", obj=describe(raw))
    obj = copy_object(raw)
    obj["kind"] = "PodSchedulingContext"
    obj.setdefault("apiVersion", "resource.k8s.io/v1alpha3")
    return obj


class _DriverView:
    """The embedded cluster as a simulated driver sees it (``DriverCluster``): reads in place."""

    def __init__(self, backend: EmbeddedBackend) -> None:
        self.backend = backend

    def read(self, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        key = key_of({"kind": kind, "metadata": {"name": name, "namespace": namespace or ""}})
        return self.backend._stored(key)

    def objects(self, kind: str) -> Iterable[Mapping[str, Any]]:
        return [_thaw(obj) for obj in self.backend._by_kind.get(kind, {}).values()]

    async def update_claim(self, raw: dict[str, Any]) -> dict[str, Any]:
        return await self.backend.update_claim(raw)

    async def update_claim_status(self, raw: dict[str, Any]) -> dict[str, Any]:
        return await self.backend.update_claim_status(raw)

    async def update_context_status(self, raw: dict[str, Any]) -> dict[str, Any]:
        return await self.backend.update_scheduling_context_status(raw)


def _modified(key: ObjectKey) -> str:
    resource = {"ResourceClaim": _CLAIMS, "PodSchedulingContext": _CONTEXTS}.get(key[0], f"{key[0].lower()}s")
    return (
        f'Operation cannot be fulfilled on {resource} "{key[2]}": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )


def _claim_label(key: ObjectKey) -> str | None:
    return f"{key[1]}/{key[2]}" if key[0] == "ResourceClaim" else None
