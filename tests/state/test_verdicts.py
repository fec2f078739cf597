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
from extender.state.cache.fit_cache import CURRENT_CANDIDATE_LISTS
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
    for i in range(CURRENT_CANDIDATE_LISTS):  # only so many lists are kept
        svc.verdicts.candidates([*names[: i % 3 + 1], f"extra-{i}"])
    assert svc.verdicts.candidates(list(names)) is not first


def test_a_turn_of_sampled_windows_is_answered_from_memory_when_it_comes_back() -> None:
    """kube-scheduler scoring a sample of the nodes sends windows that move round the node list
    (10 at 5000 nodes with its adaptive 10 %): the same lists come back in turn. The second turn
    finds each list, its filter answer and its score column remembered."""
    svc = service(cluster(claim("c1"), pod("p", "c1"), nodes=20), hold_seconds=0)
    names = [f"node-{i}" for i in range(1, 21)]
    windows = [names[i : i + 2] for i in range(0, 20, 2)]  # 10 windows of 2 nodes
    first = [(svc.verdicts.candidates(w), svc.filter(pod("p", "c1"), w)) for w in windows]
    columns = [svc.prioritize_columns(pod("p", "c1"), w) for w in windows]
    for window, (candidates, outcome), column in zip(windows, first, columns, strict=True):
        fresh = ["".join(n) for n in window]  # new string objects, as parsed from a request
        assert svc.verdicts.candidates(fresh) is candidates
        assert svc.filter(pod("p", "c1"), fresh) is outcome
        assert svc.prioritize_columns(pod("p", "c1"), fresh) == column
    assert len(windows) <= CURRENT_CANDIDATE_LISTS


def test_a_node_keeps_one_name_object_across_its_updates_and_loses_it_when_deleted() -> None:
    """Candidate lists map onto ``ObjectStore.node_names``: the caches' keys stay the same string
    objects while a Node is updated (labels, heartbeats), and a deleted Node's name is forgotten."""
    svc = service(cluster(claim("c1"), pod("p", "c1"), nodes=2))
    before = svc.verdicts.candidates(["".join("node-1"), "".join("node-2")]).names
    updated = node("node-1")
    updated["metadata"]["labels"] = {"rack": "r1"}
    svc.backend.apply(updated)  # type: ignore[attr-defined]
    assert svc.store.nodes["node-1"].labels == {"rack": "r1"}
    after = svc.verdicts.candidates(["".join("node-1"), "".join("node-3")]).names
    assert after[0] is before[0]  # the first name object, not the new NodeInfo's
    assert after == ["node-1", "node-3"]  # a name the store does not know stays as asked
    svc.backend.delete("Node", None, "node-2")  # type: ignore[attr-defined]
    assert "node-2" not in svc.store.node_names and set(svc.store.node_names) == {"node-1"}


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


