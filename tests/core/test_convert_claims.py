"""Decoding of DeviceClass, ResourceClaim and ResourceClaimTemplate in every served version.

Covers: the flat v1beta1/v1alpha3 request shape and the ``exactly``/``firstAvailable`` shape of
v1/v1beta2 decoding into the same model; apiserver defaults (ExactCount, count 1, toleration
operator Equal); claim status (allocation, reservedFor, deletionTimestamp); templates; and the
validation errors, which must name the object and the field path. Problems that upstream's
allocator reports itself (empty CEL selector, missing class name, unknown allocation mode, empty
constraint) must survive decoding untouched. Slices, encoding and ``decode_object`` are in the
sibling ``test_convert_*`` modules.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
from typing import Any

import pytest
import yaml

from extender.core.convert import (
    decode_allocation_result,
    decode_device_class,
    decode_resource_claim,
    decode_resource_claim_template,
)
from extender.core.errors import InvalidObject
from extender.core.model import (
    AllocationConfig,
    ClaimConfig,
    ConsumerRef,
    DeviceClass,
    DeviceConstraint,
    DeviceRequest,
    DeviceToleration,
    ExactRequest,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    OpaqueConfig,
)
from extender.core.quantity import Quantity

ALL_VERSIONS = ["v1", "v1beta2", "v1beta1", "v1alpha3"]
NESTED_VERSIONS = ["v1", "v1beta2"]
FLAT_VERSIONS = ["v1beta1", "v1alpha3"]


def load(text: str) -> dict[str, Any]:
    loaded = yaml.safe_load(text)
    assert isinstance(loaded, dict)
    return loaded


# --- DeviceClass ----------------------------------------------------------------------------------

CLASS_YAML = """
apiVersion: resource.k8s.io/{version}
kind: DeviceClass
metadata: {{name: class-a, resourceVersion: "42"}}
spec:
  selectors:
  - cel: {{expression: 'device.driver == "driver-a"'}}
  - {{}}
  config:
  - opaque: {{driver: driver-a, parameters: {{mode: fast}}}}
  extendedResourceName: example.com/gpu
"""


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_device_class_decodes_the_same_in_every_version(version: str) -> None:
    decoded = decode_device_class(load(CLASS_YAML.format(version=version)))
    assert decoded == DeviceClass(
        name="class-a",
        # A selector without ``cel`` is kept as None: the allocator reports it with upstream's text.
        selectors=('device.driver == "driver-a"', None),
        config=(OpaqueConfig("driver-a", {"mode": "fast"}),),
        extended_resource_name="example.com/gpu",
        resource_version="42",
    )


def test_device_class_parameters_are_copied_not_shared() -> None:
    raw = load(CLASS_YAML.format(version="v1"))
    decoded = decode_device_class(raw)
    raw["spec"]["config"][0]["opaque"]["parameters"]["mode"] = "changed"
    assert decoded.config[0].parameters == {"mode": "fast"}


def test_device_class_without_spec_has_no_selectors() -> None:
    decoded = decode_device_class(
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "c"}}
    )
    assert decoded == DeviceClass(name="c")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"config": [{}]}, "DeviceClass class-a: spec.config[0].opaque.driver: required"),
        ({"config": [{"opaque": {"parameters": {}}}]}, "DeviceClass class-a: spec.config[0].opaque.driver: required"),
        ({"selectors": {"cel": {}}}, "DeviceClass class-a: spec.selectors: must be a list"),
        ({"selectors": [{"cel": {"expression": 5}}]}, "spec.selectors[0].cel.expression: must be a string"),
        ({"selectors": [{"cel": {"expression": "true"}}] * 33}, "spec.selectors: must have at most 32 items"),
    ],
)
def test_device_class_errors_name_the_path(spec: dict[str, Any], message: str) -> None:
    raw = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "class-a"}, "spec": spec}
    with pytest.raises(InvalidObject) as caught:
        decode_device_class(raw)
    assert message in str(caught.value)


# --- ResourceClaim: the request shapes --------------------------------------------------------------

# The same claim written in the nested (v1, v1beta2) and the flat (v1beta1, v1alpha3) shape.
NESTED_CLAIM_YAML = """
apiVersion: resource.k8s.io/{version}
kind: ResourceClaim
metadata: {{name: claim-0, namespace: ns-1, uid: uid-1, resourceVersion: "7"}}
spec:
  devices:
    requests:
    - name: req-0
      exactly:
        deviceClassName: class-a
        selectors: [{{cel: {{expression: 'device.attributes["driver-a"].model == "a"'}}}}]
    - name: req-1
      exactly:
        deviceClassName: class-a
        allocationMode: All
        adminAccess: true
        tolerations: [{{key: maintenance, effect: NoSchedule}}]
    - name: req-2
      exactly:
        deviceClassName: class-b
        count: 3
        capacity: {{requests: {{memory: 10Gi}}}}
    - name: req-3
      firstAvailable:
      - {{name: big, deviceClassName: class-big}}
      - {{name: small, deviceClassName: class-small, count: 2, tolerations: [{{operator: Exists}}]}}
    constraints:
    - {{requests: [req-0, req-3/small], matchAttribute: driver-a/model}}
    - {{distinctAttribute: driver-a/index}}
    config:
    - {{requests: [req-0], opaque: {{driver: driver-a, parameters: {{x: 1}}}}}}
    - opaque: {{driver: driver-b, parameters: {{}}}}
