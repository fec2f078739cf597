"""kube-scheduler's ``preempt`` verb, made device-aware (spec/preemption.md §2.1, §2.6).

kube-scheduler calls the verb after its own dry run (DefaultPreemption), with the victims that
free what its in-tree filters see (CPU, memory, pods, ports, ...) on each candidate node. It does
not know which pods hold which devices (the DynamicResources plugin is off in the extender's
profile), so its victims may free no device at all. With kube-scheduler 1.36 the verb is called
only for *mixed* shortages (§2.0: a device-only shortage never produces a candidate; the
extender's filter handles those itself, ``state/preemption/devices.py``).

For each node of the request, cheapest first (fewest in-tree victims) and within a time budget
(``BUDGET_SHARE`` of ``timeout_seconds``, default 4 s: the nodes left when it runs out are
omitted, and the truncation logged), ``PreemptVerb.decide``:

1. resolves the in-tree victims' UIDs against the store's pods on that node; a UID the store does
   not know there is an *opaque* victim: it is kept, but frees no device;
2. asks one what-if allocator run whether the pod's claims fit once the claims of the in-tree
   victims, of the node's terminating or finished pods and of consumers gone already are freed
   (§2.4's release model, ``extender.core.preemption.released``) — if so, the node is passed
   through unchanged (an input list is never shrunk), except a *placeholder* (an empty list, k/k
   #135486), which is omitted: nothing needs to go for the devices, and the pod fits next cycle;
3. else takes as candidate extra victims the running pods on the node of lower priority than the
   pod that consume non-admin devices (not already victims, not being bound), omits the node if
   even all of them do not free enough, and otherwise reprieves them greedily, most important first
   (``choose_victims``: the in-tree victims always removed), so that no added victim could be
   spared;
4. answers the in-tree victims and the added ones together, most important first (higher priority,
   then the earlier start: kube-scheduler reads ``Pods[0]`` as the highest-priority victim).

Never answered: a victim of equal or higher priority than the pod (an in-tree one would make the
node omitted), a pod of another node, a node the request did not name, a node with no victims
(kube-scheduler 1.36 rejects it). Holders a watched PodDisruptionBudget protects are added only
when nothing else will do; ``NumPDBViolations`` is kube-scheduler's count for a node passed through,
and for one with added victims the higher of that and the count over all of them from the watched
budgets. kube-scheduler deletes the victims itself (no Eviction API on this path, so no budget is
enforced either). A pod
with no claims to allocate gets the request's victims back unchanged: its devices are no concern.
With device preemption off (``--no-device-preemption``) no victim is added: the nodes whose in-tree
victims do not free the devices are left out, the others passed through.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from extender.core.allocator import Allocation
from extender.core.answers import Unresolvable
from extender.core.errors import AllocationTimedOut, ExtenderError
from extender.core.model import AllocatedState
from extender.core.preemption import Victim, by_importance, choose_victims, protected_victims, released
from extender.state.cache.claims import PodClaims
from extender.state.cache.cluster import ClusterView
from extender.state.cache.nominations import PLAN_SECONDS, PendingPlan
from extender.state.cache.pods import bound_node, deleting, finished, pod_identity, pod_priority, pod_uid, start_time
from extender.state.preemption.devices import ClusterIndex, DevicePreemption

__all__ = [
    "BUDGET_SHARE",
    "DEFAULT_PREEMPT_TIMEOUT_SECONDS",
    "OUTCOMES",
    "NodeVictims",
    "PreemptOutcome",
    "PreemptVerb",
    "PreemptVerbStats",
]

log = structlog.get_logger()

#: The verb's time budget: kube-scheduler's default extender ``httpTimeout`` is 5 s.
DEFAULT_PREEMPT_TIMEOUT_SECONDS = 4.0
#: The share of the budget spent deciding nodes: the rest is for the answer to get back in time.
BUDGET_SHARE = 0.8


@dataclass(frozen=True, slots=True)
class NodeVictims:
    """One node's victims as kube-scheduler sends and reads them: UIDs in its order, its count of
    PodDisruptionBudget violations, and the full pods when it sent them (``NodeNameToVictims``,
    nodeCacheCapable false; None for ``NodeNameToMetaVictims``)."""

    uids: tuple[str, ...]
    pdb_violations: int = 0
    pods: tuple[Mapping[str, Any], ...] | None = None


@dataclass(frozen=True, slots=True)
class PreemptOutcome:
    """The answer: victims by node (only nodes of the request), or an ``error`` with none."""

    victims: dict[str, NodeVictims]
    error: str = ""


#: What the verb answers for a node: passed through unchanged, with victims added, or omitted because
#: the pod fits there already (a placeholder), can never fit there, an in-tree victim has the pod's
#: priority or more, no set of victims frees the devices, or the time ran out first.
OUTCOMES = (
    "passed_through",
    "added",
    "fits_already",
    "unresolvable",
    "higher_priority_victim",
    "no_victims_help",
    "out_of_time",
)


@dataclass(slots=True)
class PreemptVerbStats:
    """Nodes of preempt requests by outcome (``OUTCOMES``; the ``preempt.node`` log events name the same)."""

    nodes: dict[str, int] = field(default_factory=dict)

    def count(self, outcome: str, nodes: int = 1) -> None:
        self.nodes[outcome] = self.nodes.get(outcome, 0) + nodes


class _OutOfTime(Exception):
    """The verb's deadline passed in the middle of a node: the node is omitted (a half-done
    reprieve would name more victims than needed)."""


class PreemptVerb:
    """See the module docstring. ``preemption`` lends its what-if state (``S(N)`` of §2.6: in use,
    in flight, and nominations of others of equal or higher priority)."""

    def __init__(
        self,
        cluster: ClusterView,
        preemption: DevicePreemption,
        *,
        timeout_seconds: float = DEFAULT_PREEMPT_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.preemption = preemption
        self.timeout_seconds = timeout_seconds
        self.clock = clock
        self.stats = PreemptVerbStats()

    async def decide(self, claims: PodClaims, victims: Mapping[str, NodeVictims]) -> dict[str, NodeVictims]:
        """The victims per node to answer for the pod of ``claims`` (module docstring)."""
        if not claims.to_allocate:
            return dict(victims)
        deadline = self.clock() + BUDGET_SHARE * self.timeout_seconds
        self.cluster.refresh()
        self.cluster.nominations.expire(self.store.pods)
        view = ClusterIndex(self.store.pods.values(), self.store)
        located = _Located(self.store.pods.values())
        order = sorted(victims, key=lambda node: len(victims[node].uids))  # stable: request order among equals
        answer: dict[str, NodeVictims] = {}
        left = list(order)
        for index, node in enumerate(order):
            if self.clock() >= deadline:
                break
            if index:
                await asyncio.sleep(0)  # other requests and watch events between two nodes
            search = _NodeSearch(self, claims, node, victims[node], view, located, deadline)
            try:
                outcome, chosen = search.decide()
            except _OutOfTime:
                break
            left.remove(node)
            self.stats.count(outcome)
            log.info(
                "preempt.node",
                pod=claims.pod_key,
                node=node,
                outcome=outcome,
                in_tree=len(victims[node].uids),
                added=[v.key for v in search.added],
            )
            if chosen is not None:
                answer[node] = chosen
        if left:
            self.stats.count("out_of_time", len(left))
            log.warning(
                "preempt.truncated",
                pod=claims.pod_key,
                omitted=len(left),
                nodes=len(victims),
                budget_seconds=BUDGET_SHARE * self.timeout_seconds,
            )
        return answer

    def fits(self, claims: PodClaims, node: str, state: AllocatedState, deadline: float) -> Allocation | bool | None:
        """One what-if allocator run: the ``Allocation`` if the claims fit on ``node`` over
        ``state``, False if not, None if they never can there (``Unresolvable``). ``_OutOfTime``
        past ``deadline``."""
        remaining = deadline - self.clock()
        if remaining <= 0:
            raise _OutOfTime
        on_node = claims.on_node(self.store.node(node))  # extended resources a device plugin serves
        if on_node is None:
            return None
        claims = on_node
        limit = self.cluster.filter_timeout_seconds
        seconds = min(limit, remaining) if limit else remaining
        allocator = self.cluster.allocator(claims, refresh=False, budget=self.cluster.budget(seconds), allocated=state)
        try:
            answer = allocator.answer(self.store.node(node))
        except AllocationTimedOut:
            if self.clock() >= deadline:
                raise _OutOfTime from None
            return False  # the node's own search budget: counts as "does not fit" (§2.6)
        except ExtenderError:
            return False
        if isinstance(answer, Unresolvable):
            return None
        return answer if isinstance(answer, Allocation) else False


class _NodeSearch:
    """The decision for one node of the request."""

    def __init__(
        self,
        verb: PreemptVerb,
        claims: PodClaims,
        node: str,
        given: NodeVictims,
        view: ClusterIndex,
        located: _Located,
        deadline: float,
    ) -> None:
        self.verb = verb
        self.claims = claims
        self.node = node
        self.given = given
        self.view = view
        self.deadline = deadline
        self.located = located
        self.added: list[Victim] = []
        self._fits: dict[frozenset[str], Allocation | bool | None] = {}

    def decide(self) -> tuple[str, NodeVictims | None]:
        """(outcome, victims to answer or None to omit the node)."""
        priority = self.claims.priority
        in_tree = [self._in_tree(i, uid) for i, uid in enumerate(self.given.uids)]
        if any(v.priority >= priority for v in in_tree if v is not None):
            return "higher_priority_victim", None  # never answered; the list may not shrink
        base = frozenset(self.given.uids) | self.located.going.get(self.node, frozenset())
        first = self.fits(base)
        if first is None:
            return "unresolvable", None
        if first:
            if self.given.uids:
                self._plan(base, in_tree, [])
                return "passed_through", self.given
            return "fits_already", None  # a placeholder whose devices are free already
        binding = self.verb.cluster.binding
        candidates = [
            v
            for v in self.view.victims_on(self.node, priority, self.verb.store)
            if v.uid not in base and v.uid not in binding
        ]
        if not self.verb.preemption.enabled:
            candidates = []  # --no-device-preemption: nobody goes for devices; such nodes are left out
        budgets = list(self.verb.store.budgets.values())
        protected = protected_victims(candidates, budgets, self.view.labels) if budgets and candidates else set()
        extra = (
            choose_victims(lambda removed: bool(self.fits(base | removed)), candidates, protected=protected)
            if candidates
            else None
        )
        if not extra:
            return "no_victims_help", None
        self.added = extra
        self._plan(base | frozenset(v.uid for v in extra), in_tree, extra)
        opaque_priority = priority - 1  # the most an unknown in-tree victim can have: ranks the node no better
        ordered = by_importance(
            [
                v if v is not None else Victim("", uid, uid, opaque_priority)
                for v, uid in zip(in_tree, self.given.uids, strict=True)
            ]
            + extra
        )
        return "added", NodeVictims(tuple(v.uid for v in ordered), self._violations(ordered))

    def _violations(self, victims: list[Victim]) -> int:
        """``NumPDBViolations`` of the answer: kube-scheduler's count for its own victims, or the
        count over all of them from the budgets the extender watches (each budget's disruptions
        consumed in importance order), whichever is higher."""
        budgets = list(self.verb.store.budgets.values())
        if not budgets:
            return self.given.pdb_violations
        counted = protected_victims([v for v in victims if v.namespace], budgets, self.view.labels)
        return max(self.given.pdb_violations, len(counted))

    def fits(self, removed: frozenset[str]) -> Allocation | bool | None:
        """Whether the pod fits once the pods ``removed`` (UIDs) are gone, remembered per set."""
        if removed in self._fits:
            return self._fits[removed]
        view, store = self.view, self.verb.store
        keys = {key for uid in removed for key in view.claims_of.get(uid, ())}
        keys.update(key for key, owner in view.owners.items() if owner in removed)
        freed = released(removed, store.claims, view.owners, keys) | view.gone_claims
        state = self.verb.preemption._state(self.claims, self.node, freed)
        answer = self._fits[removed] = self.verb.fits(self.claims, self.node, state, self.deadline)
        return answer

    def _plan(self, removed: frozenset[str], in_tree: list[Victim | None], extra: list[Victim]) -> None:
        """Remember the allocation the answer found for this node, to hold once kube-scheduler
        nominates the pod here (``Nominations.pending``)."""
        allocation = self._fits.get(removed)
        if not isinstance(allocation, Allocation):
            return
        nominations = self.verb.cluster.nominations
        nominations.plan(
            PendingPlan(
                pod_key=self.claims.pod_key,
                pod_uid=self.claims.pod_uid,
                priority=self.claims.priority,
                node=self.node,
                results=allocation.results,
                victims=tuple(
                    dataclasses.replace(v, claims=v.claims or tuple(self.view.claims_of.get(v.uid, ())))
                    for v in (*in_tree, *extra)
                    if v is not None
                ),
                expires=nominations.clock() + PLAN_SECONDS,
            )
        )

    def _in_tree(self, index: int, uid: str) -> Victim | None:
        """The in-tree victim as the store holds it on this node; else, from the full pod of the
        request if sent (its priority and start, freeing nothing), else None (opaque)."""
        located = self.located.by_uid.get(uid)
        raw: Mapping[str, Any] | None = None
        if located is not None and located[0] == self.node:
            raw = located[1]
        elif self.given.pods is not None:
            raw = self.given.pods[index]
        if raw is None:
            return None
        namespace, name, _ = pod_identity(raw)
        return Victim(namespace, name, uid, pod_priority(raw), start_time(raw))


class _Located:
    """The pods on nodes, by UID (with their node), and per node the UIDs of those going anyway
    (deleted or finished: their claims are freed for free, and they are never named; §2.6 ``T(N)``)."""

    def __init__(self, pods: Iterable[Mapping[str, Any]]) -> None:
        self.by_uid: dict[str, tuple[str, Mapping[str, Any]]] = {}
        going: dict[str, set[str]] = {}
        for pod in pods:
            node = bound_node(pod)
            if not node:
                continue
            uid = pod_uid(pod)
            self.by_uid[uid] = (str(node), pod)
            if deleting(pod) or finished(pod):
                going.setdefault(str(node), set()).add(uid)
        self.going = {node: frozenset(uids) for node, uids in going.items()}
