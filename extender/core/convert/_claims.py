"""Decoders for DeviceClass, ResourceClaim (spec and status) and ResourceClaimTemplate.

Validation covers what the allocator relies on and what the apiserver would have rejected anyway
(names, request shape, counts, limits, constraint shape, references). Problems that upstream's
*allocator* reports are deliberately kept for it to report with upstream's texts (docs/semantics.md §5, §12c):
a selector without ``cel`` is kept as ``None``, an empty ``deviceClassName`` as ``""``, an unknown
``allocationMode`` as written, a constraint with neither attribute as an empty constraint.
"""

from __future__ import annotations

from typing import Any

from extender.core.model import (
    ALLOCATION_MODE_ALL,
    ALLOCATION_MODE_EXACT_COUNT,
    AllocationConfig,
    AllocationResult,
    ClaimConfig,
    ConsumerRef,
    DeviceClass,
    DeviceConstraint,
    DeviceRequest,
    DeviceResult,
    ExactRequest,
    NodeSelector,
    ResourceClaim,
    ResourceClaimTemplate,
)

from ._base import (
    FLAT_VERSIONS,
    V1ALPHA3,
    FieldError,
    RawDict,
    boolean,
    check_type,
    integer,
    limit,
    mapping,
    node_selector,
    object_dict,
    object_name,
    opaque,
    optional_string,
    quantity_map,
    reported_as,
    required_string,
    sequence,
    string,
    string_map,
    strings,
    sys_intern,
    timestamp,
    tolerations,
)

#: Request fields of v1beta1/v1alpha3 that must stay unset when ``firstAvailable`` is used.
_FLAT_EXACT_FIELDS = (
    "deviceClassName",
    "selectors",
    "allocationMode",
    "count",
    "adminAccess",
    "tolerations",
    "capacity",
)

_MAX_REQUESTS = 32  # DeviceRequestsMaxSize
_MAX_SUBREQUESTS = 8
_MAX_SELECTORS = 32
_MAX_CONSTRAINTS = 32
_MAX_CONFIGS = 32
_MAX_RESULTS = 32  # AllocationResultsMaxSize
_MAX_RESULT_CONFIGS = 64
_MAX_RESERVED_FOR = 256


# --- DeviceClass ----------------------------------------------------------------------------------


def decode_device_class(raw: object, *, api_version: str | None = None) -> DeviceClass:
    """Decode a DeviceClass in any served version; raises ``InvalidObject`` naming the field."""
    body = object_dict(raw, "DeviceClass")
    version = check_type(body, "DeviceClass", api_version)
    meta, name, _ = object_name(body, "DeviceClass", namespaced=False)
    with reported_as(f"DeviceClass {name}"):
        spec = mapping(body.get("spec"), "spec")
        configs = sequence(spec.get("config"), "spec.config")
        limit(configs, _MAX_CONFIGS, "spec.config")
        return DeviceClass(
            name=name,
            selectors=_selectors(spec.get("selectors"), "spec.selectors"),
            config=tuple(
                opaque(mapping(item, f"spec.config[{i}]").get("opaque"), f"spec.config[{i}].opaque")
                for i, item in enumerate(configs)
            ),
            extended_resource_name=optional_string(spec.get("extendedResourceName"), "spec.extendedResourceName"),
            resource_version=string(meta.get("resourceVersion"), "metadata.resourceVersion"),
            creation_timestamp=string(meta.get("creationTimestamp"), "metadata.creationTimestamp"),
            suitable_nodes=_suitable_nodes(spec, version),
        )


def _suitable_nodes(spec: RawDict, version: str) -> NodeSelector | None:
    """``spec.suitableNodes`` of a v1alpha3 class (later versions have no such field)."""
    raw = spec.get("suitableNodes") if version == V1ALPHA3 else None
    return None if raw is None else node_selector(raw, "spec.suitableNodes")


def _controller(spec: object, path: str, version: str) -> str:
    """``spec.controller`` of a v1alpha3 claim (classic DRA; later versions have no such field)."""
    if version != V1ALPHA3:
        return ""
    return string(mapping(spec, path).get("controller"), f"{path}.controller")


def _selectors(raw: object, path: str) -> tuple[str | None, ...]:
    """CEL selectors. A selector without ``cel`` becomes ``None`` so that the allocator reports
    ``CEL expression empty (unsupported selector type?)`` when it uses it; an empty expression
    is kept as ``""`` and fails to compile there, as upstream's would."""
    items = sequence(raw, path)
    limit(items, _MAX_SELECTORS, path)
    result: list[str | None] = []
    for index, item in enumerate(items):
        item_path = f"{path}[{index}]"
        cel = mapping(item, item_path).get("cel")
        if cel is None:
            result.append(None)
        else:
            result.append(string(mapping(cel, f"{item_path}.cel").get("expression"), f"{item_path}.cel.expression"))
    return tuple(result)