"""

FLAT_CLAIM_YAML = """
apiVersion: resource.k8s.io/{version}
kind: ResourceClaim
metadata: {{name: claim-0, namespace: ns-1, uid: uid-1, resourceVersion: "7"}}
spec:
  devices:
    requests:
    - name: req-0
      deviceClassName: class-a
      selectors: [{{cel: {{expression: 'device.attributes["driver-a"].model == "a"'}}}}]
    - name: req-1
      deviceClassName: class-a
      allocationMode: All
      adminAccess: true
      tolerations: [{{key: maintenance, effect: NoSchedule}}]
    - name: req-2
      deviceClassName: class-b
      count: 3
      capacity: {{requests: {{memory: 10Gi}}}}
    - name: req-3
      firstAvailable:
      - {{name: big, deviceClassName: class-big}}
      - {{name: small, deviceClassName: class-small, count: 2, tolerations: [{{operator: Exists}}]}}
    constraints:
    - {{requests: [req-0, req-3/small], matchAttribute: driver-a/model}}
    - {{distinctAttribute: driver-a/index}}
    config:
    - {{requests: [req-0], opaque: {{driver: driver-a, parameters: {{x: 1}}}}}}
    - opaque: {{driver: driver-b, parameters: {{}}}}
"""

EXPECTED_REQUESTS = (
    DeviceRequest(
        name="req-0",
        exactly=ExactRequest(
            name="req-0",
            device_class_name="class-a",
            selectors=('device.attributes["driver-a"].model == "a"',),
        ),
    ),
    DeviceRequest(
        name="req-1",
        exactly=ExactRequest(
            name="req-1",
            device_class_name="class-a",
            allocation_mode="All",
            count=0,
            admin_access=True,
            tolerations=(DeviceToleration(key="maintenance", operator="Equal", effect="NoSchedule"),),
        ),
    ),
    DeviceRequest(
        name="req-2",
        exactly=ExactRequest(
            name="req-2",
            device_class_name="class-b",
            count=3,
            capacity_requests={"memory": Quantity.parse("10Gi")},
        ),
    ),
    DeviceRequest(
        name="req-3",
        first_available=(
            ExactRequest(name="big", device_class_name="class-big"),
            ExactRequest(
                name="small",
                device_class_name="class-small",
                count=2,
                tolerations=(DeviceToleration(operator="Exists"),),
            ),
        ),
    ),
)


def claim_yaml(version: str) -> str:
    template = FLAT_CLAIM_YAML if version in FLAT_VERSIONS else NESTED_CLAIM_YAML
    return template.format(version=version)


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_claim_requests_decode_the_same_in_every_version(version: str) -> None:
    claim = decode_resource_claim(load(claim_yaml(version)))
    assert claim.key == "ns-1/claim-0"
    assert claim.uid == "uid-1"
    assert claim.resource_version == "7"
    assert claim.api_version == f"resource.k8s.io/{version}"
    assert claim.requests == EXPECTED_REQUESTS
    assert claim.constraints == (
        DeviceConstraint(requests=("req-0", "req-3/small"), match_attribute="driver-a/model"),
        DeviceConstraint(distinct_attribute="driver-a/index"),
    )
    assert claim.config == (
        ClaimConfig(requests=("req-0",), opaque=OpaqueConfig("driver-a", {"x": 1})),
        ClaimConfig(requests=(), opaque=OpaqueConfig("driver-b", {})),
    )
    assert claim.allocation is None
    assert claim.reserved_for == ()


@pytest.mark.parametrize(
    ("fields", "mode", "count"),
    [
        ({}, "ExactCount", 1),
        ({"count": 0}, "ExactCount", 1),
        ({"allocationMode": "", "count": 4}, "ExactCount", 4),
        ({"allocationMode": "All"}, "All", 0),
        # Kept for the allocator, which reports "unsupported count mode Some".
        ({"allocationMode": "Some", "count": 2}, "Some", 2),
    ],
)
@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_allocation_mode_and_count_defaults(version: str, fields: dict[str, Any], mode: str, count: int) -> None:
    request: dict[str, Any] = {"deviceClassName": "class-a", **fields}
    if version in NESTED_VERSIONS:
        request = {"exactly": request}
    raw = claim_with_requests(version, [{"name": "req-0", **request}])
    exactly = decode_resource_claim(raw).requests[0].exactly
    assert exactly is not None
    assert (exactly.allocation_mode, exactly.count) == (mode, count)


def claim_with_requests(version: str, requests: list[dict[str, Any]], **devices: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceClaim",
        "metadata": {"name": "claim-0", "namespace": "default"},
        "spec": {"devices": {"requests": requests, **devices}},
    }


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_allocator_reported_problems_are_kept(version: str) -> None:
    """Empty class name, selector without cel, empty expression and an empty constraint are the
    allocator's to report (docs/semantics.md §5, §12c), so decoding keeps them as they are."""
    request: dict[str, Any] = {"selectors": [{}, {"cel": {"expression": ""}}]}
    if version in NESTED_VERSIONS:
        request = {"exactly": request}
    raw = claim_with_requests(version, [{"name": "req-0", **request}], constraints=[{}])
    claim = decode_resource_claim(raw)
    exactly = claim.requests[0].exactly
    assert exactly is not None
    assert exactly.device_class_name == ""
    assert exactly.selectors == (None, "")
    assert claim.constraints == (DeviceConstraint(),)


