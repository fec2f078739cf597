"""The scheduling service: the extender verbs as plain methods (no HTTP here).

``SchedulingService`` wires the parts of ``extender/state`` (``cache/``, ``filter/``, ``bind/``,
``preemption/``, ``classic.py``; docs/architecture.md maps them and walks one filter and one bind)
and orchestrates each verb as a visible sequence of their steps. Answers
(``extender.core.answers``): a node where the claims fit passes; ``Unfit`` is ``FailedNodes``,
``Unresolvable`` ``FailedAndUnresolvableNodes``; a fatal or a transient problem fails the attempt
with ``Error``. ``filter`` and ``prioritize`` change nothing but tentative holds; PostFilter's
writes (``filter_and_recover``) are a leader's.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from extender.core.answers import NOT_SYNCED
from extender.core.budget import DEFAULT_FILTER_TIMEOUT_SECONDS
from extender.core.errors import ExtenderError, NotSynced
from extender.core.model import Features, ResourceClaim
from extender.core.scoring import ScoringPolicy
from extender.state import cooperative
from extender.state.backend import Backend
from extender.state.bind.barrier import DEFAULT_GANG_BARRIER_SECONDS, GangBarrier
from extender.state.bind.binder import (
    DEFAULT_BIND_DEADLINE_SECONDS,
    DEFAULT_CLAIM_WAIT_SECONDS,
    Binder,
    ledger_ttl,
    rollback_reserve,
)
from extender.state.bind.claim_writes import DELETE_PROTECTION_FINALIZER, deallocate
from extender.state.bind.conditions import (
    DEFAULT_BINDING_TIMEOUT_SECONDS,
    DEFAULT_BINDING_WAIT_SECONDS,
    BindingTimeout,
)
from extender.state.cache.claims import PodClaims
from extender.state.cache.cluster import ClusterView
from extender.state.cache.ledger import InFlightLedger
from extender.state.cache.pods import (
    pod_group_name,
    pod_identity,
    pod_uid,
    scheduling_preference,
    tolerates_soft_taint,
)
from extender.state.classic import ClassicNegotiator
from extender.state.filter.attempt import Attempt, Attempts
from extender.state.filter.gangs import DEFAULT_GANG_HOLD_SECONDS, DEFAULT_GANG_RETRY_BACKOFF, GangFilter
from extender.state.filter.holds import DEFAULT_HOLD_SECONDS, Holds
from extender.state.filter.prioritize import Prioritizer
from extender.state.filter.recovery import PostFilter
from extender.state.filter.rejected import RejectedPods
from extender.state.filter.verdicts import Candidates, DuplicateNodes, FilterOutcome, VerdictCache
from extender.state.gangs import Gangs
from extender.state.preemption.devices import DevicePreemption
from extender.state.preemption.gangs import GangPreemption
from extender.state.preemption.verb import DEFAULT_PREEMPT_TIMEOUT_SECONDS, NodeVictims, PreemptOutcome, PreemptVerb
from extender.state.stats import ServiceStats

__all__ = [
    "DEFAULT_BIND_DEADLINE_SECONDS",
    "DEFAULT_CLAIM_WAIT_SECONDS",
    "DEFAULT_HOLD_SECONDS",
    "DELETE_PROTECTION_FINALIZER",
    "DuplicateNodes",
    "FilterOutcome",
    "SchedulingService",
    "ServiceStats",
    "check_gang_barrier",
]

#: How long the start-up warm-up works before it lets the event loop run (``warm_up``).
WARM_UP_SLICE_SECONDS = 0.005

log = structlog.get_logger()


def check_gang_barrier(barrier_seconds: float, bind_deadline_seconds: float) -> None:
    """ValueError unless the gang barrier's wait leaves a bind time for its writes: a member that
    never comes would otherwise run every member of its gang into the bind's deadline."""
    window = bind_deadline_seconds - rollback_reserve(bind_deadline_seconds)
    if barrier_seconds >= window:
        raise ValueError(
            f"--gang-barrier-seconds ({barrier_seconds:g}) must be below a bind's time for its writes "
            f"({window:g} s: --bind-deadline-seconds less its rollback reserve)"
        )


