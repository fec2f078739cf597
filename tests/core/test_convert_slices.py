"""Decoding of ResourceSlice in every served version, and how malformed slices are reported.

Covers: ``basic`` devices (v1beta1/v1alpha3) and flat devices (v1/v1beta2) decoding alike; bare
capacity quantities versus ``{value, requestPolicy}``; ``nodeName``/``allNodes`` as plain values
(old) or pointers (new) with "empty means unset"; attribute kinds, interning, and version
attributes that are not strict semver (kept as ``UnparsedVersion`` for the CEL layer). A malformed
slice body never raises: it sets ``invalid_reason`` naming the field path and keeps what decoded.
Pool handling of invalid slices is the allocator's (tests/core/test_allocator_*).
"""

from __future__ import annotations

import copy
import sys
from typing import Any

import pytest
import yaml

from extender.core.convert import decode_resource_slice
from extender.core.errors import InvalidObject
from extender.core.model import (
    CapacityRequestPolicy,
    CounterConsumption,
    CounterSet,
    DeviceCapacity,
    DeviceTaint,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PoolRef,
    UnparsedVersion,
)
from extender.core.quantity import Quantity
from extender.core.semver import Semver

ALL_VERSIONS = ["v1", "v1beta2", "v1beta1", "v1alpha3"]
FLAT_VERSIONS = ["v1beta1", "v1alpha3"]

Q = Quantity.parse


def device(version: str, name: str, **fields: Any) -> dict[str, Any]:
    """A device in the version's shape: v1beta1/v1alpha3 wrap the fields in ``basic``."""
    if version in FLAT_VERSIONS:
        return {"name": name, "basic": fields} if fields else {"name": name}
    return {"name": name, **fields}


def capacity(version: str, value: str) -> Any:
    """v1alpha3 writes a bare quantity, later versions ``{value: ...}``."""
    return value if version == "v1alpha3" else {"value": value}


def slice_manifest(version: str, devices: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "driver": "driver-a",
        "pool": {"name": "pool-1", "generation": 1, "resourceSliceCount": 1},
        "nodeName": "node-1",
        **spec,
    }
    if devices is not None:
        body["devices"] = devices
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceSlice",
        "metadata": {"name": "slice-1", "uid": "uid-1", "resourceVersion": "9"},
        "spec": body,
    }


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_devices_decode_the_same_in_every_version(version: str) -> None:
    raw = slice_manifest(
        version,
        [
            device(
                version,
                "device-1",
                attributes={
                    "model": {"string": "a100"},
                    "index": {"int": 0},
                    "healthy": {"bool": True},
                    "driver-a/driverVersion": {"version": "1.2.3-rc.1+build.5"},
                },
                capacity={"memory": capacity(version, "40Gi")},
            ),
            device(version, "device-2"),
        ],
    )
    decoded = decode_resource_slice(raw)
    assert decoded.invalid_reason is None
    assert (decoded.name, decoded.driver, decoded.pool) == ("slice-1", "driver-a", PoolRef("pool-1", 1, 1))
    assert (decoded.uid, decoded.resource_version) == ("uid-1", "9")
    assert (decoded.node_name, decoded.node_selector, decoded.all_nodes) == ("node-1", None, False)
    first, second = decoded.devices
    assert first.name == "device-1"
    assert first.attributes == {
        "model": "a100",
        "index": 0,
        "healthy": True,
        "driver-a/driverVersion": Semver.parse("1.2.3-rc.1+build.5"),
    }
    assert type(first.attributes["healthy"]) is bool
    assert type(first.attributes["index"]) is int
    assert first.capacity == {"memory": DeviceCapacity(Q("40Gi"))}
    assert (second.name, dict(second.attributes), dict(second.capacity)) == ("device-2", {}, {})


def test_names_repeating_across_devices_are_interned() -> None:
    raw = slice_manifest("v1", [device("v1", "device-1", attributes={"model": {"string": "a"}})])
    # Build the strings at run time so that they are not the compiler's constants.
    raw["spec"]["driver"] = "".join(["driver", "-a"])
    first = decode_resource_slice(raw)
    second = decode_resource_slice(copy.deepcopy(raw))
    assert first.driver is sys.intern("driver-a")
    assert first.pool.name is second.pool.name
    (name_1,) = first.devices[0].attributes
    (name_2,) = second.devices[0].attributes
    assert name_1 is name_2


