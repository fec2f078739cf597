"""Which ResourceClaims a pod uses, and whether they can be used now (docs/semantics.md §13.1-§13.2a).

``resolve_pod_claims`` reads the pod's ``spec.resourceClaims`` against the store and the in-flight
ledger and sorts the claims into "to allocate" and "already allocated", or raises:

- ``ClaimNotCreated`` / ``Transient`` for conditions that fix themselves (a template claim not
  created yet, a claim being deleted, a claim another pod is allocating right now, a claim at its
  256-consumer limit): the scheduler retries with backoff (docs/semantics.md §20: with the in-tree plugin
  disabled these pods reach the extender and must get ``Error``, not failed nodes);
- ``PodUnschedulable`` for a pod spec no retry can fix.

With ``from_templates``, a template claim the resourceclaim controller has not created yet (or
that the store has not seen yet) is answered from its ResourceClaimTemplate instead: the controller
copies the template's claim spec into the claim, so the allocator's answer for the claim is known
before it exists. Such a *provisional* claim has a key no real claim can have (``provisional_key``)
and the template's spec key, so a pod is the same shape before and after its claim appears; bind
waits for the real claim before it writes anything (docs/pipeline.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.core.answers import CLASSIC_NOT_SUPPORTED
from extender.core.classic import PendingClassic, check_context_owner, pending_classic
from extender.core.errors import ClaimNotCreated, PodUnschedulable, Transient
from extender.core.extended import (
    CANNOT_SCHEDULE_EXTENDED_CLAIM,
    ExtendedDemand,
    pod_demand,
    requests_and_mappings,
    special_claim,
)
from extender.core.model import NodeInfo, ResourceClaim
from extender.core.podgroups import POD_GROUP_CONSUMER, PodGroup, PodGroupClaim
from extender.state.cache.ledger import InFlightLedger
from extender.state.cache.pods import pod_identity, pod_priority, pod_uid
from extender.state.cache.store import ObjectStore

__all__ = [
    "MAX_CONSUMERS",
    "PodClaimRef",
    "PodClaims",
    "controlling_pod",
    "extended_provisional_key",
    "pod_claim_refs",
    "provisional_key",
    "reserved_for",
    "reserved_for_group",
    "resolve_pod_claims",
    "stale_extended_claim",
]

#: ResourceClaimReservedForMaxSize.
MAX_CONSUMERS = 256


@dataclass(slots=True)
class PodClaims:
    """A pod's claims, in pod order."""

    pod_key: str
    pod_uid: str
    all: list[ResourceClaim] = field(default_factory=list)
    #: Not allocated yet: the allocator picks devices for these.
    to_allocate: list[ResourceClaim] = field(default_factory=list)
    #: Already allocated (shared, pre-allocated, or ours from an earlier bind attempt).
    allocated: list[ResourceClaim] = field(default_factory=list)
    #: Claims of ``to_allocate`` made from their template (not created yet): key -> spec key.
    provisional: dict[str, bytes] = field(default_factory=dict)
    #: Unallocated classic claims (their driver's controller allocates them, ``state/classic.py``),
    #: in pod order; in none of the lists above.
    classic: list[PendingClassic] = field(default_factory=list)
    #: The pod's ``spec.priority`` (admission resolved its PriorityClass; 0 when unset).
    priority: int = 0
    #: What the pod asks for through extended resources a DeviceClass maps (KEP-5004); None for
    #: nearly every pod.
    extended: ExtendedDemand | None = None
    #: The key of the claim for those, in ``all``: the claim bind has made (``extended_claim``), or
    #: the claim bind will make, last in ``to_allocate``, under a key no real claim has
    #: (``extended_new``). "" when the pod has no such claim (on this node).
    extended_key: str = ""
    extended_new: bool = False
    #: The pod's PodGroup where PodGroups are seen (None otherwise), and the keys of its claims
    #: that are the group's (KEP-5729: allocated once for the group, reserved for the PodGroup).
    group: PodGroup | None = None
    group_claims: set[str] = field(default_factory=set)

    def reserved(self, claim: ResourceClaim) -> bool:
        """Whether ``claim`` is reserved for this pod: for the pod itself, or, for a claim of its
        PodGroup, for the group (pods do not know the group's UID: by name, as upstream's
        ``IsReservedForPod``)."""
        if reserved_for(claim, self.pod_uid):
            return True
        return claim.key in self.group_claims and self.group is not None and reserved_for_group(claim, self.group)

    def in_flight_only(self, key: str) -> bool:
        """Whether the claim of ``key`` exists in no store yet (made from a template, or the
        extended-resource claim bind will make): its ledger entry waits for bind, not the watch."""
        return key in self.provisional or (self.extended_new and key == self.extended_key)

    def on_node(self, node: NodeInfo) -> PodClaims | None:
        """The claims as they are on ``node``: the same, but where the node advertises some of the
        pod's extended resources itself (its device plugin serves them, DRA the others); None when
        the node can never run the pod (it lacks an extended resource no DeviceClass maps)."""
        demand = self.extended
        if demand is None or not self.extended_new:
            return self
        if not demand.touches(node.allocatable):
            return self if demand.unmapped_ok() else None
        served = demand.on_node(node.allocatable)
        if served is None:
            return None
        if served == demand.all_served():
            return self
        special = self.all[-1]
        variant = dataclasses.replace(self, all=self.all[:-1], to_allocate=self.to_allocate[:-1])
        if served:
            requests, _ = requests_and_mappings(demand, served)
            claim = dataclasses.replace(special, requests=requests)
            variant.all.append(claim)
            variant.to_allocate.append(claim)
        else:
            variant.extended_key, variant.extended_new = "", False
        return variant


