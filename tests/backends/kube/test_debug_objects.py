"""``GET debug/objects`` over the kube backend: the store keeps DeviceClasses and ResourceSlices
decoded only, so the backend lists them from the API server (one paged LIST each); claims, templates
and pods come from the store. Everything resource.k8s.io is answered as v1."""

from __future__ import annotations

from typing import Any

from extender.server.app import create_app
from extender.state.service import SchedulingService
from extender.views.listing import held_objects
from tests import manifests as m
from tests.backends.kube.test_backend import started
from tests.fakes import FakeApiServer


async def test_classes_and_slices_are_listed_from_the_api_server(fake: FakeApiServer) -> None:
    backend = await started(fake, *m.cluster(m.claim("c1")))
    try:
        before = len(fake.requests)
        listed = await held_objects(backend)
        lists = [r for r in fake.requests[before:] if r.method == "GET" and "watch" not in r.query]
        assert {r.path.rsplit("/", 1)[-1] for r in lists} == {"deviceclasses", "resourceslices"}
        assert "incomplete" not in listed["metadata"]
        kinds = {item["kind"] for item in listed["items"]}
        assert {"DeviceClass", "ResourceSlice", "ResourceClaim", "Node"} <= kinds
        names = {i["metadata"]["name"] for i in listed["items"] if i["kind"] == "ResourceSlice"}
        assert names == {s["metadata"]["name"] for s in fake.objects("ResourceSlice")}
        for item in listed["items"]:
            if item["kind"] in ("DeviceClass", "ResourceSlice", "ResourceClaim"):
                assert item["apiVersion"] == "resource.k8s.io/v1"
    finally:
        await backend.stop()


async def test_a_failed_list_is_a_503_naming_it(fake: FakeApiServer, aiohttp_client: Any) -> None:
    backend = await started(fake, *m.cluster())
    try:
        client = await aiohttp_client(create_app(SchedulingService(backend=backend)))
        fake.fail("GET", "/resourceslices", status=403, times=1, watch=False)
        response = await client.get("/debug/objects")
        assert response.status == 503
        assert "cannot list the objects" in (await response.json())["error"]
        response = await client.get("/debug/objects")  # the next one works
        assert response.status == 200
    finally:
        await backend.stop()
