"""Device-aware preemption on a real control plane (docs/preemption.md, spec/preemption.md §2).

kube-scheduler 1.36 never preempts for a device-only shortage (its dry run knows nothing of devices),
so the extender does it: it evicts an irreducible set of lower-priority device holders through the
Eviction API, holds the freed devices for the preemptor (a nomination), and the preemptor binds once
kube-controller-manager's resourceclaim controller has deallocated the victims' claims.

Fake nodes have no kubelet: the test plays its part (``kubelet.py``). An evicted holder stays
Terminating (a deletionTimestamp and the Eviction API's ``DisruptionTarget`` condition, which is how
the test tells an eviction from a DELETE) until the test removes the kubelet's finalizer. Meanwhile
the preemptor must wait and the victim's claim keep its device; after it,
kube-controller-manager's resourceclaim controller clears the claim's ``reservedFor`` and
deallocates it, and only then may the preemptor bind.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.controlplane.api import ApiError, eventually
from tests.e2e.harness import Scenario
from tests.e2e.kubelet import HIGH, LOW, MID, kubelet_done, pod_or_none, priority_classes, running_holder, terminating


def _devices(claim: dict[str, Any]) -> list[tuple[str, str]]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [(r["pool"], r["device"]) for r in (allocation.get("devices") or {}).get("results") or []]


def _holding(scenario: Scenario, names: list[str], classes: dict[int, str], node: str) -> dict[str, tuple[str, str]]:
    """Each of ``names`` (priority from the name) bound with a claim of one GPU, Running, with the
    kubelet's finalizer; their devices."""
    held = {}
    for i, name in enumerate(names):
        priority = MID if name.startswith("mid") else LOW
        # distinct start times: kube-scheduler's (and the extender's) importance order breaks ties by them
        started = f"2026-01-01T00:00:{i:02d}Z"
        assert running_holder(scenario, name, f"{scenario.prefix}-gpu", classes[priority], started) == node
        (held[name],) = _devices(scenario.get_claim(f"{name}-gpu"))
    return held


def _budget(scenario: Scenario, app: str) -> None:
    """A PodDisruptionBudget that allows no disruption of pod ``app``: processed, counting it, and
    enforced by the API server (a dry-run eviction refused)."""
    scenario.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": f"keep-{app}", "namespace": scenario.namespace},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
        }
    )
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": app, "namespace": scenario.namespace},
        "deleteOptions": {"dryRun": ["All"]},
    }

    path = f"/apis/policy/v1/namespaces/{scenario.namespace}/poddisruptionbudgets/keep-{app}"

    def counted() -> bool:
        budget = scenario.admin.get(path)
        status = budget.get("status") or {}
        return status.get("observedGeneration") == budget["metadata"]["generation"] and status["currentHealthy"] == 1

    eventually(counted, what=f"the budget counting {app} healthy")
    with pytest.raises(ApiError) as refused:
        scenario.admin.create(f"/api/v1/namespaces/{scenario.namespace}/pods/{app}/eviction", eviction)
    assert refused.value.status == 429, refused.value


def _preempt(scenario: Scenario, *, budget_for: str | None) -> None:
    classes = priority_classes(scenario)
    (node,) = scenario.nodes(1)
    gpu = scenario.device_class()
    scenario.gpus(node, 2)
    try:
        held = _holding(scenario, ["mid", "low"], classes, node)
        if budget_for:
            _budget(scenario, budget_for)
        # a low-priority pod already waiting for a GPU: it must not take the freed one
        scenario.claim("waiting-gpu", gpu)
        scenario.pod("waiting", "waiting-gpu", priority=classes[LOW])
        scenario.event("waiting", "FailedScheduling")

        scenario.claim("urgent-gpu", gpu)
        scenario.pod("urgent", "urgent-gpu", priority=classes[HIGH])
        victim = "mid" if budget_for == "low" else "low"
        spared = "low" if victim == "mid" else "mid"

        # evicted through the Eviction API (its DisruptionTarget condition), the other pod spared
        evicted = eventually(lambda: terminating(scenario, victim), what=f"{victim} evicted")
        (target,) = [c for c in evicted["status"].get("conditions") or [] if c["type"] == "DisruptionTarget"]
        assert target["reason"] == "EvictionByEvictionAPI"
        assert "Preempted by pod" in scenario.event(victim, "Preempted")["message"]
        assert terminating(scenario, spared) is None
        # while the victim terminates, the preemptor waits and the device stays the victim's
        assert not scenario.get_pod("urgent")["spec"].get("nodeName")
        assert _devices(scenario.get_claim(f"{victim}-gpu")) == [held[victim]]
        kubelet_done(scenario, victim)

        assert scenario.bound("urgent") == node
        assert pod_or_none(scenario, victim) is None
        # the preemptor got exactly the victim's device, reserved for it
        urgent = scenario.get_pod("urgent")
        claim = scenario.get_claim("urgent-gpu")
        assert _devices(claim) == [held[victim]]
        assert claim["status"]["reservedFor"] == [
            {"resource": "pods", "name": "urgent", "uid": urgent["metadata"]["uid"]}
        ]
        # the victim's claim deallocated and reserved for nobody (the resourceclaim controller's work)
        freed = scenario.get_claim(f"{victim}-gpu")
        assert not (freed.get("status") or {}).get("allocation")
        assert not (freed.get("status") or {}).get("reservedFor")
        # the spared pod and its claim untouched
        assert terminating(scenario, spared) is None
        assert _devices(scenario.get_claim(f"{spared}-gpu")) == [held[spared]]
        # nobody else took a device: the waiting pod is still unbound, its claim unallocated
        assert not scenario.get_pod("waiting")["spec"].get("nodeName")
        assert not _devices(scenario.get_claim("waiting-gpu"))
        allocated = [d for c in scenario.claims() for d in _devices(c)]
        assert sorted(allocated) == sorted(set(allocated)) and len(allocated) == 2
    finally:
        for name in ("mid", "low"):
            kubelet_done(scenario, name)


def test_a_high_priority_pod_evicts_the_lowest_priority_gpu_holder_and_gets_its_device(scenario: Scenario) -> None:
    _preempt(scenario, budget_for=None)


def test_a_disruption_budget_makes_preemption_choose_another_victim(scenario: Scenario) -> None:
    _preempt(scenario, budget_for="low")
