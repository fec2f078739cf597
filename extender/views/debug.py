"""What the debug endpoints show: claims, pods, nodes and PodSchedulingContexts as the service
sees them, and explain's JSON (``explanation.py``).

Read-only renderings for ``/debug/...`` (``server/debug.py``); nothing here changes state: explain
reads the filter's ``Attempt``, which places no hold and publishes no ``potentialNodes``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from extender.core.convert import V1ALPHA3, encode_attribute_value, resource_claim_to_v1
from extender.core.pools import pool_status
from extender.state import cooperative
from extender.state.service import SchedulingService
from extender.views.explanation import explain_pod
from extender.views.holders import device_holders

__all__ = [
    "DebugViews",
    "without_v1_form",
]


def without_v1_form(kind: str, raw: Mapping[str, Any], *, api_version: str | None = None) -> bool:
    """Whether a raw object has no faithful resource.k8s.io/v1 form, so that the debug endpoints
    answer it as stored: classic DRA's v1alpha3 claims and templates with ``spec.controller`` (v1
    has no place for their driver) and v1alpha3 DeviceClasses with ``spec.suitableNodes`` (where
    the classic claims of the class may go). ``api_version`` is used when ``raw`` has none."""
    if (raw.get("apiVersion") or api_version) != V1ALPHA3:
        return False
    spec = raw.get("spec")
    if kind == "ResourceClaimTemplate":
        spec = spec.get("spec") if isinstance(spec, dict) else None
    if not isinstance(spec, dict):
        return False
    if kind == "DeviceClass":
        return spec.get("suitableNodes") is not None
    return kind in ("ResourceClaim", "ResourceClaimTemplate") and bool(spec.get("controller"))


def _pod_name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name") or "")


class DebugViews:
    """The read-only views over one service (its cluster, its attempts, its preemption)."""

    def __init__(self, service: SchedulingService) -> None:
        self.service = service
        self.cluster = service.cluster
        self.store = service.store

    def explain(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> dict[str, Any]:
        """Per node, per claim, per request: fits or not and why (``POST debug/explain``)."""
        return explain_pod(self.service, pod, node_names).to_dict()

    async def explain_cooperatively(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> dict[str, Any]:
        """``explain``, letting the event loop run during a long search."""
        return await cooperative.run(self.explain, pod, node_names)

    def claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The claim as resource.k8s.io/v1 JSON, whatever version it is stored in; a classic DRA
        claim (v1alpha3 ``spec.controller``) as stored, since v1 has no place for its driver."""
        raw = self.store.raw_claims.get(f"{namespace}/{name}")
        if raw is None:
            return None
        if without_v1_form("ResourceClaim", raw):
            return copy.deepcopy(raw)
        return resource_claim_to_v1(raw)

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        raw = self.store.pods.get(f"{namespace}/{name}")
        return copy.deepcopy(raw) if raw is not None else None

    def scheduling_context(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The PodSchedulingContext (classic DRA; named after its pod) as the store holds it."""
        raw = self.store.raw_scheduling_contexts.get(f"{namespace}/{name}")
        return copy.deepcopy(raw) if raw is not None else None

    def pod_group(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A PodGroup as the service sees it: its gang policy, topology and claims, its members by
        state (waiting, or placed on a node), and the open pass of its gang (plan, answers, or why
        no plan exists); None when the store has no such group."""
        group = self.store.pod_groups.get(f"{namespace}/{name}")
        if group is None:
            return None
        members = self.service.gangs.members(group)
        return {
            "name": group.name,
            "namespace": group.namespace,
            "uid": group.uid,
            "apiVersion": group.api_version,
            "minCount": group.min_count,
            "topologyKey": group.topology_key or None,
            "claims": [
                {"name": c.name, "resourceClaimName": c.claim_name, "resourceClaimTemplateName": c.template_name}
                for c in group.claims
            ],
            "seen": self.service.gangs.enabled,
            "waiting": [_pod_name(p) for p in members.waiting],
            "placed": {_pod_name(p): (p.get("spec") or {}).get("nodeName") or "(binding)" for p in members.placed},
            "need": members.need,
            "pass": self.service.gang_filter.describe(group.key),
        }

    def node(self, node_name: str) -> dict[str, Any]:
        """The node's devices, each with its pool, attributes and the claims holding it: allocated
        ones by key, a bind's in flight with " (binding)", a tentative hold with " (held)"."""
        holders = {
            device: [h.label() for h in held]
            for device, held in device_holders(self.store, self.cluster.ledger).items()
        }
        node = self.store.node(node_name)
        view = self.store.snapshot().node_view(node, self.cluster.features)
        pools = [
            {
                "driver": pool.driver,
                "pool": pool.name,
                "generation": pool.generation,
                "status": pool_status(pool),
                **({"reason": pool.invalid_reason} if pool.invalid_reason else {}),
            }
            for pool in view.pools
        ]
        devices = [
            {
                "driver": entry.id.driver,
                "pool": entry.id.pool,
                "device": entry.id.device,
                "slice": entry.slice.name,
                "attributes": {k: encode_attribute_value(v) for k, v in entry.device.attributes.items()},
                "capacity": {k: str(v.value) for k, v in entry.device.capacity.items()},
                "claims": holders.get(entry.id, []),
            }
            for entry in view.devices
        ]
        return {"node": node_name, "labels": dict(node.labels), "pools": pools, "devices": devices}