class SchedulingService:
    """filter / prioritize / preempt / bind over one backend; see the module docstring.

    ``rejected``: the registry of pods no offered node fits (the kube backend's, whose fast requeue
    nudges them). ``hold_seconds`` > 0 turns on tentative holds (docs/pipeline.md);
    ``claim_wait_seconds``: how long a bind waits for template claims; ``binding_timeout_seconds``
    and ``binding_wait_seconds``: how long devices may wait for their binding conditions, and one
    bind for them (``bind/conditions.py``); ``bind_deadline_seconds``: a bind's whole time (and the
    ledger's TTL, ``ledger_ttl``); ``filter_timeout_seconds``: each node's search budget (0: none);
    ``preemption``: device-aware preemption on; ``preempt_timeout_seconds``: the preempt verb's.
    ``filter_picks_node``: the filter answers a pod without soft preferences of its own with the
    one node prioritize would rank first (``_picked``), so kube-scheduler scores nothing.
    ``clock`` (monotonic) measures every deadline, TTL and lifetime, ``wall_clock`` what the API
    server stamps (``state/clock.py``); tests inject both."""

    def __init__(
        self,
        *,
        backend: Backend,
        ledger: InFlightLedger | None = None,
        features: Features = Features(),
        scoring: ScoringPolicy | None = None,
        scoring_annotation: str = "dra-extender.io/scoring",
        rejected: RejectedPods | None = None,
        hold_seconds: float = DEFAULT_HOLD_SECONDS,
        claim_wait_seconds: float = DEFAULT_CLAIM_WAIT_SECONDS,
        binding_timeout_seconds: float = DEFAULT_BINDING_TIMEOUT_SECONDS,
        binding_wait_seconds: float = DEFAULT_BINDING_WAIT_SECONDS,
        bind_deadline_seconds: float = DEFAULT_BIND_DEADLINE_SECONDS,
        filter_timeout_seconds: float = DEFAULT_FILTER_TIMEOUT_SECONDS,
        preemption: bool = True,
        preempt_timeout_seconds: float = DEFAULT_PREEMPT_TIMEOUT_SECONDS,
        gang_hold_seconds: float = DEFAULT_GANG_HOLD_SECONDS,
        gang_retry_backoff: int = DEFAULT_GANG_RETRY_BACKOFF,
        gang_barrier_seconds: float = DEFAULT_GANG_BARRIER_SECONDS,
        filter_picks_node: bool = False,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.backend = backend
        self.store = backend.store
        if ledger is None:
            ledger = InFlightLedger(ttl_seconds=ledger_ttl(bind_deadline_seconds), clock=clock)
        self.ledger = ledger
        self.features = features
        self.filter_picks_node = filter_picks_node
        self.stats = ServiceStats()
        #: True once ``warm_up`` has run (the server's /readyz waits for it after the sync).
        self.warmed = False
        #: The pods the last filter (the verb's, not an explanation's) found no node for.
        self.rejected = rejected if rejected is not None else RejectedPods(clock=clock)
        binding: set[str] = set()  # UIDs of pods with a bind running
        self.cluster = cluster = ClusterView(
            backend, ledger, features, filter_timeout_seconds=filter_timeout_seconds, clock=clock, binding=binding
        )
        self.verdicts = VerdictCache(cluster, features)
        self.classic = ClassicNegotiator(cluster)
        self.preemption = DevicePreemption(cluster, enabled=preemption)
        binding_timeout = BindingTimeout(binding_timeout_seconds, wall_clock)
        self.attempts = Attempts(
            cluster=cluster,
            verdicts=self.verdicts,
            classic=self.classic,
            preemption=self.preemption,
            binding_timeout=binding_timeout,
        )
        self.post_filter = PostFilter(
            cluster=cluster, classic=self.classic, preemption=self.preemption, attempts=self.attempts
        )
        #: Gangs (PodGroups with a minCount): their members are planned and answered together
        #: (``filter/gangs.py``; spec/workloads-and-gangs.md).
        self.gangs = Gangs(backend, binding=binding)
        self.gang_filter = GangFilter(
            cluster=cluster,
            gangs=self.gangs,
            verdicts=self.verdicts,
            stats=self.stats,
            hold_seconds=gang_hold_seconds,
            retry_backoff=gang_retry_backoff,
            clock=clock,
        )
        #: Preemption for a whole gang whose pass found no plan (``preemption/gangs.py``).
        self.gang_preemption = GangPreemption(self.preemption, self.gang_filter)
        self.preempt_verb = PreemptVerb(cluster, self.preemption, timeout_seconds=preempt_timeout_seconds, clock=clock)
        self.holds = Holds(cluster, self.stats, seconds=hold_seconds, binding=binding)
        self.prioritizer = Prioritizer(
            cluster=cluster,
            verdicts=self.verdicts,
            holds=self.holds,
            policy=scoring if scoring is not None else ScoringPolicy.parse("binpack=1,prioritized=1"),
            annotation=scoring_annotation,
        )
        self.binder = Binder(
            cluster,
            self.holds,
            self.stats,
            claim_wait_seconds=claim_wait_seconds,
            binding_timeout=binding_timeout,
            binding_wait_seconds=binding_wait_seconds,
            deadline_seconds=bind_deadline_seconds,
            binding=binding,
            classic=self.classic,
            barrier=GangBarrier(self.gang_filter.bind_members, self.stats, wait_seconds=gang_barrier_seconds),
        )

    @property
    def scoring(self) -> ScoringPolicy:
        """The service's scoring policy (a pod's annotation may name its own)."""
        return self.prioritizer.policy

    def filter(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> FilterOutcome:
        """Filter without PostFilter (``filter_and_recover`` is the verb)."""
        gang = self.gang_filter.filter(pod, node_names) if pod_group_name(pod) and self.gangs.enabled else None
        if gang is not None:
            self.gang_filter.take_releases(pod)  # no writes here (``filter_and_recover`` makes them)
            return gang
        return self._decide_and_apply(pod, node_names).outcome

    async def filter_and_recover(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> FilterOutcome:
        """The filter verb: the attempt decided and applied, letting the event loop run during a
        long search (``cooperative.py``: a hold's own search too); then, when no node fits,
        PostFilter over the same attempt (``filter/recovery.py``: stale claims freed, or
        preemption). A gang's member is answered from its gang's plan instead
        (``filter/gangs.py``)."""
        if pod_group_name(pod) and self.gangs.enabled:  # most pods name no group: nothing to run
            gang = await cooperative.run(self.gang_filter.filter, pod, node_names)
            if gang is not None:
                group, stuck = self.gang_filter.take_releases(pod)
                if stuck:
                    return await self._free_group_claims(group, stuck)
                return gang if gang.node_names else await self.gang_preemption.consider(pod, node_names, gang)
        attempt = await cooperative.run(self._decide_and_apply, pod, node_names)
        return await self.post_filter.run(attempt)

    async def _free_group_claims(self, group: str, stuck: Sequence[ResourceClaim]) -> FilterOutcome:
        """A gang's PodGroup claims allocated where the gang cannot go, with no member placed
        (spec F7, ``GangFilter._stuck_group_claims``): deallocated while they are reserved for the
        group alone, and the member answered ``Error`` (kube-scheduler retries after its backoff,
        and the next pass plans the claims afresh)."""
        try:
            await self.backend.ensure_leader()  # a write: a standby must not make it
        except ExtenderError as exc:
            return FilterOutcome([], error=f"claim {stuck[0].key} must be deallocated, but {exc.reason}")
        for claim in stuck:
            pod_group = self.store.pod_groups.get(group)
            if pod_group is not None and self.gangs.members(pod_group).placed:
                return FilterOutcome([], error=f"gang {group}: a member is being bound; claim {claim.key} is kept")
            # reserved for the group alone (or nobody); a consumer added, or another allocation
            # made, meanwhile stops the write
            consumer = claim.reserved_for[0].uid if claim.reserved_for else ""
            try:
                await deallocate(self.backend, claim, consumer, expected=claim)
            except ExtenderError as exc:
                log.warning("gang.deallocation_failed", claim=claim.key, reason=exc.reason)
                return FilterOutcome([], error=f"claim {claim.key} must be deallocated, but {exc.reason}")
            log.info("gang.claim_deallocated", claim=claim.key)
        return FilterOutcome([], error=f"deallocation of ResourceClaim {stuck[0].key} completed for gang {group}")

    def attempt(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> Attempt:
        """The filter's decision, read-only (``filter/attempt.py``): what explain reads."""
        return self.attempts.decide(pod, node_names)

    def _decide_and_apply(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> Attempt:
        """Before the decision: the nodes offered remembered (PostFilter's preemption asks them),
        and the pod's previous holds given back (its own holds would hide devices from it); then
        the attempt, and its effects."""
        self.post_filter.remember_offered(pod, node_names)
        if self.backend.synced:
            self.holds.release(pod_uid(pod))
        attempt = self.attempts.decide(pod, node_names)
        return self._apply(attempt)

    def _apply(self, attempt: Attempt) -> Attempt:
        """The attempt's effects, in order: classic DRA's ``potentialNodes`` published; the
        rejected-pod bookkeeping; when exactly one node passes, a tentative hold of the pod's
        devices there (kube-scheduler then picks it without asking prioritize); else, with
        ``filter_picks_node``, the node chosen (``_picked``: the attempt returned answers with it
        alone), or the nodes passed remembered as the list prioritize will be asked about
        (``remember_answer``)."""
        claims, outcome = attempt.claims, attempt.outcome
        if attempt.potential is not None and claims is not None:
            self.classic.publish_if_needed(attempt.pod, claims, attempt.potential)
        if not attempt.decided or claims is None:
            return attempt
        if not outcome.node_names:
            self.rejected.rejected(attempt.pod)
            return attempt
        if claims.pod_uid in self.rejected:
            self.rejected.placed(claims.pod_uid)
        if attempt.verdicts is not None and len(outcome.node_names) == 1:
            self.holds.hold_chosen(claims, outcome.node_names[0], attempt.verdicts)
        if attempt.verdicts is not None and attempt.candidates is not None:
            # the nodes passed are the list kube-scheduler prioritizes next (or the pick scores)
            passed = self.verdicts.remember_answer(attempt.verdicts, attempt.candidates, outcome.node_names)
            if self.filter_picks_node and len(outcome.node_names) > 1:
                picked = self._picked(attempt, claims, outcome, passed)
                if picked is not None:
                    return dataclasses.replace(attempt, outcome=picked)
        return attempt

    def _picked(
        self, attempt: Attempt, claims: PodClaims, outcome: FilterOutcome, passed: Candidates | None
    ) -> FilterOutcome | None:
        """The filter answer naming only the node prioritize would rank first (its devices held
        there, as prioritize holds them), the failed nodes' reasons kept: with one node left,
        kube-scheduler binds there without scoring or asking prioritize (a round trip and a score
        of every node less per pod). Only with holds on, and for a pod that leaves nothing else for
        kube-scheduler's scores to weigh: no soft preference of its own (``scheduling_preference``),
        not of a PodGroup, no classic claim, and a chosen node without a ``PreferNoSchedule`` taint
        the pod does not tolerate. None: the whole answer stands. (A hold is not placed where the
        pod must leave nominated devices alone, ``Holds.hold_chosen``; the node is picked anyway,
        and the bind decides there with the nomination.) ``passed``: the answer's nodes as a
        candidate list (``VerdictCache.remember_answer``), scored with the attempt's own verdicts
        unless some went stale while its search paused; None: the pick looks both up."""
        pod = attempt.pod
        if not self.holds.enabled:
            # nothing would reserve the node for the pod: the next pods would be picked onto it
            # too, and all but one bind fail (kube-scheduler's own ties are broken at random)
            return None
        if claims.classic or pod_group_name(pod) or scheduling_preference(pod):
            return None

        def untainted(node: str) -> bool:  # else kube-scheduler's taint score may well choose another
            return all(tolerates_soft_taint(pod, key, value) for key, value in self.store.node(node).soft_taints)

        verdicts = attempt.verdicts
        # a search that paused saw some nodes change meanwhile (``stale``): the pick looks them up again
        known = (passed, verdicts) if passed is not None and verdicts is not None and not verdicts.stale else None
        node = self.prioritizer.pick(pod, claims, outcome.node_names, untainted, known=known)
        if node is None:
            return None
        self.stats.filter_picks += 1
        return FilterOutcome([node], failed=outcome.failed, unresolvable=outcome.unresolvable, picked=True)

    def observe_nodes(self, nodes: Sequence[Mapping[str, Any]]) -> None:
        """Node objects of a request (nodeCacheCapable: false), so that node selectors see their
        labels: the backend decides what to take (``Backend.observe_nodes``)."""
        if nodes:
            self.backend.observe_nodes(nodes)

    def prioritize(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> list[tuple[str, int]]:
        """A 0..10 score for every given node (0 where the claims do not fit)."""
        return list(zip(*self.prioritize_columns(pod, node_names), strict=True))

    async def prioritize_cooperatively(
        self, pod: Mapping[str, Any], node_names: Sequence[str]
    ) -> tuple[Sequence[str], list[int]]:
        """``prioritize_columns``, letting the event loop run during a long search."""
        return await cooperative.run(self.prioritize_columns, pod, node_names)

    def prioritize_columns(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> tuple[Sequence[str], list[int]]:
        """``prioritize`` as two columns, the nodes and their scores (``filter/prioritize.py``)."""
        if not self.backend.synced:
            raise NotSynced(NOT_SYNCED)
        return self.prioritizer.columns(pod, node_names)

    async def preempt(self, pod: Mapping[str, Any], victims: Mapping[str, NodeVictims]) -> PreemptOutcome:
        """The preempt verb (``preemption/verb.py``): kube-scheduler's victims per node, with the
        device holders that must also go, and without the nodes where no victims free the devices.
        A problem answers no node (no preemption this time) with ``error``."""
        if not self.backend.synced:
            return PreemptOutcome({}, error=NOT_SYNCED)
        if self._gang_member_waiting(pod):
            # kube-scheduler (workload-aware preemption off) preempts for one member at a time:
            # evictions for a gang that may still not fit (KEP-5710: all or nothing). No node
            # is answered, so none is preempted for (spec/workloads-and-gangs.md §7.8).
            namespace, name, _ = pod_identity(pod)
            log.info("preempt.gang_member", pod=f"{namespace}/{name}", group=pod_group_name(pod))
            return PreemptOutcome({})
        try:
            claims = self.cluster.claims(self.cluster.pod(pod))
        except ExtenderError as exc:
            return PreemptOutcome({}, error=exc.reason)
        return PreemptOutcome(await self.preempt_verb.decide(claims, victims))

    def _gang_member_waiting(self, pod: Mapping[str, Any]) -> bool:
        """Whether the pod is a member of a gang that still needs members placed."""
        if not pod_group_name(pod) or not self.gangs.enabled:
            return False
        group = self.gangs.group_of(pod)
        return group is not None and group.gang and self.gangs.members(group).need > 0

    async def bind(self, namespace: str, name: str, uid: str, node_name: str) -> None:
        """The bind verb (``bind/binder.py``): raises the ExtenderError its ``Error`` answers."""
        try:
            if not self.backend.synced:
                raise NotSynced(NOT_SYNCED)
            await self.binder.bind(namespace, name, uid, node_name)
            self.rejected.placed(uid)
        except ExtenderError as exc:
            self.stats.count_bind_failure(type(exc).__name__)
            log.info("bind.finished", pod=f"{namespace}/{name}", node=node_name, outcome="error", reason=exc.reason)
            raise
        self.stats.binds_ok += 1
        log.info("bind.finished", pod=f"{namespace}/{name}", node=node_name, outcome="bound")

    async def warm_up(self) -> dict[str, int]:
        """The caches a first filter would fill, filled now (``ClusterView.warm_up``), letting the
        event loop run every few milliseconds: /healthz and watches go on meanwhile."""
        try:
            return await cooperative.run(self.cluster.warm_up, cooperative.Pacer(WARM_UP_SLICE_SECONDS).step)
        finally:
            self.warmed = True

    async def stop(self) -> None:
        """Stop the service's background work (classic DRA publishes, moves of replaced claims)
        before the backend stops."""
        await self.classic.stop()
        await self.binder.replaced.stop()
