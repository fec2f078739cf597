"""The verdict cache behind filter and prioritize (``state/filter/verdicts.py``), at the state level:
candidate lists canonicalised and remembered by content, per-shape verdicts reused until a node's
inputs change, filter answers kept as the same object while nothing changed, score columns that
follow binds. The remembered verdicts themselves: test_fit_cache.py."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from extender.backends.embedded import EmbeddedBackend
from extender.core.answers import CANNOT_ALLOCATE, NO_CLASS_DEVICES
from extender.state.service import SchedulingService
from tests.manifests import claim, cluster, gpu_slice, node, pod

NODES = ["node-1", "node-2"]


def service(objects: list[dict[str, Any]], **options: Any) -> SchedulingService:
    return SchedulingService(backend=EmbeddedBackend(copy.deepcopy(objects)), **options)


def test_prioritize_and_later_pods_reuse_remembered_verdicts_until_a_node_changes() -> None:
    # Without holds: a hold is a node change of its own (tests/state/test_holds.py).
    svc = service(cluster(claim("c1"), claim("c2"), pod("p", "c1"), pod("q", "c2"), nodes=2, gpus=2), hold_seconds=0)
    calls = []
    original = svc.cluster.allocator

    def counting(claims: Any, *, refresh: bool = True, budget: Any = None) -> Any:
        allocator = original(claims, refresh=refresh, budget=budget)
        real = allocator.answer_many

        def many(names: Any, node: Any) -> Any:
            calls.append(sorted(names))  # the nodes the allocator was asked about
            return real(names, node)

        allocator.answer_many = many  # type: ignore[method-assign]
        return allocator

    svc.cluster.allocator = counting  # type: ignore[method-assign]
    misses = svc.store.fits.stats
    fresh = dict(svc.prioritize(pod("p", "c1"), NODES))
    assert calls == [NODES] and misses.misses == 2
    assert svc.filter(pod("p", "c1"), NODES).node_names == NODES
    assert dict(svc.prioritize(pod("p", "c1"), NODES)) == fresh
    assert dict(svc.prioritize(pod("q", "c2"), NODES)) == fresh  # c2's spec is c1's: the same shape
    assert calls == [NODES] and misses.misses == 2
    svc.backend.apply(gpu_slice("node-3", 1))  # type: ignore[attr-defined]
    svc.filter(pod("p", "c1"), NODES)  # node-3 is not asked about
    assert calls == [NODES]
    svc.backend.apply(gpu_slice("node-1", 3))  # type: ignore[attr-defined]
    svc.filter(pod("p", "c1"), NODES)
    assert calls == [NODES, ["node-1"]] and misses.misses == 3


def test_candidate_lists_are_canonicalised_and_remembered_by_content() -> None:
    svc = service(cluster(claim("c1"), pod("p", "c1"), nodes=3))
    names = ["node-1", "node-2", "node-3"]
    first = svc.verdicts.candidates(["".join(n) for n in names])  # fresh string objects, as from a request
    assert first.names == names and first.unique == set(names)
    assert all(a is b.name for a, b in zip(first.names, (svc.store.nodes[n] for n in names), strict=True))
    assert svc.verdicts.candidates(list(names)) is first  # equal content: the same entry
    survivors = svc.verdicts.candidates(names[:2])
    assert survivors is not first and survivors.serial != first.serial
    # a list whose joined key would be ambiguous is answered but not remembered
    odd = ["node-1\x00node-2", "node-3"]
    assert svc.verdicts.candidates(odd).names == odd
    assert svc.verdicts.candidates(odd) is not svc.verdicts.candidates(odd)
    assert svc.verdicts.candidates(["node-1", "node-2\x00node-3"]).names == ["node-1", "node-2\x00node-3"]
    for i in range(10):  # only a few lists are kept
        svc.verdicts.candidates([*names[: i % 3 + 1], f"extra-{i}"])
    assert svc.verdicts.candidates(list(names)) is not first


def test_filter_answers_failed_nodes_from_remembered_maps_and_keeps_them_current() -> None:
    objects = cluster(claim("big", count=2), pod("p", "big"), nodes=2, gpus=2)
    objects.append(node("node-3"))  # no GPU at all: unresolvable
    svc = service(objects)
    asked = [*NODES, "node-3"]
    first = svc.filter(pod("p", "big"), asked)
    assert first.node_names == NODES and first.failed == {}
    assert first.unresolvable == {"node-3": NO_CLASS_DEVICES}
    assert svc.filter(pod("p", "big"), asked) is first  # nothing changed: the same answer
    svc.backend.apply(gpu_slice("node-1", 1))  # type: ignore[attr-defined]
    again = svc.filter(pod("p", "big"), asked)
    assert again.node_names == ["node-2"]
    assert again.failed == {"node-1": CANNOT_ALLOCATE} and again.unresolvable == {"node-3": NO_CLASS_DEVICES}
    assert svc.filter(pod("p", "big"), asked) is again
    svc.backend.apply(gpu_slice("node-1", 2))  # type: ignore[attr-defined]
    assert svc.filter(pod("p", "big"), asked).failed == {}
    assert first.unresolvable == {"node-3": NO_CLASS_DEVICES} and first.failed == {}  # answers kept as given
    # asked about fewer nodes than are remembered: the answer names only those
    assert svc.filter(pod("p", "big"), ["node-3"]).unresolvable == {"node-3": NO_CLASS_DEVICES}
    assert svc.filter(pod("p", "big"), ["node-1"]).unresolvable == {}


def test_prioritize_refuses_a_fitting_node_listed_twice_every_time() -> None:
    svc = service(cluster(claim("c1"), pod("p", "c1"), nodes=2))
    assert dict(svc.prioritize(pod("p", "c1"), NODES)).keys() == set(NODES)
    for _ in range(2):  # also once the candidate list's scores are remembered
        with pytest.raises(ValueError, match="node\\(s\\) given twice: node-1"):
            svc.prioritize(pod("p", "c1"), ["node-1", "node-2", "node-1"])
    assert svc.prioritize(pod("p", "c1"), NODES) == svc.prioritize(pod("p", "c1"), list(NODES))


def test_prioritize_scores_follow_binds_on_a_remembered_candidate_list() -> None:
    objects = cluster(claim("a"), claim("b"), pod("p", "a"), pod("q", "b"), nodes=2, gpus=2)
    svc = service(objects, hold_seconds=0)  # equal scores stay equal without holds (test_holds.py)
    before = dict(svc.prioritize(pod("p", "a"), NODES))
    assert before["node-1"] == before["node-2"]  # both empty
    asyncio.run(svc.bind("default", "q", "uid-q", "node-2"))
    after = dict(svc.prioritize(pod("p", "a"), NODES))
    assert after["node-2"] > after["node-1"]  # binpack: the half-used node scores higher now


def test_pods_of_one_shape_share_the_verdicts_and_the_filter_answer() -> None:
    """Two pods whose claims have the same spec are one shape: the second pod's filter is the first
    one's answer object, asked of the allocator never again."""
    svc = service(cluster(claim("c1"), claim("c2"), pod("p", "c1"), pod("q", "c2")), hold_seconds=0)
    candidates = svc.verdicts.candidates(NODES)
    p_claims = svc.cluster.claims(svc.cluster.pod(pod("p", "c1")))
    q_claims = svc.cluster.claims(svc.cluster.pod(pod("q", "c2")))
    assert svc.verdicts.shape(p_claims) == svc.verdicts.shape(q_claims)
    p_verdicts = svc.verdicts.verdicts(p_claims, candidates)
    assert svc.verdicts.verdicts(q_claims, candidates) is p_verdicts
    assert svc.verdicts.filter_outcome(p_verdicts, candidates) is svc.verdicts.filter_outcome(p_verdicts, candidates)


def test_a_claim_of_another_size_is_another_shape() -> None:
    svc = service(cluster(claim("one"), claim("two", 2), pod("p", "one"), pod("q", "two")))
    one = svc.cluster.claims(svc.cluster.pod(pod("p", "one")))
    two = svc.cluster.claims(svc.cluster.pod(pod("q", "two")))
    assert svc.verdicts.shape(one) != svc.verdicts.shape(two)
