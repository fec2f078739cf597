"""Encoding of allocation results and node selectors, ``decode_object`` dispatch, and Nodes.

Covers: the ``status.allocation`` JSON written for each served version (one shape for all, empty
optional fields omitted, ``adminAccess`` only when true, quantities in canonical form); round trips
raw -> decode -> encode; node selectors both ways; ``decode_object`` picking the decoder by kind and
rejecting other kinds; Node decoding. Claim and slice decoding details are in the sibling modules.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import yaml

from extender.core.convert import (
    decode_allocation_result,
    decode_node,
    decode_node_selector,
    decode_object,
    decode_resource_claim,
    encode_allocation_result,
    encode_node_selector,
)
from extender.core.errors import InvalidObject
from extender.core.model import (
    AllocationConfig,
    AllocationResult,
    DeviceClass,
    DeviceResult,
    DeviceToleration,
    NodeInfo,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    OpaqueConfig,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)
from extender.core.quantity import Quantity

ALL_API_VERSIONS = [f"resource.k8s.io/{v}" for v in ("v1", "v1beta2", "v1beta1", "v1alpha3")]

FULL_ALLOCATION_YAML = """
devices:
  results:
  - {request: req-0, driver: driver-a, pool: pool-1, device: device-1}
  - request: req-1/sub-0
    driver: driver-a
    pool: pool-1
    device: device-2
    adminAccess: true
    tolerations:
    - {key: maintenance, operator: Equal, value: "yes", effect: NoSchedule}
    - {operator: Exists, effect: NoExecute, tolerationSeconds: 60}
    bindingConditions: [attached]
    bindingFailureConditions: [attach-failed]
  - request: req-2
    driver: driver-b
    pool: pool-2
    device: nic-1
    shareID: 1b4e28ba-2fa1-11d2-883f-0016d3cca427
    consumedCapacity: {bandwidth: 1536Mi, slots: "1"}
  config:
  - source: FromClass
    requests: [req-0, req-1/sub-0]
    opaque: {driver: driver-a, parameters: {sharing: {strategy: TimeSlicing}}}
  - source: FromClaim
    opaque: {driver: driver-b, parameters: {mtu: 9000}}
nodeSelector:
  nodeSelectorTerms:
  - matchExpressions:
    - {key: region, operator: In, values: [region-1]}
    - {key: spare, operator: DoesNotExist}
    matchFields:
    - {key: metadata.name, operator: In, values: [node-1]}
