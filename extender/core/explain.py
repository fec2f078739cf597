"""Why a pod's claims do not fit a node, as structured data and one-line messages.

``explain_node`` first runs the real ``Allocator``. When the claims fit, the explanation is short.
When they do not, it counts, per claim and request (and firstAvailable subrequest), how the node's
devices fall through the allocator's checks:

    devices of usable pools -> match the device class -> also match the request selectors
        -> free (not held by other claims, in-flight ones included)
        -> usable (not blocked by an untolerated taint, exhausted shared counters or capacity)

and reports incomplete or invalid pools. Counting reuses the allocator's own pieces (prepared
requests, combined selector results per slice, available counters, taint and capacity checks), so
the numbers follow the same rules as the search. When every request has enough usable devices on
its own but the allocator still finds no fit, a few more allocator runs with a claim's constraints
(or the other claims) left out tell whether a matchAttribute/distinctAttribute constraint or the
combination of requests is to blame.

Nothing here raises for a CEL or class problem: those are reported in the explanation. The
node-level ``message`` is the short, stable, node-agnostic text the scheduler would show
(``cannot allocate all claims``, ``invalid resource pools were encountered`` or the fatal error);
``detail`` is the one-line human summary of the first cause found.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from extender.core.allocator import Allocation, Allocator, taint_blocks
from extender.core.answers import CANNOT_ALLOCATE, Unresolvable
from extender.core.capacity import capacity_fits
from extender.core.cel import CelCompileError, CelRuntimeError, SelectorCache
from extender.core.errors import ExtenderError
from extender.core.model import (
    ALLOCATION_MODE_ALL,
    AllocatedState,
    DeviceClass,
    ExactRequest,
    Features,
    NodeInfo,
    ResourceClaim,
    ResourceSlice,
)
from extender.core.pools import CounterKey, DeviceEntry, Pool, PoolNodeSelectionError, SliceSnapshot
from extender.core.quantity import Quantity

__all__ = [
    "CANNOT_ALLOCATE",
    "FITS",
    "VERDICT_BLOCKED",
    "VERDICT_ERROR",
    "VERDICT_FITS",
    "VERDICT_IN_USE",
    "VERDICT_NO_ALTERNATIVE",
    "VERDICT_NO_CLASS_MATCH",
    "VERDICT_NO_SELECTOR_MATCH",
    "VERDICT_TOO_FEW",
    "ClaimExplanation",
    "ConstraintExplanation",
    "NodeExplanation",
    "PoolExplanation",
    "RequestExplanation",
    "explain_node",
]

#: ``message`` of a node where the claims fit.
FITS = "all claims fit"

# Request verdicts: the first check a request falls short at, or "fits" when the counts suffice.
VERDICT_FITS = "fits"
VERDICT_ERROR = "error"  # a selector cannot be evaluated, the class is missing, ...
VERDICT_NO_CLASS_MATCH = "no-class-match"
VERDICT_NO_SELECTOR_MATCH = "no-selector-match"
VERDICT_TOO_FEW = "too-few-matches"
VERDICT_IN_USE = "in-use"
VERDICT_BLOCKED = "blocked"  # free, but untolerated taints / counters / capacity rule them out
VERDICT_NO_ALTERNATIVE = "no-alternative-fits"  # firstAvailable: no subrequest fits

_ALL_FEATURES = Features()
_COMBINATION = "not all together (they compete for the same devices or shared counters)"


# --- the explanation ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestExplanation:
    """Counts for one request or subrequest on one node; each count is a subset of the one before.

    ``blocked_by_*`` count free devices that one check rules out (a device can be blocked by several);
    ``usable`` counts free devices that none rules out. For ``All`` requests ``wanted`` is the number
    of matching devices the allocator would have to take (all of them, capacity permitting).
    A firstAvailable request has its alternatives in ``subrequests`` and no counts of its own
    (they stay 0 and are left out of ``to_dict``).
    """

    request: str  # "req" or "req/sub"
    device_class: str
    wanted: int
    class_matches: int
    selector_matches: int
    free: int
    blocked_by_taint: int
    blocked_by_counters: int
    blocked_by_capacity: int
    message: str
    usable: int = 0
    verdict: str = VERDICT_FITS
    all_devices: bool = False
    admin_access: bool = False
    error: str | None = None
    subrequests: tuple[RequestExplanation, ...] = ()

    @property
    def fits(self) -> bool:
        return self.verdict == VERDICT_FITS

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"request": self.request}
        if self.subrequests:
            out["subrequests"] = [sub.to_dict() for sub in self.subrequests]
        else:
            out.update(
                deviceClass=self.device_class,
                allocationMode=ALLOCATION_MODE_ALL if self.all_devices else "ExactCount",
                wanted=self.wanted,
                classMatches=self.class_matches,
                selectorMatches=self.selector_matches,
                free=self.free,
                blockedByTaint=self.blocked_by_taint,
                blockedByCounters=self.blocked_by_counters,
                blockedByCapacity=self.blocked_by_capacity,
                usable=self.usable,
            )
            if self.admin_access:
                out["adminAccess"] = True
        out["verdict"] = self.verdict
        out["message"] = self.message
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class ConstraintExplanation:
    """One claim constraint; ``blocking`` when leaving it out lets the pod fit on this node."""

    index: int
    requests: tuple[str, ...]
    match_attribute: str | None
    distinct_attribute: str | None
    blocking: bool = False

    @property
    def label(self) -> str:
        if self.match_attribute:
            return f"constraint #{self.index} (matchAttribute {self.match_attribute})"
        return f"constraint #{self.index} (distinctAttribute {self.distinct_attribute})"

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"index": self.index, "requests": list(self.requests)}
        if self.match_attribute:
            out["matchAttribute"] = self.match_attribute
        if self.distinct_attribute:
            out["distinctAttribute"] = self.distinct_attribute
        out["blocking"] = self.blocking
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimExplanation:
    claim: str  # namespace/name
    requests: tuple[RequestExplanation, ...]
    constraints: tuple[ConstraintExplanation, ...] = ()
    message: str = ""  # empty when nothing about this claim alone stops it

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "claim": self.claim,
            "requests": [r.to_dict() for r in self.requests],
            "constraints": [c.to_dict() for c in self.constraints],
        }
        if self.message:
            out["message"] = self.message
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolExplanation:
    """A pool the node sees: ``status`` is "ok", "incomplete" or "invalid" (then ``reason``)."""

    driver: str
    pool: str
    status: str
    devices: int = 0
    reason: str | None = None

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"driver": self.driver, "pool": self.pool, "status": self.status}
        out["devices"] = self.devices
        if self.reason is not None:
            out["reason"] = self.reason
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeExplanation:
    node: str
    fits: bool
    #: Short, stable, node-agnostic scheduler text (FailedNodes / Error).
    message: str
    claims: tuple[ClaimExplanation, ...] = ()
    #: One-line human summary of the first cause found ("" when the claims fit).
    detail: str = ""
    pools: tuple[PoolExplanation, ...] = ()
    #: The allocator's fatal error (CEL, missing class, ...): fails the pod on every node.
    error: str | None = None
    #: Invalid pools: the node can never fit as things stand (FailedAndUnresolvableNodes).
    unresolvable: bool = False

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"node": self.node, "fits": self.fits, "message": self.message}
        if self.detail:
            out["detail"] = self.detail
        if self.error is not None:
            out["error"] = self.error
        if self.unresolvable:
            out["unresolvable"] = True
        out["pools"] = [p.to_dict() for p in self.pools]
        out["claims"] = [c.to_dict() for c in self.claims]
        return out


# --- entry point ----------------------------------------------------------------------------


def explain_node(
    claims: Sequence[ResourceClaim],
    node: NodeInfo,
    *,
    snapshot: SliceSnapshot,
    classes: Mapping[str, DeviceClass],
    allocated: AllocatedState | None = None,
    features: Features = _ALL_FEATURES,
    selectors: SelectorCache | None = None,
) -> NodeExplanation:
    """Explain whether and why ``claims`` (the pod's unallocated claims, in pod order) fit ``node``."""
    allocated = allocated if allocated is not None else AllocatedState()
    if selectors is None:
        selectors = SelectorCache(consumable_capacity=features.consumable_capacity)
    allocator = Allocator(
        claims,
        classes=classes,
        snapshot=snapshot,
        allocated=allocated,
        features=features,
        selectors=selectors,
    )
    error: str | None = None
    unresolvable = False
    try:
        answer = allocator.answer(node)  # the filter's own answer for the node
    except ExtenderError as exc:  # fatal for the pod: CEL, missing class, too many devices, ...
        message = error = exc.reason
    else:
        if isinstance(answer, Allocation):
            return NodeExplanation(node=node.name, fits=True, message=FITS)
        message, unresolvable = answer.reason, isinstance(answer, Unresolvable)

    pools, pool_error = _gather_pools(snapshot, node, features)
    counter = _Counter(allocator, pools, selectors=selectors, features=features, allocated=allocated)
    claim_explanations = [counter.claim(c) for c in range(len(claims))]
    node_note = ""
    if error is None and all(r.fits for ce in claim_explanations for r in ce.requests):
        node_note = _Diagnosis(allocator, node).run(claim_explanations)
    return NodeExplanation(
        node=node.name,
        fits=False,
        message=message,
        claims=tuple(claim_explanations),
        detail=_detail(error or pool_error, claim_explanations, pools, node_note),
        pools=tuple(_pool_explanation(p) for p in pools),
        error=error,
        unresolvable=unresolvable,
    )


def _gather_pools(snapshot: SliceSnapshot, node: NodeInfo, features: Features) -> tuple[tuple[Pool, ...], str | None]:
    try:
        return snapshot.pools_for(node, features), None
    except PoolNodeSelectionError as exc:
        return (), f"gather pool information: {exc}"


def _pool_explanation(pool: Pool) -> PoolExplanation:
    if pool.incomplete:
        reason = "not all of the pool's resourceSliceCount slices are published (being updated)"
        return PoolExplanation(driver=pool.driver, pool=pool.name, status="incomplete", reason=reason)
    if pool.invalid_reason is not None:
        return PoolExplanation(
            driver=pool.driver,
            pool=pool.name,
            status="invalid",
            devices=len(pool.entries),
            reason=pool.invalid_reason,
        )
    return PoolExplanation(driver=pool.driver, pool=pool.name, status="ok", devices=len(pool.entries))


def _detail(error: str | None, claims: Sequence[ClaimExplanation], pools: Sequence[Pool], node_note: str) -> str:
    """The first cause, most specific first."""
    if error is not None:
        return error
    for claim in claims:
        if claim.message:
            return f"claim {claim.claim}: {claim.message}"
    problems = [
        f"pool {p.driver}/{p.name} is {'incomplete' if p.incomplete else 'invalid: ' + str(p.invalid_reason)}"
        for p in pools
        if not p.usable
    ]
    if problems:
        return "; ".join(problems)
    return node_note or "no combination of devices satisfies all requests"


# --- counting -------------------------------------------------------------------------------

#: Shared counters left per counter set, as ``Allocator.counters_left`` gives them.
_Counters = Mapping[CounterKey, Mapping[str, Quantity]]


@dataclass(slots=True)
class _Tally:
    class_matches: int = 0
    selector_matches: int = 0
    free: int = 0
    taint: int = 0
    #: The blocking taints, as ``key=value:Effect``, in the order first met.
    taints: dict[str, None] = field(default_factory=dict)
    counters: int = 0
    capacity: int = 0
    usable: int = 0
    #: For All requests: matching devices that pass the capacity check (what "all" means, §5),
    #: and how many of those other claims hold.
    all_set: int = 0
    all_in_use: int = 0
    error: str | None = None


class _Counter:
    """Counts one node's devices through the allocator's checks, request by request."""

    def __init__(
        self,
        allocator: Allocator,
        pools: tuple[Pool, ...],
        *,
        selectors: SelectorCache,
        features: Features,
        allocated: AllocatedState,
    ) -> None:
        self.allocator = allocator
        self.selectors = selectors
        self.features = features
        self.allocated = allocated
        self.pools = tuple(p for p in pools if p.usable)  # the allocator never picks from the others
        self.has_devices = any(p.entries for p in self.pools)

    def claim(self, c: int) -> ClaimExplanation:
        claim = self.allocator.claims[c]
        requests: list[RequestExplanation] = []
        for r, request in enumerate(claim.requests):
            if request.first_available:
                subs = tuple(
                    self.request(c, r, s, f"{request.name}/{sub.name}", sub)
                    for s, sub in enumerate(request.first_available)
                )
                requests.append(_alternatives(request.name, subs))
            elif request.exactly is not None:
                requests.append(self.request(c, r, None, request.name, request.exactly))
            else:
                requests.append(
                    _failed(request.name, "", "unsupported request type (neither exactly nor firstAvailable set)")
                )
        first_problem = next((r for r in requests if not r.fits), None)
        constraints = tuple(
            ConstraintExplanation(
                index=i,
                requests=constraint.requests,
                match_attribute=constraint.match_attribute,
                distinct_attribute=constraint.distinct_attribute,
            )
            for i, constraint in enumerate(claim.constraints)
        )
        message = f"request {first_problem.request}: {first_problem.message}" if first_problem else ""
        return ClaimExplanation(claim=claim.key, requests=tuple(requests), constraints=constraints, message=message)

    def request(self, c: int, r: int, s: int | None, label: str, spec: ExactRequest) -> RequestExplanation:
        try:
            # The allocator's own preparation: class lookup, selector order and error prefixes.
            check = self.allocator.check_request(c, r, s)
        except ExtenderError as exc:
            return _failed(label, spec.device_class_name, exc.reason)
        device_class = check.device_class
        tally = _Tally()
        for pool in self.pools:
            available = self.allocator.counters_left(pool) if pool.counter_sets else {}
            class_results: dict[int, list[bool | str]] = {}
            for entry in pool.entries:
                if not self.features.device_binding_and_status and entry.device.binding_conditions:
                    continue  # never selectable without the feature (§7.1)
                per_slice = class_results.get(id(entry.slice))
                if per_slice is None:
                    per_slice = self._class_matches(device_class, entry.slice)
                    class_results[id(entry.slice)] = per_slice
                in_class = per_slice[entry.index]
                if isinstance(in_class, str):
                    tally.error = tally.error or in_class
                    continue
                if not in_class:
                    continue
                tally.class_matches += 1
                combined = check.selectable(entry.slice)[entry.index]
                if isinstance(combined, ExtenderError):
                    tally.error = tally.error or combined.reason
                    continue
                if not combined:
                    continue
                tally.selector_matches += 1
                self._count_selected(tally, check.admin_access, spec, entry, available)
        return _request_explanation(label, device_class.name, spec, tally, has_devices=self.has_devices)

    def _class_matches(self, device_class: DeviceClass, slice_: ResourceSlice) -> list[bool | str]:
        """Class selectors only, in order, stopping at the first false as the allocator does;
        an error (text) where evaluation failed."""
        matches: list[bool | str] = [True] * len(slice_.devices)
        for i, expression in enumerate(device_class.selectors):
            prefix = f"class {device_class.name}: selector #{i}"
            if expression is None:
                return [f"{prefix}: CEL expression empty (unsupported selector type?)"] * len(matches)
            try:
                results = self.selectors.results(expression, slice_)
            except CelCompileError as exc:
                text = f"{prefix}: CEL compile error: {exc.message}"
                return [m if m is False else text for m in matches]
            for d, value in enumerate(results):
                if matches[d] is not True:
                    continue
                if isinstance(value, CelRuntimeError):
                    matches[d] = f"{prefix}: CEL runtime error: {value.message}"
                else:
                    matches[d] = bool(value)
        return matches

    def _count_selected(
        self,
        tally: _Tally,
        admin: bool,
        spec: ExactRequest,
        entry: DeviceEntry,
        available: _Counters,
    ) -> None:
        """Follow one matching device through the in-use, counter, taint and capacity checks."""
        features = self.features
        device = entry.device
        capacity_ok = not features.consumable_capacity or capacity_fits(
            spec.capacity_requests, device, self.allocated.consumed_capacity.get(entry.id), None
        )
        # Admin access ignores other claims' allocations (§15); otherwise an exclusively
        # allocated device is taken, even if it now allows multiple allocations.
        in_use = not admin and entry.id in self.allocated.devices
        if capacity_ok:
            tally.all_set += 1
            tally.all_in_use += in_use
        if in_use:
            return
        tally.free += 1
        blocked = False
        if self._counters_exhausted(entry, available):
            tally.counters += 1
            blocked = True
        blocking = taint_blocks(device.taints, spec.tolerations) if features.device_taints else None
        if blocking is not None:
            tally.taint += 1
            value = f"={blocking.value}" if blocking.value else ""
            tally.taints[f"{blocking.key}{value}:{blocking.effect}"] = None
            blocked = True
        if not capacity_ok:
            tally.capacity += 1
            blocked = True
        if not blocked:
            tally.usable += 1

    def _counters_exhausted(self, entry: DeviceEntry, available: _Counters) -> bool:
        """This device alone would overdraw a shared counter left after other claims' allocations.

        Mirrors the allocator's check for a first pick: a shared device that already has shares in
        use paid its counters then, so it draws nothing more.
        """
        if not entry.counters:
            return False
        if not self.features.partitionable_devices:
            return True  # devices consuming counters are never allocatable without the feature
        allow_multi = self.features.consumable_capacity and entry.device.allow_multiple_allocations
        if allow_multi and entry.id in self.allocated.consumed_capacity:
            return False
        for key, counters in entry.counters:
            left = available.get(key)
            if left is None:
                return True
            for name, amount in counters.items():
                have = left.get(name)
                if have is None or have < amount:
                    return True
        return False


def _failed(label: str, device_class: str, error: str) -> RequestExplanation:
    return RequestExplanation(
        request=label,
        device_class=device_class,
        wanted=0,
        class_matches=0,
        selector_matches=0,
        free=0,
        blocked_by_taint=0,
        blocked_by_counters=0,
        blocked_by_capacity=0,
        message=error,
        verdict=VERDICT_ERROR,
        error=error,
    )


def _alternatives(name: str, subs: tuple[RequestExplanation, ...]) -> RequestExplanation:
    fitting = next((sub for sub in subs if sub.fits), None)
    if fitting is not None:
        message = f"alternative {fitting.request} has enough usable devices"
        verdict = VERDICT_FITS
    else:
        message = f"none of the {len(subs)} alternatives fits; {subs[0].request}: {subs[0].message}"
        verdict = VERDICT_NO_ALTERNATIVE
    return RequestExplanation(
        request=name,
        device_class="",
        wanted=0,
        class_matches=0,
        selector_matches=0,
        free=0,
        blocked_by_taint=0,
        blocked_by_counters=0,
        blocked_by_capacity=0,
        message=message,
        verdict=verdict,
        subrequests=subs,
    )


def _request_explanation(
    label: str, class_name: str, spec: ExactRequest, tally: _Tally, *, has_devices: bool
) -> RequestExplanation:
    all_mode = spec.allocation_mode == ALLOCATION_MODE_ALL
    wanted = tally.all_set if all_mode else spec.count
    verdict, message = _verdict(all_mode, wanted, class_name, tally, has_devices)
    return RequestExplanation(
        request=label,
        device_class=class_name,
        wanted=wanted,
        class_matches=tally.class_matches,
        selector_matches=tally.selector_matches,
        free=tally.free,
        blocked_by_taint=tally.taint,
        blocked_by_counters=tally.counters,
        blocked_by_capacity=tally.capacity,
        usable=tally.usable,
        message=message,
        verdict=verdict,
        all_devices=all_mode,
        admin_access=bool(spec.admin_access),
        error=tally.error,
    )


def _verdict(all_mode: bool, wanted: int, class_name: str, t: _Tally, has_devices: bool) -> tuple[str, str]:
    """The first check the request falls short at, with its one-line message."""
    if all_mode:
        need = f"needs all {_count(wanted, 'matching device')}" if wanted else "asks for all matching devices"
    else:
        need = f"needs {wanted}"
    if t.error is not None:
        return VERDICT_ERROR, f"{need}, but a selector fails: {t.error}"
    if t.class_matches == 0:
        if not has_devices:
            return VERDICT_NO_CLASS_MATCH, f"{need}, but the node has no devices in usable pools"
        return VERDICT_NO_CLASS_MATCH, f"{need}, but no device matches device class {class_name}"
    if t.selector_matches == 0:
        return VERDICT_NO_SELECTOR_MATCH, (
            f"{need}, {_matching(t.class_matches)} device class {class_name} but none the request selectors"
        )
    if all_mode:
        if wanted == 0:
            return VERDICT_BLOCKED, (
                f"{need}, but none of the {_count(t.selector_matches, 'matching device')} has enough capacity"
            )
        if t.all_in_use:
            return VERDICT_IN_USE, f"{need}, but {t.all_in_use} {_verb(t.all_in_use, 'is', 'are')} in use"
        if t.usable < wanted:
            blocked = wanted - t.usable
            return VERDICT_BLOCKED, (
                f"{need}, but {blocked} {_verb(blocked, 'is', 'are')} blocked "
                f"({_blocked_parts(t, include_capacity=False)})"
            )
        return VERDICT_FITS, f"{need}, all usable"
    if t.selector_matches < wanted:
        if t.free == 0:
            held = " and all are in use"
        elif t.free < t.selector_matches:
            held = f", {t.free} of them free"
        else:
            held = ""
        return VERDICT_TOO_FEW, f"{need}, only {_matching(t.selector_matches)} the selectors{held}"
    if t.free < wanted:
        matching = _matching(t.selector_matches)
        if t.free == 0:
            return VERDICT_IN_USE, f"{need}, {matching} the selectors but all are in use"
        return (
            VERDICT_IN_USE,
            f"{need}, {matching} the selectors but only {t.free} {_verb(t.free, 'is', 'are')} free",
        )
    if t.usable < wanted:
        return VERDICT_BLOCKED, (
            f"{need}, {t.free} free matching {_plural(t.free, 'device')} but only {t.usable} usable "
            f"(blocked: {_blocked_parts(t, include_capacity=True)})"
        )
    return VERDICT_FITS, f"{need}, {t.usable} usable matching {_plural(t.usable, 'device')}"


def _blocked_parts(t: _Tally, *, include_capacity: bool) -> str:
    """E.g. "untolerated taints: 1, exhausted shared counters: 2"."""
    parts = []
    if t.taint:
        parts.append(f"untolerated taints: {t.taint} ({', '.join(t.taints)})")
    if t.counters:
        parts.append(f"exhausted shared counters: {t.counters}")
    if t.capacity and include_capacity:
        parts.append(f"insufficient capacity: {t.capacity}")
    return ", ".join(parts)


def _plural(n: int, noun: str) -> str:
    return noun if n == 1 else noun + "s"


def _count(n: int, noun: str) -> str:
    return f"{n} {_plural(n, noun)}"


def _matching(n: int) -> str:
    return f"{_count(n, 'device')} {_verb(n, 'matches', 'match')}"


def _verb(n: int, singular: str, plural: str) -> str:
    return singular if n == 1 else plural


# --- when the counts are not the problem ----------------------------------------------------


class _Diagnosis:
    """Re-runs the allocator with parts left out to find what stops an otherwise countable fit."""

    def __init__(self, allocator: Allocator, node: NodeInfo) -> None:
        self.allocator = allocator
        self.node = node
        self.claims = allocator.claims

    def fits(self, claims: Sequence[ResourceClaim]) -> bool:
        # The same cluster and selector cache: the probes evaluate no CEL the first run did not.
        try:
            return isinstance(self.allocator.for_claims(claims).answer(self.node), Allocation)
        except ExtenderError:
            return False

    def run(self, explanations: list[ClaimExplanation]) -> str:
        """Fill in claim messages and blocking constraints; return a node-level note."""
        unconstrained = [dataclasses.replace(c, constraints=()) for c in self.claims]
        if any(c.constraints for c in self.claims) and self.fits(unconstrained):
            self._blame_constraints(explanations, list(self.claims), range(len(self.claims)))
            return ""
        alone_failures = 0
        for c, claim in enumerate(self.claims):
            if self.fits([claim]):
                continue
            alone_failures += 1
            if claim.constraints and self.fits([dataclasses.replace(claim, constraints=())]):
                self._blame_constraints(explanations, [claim], [c])
            else:
                explanations[c] = dataclasses.replace(
                    explanations[c],
                    message=f"each request has enough usable devices on its own, but {_COMBINATION}",
                )
        if alone_failures == 0 and len(self.claims) > 1:
            return f"each claim fits on its own, but {_COMBINATION}"
        return ""

    def _blame_constraints(
        self, explanations: list[ClaimExplanation], claims: list[ResourceClaim], indices: Sequence[int]
    ) -> None:
        """Mark each constraint whose removal alone lets ``claims`` fit; if none does, all of them."""
        blocking: dict[int, set[int]] = {c: set() for c in indices}
        for position, c in enumerate(indices):
            claim = claims[position]
            for i in range(len(claim.constraints)):
                fewer = claim.constraints[:i] + claim.constraints[i + 1 :]
                trial = list(claims)
                trial[position] = dataclasses.replace(claim, constraints=fewer)
                if self.fits(trial):
                    blocking[c].add(i)
        jointly = not any(blocking.values())
        for position, c in enumerate(indices):
            claim = claims[position]
            if not claim.constraints:
                continue
            marked = set(range(len(claim.constraints))) if jointly else blocking[c]
            if not marked:
                continue
            constraints = tuple(
                dataclasses.replace(ce, blocking=ce.index in marked) for ce in explanations[c].constraints
            )
            labels = ", ".join(ce.label for ce in constraints if ce.blocking)
            if jointly and len(marked) > 1:
                message = f"{labels} cannot be satisfied together by the usable devices"
            else:
                message = f"{labels} cannot be satisfied by the usable devices"
            explanations[c] = dataclasses.replace(explanations[c], constraints=constraints, message=message)
