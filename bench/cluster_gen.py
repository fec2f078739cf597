"""Synthetic DRA clusters as manifests for ``dra-extender serve --cluster``, load tests and benchmarks.

Run from the repository root::

    python -m bench.cluster_gen --nodes 500 --devices 10 --pods 2000 --out /tmp/cluster.json
    python -m bench.cluster_gen --nodes 50 --partitionable 0.2 --network-pools 5 --out /tmp/c.yaml
    python -m bench.cluster_gen --nodes 5000 --out /tmp/cluster-dir/      # one file per kind

What a cluster holds (everything deterministic for a ``--seed``: names, UIDs, attributes):

- Nodes ``node-00000``... with hostname, zone (``zone-0..2``) and rack (``topology.example.com/rack``) labels.
- Per node a ``gpu.example.com`` slice of ``--devices`` GPUs (more slices past 128 GPUs): type, model,
  architecture, driverVersion (semver), index, numaNode, pcieRoot (also as the standard
  ``resource.kubernetes.io/pcieRoot``), uuid, productName; capacities memory and cores. A
  ``--partitionable`` fraction of the nodes instead publish their GPUs as a Kubernetes 1.35 per-pool
  partitionable layout: shared counter sets (one set per physical GPU) in counter-only slices and, per
  GPU, the whole device and MIG-like partitions (2 x 3g.40gb, 7 x 1g.10gb) that consume those counters in
  device slices; so such a node lists ``--devices`` x 10 devices. Like a real driver, a pool is split
  into as many slices as the API's per-slice limits need (8 counter sets a slice; 64 devices a slice when
  they consume counters, else 128; a GPU's 10 devices stay in one slice), all with the pool's
  ``resourceSliceCount``: up to 6 partitionable GPUs give one ``...-counters`` and one ``...-devices``
  slice, more give ``...-counters-1``, ``...-devices-1``, ...
- Per node a ``nic.example.com`` slice of ``--nics`` NICs (pcieRoot aligned with the GPUs, bandwidth;
  more slices past 128 NICs).
- ``--network-pools`` racks: nodes are assigned to racks round robin and every rack has one
  ``fabric.example.com`` pool of accelerators reachable over the network: a slice (more past 128 devices)
  with a ``nodeSelector`` on the rack label instead of a ``nodeName``.
- DeviceClasses with typical CEL selectors: ``gpu.example.com`` (whole GPUs), ``large-gpu.example.com``
  (+ memory >= 80Gi), ``mig.example.com``, ``nic.example.com``, ``fabric.example.com``.
- ResourceClaimTemplates, one per claim shape (see ``SHAPES``), and ``--pods`` pending pods in
  ``--namespaces`` namespaces: a ``--mix`` of template-claim pods, direct-claim pods (each with its own
  ResourceClaim) and shared-claim pods (groups of 2-4 pods naming one ResourceClaim), plus an
  ``--unschedulable`` fraction whose claim can fit no node. Pods carry the labels
  ``bench.dra-extender.io/mix`` (template, direct, shared, unschedulable) and ``.../shape``, so load
  generators can pick, e.g., one-device pods.

Output: a ``.json`` file (one ``kind: List``, written with orjson), a ``.yaml``/``.yml`` file (multi-document,
libyaml's CSafeDumper when available) or, for a directory (a path ending in ``/``, without a suffix, or an
existing directory), one JSON file per kind group. JSON is the fast choice for big clusters.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

__all__ = [
    "FABRIC_DRIVER",
    "GPU_DRIVER",
    "MIX_LABEL",
    "NIC_DRIVER",
    "SHAPES",
    "SHAPE_LABEL",
    "ClusterSpec",
    "generate",
    "main",
    "pods_of",
    "write",
]

V1 = "resource.k8s.io/v1"
GPU_DRIVER = "gpu.example.com"
NIC_DRIVER = "nic.example.com"
FABRIC_DRIVER = "fabric.example.com"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
RACK_LABEL = "topology.example.com/rack"
MIX_LABEL = "bench.dra-extender.io/mix"
SHAPE_LABEL = "bench.dra-extender.io/shape"

#: model -> (memory choices, architecture, cores). Loosely after real datacenter GPUs.
_GPU_MODELS: dict[str, tuple[tuple[str, ...], str, int]] = {
    "a100": (("40Gi", "80Gi"), "Ampere", 108),
    "h100": (("80Gi",), "Hopper", 132),
    "l4": (("24Gi",), "Ada", 58),
    "t4": (("16Gi",), "Turing", 40),
}
_DRIVER_VERSIONS = ("535.104.5", "550.54.15", "550.90.7", "560.35.3")
#: MIG-like partition profiles of an 80Gi partitionable GPU: (profile, count, memory Gi, compute slices).
_PARTITIONS = (("3g.40gb", 2, 40, 3), ("1g.10gb", 7, 10, 1))
#: Kubernetes 1.35 per-slice limits (k8s.io/api/resource/v1: ResourceSliceMaxDevices,
#: ResourceSliceMaxDevicesWithTaintsOrConsumesCounters, ResourceSliceMaxCounterSets).
_MAX_DEVICES = 128
_MAX_DEVICES_WITH_COUNTERS = 64
_MAX_COUNTER_SETS = 8
#: Devices a partitionable GPU publishes: the whole GPU and its partitions.
_DEVICES_PER_PARTITIONABLE_GPU = 1 + sum(count for _, count, _, _ in _PARTITIONS)


@dataclass(frozen=True)
class ClusterSpec:
    """What to generate; the CLI flags map one to one."""

    nodes: int = 100
    devices: int = 10
    nics: int = 2
    partitionable: float = 0.0
    network_pools: int = 0
    fabric_devices: int = 4
    pods: int = 0
    namespaces: int = 1
    #: Weights of the template / direct / shared pod kinds.
    mix: dict[str, float] = field(default_factory=lambda: {"template": 0.5, "direct": 0.3, "shared": 0.2})
    unschedulable: float = 0.0
    #: Weights of the claim shapes among schedulable pods (None: ``SHAPES``' own weights).
    shapes: dict[str, float] | None = None
    seed: int = 0


# --- claim shapes ------------------------------------------------------------------------------------


def _exactly(name: str, device_class: str, count: int = 1, selectors: Sequence[str] = ()) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if selectors:
        body["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {"name": name, "exactly": body}


def _shape_one_gpu(spec: ClusterSpec) -> dict[str, Any]:
    return {"requests": [_exactly("gpu", GPU_DRIVER)]}


def _shape_two_gpus(spec: ClusterSpec) -> dict[str, Any]:
    return {
        "requests": [_exactly("gpus", GPU_DRIVER, 2)],
        "constraints": [{"requests": ["gpus"], "matchAttribute": f"{GPU_DRIVER}/pcieRoot"}],
    }


def _shape_gpu_and_nic(spec: ClusterSpec) -> dict[str, Any]:
    return {
        "requests": [_exactly("gpu", GPU_DRIVER), _exactly("nic", NIC_DRIVER)],
        "constraints": [{"requests": ["gpu", "nic"], "matchAttribute": PCIE_ROOT}],
    }


def _shape_large_gpu(spec: ClusterSpec) -> dict[str, Any]:
    # A prioritized list: an 80Gi+ GPU if there is one, else any GPU.
    return {
        "requests": [
            {
                "name": "gpu",
                "firstAvailable": [
                    {"name": "large", "deviceClassName": f"large-{GPU_DRIVER}"},
                    {"name": "any", "deviceClassName": GPU_DRIVER},
                ],
            }
        ]
    }


def _shape_mig_slice(spec: ClusterSpec) -> dict[str, Any]:
    return {"requests": [_exactly("slice", f"mig.{GPU_DRIVER.split('.', 1)[1]}", 1, [_profile("1g.10gb")])]}


def _shape_fabric(spec: ClusterSpec) -> dict[str, Any]:
    return {"requests": [_exactly("gpu", GPU_DRIVER), _exactly("accel", FABRIC_DRIVER)]}


def _shape_too_big(spec: ClusterSpec) -> dict[str, Any]:
    # More GPUs than any node has: fits nowhere, ever.
    return {"requests": [_exactly("gpus", GPU_DRIVER, spec.devices * 2 + 1)]}


def _profile(name: str) -> str:
    return f'device.attributes["{GPU_DRIVER}"].profile == "{name}"'


#: shape -> (builder, weight among schedulable pods). Shapes only exist when the cluster has their devices.
SHAPES: dict[str, tuple[Any, float]] = {
    "one-gpu": (_shape_one_gpu, 0.65),
    "two-gpus": (_shape_two_gpus, 0.12),
    "gpu-and-nic": (_shape_gpu_and_nic, 0.10),
    "large-gpu": (_shape_large_gpu, 0.08),
    "mig-slice": (_shape_mig_slice, 0.10),
    "fabric": (_shape_fabric, 0.05),
}
_UNSCHEDULABLE_SHAPE = "too-big"


def _available_shapes(spec: ClusterSpec) -> dict[str, float]:
    shapes = {name: weight for name, (_, weight) in SHAPES.items()}
    if spec.nics <= 0:
        shapes.pop("gpu-and-nic")
    if spec.partitionable <= 0:
        shapes.pop("mig-slice")
    if spec.network_pools <= 0:
        shapes.pop("fabric")
    if spec.devices < 2:
        shapes.pop("two-gpus")
    return shapes


def _claim_spec(shape: str, spec: ClusterSpec) -> dict[str, Any]:
    if shape == _UNSCHEDULABLE_SHAPE:
        return {"devices": _shape_too_big(spec)}
    return {"devices": SHAPES[shape][0](spec)}


# --- devices and slices ------------------------------------------------------------------------------


def _attrs(**values: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, bool):
            out[key] = {"bool": value}
        elif isinstance(value, int):
            out[key] = {"int": value}
        elif isinstance(value, tuple):  # ("version", text)
            out[key] = {"version": value[1]}
        else:
            out[key] = {"string": value}
    return out


def _gpu_attributes(rng: random.Random, node_index: int, index: int, devices: int, model: str) -> dict[str, Any]:
    _, architecture, _ = _GPU_MODELS[model]
    # Two NUMA nodes, each with its own PCIe root: matchAttribute constraints have something to group on.
    numa = 0 if index < (devices + 1) // 2 else 1
    root = f"pci0000:{numa * 0x40:02x}"
    attributes = _attrs(
        type="gpu",
        model=model,
        architecture=architecture,
        driverVersion=("version", rng.choice(_DRIVER_VERSIONS)),
        index=index,
        numaNode=numa,
        pcieRoot=root,
        uuid=f"GPU-{node_index:05d}-{index:03d}-{rng.getrandbits(32):08x}",
        productName=f"Example {model.upper()} {architecture}",
        healthy=True,
    )
    attributes[PCIE_ROOT] = {"string": root}
    return attributes


def _gpu(rng: random.Random, node_index: int, index: int, devices: int) -> dict[str, Any]:
    model = rng.choice(sorted(_GPU_MODELS))
    memories, _, cores = _GPU_MODELS[model]
    return {
        "name": f"gpu-{index}",
        "attributes": _gpu_attributes(rng, node_index, index, devices, model),
        "capacity": {"memory": {"value": rng.choice(memories)}, "cores": {"value": str(cores)}},
    }


def _slice(name: str, driver: str, pool: str, body: dict[str, Any], count: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": V1,
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": driver, "pool": {"name": pool, "generation": 1, "resourceSliceCount": count}, **body},
    }


def _chunks(items: Sequence[Any], size: int) -> list[list[Any]]:
    """``items`` in runs of at most ``size``; one empty run for no items (a pool has at least one slice)."""
    return [list(items[i : i + size]) for i in range(0, len(items), size)] or [[]]


def _chunk_name(name: str, index: int) -> str:
    # The first slice keeps the unsuffixed name: pools that fit one slice look as they always did.
    return name if index == 0 else f"{name}-{index}"


def _pool(driver: str, pool: str, parts: Sequence[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The slices of one pool, ``(name, body)`` each, all with the pool's slice count."""
    return [_slice(name, driver, pool, body, len(parts)) for name, body in parts]


