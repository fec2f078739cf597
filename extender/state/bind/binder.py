"""The bind verb: decide at arrival, wait for template claims if need be, write, bind.

docs/pipeline.md ("one pod's timeline") walks through it. In short:

1. ``bind`` decides the moment the request has been read, synchronously: the pod from the watch
   cache (read from the API only when the cache lacks it or has another UID), the pod's holds
   released, the allocator asked about the chosen node (``Allocator.answer``), the allocation put
   into the in-flight ledger, so that every later filter and prioritize sees it;
2. a template claim the resourceclaim controller has not created yet is waited for (at most
   ``claim_wait_seconds``), and then the same devices are recorded under the claim's own key
   where they are still a valid allocation of it (``_still_valid``), else decided again;
3. the writes of ``claim_writes.py`` (a template claim the resourceclaim controller replaced
   meanwhile has its devices moved to the new claim, ``replaced.py``, which also watches the pod
   for such a replacement after the binding), then (a gang's member) the bind barrier of ``barrier.py``,
   which lets the binding go only once every member of the gang's pass has written its claims,
   then the binding; any failure rolls back exactly what was written, but for a binding sent and
   never answered, which keeps the claims (undoing them could leave a bound pod without its
   devices).

Before step 1, a replica that may not write (``Backend.ensure_leader``: a standby) refuses the bind
with ``NotLeader``, having decided and written nothing. The whole bind runs within one deadline
(``deadline_seconds``): steps 1 to 3 must be done ``rollback_reserve`` before it, the undo of a
failure within the rest, so that nothing this bind sends lands after kube-scheduler has given up
on it (``DeadlineExceeded``). The in-flight ledger's TTL is derived from the deadline
(``ledger_ttl``); docs/configuration.md relates the two to kube-scheduler's ``httpTimeout``.

A bind of a pod whose bind is still running is refused; a repeated bind after success succeeds
without allocating twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import weakref
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from extender.core.allocator import Allocation
from extender.core.errors import (
    ClaimNotCreated,
    DeadlineExceeded,
    DoesNotFit,
    ExtenderError,
    ObjectNotFound,
    OutcomeUnknown,
    Transient,
    WriteConflict,
)
from extender.core.extended import CANNOT_FIT_RESOURCE
from extender.core.model import AllocationResult, NodeInfo, ResourceClaim
from extender.core.podgroups import POD_GROUP_CONSUMER
from extender.state import cooperative
from extender.state.bind.barrier import GangBarrier, GangRound
from extender.state.bind.claim_writes import Written, roll_back, write_allocation, write_reservation
from extender.state.bind.conditions import (
    DEFAULT_BINDING_WAIT_SECONDS,
    PENDING_REASON,
    BindingConditionsPending,
    BindingTimeout,
    BindingVerdict,
    pending_message,
    release_unbindable,
)
from extender.state.bind.extended_writes import create_extended_claim, record_extended_status
from extender.state.bind.replaced import ReplacedClaims, move, replacement
from extender.state.cache.claims import PodClaims, controlling_pod, pod_claim_refs
from extender.state.cache.cluster import ClusterView
from extender.state.cache.pods import bound_node, nominated_node, pod_group_name, pod_identity, pod_key, pod_uid
from extender.state.classic import ClassicNegotiator
from extender.state.clock import timeout_until
from extender.state.filter.holds import Holds, record
from extender.state.stats import ServiceStats

__all__ = [
    "DEFAULT_BIND_DEADLINE_SECONDS",
    "DEFAULT_CLAIM_WAIT_SECONDS",
    "LEDGER_TTL_MARGIN_SECONDS",
    "Binder",
    "ledger_ttl",
    "rollback_reserve",
]

log = structlog.get_logger()

#: How long a bind waits for the resourceclaim controller to create a pod's template claims: most
#: of the bind's time (``DEFAULT_BIND_DEADLINE_SECONDS`` less the rollback reserve and 5 s for the
#: writes). The in-tree plugin keeps such a pod out of the scheduling queue until its claims exist
#: (PreEnqueue); an extender sees the pod at once, so a busy controller's lag (4-15 s seen at
#: 5000 nodes, docs/performance.md) is waited for here instead of failing the attempt.
DEFAULT_CLAIM_WAIT_SECONDS = 15.0
#: A bind's whole time: reading the pod, waiting for claims, the writes with their retries, the
#: binding, and the rollback of a failure. A little under the ``httpTimeout`` of 30 s the
#: deployment gives kube-scheduler's extender config, so that kube-scheduler never gives up on a
#: bind (and tries another node) while its writes still land (docs/configuration.md).
DEFAULT_BIND_DEADLINE_SECONDS = 25.0
#: How long after a bind's deadline its in-flight entries stay: the watch must show the last
#: write the bind made before the deadline (normally within milliseconds; a re-list after an API
#: server restart within seconds).
LEDGER_TTL_MARGIN_SECONDS = 60.0


def rollback_reserve(deadline_seconds: float) -> float:
    """The end of a bind's deadline kept for undoing a failure: a quarter, at most 5 s."""
    return min(5.0, deadline_seconds / 4)


def ledger_ttl(deadline_seconds: float) -> float:
    """The in-flight ledger's TTL for a bind deadline: no entry expires while its bind may still
    write, nor before the watch has had time to show the last write."""
    return deadline_seconds + LEDGER_TTL_MARGIN_SECONDS


def _in(waiters: Mapping[str, list[asyncio.Event]], namespace: str) -> list[asyncio.Event]:
    """The events of the waiting binds of pods in ``namespace`` (given as ``"NAMESPACE/"``)."""
    return [event for pod, events in waiters.items() if pod.startswith(namespace) for event in events]


