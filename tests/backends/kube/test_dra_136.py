"""Kubernetes 1.36's DRA additions through the kube backend, against the strict fake API server:
a pod's extended-resource claim created, written and named in the pod's status (and deleted when
the bind fails); a device's binding conditions waited for with the claim's watch events."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from extender.core.errors import ExtenderError
from extender.core.extended import EXTENDED_CLAIM_ANNOTATION
from extender.state.bind.conditions import BindingConditionsPending
from extender.state.service import SchedulingService
from tests import manifests as m
from tests.backends.kube.test_backend import assert_consistent, node_of, started, until
from tests.fakes import FakeApiServer

NODES = ["node-1", "node-2"]
GROUP = "resource.k8s.io"


def mapped_class() -> dict[str, Any]:
    device_class = m.gpu_class()
    device_class["spec"]["extendedResourceName"] = "example.com/gpu"
    return device_class


def extended_pod(name: str, gpus: int) -> dict[str, Any]:
    pod = m.pod(name)
    pod["spec"]["containers"][0]["resources"] = {"requests": {"example.com/gpu": str(gpus)}}
    return pod


def extended_claims(fake: FakeApiServer) -> list[dict[str, Any]]:
    return [
        c
        for c in fake.objects("ResourceClaim", group=GROUP)
        if (c["metadata"].get("annotations") or {}).get(EXTENDED_CLAIM_ANNOTATION) == "true"
    ]


async def test_an_extended_resource_pod_gets_its_claim_and_status(fake: FakeApiServer) -> None:
    objects = [mapped_class(), *m.cluster(extended_pod("p1", 2), nodes=2, gpus=2)[1:]]
    backend = await started(fake, *objects)
    service = SchedulingService(backend=backend)
    try:
        assert service.filter(extended_pod("p1", 2), NODES).node_names == NODES
        await service.bind("default", "p1", "uid-p1", "node-2")
        [claim] = extended_claims(fake)
        assert claim["metadata"]["name"].startswith("p1-extended-resources-")
        assert claim["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
        assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "p1", "uid": "uid-p1"}]
        assert len(claim["status"]["allocation"]["devices"]["results"]) == 2
        pod = fake.get_object("Pod", "default", "p1")
        assert (
            pod is not None
            and pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"] == (claim["metadata"]["name"])
        )
        assert node_of(fake, "p1") == "node-2"
        assert_consistent(fake)
    finally:
        await backend.stop()


async def test_a_refused_pod_status_write_deletes_the_created_claim(fake: FakeApiServer) -> None:
    objects = [mapped_class(), *m.cluster(extended_pod("p1", 1), nodes=2, gpus=2)[1:]]
    backend = await started(fake, *objects)
    service = SchedulingService(backend=backend)
    try:
        fake.fail("PATCH", r"/pods/p1/status$", status=422, times=1, message="invalid")
        with pytest.raises(ExtenderError):
            await service.bind("default", "p1", "uid-p1", "node-1")
        assert extended_claims(fake) == []
        assert node_of(fake, "p1") is None
        await until(lambda: not service.ledger and not service.store.extended_claims)
        await service.bind("default", "p1", "uid-p1", "node-1")
        assert len(extended_claims(fake)) == 1 and node_of(fake, "p1") == "node-1"
    finally:
        await backend.stop()


def fabric_slice() -> dict[str, Any]:
    pool = m.gpu_slice("node-1", 1)
    pool["spec"]["devices"][0].update(bindsToNode=True, bindingConditions=["example.com/attached"])
    return pool


async def test_a_bind_waits_for_the_drivers_condition_through_the_watch(fake: FakeApiServer) -> None:
    objects = [m.gpu_class(), m.node("node-1"), fabric_slice(), m.claim("c"), m.pod("p1", "c")]
    backend = await started(fake, *objects)
    service = SchedulingService(backend=backend, binding_wait_seconds=3600)  # a bound against a hang
    try:
        # The nominatedNodeName write is held: until it is answered the bind is not "waiting" (a
        # test that read the pod at that hook raced the write before, and failed about half the time).
        gate = fake.hold("PATCH", r"/pods/p1/status$")
        bind = asyncio.create_task(service.bind("default", "p1", "uid-p1", "node-1"))
        await gate.arrived()
        assert not service.binder.waiting_for_conditions("default/p1") and not bind.done()
        gate.release()
        await until(lambda: service.binder.waiting_for_conditions("default/p1") or bind.done())
        assert not bind.done(), bind.exception()
        pod = fake.get_object("Pod", "default", "p1")
        assert pod is not None and pod["status"]["nominatedNodeName"] == "node-1" and node_of(fake, "p1") is None
        claim = fake.get_object("ResourceClaim", "default", "c", group=GROUP)
        assert claim is not None
        claim["status"]["devices"] = [m.device_status("example.com/attached")]
        fake.put_object(claim)
        await asyncio.wait_for(bind, 30)
        assert node_of(fake, "p1") == "node-1"
    finally:
        await backend.stop()


async def test_without_the_report_the_bind_answers_pending_and_keeps_the_allocation(fake: FakeApiServer) -> None:
    objects = [m.gpu_class(), m.node("node-1"), fabric_slice(), m.claim("c"), m.pod("p1", "c")]
    backend = await started(fake, *objects)
    service = SchedulingService(backend=backend, binding_wait_seconds=0)
    try:
        with pytest.raises(BindingConditionsPending):
            await service.bind("default", "p1", "uid-p1", "node-1")
        claim = fake.get_object("ResourceClaim", "default", "c", group=GROUP)
        assert claim is not None and claim["status"]["allocation"]["devices"]["results"][0]["bindingConditions"] == [
            "example.com/attached"
        ]
        assert node_of(fake, "p1") is None
    finally:
        await backend.stop()


def taint_rule(pool: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": f"{pool}-unhealthy"},
        "spec": {
            "deviceSelector": {"pool": pool},
            "taint": {"key": "example.com/unhealthy", "effect": "NoSchedule"},
        },
    }


async def test_device_taint_rules_are_watched_where_served(aiohttp_server: Any) -> None:
    fake = FakeApiServer(bookmark_interval=None, taint_rules=True)
    await fake.serve_with(aiohttp_server)
    objects = m.cluster(m.claim("c"), m.pod("p1", "c"), nodes=2, gpus=1)
    backend = await started(fake, *objects)
    service = SchedulingService(backend=backend, hold_seconds=0)
    try:
        assert service.filter(m.pod("p1", "c"), NODES).node_names == NODES
        fake.put_object(taint_rule("node-1"))
        await until(lambda: "node-1-unhealthy" in service.store.taint_rules)
        assert service.filter(m.pod("p1", "c"), NODES).node_names == ["node-2"]
        fake.delete_object("DeviceTaintRule", None, "node-1-unhealthy", group=GROUP)
        await until(lambda: not service.store.taint_rules)
        assert service.filter(m.pod("p1", "c"), NODES).node_names == NODES
    finally:
        await backend.stop()


async def test_without_taint_rules_served_nothing_is_watched(fake: FakeApiServer) -> None:
    backend = await started(fake, *m.cluster(nodes=1, gpus=1))
    try:
        assert not any(r.kind == "DeviceTaintRule" for r in backend._resources())
    finally:
        await backend.stop()
