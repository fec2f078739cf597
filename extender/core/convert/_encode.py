"""Encoders from the model back to API JSON: ``status.allocation`` and core/v1 NodeSelector.

``AllocationResult`` has the same JSON shape in v1, v1beta2, v1beta1 and v1alpha3 (fields added
later simply never appear in older objects), so one encoder serves every version. Empty optional
fields are omitted, as Go's ``omitempty`` does; keys follow the Go struct order so that output
reads like the apiserver's. Quantities are written in their canonical form (``str(q)``).
"""

from __future__ import annotations

from typing import Any

from extender.core.model import (
    AllocationConfig,
    AllocationResult,
    AttributeValue,
    DeviceResult,
    DeviceToleration,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    OpaqueConfig,
    UnparsedVersion,
)

from ._base import SERVED_VERSIONS

__all__ = ["encode_allocation_result", "encode_node_selector"]


def encode_allocation_result(result: AllocationResult, api_version: str) -> dict[str, Any]:
    """The ``status.allocation`` object for a claim served as ``api_version``."""
    if api_version not in SERVED_VERSIONS:
        raise ValueError(f"unsupported apiVersion {api_version!r} (expected one of {', '.join(SERVED_VERSIONS)})")
    devices: dict[str, Any] = {"results": [_device_result(r) for r in result.devices]}
    if result.config:
        devices["config"] = [_allocation_config(c) for c in result.config]
    encoded: dict[str, Any] = {"devices": devices}
    if result.node_selector is not None:
        encoded["nodeSelector"] = encode_node_selector(result.node_selector)
    if result.allocation_timestamp:
        encoded["allocationTimestamp"] = result.allocation_timestamp
    return encoded


def _device_result(result: DeviceResult) -> dict[str, Any]:
    encoded: dict[str, Any] = {
        "request": result.request,
        "driver": result.driver,
        "pool": result.pool,
        "device": result.device,
    }
    if result.admin_access:
        encoded["adminAccess"] = True  # never false: the allocator omits it (docs/semantics.md §1.2)
    if result.tolerations:
        encoded["tolerations"] = [encode_toleration(t) for t in result.tolerations]
    if result.binding_conditions:
        encoded["bindingConditions"] = list(result.binding_conditions)
    if result.binding_failure_conditions:
        encoded["bindingFailureConditions"] = list(result.binding_failure_conditions)
    if result.share_id:
        encoded["shareID"] = result.share_id
    if result.consumed_capacity:
        encoded["consumedCapacity"] = {name: str(q) for name, q in result.consumed_capacity.items()}
    return encoded


def encode_toleration(toleration: DeviceToleration) -> dict[str, Any]:
    encoded: dict[str, Any] = {}
    if toleration.key:
        encoded["key"] = toleration.key
    encoded["operator"] = toleration.operator or "Equal"
    if toleration.value:
        encoded["value"] = toleration.value
    if toleration.effect:
        encoded["effect"] = toleration.effect
    if toleration.toleration_seconds is not None:
        encoded["tolerationSeconds"] = toleration.toleration_seconds
    return encoded


def _allocation_config(config: AllocationConfig) -> dict[str, Any]:
    encoded: dict[str, Any] = {"source": config.source}
    if config.requests:
        encoded["requests"] = list(config.requests)
    if config.opaque is not None:
        encoded["opaque"] = encode_opaque(config.opaque)
    return encoded


def encode_opaque(opaque: OpaqueConfig) -> dict[str, Any]:
    encoded: dict[str, Any] = {"driver": opaque.driver}
    if opaque.parameters is not None:
        encoded["parameters"] = opaque.parameters
    return encoded


def encode_node_selector(selector: NodeSelector) -> dict[str, Any]:
    """A core/v1 NodeSelector: ``{nodeSelectorTerms: [...]}``."""
    return {"nodeSelectorTerms": [_term(term) for term in selector.terms]}


def _term(term: NodeSelectorTerm) -> dict[str, Any]:
    encoded: dict[str, Any] = {}
    if term.match_expressions:
        encoded["matchExpressions"] = [_requirement(r) for r in term.match_expressions]
    if term.match_fields:
        encoded["matchFields"] = [_requirement(r) for r in term.match_fields]
    return encoded


def _requirement(requirement: NodeSelectorRequirement) -> dict[str, Any]:
    encoded: dict[str, Any] = {"key": requirement.key, "operator": requirement.operator}
    if requirement.values:
        encoded["values"] = list(requirement.values)
    return encoded


def encode_attribute_value(value: AttributeValue) -> object:
    """A device attribute as plain JSON, for the debug views and tools: bools, ints and strings as
    they are; a version (parsed or not) and anything else by its text."""
    if isinstance(value, bool | int | str):
        return value
    if isinstance(value, UnparsedVersion):
        return value.text
    if isinstance(value, tuple):
        return [encode_attribute_value(item) for item in value]
    return str(value)
