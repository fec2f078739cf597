"""What upstream's PostFilter does for DRA when no node fits (docs/allocator.md): a claim of the pod
allocated on other nodes and reserved for nobody else is deallocated, so that the pod's next
attempt allocates it afresh. An extender has no PostFilter; without this such pods would stay
stuck."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from extender.core.answers import Unresolvable
from extender.core.errors import ExtenderError
from extender.core.model import ResourceClaim
from extender.state.claim_writes import deallocate, delete_claim_with_uid
from extender.state.claims import pod_identity, pod_uid
from extender.state.classic import ClassicNegotiator
from extender.state.cluster import ClusterView

__all__ = ["deallocate_claim", "delete_stale_claim", "stuck_claim"]

log = structlog.get_logger()


def stuck_claim(cluster: ClusterView, pod: Mapping[str, Any], node_names: Sequence[str]) -> ResourceClaim | None:
    """The pod's allocated claim that rules out some of ``node_names`` and that only this pod may
    use, if there is one (an unbound pod only)."""
    try:
        pod = cluster.pod(pod)
        claims = cluster.claims(pod, from_templates=False)
    except ExtenderError:
        return None
    if (pod.get("spec") or {}).get("nodeName"):
        return None
    uid = claims.pod_uid
    cluster.refresh()
    nodes = [cluster.store.node(name) for name in node_names]
    for claim in claims.allocated:
        if any(ref.uid != uid for ref in claim.reserved_for):
            continue  # in use by another consumer: never take it away
        # this claim alone, allocated: does its node selector rule out one of the nodes?
        probe = cluster.allocator(dataclasses.replace(claims, to_allocate=[], allocated=[claim]), refresh=False)
        if any(isinstance(probe.answer(node), Unresolvable) for node in nodes):
            return claim
    return None


async def deallocate_claim(
    cluster: ClusterView, pod: Mapping[str, Any], claim: ResourceClaim, classic: ClassicNegotiator
) -> bool:
    """Deallocate the claim ``stuck_claim`` found — one its driver's controller allocated by asking
    the driver (``ClassicNegotiator.request_deallocation``); False if the write failed (logged)."""
    try:
        if claim.classic:
            await classic.request_deallocation(pod, claim)
        else:
            await deallocate(cluster.backend, claim, pod_uid(pod))
    except ExtenderError as exc:
        log.warning("filter.deallocation_failed", claim=claim.key, reason=exc.reason)
        return False
    log.info("filter.deallocated", pod=pod_identity(pod)[1], claim=claim.key)
    return True


async def delete_stale_claim(cluster: ClusterView, claim: ResourceClaim) -> bool:
    """Delete a pod's extended-resource claim an earlier attempt left (``stale_extended_claim``),
    as upstream's PostFilter does: finalizer off, then the claim, while it has the UID seen. False
    if a write failed (logged); a claim gone already counts as deleted."""
    try:
        await delete_claim_with_uid(cluster.backend, claim.namespace, claim.name, claim.uid)
    except ExtenderError as exc:
        log.warning("extended_claim.delete_failed", claim=claim.key, reason=exc.reason)
        return False
    log.info("extended_claim.deleted", claim=claim.key)
    return True