def test_admin_access_false_is_kept_as_present() -> None:
    """The allocator rejects a *present* adminAccess when the feature is off, even ``false``."""
    raw = claim_with_requests("v1", [{"name": "r", "exactly": {"deviceClassName": "c", "adminAccess": False}}])
    exactly = decode_resource_claim(raw).requests[0].exactly
    assert exactly is not None
    assert exactly.admin_access is False


def test_missing_namespace_means_default() -> None:
    raw = claim_with_requests("v1", [])
    del raw["metadata"]["namespace"]
    assert decode_resource_claim(raw).namespace == "default"


def test_missing_api_version_uses_the_callers_version_then_v1() -> None:
    """Items of a LIST response carry no apiVersion/kind; the caller knows what it listed."""
    raw = claim_with_requests("v1beta1", [{"name": "r", "deviceClassName": "c"}])
    del raw["apiVersion"]
    del raw["kind"]
    claim = decode_resource_claim(raw, api_version="resource.k8s.io/v1beta1")
    assert claim.api_version == "resource.k8s.io/v1beta1"
    assert claim.requests[0].exactly is not None
    assert decode_resource_claim(copy.deepcopy(raw) | {"spec": {}}).api_version == "resource.k8s.io/v1"


# --- ResourceClaim: validation errors name object and path ------------------------------------------

