"""The core's own model of resource.k8s.io objects.

Every served API version (v1, v1beta2, v1beta1, v1alpha3) is decoded once, at ingest, by
``extender.core.convert`` into these immutable, slotted types; the allocator never sees raw dicts.
Field names follow resource.k8s.io/v1 in snake_case.

Conventions:
- tuples, not lists; mappings are built once and never changed after construction;
- strings that repeat across thousands of devices (driver, pool, attribute names) are interned;
- ``Device`` and ``ResourceSlice`` compare by identity (``eq=False``): a changed slice is a new
  object, which lets caches key on the object itself and be invalidated exactly when the store
  replaces it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, TypeAlias

from extender.core.quantity import Quantity
from extender.core.semver import Semver

__all__ = [
    "ALLOCATION_MODE_ALL",
    "ALLOCATION_MODE_EXACT_COUNT",
    "CONFIG_SOURCE_CLAIM",
    "CONFIG_SOURCE_CLASS",
    "MAX_DEVICES_PER_CLAIM",
    "AllocatedState",
    "AllocationConfig",
    "AllocationResult",
    "AttributeValue",
    "CapacityRequestPolicy",
    "ClaimConfig",
    "ConsumerRef",
    "CounterConsumption",
    "CounterSet",
    "Device",
    "DeviceCapacity",
    "DeviceClass",
    "DeviceConstraint",
    "DeviceID",
    "DeviceRequest",
    "DeviceResult",
    "DeviceTaint",
    "DeviceToleration",
    "ExactRequest",
    "Features",
    "NodeInfo",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "OpaqueConfig",
    "PoolRef",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "ResourceSlice",
    "SharedDeviceID",
    "UnparsedVersion",
]

ALLOCATION_MODE_EXACT_COUNT = "ExactCount"
ALLOCATION_MODE_ALL = "All"
CONFIG_SOURCE_CLASS = "FromClass"
CONFIG_SOURCE_CLAIM = "FromClaim"
#: AllocationResultsMaxSize / DeviceRequestsMaxSize.
MAX_DEVICES_PER_CLAIM = 32


@dataclass(frozen=True, slots=True)
class UnparsedVersion:
    """A ``version`` attribute whose text is not strict semver (added by helper CONV).

    The apiserver rejects such slices, so this only comes from stored state written by a laxer
    server. Upstream keeps the device; every CEL evaluation on it then fails with
    ``attribute <name>: parse semantic version: <error>`` (docs/semantics.md §14.1), while matchAttribute
    constraints compare the raw text. ``error`` is the parser's message.
    """

    text: str
    error: str


#: A device attribute value. ``bool`` must be told apart from ``int`` with ``type(v) is bool``.
#: A list-typed attribute (``ints``, ``bools``, ``strings``, ``versions``; KEP-5491, alpha in 1.36)
#: is a non-empty tuple of scalars of one type.
ScalarAttribute: TypeAlias = "bool | int | str | Semver | UnparsedVersion"
AttributeValue: TypeAlias = "bool | int | str | Semver | UnparsedVersion | tuple[ScalarAttribute, ...]"


class DeviceID(NamedTuple):
    """(driver, pool, device): unique within the cluster. A tuple so that hashing is cheap."""

    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


class SharedDeviceID(NamedTuple):
    """One share of a device that allows multiple allocations."""

    device: DeviceID
    share_id: str


# --- core/v1 NodeSelector -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """Terms are ORed; requirements inside a term are ANDed (see ``extender.core.nodeselector``)."""

    terms: tuple[NodeSelectorTerm, ...]


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What node matching needs of a Node: its name and labels (and the little else below)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    #: ``status.allocatable``'s extended resources (name -> whole units): a node advertising one
    #: serves it with a device plugin, not with DRA (``extender.core.extended``).
    allocatable: Mapping[str, int] = field(default_factory=dict)
    #: ``spec.taints`` of effect PreferNoSchedule, as (key, value): kube-scheduler's TaintToleration
    #: score weighs them; a filter that chooses the node itself must not choose against it.
    soft_taints: tuple[tuple[str, str], ...] = ()


# --- ResourceSlice --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CapacityRequestPolicy:
    """``requestPolicy`` of a consumable capacity (DRAConsumableCapacity)."""

    default: Quantity | None = None
    valid_values: tuple[Quantity, ...] = ()
    # validRange: min is required when the range is given.
    range_min: Quantity | None = None
    range_max: Quantity | None = None
    range_step: Quantity | None = None


@dataclass(frozen=True, slots=True)
class DeviceCapacity:
    value: Quantity
    request_policy: CapacityRequestPolicy | None = None


@dataclass(frozen=True, slots=True)
class CounterConsumption:
    """One ``consumesCounters`` entry of a device: how much it draws from one counter set."""

    counter_set: str
    counters: Mapping[str, Quantity]


@dataclass(frozen=True, slots=True)
class CounterSet:
    """One ``sharedCounters`` entry of a slice."""

    name: str
    counters: Mapping[str, Quantity]


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    key: str
    effect: str  # NoSchedule, NoExecute, None (others never block)
    value: str = ""
    time_added: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceTaintRule:
    """A DeviceTaintRule (resource.k8s.io/v1beta2, v1alpha3; gate DRADeviceTaintRules): ``taint``
    applies to every device its selector matches (a field left out matches everything)."""

    name: str
    driver: str | None = None
    pool: str | None = None
    device: str | None = None
    taint: DeviceTaint
    resource_version: str = ""


@dataclass(frozen=True, slots=True)
class DeviceToleration:
    key: str = ""
    operator: str = "Equal"  # Equal or Exists
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


@dataclass(frozen=True, slots=True, eq=False, kw_only=True)
class Device:
    """One device of a slice. Identity-compared: caches key on the object itself.

    ``attributes`` and ``capacity`` keep the names as written in the slice (``model`` or
    ``gpu.example.com/model``); lookups that need the driver's domain do it explicitly, as
    upstream does.
    """

    name: str
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    capacity: Mapping[str, DeviceCapacity] = field(default_factory=dict)
    consumes_counters: tuple[CounterConsumption, ...] = ()
    # Only with the slice's perDeviceNodeSelection:
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool = False
    taints: tuple[DeviceTaint, ...] = ()
    binds_to_node: bool = False
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    allow_multiple_allocations: bool = False


@dataclass(frozen=True, slots=True)
class PoolRef:
    name: str
    generation: int
    resource_slice_count: int


@dataclass(frozen=True, slots=True, eq=False, kw_only=True)
class ResourceSlice:
    """A ResourceSlice. ``invalid_reason`` is set (and ``devices`` may be partial) when the slice was
    malformed: the allocator then treats its pool as invalid instead of failing."""

    name: str
    driver: str
    pool: PoolRef
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool = False
    per_device_node_selection: bool = False
    devices: tuple[Device, ...] = ()
    shared_counters: tuple[CounterSet, ...] = ()
    uid: str = ""
    resource_version: str = ""
    invalid_reason: str | None = None


# --- DeviceClass ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OpaqueConfig:
    driver: str
    parameters: object  # raw JSON value, copied through unchanged


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceClass:
    name: str
    #: CEL expressions; ``None`` marks a selector without ``cel`` (an error when used).
    selectors: tuple[str | None, ...] = ()
    config: tuple[OpaqueConfig, ...] = ()
    extended_resource_name: str | None = None
    resource_version: str = ""
    #: ``metadata.creationTimestamp`` (RFC 3339): of two classes mapping one extended resource name,
    #: the newer serves it.
    creation_timestamp: str = ""
    #: v1alpha3: the nodes classic claims of this class may be allocated for (None: any).
    suitable_nodes: NodeSelector | None = None


# --- ResourceClaim --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ExactRequest:
    """An ``exactly`` request or one ``firstAvailable`` subrequest (then ``admin_access`` is None).

    ``name`` is the request name for ``exactly`` and the subrequest name for a subrequest.
    ``count`` is already defaulted (1 for ExactCount when unset).
    """

    name: str
    device_class_name: str
    selectors: tuple[str | None, ...] = ()
    allocation_mode: str = ALLOCATION_MODE_EXACT_COUNT
    count: int = 1
    admin_access: bool | None = None
    tolerations: tuple[DeviceToleration, ...] = ()
    capacity_requests: Mapping[str, Quantity] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceRequest:
    """One ``spec.devices.requests[]`` entry: exactly one of ``exactly`` / ``first_available``."""

    name: str
    exactly: ExactRequest | None = None
    first_available: tuple[ExactRequest, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceConstraint:
    requests: tuple[str, ...] = ()
    match_attribute: str | None = None
    distinct_attribute: str | None = None


@dataclass(frozen=True, slots=True)
class ClaimConfig:
    requests: tuple[str, ...]
    opaque: OpaqueConfig | None


@dataclass(frozen=True, slots=True)
class AllocationConfig:
    source: str  # FromClass | FromClaim
    requests: tuple[str, ...]
    opaque: OpaqueConfig | None


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceResult:
    """One ``status.allocation.devices.results[]`` entry."""

    request: str  # "req" or "req/sub"
    driver: str
    pool: str
    device: str
    admin_access: bool = False
    tolerations: tuple[DeviceToleration, ...] = ()
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    share_id: str | None = None
    consumed_capacity: Mapping[str, Quantity] | None = None

    @property
    def device_id(self) -> DeviceID:
        return DeviceID(self.driver, self.pool, self.device)


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocationResult:
    devices: tuple[DeviceResult, ...]
    config: tuple[AllocationConfig, ...] = ()
    node_selector: NodeSelector | None = None
    allocation_timestamp: str | None = None
    #: v1alpha3 (classic DRA): the driver whose controller made the allocation ("" for structured).
    controller: str = ""


@dataclass(frozen=True, slots=True)
class ConsumerRef:
    resource: str
    name: str
    uid: str
    api_group: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceClaim:
    namespace: str
    name: str
    uid: str = ""
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[DeviceConstraint, ...] = ()
    config: tuple[ClaimConfig, ...] = ()
    allocation: AllocationResult | None = None
    reserved_for: tuple[ConsumerRef, ...] = ()
    deletion_timestamp: str | None = None
    resource_version: str = ""
    #: The served version the claim came in ("resource.k8s.io/v1", ...): results are encoded in it.
    api_version: str = "resource.k8s.io/v1"
    #: v1alpha3 (classic DRA, 1.26-1.31): the driver whose control-plane controller allocates this
    #: claim ("" for structured parameters: the scheduler allocates). Such a claim is never given
    #: to the structured allocator.
    controller: str = ""
    #: v1alpha3: the driver was asked to deallocate (``status.deallocationRequested``).
    deallocation_requested: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def classic(self) -> bool:
        """Whether a driver's controller allocates this claim (``spec.controller``), or did."""
        return bool(self.controller) or (self.allocation is not None and bool(self.allocation.controller))


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceClaimTemplate:
    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    #: The claim spec, decoded; instantiate with ``dataclasses.replace`` and a name.
    spec: ResourceClaim
    api_version: str = "resource.k8s.io/v1"


