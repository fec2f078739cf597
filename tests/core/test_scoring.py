"""Tests for extender.core.scoring: the binpack, spread, prioritized and topology policies, their
normalisation to 0..10, ScoringPolicy parsing and the weighted combination, and per-node device usage.

Allocations are built by hand from the model (the allocator's own behaviour is tested elsewhere);
``node_device_usage`` runs over a real ``SliceSnapshot``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.core.allocator import Allocation
from extender.core.model import (
    AllocatedState,
    AllocationResult,
    AttributeValue,
    Device,
    DeviceID,
    DeviceResult,
    Features,
    NodeInfo,
    PoolRef,
    ResourceSlice,
    SharedDeviceID,
)
from extender.core.pools import SliceSnapshot
from extender.core.scoring import (
    MAX_SCORE,
    DeviceUsage,
    RawScores,
    ScoringCandidate,
    ScoringPolicy,
    binpack_scores,
    combine_raw_scores,
    node_device_usage,
    normalize_to_max,
    prioritized_scores,
    score_candidates,
    spread_scores,
    topology_scores,
)

DRIVER = "gpu.example.com"
ROOT = f"{DRIVER}/pcieRoot"


def pick(
    node: str,
    devices: Sequence[tuple[str, Mapping[str, AttributeValue]]] = (),
    *,
    driver: str = DRIVER,
    admin: bool = False,
) -> tuple[tuple[DeviceResult, ...], tuple[Device, ...]]:
    """One claim's results and picked devices on ``node`` (pool named after the node)."""
    results = tuple(
        DeviceResult(request="req-0", driver=driver, pool=f"{node}-pool", device=name, admin_access=admin)
        for name, _ in devices
    )
    picked = tuple(Device(name=name, attributes=dict(attributes)) for name, attributes in devices)
    return results, picked


def allocation(
    node: str,
    *claims: tuple[tuple[DeviceResult, ...], tuple[Device, ...]],
    chosen: tuple[tuple[int | None, ...], ...] | None = None,
) -> Allocation:
    return Allocation(
        node=node,
        results=tuple(AllocationResult(devices=results) for results, _ in claims),
        picked=tuple(picked for _, picked in claims),
        chosen_subrequests=chosen if chosen is not None else tuple((None,) for _ in claims),
    )


def candidate(
    alloc: Allocation, total: int = 0, in_use: int = 0, ids: frozenset[DeviceID] = frozenset()
) -> ScoringCandidate:
    return ScoringCandidate(alloc, DeviceUsage(total=total, in_use=in_use, in_use_ids=ids))


def one_gpu(node: str, name: str = "gpu-0") -> Allocation:
    return allocation(node, pick(node, [(name, {})]))


# --- normalisation ----------------------------------------------------------------------------


def test_normalize_gives_the_best_node_ten_and_scales_the_rest_down() -> None:
    assert normalize_to_max({"a": 8, "b": 7, "c": 4, "d": 0}) == {"a": 10, "b": 8, "c": 5, "d": 0}


def test_normalize_all_zero_stays_zero_and_empty_is_empty() -> None:
    assert normalize_to_max({"a": 0, "b": Fraction(0)}) == {"a": 0, "b": 0}
    assert normalize_to_max({}) == {}


# --- binpack and spread -----------------------------------------------------------------------


def test_binpack_prefers_the_fuller_node_after_this_pods_allocation() -> None:
    candidates = [
        candidate(one_gpu("empty"), total=4, in_use=0),  # 1/4 after the pick
        candidate(one_gpu("half"), total=4, in_use=2),  # 3/4
        candidate(one_gpu("almost"), total=4, in_use=3),  # 4/4
    ]
    assert binpack_scores(candidates) == {"empty": 2, "half": 7, "almost": 10}


def test_spread_is_the_opposite_of_binpack() -> None:
    candidates = [
        candidate(one_gpu("empty"), total=4, in_use=0),  # 3/4 free after the pick
        candidate(one_gpu("half"), total=4, in_use=2),  # 1/4
        candidate(one_gpu("almost"), total=4, in_use=3),  # 0
    ]
    assert spread_scores(candidates) == {"empty": 10, "half": 3, "almost": 0}


def test_binpack_does_not_count_admin_access_picks() -> None:
    admin = allocation("admin", pick("admin", [("gpu-0", {})], admin=True))
    normal = allocation("normal", pick("normal", [("gpu-0", {})]))
    scores = binpack_scores([candidate(admin, total=2, in_use=1), candidate(normal, total=2, in_use=1)])
    assert scores == {"admin": 5, "normal": 10}


