"""What the debug endpoints show: claims, pods and nodes as the service sees them, and explain.

Read-only renderings for ``/debug/...`` (``server/debug.py``); nothing here changes state.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from extender.core.answers import NOT_AVAILABLE, NOT_SYNCED, Unresolvable
from extender.core.errors import ExtenderError
from extender.core.explain import explain_node
from extender.core.model import DeviceID, UnparsedVersion
from extender.state.claims import pod_identity
from extender.state.cluster import ClusterView
from extender.state.verdicts import FilterOutcome

__all__ = ["DebugViews"]


class DebugViews:
    """``filter_without_holds`` answers as the filter verb would, without placing holds."""

    def __init__(
        self, cluster: ClusterView, filter_without_holds: Callable[[Mapping[str, Any], Sequence[str]], FilterOutcome]
    ) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self._filter = filter_without_holds

    def claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        raw = self.store.raw_claims.get(f"{namespace}/{name}")
        return copy.deepcopy(raw) if raw is not None else None

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        raw = self.store.pods.get(f"{namespace}/{name}")
        return copy.deepcopy(raw) if raw is not None else None

    def node(self, node_name: str) -> dict[str, Any]:
        """The node's devices, each with its pool, attributes and the claims holding it: allocated
        ones by key, a bind's in flight with " (binding)", a tentative hold with " (held)"."""
        holders: dict[DeviceID, list[str]] = {}
        for claim in self.store.claims.values():
            if claim.allocation is not None:
                for result in claim.allocation.devices:
                    holders.setdefault(result.device_id, []).append(claim.key)
        for entry in self.cluster.ledger:
            mark = "held" if entry.tentative else "binding"
            for result in entry.result.devices:
                holders.setdefault(result.device_id, []).append(f"{entry.claim_key} ({mark})")
        node = self.store.node(node_name)
        view = self.store.snapshot().node_view(node, self.cluster.features)
        pools = [
            {
                "driver": pool.driver,
                "pool": pool.name,
                "generation": pool.generation,
                "status": "incomplete" if pool.incomplete else ("invalid" if pool.invalid_reason else "ok"),
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
                "attributes": {k: _attribute_json(v) for k, v in entry.device.attributes.items()},
                "capacity": {k: str(v.value) for k, v in entry.device.capacity.items()},
                "claims": holders.get(entry.id, []),
            }
            for entry in view.devices
        ]
        return {"node": node_name, "labels": dict(node.labels), "pools": pools, "devices": devices}

    def explain(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> dict[str, Any]:
        """Per node, per claim, per request: fits or not and why (for /debug/explain)."""
        namespace, name, _ = pod_identity(pod)
        out: dict[str, Any] = {"pod": f"{namespace}/{name}", "error": "", "nodes": []}
        if not self.cluster.backend.synced:
            out["error"] = NOT_SYNCED
            return out
        try:
            pod = self.cluster.pod(pod)
            claims = self.cluster.claims(pod)
        except ExtenderError as exc:
            out["error"] = exc.reason
            return out
        out["claims"] = [claim.key for claim in claims.all]
        allocator = self.cluster.allocator(claims)
        outcome = self._filter(pod, node_names)
        out["error"] = outcome.error
        for node_name in node_names:
            node = self.store.node(node_name)
            explanation = explain_node(
                claims.to_allocate,
                node,
                snapshot=allocator.snapshot,
                classes=self.store.classes,
                allocated=allocator.allocated,
                features=self.cluster.features,
                selectors=self.store.selectors,
            ).to_dict()
            if node_name in outcome.unresolvable:
                explanation["outcome"] = "FailedAndUnresolvable"
                explanation["reason"] = outcome.unresolvable[node_name]
            elif node_name in outcome.failed:
                explanation["outcome"] = "Failed"
                explanation["reason"] = outcome.failed[node_name]
            elif outcome.error:
                explanation["outcome"] = "Error"
            else:
                explanation["outcome"] = "Fits"
            if claims.allocated:
                try:
                    answer: object = allocator.answer(node)
                except ExtenderError:
                    answer = None  # the filter's error says it already
                if isinstance(answer, Unresolvable) and answer.claim is not None:
                    explanation["unavailableClaim"] = answer.claim
                    explanation["message"] = f"{NOT_AVAILABLE}: claim {answer.claim} is allocated on other nodes"
            if explanation["outcome"] != "Fits":
                # explain_node looks only at the claims still to allocate; the verdict is the filter's
                explanation["fits"] = False
            out["nodes"].append(explanation)
        return out


def _attribute_json(value: object) -> object:
    if isinstance(value, bool | int | str):
        return value
    if isinstance(value, UnparsedVersion):
        return value.text
    return str(value)