allocationTimestamp: "2025-06-01T12:00:00Z"
"""


@pytest.mark.parametrize("api_version", ALL_API_VERSIONS)
def test_allocation_round_trips_in_every_version(api_version: str) -> None:
    raw = yaml.safe_load(FULL_ALLOCATION_YAML)
    encoded = encode_allocation_result(decode_allocation_result(raw), api_version)
    assert encoded == raw
    # Key order follows the Go structs, so the JSON reads like the apiserver's.
    assert list(encoded) == ["devices", "nodeSelector", "allocationTimestamp"]
    assert list(encoded["devices"]["results"][1]) == [
        "request",
        "driver",
        "pool",
        "device",
        "adminAccess",
        "tolerations",
        "bindingConditions",
        "bindingFailureConditions",
    ]
    assert orjson.loads(orjson.dumps(encoded)) == raw


def test_round_trip_through_a_claim_manifest() -> None:
    claim = decode_resource_claim(
        {
            "apiVersion": "resource.k8s.io/v1beta1",
            "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"devices": {"requests": [{"name": "req-0", "deviceClassName": "class-a"}]}},
            "status": {"allocation": yaml.safe_load(FULL_ALLOCATION_YAML)},
        }
    )
    assert claim.allocation is not None
    assert encode_allocation_result(claim.allocation, claim.api_version) == yaml.safe_load(FULL_ALLOCATION_YAML)


def test_minimal_result_omits_every_empty_field() -> None:
    result = AllocationResult(
        devices=(
            DeviceResult(
                request="req-0",
                driver="driver-a",
                pool="pool-1",
                device="device-1",
                admin_access=False,
                consumed_capacity={},
            ),
        ),
    )
    assert encode_allocation_result(result, "resource.k8s.io/v1") == {
        "devices": {"results": [{"request": "req-0", "driver": "driver-a", "pool": "pool-1", "device": "device-1"}]}
    }


def test_quantities_are_written_in_canonical_form() -> None:
    result = AllocationResult(
        devices=(
            DeviceResult(
                request="r",
                driver="d",
                pool="p",
                device="x",
                share_id="1b4e28ba-2fa1-11d2-883f-0016d3cca427",
                consumed_capacity={"memory": Quantity.parse("1.5Gi"), "cores": Quantity.from_int(2)},
            ),
        ),
    )
    encoded = encode_allocation_result(result, "resource.k8s.io/v1")
    assert encoded["devices"]["results"][0]["consumedCapacity"] == {"memory": "1536Mi", "cores": "2"}


def test_config_and_toleration_encoding() -> None:
    result = AllocationResult(
        devices=(
            DeviceResult(
                request="r",
                driver="d",
                pool="p",
                device="x",
                tolerations=(DeviceToleration(key="k"),),
            ),
        ),
        config=(
            AllocationConfig("FromClass", ("r",), OpaqueConfig("d", {"a": 1})),
            AllocationConfig("FromClaim", (), None),
        ),
    )
    encoded = encode_allocation_result(result, "resource.k8s.io/v1beta2")
    assert encoded["devices"]["results"][0]["tolerations"] == [{"key": "k", "operator": "Equal"}]
    assert encoded["devices"]["config"] == [
        {"source": "FromClass", "requests": ["r"], "opaque": {"driver": "d", "parameters": {"a": 1}}},
        {"source": "FromClaim"},
    ]


def test_unknown_api_version_is_refused() -> None:
    with pytest.raises(ValueError, match=r"unsupported apiVersion 'resource\.k8s\.io/v2'"):
        encode_allocation_result(AllocationResult(devices=()), "resource.k8s.io/v2")


# --- node selectors ----------------------------------------------------------------------------------


def test_node_selector_both_ways() -> None:
    selector = NodeSelector(
        (
            NodeSelectorTerm(match_fields=(NodeSelectorRequirement("metadata.name", "In", ("node-1",)),)),
            NodeSelectorTerm(
                match_expressions=(
                    NodeSelectorRequirement("gpu", "Exists"),
                    NodeSelectorRequirement("cores", "Gt", ("4",)),
                )
            ),
        )
    )
    encoded = encode_node_selector(selector)
    assert encoded == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]},
            {
                "matchExpressions": [
                    {"key": "gpu", "operator": "Exists"},
                    {"key": "cores", "operator": "Gt", "values": ["4"]},
                ]
            },
        ]
    }
    assert decode_node_selector(encoded) == selector


def test_decode_node_selector_names_the_path() -> None:
    with pytest.raises(InvalidObject) as caught:
        decode_node_selector({"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "values": "x"}]}]})
    assert str(caught.value) == "NodeSelector: nodeSelectorTerms[0].matchExpressions[0].values: must be a list"


# --- decode_object and Node ------------------------------------------------------------------------

OBJECTS_YAML = """
apiVersion: v1
kind: Node
metadata: {name: node-1, labels: {region: region-1}}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: class-a}
---
apiVersion: resource.k8s.io/v1beta2
kind: ResourceSlice
metadata: {name: slice-1}
spec:
  driver: driver-a
  pool: {name: pool-1, generation: 1, resourceSliceCount: 1}
  nodeName: node-1
  devices: [{name: device-1}]
