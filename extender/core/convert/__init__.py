"""Conversion between raw resource.k8s.io objects (plain dicts from orjson or YAML) and the model.

Every served version — v1, v1beta2, v1beta1, v1alpha3 — decodes into the one model of
``extender.core.model``:

- v1beta1/v1alpha3 flat requests (``deviceClassName``, ``count``, ... on the request) become
  ``DeviceRequest(exactly=ExactRequest(...))``; top-level ``firstAvailable`` becomes subrequests;
- v1beta1/v1alpha3 ``basic`` devices are flattened; bare capacity quantities (v1alpha3) and
  ``{value, requestPolicy}`` capacities (later versions) are both accepted;
- slice ``nodeName``/``allNodes`` as plain values (old) or pointers (new): empty means unset;
- apiserver defaults are applied (allocationMode ExactCount, count 1, toleration operator Equal).

Errors: DeviceClass, ResourceClaim, ResourceClaimTemplate and Node decoders raise
``errors.InvalidObject`` naming the object and the field path. ``decode_resource_slice`` never
raises for a malformed body: it sets ``ResourceSlice.invalid_reason`` instead (the allocator then
treats the pool as invalid). Problems that upstream's allocator reports itself (empty CEL selector,
missing class name, unknown allocation mode, empty constraint) are kept for it to report.

Every decoder takes an optional keyword ``api_version`` used when the raw object has no
``apiVersion`` (items of a LIST response); without either, v1 is assumed.

``decode_pod_scheduling_context`` reads classic DRA's PodSchedulingContext (v1alpha3 only),
``decode_device_taint_rule`` a DeviceTaintRule (v1beta2 or v1alpha3), ``decode_pod_group`` a
scheduling.k8s.io PodGroup (v1alpha2, v1alpha3, v1beta1: spec/workloads-and-gangs.md).

Encoding: ``encode_allocation_result`` writes ``status.allocation`` (same shape in every version);
``encode_node_selector`` a core/v1 NodeSelector. ``resource_claim_to_v1`` and
``resource_claim_template_to_v1`` rewrite a raw object of any served version as resource.k8s.io/v1
JSON (what the debug endpoint answers; what is lossless and what is not: ``_to_v1``), and so do
``resource_slice_to_v1`` and ``device_class_to_v1`` (``_to_v1_slices``).
"""

from ._base import FLAT_VERSIONS, SERVED_VERSIONS, V1, V1ALPHA3, V1BETA1, V1BETA2
from ._claims import (
    decode_allocation_result,
    decode_device_class,
    decode_resource_claim,
    decode_resource_claim_template,
)
from ._encode import encode_allocation_result, encode_attribute_value, encode_node_selector, encode_toleration
from ._objects import DecodedObject, decode_node, decode_node_selector, decode_object
from ._podgroups import MAX_POD_GROUP_CLAIMS, POD_GROUP_VERSIONS, SCHEDULING_GROUP, decode_pod_group
from ._scheduling import POD_SCHEDULING_NODE_LIST_MAX_SIZE, decode_pod_scheduling_context
from ._slices import decode_resource_slice
from ._taint_rules import decode_device_taint_rule
from ._to_v1 import resource_claim_template_to_v1, resource_claim_to_v1
from ._to_v1_slices import device_class_to_v1, resource_slice_to_v1

__all__ = [
    "FLAT_VERSIONS",
    "MAX_POD_GROUP_CLAIMS",
    "POD_GROUP_VERSIONS",
    "POD_SCHEDULING_NODE_LIST_MAX_SIZE",
    "SCHEDULING_GROUP",
    "SERVED_VERSIONS",
    "V1",
    "V1ALPHA3",
    "V1BETA1",
    "V1BETA2",
    "DecodedObject",
    "decode_allocation_result",
    "decode_device_class",
    "decode_device_taint_rule",
    "decode_node",
    "decode_node_selector",
    "decode_object",
    "decode_pod_group",
    "decode_pod_scheduling_context",
    "decode_resource_claim",
    "decode_resource_claim_template",
    "decode_resource_slice",
    "device_class_to_v1",
    "encode_allocation_result",
    "encode_attribute_value",
    "encode_node_selector",
    "encode_toleration",
    "resource_claim_template_to_v1",
    "resource_claim_to_v1",
    "resource_slice_to_v1",
]
