"""Nominations: devices held for a preemptor while its victims go (spec/preemption.md §2.7).

Kept by the ``ClusterView`` (every pod's filter and bind respect them) and made by
``state/preemption/devices.py``. A nomination holds the allocation its plan found, on one node, against
every other pod of equal or lower priority — kube-scheduler's rule for nominated pods, which
extender filters otherwise never see.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from extender.core.model import AllocatedState, AllocationResult
from extender.core.preemption import Victim
from extender.state.cache.pods import bound_node, nominated_node, pod_uid

__all__ = ["HARD_LIFETIME_FACTOR", "PLAN_SECONDS", "Nomination", "Nominations", "PendingPlan", "nomination_lifetime"]

#: How long a plan of the preempt verb waits for kube-scheduler to nominate its pod.
PLAN_SECONDS = 60.0
#: The shortest lifetime of a nomination made from such a plan.
PLAN_NOMINATION_SECONDS = 120.0
#: A nomination ends at this many times its lifetime even while a victim is still there (one
#: stuck terminating must not hold devices for ever).
HARD_LIFETIME_FACTOR = 5.0
#: What a nomination waits beyond its victims' longest grace period.
GRACE_MARGIN_SECONDS = 60.0


def nomination_lifetime(grace_seconds: Iterable[float], shortest: float) -> float:
    """How long a nomination stands: its victims' longest grace period and a margin, at least
    ``shortest`` (and never while a victim is still there: ``Nominations``); it ends for good at
    ``HARD_LIFETIME_FACTOR`` times that."""
    return max(shortest, max(grace_seconds, default=0.0) + GRACE_MARGIN_SECONDS)


log = structlog.get_logger()


@dataclass(slots=True)
class Nomination:
    """Devices on ``node`` held for a preemptor while its victims go."""

    pod_key: str
    pod_uid: str
    priority: int
    node: str
    #: the allocation the plan found (in the preemptor's ``to_allocate`` order)
    results: tuple[AllocationResult, ...]
    victims: tuple[Victim, ...]
    #: the claims the victims' removal frees
    freed: frozenset[str]
    expires: float
    #: whether the store showed the preemptor when the nomination was made (then its absence
    #: later means it was deleted; otherwise the pod watch has not shown it yet)
    seen: bool = True
    #: when it ends even while a victim is still there (monotonic seconds; 0: never)
    hard_expires: float = 0.0
    #: the gang (PodGroup ``namespace/name``) whose preemption made it ("" for one pod's): the
    #: members' nominations are one plan, never held against each other
    group: str = ""


@dataclass(slots=True)
class PendingPlan:
    """What the ``preempt`` verb answered for a pod on one node: its allocation there once the
    victims are gone. kube-scheduler picks one node, deletes the victims itself and sets the pod's
    ``status.nominatedNodeName``; when the store shows that, the plan for that node becomes a
    nomination (spec §2.7.2), and the plans for the other nodes go."""

    pod_key: str
    pod_uid: str
    priority: int
    node: str
    results: tuple[AllocationResult, ...]
    victims: tuple[Victim, ...]
    expires: float


class Nominations:
    """The standing nominations, by preemptor UID; ``clock`` is monotonic seconds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.by_uid: dict[str, Nomination] = {}
        #: plans of the preempt verb, by (pod UID, node), until one is nominated or they expire
        self.pending: dict[tuple[str, str], PendingPlan] = {}
        #: Grows whenever a nomination is made or ends (readers such as the device map compare it).
        self.changes = 0

    def __bool__(self) -> bool:
        return bool(self.by_uid) or bool(self.pending)

    def plan(self, plan: PendingPlan) -> None:
        self.pending[(plan.pod_uid, plan.node)] = plan

    def _activate(self, pods: Mapping[str, Mapping[str, Any]], now: float) -> None:
        """Plans whose pod the store shows nominated to their node become nominations."""
        for key, plan in list(self.pending.items()):
            pod = pods.get(plan.pod_key)
            if now >= plan.expires or (pod is not None and pod_uid(pod) != plan.pod_uid):
                del self.pending[key]
                continue
            if pod is None or nominated_node(pod) != plan.node:
                continue
            for other in [k for k in self.pending if k[0] == plan.pod_uid]:
                del self.pending[other]
            if plan.pod_uid not in self.by_uid:
                lifetime = nomination_lifetime((v.grace_seconds for v in plan.victims), PLAN_NOMINATION_SECONDS)
                self.by_uid[plan.pod_uid] = Nomination(
                    pod_key=plan.pod_key,
                    pod_uid=plan.pod_uid,
                    priority=plan.priority,
                    node=plan.node,
                    results=plan.results,
                    victims=plan.victims,
                    freed=frozenset(k for v in plan.victims for k in v.claims),
                    expires=now + lifetime,
                    hard_expires=now + HARD_LIFETIME_FACTOR * lifetime,
                )
                self.changes += 1
                log.info("preemption.plan_nominated", pod=plan.pod_key, node=plan.node)

    def add(self, nomination: Nomination) -> None:
        self.by_uid[nomination.pod_uid] = nomination
        self.changes += 1

    def drop(self, pod_uid: str) -> None:
        if self.by_uid.pop(pod_uid, None) is not None:
            self.changes += 1
            log.info("preemption.nomination_dropped", pod_uid=pod_uid)

    def expire(self, pods: Mapping[str, Mapping[str, Any]]) -> None:
        """Drop the nominations of preemptors bound, gone or re-created, and the expired ones."""
        now = self.clock()
        if self.pending:
            self._activate(pods, now)
        victims_left: set[str] | None = None
        for uid, nomination in list(self.by_uid.items()):
            pod = pods.get(nomination.pod_key)
            gone = (pod is None and nomination.seen) or (pod is not None and pod_uid(pod) != uid)
            bound = pod is not None and bool(bound_node(pod))
            if gone or bound:
                del self.by_uid[uid]
                self.changes += 1
                continue
            if nomination.hard_expires and now >= nomination.hard_expires:
                del self.by_uid[uid]
                self.changes += 1
                continue
            if now >= nomination.expires:
                if victims_left is None:
                    victims_left = {pod_uid(p) for p in pods.values()}
                if not any(v.uid in victims_left for v in nomination.victims):
                    del self.by_uid[uid]  # never while a victim is still there (a long grace period)
                    self.changes += 1

    def held_against(self, pod_uid: str, priority: int) -> list[Nomination]:
        """The nominations a pod of ``priority`` must leave alone: those of other pods of equal or
        higher priority (kube-scheduler's rule for nominated pods), but for those of its own gang's
        preemption (one plan for all its members)."""
        own = self.by_uid.get(pod_uid)
        group = own.group if own is not None else ""
        return [
            n
            for n in self.by_uid.values()
            if n.pod_uid != pod_uid and n.priority >= priority and not (group and n.group == group)
        ]

    def of_group(self, group: str) -> list[Nomination]:
        """The standing nominations of a gang's preemption."""
        return [n for n in self.by_uid.values() if n.group == group]

    def against(self, pod_uid: str, priority: int, node: str) -> list[Nomination]:
        """``held_against`` on one node."""
        return [n for n in self.held_against(pod_uid, priority) if n.node == node]

    def hold(self, state: AllocatedState, pod_uid: str, priority: int) -> AllocatedState:
        """``state`` (a copy of the in-use state) with every device ``held_against`` the pod
        counted, whichever node its nomination is on (a device a pool shares between nodes is
        reachable from others too)."""
        for nomination in self.held_against(pod_uid, priority):
            for result in nomination.results:
                state.add_allocation(result)
        return state
