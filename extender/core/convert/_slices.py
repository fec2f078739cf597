"""Decoder for ResourceSlice, the hot path of ingest (thousands of slices, tens of devices each).

A malformed slice never raises: the first problem found becomes ``ResourceSlice.invalid_reason``
(``<field path>: <reason>``) and whatever could be decoded is kept, so that the allocator marks the
slice's pool invalid (per node, ``invalid resource pools were encountered``) instead of the whole
ingest failing. Only a value that is not an object, or has no ``metadata.name``, raises.

Speed matters here: paths are built only when a problem is found, plain capacities are shared
between devices, and quantity/version parsing is cached in ``_base``.
"""

from __future__ import annotations

__all__ = ["decode_resource_slice"]

from functools import lru_cache
from typing import Any

from extender.core.model import (
    AttributeValue,
    CapacityRequestPolicy,
    CounterConsumption,
    CounterSet,
    Device,
    DeviceCapacity,
    DeviceTaint,
    NodeSelector,
    PoolRef,
    ResourceSlice,
)
from extender.core.quantity import Quantity

from ._base import (
    FLAT_VERSIONS,
    FieldError,
    RawDict,
    boolean,
    check_type,
    fast_constructor,
    integer,
    limit,
    mapping,
    node_selector,
    object_dict,
    object_name,
    parse_version,
    quantity,
    sequence,
    string,
    strings,
    sys_intern,
    timestamp,
)

_MAX_DEVICES = 128
#: ResourceSliceMaxDevicesWithTaintsOrConsumesCounters (1.35).
_MAX_DEVICES_WITH_TAINTS_OR_COUNTERS = 64
_MAX_ATTRIBUTES_AND_CAPACITIES = 32
_MAX_TAINTS = 16
_MAX_CONSUMES_COUNTERS = 2
_MAX_COUNTER_SETS = 8
_MAX_COUNTERS = 32
_MAX_BINDING_CONDITIONS = 4
#: ``Device(...)`` without the per-field ``object.__setattr__`` of a frozen dataclass (see _base).
_new_device = fast_constructor(Device)
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_MEMBER_TYPES = {
    "string": "must be a string",
    "int": "must be an integer",
    "bool": "must be a boolean",
    "version": "must be a string",
}
_PER_DEVICE_NEEDS_ONE = "exactly one of nodeName, nodeSelector, allNodes is required with perDeviceNodeSelection"
_PER_DEVICE_ONLY = "nodeName, nodeSelector and allNodes may only be set with perDeviceNodeSelection"
_ATTRIBUTE_KINDS = "exactly one of int, bool, string, version, ints, bools, strings, versions is required"
#: List-typed attributes (KEP-5491): the member -> its scalar member.
_LIST_KINDS = {"ints": "int", "bools": "bool", "strings": "string", "versions": "version"}
#: ResourceSliceMaxAttributeValuesPerDevice: a list holds at most this many values.
_MAX_LIST_VALUES = 48


class _Problems:
    """Remembers the first problem of a slice; later ones add nothing the operator needs."""

    __slots__ = ("first",)

    def __init__(self) -> None:
        self.first: str | None = None

    def add(self, path: str, reason: str) -> None:
        if self.first is None:
            self.first = f"{path}: {reason}"

    def add_error(self, exc: FieldError) -> None:
        self.add(exc.path, exc.reason)


def decode_resource_slice(raw: object, *, api_version: str | None = None) -> ResourceSlice:
    """Decode a ResourceSlice in any served version. Never raises for a malformed body."""
    body = object_dict(raw, "ResourceSlice")
    version = check_type(body, "ResourceSlice", api_version)
    meta, name, _ = object_name(body, "ResourceSlice", namespaced=False)
    problems = _Problems()
    flat = version in FLAT_VERSIONS

    uid = _lenient_string(meta.get("uid"), "metadata.uid", problems)
    resource_version = _lenient_string(meta.get("resourceVersion"), "metadata.resourceVersion", problems)
    spec = body.get("spec")
    if not isinstance(spec, dict):
        problems.add("spec", "required" if spec is None else "must be an object")
        spec = {}

    driver = _lenient_string(spec.get("driver"), "spec.driver", problems)
    if not driver:
        problems.add("spec.driver", "required")
    pool = _pool(spec.get("pool"), problems)

    node_name, node_sel, all_nodes, per_device = _node_selection(spec, problems)
    devices = _devices(spec.get("devices"), flat, per_device, problems)
    # Devices beside sharedCounters (the 1.34 layout, rejected by 1.35 validation) are left to pool
    # gathering, which still understands per-slice counter sets.
    shared_counters = _counter_sets(spec.get("sharedCounters"), problems)

    return ResourceSlice(
        name=name,
        driver=sys_intern(driver),
        pool=pool,
        node_name=node_name,
        node_selector=node_sel,
        all_nodes=all_nodes,
        per_device_node_selection=per_device,
        devices=devices,
        shared_counters=shared_counters,
        uid=uid,
        resource_version=resource_version,
        invalid_reason=problems.first,
    )


