"""``GET debug/resourceclaims/{namespace}/{name}`` answers resource.k8s.io/v1 JSON whatever version the
claim is stored in (DESIGN.md, Contracts): a claim loaded as v1beta1 by the embedded backend is shown
with its flat request under ``exactly``, before a bind and after it (``status.allocation``,
``status.reservedFor``, the finalizer), while the backend keeps it as v1beta1. Conversion details
are in tests/core/test_convert_to_v1.py; classic DRA claims (v1alpha3 ``spec.controller``) stay as
stored, which the README's ``classic-claim`` example checks. ``GET debug/objects`` answers the same
cluster's DeviceClass, ResourceSlice, ResourceClaim and ResourceClaimTemplate as v1 too, and
``kubectl dra simulate --extender`` rebuilds the cluster from those items (slice conversion:
tests/core/test_convert_slices_to_v1.py; the classic exceptions: tests/server/test_why.py)."""

from __future__ import annotations

import copy
import io
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from aiohttp.test_utils import TestClient

from extender.backends.embedded import EmbeddedBackend
from extender.core.convert import (
    V1,
    device_class_to_v1,
    resource_claim_template_to_v1,
    resource_claim_to_v1,
    resource_slice_to_v1,
)
from extender.kubectl import run
from extender.manifests import load_manifests
from extender.server import ServerSettings, create_app
from extender.state.service import SchedulingService
from extender.views.debug import without_v1_form

Client = TestClient[Any, Any]
CLUSTER = Path(__file__).parent / "fixtures" / "v1beta1-claim.yaml"
TO_V1: dict[str, Callable[..., dict[str, Any]]] = {
    "DeviceClass": device_class_to_v1,
    "ResourceSlice": resource_slice_to_v1,
    "ResourceClaimTemplate": resource_claim_template_to_v1,
    "ResourceClaim": resource_claim_to_v1,
}

EXPECTED_SPEC = {
    "devices": {
        "requests": [
            {
                "name": "gpus",
                "exactly": {
                    "deviceClassName": "gpu.example.com",
                    "selectors": [{"cel": {"expression": 'device.attributes["gpu.example.com"].model == "a100"'}}],
                    "allocationMode": "ExactCount",
                    "count": 2,
                    "tolerations": [{"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}],
                },
            }
        ],
        "config": [{"requests": ["gpus"], "opaque": {"driver": "gpu.example.com", "parameters": {"sharing": "none"}}}],
    }
}


@pytest.fixture
def backend() -> EmbeddedBackend:
    return EmbeddedBackend.from_paths(CLUSTER)


@pytest.fixture
async def client(aiohttp_client: Callable[..., Awaitable[Client]], backend: EmbeddedBackend) -> Client:
    return await aiohttp_client(create_app(SchedulingService(backend=backend), ServerSettings()))


async def post(client: Client, verb: str, body: Any) -> Any:
    response = await client.post(f"/{verb}", data=orjson.dumps(body))
    assert response.status == 200, await response.text()
    return orjson.loads(await response.read())


async def debug_claim(client: Client) -> Any:
    response = await client.get("/debug/resourceclaims/default/two-gpus")
    assert response.status == 200, await response.text()
    return orjson.loads(await response.read())


async def test_a_v1beta1_claim_is_answered_as_v1_before_and_after_bind(
    client: Client, backend: EmbeddedBackend
) -> None:
    before = await debug_claim(client)
    assert (before["apiVersion"], before["kind"]) == ("resource.k8s.io/v1", "ResourceClaim")
    assert before["spec"] == EXPECTED_SPEC
    assert not (before.get("status") or {}).get("allocation")

    pod = backend.get("Pod", "default", "pod-a")
    assert (await post(client, "filter", {"Pod": pod, "NodeNames": ["node-1"]}))["NodeNames"] == ["node-1"]
    bind = {"PodName": "pod-a", "PodNamespace": "default", "PodUID": "uid-a", "Node": "node-1"}
    assert await post(client, "bind", bind) == {"Error": ""}

    claim = await debug_claim(client)
    assert claim["apiVersion"] == "resource.k8s.io/v1"
    assert claim["spec"] == EXPECTED_SPEC
    allocation = claim["status"]["allocation"]
    results = allocation["devices"]["results"]
    assert sorted(r["device"] for r in results) == ["gpu-0", "gpu-1"]  # the a100s
    assert {(r["request"], r["driver"], r["pool"]) for r in results} == {("gpus", "gpu.example.com", "node-1")}
    assert allocation["devices"]["config"] == [
        {
            "source": "FromClaim",
            "requests": ["gpus"],
            "opaque": {"driver": "gpu.example.com", "parameters": {"sharing": "none"}},
        }
    ]
    terms = allocation["nodeSelector"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "pod-a", "uid": "uid-a"}]
    assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]

    stored = backend.get("ResourceClaim", "default", "two-gpus")
    assert stored is not None
    assert stored["apiVersion"] == "resource.k8s.io/v1beta1"  # the view converts; the backend keeps its version
    assert stored["spec"]["devices"]["requests"][0]["deviceClassName"] == "gpu.example.com"
    assert stored["status"]["allocation"] == allocation


