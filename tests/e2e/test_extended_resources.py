"""DRA extended resources (KEP-5004) on the real control plane, held to the in-tree plugin: pods
asking for ``<domain>/gpu: 2`` (a DeviceClass's ``extendedResourceName``) and for the implicit
``deviceclass.resource.kubernetes.io/<class>: 1`` are bound by the extender with the claim the
in-tree plugin creates (name, annotation, owner, finalizer, requests, allocation, reservation) and
the pod's ``status.extendedResourceClaimStatus``; a pod asking for more than any node has stays
pending on both sides and is never bound without its devices."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tests.e2e.harness import V1, Scenario
from tests.e2e.test_claims import compare, settled

ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


def resource_name(s: Scenario) -> str:
    return f"{s.prefix}.example.com/gpu"


def mapped_class(s: Scenario) -> str:
    name = f"{s.prefix}-gpu"
    s.create(
        {
            "apiVersion": V1,
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {
                "selectors": [{"cel": {"expression": f'device.driver == "{s.driver}"'}}],
                "extendedResourceName": resource_name(s),
            },
        }
    )
    return name


def pod_asking(s: Scenario, name: str, scheduler: str, requests: dict[str, str]) -> None:
    s.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": s.namespace},
            "spec": {
                "schedulerName": scheduler,
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": "10m", **requests}, "limits": requests},
                    }
                ],
            },
        }
    )


def extended_shape(s: Scenario, scheduler: str) -> Sequence[str]:
    (node,) = s.nodes(1)
    gpu = mapped_class(s)
    s.gpus(node, 4)
    pod_asking(s, "p1", scheduler, {resource_name(s): "2"})
    settled(s, ["p1"])
    pod_asking(s, "p2", scheduler, {f"deviceclass.resource.kubernetes.io/{gpu}": "1"})
    settled(s, ["p2"])
    pod_asking(s, "p3", scheduler, {resource_name(s): "2"})  # one GPU left
    settled(s, [], ["p3"])
    return ["p1", "p2", "p3"]


def test_extended_resource_pods_are_bound_with_the_claim_the_in_tree_plugin_creates(
    scenario: Scenario, reference: Scenario
) -> None:
    ours, theirs = compare(scenario, reference, extended_shape)
    assert ours == theirs
    claims: dict[str, Any] = ours["claims"]
    pods: dict[str, Any] = ours["pods"]
    assert sorted(claims) == ["p1-extended-resources-<generated>", "p2-extended-resources-<generated>"]
    first = claims["p1-extended-resources-<generated>"]
    assert first["annotations"] == {ANNOTATION: "true"}
    assert first["finalizers"] == ["resource.kubernetes.io/delete-protection"]
    assert first["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "p1", "uid": "<uid of pod p1>", "controller": True}
    ]
    results = first["status"]["allocation"]["devices"]["results"]
    assert [(r["request"], r["device"]) for r in results] == [
        ("container-0-request-1", "gpu-0"),
        ("container-0-request-1", "gpu-1"),
    ]
    assert pods["p1"]["extendedResourceClaimStatus"] == {
        "resourceClaimName": "p1-extended-resources-<generated>",
        "requestMappings": [
            {
                "containerName": "main",
                "resourceName": "<prefix>.example.com/gpu",
                "requestName": "container-0-request-1",
            }
        ],
    }
    assert pods["p3"]["nodeName"] is None and pods["p3"]["extendedResourceClaimStatus"] is None
