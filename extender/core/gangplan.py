"""Joint placement of a gang's devices (spec/workloads-and-gangs.md §7.2): pure, synchronous.

kube-scheduler 1.36 places a gang's members one at a time and never revisits the devices it chose
for earlier ones (kubernetes#138765): a gang fails although a joint choice exists. ``GangPlanner``
decides the devices of the whole gang at once:

- **per-node check**: one allocator run over the claims of *every* member planned on that node, so
  the allocator's own backtracking (across claims, ``firstAvailable``) settles conflicts between
  members on one node (E3b: *b* takes ``h100``, *a* ``a100``; E3c: ``half-1`` and ``half-2``);
- **search**: depth first over the members, most demanding first, nodes in the caller's order
  (its preference), with backtracking; members of one shape are interchangeable, so only one order
  of them is tried. A member may be left out while enough others can still be placed (``need``);
- **shared claims** (the PodGroup's, not allocated yet): a few distinct allocations of them alone
  are tried in turn, each held fixed while the members are searched, so that the first member's
  preference does not fix the shared claim where the gang cannot fit (F3);
- **budget**: at most ``max_checks`` allocator runs; then a greedy pass (one member at a time, as
  upstream does) is the answer if it places enough, else the gang is reported infeasible.

The answer names each placed member's node and the results of its claims, and the shared claims'
results. Everything allocated elsewhere (``allocated``) stays untouched; devices visible from
several nodes (network-attached) are counted across the members' nodes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

from extender.core.allocator import Allocation, Allocator
from extender.core.cel import SelectorCache
from extender.core.errors import AllocationTimedOut, NodeUnresolvable, PodUnschedulable
from extender.core.model import (
    AllocatedState,
    AllocationResult,
    DeviceClass,
    DeviceID,
    Features,
    NodeInfo,
    ResourceClaim,
    SharedDeviceID,
)
from extender.core.pools import SliceSnapshot

__all__ = [
    "DEFAULT_MAX_CHECKS",
    "MAX_SHARED_OPTIONS",
    "GangInfeasible",
    "GangMember",
    "GangPlan",
    "GangPlanner",
    "Placement",
]

#: Allocator runs one plan may make (upstream's spirit: ``numAllocateOneInvocations``).
DEFAULT_MAX_CHECKS = 2000
#: Distinct allocations of a gang's shared claims tried in turn.
MAX_SHARED_OPTIONS = 8
#: Per-node checks (remembered ones too) a plan may make per allocator run it may make.
STEPS_PER_CHECK = 10


@dataclass(frozen=True, slots=True)
class GangMember:
    """One waiting member: its own unallocated claims, the allocated claims it uses (their node
    selectors restrict its nodes), and its shape (members of equal shape are interchangeable)."""

    key: str
    claims: tuple[ResourceClaim, ...] = ()
    preallocated: tuple[ResourceClaim, ...] = ()
    #: Members of one shape are interchangeable and must get the same verdict on every node (the
    #: caller's key of its claims' specs and its allocated claims' selectors); None: unique.
    shape: Hashable = None
    #: The nodes it may go to (None: every node of the plan).
    nodes: frozenset[str] | None = None

    @property
    def demand(self) -> int:
        """Devices it asks for, roughly (``exactly`` counts, one per other request): what
        "most demanding first" orders by."""
        total = 0
        for claim in self.claims:
            for request in claim.requests:
                exact = request.exactly
                total += exact.count if exact is not None and exact.count else 1
        return total


@dataclass(frozen=True, slots=True)
class Placement:
    member: str
    node: str
    #: One per claim of the member, in its claims' order.
    results: tuple[AllocationResult, ...]


@dataclass(frozen=True, slots=True)
class GangPlan:
    placements: tuple[Placement, ...]
    #: The shared claims' results, in their order (() when there were none to allocate).
    shared: tuple[AllocationResult, ...] = ()
    #: Allocator runs it took.
    checks: int = 0
    #: "found" (the search), or "greedy" (the budget ran out; one member at a time placed enough).
    outcome: str = "found"

    def node_of(self, member: str) -> str | None:
        return next((p.node for p in self.placements if p.member == member), None)


@dataclass(frozen=True, slots=True)
class GangInfeasible:
    #: The most members any tried placement held (the reason's "n of m members fit").
    best: int
    checks: int = 0
    #: "infeasible" (the search ended) or "budget" (it ran out, and greedy did not place enough).
    outcome: str = "infeasible"
    #: Members no node fits even alone (their own reasons are the filter's), by key.
    alone: tuple[str, ...] = ()


class _BudgetSpent(Exception):
    pass


def _add(state: AllocatedState, results: Sequence[AllocationResult]) -> None:
    for result in results:
        state.add_allocation(result)


def _remove(state: AllocatedState, results: Sequence[AllocationResult]) -> None:
    """The exact inverse of ``_add``, in any order: the allocator never gives a device (or a share)
    that is in use, so each result's devices are in ``state`` by that result alone, and consumed
    capacity is summed."""
    for result in results:
        for device in result.devices:
            if device.admin_access:
                continue
            if device.share_id is None:
                state.devices.discard(device.device_id)
                continue
            state.shared_ids.discard(SharedDeviceID(device.device_id, device.share_id))
            totals = state.consumed_capacity.get(device.device_id)
            if device.consumed_capacity and totals is not None:
                for name, amount in device.consumed_capacity.items():
                    totals[name] = totals[name] - amount
                if all(value.is_zero() for value in totals.values()):
                    del state.consumed_capacity[device.device_id]


class GangPlanner:
    """See the module docstring. ``allocated``: what is in use outside the gang (never changed:
    the planner works on a copy). ``pace`` is called between allocator runs (the service lets its
    event loop run there)."""

    def __init__(
        self,
        *,
        classes: Mapping[str, DeviceClass],
        snapshot: SliceSnapshot,
        allocated: AllocatedState,
        features: Features = Features(),
        selectors: SelectorCache | None = None,
        max_checks: int = DEFAULT_MAX_CHECKS,
        pace: Callable[[], object] | None = None,
    ) -> None:
        self.classes = classes
        self.snapshot = snapshot
        self.base = allocated
        self.features = features
        self.selectors = selectors if selectors is not None else SelectorCache()
        self.max_checks = max_checks
        self.pace = pace
        self.checks = 0
        #: Every per-node check, remembered or not: what bounds a search whose checks all come
        #: from the memo (an infeasible gang over many equal nodes), ``STEPS_PER_CHECK`` x the runs.
        self.steps = 0
        # With every device on one node, a node's check depends on the members planned there only.
        self._nodes_independent = all(s.node_name for s in snapshot.slices)
        self._memo: dict[tuple[str, tuple[Hashable, ...]], Allocation | None] = {}

    # --- public -------------------------------------------------------------------------------

    def rebase(self, allocated: AllocatedState) -> None:
        """Plan from ``allocated`` from now on (what is in use changed): remembered checks go."""
        self.base = allocated
        self._memo.clear()

    def state_with(self, plan: GangPlan) -> AllocatedState:
        """A copy of the base with everything ``plan`` allocates counted in."""
        state = _copy_state(self.base)
        _add(state, [r for p in plan.placements for r in p.results])
        _add(state, plan.shared)
        return state

    @staticmethod
    def release(state: AllocatedState, results: Sequence[AllocationResult]) -> None:
        _remove(state, results)

    @staticmethod
    def hold(state: AllocatedState, results: Sequence[AllocationResult]) -> None:
        _add(state, results)

    def plan(
        self,
        members: Sequence[GangMember],
        need: int,
        nodes: Sequence[NodeInfo],
        *,
        shared: Sequence[ResourceClaim] = (),
        shared_allocated: Sequence[ResourceClaim] = (),
    ) -> GangPlan | GangInfeasible:
        """Place at least ``need`` of ``members`` (as many as the search finds room for) on
        ``nodes`` (in order of preference), with ``shared`` (the group's unallocated claims)
        allocated once for all of them; ``shared_allocated`` are the group's allocated claims."""
        self.checks = self.steps = 0
        alone: tuple[str, ...] = ()
        best = 0
        candidates: list[GangMember] | None = None
        # a member pinned to no node (kube-scheduler was answered without one for it) takes no part
        members = [m for m in members if m.nodes is None or m.nodes]
        try:
            alone = tuple(m.key for m in members if not self._fits_somewhere(m, nodes, shared_allocated))
            # members no node fits even alone take no part in the search
            candidates = self._ordered([m for m in members if m.key not in alone])
            # short of members: the search still says how many fit together (the reason's figure)
            goal = min(need, len(candidates))
            if not shared and self._homogeneous(candidates):
                return self._by_capacity(candidates, need, nodes, alone)
            options: list[tuple[AllocationResult, ...]] = (
                self._shared_options(shared, shared_allocated, nodes) if shared else [()]
            )
            found = self._search(candidates, goal, nodes, shared, shared_allocated, options)
            if found is not None and goal == need:
                return GangPlan(found[0], found[1], self.checks)
            # the reason's figure: the most members that fit together (each smaller goal searched
            # in full, within the same budget)
            best = goal if found is not None else 0
            for smaller in range(goal - 1, best, -1):
                if self._search(candidates, smaller, nodes, shared, shared_allocated, options) is not None:
                    best = smaller
                    break
        except _BudgetSpent:
            if candidates is None:  # spent before every member was tried alone
                return GangInfeasible(best=0, checks=self.checks, outcome="budget", alone=alone)
            if len(candidates) >= need:
                options = self._shared_options(shared, shared_allocated, nodes) if shared else [()]
                return self._greedy(candidates, need, nodes, shared, shared_allocated, options, alone)
            return GangInfeasible(best=best, checks=self.checks, outcome="budget", alone=alone)
        return GangInfeasible(best=best, checks=self.checks, alone=alone)

    def _homogeneous(self, members: Sequence[GangMember]) -> bool:
        """Whether the members are all one shape, free to go to any node, on nodes whose checks are
        independent of each other: then how many fit on each node alone settles the gang."""
        return (
            bool(members)
            and self._nodes_independent
            and members[0].shape is not None
            and all(m.shape == members[0].shape and m.nodes is None and not m.preallocated for m in members)
        )

    def _by_capacity(
        self, members: Sequence[GangMember], need: int, nodes: Sequence[NodeInfo], alone: tuple[str, ...]
    ) -> GangPlan | GangInfeasible:
        """One shape on independent nodes (the spec's fast path): on each node in turn, as many
        copies as fit (one more each check, stopping at the first that does not); exact, and at most
        members + nodes checks."""
        on_node: dict[str, list[GangMember]] = {}
        results: dict[str, Allocation] = {}
        left = list(members)
        for node in nodes:
            if not left:
                break
            placed: list[GangMember] = []
            while left:
                allocation = self.check(node, [*placed, left[0]], self.base, ())
                if allocation is None:
                    break
                placed.append(left.pop(0))
                results[node.name] = allocation
            if placed:
                on_node[node.name] = placed
        count = len(members) - len(left)
        if count >= need:
            return GangPlan(_placements(on_node, results), (), self.checks)
        return GangInfeasible(best=count, checks=self.checks, alone=alone)

    def _search(
        self,
        members: Sequence[GangMember],
        need: int,
        nodes: Sequence[NodeInfo],
        shared: Sequence[ResourceClaim],
        shared_allocated: Sequence[ResourceClaim],
        options: Sequence[tuple[AllocationResult, ...]],
    ) -> tuple[tuple[Placement, ...], tuple[AllocationResult, ...]] | None:
        """The first placement of at least ``need`` members under any shared-claim option."""
        for option in options:
            state = _copy_state(self.base)
            fixed = list(shared_allocated)
            if option:
                _add(state, option)
                fixed += [dataclasses.replace(c, allocation=r) for c, r in zip(shared, option, strict=True)]
            found = _Search(self, members, need, nodes, state, tuple(fixed)).run()
            if found is not None:
                return found, tuple(option)
        return None

    # --- steps --------------------------------------------------------------------------------

    def check(
        self,
        node: NodeInfo,
        on_node: Sequence[GangMember],
        state: AllocatedState,
        fixed: tuple[ResourceClaim, ...],
        *,
        counted: bool = True,
    ) -> Allocation | None:
        """One allocator run for the claims of every member in ``on_node`` together on ``node``;
        None when they do not fit (or a member can never be placed there). ``counted=False``: not
        against the budget (trying each member alone: a remembered check costs a lookup, and at
        most one real run per node and shape is made)."""
        if counted:
            self.steps += 1
            if self.steps > self.max_checks * STEPS_PER_CHECK:
                raise _BudgetSpent
        if self.pace is not None:
            self.pace()
        key = None
        if self._nodes_independent and not fixed and all(m.shape is not None for m in on_node):
            # in order: the joint results are split back to the members in this order
            key = (node.name, tuple(m.shape for m in on_node))
            if key in self._memo:
                return self._memo[key]
        if counted and self.checks >= self.max_checks:
            raise _BudgetSpent
        self.checks += 1
        claims = [claim for member in on_node for claim in member.claims]
        preallocated = [claim for member in on_node for claim in member.preallocated] + list(fixed)
        allocator = Allocator(
            claims,
            classes=self.classes,
            snapshot=self.snapshot,
            allocated=state,
            features=self.features,
            selectors=self.selectors,
            preallocated=preallocated,
        )
        try:
            allocation = allocator.allocate(node)
        except (NodeUnresolvable, PodUnschedulable, AllocationTimedOut):
            allocation = None
        if key is not None:
            self._memo[key] = allocation
        return allocation

    def _fits_somewhere(
        self, member: GangMember, nodes: Sequence[NodeInfo], shared_allocated: Sequence[ResourceClaim]
    ) -> bool:
        """Whether the member fits on some node alone (checks counted against the budget)."""
        for node in nodes:
            if member.nodes is not None and node.name not in member.nodes:
                continue
            if self.check(node, [member], self.base, tuple(shared_allocated), counted=False) is not None:
                return True
        return False

    def _shared_options(
        self, shared: Sequence[ResourceClaim], shared_allocated: Sequence[ResourceClaim], nodes: Sequence[NodeInfo]
    ) -> list[tuple[AllocationResult, ...]]:
        """Distinct allocations of the shared claims alone, in the order of the first node that
        gets each (at most ``MAX_SHARED_OPTIONS``)."""
        options: list[tuple[AllocationResult, ...]] = []
        seen: set[frozenset[DeviceID]] = set()
        for node in nodes:
            if self.checks >= self.max_checks:
                break
            self.checks += 1
            allocator = Allocator(
                shared,
                classes=self.classes,
                snapshot=self.snapshot,
                allocated=self.base,
                features=self.features,
                selectors=self.selectors,
                preallocated=shared_allocated,
            )
            try:
                allocation = allocator.allocate(node)
            except (NodeUnresolvable, PodUnschedulable, AllocationTimedOut):
                continue
            if allocation is None:
                continue
            results = allocation.results
            devices = frozenset(d.device_id for r in results for d in r.devices)
            if devices in seen:
                continue
            seen.add(devices)
            options.append(results)
            if len(options) >= MAX_SHARED_OPTIONS:
                break
        return options

    def _greedy(
        self,
        members: Sequence[GangMember],
        need: int,
        nodes: Sequence[NodeInfo],
        shared: Sequence[ResourceClaim],
        shared_allocated: Sequence[ResourceClaim],
        options: list[tuple[AllocationResult, ...]],
        alone: tuple[str, ...],
    ) -> GangPlan | GangInfeasible:
        """One member at a time on its first fitting node, no backtracking, with a budget of its
        own: a check per member and node at most, and no more than ``STEPS_PER_CHECK`` times the
        search's (spent, the gang is reported as not placed)."""
        limit = self.max_checks
        own = min(len(members) * len(nodes) * max(1, len(options)), limit * STEPS_PER_CHECK)
        self.max_checks, self.steps = self.checks + own, 0
        try:
            return self._one_at_a_time(members, need, nodes, shared, shared_allocated, options, alone)
        except _BudgetSpent:
            return GangInfeasible(best=0, checks=self.checks, outcome="budget", alone=alone)
        finally:
            self.max_checks = limit

    def _one_at_a_time(
        self,
        members: Sequence[GangMember],
        need: int,
        nodes: Sequence[NodeInfo],
        shared: Sequence[ResourceClaim],
        shared_allocated: Sequence[ResourceClaim],
        options: list[tuple[AllocationResult, ...]],
        alone: tuple[str, ...],
    ) -> GangPlan | GangInfeasible:
        best = 0
        for option in options or [()]:
            state = _copy_state(self.base)
            fixed = list(shared_allocated)
            if option:
                _add(state, option)
                fixed += [dataclasses.replace(c, allocation=r) for c, r in zip(shared, option, strict=True)]
            on_node: dict[str, list[GangMember]] = {}
            results: dict[str, Allocation] = {}
            placed: list[GangMember] = []
            for member in members:
                for node in nodes:
                    if member.nodes is not None and node.name not in member.nodes:
                        continue
                    previous = results.get(node.name)
                    if previous is not None:
                        _remove(state, previous.results)
                    allocation = self.check(node, [*on_node.get(node.name, []), member], state, tuple(fixed))
                    if allocation is None:
                        if previous is not None:
                            _add(state, previous.results)
                        continue
                    _add(state, allocation.results)
                    results[node.name] = allocation
                    on_node.setdefault(node.name, []).append(member)
                    placed.append(member)
                    break
            if len(placed) >= need:
                return GangPlan(_placements(on_node, results), tuple(option), self.checks, outcome="greedy")
            best = max(best, len(placed))
        return GangInfeasible(best=best, checks=self.checks, outcome="budget", alone=alone)

    def _ordered(self, members: Sequence[GangMember]) -> list[GangMember]:
        """Most demanding first, then fewest allowed nodes; equal shapes next to each other."""
        first_of_shape: dict[Hashable, int] = {}
        for i, member in enumerate(members):
            first_of_shape.setdefault(member.shape, i)
        return sorted(
            members,
            key=lambda m: (
                -m.demand,
                len(m.nodes) if m.nodes is not None else float("inf"),
                first_of_shape[m.shape],
                m.key,
            ),
        )


def _copy_state(state: AllocatedState) -> AllocatedState:
    return AllocatedState(
        devices=set(state.devices),
        shared_ids=set(state.shared_ids),
        consumed_capacity={k: dict(v) for k, v in state.consumed_capacity.items()},
    )


def _placements(
    on_node: Mapping[str, Sequence[GangMember]], results: Mapping[str, Allocation]
) -> tuple[Placement, ...]:
    """Split each node's joint allocation back into its members' results."""
    out: list[Placement] = []
    for node, members in on_node.items():
        joint = results[node].results
        at = 0
        for member in members:
            count = len(member.claims)
            out.append(Placement(member.key, node, tuple(joint[at : at + count])))
            at += count
    return tuple(sorted(out, key=lambda p: p.member))


class _Search:
    """One depth-first search with the shared claims held fixed (``GangPlanner.plan``)."""

    def __init__(
        self,
        planner: GangPlanner,
        members: Sequence[GangMember],
        need: int,
        nodes: Sequence[NodeInfo],
        state: AllocatedState,
        fixed: tuple[ResourceClaim, ...],
    ) -> None:
        self.planner = planner
        self.members = members
        self.need = need
        self.nodes = nodes
        self.state = state
        self.fixed = fixed
        self.on_node: dict[str, list[GangMember]] = {}
        self.results: dict[str, Allocation] = {}
        #: Node index each member went to (-1: left out), for the one-order rule of equal shapes.
        self.chosen: list[int] = []
        self.placed = 0

    def run(self) -> tuple[Placement, ...] | None:
        if self._step(0):
            return _placements(self.on_node, self.results)
        return None

    def _step(self, i: int) -> bool:
        members = self.members
        if i == len(members):
            return self.placed >= self.need
        member = members[i]
        # members of one shape free to go to the same nodes are interchangeable: one order of them
        same_as_previous = (
            i > 0
            and member.shape is not None
            and members[i - 1].shape == member.shape
            and members[i - 1].nodes == member.nodes
        )
        start = 0
        if same_as_previous:
            previous = self.chosen[i - 1]
            if previous < 0:
                # equal members: the placed ones come first, so after one left out, all are
                return self._leave_out(i)
            start = previous
        for index in range(start, len(self.nodes)):
            node = self.nodes[index]
            if member.nodes is not None and node.name not in member.nodes:
                continue
            if self._place(i, index, node):
                return True
        return self._leave_out(i)

    def _place(self, i: int, index: int, node: NodeInfo) -> bool:
        member = self.members[i]
        planner, state = self.planner, self.state
        previous = self.results.get(node.name)
        if previous is not None:
            _remove(state, previous.results)
        on_node = self.on_node.get(node.name, [])
        allocation = planner.check(node, [*on_node, member], state, self.fixed)
        if allocation is None:
            if previous is not None:
                _add(state, previous.results)
            return False
        _add(state, allocation.results)
        self.results[node.name] = allocation
        self.on_node.setdefault(node.name, []).append(member)
        self.chosen.append(index)
        self.placed += 1
        if self._step(i + 1):
            return True
        # back out: the node goes back to what it held before this member
        self.placed -= 1
        self.chosen.pop()
        self.on_node[node.name].pop()
        if not self.on_node[node.name]:
            del self.on_node[node.name]
        _remove(state, allocation.results)
        if previous is not None:
            _add(state, previous.results)
            self.results[node.name] = previous
        else:
            del self.results[node.name]
        return False

    def _leave_out(self, i: int) -> bool:
        left = len(self.members) - i - 1
        if self.placed + left < self.need:
            return False
        self.chosen.append(-1)
        if self._step(i + 1):
            return True
        self.chosen.pop()
        return False