# --- GET debug/objects: the same cluster's DRA objects, every one as v1 ---------------------------

TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1beta1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "one-t4", "namespace": "default"},
    "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu.example.com"}]}}},
}


async def test_debug_objects_answers_every_dra_object_as_v1(aiohttp_client: Callable[..., Awaitable[Client]]) -> None:
    backend = EmbeddedBackend([*load_manifests(CLUSTER), copy.deepcopy(TEMPLATE)])
    client = await aiohttp_client(create_app(SchedulingService(backend=backend), ServerSettings()))
    response = await client.get("/debug/objects")
    assert response.status == 200, await response.text()
    items = orjson.loads(await response.read())["items"]
    dra = {item["kind"]: item for item in items if item["kind"] in TO_V1}
    assert sorted(dra) == sorted(TO_V1)
    assert {item["apiVersion"] for item in dra.values()} == {V1}

    assert dra["ResourceClaim"]["spec"] == EXPECTED_SPEC
    assert dra["ResourceClaimTemplate"]["spec"]["spec"] == {
        "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}
    }
    assert dra["ResourceSlice"]["spec"] == {
        "driver": "gpu.example.com",
        "nodeName": "node-1",
        "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
        "devices": [
            {"name": "gpu-0", "attributes": {"model": {"string": "a100"}}},
            {"name": "gpu-1", "attributes": {"model": {"string": "a100"}}},
            {"name": "gpu-2", "attributes": {"model": {"string": "t4"}}},
        ],
    }
    # each is what the converter makes of the object as the backend keeps it (still v1beta1)
    for kind, item in dra.items():
        meta = item["metadata"]
        stored = backend.get(kind, meta.get("namespace", ""), meta["name"])
        assert stored is not None and stored["apiVersion"] == "resource.k8s.io/v1beta1"
        assert item == TO_V1[kind](stored)


async def test_simulate_from_an_extender_holding_v1beta1_objects(
    aiohttp_server: Callable[..., Awaitable[Any]], tmp_path: Path
) -> None:
    """``kubectl dra simulate --extender`` rebuilds the cluster from the v1 items: the t4 is found by
    its attribute, which sat under ``basic`` in the stored slice."""
    server = await aiohttp_server(create_app(SchedulingService(backend=EmbeddedBackend.from_paths(CLUSTER))))
    jobs = tmp_path / "jobs.yaml"
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "t4", "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "gpu.example.com",
                            "selectors": [
                                {"cel": {"expression": 'device.attributes["gpu.example.com"].model == "t4"'}}
                            ],
                        },
                    }
                ]
            }
        },
    }
    job = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pod-t4", "namespace": "default"},
        "spec": {
            "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "t4"}],
        },
    }
    jobs.write_text(yaml.safe_dump_all([claim, job]), encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    code = await run(
        ["simulate", "-f", str(jobs), "--extender", str(server.make_url("/")), "-o", "json"], out=out, err=err
    )
    assert code == 0, err.getvalue()
    [placed] = orjson.loads(out.getvalue())["pods"]
    assert placed["node"] == "node-1"
    assert [(d["pool"], d["device"]) for d in placed["devices"]] == [("node-1", "gpu-2")]


ALPHA = "resource.k8s.io/v1alpha3"


@pytest.mark.parametrize(
    ("kind", "raw", "api_version", "expected"),
    [
        ("ResourceClaim", {"apiVersion": ALPHA, "spec": {"controller": "fpga.example.com"}}, None, True),
        ("ResourceClaim", {"spec": {"controller": "fpga.example.com"}}, ALPHA, True),  # a LIST item
        ("ResourceClaim", {"apiVersion": ALPHA, "spec": {"controller": ""}}, None, False),
        ("ResourceClaim", {"apiVersion": "resource.k8s.io/v1beta1", "spec": {"controller": "x"}}, None, False),
        ("ResourceClaimTemplate", {"apiVersion": ALPHA, "spec": {"spec": {"controller": "x"}}}, None, True),
        ("ResourceClaimTemplate", {"apiVersion": ALPHA, "spec": {"spec": {}}}, None, False),
        ("DeviceClass", {"apiVersion": ALPHA, "spec": {"suitableNodes": {"nodeSelectorTerms": []}}}, None, True),
        ("DeviceClass", {"apiVersion": ALPHA, "spec": {"selectors": []}}, None, False),
        ("ResourceSlice", {"apiVersion": ALPHA, "spec": {"controller": "x"}}, None, False),
        ("ResourceClaim", {"apiVersion": ALPHA, "spec": None}, None, False),
    ],
)
def test_what_has_no_v1_form(kind: str, raw: dict[str, Any], api_version: str | None, expected: bool) -> None:
    assert without_v1_form(kind, raw, api_version=api_version) is expected
