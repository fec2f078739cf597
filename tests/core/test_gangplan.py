"""Joint placement of a gang's devices (``core/gangplan.py``; spec/workloads-and-gangs.md §7.2).

The scenarios are the spec's experiments on v1.36.3 (E1-E4), where kube-scheduler's one-member-at-
a-time choices fail a gang that a joint choice places (kubernetes#138765); a property test holds
the planner to a brute-force search over small random clusters.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.core.allocator import Allocator
from extender.core.gangplan import GangInfeasible, GangMember, GangPlan, GangPlanner
from extender.core.model import (
    AllocatedState,
    CounterConsumption,
    CounterSet,
    NodeInfo,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    ResourceClaim,
    ResourceSlice,
)
from extender.core.pools import SliceSnapshot
from extender.core.quantity import Quantity
from tests import builders as b

GPU = b.device_class("gpu", 'device.driver == "gpu.example.com"')
FABRIC = b.device_class("fabric", 'device.driver == "fabric.example.com"')
CLASSES = {c.name: c for c in (GPU, FABRIC)}
H100 = 'device.attributes["gpu.example.com"].model == "h100"'


def gpus(node: str, count: int, **attributes: str) -> ResourceSlice:
    devices = [b.device(f"gpu-{i}", attributes=dict(attributes)) for i in range(count)]
    return b.node_slice(node, devices, driver="gpu.example.com", pool=node)


def member(name: str, count: int = 1, *, selectors: Sequence[str] = (), shape: object = "same") -> GangMember:
    claim = b.claim(f"{name}-gpus", b.request("gpus", "gpu", count, selectors=selectors))
    return GangMember(key=f"default/{name}", claims=(claim,), shape=shape)


def planner(slices: Sequence[ResourceSlice], **options: object) -> GangPlanner:
    return GangPlanner(classes=CLASSES, snapshot=SliceSnapshot(slices), allocated=AllocatedState(), **options)  # type: ignore[arg-type]


def devices_of(plan: GangPlan) -> list[str]:
    return [str(d.device_id) for p in plan.placements for r in p.results for d in r.devices]


def test_e1_a_gang_that_fits_is_placed_whole_one_member_per_node() -> None:
    nodes = [b.node(f"n{i}") for i in (1, 2, 3)]
    plan = planner([gpus(n.name, 4) for n in nodes]).plan([member(f"m{i}", 4) for i in range(3)], 3, nodes)
    assert isinstance(plan, GangPlan) and plan.outcome == "found"
    assert sorted(p.node for p in plan.placements) == ["n1", "n2", "n3"]
    assert len(set(devices_of(plan))) == 12


def test_e2_a_gang_that_does_not_fit_says_how_many_members_did() -> None:
    nodes = [b.node("n1"), b.node("n2")]
    answer = planner([gpus(n.name, 4) for n in nodes]).plan([member(f"m{i}", 4) for i in range(3)], 3, nodes)
    assert isinstance(answer, GangInfeasible) and answer.best == 2 and answer.outcome == "infeasible"


def test_e3b_a_joint_choice_gives_each_member_the_device_it_can_use() -> None:
    """Node 4 holds an h100 and an a100; *a* takes any GPU, *b* only the h100. One member at a
    time (upstream, and our greedy fallback), *a* takes the h100 and *b* fails for good."""
    node = b.node("n4")
    slices = [
        b.node_slice(
            "n4",
            [b.device("h100", attributes={"model": "h100"}), b.device("a100", attributes={"model": "a100"})],
            driver="gpu.example.com",
            pool="n4",
        )
    ]
    members = [member("a", shape="any"), member("b", selectors=[H100], shape="h100")]
    plan = planner(slices).plan(members, 2, [node])
    assert isinstance(plan, GangPlan)
    chosen = {p.member: p.results[0].devices[0].device for p in plan.placements}
    assert chosen == {"default/a": "a100", "default/b": "h100"}


def test_across_nodes_only_the_search_revisits_an_earlier_members_node() -> None:
    """E3b over two nodes (the h100 on the first): one member at a time, *a* takes the first node
    and *b* finds no h100 left; the search moves *a* to the a100's node."""
    nodes = [b.node("n1"), b.node("n2")]
    slices = [gpus("n1", 1, model="h100"), gpus("n2", 1, model="a100")]
    members = [member("a", shape="any"), member("b", selectors=[H100], shape="h100")]
    plan = planner(slices).plan(members, 2, nodes)
    assert isinstance(plan, GangPlan) and {p.member: p.node for p in plan.placements} == {
        "default/a": "n2",
        "default/b": "n1",
    }
    # no budget for a search (trying each member alone is not counted): one member at a time
    greedy = planner(slices, max_checks=1).plan(members, 2, nodes)
    assert isinstance(greedy, GangInfeasible) and greedy.outcome == "budget" and greedy.best == 1


