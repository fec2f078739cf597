"""PostFilter: what happens when a filter attempt found no node (docs/allocator.md), in order.

An extender has no PostFilter of its own; without these steps such pods would stay stuck:

1. the pod's extended-resource claim an earlier attempt left behind is deleted;
2. a claim whose devices failed binding (or timed out) is deallocated, or deleted if bind created
   it for the pod's extended resources (``bind/conditions.py``);
3. a claim of the pod allocated on other nodes and reserved for nobody else is deallocated (a
   classic claim: asked of its driver), so that the next attempt allocates it afresh;
4. else device-aware preemption may free a node (``preemption/devices.py``).

Each write is a leader's (``Backend.ensure_leader``) and answers ``Error`` naming what was done,
so that kube-scheduler retries soon. The steps work from the attempt's claims as they were when its
search started (a search that paused let other requests run meanwhile); each write reads the claim
again before it changes it (``claim_writes.deallocate``). Steps 2 and 3 read the claims as they exist: a pod whose
template claims are not created yet has nothing to recover (as upstream, whose PreFilter stops
such a pod before PostFilter)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from extender.core.answers import Unresolvable
from extender.core.errors import ExtenderError
from extender.core.extended import CANNOT_SCHEDULE_EXTENDED_CLAIM
from extender.core.model import ResourceClaim
from extender.state.bind.claim_writes import deallocate, delete_claim_with_uid
from extender.state.bind.conditions import release_unbindable
from extender.state.cache.claims import PodClaims, stale_extended_claim
from extender.state.cache.cluster import ClusterView
from extender.state.cache.pods import bound_node, pod_identity, pod_uid
from extender.state.classic import ClassicNegotiator
from extender.state.filter.attempt import Attempt, Attempts
from extender.state.filter.verdicts import FilterOutcome
from extender.state.preemption.devices import DevicePreemption

__all__ = ["OFFERED_PODS", "PostFilter", "deallocate_claim", "delete_stale_claim", "stuck_claim"]

log = structlog.get_logger()


#: Pods whose last request of several nodes ``PostFilter`` remembers (the oldest forgotten first).
OFFERED_PODS = 4096


class PostFilter:
    """See the module docstring. ``attempts`` decides, for a one-node request, whether another node
    the pod was offered fits (then nobody needs to go)."""

    def __init__(
        self, *, cluster: ClusterView, classic: ClassicNegotiator, preemption: DevicePreemption, attempts: Attempts
    ) -> None:
        self.cluster = cluster
        self.backend = cluster.backend
        self.classic = classic
        self.preemption = preemption
        self.attempts = attempts
        # per pod UID, the nodes of its last filter request of several nodes (``remember_offered``)
        self._offered: dict[str, Sequence[str]] = {}

    def remember_offered(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> None:
        """The nodes of the pod's last request of several (its in-tree filters passed them): a
        one-node request (a nominated or hint node) preempts only if none of those fits."""
        if not self.preemption.enabled or len(node_names) < 2:
            return
        uid = pod_uid(pod)
        offered = self._offered
        offered.pop(uid, None)
        offered[uid] = node_names  # the request's own list: filter never changes it
        if len(offered) > OFFERED_PODS:
            del offered[next(iter(offered))]

    async def run(self, attempt: Attempt) -> FilterOutcome:
        """The attempt's answer, or what the steps of the module docstring answer instead."""
        outcome, claims = attempt.outcome, attempt.claims
        if outcome.error == CANNOT_SCHEDULE_EXTENDED_CLAIM:
            return await self._delete_stale_claim(attempt)
        if outcome.node_names or outcome.error or not attempt.node_names or claims is None:
            return outcome
        if claims.provisional:
            return await self._preempt(attempt, claims)
        if attempt.unbindable:
            released = await self._release_unbindable(attempt)
            if released is not None:
                return released
        stuck = stuck_claim(self.cluster, attempt.pod, claims, attempt.node_names)
        if stuck is None:
            return await self._preempt(attempt, claims)
        try:
            await self.backend.ensure_leader()  # a write: a standby must not make it
        except ExtenderError as exc:
            return FilterOutcome([], error=f"claim {stuck.key} must be deallocated, but {exc.reason}")
        if not await deallocate_claim(self.cluster, attempt.pod, stuck, self.classic):
            return outcome
        if stuck.classic:
            return FilterOutcome([], error=f"deallocation of ResourceClaim {stuck.key} requested")
        return FilterOutcome([], error=f"deallocation of ResourceClaim {stuck.key} completed")

    async def _release_unbindable(self, attempt: Attempt) -> FilterOutcome | None:
        """Step 2; None when nothing could be released."""
        unbindable = attempt.unbindable
        try:
            await self.backend.ensure_leader()
        except ExtenderError as exc:
            return FilterOutcome([], error=f"claim {unbindable[0][0].key} must be deallocated, but {exc.reason}")
        uid = pod_uid(attempt.pod)
        store = self.cluster.store
        done = [
            (claim.key, how)
            for claim, verdict in unbindable
            if (how := await release_unbindable(self.backend, store, claim, uid, verdict))
        ]
        if not done:
            return None
        key, how = done[0]
        return FilterOutcome([], error=f"{how} of ResourceClaim {key} completed ({unbindable[0][1].failed})")

    async def _delete_stale_claim(self, attempt: Attempt) -> FilterOutcome:
        """Step 1, never while a bind of the pod runs (it is that bind's claim)."""
        namespace, name, uid = pod_identity(attempt.pod)
        if uid in self.cluster.binding:
            return FilterOutcome([], error=f'pod "{namespace}/{name}" is being bound')
        stale = stale_extended_claim(attempt.pod, self.cluster.store)
        if stale is None:
            return attempt.outcome
        try:
            await self.backend.ensure_leader()  # a write: a standby must not make it
        except ExtenderError as exc:
            return FilterOutcome([], error=f"claim {stale.key} must be deleted, but {exc.reason}")
        if not await delete_stale_claim(self.cluster, stale):
            return attempt.outcome
        return FilterOutcome([], error=f"deletion of ResourceClaim {stale.key} completed")

    async def _preempt(self, attempt: Attempt, claims: PodClaims) -> FilterOutcome:
        """Step 4."""
        if not self.preemption.enabled:
            return attempt.outcome
        node_names = attempt.node_names

        def fits_elsewhere() -> bool:
            """Whether a node kube-scheduler offered the pod in its last request of several nodes
            (its in-tree filters passed those: the pod's node selector, affinity, taints, CPU),
            other than the requested one, fits the pod now (nominations respected)."""
            offered: Sequence[str] = self._offered.get(claims.pod_uid, ())
            others = [name for name in offered if name not in node_names]
            return bool(others) and bool(self.attempts.fits_on(claims, others))

        try:
            return await self.preemption.consider(
                attempt.pod, claims, attempt.outcome, node_names, fits_elsewhere=fits_elsewhere
            )
        except ExtenderError as exc:
            return FilterOutcome([], error=exc.reason)


def stuck_claim(
    cluster: ClusterView, pod: Mapping[str, Any], claims: PodClaims, node_names: Sequence[str]
) -> ResourceClaim | None:
    """The pod's allocated claim that rules out some of ``node_names`` and that only this pod may
    use, if there is one (an unbound pod only; ``pod`` as stored, ``claims`` its claims)."""
    if bound_node(pod):
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