# --- ResourceClaim --------------------------------------------------------------------------------


def decode_resource_claim(
    raw: object, *, api_version: str | None = None, same_spec_as: ResourceClaim | None = None
) -> ResourceClaim:
    """Decode a ResourceClaim (spec and status) in any served version; raises ``InvalidObject``.

    ``same_spec_as``: an earlier decoding of a claim whose ``spec`` (and apiVersion) the caller knows
    to be identical to this one's; its requests, constraints and config are reused instead of
    decoded again (a claim's spec is immutable, while its status changes with every bind)."""
    body = object_dict(raw, "ResourceClaim")
    version = check_type(body, "ResourceClaim", api_version)
    meta, name, namespace = object_name(body, "ResourceClaim", namespaced=True)
    with reported_as(f"ResourceClaim {namespace}/{name}"):
        if same_spec_as is not None and same_spec_as.api_version == version:
            requests, constraints, config = same_spec_as.requests, same_spec_as.constraints, same_spec_as.config
            controller = same_spec_as.controller
        else:
            requests, constraints, config = _claim_spec(body.get("spec"), "spec", version in FLAT_VERSIONS)
            controller = _controller(body.get("spec"), "spec", version)
        status = mapping(body.get("status"), "status")
        raw_allocation = status.get("allocation")
        reserved = sequence(status.get("reservedFor"), "status.reservedFor")
        limit(reserved, _MAX_RESERVED_FOR, "status.reservedFor")
        return ResourceClaim(
            namespace=namespace,
            name=name,
            uid=string(meta.get("uid"), "metadata.uid"),
            requests=requests,
            constraints=constraints,
            config=config,
            allocation=None if raw_allocation is None else allocation_result(raw_allocation, "status.allocation"),
            reserved_for=tuple(_consumer(item, f"status.reservedFor[{i}]") for i, item in enumerate(reserved)),
            deletion_timestamp=timestamp(meta.get("deletionTimestamp"), "metadata.deletionTimestamp"),
            resource_version=string(meta.get("resourceVersion"), "metadata.resourceVersion"),
            api_version=version,
            controller=controller,
            deallocation_requested=version == V1ALPHA3
            and bool(boolean(status.get("deallocationRequested"), "status.deallocationRequested")),
        )


def decode_resource_claim_template(raw: object, *, api_version: str | None = None) -> ResourceClaimTemplate:
    """Decode a ResourceClaimTemplate. Its ``spec`` is a ResourceClaim named like the template (a
    placeholder: instantiate with ``dataclasses.replace``) carrying the template's version."""
    body = object_dict(raw, "ResourceClaimTemplate")
    version = check_type(body, "ResourceClaimTemplate", api_version)
    _, name, namespace = object_name(body, "ResourceClaimTemplate", namespaced=True)
    with reported_as(f"ResourceClaimTemplate {namespace}/{name}"):
        spec = mapping(body.get("spec"), "spec")
        claim_meta = mapping(spec.get("metadata"), "spec.metadata")
        requests, constraints, config = _claim_spec(spec.get("spec"), "spec.spec", version in FLAT_VERSIONS)
        return ResourceClaimTemplate(
            namespace=namespace,
            name=name,
            labels=string_map(claim_meta.get("labels"), "spec.metadata.labels"),
            annotations=string_map(claim_meta.get("annotations"), "spec.metadata.annotations"),
            spec=ResourceClaim(
                namespace=namespace,
                name=name,
                requests=requests,
                constraints=constraints,
                config=config,
                api_version=version,
                controller=_controller(spec.get("spec"), "spec.spec", version),
            ),
            api_version=version,
        )


def _claim_spec(
    raw: object, path: str, flat: bool
) -> tuple[tuple[DeviceRequest, ...], tuple[DeviceConstraint, ...], tuple[ClaimConfig, ...]]:
    devices_path = f"{path}.devices"
    devices = mapping(mapping(raw, path).get("devices"), devices_path)

    requests_path = f"{devices_path}.requests"
    raw_requests = sequence(devices.get("requests"), requests_path)
    limit(raw_requests, _MAX_REQUESTS, requests_path)
    requests: list[DeviceRequest] = []
    seen: set[str] = set()
    for index, item in enumerate(raw_requests):
        request = _request(item, f"{requests_path}[{index}]", flat)
        if request.name in seen:
            raise FieldError(f"{requests_path}[{index}].name", f"duplicate request name {request.name!r}")
        seen.add(request.name)
        requests.append(request)

    known = _request_references(requests)
    constraints_path = f"{devices_path}.constraints"
    raw_constraints = sequence(devices.get("constraints"), constraints_path)
    limit(raw_constraints, _MAX_CONSTRAINTS, constraints_path)
    constraints = tuple(_constraint(item, f"{constraints_path}[{i}]", known) for i, item in enumerate(raw_constraints))

    config_path = f"{devices_path}.config"
    raw_config = sequence(devices.get("config"), config_path)
    limit(raw_config, _MAX_CONFIGS, config_path)
    config = tuple(_claim_config(item, f"{config_path}[{i}]", known) for i, item in enumerate(raw_config))
    return tuple(requests), constraints, config