def _device_pool(
    name: str, driver: str, pool: str, where: dict[str, Any], devices: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """A pool of plain devices (no counters, no taints): slices of at most 128 devices."""
    chunks = _chunks(devices, _MAX_DEVICES)
    return _pool(driver, pool, [(_chunk_name(name, k), {**where, "devices": c}) for k, c in enumerate(chunks)])


def _gpu_slices(rng: random.Random, node: str, node_index: int, spec: ClusterSpec) -> list[dict[str, Any]]:
    devices = [_gpu(rng, node_index, i, spec.devices) for i in range(spec.devices)]
    return _device_pool(f"{node}-{GPU_DRIVER}", GPU_DRIVER, node, {"nodeName": node}, devices)


def _partitionable_slices(rng: random.Random, node: str, node_index: int, spec: ClusterSpec) -> list[dict[str, Any]]:
    """The 1.35 per-pool layout: counter sets in counter-only slices (at most 8 sets each), the devices
    consuming them in device slices (at most 64 devices each, a GPU's devices kept together), one pool."""
    counter_sets = []
    per_gpu: list[list[dict[str, Any]]] = []
    for i in range(spec.devices):
        devices: list[dict[str, Any]] = []
        per_gpu.append(devices)
        counters = f"gpu-{i}-counters"
        counter_sets.append({"name": counters, "counters": {"memory": {"value": "80Gi"}, "compute": {"value": "7"}}})
        base = _gpu_attributes(rng, node_index, i, spec.devices, "a100")
        whole = {
            "name": f"gpu-{i}",
            "attributes": base,
            "capacity": {"memory": {"value": "80Gi"}, "cores": {"value": "108"}},
            "consumesCounters": [
                {"counterSet": counters, "counters": {"memory": {"value": "80Gi"}, "compute": {"value": "7"}}}
            ],
        }
        devices.append(whole)
        for profile, count, memory, compute in _PARTITIONS:
            for k in range(count):
                attributes = {**base, "type": {"string": "mig"}, "profile": {"string": profile}}
                attributes["uuid"] = {"string": f"MIG-{node_index:05d}-{i:03d}-{profile}-{k}"}
                devices.append(
                    {
                        "name": f"gpu-{i}-{profile.replace('.', '-')}-{k}",
                        "attributes": attributes,
                        "capacity": {"memory": {"value": f"{memory}Gi"}},
                        "consumesCounters": [
                            {
                                "counterSet": counters,
                                "counters": {"memory": {"value": f"{memory}Gi"}, "compute": {"value": str(compute)}},
                            }
                        ],
                    }
                )
    gpus_per_slice = _MAX_DEVICES_WITH_COUNTERS // _DEVICES_PER_PARTITIONABLE_GPU
    parts = [
        (_chunk_name(f"{node}-{GPU_DRIVER}-counters", k), {"nodeName": node, "sharedCounters": sets})
        for k, sets in enumerate(_chunks(counter_sets, _MAX_COUNTER_SETS))
    ]
    parts += [
        (_chunk_name(f"{node}-{GPU_DRIVER}-devices", k), {"nodeName": node, "devices": [d for g in gpus for d in g]})
        for k, gpus in enumerate(_chunks(per_gpu, gpus_per_slice))
    ]
    return _pool(GPU_DRIVER, node, parts)


def _nic_slices(rng: random.Random, node: str, spec: ClusterSpec) -> list[dict[str, Any]]:
    nics = []
    for i in range(spec.nics):
        numa = i % 2
        root = f"pci0000:{numa * 0x40:02x}"
        attributes = _attrs(
            model="cx7", numaNode=numa, pcieRoot=root, macAddress=f"02:00:{rng.getrandbits(32):08x}", rdma=True
        )
        attributes[PCIE_ROOT] = {"string": root}
        nics.append(
            {
                "name": f"eth{i}",
                "attributes": attributes,
                "capacity": {"bandwidth": {"value": rng.choice(("100G", "400G"))}},
            }
        )
    return _device_pool(f"{node}-{NIC_DRIVER}", NIC_DRIVER, node, {"nodeName": node}, nics)


def _fabric_slices(rack: int, spec: ClusterSpec) -> list[dict[str, Any]]:
    name = f"rack-{rack:03d}"
    devices = [
        {
            "name": f"accel-{i}",
            "attributes": _attrs(kind="fpga", rack=name, index=i),
            "capacity": {"memory": {"value": "64Gi"}},
        }
        for i in range(spec.fabric_devices)
    ]
    selector = {"nodeSelectorTerms": [{"matchExpressions": [{"key": RACK_LABEL, "operator": "In", "values": [name]}]}]}
    return _device_pool(f"{name}-{FABRIC_DRIVER}", FABRIC_DRIVER, name, {"nodeSelector": selector}, devices)


def _device_classes(spec: ClusterSpec) -> list[dict[str, Any]]:
    whole = f'device.driver == "{GPU_DRIVER}" && device.attributes["{GPU_DRIVER}"].type == "gpu"'
    classes = {
        GPU_DRIVER: [whole],
        f"large-{GPU_DRIVER}": [whole, f'device.capacity["{GPU_DRIVER}"].memory.compareTo(quantity("80Gi")) >= 0'],
        f"mig.{GPU_DRIVER.split('.', 1)[1]}": [
            f'device.driver == "{GPU_DRIVER}" && device.attributes["{GPU_DRIVER}"].type == "mig"'
        ],
        NIC_DRIVER: [f'device.driver == "{NIC_DRIVER}"'],
        FABRIC_DRIVER: [f'device.driver == "{FABRIC_DRIVER}"'],
    }
    return [
        {
            "apiVersion": V1,
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]},
        }
        for name, expressions in classes.items()
    ]