def test_e3c_first_available_partitions_are_settled_together() -> None:
    """#138765's own shape: one partitionable device (``whole``, or ``half-1`` + ``half-2`` on a
    shared counter of 2), two members asking ``firstAvailable: [whole, half]``. Each alone takes
    ``whole``; together they get the two halves."""
    two = {"memory": Quantity.from_int(2)}
    one = {"memory": Quantity.from_int(1)}
    partitions = [
        b.device("whole", attributes={"size": "whole"}, consumes_counters=(CounterConsumption("mem", two),)),
        b.device("half-1", attributes={"size": "half"}, consumes_counters=(CounterConsumption("mem", one),)),
        b.device("half-2", attributes={"size": "half"}, consumes_counters=(CounterConsumption("mem", one),)),
    ]
    slices = [  # the counters in a slice of their own, as resource.k8s.io/v1 wants them
        b.node_slice("n5", (), driver="gpu.example.com", pool="n5", name="n5-counters", slice_count=2,
                     shared_counters=(CounterSet("mem", two),)),
        b.node_slice("n5", partitions, driver="gpu.example.com", pool="n5", slice_count=2),
    ]  # fmt: skip

    def partitioned(name: str) -> GangMember:
        request = b.first_available(
            "gpu",
            b.subrequest("whole", "gpu", selectors=['device.attributes["gpu.example.com"].size == "whole"']),
            b.subrequest("half", "gpu", selectors=['device.attributes["gpu.example.com"].size == "half"']),
        )
        return GangMember(key=f"default/{name}", claims=(b.claim(f"{name}-gpu", request),), shape="partition")

    plan = planner(slices).plan([partitioned("w0"), partitioned("w1")], 2, [b.node("n5")])
    assert isinstance(plan, GangPlan)
    assert sorted(devices_of(plan)) == ["gpu.example.com/n5/half-1", "gpu.example.com/n5/half-2"]


def test_members_beyond_min_count_are_left_out_when_only_min_count_fit() -> None:
    nodes = [b.node("n1"), b.node("n2")]
    plan = planner([gpus(n.name, 4) for n in nodes]).plan([member(f"m{i}", 4) for i in range(3)], 2, nodes)
    assert isinstance(plan, GangPlan) and len(plan.placements) == 2


def _rack_nodes() -> list[NodeInfo]:
    # node order prefers rack r2: the first member's preference would pick the r2 domain
    return [b.node("n3", rack="r2"), b.node("n4", rack="r2"), b.node("n1", rack="r1"), b.node("n2", rack="r1")]


def _rack_slices() -> list[ResourceSlice]:
    def domain(rack: str) -> ResourceSlice:
        selector = NodeSelector((NodeSelectorTerm((NodeSelectorRequirement("rack", "In", (rack,)),)),))
        return b.node_slice(
            None, [f"domain-{rack}"], driver="fabric.example.com", pool=f"fabric-{rack}", node_selector=selector
        )

    # rack r2 has room for one 4-GPU member only
    return [gpus("n1", 4), gpus("n2", 4), gpus("n3", 4), gpus("n4", 2), domain("r1"), domain("r2")]


def test_e4b_the_shared_claim_goes_where_the_whole_gang_fits() -> None:
    """A PodGroup claim on a rack's fabric device, two 4-GPU members. The first member's preference
    (rack r2) would fix the shared claim on ``domain-r2``, where the gang does not fit (F3); the
    plan takes ``domain-r1`` and puts every member in r1 (never outside the claim's selector: F2)."""
    shared = b.claim("pg-domain", b.request("domain", "fabric"))
    plan = planner(_rack_slices()).plan([member("m0", 4), member("m1", 4)], 2, _rack_nodes(), shared=[shared])
    assert isinstance(plan, GangPlan)
    assert [d.device for r in plan.shared for d in r.devices] == ["domain-r1"]
    assert sorted(p.node for p in plan.placements) == ["n1", "n2"]


def test_an_allocated_shared_claim_restricts_every_member_to_its_nodes() -> None:
    shared = b.claim("pg-domain", b.request("domain", "fabric"))
    nodes = _rack_nodes()
    options = Allocator([shared], classes=CLASSES, snapshot=SliceSnapshot(_rack_slices())).allocate(nodes[0])
    assert options is not None  # domain-r2, allocated before the gang
    allocated = ResourceClaim(**{**_fields(shared), "allocation": options.results[0]})
    answer = planner(_rack_slices()).plan([member("m0", 4), member("m1", 4)], 2, nodes, shared_allocated=[allocated])
    assert isinstance(answer, GangInfeasible) and answer.best == 1


def _fields(claim: ResourceClaim) -> dict[str, object]:
    return {name: getattr(claim, name) for name in claim.__dataclass_fields__}


