"""The structured DRA allocator (docs/allocator.md; upstream's ``structured`` package).

``Allocator(claims, ...)`` is built once per pod scheduling attempt. Its contract is one question,
asked for one node (``answer``) or many (``answer_many``): what does the pod get here? An
``Allocation`` (one ``AllocationResult`` per claim, same order: the claims fit), an ``Unfit`` (not
now) or an ``Unresolvable`` (not as things stand) from ``extender.core.answers``; a
``PodUnschedulable`` (or ``CelError``) with upstream's text is raised, as it fails the attempt.

Below that, ``allocate(node)`` is the search itself: an ``Allocation``, ``None`` (does not fit,
incomplete pools included), or ``NodeUnresolvable`` raised for invalid pools; ``allocate_many``
runs it over many nodes, with a tight loop for the most common pod.

The search is upstream's depth-first search with backtracking: claims in order, requests in order,
``firstAvailable`` subrequests in priority order, devices in the deterministic 1.36 pool order, with
the 1.36 "combinations" scan (each further slot of a request starts after the previous pick). Every
pick is undone exactly on backtracking — constraint state, in-flight marks, shared counters and
shared capacity — unlike upstream, which leaks counters on some rejection paths (§7.2 QUIRK).
Deliberate differences from upstream are listed in docs/allocator.md.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple

from extender.core.answers import (
    CLASSIC_NOT_SUPPORTED,
    INVALID_POOLS,
    NO_CLASS_DEVICES_HERE,
    NOT_AVAILABLE,
    UNFIT,
    Unfit,
    Unresolvable,
)
from extender.core.budget import CHECK_EVERY, SearchBudget
from extender.core.capacity import capacity_fits, consumed_capacity
from extender.core.cel import CelCompileError, CelRuntimeError, SelectorCache
from extender.core.constraints import Constraint, build_constraint
from extender.core.errors import CelError, NodeUnresolvable, PodUnschedulable
from extender.core.model import (
    ALLOCATION_MODE_ALL,
    ALLOCATION_MODE_EXACT_COUNT,
    CONFIG_SOURCE_CLAIM,
    CONFIG_SOURCE_CLASS,
    MAX_DEVICES_PER_CLAIM,
    AllocatedState,
    AllocationConfig,
    AllocationResult,
    Device,
    DeviceClass,
    DeviceID,
    DeviceResult,
    DeviceTaint,
    DeviceToleration,
    ExactRequest,
    Features,
    NodeInfo,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    ResourceClaim,
    ResourceSlice,
)
from extender.core.nodeselector import node_matches, pinned_node_names
from extender.core.pools import (
    CounterKey,
    DeviceEntry,
    NodeView,
    Pool,
    PoolNodeSelectionError,
    SliceSnapshot,
    counters_left,
)
from extender.core.quantity import Quantity

__all__ = [
    "BLOCKING_TAINT_EFFECTS",
    "INVALID_POOLS",
    "Allocation",
    "Allocator",
    "AnswerSet",
    "NodeAnswer",
    "RequestCheck",
    "allocate_claims",
    "taint_blocks",
    "tolerates",
]

_OK, _FAIL, _MAXSIZE = 0, 1, 2
#: The search's steps on the first path of a one-device pod: the device's slot, the end of its
#: request, the end of its claim, and the final step (what ``allocate_many``'s tight loop skips).
_ONE_DEVICE_PATH_STEPS = 4


# --- taints ---------------------------------------------------------------------------------


def tolerates(toleration: DeviceToleration, taint: DeviceTaint) -> bool:
    """Whether one toleration matches one taint (docs/semantics.md §9)."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    if toleration.operator in ("Equal", ""):
        return toleration.value == taint.value
    return False


#: Device taint effects that keep a device from requests that do not tolerate them (``None`` and
#: unknown effects never do).
BLOCKING_TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def taint_blocks(taints: Iterable[DeviceTaint], tolerations: Sequence[DeviceToleration]) -> DeviceTaint | None:
    """The first taint that blocks allocation (NoSchedule/NoExecute, not tolerated), else None."""
    for taint in taints:
        if taint.effect not in BLOCKING_TAINT_EFFECTS:
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


# --- results --------------------------------------------------------------------------------


_Built = tuple[tuple[AllocationResult, ...], tuple[tuple[Device, ...], ...], tuple[tuple[int | None, ...], ...]]


class Allocation:
    """A successful allocation of all claims on one node.

    The allocator returns it lazily: a filter only needs to know that the claims fit, so the
    results are built the first time ``results`` is read (or ``picked``, when the allocator did not
    say which entries it picked). ``detached()`` gives the part that caches keep.
    """

    __slots__ = ("_build", "_built", "_chosen", "_consumed", "_entries", "node")

    def __init__(
        self,
        *,
        node: str,
        results: tuple[AllocationResult, ...] = (),
        picked: tuple[tuple[Device, ...], ...] = (),
        chosen_subrequests: tuple[tuple[int | None, ...], ...] = (),
    ) -> None:
        self.node = node
        self._built: _Built | None = (results, picked, chosen_subrequests)
        self._build: Callable[[], _Built] | None = None
        self._consumed: tuple[DeviceID, ...] | None = None
        self._chosen: tuple[tuple[int | None, ...], ...] | None = None
        self._entries: _Entries | None = None

    @classmethod
    def deferred(
        cls,
        node: str,
        build: Callable[[], _Built],
        consumed: tuple[DeviceID, ...] | None = None,
        chosen: tuple[tuple[int | None, ...], ...] | None = None,
        entries: _Entries | None = None,
    ) -> Allocation:
        """An allocation whose results ``build`` makes on first access; ``consumed``, ``chosen`` and
        ``entries`` (per claim, the picked pool entries in result order), when given, answer
        scoring without building them."""
        allocation = object.__new__(cls)  # hot path: one per fitting node in a filter
        allocation.node = node
        allocation._built = None
        allocation._build = build
        allocation._consumed = consumed
        allocation._chosen = chosen
        allocation._entries = entries
        return allocation

    def detached(self) -> Allocation:
        """The same allocation without the means to build results: node, consumed devices, chosen
        subrequests and picked devices only, which is all that filter verdicts and scores need.

        Caches keep detached allocations so that they hold no allocator, snapshot or allocated
        state alive. Reading ``results`` of a detached allocation raises LookupError.
        """
        entries = self._entries
        if entries is None:
            results, picked, _ = self._parts()
            entries = tuple(
                tuple(
                    _PickedDevice(result.device_id, device)
                    for result, device in zip(claim.devices, devices, strict=True)
                )
                for claim, devices in zip(results, picked, strict=True)
            )
        return Allocation.deferred(
            self.node, _results_not_kept, self.consumed_devices, self.chosen_subrequests, entries
        )

    @property
    def consumed_devices(self) -> tuple[DeviceID, ...]:
        """The devices this allocation takes (admin-access picks excluded), without building the
        results: what binpack/spread scoring needs for every candidate node."""
        consumed = self._consumed
        if consumed is None:
            consumed = self._consumed = tuple(
                result.device_id for claim in self.results for result in claim.devices if not result.admin_access
            )
        return consumed

    def _parts(self) -> _Built:
        built = self._built
        if built is None:
            assert self._build is not None
            built = self._built = self._build()
            self._build = None
        return built

    @property
    def results(self) -> tuple[AllocationResult, ...]:
        """One AllocationResult per claim, in the claims' order."""
        return self._parts()[0]

    @property
    def picked(self) -> tuple[tuple[Device, ...], ...]:
        """Per claim, the Device objects in the same order as ``results[i].devices``."""
        if self._entries is not None:
            return tuple(tuple(entry.device for entry in claim) for claim in self._entries)
        return self._parts()[1]

    @property
    def picked_ids(self) -> tuple[tuple[DeviceID, ...], ...]:
        """Per claim, the IDs of ``picked``."""
        if self._entries is not None:
            return tuple(tuple(entry.id for entry in claim) for claim in self._entries)
        return tuple(tuple(result.device_id for result in claim.devices) for claim in self.results)

    @property
    def chosen_subrequests(self) -> tuple[tuple[int | None, ...], ...]:
        """Per claim, per request: the index of the chosen firstAvailable subrequest, else None."""
        if self._chosen is not None:
            return self._chosen
        return self._parts()[2]

    def __repr__(self) -> str:
        if self._build is _results_not_kept:
            return f"Allocation(node={self.node!r}, picked={self.picked_ids!r}, detached)"
        return f"Allocation(node={self.node!r}, results={self.results!r})"


