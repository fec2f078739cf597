"""Device binding conditions (KEP-5007; beta and on by default in 1.36), as the in-tree plugin's
PreBind and Filter treat them (docs/binding-conditions.md).

A device may name ``bindingConditions`` (and ``bindingFailureConditions``); the allocation result
copies them, and the pod may only be bound once the driver has set every binding condition to
``True`` in the claim's ``status.devices`` entry of that device (matched by driver, pool and
device). A failure condition ``True``, or ``allocationTimestamp`` plus the binding timeout passed
(upstream's ``DynamicResourcesArgs.bindingTimeout``, 600 s by default), ends the wait: the claim is
deallocated and the pod scheduled afresh.

kube-scheduler waits for an extender's bind only ``httpTimeout``, not minutes, so the extender's bind
waits a bounded time: it writes the allocation and reservation, records the pod's
``nominatedNodeName`` and a ``BindingConditionsPending`` Event (as the in-tree plugin does), and
waits up to ``binding_wait_seconds`` for the driver's report (woken by the claim's watch event, not
by polling); then it binds, or answers ``Error`` (``BindingConditionsPending``) keeping what it
wrote. The pod's next attempt finds its claims allocated on that node (their node selector pins it
there), and its bind binds the pod once the conditions are met. The checks are pure functions;
``release_unbindable`` is the one write.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from extender.core.errors import ExtenderError, Transient
from extender.core.model import DeviceResult, ResourceClaim
from extender.state.backend import Backend
from extender.state.bind.claim_writes import deallocate, delete_claim_with_uid
from extender.state.cache.store import ObjectStore
from extender.state.clock import epoch_seconds

log = structlog.get_logger()

__all__ = [
    "DEFAULT_BINDING_TIMEOUT_SECONDS",
    "DEFAULT_BINDING_WAIT_SECONDS",
    "PENDING_REASON",
    "BindingConditionsPending",
    "BindingTimeout",
    "BindingVerdict",
    "binding_verdict",
    "binding_verdicts",
    "deallocate_unbindable",
    "has_binding_conditions",
    "pending_message",
    "release_unbindable",
    "waiting_for",
]

#: ``DynamicResourcesArgs.bindingTimeout``'s default in 1.36.
DEFAULT_BINDING_TIMEOUT_SECONDS = 600.0
#: How long one bind waits for the driver to report the conditions before it answers ``Error`` (and
#: kube-scheduler tries again after its backoff): most of the bind's deadline (25 s of the deployed
#: ``httpTimeout`` of 30 s), so that a device attached within seconds is bound at once, as in-tree.
DEFAULT_BINDING_WAIT_SECONDS = 20.0
#: The Event reason the in-tree plugin records while a pod waits for its devices' conditions.
PENDING_REASON = "BindingConditionsPending"


class BindingConditionsPending(Transient):
    """The bind wrote the allocation, but the devices' binding conditions are not all met yet: the
    pod stays unbound, its claims stay allocated for its next attempt."""


def pending_message(node: str) -> str:
    return f"waiting for binding conditions for device on node {node}"


@dataclass(frozen=True, slots=True)
class BindingVerdict:
    """Where a claim's devices stand: every binding condition met (``ready``); or a failure
    (``failed``: upstream's ``device binding failed`` text, or the timeout's); else still pending."""

    ready: bool
    failed: str = ""
    timed_out: bool = False


def _conditions(
    raw_claim: Mapping[str, Any], driver: str, pool: str, device: str
) -> dict[str, Mapping[str, Any]] | None:
    """The conditions of the claim's ``status.devices`` entry for the device (the first that
    matches; ``shareID`` is not compared, as upstream does not), by type; None if it has none."""
    for entry in (raw_claim.get("status") or {}).get("devices") or []:
        if not isinstance(entry, Mapping):
            continue
        if (entry.get("driver"), entry.get("pool"), entry.get("device")) == (driver, pool, device):
            return {
                str(c.get("type")): c for c in entry.get("conditions") or [] if isinstance(c, Mapping) and c.get("type")
            }
    return None


def binding_verdict(
    claim: ResourceClaim,
    raw_claim: Mapping[str, Any],
    *,
    timeout_seconds: float = DEFAULT_BINDING_TIMEOUT_SECONDS,
    now: float | None = None,
) -> BindingVerdict:
    """``isClaimReadyForBinding`` and ``isClaimTimeout`` for one allocated claim: failure conditions
    first (any ``True`` fails), then every binding condition must be ``True``; a claim still pending
    past ``allocationTimestamp`` + ``timeout_seconds`` (wall clock ``now``) has timed out. A claim
    without binding conditions is ready."""
    allocation = claim.allocation
    if allocation is None:
        return BindingVerdict(ready=False)
    ready = True
    for result in allocation.devices:
        if not result.binding_conditions:
            continue
        conditions = _conditions(raw_claim, result.driver, result.pool, result.device)
        if conditions is None:
            ready = False
            continue
        for kind in result.binding_failure_conditions:
            condition = conditions.get(kind)
            if condition is not None and condition.get("status") == "True":
                return BindingVerdict(
                    ready=False,
                    failed=(
                        f"device binding failed: claim={claim.name}, reason={condition.get('reason') or ''}, "
                        f'message="{condition.get("message") or ""}"'
                    ),
                )
        if any((conditions.get(kind) or {}).get("status") != "True" for kind in result.binding_conditions):
            ready = False
    if ready:
        return BindingVerdict(ready=True)
    started = epoch_seconds(allocation.allocation_timestamp)
    current = time.time() if now is None else now
    if started is not None and started + timeout_seconds < current:
        return BindingVerdict(ready=False, failed=f"device binding timeout: claim={claim.name}", timed_out=True)
    return BindingVerdict(ready=False)


@dataclass(frozen=True, slots=True)
class BindingTimeout:
    """How long allocated devices may wait for their binding conditions (``seconds``, upstream's
    ``bindingTimeout``), measured on ``wall_clock`` against ``allocationTimestamp``: the filter's
    attempts and the bind read the same one."""

    seconds: float = DEFAULT_BINDING_TIMEOUT_SECONDS
    wall_clock: Callable[[], float] = time.time

    def verdicts(
        self, claims: Sequence[ResourceClaim], raw_claims: Mapping[str, Mapping[str, Any]]
    ) -> list[tuple[ResourceClaim, BindingVerdict]] | None:
        """``binding_verdicts`` now (the clock read only for claims with binding conditions)."""
        if not has_binding_conditions(claims):
            return None
        return binding_verdicts(claims, raw_claims, timeout_seconds=self.seconds, now=self.wall_clock())


def waiting_for(result: DeviceResult, raw_claim: Mapping[str, Any]) -> tuple[str, ...]:
    """The binding conditions of one allocated device not ``True`` yet (all of them while the
    driver has reported nothing); () for a device without any (the device map's "binding")."""
    if not result.binding_conditions:
        return ()
    conditions = _conditions(raw_claim, result.driver, result.pool, result.device) or {}
    return tuple(k for k in result.binding_conditions if (conditions.get(k) or {}).get("status") != "True")


def binding_verdicts(
    claims: Sequence[ResourceClaim],
    raw_claims: Mapping[str, Mapping[str, Any]],
    *,
    timeout_seconds: float,
    now: float,
) -> list[tuple[ResourceClaim, BindingVerdict]] | None:
    """Each claim's ``binding_verdict`` at wall-clock time ``now`` (``raw_claims``: the claims as
    stored, by key), or None when none of them has a device with binding conditions (the common
    case, answered cheaply)."""
    if not has_binding_conditions(claims):
        return None
    return [
        (c, binding_verdict(c, raw_claims.get(c.key) or {}, timeout_seconds=timeout_seconds, now=now)) for c in claims
    ]


def has_binding_conditions(claims: Iterable[ResourceClaim]) -> bool:
    """Whether any of the claims' allocated devices has binding conditions."""
    return any(
        result.binding_conditions
        for claim in claims
        if claim.allocation is not None
        for result in claim.allocation.devices
    )


async def deallocate_unbindable(backend: Backend, claim: ResourceClaim, pod_uid: str, verdict: BindingVerdict) -> bool:
    """Deallocate a claim whose devices failed or timed out binding (upstream's PostFilter: only a
    claim reserved for nobody or for this pod alone; ``allocation``, ``reservedFor`` and
    ``devices`` cleared). False when it is another pod's too, or the write failed (logged)."""
    if any(ref.uid != pod_uid for ref in claim.reserved_for):
        return False
    try:
        await deallocate(backend, claim, pod_uid)
    except ExtenderError as exc:
        log.warning("binding_conditions.deallocate_failed", claim=claim.key, reason=exc.reason)
        return False
    log.info("binding_conditions.deallocated", claim=claim.key, reason=verdict.failed)
    return True


async def release_unbindable(
    backend: Backend, store: ObjectStore, claim: ResourceClaim, pod_uid: str, verdict: BindingVerdict
) -> str:
    """Free a claim whose devices failed binding or timed out: the claim bind created for the pod's
    extended resources is deleted (as upstream's Unreserve and PostFilter delete it), any other is
    deallocated (``deallocate_unbindable``). Returns what was done ("deletion", "deallocation") or
    "" when nothing could be (logged)."""
    if claim.key in store.extended_claims.get(pod_uid, {}):
        try:
            await delete_claim_with_uid(backend, claim.namespace, claim.name, claim.uid)
        except ExtenderError as exc:
            log.warning("binding_conditions.delete_failed", claim=claim.key, reason=exc.reason)
            return ""
        log.info("binding_conditions.deleted", claim=claim.key, reason=verdict.failed)
        return "deletion"
    return "deallocation" if await deallocate_unbindable(backend, claim, pod_uid, verdict) else ""
