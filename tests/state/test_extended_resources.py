"""DRA extended resources in the service (KEP-5004), on the embedded backend: a container asking for
``example.com/gpu: 2`` is filtered, scored and bound with a claim the bind creates exactly as the
in-tree plugin does (docs/semantics.md §16); a node advertising the resource serves it with its
device plugin; a failed bind leaves nothing behind; a retried bind creates nothing twice; a claim an
earlier attempt left is deleted at the next filter."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from extender.backends.embedded import EmbeddedBackend
from extender.core.answers import CANNOT_ALLOCATE
from extender.core.errors import ApiUnavailable, ExtenderError, OutcomeUnknown
from extender.core.extended import CANNOT_FIT_RESOURCE, EXTENDED_CLAIM_ANNOTATION
from extender.state.preemption.verb import NodeVictims
from extender.state.service import SchedulingService
from tests.manifests import claim, cluster

NODES = ["node-1", "node-2"]
UID = "uid-p"


def gpu_class_with_name(resource: str = "example.com/gpu") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu"},
        "spec": {
            "selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}],
            "extendedResourceName": resource,
        },
    }


def extended_pod(name: str = "p", *, uid: str = UID, gpus: int = 2, claims: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"requests": {"cpu": "1", "example.com/gpu": str(gpus)}},
                }
            ],
            "resourceClaims": [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)],
        },
    }


def objects(*extra: dict[str, Any], gpus: int = 2) -> list[dict[str, Any]]:
    base = cluster(*extra, nodes=2, gpus=gpus)
    return [gpu_class_with_name(), *base[1:]]  # the class, now with its extended resource name


def service(objs: list[dict[str, Any]]) -> tuple[SchedulingService, EmbeddedBackend]:
    backend = EmbeddedBackend(copy.deepcopy(objs))
    return SchedulingService(backend=backend), backend


def extended_claims(backend: EmbeddedBackend) -> list[dict[str, Any]]:
    return [
        c
        for c in backend.list_objects("ResourceClaim")
        if (c["metadata"].get("annotations") or {}).get(EXTENDED_CLAIM_ANNOTATION) == "true"
    ]


def test_a_pod_asking_for_an_extended_resource_is_bound_with_a_claim_as_in_tree() -> None:
    svc, backend = service(objects(extended_pod()))
    assert svc.filter(extended_pod(), NODES).node_names == NODES
    asyncio.run(svc.bind("default", "p", UID, "node-2"))
    [made] = extended_claims(backend)
    meta = made["metadata"]
    assert meta["name"].startswith("p-extended-resources-") and len(meta["name"]) == len("p-extended-resources-") + 5
    assert meta["generateName"] == "p-extended-resources-"
    assert meta["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": UID, "controller": True}]
    assert meta["finalizers"] == ["resource.kubernetes.io/delete-protection"]
    assert "labels" not in meta
    assert made["spec"]["devices"]["requests"] == [
        {
            "name": "container-0-request-1",
            "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 2},
        }
    ]
    allocation = made["status"]["allocation"]
    assert sorted(r["device"] for r in allocation["devices"]["results"]) == ["gpu-0", "gpu-1"]
    assert {r["pool"] for r in allocation["devices"]["results"]} == {"node-2"}
    assert {r["request"] for r in allocation["devices"]["results"]} == {"container-0-request-1"}
    assert allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["node-2"]
    assert allocation["allocationTimestamp"]
    assert made["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": UID}]
    stored = backend.get("Pod", "default", "p")
    assert stored is not None and stored["spec"]["nodeName"] == "node-2"
    assert stored["status"]["extendedResourceClaimStatus"] == {
        "resourceClaimName": meta["name"],
        "requestMappings": [
            {"containerName": "main", "resourceName": "example.com/gpu", "requestName": "container-0-request-1"}
        ],
    }
    assert "resourceClaimStatuses" not in stored["status"]
    assert len(svc.ledger) == 0
    # the devices are taken: another such pod fits node-1 only
    assert svc.filter(extended_pod("q", uid="uid-q"), NODES).node_names == ["node-1"]
    # a repeated bind succeeds and creates nothing more
    asyncio.run(svc.bind("default", "p", UID, "node-2"))
    assert len(extended_claims(backend)) == 1


def test_the_implicit_class_name_works_too() -> None:
    pod = extended_pod()
    pod["spec"]["containers"][0]["resources"]["requests"] = {"deviceclass.resource.kubernetes.io/gpu": "1"}
    svc, backend = service(objects(pod))
    asyncio.run(svc.bind("default", "p", UID, "node-1"))
    [made] = extended_claims(backend)
    assert made["spec"]["devices"]["requests"][0]["name"] == "container-0-request-0"
    status = backend.get("Pod", "default", "p")["status"]["extendedResourceClaimStatus"]  # type: ignore[index]
    assert status["requestMappings"][0]["resourceName"] == "deviceclass.resource.kubernetes.io/gpu"


def test_too_few_devices_fail_the_node_and_the_pods_claims_and_extended_resources_are_allocated_together() -> None:
    svc, _ = service(objects(claim("c-p"), extended_pod(claims=("c-p",))))
    # two GPUs per node: the claim's one and the container's two do not fit together
    outcome = svc.filter(extended_pod(claims=("c-p",)), NODES)
    assert outcome.node_names == [] and outcome.failed == {"node-1": CANNOT_ALLOCATE, "node-2": CANNOT_ALLOCATE}
    svc, backend = service(objects(claim("c-p"), extended_pod(gpus=1, claims=("c-p",))))
    assert svc.filter(extended_pod(gpus=1, claims=("c-p",)), NODES).node_names == NODES
    asyncio.run(svc.bind("default", "p", UID, "node-1"))
    user = backend.get("ResourceClaim", "default", "c-p")
    [made] = extended_claims(backend)
    devices = {r["device"] for c in (user, made) for r in c["status"]["allocation"]["devices"]["results"]}  # type: ignore[index]
    assert devices == {"gpu-0", "gpu-1"}


def test_a_node_advertising_the_resource_serves_it_with_its_device_plugin() -> None:
    objs = objects(extended_pod(gpus=5))
    for obj in objs:
        if obj["kind"] == "Node" and obj["metadata"]["name"] == "node-1":
            obj["status"] = {"allocatable": {"example.com/gpu": "8"}}
    svc, backend = service(objs)
    # node-1 passes whatever its devices: kube-scheduler's resource fit counts the device plugin's
    outcome = svc.filter(extended_pod(gpus=5), NODES)
    assert outcome.node_names == ["node-1"] and outcome.failed == {"node-2": CANNOT_ALLOCATE}
    asyncio.run(svc.bind("default", "p", UID, "node-1"))
    assert extended_claims(backend) == []
    stored = backend.get("Pod", "default", "p")
    assert stored is not None and stored["spec"]["nodeName"] == "node-1"
    assert "extendedResourceClaimStatus" not in (stored.get("status") or {})


def test_a_node_lacking_an_extended_resource_no_class_maps_cannot_run_the_pod() -> None:
    pod = extended_pod()
    pod["spec"]["containers"][0]["resources"]["requests"]["vendor.io/fpga"] = "1"
    objs = objects(pod)
    for obj in objs:
        if obj["kind"] == "Node" and obj["metadata"]["name"] == "node-2":
            obj["status"] = {"allocatable": {"vendor.io/fpga": "1"}}
    svc, _ = service(objs)
    outcome = svc.filter(pod, NODES)
    assert outcome.node_names == ["node-2"] and outcome.unresolvable == {"node-1": CANNOT_FIT_RESOURCE}


@pytest.mark.parametrize("failing", ["update_claim_status", "patch_pod_status", "bind_pod"])
def test_a_failed_bind_deletes_the_claim_it_created(failing: str) -> None:
    svc, backend = service(objects(extended_pod()))
    backend.faults.fail(failing, ApiUnavailable("refused"), times=1)
    with pytest.raises(ExtenderError):
        asyncio.run(svc.bind("default", "p", UID, "node-1"))
    assert extended_claims(backend) == []
    assert len(svc.ledger) == 0
    # the next attempt makes a new claim
    asyncio.run(svc.bind("default", "p", UID, "node-1"))
    assert len(extended_claims(backend)) == 1


def test_a_claim_an_earlier_attempt_left_is_deleted_at_the_next_filter() -> None:
    svc, backend = service(objects(extended_pod()))
    left = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": "p-extended-resources-abcde",
            "namespace": "default",
            "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": UID, "controller": True}],
            "finalizers": ["resource.kubernetes.io/delete-protection"],
        },
        "spec": {"devices": {"requests": []}},
    }
    backend.apply(left)
    assert svc.filter(extended_pod(), NODES).error == "cannot schedule extended resource claim"
    outcome = asyncio.run(svc.filter_and_recover(extended_pod(), NODES))
    assert outcome.error == "deletion of ResourceClaim default/p-extended-resources-abcde completed"
    assert extended_claims(backend) == []
    assert svc.filter(extended_pod(), NODES).node_names == NODES


def test_deleting_the_pod_releases_and_deletes_its_claim() -> None:
    svc, backend = service(objects(extended_pod()))
    asyncio.run(svc.bind("default", "p", UID, "node-1"))
    backend.delete_pod("default", "p")
    assert extended_claims(backend) == []
    assert svc.filter(extended_pod("q", uid="uid-q"), NODES).node_names == NODES


def plugin_node(objs: list[dict[str, Any]], *, drop_slices: bool = False) -> list[dict[str, Any]]:
    """node-1 advertises example.com/gpu itself (a device plugin); without its DRA slice if asked."""
    for obj in objs:
        if obj["kind"] == "Node" and obj["metadata"]["name"] == "node-1":
            obj["status"] = {"allocatable": {"example.com/gpu": "8"}}
    if drop_slices:
        objs = [o for o in objs if not (o["kind"] == "ResourceSlice" and o["spec"].get("nodeName") == "node-1")]
    return objs


@pytest.mark.parametrize("first", ["explicit", "implicit"])
def test_pods_naming_the_resource_differently_do_not_share_remembered_verdicts(first: str) -> None:
    explicit = extended_pod("a", uid="uid-a", gpus=3)
    implicit = extended_pod("d", uid="uid-d", gpus=3)
    implicit["spec"]["containers"][0]["resources"]["requests"] = {
        "cpu": "1",
        "deviceclass.resource.kubernetes.io/gpu": "3",
    }
    svc, _ = service(plugin_node(objects(explicit, implicit), drop_slices=True))
    order = (explicit, implicit) if first == "explicit" else (implicit, explicit)
    outcomes = {p["metadata"]["name"]: svc.filter(p, NODES) for p in order}
    # only the explicit name is what node-1's device plugin advertises
    assert outcomes["a"].node_names == ["node-1"]
    assert outcomes["d"].node_names == [] and "node-1" in outcomes["d"].unresolvable


def test_a_retried_bind_keeps_the_extended_claims_name_in_the_pod_status() -> None:
    pod = extended_pod(gpus=1, claims=("c-p",))
    svc, backend = service(objects(claim("c-p"), pod))
    backend.faults.fail("bind_pod", OutcomeUnknown("lost"), times=None)
    backend.faults.fail("get_pod", OutcomeUnknown("lost"), times=None)
    with pytest.raises(ExtenderError):
        asyncio.run(svc.bind("default", "p", UID, "node-1"))  # writes kept: the binding's outcome unknown
    backend.faults.clear()
    asyncio.run(svc.bind("default", "p", UID, "node-1"))
    [made] = extended_claims(backend)
    stored = backend.get("Pod", "default", "p")
    assert stored is not None and stored["spec"]["nodeName"] == "node-1"
    assert stored["status"]["extendedResourceClaimStatus"]["resourceClaimName"] == made["metadata"]["name"]


def test_a_retried_bind_of_a_pod_its_device_plugin_serves_succeeds() -> None:
    svc, backend = service(plugin_node(objects(extended_pod(gpus=5))))
    asyncio.run(svc.bind("default", "p", UID, "node-1"))
    asyncio.run(svc.bind("default", "p", UID, "node-1"))  # a retry after a lost answer: nothing to do
    assert extended_claims(backend) == []


def test_the_preempt_verb_passes_a_node_whose_device_plugin_serves_the_pod() -> None:
    svc, _ = service(plugin_node(objects(extended_pod(gpus=5)), drop_slices=True))
    outcome = asyncio.run(svc.preempt(extended_pod(gpus=5), {"node-1": NodeVictims(("uid-victim",))}))
    assert outcome.victims == {"node-1": NodeVictims(uids=("uid-victim",), pdb_violations=0)}
