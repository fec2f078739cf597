"""Small manifest builders shared by the embedded-backend tests."""

from __future__ import annotations

from typing import Any

from extender.backends.embedded import EmbeddedBackend

V1 = "resource.k8s.io/v1"


def device_class(name: str = "gpu") -> dict[str, Any]:
    return {
        "apiVersion": V1,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]},
    }


def node_slice(node: str = "node-1", devices: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": V1,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpus"},
        "spec": {
            "driver": "gpu.example.com",
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": [{"name": f"gpu-{i}"} for i in range(devices)],
        },
    }


def claim(name: str = "claim-0", namespace: str = "default", **extra: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "apiVersion": V1,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "req-0", "exactly": {"deviceClassName": "gpu"}}]}},
    }
    raw.update(extra)
    return raw


def template(name: str = "gpu-template", namespace: str = "default", api_version: str = V1) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "metadata": {"labels": {"team": "ml"}, "annotations": {"note": "from template"}},
            "spec": {"devices": {"requests": [{"name": "req-0", "exactly": {"deviceClassName": "gpu"}}]}},
        },
    }


def pod(
    name: str = "pod-0",
    namespace: str = "default",
    *,
    uid: str | None = "pod-uid-0",
    claims: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }
    if uid is not None:
        raw["metadata"]["uid"] = uid
    if claims is not None:
        raw["spec"]["resourceClaims"] = claims
    return raw


def allocation(device: str = "gpu-0", node: str = "node-1") -> dict[str, Any]:
    return {
        "devices": {"results": [{"request": "req-0", "driver": "gpu.example.com", "pool": node, "device": device}]},
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        },
    }


def consumer(i: int) -> dict[str, Any]:
    return {"resource": "pods", "name": f"pod-{i}", "uid": f"uid-{i}"}


def basic_backend(*extra: dict[str, Any]) -> EmbeddedBackend:
    """A class, one node's slice, one unallocated claim ``default/claim-0``, plus ``extra``."""
    return EmbeddedBackend([device_class(), node_slice(), claim(), *extra])