def _owned_by(raw_claim: Mapping[str, Any], pod_uid: str) -> bool:
    for ref in (raw_claim.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("uid") == pod_uid:
            return True
    return False


def reserved_for(claim: ResourceClaim, pod_uid: str) -> bool:
    return any(ref.uid == pod_uid for ref in claim.reserved_for)


def reserved_for_group(claim: ResourceClaim, group: PodGroup) -> bool:
    """Whether ``claim``'s ``reservedFor`` names the PodGroup (by group, resource and name)."""
    api_group, resource = POD_GROUP_CONSUMER
    return any(ref.api_group == api_group and ref.resource == resource and ref.name == group.name
               for ref in claim.reserved_for)  # fmt: skip


def _group_entry(group: PodGroup | None, ref: PodClaimRef, direct: str | None) -> PodGroupClaim | None:
    """The PodGroup claim entry the pod's claim entry is bound to (upstream's ``BindTo``: same name,
    same ``resourceClaimName``, same ``resourceClaimTemplateName``), or None: the pod's own claim."""
    if group is None:
        return None
    for entry in group.claims:
        if entry.name == ref.name and entry.claim_name == direct and entry.template_name == ref.template:
            return entry
    return None


def provisional_key(namespace: str, pod_name: str, pod_uid: str, pod_claim_name: str) -> str:
    """The key of a pod's template claim before it exists; the spaces and parentheses cannot occur
    in a Kubernetes name, so no real claim has it, and the pod's UID keeps pods apart whose names
    and claim names join alike."""
    return f"{namespace}/{pod_name}-{pod_claim_name} (pod {pod_uid}, not created yet)"


def _provisional(
    store: ObjectStore,
    result: PodClaims,
    namespace: str,
    pod_name: str,
    pod_claim_name: str,
    template_name: str,
) -> ResourceClaim | None:
    """The claim the controller will make from the template, or None if the store has no template."""
    template_key = f"{namespace}/{template_name}"
    template = store.templates.get(template_key)
    spec_key = store.template_specs.get(template_key)
    if template is None or spec_key is None:
        return None
    key = provisional_key(namespace, pod_name, result.pod_uid, pod_claim_name)
    result.provisional[key] = spec_key
    return dataclasses.replace(template.spec, namespace=namespace, name=key.partition("/")[2], uid="")


def _check_classic(claim: ResourceClaim, classic_dra: str | None) -> bool:
    """Whether the claim is an unallocated classic one (v1alpha3 ``spec.controller``: its driver's
    controller allocates it). Such a claim is never given to the structured allocator: a
    structured device that happens to match its class is not what its driver would allocate.
    Allocated (by the driver), it is used like any allocated claim; asked to be deallocated, the
    pod waits for the driver. ``classic_dra`` is the backend's ``Backend.classic_dra``: "" where
    the negotiation with the driver is driven, else why not (None: not at all); there an
    unallocated classic claim makes the pod unschedulable."""
    if claim.deallocation_requested:
        raise Transient("resourceclaim must be reallocated", claim=claim.key)
    if not claim.controller or claim.allocation is not None:
        return False
    if classic_dra == "":
        return True
    raise PodUnschedulable(
        f"{CLASSIC_NOT_SUPPORTED} (claim {claim.key} is allocated by the controller of driver "
        f"{claim.controller}: classic DRA, "
        + (f"which cannot be driven here: {classic_dra})" if classic_dra else "which this extender does not drive)"),
        claim=claim.key,
    )


def extended_provisional_key(namespace: str, pod_name: str, pod_uid: str) -> str:
    """The key of a pod's extended-resource claim before bind creates it (see ``provisional_key``)."""
    return f"{namespace}/{pod_name}-extended-resources (pod {pod_uid}, not created yet)"


def _add_extended(
    store: ObjectStore, ledger: InFlightLedger, result: PodClaims, demand: ExtendedDemand, namespace: str, name: str
) -> None:
    """The pod's extended-resource claim, last: the one an earlier bind made, else the one bind
    will make (every mapped resource; ``PodClaims.on_node`` narrows it for nodes that advertise
    some). A claim an earlier attempt made that is not allocated for this pod is stale: the pod
    cannot be scheduled until it is deleted (``stale_extended_claim``)."""
    result.extended = demand
    keys = store.extended_claims.get(result.pod_uid)
    if keys:
        kept = _kept_extended_claim(store, result.pod_uid)
        if kept is not None and len(keys) == 1:
            # a bind whose binding went unanswered (or that waits for binding conditions) kept it:
            # the pod's next attempt goes where it is
            result.all.append(kept)
            result.allocated.append(kept)
            result.extended_key = kept.key
            return
        stale = next(k for k in keys if kept is None or k != kept.key)
        raise Transient(CANNOT_SCHEDULE_EXTENDED_CLAIM, claim=stale)
    special_key = extended_provisional_key(namespace, name, result.pod_uid)
    in_flight = ledger.get(special_key)
    if in_flight is not None and in_flight.pod_uid != result.pod_uid:  # pragma: no cover - keys carry the UID
        raise Transient(f"resource claim {special_key} is in the process of being allocated")
    claim = special_claim(namespace, special_key.partition("/")[2], demand.requests)
    result.all.append(claim)
    result.to_allocate.append(claim)
    result.extended_key, result.extended_new = special_key, True


def _kept_extended_claim(store: ObjectStore, pod_uid: str) -> ResourceClaim | None:
    """Of the pod's extended-resource claims, the first allocated and reserved for it."""
    for key in store.extended_claims.get(pod_uid, ()):
        claim = store.claims.get(key)
        if claim is not None and claim.allocation is not None and reserved_for(claim, pod_uid):
            return claim
    return None


def stale_extended_claim(pod: Mapping[str, Any], store: ObjectStore) -> ResourceClaim | None:
    """An extended-resource claim an earlier attempt of the pod left that is not the one allocated
    and reserved for it (a bind that ended before it could clean up, or a second claim made after
    a create's answer was lost), or None. Like the in-tree plugin's PostFilter, the extender deletes
    it so that the next attempt makes a new one (or uses the one kept)."""
    uid = pod_uid(pod)
    kept = _kept_extended_claim(store, uid)
    for key in store.extended_claims.get(uid, ()):
        claim = store.claims.get(key)
        if claim is not None and (kept is None or claim.key != kept.key):
            return claim
    return None


@dataclass(frozen=True, slots=True)
class PodClaimRef:
    """One ``spec.resourceClaims[]`` entry of a pod, with what its status says of it."""

    #: The entry's ``name``.
    name: str
    #: ``resourceClaimName``, or for a template claim the ``resourceClaimName`` its status entry
    #: records (None: no entry yet; "": the controller made none on purpose).
    claim: str | None
    #: ``resourceClaimTemplateName`` (None for a direct claim).
    template: str | None


def controlling_pod(store: ObjectStore, claim_key: str) -> tuple[str, str] | None:
    """``namespace/name`` and UID of the pod that controls the stored claim (a template claim's
    owner), or None (no such claim any more, or not a pod's)."""
    raw = store.raw_claims.get(claim_key)
    if raw is None:
        return None
    for ref in (raw.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller") and ref.get("kind") == "Pod" and ref.get("name"):
            return f"{claim_key.partition('/')[0]}/{ref['name']}", str(ref.get("uid") or "")
    return None


def pod_claim_refs(pod: Mapping[str, Any]) -> list[PodClaimRef]:
    """The pod's ``spec.resourceClaims``, in order, each with its claim's name as far as known: the
    one place a pod's ``status.resourceClaimStatuses`` is read (entries that are not objects are
    skipped: the wire check refuses them)."""
    statuses = {
        entry.get("name"): entry
        for entry in ((pod.get("status") or {}).get("resourceClaimStatuses") or [])
        if isinstance(entry, dict)
    }
    refs: list[PodClaimRef] = []
    for pod_claim in (pod.get("spec") or {}).get("resourceClaims") or []:
        if not isinstance(pod_claim, dict):
            continue
        name = str(pod_claim.get("name") or "")
        if pod_claim.get("resourceClaimName"):
            refs.append(PodClaimRef(name, str(pod_claim["resourceClaimName"]), None))
        elif pod_claim.get("resourceClaimTemplateName"):
            entry = statuses.get(pod_claim.get("name"))
            created = None if entry is None else str(entry.get("resourceClaimName") or "")
            refs.append(PodClaimRef(name, created, str(pod_claim["resourceClaimTemplateName"])))
        else:
            refs.append(PodClaimRef(name, None, None))
    return refs


def _group_claim(
    store: ObjectStore,
    ledger: InFlightLedger,
    result: PodClaims,
    group: PodGroup,
    entry: PodGroupClaim,
    ref: PodClaimRef,
    namespace: str,
    pod_name: str,
) -> ResourceClaim:
    """The pod's claim that is its PodGroup's: the named one, or the one the resourceclaim
    controller made from the group's template (the pod's status names it, else the group's); it
    must be owned by the group. Another member's bind allocating it right now is no obstacle: the
    binds of a group's claim are serialized (``bind/binder.py``)."""
    claim_name = entry.claim_name or ref.claim or group.claim_status(entry.name)
    if not claim_name:
        raise ClaimNotCreated(f'pod "{namespace}/{pod_name}": ResourceClaim not created yet')
    key = f"{namespace}/{claim_name}"
    claim = store.claims.get(key)
    if claim is None and key in store.invalid_claims:
        raise PodUnschedulable(f"resourceclaim {key} cannot be read: {store.invalid_claims[key]}", claim=key)
    if claim is None:
        raise ClaimNotCreated(f'resourceclaim.resource.k8s.io "{claim_name}" not found', claim=key)
    if claim.deletion_timestamp:
        raise Transient(f'resourceclaim "{claim_name}" is being deleted', claim=key)
    if entry.template_name is not None and not _owned_by(store.raw_claims.get(key) or {}, group.uid):
        raise Transient(
            f"ResourceClaim {key} was not created for pod group {group.key} (pod group is not owner)", claim=key
        )
    if claim.controller:
        raise PodUnschedulable(f"claim {key} of pod group {group.key}: {CLASSIC_NOT_SUPPORTED}", claim=key)
    result.group_claims.add(key)
    if claim.allocation is None:
        in_flight = ledger.get(key)
        members = store.group_pods.get(group.key, {})
        if in_flight is not None and in_flight.pod_uid != result.pod_uid and in_flight.pod_key not in members:
            raise Transient(f"resource claim {key} is in the process of being allocated", claim=key)
    elif not reserved_for_group(claim, group) and len(claim.reserved_for) >= MAX_CONSUMERS:
        raise Transient(
            f"resource claim {key} is already reserved for {MAX_CONSUMERS} consumers, the maximum", claim=key
        )
    return claim


def resolve_pod_claims(
    pod: Mapping[str, Any],
    store: ObjectStore,
    ledger: InFlightLedger,
    *,
    from_templates: bool = False,
    classic_dra: str | None = None,
    group: PodGroup | None = None,
) -> PodClaims:
    """``group``: the pod's PodGroup, where PodGroups are seen (its claims are the group's)."""
    namespace, name, uid = pod_identity(pod)
    result = PodClaims(pod_key=f"{namespace}/{name}", pod_uid=uid, priority=pod_priority(pod), group=group)
    for ref in pod_claim_refs(pod):
        pod_claim_name = ref.name
        direct = ref.claim if ref.template is None else None
        group_entry = _group_entry(group, ref, direct)
        if group_entry is not None and group is not None:
            shared = _group_claim(store, ledger, result, group, group_entry, ref, namespace, name)
            result.all.append(shared)
            (result.allocated if shared.allocation is not None else result.to_allocate).append(shared)
            continue
        if ref.template is None and ref.claim is not None:
            claim_name, check_owner = ref.claim, False
        elif ref.template is not None:
            known = bool(ref.claim) and f"{namespace}/{ref.claim}" in store.claims
            if from_templates and not known and ref.claim != "":
                template_name = ref.template
                provisional = _provisional(store, result, namespace, name, pod_claim_name, template_name)
                if provisional is not None and provisional.controller:
                    _check_classic(provisional, classic_dra)  # raises where classic DRA is not driven
                    # a classic claim must exist before its driver can be asked about it
                    result.provisional.pop(provisional.key, None)
                    provisional = None
                if provisional is not None:
                    in_flight = ledger.get(provisional.key)
                    if in_flight is not None and in_flight.pod_uid != uid:
                        raise Transient(f"resource claim {provisional.key} is in the process of being allocated")
                    result.all.append(provisional)
                    result.to_allocate.append(provisional)
                    continue
            if ref.claim is None:
                raise ClaimNotCreated(f'pod "{namespace}/{name}": ResourceClaim not created yet')
            if not ref.claim:
                continue  # intentionally not created
            claim_name, check_owner = ref.claim, True
        else:
            raise PodUnschedulable(
                f'pod "{namespace}/{name}", spec.resourceClaim "{pod_claim_name}": none of the supported fields are set'
            )
        key = f"{namespace}/{claim_name}"
        claim = store.claims.get(key)
        if claim is None and key in store.invalid_claims:
            raise PodUnschedulable(f"resourceclaim {key} cannot be read: {store.invalid_claims[key]}", claim=key)
        if claim is None:
            raise ClaimNotCreated(f'resourceclaim.resource.k8s.io "{claim_name}" not found', claim=key)
        if claim.deletion_timestamp:
            raise Transient(f'resourceclaim "{claim_name}" is being deleted', claim=key)
        classic = _check_classic(claim, classic_dra)
        if check_owner and not _owned_by(store.raw_claims.get(key) or {}, uid):
            raise Transient(
                f"ResourceClaim {key} was not created for pod {namespace}/{name} (pod is not owner)", claim=key
            )
        if classic:
            context = store.scheduling_contexts.get(result.pod_key)
            check_context_owner(context, namespace, name, uid)
            result.classic.append(pending_classic(str(pod_claim_name), claim, store.classes, context))
            continue
        result.all.append(claim)
        if claim.allocation is not None:
            if not reserved_for(claim, uid) and len(claim.reserved_for) >= MAX_CONSUMERS:
                raise Transient(
                    f"resource claim {key} is already reserved for {MAX_CONSUMERS} consumers, the maximum", claim=key
                )
            result.allocated.append(claim)
            continue
        in_flight = ledger.get(key)
        if in_flight is not None and in_flight.pod_uid != uid:
            raise Transient(f"resource claim {key} is in the process of being allocated", claim=key)
        result.to_allocate.append(claim)
    demand = pod_demand(pod, store.extended_classes)
    if demand is not None:
        _add_extended(store, ledger, result, demand, namespace, name)
    return result
