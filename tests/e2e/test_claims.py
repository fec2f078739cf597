"""Claims of every shape, bound by the real kube-scheduler through the real extender."""

from __future__ import annotations

from tests.e2e.harness import Scenario


def test_a_one_device_claim_is_allocated_reserved_and_its_pod_bound(scenario: Scenario) -> None:
    (node,) = scenario.nodes(1)
    gpu = scenario.device_class()
    scenario.gpus(node, 2)
    scenario.claim("one", gpu)
    scenario.pod("p1", "one")
    assert scenario.bound("p1") == node
    claim = scenario.get_claim("one")
    pod = scenario.get_pod("p1")
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"], result["request"]) == (scenario.driver, node, "gpus")
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "p1", "uid": pod["metadata"]["uid"]}]