async def test_scoring_that_lets_the_loop_run_leaves_out_a_node_changed_meanwhile_and_scores_it_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A new shape's first prioritize over many nodes pauses between nodes; a node whose devices
    change during a pause (another pod bound there) is scored 0 in that answer at worst, never
    from what it was, and the next prioritize of the list scores it from what it is."""
    monkeypatch.setattr("extender.state.filter.verdicts.DEFAULT_SLICE_SECONDS", 0.0)  # pause after every node
    names = [f"node-{i}" for i in range(1, 7)]
    objects = cluster(claim("c1"), claim("c2"), pod("p", "c1"), pod("q", "c2"), nodes=6, gpus=2)
    svc = service(objects, hold_seconds=0)
    assert svc.filter(pod("p", "c1"), names).node_names == names
    binding = asyncio.create_task(svc.bind("default", "q", "uid-q", "node-3"))  # runs at the first pause
    hosts, during = await svc.prioritize_cooperatively(pod("p", "c1"), names)
    await binding
    svc.filter(pod("p", "c1"), names)
    now = list(svc.prioritize_columns(pod("p", "c1"), names)[1])
    assert list(hosts) == names and now[2] > now[0] == now[1] == now[3]  # binpack: node-3 is half used
    fresh = service(objects, hold_seconds=0)
    await fresh.bind("default", "q", "uid-q", "node-3")
    fresh.filter(pod("p", "c1"), names)
    assert list(fresh.prioritize_columns(pod("p", "c1"), names)[1]) == now
    others = [n for n in names if n != "node-3"]  # scores are relative: without node-3, they are these
    left_out = list(fresh.prioritize_columns(pod("p", "c1"), others)[1])
    assert during in (now, [*left_out[:2], 0, *left_out[2:]])  # never node-3 as it was before the bind


async def test_scoring_that_pauses_at_every_node_reads_each_node_a_bounded_number_of_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pausing must not make the scoring quadratic (a check over every node after each pause took
    minutes at 15 000 nodes): with a pause after every node, each node's usage is read a few times."""
    monkeypatch.setattr("extender.state.filter.verdicts.DEFAULT_SLICE_SECONDS", 0.0)
    names = [f"node-{i}" for i in range(1, 31)]
    svc = service(cluster(claim("c1"), pod("p", "c1"), nodes=30, gpus=2), hold_seconds=0)
    svc.filter(pod("p", "c1"), names)
    reads: list[str] = []
    real = svc.store.fits.usage
    monkeypatch.setattr(svc.store.fits, "usage", lambda node: reads.append(node) or real(node))
    _, scores = await svc.prioritize_cooperatively(pod("p", "c1"), names)
    assert len(scores) == 30 and all(s == scores[0] for s in scores)  # 30 alike nodes, nothing changed
    assert len(reads) <= 3 * len(names)


def _allocator_calls(svc: SchedulingService) -> list[list[str]]:
    """The nodes the allocator is asked about, per search, from now on."""
    calls: list[list[str]] = []
    original = svc.cluster.allocator

    def counting(claims: Any, *, refresh: bool = True, budget: Any = None) -> Any:
        allocator = original(claims, refresh=refresh, budget=budget)
        real = allocator.answer_many

        def many(names: Any, node: Any) -> Any:
            calls.append(sorted(names))
            return real(names, node)

        allocator.answer_many = many  # type: ignore[method-assign]
        return allocator

    svc.cluster.allocator = counting  # type: ignore[method-assign]
    return calls


def test_the_filter_answer_is_remembered_as_the_list_prioritize_will_ask_about() -> None:
    """kube-scheduler prioritizes exactly the nodes the filter passed, in its order: when the filter
    rejected some, that list is remembered at the filter, covered where the filter's list was, so
    that prioritize neither looks its nodes up again nor asks the allocator."""
    objects = cluster(claim("big", count=2), pod("p", "big"), nodes=3, gpus=2)
    small = gpu_slice("node-1", 1)  # node-1 has one GPU: the pod fails there
    objects = [small if o["metadata"]["name"] == small["metadata"]["name"] else o for o in objects]
    svc = service(objects, hold_seconds=0)
    asked = ["node-3", "node-1", "node-2"]
    outcome = svc.filter(pod("p", "big"), asked)
    assert outcome.node_names == ["node-3", "node-2"] and set(outcome.failed) == {"node-1"}
    answer = svc.verdicts.candidates(["".join(n) for n in outcome.node_names])  # fresh strings, as parsed
    claims = svc.cluster.claims(svc.cluster.pod(pod("p", "big")))
    shape = svc.verdicts.shape(claims)
    table = svc.store.fits.table(shape)
    covered = table.covered_at(answer.serial)
    assert covered is not None and covered == table.covered_at(svc.verdicts.candidates(asked).serial)
    calls = _allocator_calls(svc)
    hosts, scores = svc.prioritize_columns(pod("p", "big"), outcome.node_names)
    assert list(hosts) == ["node-3", "node-2"] and calls == []
    fresh = service(objects, hold_seconds=0)
    assert list(fresh.prioritize_columns(pod("p", "big"), ["node-3", "node-2"])[1]) == scores


