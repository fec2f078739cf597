"""The release model of device-aware preemption (spec/preemption.md §2.4), one row of its table per
case: which allocated claims a set of removed pods frees."""

from __future__ import annotations

import pytest

from extender.core.model import AllocationResult, ConsumerRef, DeviceResult, ResourceClaim
from extender.core.preemption import Plan, Victim, being_freed, better_plan, released


def claim(key: str, *consumers: ConsumerRef, admin: bool = False) -> ResourceClaim:
    namespace, name = key.split("/")
    result = DeviceResult(request="r", driver="d", pool="p", device=name, admin_access=admin)
    return ResourceClaim(
        namespace=namespace, name=name, allocation=AllocationResult(devices=(result,)), reserved_for=consumers
    )


def pod(uid: str) -> ConsumerRef:
    return ConsumerRef("pods", uid, uid)


CLAIMS = {
    "ns/own": claim("ns/own", pod("a")),
    "ns/shared-in": claim("ns/shared-in", pod("a"), pod("b")),
    "ns/shared-out": claim("ns/shared-out", pod("a"), pod("vip")),
    "ns/group": claim("ns/group", ConsumerRef("podgroups", "g", "g", api_group="scheduling.x-k8s.io")),
    "ns/nobody-owned": claim("ns/nobody-owned"),
    "ns/nobody": claim("ns/nobody"),
    "ns/unallocated": ResourceClaim(namespace="ns", name="unallocated", reserved_for=(pod("a"),)),
}
OWNERS = {"ns/nobody-owned": "a"}


@pytest.mark.parametrize(
    ("key", "freed"),
    [
        ("ns/own", True),  # standalone, every consumer removed
        ("ns/shared-in", True),  # shared, every consumer removed
        ("ns/shared-out", False),  # shared with a pod that stays: its devices stay
        ("ns/group", False),  # a consumer that is not a pod (a PodGroup)
        ("ns/nobody-owned", True),  # reserved for nobody, owned by a removed pod (its template claim)
        ("ns/nobody", False),  # reserved for nobody, owned by nobody removed: no transition frees it
        ("ns/unallocated", False),  # holds nothing
    ],
)
def test_which_claims_removing_pods_frees(key: str, freed: bool) -> None:
    assert (key in released({"a", "b"}, CLAIMS, OWNERS, CLAIMS)) is freed


def test_a_victim_must_be_removed_for_its_claims_to_be_freed() -> None:
    assert released({"b"}, CLAIMS, OWNERS, CLAIMS) == set()


@pytest.mark.parametrize(
    ("key", "holding", "waited_for"),
    [
        ("ns/own", set(), True),  # its consumer gone, the controller has yet to deallocate it
        ("ns/own", {"b", "vip"}, True),  # other pods hold on to their claims: not to this one
        ("ns/shared-in", {"x"}, True),
        ("ns/shared-out", {"vip"}, False),  # a running pod reserved it since: it stays allocated
        ("ns/shared-in", {"b"}, False),
        ("ns/group", set(), False),  # reserved for a PodGroup: it stays allocated for the group
        ("ns/nobody", set(), True),  # allocated, reserved for nobody: deallocation is next
        ("ns/unallocated", set(), False),  # deallocated already
        ("ns/deleted", set(), False),  # gone with its pod
    ],
)
def test_which_freed_claims_a_preemptor_waits_for(key: str, holding: set[str], waited_for: bool) -> None:
    assert being_freed(CLAIMS.get(key), holding) is waited_for


def test_plans_are_ranked_as_kube_scheduler_ranks_nodes() -> None:
    low = Victim("ns", "low", "u1", 10, "2026-01-01T00:00:00Z")
    mid = Victim("ns", "mid", "u2", 50, "2026-01-01T00:00:00Z")
    older = Victim("ns", "older", "u3", 10, "2025-01-01T00:00:00Z")
    assert better_plan([Plan("n1", (mid,)), Plan("n2", (low,))]).node == "n2"  # type: ignore[union-attr]
    assert better_plan([Plan("n1", (low, older)), Plan("n2", (low,))]).node == "n2"  # type: ignore[union-attr]
    # equal otherwise: the latest start of the most important victim wins
    assert better_plan([Plan("n1", (older,)), Plan("n2", (low,))]).node == "n2"  # type: ignore[union-attr]
    assert better_plan([Plan("n1", (low,), pdb_violations=1), Plan("n2", (mid,))]).node == "n2"  # type: ignore[union-attr]


def test_budgets_protect_victims_in_importance_order() -> None:
    from extender.core.preemption import Budget, label_selector_matches, protected_victims

    a = Victim("ns", "a", "ua", 200)
    b = Victim("ns", "b", "ub", 100)
    c = Victim("other", "c", "uc", 100)
    labels = {"ua": {"app": "web"}, "ub": {"app": "web"}, "uc": {"app": "web"}}
    one_left = Budget("ns", "web", {"matchLabels": {"app": "web"}}, 1)
    # the more important victim consumes the one disruption allowed; the next one would violate
    assert protected_victims([b, a, c], [one_left], labels) == {"ub"}
    assert protected_victims([a, b], [Budget("ns", "none", None, 0)], labels) == set()  # selects nothing
    assert label_selector_matches(
        {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}, {"app": "web"}
    )
    assert not label_selector_matches(
        {"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, {"app": "web"}
    )
    assert not label_selector_matches({}, {"app": "web"})