# --- pods ----------------------------------------------------------------------------------------------


def _uid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _pod(name: str, namespace: str, uid: str, claims: list[dict[str, str]], mix: str, shape: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "labels": {MIX_LABEL: mix, SHAPE_LABEL: shape}},
        "spec": {
            "schedulerName": "default-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example.com/train:1.0",
                    "resources": {"claims": [{"name": c["name"]} for c in claims]},
                }
            ],
            "resourceClaims": claims,
        },
    }


def _claim(name: str, namespace: str, uid: str, shape: str, spec: ClusterSpec) -> dict[str, Any]:
    return {
        "apiVersion": V1,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "labels": {SHAPE_LABEL: shape}},
        "spec": _claim_spec(shape, spec),
    }


def _templates(namespace: str, shapes: Sequence[str], spec: ClusterSpec) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": V1,
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": shape, "namespace": namespace},
            "spec": {"metadata": {"labels": {SHAPE_LABEL: shape}}, "spec": _claim_spec(shape, spec)},
        }
        for shape in shapes
    ]


def _pods_and_claims(rng: random.Random, spec: ClusterSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    shapes = _available_shapes(spec)
    if spec.shapes is not None:
        unknown = set(spec.shapes) - set(shapes)
        if unknown:
            raise ValueError(f"shapes not available in this cluster: {', '.join(sorted(unknown))}")
        shapes = {name: weight for name, weight in spec.shapes.items() if weight > 0}
    shape_names, shape_weights = list(shapes), list(shapes.values())
    kinds = [k for k, w in spec.mix.items() if w > 0]
    kind_weights = [spec.mix[k] for k in kinds]
    pods: list[dict[str, Any]] = []
    claims: list[dict[str, Any]] = []
    index = 0
    while index < spec.pods:
        namespace = _namespace(index, spec)
        if rng.random() < spec.unschedulable:
            kind, shape = "unschedulable", _UNSCHEDULABLE_SHAPE
        else:
            kind = rng.choices(kinds, kind_weights)[0] if kinds else "template"
            shape = rng.choices(shape_names, shape_weights)[0]
        name = f"pod-{index:06d}"
        if kind == "template":
            refs = [{"name": "devices", "resourceClaimTemplateName": shape}]
            pods.append(_pod(name, namespace, _uid(rng), refs, kind, shape))
            index += 1
        elif kind in ("direct", "unschedulable"):
            claim = f"{name}-claim"
            claims.append(_claim(claim, namespace, _uid(rng), shape, spec))
            pods.append(
                _pod(name, namespace, _uid(rng), [{"name": "devices", "resourceClaimName": claim}], kind, shape)
            )
            index += 1
        else:  # shared: 2-4 consecutive pods, same namespace, one claim
            claim = f"shared-{index:06d}"
            claims.append(_claim(claim, namespace, _uid(rng), shape, spec))
            for _ in range(min(rng.randint(2, 4), spec.pods - index)):
                member = f"pod-{index:06d}"
                refs = [{"name": "devices", "resourceClaimName": claim}]
                pods.append(_pod(member, _namespace(index, spec), _uid(rng), refs, kind, shape))
                index += 1
    return pods, claims


def _namespace(index: int, spec: ClusterSpec) -> str:
    # Shared groups are consecutive pods: blocks of 4 keep a group in one namespace.
    return "default" if spec.namespaces <= 1 else f"team-{(index // 4) % spec.namespaces:02d}"


def _namespaces(spec: ClusterSpec) -> list[str]:
    return ["default"] if spec.namespaces <= 1 else [f"team-{i:02d}" for i in range(spec.namespaces)]


# --- the cluster ---------------------------------------------------------------------------------------


def generate(spec: ClusterSpec) -> list[dict[str, Any]]:
    """Every object of the cluster, in apply order: namespaces, classes, nodes and slices, templates,
    claims, pods. Equal specs give equal lists."""
    rng = random.Random(spec.seed)
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in _namespaces(spec)
    ]
    objects += _device_classes(spec)
    partitionable_every = round(1 / spec.partitionable) if spec.partitionable > 0 else 0
    for n in range(spec.nodes):
        name = f"node-{n:05d}"
        labels = {
            "kubernetes.io/hostname": name,
            "topology.kubernetes.io/zone": f"zone-{n % 3}",
            "example.com/gpu.present": "true",
        }
        if spec.network_pools > 0:
            labels[RACK_LABEL] = f"rack-{n % spec.network_pools:03d}"
        objects.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})
        # Spread partitionable nodes evenly (every k-th node) rather than by chance: stable counts.
        if partitionable_every and n % partitionable_every == partitionable_every - 1:
            objects += _partitionable_slices(rng, name, n, spec)
        else:
            objects += _gpu_slices(rng, name, n, spec)
        if spec.nics > 0:
            objects += _nic_slices(rng, name, spec)
    for rack in range(spec.network_pools):
        objects += _fabric_slices(rack, spec)
    shapes = [*_available_shapes(spec), _UNSCHEDULABLE_SHAPE]
    for namespace in _namespaces(spec):
        objects += _templates(namespace, shapes, spec)
    pods, claims = _pods_and_claims(rng, spec)
    return objects + claims + pods