def _lenient_string(raw: object, path: str, problems: _Problems) -> str:
    try:
        return string(raw, path)
    except FieldError as exc:
        problems.add_error(exc)
        return ""


def _pool(raw: object, problems: _Problems) -> PoolRef:
    name, generation, count = "", 0, 0
    try:
        body = mapping(raw, "spec.pool")
        if raw is None:
            raise FieldError("spec.pool", "required")
        name = string(body.get("name"), "spec.pool.name")
        if not name:
            raise FieldError("spec.pool.name", "required")
        generation = integer(body.get("generation"), "spec.pool.generation") or 0
        if generation < 0:
            raise FieldError("spec.pool.generation", "must be greater than or equal to zero")
        count = integer(body.get("resourceSliceCount"), "spec.pool.resourceSliceCount") or 0
        if count <= 0:
            raise FieldError("spec.pool.resourceSliceCount", "must be greater than zero")
    except FieldError as exc:
        problems.add_error(exc)
    return PoolRef(sys_intern(name), generation, count)


_ONE_TERM = "must have exactly one node selector term"


def _node_selection(spec: RawDict, problems: _Problems) -> tuple[str | None, NodeSelector | None, bool, bool]:
    """(nodeName, nodeSelector, allNodes, perDeviceNodeSelection) of the slice.

    Old versions have a plain string and bool, new ones pointers; either way an empty string and
    ``false`` mean "unset". None set is not an error here: pool gathering ignores such a slice.
    A problem keeps what was decoded, so that the nodes the slice targets see its pool as invalid.
    """
    node_name: str | None = None
    selector: NodeSelector | None = None
    all_nodes = per_device = False
    try:
        node_name = string(spec.get("nodeName"), "spec.nodeName") or None
        all_nodes = bool(boolean(spec.get("allNodes"), "spec.allNodes"))
        per_device = bool(boolean(spec.get("perDeviceNodeSelection"), "spec.perDeviceNodeSelection"))
        raw_selector = spec.get("nodeSelector")
        if raw_selector is not None:
            selector = node_selector(raw_selector, "spec.nodeSelector")
            if len(selector.terms) != 1:
                problems.add("spec.nodeSelector.nodeSelectorTerms", _ONE_TERM)
    except FieldError as exc:
        problems.add_error(exc)
    if (node_name is not None) + (selector is not None) + all_nodes + per_device > 1:
        problems.add("spec", "at most one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection may be set")
    return node_name, selector, all_nodes, per_device


# --- devices ----------------------------------------------------------------------------------------


def _devices(raw: object, flat: bool, per_device: bool, problems: _Problems) -> tuple[Device, ...]:
    try:
        items = sequence(raw, "spec.devices")
    except FieldError as exc:
        problems.add_error(exc)
        return ()
    devices: list[Device] = []
    names: set[str] = set()
    restricted = False  # any device with taints or consumesCounters lowers the device limit
    for index, item in enumerate(items):
        try:
            device = _device(item, flat, per_device)
        except FieldError as exc:
            # Paths are built here, on failure only: the hot path formats no strings.
            problems.add(_join(f"spec.devices[{index}]", exc.path), exc.reason)
            if not isinstance(exc, _KeptDevice):
                continue
            device = exc.device
        if device.name in names:
            problems.add(f"spec.devices[{index}].name", f"duplicate device name {device.name!r}")
        names.add(device.name)
        if device.taints or device.consumes_counters:
            restricted = True
        devices.append(device)
    maximum = _MAX_DEVICES_WITH_TAINTS_OR_COUNTERS if restricted else _MAX_DEVICES
    if len(items) > maximum:
        why = " when a device has taints or consumesCounters" if restricted else ""
        problems.add("spec.devices", f"must have at most {maximum} items{why}")
    return tuple(devices)


