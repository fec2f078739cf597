"""What the debug endpoints show: claims, pods, nodes and PodSchedulingContexts as the service
sees them, and explain.

Read-only renderings for ``/debug/...`` (``server/debug.py``); nothing here changes state: explain
runs the filter without holds, which also publishes no ``potentialNodes`` of classic DRA.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from extender.core.answers import NOT_AVAILABLE, NOT_SYNCED, Unresolvable
from extender.core.classic import EXCLUDED_BY_CLASS, WAITING_FOR_DRIVER, PendingClassic, may_select, node_problem
from extender.core.convert import V1ALPHA3, encode_attribute_value, resource_claim_to_v1
from extender.core.errors import ExtenderError
from extender.core.explain import explain_node
from extender.core.model import NodeInfo, PodSchedulingContext
from extender.core.pools import pool_status
from extender.state import cooperative
from extender.state.attempt import Attempt
from extender.state.claims import PodClaims, pod_identity
from extender.state.cluster import ClusterView
from extender.state.holders import device_holders
from extender.state.preemption import DevicePreemption
from extender.state.verdicts import FilterOutcome

__all__ = [
    "CLASSIC_EXCLUDED",
    "CLASSIC_NOT_ANSWERED",
    "CLASSIC_NOT_ASKED",
    "CLASSIC_SUITABLE",
    "CLASSIC_UNSUITABLE",
    "DebugViews",
    "without_v1_form",
]

# Per node and pending classic claim, what explain says (``verdict``): the first two fail the node
# (the filter's deny-list), the last three pass it (the driver decides at bind).
CLASSIC_EXCLUDED = "excluded-by-class"  # a class's suitableNodes does not select the node
CLASSIC_UNSUITABLE = "unsuitable"  # the driver listed the node in unsuitableNodes
CLASSIC_SUITABLE = "suitable"  # the driver was asked about the node and did not list it
CLASSIC_NOT_ASKED = "not-asked"  # the driver answered, but the node is not among the potentialNodes
CLASSIC_NOT_ANSWERED = "not-answered"  # the driver has not answered for the claim yet


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


class DebugViews:
    """``attempt`` decides as the filter verb does (``SchedulingService.attempt``), read-only."""

    def __init__(self, cluster: ClusterView, attempt: Callable[[Mapping[str, Any], Sequence[str]], Attempt]) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self._attempt = attempt
        #: Set by the service: explain then says who would have to go for a pod no node fits.
        self.preemption: DevicePreemption | None = None

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
        context = self.store.scheduling_contexts.get(claims.pod_key) if claims.classic else None
        if claims.classic:
            out["claims"] += [entry.claim.key for entry in claims.classic]
            out["classic"] = _classic_summary(claims.classic, context)
        allocator = self.cluster.allocator(claims)
        outcome = self._attempt(pod, node_names).outcome  # the filter's decision, none of its effects
        out["error"] = outcome.error
        # Explained node by node, no search budget sees this loop: it lets the event loop run
        # itself (under ``cooperative.run``) every slice of work, as a search does.
        pacer = cooperative.Pacer(self.cluster.slice_seconds)
        for node_name in node_names:
            pacer.step()
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
            if claims.classic:
                _explain_classic_node(explanation, claims, node, context)
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
        self._explain_preemption(out, claims, outcome)
        return out

    def _explain_preemption(self, out: dict[str, Any], claims: PodClaims, outcome: FilterOutcome) -> None:
        """For a pod no node fits: per node that failed for want of devices, who would have to go
        (``DevicePreemption.victims_for``; nothing is evicted)."""
        preemption = self.preemption
        if preemption is None or outcome.node_names or outcome.error or not outcome.failed or not claims.to_allocate:
            return
        victims = preemption.victims_for(claims, sorted(outcome.failed))
        by_node: dict[str, Any] = {}
        for node, found in victims.items():
            if isinstance(found, str):
                by_node[node] = {"victims": [], "message": found}
            elif found is None:
                by_node[node] = {"victims": None, "message": "no set of lower-priority pods frees enough devices"}
            else:
                by_node[node] = {
                    "victims": [
                        {"pod": v.key, "uid": v.uid, "priority": v.priority, "claims": list(v.claims)} for v in found
                    ],
                    "message": f"{len(found)} pod(s) of lower priority would have to go",
                }
        out["preemption"] = {
            "enabled": preemption.enabled,
            "priority": claims.priority,
            "nodes": by_node,
        }
        for explanation in out["nodes"]:
            entry = by_node.get(explanation.get("node", ""))
            if entry is not None:
                explanation["preemption"] = entry


def _classic_summary(pending: Sequence[PendingClassic], context: PodSchedulingContext | None) -> dict[str, Any]:
    """The pod's pending classic claims, their drivers' answers and the context, as explain shows
    them: whether the node chosen at bind may be selected for the drivers now (the trigger rule),
    or the pod waits for the drivers (what the filter answers then)."""
    selectable = may_select(pending)
    claims: list[dict[str, Any]] = []
    for entry in pending:
        item: dict[str, Any] = {
            "claim": entry.claim.key,
            "podClaimName": entry.pod_claim_name,
            "driver": entry.claim.controller,
            "answered": entry.unsuitable is not None,
        }
        if entry.unsuitable is not None:
            item["unsuitableNodes"] = sorted(entry.unsuitable)
        claims.append(item)
    summary: dict[str, Any] = {
        "claims": claims,
        "context": None
        if context is None
        else {"selectedNode": context.selected_node, "potentialNodes": list(context.potential_nodes)},
        "maySelect": selectable,
    }
    if selectable:
        summary["message"] = "the node chosen at bind is selected for the drivers, which allocate the claims for it"
    else:
        summary["message"] = WAITING_FOR_DRIVER
        summary["waitingFor"] = [entry.claim.key for entry in pending if entry.unsuitable is None]
    return summary


def _explain_classic_node(
    explanation: dict[str, Any], claims: PodClaims, node: NodeInfo, context: PodSchedulingContext | None
) -> None:
    """Add the node's classic part (``explanation["classic"]``): per pending claim, whether the
    filter's deny-list lets the node pass and why. When the structured claims fit, the node's
    ``message`` and ``detail`` become the classic reason, or the wait for the drivers."""
    potential = frozenset(context.potential_nodes) if context is not None else frozenset()
    entries: list[dict[str, Any]] = []
    first_problem = ""
    for entry in claims.classic:
        verdict, message = _classic_verdict(entry, node, potential)
        entries.append(
            {"claim": entry.claim.key, "driver": entry.claim.controller, "verdict": verdict, "message": message}
        )
        if not first_problem and verdict in (CLASSIC_EXCLUDED, CLASSIC_UNSUITABLE):
            first_problem = f"claim {entry.claim.key} (driver {entry.claim.controller}): {message}"
    problem = node_problem(claims.classic, node)
    explanation["classic"] = {"reason": problem.reason if problem is not None else "", "claims": entries}
    if not explanation["fits"]:
        return  # the structured claims' explanation comes first
    if problem is not None:
        explanation["message"] = problem.reason
        explanation["detail"] = first_problem
    elif not may_select(claims.classic):
        unanswered = [entry for entry in claims.classic if entry.unsuitable is None]
        explanation["message"] = WAITING_FOR_DRIVER
        explanation["detail"] = "no answer yet from the driver of " + ", ".join(
            f"claim {entry.claim.key} ({entry.claim.controller})" for entry in unanswered
        )


def _classic_verdict(entry: PendingClassic, node: NodeInfo, potential: frozenset[str]) -> tuple[str, str]:
    problem = node_problem([entry], node)
    if problem is not None:
        if problem.reason == EXCLUDED_BY_CLASS:
            return CLASSIC_EXCLUDED, problem.reason
        return CLASSIC_UNSUITABLE, problem.reason
    if entry.unsuitable is None:
        return CLASSIC_NOT_ANSWERED, "the driver has not answered yet; the node passes (the driver decides at bind)"
    if node.name in potential:
        return CLASSIC_SUITABLE, "the driver did not list the node as unsuitable"
    return CLASSIC_NOT_ASKED, "not among the published potentialNodes: the driver was not asked about the node yet"