#: What the pod gets on a node: the devices (it fits), not now, or not as things stand.
NodeAnswer = Allocation | Unfit | Unresolvable


class AnswerSet(NamedTuple):
    """``Allocator.answer_many``'s answers: the nodes decided one by one, and the nodes a
    pre-allocated claim rules out by name, all answered ``NOT_AVAILABLE`` at once."""

    decided: dict[str, NodeAnswer]
    elsewhere: dict[str, Unresolvable]


class RequestCheck(NamedTuple):
    """The allocator's own checks of one request (or firstAvailable subrequest), for counting a
    node's devices through them (``Allocator.check_request``; explain uses it)."""

    device_class: DeviceClass
    admin_access: bool
    #: Class and request selectors for every device of a slice, in upstream's order (stop at the
    #: first false); a fatal selector error as the value, raised when the device is reached.
    selectable: Callable[[ResourceSlice], Sequence[bool | PodUnschedulable]]


def _results_not_kept() -> _Built:
    raise LookupError("a detached Allocation keeps no results; allocate again to get them")


class _PickedDevice(NamedTuple):
    """What ``Allocation.detached`` keeps of a picked device when it has no pool entry for it."""

    id: DeviceID
    device: Device


_Entries = tuple[tuple[DeviceEntry | _PickedDevice, ...], ...]


@dataclass(slots=True, eq=False)
class _Request:
    """Everything about one request or subrequest that does not depend on the node."""

    claim_index: int
    name: str  # "req" or "req/sub"
    base: str  # "req"
    sub: str | None  # "sub" or None
    spec: ExactRequest
    device_class: DeviceClass
    admin: bool
    #: (expression, error prefix) in evaluation order: class selectors, then request selectors.
    selectors: tuple[tuple[str, str], ...]
    #: Per slice, the per-device selection verdicts (see Allocator._is_selectable).
    by_slice: dict[ResourceSlice, Sequence[bool | PodUnschedulable | CelRuntimeError]] = field(default_factory=dict)
    #: ``get`` of the SelectorCache's table when one selector decides alone (shared by every
    #: allocator, so a later pod finds the verdicts ready), else ``by_slice.get``.
    lookup: Callable[[ResourceSlice], Sequence[bool | PodUnschedulable | CelRuntimeError] | None] | None = None
    shared: bool = False


@dataclass(slots=True, eq=False)
class _Pick:
    request: _Request
    entry: DeviceEntry
    share_id: str | None
    consumed: Mapping[str, Quantity] | None


@dataclass(slots=True, eq=False)
class _RequestPlan:
    """A request (or subrequest) prepared for one node: how many devices, and for All which ones."""

    request: _Request
    count: int
    all_devices: tuple[DeviceEntry, ...] | None  # None for ExactCount


class _FirstPathStep(NamedTuple):
    claim: int
    request_index: int
    request: _Request
    devices: int
    first_available: bool


def _accept(constraints: Sequence[Constraint], req: _Request, entry: DeviceEntry) -> bool:
    """Add the device to every constraint, or to none (undoing partial adds)."""
    added: list[Constraint] = []
    for constraint in constraints:
        if not constraint.add(req.base, req.sub, entry.device, entry.id.driver):
            for done in reversed(added):
                done.remove(req.base, req.sub, entry.device, entry.id.driver)
            return False
        added.append(constraint)
    return True


# --- the allocator --------------------------------------------------------------------------


