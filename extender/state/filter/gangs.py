"""The filter verb for a gang's members: one joint plan per pass, each member pinned to its node
(spec/workloads-and-gangs.md §7.3-§7.4).

kube-scheduler 1.36 runs a gang as a *pass*: every waiting member filtered in turn (its filter
answer decides that member alone), each assumed, then the binds of all of them. Nothing in a
request says which pass it belongs to, so:

- a **pass starts** at a member's filter when no pass of its group is open, or when that member was
  answered in the open one already (the next pass, a topology placement, a preemption rerun);
- at the start the whole gang is **planned** (``core/gangplan.py``) over the nodes the member was
  offered, its devices and every other waiting member's, and the pass's previous holds are
  replaced by the plan's: nothing else takes those devices until the binds (``gang_hold_seconds``
  at most);
- each member is **pinned**: its answer names its planned node only (with one node kube-scheduler
  skips prioritize and the in-tree scores, so they cannot pull a member off the plan) and fails the
  other nodes with ``gang <ns/pg>: member planned on <node>``. A member the plan leaves out fails
  every node (``gang <ns/pg> complete without this member``); where no plan exists every member
  fails with why (``gang <ns/pg>: 2 of 3 members fit (minCount 3)``) and nothing is held;
- a member whose planned node is not among the nodes it is offered (kube-scheduler's own filters
  removed it, e.g. CPU taken by members assumed before it) gets the gang planned again, the
  members answered so far kept on their nodes and this one restricted to its offered nodes.

An infeasible answer is remembered for as long as nothing it depends on changes (the members, the
nodes offered, the store, the ledger), so kube-scheduler's back-to-back retries of a gang that does
not fit (~750 passes a second on an idle scheduler, spec §3.4) cost a lookup each. They would still
keep kube-scheduler busy: a rejected member goes to the backoff queue, which an idle scheduler pops
at once. After ``retry_backoff`` such unchanged passes in a row, the members are answered ``Error``
(with the same reason) instead: kube-scheduler then aborts the pass and puts every member into its
error backoff (1 s, doubling to 10 s), at the cost of ``SchedulerError`` in the conditions. Any
change the answer depends on ends it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from extender.core.budget import DEFAULT_SLICE_SECONDS
from extender.core.errors import ExtenderError
from extender.core.gangplan import DEFAULT_MAX_CHECKS, GangInfeasible, GangMember, GangPlan, GangPlanner
from extender.core.model import AllocatedState, NodeInfo, ResourceClaim
from extender.core.podgroups import PodGroup
from extender.state.cache.claims import PodClaims
from extender.state.cache.cluster import ClusterView
from extender.state.cache.pods import bound_node, pod_group_name, pod_key, pod_uid
from extender.state.cooperative import Pacer
from extender.state.filter.holds import record
from extender.state.filter.verdicts import FilterOutcome, VerdictCache
from extender.state.gangs import GangMembers, Gangs
from extender.state.stats import ServiceStats

__all__ = ["DEFAULT_GANG_HOLD_SECONDS", "DEFAULT_GANG_RETRY_BACKOFF", "GangFilter", "GangPass"]

#: Unchanged infeasible passes in a row after which the members are answered ``Error`` (module
#: docstring); 0: never.
DEFAULT_GANG_RETRY_BACKOFF = 3

#: How long a plan's devices stay held for members whose binds have not come: a pass lasts
#: members x (answer latency + kube-scheduler's own work), ~40 ms for 20 members (spec E5g); this
#: only bounds what a pass that never binds keeps.
DEFAULT_GANG_HOLD_SECONDS = 60.0

#: How long after a pass began its plan's domain may refuse the other topology placements of
#: kube-scheduler's cycle (``GangFilter._placed_elsewhere``): one cycle tries them back to back.
PLACEMENTS_SECONDS = 10.0

#: The kinds a plan's inputs come from: a remembered infeasible answer holds while none of them
#: changed (pods' statuses, which kube-scheduler writes after every failed pass, do not count).
_PLAN_INPUT_KINDS = ("ResourceClaim", "ResourceSlice", "DeviceClass", "Node", "DeviceTaintRule")

log = structlog.get_logger()


@dataclass(slots=True)
class GangPass:
    """One pass of a group: its plan (or why none), what each member was answered, and the claims
    the plan's holds were recorded for."""

    group: str
    started_at: float
    plan: GangPlan | None
    #: The infeasible reason ("" with a plan).
    reason: str = ""
    #: Without a plan: the planner's outcome, "infeasible" (proven) or "budget" (a search cut
    #: short); "" for a remembered answer's pass (it keeps the outcome it remembers) or a release.
    outcome: str = ""
    #: Answer ``Error`` (with ``reason``) rather than failed nodes: kube-scheduler's error backoff.
    back_off: bool = False
    #: The topology domain the plan is in (the group's key's value; None without a key).
    domain: str | None = None
    #: Member UID -> the node it was answered (None: answered with no node).
    answered: dict[str, str | None] = field(default_factory=dict)
    #: Member UID -> its resolved claims (the holds' and the re-plans' input).
    claims: dict[str, PodClaims] = field(default_factory=dict)
    #: Member UID -> pod key, for the plan's placements (which name members by key).
    keys: dict[str, str] = field(default_factory=dict)
    plans: int = 1
    #: Tells the group's passes apart (the bind barrier's rounds: one per pass).
    serial: int = 0
    #: The nodes the pass plans over (the first member's offered nodes; a re-plan adds others').
    nodes: list[NodeInfo] = field(default_factory=list)
    #: Every waiting member's UID when the pass started, those that take no part included.
    expected: frozenset[str] = frozenset()
    #: Members whose answers the pass took over from the last one (``GangFilter._carried``): their
    #: next filter is their first of this pass, not a repeat.
    carried: set[str] = field(default_factory=set)

    def node_of(self, uid: str) -> str | None:
        if self.plan is None:
            return None
        return self.plan.node_of(self.keys.get(uid, ""))


