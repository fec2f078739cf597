"""Preemption for a whole gang (spec/workloads-and-gangs.md §7.8; KEP-5710's all or nothing).

kube-scheduler 1.36 never preempts for a gang's devices: with workload-aware preemption off it
preempts for one member at a time (which the ``preempt`` verb refuses for gang members: evictions
for a gang that may still not fit), with it on it never calls an extender, and its dry runs do not
see devices either way. So when a gang's pass has proven that no joint plan exists
(``filter/gangs.py``), the member's filter comes here:

1. **Eligibility**: preemption on, no member with ``preemptionPolicy: Never``, no preemption of the
   group under way or standing, and not kube-scheduler's one-node try of a member's nominated node
   (the full request follows).
2. **Victim units**: running pods on the pass's nodes, of lower priority than the gang (the
   PodGroup's ``spec.priority``, else its lowest member's), that hold devices; a pod of a PodGroup
   whose disruption mode is all-or-nothing brings every running pod of that group, and such a
   unit is out if any of its pods is not of lower priority. Claims reserved for a PodGroup are
   never freed (``core.preemption.released``: a consumer that is not a pod stays).
3. **The choice**: one gang plan with every unit's claims freed; if there is none, nothing
   happens. Else the reprieve: units most important first (those a PodDisruptionBudget protects
   first) are spared while a plan still exists (``core.preemption.choose_units``), so the least
   important go, as kube-scheduler's would. The set left is irreducible. With more than
   ``REPRIEVE_ALL_UNITS`` units, those on the nodes of the first plan are tried alone first.
   Every check is a whole gang plan, paced on the event loop; the choices of one preemption that
   run past ``choice_seconds`` in all evict nobody (a set not reduced to the end may hold pods
   that need not go). Units a PodDisruptionBudget would refuse to evict, as the store shows the
   budgets, take no part: a refusal halfway would leave evictions for a gang that does not fit.
   Everything is decided on the pass the preemption began with; if another member's filter
   replaces it meanwhile, nothing more is evicted.
4. **The action**: one nomination per planned member (tagged with the group: they are one plan
   and never held against each other), every member's ``status.nominatedNodeName``, then the
   evictions through the Eviction API. One that fails anyway (a budget the store did not show
   yet, an API error) stops the rest; that unit is left out and the choice made again, the pods
   evicted counting as gone (at most ``MAX_REFUSALS`` times). Without a complete plan then, the
   nominations go.
5. **Waiting**: while the victims go, every member is answered ``waiting for preempted pods to
   release devices`` (as ``Error`` when the pass backs off: an idle kube-scheduler would
   otherwise retry the gang back to back); victims gone but claims not yet deallocated answer
   ``Error``; once the devices are free the next pass plans the gang onto them, as nothing else of
   lower priority took them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

import structlog

from extender.core.errors import ExtenderError
from extender.core.gangplan import GangPlan
from extender.core.model import ResourceClaim
from extender.core.podgroups import PodGroup
from extender.core.preemption import (
    VictimUnit,
    being_freed,
    by_importance,
    choose_units,
    protected_victims,
    released,
)
from extender.state import cooperative
from extender.state.cache.nominations import HARD_LIFETIME_FACTOR, Nomination, nomination_lifetime
from extender.state.cache.pods import deleting, finished, nominated_node, pod_group_name, pod_priority, pod_uid
from extender.state.filter.gangs import GangFilter, GangPass
from extender.state.filter.verdicts import FilterOutcome
from extender.state.preemption.devices import (
    MAX_REFUSALS,
    WAITING_FOR_VICTIMS,
    ClusterIndex,
    DevicePreemption,
    holding_pods,
)

__all__ = ["GANG_CHOICE_SECONDS", "MAX_GANG_UNITS", "REPRIEVE_ALL_UNITS", "GangPreemption"]

log = structlog.get_logger()

#: How long one preemption's choices may take in all (each check is a whole gang plan, paced on
#: the event loop); well inside kube-scheduler's default extender ``httpTimeout`` (5 s).
GANG_CHOICE_SECONDS = 2.0
#: Most victim units a choice looks at (the least important ones are kept).
MAX_GANG_UNITS = 64
#: Up to this many units the reprieve looks at all of them (the least important go, wherever
#: they run); with more it starts from those near one plan (``GangPreemption._choose``).
REPRIEVE_ALL_UNITS = 16


class _OutOfTime(Exception):
    """The choice ran past its time before its set was irreducible."""


class GangPreemption:
    """See the module docstring."""

    def __init__(
        self,
        preemption: DevicePreemption,
        gang_filter: GangFilter,
        *,
        choice_seconds: float = GANG_CHOICE_SECONDS,
        max_units: int = MAX_GANG_UNITS,
        reprieve_all: int = REPRIEVE_ALL_UNITS,
    ) -> None:
        self.preemption = preemption
        self.gang_filter = gang_filter
        self.cluster = preemption.cluster
        self.store = preemption.store
        self.backend = preemption.backend
        self.nominations = preemption.nominations
        self.choice_seconds = choice_seconds
        self.max_units = max_units
        self.reprieve_all = reprieve_all
        self._running: set[str] = set()

    async def consider(
        self, pod: Mapping[str, Any], node_names: Sequence[str], outcome: FilterOutcome
    ) -> FilterOutcome:
        """The answer for a gang member whose pass found no plan (``outcome``): wait for the
        gang's preemption, start one, or ``outcome`` as it is."""
        if not self.preemption.enabled or outcome.node_names:
            return outcome
        group = self.gang_filter.gangs.group_of(pod)
        open_pass = self.gang_filter.passes.get(group.key) if group is not None else None
        if group is None or open_pass is None or open_pass.plan is not None or open_pass.outcome != "infeasible":
            return outcome  # no pass, a plan, a search cut short (it may fit), or a claim being freed
        one_node_try = len(node_names) == 1 and nominated_node(pod) == node_names[0]
        self.nominations.expire(self.store.pods)
        standing = self.nominations.of_group(group.key)
        if standing:
            return self._waiting(group, standing, outcome, node_names, one_node_try)
        if one_node_try or group.key in self._running or self._refuses(pod, open_pass.keys.values()):
            return outcome
        self._running.add(group.key)
        try:
            return await self._preempt(group, open_pass, node_names, outcome)
        finally:
            self._running.discard(group.key)

    def _refuses(self, pod: Mapping[str, Any], member_keys: Iterable[str]) -> bool:
        """Whether a member says ``preemptionPolicy: Never`` (the gang preempts as one)."""
        pods = [pod, *(p for key in member_keys if (p := self.store.pods.get(key)) is not None)]
        return any((p.get("spec") or {}).get("preemptionPolicy") == "Never" for p in pods)

    def _waiting(
        self,
        group: PodGroup,
        standing: Sequence[Nomination],
        outcome: FilterOutcome,
        node_names: Sequence[str],
        one_node_try: bool,
    ) -> FilterOutcome:
        """The answer while the gang's preemption is under way."""
        present = {pod_uid(p) for p in self.store.pods.values()}
        victims = {v.uid: v for n in standing for v in n.victims}
        left = [v for uid, v in victims.items() if uid in present]
        if left:
            text = f"{WAITING_FOR_VICTIMS} for gang {group.key} ({len(left)} of them still there)"
            if outcome.error:
                return FilterOutcome([], error=text)  # the pass backs off: so does the wait
            return FilterOutcome([], failed=dict.fromkeys(node_names, text), unresolvable=dict(outcome.unresolvable))
        freed = {key for n in standing for key in n.freed}
        holding = holding_pods(self.store.pods.values())
        if any(being_freed(self.store.claims.get(key), holding) for key in freed):
            return FilterOutcome(
                [], error=f"waiting for devices of preempted pods to be deallocated for gang {group.key}"
            )
        if one_node_try:
            return outcome  # the full request follows
        open_pass = self.gang_filter.passes.get(group.key)
        if open_pass is not None and self.gang_filter.plan_released(group, open_pass, ()) is not None:
            # the pass was planned before the devices came free: the next one plans with them
            self.gang_filter.end_pass(group.key)
            text = f"gang {group.key}: the devices of preempted pods are free; the next pass places the gang"
            return FilterOutcome([], failed=dict.fromkeys(node_names, text), unresolvable=dict(outcome.unresolvable))
        # the devices are free and the gang still has no plan: the nominations are stale
        for nomination in standing:
            self.nominations.drop(nomination.pod_uid)
        return outcome

    async def _preempt(
        self, group: PodGroup, open_pass: GangPass, node_names: Sequence[str], outcome: FilterOutcome
    ) -> FilterOutcome:
        """Choose, evict, and choose again without a unit whose eviction was refused; pods evicted
        by an earlier round count as gone. All rounds share one deadline, and everything is
        decided on ``open_pass``: if another member's filter replaces or ends it meanwhile, this
        preemption stops (evicting nobody more)."""
        stats = self.preemption.stats
        excluded: set[str] = set()
        evicted: list[Any] = []
        deadline = self.cluster.clock() + self.choice_seconds
        cut = False
        claims_before: dict[str, ResourceClaim] = {}
        for _ in range(MAX_REFUSALS + 1):
            view = ClusterIndex(self.store.pods.values(), self.store, removed={v.uid for v in evicted})
            try:
                choice = await cooperative.run(self._choose, group, open_pass, view, excluded, deadline)
            except _OutOfTime:
                log.info("preemption.gang_choice_cut", group=group.key, seconds=self.choice_seconds)
                stats.count("budget")
                choice, cut = None, True
            if self.gang_filter.passes.get(group.key) is not open_pass:
                log.info("preemption.gang_pass_replaced", group=group.key)
                choice = None  # a newer pass answers for the gang now: nothing more is evicted here
            if choice is None:
                break
            units, plan, priority = choice
            if not units:  # the claims already on their way back make the plan
                if evicted:  # the pods evicted so far are enough: hold what they free, and wait
                    self._nominate(group, open_pass, plan, priority, evicted, claims_before, view)
                    return await self._started(group, plan, node_names)
                return FilterOutcome(
                    [], error=f"waiting for devices of deleted pods to be deallocated for gang {group.key}"
                )
            try:
                await self.backend.ensure_leader()
            except ExtenderError as exc:
                return FilterOutcome([], error=f"preemption for gang {group.key} needed, but {exc.reason}")
            if self.gang_filter.passes.get(group.key) is not open_pass:
                break
            victims = by_importance(v for unit in units for v in unit.victims)
            # the victims' claims as they are before the evictions (a backend may deallocate at once)
            for key in {key for v in victims for key in v.claims} - set(claims_before):
                if (claim := self.store.claims.get(key)) is not None:
                    claims_before[key] = claim
            standing = self._nominate(group, open_pass, plan, priority, (*evicted, *victims), claims_before, view)
            done: list[Any] = []
            refused: str | None = None
            try:
                done, refused = await self._evict(group, priority, plan, units)
            finally:
                # as for one pod: wait only for the pods that went (or were gone already)
                evicted += done
                self._update(standing, evicted, claims_before, view)
            if refused is None:
                if not evicted:
                    self._drop(group)
                    return FilterOutcome([], error=f"preemption for gang {group.key}: no victim could be evicted")
                return await self._started(group, plan, node_names)
            stats.count("refused")
            gone = {v.uid for v in evicted}
            # a unit none of whose pods went is left out; one partly gone may still be chosen
            excluded.update(unit.key for unit in units if refused in unit.uids and not (unit.uids & gone))
        # no complete plan (any more): hold nothing for the gang. Pods evicted before a refusal
        # nobody foresaw are gone all the same; the next pass plans with what they freed.
        self._drop(group)
        if not evicted and not cut:
            stats.count("none")
        return outcome

    # --- the choice (synchronous, under ``cooperative.run``) -------------------------------------

    def _choose(
        self, group: PodGroup, open_pass: GangPass, view: ClusterIndex, excluded: Collection[str], deadline: float
    ) -> tuple[list[VictimUnit], GangPlan, int] | None:
        """The units to evict, the plan they make possible and the gang's priority (no units when
        the claims already on their way back make the plan); None when nothing helps.
        Units whose eviction a PodDisruptionBudget would refuse, as the store shows the budgets,
        are left out before anything is evicted (a refusal halfway would leave evictions for a
        gang that does not fit). Raises ``_OutOfTime``."""
        priority = self.gang_filter.priority(group, open_pass.claims.values())
        units = self._units(group, priority, [n.name for n in open_pass.nodes], view, excluded)
        budgets = list(self.store.budgets.values())
        if budgets:
            refused = protected_victims([v for u in units for v in u.victims], budgets, view.labels)
            # the budgets' allowances are spent most important first: what is left over is refused
            units = [u for u in units if not (u.uids & refused)] if refused else units
        search = _Search(self, group, open_pass, view, units, deadline)
        if view.gone_claims and search.fits(frozenset()):
            return [], search.plan(frozenset()), priority
        if not units or not search.fits(_uids(units)):
            return None
        start = units
        if len(units) > self.reprieve_all:
            # a check per unit: with many, start from those on the nodes of a plan that removes
            # everyone (most often enough), at the cost of sparing less important pods elsewhere
            plan_nodes = {p.node for p in search.plan(_uids(units)).placements}
            near = [u for u in units if u.nodes & plan_nodes]
            if near and len(near) < len(units) and search.fits(_uids(near)):
                start = near
        chosen = choose_units(search.fits, start)
        if chosen is None:
            return None  # the gang fits with nobody removed (the cluster changed): no preemption
        return chosen, search.plan(_uids(chosen)), priority

    def _units(
        self, group: PodGroup, priority: int, nodes: Sequence[str], view: ClusterIndex, excluded: Collection[str]
    ) -> list[VictimUnit]:
        """The victim units on ``nodes`` (module docstring, step 2), the least important
        ``max_units`` of them."""
        units: dict[str, VictimUnit] = {}
        blocked: set[str] = set()
        for node in nodes:
            for victim in view.victims_on(node, priority, self.store):
                pod = self.store.pods.get(victim.key)
                if pod is None:
                    continue
                name = pod_group_name(pod)
                if name and f"{victim.namespace}/{name}" == group.key:
                    continue  # a member of this gang (placed before, of lower priority)
                victim_group = self.store.pod_groups.get(f"{victim.namespace}/{name}") if name else None
                if victim_group is not None and victim_group.disruption_all:
                    if victim_group.key in blocked or f"podgroup:{victim_group.key}" in units:
                        continue
                    unit = self._group_unit(victim_group, priority, view)
                    if unit is None:
                        blocked.add(victim_group.key)
                        continue
                else:
                    unit = VictimUnit((victim,), frozenset((node,)))
                units[unit.key] = unit
        kept = sorted((u for key, u in units.items() if key not in excluded), key=VictimUnit.importance)
        return kept[-self.max_units :] if len(kept) > self.max_units else kept

    def _group_unit(self, victim_group: PodGroup, priority: int, view: ClusterIndex) -> VictimUnit | None:
        """Every running pod of an all-or-nothing PodGroup, or None when one of them is not below
        ``priority`` (the group cannot go whole)."""
        victims, nodes = [], set()
        for key in sorted(self.store.group_pods.get(victim_group.key, ())):
            pod = self.store.pods.get(key)
            node = (pod or {}).get("spec", {}).get("nodeName")
            if pod is None or not node or finished(pod) or deleting(pod) or pod_uid(pod) not in view.present:
                continue
            if pod_priority(pod) >= priority:
                return None
            victims.append(view.victim(pod, self.store))
            nodes.add(str(node))
        if not victims:
            return None
        return VictimUnit(tuple(by_importance(victims)), frozenset(nodes), victim_group.key)

    # --- the action ---------------------------------------------------------------------------

    def _nominate(
        self,
        group: PodGroup,
        open_pass: GangPass,
        plan: GangPlan,
        priority: int,
        victims: Sequence[Any],
        claims_before: Mapping[str, ResourceClaim],
        view: ClusterIndex,
    ) -> list[Nomination]:
        """One nomination per planned member (the PodGroup's claims with the first), recorded
        before the evictions so that what they free is held at once; any older ones of the group
        replaced. They wait for ``victims`` (``_update`` narrows them to the pods that went)."""
        self._drop(group)
        uid_of = {key: uid for uid, key in open_pass.keys.items()}
        lifetime = nomination_lifetime((v.grace_seconds for v in victims), self.preemption.nomination_seconds)
        now = self.nominations.clock()
        made = []
        for index, placement in enumerate(plan.placements):
            results = (*placement.results, *(plan.shared if index == 0 else ()))
            nomination = Nomination(
                pod_key=placement.member,
                pod_uid=uid_of[placement.member],
                priority=priority,
                node=placement.node,
                results=results,
                victims=tuple(victims),
                freed=frozenset(),
                expires=now + lifetime,
                seen=placement.member in self.store.pods,
                hard_expires=now + HARD_LIFETIME_FACTOR * lifetime,
                group=group.key,
            )
            self.nominations.add(nomination)
            made.append(nomination)
        self._update(made, victims, claims_before, view)
        return made

    @staticmethod
    def _update(
        standing: Sequence[Nomination],
        went: Sequence[Any],
        claims_before: Mapping[str, ResourceClaim],
        view: ClusterIndex,
    ) -> None:
        """The nominations wait for the pods in ``went`` and for the claims their going frees."""
        victims = tuple(by_importance({v.uid: v for v in went}.values()))
        keys = {key for v in victims for key in v.claims}
        freed = frozenset(released({v.uid for v in victims}, claims_before, view.owners, keys))
        for nomination in standing:
            nomination.victims, nomination.freed = victims, freed

    async def _evict(
        self, group: PodGroup, priority: int, plan: GangPlan, units: Sequence[VictimUnit]
    ) -> tuple[list[Any], str | None]:
        """Evict the units one by one; the pods evicted, and the UID of one whose eviction failed
        (then no further unit is begun). A PodGroup that goes whole is finished even when one of
        its pods fails (the others are tried all the same: half a group is what its disruption
        mode forbids); a single pod's failure stops at once."""
        where = "nodes " + ", ".join(sorted({p.node for p in plan.placements}))
        preemptor = f"pod group {group.key}"
        done: list[Any] = []
        failed: str | None = None
        for unit in units:
            if not unit.group:
                went, failed = await self.preemption.evict(preemptor, priority, where, unit.victims, stop_on_error=True)
                done += went
            else:
                for victim in unit.victims:
                    went, refused = await self.preemption.evict(
                        preemptor, priority, where, (victim,), stop_on_error=True
                    )
                    done += went
                    failed = failed or refused
            if failed is not None:
                return done, failed
        return done, None

    def _drop(self, group: PodGroup) -> None:
        for nomination in self.nominations.of_group(group.key):
            self.nominations.drop(nomination.pod_uid)

    async def _started(self, group: PodGroup, plan: GangPlan, node_names: Sequence[str]) -> FilterOutcome:
        """Events on the members, their ``nominatedNodeName`` (kube-scheduler keeps their CPU and
        memory on those nodes too), and the waiting answer."""
        standing = self.nominations.of_group(group.key)
        victims = {v.uid: v for n in standing for v in n.victims}
        self.preemption.stats.count("started")
        names = ", ".join(v.key for v in by_importance(victims.values()))
        for nomination in standing:
            namespace, _, name = nomination.pod_key.partition("/")
            self.backend.record_event(
                namespace,
                name,
                nomination.pod_uid,
                kind="Normal",
                reason="Preempting",
                message=f"Evicting {names} to free devices for gang {group.key}; this member on node {nomination.node}",
            )
            pod = self.store.pods.get(nomination.pod_key)
            if pod is not None and nominated_node(pod) == nomination.node:
                continue
            try:
                await self.backend.set_nominated_node(namespace, name, nomination.pod_uid, nomination.node)
            except ExtenderError as exc:
                log.info("preemption.nominate_failed", pod=nomination.pod_key, reason=exc.reason)
        log.info(
            "preemption.gang_started",
            group=group.key,
            members={n.pod_key: n.node for n in standing},
            victims=sorted(victims[uid].key for uid in victims),
            nodes=sorted({p.node for p in plan.placements}),
        )
        text = f"{WAITING_FOR_VICTIMS} for gang {group.key} ({len(victims)} being evicted)"
        return FilterOutcome([], failed=dict.fromkeys(node_names, text))