class Allocator:
    """Allocates the devices of a pod's unallocated claims, one node at a time (see module doc)."""

    def __init__(
        self,
        claims: Sequence[ResourceClaim],
        *,
        classes: Mapping[str, DeviceClass],
        snapshot: SliceSnapshot,
        allocated: AllocatedState | None = None,
        features: Features = Features(),
        selectors: SelectorCache | None = None,
        preallocated: Sequence[ResourceClaim] = (),
        shortcuts: bool = True,
        budget: SearchBudget | None = None,
    ) -> None:
        """``claims``: the pod's unallocated claims, in pod order. ``preallocated``: its claims that
        are already allocated; a node must satisfy each one's ``allocation.nodeSelector`` (their
        devices belong in ``allocated`` like every other allocated claim's). ``budget``: each
        node's time limit and where the search lets others run (``extender.core.budget``; default:
        upstream's 10 s per node, never yielding). ``shortcuts=False``
        runs the full search on every node, without the first path and the tight loop that
        settle the common pods faster with the same answers (the reference the tests hold them to)."""
        self.claims = tuple(claims)
        self.preallocated = tuple(c for c in preallocated if c.allocation is not None)
        self.classes = classes
        self.snapshot = snapshot
        self.allocated = allocated if allocated is not None else AllocatedState()
        self.features = features
        self.selectors = (
            selectors if selectors is not None else SelectorCache(consumable_capacity=features.consumable_capacity)
        )
        self.search_steps = 0
        self.shortcuts = shortcuts
        self.budget = budget if budget is not None else SearchBudget()
        self._classic = next((claim for claim in self.claims if claim.controller), None)
        # Without All-mode requests, preparing the claims (docs/semantics.md §5) gives the same plans, or the
        # same fatal error, on every node: do it once.
        self.node_independent = not any(
            spec.allocation_mode == ALLOCATION_MODE_ALL
            for claim in self.claims
            for request in claim.requests
            for spec in ((request.exactly,) if request.exactly is not None else request.first_available)
        )
        self.static_plans: dict[tuple[int, int, int | None], _RequestPlan] | None = None
        self.static_error: PodUnschedulable | None = None
        # The requests of the first-path shortcut, False when it does not apply, None before the
        # first allocate().
        self._simple: list[_FirstPathStep] | bool | None = None
        #: No constraints and no firstAvailable: the tight loop of allocate_many may run.
        self._simple_plain = False
        #: chosen_subrequests of a first-path allocation (0 for firstAvailable requests).
        self._first_path_chosen: tuple[tuple[int | None, ...], ...] = ()
        # Node-independent preparation, done lazily so that errors surface from allocate() in
        # upstream's order. Values are a _Request or the fatal error it must raise.
        self._prepared: dict[tuple[int, int, int | None], _Request | PodUnschedulable] = {}
        # Combined selector results per (request, slice): aligned with slice.devices.
        self._selectable: dict[tuple[int, ResourceSlice], list[bool | PodUnschedulable]] = {}
        # Shared counters left per counter set after other claims' allocations (per pool object).
        self._available_counters: dict[tuple[int, CounterKey], dict[str, Quantity]] = {}

    # -- public ---------------------------------------------------------------------------

    def allocate(self, node: NodeInfo) -> Allocation | None:
        """The search on one node (module docstring); ``search_steps`` counts its steps. Raises
        ``AllocationTimedOut`` when the node's budget runs out."""
        self.search_steps = 0
        self._refuse_classic()
        self.budget.start(node.name)
        if self.preallocated and self._unavailable_claim(node) is not None:
            return None
        view = self._view(node)
        if self.node_independent and self.shortcuts:
            first_path = self._first_path(node, view)
            if first_path is not None:
                return first_path
        search = _Search(self, node, view)
        outcome = search.run()
        self.search_steps = search.steps
        if outcome == _OK:
            if any(not pick.entry.plain for picks in search.results for pick in picks):
                # Results of non-plain devices may raise (node selector with several terms):
                # build now so that a fatal error surfaces from allocate(), as upstream's does.
                built = search.build(node)
                return Allocation.deferred(node.name, lambda: built)
            consumed = tuple(p.entry.id for picks in search.results for p in picks if not p.request.admin)
            entries = tuple(tuple(p.entry for p in picks) for picks in search.results)
            return Allocation.deferred(node.name, lambda: search.build(node), consumed, search.chosen_tuple(), entries)
        if view.has_invalid_pool:
            raise NodeUnresolvable(INVALID_POOLS, node=node.name)
        return None

    def allocate_many(self, nodes: Iterable[NodeInfo]) -> list[Allocation | NodeUnresolvable | None]:
        """``allocate`` for every node, in order, as a filter over many nodes needs it.

        Per node: an Allocation, None (does not fit) or the NodeUnresolvable it raised. A fatal
        PodUnschedulable stops the loop and propagates, as it fails the whole attempt. The most
        common pod — one plain request for one device — runs in one tight loop over the nodes;
        every node it cannot settle goes through ``allocate``.
        """
        nodes = list(nodes)
        if not nodes:
            return []
        self._refuse_classic()
        simple = None
        if not self.preallocated and self.node_independent and self.shortcuts:
            simple = self._simple if isinstance(self._simple, list) else None
            if self._simple is None:
                simple = self._simple_plan(nodes[0], self._view(nodes[0]))
        if simple is None or len(simple) != 1 or simple[0].devices != 1 or not self._simple_plain:
            out_all: list[Allocation | NodeUnresolvable | None] = []
            total = 0
            for node in nodes:
                out_all.append(self._allocate_one(node))
                total += self.search_steps
            self.search_steps = total
            return out_all
        c, req = simple[0].claim, simple[0].request
        lookup = req.lookup
        assert lookup is not None
        allocated = self.allocated.devices
        view_of = self._view
        build = self._build_first_path
        out: list[Allocation | NodeUnresolvable | None] = []
        steps = 0
        tick = self.budget.tick
        for position, node in enumerate(nodes):
            if not position & 15:
                tick()  # a place to let others run, every 16 nodes
            view = view_of(node)
            for entry in view.devices:
                if entry.id in allocated:
                    continue
                values = lookup(entry.slice)
                verdict = values[entry.index] if values is not None else None
                if verdict is True or (verdict is not False and self._is_selectable(req, entry)):
                    if entry.plain:
                        out.append(
                            Allocation.deferred(
                                node.name,
                                partial(build, node, view, ((c, req, entry),)),
                                (entry.id,),
                                self._first_path_chosen,
                                ((entry,),),
                            )
                        )
                        steps += _ONE_DEVICE_PATH_STEPS
                    else:
                        out.append(self._allocate_one(node))
                        steps += self.search_steps
                    break
            else:
                out.append(self._allocate_one(node))  # the full search decides: unfit or invalid pools
                steps += self.search_steps
        self.search_steps = steps
        return out

    def _refuse_classic(self) -> None:
        """A claim its driver's controller allocates (classic DRA) is never allocated here: a
        structured device that matches its class is not what its driver would give it."""
        if self._classic is not None:
            key = self._classic.key
            raise PodUnschedulable(f"claim {key}: {CLASSIC_NOT_SUPPORTED}", claim=key)

    def _allocate_one(self, node: NodeInfo) -> Allocation | NodeUnresolvable | None:
        try:
            return self.allocate(node)
        except NodeUnresolvable as exc:
            return exc

    # -- the contract ---------------------------------------------------------------------

    def answer(self, node: NodeInfo) -> NodeAnswer:
        """What the pod gets on ``node`` (module docstring). Raises ``PodUnschedulable``."""
        try:
            allocation = self.allocate(node)
        except NodeUnresolvable as exc:
            return Unresolvable(exc.reason)
        return allocation if allocation is not None else self._why_not(node)

    def answer_many(self, names: Iterable[str], node: Callable[[str], NodeInfo]) -> AnswerSet:
        """``answer`` for every node named (``node(name)`` gives its labels), as a filter over many
        nodes needs it. The nodes a pre-allocated claim's allocation rules out by name are settled
        together, without looking at them one by one (``AnswerSet.elsewhere``); the others are
        decided in name order (a stable order; each answer is its own). Raises ``PodUnschedulable``."""
        remaining = set(names)
        elsewhere: dict[str, Unresolvable] = {}
        for claim in self.preallocated:
            assert claim.allocation is not None
            selector = claim.allocation.node_selector
            pinned = None if selector is None else pinned_node_names(selector)
            if pinned is None:
                continue  # no node selector, or one matched node by node (in ``allocate``)
            outside = remaining.difference(pinned)
            if outside:
                elsewhere.update(dict.fromkeys(outside, Unresolvable(NOT_AVAILABLE, claim.key)))
                remaining.intersection_update(pinned)
        nodes = [node(name) for name in sorted(remaining)]
        decided: dict[str, NodeAnswer] = {}
        for info, outcome in zip(nodes, self.allocate_many(nodes), strict=True):
            if isinstance(outcome, Allocation):
                decided[info.name] = outcome
            elif outcome is None:
                decided[info.name] = self._why_not(info)
            else:
                decided[info.name] = Unresolvable(outcome.reason)
        return AnswerSet(decided, elsewhere)

    def _why_not(self, node: NodeInfo) -> Unfit | Unresolvable:
        """Why ``allocate`` found nothing on ``node``."""
        unavailable = self._unavailable_claim(node)
        if unavailable is not None:
            return Unresolvable(NOT_AVAILABLE, unavailable.key)
        if self._lacks_class_devices(node):
            return NO_CLASS_DEVICES_HERE
        return UNFIT

    def _view(self, node: NodeInfo) -> NodeView:
        try:
            return self.snapshot.node_view(node, self.features)
        except PoolNodeSelectionError as exc:
            raise PodUnschedulable(f"gather pool information: {exc}", node=node.name) from exc

    def _lacks_class_devices(self, node: NodeInfo) -> bool:
        """Whether some request (every alternative of a firstAvailable one) has no device of its
        DeviceClass on the node at all, in complete pools: waiting for other pods cannot help
        there. Conservative: false when a pool is incomplete or a class selector fails."""
        view = self._view(node)
        if any(pool.incomplete for pool in view.pools):
            return False
        for c, claim in enumerate(self.claims):
            for r, request in enumerate(claim.requests):
                alternatives: Sequence[int | None] = (
                    (None,) if request.exactly is not None else range(len(request.first_available))
                )
                try:
                    if not any(self._class_present(self._request_for(c, r, s), view) for s in alternatives):
                        return True
                except (PodUnschedulable, CelCompileError):
                    return False
        return False

    def _class_present(self, req: _Request, view: NodeView) -> bool:
        expressions = [expression for expression, _ in req.selectors[: len(req.device_class.selectors)]]
        for entry in view.devices:
            if all(self.selectors.results(e, entry.slice)[entry.index] is True for e in expressions):
                return True
        return False

    def _unavailable_claim(self, node: NodeInfo) -> ResourceClaim | None:
        """The first pre-allocated claim whose allocation cannot be used on this node (upstream:
        "resourceclaim not available on the node"), else None."""
        for claim in self.preallocated:
            assert claim.allocation is not None
            selector = claim.allocation.node_selector
            if selector is None:
                continue
            try:
                if not node_matches(selector, node):
                    return claim
            except ValueError as exc:
                raise PodUnschedulable(f"claim {claim.key}: allocation node selector: {exc}", claim=claim.key) from exc
        return None

    # -- the first-path shortcut --------------------------------------------------------

    def _simple_plan(self, node: NodeInfo, view: NodeView) -> list[_FirstPathStep] | None:
        """The requests in search order when the first path can be walked directly: every request
        is ExactCount without admin access or capacity requests (for a firstAvailable request: its
        first alternative). Constraints are allowed (checked on the way). Else None."""
        if self._simple is None:
            _Search(self, node, view).ensure_plans()  # raises the static error, if any
            plans = self.static_plans
            assert plans is not None
            simple: list[_FirstPathStep] = []
            for c, claim in enumerate(self.claims):
                for r, request in enumerate(claim.requests):
                    sub = None if request.exactly is not None else 0
                    spec = request.exactly if sub is None else request.first_available[0]
                    if spec is None or spec.admin_access or spec.capacity_requests is not None:
                        self._simple = False
                        return None
                    plan = plans[(c, r, sub)]
                    simple.append(_FirstPathStep(c, r, plan.request, plan.count, sub is not None))
            self._simple = simple
            self._simple_plain = not any(claim.constraints for claim in self.claims) and not any(
                s.first_available for s in simple
            )
            self._first_path_chosen = tuple(
                tuple(0 if request.first_available else None for request in claim.requests) for claim in self.claims
            )
        return self._simple if isinstance(self._simple, list) else None

    def _first_path(self, node: NodeInfo, view: NodeView) -> Allocation | None:
        """Walk the depth-first search's first path without its machinery.

        The search takes, request by request (a firstAvailable request with its first alternative),
        the first free selected devices in order that the claim's constraints accept; if that path
        succeeds it *is* the search's answer (same devices, same errors on the way, same step
        count). Anything else — a device that needs counter, taint or capacity checks, too few
        devices (backtracking or a later alternative might help), the 32-device limit — returns
        None and the full search runs.
        """
        simple = self._simple if isinstance(self._simple, list) else self._simple_plan(node, view)
        if simple is None:
            return None
        allocated = self.allocated.devices
        devices = view.devices
        picks: list[tuple[int, _Request, DeviceEntry]] = []
        taken: set[DeviceID] = set()
        per_claim = [0] * len(self.claims)
        constraints: list[list[Constraint]] | None = None
        if not self._simple_plain:
            distinct = self.features.consumable_capacity
            constraints = [
                [k for k in (build_constraint(x, distinct_supported=distinct) for x in claim.constraints) if k]
                for claim in self.claims
            ]
        steps = 0
        for step in simple:
            c, req, count = step.claim, step.request, step.devices
            if per_claim[c] + count > MAX_DEVICES_PER_CLAIM:
                return None  # the search would try another alternative
            claim_constraints = constraints[c] if constraints is not None else ()
            lookup = req.lookup
            assert lookup is not None
            got = 0
            for entry in devices:
                dev_id = entry.id
                if dev_id in allocated or dev_id in taken:
                    continue
                values = lookup(entry.slice)
                verdict = values[entry.index] if values is not None else None
                if verdict is not True and (verdict is False or not self._is_selectable(req, entry)):
                    continue
                if not entry.plain:
                    return None
                if claim_constraints and not _accept(claim_constraints, req, entry):
                    continue
                taken.add(dev_id)
                picks.append((c, req, entry))
                got += 1
                steps += 1  # the search's step that fills this slot
                if got == count:
                    break
            else:
                return None
            per_claim[c] += count
            steps += 1 + step.first_available  # the request's end (and a firstAvailable choice)
        # the search then ends each claim and takes its final step
        self.search_steps = steps + len(self.claims) + 1
        consumed = tuple(entry.id for _, _, entry in picks)
        entries = tuple(tuple(entry for claim, _, entry in picks if claim == c) for c in range(len(self.claims)))
        return Allocation.deferred(
            node.name, partial(self._build_first_path, node, view, picks), consumed, self._first_path_chosen, entries
        )

    def _build_first_path(
        self, node: NodeInfo, view: NodeView, picks: Sequence[tuple[int, _Request, DeviceEntry]]
    ) -> _Built:
        search = _Search(self, node, view)
        for c, req, entry in picks:
            search.results[c].append(_Pick(req, entry, None, None))
        for c, claim in enumerate(self.claims):
            for r, request in enumerate(claim.requests):
                if request.first_available:
                    search.chosen[(c, r)] = 0
        return search.build(node)

    # -- node-independent preparation ----------------------------------------------------

    def _request_for(self, c: int, r: int, s: int | None) -> _Request:
        key = (c, r, s)
        cached = self._prepared.get(key)
        if cached is None:
            try:
                cached = self._prepare(c, r, s)
            except PodUnschedulable as exc:
                cached = exc
            self._prepared[key] = cached
        if isinstance(cached, PodUnschedulable):
            raise cached
        return cached

    def _prepare(self, c: int, r: int, s: int | None) -> _Request:
        claim = self.claims[c]
        request = claim.requests[r]
        spec = request.exactly if s is None else request.first_available[s]
        assert spec is not None
        name = request.name if s is None else f"{request.name}/{spec.name}"
        where = f"claim {claim.key}, request {name}"
        for i, expression in enumerate(spec.selectors):
            if expression is None:
                raise PodUnschedulable(
                    f"{where}, selector #{i}: CEL expression empty (unsupported selector type?)", claim=claim.key
                )
        if spec.admin_access is not None and not self.features.admin_access:
            raise PodUnschedulable(f"{where}: admin access is requested, but the feature is disabled", claim=claim.key)
        if not spec.device_class_name:
            raise PodUnschedulable(f"{where}: missing device class name (unsupported request type?)", claim=claim.key)
        device_class = self.classes.get(spec.device_class_name)
        if device_class is None:
            raise PodUnschedulable(
                f"{where}: could not retrieve device class {spec.device_class_name}: "
                f'deviceclass.resource.k8s.io "{spec.device_class_name}" not found',
                claim=claim.key,
            )
        if spec.allocation_mode not in (ALLOCATION_MODE_EXACT_COUNT, ALLOCATION_MODE_ALL):
            raise PodUnschedulable(f"{where}: unsupported count mode {spec.allocation_mode}", claim=claim.key)
        selectors: list[tuple[str, str]] = []
        for i, expression in enumerate(device_class.selectors):
            if expression is None:
                raise PodUnschedulable(
                    f"class {device_class.name}: selector #{i}: CEL expression empty (unsupported selector type?)",
                    claim=claim.key,
                )
            selectors.append((expression, f"class {device_class.name}: selector #{i}"))
        for i, expression in enumerate(spec.selectors):
            assert expression is not None
            selectors.append((expression, f"claim {claim.key}: selector #{i}"))
        prepared = _Request(
            claim_index=c,
            name=name,
            base=request.name,
            sub=None if s is None else spec.name,
            spec=spec,
            device_class=device_class,
            admin=bool(spec.admin_access),
            selectors=tuple(selectors),
        )
        if len(selectors) == 1 and self.features.device_binding_and_status:
            prepared.shared = True
            prepared.lookup = self.selectors.table(selectors[0][0]).get
        else:
            prepared.lookup = prepared.by_slice.get
        return prepared

    # -- for explanations -------------------------------------------------------------------

    def check_request(self, c: int, r: int, s: int | None) -> RequestCheck:
        """What the search checks for claim ``c``'s request ``r`` (subrequest ``s``). Raises the
        ``PodUnschedulable`` that ``answer`` would for it (a missing class, an empty selector...)."""
        req = self._request_for(c, r, s)
        return RequestCheck(req.device_class, req.admin, partial(self._selectable_in_slice, req))

    def counters_left(self, pool: Pool) -> dict[CounterKey, dict[str, Quantity]]:
        """The pool's shared counters minus what devices allocated to other claims consume."""
        return self._counters_left(pool)

    def for_claims(self, claims: Sequence[ResourceClaim]) -> Allocator:
        """An allocator for other claims over the same cluster state and selector cache."""
        return Allocator(
            claims,
            classes=self.classes,
            snapshot=self.snapshot,
            allocated=self.allocated,
            features=self.features,
            selectors=self.selectors,
            budget=self.budget,
        )

    # -- selection ----------------------------------------------------------------------

    def _selectable_in_slice(self, req: _Request, slice_: ResourceSlice) -> list[bool | PodUnschedulable]:
        """Class + request selectors for every device of the slice, evaluated in upstream order
        (stop at the first false). Errors are kept as values and raised when the device is reached."""
        key = (id(req), slice_)
        combined = self._selectable.get(key)
        if combined is not None:
            return combined
        n = len(slice_.devices)
        combined = [True] * n
        pending = list(range(n))
        for expression, prefix in req.selectors:
            if not pending:
                break
            try:
                results = self.selectors.results(expression, slice_)
            except CelCompileError as exc:
                error: PodUnschedulable = CelError(f"{prefix}: CEL compile error: {exc.message}")
                for i in pending:
                    combined[i] = error
                pending = []
                break
            still: list[int] = []
            for i in pending:
                value = results[i]
                if value is True:
                    still.append(i)
                elif value is False:
                    combined[i] = False
                else:
                    assert isinstance(value, CelRuntimeError)
                    combined[i] = CelError(f"{prefix}: CEL runtime error: {value.message}")
            pending = still
        if not self.features.device_binding_and_status:
            for i, device in enumerate(slice_.devices):
                if device.binding_conditions:
                    combined[i] = False
        self._selectable[key] = combined
        return combined

    def _is_selectable(self, req: _Request, entry: DeviceEntry) -> bool:
        assert req.lookup is not None
        values = req.lookup(entry.slice)
        if values is None:
            values = self._selection_values(req, entry.slice)
        value = values[entry.index]
        if value is True:
            return True
        if value is False:
            return False
        if isinstance(value, CelRuntimeError):  # only from the single-selector shortcut
            raise CelError(f"{req.selectors[0][1]}: CEL runtime error: {value.message}")
        raise value

    def _selection_values(
        self, req: _Request, slice_: ResourceSlice
    ) -> Sequence[bool | PodUnschedulable | CelRuntimeError]:
        """Per-device verdicts for the hot path. With one selector (the common class-only case)
        the SelectorCache's tuple is used as is, without copying."""
        if req.shared:
            try:
                return self.selectors.results(req.selectors[0][0], slice_)  # fills the shared table
            except CelCompileError:
                return self._selectable_in_slice(req, slice_)  # the prefixed error, kept out of the table
        values = self._selectable_in_slice(req, slice_)
        req.by_slice[slice_] = values
        return values

    def _counters_left(self, pool: Pool) -> dict[CounterKey, dict[str, Quantity]]:
        """Counters of the pool minus what devices allocated to other claims consume.

        Shared devices in use count once (the 1.37 fix); admin-access allocations do not count.
        """
        result: dict[CounterKey, dict[str, Quantity]] = {}
        missing = False
        for key in pool.counter_sets:
            cached = self._available_counters.get((id(pool), key))
            if cached is None:
                missing = True
                break
            result[key] = cached
        if not missing:
            return result
        result = counters_left(pool, self.allocated)
        for key, left in result.items():
            self._available_counters[(id(pool), key)] = left
        return result