class _KeptDevice(FieldError):
    """A device problem that leaves the device's own node fields usable, so the device is kept:
    the slice then still reaches the nodes it targets, which see its pool as invalid."""

    def __init__(self, path: str, reason: str, device: Device) -> None:
        super().__init__(path, reason)
        self.device = device


def _join(prefix: str, path: str) -> str:
    return f"{prefix}.{path}" if path else prefix


def _device(raw: object, flat: bool, per_device: bool) -> Device:
    """One device. Raises ``FieldError`` with a path relative to the device."""
    if raw.__class__ is not dict:
        raise FieldError("", "must be an object")
    name = raw.get("name")
    if name.__class__ is not str or not name:
        raise FieldError("name", "required" if not name else "must be a string")
    if not flat:
        return _device_body(name, raw, per_device)
    # v1beta1/v1alpha3 wrap everything but the name in ``basic``.
    basic = raw.get("basic")
    try:
        return _device_body(name, mapping(basic, ""), per_device)
    except _KeptDevice as exc:
        raise _KeptDevice(_join("basic", exc.path), exc.reason, exc.device) from None
    except FieldError as exc:
        raise FieldError(_join("basic", exc.path), exc.reason) from None


def _device_body(name: str, body: RawDict, per_device: bool) -> Device:
    get = body.get
    raw_attributes = get("attributes")
    attributes = _attributes(raw_attributes) if raw_attributes else {}
    raw_capacity = get("capacity")
    capacity = _capacity(raw_capacity) if raw_capacity else {}
    if len(attributes) + len(capacity) > _MAX_ATTRIBUTES_AND_CAPACITIES:
        raise FieldError("", "the total number of attributes and capacities must not exceed 32")
    allow_multiple = _flag(get("allowMultipleAllocations"), "allowMultipleAllocations")
    if not allow_multiple and capacity:
        for cap_name, cap in capacity.items():
            if cap.request_policy is not None:
                raise FieldError(
                    f"capacity[{cap_name}].requestPolicy",
                    "may only be set when allowMultipleAllocations is true",
                )

    node_name: str | None = None
    selector: NodeSelector | None = None
    all_nodes = False
    node_problem: tuple[str, str] | None = None
    raw_node_name, raw_selector, raw_all_nodes = get("nodeName"), get("nodeSelector"), get("allNodes")
    if raw_node_name is not None or raw_selector is not None or raw_all_nodes is not None:
        node_name = string(raw_node_name, "nodeName") or None
        all_nodes = _flag(raw_all_nodes, "allNodes")
        if raw_selector is not None:
            selector = node_selector(raw_selector, "nodeSelector")
            if len(selector.terms) != 1:
                node_problem = ("nodeSelector.nodeSelectorTerms", _ONE_TERM)
    chosen = (node_name is not None) + (selector is not None) + all_nodes
    if per_device:
        if chosen != 1:
            node_problem = ("", _PER_DEVICE_NEEDS_ONE)
    elif chosen:
        node_problem = ("", _PER_DEVICE_ONLY)

    raw_conditions, raw_failure = get("bindingConditions"), get("bindingFailureConditions")
    raw_counters, raw_taints = get("consumesCounters"), get("taints")
    device: Device = _new_device(
        name=sys_intern(name),
        attributes=attributes,
        capacity=capacity,
        consumes_counters=() if raw_counters is None else _consumes_counters(raw_counters),
        node_name=node_name,
        node_selector=selector,
        all_nodes=all_nodes,
        taints=() if raw_taints is None else _taints(raw_taints),
        binds_to_node=_flag(get("bindsToNode"), "bindsToNode"),
        binding_conditions=() if raw_conditions is None else _conditions(raw_conditions, "bindingConditions"),
        binding_failure_conditions=() if raw_failure is None else _conditions(raw_failure, "bindingFailureConditions"),
        allow_multiple_allocations=allow_multiple,
    )
    if node_problem is not None:
        raise _KeptDevice(node_problem[0], node_problem[1], device)
    return device


def _flag(raw: object, path: str) -> bool:
    """A ``*bool`` where unset and ``false`` mean the same."""
    if raw is None:
        return False
    if raw.__class__ is bool:
        return raw
    raise FieldError(path, "must be a boolean")


