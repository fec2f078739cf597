"""Conversion of raw ResourceSlices and DeviceClasses of every served version to resource.k8s.io/v1
JSON (``extender.core.convert._to_v1_slices``).

Covers: representative slices (``basic`` devices with every device field, per-device node selection,
consumable capacity, partitionable counters; a slice of shared counters) and a representative class
written in each version give one expected v1 document each; what v1alpha3's ``suitableNodes`` loses;
the edge cases the module docstring names; the envelope errors; and, as a property over generated
slices, that the converted document decodes to the same model as the original, is exactly the slice
written in v1, and that the input is never changed.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.core.convert import (
    V1,
    decode_device_class,
    decode_resource_slice,
    device_class_to_v1,
    resource_slice_to_v1,
)
from extender.core.errors import InvalidObject
from extender.core.model import ResourceSlice

ALL_VERSIONS = ["v1", "v1beta2", "v1beta1", "v1alpha3"]
FLAT_VERSIONS = ["v1beta1", "v1alpha3"]

PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def load(text: str) -> dict[str, Any]:
    loaded = yaml.safe_load(text)
    assert isinstance(loaded, dict)
    return loaded


def fields_of(decoded: ResourceSlice) -> dict[str, Any]:
    """A decoded slice as plain values: slices and devices compare by identity (model.py)."""
    return dataclasses.asdict(decoded)


# --- representative slices, in every version -------------------------------------------------------

SLICE_META = """
metadata:
  name: node-1-gpus
  uid: uid-1
  resourceVersion: "9"
  labels: {driver: gpu}
  ownerReferences: [{apiVersion: v1, kind: Node, name: node-1, uid: node-uid}]
"""

# The v1 devices; v1beta1/v1alpha3 wrap all but the name in ``basic`` (``flat_devices``).
V1_DEVICES: list[dict[str, Any]] = [
    {
        "name": "gpu-0",
        "attributes": {
            "model": {"string": "a100"},
            "index": {"int": 0},
            "healthy": {"bool": True},
            "gpu.example.com/driverVersion": {"version": "1.2.3"},
        },
        "capacity": {"memory": {"value": "40Gi"}, "cores": {"value": 108}},
        "consumesCounters": [{"counterSet": "gpu-0-set", "counters": {"memory": {"value": "40Gi"}}}],
        "nodeName": "node-1",
        "taints": [{"key": "broken", "value": "yes", "effect": "NoSchedule", "timeAdded": "2025-01-01T00:00:00Z"}],
    },
    {
        "name": "gpu-1",
        "attributes": {"model": {"string": "t4"}},
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-2"]}]}]
        },
        "bindsToNode": True,
        "bindingConditions": ["attached"],
        "bindingFailureConditions": ["failed"],
    },
    {
        "name": "nic-0",
        "capacity": {
            "bandwidth": {
                "value": "10G",
                "requestPolicy": {"default": "1G", "validRange": {"min": "1G", "max": "5G", "step": "1G"}},
            }
        },
        "allNodes": True,
        "allowMultipleAllocations": True,
    },
]


def flat_devices(version: str) -> list[dict[str, Any]]:
    devices = []
    for device in copy.deepcopy(V1_DEVICES):
        name = device.pop("name")
        if version == "v1alpha3":
            # bare quantities; the one with a request policy (never in v1alpha3) keeps its object
            for key, value in device.get("capacity", {}).items():
                if "requestPolicy" not in value:
                    device["capacity"][key] = value["value"]
        devices.append({"name": name, "basic": device})
    return devices


def representative(version: str) -> dict[str, Any]:
    """A slice of per-device node selection (no slice-level nodeName/allNodes)."""
    raw = load(f"apiVersion: resource.k8s.io/{version}\nkind: ResourceSlice\n{SLICE_META}")
    spec: dict[str, Any] = {
        "driver": "gpu.example.com",
        "pool": {"name": "node-1", "generation": 3, "resourceSliceCount": 2},
    }
    if version in FLAT_VERSIONS:
        spec.update(nodeName="", allNodes=False)  # the plain zero values an old client writes
        spec["devices"] = flat_devices(version)
    else:
        spec["devices"] = copy.deepcopy(V1_DEVICES)
    spec["perDeviceNodeSelection"] = True
    raw["spec"] = spec
    return raw


def counters_slice(version: str) -> dict[str, Any]:
    """The pool's other slice: its shared counters, on node-1."""
    raw = load(f"apiVersion: resource.k8s.io/{version}\nkind: ResourceSlice\n{SLICE_META}")
    raw["metadata"]["name"] = "node-1-counters"
    spec: dict[str, Any] = {
        "driver": "gpu.example.com",
        "pool": {"name": "node-1", "generation": 3, "resourceSliceCount": 2},
        "nodeName": "node-1",
    }
    if version in FLAT_VERSIONS:
        spec["allNodes"] = False
    spec["sharedCounters"] = [{"name": "gpu-0-set", "counters": {"memory": {"value": "40Gi"}}}]
    raw["spec"] = spec
    return raw