def test_unparsable_version_is_kept_for_the_cel_layer() -> None:
    """Upstream keeps such a device and fails every CEL evaluation on it with
    ``attribute <name>: parse semantic version: ...`` (docs/semantics.md §14.1): the slice stays valid."""
    raw = slice_manifest("v1", [device("v1", "device-1", attributes={"fw": {"version": "1.0"}})])
    decoded = decode_resource_slice(raw)
    assert decoded.invalid_reason is None
    value = decoded.devices[0].attributes["fw"]
    assert isinstance(value, UnparsedVersion)
    assert value.text == "1.0"
    assert value.error  # the parser's message, for the CEL error text


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_empty_node_name_and_false_all_nodes_mean_unset(version: str) -> None:
    raw = slice_manifest(
        version,
        [],
        nodeName="",
        allNodes=False,
        nodeSelector={
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "region", "operator": "In", "values": ["r1"]}]}]
        },
    )
    decoded = decode_resource_slice(raw)
    assert decoded.invalid_reason is None
    assert decoded.node_name is None
    assert decoded.all_nodes is False
    assert decoded.node_selector == NodeSelector(
        (NodeSelectorTerm(match_expressions=(NodeSelectorRequirement("region", "In", ("r1",)),)),)
    )


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_all_nodes(version: str) -> None:
    raw = slice_manifest(version, [], allNodes=True)
    del raw["spec"]["nodeName"]
    decoded = decode_resource_slice(raw)
    assert (decoded.node_name, decoded.all_nodes, decoded.invalid_reason) == (None, True, None)


def test_no_node_selection_at_all_is_not_invalid() -> None:
    """Pool gathering silently ignores such a slice (docs/semantics.md §4 step 5); decoding must not flag it."""
    raw = slice_manifest("v1", [])
    del raw["spec"]["nodeName"]
    assert decode_resource_slice(raw).invalid_reason is None


@pytest.mark.parametrize("version", ["v1", "v1beta2", "v1beta1"])
def test_partitionable_and_shareable_device_fields(version: str) -> None:
    per_device_selector = {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-2"]}]}]
    }
    raw = slice_manifest(
        version,
        [
            device(
                version,
                "device-1",
                nodeName="node-1",
                consumesCounters=[{"counterSet": "set-1", "counters": {"memory": {"value": "4Gi"}}}],
                taints=[
                    {
                        "key": "broken",
                        "value": "yes",
                        "effect": "NoSchedule",
                        "timeAdded": "2025-01-01T00:00:00Z",
                    }
                ],
                bindsToNode=True,
                bindingConditions=["ready"],
                bindingFailureConditions=["failed"],
            ),
            device(version, "device-2", nodeSelector=per_device_selector),
            device(
                version,
                "device-3",
                allNodes=True,
                allowMultipleAllocations=True,
                capacity={
                    "bandwidth": {
                        "value": "10G",
                        "requestPolicy": {
                            "default": "1G",
                            "validRange": {"min": "1G", "max": "5G", "step": "1G"},
                        },
                    },
                    "slots": {"value": "4", "requestPolicy": {"validValues": ["1", "2", "4"]}},
                },
            ),
        ],
        perDeviceNodeSelection=True,
    )
    del raw["spec"]["nodeName"]
    decoded = decode_resource_slice(raw)
    assert decoded.invalid_reason is None
    assert decoded.per_device_node_selection is True
    first, second, third = decoded.devices
    assert first.node_name == "node-1"
    assert first.consumes_counters == (CounterConsumption("set-1", {"memory": Q("4Gi")}),)
    assert first.taints == (
        DeviceTaint(key="broken", value="yes", effect="NoSchedule", time_added="2025-01-01T00:00:00Z"),
    )
    assert (first.binds_to_node, first.binding_conditions, first.binding_failure_conditions) == (
        True,
        ("ready",),
        ("failed",),
    )
    assert second.node_selector is not None and len(second.node_selector.terms) == 1
    assert third.all_nodes and third.allow_multiple_allocations
    assert third.capacity["bandwidth"] == DeviceCapacity(
        Q("10G"),
        CapacityRequestPolicy(default=Q("1G"), range_min=Q("1G"), range_max=Q("5G"), range_step=Q("1G")),
    )
    assert third.capacity["slots"].request_policy == CapacityRequestPolicy(valid_values=(Q("1"), Q("2"), Q("4")))


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_shared_counters(version: str) -> None:
    raw = slice_manifest(version, None, sharedCounters=[{"name": "set-1", "counters": {"memory": {"value": "8Gi"}}}])
    decoded = decode_resource_slice(raw)
    assert decoded.invalid_reason is None
    assert decoded.shared_counters == (CounterSet("set-1", {"memory": Q("8Gi")}),)
    assert decoded.devices == ()


