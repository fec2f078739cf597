"""Why a pod does not fit: explain's per-node answer condensed into what a person asks first.

``why(views, pod, node_names)`` reads ``explain_pod``'s typed explanation (the filter's own
``Attempt``, explained per node, claim and request, with who would have to go for a pod no node
fits) and derives:

- ``summary``: one line in kube-scheduler's words, ``0/4 nodes are available: 3 cannot allocate
  all claims, 1 no devices of the requested device classes on the node.``;
- ``fits``: the nodes that fit now (the first few and the count);
- ``reasons``: the nodes grouped by outcome and reason, with a few example nodes each;
- ``closest``: the failing nodes ranked by how near they came (devices short, requests left
  unsatisfied, matching devices present), each with the node's short reason and detail;
- ``suggestions``: what would have to change, from the same data: which claims hold the devices
  the closest nodes lack (and their pods), the preemption victims where preemption would help, a
  missing DeviceClass, selectors that match nothing anywhere, taints, constraints, the pod's own
  node selector, pools being updated or invalid, claims allocated on other nodes.

The pod's ``spec.nodeSelector`` and required node affinity are applied here too (kube-scheduler
filters those before it asks the extender, so the filter never sees them): a node they rule out
is reported as kube-scheduler would, and if the devices would fit there a suggestion says so.

Read-only, synchronous, no HTTP: the server (``debug/why``) and ``kubectl dra`` call it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from extender.core.cel import CelCompileError
from extender.core.convert import decode_node_selector
from extender.core.errors import ExtenderError, InvalidObject
from extender.core.explain import (
    VERDICT_BLOCKED,
    VERDICT_ERROR,
    VERDICT_FITS,
    VERDICT_IN_USE,
    VERDICT_NO_CLASS_MATCH,
    VERDICT_NO_SELECTOR_MATCH,
    VERDICT_TOO_FEW,
    ClaimExplanation,
    RequestExplanation,
)
from extender.core.model import DeviceID, ExactRequest, NodeInfo, NodeSelector, ResourceClaim
from extender.core.nodeselector import node_matches
from extender.core.preemption import Victim
from extender.state.cache.pods import pod_identity
from extender.views.debug import DebugViews
from extender.views.explanation import (
    FAILED,
    FITS,
    UNRESOLVABLE,
    ExplainedNode,
    NodePreemption,
    PreemptionExplanation,
    explain_pod,
)
from extender.views.holders import device_holders

__all__ = [
    "CLOSEST_SHOWN",
    "EXAMPLES_PER_REASON",
    "FITS_SHOWN",
    "NODE_SELECTOR_MISMATCH",
    "why",
]

#: How many fitting nodes ``fits.nodes`` names (``fits.count`` counts them all).
FITS_SHOWN = 10
#: Example nodes per reason group.
EXAMPLES_PER_REASON = 3
#: Failing nodes in ``closest``.
CLOSEST_SHOWN = 3
#: kube-scheduler's NodeAffinity text, for nodes the pod's own node selector rules out.
NODE_SELECTOR_MISMATCH = "node(s) didn't match Pod's node affinity/selector"


def why(views: DebugViews, pod: Mapping[str, Any], node_names: Sequence[str]) -> dict[str, Any]:
    """The why document of ``pod`` over ``node_names`` (see the module docstring)."""
    namespace, name, uid = pod_identity(pod)
    spec = pod.get("spec") or {}
    bound = spec.get("nodeName") or None
    out: dict[str, Any] = {
        "pod": f"{namespace}/{name}",
        "uid": uid,
        "bound": bound,
        "error": "",
        "summary": "",
        "nodes": len(node_names),
        "fits": {"count": 0, "nodes": []},
        "reasons": [],
        "closest": [],
        "suggestions": [],
        "claims": [],
    }
    if bound:
        out["claims"] = _bound_claims(views, pod)
        out["summary"] = f"the pod is bound to node {bound}"
        return out
    explained = explain_pod(views.service, pod, node_names)
    out["claims"] = list(explained.claims or ())
    out["error"] = explained.error
    claims = [views.store.claims[key] for key in out["claims"] if key in views.store.claims]
    suggestions: list[dict[str, Any]] = []
    if explained.error:
        out["summary"] = f"0/{len(node_names)} nodes are available: {explained.error}"
        suggestions += _error_suggestions(views, claims, explained.error)
        out["suggestions"] = suggestions
        return out

    selector = _pod_node_selector(spec)
    nodes: list[ExplainedNode] = []
    excluded_but_fit: list[str] = []
    for node in explained.nodes:
        if selector is not None and not _selected(selector, views.store.node(node.node)):
            if node.outcome == FITS:
                excluded_but_fit.append(node.node)
            node = replace(node, outcome=UNRESOLVABLE, reason=NODE_SELECTOR_MISMATCH, excluded_by_pod=True)
        nodes.append(node)

    fitting = [n.node for n in nodes if n.outcome == FITS]
    out["fits"] = {"count": len(fitting), "nodes": fitting[:FITS_SHOWN]}
    out["reasons"] = _reasons(nodes)
    ranked = _ranked(nodes)
    if not fitting:
        out["closest"] = [_closest_entry(node, measure) for node, measure in ranked[:CLOSEST_SHOWN]]
    preemption: dict[str, NodePreemption] | None = None
    if explained.preemption is not None:
        excluded = {n.node for n in nodes if n.excluded_by_pod}
        preemption = {k: v for k, v in explained.preemption.nodes.items() if k not in excluded}
        out["preemption"] = _preemption_summary(explained.preemption, preemption)
    out["summary"] = _summary(len(fitting), len(node_names), out["reasons"], out.get("preemption"))

    if excluded_but_fit:
        suggestions.append(
            {
                "kind": "node-selector",
                "message": (
                    f"the devices would fit on {_names(excluded_but_fit)}, but the pod's node selector/affinity "
                    "rules them out: relax it"
                ),
                "nodes": excluded_but_fit[:EXAMPLES_PER_REASON],
            }
        )
    if not fitting:
        candidates = [(n, m) for n, m in ranked if not n.excluded_by_pod]
        suggestions += _cluster_wide(nodes, claims)
        suggestions += _node_suggestions(views, claims, candidates[:CLOSEST_SHOWN])
        if explained.preemption is not None and preemption is not None:
            suggestions += _preemption_suggestions(explained.preemption.enabled, preemption)
    out["suggestions"] = _deduplicated(suggestions)
    return out


# --- the measure ------------------------------------------------------------------------------


def _leaf_requests(claim: ClaimExplanation) -> list[RequestExplanation]:
    """One entry per request; for a firstAvailable request the alternative that came closest."""
    return [min(request.subrequests, key=_short) if request.subrequests else request for request in claim.requests]


def _short(request: RequestExplanation) -> int:
    """Devices a request lacks on the node (1 for a request that fails for another reason)."""
    if request.verdict == VERDICT_FITS:
        return 0
    return max(request.wanted - request.usable, 1)


def _missing(request: RequestExplanation) -> int:
    """Devices a request lacks that freeing others would not give it: matching devices the node
    does not have at all (``wanted`` beyond ``selectorMatches``)."""
    if request.verdict == VERDICT_FITS:
        return 0
    if request.verdict == VERDICT_ERROR:
        return 1
    return max(request.wanted - request.selector_matches, 0)


def _measure(node: ExplainedNode) -> dict[str, int]:
    """How near the node came: requests satisfied of all, devices short (``wanted - usable``
    summed), of which missing outright, and matching devices present."""
    requests = [leaf for claim in node.claims for leaf in _leaf_requests(claim)]
    satisfied = sum(1 for r in requests if r.verdict == VERDICT_FITS)
    return {
        "requests": len(requests),
        "satisfied": satisfied,
        "devicesShort": sum(_short(r) for r in requests),
        "devicesMissing": sum(_missing(r) for r in requests),
        "matching": sum(r.selector_matches for r in requests),
    }


def _ranked(nodes: Iterable[ExplainedNode]) -> list[tuple[ExplainedNode, dict[str, int]]]:
    """Failing nodes, closest first: those the pod may use before those its node selector rules
    out, resolvable before unresolvable, then fewest devices missing outright (freeing devices is
    a smaller change than adding some), fewest short, fewest requests unsatisfied, most matching
    devices present, name."""
    failing = [(n, _measure(n)) for n in nodes if n.outcome in (FAILED, UNRESOLVABLE)]
    failing.sort(
        key=lambda item: (
            item[0].excluded_by_pod,
            item[0].outcome != FAILED,
            item[1]["devicesMissing"],
            item[1]["devicesShort"],
            item[1]["requests"] - item[1]["satisfied"],
            -item[1]["matching"],
            item[0].node,
        )
    )
    return failing


def _closest_entry(node: ExplainedNode, measure: Mapping[str, int]) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "node": node.node,
        "outcome": node.outcome,
        "message": node.reason or node.message,
        "detail": node.detail or node.message,
        **measure,
    }
    if node.excluded_by_pod:
        entry["detail"] = f"{NODE_SELECTOR_MISMATCH}; devices: {node.detail or node.message}"
    if node.preemption is not None:
        entry["preemption"] = node.preemption.message
    return entry


# --- reasons and summary ----------------------------------------------------------------------


def _reasons(nodes: Iterable[ExplainedNode]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], list[str]] = {}
    for node in nodes:
        if node.outcome == FITS:
            continue
        groups.setdefault((node.outcome, node.reason or node.message), []).append(node.node)
    reasons: list[dict[str, Any]] = [
        {"reason": reason, "outcome": outcome, "count": len(names), "nodes": sorted(names)[:EXAMPLES_PER_REASON]}
        for (outcome, reason), names in groups.items()
    ]
    reasons.sort(key=lambda r: (-r["count"], r["reason"]))
    return reasons


def _summary(fit: int, total: int, reasons: Sequence[Mapping[str, Any]], preemption: Mapping[str, Any] | None) -> str:
    text = f"{fit}/{total} nodes are available"
    if reasons:
        text += ": " + ", ".join(f"{r['count']} {r['reason']}" for r in reasons)
    text += "."
    if preemption is not None:
        text += (
            f" preemption: {preemption['helps']}/{preemption['tried']} nodes would fit after evicting "
            "lower-priority pods."
        )
    return text


def _helping(by_node: Mapping[str, NodePreemption]) -> list[tuple[str, tuple[Victim, ...]]]:
    """The nodes where evicting someone makes room, fewest victims first."""
    return sorted(
        ((node, entry.victims) for node, entry in by_node.items() if entry.victims),
        key=lambda item: (len(item[1]), item[0]),
    )


def _preemption_summary(preemption: PreemptionExplanation, by_node: Mapping[str, NodePreemption]) -> dict[str, Any]:
    helps = _helping(by_node)
    return {
        "enabled": preemption.enabled,
        "priority": preemption.priority,
        "tried": len(by_node),
        "helps": len(helps),
        "nodes": {node: by_node[node].to_dict() for node, _ in helps[:CLOSEST_SHOWN]},
    }


# --- suggestions ------------------------------------------------------------------------------


def _error_suggestions(views: DebugViews, claims: Sequence[ResourceClaim], error: str) -> list[dict[str, Any]]:
    missing = sorted(
        {
            spec.device_class_name
            for claim in claims
            for _, spec in _specs(claim)
            if spec.device_class_name and spec.device_class_name not in views.store.classes
        }
    )
    out: list[dict[str, Any]] = []
    for class_name in missing:
        out.append(
            {
                "kind": "missing-device-class",
                "message": f"create DeviceClass {class_name} (a request of the pod's claims names it)",
                "deviceClass": class_name,
            }
        )
    if out:
        return out
    if "CEL" in error or "selector" in error:
        return [{"kind": "fix-selector", "message": f"fix the selector: {error}"}]
    return [{"kind": "wait", "message": f"nothing can be decided yet ({error}); ask again shortly"}]


def _cluster_wide(nodes: Sequence[ExplainedNode], claims: Sequence[ResourceClaim]) -> list[dict[str, Any]]:
    """What no node offers: a request whose device class or selectors match nothing anywhere, or
    that wants more matching devices than any one node has."""
    considered = [n for n in nodes if n.outcome in (FAILED, UNRESOLVABLE) and n.claims]
    if not considered or len(considered) < len([n for n in nodes if n.outcome != FITS]):
        return []  # some failing node was not counted (claim allocated elsewhere, classic): no global claim
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for node in considered:
        for claim in node.claims:
            for leaf in _leaf_requests(claim):
                seen = best.setdefault(
                    (claim.claim, leaf.request),
                    {"class": 0, "selector": 0, "node": "", "wanted": 0, "deviceClass": leaf.device_class},
                )
                seen["wanted"] = max(seen["wanted"], leaf.wanted)
                seen["class"] = max(seen["class"], leaf.class_matches)
                if leaf.selector_matches > seen["selector"]:
                    seen["selector"] = leaf.selector_matches
                    seen["node"] = node.node
    out: list[dict[str, Any]] = []
    for (claim_key, request), seen in best.items():
        where = f"request {request} of claim {claim_key}"
        if seen["class"] == 0:
            out.append(
                {
                    "kind": "no-devices-of-class",
                    "message": (
                        f"no node offers a device of device class {seen['deviceClass']} ({where}): is its driver "
                        "installed and publishing ResourceSlices, and does the class select its devices?"
                    ),
                    "claim": claim_key,
                    "request": request,
                    "deviceClass": seen["deviceClass"],
                }
            )
        elif seen["selector"] == 0:
            out.append(
                {
                    "kind": "selectors-match-nothing",
                    "message": (
                        f"the selectors of {where} match none of the devices of class {seen['deviceClass']} "
                        "on any node: loosen them"
                    ),
                    "claim": claim_key,
                    "request": request,
                }
            )
        elif seen["wanted"] and seen["selector"] < seen["wanted"]:
            out.append(
                {
                    "kind": "too-few-devices",
                    "message": (
                        f"{where} wants {seen['wanted']} devices on one node; the most any node has is "
                        f"{seen['selector']} ({seen['node']}): ask for fewer or add devices"
                    ),
                    "claim": claim_key,
                    "request": request,
                }
            )
    return out


def _node_suggestions(
    views: DebugViews, claims: Sequence[ResourceClaim], ranked: Sequence[tuple[ExplainedNode, dict[str, int]]]
) -> list[dict[str, Any]]:
    by_key = {claim.key: claim for claim in claims}
    holders = _holders(views)
    out: list[dict[str, Any]] = []
    for node, _ in ranked:
        name = node.node
        for pool in node.pools:
            if pool.status in ("incomplete", "invalid"):
                out.append(
                    {
                        "kind": f"pool-{pool.status}",
                        "message": f"pool {pool.driver}/{pool.pool} on {name} is {pool.status}"
                        + (f": {pool.reason}" if pool.reason else ""),
                        "node": name,
                    }
                )
        if node.unavailable_claim:
            out.append(
                {
                    "kind": "claim-allocated-elsewhere",
                    "message": node.message,
                    "node": name,
                    "claim": node.unavailable_claim,
                }
            )
        for claim in node.claims:
            model = by_key.get(claim.claim)
            for leaf in _leaf_requests(claim):
                out += _request_suggestions(views, holders, name, model, claim.claim, leaf)
            if any(c.blocking for c in claim.constraints):
                out.append(
                    {
                        "kind": "constraint",
                        "message": f"on {name}, claim {claim.claim}: {claim.message or 'a constraint blocks'}",
                        "node": name,
                        "claim": claim.claim,
                    }
                )
        if "not all together" in node.detail:
            out.append({"kind": "combination", "message": f"on {name}: {node.detail}", "node": name})
    return out


def _request_suggestions(
    views: DebugViews,
    holders: Mapping[DeviceID, list[str]],
    node: str,
    claim: ResourceClaim | None,
    claim_key: str,
    leaf: RequestExplanation,
) -> list[dict[str, Any]]:
    verdict = leaf.verdict
    request = leaf.request
    where = f"request {request} of claim {claim_key}"
    out: list[dict[str, Any]] = []
    short = _short(leaf)
    if verdict == VERDICT_IN_USE:
        spec = _spec_of(claim, request) if claim is not None else None
        held = _held_matching(views, holders, node, spec) if spec is not None else {}
        by_claim: dict[str, int] = {}
        for holder_list in held.values():
            for holder in holder_list:
                by_claim[holder] = by_claim.get(holder, 0) + 1
        entries: list[dict[str, Any]] = []
        for key, count in by_claim.items():
            entry: dict[str, Any] = {"claim": key, "devices": count, "pods": _consumers_of(views, key, "pods")}
            if groups := _consumers_of(views, key, "podgroups"):
                entry["podGroups"] = groups
            entries.append(entry)
        entries.sort(key=lambda e: (-e["devices"], e["claim"]))
        text = ", ".join(f"{e['claim']}{_held_for(e)}" for e in entries[:5])
        message = f"on {node}, free {short} more matching device(s) for {where}"
        out.append(
            {
                "kind": "free-devices",
                "message": message + (f": held by {text}" if text else ""),
                "node": node,
                "claim": claim_key,
                "request": request,
                "devices": short,
                "holders": entries,
            }
        )
    elif verdict == VERDICT_BLOCKED:
        if leaf.blocked_by_taint:
            out.append(
                {
                    "kind": "tolerate-taint",
                    "message": (
                        f"on {node}, {leaf.blocked_by_taint} matching device(s) are tainted: add a toleration "
                        f"to {where}, or remove the device taint"
                    ),
                    "node": node,
                    "claim": claim_key,
                    "request": request,
                }
            )
        if leaf.blocked_by_counters:
            out.append(
                {
                    "kind": "shared-counters",
                    "message": (
                        f"on {node}, {leaf.blocked_by_counters} matching device(s) draw on shared counters other "
                        f"allocations used up (partitions of the same device): free those for {where}"
                    ),
                    "node": node,
                    "claim": claim_key,
                    "request": request,
                }
            )
        if leaf.blocked_by_capacity:
            out.append(
                {
                    "kind": "capacity",
                    "message": (
                        f"on {node}, {leaf.blocked_by_capacity} matching device(s) lack the capacity {where} asks for"
                    ),
                    "node": node,
                    "claim": claim_key,
                    "request": request,
                }
            )
    elif verdict == VERDICT_TOO_FEW:
        out.append(
            {
                "kind": "too-few-devices",
                "message": (
                    f"on {node}, {where} wants {leaf.wanted} matching devices and the node has "
                    f"{leaf.selector_matches}: ask for fewer, or add devices"
                ),
                "node": node,
                "claim": claim_key,
                "request": request,
            }
        )
    elif verdict == VERDICT_ERROR and leaf.error:
        out.append({"kind": "fix-selector", "message": f"{where}: {leaf.error}", "claim": claim_key})
    elif verdict in (VERDICT_NO_CLASS_MATCH, VERDICT_NO_SELECTOR_MATCH):
        pass  # said once for the cluster (``_cluster_wide``) when no node has them
    return out


def _preemption_suggestions(enabled: bool, by_node: Mapping[str, NodePreemption]) -> list[dict[str, Any]]:
    options = _helping(by_node)
    if not options:
        if by_node and all(entry.victims is None for entry in by_node.values()):
            return [
                {
                    "kind": "preemption",
                    "message": (
                        "preemption would not help: no set of lower-priority pods frees enough devices on any node"
                    ),
                }
            ]
        return []
    node, victims = options[0]
    names = ", ".join(f"{v.key} (priority {v.priority})" for v in victims)
    message = f"preempting on {node} would make room: evict {names}"
    if not enabled:
        message += " (device-aware preemption is off in this extender)"
    elif len(options) > 1:
        message += f"; {len(options) - 1} other node(s) would also do"
    return [
        {
            "kind": "preemption",
            "message": message,
            "node": node,
            "victims": by_node[node].victims_dicts(),
            "enabled": enabled,
        }
    ]


def _deduplicated(suggestions: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: set[str] = set()
    out = []
    for suggestion in suggestions:
        if suggestion["message"] in seen:
            continue
        seen.add(suggestion["message"])
        out.append(suggestion)
    return out


# --- helpers over the store -------------------------------------------------------------------


def _specs(claim: ResourceClaim) -> Iterable[tuple[str, ExactRequest]]:
    """Every exact request or subrequest of a claim, labelled as explain labels them."""
    for request in claim.requests:
        if request.exactly is not None:
            yield request.name, request.exactly
        for sub in request.first_available:
            yield f"{request.name}/{sub.name}", sub


def _spec_of(claim: ResourceClaim, label: str) -> ExactRequest | None:
    return next((spec for name, spec in _specs(claim) if name == label), None)


def _holders(views: DebugViews) -> dict[DeviceID, list[str]]:
    """Per device, the claims holding it: allocated ones and in-flight ones (binds and holds)."""
    held = device_holders(views.store, views.cluster.ledger)
    return {device: keys for device, hs in held.items() if (keys := [h.claim for h in hs if h.takes])}


def _held_matching(
    views: DebugViews, holders: Mapping[DeviceID, list[str]], node: str, spec: ExactRequest
) -> dict[DeviceID, list[str]]:
    """The node's devices a request's class and selectors select that some claim holds."""
    store = views.store
    device_class = store.classes.get(spec.device_class_name)
    if device_class is None:
        return {}
    expressions = [e for e in (*device_class.selectors, *spec.selectors) if e is not None]
    try:
        view = store.snapshot().node_view(store.node(node), views.cluster.features)
    except ValueError:
        return {}
    held: dict[DeviceID, list[str]] = {}
    for entry in view.devices:
        owners = holders.get(entry.id)
        if not owners:
            continue
        try:
            if all(store.selectors.results(e, entry.slice)[entry.index] is True for e in expressions):
                held[entry.id] = owners
        except (CelCompileError, ExtenderError):
            return {}
    return held


def _consumers_of(views: DebugViews, claim_key: str, resource: str) -> list[str]:
    """``namespace/name`` of the claim's consumers of one kind (``pods``, ``podgroups``)."""
    claim = views.store.claims.get(claim_key)
    if claim is None:
        return []
    return [f"{claim.namespace}/{ref.name}" for ref in claim.reserved_for if ref.resource == resource]