# --- one allocate() call --------------------------------------------------------------------


class _Search:
    """State of one allocate() call: the depth-first search and its exact undo log."""

    def __init__(self, allocator: Allocator, node: NodeInfo, view: NodeView) -> None:
        self.a = allocator
        self.node = node
        self.pools = view.pools
        self.devices = view.devices
        self.pool_of = view.counter_pools
        self.claims = allocator.claims
        self.budget = allocator.budget
        self.steps = 0
        # device id -> claim indices currently holding it in this attempt (non-shared picks)
        self.allocating: dict[DeviceID, set[int]] = {}
        self.consumed_counters: dict[tuple[int, CounterKey], dict[str, Quantity]] = {}
        self.allocating_capacity: dict[DeviceID, dict[str, Quantity]] = {}
        self.results: list[list[_Pick]] = [[] for _ in self.claims]
        self.constraints: list[list[Constraint]] = []
        self.plans: dict[tuple[int, int, int | None], _RequestPlan] = {}
        self.chosen: dict[tuple[int, int], int] = {}

    # -- preparation (docs/semantics.md §5) --------------------------------------------------------------

    def prepare(self) -> None:
        features = self.a.features
        for c, claim in enumerate(self.claims):
            lower_bound = 0
            for r, request in enumerate(claim.requests):
                if request.first_available:
                    if not features.prioritized_list:
                        raise PodUnschedulable(
                            f"claim {claim.key}, request {request.name}: has subrequests, "
                            "but the DRAPrioritizedList feature is disabled",
                            claim=claim.key,
                        )
                    smallest: int | None = None
                    for s, sub in enumerate(request.first_available):
                        if sub.capacity_requests is not None and not features.consumable_capacity:
                            raise PodUnschedulable(
                                f"claim {claim.key}, subrequest {sub.name}: has capacity requests, "
                                "but the DRAConsumableCapacity feature is disabled",
                                claim=claim.key,
                            )
                        plan = self.plan(c, r, s)
                        smallest = plan.count if smallest is None else min(smallest, plan.count)
                    lower_bound += smallest or 0
                elif request.exactly is not None:
                    if request.exactly.capacity_requests is not None and not features.consumable_capacity:
                        raise PodUnschedulable(
                            f"claim {claim.key}, request {request.name}: has capacity requests, "
                            "but the DRAConsumableCapacity feature is disabled",
                            claim=claim.key,
                        )
                    lower_bound += self.plan(c, r, None).count
                else:
                    raise PodUnschedulable(
                        f"claim {claim.key}, request {request.name}: missing device class name "
                        "(unsupported request type?)",
                        claim=claim.key,
                    )
            if lower_bound > MAX_DEVICES_PER_CLAIM:
                raise PodUnschedulable(
                    f"claim {claim.key}: number of requested devices {lower_bound} exceeds the claim limit of "
                    f"{MAX_DEVICES_PER_CLAIM}",
                    claim=claim.key,
                )
            for i, constraint in enumerate(claim.constraints):
                if build_constraint(constraint, distinct_supported=features.consumable_capacity) is None:
                    raise PodUnschedulable(
                        f"claim {claim.key}, constraint #{i}: empty constraint (unsupported constraint type?)",
                        claim=claim.key,
                    )

    def plan(self, c: int, r: int, s: int | None) -> _RequestPlan:
        req = self.a._request_for(c, r, s)
        spec = req.spec
        if spec.allocation_mode == ALLOCATION_MODE_EXACT_COUNT:
            plan = _RequestPlan(req, spec.count, None)
        else:
            chosen: list[DeviceEntry] = []
            for pool in self.pools:
                if pool.incomplete:
                    raise PodUnschedulable(
                        f"claim {self.claims[c].key}, request {req.name}: asks for all devices, but resource pool "
                        f"{pool.driver}/{pool.name} is currently being updated",
                        claim=self.claims[c].key,
                    )
                if pool.invalid_reason is not None:
                    raise PodUnschedulable(
                        f"claim {self.claims[c].key}, request {req.name}: asks for all devices, but resource pool "
                        f"{pool.driver}/{pool.name} is currently invalid",
                        claim=self.claims[c].key,
                    )
            for entry in self.devices:
                if not self.a._is_selectable(req, entry):
                    continue
                if self.a.features.consumable_capacity and not self.capacity_ok(req, entry):
                    continue
                chosen.append(entry)
            plan = _RequestPlan(req, len(chosen), tuple(chosen))
        self.plans[(c, r, s)] = plan
        return plan

    # -- search (docs/semantics.md §6) ------------------------------------------------------------------

    def ensure_plans(self) -> None:
        """Prepare the claims (docs/semantics.md §5), reusing the node-independent result when there is one."""
        a = self.a
        if a.static_plans is not None:
            self.plans = a.static_plans
        elif a.static_error is not None:
            raise a.static_error
        else:
            try:
                self.prepare()
            except PodUnschedulable as exc:
                if a.node_independent:
                    a.static_error = exc
                raise
            if a.node_independent:
                a.static_plans = self.plans

    def run(self) -> int:
        a = self.a
        self.ensure_plans()
        distinct = a.features.consumable_capacity
        self.constraints = [
            [c for c in (build_constraint(k, distinct_supported=distinct) for k in claim.constraints) if c is not None]
            for claim in self.claims
        ]
        return self.step(0, 0, None, 0, False, 0)

    def step(self, c: int, r: int, s: int | None, d: int, in_sub: bool, start: int) -> int:
        self.steps += 1
        if not self.steps & (CHECK_EVERY - 1):
            self.budget.check()
        claims = self.claims
        if c == len(claims):
            return _OK
        claim = claims[c]
        if r == len(claim.requests):
            out = self.step(c + 1, 0, None, 0, False, 0)
            return _FAIL if out == _MAXSIZE else out
        request = claim.requests[r]
        if request.first_available and not in_sub:
            only_maxsize = True
            for k in range(len(request.first_available)):
                out = self.step(c, r, k, 0, True, 0)
                if out == _MAXSIZE:
                    continue
                only_maxsize = False
                if out == _OK:
                    self.chosen[(c, r)] = k
                    return _OK
            return _MAXSIZE if only_maxsize else _FAIL
        plan = self.plans[(c, r, s)]
        if plan.all_devices is not None and not plan.all_devices:
            return _FAIL
        if d == plan.count:
            return self.step(c, r + 1, None, 0, False, 0)
        if len(self.results[c]) + plan.count - d > MAX_DEVICES_PER_CLAIM:
            return _MAXSIZE
        req = plan.request
        if plan.all_devices is not None:
            undo = self.try_device(req, plan.all_devices[d], must=True)
            if undo is None:
                return _FAIL
            out = self.step(c, r, s, d + 1, in_sub, 0)
            if out != _OK:
                undo()
            return out
        devices = self.devices
        if len(devices) - start < plan.count - d:
            # The request still needs more devices than positions are left (devices are taken in
            # increasing position): no branch below can succeed. Without this a request for more
            # devices than the node has tries every subset of them (2^n steps) before failing.
            return _FAIL
        allocated = self.a.allocated.devices
        allocating = self.allocating
        for position in range(start, len(devices)):
            entry = devices[position]
            dev_id = entry.id
            if req.admin:
                holders = allocating.get(dev_id)
                if holders is not None and c in holders:
                    continue
            elif dev_id in allocated or dev_id in allocating:
                continue
            if not self.a._is_selectable(req, entry):
                continue
            if self.a.features.consumable_capacity and not self.capacity_ok(req, entry):
                continue
            undo = self.try_device(req, entry, must=False)
            if undo is None:
                continue
            out = self.step(c, r, s, d + 1, in_sub, position + 1)
            if out == _OK:
                return _OK
            undo()
            if out == _MAXSIZE:
                return _MAXSIZE
        return _FAIL

    # -- per-device checks (docs/semantics.md §7.2) ---------------------------------------------------

    def capacity_ok(self, req: _Request, entry: DeviceEntry) -> bool:
        device = entry.device
        if req.spec.capacity_requests is None and not device.allow_multiple_allocations:
            # An exclusive device with nothing requested: its whole capacity (or the policy
            # default, which validation keeps within it) always fits.
            return True
        return capacity_fits(
            req.spec.capacity_requests,
            device,
            self.a.allocated.consumed_capacity.get(entry.id),
            self.allocating_capacity.get(entry.id),
        )

    def try_device(self, req: _Request, entry: DeviceEntry, *, must: bool) -> Callable[[], None] | None:
        """Check and take one device for ``req``; return its undo, or None when it cannot be used.

        Nothing is changed unless every check passes, so a rejected device leaves no trace.
        """
        features = self.a.features
        c = req.claim_index
        device = entry.device
        dev_id = entry.id
        allow_multi = features.consumable_capacity and device.allow_multiple_allocations
        holders = self.allocating.get(dev_id)
        if req.admin:
            if not allow_multi and holders is not None and c in holders:
                return None
        elif dev_id in self.a.allocated.devices or holders is not None:
            return None
        if device.consumes_counters and not features.partitionable_devices:
            return None

        counter_updates: list[tuple[tuple[int, CounterKey], Mapping[str, Quantity]]] = []
        if entry.counters and not (
            allow_multi and (dev_id in self.a.allocated.consumed_capacity or dev_id in self.allocating_capacity)
        ):
            pool = self.pool_of.get(id(entry))
            if pool is None:
                return None
            available = self.a._counters_left(pool)
            for key, counters in entry.counters:
                already = self.consumed_counters.get((id(pool), key), {})
                left = available[key]
                for name, amount in counters.items():
                    used = already.get(name)
                    total = amount if used is None else used + amount
                    if left[name] < total:
                        return None
                counter_updates.append(((id(pool), key), counters))

        if features.device_taints and device.taints and taint_blocks(device.taints, req.spec.tolerations):
            return None

        added: list[Constraint] = []
        for constraint in self.constraints[c]:
            if not constraint.add(req.base, req.sub, device, dev_id.driver):
                for done in reversed(added):
                    done.remove(req.base, req.sub, device, dev_id.driver)
                if must:
                    raise PodUnschedulable(
                        f"claim {self.claims[c].key}, request {req.name}: cannot add device {dev_id} "
                        "because a claim constraint would not be satisfied",
                        claim=self.claims[c].key,
                    )
                return None
            added.append(constraint)

        share_id: str | None = None
        consumed: Mapping[str, Quantity] | None = None
        if features.consumable_capacity:
            if not self.capacity_ok(req, entry):
                for done in reversed(added):
                    done.remove(req.base, req.sub, device, dev_id.driver)
                return None
            if allow_multi:
                consumed = consumed_capacity(req.spec.capacity_requests, device)
                share_id = str(uuid.uuid4())

        # Commit.
        if not allow_multi:
            self.allocating.setdefault(dev_id, set()).add(c)
        for slot, counters in counter_updates:
            totals = self.consumed_counters.setdefault(slot, {})
            for name, amount in counters.items():
                used = totals.get(name)
                totals[name] = amount if used is None else used + amount
        if consumed:
            totals_cap = self.allocating_capacity.setdefault(dev_id, {})
            for name, amount in consumed.items():
                used = totals_cap.get(name)
                totals_cap[name] = amount if used is None else used + amount
        picks = self.results[c]
        picks.append(_Pick(req, entry, share_id, consumed if consumed else None))
        length = len(picks) - 1

        def undo() -> None:
            for done in reversed(added):
                done.remove(req.base, req.sub, device, dev_id.driver)
            if not allow_multi:
                holders_now = self.allocating[dev_id]
                holders_now.discard(c)
                if not holders_now:
                    del self.allocating[dev_id]
            for slot, counters in counter_updates:
                totals = self.consumed_counters[slot]
                for name, amount in counters.items():
                    totals[name] = totals[name] - amount
            if consumed:
                totals_cap = self.allocating_capacity[dev_id]
                for name, amount in consumed.items():
                    totals_cap[name] = totals_cap[name] - amount
                if all(v.sign() == 0 for v in totals_cap.values()):
                    del self.allocating_capacity[dev_id]
            del picks[length:]

        return undo

    def chosen_tuple(self) -> tuple[tuple[int | None, ...], ...]:
        """Per claim, per request: the firstAvailable index chosen, else None."""
        return tuple(
            tuple(
                self.chosen.get((c, r)) if request.first_available else None for r, request in enumerate(claim.requests)
            )
            for c, claim in enumerate(self.claims)
        )

    # -- results (docs/semantics.md §12) ---------------------------------------------------------------

    def build(self, node: NodeInfo) -> _Built:
        results: list[AllocationResult] = []
        picked: list[tuple[Device, ...]] = []
        chosen: list[tuple[int | None, ...]] = []
        binding = self.a.features.device_binding_and_status
        for c, claim in enumerate(self.claims):
            picks = self.results[c]
            devices = tuple(
                DeviceResult(
                    request=p.request.name,
                    driver=p.entry.id.driver,
                    pool=p.entry.id.pool,
                    device=p.entry.id.device,
                    admin_access=p.request.admin,
                    tolerations=p.request.spec.tolerations if self.a.features.device_taints else (),
                    binding_conditions=p.entry.device.binding_conditions if binding else (),
                    binding_failure_conditions=p.entry.device.binding_failure_conditions if binding else (),
                    share_id=p.share_id,
                    consumed_capacity=p.consumed,
                )
                for p in picks
            )
            claim_chosen = tuple(
                self.chosen.get((c, r)) if request.first_available else None for r, request in enumerate(claim.requests)
            )
            results.append(
                AllocationResult(
                    devices=devices,
                    config=self._configs(c, claim, claim_chosen),
                    node_selector=_node_selector(claim, picks, node),
                )
            )
            picked.append(tuple(p.entry.device for p in picks))
            chosen.append(claim_chosen)
        return tuple(results), tuple(picked), tuple(chosen)

    def _configs(self, c: int, claim: ResourceClaim, chosen: tuple[int | None, ...]) -> tuple[AllocationConfig, ...]:
        """Class configs first (one entry per class config, listing every request of that class),
        then claim configs. A claim config is added once even when it names several requests
        (upstream 1.35 adds it once per named request; fixed in 1.37)."""
        class_entries: dict[str, list[tuple[AllocationConfig, list[str]]]] = {}
        order: list[tuple[AllocationConfig, list[str]]] = []
        for r in range(len(claim.requests)):
            req = self.a._request_for(c, r, chosen[r])
            entries = class_entries.get(req.device_class.name)
            if entries is None:
                entries = [
                    (AllocationConfig(CONFIG_SOURCE_CLASS, (), cfg), [req.name]) for cfg in req.device_class.config
                ]
                class_entries[req.device_class.name] = entries
                order.extend(entries)
            else:
                for _, names in entries:
                    names.append(req.name)
        configs = [AllocationConfig(cfg.source, tuple(names), cfg.opaque) for cfg, names in order]
        for claim_config in claim.config:
            if not claim_config.requests:
                configs.append(AllocationConfig(CONFIG_SOURCE_CLAIM, (), claim_config.opaque))
                continue
            named = set(claim_config.requests)
            for r, request in enumerate(claim.requests):
                sub_index = chosen[r]
                chosen_name = (
                    f"{request.name}/{request.first_available[sub_index].name}" if sub_index is not None else None
                )
                if request.name in named or (chosen_name is not None and chosen_name in named):
                    configs.append(AllocationConfig(CONFIG_SOURCE_CLAIM, claim_config.requests, claim_config.opaque))
                    break
        return tuple(configs)