SLICES = {"per-device": representative, "counters": counters_slice}


@pytest.mark.parametrize("version", ALL_VERSIONS)
@pytest.mark.parametrize("shape", sorted(SLICES))
def test_representative_slice_converts_to_the_v1_document(version: str, shape: str) -> None:
    raw = SLICES[shape](version)
    before = copy.deepcopy(raw)
    converted = resource_slice_to_v1(raw)
    assert converted == SLICES[shape]("v1")
    assert list(converted)[:2] == ["apiVersion", "kind"]
    assert raw == before  # the input is not changed


@pytest.mark.parametrize("version", ALL_VERSIONS)
@pytest.mark.parametrize("shape", sorted(SLICES))
def test_representative_slice_decodes_the_same_after_conversion(version: str, shape: str) -> None:
    raw = SLICES[shape](version)
    original = decode_resource_slice(raw)
    assert original.invalid_reason is None
    assert fields_of(decode_resource_slice(resource_slice_to_v1(raw))) == fields_of(original)


def test_flat_devices_take_v1s_field_order() -> None:
    raw = representative("v1beta1")
    raw["spec"]["devices"][0]["basic"] = dict(reversed(list(raw["spec"]["devices"][0]["basic"].items())))
    [first, *_] = resource_slice_to_v1(raw)["spec"]["devices"]
    assert list(first) == list(V1_DEVICES[0])


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_the_slice_output_shares_nothing_with_the_input(version: str) -> None:
    raw = representative(version)
    converted = resource_slice_to_v1(raw)
    converted["metadata"]["labels"]["driver"] = "x"
    converted["spec"]["devices"][0]["attributes"]["model"]["string"] = "h100"
    converted["spec"]["devices"][0]["consumesCounters"][0]["counters"].clear()
    converted["spec"]["devices"][1]["nodeSelector"]["nodeSelectorTerms"].clear()
    converted["spec"]["pool"]["generation"] = 4
    assert raw == representative(version)


def test_a_v1_slice_is_a_deep_copy_unchanged() -> None:
    raw = representative("v1")
    raw["spec"]["devices"][0]["futureField"] = {"kept": True}
    raw["spec"]["nodeName"] = ""  # v1 is not rewritten: what it says is what it meant
    converted = resource_slice_to_v1(raw)
    assert converted == raw and converted is not raw
    assert converted["spec"] is not raw["spec"] and converted["spec"]["devices"][0] is not raw["spec"]["devices"][0]


# --- slices: the edge cases -------------------------------------------------------------------------


def flat_slice(version: str, *devices: Any, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceSlice",
        "metadata": {"name": "s"},
        "spec": {
            "driver": "d",
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
            **spec,
            "devices": list(devices),
        },
    }


@pytest.mark.parametrize("version", FLAT_VERSIONS)
@pytest.mark.parametrize(
    ("node_fields", "expected"),
    [
        ({"nodeName": "", "allNodes": False}, {}),
        ({"nodeName": None, "allNodes": None}, {}),
        ({"nodeName": "node-1", "allNodes": False}, {"nodeName": "node-1"}),
        ({"nodeName": "", "allNodes": True}, {"allNodes": True}),
        # not a zero value (0 == False in Python): kept, for the decoders to report
        ({"allNodes": 0}, {"allNodes": 0}),
        ({"nodeSelector": {"nodeSelectorTerms": []}}, {"nodeSelector": {"nodeSelectorTerms": []}}),
    ],
)
def test_plain_node_fields_become_pointers(version: str, node_fields: dict[str, Any], expected: dict[str, Any]) -> None:
    spec = resource_slice_to_v1(flat_slice(version, **node_fields))["spec"]
    assert {key: spec[key] for key in ("nodeName", "nodeSelector", "allNodes") if key in spec} == expected


