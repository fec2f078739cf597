"""The pods the extender's last filter found no node for (docs/ui.md, ``ui/api/pending``).

Kept by ``SchedulingService._filter`` on the filter's hot path (one dict update per rejected pod,
one look-up otherwise) and read by the device map, which explains and lists such pods first: during
a stream of binds, the pods that stay pending are those that no node fits, not the ones about to be
bound.
"""

from __future__ import annotations

import time

__all__ = ["REJECTED_PODS", "RejectedPods"]

#: The most pods remembered (the one rejected longest ago is forgotten first).
REJECTED_PODS = 8192


class RejectedPods:
    """Pod UID -> monotonic time of the last filter that found no node for it, until a filter finds
    one or the pod binds. ``changes`` grows whenever the set of UIDs changes (not when a pod is
    rejected again)."""

    __slots__ = ("changes", "limit", "times")

    def __init__(self, limit: int = REJECTED_PODS) -> None:
        self.times: dict[str, float] = {}
        self.changes = 0
        self.limit = limit

    def __contains__(self, uid: object) -> bool:
        return uid in self.times

    def __len__(self) -> int:
        return len(self.times)

    def rejected(self, uid: str) -> None:
        """A filter found no node for the pod."""
        times = self.times
        if times.pop(uid, None) is None:
            self.changes += 1
            if len(times) >= self.limit:
                del times[next(iter(times))]
        times[uid] = time.monotonic()  # last: the order is the order of the last rejections

    def placed(self, uid: str) -> None:
        """A filter found a node for the pod, or it was bound."""
        if self.times.pop(uid, None) is not None:
            self.changes += 1