def pods_of(objects: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods of a generated cluster, in generation order."""
    return [o for o in objects if o.get("kind") == "Pod"]


# --- output --------------------------------------------------------------------------------------------

_GROUPS = (
    ("00-classes.json", ("Namespace", "DeviceClass")),
    ("10-nodes.json", ("Node",)),
    ("20-slices.json", ("ResourceSlice",)),
    ("30-claims.json", ("ResourceClaimTemplate", "ResourceClaim")),
    ("40-pods.json", ("Pod",)),
)


def _list(items: Sequence[dict[str, Any]]) -> bytes:
    return orjson.dumps({"apiVersion": "v1", "kind": "List", "items": list(items)})


def write(objects: Sequence[dict[str, Any]], path: Path | str) -> list[Path]:
    """Write the objects as ``.json`` (a List), ``.yaml``/``.yml`` (multi-document) or, for a directory
    (a path ending in a separator, without a suffix, or an existing directory), one JSON List per kind
    group. Returns the files written."""
    text_path = str(path)
    target = Path(path)
    if text_path.endswith(("/", "\\")) or target.is_dir() or not target.suffix:
        target.mkdir(parents=True, exist_ok=True)
        written = []
        for file_name, kinds in _GROUPS:
            out = target / file_name
            out.write_bytes(_list([o for o in objects if o.get("kind") in kinds]))
            written.append(out)
        return written
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.suffix == ".json":
        target.write_bytes(_list(objects))
    elif target.suffix in (".yaml", ".yml"):
        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        with target.open("w", encoding="utf-8") as fh:
            yaml.dump_all(objects, fh, Dumper=dumper, sort_keys=False, default_flow_style=False)
    else:
        raise ValueError(f"{path}: give a .json, .yaml or .yml file, or a directory")
    return [target]


# --- command line ----------------------------------------------------------------------------------------


def _mix(text: str) -> dict[str, float]:
    mix: dict[str, float] = {}
    for part in text.split(","):
        kind, _, weight = part.partition("=")
        kind = kind.strip()
        if kind not in ("template", "direct", "shared"):
            raise argparse.ArgumentTypeError(f"unknown pod kind {kind!r}: use template, direct, shared")
        try:
            mix[kind] = float(weight) if weight else 1.0
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{part}: weight must be a number") from exc
    return mix


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, not {text}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster_gen", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=100, help="nodes (default %(default)s)")
    parser.add_argument("--devices", type=int, default=10, help="GPUs per node (default %(default)s)")
    parser.add_argument("--nics", type=int, default=2, help="NICs per node; 0 for none (default %(default)s)")
    parser.add_argument(
        "--partitionable", type=_fraction, default=0.0, help="fraction of nodes with partitionable GPUs (default 0)"
    )
    parser.add_argument("--network-pools", type=int, default=0, help="racks with a network-attached pool (default 0)")
    parser.add_argument("--fabric-devices", type=int, default=4, help="devices per network-attached pool (default 4)")
    parser.add_argument("--pods", type=int, default=0, help="pending pods (default %(default)s)")
    parser.add_argument("--namespaces", type=int, default=1, help="namespaces the pods spread over (default 1)")
    parser.add_argument(
        "--mix",
        type=_mix,
        default={"template": 0.5, "direct": 0.3, "shared": 0.2},
        help="pod kinds and weights (default template=0.5,direct=0.3,shared=0.2)",
    )
    parser.add_argument(
        "--unschedulable", type=_fraction, default=0.0, help="fraction of pods that fit no node (default 0)"
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--out", required=True, help="output: FILE.json, FILE.yaml or DIR/")
    return parser


def spec_from_args(args: argparse.Namespace) -> ClusterSpec:
    return ClusterSpec(
        nodes=args.nodes,
        devices=args.devices,
        nics=args.nics,
        partitionable=args.partitionable,
        network_pools=args.network_pools,
        fabric_devices=args.fabric_devices,
        pods=args.pods,
        namespaces=args.namespaces,
        mix=args.mix,
        unschedulable=args.unschedulable,
        seed=args.seed,
    )


def _summary(objects: Sequence[dict[str, Any]]) -> Iterator[str]:
    counts: dict[str, int] = {}
    devices = 0
    for o in objects:
        counts[o["kind"]] = counts.get(o["kind"], 0) + 1
        if o["kind"] == "ResourceSlice":
            devices += len(o["spec"].get("devices") or ())
    yield ", ".join(f"{n} {kind}" for kind, n in counts.items())
    yield f"{devices} devices"


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    start = time.perf_counter()
    try:
        objects = generate(spec_from_args(args))
        files = write(objects, args.out)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    elapsed = time.perf_counter() - start
    size = sum(f.stat().st_size for f in files)
    print(
        f"wrote {', '.join(map(str, files))} ({size / 1e6:.1f} MB) in {elapsed:.2f} s: " + "; ".join(_summary(objects))
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
