"""Explain: the filter's ``Attempt`` explained per node, claim and request, as typed values.

``explain_pod(service, pod, node_names)`` asks the service for the same read-only ``Attempt`` the
filter verb decides from (no hold, no ``potentialNodes`` published), then for every node adds what
``core/explain.explain_node`` counts of its devices, the node's outcome as filter answered it, the
classic DRA part and, for a pod no node fits, who would have to go (``DevicePreemption.victims_for``).
``PodExplanation.to_dict()`` is ``POST debug/explain``'s JSON; ``why``, the device map's pending
list and ``kubectl dra`` read the typed values, so an explanation can never disagree with filter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from extender.core.answers import NOT_AVAILABLE, NOT_SYNCED, Unresolvable
from extender.core.classic import EXCLUDED_BY_CLASS, WAITING_FOR_DRIVER, PendingClassic, may_select, node_problem
from extender.core.errors import ExtenderError
from extender.core.explain import ClaimExplanation, NodeExplanation, PoolExplanation, explain_node
from extender.core.model import NodeInfo, PodSchedulingContext
from extender.core.preemption import Victim
from extender.state import cooperative
from extender.state.cache.claims import PodClaims
from extender.state.cache.pods import pod_identity
from extender.state.filter.verdicts import FilterOutcome

if TYPE_CHECKING:
    from extender.state.service import SchedulingService

__all__ = [
    "CLASSIC_EXCLUDED",
    "CLASSIC_NOT_ANSWERED",
    "CLASSIC_NOT_ASKED",
    "CLASSIC_SUITABLE",
    "CLASSIC_UNSUITABLE",
    "ERROR",
    "FAILED",
    "FITS",
    "UNRESOLVABLE",
    "ClassicClaimOnNode",
    "ClassicOnNode",
    "ExplainedNode",
    "NodePreemption",
    "PodExplanation",
    "PreemptionExplanation",
    "explain_pod",
]

# A node's outcome, as the filter answered it.
FITS = "Fits"
FAILED = "Failed"
UNRESOLVABLE = "FailedAndUnresolvable"
ERROR = "Error"

# Per node and pending classic claim, what explain says (``verdict``): the first two fail the node
# (the filter's deny-list), the last three pass it (the driver decides at bind).
CLASSIC_EXCLUDED = "excluded-by-class"  # a class's suitableNodes does not select the node
CLASSIC_UNSUITABLE = "unsuitable"  # the driver listed the node in unsuitableNodes
CLASSIC_SUITABLE = "suitable"  # the driver was asked about the node and did not list it
CLASSIC_NOT_ASKED = "not-asked"  # the driver answered, but the node is not among the potentialNodes
CLASSIC_NOT_ANSWERED = "not-answered"  # the driver has not answered for the claim yet


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassicClaimOnNode:
    """One pending classic claim on one node: whether the filter's deny-list lets the node pass."""

    claim: str
    driver: str
    verdict: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"claim": self.claim, "driver": self.driver, "verdict": self.verdict, "message": self.message}


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassicOnNode:
    """The node's classic part: the deny-list's reason ("" when it passes) and each claim's verdict."""

    reason: str
    claims: tuple[ClassicClaimOnNode, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"reason": self.reason, "claims": [c.to_dict() for c in self.claims]}


@dataclass(frozen=True, slots=True, kw_only=True)
class NodePreemption:
    """Who would have to go for the pod to fit on a node: ``victims`` most important first, () when
    nobody needs to (devices being freed, ``message`` says), None when no set of lower-priority pods
    frees enough."""

    victims: tuple[Victim, ...] | None
    message: str

    def victims_dicts(self) -> list[dict[str, Any]] | None:
        if self.victims is None:
            return None
        return [{"pod": v.key, "uid": v.uid, "priority": v.priority, "claims": list(v.claims)} for v in self.victims]

    def to_dict(self) -> dict[str, Any]:
        return {"victims": self.victims_dicts(), "message": self.message}


