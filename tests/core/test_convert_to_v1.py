"""Conversion of raw ResourceClaims and ResourceClaimTemplates of every served version to
resource.k8s.io/v1 JSON (``extender.core.convert._to_v1``).

Covers: one representative claim (flat requests, ``firstAvailable``, selectors, constraints, config,
admin access, tolerations, capacity requests; an allocation with results, config and nodeSelector;
reservedFor; device status) written in each version gives one expected v1 document; what v1alpha3's
classic fields lose; the edge cases the module docstring names; templates; the envelope errors; and,
as properties over generated claims, that the converted document decodes to the same model as the
original and that the input is never changed.
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
    decode_resource_claim,
    decode_resource_claim_template,
    resource_claim_template_to_v1,
    resource_claim_to_v1,
)
from extender.core.errors import InvalidObject

ALL_VERSIONS = ["v1", "v1beta2", "v1beta1", "v1alpha3"]
FLAT_VERSIONS = ["v1beta1", "v1alpha3"]

PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def load(text: str) -> dict[str, Any]:
    loaded = yaml.safe_load(text)
    assert isinstance(loaded, dict)
    return loaded


# --- one representative claim, in every version ---------------------------------------------------

METADATA_AND_STATUS = """
metadata:
  name: claim-0
  namespace: ns-1
  uid: uid-1
  resourceVersion: "7"
  labels: {team: a}
  annotations: {note: kept}
  finalizers: [resource.kubernetes.io/delete-protection]
status:
  allocation:
    devices:
      results:
      - {request: req-0, driver: driver-a, pool: pool-1, device: device-1}
      - request: req-1
        driver: driver-a
        pool: pool-1
        device: device-2
        adminAccess: true
        tolerations: [{key: maintenance, operator: Equal, effect: NoSchedule}]
      - request: req-3/small
        driver: driver-a
        pool: pool-1
        device: device-3
        bindingConditions: [ready]
        bindingFailureConditions: [failed]
        shareID: 6f1e2a3b-0000-4000-8000-000000000001
        consumedCapacity: {memory: 4Gi}
      config:
      - {source: FromClass, requests: [req-0], opaque: {driver: driver-a, parameters: {a: 1}}}
      - {source: FromClaim, opaque: {driver: driver-a, parameters: {x: 1}}}
    nodeSelector:
      nodeSelectorTerms:
      - matchFields: [{key: metadata.name, operator: In, values: [node-1]}]
    allocationTimestamp: "2025-01-02T03:04:00Z"
  reservedFor:
  - {resource: pods, name: pod-1, uid: pod-uid-1}
  devices:
  - driver: driver-a
    pool: pool-1
    device: device-1
    conditions:
    - {type: Ready, status: "True", reason: Configured, message: ok, lastTransitionTime: "2025-01-02T03:05:00Z"}
    data: {vendor: {fw: "1.2"}}
    networkData: {interfaceName: eth1, ips: [10.0.0.5/24], hardwareAddress: "ea:9f:00:00:00:01"}
"""

# v1beta1 and v1alpha3 (1.32/1.33 shape; capacity requests only exist in v1beta1, the decoder
# accepts them in both). The flat fields sit on the request itself.
FLAT_SPEC = """
spec:
  devices:
    requests:
    - name: req-0
      deviceClassName: class-a
      selectors: [{cel: {expression: 'device.attributes["driver-a"].model == "a"'}}]
      allocationMode: ExactCount
      count: 1
    - name: req-1
      deviceClassName: class-a
      allocationMode: All
      adminAccess: true
      tolerations: [{key: maintenance, operator: Equal, effect: NoSchedule}]
    - name: req-2
      deviceClassName: class-b
      count: 3
      capacity: {requests: {memory: 10Gi}}
    - name: req-3
      firstAvailable:
      - {name: big, deviceClassName: class-big, selectors: [{cel: {expression: device.driver == "driver-a"}}]}
      - {name: small, deviceClassName: class-small, count: 2, tolerations: [{operator: Exists}],
         capacity: {requests: {memory: 4Gi}}}
    constraints:
    - {requests: [req-0, req-3/small], matchAttribute: driver-a/model}
    - {distinctAttribute: driver-a/index}
    config:
    - {requests: [req-0], opaque: {driver: driver-a, parameters: {x: 1}}}