def test_quantities_may_be_plain_numbers() -> None:
    raw = slice_manifest("v1", [device("v1", "d", capacity={"cores": {"value": 8}, "ratio": 2})])
    decoded = decode_resource_slice(raw)
    assert decoded.invalid_reason is None
    assert decoded.devices[0].capacity == {"cores": DeviceCapacity(Q("8")), "ratio": DeviceCapacity(Q("2"))}


def test_explicit_nulls_in_attribute_values_are_tolerated() -> None:
    raw = slice_manifest("v1", [device("v1", "d", attributes={"a": {"int": None, "string": "x"}})])
    decoded = decode_resource_slice(raw)
    assert decoded.invalid_reason is None
    assert decoded.devices[0].attributes == {"a": "x"}


# --- invalid slices: a reason, never an exception -------------------------------------------------

TAINT = {"key": "k", "effect": "NoSchedule"}


def _set(path: list[str | int], value: Any) -> Any:
    def mutate(raw: dict[str, Any]) -> None:
        target: Any = raw
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


def _delete(path: list[str | int]) -> Any:
    def mutate(raw: dict[str, Any]) -> None:
        target: Any = raw
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return mutate


INVALID_CASES = [
    pytest.param(
        _set(["spec", "pool", "resourceSliceCount"], 0),
        "spec.pool.resourceSliceCount: must be greater than zero",
        2,
        id="slice-count-zero",
    ),
    pytest.param(
        _delete(["spec", "pool", "resourceSliceCount"]),
        "spec.pool.resourceSliceCount: must be greater than zero",
        2,
        id="slice-count-missing",
    ),
    pytest.param(
        _set(["spec", "pool", "generation"], -1),
        "spec.pool.generation: must be greater than or equal to zero",
        2,
        id="negative-generation",
    ),
    pytest.param(_set(["spec", "pool", "name"], ""), "spec.pool.name: required", 2, id="pool-name-empty"),
    pytest.param(_delete(["spec", "pool"]), "spec.pool: required", 2, id="pool-missing"),
    pytest.param(_set(["spec", "driver"], ""), "spec.driver: required", 2, id="driver-empty"),
    pytest.param(_delete(["spec"]), "spec: required", 0, id="spec-missing"),
    pytest.param(
        _set(["spec", "allNodes"], True),
        "spec: at most one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection may be set",
        2,
        id="node-name-and-all-nodes",
    ),
    pytest.param(
        _set(["spec", "perDeviceNodeSelection"], True),
        "spec: at most one of nodeName",
        2,  # devices without their own node fields are kept: their problem is node selection only
        id="node-name-and-per-device",
    ),
    pytest.param(
        _set(["spec", "nodeSelector"], {"nodeSelectorTerms": [{}, {}]}),
        "spec.nodeSelector.nodeSelectorTerms: must have exactly one node selector term",
        2,
        id="two-selector-terms",
    ),
    pytest.param(
        _set(["spec", "devices", 1, "name"], "device-1"),
        "spec.devices[1].name: duplicate device name 'device-1'",
        2,
        id="duplicate-device-name",
    ),
    pytest.param(
        _set(["spec", "devices", 1, "capacity"], {"memory": {"value": "lots"}}),
        "spec.devices[1].capacity[memory].value: invalid quantity 'lots'",
        1,
        id="bad-quantity",
    ),
    pytest.param(
        _set(["spec", "devices", 0, "attributes"], {"a": {"int": 1, "string": "x"}}),
        "spec.devices[0].attributes[a]: exactly one of int, bool, string, version, ints, bools, strings, versions"
        " is required",
        1,
        id="two-attribute-kinds",
    ),
    pytest.param(
        _set(["spec", "devices", 0, "attributes"], {"a": {"int": "1"}}),
        "spec.devices[0].attributes[a].int: must be an integer",
        1,
        id="attribute-wrong-type",
    ),
    pytest.param(
        _set(["spec", "devices", 0, "attributes"], {"a": {"int": 2**63}}),
        "spec.devices[0].attributes[a].int: must fit in a 64-bit signed integer",
        1,
        id="attribute-int-out-of-range",
    ),
    pytest.param(
        _set(["spec", "devices", 0, "attributes"], {"a": {"float": 1.5}}),
        "spec.devices[0].attributes[a]: exactly one of int, bool, string, version, ints, bools, strings, versions"
        " is required",
        1,
        id="unknown-attribute-kind",
    ),
    pytest.param(
        _set(["spec", "devices", 0, "nodeName"], "node-1"),
        "spec.devices[0]: nodeName, nodeSelector and allNodes may only be set with perDeviceNodeSelection",
        2,
        id="device-node-without-per-device",
    ),
    pytest.param(
        _set(["spec", "devices", 0, "capacity"], {"m": {"value": "1", "requestPolicy": {"default": "1"}}}),
        "spec.devices[0].capacity[m].requestPolicy: may only be set when allowMultipleAllocations is true",
        1,
        id="policy-without-multi",
    ),
    pytest.param(
        _set(["spec", "devices", 0, "taints"], [TAINT] * 17),
        "spec.devices[0].taints: must have at most 16 items",
        1,
        id="too-many-taints",
    ),
    pytest.param(_set(["spec", "devices", 0, "name"], ""), "spec.devices[0].name: required", 1, id="device-name-empty"),
    pytest.param(
        _set(["spec", "devices", 0], "device-1"),
        "spec.devices[0]: must be an object",
        1,
        id="device-not-an-object",
    ),
    pytest.param(_set(["spec", "devices"], {"a": 1}), "spec.devices: must be a list", 0, id="devices-not-a-list"),
    pytest.param(
        _set(["spec", "devices", 0, "consumesCounters"], [{"counters": {}}]),
        "spec.devices[0].consumesCounters[0].counterSet: required",
        1,
        id="consumption-without-set",
    ),
    pytest.param(
        _set(["metadata", "resourceVersion"], 5),
        "metadata.resourceVersion: must be a string",
        2,
        id="resource-version-not-a-string",
    ),
]


