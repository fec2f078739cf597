"""One read-only ``Attempt`` per filter request (``state/filter/attempt.py``), then its effects.

The attempt changes nothing (no hold, no rejected-pod entry, no ``potentialNodes`` write); the filter
verb applies its effects in order; explain and ``why`` read the same attempt, so they agree with
filter on every node; PostFilter works from the attempt it is given.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from typing import Any

import pytest

from extender.backends.embedded import EmbeddedBackend
from extender.core.answers import CANNOT_ALLOCATE
from extender.state.service import SchedulingService
from extender.views.debug import DebugViews
from extender.views.explanation import FITS, explain_pod
from extender.views.why import why
from tests.manifests import claim, cluster, pod

NODES = ["node-1", "node-2", "node-3"]


def service(objects: list[dict[str, Any]], **options: Any) -> SchedulingService:
    return SchedulingService(backend=EmbeddedBackend(copy.deepcopy(objects)), **options)


def test_an_attempt_changes_nothing_and_filter_applies_its_effects() -> None:
    # node-2's and node-3's GPUs taken: node-1 is the one node left, which filter holds
    claims = (claim("big", 2), claim("b2", 2), claim("b3", 2))
    svc = service(cluster(*claims, pod("p", "big"), pod("a", "b2"), pod("b", "b3"), nodes=3))
    asyncio.run(svc.bind("default", "a", "uid-a", "node-2"))
    asyncio.run(svc.bind("default", "b", "uid-b", "node-3"))
    attempt = svc.attempt(pod("p", "big"), NODES)
    assert attempt.decided and attempt.outcome.node_names == ["node-1"]
    assert [e.claim_key for e in svc.ledger if e.tentative] == []  # no hold
    outcome = svc.filter(pod("p", "big"), NODES)
    assert outcome.node_names == ["node-1"]
    assert [(e.claim_key, e.node) for e in svc.ledger if e.tentative] == [("default/big", "node-1")]


def test_an_attempt_is_complete_at_construction() -> None:
    svc = service(cluster(claim("c1"), pod("p", "c1")))
    attempt = svc.attempt(pod("p", "c1"), ["node-1"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        attempt.decided = False  # type: ignore[misc]


def test_a_pod_no_node_fits_is_rejected_by_filter_not_by_its_attempt() -> None:
    svc = service(cluster(claim("big", 3), pod("p", "big")))
    attempt = svc.attempt(pod("p", "big"), ["node-1", "node-2"])
    assert attempt.outcome.failed == {"node-1": CANNOT_ALLOCATE, "node-2": CANNOT_ALLOCATE}
    assert "uid-p" not in svc.rejected
    svc.filter(pod("p", "big"), ["node-1", "node-2"])
    assert "uid-p" in svc.rejected


@pytest.mark.parametrize("taken", [0, 1, 2, 3])
def test_explain_and_why_agree_with_filter_on_every_node(taken: int) -> None:
    """With 0-3 nodes' GPUs taken by other pods, explain's outcome per node and why's fitting nodes
    are exactly what filter answers."""
    objects = cluster(*(claim(f"c{i}", 2) for i in range(4)), *(pod(f"p{i}", f"c{i}") for i in range(4)), nodes=3)
    svc = service(objects)
    for i in range(taken):
        asyncio.run(svc.bind("default", f"p{i}", f"uid-p{i}", f"node-{i + 1}"))
    outcome = svc.attempt(pod("p3", "c3"), NODES).outcome
    explained = explain_pod(svc, pod("p3", "c3"), NODES)
    assert [n.node for n in explained.nodes if n.outcome == FITS] == outcome.node_names
    refused = {**outcome.failed, **outcome.unresolvable}
    assert {n.node: n.reason for n in explained.nodes if n.outcome != FITS} == refused
    document = why(DebugViews(svc), pod("p3", "c3"), NODES)
    assert document["fits"]["nodes"] == outcome.node_names


def test_the_typed_explanation_is_what_debug_explain_answers() -> None:
    svc = service(cluster(claim("c1"), pod("p", "c1")))
    typed = explain_pod(svc, pod("p", "c1"), ["node-1", "node-2"])
    assert DebugViews(svc).explain(pod("p", "c1"), ["node-1", "node-2"]) == typed.to_dict()
    assert [n["outcome"] for n in typed.to_dict()["nodes"]] == [FITS, FITS]


async def test_post_filter_works_from_the_attempt_it_is_given() -> None:
    """A claim allocated on node-1 for this pod alone keeps it from node-2: PostFilter deallocates it
    from the attempt's own claims (no second resolution), and the next attempt fits node-2."""
    svc = service(cluster(claim("c1"), pod("p", "c1")))
    await svc.bind("default", "p", "uid-p", "node-1")
    stored = svc.backend.get("Pod", "default", "p")  # type: ignore[attr-defined]
    stored["spec"].pop("nodeName")  # the pod was evicted and re-created with its claim kept
    svc.backend.apply(stored)  # type: ignore[attr-defined]
    attempt = svc.attempt(pod("p", "c1"), ["node-2"])
    assert attempt.outcome.node_names == [] and attempt.claims is not None
    outcome = await svc.post_filter.run(attempt)
    assert outcome.error == "deallocation of ResourceClaim default/c1 completed"
    assert svc.attempt(pod("p", "c1"), ["node-2"]).outcome.node_names == ["node-2"]
