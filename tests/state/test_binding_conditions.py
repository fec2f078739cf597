"""Device binding conditions (KEP-5007) in the service, on the embedded backend: the bind writes the
allocation with the devices' conditions, records ``nominatedNodeName`` and a
``BindingConditionsPending`` Event and answers ``BindingConditionsPending`` without binding; the
next bind binds once the driver has set the conditions; a failure condition or the binding timeout
deallocates the claim at the pod's next filter (docs/binding-conditions.md)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from extender.backends.embedded import EmbeddedBackend
from extender.core.answers import NOT_AVAILABLE
from extender.core.errors import Transient
from extender.state.bind.conditions import BindingConditionsPending
from extender.state.service import SchedulingService
from extender.views.debug import DebugViews
from extender.views.devicemap import DeviceMap
from tests.manifests import claim, device_status, gpu_class, node, pod

NODES = ["node-1", "node-2"]
UID = "uid-p"


def fabric_slice(node_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-fabric"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "gpu-0",
                    "bindsToNode": True,
                    "bindingConditions": ["example.com/attached"],
                    "bindingFailureConditions": ["example.com/failed"],
                }
            ],
        },
    }


def service(**options: Any) -> tuple[SchedulingService, EmbeddedBackend]:
    objects = [gpu_class(), node("node-1"), node("node-2"), fabric_slice("node-1"), claim("c"), pod("p", "c", uid=UID)]
    backend = EmbeddedBackend(copy.deepcopy(objects))
    options.setdefault("binding_wait_seconds", 0)  # each bind answers at once; one test waits
    return SchedulingService(backend=backend, **options), backend


def driver_reports(backend: EmbeddedBackend, condition: str, status: str = "True") -> None:
    """The driver's part: a condition on the claim's ``status.devices`` entry of the device."""
    stored = backend.get("ResourceClaim", "default", "c")
    assert stored is not None
    stored["status"]["devices"] = [device_status(condition, status)]
    backend.apply(stored)


def test_the_pod_waits_unbound_with_its_devices_allocated_until_the_driver_attaches_them() -> None:
    svc, backend = service()
    assert svc.filter(pod("p", "c", uid=UID), NODES).node_names == ["node-1"]
    with pytest.raises(BindingConditionsPending, match="waiting for binding conditions for device on node node-1"):
        asyncio.run(svc.bind("default", "p", UID, "node-1"))
    stored = backend.get("ResourceClaim", "default", "c")
    assert stored is not None
    (result,) = stored["status"]["allocation"]["devices"]["results"]
    assert result["bindingConditions"] == ["example.com/attached"]
    assert result["bindingFailureConditions"] == ["example.com/failed"]
    assert stored["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [
        "node-1"
    ]
    assert stored["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": UID}]
    live = backend.get("Pod", "default", "p")
    assert live is not None and not live["spec"].get("nodeName")
    assert live["status"]["nominatedNodeName"] == "node-1"
    assert (
        "default/p",
        "Normal",
        "BindingConditionsPending",
        "waiting for binding conditions for device on node node-1",
    ) in backend.events
    # the next attempt: the claim pins the pod to node-1, and it still waits
    assert svc.filter(pod("p", "c", uid=UID), NODES).node_names == ["node-1"]
    with pytest.raises(BindingConditionsPending):
        asyncio.run(svc.bind("default", "p", UID, "node-1"))
    driver_reports(backend, "example.com/attached")
    asyncio.run(svc.bind("default", "p", UID, "node-1"))
    live = backend.get("Pod", "default", "p")
    assert live is not None and live["spec"]["nodeName"] == "node-1"
    assert svc.stats.binding_conditions_pending == 2 and svc.stats.binding_conditions_met == 1


def test_a_failure_condition_deallocates_the_claim_and_the_pod_is_scheduled_again() -> None:
    svc, backend = service()
    with pytest.raises(BindingConditionsPending):
        asyncio.run(svc.bind("default", "p", UID, "node-1"))
    driver_reports(backend, "example.com/failed")
    with pytest.raises(
        Transient, match=r'device binding failed: claim=c, reason=Reported, message="example.com/failed is True"'
    ):
        asyncio.run(svc.bind("default", "p", UID, "node-1"))
    assert "allocation" not in backend.get("ResourceClaim", "default", "c")["status"]  # type: ignore[index]
    live = backend.get("Pod", "default", "p")
    assert live is not None and not live["spec"].get("nodeName")
    # allocated afresh at the next attempt
    assert svc.filter(pod("p", "c", uid=UID), NODES).node_names == ["node-1"]


def test_at_the_next_filter_a_failed_claim_is_unavailable_everywhere_and_deallocated() -> None:
    svc, backend = service()
    with pytest.raises(BindingConditionsPending):
        asyncio.run(svc.bind("default", "p", UID, "node-1"))
    driver_reports(backend, "example.com/failed")
    assert svc.filter(pod("p", "c", uid=UID), NODES).unresolvable == dict.fromkeys(NODES, NOT_AVAILABLE)
    outcome = asyncio.run(svc.filter_and_recover(pod("p", "c", uid=UID), NODES))
    assert outcome.error.startswith("deallocation of ResourceClaim default/c completed (device binding failed")
    stored = backend.get("ResourceClaim", "default", "c")
    assert stored is not None and not {"allocation", "reservedFor", "devices"} & stored["status"].keys()


def test_devices_that_wait_past_the_binding_timeout_are_deallocated() -> None:
    svc, backend = service(binding_timeout_seconds=60)
    with pytest.raises(BindingConditionsPending):
        asyncio.run(svc.bind("default", "p", UID, "node-1"))
    stored = backend.get("ResourceClaim", "default", "c")
    assert stored is not None
    stored["status"]["allocation"]["allocationTimestamp"] = "2020-01-01T00:00:00Z"  # long ago
    backend.apply(stored)
    outcome = asyncio.run(svc.filter_and_recover(pod("p", "c", uid=UID), NODES))
    assert outcome.error == "deallocation of ResourceClaim default/c completed (device binding timeout: claim=c)"
    assert "allocation" not in backend.get("ResourceClaim", "default", "c")["status"]  # type: ignore[index]


def test_the_device_map_shows_a_device_waiting_for_its_conditions_as_binding() -> None:
    svc, backend = service()
    device_map = DeviceMap(svc.cluster, svc.stats, DebugViews(svc), clock=lambda: 1_893_457_000.0)

    def gpu() -> dict[str, Any]:
        detail = device_map.node("node-1")
        assert detail is not None
        (device,) = detail["devices"]
        return dict(device)

    with pytest.raises(BindingConditionsPending):
        asyncio.run(svc.bind("default", "p", UID, "node-1"))
    assert (gpu()["state"], gpu()["use"]) == ("binding", "waiting for example.com/attached")
    assert "deviceStatus" not in gpu()  # the driver has reported nothing yet
    driver_reports(backend, "example.com/attached")
    assert (gpu()["state"], gpu()["use"]) == ("allocated", "")
    assert gpu()["deviceStatus"] == [
        {
            "claim": "default/c",
            "conditions": [
                {
                    "type": "example.com/attached",
                    "status": "True",
                    "reason": "Reported",
                    "message": "example.com/attached is True",
                }
            ],
        }
    ]


async def test_a_bind_waits_for_the_drivers_report_and_then_binds() -> None:
    svc, backend = service(binding_wait_seconds=3600)  # a bound against a hang only
    bind = asyncio.create_task(svc.bind("default", "p", UID, "node-1"))
    while not svc.binder.waiting_for_conditions("default/p"):
        assert not bind.done(), bind.result()
        await asyncio.sleep(0)
    live = backend.get("Pod", "default", "p")
    assert live is not None and live["status"]["nominatedNodeName"] == "node-1" and not live["spec"].get("nodeName")
    driver_reports(backend, "example.com/attached")  # the claim's update wakes the bind
    await asyncio.wait_for(bind, 30)
    live = backend.get("Pod", "default", "p")
    assert live is not None and live["spec"]["nodeName"] == "node-1"
    assert svc.stats.binding_conditions_pending == 1 and svc.stats.binding_conditions_met == 1


async def test_a_failure_reported_during_the_wait_ends_it_and_deallocates() -> None:
    svc, backend = service(binding_wait_seconds=3600)
    bind = asyncio.create_task(svc.bind("default", "p", UID, "node-1"))
    while not svc.binder.waiting_for_conditions("default/p"):
        assert not bind.done(), bind.result()
        await asyncio.sleep(0)
    driver_reports(backend, "example.com/failed")
    with pytest.raises(Transient, match="device binding failed: claim=c"):
        await asyncio.wait_for(bind, 30)
    assert "allocation" not in backend.get("ResourceClaim", "default", "c")["status"]  # type: ignore[index]


async def test_a_report_made_while_the_nomination_is_written_is_not_missed() -> None:
    svc, backend = service(binding_wait_seconds=3600)  # a bound against a hang only
    nominate = backend.set_nominated_node

    async def nominate_and_report(namespace: str, name: str, uid: str, node: str) -> None:
        await nominate(namespace, name, uid, node)
        driver_reports(backend, "example.com/attached")  # the driver is quick: during the write

    backend.set_nominated_node = nominate_and_report  # type: ignore[method-assign]
    await asyncio.wait_for(svc.bind("default", "p", UID, "node-1"), 30)
    live = backend.get("Pod", "default", "p")
    assert live is not None and live["spec"]["nodeName"] == "node-1"


async def test_a_claim_deallocated_during_the_wait_fails_the_bind() -> None:
    svc, backend = service(binding_wait_seconds=3600)
    bind = asyncio.create_task(svc.bind("default", "p", UID, "node-1"))
    while not svc.binder.waiting_for_conditions("default/p"):
        assert not bind.done(), bind.result()
        await asyncio.sleep(0)
    stored = backend.get("ResourceClaim", "default", "c")
    assert stored is not None
    for field in ("allocation", "reservedFor", "devices"):
        stored["status"].pop(field, None)
    backend.apply(stored)
    with pytest.raises(Transient, match="claim default/c got deallocated in the meantime"):
        await asyncio.wait_for(bind, 30)
    live = backend.get("Pod", "default", "p")
    assert live is not None and not live["spec"].get("nodeName")


def test_a_failed_extended_resource_claim_is_deleted_not_just_deallocated() -> None:
    mapped = gpu_class()
    mapped["spec"]["extendedResourceName"] = "example.com/gpu"
    wants_gpu = pod("q", uid="uid-q")
    wants_gpu["spec"]["containers"][0]["resources"] = {"requests": {"example.com/gpu": "1"}}
    backend = EmbeddedBackend(copy.deepcopy([mapped, node("node-1"), fabric_slice("node-1"), wants_gpu]))
    svc = SchedulingService(backend=backend, binding_wait_seconds=0)
    with pytest.raises(BindingConditionsPending):
        asyncio.run(svc.bind("default", "q", "uid-q", "node-1"))
    (made,) = backend.list_objects("ResourceClaim")
    made["status"]["devices"] = [device_status("example.com/failed")]
    backend.apply(made)
    outcome = asyncio.run(svc.filter_and_recover(wants_gpu, ["node-1"]))
    assert outcome.error.startswith(f"deletion of ResourceClaim default/{made['metadata']['name']} completed")
    assert backend.list_objects("ResourceClaim") == []
