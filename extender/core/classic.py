"""Classic DRA's scheduler side as pure decisions (spec/classic-dra.md §1.3, §1.6).

A claim with ``spec.controller`` (resource.k8s.io/v1alpha3, Kubernetes 1.26-1.31) is allocated by
its driver's control-plane controller, not by the scheduler. The two negotiate through the pod's
PodSchedulingContext: the scheduler lists the nodes the pod could use (``potentialNodes``), the
driver answers per claim the nodes it cannot allocate for (``unsuitableNodes``), the scheduler
picks one (``selectedNode``) and the driver allocates for it. This module holds what the scheduler
decides from what it has read, with no I/O:

- ``node_problem``: the deny-list filter. A node fails when a class's ``suitableNodes`` excludes it
  or a driver listed it as unsuitable; every other node passes, nodes without information too (as
  in-tree: the driver is asked about them afterwards). Both answers are unresolvable: preemption
  cannot free what an opaque controller manages.
- ``may_select``: the trigger rule for ``selectedNode``. The 1.31 plugin mixed classic and structured
  counts (the §1.3 QUIRK: a pod with two informed classic claims and a structured one waited
  forever, one with a classic and a structured claim triggered without information); here a node
  is selected when one classic claim is pending or every pending one has information, whatever
  the structured claims.
- ``potential_nodes`` / ``covers``: what to publish, at most 128 nodes, a random sample when more
  pass, sorted by name (as PreScore did).
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from extender.core.answers import Unresolvable
from extender.core.errors import Transient
from extender.core.model import DeviceClass, NodeInfo, NodeSelector, PodSchedulingContext, ResourceClaim
from extender.core.nodeselector import node_matches

__all__ = [
    "EXCLUDED_BY_CLASS",
    "EXCLUDED_BY_CLASS_HERE",
    "MAX_POTENTIAL_NODES",
    "UNSUITABLE",
    "UNSUITABLE_HERE",
    "WAITING_FOR_DRIVER",
    "PendingClassic",
    "check_context_owner",
    "covers",
    "may_select",
    "node_problem",
    "pending_classic",
    "potential_nodes",
]

#: ``PodSchedulingNodeListMaxSize``: potentialNodes and unsuitableNodes hold at most this many.
MAX_POTENTIAL_NODES = 128
#: The 1.31 plugin's Filter texts for unallocated classic claims.
EXCLUDED_BY_CLASS = "excluded by device class node filter"
UNSUITABLE = "resourceclaim cannot be allocated for the node (unsuitable)"
#: The 1.31 plugin's Reserve text while drivers have not said which nodes suit them.
WAITING_FOR_DRIVER = "waiting for resource driver to provide information"

EXCLUDED_BY_CLASS_HERE = Unresolvable(EXCLUDED_BY_CLASS)
UNSUITABLE_HERE = Unresolvable(UNSUITABLE)


@dataclass(frozen=True, slots=True)
class PendingClassic:
    """An unallocated classic claim of a pod, with what the scheduler knows about it."""

    #: ``pod.spec.resourceClaims[].name``: how the context's status names the claim.
    pod_claim_name: str
    claim: ResourceClaim
    #: The ``suitableNodes`` of the classes its requests name (classes without one omitted).
    suitable: tuple[NodeSelector, ...]
    #: The nodes its driver cannot allocate it for; None while the driver has not answered.
    unsuitable: frozenset[str] | None


def check_context_owner(context: PodSchedulingContext | None, namespace: str, name: str, pod_uid: str) -> None:
    """A context named after the pod but controlled by another pod (an older one of the same
    name) is not ours to use: ``Transient`` with the 1.31 plugin's text (the garbage collector
    removes it once its owner is gone)."""
    if context is not None and context.owner_uid != pod_uid:
        raise Transient(f"PodSchedulingContext object with UID {context.uid} is not owned by Pod {namespace}/{name}")


def pending_classic(
    pod_claim_name: str,
    claim: ResourceClaim,
    classes: Mapping[str, DeviceClass],
    context: PodSchedulingContext | None,
) -> PendingClassic:
    """What is known about an unallocated classic claim. Every request's class must exist:
    ``Transient`` with the upstream text otherwise (a class created later fixes it, and nothing
    else would wake the pod, so the scheduler's backoff is the retry)."""
    suitable: list[NodeSelector] = []
    for request in claim.requests:
        alternatives = (request.exactly,) if request.exactly is not None else request.first_available
        for exact in alternatives:
            if exact is None or not exact.device_class_name:
                raise Transient(f"request {request.name}: unsupported request type", claim=claim.key)
            device_class = classes.get(exact.device_class_name)
            if device_class is None:
                raise Transient(
                    f"request {request.name}: device class {exact.device_class_name} does not exist", claim=claim.key
                )
            if device_class.suitable_nodes is not None:
                suitable.append(device_class.suitable_nodes)
    unsuitable = None
    if context is not None and pod_claim_name in context.unsuitable_nodes:
        unsuitable = frozenset(context.unsuitable_nodes[pod_claim_name])
    return PendingClassic(pod_claim_name, claim, tuple(suitable), unsuitable)


def node_problem(pending: Sequence[PendingClassic], node: NodeInfo) -> Unresolvable | None:
    """Why the node cannot take the pod's pending classic claims, or None (it may)."""
    for entry in pending:
        for selector in entry.suitable:
            if not node_matches(selector, node):
                return EXCLUDED_BY_CLASS_HERE
        if entry.unsuitable is not None and node.name in entry.unsuitable:
            return UNSUITABLE_HERE
    return None


def may_select(pending: Sequence[PendingClassic]) -> bool:
    """Whether a node may be selected for the drivers to allocate now (the trigger rule, with
    the 1.31 QUIRK fixed: structured claims do not count)."""
    return len(pending) == 1 or all(entry.unsuitable is not None for entry in pending)


def potential_nodes(passing: Sequence[str], rng: random.Random) -> tuple[str, ...]:
    """The nodes to publish as ``potentialNodes``: all that pass, or a random 128 of them, sorted."""
    unique = list(dict.fromkeys(passing))
    if len(unique) > MAX_POTENTIAL_NODES:
        unique = rng.sample(unique, MAX_POTENTIAL_NODES)
    return tuple(sorted(unique))


def covers(published: Collection[str], passing: Collection[str]) -> bool:
    """Whether the published ``potentialNodes`` already tell the drivers enough: they list every
    passing node, or they are a full sample (128) of the passing nodes (a new random sample on every
    attempt would only make the drivers check again)."""
    published_set = set(published)
    passing_set = set(passing)
    if passing_set <= published_set:
        return True
    return len(published_set) == MAX_POTENTIAL_NODES and published_set <= passing_set