def _node_selector(claim: ResourceClaim, picks: list[_Pick], node: NodeInfo) -> NodeSelector | None:
    """Spec §12 step 3: node name for node-local devices, merged terms for network-attached ones."""
    fields: list[NodeSelectorRequirement] = []
    expressions: list[NodeSelectorRequirement] = []
    for pick in picks:
        device = pick.entry.device
        source = pick.entry.slice
        if source.per_device_node_selection:
            node_name, selector = device.node_name, device.node_selector
        else:
            node_name, selector = source.node_name, source.node_selector
        if node_name or device.binds_to_node:
            term = NodeSelectorTerm(
                match_fields=(NodeSelectorRequirement("metadata.name", "In", (node.name,)),),
            )
            return NodeSelector((term,))
        if selector is None or not selector.terms:
            continue
        if len(selector.terms) > 1:
            raise PodUnschedulable(
                f"create NodeSelector for claim {claim.name}: unsupported ResourceSlice.NodeSelector with "
                f"{len(selector.terms)} terms",
                claim=claim.key,
            )
        term = selector.terms[0]
        _merge_requirements(fields, term.match_fields)
        _merge_requirements(expressions, term.match_expressions)
    if not fields and not expressions:
        return None
    return NodeSelector((NodeSelectorTerm(match_expressions=tuple(expressions), match_fields=tuple(fields)),))


def _merge_requirements(into: list[NodeSelectorRequirement], new: Iterable[NodeSelectorRequirement]) -> None:
    for requirement in new:
        values = set(requirement.values)
        if any(
            have.key == requirement.key and have.operator == requirement.operator and set(have.values) == values
            for have in into
        ):
            continue
        into.append(requirement)


def allocate_claims(
    claims: Sequence[ResourceClaim],
    node: NodeInfo,
    *,
    slices: Iterable[ResourceSlice] | SliceSnapshot,
    classes: Mapping[str, DeviceClass] | Iterable[DeviceClass],
    allocated: AllocatedState | None = None,
    features: Features = Features(),
    selectors: SelectorCache | None = None,
) -> Allocation | None:
    """One-shot convenience wrapper around ``Allocator`` for a single node."""
    snapshot = slices if isinstance(slices, SliceSnapshot) else SliceSnapshot(slices)
    class_map = classes if isinstance(classes, Mapping) else {c.name: c for c in classes}
    allocator = Allocator(
        claims, classes=class_map, snapshot=snapshot, allocated=allocated, features=features, selectors=selectors
    )
    return allocator.allocate(node)
