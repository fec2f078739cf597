"""Tentative holds: a pod's devices held on the node kube-scheduler is expected to bind it to.

kube-scheduler starts the next pod's scheduling cycle before it sends this pod's bind, and an
extender has no Reserve step; so when an answer all but decides the node — a filter that leaves one
node, or prioritize, whose best node this service makes unique (``one_best``) — the pod's devices
there go into the in-flight ledger as a *tentative* entry (``InFlightLedger.add(tentative=True)``),
until the pod's bind arrives (which drops it and decides for the node chosen), its next attempt, or
``hold_seconds``. docs/pipeline.md has the timeline and what each outcome costs.
"""

from __future__ import annotations

from collections.abc import Container, Sequence

from extender.core.allocator import Allocation
from extender.core.model import AllocationResult, DeviceResult
from extender.core.scoring import MAX_SCORE
from extender.state.cache.claims import PodClaims
from extender.state.cache.cluster import ClusterView
from extender.state.cache.fit_cache import ShapeVerdicts, Verdict
from extender.state.cache.ledger import InFlightAllocation
from extender.state.stats import ServiceStats

__all__ = ["DEFAULT_HOLD_SECONDS", "Holds", "one_best"]

#: How long a hold waits for its pod's bind: kube-scheduler sends it milliseconds after the answer
#: that placed it (docs/pipeline.md has the measured gaps).
DEFAULT_HOLD_SECONDS = 2.0


class Holds:
    """Places and settles the holds; see the module docstring. ``binding`` holds the UIDs of pods
    whose bind is running: those get no hold (their bind's own entries hold their devices)."""

    def __init__(self, cluster: ClusterView, stats: ServiceStats, *, seconds: float, binding: Container[str]) -> None:
        self.cluster = cluster
        self.ledger = cluster.ledger
        self.stats = stats
        self.seconds = seconds
        self.binding = binding
        cluster.on_expired = self._expired

    @property
    def enabled(self) -> bool:
        return self.seconds > 0

    def hold(self, claims: PodClaims, node_name: str, verdict: Verdict | None) -> None:
        """Hold the devices the pod would get on ``node_name``: those of the remembered verdict
        where they are plain devices, else a fresh allocation's."""
        if not self.enabled or not claims.to_allocate or claims.pod_uid in self.binding:
            return
        if claims.extended_new:
            node_claims = claims.on_node(self.cluster.store.node(node_name))  # the verdict's claims there
            if node_claims is None or not node_claims.to_allocate:
                return
            claims = node_claims
        results = _held_devices(verdict) if isinstance(verdict, Allocation) else None
        if results is not None and len(results) != len(claims.to_allocate):
            results = None  # not this pod's claims after all: decide afresh below
        if results is None:
            search = self.cluster.watched_search((node_name,))
            allocator = self.cluster.allocator(claims, refresh=False, budget=search.budget)
            answer = allocator.answer(self.cluster.store.node(node_name))
            current = search.unchanged()
            if not isinstance(answer, Allocation) or (current is not None and node_name not in current):
                return  # nothing to hold, or it may be stale: the bind decides afresh anyway
            results = answer.results
        record(self.cluster, claims, node_name, results, tentative=True, ttl_seconds=self.seconds)
        self.stats.count_hold("placed")

    def hold_chosen(self, claims: PodClaims, node_name: str, verdicts: ShapeVerdicts) -> None:
        """``hold`` on the node an answer all but chose, with the shape's remembered verdict there;
        no hold where devices are nominated for a preemptor this pod must leave alone (the hold's
        devices are chosen without the nomination, and could be the nominated ones; the bind,
        which sees the nomination, picks others)."""
        nominations = self.cluster.nominations
        if nominations and nominations.against(claims.pod_uid, claims.priority, node_name):
            return
        self.hold(claims, node_name, None if node_name in verdicts.stale else verdicts.by_node.get(node_name))

    def release(self, pod_uid: str, *, bound_to: str | None = None) -> None:
        """Drop the pod's holds: at its next filter or prioritize, or when its bind (to
        ``bound_to``) arrives, which then decides afresh for the node kube-scheduler chose."""
        gone = self.ledger.drop_holds(pod_uid)
        if not gone:
            return
        if bound_to is None:
            self.stats.count_hold("dropped")
            return
        self.stats.count_hold("kept" if any(e.node == bound_to for e in gone) else "moved")
        age = self.ledger.age(gone[0])
        self.stats.holds_settled += 1
        self.stats.hold_age_seconds += age
        self.stats.hold_age_max_seconds = max(self.stats.hold_age_max_seconds, age)

    def _expired(self, entries: list[InFlightAllocation]) -> None:
        pods = {e.pod_uid for e in entries if e.tentative}
        if pods:
            self.stats.count_hold("expired", len(pods))


def record(
    cluster: ClusterView,
    claims: PodClaims,
    node_name: str,
    results: Sequence[AllocationResult],
    *,
    tentative: bool,
    ttl_seconds: float | None = None,
) -> None:
    """Put a pod's allocations (per claim to allocate) into the ledger: a bind's, or a hold."""
    for claim, result in zip(claims.to_allocate, results, strict=True):
        cluster.ledger.add(
            claim=claim,
            pod_key=claims.pod_key,
            pod_uid=claims.pod_uid,
            node=node_name,
            result=result,
            tentative=tentative,
            provisional=claims.in_flight_only(claim.key),
            ttl_seconds=ttl_seconds,
        )


def _held_devices(verdict: Allocation) -> tuple[AllocationResult, ...] | None:
    """What a hold needs of a remembered verdict: per claim, the devices it takes, when taking a
    device is all there is to it (no admin access, no device that is shared between claims, whose
    shares and consumed capacity only a full allocation knows). None otherwise."""
    ids = verdict.picked_ids
    if sum(map(len, ids)) != len(verdict.consumed_devices):
        return None  # admin access: the device is not taken
    if any(device.allow_multiple_allocations for claim in verdict.picked for device in claim):
        return None
    return tuple(
        AllocationResult(
            devices=tuple(DeviceResult(request="", driver=d.driver, pool=d.pool, device=d.device) for d in claim)
        )
        for claim in ids
    )


def one_best(scores: list[int], codes: Sequence[int | None]) -> int | None:
    """Make the first of the best-scored nodes the only best one, in place, and return its index
    (None when it does not fit). kube-scheduler breaks equal totals at random; an extender that
    holds the node it expects to be chosen must name one. One point is ``weight x 10`` in
    kube-scheduler's total, more than the in-tree differences between like nodes (docs/pipeline.md)."""
    top = max(scores)
    first = scores.index(top)
    if codes[first] is None:
        return None
    if scores.count(top) > 1:
        if top < MAX_SCORE:
            scores[first] = top + 1
        else:
            scores[:] = [score - 1 if score == top else score for score in scores]
            scores[first] = top
    return first
