"""The fake apiserver over real HTTP: discovery, create/get/list basics, updates and their
preconditions, the status and binding subresources, finalizers, claim status validation, PATCH,
auth, scripted faults, the request log and direct access. LIST paging, selectors and WATCH are in
``test_apiserver_watch.py``.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import aiohttp
import pytest

from .apiserver import FakeApiServer
from .helpers import CLAIMS, PODS, Watch, allocation, call, claim, pod

RS = "/apis/resource.k8s.io"


# --- discovery ------------------------------------------------------------------------------------


async def test_discovery_lists_groups_versions_and_resources(http: aiohttp.ClientSession) -> None:
    status, api = await call(http, "GET", "/api")
    assert (status, api["kind"], api["versions"]) == (200, "APIVersions", ["v1"])
    _, groups = await call(http, "GET", "/apis")
    by_name = {g["name"]: g for g in groups["groups"]}
    assert [v["version"] for v in by_name["resource.k8s.io"]["versions"]] == ["v1", "v1beta2", "v1beta1"]
    assert by_name["resource.k8s.io"]["preferredVersion"] == {"groupVersion": "resource.k8s.io/v1", "version": "v1"}
    assert "coordination.k8s.io" in by_name
    _, group = await call(http, "GET", RS)
    assert group["kind"] == "APIGroup" and group["preferredVersion"]["version"] == "v1"
    _, resources = await call(http, "GET", f"{RS}/v1")
    by_resource = {r["name"]: r for r in resources["resources"]}
    assert by_resource["resourceclaims"]["namespaced"] is True
    assert set(by_resource["resourceclaims"]["verbs"]) >= {"get", "list", "watch", "update", "patch"}
    assert by_resource["resourceclaims/status"]["verbs"] == ["get", "patch", "update"]
    assert by_resource["resourceslices"]["namespaced"] is False
    _, core = await call(http, "GET", "/api/v1")
    core_resources = {r["name"]: r for r in core["resources"]}
    assert core_resources["pods/binding"]["verbs"] == ["create"]
    assert "events" in core_resources and "nodes" in core_resources
    _, leases = await call(http, "GET", "/apis/coordination.k8s.io/v1")
    assert [r["name"] for r in leases["resources"]] == ["leases"]
    _, version = await call(http, "GET", "/version")
    assert version["major"] == "1" and version["gitVersion"].startswith("v1.")


async def test_only_configured_resource_versions_are_served(aiohttp_server: Any) -> None:
    fake = FakeApiServer(resource_versions=("v1beta1",))
    await fake.serve_with(aiohttp_server)
    async with aiohttp.ClientSession(fake.url) as http:
        _, group = await call(http, "GET", RS)
        assert group["versions"] == [{"groupVersion": "resource.k8s.io/v1beta1", "version": "v1beta1"}]
        assert group["preferredVersion"]["version"] == "v1beta1"
        status, body = await call(http, "GET", f"{RS}/v1")
        assert status == 404 and body["reason"] == "NotFound"
        assert body["message"] == "the server could not find the requested resource"
        status, _ = await call(http, "GET", f"{RS}/v1/resourceslices")
        assert status == 404
        status, _ = await call(http, "GET", f"{RS}/v1beta1/resourceslices")
        assert status == 200


async def test_unserved_group_is_not_listed(aiohttp_server: Any) -> None:
    fake = FakeApiServer(resource_versions=())
    await fake.serve_with(aiohttp_server)
    async with aiohttp.ClientSession(fake.url) as http:
        _, groups = await call(http, "GET", "/apis")
        assert "resource.k8s.io" not in {g["name"] for g in groups["groups"]}
        status, _ = await call(http, "GET", RS)
        assert status == 404


# --- create, get, list ------------------------------------------------------------------------------


async def test_create_sets_server_fields_from_one_global_counter(
    fake: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    status, created = await call(http, "POST", CLAIMS, claim("claim-0"))
    assert status == 201
    meta = created["metadata"]
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z")
    assert "generation" not in meta  # as 1.36's claim strategy: no generation (pods, classes, slices have one)
    assert meta["resourceVersion"] == str(fake.resource_version)
    assert created["status"] == {}
    status, node = await call(http, "POST", "/api/v1/nodes", {"metadata": {"name": "node-1"}})
    assert status == 201 and int(node["metadata"]["resourceVersion"]) == int(meta["resourceVersion"]) + 1
    assert "generation" not in node["metadata"]
    _, listed = await call(http, "GET", CLAIMS)
    assert listed["metadata"]["resourceVersion"] == node["metadata"]["resourceVersion"]


async def test_create_ignores_status_and_clears_server_owned_metadata(http: aiohttp.ClientSession) -> None:
    raw = claim("claim-0")
    raw["status"] = {"allocation": allocation()}
    raw["metadata"].update(uid="mine", deletionTimestamp="2020-01-01T00:00:00Z", generation=7)
    _, created = await call(http, "POST", CLAIMS, raw)
    assert created["status"] == {}
    assert created["metadata"]["uid"] != "mine" and "generation" not in created["metadata"]
    assert "deletionTimestamp" not in created["metadata"]
    _, created_pod = await call(http, "POST", PODS, {**pod("pod-0"), "status": {"phase": "Running"}})
    assert created_pod["status"] == {"phase": "Pending"}


async def test_create_failures_answer_like_the_apiserver(http: aiohttp.ClientSession) -> None:
    await call(http, "POST", CLAIMS, claim("claim-0"))
    status, body = await call(http, "POST", CLAIMS, claim("claim-0"))
    assert status == 409
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'resourceclaims.resource.k8s.io "claim-0" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "claim-0", "group": "resource.k8s.io", "kind": "resourceclaims"},
        "code": 409,
    }
    status, body = await call(
        http, "POST", "/apis/resource.k8s.io/v1/namespaces/nowhere/resourceclaims", claim("c", namespace="nowhere")
    )
    assert (status, body["message"]) == (404, 'namespaces "nowhere" not found')
    with_rv = claim("claim-1")
    with_rv["metadata"]["resourceVersion"] = "5"
    status, body = await call(http, "POST", CLAIMS, with_rv)
    assert status == 500 and "resourceVersion should not be set on objects to be created" in body["message"]
    status, body = await call(http, "POST", CLAIMS, claim("Bad_Name"))
    assert status == 422 and body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    status, body = await call(http, "POST", CLAIMS, claim("claim-2", namespace="other"))
    assert status == 400 and "does not match the namespace" in body["message"]
    wrong_version = {**claim("claim-3"), "apiVersion": "resource.k8s.io/v1beta1"}
    status, body = await call(http, "POST", CLAIMS, wrong_version)
    assert status == 400 and "does not match the expected API version" in body["message"]
    status, body = await call(http, "POST", CLAIMS, None, content_type="application/json")
    assert status == 400


async def test_generate_name(http: aiohttp.ClientSession) -> None:
    raw = claim("")
    raw["metadata"] = {"generateName": "pod-0-gpu-"}
    status, created = await call(http, "POST", CLAIMS, raw)
    assert status == 201
    assert created["metadata"]["name"].startswith("pod-0-gpu-") and len(created["metadata"]["name"]) == 15


async def test_get_missing_object_is_a_named_404(http: aiohttp.ClientSession) -> None:
    status, body = await call(http, "GET", f"{CLAIMS}/nope")
    assert status == 404
    assert body["message"] == 'resourceclaims.resource.k8s.io "nope" not found'
    assert body["details"] == {"name": "nope", "group": "resource.k8s.io", "kind": "resourceclaims"}
    status, body = await call(http, "GET", f"{PODS}/nope")
    assert body["message"] == 'pods "nope" not found' and body["details"] == {"name": "nope", "kind": "pods"}


async def test_list_items_have_no_kind_and_namespaces_filter(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    await call(http, "POST", "/api/v1/namespaces", {"metadata": {"name": "team"}})
    await call(http, "POST", CLAIMS, claim("claim-0"))
    await call(
        http, "POST", "/apis/resource.k8s.io/v1/namespaces/team/resourceclaims", claim("claim-1", namespace="team")
    )
    _, everywhere = await call(http, "GET", f"{RS}/v1/resourceclaims")
    assert everywhere["kind"] == "ResourceClaimList" and everywhere["apiVersion"] == "resource.k8s.io/v1"
    assert [i["metadata"]["name"] for i in everywhere["items"]] == ["claim-0", "claim-1"]
    assert all("kind" not in i and "apiVersion" not in i for i in everywhere["items"])
    _, team = await call(http, "GET", "/apis/resource.k8s.io/v1/namespaces/team/resourceclaims")
    assert [i["metadata"]["name"] for i in team["items"]] == ["claim-1"]


async def test_versions_with_identical_shapes_are_served_others_refused(
    fake: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    await call(http, "POST", CLAIMS, claim("claim-0"))
    status, as_beta2 = await call(http, "GET", f"{RS}/v1beta2/namespaces/default/resourceclaims/claim-0")
    assert status == 200 and as_beta2["apiVersion"] == "resource.k8s.io/v1beta2"
    defaulted = claim("claim-0")["spec"]
    defaulted["devices"]["requests"][0]["exactly"].update(allocationMode="ExactCount", count=1)
    assert as_beta2["spec"] == defaulted
    status, body = await call(http, "GET", f"{RS}/v1beta1/namespaces/default/resourceclaims/claim-0")
    assert status == 500 and "not emulated" in body["message"]
    assert fake.get_object("ResourceClaim", "default", "claim-0")["apiVersion"] == "resource.k8s.io/v1"  # type: ignore[index]


# --- update, status, finalizers ----------------------------------------------------------------------


async def test_stale_update_is_the_real_conflict(http: aiohttp.ClientSession) -> None:
    _, created = await call(http, "POST", CLAIMS, claim("x"))
    first = copy.deepcopy(created)
    first["metadata"]["labels"] = {"a": "b"}
    status, updated = await call(http, "PUT", f"{CLAIMS}/x", first)
    assert status == 200 and updated["metadata"]["labels"] == {"a": "b"}
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    status, body = await call(http, "PUT", f"{CLAIMS}/x", created)
    assert status == 409
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'Operation cannot be fulfilled on resourceclaims.resource.k8s.io "x": the object has been modified; '
        "please apply your changes to the latest version and try again",
        "reason": "Conflict",
        "details": {"name": "x", "group": "resource.k8s.io", "kind": "resourceclaims"},
        "code": 409,
    }


async def test_update_needs_a_resource_version_and_matching_uid(http: aiohttp.ClientSession) -> None:
    _, created = await call(http, "POST", CLAIMS, claim("x"))
    no_rv = copy.deepcopy(created)
    del no_rv["metadata"]["resourceVersion"]
    status, body = await call(http, "PUT", f"{CLAIMS}/x", no_rv)
    assert status == 422
    assert body["message"] == (
        'resourceclaims.resource.k8s.io "x" is invalid: metadata.resourceVersion: Invalid value: 0: '
        "must be specified for an update"
    )
    other_uid = copy.deepcopy(created)
    other_uid["metadata"]["uid"] = "someone-else"
    status, body = await call(http, "PUT", f"{CLAIMS}/x", other_uid)
    assert status == 409 and "Precondition failed: UID in precondition: someone-else" in body["message"]
    status, body = await call(http, "PUT", f"{CLAIMS}/y", created)
    assert status == 400 and "does not match the name on the URL" in body["message"]
    missing = copy.deepcopy(created)
    missing["metadata"]["name"] = "gone"
    status, body = await call(http, "PUT", f"{CLAIMS}/gone", missing)
    assert status == 404


async def test_unconditional_updates_when_configured(aiohttp_server: Any) -> None:
    fake = FakeApiServer(unconditional_updates=True)
    await fake.serve_with(aiohttp_server)
    async with aiohttp.ClientSession(fake.url) as http:
        _, created = await call(http, "POST", CLAIMS, claim("x"))
        del created["metadata"]["resourceVersion"]
        created["metadata"]["labels"] = {"k": "v"}
        status, _ = await call(http, "PUT", f"{CLAIMS}/x", created)
        assert status == 200


async def test_main_put_ignores_status_and_status_put_takes_only_status(http: aiohttp.ClientSession) -> None:
    _, created = await call(http, "POST", CLAIMS, claim("x"))
    sneaky = copy.deepcopy(created)
    sneaky["status"] = {"allocation": allocation()}
    sneaky["metadata"]["annotations"] = {"a": "1"}
    _, updated = await call(http, "PUT", f"{CLAIMS}/x", sneaky)
    assert updated["status"] == {} and updated["metadata"]["annotations"] == {"a": "1"}
    status_update = copy.deepcopy(updated)
    status_update["status"] = {"allocation": allocation()}
    status_update["metadata"]["annotations"] = {"a": "2"}
    status_update["metadata"]["finalizers"] = ["x/y"]
    status, written = await call(http, "PUT", f"{CLAIMS}/x/status", status_update)
    assert status == 200 and written["status"] == {"allocation": allocation()}
    assert written["metadata"]["annotations"] == {"a": "1"} and "finalizers" not in written["metadata"]


async def test_generation_bumps_on_spec_change_only(http: aiohttp.ClientSession) -> None:
    path = f"{RS}/v1/deviceclasses"
    _, created = await call(http, "POST", path, {"metadata": {"name": "class-a"}, "spec": {}})
    labelled = copy.deepcopy(created)
    labelled["metadata"]["labels"] = {"a": "b"}
    _, updated = await call(http, "PUT", f"{path}/class-a", labelled)
    assert updated["metadata"]["generation"] == 1
    updated["spec"] = {"selectors": [{"cel": {"expression": "true"}}]}
    _, changed = await call(http, "PUT", f"{path}/class-a", updated)
    assert changed["metadata"]["generation"] == 2


async def test_no_op_update_keeps_resource_version_and_sends_no_event(
    fake: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    _, created = await call(http, "POST", CLAIMS, claim("x"))
    before = fake.resource_version
    status, same = await call(http, "PUT", f"{CLAIMS}/x", created)
    assert status == 200 and same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert fake.resource_version == before


async def test_claim_spec_is_immutable(http: aiohttp.ClientSession) -> None:
    _, created = await call(http, "POST", CLAIMS, claim("x"))
    created["spec"]["devices"]["requests"][0]["name"] = "other"
    status, body = await call(http, "PUT", f"{CLAIMS}/x", created)
    assert status == 422
    assert (
        body["message"]
        == 'ResourceClaim.resource.k8s.io "x" is invalid: spec: Invalid value: "object": field is immutable'
    )
    assert body["details"]["kind"] == "ResourceClaim"
    assert body["details"]["causes"] == [
        {"reason": "FieldValueInvalid", "message": 'Invalid value: "object": field is immutable', "field": "spec"}
    ]


def _consumer(index: int) -> dict[str, str]:
    return {"resource": "pods", "name": f"pod-{index}", "uid": f"uid-{index}"}


@pytest.mark.parametrize(
    ("status_body", "field", "detail"),
    [
        ({"reservedFor": [_consumer(0)]}, "status.reservedFor", "may not be specified when `allocated` is not set"),
        (
            {"allocation": allocation(), "reservedFor": [_consumer(0), _consumer(0)]},
            "status.reservedFor[1]",
            "Duplicate value",
        ),
        (
            {"allocation": allocation(), "reservedFor": [_consumer(i) for i in range(257)]},
            "status.reservedFor",
            "Too many: 257",
        ),
        (
            {"allocation": allocation(), "reservedFor": [{"resource": "pods", "name": "p"}]},
            "status.reservedFor[0].uid",
            "Required",
        ),
        (
            {"allocation": allocation("nope")},
            "status.allocation.devices.results[0].request",
            "must be the name of a request",
        ),
    ],
)
async def test_claim_status_validation(
    http: aiohttp.ClientSession, status_body: dict[str, Any], field: str, detail: str
) -> None:
    _, created = await call(http, "POST", CLAIMS, claim("x"))
    created["status"] = status_body
    status, body = await call(http, "PUT", f"{CLAIMS}/x/status", created)
    assert status == 422 and body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["field"] == field and detail in body["message"]


async def test_reserved_for_256_is_fine_and_allocation_is_immutable(http: aiohttp.ClientSession) -> None:
    _, created = await call(http, "POST", CLAIMS, claim("x"))
    created["status"] = {"allocation": allocation(), "reservedFor": [_consumer(i) for i in range(256)]}
    status, written = await call(http, "PUT", f"{CLAIMS}/x/status", created)
    assert status == 200
    changed = allocation()
    changed["devices"]["results"][0]["device"] = "device-2"
    written["status"]["allocation"] = changed
    status, body = await call(http, "PUT", f"{CLAIMS}/x/status", written)
    assert (
        status == 422
        and "status.allocation: Invalid value" in body["message"]
        and "field is immutable" in body["message"]
    )
    written["status"] = {}
    status, cleared = await call(http, "PUT", f"{CLAIMS}/x/status", written)
    assert status == 200 and cleared["status"] == {}  # a status struct is always written


async def test_finalizers_delay_deletion_until_the_last_one_goes(
    fake: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    _, created = await call(http, "POST", CLAIMS, claim("x", finalizers=["resource.kubernetes.io/delete-protection"]))
    created["status"] = {"allocation": allocation(), "reservedFor": [_consumer(0)]}
    _, reserved = await call(http, "PUT", f"{CLAIMS}/x/status", created)
    status, deleting = await call(http, "DELETE", f"{CLAIMS}/x")
    assert status == 200 and deleting["metadata"]["deletionTimestamp"]
    assert deleting["metadata"]["deletionGracePeriodSeconds"] == 0 and "generation" not in deleting["metadata"]
    status, again = await call(http, "DELETE", f"{CLAIMS}/x")
    assert status == 200 and again["metadata"]["resourceVersion"] == deleting["metadata"]["resourceVersion"]
    more = copy.deepcopy(deleting)
    more["metadata"]["finalizers"].append("example.com/other")
    status, body = await call(http, "PUT", f"{CLAIMS}/x", more)
    assert status == 422 and "no new finalizers can be added if the object is being deleted" in body["message"]
    new_consumer = copy.deepcopy(deleting)
    new_consumer["status"]["reservedFor"].append(_consumer(1))
    status, body = await call(http, "PUT", f"{CLAIMS}/x/status", new_consumer)
    assert status == 422 and "new entries may not be added while" in body["message"]
    async with Watch(http, CLAIMS, resourceVersion=deleting["metadata"]["resourceVersion"]) as watch:
        deleting["metadata"]["finalizers"] = []
        status, final = await call(http, "PUT", f"{CLAIMS}/x", deleting)
        assert status == 200
        # the update is never stored: the writer gets it with the version it had, the watch sees
        # the stored object (finalizer and all) go at a new version
        assert final["metadata"]["resourceVersion"] == deleting["metadata"]["resourceVersion"]
        assert "finalizers" not in final["metadata"]
        event = await watch.next()
        assert event["type"] == "DELETED"
        assert int(event["object"]["metadata"]["resourceVersion"]) > int(final["metadata"]["resourceVersion"])
        assert event["object"]["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
    assert fake.get_object("ResourceClaim", "default", "x") is None
    assert int(reserved["metadata"]["resourceVersion"]) < int(final["metadata"]["resourceVersion"])


async def test_delete_without_finalizers_and_preconditions(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    await call(http, "POST", CLAIMS, claim("x"))
    status, body = await call(http, "DELETE", f"{CLAIMS}/x", {"preconditions": {"uid": "wrong"}})
    assert status == 409 and "the UID in the precondition (wrong) does not match" in body["message"]
    assert body["details"]["kind"] == "ResourceClaim"
    status, body = await call(http, "DELETE", f"{CLAIMS}/x", {"preconditions": {"resourceVersion": "1"}})
    assert status == 409 and "the ResourceVersion in the precondition (1) does not match" in body["message"]
    status, body = await call(http, "DELETE", f"{CLAIMS}/x")
    assert status == 200 and body["metadata"]["name"] == "x"
    assert fake.get_object("ResourceClaim", "default", "x") is None
    status, _ = await call(http, "DELETE", f"{CLAIMS}/x")
    assert status == 404


# --- PATCH ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("content_type", ["application/merge-patch+json", "application/strategic-merge-patch+json"])
async def test_merge_patches_annotations(fake: FakeApiServer, http: aiohttp.ClientSession, content_type: str) -> None:
    _, created = await call(http, "POST", PODS, pod("pod-0"))
    patch = {"metadata": {"annotations": {"dra-extender/nudge": "1"}}}
    status, patched = await call(http, "PATCH", f"{PODS}/pod-0", patch, content_type=content_type)
    assert status == 200 and patched["metadata"]["annotations"] == {"dra-extender/nudge": "1"}
    assert patched["spec"] == created["spec"]
    status, removed = await call(
        http,
        "PATCH",
        f"{PODS}/pod-0",
        {"metadata": {"annotations": {"dra-extender/nudge": None}}},
        content_type=content_type,
    )
    assert status == 200 and "annotations" not in removed["metadata"]


async def test_patch_preconditions_and_unsupported_forms(http: aiohttp.ClientSession) -> None:
    _, created = await call(http, "POST", PODS, pod("pod-0"))
    stale = {"metadata": {"resourceVersion": "1", "annotations": {"a": "b"}}}
    status, body = await call(http, "PATCH", f"{PODS}/pod-0", stale, content_type="application/merge-patch+json")
    assert status == 409 and body["reason"] == "Conflict"
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": created["metadata"]["resourceVersion"]},
        {"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}},
    ]
    status, patched = await call(http, "PATCH", f"{PODS}/pod-0", ops, content_type="application/json-patch+json")
    assert status == 200 and patched["metadata"]["annotations"] == {"a": "b"}
    status, body = await call(http, "PATCH", f"{PODS}/pod-0", ops, content_type="application/json-patch+json")
    assert status == 422  # what failed is not said, as upstream
    assert body["message"] == "the server rejected our request due to an error in our request"
    status, body = await call(
        http,
        "PATCH",
        f"{PODS}/pod-0",
        {"spec": {"$patch": "replace"}},
        content_type="application/strategic-merge-patch+json",
    )
    assert status == 400
    status, body = await call(http, "PATCH", f"{PODS}/pod-0", {}, content_type="application/apply-patch+yaml")
    assert status == 422 and "fieldManager: Required value" in body["message"]  # checked first, as upstream
    status, body = await call(
        http, "PATCH", f"{PODS}/pod-0", {}, params={"fieldManager": "m"}, content_type="application/apply-patch+yaml"
    )
    assert status == 415  # server-side apply of pods is not emulated
    status, body = await call(
        http, "PATCH", f"{PODS}/pod-0", {"spec": {"nodeName": "node-1"}}, content_type="application/merge-patch+json"
    )
    assert status == 422 and "pod updates may not change fields" in body["message"]


async def test_status_patch(http: aiohttp.ClientSession) -> None:
    await call(http, "POST", CLAIMS, claim("x"))
    patch = {
        "status": {"allocation": allocation(), "reservedFor": [_consumer(0)]},
        "metadata": {"labels": {"no": "effect"}},
    }
    status, patched = await call(
        http, "PATCH", f"{CLAIMS}/x/status", patch, content_type="application/merge-patch+json"
    )
    assert status == 200 and patched["status"]["reservedFor"] == [_consumer(0)]
    assert "labels" not in patched["metadata"]


# --- binding ----------------------------------------------------------------------------------------


def _binding(name: str, node: str, uid: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if uid:
        meta["uid"] = uid
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": meta,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


async def test_binding_assigns_the_pod_once(http: aiohttp.ClientSession) -> None:
    _, created = await call(http, "POST", PODS, pod("pod-0"))
    uid = created["metadata"]["uid"]
    status, body = await call(http, "POST", f"{PODS}/pod-0/binding", _binding("pod-0", "node-1", uid))
    assert (status, body) == (
        201,
        {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201},
    )
    _, bound = await call(http, "GET", f"{PODS}/pod-0")
    assert bound["spec"]["nodeName"] == "node-1"
    assert [c["type"] for c in bound["status"]["conditions"]] == ["PodScheduled"]
    status, body = await call(http, "POST", f"{PODS}/pod-0/binding", _binding("pod-0", "node-2"))
    assert status == 409 and body["reason"] == "Conflict"
    assert (
        body["message"]
        == 'Operation cannot be fulfilled on pods/binding "pod-0": pod pod-0 is already assigned to node "node-1"'
    )


async def test_binding_failures(http: aiohttp.ClientSession) -> None:
    await call(http, "POST", PODS, pod("pod-0"))
    status, body = await call(http, "POST", f"{PODS}/pod-0/binding", _binding("pod-0", "node-1", "old-uid"))
    assert status == 409 and "Precondition failed: UID in precondition: old-uid" in body["message"]
    status, body = await call(http, "POST", f"{PODS}/nope/binding", _binding("nope", "node-1"))
    assert (status, body["message"]) == (404, 'pods "nope" not found')
    status, body = await call(http, "POST", f"{PODS}/pod-0/binding", _binding("other", "node-1"))
    assert status == 400
    status, body = await call(http, "POST", f"{PODS}/pod-0/binding", _binding("pod-0", ""))
    assert (status, body["message"]) == (500, "target.name: Required value")  # a plain error upstream too
    status, _ = await call(http, "PUT", f"{PODS}/pod-0/binding", _binding("pod-0", "node-1"))
    assert status == 405


# --- other kinds ------------------------------------------------------------------------------------


async def test_leases_and_events(http: aiohttp.ClientSession) -> None:
    path = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
    lease = {"metadata": {"name": "kube-scheduler"}, "spec": {"holderIdentity": "a"}}
    status, created = await call(http, "POST", path, lease)
    assert status == 201 and created["kind"] == "Lease" and created["metadata"]["namespace"] == "kube-system"
    created["spec"]["holderIdentity"] = "b"
    status, updated = await call(http, "PUT", f"{path}/kube-scheduler", created)
    assert status == 200 and updated["spec"]["holderIdentity"] == "b"
    event = {
        "metadata": {"generateName": "pod-0."},
        "involvedObject": {"kind": "Pod", "name": "pod-0"},
        "reason": "Bound",
    }
    status, created_event = await call(http, "POST", "/api/v1/namespaces/default/events", event)
    assert status == 201 and created_event["reason"] == "Bound"
    status, _ = await call(
        http, "POST", "/apis/events.k8s.io/v1/namespaces/default/events", {"metadata": {"name": "e1"}}
    )
    assert status == 201


# --- auth -----------------------------------------------------------------------------------------


async def test_bearer_token_required_when_configured(aiohttp_server: Any) -> None:
    fake = FakeApiServer(token="s3cret")
    await fake.serve_with(aiohttp_server)
    async with aiohttp.ClientSession(fake.url) as http:
        status, body = await call(http, "GET", "/apis")
        assert status == 401 and body["reason"] == "Unauthorized" and body["code"] == 401
        status, _ = await call(http, "GET", "/apis", headers={"Authorization": "Bearer wrong"})
        assert status == 401
        status, _ = await call(http, "GET", "/apis", headers={"Authorization": "Bearer s3cret"})
        assert status == 200
        async with http.get("/readyz") as response:
            assert response.status == 200


async def test_rbac_denials_name_verb_and_resource(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    fake.deny("list", "resourceslices")
    fake.deny("create", "pods/binding")
    status, body = await call(http, "GET", f"{RS}/v1/resourceslices")
    assert status == 403 and body["reason"] == "Forbidden"
    assert body["message"] == (
        'resourceslices.resource.k8s.io is forbidden: User "system:serviceaccount:kube-system:dra-extender" '
        'cannot list resource "resourceslices" in API group "resource.k8s.io" at the cluster scope'
    )
    async with Watch(http, f"{RS}/v1/resourceslices") as watch:
        assert watch.status == 200
    await call(http, "POST", PODS, pod("pod-0"))
    status, body = await call(http, "POST", f"{PODS}/pod-0/binding", _binding("pod-0", "node-1"))
    assert status == 403
    assert 'pods/binding "pod-0" is forbidden' in body["message"] and 'in the namespace "default"' in body["message"]
    review: dict[str, Any] = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": "list", "group": "resource.k8s.io", "resource": "resourceslices"}},
    }
    status, answer = await call(http, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review)
    assert status == 201 and answer["status"]["allowed"] is False
    review["spec"]["resourceAttributes"]["verb"] = "watch"
    _, answer = await call(http, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review)
    assert answer["status"]["allowed"] is True
    fake.allow_all()
    status, _ = await call(http, "GET", f"{RS}/v1/resourceslices")
    assert status == 200


# --- faults and the request log --------------------------------------------------------------------


async def test_fail_next_requests_then_recover_and_log(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    rule = fake.fail("GET", r"/resourceslices$", status=500, times=2)
    statuses = [(await call(http, "GET", f"{RS}/v1/resourceslices", params={"limit": "5"}))[0] for _ in range(3)]
    assert statuses == [500, 500, 200] and rule.hits == 2
    records = fake.requests_to("GET", "resourceslices")
    assert [(r.method, r.path, r.query, r.status) for r in records] == [
        ("GET", "/apis/resource.k8s.io/v1/resourceslices", {"limit": "5"}, s) for s in statuses
    ]
    await call(http, "POST", CLAIMS, claim("x"))
    assert fake.requests[-1].body == claim("x") and fake.requests[-1].status == 201
    fake.clear_requests()
    assert fake.requests == []


async def test_internal_error_body(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    fake.fail(path="/api/v1/nodes", message="etcdserver: leader changed")
    status, body = await call(http, "GET", "/api/v1/nodes")
    assert status == 500 and body["reason"] == "InternalError"
    assert body["message"] == "Internal error occurred: etcdserver: leader changed"


async def test_too_many_requests_carries_retry_after(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    fake.fail(path="/api/v1/pods", status=429, retry_after=3)
    async with http.get("/api/v1/pods") as response:
        assert response.status == 429 and response.headers["Retry-After"] == "3"
        body = await response.json()
    assert body["reason"] == "TooManyRequests" and body["details"] == {"retryAfterSeconds": 3}


async def test_conflict_storm_on_status_updates(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    _, created = await call(http, "POST", CLAIMS, claim("x"))
    fake.conflicts(r"/resourceclaims/x/status$", times=3)
    created["status"] = {"allocation": allocation()}
    results = [await call(http, "PUT", f"{CLAIMS}/x/status", created) for _ in range(4)]
    assert [status for status, _ in results] == [409, 409, 409, 200]
    assert results[0][1]["message"].startswith('Operation cannot be fulfilled on resourceclaims.resource.k8s.io "x"')


async def test_delay_makes_a_short_client_timeout_expire(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    # Not a race on any machine: client and fake share one event loop, the client's 0.05 s timer
    # is armed before the fake starts its 0.5 s wait, and due timers fire in deadline order.
    fake.delay("GET", "/api/v1/nodes", seconds=0.5, times=1)
    with pytest.raises(asyncio.TimeoutError):
        await http.get("/api/v1/nodes", timeout=aiohttp.ClientTimeout(total=0.05))
    status, _ = await call(http, "GET", "/api/v1/nodes")
    assert status == 200


async def test_hold_until_released(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    gate = fake.hold("GET", "/api/v1/nodes$", times=1)
    pending = asyncio.ensure_future(call(http, "GET", "/api/v1/nodes"))
    await gate.arrived()
    assert not pending.done() and fake.requests_to("GET", "/api/v1/nodes$")[0].status is None
    status, _ = await call(http, "GET", "/api/v1/namespaces")  # other requests pass meanwhile
    assert status == 200 and not pending.done()
    gate.release()
    status, _ = await asyncio.wait_for(pending, 30)
    assert status == 200
    status, _ = await call(http, "GET", "/api/v1/nodes")  # times=1: the next one is not held
    assert status == 200 and gate.held == 1


async def test_hang_until_released(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    # POST: aiohttp's client silently retries idempotent requests once when the server disconnects.
    rule = fake.hang("POST", "/api/v1/nodes")
    pending = asyncio.ensure_future(http.post("/api/v1/nodes", json={"metadata": {"name": "node-1"}}))
    async with asyncio.timeout(30):  # a bound against a hang of the test, not a timing
        while not rule.hits:
            await asyncio.sleep(0.005)
    assert not pending.done()  # it has reached the hang: no answer until the release
    fake.release_hangs()
    with pytest.raises(aiohttp.ClientError):
        await asyncio.wait_for(pending, 30)
    status, _ = await call(http, "POST", "/api/v1/nodes", {"metadata": {"name": "node-1"}})
    assert status == 201


# --- direct access ----------------------------------------------------------------------------------


async def test_direct_access_generates_watch_events(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    async with Watch(http, f"{RS}/v1/resourceslices", resourceVersion=str(fake.resource_version)) as watch:
        raw = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "s1"},
            "spec": {"driver": "d"},
        }
        stored = fake.put_object(raw)
        assert stored["metadata"]["generation"] == 1
        assert (await watch.next())["type"] == "ADDED"
        fake.put_object({**raw, "spec": {"driver": "d", "nodeName": "n"}})
        modified = await watch.next()
        assert modified["type"] == "MODIFIED" and modified["object"]["metadata"]["generation"] == 2
        fake.delete_object("ResourceSlice", None, "s1")
        assert (await watch.next())["type"] == "DELETED"
    assert fake.objects("ResourceSlice") == []
    fake.put_object({**claim("x", finalizers=["f"]), "status": {"allocation": allocation()}})
    assert fake.delete_object("ResourceClaim", "default", "x")["metadata"]["deletionTimestamp"]
    fake.delete_object("ResourceClaim", "default", "x", force=True)
    assert fake.get_object("ResourceClaim", "default", "x") is None
    with pytest.raises(KeyError):
        fake.delete_object("ResourceClaim", "default", "x")


async def test_running_helper_serves_on_loopback() -> None:
    async with FakeApiServer.running() as fake:
        assert fake.url.startswith("http://127.0.0.1:")
        async with aiohttp.ClientSession(fake.url) as http:
            status, _ = await call(http, "GET", "/version")
            assert status == 200
