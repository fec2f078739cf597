"""Device-aware preemption, driven by the extender (spec/preemption.md §2.0, §2.4-§2.7).

kube-scheduler 1.36 never preempts for a pod whose only shortage is devices: its dry run uses
in-tree filters only, finds no victim, and never calls an extender's ``preempt`` verb (§2.0). So
when filter finds no node for a pod, ``DevicePreemption.consider`` does it here:

1. **Eligibility**: the switch is on, the pod has claims to allocate (structured ones: a driver's
   controller holds classic devices opaquely), its ``preemptionPolicy`` is not ``Never``, and no
   preemption of its own is under way (one at a time per preemptor).
2. **A pending one**: while the pod's nomination stands, its victims still running (or
   terminating) answer ``FailedNodes`` for the node, ``waiting for preempted pods to release
   devices``; victims gone but claims not yet deallocated answer ``Error`` (the scheduler's backoff
   retries: no event would wake the pod); free devices take the normal path.
3. **The choice** (``extender.core.preemption``): on each node filter failed as ``FailedNodes``
   (devices in use; never ``FailedAndUnresolvable``: no eviction fixes those), the running pods of
   lower priority that consume devices are the candidates; a what-if allocator run
   (``ObjectStore.in_use_without``) tells whether freeing a set's claims makes the pod fit
   (§2.4's release model); the greedy reprieve leaves an irreducible set; the nodes are ranked as
   kube-scheduler ranks them. Claims whose consumers are all gone already (the resourceclaim
   controller has not deallocated them yet) count as freed: if that alone makes a node fit, the
   answer is ``Error`` (wait), not an eviction.
4. **The action**: the plan is recorded as a *nomination* first — its allocation held for the
   preemptor on the node against every pod of equal or lower priority (``nominated_state``) —
   then each victim is evicted through the Eviction API (PodDisruptionBudgets enforced by the
   API server: a refusal (429) puts that pod out of the candidates and the choice is made again,
   at most ``MAX_REFUSALS`` times), an Event is recorded on each victim and on the preemptor, and
   the preemptor's ``status.nominatedNodeName`` is set, as kube-scheduler does.
5. **The end**: the nomination goes when the preemptor is bound, deleted or re-created, or after
   ``nomination_seconds``.

Nothing here runs for a pod some node fits; with no nomination standing, filter and bind pay one
empty-dict test.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from extender.core.allocator import Allocation
from extender.core.errors import EvictionRefused, ExtenderError, ObjectNotFound
from extender.core.model import AllocatedState, AllocationResult
from extender.core.preemption import (
    Plan,
    Victim,
    being_freed,
    better_plan,
    by_importance,
    choose_victims,
    protected_victims,
    released,
)
from extender.state.cache.claims import PodClaims
from extender.state.cache.cluster import ClusterView
from extender.state.cache.nominations import HARD_LIFETIME_FACTOR, Nomination, nomination_lifetime
from extender.state.cache.pods import (
    bound_node,
    deleting,
    finished,
    pod_identity,
    pod_labels,
    pod_priority,
    pod_uid,
    start_time,
)
from extender.state.filter.verdicts import FilterOutcome

__all__ = [
    "DEFAULT_NOMINATION_SECONDS",
    "MAX_REFUSALS",
    "WAITING_FOR_VICTIMS",
    "ClusterIndex",
    "DevicePreemption",
    "PreemptionStats",
    "holding_pods",
]

log = structlog.get_logger()

#: How long a nomination holds the freed devices for its preemptor: the default grace period of
#: the victims (30 s), the resourceclaim controller's deallocation, and the preemptor's backoff.
DEFAULT_NOMINATION_SECONDS = 120.0
#: Evictions refused by a PodDisruptionBudget before the pod waits for its next attempt.
MAX_REFUSALS = 3
#: Most nodes a choice looks at (kube-scheduler's dry run stops at 100 candidates too).
MAX_NODES = 100
WAITING_FOR_VICTIMS = "waiting for preempted pods to release devices"
#: How long one choice may look at more nodes once it has a plan (it runs on the event loop).
CHOICE_SECONDS = 0.25


@dataclass(slots=True)
class PreemptionStats:
    """Counters exported as metrics."""

    #: preemptions by outcome: started, refused (a PDB), none (no set of victims helps)
    preemptions: dict[str, int] = field(default_factory=dict)
    victims: int = 0

    def count(self, outcome: str) -> None:
        self.preemptions[outcome] = self.preemptions.get(outcome, 0) + 1


class DevicePreemption:
    """See the module docstring."""

    def __init__(
        self,
        cluster: ClusterView,
        *,
        enabled: bool = True,
        nomination_seconds: float = DEFAULT_NOMINATION_SECONDS,
        max_nodes: int = MAX_NODES,
    ) -> None:
        self.cluster = cluster
        self.backend = cluster.backend
        self.store = cluster.store
        self.enabled = enabled
        self.nomination_seconds = nomination_seconds
        self.max_nodes = max_nodes
        self.nominations = cluster.nominations
        self.stats = PreemptionStats()
        self._running: set[str] = set()

    # --- nominations in every pod's filter -----------------------------------------------------------

    def respect_nominations(self, claims: PodClaims, outcome: FilterOutcome) -> FilterOutcome:
        """Nodes that pass only by taking devices nominated for a pod of equal or higher priority
        fail (``FailedNodes``: the nomination ends)."""
        if not self.nominations or not claims.to_allocate:
            return outcome
        self.nominations.expire(self.store.pods)
        against = self.nominations.held_against(claims.pod_uid, claims.priority)
        nodes = sorted({n.node for n in against} & set(outcome.node_names))
        if not nodes:
            return outcome
        # one state for all of them: every device held against the pod counted
        state = self.nominations.hold(self.store.in_use_without(()), claims.pod_uid, claims.priority)
        refused: dict[str, str] = {}
        for node in nodes:
            if not self._fits(claims, node, state):
                holders = ", ".join(n.pod_key for n in against if n.node == node)
                refused[node] = f"devices on the node are nominated for preemptor {holders}"
        if not refused:
            return outcome
        return FilterOutcome(
            [n for n in outcome.node_names if n not in refused],
            failed={**outcome.failed, **refused},
            unresolvable=dict(outcome.unresolvable),
        )

    # --- the preemptor ------------------------------------------------------------------------------

    async def consider(
        self,
        pod: Mapping[str, Any],
        claims: PodClaims,
        outcome: FilterOutcome,
        node_names: Sequence[str],
        *,
        fits_elsewhere: Callable[[], bool] = lambda: False,
    ) -> FilterOutcome:
        """No node of ``node_names`` fits the pod (``outcome``): wait for a preemption of its own,
        or start one. ``fits_elsewhere`` says whether some node the request did not name fits
        (asked only for a request of one node: kube-scheduler tries a nominated or hint node
        alone, then all of them)."""
        uid = pod_uid(pod)
        spec = pod.get("spec") or {}
        if (
            not self.enabled
            or not claims.to_allocate
            or claims.classic
            or spec.get("preemptionPolicy") == "Never"
            or spec.get("nodeName")
            or uid in self._running
        ):
            return outcome
        self.nominations.expire(self.store.pods)
        standing = self.nominations.by_uid.get(uid)
        if standing is not None:
            return self._waiting(standing, claims, outcome, node_names)
        if not outcome.failed or self._nothing_to_take(claims, outcome.failed):
            return outcome  # no node lacks only devices, or no pod below this one holds any there
        if len(node_names) == 1 and fits_elsewhere():
            return outcome  # the full pass that follows finds that node: nobody needs to go
        self._running.add(uid)
        try:
            return await self._preempt(pod, claims, outcome)
        finally:
            self._running.discard(uid)

    def _nothing_to_take(self, claims: PodClaims, failed: Collection[str]) -> bool:
        """Whether no running pod below this one's priority is bound to a failed node and no claim
        waits to be freed for pods already gone: then no choice needs to be made (one pass over
        the pods and the claims, no allocator run)."""
        present = {pod_uid(p) for p in self.store.pods.values()}
        for claim in self.store.claims.values():
            consumers = claim.reserved_for
            if claim.allocation is not None and consumers and all(r.uid not in present for r in consumers):
                return False  # devices on their way back: the choice says whether to wait for them
        for other in self.store.pods.values():
            spec = other.get("spec") or {}
            if (
                spec.get("nodeName") in failed
                and pod_priority(other) < claims.priority
                and (spec.get("resourceClaims") or ())
                and not finished(other)
            ):
                return False
        return True

    def _waiting(
        self, nomination: Nomination, claims: PodClaims, outcome: FilterOutcome, node_names: Sequence[str]
    ) -> FilterOutcome:
        """The answer while the pod's own preemption is under way."""
        present = {pod_uid(p) for p in self.store.pods.values()}
        left = [v for v in nomination.victims if v.uid in present]
        if left:
            failed = {**outcome.failed, nomination.node: f"{WAITING_FOR_VICTIMS} ({len(left)} of them still there)"}
            return FilterOutcome([], failed=failed, unresolvable=dict(outcome.unresolvable))
        holding = holding_pods(self.store.pods.values())
        if any(being_freed(self.store.claims.get(key), holding) for key in nomination.freed):
            return FilterOutcome(
                [], error=f"waiting for devices of preempted pods on node {nomination.node} to be deallocated"
            )
        if nomination.node not in node_names:
            return outcome  # not offered the nominated node this time: the nomination still stands
        if self._fits(claims, nomination.node, self._state(claims, nomination.node, ())) is None:
            # the devices are free and the pod does not fit there after all: the plan is stale
            self.nominations.drop(nomination.pod_uid)
        return outcome

    async def _preempt(self, pod: Mapping[str, Any], claims: PodClaims, outcome: FilterOutcome) -> FilterOutcome:
        """Choose, evict, and choose again without a pod a PodDisruptionBudget protects; pods
        evicted by an earlier round count as gone, and the nomination covers them all."""
        namespace, name, uid = pod_identity(pod)
        excluded: set[str] = set()
        evicted: list[Victim] = []
        for _ in range(MAX_REFUSALS + 1):
            view = ClusterIndex(self.store.pods.values(), self.store, removed={v.uid for v in evicted})
            choice = self._choose(claims, list(outcome.failed), view, excluded)
            if isinstance(choice, str):
                if evicted:
                    break  # what was evicted is enough: wait for it
                return FilterOutcome([], error=choice)  # devices already being freed will do: wait
            if choice is None:
                break
            plan, results, _ = choice
            try:
                await self.backend.ensure_leader()
            except ExtenderError as exc:
                return FilterOutcome([], error=f"preemption on node {plan.node} needed, but {exc.reason}")
            lifetime = self._lifetime((*evicted, *plan.victims))
            nomination = Nomination(
                pod_key=f"{namespace}/{name}",
                pod_uid=uid,
                priority=claims.priority,
                node=plan.node,
                results=results,
                victims=tuple(by_importance({v.uid: v for v in (*evicted, *plan.victims)}.values())),
                freed=frozenset(),
                expires=self.nominations.clock() + lifetime,
                seen=f"{namespace}/{name}" in self.store.pods,
                hard_expires=self.nominations.clock() + HARD_LIFETIME_FACTOR * lifetime,
            )
            self.nominations.add(nomination)  # before the evictions: freed devices are held at once
            done: list[Victim] = []
            refused: str | None = None
            try:
                done, refused = await self.evict(
                    f"pod {namespace}/{name}", claims.priority, f"node {plan.node}", plan.victims
                )
            finally:
                # The nomination waits only for pods that were evicted (or were gone already): one
                # whose eviction failed is not coming out, and waiting for it would never end.
                evicted += done
                went = tuple(by_importance({v.uid: v for v in evicted}.values()))
                nomination.victims = went
                nomination.freed = frozenset(
                    released({v.uid for v in went}, self.store.claims, view.owners, _keys(went))
                )
            if refused is None:
                if not evicted:
                    self.nominations.drop(uid)  # nothing went: hold nothing for nobody
                    return FilterOutcome([], error=f"preemption on node {plan.node}: no victim could be evicted")
                return await self._started(pod, claims, plan.node, nomination.victims, outcome)
            self.stats.count("refused")
            excluded.add(refused)
        if evicted:
            # A refusal after some evictions, and no complete plan since (budgets are not watched:
            # an eviction cannot be taken back). The nomination keeps what the evicted pods free
            # and waits only for them; it ends with its lifetime, and the next choice counts them.
            standing = self.nominations.by_uid.get(uid)
            if standing is not None:
                return await self._started(pod, claims, standing.node, standing.victims, outcome)
        self.nominations.drop(uid)
        self.stats.count("none")
        return outcome

    async def _started(
        self, pod: Mapping[str, Any], claims: PodClaims, node: str, victims: tuple[Victim, ...], outcome: FilterOutcome
    ) -> FilterOutcome:
        namespace, name, uid = pod_identity(pod)
        self.stats.count("started")
        self.backend.record_event(
            namespace,
            name,
            uid,
            kind="Normal",
            reason="Preempting",
            message=f"Evicting {', '.join(v.key for v in victims)} on node {node} to free devices",
        )
        await self._nominate(pod, node)
        log.info("preemption.started", pod=f"{namespace}/{name}", node=node, victims=[v.key for v in victims])
        failed = {**outcome.failed, node: f"{WAITING_FOR_VICTIMS} ({len(victims)} being evicted)"}
        return FilterOutcome([], failed=failed, unresolvable=dict(outcome.unresolvable))

    def _lifetime(self, victims: Iterable[Victim]) -> float:
        """How long a nomination stands: the victims' longest grace period and the margin, at
        least ``nomination_seconds`` (and never while a victim is still there: ``Nominations``)."""
        return nomination_lifetime((v.grace_seconds for v in victims), self.nomination_seconds)

    def _choose(
        self, claims: PodClaims, nodes: Sequence[str], view: ClusterIndex, excluded: Collection[str]
    ) -> tuple[Plan, tuple[AllocationResult, ...], set[str]] | str | None:
        """The best plan over ``nodes`` (with its allocation and the claims it frees), a text to
        wait with when claims already free will do, or None."""
        plans: list[tuple[Plan, tuple[AllocationResult, ...], set[str]]] = []
        clock = self.cluster.clock
        deadline = clock() + CHOICE_SECONDS
        for looked, node in enumerate(list(nodes)[: self.max_nodes]):
            if plans and clock() > deadline:
                log.info("preemption.choice_cut", looked=looked, nodes=len(nodes))
                break  # the best plan so far: the event loop has waited long enough
            if not view.by_node.get(node) and not view.gone_claims:
                continue  # nobody there to take devices from, nothing on its way to being freed
            found = self._plan_on(claims, node, view, excluded)
            if isinstance(found, str):
                return found
            if found is not None:
                plans.append(found)
        best = better_plan(plan for plan, _, _ in plans)
        if best is None:
            return None
        return next(p for p in plans if p[0] is best)

    def _plan_on(
        self, claims: PodClaims, node: str, view: ClusterIndex, excluded: Collection[str]
    ) -> tuple[Plan, tuple[AllocationResult, ...], set[str]] | str | None:
        """The victims on one node, with the allocation and the freed claims; a text when the
        claims of pods already gone will do; None when no set of victims helps."""
        on_node = claims.on_node(self.store.node(node))  # extended resources a device plugin serves
        if on_node is None:
            return None
        claims = on_node
        candidates = [v for v in view.victims_on(node, claims.priority, self.store) if v.uid not in excluded]
        if view.gone_claims and self._fits(claims, node, self._state(claims, node, view.gone_claims)):
            return f"waiting for devices of deleted pods on node {node} to be deallocated"
        if not candidates:
            return None
        searched = _Search(self, claims, node, candidates, view)
        budgets = list(self.store.budgets.values())
        protected = protected_victims(candidates, budgets, view.labels) if budgets else set()
        victims = choose_victims(searched.fits, candidates, protected=protected)
        if victims is None:
            return None
        answer, freed = searched.found[frozenset(v.uid for v in victims)]
        violations = len(protected_victims(victims, budgets, view.labels)) if budgets else 0
        return Plan(node, tuple(victims), violations), answer.results, freed

    def victims_for(self, claims: PodClaims, nodes: Sequence[str]) -> dict[str, list[Victim] | str | None]:
        """Explain's view, changing nothing: per node, the pods that would have to go for the pod to
        fit there (most important first), a text when no one needs to go (devices being freed), or
        None when no set of lower-priority pods frees enough."""
        view = ClusterIndex(self.store.pods.values(), self.store)
        out: dict[str, list[Victim] | str | None] = {}
        for node in list(nodes)[: self.max_nodes]:
            found = self._plan_on(claims, node, view, ())
            out[node] = found if isinstance(found, str) or found is None else list(found[0].victims)
        return out

    def _state(self, claims: PodClaims, node: str, freed: Collection[str]) -> AllocatedState:
        """What is in use for this pod once ``freed`` hold nothing, the devices nominated for
        others of equal or higher priority counted (``Nominations.hold``)."""
        return self.nominations.hold(self.store.in_use_without(freed), claims.pod_uid, claims.priority)

    def _fits(self, claims: PodClaims, node: str, state: AllocatedState) -> Allocation | None:
        allocator = self.cluster.allocator(claims, refresh=False, allocated=state)
        try:
            answer = allocator.answer(self.store.node(node))
        except ExtenderError:
            return None  # a search cut short counts as "does not fit"
        return answer if isinstance(answer, Allocation) else None

    async def evict(
        self, preemptor: str, priority: int, where: str, victims: Sequence[Victim], *, stop_on_error: bool = False
    ) -> tuple[list[Victim], str | None]:
        """Evict ``victims`` for ``preemptor`` ("pod ns/name", "pod group ns/name") of
        ``priority``, the ones a PodDisruptionBudget is likeliest to protect first (those with a
        budget-matching label are unknown here: the most important first, as the reprieve kept
        them longest); the victims evicted, and the UID of one refused. With ``stop_on_error`` an
        eviction that fails otherwise stops the rest too (its UID is returned as refused): a
        gang's victims go all together or the choice is made again."""
        done: list[Victim] = []
        # a budget's refusal, if it comes, comes before anything irreversible
        budgets = list(self.store.budgets.values())
        labels = {pod_uid(p): pod_labels(p) for p in self.store.pods.values()} if budgets else {}
        risky = protected_victims(victims, budgets, labels) if budgets else set()
        ordered = [v for v in victims if v.uid in risky] + [v for v in victims if v.uid not in risky]
        for victim in ordered:
            try:
                await self.backend.evict_pod(victim.namespace, victim.name, victim.uid)
            except EvictionRefused as exc:
                log.info("preemption.refused", preemptor=preemptor, victim=victim.key, reason=exc.reason)
                return done, victim.uid
            except ObjectNotFound:
                done.append(victim)  # gone already: its devices are on their way
                continue
            except ExtenderError as exc:
                log.warning("preemption.eviction_failed", victim=victim.key, reason=exc.reason)
                if stop_on_error:
                    return done, victim.uid
                continue
            done.append(victim)
            self.stats.victims += 1
            self.backend.record_event(
                victim.namespace,
                victim.name,
                victim.uid,
                kind="Normal",
                reason="Preempted",
                message=f"Preempted by {preemptor} (priority {priority}) for its devices on {where}",
            )
        return done, None

    async def _nominate(self, pod: Mapping[str, Any], node: str) -> None:
        namespace, name, uid = pod_identity(pod)
        try:
            await self.backend.set_nominated_node(namespace, name, uid, node)
        except ExtenderError as exc:
            log.info("preemption.nominate_failed", pod=f"{namespace}/{name}", reason=exc.reason)


