"""DRA extended resources, the pure part (extender.core.extended): which names count, which class
serves a name, and the claim's requests and the pod's request mappings as upstream's
``createRequestsAndMappings`` makes them (its test cases, in our words)."""

from __future__ import annotations

from typing import Any

from extender.core.extended import (
    EXTENDED_CLAIM_ANNOTATION,
    ExtendedClasses,
    claim_object,
    is_dra_extended_resource_name,
    pod_demand,
    requests_and_mappings,
    scalar_allocatable,
)
from extender.core.model import DeviceClass


def classes(*items: tuple[str, str | None, str]) -> ExtendedClasses:
    return ExtendedClasses(
        DeviceClass(name=name, extended_resource_name=resource, creation_timestamp=created)
        for name, resource, created in items
    )


def container(name: str, requests: dict[str, Any], *, sidecar: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "resources": {"requests": requests}}
    if sidecar:
        body["restartPolicy"] = "Always"
    return body


def pod(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
        "spec": {"initContainers": init or [], "containers": containers},
    }


def plan(
    body: dict[str, Any], mapping: ExtendedClasses
) -> tuple[list[tuple[str, str, int]], list[tuple[str, str, str]]]:
    demand = pod_demand(body, mapping)
    assert demand is not None
    requests, mappings = requests_and_mappings(demand, demand.all_served())
    return (
        [(r.name, r.exactly.device_class_name, r.exactly.count) for r in requests if r.exactly is not None],
        [(m.container_name, m.resource_name, m.request_name) for m in mappings],
    )


def test_which_names_are_dra_extended_resource_names() -> None:
    assert is_dra_extended_resource_name("example.com/gpu")
    assert is_dra_extended_resource_name("deviceclass.resource.kubernetes.io/gpu")
    for name in ("cpu", "memory", "kubernetes.io/foo", "node.kubernetes.io/x", "requests.example.com/gpu"):
        assert not is_dra_extended_resource_name(name), name
    assert scalar_allocatable({"cpu": "4", "example.com/gpu": "2", "vendor.io/x": "0"}) == {
        "example.com/gpu": 2,
        "vendor.io/x": 0,
    }


def test_every_class_has_its_implicit_name_and_the_newer_class_wins_an_explicit_one() -> None:
    mapping = classes(
        ("old", "example.com/gpu", "2026-01-01T00:00:00Z"),
        ("new", "example.com/gpu", "2026-02-01T00:00:00Z"),
        ("b", "example.com/nic", "2026-01-01T00:00:00Z"),
        ("a", "example.com/nic", "2026-01-01T00:00:00Z"),
    )
    assert mapping.get("example.com/gpu") == "new"
    assert mapping.get("example.com/nic") == "a"  # equal ages: the lower name
    assert mapping.get("deviceclass.resource.kubernetes.io/old") == "old"
    assert mapping.get("example.com/fpga") is None


def test_a_pod_without_a_mapped_resource_has_no_demand() -> None:
    mapping = classes(("gpu", "example.com/gpu", ""))
    assert pod_demand(pod([container("c", {"cpu": "1", "vendor.io/x": "1"})]), mapping) is None
    assert pod_demand(pod([container("c", {"example.com/gpu": "0"})]), mapping) is None


def test_request_names_count_every_request_name_of_the_container_sorted() -> None:
    mapping = classes(("gpu", "example.com/gpu", ""))
    body = pod(
        [container("a", {"cpu": "1", "example.com/gpu": "2", "memory": "1Gi"}), container("b", {"example.com/gpu": 1})]
    )
    requests, mappings = plan(body, mapping)
    assert requests == [("container-0-request-1", "gpu", 2), ("container-1-request-0", "gpu", 1)]
    assert mappings == [
        ("a", "example.com/gpu", "container-0-request-1"),
        ("b", "example.com/gpu", "container-1-request-0"),
    ]