def test_binpack_counts_a_device_already_in_use_once() -> None:
    # Taking another share of a shared device that is already in use adds nothing.
    shared = DeviceID(DRIVER, "shared-pool", "gpu-0")
    again = candidate(one_gpu("shared"), total=2, in_use=1, ids=frozenset({shared}))
    fresh = candidate(one_gpu("fresh"), total=2, in_use=1, ids=frozenset({DeviceID(DRIVER, "fresh-pool", "gpu-1")}))
    assert binpack_scores([again, fresh]) == {"shared": 5, "fresh": 10}


def test_a_node_without_devices_is_free_for_spread_and_empty_for_binpack() -> None:
    candidates = [candidate(allocation("bare"), total=0), candidate(one_gpu("gpus"), total=2, in_use=0)]
    assert binpack_scores(candidates) == {"bare": 0, "gpus": 10}
    assert spread_scores(candidates) == {"bare": 10, "gpus": 5}


# --- prioritized ------------------------------------------------------------------------------


def test_prioritized_adds_eight_minus_the_chosen_index_and_normalises() -> None:
    first = allocation("first", pick("first", [("gpu-0", {})]), chosen=((0,),))
    second = allocation("second", pick("second", [("gpu-0", {})]), chosen=((1,),))
    last = allocation("last", pick("last", [("gpu-0", {})]), chosen=((7,),))
    assert prioritized_scores([candidate(first), candidate(second), candidate(last)]) == {
        "first": 10,  # 8
        "second": 8,  # 7 * 10 // 8
        "last": 1,  # 1 * 10 // 8
    }


def test_prioritized_sums_over_requests_and_claims_and_ignores_exact_requests() -> None:
    both = allocation("both", pick("both", [("gpu-0", {})]), pick("both", [("gpu-1", {})]), chosen=((0, None), (0,)))
    one = allocation("one", pick("one", [("gpu-0", {})]), pick("one", [("gpu-1", {})]), chosen=((0, None), (1,)))
    assert prioritized_scores([candidate(both), candidate(one)]) == {"both": 10, "one": 9}  # 16 vs 15


def test_prioritized_without_first_available_scores_every_node_zero() -> None:
    assert prioritized_scores([candidate(one_gpu("a")), candidate(one_gpu("b"))]) == {"a": 0, "b": 0}


def test_prioritized_quirk_13_5_only_claims_allocated_this_cycle_are_walked() -> None:
    """QUIRK §13.5: upstream pairs all of the pod's claims with the results of the new ones only.

    Here the pod's first claim is pre-allocated, so the allocations hold just the second claim;
    the score must come from that claim's chosen subrequest, with no error and no index shift.
    """
    preferred = allocation("preferred", pick("preferred", [("gpu-0", {})]), chosen=((0,),))
    fallback = allocation("fallback", pick("fallback", [("gpu-0", {})]), chosen=((2,),))
    assert prioritized_scores([candidate(preferred), candidate(fallback)]) == {"preferred": 10, "fallback": 7}


# --- topology ---------------------------------------------------------------------------------


def gpus(node: str, *roots: AttributeValue | None) -> Allocation:
    devices = [(f"gpu-{i}", {} if root is None else {ROOT: root}) for i, root in enumerate(roots)]
    return allocation(node, pick(node, devices))


def test_topology_scores_concentration_of_each_claims_devices() -> None:
    candidates = [
        candidate(gpus("same", "root-a", "root-a", "root-a")),
        candidate(gpus("two", "root-a", "root-a", "root-b")),
        candidate(gpus("spread", "root-a", "root-b", "root-c")),
    ]
    assert topology_scores(candidates, ROOT) == {"same": 10, "two": 5, "spread": 0}


def test_topology_counts_each_device_without_the_attribute_as_distinct() -> None:
    candidates = [
        candidate(gpus("missing", None, None)),
        candidate(gpus("one-missing", "root-a", None, "root-a")),
    ]
    assert topology_scores(candidates, ROOT) == {"missing": 0, "one-missing": 5}


def test_topology_single_device_claims_are_neutral() -> None:
    single = allocation("single", pick("single", [("gpu-0", {ROOT: "root-a"})]), pick("single", [("gpu-1", {})]))
    assert topology_scores([candidate(single)], ROOT) == {"single": MAX_SCORE}


def test_topology_finds_bare_names_in_the_drivers_own_domain_only() -> None:
    own = allocation("own", pick("own", [("gpu-0", {"pcieRoot": "r"}), ("gpu-1", {"pcieRoot": "r"})]))
    other = allocation(
        "other",
        pick("other", [("gpu-0", {"pcieRoot": "r"}), ("gpu-1", {"pcieRoot": "r"})], driver="nic.example.com"),
    )
    assert topology_scores([candidate(own), candidate(other)], ROOT) == {"own": 10, "other": 0}