def _request(raw: object, path: str, flat: bool) -> DeviceRequest:
    body = mapping(raw, path)
    name = required_string(body.get("name"), f"{path}.name")
    if flat:
        # v1beta1/v1alpha3: the ExactDeviceRequest fields sit on the request itself.
        if body.get("firstAvailable"):
            for field in _FLAT_EXACT_FIELDS:
                if body.get(field) not in (None, "", 0, [], {}):
                    raise FieldError(f"{path}.{field}", "must not be set when firstAvailable is set")
            return DeviceRequest(name=name, first_available=_subrequests(body, path))
        return DeviceRequest(name=name, exactly=_exact(body, path, name, subrequest=False))
    exactly = body.get("exactly")
    first_available = body.get("firstAvailable")
    if exactly is not None and first_available:
        raise FieldError(path, "exactly one of exactly or firstAvailable must be set, not both")
    if exactly is not None:
        return DeviceRequest(
            name=name,
            exactly=_exact(mapping(exactly, f"{path}.exactly"), f"{path}.exactly", name, subrequest=False),
        )
    if first_available:
        return DeviceRequest(name=name, first_available=_subrequests(body, path))
    raise FieldError(path, "exactly one of exactly or firstAvailable is required")


def _subrequests(body: RawDict, path: str) -> tuple[ExactRequest, ...]:
    list_path = f"{path}.firstAvailable"
    items = sequence(body.get("firstAvailable"), list_path)
    limit(items, _MAX_SUBREQUESTS, list_path)
    result: list[ExactRequest] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        item_path = f"{list_path}[{index}]"
        sub_body = mapping(item, item_path)
        sub_name = required_string(sub_body.get("name"), f"{item_path}.name")
        if sub_name in seen:
            raise FieldError(f"{item_path}.name", f"duplicate subrequest name {sub_name!r}")
        seen.add(sub_name)
        result.append(_exact(sub_body, item_path, sub_name, subrequest=True))
    return tuple(result)


def _exact(body: RawDict, path: str, name: str, *, subrequest: bool) -> ExactRequest:
    """An ``exactly`` request or a subrequest, with the apiserver's defaults applied."""
    mode = string(body.get("allocationMode"), f"{path}.allocationMode") or ALLOCATION_MODE_EXACT_COUNT
    count = integer(body.get("count"), f"{path}.count")
    if mode == ALLOCATION_MODE_EXACT_COUNT:
        if not count:
            count = 1  # defaulted when unset (or zero)
        elif count < 0:
            raise FieldError(f"{path}.count", "must be greater than zero")
    elif mode == ALLOCATION_MODE_ALL:
        if count:
            raise FieldError(f"{path}.count", "must not be set when allocationMode is All")
        count = 0
    else:
        count = count or 0  # the allocator reports "unsupported count mode <m>"
    capacity = body.get("capacity")
    capacity_path = f"{path}.capacity"
    return ExactRequest(
        name=name,
        device_class_name=string(body.get("deviceClassName"), f"{path}.deviceClassName"),
        selectors=_selectors(body.get("selectors"), f"{path}.selectors"),
        allocation_mode=mode,
        count=count,
        # Subrequests have no adminAccess field; an unknown field is ignored as the apiserver does.
        admin_access=None if subrequest else boolean(body.get("adminAccess"), f"{path}.adminAccess"),
        tolerations=tolerations(body.get("tolerations"), f"{path}.tolerations"),
        capacity_requests=None
        if capacity is None
        else quantity_map(mapping(capacity, capacity_path).get("requests"), f"{capacity_path}.requests"),
    )


def _request_references(requests: list[DeviceRequest]) -> frozenset[str]:
    """Names a constraint or config may list: ``req`` and ``req/sub``."""
    names: set[str] = set()
    for request in requests:
        names.add(request.name)
        names.update(f"{request.name}/{sub.name}" for sub in request.first_available)
    return frozenset(names)


def _references(raw: object, path: str, known: frozenset[str]) -> tuple[str, ...]:
    names = strings(raw, path)
    limit(list(names), _MAX_REQUESTS, path)
    seen: set[str] = set()
    for index, name in enumerate(names):
        if name not in known:
            raise FieldError(
                f"{path}[{index}]",
                f"{name!r} must be the name of a request in the claim or of a request and a subrequest",
            )
        if name in seen:
            raise FieldError(f"{path}[{index}]", f"duplicate request name {name!r}")
        seen.add(name)
    return names