@pytest.mark.parametrize(("mutate", "reason", "kept_devices"), INVALID_CASES)
def test_invalid_slices_get_a_reason_not_an_exception(mutate: Any, reason: str, kept_devices: int) -> None:
    raw = slice_manifest("v1", [device("v1", "device-1"), device("v1", "device-2")])
    mutate(raw)
    decoded = decode_resource_slice(raw)
    assert decoded.invalid_reason is not None
    assert decoded.invalid_reason.startswith(reason)
    assert len(decoded.devices) == kept_devices
    assert decoded.name == "slice-1"


@pytest.mark.parametrize("version", FLAT_VERSIONS)
def test_invalid_reason_paths_use_the_basic_wrapper_in_old_versions(version: str) -> None:
    raw = slice_manifest(version, [device(version, "device-1", attributes={"a": {"int": "x"}})])
    assert decode_resource_slice(raw).invalid_reason == "spec.devices[0].basic.attributes[a].int: must be an integer"


@pytest.mark.parametrize(
    ("taints", "count", "limit"),
    [(False, 129, 128), (True, 65, 64)],
    ids=["plain-devices", "with-taints"],
)
def test_device_count_limits(taints: bool, count: int, limit: int) -> None:
    devices = [device("v1", f"device-{i}") for i in range(count)]
    if taints:
        devices[-1]["taints"] = [TAINT]
    decoded = decode_resource_slice(slice_manifest("v1", devices))
    assert decoded.invalid_reason is not None
    assert decoded.invalid_reason.startswith(f"spec.devices: must have at most {limit} items")
    assert len(decoded.devices) == count
    # One below the limit is fine.
    assert decode_resource_slice(slice_manifest("v1", devices[1:])).invalid_reason is None


def test_per_device_selection_requires_one_node_field_per_device() -> None:
    raw = slice_manifest("v1", [device("v1", "d1", nodeName="n"), device("v1", "d2")], perDeviceNodeSelection=True)
    del raw["spec"]["nodeName"]
    decoded = decode_resource_slice(raw)
    assert decoded.invalid_reason == (
        "spec.devices[1]: exactly one of nodeName, nodeSelector, allNodes is required with perDeviceNodeSelection"
    )
    # Kept, so that pool gathering sees the slice on d1's node and reports the pool invalid there.
    assert [d.name for d in decoded.devices] == ["d1", "d2"]