def test_topology_does_not_confuse_bool_and_int_values() -> None:
    # True == 1 in Python, but an attribute of type bool never equals one of type int.
    assert topology_scores([candidate(gpus("mixed", True, 1))], ROOT) == {"mixed": 0}


def test_topology_sums_over_claims() -> None:
    two_claims = allocation(
        "two-claims",
        pick("two-claims", [("gpu-0", {ROOT: "a"}), ("gpu-1", {ROOT: "a"})]),  # 1 of 1 link
        pick("two-claims", [("gpu-2", {ROOT: "a"}), ("gpu-3", {ROOT: "b"}), ("gpu-4", {ROOT: "c"})]),  # 0 of 2
    )
    assert topology_scores([candidate(two_claims)], ROOT) == {"two-claims": 3}  # 1/3 -> 3.33


# --- ScoringPolicy ----------------------------------------------------------------------------


def test_parse_reads_weights_attribute_and_defaults() -> None:
    policy = ScoringPolicy.parse(" binpack=2, topology:gpu.example.com/pcieRoot=1 ,prioritized")
    assert dict(policy.weights) == {"binpack": 2, "topology": 1, "prioritized": 1}
    assert policy.topology_attribute == ROOT
    assert str(policy) == "binpack=2,topology:gpu.example.com/pcieRoot=1,prioritized=1"
    assert ScoringPolicy.parse(str(policy)) == policy


def test_parse_of_empty_text_is_an_empty_policy() -> None:
    assert dict(ScoringPolicy.parse("").weights) == {}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("binpak=1", "unknown scoring policy 'binpak'"),
        ("binpack=-1", "weight must be an integer >= 0, not '-1'"),
        ("binpack=1.5", "weight must be an integer >= 0, not '1.5'"),
        ("binpack=", "weight must be an integer >= 0, not ''"),
        ("spread=heavy", "not 'heavy'"),
        ("binpack=1,binpack=2", "binpack given twice"),
        ("topology=1", "topology needs an attribute"),
        ("topology:=1", "topology needs an attribute"),
        ("topology:pcieRoot=1", "must be fully qualified"),
        ("spread:x=1", "spread takes no argument"),
        ("binpack=1,,spread=1", "empty item"),
    ],
)
def test_parse_rejects_bad_text_with_a_clear_message(text: str, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        ScoringPolicy.parse(text)
    assert fragment in str(info.value)


def test_policy_constructor_validates_too() -> None:
    with pytest.raises(ValueError, match="unknown scoring policy"):
        ScoringPolicy(weights={"random": 1})
    with pytest.raises(ValueError, match="weight must be an integer"):
        ScoringPolicy(weights={"binpack": 1.5})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="topology needs an attribute"):
        ScoringPolicy(weights={"topology": 1})


# --- combination ------------------------------------------------------------------------------


def test_score_candidates_weights_and_rounds_half_up() -> None:
    candidates = [
        candidate(one_gpu("full"), total=2, in_use=1),  # binpack 10, spread 0
        candidate(one_gpu("empty"), total=4, in_use=0),  # binpack 2 (1/4 of 1), spread 10
    ]
    assert score_candidates(candidates, ScoringPolicy.parse("binpack=1")) == {"full": 10, "empty": 2}
    # (3*10 + 1*0) / 4 = 7.5 -> 8 ; (3*2 + 1*10) / 4 = 4
    assert score_candidates(candidates, ScoringPolicy.parse("binpack=3,spread=1")) == {"full": 8, "empty": 4}


def test_score_candidates_uses_the_topology_attribute() -> None:
    candidates = [candidate(gpus("near", "a", "a"), total=4), candidate(gpus("far", "a", "b"), total=4)]
    policy = ScoringPolicy.parse(f"topology:{ROOT}=1")
    assert score_candidates(candidates, policy) == {"near": 10, "far": 0}


def test_score_candidates_keeps_every_node_and_stays_in_range() -> None:
    candidates = [candidate(gpus(f"node-{i}", *(["a"] * (i % 3 + 1))), total=5, in_use=i % 4) for i in range(12)]
    scores = score_candidates(candidates, ScoringPolicy.parse(f"binpack=2,spread=1,prioritized=1,topology:{ROOT}=3"))
    assert set(scores) == {f"node-{i}" for i in range(12)}
    assert all(0 <= s <= MAX_SCORE and type(s) is int for s in scores.values())
    assert (
        score_candidates(
            list(reversed(candidates)),
            ScoringPolicy.parse(f"binpack=2,spread=1,prioritized=1,topology:{ROOT}=3"),
        )
        == scores
    )