class _Search:
    """``fits`` for ``choose_units``: a gang plan with the removed pods' claims freed, each answer
    remembered (with its plan); raises ``_OutOfTime`` past the deadline."""

    def __init__(
        self,
        owner: GangPreemption,
        group: PodGroup,
        open_pass: GangPass,
        view: ClusterIndex,
        units: Sequence[VictimUnit],
        deadline: float,
    ) -> None:
        self.owner, self.group, self.open_pass, self.view, self.deadline = owner, group, open_pass, view, deadline
        self.clock: Callable[[], float] = owner.cluster.clock
        self.claims_of = {v.uid: v.claims for u in units for v in u.victims}
        self.found: dict[frozenset[str], GangPlan | None] = {}

    def fits(self, removed: frozenset[str]) -> bool:
        if removed not in self.found:
            if self.found and self.clock() >= self.deadline:
                raise _OutOfTime
            keys = {key for uid in removed for key in self.claims_of.get(uid, ())}
            store = self.owner.store
            freed = released(removed, store.claims, self.view.owners, keys) | self.view.gone_claims
            self.found[removed] = self.owner.gang_filter.plan_released(self.group, self.open_pass, freed)
        return self.found[removed] is not None

    def plan(self, removed: frozenset[str]) -> GangPlan:
        plan = self.found[removed]
        assert plan is not None
        return plan


def _uids(units: Iterable[VictimUnit]) -> frozenset[str]:
    return frozenset(uid for unit in units for uid in unit.uids)