ERROR_CASES = [
    pytest.param(
        "v1",
        [{"name": "req-0", "exactly": {"deviceClassName": "c", "count": -1}}],
        {},
        "ResourceClaim default/claim-0: spec.devices.requests[0].exactly.count: must be greater than zero",
        id="negative-count",
    ),
    pytest.param(
        "v1beta1",
        [{"name": "req-0", "deviceClassName": "c", "count": -2}],
        {},
        "ResourceClaim default/claim-0: spec.devices.requests[0].count: must be greater than zero",
        id="negative-count-flat",
    ),
    pytest.param(
        "v1",
        [{"name": "req-0", "exactly": {"deviceClassName": "c", "allocationMode": "All", "count": 2}}],
        {},
        "spec.devices.requests[0].exactly.count: must not be set when allocationMode is All",
        id="all-with-count",
    ),
    pytest.param(
        "v1",
        [
            {
                "name": "req-0",
                "exactly": {"deviceClassName": "c"},
                "firstAvailable": [{"name": "s", "deviceClassName": "c"}],
            }
        ],
        {},
        "spec.devices.requests[0]: exactly one of exactly or firstAvailable must be set, not both",
        id="both-exactly-and-first-available",
    ),
    pytest.param(
        "v1beta2",
        [{"name": "req-0"}],
        {},
        "spec.devices.requests[0]: exactly one of exactly or firstAvailable is required",
        id="neither-exactly-nor-first-available",
    ),
    pytest.param(
        "v1beta1",
        [
            {
                "name": "req-0",
                "deviceClassName": "c",
                "firstAvailable": [{"name": "s", "deviceClassName": "c"}],
            }
        ],
        {},
        "spec.devices.requests[0].deviceClassName: must not be set when firstAvailable is set",
        id="flat-fields-with-first-available",
    ),
    pytest.param(
        "v1",
        [
            {"name": "req-0", "exactly": {"deviceClassName": "c"}},
            {"name": "req-0", "exactly": {"deviceClassName": "c"}},
        ],
        {},
        "spec.devices.requests[1].name: duplicate request name 'req-0'",
        id="duplicate-request-name",
    ),
    pytest.param(
        "v1",
        [{"exactly": {"deviceClassName": "c"}}],
        {},
        "spec.devices.requests[0].name: required",
        id="missing-request-name",
    ),
    pytest.param(
        "v1",
        [
            {
                "name": "r",
                "firstAvailable": [
                    {"name": "s", "deviceClassName": "c"},
                    {"name": "s", "deviceClassName": "d"},
                ],
            }
        ],
        {},
        "spec.devices.requests[0].firstAvailable[1].name: duplicate subrequest name 's'",
        id="duplicate-subrequest-name",
    ),
    pytest.param(
        "v1",
        [{"name": "r", "exactly": {"deviceClassName": "c"}}],
        {"constraints": [{"matchAttribute": "d/a", "distinctAttribute": "d/b"}]},
        "spec.devices.constraints[0]: must not set both matchAttribute and distinctAttribute",
        id="constraint-with-both",
    ),
    pytest.param(
        "v1",
        [{"name": "r", "exactly": {"deviceClassName": "c"}}],
        {"constraints": [{"matchAttribute": "model"}]},
        "spec.devices.constraints[0].matchAttribute: 'model' must be a fully qualified name (domain/id)",
        id="constraint-attribute-not-qualified",
    ),
    pytest.param(
        "v1",
        [{"name": "r", "exactly": {"deviceClassName": "c"}}],
        {"constraints": [{"requests": ["r", "x"], "matchAttribute": "d/a"}]},
        "spec.devices.constraints[0].requests[1]: 'x' must be the name of a request",
        id="constraint-unknown-request",
    ),
    pytest.param(
        "v1",
        [{"name": "r", "exactly": {"deviceClassName": "c"}}],
        {"config": [{"requests": ["r/nope"], "opaque": {"driver": "d"}}]},
        "spec.devices.config[0].requests[0]: 'r/nope' must be the name of a request",
        id="config-unknown-subrequest",
    ),
    pytest.param(
        "v1",
        [{"name": "r", "exactly": {"deviceClassName": "c", "count": "2"}}],
        {},
        "spec.devices.requests[0].exactly.count: must be an integer",
        id="count-not-an-integer",
    ),
    pytest.param(
        "v1",
        [{"name": "r", "exactly": {"deviceClassName": "c", "capacity": {"requests": {"memory": "lots"}}}}],
        {},
        "spec.devices.requests[0].exactly.capacity.requests[memory]: invalid quantity 'lots'",
        id="bad-capacity-quantity",
    ),
    pytest.param(
        "v1",
        [{"name": f"r{i}", "exactly": {"deviceClassName": "c"}} for i in range(33)],
        {},
        "spec.devices.requests: must have at most 32 items",
        id="too-many-requests",
    ),
    pytest.param(
        "v1",
        [{"name": "r", "firstAvailable": [{"name": f"s{i}", "deviceClassName": "c"} for i in range(9)]}],
        {},
        "spec.devices.requests[0].firstAvailable: must have at most 8 items",
        id="too-many-subrequests",
    ),
    pytest.param(
        "v1",
        [{"name": "r", "exactly": {"deviceClassName": "c", "selectors": ["device.driver == 'x'"]}}],
        {},
        "spec.devices.requests[0].exactly.selectors[0]: must be an object",
        id="selector-not-an-object",
    ),
]


