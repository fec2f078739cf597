"""The cluster as plain objects, explained by the extender's own code, in memory.

``Snapshot`` loads the objects (listed from a cluster, or from an extender's ``debug/objects``) into
an embedded backend and a ``SchedulingService`` over it, the same pair ``serve --cluster`` runs; so
``why`` and the device table answer exactly as the extender's filter would. Nothing is written
anywhere but to that in-memory copy (simulate binds there, so that each manifest pod sees the
devices the ones before it took).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from extender.backends.embedded import EmbeddedBackend
from extender.core.allocator import BLOCKING_TAINT_EFFECTS
from extender.core.convert import encode_attribute_value
from extender.core.errors import ExtenderError
from extender.core.model import DeviceID
from extender.manifests import ManifestError
from extender.state.service import SchedulingService
from extender.views.debug import DebugViews
from extender.views.why import why

__all__ = ["NO_SCHEDULE_EFFECTS", "PodNotFound", "Snapshot", "device_rows"]

#: Device taint effects that keep a device from new claims (the allocator's).
NO_SCHEDULE_EFFECTS = BLOCKING_TAINT_EFFECTS
#: The order objects are loaded in: what others refer to first, pods last (their template claims).
_ORDER = {"Namespace": 0, "Node": 1, "DeviceClass": 2, "ResourceSlice": 3, "ResourceClaimTemplate": 4}
_ORDER.update({"ResourceClaim": 5, "PodDisruptionBudget": 6, "Pod": 7})


class PodNotFound(Exception):
    """No such pod in the snapshot."""


class Snapshot:
    """An in-memory cluster of ``objects`` and the scheduling service over it. Objects the
    extender cannot read are left out, each reported once through ``warn``."""

    def __init__(self, objects: Iterable[Mapping[str, Any]], *, warn: Callable[[str], None] = lambda _: None) -> None:
        self.backend = EmbeddedBackend()
        self.warn = warn
        self.add(objects)
        self.service = SchedulingService(backend=self.backend, hold_seconds=0)
        self.views = DebugViews(self.service)

    def add(self, objects: Iterable[Mapping[str, Any]], *, strict: bool = False) -> list[dict[str, Any]]:
        """Create or replace ``objects`` (pods last); the objects as stored. One the extender cannot
        read is left out with a warning, or with ``strict`` raises ``ManifestError``."""
        stored: list[dict[str, Any]] = []
        for raw in sorted(objects, key=lambda o: _ORDER.get(str(o.get("kind")), 8)):
            obj = dict(raw)
            meta = dict(obj.get("metadata") or {})
            meta.pop("managedFields", None)
            meta.pop("resourceVersion", None)  # the copy numbers its own writes
            obj["metadata"] = meta
            try:
                stored.append(self.backend.apply(obj))
            except ExtenderError as exc:
                if strict:
                    raise ManifestError(f"{obj.get('kind')} {_name(obj)}: {exc.reason}") from exc
                self.warn(f"left out {obj.get('kind')} {_name(obj)}: {exc.reason}")
            except (TypeError, AttributeError, ValueError) as exc:
                # A shape the API server would refuse that the in-memory copy does not check (a
                # Pod's spec.resourceClaims not a list, ...): one line, not a traceback.
                reason = f"malformed ({type(exc).__name__}: {exc})"
                if strict:
                    raise ManifestError(f"{obj.get('kind')} {_name(obj)}: {reason}") from exc
                self.warn(f"left out {obj.get('kind')} {_name(obj)}: {reason}")
        return stored

    @property
    def node_names(self) -> list[str]:
        return self.backend.store.known_node_names()

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        pod = self.backend.get("Pod", namespace, name)
        if pod is None:
            raise PodNotFound(f'pod "{name}" not found in namespace "{namespace}"')
        return pod

    def why(self, namespace: str, name: str) -> dict[str, Any]:
        """The why document of the pod, as ``GET debug/why/{namespace}/{name}`` gives it."""
        return why(self.views, self.pod(namespace, name), self.node_names)

    async def place(self, pod: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
        """Schedule one pod as kube-scheduler would with this extender (filter, prioritize, the best
        node) and bind it in the copy. (node or None, the why document before binding)."""
        names = self.node_names
        document = why(self.views, pod, names)
        if document["error"] or not document["fits"]["count"]:
            return None, document
        namespace, name = document["pod"].split("/", 1)
        outcome = self.service.filter(pod, names)
        passing = list(outcome.node_names or ())
        if not passing:
            return None, document
        scores = self.service.prioritize(pod, passing)
        best = max(scores, key=lambda item: item[1])[0] if scores else passing[0]
        await self.service.bind(namespace, name, document["uid"], best)
        return best, document

    def pod_devices(self, pod: Mapping[str, Any]) -> list[dict[str, str]]:
        """The devices allocated to the pod's claims: claim, request and device."""
        store = self.backend.store
        try:
            claims = self.service.cluster.claims(self.service.cluster.pod(dict(pod)))
        except ExtenderError:
            return []
        out: list[dict[str, str]] = []
        for claim in claims.all:
            stored = store.claims.get(claim.key)
            if stored is None or stored.allocation is None:
                continue
            for result in stored.allocation.devices:
                out.append(
                    {
                        "claim": claim.key,
                        "request": result.request,
                        "driver": result.driver,
                        "pool": result.pool,
                        "device": result.device,
                    }
                )
        return out


def device_rows(snapshot: Snapshot, nodes: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """One row per device the nodes see: node, driver, pool, device, state, the claims holding it
    and their pods, attributes and capacity. ``state``: ``allocated``, ``shared`` (a device that
    allows several allocations, held), ``admin`` (held by admin-access claims only), ``tainted`` (a
    NoSchedule/NoExecute taint, not held) or ``free``."""
    store = snapshot.backend.store
    features = snapshot.service.features
    holders: dict[DeviceID, list[tuple[str, bool]]] = {}
    for claim in store.claims.values():
        if claim.allocation is not None:
            for result in claim.allocation.devices:
                holders.setdefault(result.device_id, []).append((claim.key, result.admin_access))
    snapshot_view = store.snapshot()
    rows: list[dict[str, Any]] = []
    for node_name in nodes if nodes is not None else snapshot.node_names:
        try:
            view = snapshot_view.node_view(store.node(node_name), features)
        except ValueError as exc:
            snapshot.warn(f"node {node_name}: {exc}")
            continue
        for entry in view.devices:
            held = holders.get(entry.id, [])
            claims = sorted({key for key, _ in held})
            device = entry.device
            if held and all(admin for _, admin in held):
                state = "admin"
            elif held:
                state = "shared" if device.allow_multiple_allocations else "allocated"
            elif any(t.effect in NO_SCHEDULE_EFFECTS for t in device.taints):
                state = "tainted"
            else:
                state = "free"
            rows.append(
                {
                    "node": node_name,
                    "driver": entry.id.driver,
                    "pool": entry.id.pool,
                    "device": entry.id.device,
                    "state": state,
                    "claims": claims,
                    "pods": _pods_of(snapshot, claims),
                    "attributes": {k: encode_attribute_value(v) for k, v in device.attributes.items()},
                    "capacity": {k: str(v.value) for k, v in device.capacity.items()},
                }
            )
    return rows


def _pods_of(snapshot: Snapshot, claim_keys: Iterable[str]) -> list[str]:
    pods: list[str] = []
    for key in claim_keys:
        claim = snapshot.backend.store.claims.get(key)
        if claim is not None:
            pods += [f"{claim.namespace}/{ref.name}" for ref in claim.reserved_for if ref.resource == "pods"]
    return sorted(set(pods))


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))
