"""The bind verb: decide at arrival, wait for template claims if need be, write, bind.

docs/pipeline.md ("one pod's timeline") walks through it. In short:

1. ``bind`` decides the moment the request has been read, synchronously: the pod from the watch
   cache (read from the API only when the cache lacks it or has another UID), the pod's holds
   released, the allocator asked about the chosen node (``Allocator.answer``), the allocation put
   into the in-flight ledger, so that every later filter and prioritize sees it;
2. a template claim the resourceclaim controller has not created yet is waited for (at most
   ``claim_wait_seconds``), and then the same allocation is recorded under the claim's own key;
3. the writes of ``claim_writes.py``, then the binding; any failure rolls back exactly what was
   written, but for a binding sent and never answered, which keeps the claims (undoing them could
   leave a bound pod without its devices).

A bind of a pod whose bind is still running is refused; a repeated bind after success succeeds
without allocating twice.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from extender.core.allocator import Allocation
from extender.core.errors import (
    ClaimNotCreated,
    DoesNotFit,
    ExtenderError,
    ObjectNotFound,
    OutcomeUnknown,
    Transient,
    WriteConflict,
)
from extender.core.model import AllocationResult
from extender.state.claim_writes import Written, roll_back, write_allocation, write_reservation
from extender.state.claims import PodClaims, pod_identity, reserved_for
from extender.state.cluster import ClusterView
from extender.state.holds import Holds, record
from extender.state.stats import ServiceStats

__all__ = ["DEFAULT_CLAIM_WAIT_SECONDS", "Binder"]

log = structlog.get_logger()

#: How long a bind waits for the resourceclaim controller to create a pod's template claims;
#: below kube-scheduler's default extender httpTimeout of 5 s.
DEFAULT_CLAIM_WAIT_SECONDS = 3.0


@dataclass(slots=True)
class _Decision:
    """What a bind decided at arrival: the pod, the node, its claims and their new allocations
    (in ``claims.to_allocate`` order), already recorded in the ledger."""

    pod: Mapping[str, Any]
    node: str
    claims: PodClaims
    results: tuple[AllocationResult, ...]


class Binder:
    """See the module docstring. ``binding`` is the set of UIDs of pods being bound (shared with
    the holds, which leave those pods alone)."""

    def __init__(
        self,
        cluster: ClusterView,
        holds: Holds,
        stats: ServiceStats,
        *,
        claim_wait_seconds: float,
        binding: set[str],
    ) -> None:
        self.cluster = cluster
        self.backend = cluster.backend
        self.store = cluster.store
        self.ledger = cluster.ledger
        self.holds = holds
        self.stats = stats
        self.claim_wait_seconds = claim_wait_seconds
        self.binding = binding
        # Binds waiting for template claims, by pod key (see ``_with_created_claims``).
        self._claim_waiters: dict[str, list[asyncio.Event]] = {}
        self.store.claim_listeners.append(self._claim_or_pod_changed)

    async def bind(self, namespace: str, name: str, uid: str, node_name: str) -> None:
        pod = self.store.pods.get(f"{namespace}/{name}")
        if pod is None or (uid and pod_identity(pod)[2] != uid):
            pod = await self.backend.get_pod(namespace, name)  # the one await before the decision
            if pod is None:
                raise ObjectNotFound(f'pod "{namespace}/{name}" not found')
        actual_uid = pod_identity(pod)[2]
        if uid and actual_uid != uid:
            raise WriteConflict(f'pod "{namespace}/{name}" has UID {actual_uid}, not {uid}: it was re-created')
        if actual_uid in self.binding:
            raise Transient(f'pod "{namespace}/{name}" is being bound already')
        decision = self._decide(pod, node_name)
        if decision is None:
            return  # a retry after success: nothing left to do
        self.binding.add(actual_uid)
        try:
            if decision.claims.provisional:
                decision = await self._with_created_claims(decision)
            await self._write(decision)
        except asyncio.CancelledError:
            # What reached the API is unknown: the entries keep the devices taken until the store
            # shows the claims (reconcile) or their TTL ends.
            raise
        except BaseException:
            for claim in decision.claims.to_allocate:
                self.ledger.drop(claim.key, pod_uid=actual_uid)  # this bind's own entries only
            raise
        finally:
            self.binding.discard(actual_uid)
        # Entries leave the ledger once the store shows the allocations (reconcile).
        self.ledger.reconcile(self.store.claims)

    # --- the decision -----------------------------------------------------------------------------

    def _decide(self, pod: Mapping[str, Any], node_name: str) -> _Decision | None:
        """Allocate for the chosen node and record it in the ledger, without awaiting anything.
        None when the pod is already bound there with its claims reserved (a repeated bind)."""
        namespace, name, uid = pod_identity(pod)
        bound_to = (pod.get("spec") or {}).get("nodeName")
        if bound_to:
            claims = self.cluster.claims(pod, from_templates=False)
            if bound_to == node_name and all(reserved_for(c, uid) for c in claims.all):
                return None
            raise WriteConflict(f'pod "{namespace}/{name}" is already bound to node {bound_to}')
        self.holds.release(uid, bound_to=node_name)
        claims = self.cluster.claims(pod)
        return _Decision(pod, node_name, claims, self._allocate(claims, node_name))

    def _allocate(self, claims: PodClaims, node_name: str) -> tuple[AllocationResult, ...]:
        answer = self.cluster.allocator(claims).answer(self.store.node(node_name))
        if not isinstance(answer, Allocation):
            raise DoesNotFit(f"node {node_name} no longer fits the pod: {answer.reason}", node=node_name)
        record(self.cluster, claims, node_name, answer.results, tentative=False)
        return answer.results

    async def _with_created_claims(self, decision: _Decision) -> _Decision:
        """Wait (at most ``claim_wait_seconds``) until the resourceclaim controller has created the
        pod's template claims and the store shows them, then decide again for the real claims in
        one synchronous step: the provisional entries give their devices back and the same
        allocation is recorded under the claims' own keys."""
        pod_key = decision.claims.pod_key
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + self.claim_wait_seconds
        event = asyncio.Event()
        self._claim_waiters.setdefault(pod_key, []).append(event)
        try:
            while True:
                pod: Mapping[str, Any] | None = self.store.pods.get(pod_key)
                if pod is None or pod_identity(pod)[2] != decision.claims.pod_uid:
                    # the watch has not shown this pod yet (bind read it from the API): wait on
                    # the copy bind has; a pod deleted or re-created meanwhile runs into the
                    # deadline or, later, the binding's UID precondition
                    pod = decision.pod
                claims = self.cluster.claims(pod)
                if not claims.provisional:
                    break
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise ClaimNotCreated(f'pod "{pod_key}": ResourceClaim not created yet')
                event.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), remaining)
        finally:
            waiters = self._claim_waiters.get(pod_key, [])
            if event in waiters:
                waiters.remove(event)
            if not waiters:
                self._claim_waiters.pop(pod_key, None)
        self.stats.claim_waits += 1
        self.stats.claim_wait_seconds += loop.time() - started
        for claim in decision.claims.to_allocate:
            self.ledger.drop(claim.key, pod_uid=decision.claims.pod_uid)
        return _Decision(pod, decision.node, claims, self._allocate(claims, decision.node))

    def _claim_or_pod_changed(self, kind: str, key: str) -> None:
        """Wake the binds waiting for a pod's template claims (``_with_created_claims``)."""
        if not self._claim_waiters:
            return
        if kind == "Pod":
            targets = self._claim_waiters.get(key, ())
        else:
            namespace = key.partition("/")[0] + "/"
            targets = [e for pod, events in self._claim_waiters.items() if pod.startswith(namespace) for e in events]
        for event in targets:
            event.set()

    # --- the writes -------------------------------------------------------------------------------

    async def _write(self, decision: _Decision) -> None:
        """The claim writes, then the binding; on failure exactly what was written is undone."""
        pod, claims = decision.pod, decision.claims
        namespace, name, uid = pod_identity(pod)
        written: list[Written] = []
        keep_writes = False
        try:
            results = dict(zip((c.key for c in claims.to_allocate), decision.results, strict=True))
            for claim in claims.all:
                record_ = Written(claim.key)
                written.append(record_)
                if claim.key in results:
                    await write_allocation(self.backend, self.store, claim, results[claim.key], pod, record_)
                    self.stats.allocations += 1
                elif not reserved_for(claim, uid):
                    await write_reservation(self.backend, self.store, claim, pod, record_)
            try:
                await self.backend.bind_pod(namespace, name, uid, decision.node)
            except WriteConflict:
                # refused: fine if an earlier bind of ours bound the pod there (the cache lagged)
                if not await self._bound_already(namespace, name, uid, decision.node):
                    raise
            except OutcomeUnknown:
                if await self._bound_already(namespace, name, uid, decision.node):
                    return  # this very request bound it; only its answer was lost
                # Whether the binding was made is unknown. Undoing the claims could leave a bound
                # pod without its devices; kept, they pin the pod's next attempt to this node
                # (and the resourceclaim controller frees them if the pod goes away).
                keep_writes = True
                raise
        except Exception:
            if not keep_writes:
                await roll_back(self.backend, written, uid)
            raise

    async def _bound_already(self, namespace: str, name: str, uid: str, node_name: str) -> bool:
        """After a refused or unanswered binding: is the pod bound to this node already?"""
        try:
            live = await self.backend.get_pod(namespace, name)
        except ExtenderError:
            return False
        return (
            live is not None
            and pod_identity(live)[2] == uid
            and (live.get("spec") or {}).get("nodeName") == node_name
        )