@dataclass(slots=True)
class _Planned:
    plan: GangPlan | GangInfeasible
    members: list[tuple[str, PodClaims, GangMember]]
    #: The topology domain (the key's value) the plan is in; None without a topology key.
    domain: str | None = None
    #: Domains searched (1 without a topology key).
    tried: int = 1


class GangFilter:
    """See the module docstring."""

    def __init__(
        self,
        *,
        cluster: ClusterView,
        gangs: Gangs,
        verdicts: VerdictCache,
        stats: ServiceStats,
        hold_seconds: float = DEFAULT_GANG_HOLD_SECONDS,
        retry_backoff: int = DEFAULT_GANG_RETRY_BACKOFF,
        max_checks: int = DEFAULT_MAX_CHECKS,
        clock: Callable[[], float] = time.monotonic,
        pace: Callable[[], Callable[[], object]] | None = None,
    ) -> None:
        """``pace`` makes the planner's pace for one plan (default: let the event loop run every
        ``DEFAULT_SLICE_SECONDS``); tests change the cluster there, as others would meanwhile."""
        self.cluster = cluster
        self.store = cluster.store
        self.gangs = gangs
        self.verdicts = verdicts
        self.stats = stats
        self.hold_seconds = hold_seconds
        self.retry_backoff = retry_backoff
        self.max_checks = max_checks
        self.clock = clock
        self._pace = pace if pace is not None else (lambda: Pacer(DEFAULT_SLICE_SECONDS).step)
        #: The open pass of each group, by ``namespace/name``.
        self.passes: dict[str, GangPass] = {}
        # group -> (inputs, reason) of its last infeasible answer, and how many passes in a row
        # have been answered from it
        # (inputs, reason, outcome, nodes in the order offered)
        self._infeasible: dict[str, tuple[tuple[object, ...], str, str, tuple[str, ...]]] = {}
        self._repeats: dict[str, int] = {}
        self._serial = 0
        #: Group -> its claims a filter decided to free, until the service has written it.
        self.releases: dict[str, list[ResourceClaim]] = {}

    # --- the verb --------------------------------------------------------------------------

    def filter(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> FilterOutcome | None:
        """The answer for a gang member, or None when the pod is not one this path plans (no
        gang, the gang complete already, claims it cannot plan): the ordinary filter answers."""
        if not self.cluster.backend.synced:
            return None
        group = self.gangs.group_of(pod)
        if group is None or not group.gang:
            return None
        pod = self.cluster.pod(pod)
        members = self._members(group, pod)
        if members.need == 0:
            return None
        uid = pod_uid(pod)
        open_pass = self.passes.get(group.key)
        elsewhere = self._placed_elsewhere(group, members, open_pass, uid, node_names)
        if elsewhere is not None:
            return elsewhere
        if (
            open_pass is None
            or (uid in open_pass.answered and uid not in open_pass.carried)
            or {pod_uid(p) for p in members.waiting} != open_pass.expected
            or self.clock() - open_pass.started_at >= self.hold_seconds
        ):
            open_pass = self._start(group, members, pod, node_names, self._carried(open_pass, uid))
            if open_pass is None:
                return None
        open_pass.carried.discard(uid)
        return self._answer(group, members, open_pass, pod, node_names)

    def _placed_elsewhere(
        self, group: PodGroup, members: GangMembers, open_pass: GangPass | None, uid: str, node_names: Sequence[str]
    ) -> FilterOutcome | None:
        """kube-scheduler's topology-aware passes (TopologyAwareWorkloadScheduling on) offer each
        domain of the group's key in turn, one placement after the other in one cycle, then bind
        the placement it scores best. Once the open pass has a plan in domain D and every member
        it placed was answered its planned node (the placement of D is feasible for
        kube-scheduler), a request whose nodes hold none of D is another placement of the same
        cycle: it is refused (``gang <ns/pg> placed in <key>=<D>``) without a new pass, so the
        plan's holds stay and the one placement left feasible is the plan's. None otherwise: no
        key, no plan, a planned member not answered its node (kube-scheduler's own filters kept
        it from D: D's placement failed, and the next pass may go elsewhere), another member set,
        a requester not of the pass, D offered, or the cycle long over
        (``PLACEMENTS_SECONDS``)."""
        key = group.topology_key
        if not key or open_pass is None or open_pass.plan is None or open_pass.domain is None:
            return None
        if self.clock() - open_pass.started_at >= min(self.hold_seconds, PLACEMENTS_SECONDS):
            return None
        if uid not in open_pass.claims or {pod_uid(p) for p in members.waiting} != open_pass.expected:
            return None
        if any(
            open_pass.answered.get(member) != node
            for member in open_pass.claims
            if (node := open_pass.node_of(member)) is not None
        ):
            return None
        if any(self.store.node(name).labels.get(key) == open_pass.domain for name in node_names):
            return None
        reason = f"gang {group.key} placed in {key}={open_pass.domain}"
        return FilterOutcome([], failed=dict.fromkeys(node_names, reason))

    def _carried(self, open_pass: GangPass | None, uid: str) -> dict[str, str | None]:
        """Nodes already answered that may belong to kube-scheduler's current pass when a new pass
        of ours starts at ``uid``: those given since ``uid`` was last answered (kube-scheduler
        filters each member once per pass, so they are in the pass ``uid`` is in now, or ended the
        last one). The new plan keeps them where it can (``_start``)."""
        if open_pass is None or uid not in open_pass.answered:
            return {}
        if self.clock() - open_pass.started_at >= self.hold_seconds:
            return {}  # the holds behind those answers have expired
        order = list(open_pass.answered)
        after = order[order.index(uid) + 1 :]
        return {member: node for member in after if (node := open_pass.answered[member]) is not None}

    # --- passes ----------------------------------------------------------------------------

    def _members(self, group: PodGroup, pod: Mapping[str, Any]) -> GangMembers:
        """The group's members, with the request's pod in place of (or added to) the stored one."""
        members = self.gangs.members(group)
        uid, key = pod_uid(pod), pod_key(pod)
        members.waiting = [p for p in members.waiting if pod_uid(p) != uid and pod_key(p) != key]
        members.waiting.append(pod)
        members.waiting.sort(key=pod_key)
        return members

    def _start(
        self,
        group: PodGroup,
        members: GangMembers,
        pod: Mapping[str, Any],
        node_names: Sequence[str],
        carried: Mapping[str, str | None],
    ) -> GangPass | None:
        """Plan the gang over the nodes ``pod`` is offered (the members in ``carried`` kept where
        they were answered); the pass's holds replace the last ones. None when the requesting
        pod's own claims cannot be planned here (the ordinary filter answers it)."""
        self._forget_deleted_groups()
        resolved = self._resolve(members, pod)
        if resolved is None:
            self._drop(group.key)  # the ordinary filter answers: nothing of a last pass is kept
            return None
        self.cluster.refresh()  # expired holds go before the inputs are compared
        nodes = [self.store.node(name) for name in dict.fromkeys([*node_names, *(n for n in carried.values() if n)])]
        expected = frozenset(pod_uid(p) for p in members.waiting)
        pinned = {uid: frozenset((node,)) for uid, node in carried.items() if node}
        inputs = (
            tuple(sorted(uid for uid, _, _ in resolved)),
            members.need,
            # the set offered, not its order: kube-scheduler starts each pass's node list where the
            # last search stopped, so the order turns from pass to pass (and does not change an
            # infeasible answer)
            frozenset(node_names),
            tuple(sorted(pinned.items())),
            # the group itself as far as a plan reads it (its topology key, its claims), not its
            # resourceVersion: kube-scheduler patches its status after every failed pass, and other
            # groups' writes do not matter at all (PodGroups are no input kind)
            dataclasses.replace(group, resource_version=""),
            tuple(self.store.kind_changes[kind] for kind in _PLAN_INPUT_KINDS),
            self.cluster.ledger.changes,
            self.cluster.nominations.changes,
        )
        remembered = self._infeasible.get(group.key)
        if (
            remembered is not None
            and remembered[0] == inputs
            # a search cut short by its budget tried the nodes in the order offered: another order
            # may fit, so that answer holds for the same order only
            and (remembered[2] == "infeasible" or remembered[3] == tuple(node_names))
        ):
            self.stats.count_gang_plan("remembered")
            repeats = self._repeats[group.key] = self._repeats.get(group.key, 0) + 1
            unchanged = GangPass(group.key, self.clock(), None, remembered[1], outcome=remembered[2])
            if self.retry_backoff and repeats >= self.retry_backoff:
                unchanged.back_off = True
                unchanged.reason += f" (unchanged for {repeats} passes: retried after kube-scheduler's error backoff)"
            return self._replace(group, unchanged, resolved, nodes, expected, carried)
        self._repeats.pop(group.key, None)
        planned = self._plan(group, resolved, members.need, nodes, pinned, self._placed_nodes(members))
        if isinstance(planned.plan, GangInfeasible) and pinned:
            # those answers may have ended kube-scheduler's last pass rather than begun this one
            carried, pinned = {}, {}
            planned = self._plan(group, resolved, members.need, nodes, pinned, self._placed_nodes(members))
        if (
            isinstance(planned.plan, GangInfeasible)
            and planned.plan.outcome == "infeasible"  # proven, not a search cut short
            and not self._binds_may_come(group.key)
            and (stuck := self._stuck_group_claims(group, members, resolved))
        ):
            freed = [claim.key for claim in stuck]
            again = self._plan(group, self._freed(resolved, freed), members.need, nodes, {}, freed=freed)
            if isinstance(again.plan, GangPlan):
                # the group's claim is allocated where the gang cannot go, and nobody uses it: free
                # it (the service writes it, ``take_releases``) and plan afresh at the next pass
                self.releases[group.key] = stuck
                reason = f"deallocation of ResourceClaim {stuck[0].key} requested for gang {group.key}"
                released = GangPass(group.key, self.clock(), None, reason, back_off=True)
                return self._replace(group, released, resolved, nodes, expected, {})
        if isinstance(planned.plan, GangInfeasible):
            reason, outcome = self._reason(group, members, planned), planned.plan.outcome
            self._infeasible[group.key] = (inputs, reason, outcome, tuple(node_names))
            return self._replace(
                group,
                GangPass(group.key, self.clock(), None, reason, outcome=outcome),
                resolved,
                nodes,
                expected,
                carried,
            )
        self._infeasible.pop(group.key, None)
        new = GangPass(group.key, self.clock(), planned.plan, domain=planned.domain)
        return self._replace(group, new, resolved, nodes, expected, carried)

    def _forget_deleted_groups(self) -> None:
        """Passes (and their holds) and remembered answers of PodGroups the store no longer has."""
        for key in [key for key in self.passes if key not in self.store.pod_groups]:
            self._drop(key)
        for table in (self._infeasible, self._repeats):
            for key in [key for key in table if key not in self.store.pod_groups]:
                del table[key]

    @staticmethod
    def _stuck_group_claims(
        group: PodGroup, members: GangMembers, resolved: list[tuple[str, PodClaims, GangMember]]
    ) -> list[ResourceClaim]:
        """The group's allocated claims that nobody but the group itself uses while none of its
        members is placed (spec F7: upstream's resourceclaim controller keeps them allocated until
        the PodGroup goes; its PostFilter frees them when a member fails and none is scheduled)."""
        if members.placed:
            return []
        stuck: dict[str, ResourceClaim] = {}
        for _, claims, _ in resolved:
            for claim in claims.allocated:
                if claim.key in claims.group_claims and all(ref.uid == group.uid for ref in claim.reserved_for):
                    stuck.setdefault(claim.key, claim)
        return [stuck[key] for key in sorted(stuck)]

    def _binds_may_come(self, group_key: str) -> bool:
        """Whether the group's last pass placed members whose binds may still come (their holds
        have not expired): the group's claim is theirs then."""
        last = self.passes.get(group_key)
        if last is None or last.plan is None or self.clock() - last.started_at >= self.hold_seconds:
            return False
        return any(node is not None for node in last.answered.values())

    def _freed(
        self, resolved: list[tuple[str, PodClaims, GangMember]], keys: Sequence[str]
    ) -> list[tuple[str, PodClaims, GangMember]]:
        """The members with the group's claims ``keys`` as if not allocated yet."""
        out = []
        for uid, claims, member in resolved:
            freed = [
                dataclasses.replace(c, allocation=None, reserved_for=()) for c in claims.allocated if c.key in keys
            ]
            if freed:
                claims = dataclasses.replace(
                    claims,
                    allocated=[c for c in claims.allocated if c.key not in keys],
                    to_allocate=[*claims.to_allocate, *freed],
                )
                member = self._member(member.key, claims)
            out.append((uid, claims, member))
        return out

    def take_releases(self, pod: Mapping[str, Any]) -> tuple[str, list[ResourceClaim]]:
        """The group claims the pod's filter decided to free (``_stuck_group_claims``), once: the
        service deallocates them (a write the synchronous filter cannot make)."""
        group = self.gangs.group_of(pod)
        if group is None or not self.releases:
            return "", []
        return group.key, self.releases.pop(group.key, [])

    def end_pass(self, group_key: str) -> None:
        """End the group's open pass (its answers predate a change that matters, such as devices
        a preemption freed): the next member's filter starts a new one."""
        self._drop(group_key)

    def _drop(self, group_key: str) -> None:
        """Forget the group's open pass and give back its holds."""
        old = self.passes.pop(group_key, None)
        if old is not None:
            for uid in old.claims:
                self.cluster.ledger.drop_holds(uid)

    def _resolve(self, members: GangMembers, pod: Mapping[str, Any]) -> list[tuple[str, PodClaims, GangMember]] | None:
        """Each waiting member's claims as a ``GangMember`` (uid, claims, member). A member whose
        claims cannot be resolved now (a claim being deleted, say) takes no part; None when that is
        the requesting pod, or any member has claims this path does not plan (classic DRA,
        extended resources)."""
        out: list[tuple[str, PodClaims, GangMember]] = []
        own = pod_uid(pod)
        for member in members.waiting:
            uid = pod_uid(member)
            try:
                claims = self.cluster.claims(member)
            except ExtenderError:
                if uid == own:
                    return None
                continue
            if claims.classic or claims.extended is not None:
                return None
            out.append((uid, claims, self._member(pod_key(member), claims)))
        keys = [claim.key for _, claims, _ in out for claim in claims.all if claim.key not in claims.group_claims]
        if len(keys) != len(set(keys)):
            return None  # members sharing a claim of their own: planned member by member (docs/gangs.md)
        return out

    def _resolved(self, open_pass: GangPass) -> list[tuple[str, PodClaims, GangMember]]:
        """The pass's members as ``_resolve`` gave them (uid, claims, member)."""
        return [(uid, claims, self._member(open_pass.keys[uid], claims)) for uid, claims in open_pass.claims.items()]

    def _member(self, key: str, claims: PodClaims) -> GangMember:
        """A member as the planner sees it: its own claims (the PodGroup's are planned once for
        the gang, ``_shared_claims``), its allocated ones (their selectors restrict its nodes)."""
        return GangMember(
            key=key,
            claims=tuple(c for c in claims.to_allocate if c.key not in claims.group_claims),
            preallocated=tuple(claims.allocated),
            shape=self.verdicts.shape(claims),
        )

    @staticmethod
    def _shared_claims(claims: Iterable[PodClaims]) -> list[ResourceClaim]:
        """The PodGroup's claims not allocated yet, once each, in key order (the planner's
        ``shared``: allocated once, for every member)."""
        shared: dict[str, ResourceClaim] = {}
        for pod_claims in claims:
            for claim in pod_claims.to_allocate:
                if claim.key in pod_claims.group_claims:
                    shared.setdefault(claim.key, claim)
        return [shared[key] for key in sorted(shared)]

    def _plan(
        self,
        group: PodGroup,
        resolved: list[tuple[str, PodClaims, GangMember]],
        need: int,
        nodes: Sequence[NodeInfo],
        pinned: Mapping[str, frozenset[str]],
        placed_nodes: Sequence[str] = (),
        freed: Iterable[str] = (),
        *,
        quiet: bool = False,
    ) -> _Planned:
        """The planner's answer over the cluster as it is, without this gang's own holds, within
        one domain of the group's topology key when it has one (``_domains``); the event loop runs
        between allocator runs (``cooperative.run``). ``freed``: claims planned as if they held
        nothing; ``quiet``: a what-if (preemption's), neither counted nor logged."""
        self.cluster.refresh()
        store = self.store
        # the members' own holds (the last pass's, under provisional keys too, for template claims
        # created since) are theirs to plan with
        own = [c.key for _, claims, _ in resolved for c in claims.to_allocate if c.key not in claims.group_claims]
        own += [entry.claim_key for uid, _, _ in resolved for entry in self.cluster.ledger.holds_of(uid)]
        own += freed  # planned as if not allocated: the group's stuck claims, a preemption's victims'
        members = [
            (uid, claims, GangMember(m.key, m.claims, m.preallocated, m.shape, pinned.get(uid)))
            for uid, claims, m in resolved
        ]
        priority = self.priority(group, [claims for _, claims, _ in resolved])
        uids = {uid for uid, _, _ in resolved}
        planner = GangPlanner(
            classes=store.classes,
            snapshot=store.snapshot(),
            allocated=self._base(own, priority, uids),
            features=self.cluster.features,
            selectors=store.selectors,
            max_checks=self.max_checks,
            pace=self._pace(),
        )
        fixed = [*placed_nodes, *(next(iter(n)) for n in pinned.values() if len(n) == 1)]
        domains = self._domains(group, nodes, fixed)
        shared, shared_allocated = [], []
        for claim in self._shared_claims(claims for _, claims, _ in resolved):
            entry = self.cluster.ledger.get(claim.key)
            if entry is not None and not entry.tentative:
                # a member's bind is allocating it right now: as that bind decided
                shared_allocated.append(dataclasses.replace(claim, allocation=entry.result))
            else:
                shared.append(claim)
        before = (self.store.revision, self.cluster.ledger.changes)
        answer: GangPlan | GangInfeasible = GangInfeasible(best=0)
        spent, tried, domain = 0, 0, None
        chosen: list[NodeInfo] = []
        for value, domain_nodes in domains:
            planner.max_checks = self.max_checks - spent
            if planner.max_checks <= 0:
                break
            found = planner.plan(
                [m for _, _, m in members], need, domain_nodes, shared=shared, shared_allocated=shared_allocated
            )
            spent += found.checks
            tried += 1
            if isinstance(found, GangPlan):
                answer, domain, chosen = dataclasses.replace(found, checks=spent), value, domain_nodes
                break
            if not isinstance(answer, GangInfeasible) or found.best >= answer.best:
                answer = dataclasses.replace(found, checks=spent)
        moved = before != (self.store.revision, self.cluster.ledger.changes)
        if isinstance(answer, GangPlan) and moved:
            planner.pace = None  # from here on nothing can change under the plan
            planner.rebase(self._base(own, priority, uids))
            if not self._still_fits(planner, answer, [m for _, _, m in members], store.node):
                # a bind or a hold took some of the plan's devices (or counters) while the search
                # let others run: plan again in the same domain, without pausing
                retry = planner.plan(
                    [m for _, _, m in members], need, chosen, shared=shared, shared_allocated=shared_allocated
                )
                answer = dataclasses.replace(retry, checks=spent + retry.checks)
        outcome = answer.outcome
        if quiet:
            return _Planned(answer, members, domain, tried)
        self.stats.count_gang_plan(outcome)
        if isinstance(answer, GangPlan):
            log.info(
                "gang.planned", group=group.key, members=len(answer.placements), checks=answer.checks, domain=domain
            )
        else:
            log.info("gang.infeasible", group=group.key, fit=answer.best, checks=answer.checks, outcome=outcome)
        return _Planned(answer, members, domain, tried)

    @staticmethod
    def priority(group: PodGroup, members: Iterable[PodClaims]) -> int:
        """The gang's priority against nominations and as a preemptor (spec §7.8): the PodGroup's
        ``spec.priority`` when set, else its lowest member's."""
        if group.priority is not None:
            return group.priority
        return min((claims.priority for claims in members), default=0)

    def _base(self, own: Sequence[str], priority: int, members: Container[str]) -> AllocatedState:
        """What a plan must leave alone: everything in use but the gang's own claims and holds,
        and the devices nominated for another preemptor of the gang's priority or more (the
        PodGroup's ``spec.priority``, else the lowest of its members': a member of lower priority
        may not take them, as its own bind would not)."""
        base = self.store.in_use_without(own)
        if self.cluster.nominations:
            for nomination in self.cluster.nominations.held_against("", priority):
                if nomination.pod_uid not in members:
                    for result in nomination.results:
                        base.add_allocation(result)
        return base

    @staticmethod
    def _still_fits(
        planner: GangPlanner, plan: GangPlan, members: Sequence[GangMember], node: Callable[[str], NodeInfo]
    ) -> bool:
        """Whether ``plan`` still holds over the planner's (fresh) base: no planned device taken,
        and each node's members still fit there beside the other nodes' plan (counters, capacity,
        devices seen from several nodes)."""
        base = planner.base
        results = [r for p in plan.placements for r in p.results] + list(plan.shared)
        planned = [d.device_id for r in results for d in r.devices if d.share_id is None and not d.admin_access]
        if any(device in base.devices for device in planned):
            return False
        by_key = {m.key: m for m in members}
        on_node: dict[str, list[GangMember]] = {}
        for placement in plan.placements:
            on_node.setdefault(placement.node, []).append(by_key[placement.member])
        state = planner.state_with(plan)
        for node_name, node_members in on_node.items():
            own = [r for p in plan.placements if p.node == node_name for r in p.results]
            planner.release(state, own)
            fits = planner.check(node(node_name), node_members, state, (), counted=False) is not None
            planner.hold(state, own)
            if not fits:
                return False
        return True

    def _domains(
        self, group: PodGroup, nodes: Sequence[NodeInfo], fixed: Sequence[str]
    ) -> list[tuple[str | None, list[NodeInfo]]]:
        """Where the gang may go: all ``nodes`` (no topology key), else one domain per value of the
        key among them, the tightest (fewest nodes) first; nodes without the label take no part. A
        member placed or answered already fixes the domain to its node's."""
        key = group.topology_key
        if not key:
            return [(None, list(nodes))]
        by_value: dict[str, list[NodeInfo]] = {}
        for node in nodes:
            value = node.labels.get(key)
            if value is not None:
                by_value.setdefault(value, []).append(node)
        taken = {self.store.node(name).labels.get(key) for name in fixed}
        if taken:
            by_value = {value: members for value, members in by_value.items() if value in taken}
        return sorted(by_value.items(), key=lambda item: (len(item[1]), item[0]))

    def _replace(
        self,
        group: PodGroup,
        new: GangPass,
        resolved: list[tuple[str, PodClaims, GangMember]],
        nodes: list[NodeInfo],
        expected: frozenset[str],
        carried: Mapping[str, str | None],
    ) -> GangPass:
        """Make ``new`` the group's open pass: the last pass's holds given back, the plan's held."""
        old = self.passes.get(group.key)
        if old is not None:
            for uid in old.claims:
                self.cluster.ledger.drop_holds(uid)
        new.claims = {uid: claims for uid, claims, _ in resolved}
        new.keys = {uid: member.key for uid, _, member in resolved}
        new.nodes, new.expected = nodes, expected
        new.answered.update(carried)
        new.carried = set(carried)
        self._serial += 1
        new.serial = self._serial
        self.passes[group.key] = new
        self._hold(new)
        return new

    def _hold(self, open_pass: GangPass) -> None:
        """The plan's devices into the ledger, one tentative entry per member's claim."""
        for member_uid in open_pass.claims:  # a member a re-plan leaves out keeps nothing
            self.cluster.ledger.drop_holds(member_uid)
        if open_pass.plan is None:
            return
        by_key = {key: uid for uid, key in open_pass.keys.items()}
        for placement in open_pass.plan.placements:
            uid = by_key.get(placement.member)
            claims = open_pass.claims.get(uid or "")
            if claims is None or not claims.to_allocate:
                continue
            if claims.group_claims:  # the member's own claims here; the group's below
                own = [c for c in claims.to_allocate if c.key not in claims.group_claims]
                claims = dataclasses.replace(claims, to_allocate=own)
            record(
                self.cluster, claims, placement.node, placement.results, tentative=True, ttl_seconds=self.hold_seconds
            )
        shared = [
            c
            for c in self._shared_claims(open_pass.claims.values())
            if (entry := self.cluster.ledger.get(c.key)) is None or entry.tentative
        ]
        if shared and len(shared) == len(open_pass.plan.shared) and open_pass.plan.placements:
            # held under the first placed member (its holds are the pass's to give back)
            first = open_pass.plan.placements[0]
            holder = open_pass.claims[by_key[first.member]]
            for claim, result in zip(shared, open_pass.plan.shared, strict=True):
                self.cluster.ledger.add(
                    claim=claim,
                    pod_key=holder.pod_key,
                    pod_uid=holder.pod_uid,
                    node=first.node,
                    result=result,
                    tentative=True,
                    ttl_seconds=self.hold_seconds,
                )

    # --- answers ---------------------------------------------------------------------------

    def _answer(
        self,
        group: PodGroup,
        members: GangMembers,
        open_pass: GangPass,
        pod: Mapping[str, Any],
        node_names: Sequence[str],
    ) -> FilterOutcome:
        uid = pod_uid(pod)
        if open_pass.plan is None:
            open_pass.answered[uid] = None
            if open_pass.back_off:
                return FilterOutcome([], error=open_pass.reason)
            return FilterOutcome([], failed=dict.fromkeys(node_names, open_pass.reason))
        node = open_pass.node_of(uid)
        if node is None:
            open_pass.answered[uid] = None
            reason = f"gang {group.key} complete without this member"
            return FilterOutcome([], failed=dict.fromkeys(node_names, reason))
        if node not in node_names:
            node = self._replan_for(group, members, open_pass, uid, node_names)
            if node is None:
                open_pass.answered[uid] = None
                reason = open_pass.reason or f"gang {group.key} complete without this member"
                return FilterOutcome([], failed=dict.fromkeys(node_names, reason))
        open_pass.answered[uid] = node
        reason = f"gang {group.key}: member planned on {node}"
        return FilterOutcome([node], failed={name: reason for name in node_names if name != node})

    def _replan_for(
        self, group: PodGroup, members: GangMembers, open_pass: GangPass, uid: str, node_names: Sequence[str]
    ) -> str | None:
        """Plan the gang again with this member restricted to the nodes it is offered and the
        members answered so far kept where they were answered; the new node, or None (the pass's
        reason then says why)."""
        pinned = {
            answered: frozenset((node,)) if node else frozenset() for answered, node in open_pass.answered.items()
        }
        pinned[uid] = frozenset(node_names)
        resolved = self._resolved(open_pass)
        # every node of the pass (members not filtered yet may use any), then this member's others
        names = dict.fromkeys([*(n.name for n in open_pass.nodes), *node_names])
        nodes = [self.store.node(name) for name in names]
        if open_pass.plan is not None:  # the old plan's nodes come first
            planned_nodes = {p.node for p in open_pass.plan.placements}
            nodes.sort(key=lambda n: n.name not in planned_nodes)
        open_pass.nodes = nodes
        planned = self._plan(group, resolved, members.need, nodes, pinned, self._placed_nodes(members))
        open_pass.plans += 1
        open_pass.domain = planned.domain
        if isinstance(planned.plan, GangInfeasible):
            open_pass.plan = None
            open_pass.reason = self._reason(group, members, planned)
            for member_uid in open_pass.claims:
                self.cluster.ledger.drop_holds(member_uid)
            return None
        open_pass.plan = planned.plan
        self._hold(open_pass)
        return open_pass.node_of(uid)

    def plan_released(self, group: PodGroup, open_pass: GangPass, freed: Iterable[str]) -> GangPlan | None:
        """Preemption's what-if (``preemption/gangs.py``): the plan ``open_pass`` would have with
        the claims ``freed`` holding nothing, over the pass's nodes, or None (no plan, or the
        search cut short: neither proves that the gang fits)."""
        members = self.gangs.members(group)
        resolved = self._resolved(open_pass)
        planned = self._plan(
            group, resolved, members.need, open_pass.nodes, {}, self._placed_nodes(members), freed, quiet=True
        )
        return planned.plan if isinstance(planned.plan, GangPlan) else None

    @staticmethod
    def _placed_nodes(members: GangMembers) -> list[str]:
        return [node for pod in members.placed if (node := bound_node(pod))]

    @staticmethod
    def _reason(group: PodGroup, members: GangMembers, planned: _Planned) -> str:
        """Why no plan exists, for every member (FailedScheduling events, ``kubectl dra why``)."""
        infeasible = planned.plan
        assert isinstance(infeasible, GangInfeasible)
        waiting = len(members.waiting)
        text = (
            f"gang {group.key}: {infeasible.best} of {waiting} waiting members fit together (minCount {group.min_count}"
        )
        if members.placed:
            text += f", {len(members.placed)} placed"
        text += ")"
        if group.topology_key:
            text += (
                f" within one {group.topology_key} domain ({planned.tried} tried)"
                if planned.tried
                else f"; no offered node has the label {group.topology_key}"
            )
        if infeasible.alone:
            names = ", ".join(sorted(key.partition("/")[2] for key in infeasible.alone))
            text += f"; no node fits {names} even alone"
        if infeasible.outcome == "budget":
            text += "; search budget spent"
        return text

    # --- the binds --------------------------------------------------------------------------

    def bind_members(self, pod: Mapping[str, Any]) -> tuple[str, int, frozenset[str]] | None:
        """For the bind barrier (``bind/barrier.py``): the pod's group, its open pass and the
        members that pass answered with a node and that are not bound yet (the pods kube-scheduler binds
        together), when the pod is one of them; else None."""
        if not pod_group_name(pod):
            return None
        group = self.gangs.group_of(pod)
        open_pass = self.passes.get(group.key) if group is not None and group.gang else None
        if open_pass is None or open_pass.plan is None or self.clock() - open_pass.started_at >= self.hold_seconds:
            return None
        members = []
        for uid, node in open_pass.answered.items():
            stored = self.store.pods.get(open_pass.keys.get(uid, ""))
            if node is not None and (stored is None or not bound_node(stored)):
                members.append(uid)
        if pod_uid(pod) not in members:
            return None
        return open_pass.group, open_pass.serial, frozenset(members)

    # --- introspection ---------------------------------------------------------------------

    def describe(self, group_key: str) -> dict[str, Any] | None:
        """The open pass of a group as JSON (``/debug/podgroups``), or None."""
        open_pass = self.passes.get(group_key)
        if open_pass is None:
            return None
        plan = open_pass.plan
        return {
            "startedSecondsAgo": round(self.clock() - open_pass.started_at, 3),
            "plans": open_pass.plans,
            "reason": open_pass.reason,
            "domain": open_pass.domain,
            "answered": {open_pass.keys.get(uid, uid): node for uid, node in open_pass.answered.items()},
            "plan": None
            if plan is None
            else {
                "outcome": plan.outcome,
                "checks": plan.checks,
                "placements": [
                    {
                        "pod": p.member,
                        "node": p.node,
                        "devices": [str(d.device_id) for r in p.results for d in r.devices],
                    }
                    for p in plan.placements
                ],
                "shared": [str(d.device_id) for r in plan.shared for d in r.devices],
            },
        }