def _conditions(raw: object, path: str) -> tuple[str, ...]:
    conditions = strings(raw, path)
    if len(conditions) > _MAX_BINDING_CONDITIONS:
        raise FieldError(path, f"must have at most {_MAX_BINDING_CONDITIONS} items")
    return conditions


def _attributes(raw: object) -> dict[str, AttributeValue]:
    if raw.__class__ is not dict:
        raise FieldError("attributes", "must be an object")
    result: dict[str, AttributeValue] = {}
    intern = sys_intern
    for name, value in raw.items():
        # Fast path for the common well-formed shapes; anything else takes the careful route.
        if value.__class__ is dict and len(value) == 1 and name:
            if "string" in value:
                member = value["string"]
                if member.__class__ is str:
                    result[intern(name)] = member
                    continue
            elif "int" in value:
                member = value["int"]
                if member.__class__ is int and _INT64_MIN <= member <= _INT64_MAX:
                    result[intern(name)] = member
                    continue
            elif "bool" in value:
                member = value["bool"]
                if member.__class__ is bool:
                    result[intern(name)] = member
                    continue
            elif "version" in value:
                member = value["version"]
                if member.__class__ is str:
                    result[intern(name)] = parse_version(member)
                    continue
        if not name:
            raise FieldError("attributes", "attribute names must not be empty")
        result[intern(name)] = _attribute_value(value, f"attributes[{name}]")
    return result


def _attribute_value(raw: object, path: str) -> AttributeValue:
    """The careful decoding of one attribute value (explicit nulls, errors)."""
    if not isinstance(raw, dict):
        raise FieldError(path, "must be an object")
    # Tolerate explicit nulls for the unused members, as a client might write them.
    present = [(k, v) for k, v in raw.items() if v is not None]
    if len(present) != 1:
        raise FieldError(path, _ATTRIBUTE_KINDS)
    ((kind, value),) = present
    if kind in _LIST_KINDS:
        return _list_attribute(value, f"{path}.{kind}", _LIST_KINDS[kind])
    value_type = type(value)
    if kind == "string":
        if value_type is str:
            return value  # type: ignore[no-any-return]
    elif kind == "int":
        if value_type is int:
            if not _INT64_MIN <= value <= _INT64_MAX:
                raise FieldError(f"{path}.int", "must fit in a 64-bit signed integer")
            return value  # type: ignore[no-any-return]
    elif kind == "bool":
        if value_type is bool:
            return value  # type: ignore[no-any-return]
    elif kind == "version":
        if value_type is str:
            return parse_version(value)
    else:
        raise FieldError(path, _ATTRIBUTE_KINDS)
    raise FieldError(f"{path}.{kind}", _MEMBER_TYPES[kind])


def _list_attribute(raw: object, path: str, member: str) -> AttributeValue:
    """A list-typed attribute: a non-empty list of at most 48 values of the member's type."""
    if not isinstance(raw, list):
        raise FieldError(path, "must be a list")
    if not raw:
        raise FieldError(path, "must not be empty if specified")
    if len(raw) > _MAX_LIST_VALUES:
        raise FieldError(path, f"must have at most {_MAX_LIST_VALUES} items")
    values: list[Any] = [_attribute_value({member: item}, f"{path}[{i}]") for i, item in enumerate(raw)]
    return tuple(values)


@lru_cache(maxsize=8192)
def _plain_capacity(text: str) -> DeviceCapacity:
    """A capacity without request policy, shared by every device with the same value text."""
    return DeviceCapacity(quantity(text, ""))


def _capacity(raw: object) -> dict[str, DeviceCapacity]:
    if raw.__class__ is not dict:
        raise FieldError("capacity", "must be an object")
    result: dict[str, DeviceCapacity] = {}
    for name, value in raw.items():
        if not name:
            raise FieldError("capacity", "capacity names must not be empty")
        # v1alpha3 writes a bare quantity; later versions wrap it as {value, requestPolicy}. Both
        # are accepted in every version so a hand-written manifest in either style decodes.
        text = value.get("value") if value.__class__ is dict and len(value) == 1 else value
        if text.__class__ is str:
            try:
                result[sys_intern(name)] = _plain_capacity(text)
                continue
            except FieldError as exc:
                path = f"capacity[{name}]" if text is value else f"capacity[{name}].value"
                raise FieldError(path, exc.reason) from None
        result[sys_intern(name)] = _capacity_value(value, f"capacity[{name}]")
    return result