def _group_consumer(claims: PodClaims) -> dict[str, str]:
    """The ``reservedFor`` entry of a PodGroup's claim: the group (upstream writes exactly this)."""
    assert claims.group is not None
    api_group, resource = POD_GROUP_CONSUMER
    return {"apiGroup": api_group, "resource": resource, "name": claims.group.name, "uid": claims.group.uid}


#: How many times one bind follows the resourceclaim controller's replacement of a template claim
#: (``_move_to_replacements``) before it gives up and fails the attempt as before.
MAX_CLAIM_MOVES = 3
#: How long a bind waits for the watch to show a replacement the pod's status names already (the
#: controller creates the claim before it writes the status, but the claim and pod watches are
#: separate streams): seconds, and never past the writes' deadline.
REPLACEMENT_WAIT_SECONDS = 5.0

#: The kinds whose every change can alter what the allocator finds on a node for the same claims,
#: whatever the node: a decision made before a wait is kept only if none of them changed meanwhile.
_DEVICE_INPUT_KINDS = ("ResourceSlice", "DeviceClass", "DeviceTaintRule")


@dataclass(frozen=True, slots=True)
class _Basis:
    """What a decision over provisional claims read besides the devices' use, taken just before
    it: the device inputs' change counts (``ObjectStore.kind_changes``), the node as decoded, and
    the pod's allocated claims with their allocations (constraints span them)."""

    inputs: tuple[int, ...]
    node: NodeInfo
    allocated: tuple[tuple[str, AllocationResult | None], ...]


class _CannotMove:
    """A replacement of a template claim whose devices cannot move to it (``_replacements``)."""


