"""What the e2e tests play of a kubelet and of priority, shared by the preemption tests.

Fake nodes have no kubelet, so the tests play the two parts of it that preemption needs:

- a bound device holder is marked Running and Ready (``status.phase``, ``conditions``,
  ``startTime``): the API server's eviction skips PodDisruptionBudgets for Pending pods, and the
  disruption controller counts only Ready pods as healthy;
- a device holder carries a finalizer (``KUBELET``) standing for its running containers. Its pods
  have ``terminationGracePeriodSeconds: 0`` (``Scenario.pod``), so without one an evicted pod would
  vanish at once; with it, the evicted pod stays Terminating until the test, as the kubelet would
  once the containers stopped, removes the finalizer (``kubelet_done``).
"""

from __future__ import annotations

import contextlib
from typing import Any

from tests.controlplane.api import ApiError
from tests.e2e.harness import Scenario

__all__ = [
    "HIGH",
    "KUBELET",
    "LOW",
    "MID",
    "TOP",
    "kubelet_done",
    "pod_or_none",
    "priority_classes",
    "run_pod",
    "running_holder",
    "terminating",
]

LOW, MID, HIGH, TOP = 100, 200, 1000, 2000
KUBELET = "e2e.example.com/kubelet"


def priority_classes(scenario: Scenario, values: tuple[int, ...] = (LOW, MID, HIGH, TOP)) -> dict[int, str]:
    """A PriorityClass per value (``<prefix>-p<value>``), preempting lower priorities."""
    names = {}
    for value in values:
        name = f"{scenario.prefix}-p{value}"
        scenario.create(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
                "preemptionPolicy": "PreemptLowerPriority",
            }
        )
        names[value] = name
    return names


def run_pod(scenario: Scenario, name: str, started: str) -> None:
    """The kubelet's status for a bound pod: Running and Ready since ``started``."""
    ready = {"type": "Ready", "status": "True", "lastTransitionTime": started}
    scenario.admin.merge_patch(
        f"/api/v1/namespaces/{scenario.namespace}/pods/{name}/status",
        {"status": {"phase": "Running", "startTime": started, "conditions": [ready]}},
    )


def running_holder(scenario: Scenario, name: str, device_class: str, priority_class: str, started: str) -> str:
    """Pod ``name`` with a claim of one GPU of ``device_class``, scheduled and bound, then Running
    since ``started`` with the kubelet's finalizer (an eviction leaves it Terminating until
    ``kubelet_done``); its node."""
    scenario.claim(f"{name}-gpu", device_class)
    scenario.pod(name, f"{name}-gpu", priority=priority_class, labels={"app": name})
    scenario.admin.merge_patch(
        f"/api/v1/namespaces/{scenario.namespace}/pods/{name}", {"metadata": {"finalizers": [KUBELET]}}
    )
    node = scenario.bound(name)
    run_pod(scenario, name, started)
    return node


def pod_or_none(scenario: Scenario, name: str) -> dict[str, Any] | None:
    pod: dict[str, Any] | None = scenario.admin.get_or_none(f"/api/v1/namespaces/{scenario.namespace}/pods/{name}")
    return pod


def kubelet_done(scenario: Scenario, name: str) -> None:
    """The kubelet's last word on a deleted pod: its containers stopped, the pod may go."""
    with contextlib.suppress(ApiError):
        scenario.admin.merge_patch(
            f"/api/v1/namespaces/{scenario.namespace}/pods/{name}", {"metadata": {"finalizers": None}}
        )


def terminating(scenario: Scenario, name: str) -> dict[str, Any] | None:
    """The pod while it is being deleted (a deletionTimestamp), else None."""
    pod = pod_or_none(scenario, name)
    return pod if pod is not None and pod["metadata"].get("deletionTimestamp") else None
