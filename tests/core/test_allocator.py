"""Allocator behaviour the YAML case table cannot express.

Covers: the first-path shortcut giving exactly the full search's answer (hypothesis), lazy result
building, one Allocator reused across nodes (static preparation and its cached fatal error), the
defensive "unsupported NodeSelector with N terms" path (unreachable through the converter, which
rejects such slices at ingest), and exact undo of shared counters across backtracking.
The case table (test_allocator_cases.py) and the property tests cover semantics at large.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.core.allocator import Allocation, Allocator, _Search, allocate_claims
from extender.core.cel import SelectorCache
from extender.core.errors import PodUnschedulable
from extender.core.model import (
    DeviceID,
    DeviceTaint,
    Features,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
)
from extender.core.pools import SliceSnapshot
from tests import builders as b

CLASS_EXPR = 'device.driver == "driver-a"'


def _full_search(allocator: Allocator, node_name: str) -> list[list[str]] | None:
    """Run the depth-first search without the first-path shortcut."""
    node = b.node(node_name)
    view = allocator.snapshot.node_view(node, allocator.features)
    search = _Search(allocator, node, view)
    if search.run() != 0:
        return None
    results, _, _ = search.build(node)
    return [[f"{r.request}={r.driver}/{r.pool}/{r.device}" for r in result.devices] for result in results]


def _shortcut(allocator: Allocator, node_name: str) -> list[list[str]] | None:
    allocation = allocator.allocate(b.node(node_name))
    if allocation is None:
        return None
    return [[f"{r.request}={r.driver}/{r.pool}/{r.device}" for r in result.devices] for result in allocation.results]


@settings(max_examples=150, deadline=None)
@given(
    models=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=6),
    roots=st.lists(st.sampled_from(["r0", "r1"]), min_size=6, max_size=6),
    taken=st.lists(st.integers(min_value=0, max_value=5), max_size=3),
    requests=st.lists(
        st.tuples(st.integers(min_value=1, max_value=3), st.sampled_from([None, "a", "b"]), st.booleans()),
        min_size=1,
        max_size=3,
    ),
    split=st.booleans(),
    constrained=st.booleans(),
)
def test_first_path_matches_full_search(
    models: list[str],
    roots: list[str],
    taken: list[int],
    requests: list[tuple[int, str | None, bool]],
    split: bool,
    constrained: bool,
) -> None:
    """The shortcut and the full search agree, with constraints and firstAvailable requests too."""
    devices = [b.device(f"device-{i}", attributes={"model": m, "root": roots[i]}) for i, m in enumerate(models)]
    slices = [b.node_slice("node-1", devices)]
    reqs = []
    for i, (count, model, alternatives) in enumerate(requests):
        selectors = [] if model is None else [f'device.attributes["driver-a"].model == "{model}"']
        if alternatives:
            reqs.append(
                b.first_available(
                    f"req-{i}",
                    b.subrequest("first", b.CLASS, count, selectors=selectors),
                    b.subrequest("fallback", b.CLASS, 1),
                )
            )
        else:
            reqs.append(b.request(f"req-{i}", b.CLASS, count, selectors=selectors))
    constraints = [b.match_attribute("driver-a/root")] if constrained else []
    if split:
        claims = [b.claim(f"claim-{i}", r, constraints=constraints) for i, r in enumerate(reqs)]
    else:
        claims = [b.claim("claim-0", *reqs, constraints=constraints)]
    allocated = b.allocated(*(f"driver-a/pool-1/device-{i}" for i in taken if i < len(models)))
    make = lambda: Allocator(  # noqa: E731
        claims,
        classes={b.CLASS: b.device_class(b.CLASS, CLASS_EXPR)},
        snapshot=SliceSnapshot(slices),
        allocated=allocated,
    )
    fast, slow = make(), make()
    assert _shortcut(fast, "node-1") == _full_search(slow, "node-1")
    if fast.search_steps and _full_search(slow, "node-1") is not None:
        node = b.node("node-1")
        search = _Search(slow, node, slow.snapshot.node_view(node, slow.features))
        search.run()
        assert fast.search_steps == search.steps


def test_first_path_reports_the_search_step_count() -> None:
    slices = [b.node_slice("node-1", ["device-1", "device-2", "device-3"])]
    claims = [b.claim("claim-0", b.request("req-0", count=2)), b.claim("claim-1")]
    classes = {b.CLASS: b.device_class(b.CLASS, CLASS_EXPR)}
    allocator = Allocator(claims, classes=classes, snapshot=SliceSnapshot(slices))
    assert allocator.allocate(b.node()) is not None
    shortcut_steps = allocator.search_steps
    search = _Search(allocator, b.node(), allocator.snapshot.node_view(b.node(), allocator.features))
    assert search.run() == 0
    # 2 slots + end of req-0 + end of claim-0, 1 slot + end of req-0 + end of claim-1, and the final step
    assert shortcut_steps == search.steps == 8


def test_results_are_built_lazily_and_once() -> None:
    slices = [b.node_slice("node-1", ["device-1"])]
    allocation = allocate_claims([b.claim()], b.node(), slices=slices, classes=[b.device_class(b.CLASS, CLASS_EXPR)])
    assert isinstance(allocation, Allocation)
    first = allocation.results
    assert first is allocation.results
    assert [r.device for r in first[0].devices] == ["device-1"]
    assert allocation.picked[0][0].name == "device-1"
    assert allocation.chosen_subrequests == ((None,),)


def test_one_allocator_serves_many_nodes_and_repeats_a_static_error() -> None:
    slices = [b.node_slice(f"node-{i}", ["device-1"]) for i in range(1, 4)]
    missing = b.claim("claim-0", b.request("req-0", "no-such-class"))
    allocator = Allocator([missing], classes={}, snapshot=SliceSnapshot(slices))
    for name in ("node-1", "node-2"):
        with pytest.raises(PodUnschedulable, match="could not retrieve device class no-such-class"):
            allocator.allocate(b.node(name))

    classes = {b.CLASS: b.device_class(b.CLASS, CLASS_EXPR)}
    good = Allocator([b.claim()], classes=classes, snapshot=SliceSnapshot(slices))
    picked = []
    for i in range(1, 4):
        allocation = good.allocate(b.node(f"node-{i}"))
        assert allocation is not None
        picked.append(allocation.results[0].devices[0].pool)
        assert allocation.results[0].node_selector == NodeSelector(
            (NodeSelectorTerm(match_fields=(NodeSelectorRequirement("metadata.name", "In", (f"node-{i}",)),)),)
        )
    assert picked == ["pool-1"] * 3


def test_multi_term_slice_selector_is_fatal_when_a_device_is_picked() -> None:
    """Upstream's createNodeSelector error. The converter marks such slices invalid, so only a
    slice built directly (as from a laxer API server) reaches this path."""
    region = NodeSelectorRequirement("region", "In", ("region-1",))
    zone = NodeSelectorRequirement("zone", "In", ("zone-1",))
    terms = (NodeSelectorTerm(match_expressions=(region,)), NodeSelectorTerm(match_expressions=(zone,)))
    selector = NodeSelector(terms)
    slices = [b.node_slice(None, ["device-1"], node_selector=selector)]
    with pytest.raises(PodUnschedulable, match="create NodeSelector for claim claim-0: unsupported ResourceSlice"):
        allocate_claims(
            [b.claim()],
            b.node("node-1", region="region-1"),
            slices=slices,
            classes=[b.device_class(b.CLASS, CLASS_EXPR)],
        )


def test_allocator_does_not_mutate_the_allocated_state() -> None:
    slices = [b.node_slice("node-1", ["device-1", "device-2"])]
    state = b.allocated("driver-a/pool-1/device-1")
    before = (set(state.devices), set(state.shared_ids), dict(state.consumed_capacity))
    allocation = allocate_claims(
        [b.claim()], b.node(), slices=slices, classes=[b.device_class(b.CLASS, CLASS_EXPR)], allocated=state
    )
    assert allocation is not None
    assert allocation.results[0].devices[0].device == "device-2"
    assert (state.devices, state.shared_ids, state.consumed_capacity) == before
    assert DeviceID("driver-a", "pool-1", "device-2") not in state.devices


def test_warm_selector_cache_is_shared_between_allocators() -> None:
    slices = [b.node_slice(f"node-{i}", ["device-1", "device-2"]) for i in range(1, 3)]
    classes = {b.CLASS: b.device_class(b.CLASS, 'device.attributes["driver-a"].size() >= 0')}
    cache = SelectorCache()
    snapshot = SliceSnapshot(slices)
    for _ in range(2):
        allocator = Allocator([b.claim()], classes=classes, snapshot=snapshot, selectors=cache)
        assert allocator.allocate(b.node("node-1")) is not None
        assert allocator.allocate(b.node("node-2")) is not None
    assert cache.stats.result_misses == 2  # one per slice, the second pod evaluated nothing


def test_taints_block_unless_the_feature_is_off() -> None:
    tainted = b.device("device-1", taints=(DeviceTaint(key="k", effect="NoSchedule"),))
    slices = [b.node_slice("node-1", [tainted, "device-2"])]
    classes = [b.device_class(b.CLASS, CLASS_EXPR)]
    on = allocate_claims([b.claim()], b.node(), slices=slices, classes=classes)
    off = allocate_claims([b.claim()], b.node(), slices=slices, classes=classes, features=Features(device_taints=False))
    assert on is not None and on.results[0].devices[0].device == "device-2"
    assert off is not None and off.results[0].devices[0].device == "device-1"


def test_allocate_many_agrees_with_allocate_node_by_node() -> None:
    """The batch loop must give what allocate() gives: fits, unfit, unresolvable, and a device
    that needs the full search (tainted, so it is skipped)."""
    tainted = b.device("device-1", taints=(DeviceTaint(key="k", effect="NoSchedule"),))
    slices = [
        b.node_slice("node-1", ["device-1"]),
        b.node_slice("node-2", []),  # no device: unfit
        b.node_slice("node-3", ["device-1"], name="dup-a", slice_count=2),
        b.node_slice("node-3", ["device-1"], name="dup-b", slice_count=2),  # duplicate device: invalid pool
        b.node_slice("node-4", [tainted, "device-2"]),
        b.node_slice("node-5", ["device-1", "device-2"]),
    ]
    nodes = [b.node(f"node-{i}") for i in range(1, 6)]
    classes = {b.CLASS: b.device_class(b.CLASS, CLASS_EXPR)}
    state = b.allocated("driver-a/pool-1/device-1")  # every node's device-1 is pool-1's: held

    def describe(outcome: object) -> object:
        if isinstance(outcome, Allocation):
            return [r.device for r in outcome.results[0].devices]
        return type(outcome).__name__ if outcome is not None else None

    batch = Allocator([b.claim()], classes=classes, snapshot=SliceSnapshot(slices), allocated=state)
    single = Allocator([b.claim()], classes=classes, snapshot=SliceSnapshot(slices), allocated=state)
    expected = [describe(single._allocate_one(n)) for n in nodes]
    assert [describe(o) for o in batch.allocate_many(nodes)] == expected
    assert expected == [None, None, "NodeUnresolvable", ["device-2"], ["device-2"]]


def test_allocate_many_raises_a_fatal_error() -> None:
    slices = [b.node_slice("node-1", ["device-1"])]
    classes = {b.CLASS: b.device_class(b.CLASS, 'device.attributes["driver-a"].model == "x"')}
    allocator = Allocator([b.claim()], classes=classes, snapshot=SliceSnapshot(slices))
    with pytest.raises(PodUnschedulable, match="CEL runtime error: no such key: model"):
        allocator.allocate_many([b.node("node-1")])


def test_a_request_for_more_devices_than_the_node_has_fails_without_trying_every_subset() -> None:
    """21 devices asked of a node with 12: every subset of the 12 (4096 steps) used to be tried
    before the answer; the search now stops where fewer devices are left than still needed. The
    answer is the same; only the work is not."""
    slices = [b.node_slice("node-1", [f"device-{i}" for i in range(12)])]
    claims = [b.claim("claim-0", b.request("req-0", count=21))]
    classes = {b.CLASS: b.device_class(b.CLASS, CLASS_EXPR)}
    allocator = Allocator(claims, classes=classes, snapshot=SliceSnapshot(slices))
    node = b.node()
    search = _Search(allocator, node, allocator.snapshot.node_view(node, allocator.features))
    assert search.run() != 0
    assert search.steps <= 3
    assert allocator.allocate(node) is None
    # one device short of the count: the search still tries only what can complete it
    claims = [b.claim("claim-0", b.request("req-0", count=12))]
    taken = b.allocated("driver-a/pool-1/device-3")
    allocator = Allocator(claims, classes=classes, snapshot=SliceSnapshot(slices), allocated=taken)
    search = _Search(allocator, node, allocator.snapshot.node_view(node, allocator.features))
    assert search.run() != 0
    assert search.steps < 100