@dataclass(frozen=True, slots=True, kw_only=True)
class PodSchedulingContext:
    """resource.k8s.io/v1alpha3 (classic DRA): the negotiation for one pod, named after it."""

    namespace: str
    name: str
    uid: str = ""
    #: The pod that controls it (``metadata.ownerReferences`` with ``controller: true``), or "".
    owner_uid: str = ""
    #: Set by the scheduler: the node the pod should run on, and the nodes it might run on.
    selected_node: str = ""
    potential_nodes: tuple[str, ...] = ()
    #: Set by the drivers: per pod claim name (``pod.spec.resourceClaims[].name``), nodes their
    #: controller cannot allocate that claim for.
    unsuitable_nodes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    resource_version: str = ""


# --- allocator feature switches ---------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Features:
    """Allocator-level features (docs/semantics.md §3.1); the default enables everything, as 1.36 with all DRA gates."""

    admin_access: bool = True
    prioritized_list: bool = True
    device_taints: bool = True
    partitionable_devices: bool = True
    consumable_capacity: bool = True
    device_binding_and_status: bool = True


# --- what other claims already hold -----------------------------------------------------------


@dataclass(slots=True)
class AllocatedState:
    """Devices in use by claims other than the ones being allocated (docs/semantics.md §3.3).

    ``devices``: exclusively allocated device IDs. ``shared_ids``: shares of devices that allow
    multiple allocations. ``consumed_capacity``: per shared device, the summed ``consumedCapacity``
    of its shares.
    """

    devices: set[DeviceID] = field(default_factory=set)
    shared_ids: set[SharedDeviceID] = field(default_factory=set)
    consumed_capacity: dict[DeviceID, dict[str, Quantity]] = field(default_factory=dict)

    def add_allocation(self, allocation: AllocationResult) -> None:
        """Count one claim's allocation, the way the scheduler's claim tracker does (docs/semantics.md §13.2)."""
        for result in allocation.devices:
            if result.admin_access:
                continue  # admin access does not consume the device
            device_id = result.device_id
            if result.share_id is not None:
                self.shared_ids.add(SharedDeviceID(device_id, result.share_id))
                if result.consumed_capacity:
                    totals = self.consumed_capacity.setdefault(device_id, {})
                    for name, amount in result.consumed_capacity.items():
                        previous = totals.get(name)
                        totals[name] = amount if previous is None else previous + amount
            else:
                self.devices.add(device_id)
