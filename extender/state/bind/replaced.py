"""Template claims the resourceclaim controller replaced: their devices moved to the new claim.

kube-controller-manager 1.36's resourceclaim controller can make a second claim from a pod's
template when its claim informer lags more than its mutation cache holds, and record that one in
the pod's status instead of the first (kubernetes#140217; fixed upstream by kubernetes#140227, not
in 1.36.3). A pod bound with it would never start: the kubelet prepares the claim the status
names, which nothing allocated, while the first claim holds the devices. Two moments:

- during a bind, before its binding: ``Binder._move_to_replacements`` moves what this module
  allows (``replacement``) with ``move``;
- after a bind (the binding itself makes the controller look at the pod again):
  ``ReplacedClaims`` remembers, for ``REPAIR_WINDOW_SECONDS`` after each bind, the template claims
  the bind wrote, and when the pod's status names another claim for one of them (seen on the
  pod's or the new claim's watch event), moves the devices the same way, as long as the pod has
  not started (a kubelet that has prepared the first claim keeps using it).

A move writes the new claim with the first one's allocation (finalizer, then status, reserved for
the pod), and only then undoes the first claim's writes, so that the devices never look free in
between. Only where that allocation is as valid for the new claim: made for the pod (controlled by
it) from the same spec, neither allocated nor reserved nor decided by another bind, and devices
taken outright (not shared between claims, no admin access, no binding conditions, whose driver
reports on the claim it was given).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from extender.core.errors import ExtenderError
from extender.core.model import AllocationResult, ResourceClaim
from extender.state.bind.claim_writes import Written, roll_back, write_allocation
from extender.state.cache.claims import PodClaims, controlling_pod, pod_claim_refs
from extender.state.cache.cluster import ClusterView
from extender.state.cache.pods import bound_node, pod_identity, pod_uid
from extender.state.filter.holds import record
from extender.state.stats import ServiceStats

__all__ = ["REPAIR_WINDOW_SECONDS", "ReplacedClaims", "move", "replacement"]

log = structlog.get_logger()

#: How long after a bind a replacement of its template claims is still looked for: the controller
#: makes it within seconds of the binding (its next sync of the pod), far less than this.
REPAIR_WINDOW_SECONDS = 120.0


def movable(result: AllocationResult) -> bool:
    """Whether an allocation can go to another claim as it is: devices taken outright, chosen by
    a scheduler (not a classic driver's controller)."""
    if result.controller:
        return False
    return not any(d.share_id is not None or d.admin_access or d.binding_conditions for d in result.devices)


def replacement(
    cluster: ClusterView, pod_key: str, uid: str, old_key: str, new_key: str, result: AllocationResult
) -> ResourceClaim | None:
    """The claim of ``new_key`` when the allocation ``result`` of the replaced claim ``old_key``
    can be moved to it as it is (see the module docstring), else None."""
    store = cluster.store
    claim = store.claims.get(new_key)
    entry = cluster.ledger.get(new_key)
    spec = store.claim_specs.get(new_key)
    if (
        claim is None
        or claim.allocation is not None
        or claim.reserved_for
        or (entry is not None and entry.pod_uid != uid)
        or spec is None
        or spec != store.claim_specs.get(old_key)
        or controlling_pod(store, new_key) != (pod_key, uid)
        or not movable(result)
    ):
        return None
    return claim


async def move(
    cluster: ClusterView,
    pod: Mapping[str, Any],
    node: str,
    moves: Mapping[str, tuple[ResourceClaim, AllocationResult]],
    written: list[Written],
) -> None:
    """For each replaced claim's key: its replacement and the allocation it gets. The replacements
    are recorded in the ledger and written (their records appended to ``written``, so that a
    failure can undo them), then the replaced claims' writes in ``written`` are undone and their
    ledger entries dropped. An undo that fails only logs: the controller frees a claim its pod
    no longer names."""
    namespace, name, uid = pod_identity(pod)
    claims = [claim for claim, _ in moves.values()]
    part = PodClaims(f"{namespace}/{name}", uid, all=claims, to_allocate=claims)
    record(cluster, part, node, [result for _, result in moves.values()], tentative=False)
    for claim, result in moves.values():
        written_ = Written(claim.key)
        written.append(written_)
        await write_allocation(cluster.backend, cluster.store, claim, result, pod, written_)
    undone = [written_ for written_ in written if written_.claim_key in moves]
    await roll_back(cluster.backend, undone, uid)
    for written_ in undone:
        written.remove(written_)
    for old_key in moves:
        cluster.ledger.drop(old_key, pod_uid=uid)
    log.info("bind.claim_moved", pod=f"{namespace}/{name}", moves={old: new.key for old, (new, _) in moves.items()})


@dataclass(slots=True)
class _Bound:
    """A pod a bind of ours bound: its UID and node, the template claims the bind wrote (pod
    claim name -> claim key), and when (the service's clock)."""

    uid: str
    node: str
    claims: dict[str, str]
    at: float


class ReplacedClaims:
    """Replacements made after a bind; see the module docstring. ``binding``: the UIDs of pods
    whose bind is running (that bind handles them itself)."""

    def __init__(
        self,
        cluster: ClusterView,
        stats: ServiceStats,
        *,
        binding: Container[str],
        window_seconds: float = REPAIR_WINDOW_SECONDS,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.stats = stats
        self.binding = binding
        self.window_seconds = window_seconds
        self.clock = clock if clock is not None else cluster.clock
        # by pod key, oldest first (a re-bound pod moves to the end)
        self._bound: dict[str, _Bound] = {}
        self._repairs: dict[str, asyncio.Task[None]] = {}
        self._stopped = False
        self.store.claim_listeners.append(self._changed)

    def bound(self, pod: Mapping[str, Any], node: str, claims: PodClaims) -> None:
        """A bind of ours bound ``pod`` to ``node`` with ``claims``: its template claims are
        watched for a replacement from now on."""
        self._expire()
        namespace, name, uid = pod_identity(pod)
        keys = {claim.key for claim in claims.all}
        written = {
            ref.name: f"{namespace}/{ref.claim}"
            for ref in pod_claim_refs(pod)
            if ref.template is not None and ref.claim and f"{namespace}/{ref.claim}" in keys
        }
        key = f"{namespace}/{name}"
        self._bound.pop(key, None)
        if written:
            self._bound[key] = _Bound(uid, node, written, self.clock())
            # a replacement the store showed while the bind ran (its events were left to the bind)
            self._changed("Pod", key)

    def watched(self, pod_key: str) -> bool:
        """Whether a replacement of the pod's template claims is looked for now (read only)."""
        return pod_key in self._bound

    async def idle(self) -> None:
        """Wait until no move is running (tests and orderly shutdown)."""
        while self._repairs:
            await asyncio.gather(*self._repairs.values(), return_exceptions=True)

    async def stop(self) -> None:
        """No new moves; those running are cancelled where they are (a move cut between its two
        halves leaves both claims holding the devices for the pod: the controller frees the one
        the pod no longer names)."""
        self._stopped = True  # no new moves from late events
        for task in list(self._repairs.values()):
            task.cancel()
        await asyncio.gather(*self._repairs.values(), return_exceptions=True)

    def _expire(self) -> None:
        """Forget the pods bound before the window, oldest first (only those are looked at)."""
        limit = self.clock() - self.window_seconds
        while self._bound:
            key, entry = next(iter(self._bound.items()))
            if entry.at >= limit:
                return
            del self._bound[key]

    def _changed(self, kind: str, key: str) -> None:
        """A store listener: the pod's own event, or one of a claim its pod controls (the new
        claim may arrive after the status naming it)."""
        if not self._bound or self._stopped:
            return
        if kind == "ResourceClaim":
            owner = controlling_pod(self.store, key)
            entry = None if owner is None else self._bound.get(owner[0])
            if owner is None or entry is None or key in entry.claims.values():
                return  # not a pod's watched here, or the claim the bind wrote (its own write, say)
            key = owner[0]
        elif kind == "Pod":
            entry = self._bound.get(key)
        else:
            return
        if entry is None or key in self._repairs:
            return
        if self.clock() - entry.at > self.window_seconds:
            del self._bound[key]  # past its window (``_expire`` runs only when a bind ends)
            return
        if not self._moves(key, entry):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a synchronous caller (a script): the next event finds it again
            return
        self._repairs[key] = loop.create_task(self._repair(key), name=f"move replaced claims of {key}")

    def _moves(self, key: str, entry: _Bound) -> dict[str, tuple[ResourceClaim, AllocationResult]]:
        """The moves the pod needs now (see the module docstring); drops the entry of a pod gone,
        re-created, bound elsewhere, or started. (The store may not show the binding yet: the
        watch brings it.)"""
        pod = self.store.pods.get(key)
        node = None if pod is None else bound_node(pod)
        if pod is None or pod_uid(pod) != entry.uid or (node and node != entry.node) or _started(pod):
            self._bound.pop(key, None)
            return {}
        if entry.uid in self.binding:
            return {}  # a bind of the pod runs (after a failed binding, say): it looks itself
        namespace = key.partition("/")[0]
        moves: dict[str, tuple[ResourceClaim, AllocationResult]] = {}
        for ref in pod_claim_refs(pod):
            old_key = entry.claims.get(ref.name)
            if old_key is None or not ref.claim or f"{namespace}/{ref.claim}" == old_key:
                continue
            old = self.store.claims.get(old_key)
            if old is None or old.allocation is None or not old.reserved_for:
                continue  # nothing to move (any more): the controller may have freed it
            if any(consumer.uid != entry.uid for consumer in old.reserved_for):
                continue  # reserved for others too: the undo would leave them the devices
            new = replacement(self.cluster, key, entry.uid, old_key, f"{namespace}/{ref.claim}", old.allocation)
            if new is not None:
                moves[old_key] = (new, old.allocation)
        return moves

    async def _repair(self, key: str) -> None:
        moved = False
        try:
            await self.cluster.backend.ensure_leader()  # a standby writes nothing
            entry = self._bound.get(key)
            pod = self.store.pods.get(key)
            moves = self._moves(key, entry) if entry is not None else {}
            if entry is None or pod is None or not moves:
                return
            # what the bind wrote to each replaced claim, to undo exactly that
            written = [Written(old, added_finalizer=True, set_allocation=True, added_reservation=True) for old in moves]
            try:
                await move(self.cluster, pod, entry.node, moves, written)
            except Exception as exc:  # whatever failed, the move's writes are undone
                # the replacements' writes are undone; the replaced claims keep the devices until
                # the pod's or a claim's next event tries again
                try:
                    await roll_back(self.cluster.backend, [w for w in written if w.claim_key not in moves], entry.uid)
                except Exception as undo:  # roll_back logs API failures itself; anything else, here
                    log.warning("bind.claim_move_undo_failed", pod=key, error=repr(undo))
                for new, _ in moves.values():
                    self.cluster.ledger.drop(new.key, pod_uid=entry.uid)
                reason = exc.reason if isinstance(exc, ExtenderError) else repr(exc)
                log.warning("bind.claim_move_failed", pod=key, reason=reason)
                self.stats.count_replaced("failed", len(moves))
                return
            names = {old: new.key for old, (new, _) in moves.items()}
            entry.claims = {name: names.get(claim, claim) for name, claim in entry.claims.items()}
            self.stats.count_replaced("moved_after_binding", len(moves))
            self.cluster.ledger.reconcile(self.store.claims, unreadable=self.store.invalid_claims)
            moved = True
        except ExtenderError as exc:
            log.info("bind.claim_move_skipped", pod=key, reason=exc.reason)  # not the leader
        finally:
            del self._repairs[key]
        if moved:
            self._changed("Pod", key)  # a replacement made while this one was written


def _started(pod: Mapping[str, Any]) -> bool:
    """Whether the kubelet has got past preparing the pod's claims: a phase past Pending, its
    sandbox ready (``PodReadyToStartContainers``, which comes after the claims are prepared), or a
    container running or ended. Containers merely waiting (``ContainerCreating``: the kubelet writes
    that before it prepares the claims, and keeps it while the unallocated claim fails) are not."""
    status = pod.get("status") or {}
    if status.get("phase") not in (None, "", "Pending"):
        return True
    for condition in status.get("conditions") or ():
        if isinstance(condition, dict) and (condition.get("type"), condition.get("status")) == (
            "PodReadyToStartContainers",
            "True",
        ):
            return True
    for container in [*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())]:
        state = (container.get("state") if isinstance(container, dict) else None) or {}
        if "running" in state or "terminated" in state:
            return True
    return False
