"""DeviceTaintRules (KEP-5055; v1beta2, gate DRADeviceTaintRules on in this control plane) on the
real control plane, held to the in-tree plugin of a kube-scheduler with the gate: a rule tainting one
device keeps it from a pod that does not tolerate the taint, on both sides, with the same claims
written; a pod that finds no untainted device left stays pending on both."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.controlplane.cluster import TAINT_RULES_GATE
from tests.e2e.harness import SCHEDULER_NAME, Deployment, Scenario
from tests.e2e.harness import scenario as new_scenario
from tests.e2e.test_claims import settled, written

IN_TREE_WITH_RULES = "in-tree-taint-rules"


@pytest.fixture(scope="module")
def in_tree_with_rules(deployment: Deployment) -> Iterator[str]:
    """A kube-scheduler with the in-tree plugin and the DRADeviceTaintRules gate (it applies the
    rules only with the gate), for pods of ``schedulerName: in-tree-taint-rules``."""
    configuration = {"leaderElection": {"leaderElect": False}, "profiles": [{"schedulerName": IN_TREE_WITH_RULES}]}
    process = f"kube-scheduler-{IN_TREE_WITH_RULES}"
    deployment.plane.start_scheduler(configuration, name=process, extra_args=[f"--feature-gates={TAINT_RULES_GATE}"])
    try:
        yield IN_TREE_WITH_RULES
    finally:
        deployment.plane.stop_scheduler(process)


def tainted(s: Scenario, scheduler: str) -> Sequence[str]:
    (node,) = s.nodes(1)
    gpu = s.device_class()
    s.gpus(node, 2)
    s.create(
        {
            "apiVersion": "resource.k8s.io/v1beta2",
            "kind": "DeviceTaintRule",
            "metadata": {"name": f"{s.prefix}-gpu-0"},
            "spec": {
                "deviceSelector": {"driver": s.driver, "pool": node, "device": "gpu-0"},
                "taint": {"key": "example.com/unhealthy", "value": "ecc", "effect": "NoSchedule"},
            },
        }
    )
    s.claim("one", gpu)
    s.claim("two", gpu)
    s.pod("p1", "one", scheduler_name=scheduler)
    settled(s, ["p1"])
    s.pod("p2", "two", scheduler_name=scheduler)
    settled(s, [], ["p2"])
    return ["p1", "p2"]


def test_a_rules_taint_keeps_the_device_from_pods_as_in_tree(
    scenario: Scenario, deployment: Deployment, in_tree_with_rules: str
) -> None:
    with new_scenario(deployment) as reference, ThreadPoolExecutor(2) as pool:
        runs = [
            pool.submit(tainted, s, name) for s, name in ((scenario, SCHEDULER_NAME), (reference, in_tree_with_rules))
        ]
        pods = [run.result() for run in runs]
        ours, theirs = written(scenario, pods[0]), written(reference, pods[1])
    assert ours == theirs
    (result,) = ours["claims"]["one"]["status"]["allocation"]["devices"]["results"]
    assert result["device"] == "gpu-1"
    assert ours["claims"]["two"]["status"] == {}
    said = [e["message"] for e in scenario.events_for("p2", "FailedScheduling")]
    assert any("cannot allocate all claims" in message for message in said), said