def test_score_candidates_edge_cases() -> None:
    assert score_candidates([], ScoringPolicy.parse("binpack=1")) == {}
    only = [candidate(one_gpu("a"), total=1)]
    assert score_candidates(only, ScoringPolicy.parse("")) == {"a": 0}
    assert score_candidates(only, ScoringPolicy.parse("binpack=0")) == {"a": 0}
    with pytest.raises(ValueError, match="given twice: a"):
        score_candidates(only + only, ScoringPolicy.parse("binpack=1"))


# --- node_device_usage ------------------------------------------------------------------------


NODE = NodeInfo(name="node-1", labels={"region": "r1"})


def device_slice(name: str, pool: str, devices: Sequence[Device], *, count: int = 1, **where: object) -> ResourceSlice:
    return ResourceSlice(
        name=name,
        driver=DRIVER,
        pool=PoolRef(name=pool, generation=1, resource_slice_count=count),
        devices=tuple(devices),
        **where,  # type: ignore[arg-type]
    )


def test_node_device_usage_counts_usable_pools_and_what_others_hold() -> None:
    slices = [
        device_slice("s-1", "pool-1", [Device(name="d-0"), Device(name="d-1"), Device(name="d-2")], node_name="node-1"),
        # incomplete: one of two slices published
        device_slice("s-2", "pool-2", [Device(name="d-0")], count=2, node_name="node-1"),
        # invalid: duplicate device name
        device_slice("s-3", "pool-3", [Device(name="d-0"), Device(name="d-0")], node_name="node-1"),
        # another node's devices
        device_slice("s-4", "pool-4", [Device(name="d-0")], node_name="node-2"),
        # per-device node selection: only d-here is on node-1
        device_slice(
            "s-5",
            "pool-5",
            [Device(name="d-here", node_name="node-1"), Device(name="d-there", node_name="node-2")],
            per_device_node_selection=True,
        ),
    ]
    allocated = AllocatedState(
        devices={DeviceID(DRIVER, "pool-1", "d-0"), DeviceID(DRIVER, "pool-4", "d-0")},
        shared_ids={SharedDeviceID(DeviceID(DRIVER, "pool-5", "d-here"), "share-1")},
    )
    usage = node_device_usage(SliceSnapshot(slices), NODE, allocated, Features())
    assert (usage.total, usage.in_use) == (4, 2)
    assert usage.in_use_ids == {DeviceID(DRIVER, "pool-1", "d-0"), DeviceID(DRIVER, "pool-5", "d-here")}


def test_node_device_usage_of_a_node_without_slices_is_zero() -> None:
    usage = node_device_usage(SliceSnapshot([]), NODE, AllocatedState(), Features())
    assert usage == DeviceUsage(total=0, in_use=0)


# --- the combined arithmetic ------------------------------------------------------------------


def _reference_combination(raw: Mapping[str, RawScores], policy: ScoringPolicy) -> dict[str, int]:
    """The definition, policy by policy with Fractions: what combine_raw_scores inlines."""
    total_weight = sum(policy.weights.values())
    if not raw or total_weight == 0:
        return dict.fromkeys(raw, 0)
    per_policy = {
        "binpack": normalize_to_max({n: Fraction(r.used, r.total) for n, r in raw.items()}),
        "spread": normalize_to_max({n: Fraction(r.total - r.used, r.total) for n, r in raw.items()}),
        "prioritized": normalize_to_max({n: r.prioritized for n, r in raw.items()}),
        "topology": {n: r.topology for n, r in raw.items()},
    }
    sums = {n: sum(w * per_policy[name][n] for name, w in policy.weights.items()) for n in raw}
    return {n: (2 * s + total_weight) // (2 * total_weight) for n, s in sums.items()}


@settings(max_examples=300, deadline=None)
@given(
    nodes=st.lists(
        st.tuples(st.integers(1, 64), st.integers(0, 64), st.integers(0, 24), st.integers(0, 10)), max_size=12
    ),
    weights=st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(0, 4), st.integers(0, 4)),
)
def test_combined_scores_equal_the_policy_by_policy_definition(
    nodes: list[tuple[int, int, int, int]], weights: tuple[int, int, int, int]
) -> None:
    raw = {f"node-{i}": RawScores(min(used, total), total, p, t) for i, (total, used, p, t) in enumerate(nodes)}
    names = ("binpack", "spread", "prioritized", "topology")
    policy = ScoringPolicy(weights=dict(zip(names, weights, strict=True)), topology_attribute=ROOT)
    assert combine_raw_scores(raw, policy) == _reference_combination(raw, policy)
