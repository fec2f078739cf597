"""Device binding conditions (KEP-5007) on the real control plane, held to the in-tree plugin: a pod
whose device has ``bindingConditions`` gets its claim allocated and reserved, its
``nominatedNodeName`` and a ``BindingConditionsPending`` Event, and stays unbound until the driver
reports the condition; then it is bound, on both sides, with the same objects written."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.controlplane.api import eventually
from tests.e2e.harness import IN_TREE, SCHEDULER_NAME, V1, Scenario
from tests.e2e.test_claims import written


def fabric_device(s: Scenario) -> tuple[str, str]:
    (node,) = s.nodes(1)
    gpu = s.device_class()
    s.slice(
        node,
        [
            {
                "name": "gpu-0",
                "bindsToNode": True,
                "bindingConditions": ["example.com/attached"],
                "bindingFailureConditions": ["example.com/failed"],
            }
        ],
    )
    return node, gpu


def report(s: Scenario, claim: str, node: str, condition: str) -> None:
    """The driver's part: the condition, True, on the claim's ``status.devices`` entry."""
    path = f"/apis/{V1}/namespaces/{s.namespace}/resourceclaims/{claim}/status"
    body: dict[str, Any] = s.get_claim(claim)
    body["status"]["devices"] = [
        {
            "driver": s.driver,
            "pool": node,
            "device": "gpu-0",
            "conditions": [
                {
                    "type": condition,
                    "status": "True",
                    "reason": "Attached",
                    "message": "attached by the e2e driver",
                    "lastTransitionTime": "2026-12-02T00:00:00Z",
                }
            ],
        }
    ]
    s.admin.replace(path, body)


def waiting(s: Scenario, scheduler: str) -> Sequence[str]:
    _, gpu = fabric_device(s)
    s.claim("one", gpu)
    s.pod("p1", "one", scheduler_name=scheduler)
    s.event("p1", "BindingConditionsPending")
    eventually(lambda: s.get_pod("p1")["status"].get("nominatedNodeName"), what="p1 nominated")
    return ["p1"]


def test_a_pod_waits_for_its_devices_binding_conditions_as_in_tree(scenario: Scenario, reference: Scenario) -> None:
    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(waiting, s, name) for s, name in ((scenario, SCHEDULER_NAME), (reference, IN_TREE))]
        for run in runs:
            run.result()
    ours, theirs = written(scenario, ["p1"]), written(reference, ["p1"])
    claim = ours["claims"]["one"]
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert result["bindingConditions"] == ["example.com/attached"]
    assert claim["status"]["reservedFor"][0]["name"] == "p1"
    # nominatedNodeName was seen set on both sides (``waiting``); the extender's stays set while its
    # bind waits (--binding-wait-seconds), kube-scheduler clears it after a bind answered Error
    assert ours["pods"]["p1"]["nodeName"] is None
    event = scenario.event("p1", "BindingConditionsPending")
    assert event["type"] == "Normal"
    assert event["message"] == f"waiting for binding conditions for device on node {scenario.prefix}-node-1"
    # the claims are the same while waiting; the pods' conditions may differ (the extender's bind
    # answers an error each attempt, the in-tree plugin's PreBind waits)
    assert ours["claims"] == theirs["claims"]
    for s in (scenario, reference):
        report(s, "one", f"{s.prefix}-node-1", "example.com/attached")
    for s in (scenario, reference):
        s.bound("p1")
    ours, theirs = written(scenario, ["p1"]), written(reference, ["p1"])
    for side in (ours, theirs):
        for status in side["claims"].values():
            status["status"]["devices"][0]["conditions"][0].pop("lastTransitionTime", None)
    assert ours["claims"] == theirs["claims"]
    assert ours["pods"]["p1"]["nodeName"] == theirs["pods"]["p1"]["nodeName"] == "<prefix>-node-1"


def allocated_again(s: Scenario) -> bool:
    """The claim deallocated after the failure and allocated afresh: an allocation without the
    driver's failed device status (deallocation cleared it)."""
    status = s.get_claim("one").get("status") or {}
    return bool(status.get("allocation")) and not status.get("devices")


def test_a_failed_binding_deallocates_and_schedules_again_as_in_tree(scenario: Scenario, reference: Scenario) -> None:
    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(waiting, s, name) for s, name in ((scenario, SCHEDULER_NAME), (reference, IN_TREE))]
        for run in runs:
            run.result()
    for s in (scenario, reference):
        report(s, "one", f"{s.prefix}-node-1", "example.com/failed")
    for s in (scenario, reference):
        failed = eventually(
            lambda s=s: [e for e in s.events_for("p1", "FailedScheduling") if "device binding failed" in e["message"]],
            what="a FailedScheduling event naming the binding failure",
        )
        assert "claim=one" in failed[-1]["message"], failed[-1]["message"]
        eventually(lambda s=s: allocated_again(s), what="the claim allocated again")
        assert s.get_pod("p1")["spec"].get("nodeName") is None
