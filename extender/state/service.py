"""The scheduling service: the extender verbs as plain methods (no HTTP here).

``SchedulingService`` wires the parts of ``extender/state`` and answers the verbs; each part is a
module of one concern (docs/architecture.md draws them):

- ``cluster.py``: the store plus the in-flight ledger, refreshed before every decision, and the
  allocator over both;
- ``verdicts.py``: candidate lists, remembered per-shape verdicts, filter answers, score columns;
- ``holds.py``: the tentative holds that keep the service ahead of kube-scheduler's pipeline;
- ``binding.py``: the bind verb (decide at arrival, wait for template claims, write, roll back),
  over ``claim_writes.py``;
- ``recovery.py``: PostFilter's deallocation of a claim that keeps a pod from every node;
- ``preemption.py``: device-aware preemption driven by filter; ``preempt_verb.py``: kube-scheduler's
  ``preempt`` verb (its victims per node, with the device holders that must also go);
- ``debug.py``: what the debug endpoints and explain show.

Answers (``extender.core.answers``): a node where the claims fit passes; ``Unfit`` is
``FailedNodes``, ``Unresolvable`` ``FailedAndUnresolvableNodes``; a fatal or a transient problem
fails the attempt with ``Error``. ``filter`` and ``prioritize`` change nothing but tentative holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from extender.core.answers import NOT_AVAILABLE, NOT_SYNCED
from extender.core.budget import DEFAULT_FILTER_TIMEOUT_SECONDS
from extender.core.cel import CelCompileError
from extender.core.errors import ExtenderError, NotSynced, PodUnschedulable
from extender.core.extended import CANNOT_SCHEDULE_EXTENDED_CLAIM
from extender.core.model import Features, ResourceClaim
from extender.core.scoring import TOPOLOGY, ScoringPolicy, scores_by_value
from extender.state import cooperative
from extender.state.attempt import Attempt
from extender.state.backend import Backend
from extender.state.binding import DEFAULT_BIND_DEADLINE_SECONDS, DEFAULT_CLAIM_WAIT_SECONDS, Binder, ledger_ttl
from extender.state.binding_conditions import (
    DEFAULT_BINDING_TIMEOUT_SECONDS,
    DEFAULT_BINDING_WAIT_SECONDS,
    BindingVerdict,
    binding_verdicts,
    release_unbindable,
)
from extender.state.claim_writes import DELETE_PROTECTION_FINALIZER
from extender.state.claims import PodClaims, pod_identity, pod_uid, stale_extended_claim
from extender.state.classic import ClassicNegotiator
from extender.state.cluster import ClusterView
from extender.state.debug import DebugViews
from extender.state.holds import DEFAULT_HOLD_SECONDS, Holds, one_best
from extender.state.ledger import InFlightLedger
from extender.state.preempt_verb import DEFAULT_PREEMPT_TIMEOUT_SECONDS, NodeVictims, PreemptOutcome, PreemptVerb
from extender.state.preemption import DevicePreemption
from extender.state.recovery import deallocate_claim, delete_stale_claim, stuck_claim
from extender.state.rejected import RejectedPods
from extender.state.stats import ServiceStats
from extender.state.verdicts import DuplicateNodes, FilterOutcome, VerdictCache
from extender.state.why import why

__all__ = [
    "DEFAULT_BIND_DEADLINE_SECONDS",
    "DEFAULT_CLAIM_WAIT_SECONDS",
    "DEFAULT_HOLD_SECONDS",
    "DELETE_PROTECTION_FINALIZER",
    "DuplicateNodes",
    "FilterOutcome",
    "SchedulingService",
    "ServiceStats",
]

log = structlog.get_logger()

#: Pods whose last full request ``_preempt`` remembers (the oldest forgotten first).
OFFERED_PODS = 4096


class SchedulingService:
    """filter / prioritize / preempt / bind / explain over one backend; see the module docstring."""

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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``rejected`` is the registry of pods no offered node fits (the kube backend's, whose fast
        requeue nudges them when devices free up; a new one by default). ``hold_seconds`` > 0 turns on the
        tentative holds and prioritize's one best node (docs/pipeline.md); ``claim_wait_seconds``
        is how long a bind waits for template claims that do not exist yet,
        ``binding_timeout_seconds`` how long allocated devices may wait for their binding conditions
        (``binding_conditions.py``) and ``binding_wait_seconds`` how long one bind waits for them,
        ``bind_deadline_seconds`` the whole time a bind may take (and,
        through ``ledger_ttl``, how long in-flight entries live unless a ``ledger`` is given),
        ``filter_timeout_seconds`` each node's search budget
        (upstream's ``filterTimeout``; 0: none); ``preemption`` turns device-aware preemption on
        (``preemption.py``); the preempt verb decides within 80 % of ``preempt_timeout_seconds``
        (``preempt_verb.py``). ``clock`` (monotonic seconds) times the searches, the in-flight
        entries of a ledger made here, the nominations and the preempt verb; tests inject their own."""
        self.backend = backend
        self.store = backend.store
        self.ledger = (
            ledger if ledger is not None else InFlightLedger(ttl_seconds=ledger_ttl(bind_deadline_seconds), clock=clock)
        )
        self.features = features
        self.scoring = scoring if scoring is not None else ScoringPolicy.parse("binpack=1,prioritized=1")
        self.scoring_annotation = scoring_annotation
        self.stats = ServiceStats()
        #: The pods the last filter (the verb's, not an explanation's) found no node for.
        self.rejected = rejected if rejected is not None else RejectedPods()
        binding: set[str] = set()  # UIDs of pods with a bind running
        self.cluster = ClusterView(
            backend, self.ledger, features, filter_timeout_seconds=filter_timeout_seconds, clock=clock
        )
        self.cluster.binding = binding
        self.verdicts = VerdictCache(self.cluster, features)
        self.classic = ClassicNegotiator(self.cluster)
        self.preemption = DevicePreemption(self.cluster, enabled=preemption)
        # per pod UID, the nodes of its last filter request of several nodes (``_remember_offered``)
        self._offered: dict[str, Sequence[str]] = {}
        self.preempt_verb = PreemptVerb(
            self.cluster, self.preemption, timeout_seconds=preempt_timeout_seconds, clock=clock
        )
        self.holds = Holds(self.cluster, self.stats, seconds=hold_seconds, binding=binding)
        self.binder = Binder(
            self.cluster,
            self.holds,
            self.stats,
            claim_wait_seconds=claim_wait_seconds,
            binding_timeout_seconds=binding_timeout_seconds,
            binding_wait_seconds=binding_wait_seconds,
            deadline_seconds=bind_deadline_seconds,
            binding=binding,
            classic=self.classic,
        )
        self.views = DebugViews(self.cluster, self.attempt)
        self.views.preemption = self.preemption

    # --- filter --------------------------------------------------------------------------------

    def filter(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> FilterOutcome:
        """The filter verb: the pod's previous holds given back (its own holds would hide devices
        from it), the attempt decided (``attempt``), then its effects (``_apply``)."""
        if self.preemption.enabled and len(node_names) > 1:
            self._remember_offered(pod, node_names)
        if self.backend.synced:
            self.holds.release(pod_uid(pod))
        return self._apply(self.attempt(pod, node_names))

    def _remember_offered(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> None:
        """The nodes of the pod's last request of several (its in-tree filters passed them): a
        one-node request (a nominated or hint node) preempts only if none of those fits."""
        uid = pod_uid(pod)
        offered = self._offered
        offered.pop(uid, None)
        offered[uid] = node_names  # the request's own list: filter never changes it
        if len(offered) > OFFERED_PODS:
            del offered[next(iter(offered))]

    def attempt(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> Attempt:
        """The filter's decision, read-only (``attempt.py``): what filter answers, and what its
        effects need; explain asks it too."""
        if not self.backend.synced:
            return Attempt(pod=pod, node_names=node_names, outcome=FilterOutcome([], error=NOT_SYNCED))
        try:
            pod = self.cluster.pod(pod)
            claims = self.cluster.claims(pod)
            if not claims.all and not claims.classic:
                return Attempt(pod=pod, node_names=node_names, outcome=FilterOutcome(list(node_names)), claims=claims)
            if claims.allocated and self._unbindable(claims):
                # as upstream's Filter: such a claim is not available on any node (then deallocated)
                unavailable = FilterOutcome([], unresolvable=dict.fromkeys(node_names, NOT_AVAILABLE))
                return Attempt(pod=pod, node_names=node_names, outcome=unavailable, claims=claims)
            candidates = verdicts = None
            if claims.all:
                candidates = self.verdicts.candidates(node_names)
                verdicts = self.verdicts.verdicts(claims, candidates)
        except ExtenderError as exc:
            return Attempt(pod=pod, node_names=node_names, outcome=FilterOutcome([], error=exc.reason))
        if verdicts is None or candidates is None:
            result = FilterOutcome(list(node_names))
        else:
            result = self.verdicts.filter_outcome(verdicts, candidates)
        attempt = Attempt(pod=pod, node_names=node_names, outcome=result, claims=claims)
        attempt.candidates, attempt.verdicts = candidates, verdicts
        if claims.classic:
            attempt.outcome, attempt.potential = self.classic.narrow(claims, result)
            if attempt.outcome.error:
                return attempt
        if self.cluster.nominations:
            attempt.outcome = self.preemption.respect_nominations(claims, attempt.outcome)
        attempt.decided = True
        return attempt

    def _apply(self, attempt: Attempt) -> FilterOutcome:
        """The filter's effects, in order: classic DRA's ``potentialNodes`` published; the
        rejected-pod bookkeeping; when exactly one node passes, a tentative hold of the pod's
        devices there (kube-scheduler then picks it without asking prioritize)."""
        claims, result = attempt.claims, attempt.outcome
        if attempt.potential is not None and claims is not None:
            self.classic.publish_if_needed(attempt.pod, claims, attempt.potential)
        if not attempt.decided or claims is None:
            return result
        if not result.node_names:
            self.rejected.rejected(attempt.pod)
            return result
        if claims.pod_uid in self.rejected:
            self.rejected.placed(claims.pod_uid)
        verdicts = attempt.verdicts
        if verdicts is not None and len(result.node_names) == 1 and self._may_hold(claims, result.node_names[0]):
            node = result.node_names[0]
            self.holds.hold(claims, node, None if node in verdicts.stale else verdicts.by_node.get(node))
        return result

    def _may_hold(self, claims: PodClaims, node: str) -> bool:
        """No tentative hold where devices are nominated for a preemptor this pod must leave alone:
        the hold's devices are chosen without the nomination, and could be the nominated ones (the
        bind, which sees the nomination, picks others)."""
        return not self.cluster.nominations or not self.cluster.nominations.against(
            claims.pod_uid, claims.priority, node
        )

    async def filter_and_recover(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> FilterOutcome:
        """``filter``, letting the event loop run during a long search (``cooperative.py``); then,
        when no node fits because a claim of the pod is allocated elsewhere for it alone, that
        claim deallocated (``recovery.py``) and ``Error`` answered, so that the scheduler retries
        soon and the claim is allocated afresh."""
        outcome = await cooperative.run(self.filter, pod, node_names)
        if outcome.error == CANNOT_SCHEDULE_EXTENDED_CLAIM:
            return await self._delete_stale_claim(pod, outcome)
        if outcome.node_names or outcome.error or not node_names:
            return outcome
        unbindable = await self._deallocate_unbindable(pod)
        if unbindable is not None:
            return unbindable
        stuck = stuck_claim(self.cluster, pod, node_names)
        if stuck is None:
            return await self._preempt(pod, outcome, node_names)
        try:
            # The deallocation is a write: a standby must not make it (nor decide it from its cache).
            await self.backend.ensure_leader()
        except ExtenderError as exc:
            return FilterOutcome([], error=f"claim {stuck.key} must be deallocated, but {exc.reason}")
        if not await deallocate_claim(self.cluster, pod, stuck, self.classic):
            return outcome
        if stuck.classic:
            return FilterOutcome([], error=f"deallocation of ResourceClaim {stuck.key} requested")
        return FilterOutcome([], error=f"deallocation of ResourceClaim {stuck.key} completed")

    def _unbindable(self, claims: PodClaims) -> list[tuple[ResourceClaim, BindingVerdict]]:
        """The pod's allocated claims whose devices failed binding or timed out waiting for their
        binding conditions (``binding_conditions.py``)."""
        timeout = self.binder.binding_timeout_seconds
        verdicts = binding_verdicts(claims.allocated, self.store.raw_claims, timeout_seconds=timeout) or []
        return [(claim, verdict) for claim, verdict in verdicts if verdict.failed]

    async def _deallocate_unbindable(self, pod: Mapping[str, Any]) -> FilterOutcome | None:
        """No node fits because a claim's devices failed binding or timed out: the claim is
        deallocated, or deleted if bind created it for the pod's extended resources (upstream's
        PostFilter), and ``Error`` answered so that the next attempt allocates afresh; None when
        the pod has no such claim."""
        try:
            pod = self.cluster.pod(pod)
            unbindable = self._unbindable(self.cluster.claims(pod, from_templates=False))
        except ExtenderError:
            return None
        if not unbindable:
            return None
        try:
            await self.backend.ensure_leader()
        except ExtenderError as exc:
            return FilterOutcome([], error=f"claim {unbindable[0][0].key} must be deallocated, but {exc.reason}")
        uid = pod_uid(pod)
        done = [
            (claim.key, how)
            for claim, verdict in unbindable
            if (how := await release_unbindable(self.backend, self.store, claim, uid, verdict))
        ]
        if not done:
            return None
        key, how = done[0]
        return FilterOutcome([], error=f"{how} of ResourceClaim {key} completed ({unbindable[0][1].failed})")

    async def _delete_stale_claim(self, pod: Mapping[str, Any], outcome: FilterOutcome) -> FilterOutcome:
        """The pod's extended-resource claim an earlier attempt left behind is deleted (upstream's
        PostFilter does the same), and ``Error`` answered so that the next attempt makes a new
        one; never while a bind of the pod runs (it is that bind's claim)."""
        pod = self.cluster.pod(pod)
        namespace, name, uid = pod_identity(pod)
        if uid in self.cluster.binding:
            return FilterOutcome([], error=f'pod "{namespace}/{name}" is being bound')
        stale = stale_extended_claim(pod, self.store)
        if stale is None:
            return outcome
        try:
            await self.backend.ensure_leader()  # a write: a standby must not make it
        except ExtenderError as exc:
            return FilterOutcome([], error=f"claim {stale.key} must be deleted, but {exc.reason}")
        if not await delete_stale_claim(self.cluster, stale):
            return outcome
        return FilterOutcome([], error=f"deletion of ResourceClaim {stale.key} completed")

    async def _preempt(
        self, pod: Mapping[str, Any], outcome: FilterOutcome, node_names: Sequence[str]
    ) -> FilterOutcome:
        """No node fits: device-aware preemption may free some (``preemption.py``)."""
        if not self.preemption.enabled:
            return outcome

        try:
            pod = self.cluster.pod(pod)
            claims = self.cluster.claims(pod)
        except ExtenderError:
            return outcome

        def fits_elsewhere() -> bool:
            """Whether a node kube-scheduler offered the pod in its last request of several nodes
            (its in-tree filters passed those: the pod's node selector, affinity, taints, CPU),
            other than the requested one, fits the pod now (nominations respected)."""
            offered: Sequence[str] = self._offered.get(claims.pod_uid, ())
            others = [name for name in offered if name not in node_names]
            if not others:
                return False
            candidates = self.verdicts.candidates(others)
            there = self.verdicts.filter_outcome(self.verdicts.verdicts(claims, candidates), candidates)
            return bool(self.preemption.respect_nominations(claims, there).node_names)

        try:
            return await self.preemption.consider(pod, claims, outcome, node_names, fits_elsewhere=fits_elsewhere)
        except ExtenderError as exc:
            return FilterOutcome([], error=exc.reason)

    def observe_nodes(self, nodes: Sequence[Mapping[str, Any]]) -> None:
        """Node objects of a request (nodeCacheCapable: false), so that node selectors see their
        labels: the backend decides what to take (``Backend.observe_nodes``)."""
        if nodes:
            self.backend.observe_nodes(nodes)

    # --- prioritize ----------------------------------------------------------------------------

    def prioritize(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> list[tuple[str, int]]:
        """A 0..10 score for every given node (0 where the claims do not fit)."""
        return list(zip(*self.prioritize_columns(pod, node_names), strict=True))

    async def prioritize_cooperatively(
        self, pod: Mapping[str, Any], node_names: Sequence[str]
    ) -> tuple[Sequence[str], list[int]]:
        """``prioritize_columns``, letting the event loop run during a long search."""
        return await cooperative.run(self.prioritize_columns, pod, node_names)

    def prioritize_columns(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> tuple[Sequence[str], list[int]]:
        """``prioritize`` as two columns, the nodes (as given) and their scores: what the HTTP
        answer is written from, without a pair per node. With holds on, the first of equally best
        nodes is made the only best one and the pod's devices there are held (``holds.py``)."""
        if not self.backend.synced:
            raise NotSynced(NOT_SYNCED)
        pod = self.cluster.pod(pod)
        self.holds.release(pod_uid(pod))
        claims = self.cluster.claims(pod)
        if not claims.all:
            return node_names, [0] * len(node_names)
        policy = self.policy_for(pod)
        candidates = self.verdicts.candidates(node_names)
        verdicts = self.verdicts.verdicts(claims, candidates)
        attribute = policy.topology_attribute if policy.weights.get(TOPOLOGY) else None
        codes = self.verdicts.score_codes(verdicts, candidates, attribute)
        values = verdicts.values
        in_use = {code: values[code] for code in set(codes) if code is not None}
        by_value = scores_by_value(in_use.values(), policy)
        # node -> code -> score, through C-level maps (None: the node does not fit)
        score_by_code: dict[int | None, int] = {code: by_value[value] for code, value in in_use.items()}
        score_by_code[None] = 0
        scores = list(map(score_by_code.__getitem__, codes))
        if self.holds.enabled and claims.to_allocate and scores:
            best = one_best(scores, codes)
            if best is not None and self._may_hold(claims, candidates.names[best]):
                node = candidates.names[best]
                self.holds.hold(claims, node, None if node in verdicts.stale else verdicts.by_node.get(node))
        # a tuple: the list is the service's own canonical one (``VerdictCache.candidates``)
        return tuple(candidates.names), scores

    def policy_for(self, pod: Mapping[str, Any]) -> ScoringPolicy:
        """The pod's scoring policy: its annotation's, else the service's."""
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        text = annotations.get(self.scoring_annotation)
        if not text:
            return self.scoring
        try:
            return ScoringPolicy.parse(str(text))
        except ValueError as exc:
            raise PodUnschedulable(f"annotation {self.scoring_annotation}: {exc}") from exc

    # --- preempt -------------------------------------------------------------------------------

    async def preempt(self, pod: Mapping[str, Any], victims: Mapping[str, NodeVictims]) -> PreemptOutcome:
        """The preempt verb (``preempt_verb.py``): kube-scheduler's victims per node, with the
        device holders that must also go, and without the nodes where no victims free the devices.
        A problem answers no node (no preemption this time) with ``error``."""
        if not self.backend.synced:
            return PreemptOutcome({}, error=NOT_SYNCED)
        try:
            pod = self.cluster.pod(pod)
            claims = self.cluster.claims(pod)
        except ExtenderError as exc:
            return PreemptOutcome({}, error=exc.reason)
        return PreemptOutcome(await self.preempt_verb.decide(claims, victims))

    # --- bind ----------------------------------------------------------------------------------

    async def bind(self, namespace: str, name: str, uid: str, node_name: str) -> None:
        """The bind verb (``binding.py``): raises the ExtenderError its ``Error`` answers."""
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

    async def stop(self) -> None:
        """Stop the service's background work (classic DRA publishes) before the backend stops."""
        await self.classic.stop()

    # --- debug and warm-up ---------------------------------------------------------------------

    def explain(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> dict[str, Any]:
        return self.views.explain(pod, node_names)

    async def explain_cooperatively(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> dict[str, Any]:
        """``explain``, letting the event loop run during a long search."""
        return await cooperative.run(self.views.explain, pod, node_names)

    async def why_cooperatively(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        """Why the pod does not fit (``why.py``) over every node the extender knows, letting the
        event loop run during a long search."""
        return await cooperative.run(why, self.views, pod, self.store.known_node_names())

    def debug_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.views.claim(namespace, name)

    def debug_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.views.pod(namespace, name)

    def debug_scheduling_context(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.views.scheduling_context(namespace, name)

    def debug_node(self, node_name: str) -> dict[str, Any]:
        return self.views.node(node_name)

    def warm_up(self) -> dict[str, int]:
        """Fill the caches a first filter would fill: every node's pools and every class selector
        on every slice, so the first pod after (re)start costs what the next ones cost. CEL errors
        are cached as values and surface when a pod reaches the device, as usual."""
        store = self.store
        snapshot = store.snapshot()
        names = store.known_node_names()
        for name in names:
            try:
                snapshot.node_view(store.node(name), self.features)
            except ValueError:
                continue  # a malformed node selector: reported when a pod tries the node
        evaluations = 0
        for device_class in store.classes.values():
            for expression in device_class.selectors:
                if expression is None:
                    continue
                for slice_ in store.slices.values():
                    try:
                        store.selectors.results(expression, slice_)
                    except CelCompileError:
                        break  # reported when a pod uses the class
                    evaluations += len(slice_.devices)
        return {"nodes": len(names), "evaluations": evaluations}