def test_selector_with_two_terms_is_kept_so_its_nodes_see_the_invalid_pool() -> None:
    two_terms = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "region", "operator": "In", "values": ["r1"]}]},
            {"matchExpressions": [{"key": "region", "operator": "In", "values": ["r2"]}]},
        ]
    }
    raw = slice_manifest("v1", [device("v1", "d1")], nodeSelector=two_terms)
    del raw["spec"]["nodeName"]
    decoded = decode_resource_slice(raw)
    assert decoded.invalid_reason == "spec.nodeSelector.nodeSelectorTerms: must have exactly one node selector term"
    assert decoded.node_selector is not None
    assert len(decoded.node_selector.terms) == 2

    per_device = slice_manifest("v1", [device("v1", "d1", nodeSelector=two_terms)], perDeviceNodeSelection=True)
    del per_device["spec"]["nodeName"]
    decoded = decode_resource_slice(per_device)
    assert decoded.invalid_reason == (
        "spec.devices[0].nodeSelector.nodeSelectorTerms: must have exactly one node selector term"
    )
    assert decoded.devices[0].node_selector is not None


def test_devices_beside_shared_counters_are_left_to_pool_gathering() -> None:
    """1.35 validation forbids it, but pool gathering still reads the 1.34 per-slice layout."""
    raw = slice_manifest("v1", [device("v1", "d1")], sharedCounters=[{"name": "s", "counters": {}}])
    decoded = decode_resource_slice(raw)
    assert decoded.invalid_reason is None
    assert len(decoded.devices) == 1
    assert len(decoded.shared_counters) == 1


def test_malformed_selector_operators_are_left_for_node_matching() -> None:
    """Upstream fails node selection fatally for a bad operator (docs/semantics.md §4); decoding keeps it."""
    raw = slice_manifest(
        "v1",
        [],
        nodeSelector={"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Near"}]}]},
    )
    del raw["spec"]["nodeName"]
    decoded = decode_resource_slice(raw)
    assert decoded.invalid_reason is None
    assert decoded.node_selector is not None
    assert decoded.node_selector.terms[0].match_expressions[0].operator == "Near"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("slice", "ResourceSlice: must be a JSON object, not str"),
        (
            {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {}},
            "ResourceSlice: metadata.name: required",
        ),
        (
            {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice"},
            "ResourceSlice: metadata.name: required",
        ),
        (
            {"apiVersion": "resource.k8s.io/v9", "kind": "ResourceSlice", "metadata": {"name": "s"}},
            "unsupported apiVersion",
        ),
    ],
)
def test_only_unidentifiable_slices_raise(raw: object, message: str) -> None:
    with pytest.raises(InvalidObject) as caught:
        decode_resource_slice(raw)
    assert message in str(caught.value)


def test_decoding_does_not_modify_the_raw_object() -> None:
    raw = yaml.safe_load(
        """
        apiVersion: resource.k8s.io/v1beta1
        kind: ResourceSlice
        metadata: {name: s}
        spec:
          driver: d
          pool: {name: p, generation: 0, resourceSliceCount: 1}
          nodeName: n
          devices:
          - name: d1
            basic:
              attributes: {a: {version: "1.0.0"}}
              capacity: {m: {value: 1Gi}}
        """
    )
    before = copy.deepcopy(raw)
    decode_resource_slice(raw)
    assert raw == before


def test_many_slices_decode() -> None:
    """The ingest shape of the benchmark (5000 slices x 10 devices is measured in bench/)."""
    raws = [
        slice_manifest(
            "v1",
            [
                device(
                    "v1",
                    f"gpu-{j}",
                    attributes={"index": {"int": j}, "model": {"string": "a100"}},
                    capacity={"memory": {"value": "40Gi"}},
                )
                for j in range(10)
            ],
        )
        for _ in range(200)
    ]
    decoded = [decode_resource_slice(raw) for raw in raws]
    assert all(s.invalid_reason is None for s in decoded)
    # Identical capacity values are shared objects: the decoder caches them by text.
    assert decoded[0].devices[0].capacity["memory"] is decoded[-1].devices[-1].capacity["memory"]