class _Search:
    """``fits`` for ``choose_victims`` on one node, remembering each fitting allocation."""

    def __init__(
        self, owner: DevicePreemption, claims: PodClaims, node: str, candidates: list[Victim], view: ClusterIndex
    ) -> None:
        self.owner, self.claims, self.node, self.view = owner, claims, node, view
        self.claims_of = {v.uid: v.claims for v in candidates}
        self.found: dict[frozenset[str], tuple[Allocation, set[str]]] = {}

    def fits(self, removed: frozenset[str]) -> bool:
        keys = {key for uid in removed for key in self.claims_of.get(uid, ())}
        store = self.owner.store
        freed = released(removed, store.claims, self.view.owners, keys) | self.view.gone_claims
        answer = self.owner._fits(self.claims, self.node, self.owner._state(self.claims, self.node, freed))
        if answer is not None:
            self.found[removed] = (answer, freed)
        return answer is not None


class ClusterIndex:
    """One pass over pods and claims for a choice: running pods by node, claims by consumer,
    owners of unreserved claims, and claims whose consumers are all gone."""

    def __init__(self, pods: Iterable[Mapping[str, Any]], store: Any, *, removed: Collection[str] = ()) -> None:
        """``removed``: UIDs of pods evicted already (the store may show them a moment longer);
        they, the terminating pods and the done ones count as gone: their claims are on their
        way to being freed (spec §2.6's T(N))."""
        self.by_node: dict[str, list[Mapping[str, Any]]] = {}
        #: pod UID -> labels (PodDisruptionBudgets select by them)
        self.labels: dict[str, Mapping[str, str]] = {}
        #: UIDs of the pods that count as running (not removed, not going)
        self.present: set[str] = set()
        present = self.present
        for pod in pods:
            uid = pod_uid(pod)
            self.labels[uid] = pod_labels(pod)
            going = deleting(pod) or finished(pod)
            if uid in removed or going:
                continue
            present.add(uid)
            node = bound_node(pod)
            if node and not finished(pod):
                self.by_node.setdefault(node, []).append(pod)
        self.claims_of: dict[str, list[str]] = {}
        self.owners: dict[str, str] = {}
        self.gone_claims: set[str] = set()
        for key, claim in store.claims.items():
            if claim.allocation is None:
                continue
            for ref in claim.reserved_for:
                self.claims_of.setdefault(ref.uid, []).append(key)
            if claim.reserved_for and being_freed(claim, present):
                self.gone_claims.add(key)
            if not claim.reserved_for:
                for ref in (store.raw_claims.get(key) or {}).get("metadata", {}).get("ownerReferences") or ():
                    if ref.get("controller") and ref.get("kind") == "Pod":
                        self.owners[key] = str(ref.get("uid"))

    def victims_on(self, node: str, priority: int, store: Any) -> list[Victim]:
        """Running pods on ``node`` below ``priority`` that consume non-admin devices."""
        victims = []
        for pod in self.by_node.get(node, ()):
            if pod_priority(pod) >= priority:
                continue
            victim = self.victim(pod, store)
            if victim.claims:
                victims.append(victim)
        return by_importance(victims)

    def victim(self, pod: Mapping[str, Any], store: Any) -> Victim:
        """The pod as a victim, with the claims it consumes that hold non-admin devices."""
        namespace, name, uid = pod_identity(pod)
        keys = tuple(
            k
            for k in self.claims_of.get(uid, ())
            if any(not r.admin_access for r in store.claims[k].allocation.devices)
        )
        grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        grace_seconds = float(grace) if isinstance(grace, int) and not isinstance(grace, bool) else 30.0
        return Victim(namespace, name, uid, pod_priority(pod), start_time(pod), keys, grace_seconds)


def holding_pods(pods: Iterable[Mapping[str, Any]]) -> set[str]:
    """The UIDs of the pods that keep their claims: neither deleted nor finished (the others' claims
    are on their way back, as ``ClusterIndex`` counts them)."""
    return {pod_uid(pod) for pod in pods if not deleting(pod) and not finished(pod)}


def _keys(victims: Iterable[Victim]) -> set[str]:
    return {key for victim in victims for key in victim.claims}
