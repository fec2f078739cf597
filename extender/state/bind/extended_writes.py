"""What bind writes for a pod's DRA extended resources (KEP-5004), as the in-tree PreBind does:

1. the claim, created (``claim_object``: ``generateName``, annotation, the pod as controller owner),
   its in-flight allocation moved from the key it had before it existed to its own;
2. then, like every claim the bind allocates, the finalizer and ``status.allocation`` plus
   ``reservedFor`` (``claim_writes.write_allocation``);
3. then the pod's ``status.extendedResourceClaimStatus``: the claim's name and which request serves
   which container's resource (``record_extended_status``);
4. then the binding.

A failure undoes what was written (``claim_writes.roll_back`` deletes a created claim); a claim
left behind by a bind that could not clean up is found by its owner and annotation at the pod's next
filter and deleted there (``ClaimRecovery``-style, ``SchedulingService.filter_and_recover``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.core.convert import decode_object
from extender.core.errors import InvalidObject
from extender.core.extended import claim_object
from extender.core.model import AllocationResult, ResourceClaim
from extender.state.backend import Backend
from extender.state.bind.claim_writes import Written, sent
from extender.state.cache.claims import PodClaims
from extender.state.cache.ledger import InFlightLedger
from extender.state.cache.pods import pod_identity

__all__ = ["create_extended_claim", "extended_status", "record_extended_status"]


async def create_extended_claim(
    backend: Backend,
    ledger: InFlightLedger,
    claims: PodClaims,
    claim: ResourceClaim,
    result: AllocationResult,
    pod: Mapping[str, Any],
    node: str,
    record: Written,
) -> ResourceClaim:
    """Create the pod's extended-resource claim (``claim`` is the one the allocator saw, under its
    provisional key) and move its ledger entry to the created claim's key; returns the created
    claim. ``record`` is marked before the request: an answer lost may hide a claim made."""
    raw = claim_object(pod, claim.requests, api_version=backend.claim_api_version)
    record.created = True
    created = await sent(backend.create_claim(raw), record, "created")
    meta = created.get("metadata") or {}
    decoded = decode_object(created)
    if not isinstance(decoded, ResourceClaim):  # pragma: no cover - the API server answers with the claim
        raise InvalidObject("the API server did not answer the create with a ResourceClaim", obj="ResourceClaim")
    record.claim_key = decoded.key
    record.created_uid = str(meta.get("uid") or "")
    # the devices stay taken throughout: the created claim's entry before the provisional one goes
    ledger.add(claim=decoded, pod_key=claims.pod_key, pod_uid=claims.pod_uid, node=node, result=result, tentative=False)
    ledger.drop(claim.key, pod_uid=claims.pod_uid)
    return decoded


def extended_status(claims: PodClaims, claim: ResourceClaim) -> dict[str, Any] | None:
    """The pod's ``status.extendedResourceClaimStatus`` for its extended-resource claim: the claim's
    name and, in upstream's order, which of the claim's requests serves which container's resource
    (the mappings of requests the claim does not have — resources a device plugin serves on the
    node — left out). None when the pod has no such demand or the claim no request of it."""
    demand = claims.extended
    if demand is None:
        return None
    names = {request.name for request in claim.requests}
    kept = [m.to_json() for m in demand.mappings if m.request_name in names]
    if not kept:
        return None
    return {"requestMappings": kept, "resourceClaimName": claim.name}


async def record_extended_status(
    backend: Backend, pod: Mapping[str, Any], claims: PodClaims, claim: ResourceClaim
) -> None:
    """Write the pod's ``status.extendedResourceClaimStatus`` unless it says so already."""
    wanted = extended_status(claims, claim)
    if wanted is None:
        return
    current = (pod.get("status") or {}).get("extendedResourceClaimStatus")
    if current == wanted:
        return
    namespace, name, uid = pod_identity(pod)
    await backend.patch_pod_status(namespace, name, uid, {"extendedResourceClaimStatus": wanted})
