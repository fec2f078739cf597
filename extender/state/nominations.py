"""Nominations: devices held for a preemptor while its victims go (spec/preemption.md §2.7).

Kept by the ``ClusterView`` (every pod's filter and bind respect them) and made by
``state/preemption.py``. A nomination holds the allocation its plan found, on one node, against
every other pod of equal or lower priority — kube-scheduler's rule for nominated pods, which
extender filters otherwise never see.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from extender.core.model import AllocationResult
from extender.core.preemption import Victim
from extender.state.claims import pod_identity

__all__ = ["Nomination", "Nominations"]

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


class Nominations:
    """The standing nominations, by preemptor UID; ``clock`` is monotonic seconds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.by_uid: dict[str, Nomination] = {}

    def __bool__(self) -> bool:
        return bool(self.by_uid)

    def add(self, nomination: Nomination) -> None:
        self.by_uid[nomination.pod_uid] = nomination

    def drop(self, pod_uid: str) -> None:
        if self.by_uid.pop(pod_uid, None) is not None:
            log.info("preemption.nomination_dropped", pod_uid=pod_uid)

    def expire(self, pods: Mapping[str, Mapping[str, Any]]) -> None:
        """Drop the nominations of preemptors bound, gone or re-created, and the expired ones."""
        now = self.clock()
        victims_left: set[str] | None = None
        for uid, nomination in list(self.by_uid.items()):
            pod = pods.get(nomination.pod_key)
            gone = (pod is None and nomination.seen) or (pod is not None and pod_identity(pod)[2] != uid)
            bound = pod is not None and bool((pod.get("spec") or {}).get("nodeName"))
            if gone or bound:
                del self.by_uid[uid]
                continue
            if nomination.hard_expires and now >= nomination.hard_expires:
                del self.by_uid[uid]
                continue
            if now >= nomination.expires:
                if victims_left is None:
                    victims_left = {pod_identity(p)[2] for p in pods.values()}
                if not any(v.uid in victims_left for v in nomination.victims):
                    del self.by_uid[uid]  # never while a victim is still there (a long grace period)

    def against(self, pod_uid: str, priority: int, node: str) -> list[Nomination]:
        """The nominations on ``node`` that a pod of ``priority`` must leave alone: those of other
        pods of equal or higher priority (kube-scheduler's rule for nominated pods)."""
        return [n for n in self.by_uid.values() if n.node == node and n.pod_uid != pod_uid and n.priority >= priority]