@dataclass(slots=True)
class _Decision:
    """What a bind decided at arrival: the pod, the node, its claims and their new allocations
    (in ``claims.to_allocate`` order), already recorded in the ledger; for a decision over
    template claims not created yet, what it read (``_Basis``), to keep it once they exist."""

    pod: Mapping[str, Any]
    node: str
    claims: PodClaims
    results: tuple[AllocationResult, ...]
    basis: _Basis | None = None
    #: ``ObjectStore.revision`` when the claims were resolved, if the store did not change until
    #: the decision was recorded (else -1): the wait for template claims need not resolve them
    #: again before anything changed.
    revision: int = -1


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
        binding_timeout: BindingTimeout | None = None,
        binding_wait_seconds: float = DEFAULT_BINDING_WAIT_SECONDS,
        deadline_seconds: float = DEFAULT_BIND_DEADLINE_SECONDS,
        binding: set[str],
        classic: ClassicNegotiator | None = None,
        barrier: GangBarrier | None = None,
    ) -> None:
        if deadline_seconds <= 0:
            raise ValueError("the bind deadline must be positive")
        self.cluster = cluster
        #: Monotonic seconds for the bind's deadline and its waits (the service's clock).
        self.clock = cluster.clock
        self.backend = cluster.backend
        self.store = cluster.store
        self.ledger = cluster.ledger
        self.holds = holds
        self.stats = stats
        self.claim_wait_seconds = claim_wait_seconds
        self.binding_timeout = binding_timeout if binding_timeout is not None else BindingTimeout()
        self.binding_wait_seconds = binding_wait_seconds
        # Binds waiting for their devices' binding conditions, by pod key.
        self._condition_waiters: dict[str, list[asyncio.Event]] = {}
        #: Pods whose bind has announced its pending binding conditions and waits for the driver's
        #: report (``waiting_for_conditions``); the waiters above are registered before, so that no
        #: report is missed while the announcement is written.
        self._announced_waits: dict[str, int] = {}
        self.deadline_seconds = deadline_seconds
        self.binding = binding
        self.classic = classic if classic is not None else ClassicNegotiator(cluster)
        #: The gang bind barrier (``barrier.py``); None: every member binds on its own.
        self.barrier = barrier
        # Binds waiting for template claims, by pod key (see ``_with_created_claims``).
        self._claim_waiters: dict[str, list[asyncio.Event]] = {}
        # Binds waiting for another member's write of a PodGroup claim (``_group_claim_settled``).
        self._group_waiters: dict[str, list[asyncio.Event]] = {}
        self.store.claim_listeners.append(self._claim_or_pod_changed)
        #: Template claims the controller replaces after a bind of ours (``replaced.py``).
        self.replaced = ReplacedClaims(cluster, stats, binding=binding)
        # A lock per PodGroup claim being allocated, held while a bind decides and writes it
        # (weak: a lock nobody holds or waits for goes)
        self._group_claim_locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def waiting_for_claims(self, pod_key: str) -> bool:
        """Whether a bind of the pod (``namespace/name``) is waiting right now for the
        resourceclaim controller to create its template claims (``_with_created_claims``), or for
        the watch to show a claim made in place of one it wrote (``_replacements_shown``). Read
        only; it lets a caller (a test) know that a bind has reached that wait instead of
        guessing with a sleep."""
        return pod_key in self._claim_waiters

    async def bind(self, namespace: str, name: str, uid: str, node_name: str) -> None:
        # Before anything is decided or written: a replica that may not write refuses here, so a
        # standby sends no request that changes the cluster (``Backend.ensure_leader``).
        await self.backend.ensure_leader()
        deadline = self.clock() + self.deadline_seconds
        writes_by = deadline - rollback_reserve(self.deadline_seconds)
        pod: Mapping[str, Any] | None = self.store.pods.get(f"{namespace}/{name}")
        if pod is None or (uid and pod_uid(pod) != uid):
            pod = await self._read_pod(namespace, name, writes_by)  # the one await before the decision
        actual_uid = pod_uid(pod)
        if uid and actual_uid != uid:
            raise WriteConflict(f'pod "{namespace}/{name}" has UID {actual_uid}, not {uid}: it was re-created')
        if actual_uid in self.binding:
            raise Transient(f'pod "{namespace}/{name}" is being bound already')
        self.binding.add(actual_uid)  # before the decision: a long search lets other requests run
        # a gang member's binding waits until every member of its pass has written its claims
        gang = self.barrier.join(pod) if self.barrier is not None else None
        held: dict[str, asyncio.Lock] = {}  # the PodGroup claims' locks this bind holds

        async def before_binding() -> None:
            # the group's claims are written: the next member's bind may go on with them
            for lock in held.values():
                lock.release()
            held.clear()
            if gang is not None:
                await gang.gate(actual_uid)

        try:
            if gang is not None:
                gang.check()  # a member of the pass failed already: nothing to write
            for key, lock in self._group_claim_locks_of(pod):
                await lock.acquire()  # one bind at a time allocates a group's claim; the next sees it
                held[key] = lock
            for key in held:
                await self._group_claim_settled(key, actual_uid, f"{namespace}/{name}", writes_by)
            decision = await cooperative.run(self._decide, pod, node_name)
            # a group claim another member allocated meanwhile is just used: its lock goes now
            allocating = {c.key for c in decision.claims.to_allocate} if decision is not None else set()
            for key in [key for key in held if key not in allocating]:
                held.pop(key).release()
            if decision is None:
                # a retry after success: nothing left to do but what the first may not have done
                await self._end_negotiation(pod, deadline)
                return
            try:
                if decision.claims.provisional:
                    decision = await self._with_created_claims(decision, writes_by)
                if decision.claims.classic:
                    decision = await self._with_classic_allocated(decision, writes_by)
                decision = await self._write(decision, writes_by, deadline, before_binding, gang)
            except asyncio.CancelledError:
                # What reached the API is unknown: the entries keep the devices taken until the
                # store shows the claims (reconcile) or their TTL ends.
                raise
            except BaseException:
                for claim in decision.claims.to_allocate:
                    self.ledger.drop(claim.key, pod_uid=actual_uid)  # this bind's own entries only
                raise
        except BaseException as exc:
            if gang is not None:  # before the gate opened, the whole round gives up
                gang.fail(actual_uid, exc.reason if isinstance(exc, ExtenderError) else type(exc).__name__)
            raise
        finally:
            for lock in held.values():
                lock.release()
            self.binding.discard(actual_uid)
            if gang is not None and self.barrier is not None:
                self.barrier.finished(gang, actual_uid)
        # This bind's entries leave the ledger now that the store shows its writes (reconcile);
        # only its own claims (and entries added since the last look) are looked at: hundreds of
        # other binds may be in flight, and ``ClusterView.refresh`` settles theirs before every
        # decision.
        self.ledger.reconcile(
            self.store.claims, unreadable=self.store.invalid_claims, changed=[c.key for c in decision.claims.all]
        )
        self.replaced.bound(decision.pod, decision.node, decision.claims)
        self.cluster.nominations.drop(actual_uid)  # a preemptor's wait is over
        await self._end_negotiation(decision.pod, deadline)

    @contextlib.contextmanager
    def _claim_waiter(self, pod_key: str, registry: dict[str, list[asyncio.Event]]) -> Iterator[asyncio.Event]:
        """An event set on every change of a claim that may concern the pod's bind
        (``_claim_or_pod_changed``), registered in ``registry`` while the block runs."""
        event = asyncio.Event()
        registry.setdefault(pod_key, []).append(event)
        try:
            yield event
        finally:
            waiters = registry.get(pod_key, [])
            if event in waiters:
                waiters.remove(event)
            if not waiters:
                registry.pop(pod_key, None)

    async def _group_claim_settled(self, key: str, uid: str, pod_key: str, until: float) -> None:
        """With a group claim's lock: when another member's bind has just written the claim (its
        entry in the ledger), wait (never past ``until``) until the store shows it allocated, so
        that this bind uses that allocation instead of allocating the claim a second time."""
        with self._claim_waiter(pod_key, self._group_waiters) as event:
            while True:
                event.clear()
                stored = self.store.claims.get(key)
                entry = self.ledger.get(key)
                if (
                    stored is None
                    or stored.allocation is not None
                    or entry is None
                    or entry.tentative
                    or entry.pod_uid == uid
                    or entry.pod_uid not in self.binding  # that bind is over: its write failed or was cut
                ):
                    return
                remaining = until - self.clock()
                if remaining <= 0:
                    return  # the decision's write then meets the allocation and fails the bind
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await event.wait()

    def _group_claim_locks_of(self, pod: Mapping[str, Any]) -> list[tuple[str, asyncio.Lock]]:
        """The locks of the pod's PodGroup claims not allocated yet, in key order (none for pods
        of no group). Members of a gang are bound together: without the lock two of them would
        allocate the group's claim twice and one write would lose (upstream's #140053)."""
        if not pod_group_name(pod):
            return []
        try:
            claims = self.cluster.claims(pod)
        except ExtenderError:
            return []  # the decision raises it
        out = []
        for key in sorted(c.key for c in claims.to_allocate if c.key in claims.group_claims):
            lock = self._group_claim_locks.get(key)
            if lock is None:
                lock = self._group_claim_locks[key] = asyncio.Lock()
            out.append((key, lock))
        return out

    async def _end_negotiation(self, pod: Mapping[str, Any], deadline: float) -> None:
        """Classic DRA: the pod is bound, its context has done its work. Deleted within the
        deadline (a failure only logs: the garbage collector removes it with the pod), after any
        publish still under way, which could otherwise recreate it."""
        key = pod_key(pod)
        if key not in self.store.scheduling_contexts and not self.classic.publishing(key):
            return
        try:
            with contextlib.suppress(TimeoutError):
                async with timeout_until(self.clock, deadline):
                    await self.classic.quiesce(pod, deadline)
                    await self.classic.delete_context(pod)
        finally:
            self.classic.resume(pod)

    async def _read_pod(self, namespace: str, name: str, writes_by: float) -> Mapping[str, Any]:
        timeout = timeout_until(self.clock, writes_by)
        try:
            async with timeout:
                pod = await self.backend.get_pod(namespace, name)
        except TimeoutError:
            if not timeout.expired():
                raise
            raise DeadlineExceeded(
                f'pod "{namespace}/{name}": bind deadline of {self.deadline_seconds:g}s passed while reading the pod'
            ) from None
        if pod is None:
            raise ObjectNotFound(f'pod "{namespace}/{name}" not found')
        return pod

    # --- the decision -----------------------------------------------------------------------------

    def _decide(self, pod: Mapping[str, Any], node_name: str) -> _Decision | None:
        """Allocate for the chosen node and record it in the ledger, without awaiting anything.
        None when the pod is already bound there with its claims reserved (a repeated bind)."""
        namespace, name, uid = pod_identity(pod)
        bound_to = bound_node(pod)
        if bound_to:
            claims = self.cluster.claims(pod, from_templates=False)
            claims = claims.on_node(self.store.node(bound_to)) or claims  # device-plugin resources: none
            if bound_to == node_name and all(
                claims.reserved(c) for c in claims.all if not claims.in_flight_only(c.key)
            ):
                return None
            raise WriteConflict(f'pod "{namespace}/{name}" is already bound to node {bound_to}')
        self.holds.release(uid, bound_to=node_name)
        revision = self.store.revision
        claims = self._on_node(self.cluster.claims(pod), node_name)
        planned: dict[str, AllocationResult] = {}
        for key in claims.group_claims:
            # the gang's hold of its PodGroup's claim (under whichever member): this bind allocates
            # it now, as planned where it still can (the binds of one group claim are serialized)
            entry = self.ledger.get(key)
            if entry is not None and entry.tentative:
                self.ledger.drop(key)
                planned[key] = entry.result
        if claims.classic:
            self.classic.check_node(claims, node_name)
        if planned:
            return self._decide_as_planned(pod, node_name, claims, planned)
        basis = self._basis(claims, node_name) if claims.provisional else None
        results = self._allocate(claims, node_name)
        # a search that let others run may have seen the store change, and the pod resolved may be
        # older than the store's (read from the API, or kept across a wait): then the mark is of no use
        current = self.store.revision == revision and self._current(pod) is pod
        return _Decision(pod, node_name, claims, results, basis, revision if current else -1)

    def _device_inputs(self) -> tuple[int, ...]:
        """The change counts of ``_DEVICE_INPUT_KINDS``, now."""
        kind_changes = self.store.kind_changes
        return tuple(kind_changes[kind] for kind in _DEVICE_INPUT_KINDS)

    def _basis(self, claims: PodClaims, node_name: str) -> _Basis:
        return _Basis(
            inputs=self._device_inputs(),
            node=self.store.node(node_name),
            allocated=tuple((c.key, c.allocation) for c in claims.allocated),
        )

    def _decide_as_planned(
        self, pod: Mapping[str, Any], node_name: str, claims: PodClaims, planned: Mapping[str, AllocationResult]
    ) -> _Decision:
        """The decision with the gang plan's devices for its PodGroup claims (the plan chose them
        so that every member's node suits them: F3), the pod's own claims allocated around them;
        a planned device something else took meanwhile (or a node the planned allocation does not
        suit) has the claim allocated afresh."""
        in_use = self.store.in_use_state().devices
        usable = {
            key: result
            for key, result in planned.items()
            if not any(d.device_id in in_use for d in result.devices if d.share_id is None and not d.admin_access)
        }
        if not usable:
            return _Decision(pod, node_name, claims, self._allocate(claims, node_name))
        fixed = [dataclasses.replace(c, allocation=usable[c.key]) for c in claims.to_allocate if c.key in usable]
        rest = [c for c in claims.to_allocate if c.key not in usable]
        variant = dataclasses.replace(claims, to_allocate=rest, allocated=[*claims.allocated, *fixed])
        try:
            results = dict(zip((c.key for c in rest), self._allocate(variant, node_name), strict=True))
        except DoesNotFit:
            return _Decision(pod, node_name, claims, self._allocate(claims, node_name))
        group_part = dataclasses.replace(claims, to_allocate=[c for c in claims.to_allocate if c.key in usable])
        record(self.cluster, group_part, node_name, [usable[c.key] for c in group_part.to_allocate], tentative=False)
        results.update(usable)
        return _Decision(pod, node_name, claims, tuple(results[c.key] for c in claims.to_allocate))

    def _on_node(self, claims: PodClaims, node_name: str) -> PodClaims:
        """The claims as they are on the chosen node (``PodClaims.on_node``: extended resources
        the node serves with a device plugin are not the claim's)."""
        on_node = claims.on_node(self.store.node(node_name))
        if on_node is None:
            raise DoesNotFit(f"node {node_name} no longer fits the pod: {CANNOT_FIT_RESOURCE}", node=node_name)
        return on_node

    def _allocate(self, claims: PodClaims, node_name: str) -> tuple[AllocationResult, ...]:
        """The allocation on the chosen node, recorded in the ledger. A search that let others run
        is used only if nothing it read on that node changed meanwhile."""
        search = self.cluster.watched_search((node_name,))
        # devices held for a preemptor of equal or higher priority are not this pod's to take
        nominated = self.cluster.nominated_state(claims.pod_uid, claims.priority, node_name)
        allocator = self.cluster.allocator(claims, budget=search.budget, allocated=nominated)
        answer = allocator.answer(self.store.node(node_name))
        current = search.unchanged()
        if current is not None and node_name not in current:
            raise Transient(
                f"node {node_name}: its devices changed during a long allocation; try again", node=node_name
            )
        if current is not None:
            self._check_claims_still_free(claims)
        if not isinstance(answer, Allocation):
            raise DoesNotFit(f"node {node_name} no longer fits the pod: {answer.reason}", node=node_name)
        record(self.cluster, claims, node_name, answer.results, tentative=False)
        return answer.results

    def _check_claims_still_free(self, claims: PodClaims) -> None:
        """After a search that let others run: none of the claims it allocated may have been
        allocated, or decided by another pod's bind, meanwhile (a shared claim, say); recording
        this allocation would replace that one's ledger entry and leave its devices unguarded."""
        for claim in claims.to_allocate:
            stored = self.store.claims.get(claim.key)
            entry = self.ledger.get(claim.key)
            if (stored is not None and stored.allocation is not None) or (
                entry is not None and entry.pod_uid != claims.pod_uid
            ):
                raise Transient(f"claim {claim.key} got allocated elsewhere in the meantime", claim=claim.key)

    async def _with_created_claims(self, decision: _Decision, writes_by: float) -> _Decision:
        """Wait (at most ``claim_wait_seconds``, and never past ``writes_by``) until the
        resourceclaim controller has created the pod's template claims and the store shows them,
        then decide again for the real claims (``_decide_again``)."""
        pod_key = decision.claims.pod_key
        started = self.clock()
        deadline = min(started + self.claim_wait_seconds, writes_by)
        # nothing in the store changed since the decision found the claims provisional: wait first
        unchanged = decision.revision == self.store.revision
        with self._claim_waiter(pod_key, self._claim_waiters) as event:
            while True:
                if not unchanged:
                    # the watch may not show this pod yet (bind read it from the API): then the copy
                    # bind has; a pod deleted or re-created meanwhile runs into the deadline or,
                    # later, the binding's UID precondition
                    pod = self._current(decision.pod)
                    claims = self.cluster.claims(pod)  # narrowed to the node by ``_decide_again``
                    if not claims.provisional:
                        break
                unchanged = False
                remaining = deadline - self.clock()
                if remaining <= 0:
                    raise ClaimNotCreated(f'pod "{pod_key}": ResourceClaim not created yet')
                event.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):  # no task per wake-up, as wait_for makes
                        await event.wait()
        self.stats.claim_waits += 1
        self.stats.claim_wait_seconds += self.clock() - started
        return await cooperative.run(self._decide_again, decision, pod, claims)

    async def _with_classic_allocated(self, decision: _Decision, writes_by: float) -> _Decision:
        """Classic DRA: select the node for the drivers and wait for them to allocate the pod's
        classic claims (``ClassicNegotiator.allocate_for``), the structured allocations held in
        the ledger meanwhile; then decide again over the claims as allocated, which checks that
        the drivers' allocations can be used on the node. The wait leaves a quarter of what
        remains (at most 2 s) for the writes."""
        until = writes_by - min(2.0, max(0.0, writes_by - self.clock()) / 4)
        claims = await self.classic.allocate_for(decision.pod, decision.claims, decision.node, until)
        return await cooperative.run(self._decide_again, decision, self._current(decision.pod), claims)

    def _decide_again(self, decision: _Decision, pod: Mapping[str, Any], claims: PodClaims) -> _Decision:
        """The provisional entries give their devices back, the real claims get their own: the
        same devices where they are still a valid allocation of the real claims (``_still_valid``),
        else a new one."""
        for claim in decision.claims.to_allocate:
            self.ledger.drop(claim.key, pod_uid=decision.claims.pod_uid)
        claims = self._on_node(claims, decision.node)
        kept = self._still_valid(decision, claims)
        if kept is not None:
            self._check_claims_still_free(claims)  # none allocated, or decided by another bind, meanwhile
            record(self.cluster, claims, decision.node, kept, tentative=False)
            self.stats.claim_decisions_kept += 1
            return _Decision(pod, decision.node, claims, kept)
        return _Decision(pod, decision.node, claims, self._allocate(claims, decision.node))

    def _still_valid(self, decision: _Decision, claims: PodClaims) -> tuple[AllocationResult, ...] | None:
        """The devices decided before the wait for template claims, when they are still a valid
        allocation of the real claims on the node (the in-tree plugin, too, keeps what it decided at
        Reserve through PreBind; a device freed meanwhile could have made a new decision choose
        another); None when the allocator must decide again. Valid means: the claims are those
        decided for (each template claim made from the spec it was decided for, any other claim the
        very same), nothing the allocator reads of the node's devices changed (slices, classes,
        taint rules, the node's labels; the pod's allocated claims), and no device is taken by
        another claim now. Anything whose check needs more than that decides again: a device
        shared between claims or used with admin access, a node whose devices draw on shared
        counters (others' allocations since may have used them up), devices held for a preemptor,
        classic claims, extended resources and PodGroup claims."""
        basis = decision.basis
        if (
            basis is None
            or claims.provisional
            or claims.classic
            or claims.group_claims
            or claims.extended is not None
            or self.cluster.nominations
        ):
            return None
        self.cluster.refresh()  # expired entries go, as before any decision
        if self._device_inputs() != basis.inputs:
            return None
        node = self.store.node(decision.node)
        if node != basis.node or tuple((c.key, c.allocation) for c in claims.allocated) != basis.allocated:
            return None
        before, now = decision.claims.to_allocate, claims.to_allocate
        if len(before) != len(now):
            return None
        for old, new in zip(before, now, strict=True):
            spec = decision.claims.provisional.get(old.key)
            if spec is None:
                if (old.key, old.uid) != (new.key, new.uid):  # a spec never changes: the same claim
                    return None
            elif self.store.claim_specs.get(new.key) != spec:
                return None
        view = self.store.snapshot().cached_view(node, self.cluster.features)
        if view is None or view.counter_pools:
            return None
        taken = self.store.in_use_state().devices
        for result in decision.results:
            for device in result.devices:
                if device.share_id is not None or device.admin_access or device.device_id in taken:
                    return None
        return decision.results

    def _claim_or_pod_changed(self, kind: str, key: str) -> None:
        """Wake the binds waiting for a pod's template claims (``_with_created_claims``), for
        another member's write of a PodGroup claim (``_group_claim_settled``) or for their devices'
        binding conditions (``_await_binding_conditions``)."""
        namespace = key.partition("/")[0] + "/"
        if self._condition_waiters and kind == "ResourceClaim":
            for pod, events in self._condition_waiters.items():
                if pod.startswith(namespace):
                    for event in events:
                        event.set()
        if self._group_waiters:  # rare (gangs), and a group claim is no one member's: by namespace
            groups = self._group_waiters.get(key, ()) if kind == "Pod" else _in(self._group_waiters, namespace)
            for event in groups:
                event.set()
        if not self._claim_waiters:
            return
        if kind == "Pod":
            targets = self._claim_waiters.get(key, ())
        elif kind == "ResourceClaim" and (owner := controlling_pod(self.store, key)) is not None:
            # A template claim wakes the bind of the pod it was made for only: with hundreds of binds
            # waiting for a lagging controller, waking them all for every claim costs each one a
            # resolution of its claims per event. And only once the pod's status names it: the
            # controller creates the claim first, then records it in the pod's status, whose event
            # wakes the bind again (a claim the status does not name cannot end the wait).
            owner_key, owner_uid = owner
            if owner_key not in self._claim_waiters or not self._may_be_named(owner_key, owner_uid, key):
                return
            targets = self._claim_waiters[owner_key]
        else:
            targets = _in(self._claim_waiters, namespace)
        for event in targets:
            event.set()

    def _may_be_named(self, pod_key: str, uid: str, claim_key: str) -> bool:
        """Whether the pod of ``uid`` names the claim in its status, or the store cannot say: it
        holds no such pod (its bind read the pod from the API: the watch has not shown it, or
        shows an earlier pod of the same name)."""
        pod = self.store.pods.get(pod_key)
        if pod is None or pod_uid(pod) != uid:
            return True
        name = claim_key.partition("/")[2]
        statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or ()
        return any(isinstance(entry, dict) and entry.get("resourceClaimName") == name for entry in statuses)

    # --- the writes -------------------------------------------------------------------------------

    async def _write(
        self,
        decision: _Decision,
        writes_by: float,
        deadline: float,
        before_binding: Callable[[], Awaitable[None]] | None = None,
        gang: GangRound | None = None,
    ) -> _Decision:
        """The claim writes, then ``before_binding`` (the gang's bind barrier), then the binding,
        all before ``writes_by``; returns the decision as written (``_move_to_replacements`` may
        have changed its claims). On failure exactly what
        was written is undone, before ``deadline``. A binding sent and never answered (or still
        in flight at ``writes_by``) keeps the claims: undoing them could leave a bound pod
        without its devices; kept, they pin the pod's next attempt to this node (and the
        resourceclaim controller frees them if the pod goes away)."""
        pod, claims = decision.pod, decision.claims
        namespace, name, uid = pod_identity(pod)
        written: list[Written] = []
        moved: list[str] = []  # the keys of replacement claims this bind moved devices to
        keep_writes = False
        step = "claim writes"
        timeout = timeout_until(self.clock, writes_by)
        try:
            try:
                async with timeout:
                    results = dict(zip((c.key for c in claims.to_allocate), decision.results, strict=True))
                    for claim in claims.all:
                        record_ = Written(claim.key)
                        written.append(record_)
                        if claim.key in results:
                            result = results[claim.key]
                            if claims.extended_new and claim.key == claims.extended_key:
                                claim = await create_extended_claim(
                                    self.backend, self.ledger, claims, claim, result, pod, decision.node, record_
                                )
                            consumer = _group_consumer(claims) if claim.key in claims.group_claims else None
                            await write_allocation(
                                self.backend, self.store, claim, result, pod, record_, consumer=consumer
                            )
                            self.stats.allocations += 1
                        elif not claims.reserved(claim):
                            await write_reservation(self.backend, self.store, claim, pod, record_)
                        if claims.extended is not None and (claim.key == claims.extended_key or record_.created):
                            await record_extended_status(self.backend, self._current(pod), claims, claim)
                    step = "binding conditions"
                    await self._await_binding_conditions(decision, [r.claim_key for r in written], writes_by)
                    # a gang's member's too, before its round's gate (which the PodGroup claims' locks
                    # wait for: held a little longer in the rare case of a replacement to wait for)
                    step = "the move to a replacement claim"
                    decision = await self._move_to_replacements(decision, written, moved, writes_by)
                    if before_binding is not None:
                        # before the gate too: once it opened, the gang's other members bind
                        self._check_claims_not_replaced(decision)
                        step = "the gang's bind barrier"
                        await before_binding()
                    self._check_claims_not_replaced(decision)
                    step = "the binding"
                    await self._bind_pod(namespace, name, uid, decision.node, deadline)
            except TimeoutError:
                if not timeout.expired():
                    raise
                if step == "binding conditions":
                    keep_writes = True  # written and waiting for the devices: the next attempt binds
                    raise BindingConditionsPending(pending_message(decision.node), node=decision.node) from None
                if step == "the binding":
                    # Sent or not, made or not: unknown. Made after all? Then this bind succeeded.
                    with contextlib.suppress(TimeoutError):
                        async with timeout_until(self.clock, deadline):
                            if await self._bound_already(namespace, name, uid, decision.node):
                                return decision
                    keep_writes = True
                raise DeadlineExceeded(
                    f'pod "{namespace}/{name}": bind deadline of {self.deadline_seconds:g}s passed during {step}'
                    + ("; its claims are kept for the pod's next attempt" if keep_writes else ""),
                    node=decision.node,
                ) from None
            except OutcomeUnknown:
                if step == "the binding":
                    keep_writes = True
                raise
            except BindingConditionsPending:
                keep_writes = True  # the allocation waits for the devices; the next attempt binds
                raise
        except Exception as exc:
            if gang is not None:  # the other members give up now, not after this rollback
                gang.fail(uid, exc.reason if isinstance(exc, ExtenderError) else type(exc).__name__)
            if not keep_writes:
                await self._roll_back(written, uid, deadline)
                for record_ in written:
                    if record_.created:  # its entry moved to the created claim's key
                        self.ledger.drop(record_.claim_key, pod_uid=uid)
            for key in moved:  # as the decision's own entries (``bind``)
                self.ledger.drop(key, pod_uid=uid)
            raise
        return decision

    async def _move_to_replacements(
        self, decision: _Decision, written: list[Written], moved: list[str], writes_by: float
    ) -> _Decision:
        """After the claim writes, before the binding: where the pod's status now names, for a
        template claim this bind wrote, a claim the controller made in its place (kubernetes#140217,
        ``replaced.py``), the devices go to that claim (``replaced.move``) where they can as they
        are (``replaced.replacement``); a replacement the store does not show yet is waited for
        (``REPLACEMENT_WAIT_SECONDS``). Up to ``MAX_CLAIM_MOVES`` moves; the decision as it now
        stands is returned, and a replacement that cannot be moved is left to the check."""
        # a reserve for the move and the binding after it (as ``_with_classic_allocated`` keeps)
        now = self.clock()
        until = min(writes_by - min(2.0, max(0.0, writes_by - now) / 4), now + REPLACEMENT_WAIT_SECONDS)
        moves_made = 0
        while moves_made < MAX_CLAIM_MOVES:
            pod = self._current(decision.pod)
            moves = self._replacements(decision, pod)
            if moves is None:
                if not await self._replacements_shown(decision, until):
                    return decision
                continue
            if not moves or isinstance(moves, _CannotMove):
                return decision
            moves_made += 1
            moved.extend(claim.key for claim, _ in moves.values())
            await move(self.cluster, pod, decision.node, moves, written)
            self.stats.count_replaced("moved", len(moves))
            swap = {old: claim for old, (claim, _) in moves.items()}
            claims = dataclasses.replace(
                decision.claims,
                all=[swap.get(c.key, c) for c in decision.claims.all],
                to_allocate=[swap.get(c.key, c) for c in decision.claims.to_allocate],
            )
            decision = _Decision(pod, decision.node, claims, decision.results)
        return decision

    async def _replacements_shown(self, decision: _Decision, until: float) -> bool:
        """Wait until the store shows the replacements the pod's status names (woken by the pod's
        and its claims' changes, ``_claim_or_pod_changed``); False once ``until`` has passed."""
        with self._claim_waiter(decision.claims.pod_key, self._claim_waiters) as event:
            while self._replacements(decision, self._current(decision.pod)) is None:
                remaining = until - self.clock()
                if remaining <= 0:
                    return False
                event.clear()  # after the check, with no await between: no change is missed
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await event.wait()
        return True

    def _replacements(
        self, decision: _Decision, pod: Mapping[str, Any]
    ) -> dict[str, tuple[ResourceClaim, AllocationResult]] | _CannotMove | None:
        """The template claims this bind allocated that ``pod``'s status has replaced, each with
        its replacement and the allocation it gets, when every one can be moved. Empty when
        nothing was replaced, ``_CannotMove`` when something was but cannot be moved, None when
        a replacement the status names is not in the store yet."""
        namespace = pod_identity(pod)[0]
        before = {ref.name: ref.claim for ref in pod_claim_refs(decision.pod) if ref.template is not None}
        written = {claim.key for claim in decision.claims.all}
        results = dict(zip((c.key for c in decision.claims.to_allocate), decision.results, strict=True))
        moves: dict[str, tuple[ResourceClaim, AllocationResult]] = {}
        missing = False
        for ref in pod_claim_refs(pod):
            if ref.template is None or not ref.claim or f"{namespace}/{ref.claim}" in written:
                continue
            old_key = f"{namespace}/{before.get(ref.name)}"
            result = results.get(old_key)
            new_key = f"{namespace}/{ref.claim}"
            if result is None:
                return _CannotMove()
            if new_key not in self.store.claims and new_key not in self.store.invalid_claims:
                missing = True
                continue
            claim = replacement(
                self.cluster, decision.claims.pod_key, decision.claims.pod_uid, old_key, new_key, result
            )
            if claim is None:
                return _CannotMove()
            moves[old_key] = (claim, result)
        return None if missing else moves

    def _check_claims_not_replaced(self, decision: _Decision) -> None:
        """Before the binding: the pod's status must still name the template claims this bind
        wrote. kube-controller-manager 1.36's resourceclaim controller can make a second claim for
        a pod whose first one its informer has not shown yet (kubernetes#140217; fixed upstream by
        kubernetes#140227, not in 1.36.3) and record that one in the pod's status instead: bound
        now, the pod would run with a claim nothing allocated. The bind has moved what it could to
        the new claim (``_move_to_replacements``); for anything else, Transient: the writes are
        undone and the next attempt allocates the claim the status names. A gang's member too:
        beside its own, its status names its PodGroup's claim, the one this bind resolved (through
        that status or the group's)."""
        pod = self._current(decision.pod)
        namespace = pod_identity(pod)[0]
        written = {claim.key for claim in decision.claims.all}
        for ref in pod_claim_refs(pod):
            if ref.template is not None and ref.claim and f"{namespace}/{ref.claim}" not in written:
                raise Transient(
                    f'pod "{decision.claims.pod_key}": its status names ResourceClaim {ref.claim} for '
                    f'"{ref.name}", not the claim this bind allocated (the resourceclaim controller made '
                    "another); the allocation is undone for the next attempt",
                    claim=f"{namespace}/{ref.claim}",
                )

    def waiting_for_conditions(self, pod_key: str) -> bool:
        """Whether a bind of the pod (``namespace/name``) is waiting right now for its devices'
        binding conditions, its pending state announced (``_await_binding_conditions``: the
        nominatedNodeName written or failed, the Event queued); read only, for tests."""
        return pod_key in self._announced_waits

    def _binding_verdicts(self, keys: list[str]) -> list[tuple[ResourceClaim, BindingVerdict]] | None:
        """Each claim's binding verdict, None when none of the claims has binding conditions.
        Raises ``Transient`` for a claim gone or deallocated meanwhile (the bind wrote them all)."""
        claims = []
        for key in keys:
            claim = self.store.claims.get(key)
            if claim is None or claim.allocation is None:
                raise Transient(f"claim {key} got deallocated in the meantime", claim=key)
            claims.append(claim)
        return self.binding_timeout.verdicts(claims, self.store.raw_claims)

    async def _await_binding_conditions(self, decision: _Decision, keys: list[str], writes_by: float) -> None:
        """After the claim writes: the pod is bound only once every binding condition of its
        devices is met (``conditions.py``). Pending: the pod's ``nominatedNodeName`` and a
        ``BindingConditionsPending`` Event, as in-tree, then a wait for the driver's report (woken
        by every change of a claim in the pod's namespace) of at most ``binding_wait_seconds``,
        ended a second before ``writes_by``; still pending then, ``BindingConditionsPending`` is
        answered and the writes are kept for the next attempt. A failure (or the binding timeout)
        deallocates the claims concerned (reserved for this pod alone) and fails the bind."""
        if self._binding_verdicts(keys) is None:
            return
        uid = pod_uid(decision.pod)
        until = min(self.clock() + self.binding_wait_seconds, writes_by - 1.0)
        event = asyncio.Event()
        pod_key = decision.claims.pod_key
        waiters = self._condition_waiters.setdefault(pod_key, [])
        waiters.append(event)
        announced = waiting = False
        try:
            while True:
                event.clear()  # before reading: a report arriving from now on wakes the wait below
                verdicts = self._binding_verdicts(keys)
                if verdicts is None or all(v.ready for _, v in verdicts):
                    self.stats.binding_conditions_met += 1
                    return
                failed = [(claim, v) for claim, v in verdicts if v.failed]
                if failed:
                    for claim, verdict in failed:
                        await release_unbindable(self.backend, self.store, claim, uid, verdict)
                    raise Transient(failed[0][1].failed, claim=failed[0][0].key, node=decision.node)
                message = pending_message(decision.node)
                if not announced:
                    announced = True
                    self.stats.binding_conditions_pending += 1
                    await self._announce_pending(decision, message)
                remaining = until - self.clock()
                if remaining <= 0:
                    raise BindingConditionsPending(message, node=decision.node)
                if not waiting:
                    waiting = True
                    self._announced_waits[pod_key] = self._announced_waits.get(pod_key, 0) + 1
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):  # no task per wake-up, as wait_for makes
                        await event.wait()
        finally:
            waiters.remove(event)
            if not waiters:
                self._condition_waiters.pop(pod_key, None)
            if waiting:
                left = self._announced_waits.pop(pod_key) - 1
                if left:
                    self._announced_waits[pod_key] = left

    def _current(self, pod: Mapping[str, Any]) -> Mapping[str, Any]:
        """The pod as the store holds it now (its status may have moved since the bind read it),
        else ``pod`` itself."""
        namespace, name, uid = pod_identity(pod)
        stored = self.store.pods.get(f"{namespace}/{name}")
        return stored if stored is not None and pod_uid(stored) == uid else pod

    async def _announce_pending(self, decision: _Decision, message: str) -> None:
        """What the in-tree plugin makes visible of a pod waiting for its devices: a Normal Event
        ``BindingConditionsPending`` and ``status.nominatedNodeName`` (a failure only logs)."""
        namespace, name, uid = pod_identity(decision.pod)
        self.backend.record_event(namespace, name, uid, kind="Normal", reason=PENDING_REASON, message=message)
        if nominated_node(decision.pod) == decision.node:
            return
        try:
            await self.backend.set_nominated_node(namespace, name, uid, decision.node)
        except ExtenderError as exc:  # as kube-scheduler: logged, the wait goes on
            log.warning("bind.nominate_failed", pod=f"{namespace}/{name}", reason=exc.reason)

    async def _bind_pod(self, namespace: str, name: str, uid: str, node: str, deadline: float) -> None:
        """The binding; a refusal or a lost answer is looked into (before ``deadline``): the pod
        may be bound there already by this very request or an earlier bind of ours."""
        try:
            await self.backend.bind_pod(namespace, name, uid, node)
        except (WriteConflict, OutcomeUnknown):
            # refused (the cache lagged an earlier bind of ours) or unanswered (made after all?)
            with contextlib.suppress(TimeoutError):
                async with timeout_until(self.clock, deadline):
                    if await self._bound_already(namespace, name, uid, node):
                        return
            raise

    async def _roll_back(self, written: list[Written], uid: str, deadline: float) -> None:
        """``roll_back`` before ``deadline``; what it could not undo by then is left to the pod's
        next attempt (a claim reserved for it pins it) or the resourceclaim controller."""
        try:
            async with timeout_until(self.clock, deadline):
                await roll_back(self.backend, written, uid)
        except TimeoutError:
            log.warning("bind.rollback_unfinished", claims=[w.claim_key for w in written if w.wrote])

    async def _bound_already(self, namespace: str, name: str, uid: str, node_name: str) -> bool:
        """After a refused or unanswered binding: is the pod bound to this node already?"""
        try:
            live = await self.backend.get_pod(namespace, name)
        except ExtenderError:
            return False
        return live is not None and pod_uid(live) == uid and bound_node(live) == node_name