"""

# v1 and v1beta2, and what every version converts to.
NESTED_SPEC = """
spec:
  devices:
    requests:
    - name: req-0
      exactly:
        deviceClassName: class-a
        selectors: [{cel: {expression: 'device.attributes["driver-a"].model == "a"'}}]
        allocationMode: ExactCount
        count: 1
    - name: req-1
      exactly:
        deviceClassName: class-a
        allocationMode: All
        adminAccess: true
        tolerations: [{key: maintenance, operator: Equal, effect: NoSchedule}]
    - name: req-2
      exactly:
        deviceClassName: class-b
        count: 3
        capacity: {requests: {memory: 10Gi}}
    - name: req-3
      firstAvailable:
      - {name: big, deviceClassName: class-big, selectors: [{cel: {expression: device.driver == "driver-a"}}]}
      - {name: small, deviceClassName: class-small, count: 2, tolerations: [{operator: Exists}],
         capacity: {requests: {memory: 4Gi}}}
    constraints:
    - {requests: [req-0, req-3/small], matchAttribute: driver-a/model}
    - {distinctAttribute: driver-a/index}
    config:
    - {requests: [req-0], opaque: {driver: driver-a, parameters: {x: 1}}}
"""


def representative(version: str) -> dict[str, Any]:
    spec = FLAT_SPEC if version in FLAT_VERSIONS else NESTED_SPEC
    return load(f"apiVersion: resource.k8s.io/{version}\nkind: ResourceClaim\n{METADATA_AND_STATUS}{spec}")


EXPECTED_V1 = representative("v1")


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_representative_claim_converts_to_the_v1_document(version: str) -> None:
    raw = representative(version)
    before = copy.deepcopy(raw)
    converted = resource_claim_to_v1(raw)
    assert converted == EXPECTED_V1
    assert list(converted)[:2] == ["apiVersion", "kind"]
    assert raw == before  # the input is not changed


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_representative_claim_decodes_the_same_after_conversion(version: str) -> None:
    raw = representative(version)
    original = decode_resource_claim(raw)
    assert decode_resource_claim(resource_claim_to_v1(raw)) == dataclasses.replace(original, api_version=V1)


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_the_output_shares_nothing_with_the_input(version: str) -> None:
    raw = representative(version)
    converted = resource_claim_to_v1(raw)
    converted["metadata"]["labels"]["team"] = "b"
    converted["status"]["devices"][0]["data"]["vendor"]["fw"] = "9"
    converted["spec"]["devices"]["requests"][3]["firstAvailable"][0]["selectors"].clear()
    converted["spec"]["devices"]["config"][0]["opaque"]["parameters"]["x"] = 2
    assert raw == representative(version)


def test_v1_is_a_deep_copy_unchanged() -> None:
    raw = representative("v1")
    raw["spec"]["devices"]["requests"][0]["exactly"]["futureField"] = {"kept": True}
    converted = resource_claim_to_v1(raw)
    assert converted == raw and converted is not raw
    assert converted["spec"] is not raw["spec"] and converted["status"] is not raw["status"]


# --- what has no place in v1 -----------------------------------------------------------------------

CLASSIC_YAML = """
apiVersion: resource.k8s.io/v1alpha3
kind: ResourceClaim
metadata: {name: fpga, namespace: default, finalizers: [fpga.example.com/deletion-protection]}
spec:
  controller: fpga.example.com
  devices:
    requests: [{name: fpga, deviceClassName: fpga.example.com}]
status:
  allocation:
    controller: fpga.example.com
    devices:
      config: [{source: FromClaim, opaque: {driver: fpga.example.com, parameters: {slot: 0}}}]
    nodeSelector:
      nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: [node-4]}]}]
  reservedFor: [{resource: pods, name: fpga-pod, uid: uid-p}]
  deallocationRequested: true
