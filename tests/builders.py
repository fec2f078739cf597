"""Builders for core model objects, for tests and benchmarks.

Small functions that build ``extender.core.model`` objects programmatically with upstream's fixed
names (``node-1``, ``driver-a``, ``pool-1``, ``device-1``, ``class-a``, ``claim-0``, ``req-0``),
so a test states only what matters to it::

    s = node_slice(NODE, [device("device-1", attributes={"model": "a100"}, capacity={"memory": "40Gi"})])
    c = claim(CLAIM, request(REQUEST, CLASS, count=2), constraints=[match_attribute("driver-a/model")])

``synthetic_cluster`` builds a larger, realistic GPU-like cluster, deterministic for a seed, for
property tests and benchmarks; ``slice_manifest`` turns a built slice back into the v1 JSON a
watch would deliver (for ingest benchmarks and cluster generators).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from extender.core.model import (
    ALLOCATION_MODE_EXACT_COUNT,
    AllocatedState,
    AttributeValue,
    ClaimConfig,
    Device,
    DeviceCapacity,
    DeviceClass,
    DeviceConstraint,
    DeviceID,
    DeviceRequest,
    DeviceToleration,
    ExactRequest,
    NodeInfo,
    PoolRef,
    ResourceClaim,
    ResourceSlice,
)
from extender.core.quantity import Quantity
from extender.core.semver import Semver

__all__ = [
    "CLAIM",
    "CLASS",
    "DEVICE",
    "DRIVER",
    "GPU_DRIVER",
    "NAMESPACE",
    "NODE",
    "POOL",
    "REQUEST",
    "allocated",
    "claim",
    "device",
    "device_class",
    "first_available",
    "match_attribute",
    "node",
    "node_slice",
    "request",
    "slice_manifest",
    "subrequest",
    "synthetic_cluster",
    "version",
]

NODE = "node-1"
DRIVER = "driver-a"
POOL = "pool-1"
DEVICE = "device-1"
CLASS = "class-a"
CLAIM = "claim-0"
REQUEST = "req-0"
NAMESPACE = "default"

#: The driver of the synthetic GPU cluster; bench/allocator.py's selectors S1..S5 are written for it.
GPU_DRIVER = "gpu.example.com"

CapacityInput = DeviceCapacity | Quantity | str | int


# --- single objects -------------------------------------------------------------------------------


def version(text: str) -> Semver:
    """A version attribute value (``{"version": text}`` in the API)."""
    return Semver.parse(text)


def _capacity(value: CapacityInput) -> DeviceCapacity:
    if isinstance(value, DeviceCapacity):
        return value
    if isinstance(value, Quantity):
        return DeviceCapacity(value=value)
    if isinstance(value, int):
        return DeviceCapacity(value=Quantity.from_int(value))
    return DeviceCapacity(value=Quantity.parse(value))


def device(
    name: str = DEVICE,
    *,
    attributes: Mapping[str, AttributeValue] | None = None,
    capacity: Mapping[str, CapacityInput] | None = None,
    **extra: Any,
) -> Device:
    """A device; capacities may be given as quantity strings ("40Gi"), ints or Quantity objects.

    ``extra`` passes any other ``Device`` field (taints, consumes_counters, node_name, ...).
    """
    return Device(
        name=name,
        attributes=dict(attributes or {}),
        capacity={key: _capacity(value) for key, value in (capacity or {}).items()},
        **extra,
    )


def node_slice(
    node: str | None = NODE,
    devices: Iterable[Device | str] = (),
    *,
    driver: str = DRIVER,
    pool: str = POOL,
    name: str | None = None,
    generation: int = 1,
    slice_count: int = 1,
    **extra: Any,
) -> ResourceSlice:
    """A slice of ``driver``'s ``pool`` published for one node (``node=None``: pass the node
    selection in ``extra``, e.g. ``all_nodes=True``). Devices may be given by name."""
    built = tuple(device(d) if isinstance(d, str) else d for d in devices)
    return ResourceSlice(
        name=name or f"{node or 'cluster'}-{driver}-{pool}",
        driver=driver,
        pool=PoolRef(name=pool, generation=generation, resource_slice_count=slice_count),
        node_name=node,
        devices=built,
        **extra,
    )


def device_class(name: str = CLASS, *expressions: str, **extra: Any) -> DeviceClass:
    """A DeviceClass whose selectors are the given CEL expressions."""
    return DeviceClass(name=name, selectors=tuple(expressions), **extra)


def subrequest(
    name: str,
    class_name: str = CLASS,
    count: int = 1,
    *,
    selectors: Sequence[str] = (),
    mode: str = ALLOCATION_MODE_EXACT_COUNT,
    admin_access: bool | None = None,
    tolerations: Sequence[DeviceToleration] = (),
    capacity: Mapping[str, Quantity | str] | None = None,
) -> ExactRequest:
    """An ``exactly`` body or a ``firstAvailable`` entry."""
    return ExactRequest(
        name=name,
        device_class_name=class_name,
        selectors=tuple(selectors),
        allocation_mode=mode,
        count=count,
        admin_access=admin_access,
        tolerations=tuple(tolerations),
        capacity_requests=None
        if capacity is None
        else {k: v if isinstance(v, Quantity) else Quantity.parse(v) for k, v in capacity.items()},
    )


def request(
    name: str = REQUEST,
    class_name: str = CLASS,
    count: int = 1,
    *,
    selectors: Sequence[str] = (),
    mode: str = ALLOCATION_MODE_EXACT_COUNT,
    admin_access: bool | None = None,
    tolerations: Sequence[DeviceToleration] = (),
    capacity: Mapping[str, Quantity | str] | None = None,
) -> DeviceRequest:
    """A request with an ``exactly`` body."""
    exact = subrequest(
        name,
        class_name,
        count,
        selectors=selectors,
        mode=mode,
        admin_access=admin_access,
        tolerations=tolerations,
        capacity=capacity,
    )
    return DeviceRequest(name=name, exactly=exact)


def first_available(name: str, *subrequests: ExactRequest) -> DeviceRequest:
    """A request with a prioritized list of subrequests (build them with ``subrequest``)."""
    return DeviceRequest(name=name, first_available=tuple(subrequests))


def match_attribute(attribute: str, *requests: str) -> DeviceConstraint:
    """A matchAttribute constraint; no request names = every request of the claim."""
    return DeviceConstraint(requests=tuple(requests), match_attribute=attribute)


def claim(
    name: str = CLAIM,
    *requests: DeviceRequest,
    constraints: Sequence[DeviceConstraint] = (),
    namespace: str = NAMESPACE,
    config: Sequence[ClaimConfig] = (),
    **extra: Any,
) -> ResourceClaim:
    """An unallocated claim with the given requests (default: one ``req-0`` of ``class-a``)."""
    return ResourceClaim(
        namespace=namespace,
        name=name,
        uid=f"uid-{namespace}-{name}",
        requests=tuple(requests) if requests else (request(),),
        constraints=tuple(constraints),
        config=tuple(config),
        **extra,
    )


def node(name: str = NODE, **labels: str) -> NodeInfo:
    """A node; labels carry ``kubernetes.io/hostname`` unless given."""
    return NodeInfo(name=name, labels={"kubernetes.io/hostname": name, **labels})


def allocated(*device_ids: str | DeviceID) -> AllocatedState:
    """Devices held exclusively by other claims, as "driver/pool/device" strings or DeviceIDs."""
    state = AllocatedState()
    for item in device_ids:
        if isinstance(item, DeviceID):
            state.devices.add(item)
        else:
            driver, pool, dev = item.split("/")
            state.devices.add(DeviceID(driver, pool, dev))
    return state


# --- a synthetic GPU cluster ------------------------------------------------------------------------

#: model -> (memory choices, architecture). Loosely after real datacenter GPUs.
_GPU_MODELS: dict[str, tuple[tuple[str, ...], str]] = {
    "a100": (("40Gi", "80Gi"), "Ampere"),
    "h100": (("80Gi",), "Hopper"),
    "l4": (("24Gi",), "Ada"),
    "t4": (("16Gi",), "Turing"),
}
_DRIVER_VERSIONS = ("535.104.5", "550.54.15", "550.90.7", "560.35.3")


def _gpu(rng: random.Random, node_index: int, index: int, devices_per_node: int) -> Device:
    model = rng.choice(sorted(_GPU_MODELS))
    memories, architecture = _GPU_MODELS[model]
    # Two NUMA nodes, each with its own PCIe root, devices split evenly: topology-aware selectors
    # and matchAttribute constraints then have something real to group on.
    numa = 0 if index < (devices_per_node + 1) // 2 else 1
    attributes: dict[str, AttributeValue] = {
        "model": model,
        "architecture": architecture,
        "driverVersion": version(rng.choice(_DRIVER_VERSIONS)),
        "index": index,
        "numaNode": numa,
        "pcieRoot": f"pci0000:{numa * 0x40:02x}",
        "uuid": f"GPU-{node_index:05d}-{index:03d}-{rng.getrandbits(32):08x}",
        "productName": f"Example {model.upper()} {architecture}",
        "brand": "Example",
        "healthy": True,
    }
    return device(
        f"gpu-{index}",
        attributes=attributes,
        capacity={"memory": rng.choice(memories), "cores": rng.choice((64, 108, 132))},
    )


def synthetic_cluster(
    nodes: int,
    devices_per_node: int,
    *,
    drivers: Sequence[str] = (GPU_DRIVER,),
    seed: int = 0,
) -> tuple[list[ResourceSlice], list[DeviceClass], list[NodeInfo]]:
    """A cluster of ``nodes`` nodes (``node-00000``, ...), each with one single-slice pool per driver
    holding ``devices_per_node`` GPU-like devices (model, architecture, driverVersion semver,
    index, numaNode, pcieRoot, uuid; capacities memory and cores).

    Returns (slices, classes, node infos); one DeviceClass per driver, named after it, selecting
    ``device.driver == "<driver>"``. The same arguments always give equal objects.
    """
    rng = random.Random(seed)
    slices: list[ResourceSlice] = []
    node_infos: list[NodeInfo] = []
    for n in range(nodes):
        name = f"node-{n:05d}"
        node_infos.append(
            NodeInfo(
                name=name,
                labels={
                    "kubernetes.io/hostname": name,
                    "topology.kubernetes.io/zone": f"zone-{n % 3}",
                },
            )
        )
        for driver in drivers:
            devices = [_gpu(rng, n, i, devices_per_node) for i in range(devices_per_node)]
            slices.append(
                node_slice(
                    name,
                    devices,
                    driver=driver,
                    pool=name,
                    name=f"{name}-{driver}",
                    uid=f"uid-{name}-{driver}",
                    resource_version=str(1000 + len(slices)),
                )
            )
    classes = [device_class(driver, f'device.driver == "{driver}"') for driver in drivers]
    return slices, classes, node_infos


# --- back to API JSON -------------------------------------------------------------------------------


def _attribute_json(value: AttributeValue) -> dict[str, Any]:
    if type(value) is bool:
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, str):
        return {"string": value}
    return {"version": str(value)}


def _device_json(d: Device) -> dict[str, Any]:
    body: dict[str, Any] = {"name": d.name}
    if d.attributes:
        body["attributes"] = {k: _attribute_json(v) for k, v in d.attributes.items()}
    if d.capacity:
        body["capacity"] = {k: {"value": str(c.value)} for k, c in d.capacity.items()}
    return body


def slice_manifest(s: ResourceSlice) -> dict[str, Any]:
    """The resource.k8s.io/v1 JSON of a slice built here (node name / allNodes, devices with
    attributes and capacity values; other device fields are not encoded)."""
    spec: dict[str, Any] = {
        "driver": s.driver,
        "pool": {
            "name": s.pool.name,
            "generation": s.pool.generation,
            "resourceSliceCount": s.pool.resource_slice_count,
        },
        "devices": [_device_json(d) for d in s.devices],
    }
    if s.node_name:
        spec["nodeName"] = s.node_name
    if s.all_nodes:
        spec["allNodes"] = True
    metadata: dict[str, Any] = {"name": s.name}
    if s.uid:
        metadata["uid"] = s.uid
    if s.resource_version:
        metadata["resourceVersion"] = s.resource_version
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": metadata, "spec": spec}