@pytest.mark.parametrize("version", ["v1", "v1beta2"])
def test_pointer_versions_keep_their_node_fields(version: str) -> None:
    raw = flat_slice(version, nodeName="node-1", allNodes=False)
    assert resource_slice_to_v1(raw)["spec"] == raw["spec"]


@pytest.mark.parametrize("version", FLAT_VERSIONS)
@pytest.mark.parametrize(
    ("device", "expected"),
    [
        # no basic: the name only, as the decoders read it
        ({"name": "d"}, {"name": "d"}),
        ({"name": "d", "basic": None}, {"name": "d"}),
        # bare quantities, strings or numbers, become {value}; objects stay
        (
            {"name": "d", "basic": {"capacity": {"a": "1Gi", "b": 4, "c": {"value": "2"}}}},
            {"name": "d", "capacity": {"a": {"value": "1Gi"}, "b": {"value": 4}, "c": {"value": "2"}}},
        ),
        # a field unknown to us inside basic is a device field of a later version: flattened too
        ({"name": "d", "basic": {"futureField": 1}}, {"name": "d", "futureField": 1}),
        # beside basic: a field v1 gives a meaning to is dropped, another unknown one kept
        (
            {"name": "d", "attributes": {"x": {"int": 1}}, "unknown": 1, "basic": {}},
            {"name": "d", "unknown": 1},
        ),
        # basic never renames the device
        ({"name": "d", "basic": {"name": "e"}}, {"name": "d"}),
        # malformed: copied as it is
        ("not-a-device", "not-a-device"),
        ({"name": "d", "basic": "nope"}, {"name": "d", "basic": "nope"}),
        (
            {"name": "d", "basic": {"capacity": {"a": None, "b": True}}},
            {"name": "d", "capacity": {"a": None, "b": True}},
        ),
    ],
)
def test_flat_device_edge_cases(version: str, device: Any, expected: Any) -> None:
    [converted] = resource_slice_to_v1(flat_slice(version, device))["spec"]["devices"]
    assert converted == expected


@pytest.mark.parametrize("version", FLAT_VERSIONS)
def test_edge_case_devices_decode_the_same(version: str) -> None:
    raw = flat_slice(
        version,
        {"name": "a"},
        {"name": "b", "basic": {"capacity": {"x": "1Gi", "y": 4}}},
        {"name": "c", "attributes": {"x": {"int": 1}}, "basic": {"attributes": {"y": {"int": 2}}}},
        nodeName="node-1",
        allNodes=False,
    )
    original = decode_resource_slice(raw)
    assert original.invalid_reason is None
    assert fields_of(decode_resource_slice(resource_slice_to_v1(raw))) == fields_of(original)


def test_malformed_slice_parts_are_copied_not_rejected() -> None:
    raw = flat_slice("v1beta1")
    raw["spec"]["devices"] = "nope"
    assert resource_slice_to_v1(raw)["spec"]["devices"] == "nope"
    raw["spec"] = None
    assert resource_slice_to_v1(raw)["spec"] is None
    # a malformed device reads as invalid either way; only the path loses its "basic."
    raw = flat_slice("v1beta1", {"name": "d", "basic": {"attributes": {"x": {"int": "1"}}}})
    assert decode_resource_slice(raw).invalid_reason == "spec.devices[0].basic.attributes[x].int: must be an integer"
    converted = decode_resource_slice(resource_slice_to_v1(raw))
    assert converted.invalid_reason == "spec.devices[0].attributes[x].int: must be an integer"


def test_slice_missing_api_version_uses_the_callers_version_then_v1() -> None:
    raw = flat_slice("v1beta1", {"name": "d", "basic": {"attributes": {"x": {"int": 1}}}}, nodeName="")
    del raw["apiVersion"], raw["kind"]
    converted = resource_slice_to_v1(raw, api_version="resource.k8s.io/v1beta1")
    assert (converted["apiVersion"], converted["kind"]) == (V1, "ResourceSlice")
    assert converted["spec"]["devices"] == [{"name": "d", "attributes": {"x": {"int": 1}}}]
    assert "nodeName" not in converted["spec"]
    assert resource_slice_to_v1(raw)["spec"] == raw["spec"]  # read as v1: nothing is moved


@pytest.mark.parametrize("convert", [resource_slice_to_v1, device_class_to_v1])
@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"apiVersion": "resource.k8s.io/v1alpha2"}, "unsupported apiVersion"),
        ({"apiVersion": V1, "kind": "ResourceClaim"}, "expected kind"),
        ([], "must be a JSON object"),
    ],
)
def test_envelope_errors(convert: Any, body: Any, message: str) -> None:
    with pytest.raises(InvalidObject, match=message):
        convert(body)