@pytest.mark.parametrize(("version", "requests", "devices", "message"), ERROR_CASES)
def test_claim_validation_errors_name_the_path(
    version: str, requests: list[dict[str, Any]], devices: dict[str, Any], message: str
) -> None:
    raw = claim_with_requests(version, requests, **devices)
    with pytest.raises(InvalidObject) as caught:
        decode_resource_claim(raw)
    assert message in str(caught.value)
    assert caught.value.obj == "ResourceClaim default/claim-0"
    assert caught.value.path and caught.value.path in message


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {}},
            "ResourceClaim: metadata.name: required",
        ),
        (
            {"apiVersion": "resource.k8s.io/v2", "kind": "ResourceClaim", "metadata": {"name": "c"}},
            "apiVersion: unsupported apiVersion 'resource.k8s.io/v2'",
        ),
        (
            {"apiVersion": "v1", "kind": "ResourceClaim", "metadata": {"name": "c"}},
            "unsupported apiVersion 'v1'",
        ),
        (
            {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "c"}},
            "kind: expected kind ResourceClaim, got 'DeviceClass'",
        ),
        (["not", "an", "object"], "ResourceClaim: must be a JSON object, not list"),
        (
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "c"},
                "spec": [],
            },
            "ResourceClaim default/c: spec: must be an object",
        ),
    ],
)
def test_claim_envelope_errors(raw: object, message: str) -> None:
    with pytest.raises(InvalidObject) as caught:
        decode_resource_claim(raw)
    assert message in str(caught.value)


# --- ResourceClaim: status ----------------------------------------------------------------------------

STATUS_YAML = """
apiVersion: resource.k8s.io/{version}
kind: ResourceClaim
metadata:
  name: claim-0
  namespace: default
  deletionTimestamp: 2025-01-02T03:04:05Z
spec: {{}}
status:
  allocation:
    devices:
      results:
      - {{request: req-0, driver: driver-a, pool: pool-1, device: device-1}}
      - request: req-1/sub
        driver: driver-a
        pool: pool-1
        device: device-2
        adminAccess: true
        tolerations: [{{key: k, operator: Exists, effect: NoExecute, tolerationSeconds: 30}}]
        bindingConditions: [ready]
        bindingFailureConditions: [failed]
        shareID: 6f1e2a3b-0000-4000-8000-000000000001
        consumedCapacity: {{memory: 4Gi}}
      config:
      - {{source: FromClass, requests: [req-0], opaque: {{driver: driver-a, parameters: {{a: 1}}}}}}
      - {{source: FromClaim, opaque: {{driver: driver-a, parameters: {{b: 2}}}}}}
    nodeSelector:
      nodeSelectorTerms:
      - matchFields: [{{key: metadata.name, operator: In, values: [node-1]}}]
    allocationTimestamp: "2025-01-02T03:04:00Z"
  reservedFor:
  - {{resource: pods, name: pod-1, uid: pod-uid-1}}
"""


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_claim_status_decodes(version: str) -> None:
    claim = decode_resource_claim(load(STATUS_YAML.format(version=version)))
    # PyYAML reads the unquoted deletionTimestamp as a datetime; it comes back as RFC 3339 text.
    assert claim.deletion_timestamp == "2025-01-02T03:04:05Z"
    assert claim.reserved_for == (ConsumerRef(resource="pods", name="pod-1", uid="pod-uid-1"),)
    allocation = claim.allocation
    assert allocation is not None
    first, second = allocation.devices
    assert (first.request, str(first.device_id), first.admin_access, first.share_id) == (
        "req-0",
        "driver-a/pool-1/device-1",
        False,
        None,
    )
    assert first.consumed_capacity is None
    assert second.admin_access is True
    assert second.tolerations == (
        DeviceToleration(key="k", operator="Exists", effect="NoExecute", toleration_seconds=30),
    )
    assert second.binding_conditions == ("ready",)
    assert second.binding_failure_conditions == ("failed",)
    assert second.share_id == "6f1e2a3b-0000-4000-8000-000000000001"
    assert second.consumed_capacity == {"memory": Quantity.parse("4Gi")}
    assert allocation.config == (
        AllocationConfig("FromClass", ("req-0",), OpaqueConfig("driver-a", {"a": 1})),
        AllocationConfig("FromClaim", (), OpaqueConfig("driver-a", {"b": 2})),
    )
    assert allocation.node_selector == NodeSelector(
        (NodeSelectorTerm(match_fields=(NodeSelectorRequirement("metadata.name", "In", ("node-1",)),)),)
    )
    assert allocation.allocation_timestamp == "2025-01-02T03:04:00Z"


