"""The scheduling service: the extender verbs as plain methods (no HTTP here).

- ``filter`` and ``prioritize`` are read-only and synchronous: they resolve the pod's claims, run
  the allocator against the store plus the in-flight ledger, and map outcomes to answers.
- ``bind`` decides again for the chosen node under a lock, records the decision in the ledger,
  writes each claim (finalizer, then ``status.allocation`` + ``reservedFor`` in one status write
  guarded by resourceVersion; retried on conflict), then binds the pod. Any failure rolls back
  exactly what it wrote and raises; a repeated bind after success succeeds without a second
  allocation.

Answer taxonomy (DESIGN.md): a transient condition or a fatal pod problem is ``Error``; a node
where the claims do not fit now is ``FailedNodes``; a node that can never fit the pod as things
stand (invalid pools, a pre-allocated claim pinned elsewhere, no device of the requested classes)
is ``FailedAndUnresolvableNodes``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import astuple, dataclass, field
from itertools import count, filterfalse
from typing import Any

import structlog

from extender.core.allocator import Allocation, Allocator
from extender.core.cel import CelCompileError
from extender.core.errors import (
    ClaimNotCreated,
    DoesNotFit,
    ExtenderError,
    NotSynced,
    ObjectNotFound,
    OutcomeUnknown,
    PodUnschedulable,
    Transient,
    WriteConflict,
)
from extender.core.explain import explain_node
from extender.core.model import (
    AllocationResult,
    DeviceID,
    DeviceResult,
    Features,
    NodeInfo,
    ResourceClaim,
    UnparsedVersion,
)
from extender.core.scoring import (
    MAX_SCORE,
    TOPOLOGY,
    DeviceUsage,
    ScoringCandidate,
    ScoringPolicy,
    node_device_usage,
    raw_scores,
    scores_by_value,
)
from extender.state.backend import Backend
from extender.state.claim_writes import (
    DELETE_PROTECTION_FINALIZER,
    Written,
    deallocate,
    roll_back,
    write_allocation,
    write_reservation,
)
from extender.state.claims import PodClaims, pod_identity, reserved_for, resolve_pod_claims
from extender.state.fits import ShapeVerdicts, Verdict
from extender.state.ledger import InFlightAllocation, InFlightLedger

__all__ = [
    "CANNOT_ALLOCATE",
    "DEFAULT_CLAIM_WAIT_SECONDS",
    "DEFAULT_HOLD_SECONDS",
    "DELETE_PROTECTION_FINALIZER",
    "NOT_AVAILABLE",
    "NO_CLASS_DEVICES",
    "FilterOutcome",
    "SchedulingService",
    "ServiceStats",
]

log = structlog.get_logger()

CANNOT_ALLOCATE = "cannot allocate all claims"
NOT_AVAILABLE = "resourceclaim not available on the node"
NO_CLASS_DEVICES = "no devices of the requested device classes on the node"
NOT_SYNCED = "cache not synced yet"
_NOT_AVAILABLE = (True, NOT_AVAILABLE)
#: Candidate lists ``_candidates`` keeps: the full list for filter, survivors for prioritize.
_RECENT_CANDIDATE_LISTS = 4
#: How long a tentative hold (``hold_seconds``) waits for its pod's bind: kube-scheduler sends it
#: milliseconds after the answer that placed it (docs/pipeline.md has the measured gaps).
DEFAULT_HOLD_SECONDS = 2.0
#: How long a bind waits for the resourceclaim controller to create a pod's template claims
#: (``claim_wait_seconds``); below kube-scheduler's default extender httpTimeout of 5 s.
DEFAULT_CLAIM_WAIT_SECONDS = 3.0


@dataclass(slots=True)
class FilterOutcome:
    """What filter answers. The service may hand the same outcome to several requests (a pod of
    the same shape while no node started or stopped failing): callers read it, never change it."""

    node_names: list[str]
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    error: str = ""


class Candidates:
    """A request's candidate nodes as the store's string objects (``SchedulingService._candidates``):
    the list, the set, and a serial number that no other list gets, under which shapes remember
    what they know of this list (``ShapeVerdicts.unknown``, ``answers``, ``columns``)."""

    __slots__ = ("_positions", "names", "serial", "unique")

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.unique = set(names)
        self.serial = next(_SERIALS)
        self._positions: dict[str, int] | None = None

    def positions(self) -> dict[str, int]:
        """Name -> its index in ``names`` (the last one, for a name listed twice)."""
        if self._positions is None:
            self._positions = {name: i for i, name in enumerate(self.names)}
        return self._positions


_SERIALS = count()
#: Joins a candidate list into one key (``_candidates``); node names never contain it.
_SEPARATOR = "\x00"


@dataclass(slots=True)
class ServiceStats:
    """Counters the server exports as metrics."""

    allocations: int = 0  # claims allocated by successful binds
    binds_ok: int = 0
    binds_failed: dict[str, int] = field(default_factory=dict)  # by error class name
    #: tentative holds by what became of them: placed, kept (bind chose the held node), moved
    #: (bind chose another), dropped (the pod's next filter), expired
    holds: dict[str, int] = field(default_factory=dict)
    #: seconds from a hold to its pod's bind, summed, and how many binds found a hold
    hold_age_seconds: float = 0.0
    hold_age_max_seconds: float = 0.0
    holds_settled: int = 0
    #: binds that waited for the resourceclaim controller, and the seconds they waited
    claim_waits: int = 0
    claim_wait_seconds: float = 0.0

    def count_hold(self, outcome: str, n: int = 1) -> None:
        self.holds[outcome] = self.holds.get(outcome, 0) + n


@dataclass(slots=True)
class _BindDecision:
    """What a bind decided at arrival: the pod, the node, its claims and their new allocations
    (in ``claims.to_allocate`` order), already recorded in the ledger."""

    pod: Mapping[str, Any]
    node: str
    claims: PodClaims
    results: tuple[AllocationResult, ...]


class SchedulingService:
    """filter / prioritize / bind / explain over one backend; see the module docstring."""

    def __init__(
        self,
        *,
        backend: Backend,
        ledger: InFlightLedger | None = None,
        features: Features = Features(),
        scoring: ScoringPolicy | None = None,
        scoring_annotation: str = "dra-extender.io/scoring",
        on_rejected: Callable[[Mapping[str, Any]], None] | None = None,
        hold_seconds: float = DEFAULT_HOLD_SECONDS,
        claim_wait_seconds: float = DEFAULT_CLAIM_WAIT_SECONDS,
    ) -> None:
        """``on_rejected`` is told of every pod that no offered node fits (the kube backend uses it
        to requeue such pods quickly once devices free up). ``hold_seconds`` > 0 turns on the
        tentative holds and prioritize's one best node (docs/pipeline.md); ``claim_wait_seconds``
        is how long a bind waits for template claims that do not exist yet."""
        self.backend = backend
        self.on_rejected = on_rejected
        self.store = backend.store
        self.ledger = ledger if ledger is not None else InFlightLedger()
        self.features = features
        # Part of every pod shape key: a tuple hashes in C, the frozen dataclass in Python.
        self._features_key = astuple(features)
        self.scoring = scoring if scoring is not None else ScoringPolicy.parse("binpack=1,prioritized=1")
        self.scoring_annotation = scoring_annotation
        self.stats = ServiceStats()
        # In-flight allocations hold their devices like allocated claims do (and so change what
        # fits where): the store counts them in ``in_use_state``.
        self.ledger.listeners.append(self._in_flight_changed)
        for entry in self.ledger:
            self.store.set_in_flight(entry.claim_key, entry.result)
        # The latest requests' candidate nodes, canonicalised (see _candidates): filter asks about
        # every node, prioritize about the survivors.
        self._recent_candidates: dict[str, Candidates] = {}
        self.hold_seconds = hold_seconds
        self.claim_wait_seconds = claim_wait_seconds
        # UIDs of pods with a bind between its decision and its last write.
        self._binding: set[str] = set()
        # Binds waiting for template claims, by pod key (see _with_created_claims).
        self._claim_waiters: dict[str, list[asyncio.Event]] = {}
        self.store.claim_listeners.append(self._claim_or_pod_changed)

    # --- shared steps ---------------------------------------------------------------------

    def _in_flight_changed(self, entry: InFlightAllocation, added: bool) -> None:
        self.store.set_in_flight(entry.claim_key, entry.result if added else None)

    def _pod_for(self, pod: Mapping[str, Any]) -> Mapping[str, Any]:
        """The pod as the backend holds it (it may carry status the request's copy lacks)."""
        self.backend.observe_pod(dict(pod))
        namespace, name, uid = pod_identity(pod)
        stored = self.store.pods.get(f"{namespace}/{name}")
        if stored is not None and pod_identity(stored)[2] == uid:
            return stored
        return pod

    def _refresh(self) -> None:
        """Bring the ledger and the slice snapshot up to date. Their changes reach the FitCache
        here, so this runs before remembered verdicts are read."""
        expired = self.ledger.expire(keep=self._binding)
        if expired:
            self.stats.count_hold("expired", len({e.pod_uid for e in expired if e.tentative}))
        self.ledger.reconcile(self.store.claims)
        self.store.snapshot()

    def _allocator(self, claims: PodClaims) -> Allocator:
        self._refresh()
        return self._allocator_now(claims)

    def _allocator_now(self, claims: PodClaims) -> Allocator:
        """``_allocator`` for callers that have just refreshed."""
        return Allocator(
            claims.to_allocate,
            classes=self.store.classes,
            snapshot=self.store.snapshot(),
            allocated=self.store.in_use_state(),
            features=self.features,
            selectors=self.store.selectors,
            preallocated=claims.allocated,
        )

    def _shape(self, claims: PodClaims) -> Hashable | None:
        """What the allocator's verdict on a node depends on, of the pod: its claims' specs and the
        node selectors of its allocated claims (and the feature gates, in case two services share
        a store). None when a claim's spec is unknown."""
        specs: list[bytes] = []
        for claim in claims.to_allocate:
            spec = self.store.claim_specs.get(claim.key) or claims.provisional.get(claim.key)
            if spec is None:
                return None
            specs.append(spec)
        selectors = tuple(c.allocation.node_selector for c in claims.allocated if c.allocation is not None)
        return self._features_key, tuple(specs), selectors

    def _candidates(self, node_names: Sequence[str]) -> Candidates:
        """The request's node names as the store's own string objects, as a list and a set.

        kube-scheduler sends the same candidate list again and again, as fresh strings: hashing
        them and comparing them with the remembered keys cost more than the rest of a remembered
        filter (the remembered strings are spread over the heap, one cache miss each). A list
        equal to a recent one is answered with that one's objects (whose hashes are cached and
        which *are* the keys of the FitCache). Recent lists are found by the names joined into one
        string, which is built from the freshly parsed (cache-hot) names and compared in one
        ``memcmp``; a list whose names contain the separator is not remembered (node names never
        do), and one that joins like a remembered list but has another length is not that list."""
        joined = _SEPARATOR.join(node_names)
        recent = self._recent_candidates
        entry = recent.get(joined)
        # Remembered lists have no separator in their names; with as many names, neither has this
        # one, so the two lists are equal.
        if entry is not None and len(entry.names) == len(node_names):
            return entry
        known = self.store.nodes
        names = [name if (info := known.get(name)) is None else info.name for name in node_names]
        entry = Candidates(names)
        if joined.count(_SEPARATOR) == max(0, len(names) - 1):  # else two lists could join alike
            recent[joined] = entry
            if len(recent) > _RECENT_CANDIDATE_LISTS:
                del recent[next(iter(recent))]  # the oldest
        return entry

    def _verdicts(self, claims: PodClaims, candidates: Candidates) -> ShapeVerdicts:
        """Per node: a detached Allocation (the claims fit) or (unresolvable, reason). Verdicts come
        from the FitCache where remembered; the allocator runs for the other nodes only. Raises
        the ExtenderError that fails the whole attempt. Every candidate has a verdict after."""
        self._refresh()
        fits = self.store.fits
        shape = self._shape(claims)
        # A pod whose claims are all allocated already is answered from their node selectors at
        # little cost (``_settle_pinned``); remembering one shape per shared claim would crowd the
        # templates' shapes out of the FitCache and make every invalidation visit more tables.
        remember = shape is not None and bool(claims.to_allocate)
        table = fits.table(shape) if remember else ShapeVerdicts()
        node_names = candidates.names
        unknown = table.unknown(candidates.serial, candidates.unique)
        fits.stats.hits += len(node_names) - len(unknown)
        if not unknown:
            table.mark_covered(candidates.serial)
            return table
        fits.stats.misses += len(unknown)
        allocator = self._allocator_now(claims)
        unknown = self._settle_pinned(allocator.pinned_nodes(), unknown, table)
        if not unknown:
            table.mark_covered(candidates.serial)
            return table
        nodes = [self.store.node(name) for name in sorted(unknown)]  # a stable order; each verdict is its own
        for node, outcome in zip(nodes, allocator.allocate_many(nodes), strict=True):
            verdict: Verdict
            if isinstance(outcome, Allocation):
                verdict = outcome.detached()
            elif outcome is None:
                verdict = self._why_not(allocator, node)
            else:
                verdict = (True, outcome.reason)
            view = allocator.snapshot.cached_view(node, self.features)
            if view is not None:  # else decided from the node's labels alone (claim not available)
                fits.depends(node.name, view)
            table.put(node.name, verdict)
        table.mark_covered(candidates.serial)
        return table

    @staticmethod
    def _settle_pinned(allowed: frozenset[str] | None, names: set[str], table: ShapeVerdicts) -> set[str]:
        """Answer "not available" for the nodes outside ``allowed`` (``Allocator.pinned_nodes``:
        the pod's shared claim is allocated elsewhere) and return the rest, still to decide."""
        if allowed is None:
            return names
        outside = names.difference(allowed)
        if outside:
            table.put_all(outside, _NOT_AVAILABLE)
        return names.intersection(allowed)

    def _why_not(self, allocator: Allocator, node: NodeInfo) -> tuple[bool, str]:
        """(unresolvable, reason) for a node where allocate() returned None."""
        if allocator.unavailable_claim(node) is not None:
            return True, NOT_AVAILABLE
        if allocator.lacks_class_devices(node):
            return True, NO_CLASS_DEVICES
        return False, CANNOT_ALLOCATE

    def warm_up(self) -> dict[str, int]:
        """Fill the caches a first filter would fill: every node's pools and every class selector
        on every slice, so the first pod after (re)start costs what the next ones cost. CEL errors
        are cached as values and surface when a pod reaches the device, as usual."""
        snapshot = self.store.snapshot()
        names = set(self.store.nodes)
        names.update(s.node_name for s in self.store.slices.values() if s.node_name)
        for name in names:
            try:
                snapshot.node_view(self.store.node(name), self.features)
            except ValueError:
                continue  # a malformed node selector: reported when a pod tries the node
        evaluations = 0
        for device_class in self.store.classes.values():
            for expression in device_class.selectors:
                if expression is None:
                    continue
                for slice_ in self.store.slices.values():
                    try:
                        self.store.selectors.results(expression, slice_)
                    except CelCompileError:
                        break  # reported when a pod uses the class
                    evaluations += len(slice_.devices)
        return {"nodes": len(names), "evaluations": evaluations}

    # --- verbs -------------------------------------------------------------------------------

    def filter(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> FilterOutcome:
        """The filter verb. A new attempt of a pod first gives back what its previous attempt held
        (its own holds would hide devices from it); when exactly one node passes, kube-scheduler
        picks it without asking prioritize, so the pod's devices there are held at once."""
        return self._filter(pod, node_names, hold=True)

    def _filter(self, pod: Mapping[str, Any], node_names: Sequence[str], *, hold: bool) -> FilterOutcome:
        if not self.backend.synced:
            return FilterOutcome([], error=NOT_SYNCED)
        try:
            pod = self._pod_for(pod)
            if hold:
                self._release_holds(pod_identity(pod)[2])
            claims = resolve_pod_claims(pod, self.store, self.ledger, from_templates=True)
            if not claims.all:
                return FilterOutcome(list(node_names))
            candidates = self._candidates(node_names)
            verdicts = self._verdicts(claims, candidates)
        except ExtenderError as exc:
            return FilterOutcome([], error=exc.reason)
        # C-level set and dict work only: this runs over every node.
        node_names, unique, failing = candidates.names, candidates.unique, verdicts.failing
        result: FilterOutcome
        if len(verdicts.by_node) == len(unique):  # the verdicts are exactly about the candidates
            # The answer only depends on which candidates fail and why: while that stays as it
            # was (a bind usually leaves its node with room), the last answer is the answer.
            answered = verdicts.answers.get(candidates.serial)
            if answered is not None and answered[0] == verdicts.failing_version:
                result = answered[1]
            else:
                result = FilterOutcome(
                    list(filterfalse(failing.__contains__, node_names)) if failing else list(node_names),
                    failed=verdicts.failed.copy(),
                    unresolvable=verdicts.unresolvable.copy(),
                )
                if len(verdicts.answers) >= 8:
                    verdicts.answers.clear()
                verdicts.answers[candidates.serial] = (verdicts.failing_version, result)
        else:
            rejected = failing.keys() & unique
            result = FilterOutcome(list(filterfalse(rejected.__contains__, node_names)))
            for name in sorted(rejected):
                is_unresolvable, reason = failing[name]
                (result.unresolvable if is_unresolvable else result.failed)[name] = reason
        if not result.node_names and self.on_rejected is not None:
            self.on_rejected(pod)
        elif hold and len(result.node_names) == 1 and claims.to_allocate:
            self._hold(claims, result.node_names[0], verdicts.by_node.get(result.node_names[0]))
        return result

    async def filter_and_recover(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> FilterOutcome:
        """``filter``, plus what upstream's PostFilter does when no node fits (spec §13.4, §20):
        if one of the pod's claims is allocated on other nodes and reserved for nobody else,
        deallocate it and answer ``Error`` so the scheduler retries soon and allocates it afresh.
        An extender has no PostFilter; without this such pods would stay stuck."""
        outcome = self.filter(pod, node_names)
        if outcome.node_names or outcome.error or not node_names:
            return outcome
        stuck = self._stuck_claim(pod, node_names)
        if stuck is None:
            return outcome
        try:
            await deallocate(self.backend, stuck, pod_identity(pod)[2])
        except ExtenderError as exc:
            log.warning("filter.deallocation_failed", claim=stuck.key, reason=exc.reason)
            return outcome
        log.info("filter.deallocated", pod=pod_identity(pod)[1], claim=stuck.key)
        return FilterOutcome([], error=f"deallocation of ResourceClaim {stuck.key} completed")

    def _stuck_claim(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> ResourceClaim | None:
        try:
            pod = self._pod_for(pod)
            claims = resolve_pod_claims(pod, self.store, self.ledger)
        except ExtenderError:
            return None
        if (pod.get("spec") or {}).get("nodeName"):
            return None
        uid = claims.pod_uid
        allocator = self._allocator(claims)
        nodes = [self.store.node(name) for name in node_names]
        for claim in claims.allocated:
            if any(ref.uid != uid for ref in claim.reserved_for):
                continue  # in use by another consumer: never take it away
            probe = Allocator(
                [], classes={}, snapshot=allocator.snapshot, allocated=allocator.allocated, preallocated=[claim]
            )
            if any(probe.unavailable_claim(node) is not None for node in nodes):
                return claim
        return None

    def prioritize(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> list[tuple[str, int]]:
        """A 0..10 score for every given node (0 where the claims do not fit)."""
        return list(zip(*self.prioritize_columns(pod, node_names), strict=True))

    def prioritize_columns(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> tuple[Sequence[str], list[int]]:
        """``prioritize`` as two columns, the nodes (as given) and their scores: what the HTTP
        answer is written from, without a pair per node."""
        if not self.backend.synced:
            raise NotSynced(NOT_SYNCED)
        pod = self._pod_for(pod)
        self._release_holds(pod_identity(pod)[2])
        claims = resolve_pod_claims(pod, self.store, self.ledger, from_templates=True)
        if not claims.all:
            return node_names, [0] * len(node_names)
        policy = self._policy_for(pod)
        candidates = self._candidates(node_names)
        verdicts = self._verdicts(claims, candidates)
        attribute = policy.topology_attribute if policy.weights.get(TOPOLOGY) else None
        codes = self._score_codes(verdicts, candidates, attribute)
        values = verdicts.values
        in_use = {code: values[code] for code in set(codes) if code is not None}
        by_value = scores_by_value(in_use.values(), policy)
        # node -> code -> score, through C-level maps (None: the node does not fit)
        score_by_code: dict[int | None, int] = {code: by_value[value] for code, value in in_use.items()}
        score_by_code[None] = 0
        scores = list(map(score_by_code.__getitem__, codes))
        if self.hold_seconds > 0 and claims.to_allocate and scores:
            best = _one_best(scores, codes)
            if best is not None:
                best_node = candidates.names[best]
                self._hold(claims, best_node, verdicts.by_node.get(best_node))
        # a tuple: the list is the service's own canonical one (``_candidates``), kept for reuse
        return tuple(candidates.names), scores

    # --- tentative holds -----------------------------------------------------------------------

    def _hold(self, claims: PodClaims, node_name: str, verdict: Verdict | None) -> None:
        """Hold the devices the pod would get on ``node_name`` until its bind (ledger docstring):
        the devices of the remembered verdict where they are plain devices, else a fresh
        allocation's."""
        if self.hold_seconds <= 0 or claims.pod_uid in self._binding:
            return  # a bind of this pod is still running: its own entries hold its devices
        results = _held_devices(verdict) if isinstance(verdict, Allocation) else None
        if results is None:
            allocation = self._allocator_now(claims).allocate(self.store.node(node_name))
            if allocation is None:
                return
            results = allocation.results
        self._record(claims, node_name, results, tentative=True)
        self.stats.count_hold("placed")

    def _release_holds(self, pod_uid: str, *, bound_to: str | None = None) -> None:
        """Drop the pod's holds: at its next filter or prioritize, or when its bind (to
        ``bound_to``) arrives, which then decides afresh for the node kube-scheduler chose."""
        gone = self.ledger.drop_holds(pod_uid)
        if not gone:
            return
        if bound_to is None:
            self.stats.count_hold("dropped")
            return
        self.stats.count_hold("kept" if any(e.node == bound_to for e in gone) else "moved")
        age = self.ledger.age(gone[0])
        self.stats.holds_settled += 1
        self.stats.hold_age_seconds += age
        self.stats.hold_age_max_seconds = max(self.stats.hold_age_max_seconds, age)

    def _score_codes(
        self, verdicts: ShapeVerdicts, candidates: Candidates, attribute: str | None
    ) -> list[int | None]:
        """Per candidate, in list order: the code of its raw scores (``ShapeVerdicts.code``), None
        where the pod does not fit. Kept per candidate list and brought up to date from the nodes
        dropped since (a bind drops one or two), so that a repeated prioritize touches those only.
        Raises ValueError if a fitting node is listed twice."""
        key = (attribute, candidates.serial)
        kept = verdicts.columns.get(key)
        node_names, names = candidates.names, candidates.unique
        if kept is not None and len(names) == len(node_names):
            mark, codes = kept
            changed = verdicts.dropped_since(mark)
            if changed is not None:
                positions = candidates.positions()
                stale = {name for name in changed if name in positions}
                if stale:
                    fresh = self._raw_codes(verdicts, stale.difference(verdicts.failing), attribute)
                    for name in stale:
                        codes[positions[name]] = fresh.get(name)
                verdicts.columns[key] = (verdicts.drops, codes)
                return codes
        # Set operations run in C: this is per node. The scheduler asks about the filter's
        # survivors: usually none of them fails.
        failing = verdicts.failing
        fitting = names if names.isdisjoint(failing) else names.difference(failing)
        if len(names) != len(node_names):
            twice = sorted({name for name in fitting if node_names.count(name) > 1})
            if twice:
                raise ValueError(f"prioritize: node(s) given twice: {', '.join(twice)}")
        # ``remembered`` may hold nodes this request did not ask about, never a failing one
        remembered = self._raw_codes(verdicts, fitting, attribute)
        codes = list(map(remembered.get, node_names))
        if len(verdicts.columns) >= 8:  # a few candidate lists are current at a time
            verdicts.columns.clear()
        verdicts.columns[key] = (verdicts.drops, codes)
        return codes

    def _raw_codes(self, verdicts: ShapeVerdicts, fitting: set[str], attribute: str | None) -> dict[str, int]:
        """The shape's remembered raw-score codes (node -> code), with those of ``fitting`` (nodes
        whose verdict is an Allocation) computed where missing."""
        remembered = verdicts.raw_scores(attribute)
        unscored = fitting.difference(remembered)
        if unscored:
            usage = self._usage(unscored)
            for name in unscored:
                allocation = verdicts.by_node[name]
                assert isinstance(allocation, Allocation)
                candidate = ScoringCandidate(allocation, usage[name])
                remembered[name] = verdicts.code(raw_scores(candidate, attribute))
        return remembered

    def _usage(self, node_names: Iterable[str]) -> dict[str, DeviceUsage]:
        """Device usage per node, from the FitCache where remembered."""
        fits = self.store.fits
        out: dict[str, DeviceUsage] = {}
        missing: list[str] = []
        for name in node_names:
            usage = fits.usage(name)
            if usage is None:
                missing.append(name)
            else:
                out[name] = usage
        if missing:
            snapshot = self.store.snapshot()
            allocated = self.store.in_use_state()
            shared = {share.device for share in allocated.shared_ids}
            for name in missing:
                node = self.store.node(name)
                usage = node_device_usage(snapshot, node, allocated, self.features, shared_devices=shared)
                fits.remember_usage(name, snapshot.node_view(node, self.features), usage)
                out[name] = usage
        return out

    def _policy_for(self, pod: Mapping[str, Any]) -> ScoringPolicy:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        text = annotations.get(self.scoring_annotation)
        if not text:
            return self.scoring
        try:
            return ScoringPolicy.parse(str(text))
        except ValueError as exc:
            raise PodUnschedulable(f"annotation {self.scoring_annotation}: {exc}") from exc

    def explain(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> dict[str, Any]:
        """Per node, per claim, per request: fits or not and why (for /debug/explain)."""
        namespace, name, _ = pod_identity(pod)
        out: dict[str, Any] = {"pod": f"{namespace}/{name}", "error": "", "nodes": []}
        if not self.backend.synced:
            out["error"] = NOT_SYNCED
            return out
        try:
            pod = self._pod_for(pod)
            claims = resolve_pod_claims(pod, self.store, self.ledger, from_templates=True)
        except ExtenderError as exc:
            out["error"] = exc.reason
            return out
        out["claims"] = [claim.key for claim in claims.all]
        allocator = self._allocator(claims)
        outcome = self._filter(pod, node_names, hold=False)
        out["error"] = outcome.error
        for node_name in node_names:
            node = self.store.node(node_name)
            explanation = explain_node(
                claims.to_allocate,
                node,
                snapshot=allocator.snapshot,
                classes=self.store.classes,
                allocated=allocator.allocated,
                features=self.features,
                selectors=self.store.selectors,
            ).to_dict()
            if node_name in outcome.unresolvable:
                explanation["outcome"] = "FailedAndUnresolvable"
                explanation["reason"] = outcome.unresolvable[node_name]
            elif node_name in outcome.failed:
                explanation["outcome"] = "Failed"
                explanation["reason"] = outcome.failed[node_name]
            elif outcome.error:
                explanation["outcome"] = "Error"
            else:
                explanation["outcome"] = "Fits"
            unavailable = allocator.unavailable_claim(node)
            if unavailable is not None:
                explanation["unavailableClaim"] = unavailable.key
                explanation["message"] = f"{NOT_AVAILABLE}: claim {unavailable.key} is allocated on other nodes"
            if explanation["outcome"] != "Fits":
                # explain_node looks only at the claims still to allocate; the verdict is the filter's
                explanation["fits"] = False
            out["nodes"].append(explanation)
        return out

    # --- bind ------------------------------------------------------------------------------------

    async def bind(self, namespace: str, name: str, uid: str, node_name: str) -> None:
        try:
            if not self.backend.synced:
                raise NotSynced(NOT_SYNCED)
            await self._bind(namespace, name, uid, node_name)
        except ExtenderError as exc:
            kind = type(exc).__name__
            self.stats.binds_failed[kind] = self.stats.binds_failed.get(kind, 0) + 1
            log.info("bind.finished", pod=f"{namespace}/{name}", node=node_name, outcome="error", reason=exc.reason)
            raise
        self.stats.binds_ok += 1
        log.info("bind.finished", pod=f"{namespace}/{name}", node=node_name, outcome="bound")

    async def _bind(self, namespace: str, name: str, uid: str, node_name: str) -> None:
        """Decide at arrival, then write (docs/pipeline.md, "one pod's timeline").

        The pod comes from the watch cache; only a pod the cache lacks, or has with another UID,
        is read from the API first. The decision is synchronous: from the moment this request is
        read to the moment its devices are in the ledger nothing else runs, so every later filter
        and prioritize sees them. The binding's UID precondition catches a pod re-created since."""
        pod = self.store.pods.get(f"{namespace}/{name}")
        if pod is None or (uid and pod_identity(pod)[2] != uid):
            pod = await self.backend.get_pod(namespace, name)
            if pod is None:
                raise ObjectNotFound(f'pod "{namespace}/{name}" not found')
        actual_uid = pod_identity(pod)[2]
        if uid and actual_uid != uid:
            raise WriteConflict(f'pod "{namespace}/{name}" has UID {actual_uid}, not {uid}: it was re-created')
        if actual_uid in self._binding:
            raise Transient(f'pod "{namespace}/{name}" is being bound already')
        decision = self._decide_bind(pod, node_name)
        if decision is None:
            return  # a retry after success: nothing left to do
        self._binding.add(actual_uid)
        try:
            if decision.claims.provisional:
                decision = await self._with_created_claims(decision)
            await self._write_bind(decision)
        except asyncio.CancelledError:
            # What reached the API is unknown: the entries keep the devices taken until the store
            # shows the claims (reconcile) or their TTL ends.
            raise
        except BaseException:
            for claim in decision.claims.to_allocate:
                self.ledger.drop(claim.key, pod_uid=actual_uid)  # this bind's own entries only
            raise
        finally:
            self._binding.discard(actual_uid)
        # Entries leave the ledger once the store shows the allocations (reconcile).
        self.ledger.reconcile(self.store.claims)

    def _decide_bind(self, pod: Mapping[str, Any], node_name: str) -> _BindDecision | None:
        """Allocate for the chosen node and record it in the ledger, without awaiting anything.
        None when the pod is already bound there with its claims reserved (a repeated bind)."""
        namespace, name, uid = pod_identity(pod)
        bound_to = (pod.get("spec") or {}).get("nodeName")
        if bound_to:
            claims = resolve_pod_claims(pod, self.store, self.ledger)
            if bound_to == node_name and all(reserved_for(c, uid) for c in claims.all):
                return None
            raise WriteConflict(f'pod "{namespace}/{name}" is already bound to node {bound_to}')
        self._release_holds(uid, bound_to=node_name)
        claims = resolve_pod_claims(pod, self.store, self.ledger, from_templates=True)
        results = self._allocate_in_ledger(claims, node_name)
        return _BindDecision(pod, node_name, claims, results)

    def _allocate_in_ledger(self, claims: PodClaims, node_name: str) -> tuple[AllocationResult, ...]:
        allocator = self._allocator(claims)
        node = self.store.node(node_name)
        allocation = allocator.allocate(node)
        if allocation is None:
            _, reason = self._why_not(allocator, node)
            raise DoesNotFit(f"node {node_name} no longer fits the pod: {reason}", node=node_name)
        self._record(claims, node_name, allocation.results, tentative=False)
        return allocation.results

    def _record(
        self, claims: PodClaims, node_name: str, results: Sequence[AllocationResult], *, tentative: bool
    ) -> None:
        """Put the pod's allocations (per claim to allocate) into the ledger: a bind's, or a hold."""
        for claim, result in zip(claims.to_allocate, results, strict=True):
            self.ledger.add(
                claim=claim,
                pod_key=claims.pod_key,
                pod_uid=claims.pod_uid,
                node=node_name,
                result=result,
                tentative=tentative,
                provisional=claim.key in claims.provisional,
                ttl_seconds=self.hold_seconds if tentative else None,
            )

    async def _with_created_claims(self, decision: _BindDecision) -> _BindDecision:
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
                claims = resolve_pod_claims(pod, self.store, self.ledger, from_templates=True)
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
        results = self._allocate_in_ledger(claims, decision.node)
        return _BindDecision(pod, decision.node, claims, results)

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

    async def _write_bind(self, decision: _BindDecision) -> None:
        """The claim writes, then the binding; on failure exactly what was written is undone."""
        pod, claims = decision.pod, decision.claims
        namespace, name, uid = pod_identity(pod)
        written: list[Written] = []
        keep_writes = False
        try:
            results = dict(zip((c.key for c in claims.to_allocate), decision.results, strict=True))
            for claim in claims.all:
                record = Written(claim.key)
                written.append(record)
                if claim.key in results:
                    await write_allocation(self.backend, self.store, claim, results[claim.key], pod, record)
                    self.stats.allocations += 1
                elif not reserved_for(claim, uid):
                    await write_reservation(self.backend, self.store, claim, pod, record)
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
        """After a refused binding: is the pod bound to this node already (an earlier bind of ours
        whose answer kube-scheduler did not wait for; the cache had not shown it yet)?"""
        try:
            live = await self.backend.get_pod(namespace, name)
        except ExtenderError:
            return False
        return (
            live is not None
            and pod_identity(live)[2] == uid
            and (live.get("spec") or {}).get("nodeName") == node_name
        )

    # --- debug views -------------------------------------------------------------------------

    def debug_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        raw = self.store.raw_claims.get(f"{namespace}/{name}")
        return copy.deepcopy(raw) if raw is not None else None

    def debug_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        raw = self.store.pods.get(f"{namespace}/{name}")
        return copy.deepcopy(raw) if raw is not None else None

    def debug_node(self, node_name: str) -> dict[str, Any]:
        """The node's devices, each with its pool, attributes and the claim holding it (if any)."""
        holders: dict[DeviceID, list[str]] = {}
        for claim in self.store.claims.values():
            if claim.allocation is not None:
                for result in claim.allocation.devices:
                    holders.setdefault(result.device_id, []).append(claim.key)
        for entry in self.ledger:
            for result in entry.result.devices:
                holders.setdefault(result.device_id, []).append(f"{entry.claim_key} (binding)")
        node = self.store.node(node_name)
        view = self.store.snapshot().node_view(node, self.features)
        pools = []
        for pool in view.pools:
            pools.append(
                {
                    "driver": pool.driver,
                    "pool": pool.name,
                    "generation": pool.generation,
                    "status": "incomplete" if pool.incomplete else ("invalid" if pool.invalid_reason else "ok"),
                    **({"reason": pool.invalid_reason} if pool.invalid_reason else {}),
                }
            )
        devices = [
            {
                "driver": entry.id.driver,
                "pool": entry.id.pool,
                "device": entry.id.device,
                "slice": entry.slice.name,
                "attributes": {k: _attribute_json(v) for k, v in entry.device.attributes.items()},
                "capacity": {k: str(v.value) for k, v in entry.device.capacity.items()},
                "claims": holders.get(entry.id, []),
            }
            for entry in view.devices
        ]
        return {"node": node_name, "labels": dict(node.labels), "pools": pools, "devices": devices}


def _held_devices(verdict: Allocation) -> tuple[AllocationResult, ...] | None:
    """What a hold needs of a remembered verdict: per claim, the devices it takes, when taking a
    device is all there is to it (no admin access, no device that is shared between claims, whose
    shares and consumed capacity only a full allocation knows). None otherwise."""
    ids = verdict.picked_ids
    if sum(map(len, ids)) != len(verdict.consumed_devices):
        return None  # admin access: the device is not taken
    if any(device.allow_multiple_allocations for claim in verdict.picked for device in claim):
        return None
    return tuple(
        AllocationResult(
            devices=tuple(DeviceResult(request="", driver=d.driver, pool=d.pool, device=d.device) for d in claim)
        )
        for claim in ids
    )


def _one_best(scores: list[int], codes: Sequence[int | None]) -> int | None:
    """Make the first of the best-scored nodes the only best one, in place, and return its index
    (None when it does not fit). kube-scheduler breaks equal totals at random; an extender that
    holds the node it expects to be chosen must name one. One point is ``weight x 10`` in
    kube-scheduler's total, more than the in-tree differences between like nodes (spec §A.10)."""
    top = max(scores)
    first = scores.index(top)
    if codes[first] is None:
        return None
    if scores.count(top) > 1:
        if top < MAX_SCORE:
            scores[first] = top + 1
        else:
            scores[:] = [score - 1 if score == top else score for score in scores]
            scores[first] = top
    return first


def _attribute_json(value: object) -> object:
    if isinstance(value, bool | int | str):
        return value
    if isinstance(value, UnparsedVersion):
        return value.text
    return str(value)
