"""DRA extended resources (KEP-5004; beta and on by default in 1.36, GA in 1.37).

A container may ask for devices the way it asks for a device plugin's resource: ``example.com/gpu: 2``
in ``resources.requests``. When a DeviceClass maps that name (``spec.extendedResourceName``, or the
implicit ``deviceclass.resource.kubernetes.io/<class>`` every class has) and the node does not
advertise the resource itself, the scheduler serves it with devices: one ResourceClaim per pod, made
by the scheduler at bind time, with one ``ExactCount`` request per (container, resource). This module
is the pure part of that, as the in-tree plugin does it (``extendeddynamicresources.go`` in
kube-scheduler 1.36; docs/semantics.md §16):

- ``ExtendedClasses``: resource name -> DeviceClass name, with upstream's rule for two classes that
  map the same name (the newer wins, equal ages the lower name);
- ``pod_demand``: what a pod asks for, per resource and container (requests, or limits where the
  request is unset as API defaulting would make it; init, sidecar and regular containers);
- ``ExtendedDemand.on_node``: the resources DRA serves on a node (those it does not advertise in
  ``status.allocatable``), or why the node can never fit;
- ``requests_and_mappings``: the claim's requests (``container-<i>-request-<j>``) and the pod's
  ``status.extendedResourceClaimStatus.requestMappings``, init containers reusing the devices of
  the sidecars and containers that start after them;
- ``special_claim`` and ``claim_object``: the claim as the allocator sees it and as it is created.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from extender.core.model import ALLOCATION_MODE_EXACT_COUNT, DeviceClass, DeviceRequest, ExactRequest, ResourceClaim
from extender.core.quantity import Quantity, QuantityParseError

__all__ = [
    "CANNOT_FIT_RESOURCE",
    "CANNOT_SCHEDULE_EXTENDED_CLAIM",
    "DEVICE_CLASS_PREFIX",
    "EXTENDED_CLAIM_ANNOTATION",
    "ContainerDemand",
    "ExtendedClasses",
    "ExtendedDemand",
    "RequestMapping",
    "claim_object",
    "is_dra_extended_resource_name",
    "pod_demand",
    "requests_and_mappings",
    "scalar_allocatable",
    "special_claim",
]

#: The implicit extended resource name of every DeviceClass: this prefix and the class name.
DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
#: Marks the claim the scheduler made for a pod's extended resources.
EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
#: The in-tree plugin's reason for a node lacking an extended resource no class maps.
CANNOT_FIT_RESOURCE = "cannot fit resource"
#: ... and for a pod whose extended-resource claim an earlier attempt left behind.
CANNOT_SCHEDULE_EXTENDED_CLAIM = "cannot schedule extended resource claim"
#: ResourceClaim limits: requests per claim.
MAX_REQUESTS = 32


def is_dra_extended_resource_name(name: str) -> bool:
    """``schedutil.IsDRAExtendedResourceName``: an extended resource name (qualified, with a domain
    outside ``kubernetes.io``, not ``requests.*``) or an implicit DeviceClass name."""
    if name.startswith(DEVICE_CLASS_PREFIX):
        return True
    if "/" not in name or name.startswith("requests."):
        return False
    domain = name.partition("/")[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def scalar_allocatable(raw_allocatable: object) -> dict[str, int]:
    """A Node's ``status.allocatable`` reduced to its extended resources (name -> whole units;
    a value that is no quantity counts as 0, as the API server never lets one through)."""
    if not isinstance(raw_allocatable, Mapping):
        return {}
    out: dict[str, int] = {}
    for name, value in raw_allocatable.items():
        if isinstance(name, str) and is_dra_extended_resource_name(name):
            out[name] = _whole(value) or 0
    return out


def _whole(value: object) -> int | None:
    """A quantity as an int64 (``Quantity.AsInt64``); None when it is not a whole number."""
    try:
        quantity = Quantity.from_json(value)
    except (QuantityParseError, ValueError, TypeError):
        return None
    return quantity.as_int64()


class ExtendedClasses:
    """Extended resource name -> DeviceClass name, over every class.

    Two classes naming the same ``extendedResourceName``: the newer (``creationTimestamp``) wins, on
    equal times the lower name (``extendedresourcecache.go``). Upstream builds the map from events,
    so which classes keep their implicit name there depends on the order the events came in; here
    every class keeps its implicit name, as the API documents."""

    __slots__ = ("by_resource",)

    def __init__(self, classes: Iterable[DeviceClass]) -> None:
        explicit: dict[str, DeviceClass] = {}
        by_resource: dict[str, str] = {}
        for device_class in classes:
            by_resource[DEVICE_CLASS_PREFIX + device_class.name] = device_class.name
            name = device_class.extended_resource_name
            if not name:
                continue
            current = explicit.get(name)
            if current is None or _newer(device_class, current):
                explicit[name] = device_class
        by_resource.update((name, device_class.name) for name, device_class in explicit.items())
        self.by_resource = by_resource

    def __bool__(self) -> bool:
        return bool(self.by_resource)

    def get(self, resource: str) -> str | None:
        return self.by_resource.get(resource)


def _newer(candidate: DeviceClass, current: DeviceClass) -> bool:
    # RFC 3339 times of the API server (same format, UTC) order as strings
    if candidate.creation_timestamp != current.creation_timestamp:
        return candidate.creation_timestamp > current.creation_timestamp
    return candidate.name < current.name


@dataclass(frozen=True, slots=True)
class ContainerDemand:
    """One container's request for one extended resource."""

    #: Position in ``initContainers`` followed by ``containers``.
    index: int
    name: str
    #: Regular containers and sidecars (init containers with ``restartPolicy: Always``) run for the
    #: pod's lifetime; other init containers run before them and may reuse their devices.
    long_lived: bool
    #: Position of the resource among the container's sorted request names (cpu and memory too).
    resource_index: int
    count: int