def _capacity_value(raw: object, path: str) -> DeviceCapacity:
    if isinstance(raw, dict):
        policy = raw.get("requestPolicy")
        return DeviceCapacity(
            quantity(raw.get("value"), f"{path}.value"),
            None if policy is None else _request_policy(policy, f"{path}.requestPolicy"),
        )
    return DeviceCapacity(quantity(raw, path))


def _request_policy(raw: object, path: str) -> CapacityRequestPolicy:
    body = mapping(raw, path)
    default = body.get("default")
    valid_values_path = f"{path}.validValues"
    valid_values = sequence(body.get("validValues"), valid_values_path)
    limit(valid_values, 10, valid_values_path)
    raw_range = body.get("validRange")
    range_path = f"{path}.validRange"
    range_body = mapping(raw_range, range_path)
    if raw_range is not None and range_body.get("min") is None:
        raise FieldError(f"{range_path}.min", "required")
    range_max, range_step = range_body.get("max"), range_body.get("step")
    return CapacityRequestPolicy(
        default=None if default is None else quantity(default, f"{path}.default"),
        valid_values=tuple(quantity(v, f"{valid_values_path}[{i}]") for i, v in enumerate(valid_values)),
        range_min=None if raw_range is None else quantity(range_body.get("min"), f"{range_path}.min"),
        range_max=None if range_max is None else quantity(range_max, f"{range_path}.max"),
        range_step=None if range_step is None else quantity(range_step, f"{range_path}.step"),
    )


def _counters(raw: object, path: str) -> dict[str, Quantity]:
    """``map[string]Counter`` where a Counter is ``{value: Quantity}``."""
    body = mapping(raw, path)
    limit(body, _MAX_COUNTERS, path)
    result: dict[str, Quantity] = {}
    for name, counter in body.items():
        counter_path = f"{path}[{name}]"
        result[sys_intern(name)] = quantity(mapping(counter, counter_path).get("value"), f"{counter_path}.value")
    return result


def _consumes_counters(raw: object) -> tuple[CounterConsumption, ...]:
    list_path = "consumesCounters"
    items = sequence(raw, list_path)
    limit(items, _MAX_CONSUMES_COUNTERS, list_path)
    result = []
    for index, item in enumerate(items):
        item_path = f"{list_path}[{index}]"
        body = mapping(item, item_path)
        counter_set = string(body.get("counterSet"), f"{item_path}.counterSet")
        if not counter_set:
            raise FieldError(f"{item_path}.counterSet", "required")
        result.append(
            CounterConsumption(sys_intern(counter_set), _counters(body.get("counters"), f"{item_path}.counters"))
        )
    return tuple(result)


def _taints(raw: object) -> tuple[DeviceTaint, ...]:
    list_path = "taints"
    items = sequence(raw, list_path)
    limit(items, _MAX_TAINTS, list_path)
    result = []
    for index, item in enumerate(items):
        item_path = f"{list_path}[{index}]"
        body = mapping(item, item_path)
        # Unknown effects are kept: they never block allocation (docs/semantics.md §9).
        result.append(
            DeviceTaint(
                key=string(body.get("key"), f"{item_path}.key"),
                effect=string(body.get("effect"), f"{item_path}.effect"),
                value=string(body.get("value"), f"{item_path}.value"),
                time_added=timestamp(body.get("timeAdded"), f"{item_path}.timeAdded"),
            )
        )
    return tuple(result)


# --- shared counters --------------------------------------------------------------------------------


def _counter_sets(raw: object, problems: _Problems) -> tuple[CounterSet, ...]:
    result: list[CounterSet] = []
    names: set[str] = set()
    try:
        items = sequence(raw, "spec.sharedCounters")
        limit(items, _MAX_COUNTER_SETS, "spec.sharedCounters")
        for index, item in enumerate(items):
            path = f"spec.sharedCounters[{index}]"
            body = mapping(item, path)
            name = string(body.get("name"), f"{path}.name")
            if not name:
                raise FieldError(f"{path}.name", "required")
            if name in names:
                raise FieldError(f"{path}.name", f"duplicate counter set name {name!r}")
            names.add(name)
            result.append(CounterSet(sys_intern(name), _counters(body.get("counters"), f"{path}.counters")))
    except FieldError as exc:
        problems.add_error(exc)
    return tuple(result)