# --- DeviceClass ------------------------------------------------------------------------------------

CLASS_YAML = """
kind: DeviceClass
metadata: {name: gpu.example.com, resourceVersion: "4", labels: {tier: a}}
spec:
  selectors:
  - cel: {expression: device.driver == "gpu.example.com"}
  - cel: {expression: 'device.attributes["gpu.example.com"].model == "a100"'}
  config:
  - opaque: {driver: gpu.example.com, parameters: {sharing: {strategy: TimeSlicing}}}
  extendedResourceName: example.com/gpu
"""


def device_class(version: str) -> dict[str, Any]:
    return {"apiVersion": f"resource.k8s.io/{version}", **load(CLASS_YAML)}


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_representative_class_converts_to_the_v1_document(version: str) -> None:
    raw = device_class(version)
    converted = device_class_to_v1(raw)
    assert converted == device_class("v1")
    assert list(converted)[:2] == ["apiVersion", "kind"]
    assert raw == device_class(version)
    assert decode_device_class(converted) == decode_device_class(raw)
    converted["spec"]["config"][0]["opaque"]["parameters"]["sharing"]["strategy"] = "MPS"
    converted["spec"]["selectors"].clear()
    assert raw == device_class(version)  # nothing shared


SUITABLE_NODES = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "fpga", "operator": "Exists"}]}]}


def test_v1alpha3_suitable_nodes_are_dropped() -> None:
    raw = device_class("v1alpha3")
    raw["spec"]["suitableNodes"] = SUITABLE_NODES
    before = copy.deepcopy(raw)
    converted = device_class_to_v1(raw)
    assert converted == device_class("v1")
    assert raw == before
    # the loss, exactly: where classic claims of the class may go
    original = decode_device_class(raw)
    assert original.suitable_nodes is not None
    assert decode_device_class(converted) == dataclasses.replace(original, suitable_nodes=None)


@pytest.mark.parametrize("version", ["v1beta2", "v1beta1"])
def test_suitable_nodes_are_only_dropped_from_v1alpha3(version: str) -> None:
    """Not a field of later versions: like any unknown field, kept where it is."""
    raw = device_class(version)
    raw["spec"]["suitableNodes"] = SUITABLE_NODES
    assert device_class_to_v1(raw)["spec"]["suitableNodes"] == SUITABLE_NODES


def test_class_missing_kind_and_version() -> None:
    raw = load(CLASS_YAML)
    del raw["kind"]
    raw["spec"]["suitableNodes"] = SUITABLE_NODES
    converted = device_class_to_v1(raw, api_version="resource.k8s.io/v1alpha3")
    assert converted == device_class("v1")


# --- properties over generated slices ---------------------------------------------------------------

quantities = st.sampled_from(["1", "4Gi", "500m", "80Gi"])
attributes = st.dictionaries(
    st.sampled_from(["model", "index", "gpu.example.com/uuid", "driverVersion"]),
    st.one_of(
        st.sampled_from(["a100", "t4", ""]).map(lambda v: {"string": v}),
        st.integers(-(2**63), 2**63 - 1).map(lambda v: {"int": v}),
        st.booleans().map(lambda v: {"bool": v}),
        st.sampled_from(["1.2.3", "2.0.0-rc.1+b.5", "not-semver"]).map(lambda v: {"version": v}),
    ),
    max_size=3,
)
counters = st.dictionaries(st.sampled_from(["memory", "sm"]), quantities.map(lambda q: {"value": q}), max_size=2)
taint = st.fixed_dictionaries(
    {"key": st.sampled_from(["broken", "maintenance"]), "effect": st.sampled_from(["NoSchedule", "NoExecute", "None"])},
    optional={"value": st.just("yes"), "timeAdded": st.just("2025-01-01T00:00:00Z")},
)
conditions = st.lists(st.sampled_from(["ready", "attached", "failed"]), max_size=2, unique=True)
SELECTOR = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}