@dataclass(frozen=True, slots=True)
class RequestMapping:
    """One ``status.extendedResourceClaimStatus.requestMappings`` entry."""

    container_name: str
    resource_name: str
    request_name: str

    def to_json(self) -> dict[str, str]:
        return {
            "containerName": self.container_name,
            "resourceName": self.resource_name,
            "requestName": self.request_name,
        }


@dataclass(frozen=True, slots=True)
class ExtendedDemand:
    """What a pod asks for through extended resources: per resource name (sorted), the containers'
    requests; and which DeviceClass serves each mapped one. Only pods asking for at least one
    resource a class maps have a demand."""

    #: Resource name -> its containers' requests, in container order; every DRA-style extended
    #: resource the pod asks for, mapped or not.
    by_resource: Mapping[str, tuple[ContainerDemand, ...]]
    #: Mapped resource name -> DeviceClass name.
    classes: Mapping[str, str]
    #: ``spec key`` of the claim where no node advertises any of the resources (the shape key).
    key: bytes = field(default=b"", compare=False)
    #: The claim's requests and the pod's request mappings on such a node (``all_served``),
    #: made once by ``pod_demand``.
    requests: tuple[DeviceRequest, ...] = field(default=(), compare=False)
    mappings: tuple[RequestMapping, ...] = field(default=(), compare=False)

    def on_node(self, allocatable: Mapping[str, int]) -> tuple[str, ...] | None:
        """The mapped resources DRA serves on a node with these extended resources in
        ``status.allocatable``: those it does not advertise (missing or 0); a node advertising one
        serves it with its device plugin. None when the node cannot run the pod at all: it lacks a
        resource no class maps (``CANNOT_FIT_RESOURCE``)."""
        served: list[str] = []
        for resource in self.by_resource:
            advertised = allocatable.get(resource)
            if resource in self.classes and not advertised:
                served.append(resource)
            elif advertised is None:
                return None
        return tuple(served)

    def unmapped_ok(self) -> bool:
        """Whether a node advertising none of the pod's resources can run it: only if every one
        of them is mapped (a resource nobody maps and the node lacks: ``CANNOT_FIT_RESOURCE``)."""
        return len(self.classes) == len(self.by_resource)

    def all_served(self) -> tuple[str, ...]:
        """The mapped resources, on a node that advertises none of the pod's resources."""
        return tuple(r for r in self.by_resource if r in self.classes)

    def touches(self, allocatable: Mapping[str, int]) -> bool:
        """Whether a node's allocatable names any of the pod's resources (then ``on_node`` differs
        from ``all_served``); false for nearly every node, cheaply."""
        return bool(allocatable) and not allocatable.keys().isdisjoint(self.by_resource)


