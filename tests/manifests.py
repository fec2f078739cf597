"""Raw Kubernetes manifests (dicts) for service and server tests: a GPU class, nodes with GPU
slices, claims, templates and pods, with upstream-like fixed names."""

from __future__ import annotations

from typing import Any

V1 = "resource.k8s.io/v1"


def gpu_class() -> dict[str, Any]:
    return {
        "apiVersion": V1,
        "kind": "DeviceClass",
        "metadata": {"name": "gpu"},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]},
    }


def node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}


def gpu_slice(node_name: str, count: int) -> dict[str, Any]:
    return {
        "apiVersion": V1,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-gpus"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}"} for i in range(count)],
        },
    }


def claim(name: str, count: int = 1, cls: str = "gpu") -> dict[str, Any]:
    return {
        "apiVersion": V1,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": cls, "count": count}}]}},
    }


def template(name: str) -> dict[str, Any]:
    return {
        "apiVersion": V1,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu"}}]}}},
    }


def pod(name: str, *claims: str, templates: tuple[str, ...] = (), uid: str | None = None) -> dict[str, Any]:
    resource_claims = [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)]
    resource_claims += [{"name": f"t{i}", "resourceClaimTemplateName": t} for i, t in enumerate(templates)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}"},
        "spec": {"containers": [{"name": "main", "image": "busybox"}], "resourceClaims": resource_claims},
    }


def cluster(*extra: dict[str, Any], nodes: int = 2, gpus: int = 2) -> list[dict[str, Any]]:
    objects = [gpu_class()]
    for i in range(1, nodes + 1):
        objects += [node(f"node-{i}"), gpu_slice(f"node-{i}", gpus)]
    return objects + list(extra)


def device_status(
    condition: str, status: str = "True", *, pool: str = "node-1", device: str = "gpu-0"
) -> dict[str, Any]:
    """A claim's ``status.devices`` entry for one GPU, as its driver reports a condition on it."""
    return {
        "driver": "gpu.example.com",
        "pool": pool,
        "device": device,
        "conditions": [
            {
                "type": condition,
                "status": status,
                "reason": "Reported",
                "message": f"{condition} is {status}",
                "lastTransitionTime": "2026-12-02T00:00:00Z",
            }
        ],
    }
