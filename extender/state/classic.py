"""Classic DRA: the scheduler's side of the negotiation with a driver's controller (spec/classic-dra.md §1.6).

A pod's unallocated classic claims (``PodClaims.classic``) are allocated by their drivers'
controllers; the scheduler and the drivers talk through the pod's PodSchedulingContext. The 1.31
in-tree plugin did this in PreScore, Reserve, PreBind and PostBind; an extender has filter and
bind, so ``ClassicNegotiator`` does it there:

- **filter** (``filter``): on top of the structured answer, the deny-list of
  ``extender.core.classic.node_problem``; then, if the published ``potentialNodes`` do not cover
  the nodes that pass, a publish of the new list is queued (``publish_potential``: asynchronous,
  one at a time per pod and coalesced, so filter never waits for the API server); and while some
  of several pending claims lack their driver's answer, ``Error`` ``waiting for resource driver to
  provide information`` (the scheduler's backoff is the retry: extenders get no queueing hints);
- **bind** (``allocate_for``): ``selectedNode`` is written, then the bind waits on the store's
  events until every classic claim is allocated (for that node), the driver reports the node
  unsuitable, a claim goes, or the wait's end comes; the bind then writes the structured claims
  (held in the in-flight ledger all along) and the binding, and deletes the context
  (``delete_context``);
- **recovery** (``request_deallocation``): the PostFilter of a classic claim allocated where the
  pod cannot run: ``selectedNode`` cleared, then ``deallocationRequested`` set with ``reservedFor``
  emptied in the same write (the API server forbids the flag beside consumers).

Every write goes through the backend and only on the leader (``Backend.ensure_leader``).
Publishing follows the plugin: Update the context if the store has it, server-side apply when the
update conflicts, Create it (named after the pod, the pod its controlling owner) when absent.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from extender.core.classic import (
    WAITING_FOR_DRIVER,
    check_context_owner,
    covers,
    may_select,
    node_problem,
    potential_nodes,
)
from extender.core.errors import DeadlineExceeded, ExtenderError, ObjectNotFound, Transient, WriteConflict
from extender.core.model import ResourceClaim
from extender.state.bind.claim_writes import json_copy
from extender.state.cache.claims import PodClaims
from extender.state.cache.cluster import ClusterView
from extender.state.cache.pods import bound_node, deleting, pod_identity, pod_key, pod_uid
from extender.state.clock import timeout_until
from extender.state.filter.verdicts import FilterOutcome

__all__ = ["CONTEXT_API_VERSION", "ClassicNegotiator", "ClassicStats"]

log = structlog.get_logger()

CONTEXT_API_VERSION = "resource.k8s.io/v1alpha3"

T = TypeVar("T")


@dataclass(slots=True)
class ClassicStats:
    """Counters of the negotiation (exported as metrics)."""

    #: PodSchedulingContext writes by what they set: "potentialNodes", "selectedNode", "cleared"
    publishes: dict[str, int]
    #: writes that failed (logged), by error class
    publish_failures: dict[str, int]
    #: binds that waited for a driver, and the seconds they waited
    waits: int = 0
    wait_seconds: float = 0.0
    #: deallocations requested of drivers
    deallocations: int = 0
    #: contexts deleted after their pod was bound
    deleted: int = 0

    def count(self, table: dict[str, int], key: str) -> None:
        table[key] = table.get(key, 0) + 1


class ClassicNegotiator:
    """See the module docstring. ``rng`` picks the 128 nodes published when more pass."""

    def __init__(self, cluster: ClusterView, *, rng: random.Random | None = None) -> None:
        self.cluster = cluster
        self.backend = cluster.backend
        self.store = cluster.store
        self.rng = rng if rng is not None else random.Random()
        self.stats = ClassicStats(publishes={}, publish_failures={})
        # Per pod key: the potentialNodes to publish next, the task publishing them, why the last
        # publish failed (told in the pod's "waiting" answer), and the pods whose bind writes.
        self._wanted: dict[str, tuple[Mapping[str, Any], tuple[str, ...]]] = {}
        self._publishers: dict[str, asyncio.Task[None]] = {}
        self._publish_failed: dict[str, str] = {}
        self._binding: set[str] = set()
        # Binds waiting for a driver, by namespace (``_changed`` wakes them), and their pods' keys.
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._waiting_pods: set[str] = set()
        self.store.claim_listeners.append(self._changed)

    # --- filter ---------------------------------------------------------------------------------

    def publish_if_needed(self, pod: Mapping[str, Any], claims: PodClaims, passing: list[str]) -> None:
        """Queue the write of ``potentialNodes`` unless the context covers ``passing`` already."""
        context = self.store.scheduling_contexts.get(claims.pod_key)
        if passing and not covers(context.potential_nodes if context is not None else (), passing):
            self.publish_potential(pod, potential_nodes(passing, self.rng))

    def narrow(self, claims: PodClaims, outcome: FilterOutcome) -> tuple[FilterOutcome, list[str]]:
        """The structured ``outcome`` narrowed by the pod's pending classic claims (a new
        outcome: the structured one may be shared), and the nodes that pass them (what the
        drivers should be asked about). Read-only."""
        if not claims.classic:
            return outcome, []
        passing: list[str] = []
        unresolvable = dict(outcome.unresolvable)
        for name in outcome.node_names:
            problem = node_problem(claims.classic, self.store.node(name))
            if problem is None:
                passing.append(name)
            else:
                unresolvable[name] = problem.reason
        narrowed = FilterOutcome(passing, failed=dict(outcome.failed), unresolvable=unresolvable)
        if not passing or may_select(claims.classic):
            # no node left: waiting for drivers that are asked about none would never end
            return narrowed, passing
        failure = self._publish_failed.get(claims.pod_key)
        waiting = WAITING_FOR_DRIVER + (f" (publishing potentialNodes failed: {failure})" if failure else "")
        return FilterOutcome([], error=waiting), passing

    def publish_potential(self, pod: Mapping[str, Any], nodes: tuple[str, ...]) -> None:
        """Queue a write of ``potentialNodes``: one publisher per pod, which writes the latest
        list wanted when it gets to it (a newer filter replaces an older wish)."""
        key = pod_key(pod)
        if key in self._binding:
            return  # its bind writes the context now
        self._wanted[key] = (pod, nodes)
        if key in self._publishers:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a synchronous caller (a script, a test): published by the next async one
            return
        self._publishers[key] = loop.create_task(self._publish_wanted(key), name=f"publish {key}")

    async def _publish_wanted(self, key: str) -> None:
        try:
            while key in self._wanted and key not in self._binding:
                pod, nodes = self._wanted.pop(key)
                context = self.store.scheduling_contexts.get(key)
                ours = context is not None and context.owner_uid == pod_uid(pod)
                if ours and context is not None and context.potential_nodes == nodes:
                    continue
                stored = self.store.pods.get(key)
                if stored is not None and bound_node(stored):
                    continue  # bound meanwhile: the negotiation is over
                try:
                    await self.backend.ensure_leader()
                    await self.write_context(pod, potential=nodes)
                except ExtenderError as exc:
                    self._publish_failed[key] = exc.reason
                    self.stats.count(self.stats.publish_failures, type(exc).__name__)
                    log.info("classic.publish_failed", pod=key, reason=exc.reason)
                else:
                    self._publish_failed.pop(key, None)
        finally:
            self._publishers.pop(key, None)

    async def quiesce(self, pod: Mapping[str, Any], until: float) -> None:
        """Stop publishing for a pod whose bind writes its context now: a queued publish is
        dropped (its list returned by ``_take_wanted``), one under way is waited for (at most
        until ``until`` on the service's clock), so that no late write overtakes the bind's or recreates a
        context the bind deleted. ``resume`` ends it."""
        key = pod_key(pod)
        self._binding.add(key)
        task = self._publishers.get(key)
        if task is not None:
            remaining = until - self.cluster.clock()
            await asyncio.wait([task], timeout=max(0.0, remaining))

    def publishing(self, key: str) -> bool:
        """Whether a publish for the pod ``namespace/name`` is queued or under way."""
        return key in self._publishers or key in self._wanted

    def quiesced(self, key: str) -> bool:
        """Whether publishing for the pod ``namespace/name`` is stopped because its bind writes the
        context now (from ``quiesce`` to ``resume``). Read only: it lets a caller (a test) know
        that a bind has reached that point instead of guessing with a sleep."""
        return key in self._binding

    def waiting_for_drivers(self, key: str) -> bool:
        """Whether a bind of the pod ``namespace/name`` has written ``selectedNode`` and is now
        waiting for the drivers to allocate (``allocate_for``). Read only, like ``quiesced``."""
        return key in self._waiting_pods

    def resume(self, pod: Mapping[str, Any]) -> None:
        self._binding.discard(pod_key(pod))

    def _take_wanted(self, key: str) -> tuple[str, ...] | None:
        wanted = self._wanted.pop(key, None)
        return None if wanted is None else wanted[1]

    async def idle(self) -> None:
        """Wait until no publish is queued or running (tests and orderly shutdown)."""
        while self._publishers:
            await asyncio.gather(*self._publishers.values(), return_exceptions=True)

    async def stop(self) -> None:
        for task in list(self._publishers.values()):
            task.cancel()
        await asyncio.gather(*self._publishers.values(), return_exceptions=True)

    # --- the context's writes ---------------------------------------------------------------------

    async def write_context(
        self,
        pod: Mapping[str, Any],
        *,
        potential: tuple[str, ...] | None = None,
        selected: str | None = None,
    ) -> dict[str, Any]:
        """Set the given fields of the pod's context (None: leave as is): Update it, apply it when
        the update conflicts, Create it when absent (``potentialNodes`` then includes the selected
        node, so that the driver checks it)."""
        namespace, name, uid = pod_identity(pod)
        key = f"{namespace}/{name}"
        what = "selectedNode" if selected else ("cleared" if selected == "" else "potentialNodes")
        stored = self.store.raw_scheduling_contexts.get(key)
        decoded = self.store.scheduling_contexts.get(key)
        check_context_owner(decoded, namespace, name, uid)
        written: dict[str, Any]
        try:
            if stored is None:
                try:
                    written = await self._create(pod, potential, selected)
                except WriteConflict as exc:
                    # It exists, and the store has not shown it: whose it is is unknown (an older
                    # pod's?), so it is not applied over; the next attempt reads it.
                    raise Transient(f"PodSchedulingContext {key} exists already: {exc.reason}") from exc
            else:
                new = json_copy(stored)
                spec = new.setdefault("spec", {})
                _set_spec(spec, potential, selected)
                if new == stored:
                    return stored
                try:
                    written = await self.backend.update_scheduling_context(new)
                except ObjectNotFound:
                    written = await self._create(pod, potential, selected)
        except WriteConflict:
            # Someone else (a driver's status write, another attempt) was first: apply the
            # fields we own, with the other one as we know it (apply without it would clear it).
            current = self.store.scheduling_contexts.get(key)
            if potential is None:
                potential = current.potential_nodes if current is not None else ()
            if selected is None:
                selected = current.selected_node if current is not None else ""
            body = self._new_context(pod, potential, selected)
            # Both fields, even empty: apply removes an omitted field only if this manager
            # owned it, and an update (another manager) set it.
            body["spec"] = {"potentialNodes": list(potential), "selectedNode": selected}
            written = await self.backend.apply_scheduling_context(body)
        self.stats.count(self.stats.publishes, what)
        log.info("classic.published", pod=key, field=what, node=selected, potential=len(potential or ()))
        return written

    async def _create(
        self, pod: Mapping[str, Any], potential: tuple[str, ...] | None, selected: str | None
    ) -> dict[str, Any]:
        nodes = tuple(potential or ())
        if selected and selected not in nodes:
            nodes = (*nodes[: 128 - 1], selected) if len(nodes) >= 128 else (*nodes, selected)
        return await self.backend.create_scheduling_context(self._new_context(pod, nodes, selected or ""))

    @staticmethod
    def _new_context(pod: Mapping[str, Any], potential: tuple[str, ...], selected: str) -> dict[str, Any]:
        namespace, name, uid = pod_identity(pod)
        spec: dict[str, Any] = {}
        _set_spec(spec, potential, selected)
        return {
            "apiVersion": CONTEXT_API_VERSION,
            "kind": "PodSchedulingContext",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": name,
                        "uid": uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": spec,
        }

    async def delete_context(self, pod: Mapping[str, Any]) -> None:
        """After the bind: the context has done its work (the driver would re-examine it every 30 s
        while it exists). Failures are logged only: the garbage collector removes it with the pod."""
        namespace, name, uid = pod_identity(pod)
        context = self.store.scheduling_contexts.get(f"{namespace}/{name}")
        if context is not None and context.owner_uid != uid:
            return  # an older pod's: not ours to delete
        try:
            await self.backend.delete_scheduling_context(namespace, name)
        except ObjectNotFound:
            return
        except ExtenderError as exc:
            log.info("classic.delete_failed", pod=f"{namespace}/{name}", reason=exc.reason)
            return
        self.stats.deleted += 1

    # --- bind -----------------------------------------------------------------------------------------

    def check_node(self, claims: PodClaims, node: str) -> None:
        """At bind: may a node be selected now, and is it still fine for the classic claims?"""
        if not may_select(claims.classic):
            raise Transient(WAITING_FOR_DRIVER)
        problem = node_problem(claims.classic, self.store.node(node))
        if problem is not None:
            raise Transient(f"node {node}: {problem.reason}", node=node)

    async def allocate_for(self, pod: Mapping[str, Any], claims: PodClaims, node: str, until: float) -> PodClaims:
        """Select ``node`` for the drivers and wait (until ``until`` on the service's clock) for them to
        allocate every pending classic claim; returns the pod's claims as they are then (the
        classic ones allocated). Raises ``Transient`` when a driver finds the node unsuitable, a
        claim goes, or the time runs out (``selectedNode`` stays set then, so that the driver can
        finish: the retry finds the claims allocated for the node)."""
        namespace, name, _ = pod_identity(pod)
        key = f"{namespace}/{name}"
        started = self.cluster.clock()
        event = asyncio.Event()
        self._waiters.setdefault(namespace, set()).add(event)
        # A pod the store shows now and no longer shows later was deleted (one the watch has not
        # shown yet is simply not there yet).
        in_store = key in self.store.pods
        try:
            await self.quiesce(pod, until)
            # a potentialNodes publish still queued goes out in the same write
            wanted = self._take_wanted(key)
            selecting = self.write_context(pod, selected=node, potential=wanted)
            await _within(self.cluster.clock, until, selecting, "selecting the node")
            self.stats.waits += 1
            self._waiting_pods.add(key)
            while True:
                event.clear()
                try:
                    current = self._driver_progress(pod, claims, node, in_store)
                except _Unsuitable:
                    # so that the driver stops trying the node (best effort, within the deadline)
                    with contextlib.suppress(DeadlineExceeded, ExtenderError):
                        await _within(self.cluster.clock, until, self.clear_selection(pod), "clearing the node")
                    raise
                if current is not None:
                    return current
                remaining = until - self.cluster.clock()
                if remaining <= 0:
                    raise Transient(
                        f"timed out waiting for resource driver to allocate claims for node {node}", node=node
                    )
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):  # no task per wake-up, as wait_for makes
                        await event.wait()
        finally:
            self._waiting_pods.discard(key)
            self.resume(pod)
            self.stats.wait_seconds += self.cluster.clock() - started
            waiters = self._waiters.get(namespace)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiters[namespace]

    def _driver_progress(
        self, pod: Mapping[str, Any], before: PodClaims, node: str, in_store: bool
    ) -> PodClaims | None:
        """The pod's claims once no classic claim is pending any more; None while the drivers are
        at work; raises when they cannot finish for ``node``."""
        namespace, name, uid = pod_identity(pod)
        stored = self.store.pods.get(f"{namespace}/{name}")
        if stored is not None and pod_uid(stored) == uid:
            if deleting(stored):
                raise Transient(f'pod "{namespace}/{name}" is being deleted')
            pod = stored
        elif in_store:
            raise Transient(f'pod "{namespace}/{name}" was deleted (or re-created) while its drivers allocated')
        for entry in before.classic:
            if entry.claim.key not in self.store.claims:
                raise Transient(f"resourceclaim {entry.claim.key} was deleted", claim=entry.claim.key)
        claims = self.cluster.claims(pod, from_templates=False)  # raises for a claim being deleted
        for entry in claims.classic:
            if entry.unsuitable is not None and node in entry.unsuitable:
                raise _Unsuitable(
                    f"resource driver reported node {node} unsuitable for claim {entry.claim.key}",
                    node=node,
                    claim=entry.claim.key,
                )
        return None if claims.classic else claims

    def _changed(self, kind: str, key: str) -> None:
        """Wake the binds waiting in the namespace of a changed claim, context or pod."""
        if not self._waiters:
            return
        for event in self._waiters.get(key.partition("/")[0], ()):
            event.set()

    async def clear_selection(self, pod: Mapping[str, Any]) -> None:
        """Unset ``selectedNode`` so that no driver allocates for it any more; raises when the
        write fails (logged)."""
        context = self.store.scheduling_contexts.get(pod_key(pod))
        if context is None or not context.selected_node:
            return
        try:
            await self.write_context(pod, selected="")
        except ExtenderError as exc:
            log.info("classic.clear_failed", pod=pod_key(pod), reason=exc.reason)
            raise

    # --- recovery -------------------------------------------------------------------------------------

    async def request_deallocation(self, pod: Mapping[str, Any], claim: ResourceClaim) -> None:
        """Ask the driver to deallocate a classic claim only this pod may use: first no node
        selected (the driver would allocate for it again at once: a failure to clear it stops
        here), then ``reservedFor`` emptied and ``deallocationRequested`` set, in one write."""
        await self.clear_selection(pod)
        uid = pod_uid(pod)
        raw = await self.backend.get_claim(claim.namespace, claim.name)
        status = raw.setdefault("status", {})
        if not status.get("allocation") or status.get("deallocationRequested"):
            return
        if any(ref.get("uid") != uid for ref in status.get("reservedFor") or []):
            raise Transient(f"claim {claim.key} got a consumer in the meantime", claim=claim.key)
        status.pop("reservedFor", None)
        status["deallocationRequested"] = True
        await self.backend.update_claim_status(raw)
        self.stats.deallocations += 1


async def _within(clock: Callable[[], float], until: float, write: Awaitable[T], step: str) -> T:
    """``write`` within the bind's time (``until`` on ``clock``): ``DeadlineExceeded`` after."""
    timeout = timeout_until(clock, until)
    try:
        async with timeout:
            return await write
    except TimeoutError:
        if not timeout.expired():
            raise
        raise DeadlineExceeded(f"bind deadline passed while {step} for the resource drivers") from None


class _Unsuitable(Transient):
    """A driver reported the selected node unsuitable for one of its claims."""


def _set_spec(spec: dict[str, Any], potential: tuple[str, ...] | None, selected: str | None) -> None:
    if potential is not None:
        if potential:
            spec["potentialNodes"] = list(potential)
        else:
            spec.pop("potentialNodes", None)
    if selected is not None:
        if selected:
            spec["selectedNode"] = selected
        else:
            spec.pop("selectedNode", None)
