"""The pods a filter found no node for: one registry, two readers.

``SchedulingService._apply`` feeds it on the filter's hot path (``rejected(pod)``: one dict update
per rejected pod; ``placed(uid)`` when a later filter finds a node or the pod binds). The device map
lists these pods first (``ui/api/pending``): during a stream of binds, the pods that stay pending are
those that no node fits, not the ones about to be bound. The kube backend's fast requeue
(``backends/kube/requeue.py``) nudges the pods rejected since it last looked, once devices free up
(``take``): entries older than ``ttl_seconds`` are left to kube-scheduler's own flush.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["REJECTED_PODS", "REJECTED_TTL_SECONDS", "RejectedPod", "RejectedPods"]

#: The most pods remembered (the one rejected longest ago is forgotten first).
REJECTED_PODS = 8192
#: How long a rejection is worth a nudge (kube-scheduler flushes its unschedulable pods after 5 min).
REJECTED_TTL_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class RejectedPod:
    namespace: str
    name: str
    uid: str
    #: When the last filter rejected it (the registry's clock).
    at: float


class RejectedPods:
    """Pod UID -> its last rejection, until a filter finds a node for it or it binds. ``changes``
    grows whenever the set of UIDs changes (not when a pod is rejected again)."""

    __slots__ = ("_clock", "_fresh", "changes", "limit", "pods", "ttl_seconds")

    def __init__(
        self,
        limit: int = REJECTED_PODS,
        *,
        ttl_seconds: float = REJECTED_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        #: UID -> the pod, in the order of their last rejections.
        self.pods: dict[str, RejectedPod] = {}
        self.changes = 0
        self.limit = limit
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        #: UIDs rejected since the last ``take``.
        self._fresh: dict[str, None] = {}

    def __contains__(self, uid: object) -> bool:
        return uid in self.pods

    def __len__(self) -> int:
        return len(self.pods)

    @property
    def times(self) -> dict[str, float]:
        """UID -> when it was last rejected, oldest first."""
        return {uid: pod.at for uid, pod in self.pods.items()}

    def rejected(self, pod: Mapping[str, Any]) -> None:
        """A filter found no node for the pod (a raw pod; one without a UID is not remembered)."""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if not uid:
            return
        pods = self.pods
        if pods.pop(uid, None) is None:
            self.changes += 1
            if len(pods) >= self.limit:
                oldest = next(iter(pods))
                del pods[oldest]
                self._fresh.pop(oldest, None)
        # last: the order is the order of the last rejections
        pods[uid] = RejectedPod(
            str(meta.get("namespace") or "default"), str(meta.get("name") or ""), uid, self._clock()
        )
        self._fresh.pop(uid, None)
        self._fresh[uid] = None

    def placed(self, uid: str) -> None:
        """A filter found a node for the pod, or it was bound."""
        self._fresh.pop(uid, None)
        if self.pods.pop(uid, None) is not None:
            self.changes += 1

    def take(self) -> list[RejectedPod]:
        """The pods rejected since the last ``take`` and not longer ago than ``ttl_seconds``,
        oldest rejection first; each is returned once per rejection (it stays listed)."""
        cutoff = self._clock() - self.ttl_seconds
        taken = [pod for uid in self._fresh if (pod := self.pods.get(uid)) is not None and pod.at > cutoff]
        self._fresh.clear()
        return taken
