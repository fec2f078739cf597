"""The one exception hierarchy of dra-extender.

::

    ExtenderError(reason, *, claim=None, node=None)
    ├── DoesNotFit                  -> FailedNodes[node]            (this node, not now)
    │   └── NodeUnresolvable        -> FailedAndUnresolvableNodes   (this node, never: invalid pools)
    ├── PodUnschedulable            -> Error, for every node        (fatal for the attempt: CEL, class, >32)
    │   └── CelError                                                (compile or runtime failure of a selector)
    ├── Transient                   -> Error, retry later           (not synced, claim not created, conflict)
    │   ├── NotSynced                                               (caches not filled yet)
    │   ├── NotLeader                                               (this replica may not write now)
    │   ├── AllocationTimedOut                                      (a node's search ran out of budget)
    │   ├── DeadlineExceeded                                        (a bind ran out of its deadline)
    │   ├── EvictionRefused                                         (429 on pods/eviction: a PDB forbids it)
    │   ├── ClaimNotCreated                                         (template claim not there yet)
    │   ├── WriteConflict                                           (409: stale resourceVersion)
    │   └── ApiUnavailable                                          (5xx, 429, timeouts, injected faults)
    │       └── OutcomeUnknown                                      (sent, never answered: done or not?)
    ├── ObjectNotFound              a read or write named an object that does not exist (404)
    └── InvalidObject               a manifest/API object the core cannot use (decode/validation)

``reason`` is short, stable and node-agnostic, in upstream's message forms
(docs/semantics.md §12c). Inside the allocator "does not fit" is a return value (``None``);
the exceptions above exist for the boundaries that need them.
"""

from __future__ import annotations

__all__ = [
    "AllocationTimedOut",
    "ApiUnavailable",
    "CelError",
    "ClaimNotCreated",
    "DeadlineExceeded",
    "DoesNotFit",
    "EvictionRefused",
    "ExtenderError",
    "InvalidObject",
    "NodeUnresolvable",
    "NotLeader",
    "NotSynced",
    "ObjectNotFound",
    "OutcomeUnknown",
    "PodUnschedulable",
    "Transient",
    "WriteConflict",
]


class ExtenderError(Exception):
    """Base of every error dra-extender raises on purpose."""

    def __init__(self, reason: str, *, claim: str | None = None, node: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.claim = claim
        self.node = node


class DoesNotFit(ExtenderError):
    """The pod's claims cannot be allocated on this node right now."""


class NodeUnresolvable(DoesNotFit):
    """This node can never fit the pod as things stand (upstream ErrFailedAllocationOnNode)."""


class PodUnschedulable(ExtenderError):
    """Fatal for the whole scheduling attempt of the pod, whatever the node."""


class CelError(PodUnschedulable):
    """A CEL selector failed to compile or to evaluate; ``reason`` carries the upstream text."""


class Transient(ExtenderError):
    """A temporary condition; the scheduler should retry later."""


class NotSynced(Transient):
    """The backend's caches have not synced yet."""


class NotLeader(Transient):
    """This replica does not hold (or cannot prove it holds) the leader Lease: it must not write."""


class AllocationTimedOut(Transient):
    """The search on one node used up its time budget (upstream's ``filterTimeout``): the attempt
    fails with ``Error`` and the pod retries with backoff, as in kube-scheduler 1.34+."""


class DeadlineExceeded(Transient):
    """A bind ran out of its deadline; what it wrote has been undone (or, for a binding whose
    answer never came, kept for the pod's next attempt)."""


class EvictionRefused(Transient):
    """The API server refused an eviction (HTTP 429: a PodDisruptionBudget forbids it now)."""


class ClaimNotCreated(Transient):
    """A claim the pod needs does not exist yet (for example, not yet created from its template)."""


class WriteConflict(Transient):
    """A write was based on a stale resourceVersion (HTTP 409)."""


class ApiUnavailable(Transient):
    """The API (or the embedded cluster's injected fault) failed temporarily."""


class OutcomeUnknown(ApiUnavailable):
    """A request was sent but no answer came (a timeout, a connection lost): the server may or may
    not have carried it out."""


class ObjectNotFound(ExtenderError):
    """The named object does not exist."""


class InvalidObject(ExtenderError):
    """A Kubernetes object is malformed in a way the core cannot work with."""

    def __init__(self, reason: str, *, path: str = "", obj: str = "") -> None:
        text = f"{obj}: {path}: {reason}" if obj and path else (f"{obj}: {reason}" if obj else reason)
        super().__init__(text)
        self.path = path
        self.obj = obj