def test_a_limit_stands_for_an_unset_request() -> None:
    mapping = classes(("gpu", None, ""))
    body = pod([{"name": "c", "resources": {"limits": {"deviceclass.resource.kubernetes.io/gpu": "3"}}}])
    assert plan(body, mapping)[0] == [("container-0-request-0", "gpu", 3)]


def test_init_containers_reuse_the_devices_of_containers_that_start_after_them() -> None:
    # upstream's case: init0 (1 R), sidecar1 (1 R), init2 (2 R), container3 (1 G)
    mapping = classes(("rc", "example.com/r", ""), ("gc", "example.com/g", ""))
    body = pod(
        [container("con3", {"example.com/g": "1"})],
        init=[
            container("init0", {"example.com/r": "1"}),
            container("side1", {"example.com/r": "1"}, sidecar=True),
            container("init2", {"example.com/r": "2"}),
        ],
    )
    requests, mappings = plan(body, mapping)
    assert requests == [
        ("container-1-request-0", "rc", 1),
        ("container-2-request-0", "rc", 2),
        ("container-3-request-0", "gc", 1),
    ]
    assert mappings == [
        ("con3", "example.com/g", "container-3-request-0"),
        ("side1", "example.com/r", "container-1-request-0"),
        ("init0", "example.com/r", "container-1-request-0"),
        ("init2", "example.com/r", "container-2-request-0"),
    ]


def test_only_the_largest_init_container_request_is_kept() -> None:
    mapping = classes(("rc", "example.com/r", ""))
    body = pod(
        [container("main", {"cpu": "1"})],
        init=[container("i0", {"example.com/r": "1"}), container("i1", {"example.com/r": "3"})],
    )
    requests, mappings = plan(body, mapping)
    assert requests == [("container-1-request-0", "rc", 3)]
    assert mappings == [
        ("i0", "example.com/r", "container-1-request-0"),
        ("i1", "example.com/r", "container-1-request-0"),
    ]


def test_requests_sort_as_strings() -> None:
    mapping = classes(("gpu", "example.com/gpu", ""))
    body = pod([container(f"c{i}", {"example.com/gpu": "1"}) for i in range(11)])
    names = [name for name, _, _ in plan(body, mapping)[0]]
    assert names[:3] == ["container-0-request-0", "container-1-request-0", "container-10-request-0"]


def test_a_node_advertising_a_resource_serves_it_and_one_lacking_an_unmapped_one_cannot_run_the_pod() -> None:
    mapping = classes(("gpu", "example.com/gpu", ""), ("nic", "example.com/nic", ""))
    demand = pod_demand(pod([container("c", {"example.com/gpu": "1", "example.com/nic": "1"})]), mapping)
    assert demand is not None and demand.unmapped_ok()
    assert demand.on_node({}) == ("example.com/gpu", "example.com/nic")
    assert demand.on_node({"example.com/gpu": 4}) == ("example.com/nic",)
    assert demand.on_node({"example.com/gpu": 0}) == ("example.com/gpu", "example.com/nic")  # 0: DRA's
    other = pod_demand(pod([container("c", {"example.com/gpu": "1", "vendor.io/x": "1"})]), mapping)
    assert other is not None and not other.unmapped_ok()
    assert other.on_node({}) is None
    assert other.on_node({"vendor.io/x": 1}) == ("example.com/gpu",)


def test_the_claim_object_is_what_the_in_tree_plugin_creates() -> None:
    mapping = classes(("gpu", "example.com/gpu", ""))
    body = pod([container("c", {"example.com/gpu": "2"})])
    demand = pod_demand(body, mapping)
    assert demand is not None
    requests, _ = requests_and_mappings(demand, demand.all_served())
    assert claim_object(body, requests) == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "generateName": "p-extended-resources-",
            "namespace": "ns",
            "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u-1", "controller": True}],
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "container-0-request-0",
                        "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 2},
                    }
                ]
            }
        },
    }