---
apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaim
metadata: {name: claim-0, namespace: default}
spec: {devices: {requests: [{name: req-0, deviceClassName: class-a}]}}
---
apiVersion: resource.k8s.io/v1alpha3
kind: ResourceClaimTemplate
metadata: {name: template-0, namespace: default}
spec: {spec: {devices: {requests: [{name: req-0, deviceClassName: class-a}]}}}
"""


def test_decode_object_dispatches_on_kind() -> None:
    decoded = [decode_object(raw) for raw in yaml.safe_load_all(OBJECTS_YAML)]
    assert [type(obj) for obj in decoded] == [
        NodeInfo,
        DeviceClass,
        ResourceSlice,
        ResourceClaim,
        ResourceClaimTemplate,
    ]
    node = decoded[0]
    assert node == NodeInfo("node-1", {"region": "region-1"})


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}},
            "Pod p: kind: unsupported kind 'Pod'",
        ),
        (
            {"apiVersion": "resource.k8s.io/v1alpha3", "kind": "ResourcePoolStatusRequest", "metadata": {"name": "r"}},
            "unsupported kind 'ResourcePoolStatusRequest'",
        ),
        ({"metadata": {"name": "x"}}, "object x: kind: unsupported kind None"),
        (
            {"apiVersion": "example.com/v1", "kind": "ResourceClaim", "metadata": {"name": "c"}},
            "ResourceClaim c: apiVersion: unsupported apiVersion 'example.com/v1' for ResourceClaim",
        ),
        ({"kind": "DeviceClass", "metadata": {"name": "c"}}, "unsupported apiVersion None for DeviceClass"),
        (
            {"apiVersion": "resource.k8s.io/v1", "kind": "Node", "metadata": {"name": "n"}},
            "Node: apiVersion: unsupported apiVersion 'resource.k8s.io/v1' (expected v1)",
        ),
        (42, "object: must be a JSON object, not int"),
    ],
)
def test_decode_object_rejects_what_it_cannot_decode(raw: Any, message: str) -> None:
    with pytest.raises(InvalidObject) as caught:
        decode_object(raw)
    assert message in str(caught.value)


def test_node_without_labels_and_bad_labels() -> None:
    assert decode_node({"metadata": {"name": "n"}}) == NodeInfo("n", {})
    with pytest.raises(InvalidObject, match=r"^Node n: metadata.labels\[zone\]: must be a string$"):
        decode_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": {"zone": 1}}})
    with pytest.raises(InvalidObject, match=r"^Node: metadata.name: required$"):
        decode_node({"apiVersion": "v1", "kind": "Node", "metadata": {}})


def test_node_soft_taints_are_its_prefer_no_schedule_ones() -> None:
    taints = [
        {"key": "spot", "value": "yes", "effect": "PreferNoSchedule"},
        {"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
        {"key": "maintenance", "effect": "PreferNoSchedule"},
        {"key": "no-effect"},
    ]
    node = decode_node({"metadata": {"name": "n"}, "spec": {"taints": taints}})
    assert node.soft_taints == (("spot", "yes"), ("maintenance", ""))
    assert decode_node({"metadata": {"name": "n"}, "spec": {"unschedulable": True}}).soft_taints == ()


@pytest.mark.parametrize(
    ("spec", "soft"),
    [
        ({"taints": {"key": "x"}}, ()),
        ({"taints": ["x", {"key": 1, "effect": "NoSchedule"}]}, ()),
        ({"taints": [{"effect": "PreferNoSchedule"}]}, (("", ""),)),
        ({"taints": [{"key": "x", "value": 1, "effect": "PreferNoSchedule"}]}, (("x", "\x001"),)),
        ([], ()),
    ],
)
def test_malformed_node_taints_cost_the_node_nothing(spec: Any, soft: tuple[tuple[str, str], ...]) -> None:
    """Node matching needs the labels: a taint the API server would refuse does not refuse the
    node; a malformed PreferNoSchedule one is kept, as text no ordinary toleration names."""
    node = decode_node({"metadata": {"name": "n", "labels": {"zone": "a"}}, "spec": spec})
    assert node.labels == {"zone": "a"} and node.soft_taints == soft