def _held_for(entry: Mapping[str, Any]) -> str:
    """`` (pod a, b; pod group g)`` after a claim in a reason, or nothing."""
    parts = []
    if entry["pods"]:
        parts.append(f"pod {', '.join(entry['pods'])}")
    if entry.get("podGroups"):
        parts.append(f"pod group {', '.join(entry['podGroups'])}")
    return f" ({'; '.join(parts)})" if parts else ""


def _bound_claims(views: DebugViews, pod: Mapping[str, Any]) -> list[str]:
    try:
        claims = views.cluster.claims(views.cluster.pod(pod))
    except ExtenderError:
        return []
    return [claim.key for claim in claims.all] + [entry.claim.key for entry in claims.classic]


def _pod_node_selector(spec: Mapping[str, Any]) -> tuple[Mapping[str, str], NodeSelector | None] | None:
    """The pod's ``nodeSelector`` labels and required node affinity, or None when it has neither."""
    labels = spec.get("nodeSelector") or {}
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    required: NodeSelector | None = None
    if affinity:
        try:
            required = decode_node_selector(affinity)
        except InvalidObject:
            required = None
    if not labels and required is None:
        return None
    return (labels if isinstance(labels, dict) else {}), required


def _selected(selector: tuple[Mapping[str, str], NodeSelector | None], node: NodeInfo) -> bool:
    labels, required = selector
    if any(node.labels.get(key) != value for key, value in labels.items()):
        return False
    if required is not None:
        try:
            return node_matches(required, node)
        except ValueError:
            return False
    return True


def _names(nodes: Sequence[str]) -> str:
    shown = ", ".join(nodes[:EXAMPLES_PER_REASON])
    return shown + (f" and {len(nodes) - EXAMPLES_PER_REASON} more" if len(nodes) > EXAMPLES_PER_REASON else "")
