"""``Attempt``: one filter request decided, read-only; ``Attempts``: what decides it.

``Attempts.decide(pod, node_names)`` builds it once per request: the pod as the backend holds it,
its resolved claims, the candidate list and the remembered verdicts, the answer, and for classic
DRA the nodes its drivers should be asked about. It changes nothing (bar the caches it fills). The
filter verb then applies its effects in a visible sequence (``SchedulingService.filter``): the pod's
previous holds given back before the decision; classic DRA's ``potentialNodes`` published, the
rejected-pod bookkeeping and a tentative hold after it; when no node fits, PostFilter
(``recovery.PostFilter``) over the same attempt. Explain, ``why`` and the device map's pending list
read the same attempt, so an explanation can never disagree with filter about which nodes fit
(with ``--filter-picks-node`` the filter then names one of them: ``SchedulingService._picked``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from extender.core.answers import NOT_AVAILABLE, NOT_SYNCED
from extender.core.errors import ExtenderError
from extender.core.model import ResourceClaim
from extender.state.bind.conditions import BindingTimeout, BindingVerdict
from extender.state.cache.claims import PodClaims
from extender.state.cache.cluster import ClusterView
from extender.state.cache.fit_cache import ShapeVerdicts
from extender.state.classic import ClassicNegotiator
from extender.state.filter.verdicts import Candidates, FilterOutcome, VerdictCache
from extender.state.preemption.devices import DevicePreemption

__all__ = ["Attempt", "Attempts"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempt:
    """See the module docstring. ``decided`` is false where the answer came before a decision (the
    store not synced, a claim that cannot be used, a pod without claims, a claim whose devices
    failed binding): no effect but the answer follows then. ``unbindable`` are the pod's allocated
    claims whose devices failed binding or timed out (``bind/conditions.py``): PostFilter frees
    them."""

    pod: Mapping[str, Any]
    node_names: Sequence[str]
    outcome: FilterOutcome
    claims: PodClaims | None = None
    candidates: Candidates | None = None
    verdicts: ShapeVerdicts | None = None
    #: Classic DRA: the nodes the pod's drivers should be asked about (``potentialNodes``).
    potential: list[str] | None = None
    unbindable: tuple[tuple[ResourceClaim, BindingVerdict], ...] = ()
    decided: bool = False


class Attempts:
    """Decides attempts over one cluster: the verdicts, classic DRA's deny-list, the nominations of
    preemptors, and the binding timeout (shared with the bind)."""

    def __init__(
        self,
        *,
        cluster: ClusterView,
        verdicts: VerdictCache,
        classic: ClassicNegotiator,
        preemption: DevicePreemption,
        binding_timeout: BindingTimeout,
    ) -> None:
        self.cluster = cluster
        self.verdicts = verdicts
        self.classic = classic
        self.preemption = preemption
        self.binding_timeout = binding_timeout

    def decide(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> Attempt:
        """The attempt of ``pod`` over ``node_names``; see the module docstring."""
        if not self.cluster.backend.synced:
            return Attempt(pod=pod, node_names=node_names, outcome=FilterOutcome([], error=NOT_SYNCED))
        try:
            pod = self.cluster.pod(pod)
            claims = self.cluster.claims(pod)
            if not claims.all and not claims.classic:
                return Attempt(pod=pod, node_names=node_names, outcome=FilterOutcome(list(node_names)), claims=claims)
            unbindable = self.unbindable(claims)
            if unbindable:
                # as upstream's Filter: such a claim is not available on any node (PostFilter frees it)
                unavailable = FilterOutcome([], unresolvable=dict.fromkeys(node_names, NOT_AVAILABLE))
                return Attempt(
                    pod=pod, node_names=node_names, outcome=unavailable, claims=claims, unbindable=unbindable
                )
            candidates = verdicts = None
            if claims.all:
                candidates = self.verdicts.candidates(node_names)
                verdicts = self.verdicts.verdicts(claims, candidates)
        except ExtenderError as exc:
            return Attempt(pod=pod, node_names=node_names, outcome=FilterOutcome([], error=exc.reason))
        if verdicts is None or candidates is None:
            outcome = FilterOutcome(list(node_names))
        else:
            outcome = self.verdicts.filter_outcome(verdicts, candidates)
        potential = None
        if claims.classic:
            outcome, potential = self.classic.narrow(claims, outcome)
        decided = not outcome.error
        if decided:
            outcome = self._without_nominated(claims, outcome)
        return Attempt(
            pod=pod,
            node_names=node_names,
            outcome=outcome,
            claims=claims,
            candidates=candidates,
            verdicts=verdicts,
            potential=potential,
            decided=decided,
        )

    def fits_on(self, claims: PodClaims, node_names: Sequence[str]) -> list[str]:
        """The nodes of ``node_names`` where the pod's resolved ``claims`` fit now, nominations
        respected (PostFilter asks this of the other nodes a pod was offered). Raises the
        ExtenderError that would fail an attempt there."""
        candidates = self.verdicts.candidates(node_names)
        outcome = self.verdicts.filter_outcome(self.verdicts.verdicts(claims, candidates), candidates)
        return self._without_nominated(claims, outcome).node_names

    def _without_nominated(self, claims: PodClaims, outcome: FilterOutcome) -> FilterOutcome:
        """Nodes that pass only by taking devices nominated for a preemptor fail."""
        if not self.cluster.nominations:
            return outcome
        return self.preemption.respect_nominations(claims, outcome)

    def unbindable(self, claims: PodClaims) -> tuple[tuple[ResourceClaim, BindingVerdict], ...]:
        """The pod's allocated claims whose devices failed binding or timed out waiting for their
        binding conditions."""
        if not claims.allocated:
            return ()
        found = self.binding_timeout.verdicts(claims.allocated, self.cluster.store.raw_claims)
        return tuple((claim, verdict) for claim, verdict in found or () if verdict.failed)