async def test_a_node_changed_between_the_filter_and_prioritize_is_decided_again() -> None:
    """The filter's answer is covered as of the filter: a bind in between (another pod's, on a
    node of the answer) makes prioritize decide that node again, and score it as it is now."""
    objects = cluster(claim("a"), claim("b"), claim("c"), pod("p", "a"), pod("q", "b"), pod("r", "c"), nodes=3, gpus=2)
    svc = service(objects, hold_seconds=0)
    await svc.bind("default", "r", "uid-r", "node-1")
    await svc.bind("default", "q", "uid-q", "node-1")  # node-1 is full: the filter rejects it
    outcome = svc.filter(pod("p", "a"), ["node-1", "node-2", "node-3"])
    assert outcome.node_names == ["node-2", "node-3"]
    answer = svc.verdicts.candidates(["node-2", "node-3"])
    table = svc.store.fits.table(svc.verdicts.shape(svc.cluster.claims(svc.cluster.pod(pod("p", "a")))))
    assert table.covered_at(answer.serial) is not None  # registered by the filter
    fresh = service(objects, hold_seconds=0)
    for name, uid in (("r", "uid-r"), ("q", "uid-q")):
        await fresh.bind("default", name, uid, "node-1")
    # between the filter and prioritize, node-3 is half taken by a new pod s: in both services
    objects_s = [claim("d"), pod("s", "d")]
    for service_ in (svc, fresh):
        for obj in copy.deepcopy(objects_s):
            service_.backend.apply(obj)  # type: ignore[attr-defined]
        await service_.bind("default", "s", "uid-s", "node-3")
    calls = _allocator_calls(svc)
    scores = list(svc.prioritize_columns(pod("p", "a"), ["node-2", "node-3"])[1])
    assert calls == [["node-3"]]  # only the node the bind changed
    assert scores == list(fresh.prioritize_columns(pod("p", "a"), ["node-2", "node-3"])[1])
    assert scores[1] > scores[0]  # binpack: node-3 half used now


async def test_prioritize_of_a_new_list_scores_the_nodes_without_scores_and_none_that_fails() -> None:
    """A list never seen before (a sample window, without a filter before it): the nodes whose
    scores are remembered are looked up, those dropped since (a bind) scored, and a node that fails
    now gets 0: the same columns as a service that remembers nothing."""
    objects = cluster(*(claim(c) for c in "abcd"), *(pod(p, c) for p, c in zip("pqrs", "abcd", strict=True)), nodes=3)
    svc = service(objects, hold_seconds=0)
    svc.prioritize_columns(pod("p", "a"), ["node-1", "node-2", "node-3"])  # every node scored
    fresh = service(objects, hold_seconds=0)
    for service_ in (svc, fresh):
        await service_.bind("default", "q", "uid-q", "node-2")
        await service_.bind("default", "r", "uid-r", "node-3")
        await service_.bind("default", "s", "uid-s", "node-3")  # node-3 is full
    new_list = ["node-3", "node-2", "node-1"]
    scores = list(svc.prioritize_columns(pod("p", "a"), new_list)[1])
    assert scores == list(fresh.prioritize_columns(pod("p", "a"), new_list)[1])
    assert scores[0] == 0 and scores[1] > scores[2]  # node-3 fails; node-2 half used (binpack)


def test_answers_prioritize_is_never_asked_about_are_not_remembered() -> None:
    """One node passing (kube-scheduler then binds without prioritize), and explain's read-only
    attempt, leave the remembered lists alone: they hold only so many."""
    objects = cluster(claim("big", count=2), pod("p", "big"), nodes=3, gpus=2)
    small = gpu_slice("node-1", 1)
    objects = [small if o["metadata"]["name"] == small["metadata"]["name"] else o for o in objects]
    svc = service(objects, hold_seconds=0)
    before = dict(svc.verdicts._recent)
    assert svc.filter(pod("p", "big"), ["node-1", "node-2"]).node_names == ["node-2"]
    assert svc.attempt(pod("p", "big"), ["node-1", "node-2", "node-3"]).outcome.node_names == ["node-2", "node-3"]
    added = [entry.names for key, entry in svc.verdicts._recent.items() if key not in before]
    assert added == [["node-1", "node-2"], ["node-1", "node-2", "node-3"]]  # the requests' own lists only