@dataclass(frozen=True, slots=True, kw_only=True)
class PreemptionExplanation:
    """For a pod no node fits: per node that failed for want of devices, ``NodePreemption``."""

    enabled: bool
    priority: int
    nodes: Mapping[str, NodePreemption]

    def to_dict(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "priority": self.priority,
            "nodes": {node: entry.to_dict() for node, entry in self.nodes.items()},
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ExplainedNode:
    """One node: its devices counted (``devices``, core's ``NodeExplanation``, over the claims still
    to allocate), the filter's ``outcome`` and ``reason`` for it, and the final ``fits``,
    ``message`` and ``detail`` (the filter's verdict, the classic part's or an allocated claim's
    where those decide). ``excluded_by_pod``: ruled out by the pod's own node selector (``why``)."""

    devices: NodeExplanation
    outcome: str
    reason: str = ""
    fits: bool
    message: str
    detail: str
    unavailable_claim: str | None = None
    classic: ClassicOnNode | None = None
    preemption: NodePreemption | None = None
    excluded_by_pod: bool = False

    @property
    def node(self) -> str:
        return self.devices.node

    @property
    def claims(self) -> tuple[ClaimExplanation, ...]:
        return self.devices.claims

    @property
    def pools(self) -> tuple[PoolExplanation, ...]:
        return self.devices.pools

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = self.devices.to_dict()
        if self.classic is not None:
            out["classic"] = self.classic.to_dict()
        out["fits"] = self.fits
        out["message"] = self.message
        if self.detail:
            out["detail"] = self.detail  # after "classic" when the classic part gave it
        else:
            out.pop("detail", None)
        out["outcome"] = self.outcome
        if self.outcome in (FAILED, UNRESOLVABLE):
            out["reason"] = self.reason
        if self.unavailable_claim is not None:
            out["unavailableClaim"] = self.unavailable_claim
        if self.preemption is not None:
            out["preemption"] = self.preemption.to_dict()
        if self.excluded_by_pod:
            out["excludedByPod"] = True
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class PodExplanation:
    """The whole explanation: ``error`` fails every node (then ``nodes`` may be empty); ``claims``
    are the pod's claim keys (classic ones after the structured ones); ``classic`` the pending
    classic claims' summary."""

    pod: str
    error: str = ""
    claims: tuple[str, ...] | None = None
    classic: Mapping[str, Any] | None = None
    nodes: tuple[ExplainedNode, ...] = ()
    preemption: PreemptionExplanation | None = None
    #: For a member of a gang: the group, its members and its last pass (the plan, or why none);
    #: the nodes above say what the pod's own devices find, which the gang's plan decides among.
    gang: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pod": self.pod, "error": self.error, "nodes": [n.to_dict() for n in self.nodes]}
        if self.gang is not None:
            out["gang"] = dict(self.gang)
        if self.claims is not None:
            out["claims"] = list(self.claims)
        if self.classic is not None:
            out["classic"] = dict(self.classic)
        if self.preemption is not None:
            out["preemption"] = self.preemption.to_dict()
        return out


def explain_pod(service: SchedulingService, pod: Mapping[str, Any], node_names: Sequence[str]) -> PodExplanation:
    """See the module docstring. Explained node by node: no search budget sees this loop, so it lets
    the event loop run itself (under ``cooperative.run``) every slice of work, as a search does."""
    namespace, name, _ = pod_identity(pod)
    key = f"{namespace}/{name}"
    cluster = service.cluster
    if not cluster.backend.synced:
        return PodExplanation(pod=key, error=NOT_SYNCED)
    try:
        pod = cluster.pod(pod)
        claims = cluster.claims(pod)
    except ExtenderError as exc:
        return PodExplanation(pod=key, error=exc.reason)
    store = cluster.store
    keys = tuple(claim.key for claim in claims.all) + tuple(entry.claim.key for entry in claims.classic)
    context = store.scheduling_contexts.get(claims.pod_key) if claims.classic else None
    allocator = cluster.allocator(claims)
    outcome = service.attempt(pod, node_names).outcome  # the filter's decision, none of its effects
    pacer = cooperative.Pacer(cluster.slice_seconds)
    nodes: list[ExplainedNode] = []
    for node_name in node_names:
        pacer.step()
        node = store.node(node_name)
        devices = explain_node(
            claims.to_allocate,
            node,
            snapshot=allocator.snapshot,
            classes=store.classes,
            allocated=allocator.allocated,
            features=cluster.features,
            selectors=store.selectors,
        )
        unavailable = None
        if claims.allocated:
            try:
                answer: object = allocator.answer(node)
            except ExtenderError:
                answer = None  # the filter's error says it already
            if isinstance(answer, Unresolvable) and answer.claim is not None:
                unavailable = answer.claim
        nodes.append(_explained_node(devices, node, claims, context, outcome, unavailable))
    preemption = _preemption(service, claims, outcome)
    if preemption is not None:
        nodes = [_with_preemption(n, preemption.nodes.get(n.node)) for n in nodes]
    return PodExplanation(
        pod=key,
        error=outcome.error,
        claims=keys,
        classic=_classic_summary(claims.classic, context) if claims.classic else None,
        nodes=tuple(nodes),
        preemption=preemption,
        gang=_gang(service, pod),
    )


def _gang(service: SchedulingService, pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """The gang part of an explanation (read-only: no pass is started or planned here)."""
    group = service.gangs.group_of(pod)
    if group is None or not group.gang:
        return None
    members = service.gangs.members(group)
    open_pass = service.gang_filter.passes.get(group.key)
    uid = str((pod.get("metadata") or {}).get("uid") or "")
    return {
        "podGroup": group.key,
        "minCount": group.min_count,
        "topologyKey": group.topology_key or None,
        "waiting": len(members.waiting),
        "placed": len(members.placed),
        "need": members.need,
        "plannedNode": None if open_pass is None else open_pass.node_of(uid),
        "reason": "" if open_pass is None else open_pass.reason,
    }


def _explained_node(
    devices: NodeExplanation,
    node: NodeInfo,
    claims: PodClaims,
    context: PodSchedulingContext | None,
    outcome: FilterOutcome,
    unavailable: str | None,
) -> ExplainedNode:
    """The node's outcome as filter answered it, and the message that says why: the devices', the
    classic part's when the structured claims fit, or an allocated claim's that is elsewhere."""
    fits, message, detail = devices.fits, devices.message, devices.detail
    classic = None
    if claims.classic:
        classic, classic_message = _classic_on_node(claims, node, context)
        if fits and classic_message is not None:
            message, detail = classic_message
    name = node.name
    reason = ""
    if name in outcome.unresolvable:
        result, reason = UNRESOLVABLE, outcome.unresolvable[name]
    elif name in outcome.failed:
        result, reason = FAILED, outcome.failed[name]
    elif outcome.error:
        result = ERROR
    else:
        result = FITS
    if unavailable is not None:
        message = f"{NOT_AVAILABLE}: claim {unavailable} is allocated on other nodes"
    return ExplainedNode(
        devices=devices,
        outcome=result,
        reason=reason,
        # explain_node looks only at the claims still to allocate; the verdict is the filter's
        fits=fits and result == FITS,
        message=message,
        detail=detail,
        unavailable_claim=unavailable,
        classic=classic,
    )


def _with_preemption(node: ExplainedNode, entry: NodePreemption | None) -> ExplainedNode:
    return node if entry is None else replace(node, preemption=entry)


def _preemption(service: SchedulingService, claims: PodClaims, outcome: FilterOutcome) -> PreemptionExplanation | None:
    """For a pod no node fits: per node that failed for want of devices, who would have to go
    (``DevicePreemption.victims_for``; nothing is evicted)."""
    preemption = service.preemption
    if outcome.node_names or outcome.error or not outcome.failed or not claims.to_allocate:
        return None
    by_node: dict[str, NodePreemption] = {}
    for node, found in preemption.victims_for(claims, sorted(outcome.failed)).items():
        if isinstance(found, str):
            by_node[node] = NodePreemption(victims=(), message=found)
        elif found is None:
            by_node[node] = NodePreemption(victims=None, message="no set of lower-priority pods frees enough devices")
        else:
            by_node[node] = NodePreemption(
                victims=tuple(found), message=f"{len(found)} pod(s) of lower priority would have to go"
            )
    return PreemptionExplanation(enabled=preemption.enabled, priority=claims.priority, nodes=by_node)


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


def _classic_on_node(
    claims: PodClaims, node: NodeInfo, context: PodSchedulingContext | None
) -> tuple[ClassicOnNode, tuple[str, str] | None]:
    """The node's classic part: per pending claim, whether the filter's deny-list lets the node pass
    and why; and, where the classic claims decide, the node's message and detail (the classic
    reason, or the wait for the drivers)."""
    potential = frozenset(context.potential_nodes) if context is not None else frozenset()
    entries: list[ClassicClaimOnNode] = []
    first_problem = ""
    for entry in claims.classic:
        verdict, message = _classic_verdict(entry, node, potential)
        entries.append(
            ClassicClaimOnNode(claim=entry.claim.key, driver=entry.claim.controller, verdict=verdict, message=message)
        )
        if not first_problem and verdict in (CLASSIC_EXCLUDED, CLASSIC_UNSUITABLE):
            first_problem = f"claim {entry.claim.key} (driver {entry.claim.controller}): {message}"
    problem = node_problem(claims.classic, node)
    part = ClassicOnNode(reason=problem.reason if problem is not None else "", claims=tuple(entries))
    if problem is not None:
        return part, (problem.reason, first_problem)
    if not may_select(claims.classic):
        unanswered = [entry for entry in claims.classic if entry.unsuitable is None]
        return part, (
            WAITING_FOR_DRIVER,
            "no answer yet from the driver of "
            + ", ".join(f"claim {entry.claim.key} ({entry.claim.controller})" for entry in unanswered),
        )
    return part, None


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