def test_a_member_no_node_fits_alone_is_named() -> None:
    nodes = [b.node("n1")]
    answer = planner([gpus("n1", 4)]).plan([member("small", 1), member("huge", 8, shape="huge")], 2, nodes)
    assert isinstance(answer, GangInfeasible) and answer.alone == ("default/huge",)


def test_the_budget_is_counted_in_allocator_runs_and_greedy_answers_when_it_is_spent() -> None:
    # no shape: no member is like another, nothing is remembered, every check is a run
    nodes = [b.node(f"n{i}") for i in range(4)]
    members = [member(f"m{i}", 2, shape=None) for i in range(6)]
    full = planner([gpus(n.name, 3) for n in nodes]).plan(members, 4, nodes)
    assert isinstance(full, GangPlan) and full.outcome == "found"
    spent = planner([gpus(n.name, 3) for n in nodes], max_checks=full.checks // 2).plan(members, 4, nodes)
    assert isinstance(spent, GangPlan) and spent.outcome == "greedy" and len(spent.placements) >= 4


# --- property: the plan exists exactly when a brute-force search finds one ----------------------------


def _fits(slices: Sequence[ResourceSlice], node: NodeInfo, claims: list[ResourceClaim]) -> bool:
    if not claims:
        return True
    allocator = Allocator(claims, classes=CLASSES, snapshot=SliceSnapshot(slices))
    return allocator.allocate(node) is not None


def _brute_force(slices: Sequence[ResourceSlice], nodes: Sequence[NodeInfo], members: Sequence[GangMember]) -> int:
    """The most members any assignment (each member to a node, or left out) places."""
    best = 0
    for assignment in itertools.product(range(-1, len(nodes)), repeat=len(members)):
        per_node: dict[int, list[ResourceClaim]] = {}
        for m, n in zip(members, assignment, strict=True):
            if n >= 0:
                per_node.setdefault(n, []).extend(m.claims)
        if all(_fits(slices, nodes[n], claims) for n, claims in per_node.items()):
            best = max(best, sum(1 for n in assignment if n >= 0))
    return best


MODELS = ("h100", "a100")


@st.composite
def gang_problems(draw: st.DrawFn) -> tuple[list[ResourceSlice], list[NodeInfo], list[GangMember], int]:
    node_count = draw(st.integers(1, 3))
    nodes = [b.node(f"n{i}") for i in range(node_count)]
    slices = []
    for n in nodes:
        models = draw(st.lists(st.sampled_from(MODELS), min_size=0, max_size=3))
        devices = [b.device(f"gpu-{i}", attributes={"model": m}) for i, m in enumerate(models)]
        slices.append(b.node_slice(n.name, devices, driver="gpu.example.com", pool=n.name))
    members = []
    for i in range(draw(st.integers(1, 4))):
        count = draw(st.integers(1, 2))
        model = draw(st.sampled_from((None, *MODELS)))
        selectors = [f'device.attributes["gpu.example.com"].model == "{model}"'] if model else []
        members.append(member(f"m{i}", count, selectors=selectors, shape=(count, model)))
    need = draw(st.integers(1, len(members)))
    return slices, nodes, members, need


@settings(max_examples=150, deadline=None)
@given(gang_problems())
def test_a_plan_is_found_exactly_when_one_exists_and_never_uses_a_device_twice(
    problem: tuple[list[ResourceSlice], list[NodeInfo], list[GangMember], int],
) -> None:
    slices, nodes, members, need = problem
    answer = planner(slices).plan(members, need, nodes)
    best = _brute_force(slices, nodes, members)
    if best >= need:
        assert isinstance(answer, GangPlan), (best, answer)
        used = devices_of(answer)
        assert len(used) == len(set(used))
        assert len(answer.placements) >= need
        for placement in answer.placements:
            (m,) = [m for m in members if m.key == placement.member]
            assert all(d.pool == placement.node for r in placement.results for d in r.devices)
            assert [len(r.devices) for r in placement.results] == [c.requests[0].exactly.count for c in m.claims]  # type: ignore[union-attr]
    else:
        assert isinstance(answer, GangInfeasible) and answer.best == best


def test_taking_a_nodes_allocation_out_again_is_exact_in_any_order() -> None:
    """The search takes a node's joint allocation out of the shared state when it re-plans that
    node, while later nodes' allocations stay: shares and consumed capacity must come out exactly."""
    from extender.core.gangplan import _add, _remove
    from extender.core.model import AllocationResult, DeviceResult

    def shares(*items: tuple[str, str, int]) -> AllocationResult:
        return AllocationResult(
            devices=tuple(
                DeviceResult(
                    request="r", driver="d", pool="p", device=dev, share_id=share,
                    consumed_capacity={"memory": Quantity.from_int(amount)},
                )
                for dev, share, amount in items
            )
        )  # fmt: skip

    first = shares(("nic", "s1", 2), ("nic", "s2", 3))
    second = shares(("nic", "s3", 4))
    exclusive = AllocationResult(devices=(DeviceResult(request="r", driver="d", pool="p", device="gpu"),))
    state = AllocatedState()
    for result in (first, exclusive, second):
        _add(state, [result])
    _remove(state, [first])
    expected = AllocatedState()
    _add(expected, [exclusive])
    _add(expected, [second])
    assert state == expected
    _remove(state, [second])
    _remove(state, [exclusive])
    assert state == AllocatedState()


def test_one_shape_on_many_nodes_is_settled_by_capacity_in_few_checks() -> None:
    """E2 at scale: 31 members of 8 GPUs on 30 nodes of 8. A search would try every way of
    leaving one node empty (and every check after the first per node comes from the memo, so no
    run budget would stop it); by each node's capacity it takes one check per member and node."""
    nodes = [b.node(f"n{i:02}") for i in range(30)]
    members = [member(f"m{i:02}", 8) for i in range(31)]
    answer = planner([gpus(n.name, 8) for n in nodes]).plan(members, 31, nodes)
    assert isinstance(answer, GangInfeasible) and answer.best == 30 and answer.outcome == "infeasible"
    assert answer.checks <= 2 * 30
    fits = planner([gpus(n.name, 8) for n in nodes]).plan(members[:30], 30, nodes)
    assert isinstance(fits, GangPlan) and len({p.node for p in fits.placements}) == 30


def test_the_search_is_bounded_in_steps_when_every_check_is_remembered() -> None:
    """Two shapes, an infeasible gang over many equal nodes: the checks come from the memo after
    the first per node and shape; the step budget still ends the search."""
    nodes = [b.node(f"n{i:02}") for i in range(14)]
    members = [member(f"a{i:02}", 8, shape="a") for i in range(8)]
    members += [member(f"b{i:02}", 8, selectors=[H100], shape="b") for i in range(8)]
    slices = [gpus(n.name, 8, model="h100") for n in nodes]
    steps: list[int] = []
    p = planner(slices, pace=lambda: steps.append(1))  # the default budget, which greedy exceeded once
    answer = p.plan(members, 16, nodes)
    assert isinstance(answer, GangInfeasible) and answer.outcome == "budget"
    assert len(steps) <= 2 * 2000 * 10 + 16 * 14  # the search's steps, greedy's, and each member alone


def test_members_that_fit_only_far_down_the_node_list_do_not_spend_the_budget_alone() -> None:
    """Trying each member alone walks the nodes until one fits: 100 members past 200 full nodes
    must still be planned (that walk is not counted against the search)."""
    nodes = [b.node(f"full-{i:03}") for i in range(200)] + [b.node(f"n{i:02}") for i in range(50)]
    slices = [gpus(n.name, 8) for n in nodes[200:]]
    members = [member(f"m{i:03}", 1) for i in range(100)]
    answer = planner(slices).plan(members, 100, nodes)
    assert isinstance(answer, GangPlan) and len(answer.placements) == 100


def test_pinned_members_of_one_shape_are_not_taken_for_interchangeable() -> None:
    """A re-plan pins members to different nodes: one order of equal shapes is no longer enough.
    A answered n1, B may only use n2 (kube-scheduler's filters took n1), C free."""
    nodes = [b.node("n2"), b.node("n1")]
    slices = [gpus("n1", 2), gpus("n2", 2)]
    a = GangMember("default/a", member("a").claims, shape="same", nodes=frozenset({"n1"}))
    b_ = GangMember("default/b", member("b").claims, shape="same", nodes=frozenset({"n2"}))
    c = GangMember("default/c", member("c").claims, shape="same")
    plan = planner(slices).plan([a, b_, c], 3, nodes)
    assert isinstance(plan, GangPlan)
    assert {p.member: p.node for p in plan.placements}["default/a"] == "n1"
    assert {p.member: p.node for p in plan.placements}["default/b"] == "n2"


def test_remembered_joint_results_go_back_to_the_members_in_their_order() -> None:
    """Two shapes on one node, met in both orders (a pin puts them so): each member gets results
    for its own claims, never the other's."""
    slices = [gpus("n1", 3)]
    two = GangMember("default/two", member("two", 2).claims, shape="two")
    one = GangMember("default/one", member("one", 1).claims, shape="one")
    p = planner(slices)
    node = b.node("n1")
    first = p.check(node, [two, one], AllocatedState(), ())
    second = p.check(node, [one, two], AllocatedState(), ())
    assert first is not None and second is not None
    assert [len(r.devices) for r in first.results] == [2, 1]
    assert [len(r.devices) for r in second.results] == [1, 2]
