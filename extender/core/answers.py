"""What the extender answers about a pod on a node, as named types, with their texts defined once.

For one pod and one node the allocator (``Allocator.answer``) says one of:

=====================  ===========================================  ==============================
answer                 meaning                                      kube-scheduler sees
=====================  ===========================================  ==============================
``Allocation``         the claims fit (the devices it would take)   the node in ``NodeNames``
``Unfit``              they do not fit now (devices in use, ...)    ``FailedNodes[node]``
``Unresolvable``       they cannot fit as things stand (invalid     ``FailedAndUnresolvableNodes``
                       pools, a claim allocated elsewhere, no
                       device of a requested class)
``PodUnschedulable``   fatal for the pod on every node (CEL error,  ``Error`` (raised)
                       missing class, too many devices)
``Transient``          nothing can be decided yet (cache not        ``Error`` (raised, before the
                       synced, claim not created, conflicts)        allocator is asked)
=====================  ===========================================  ==============================

The last two are exceptions (``extender.core.errors``), as they end the whole attempt. ``Unfit``
and ``Unresolvable`` carry the short, node-agnostic reason kube-scheduler aggregates into its
"0/N nodes are available" message; per-node detail is ``explain``'s (``extender.core.explain``).
The common answers are module-level instances, so remembered verdicts share them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CANNOT_ALLOCATE",
    "CLASSIC_NOT_SUPPORTED",
    "INVALID_POOLS",
    "INVALID_POOLS_HERE",
    "NOT_AVAILABLE",
    "NOT_SYNCED",
    "NO_CLASS_DEVICES",
    "NO_CLASS_DEVICES_HERE",
    "UNFIT",
    "Unfit",
    "Unresolvable",
]

#: The claims do not fit on the node now (upstream's FailedNodes reason for DRA).
CANNOT_ALLOCATE = "cannot allocate all claims"
#: A claim of the pod is allocated already, and not on this node.
NOT_AVAILABLE = "resourceclaim not available on the node"
#: Some request has no device of its class on the node at all (in complete pools).
NO_CLASS_DEVICES = "no devices of the requested device classes on the node"
#: A pool the node sees is invalid (upstream's ErrFailedAllocationOnNode text).
INVALID_POOLS = "invalid resource pools were encountered"
#: The backend's caches are not filled yet (every verb answers Error; /readyz says so too).
NOT_SYNCED = "cache not synced yet"
#: A claim its driver's controller allocates (classic DRA, v1alpha3 ``spec.controller``) where
#: that is not done: upstream 1.31's PreFilter text with its gate off.
CLASSIC_NOT_SUPPORTED = "resourceclaim depends on disabled DRAControlPlaneController feature"


@dataclass(frozen=True, slots=True)
class Unfit:
    """The pod's claims do not fit on the node now; other pods leaving may change that."""

    reason: str = CANNOT_ALLOCATE


@dataclass(frozen=True, slots=True)
class Unresolvable:
    """The pod's claims cannot fit on the node as things stand. ``claim`` names the allocated
    claim that rules the node out, for ``NOT_AVAILABLE``."""

    reason: str
    claim: str | None = None


UNFIT = Unfit()
NO_CLASS_DEVICES_HERE = Unresolvable(NO_CLASS_DEVICES)
INVALID_POOLS_HERE = Unresolvable(INVALID_POOLS)