@st.composite
def v1_device(draw: st.DrawFn, name: str, per_device: bool) -> dict[str, Any]:
    """A v1 device: every field present or not, in v1's order."""
    device: dict[str, Any] = {"name": name}
    if draw(st.booleans()):
        device["attributes"] = draw(attributes)
    shared = draw(st.booleans())
    if draw(st.booleans()):
        capacity: dict[str, Any] = {}
        for key in draw(st.lists(st.sampled_from(["memory", "cores"]), unique=True, max_size=2)):
            capacity[key] = {"value": draw(st.one_of(quantities, st.integers(0, 64)))}
            if shared and draw(st.booleans()):
                capacity[key]["requestPolicy"] = {"default": "1", "validRange": {"min": "1", "step": "1"}}
        device["capacity"] = capacity
    if draw(st.booleans()):
        device["consumesCounters"] = [{"counterSet": "set-a", "counters": draw(counters)}]
    if per_device:
        where = draw(st.sampled_from(["nodeName", "nodeSelector", "allNodes"]))
        device[where] = {"nodeName": "node-1", "nodeSelector": SELECTOR, "allNodes": True}[where]
    if draw(st.booleans()):
        device["taints"] = draw(st.lists(taint, max_size=2))
    if draw(st.booleans()):
        device["bindsToNode"] = draw(st.booleans())
    if draw(st.booleans()):
        device["bindingConditions"] = draw(conditions)
        device["bindingFailureConditions"] = draw(conditions)
    if shared or draw(st.booleans()):
        device["allowMultipleAllocations"] = shared
    return device


def flatten(device: dict[str, Any], version: str) -> dict[str, Any]:
    """The v1 device in v1beta1/v1alpha3 shape (v1alpha3: plain capacities as bare quantities)."""
    body = {key: copy.deepcopy(value) for key, value in device.items() if key != "name"}
    if version == "v1alpha3":
        for key, value in body.get("capacity", {}).items():
            if list(value) == ["value"]:
                body["capacity"][key] = value["value"]
    return {"name": device["name"], "basic": body} if body or version == "v1beta1" else {"name": device["name"]}


@st.composite
def slices(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The same slice in v1 (also v1beta2), v1beta1 and v1alpha3 shape, built side by side."""
    where = draw(st.sampled_from(["nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection"]))
    spec: dict[str, Any] = {
        "driver": "gpu.example.com",
        "pool": {"name": "pool-1", "generation": draw(st.integers(0, 5)), "resourceSliceCount": 1},
        where: {"nodeName": "node-1", "nodeSelector": SELECTOR, "allNodes": True, "perDeviceNodeSelection": True}[
            where
        ],
    }
    names = draw(st.lists(st.sampled_from(["gpu-0", "gpu-1", "nic-0"]), unique=True, max_size=3))
    devices = [draw(v1_device(name, where == "perDeviceNodeSelection")) for name in names]
    listed_empty = draw(st.booleans())
    if devices or listed_empty:
        spec["devices"] = devices
    if draw(st.booleans()):
        spec["sharedCounters"] = [{"name": "set-a", "counters": draw(counters)}]
    nested: dict[str, Any] = {
        "kind": "ResourceSlice",
        "metadata": {"name": "s", "uid": "u", "resourceVersion": "2"},
        "spec": spec,
    }
    flat: dict[str, dict[str, Any]] = {}
    for version in FLAT_VERSIONS:
        body = copy.deepcopy(nested)
        if "devices" in spec:
            body["spec"]["devices"] = [flatten(device, version) for device in devices]
        # old clients write the plain zero values of the fields they do not use, or nothing
        if where != "nodeName" and draw(st.booleans()):
            body["spec"]["nodeName"] = ""
        if where != "allNodes" and draw(st.booleans()):
            body["spec"]["allNodes"] = False
        flat[version] = body
    return nested, flat["v1beta1"], flat["v1alpha3"]


@PROPERTY_SETTINGS
@given(slices(), st.sampled_from(ALL_VERSIONS))
def test_converted_slice_decodes_as_the_original(
    shapes: tuple[dict[str, Any], dict[str, Any], dict[str, Any]], version: str
) -> None:
    nested, v1beta1, v1alpha3 = shapes
    body = {"v1beta1": v1beta1, "v1alpha3": v1alpha3}.get(version, nested)
    raw = {"apiVersion": f"resource.k8s.io/{version}", **body}
    before = copy.deepcopy(raw)
    converted = resource_slice_to_v1(raw)
    assert raw == before
    original = decode_resource_slice(raw)
    assert original.invalid_reason is None
    assert fields_of(decode_resource_slice(converted)) == fields_of(original)
    # and it is exactly the slice written in v1
    assert converted == {"apiVersion": V1, **nested}