def _constraint(raw: object, path: str, known: frozenset[str]) -> DeviceConstraint:
    body = mapping(raw, path)
    match = optional_string(body.get("matchAttribute"), f"{path}.matchAttribute")
    distinct = optional_string(body.get("distinctAttribute"), f"{path}.distinctAttribute")
    if match is not None and distinct is not None:
        raise FieldError(path, "must not set both matchAttribute and distinctAttribute")
    for field, value in (("matchAttribute", match), ("distinctAttribute", distinct)):
        if value is not None and "/" not in value:
            raise FieldError(f"{path}.{field}", f"{value!r} must be a fully qualified name (domain/id)")
    # Neither attribute set: kept, the allocator reports "empty constraint".
    return DeviceConstraint(
        requests=_references(body.get("requests"), f"{path}.requests", known),
        match_attribute=None if match is None else sys_intern(match),
        distinct_attribute=None if distinct is None else sys_intern(distinct),
    )


def _claim_config(raw: object, path: str, known: frozenset[str]) -> ClaimConfig:
    body = mapping(raw, path)
    raw_opaque = body.get("opaque")
    return ClaimConfig(
        requests=_references(body.get("requests"), f"{path}.requests", known),
        opaque=None if raw_opaque is None else opaque(raw_opaque, f"{path}.opaque"),
    )


# --- status ---------------------------------------------------------------------------------------


def decode_allocation_result(raw: object, *, obj: str = "AllocationResult") -> AllocationResult:
    """Decode a ``status.allocation`` value on its own (any served version: the shape is shared)."""
    with reported_as(obj):
        return allocation_result(raw, "status.allocation")


def allocation_result(raw: object, path: str) -> AllocationResult:
    body = mapping(raw, path)
    devices_path = f"{path}.devices"
    devices = mapping(body.get("devices"), devices_path)
    results_path = f"{devices_path}.results"
    results = sequence(devices.get("results"), results_path)
    limit(results, _MAX_RESULTS, results_path)
    config_path = f"{devices_path}.config"
    configs = sequence(devices.get("config"), config_path)
    limit(configs, _MAX_RESULT_CONFIGS, config_path)
    raw_selector = body.get("nodeSelector")
    return AllocationResult(
        devices=tuple(_device_result(item, f"{results_path}[{i}]") for i, item in enumerate(results)),
        config=tuple(_allocation_config(item, f"{config_path}[{i}]") for i, item in enumerate(configs)),
        node_selector=None if raw_selector is None else node_selector(raw_selector, f"{path}.nodeSelector"),
        allocation_timestamp=timestamp(body.get("allocationTimestamp"), f"{path}.allocationTimestamp"),
        controller=string(body.get("controller"), f"{path}.controller"),
    )


def _device_result(raw: object, path: str) -> DeviceResult:
    body = mapping(raw, path)
    consumed = body.get("consumedCapacity")
    return DeviceResult(
        request=required_string(body.get("request"), f"{path}.request"),
        driver=sys_intern(required_string(body.get("driver"), f"{path}.driver")),
        pool=sys_intern(required_string(body.get("pool"), f"{path}.pool")),
        device=sys_intern(required_string(body.get("device"), f"{path}.device")),
        admin_access=bool(boolean(body.get("adminAccess"), f"{path}.adminAccess")),
        tolerations=tolerations(body.get("tolerations"), f"{path}.tolerations"),
        binding_conditions=strings(body.get("bindingConditions"), f"{path}.bindingConditions"),
        binding_failure_conditions=strings(body.get("bindingFailureConditions"), f"{path}.bindingFailureConditions"),
        share_id=optional_string(body.get("shareID"), f"{path}.shareID"),
        consumed_capacity=None if consumed is None else quantity_map(consumed, f"{path}.consumedCapacity"),
    )


def _allocation_config(raw: object, path: str) -> AllocationConfig:
    body = mapping(raw, path)
    raw_opaque = body.get("opaque")
    return AllocationConfig(
        source=required_string(body.get("source"), f"{path}.source"),
        requests=strings(body.get("requests"), f"{path}.requests"),
        opaque=None if raw_opaque is None else opaque(raw_opaque, f"{path}.opaque"),
    )


def _consumer(raw: object, path: str) -> ConsumerRef:
    body: dict[str, Any] = mapping(raw, path)
    return ConsumerRef(
        resource=required_string(body.get("resource"), f"{path}.resource"),
        name=required_string(body.get("name"), f"{path}.name"),
        uid=required_string(body.get("uid"), f"{path}.uid"),
        api_group=string(body.get("apiGroup"), f"{path}.apiGroup"),
    )