"""


def test_v1alpha3_classic_fields_are_dropped() -> None:
    raw = load(CLASSIC_YAML)
    converted = resource_claim_to_v1(raw)
    assert converted["spec"] == {
        "devices": {"requests": [{"name": "fpga", "exactly": {"deviceClassName": "fpga.example.com"}}]}
    }
    assert converted["status"] == {
        "allocation": {
            "devices": {
                "config": [{"source": "FromClaim", "opaque": {"driver": "fpga.example.com", "parameters": {"slot": 0}}}]
            },
            "nodeSelector": raw["status"]["allocation"]["nodeSelector"],
        },
        "reservedFor": [{"resource": "pods", "name": "fpga-pod", "uid": "uid-p"}],
    }
    assert converted["metadata"] == raw["metadata"]
    # the loss, exactly: the driver and the deallocation request, nothing else
    original = decode_resource_claim(raw)
    assert original.allocation is not None
    expected = dataclasses.replace(
        original,
        api_version=V1,
        controller="",
        deallocation_requested=False,
        allocation=dataclasses.replace(original.allocation, controller=""),
    )
    assert decode_resource_claim(converted) == expected
    assert raw == load(CLASSIC_YAML)


@pytest.mark.parametrize("version", ["v1beta2", "v1beta1"])
def test_controller_is_only_dropped_from_v1alpha3(version: str) -> None:
    """Not a field of later versions: like any unknown field, kept where it is."""
    raw = load(CLASSIC_YAML.replace("v1alpha3", version))
    raw["spec"]["devices"]["requests"] = [{"name": "fpga", "exactly": {"deviceClassName": "c"}}]
    converted = resource_claim_to_v1(raw)
    assert converted["spec"]["controller"] == "fpga.example.com"
    assert converted["status"]["deallocationRequested"] is True


# --- flat requests: the edge cases ----------------------------------------------------------------


def flat_claim(version: str, *requests: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"devices": {"requests": list(requests)}},
    }


def converted_requests(raw: dict[str, Any]) -> list[Any]:
    requests: list[Any] = resource_claim_to_v1(raw)["spec"]["devices"]["requests"]
    return requests


SUB = {"name": "s", "deviceClassName": "c"}


@pytest.mark.parametrize("version", FLAT_VERSIONS)
@pytest.mark.parametrize(
    ("request_body", "expected"),
    [
        # only a name: upstream would give neither field; exactly {} keeps the class name "" for the allocator
        ({"name": "r"}, {"name": "r", "exactly": {}}),
        ({"name": "r", "firstAvailable": []}, {"name": "r", "exactly": {}, "firstAvailable": []}),
        # flat fields without a value beside firstAvailable say nothing (the decoder ignores them too)
        (
            {"name": "r", "firstAvailable": [SUB], "selectors": [], "count": 0, "adminAccess": False},
            {"name": "r", "firstAvailable": [SUB]},
        ),
        # both: carried as upstream carries them (and rejected by the decoders, as by validation)
        (
            {"name": "r", "firstAvailable": [SUB], "deviceClassName": "c"},
            {"name": "r", "exactly": {"deviceClassName": "c"}, "firstAvailable": [SUB]},
        ),
        # adminAccess false is kept; v1's field order; an unknown field stays on the request
        (
            {"unknown": 1, "adminAccess": False, "count": 2, "deviceClassName": "c", "name": "r"},
            {"name": "r", "exactly": {"deviceClassName": "c", "count": 2, "adminAccess": False}, "unknown": 1},
        ),
    ],
)
def test_flat_request_edge_cases(version: str, request_body: dict[str, Any], expected: dict[str, Any]) -> None:
    [converted] = converted_requests(flat_claim(version, request_body))
    assert converted == expected
    assert list(converted) == list(expected)


def test_no_defaults_are_applied() -> None:
    """Conversion is not defaulting: a manifest's missing mode and count stay missing (the decoders
    default them, and a claim from the apiserver has them already)."""
    [converted] = converted_requests(flat_claim("v1beta1", {"name": "r", "deviceClassName": "c"}))
    assert converted == {"name": "r", "exactly": {"deviceClassName": "c"}}


def test_malformed_parts_are_copied_not_rejected() -> None:
    raw = flat_claim("v1beta1", "not-a-request", {"name": "r", "deviceClassName": "c"})  # type: ignore[arg-type]
    assert converted_requests(raw) == ["not-a-request", {"name": "r", "exactly": {"deviceClassName": "c"}}]
    raw["spec"]["devices"]["requests"] = "nope"
    assert resource_claim_to_v1(raw)["spec"] == {"devices": {"requests": "nope"}}
    raw["spec"] = None
    assert resource_claim_to_v1(raw)["spec"] is None


# --- envelope -------------------------------------------------------------------------------------


def test_missing_api_version_uses_the_callers_version_then_v1() -> None:
    raw = flat_claim("v1beta1", {"name": "r", "deviceClassName": "c"})
    del raw["apiVersion"], raw["kind"]
    converted = resource_claim_to_v1(raw, api_version="resource.k8s.io/v1beta1")
    assert (converted["apiVersion"], converted["kind"]) == (V1, "ResourceClaim")
    assert converted["spec"]["devices"]["requests"] == [{"name": "r", "exactly": {"deviceClassName": "c"}}]
    # read as v1 without a version: nothing is moved
    assert resource_claim_to_v1(raw)["spec"] == raw["spec"]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"apiVersion": "resource.k8s.io/v1alpha2", "kind": "ResourceClaim"}, "unsupported apiVersion"),
        ({"apiVersion": V1, "kind": "ResourceSlice"}, "expected kind ResourceClaim"),
        ([], "must be a JSON object"),
    ],
)
def test_envelope_errors(raw: Any, message: str) -> None:
    with pytest.raises(InvalidObject, match=message):
        resource_claim_to_v1(raw)


# --- templates ------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_template_spec_is_converted_like_a_claim_spec(version: str) -> None:
    claim = representative(version)
    template_meta = {"labels": {"app": "x"}}
    raw = {
        "apiVersion": claim["apiVersion"],
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": "ns-1"},
        "spec": {"metadata": template_meta, "spec": claim["spec"]},
    }
    if version == "v1alpha3":
        raw["spec"]["spec"] = {**claim["spec"], "controller": "driver-a"}
    before = copy.deepcopy(raw)
    converted = resource_claim_template_to_v1(raw)
    assert converted == {
        "apiVersion": V1,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": "ns-1"},
        "spec": {"metadata": template_meta, "spec": EXPECTED_V1["spec"]},
    }
    assert raw == before
    original = decode_resource_claim_template(raw)
    expected = dataclasses.replace(
        original, api_version=V1, spec=dataclasses.replace(original.spec, api_version=V1, controller="")
    )
    assert decode_resource_claim_template(converted) == expected


# --- properties over generated claims --------------------------------------------------------------

names = st.sampled_from(["a", "b", "gpu", "nic-0"])
classes = st.sampled_from(["class-a", "class-b", ""])
cel = st.sampled_from(['device.driver == "driver-a"', "true", ""]).map(lambda e: {"cel": {"expression": e}})
toleration = st.fixed_dictionaries(
    {"key": st.sampled_from(["k", "maintenance"])},
    optional={
        "operator": st.sampled_from(["Equal", "Exists"]),
        "value": st.just("v"),
        "effect": st.sampled_from(["NoSchedule", "NoExecute"]),
        "tolerationSeconds": st.integers(0, 300),
    },
)
capacity = st.dictionaries(st.sampled_from(["memory", "cores"]), st.sampled_from(["1", "4Gi", "500m"]), max_size=2)


@st.composite
def exact_fields(draw: st.DrawFn, *, sub: bool) -> dict[str, Any]:
    """The ExactDeviceRequest / DeviceSubRequest fields, each present or not."""
    fields: dict[str, Any] = {}
    if draw(st.booleans()) or sub:
        fields["deviceClassName"] = draw(classes.filter(bool) if sub else classes)
    if draw(st.booleans()):
        fields["selectors"] = draw(st.lists(cel, max_size=2))
    mode = draw(st.sampled_from([None, "ExactCount", "All"]))
    if mode is not None:
        fields["allocationMode"] = mode
    if mode != "All" and draw(st.booleans()):
        fields["count"] = draw(st.integers(1, 4))
    if not sub and draw(st.booleans()):
        fields["adminAccess"] = draw(st.booleans())
    if draw(st.booleans()):
        fields["tolerations"] = draw(st.lists(toleration, max_size=2))
    if draw(st.booleans()):
        fields["capacity"] = {"requests": draw(capacity)}
    return fields


@st.composite
def claims(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """The same claim in flat (v1beta1/v1alpha3) and nested (v1/v1beta2) shape, built side by side."""
    flat_requests: list[dict[str, Any]] = []
    nested_requests: list[dict[str, Any]] = []
    references: list[str] = []
    for name in draw(st.lists(names, min_size=1, max_size=3, unique=True)):
        references.append(name)
        if draw(st.integers(0, 2)) == 0:
            subs = [
                {"name": sub, **draw(exact_fields(sub=True))}
                for sub in draw(st.lists(st.sampled_from(["x", "y", "z"]), min_size=1, max_size=2, unique=True))
            ]
            references += [f"{name}/{sub['name']}" for sub in subs]
            flat_requests.append({"name": name, "firstAvailable": subs})
            nested_requests.append({"name": name, "firstAvailable": copy.deepcopy(subs)})
        else:
            fields = draw(exact_fields(sub=False))
            flat_requests.append({"name": name, **fields})
            nested_requests.append({"name": name, "exactly": copy.deepcopy(fields)})
    devices: dict[str, Any] = {"requests": flat_requests}
    if draw(st.booleans()):
        devices["constraints"] = [
            {
                "requests": draw(st.lists(st.sampled_from(references), unique=True, max_size=2)),
                draw(st.sampled_from(["matchAttribute", "distinctAttribute"])): "driver-a/model",
            }
            for _ in range(draw(st.integers(1, 2)))
        ]
    if draw(st.booleans()):
        devices["config"] = [
            {
                "requests": draw(st.lists(st.sampled_from(references), unique=True, max_size=2)),
                "opaque": {"driver": "driver-a", "parameters": {"n": draw(st.integers(0, 9))}},
            }
        ]
    body: dict[str, Any] = {
        "kind": "ResourceClaim",
        "metadata": {"name": "claim", "namespace": "ns", "uid": "u", "resourceVersion": "3"},
        "spec": {"devices": devices},
    }
    if draw(st.booleans()):
        result: dict[str, Any] = {
            "request": draw(st.sampled_from(references)),
            "driver": "driver-a",
            "pool": "pool-1",
            "device": draw(st.sampled_from(["d0", "d1"])),
        }
        if draw(st.booleans()):
            result.update(adminAccess=True, tolerations=[{"key": "k", "operator": "Exists"}])
        if draw(st.booleans()):
            result.update(shareID="6f1e2a3b-0000-4000-8000-000000000001", consumedCapacity={"memory": "1Gi"})
        allocation: dict[str, Any] = {"devices": {"results": [result]}}
        if draw(st.booleans()):
            allocation["nodeSelector"] = {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
            }
            allocation["allocationTimestamp"] = "2025-01-02T03:04:00Z"
        status: dict[str, Any] = {"allocation": allocation}
        if draw(st.booleans()):
            status["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "pu"}]
        if draw(st.booleans()):
            status["devices"] = [
                {
                    "driver": "driver-a",
                    "pool": "pool-1",
                    "device": result["device"],
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "networkData": {"interfaceName": "eth0", "ips": ["10.0.0.1/24"]},
                }
            ]
        body["status"] = status
    nested = copy.deepcopy(body)
    nested["spec"]["devices"]["requests"] = nested_requests
    return body, nested


@PROPERTY_SETTINGS
@given(claims(), st.sampled_from(ALL_VERSIONS))
def test_converted_claim_decodes_as_the_original(pair: tuple[dict[str, Any], dict[str, Any]], version: str) -> None:
    flat, nested = pair
    raw = {"apiVersion": f"resource.k8s.io/{version}", **(flat if version in FLAT_VERSIONS else nested)}
    before = copy.deepcopy(raw)
    converted = resource_claim_to_v1(raw)
    assert raw == before
    assert decode_resource_claim(converted) == dataclasses.replace(decode_resource_claim(raw), api_version=V1)
    # and it is exactly the claim written in v1
    assert converted == {"apiVersion": V1, **nested}