def _containers(spec: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], bool]]:
    out: list[tuple[Mapping[str, Any], bool]] = []
    for container in spec.get("initContainers") or []:
        if isinstance(container, Mapping):
            out.append((container, container.get("restartPolicy") == "Always"))
    for container in spec.get("containers") or []:
        if isinstance(container, Mapping):
            out.append((container, True))
    return out


def _requests(container: Mapping[str, Any]) -> dict[str, object]:
    """A container's resource requests; a limit stands for an unset request of the same resource,
    as API defaulting makes it (manifests of the embedded cluster are not defaulted)."""
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        return {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    merged: dict[str, object] = {}
    if isinstance(limits, Mapping):
        merged.update((str(k), v) for k, v in limits.items())
    if isinstance(requests, Mapping):
        merged.update((str(k), v) for k, v in requests.items())
    return merged


def _asks_for_extended(spec: Mapping[str, Any]) -> bool:
    """Whether any container names a resource with a domain (``x/y``) in its requests or limits: a
    cheap test every filter makes before ``pod_demand`` looks closer."""
    for group in ("containers", "initContainers"):
        for container in spec.get(group) or ():
            resources = container.get("resources") if isinstance(container, Mapping) else None
            if not resources or not isinstance(resources, Mapping):
                continue
            for kind in ("requests", "limits"):
                names = resources.get(kind)
                if names and isinstance(names, Mapping) and any("/" in name for name in names):
                    return True
    return False


def pod_demand(pod: Mapping[str, Any], classes: ExtendedClasses) -> ExtendedDemand | None:
    """The pod's extended-resource demand, or None when it asks for no resource a class maps (then
    extended resources are none of DRA's business for this pod)."""
    if not classes:
        return None
    spec = pod.get("spec") or {}
    if not _asks_for_extended(spec):
        return None  # nearly every pod: no resource name with a domain at all
    by_resource: dict[str, list[ContainerDemand]] = {}
    mapped = False
    for index, (container, long_lived) in enumerate(_containers(spec)):
        requests = _requests(container)
        names = sorted(requests)
        for position, resource in enumerate(names):
            if not is_dra_extended_resource_name(resource):
                continue
            count = _whole(requests[resource])
            if not count or count < 0:
                continue  # 0, or not a whole number: nothing to allocate (upstream skips it)
            mapped = mapped or classes.get(resource) is not None
            by_resource.setdefault(resource, []).append(
                ContainerDemand(index, str(container.get("name") or ""), long_lived, position, count)
            )
    if not mapped:
        return None
    ordered = {resource: tuple(by_resource[resource]) for resource in sorted(by_resource)}
    mapped_classes = {r: c for r in ordered if (c := classes.get(r)) is not None}
    demand = ExtendedDemand(ordered, mapped_classes)
    claim_requests, mappings = requests_and_mappings(demand, demand.all_served())
    # Everything ``on_node`` reads is in the key: pods that differ in any of it must not share
    # remembered per-node verdicts (the resource names decide which nodes serve them by plugin).
    key = orjson.dumps(
        [
            [[r.name, r.exactly.device_class_name, r.exactly.count] for r in claim_requests if r.exactly is not None],
            list(ordered),
            sorted(mapped_classes.items()),
        ]
    )
    return ExtendedDemand(ordered, mapped_classes, b"extended-resources:" + key, claim_requests, mappings)


def requests_and_mappings(
    demand: ExtendedDemand, served: Sequence[str]
) -> tuple[tuple[DeviceRequest, ...], tuple[RequestMapping, ...]]:
    """The claim's requests for the ``served`` resources and the pod's request mappings
    (``createRequestsAndMappings``): per resource, one request per long-lived container that asks
    for it; an init container reuses the devices of the long-lived containers from its own position
    on, as many as it needs, and asks for the rest in a request of its own, of which only the
    largest per resource is kept (the init containers run one after the other). Requests are sorted
    by name as strings, the mappings stay in resource, then container order."""
    requests: list[DeviceRequest] = []
    mappings: list[RequestMapping] = []
    for resource in sorted(served):
        class_name = demand.classes[resource]
        containers = demand.by_resource.get(resource, ())
        long_lived: dict[int, DeviceRequest] = {}
        for item in containers:
            if item.long_lived:
                request = _request(item, class_name, item.count)
                long_lived[item.index] = request
                requests.append(request)
                mappings.append(RequestMapping(item.name, resource, request.name))
        short: list[tuple[RequestMapping, ...]] = []
        kept: DeviceRequest | None = None
        replaced: list[str] = []
        for item in containers:
            if item.long_lived:
                continue
            reused: list[RequestMapping] = []
            total = 0
            for index in sorted(long_lived):
                if total >= item.count:
                    break
                if index < item.index:
                    continue
                request = long_lived[index]
                assert request.exactly is not None
                total += request.exactly.count
                reused.append(RequestMapping(item.name, resource, request.name))
            if total < item.count:
                own = _request(item, class_name, item.count - total)
                reused.append(RequestMapping(item.name, resource, own.name))
                assert own.exactly is not None
                if kept is None or kept.exactly is None or kept.exactly.count < own.exactly.count:
                    if kept is not None:
                        replaced.append(kept.name)
                    kept = own
                else:
                    replaced.append(own.name)
            short.append(tuple(reused))
        if kept is not None:
            requests.append(kept)
        for group in short:
            mappings.extend(
                RequestMapping(m.container_name, m.resource_name, kept.name)
                if kept is not None and m.request_name in replaced
                else m
                for m in group
            )
    requests.sort(key=lambda r: r.name)
    return tuple(requests), tuple(mappings)


def _request(item: ContainerDemand, class_name: str, count: int) -> DeviceRequest:
    name = f"container-{item.index}-request-{item.resource_index}"
    return DeviceRequest(
        name=name,
        exactly=ExactRequest(
            name=name, device_class_name=class_name, allocation_mode=ALLOCATION_MODE_EXACT_COUNT, count=count
        ),
    )


def special_claim(namespace: str, name: str, requests: Sequence[DeviceRequest]) -> ResourceClaim:
    """The claim as the allocator sees it, under ``name`` (a key no real claim has, until it is
    created)."""
    return ResourceClaim(namespace=namespace, name=name, requests=tuple(requests))


def claim_object(
    pod: Mapping[str, Any], requests: Sequence[DeviceRequest], *, api_version: str = "resource.k8s.io/v1"
) -> dict[str, Any]:
    """The ResourceClaim bind creates (``createExtendedResourceClaimInAPI``): ``generateName``
    ``<pod>-extended-resources-``, the annotation, the pod as controller owner (no labels, no
    ``blockOwnerDeletion``, no finalizer: the finalizer is the usual separate update)."""
    meta = pod.get("metadata") or {}
    return {
        "apiVersion": api_version,
        "kind": "ResourceClaim",
        "metadata": {
            "generateName": f"{meta.get('name')}-extended-resources-",
            "namespace": meta.get("namespace") or "default",
            "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta.get("name"),
                    "uid": meta.get("uid"),
                    "controller": True,
                }
            ],
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": request.name,
                        "exactly": {
                            "deviceClassName": request.exactly.device_class_name,
                            "allocationMode": ALLOCATION_MODE_EXACT_COUNT,
                            "count": request.exactly.count,
                        },
                    }
                    for request in requests
                    if request.exactly is not None
                ]
            }
        },
    }