def test_yaml_timestamps_with_offsets_keep_the_offset() -> None:
    raw = load(STATUS_YAML.format(version="v1"))
    raw["metadata"]["deletionTimestamp"] = datetime.datetime(
        2025, 1, 2, 3, 4, 5, tzinfo=datetime.timezone(datetime.timedelta(hours=2))
    )
    assert decode_resource_claim(raw).deletion_timestamp == "2025-01-02T03:04:05+02:00"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda a: a["devices"]["results"][0].pop("driver"),
            "status.allocation.devices.results[0].driver: required",
        ),
        (
            lambda a: a["devices"]["results"][1].update(consumedCapacity={"memory": "x"}),
            "status.allocation.devices.results[1].consumedCapacity[memory]: invalid quantity 'x'",
        ),
        (
            lambda a: a["devices"]["config"][0].pop("source"),
            "status.allocation.devices.config[0].source: required",
        ),
        (
            lambda a: a.update(nodeSelector={"nodeSelectorTerms": {}}),
            "status.allocation.nodeSelector.nodeSelectorTerms: must be a list",
        ),
    ],
)
def test_allocation_errors_name_the_path(mutate: Any, message: str) -> None:
    raw = load(STATUS_YAML.format(version="v1"))
    mutate(raw["status"]["allocation"])
    with pytest.raises(InvalidObject) as caught:
        decode_resource_claim(raw)
    assert message in str(caught.value)
    assert str(caught.value).startswith("ResourceClaim default/claim-0: status.allocation")


def test_decode_allocation_result_alone() -> None:
    raw = load(STATUS_YAML.format(version="v1"))["status"]["allocation"]
    assert decode_allocation_result(raw) == decode_resource_claim(load(STATUS_YAML.format(version="v1"))).allocation
    with pytest.raises(InvalidObject, match=r"^claim x: status.allocation.devices.results: must be a list$"):
        decode_allocation_result({"devices": {"results": 3}}, obj="claim x")


# --- ResourceClaimTemplate ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_template_carries_a_claim_spec(version: str) -> None:
    claim_body = load(claim_yaml(version))
    raw = {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "template-1", "namespace": "ns-2"},
        "spec": {
            "metadata": {"labels": {"app": "x"}, "annotations": {"note": "y"}},
            "spec": claim_body["spec"],
        },
    }
    template = decode_resource_claim_template(raw)
    assert (template.namespace, template.name, template.api_version) == (
        "ns-2",
        "template-1",
        f"resource.k8s.io/{version}",
    )
    assert template.labels == {"app": "x"}
    assert template.annotations == {"note": "y"}
    assert template.spec.requests == EXPECTED_REQUESTS
    assert (template.spec.namespace, template.spec.name) == ("ns-2", "template-1")
    assert template.spec.api_version == f"resource.k8s.io/{version}"
    generated = dataclasses.replace(template.spec, name="pod-1-gpu-abcde", uid="u")
    assert generated.key == "ns-2/pod-1-gpu-abcde"


def test_template_errors_name_the_template_and_nested_path() -> None:
    raw = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": "ns"},
        "spec": {"spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "c", "count": -1}}]}}},
    }
    with pytest.raises(InvalidObject) as caught:
        decode_resource_claim_template(raw)
    assert str(caught.value) == (
        "ResourceClaimTemplate ns/t: spec.spec.devices.requests[0].exactly.count: must be greater than zero"
    )


def test_template_label_values_must_be_strings() -> None:
    raw = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t"},
        "spec": {"metadata": {"labels": {"tier": 1}}, "spec": {}},
    }
    with pytest.raises(InvalidObject, match=r"spec.metadata.labels\[tier\]: must be a string"):
        decode_resource_claim_template(raw)
