"""Classic DRA in the fake apiserver (Kubernetes 1.31, resource.k8s.io/v1alpha3, gate
DRAControlPlaneController) over real HTTP: the gate (discovery, 404, dropped fields),
PodSchedulingContext's REST strategy and validation (with the ``status.claims`` path quirk),
server-side apply of contexts, the v1alpha3 claim status rules, and garbage collection of a
deleted pod's contexts and claims.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from .apiserver import FakeApiServer
from .helpers import PODS, Watch, allocation, call, pod

A3 = "/apis/resource.k8s.io/v1alpha3"
CONTEXTS = f"{A3}/namespaces/default/podschedulingcontexts"
CLAIMS = f"{A3}/namespaces/default/resourceclaims"
CLASSES = f"{A3}/deviceclasses"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
NOW = "2024-08-13T10:00:00Z"


async def _served(aiohttp_server: Any, **options: Any) -> FakeApiServer:
    fake = FakeApiServer(bookmark_interval=None, clock=lambda: NOW, **options)
    await fake.serve_with(aiohttp_server)
    return fake


@pytest.fixture
async def fake(aiohttp_server: Any) -> FakeApiServer:
    """Gate on, v1alpha3 only: a 1.31 cluster with classic DRA."""
    return await _served(aiohttp_server, resource_versions=("v1alpha3",), classic=True)


@pytest.fixture
async def gate_off(aiohttp_server: Any) -> FakeApiServer:
    """v1alpha3 served, gate off (the default)."""
    return await _served(aiohttp_server, resource_versions=("v1beta1", "v1alpha3"))


@pytest.fixture
async def http(fake: FakeApiServer) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(fake.url) as session:
        yield session


@pytest.fixture
async def http_off(gate_off: FakeApiServer) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(gate_off.url) as session:
        yield session


def context(name: str = "pod-0", *, spec: dict[str, Any] | None = None, owner_uid: str = "") -> dict[str, Any]:
    raw: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1alpha3",
        "kind": "PodSchedulingContext",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec if spec is not None else {"potentialNodes": ["node-1", "node-2"]},
    }
    if owner_uid:
        raw["metadata"]["ownerReferences"] = [_owner(name, owner_uid)]
    return raw


def _owner(name: str, uid: str, *, controller: bool = True) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid, "controller": controller}


def claim3(name: str, *, controller: str = "", finalizers: list[str] | None = None) -> dict[str, Any]:
    """A v1alpha3 claim (flat ``deviceClassName``), classic when ``controller`` is set."""
    raw: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1alpha3",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "req-0", "deviceClassName": "class-a"}]}},
    }
    if controller:
        raw["spec"]["controller"] = controller
    if finalizers:
        raw["metadata"]["finalizers"] = finalizers
    return raw


def _consumer(index: int) -> dict[str, str]:
    return {"resource": "pods", "name": f"pod-{index}", "uid": f"uid-{index}"}


def _classic_allocation() -> dict[str, Any]:
    return {**allocation(), "controller": "driver.example.com"}


async def apply(
    http: aiohttp.ClientSession,
    name: str,
    body: Any,
    *,
    manager: str | None = "mgr-a",
    force: bool | None = None,
    raw: bytes | None = None,
) -> tuple[int, Any]:
    """A server-side apply of a context (``raw``: send these bytes instead of JSON)."""
    params = {} if manager is None else {"fieldManager": manager}
    if force is not None:
        params["force"] = "true" if force else "false"
    if raw is None:
        return await call(http, "PATCH", f"{CONTEXTS}/{name}", body, params=params, content_type=APPLY)
    async with http.patch(f"{CONTEXTS}/{name}", data=raw, params=params, headers={"Content-Type": APPLY}) as response:
        return response.status, await response.json()


async def _status_put(
    http: aiohttp.ClientSession, path: str, obj: dict[str, Any], status: dict[str, Any]
) -> tuple[int, Any]:
    """PUT ``obj`` with ``status`` to its status subresource (``path``: its collection)."""
    body = copy.deepcopy(obj)
    body["status"] = status
    return await call(http, "PUT", f"{path}/{obj['metadata']['name']}/status", body)


# --- the gate -------------------------------------------------------------------------------------


async def test_contexts_are_served_in_v1alpha3_with_the_gate_on(http: aiohttp.ClientSession) -> None:
    status, resources = await call(http, "GET", A3)
    assert status == 200
    by_name = {r["name"]: r for r in resources["resources"]}
    assert by_name["podschedulingcontexts"]["kind"] == "PodSchedulingContext"
    assert by_name["podschedulingcontexts"]["singularName"] == "podschedulingcontext"
    assert by_name["podschedulingcontexts"]["namespaced"] is True
    assert by_name["podschedulingcontexts/status"]["verbs"] == ["get", "patch", "update"]
    status, listed = await call(http, "GET", CONTEXTS)
    assert status == 200 and listed["kind"] == "PodSchedulingContextList" and listed["items"] == []
    status, _ = await call(http, "GET", f"{A3}/podschedulingcontexts")
    assert status == 200


async def test_contexts_are_absent_with_the_gate_off(http_off: aiohttp.ClientSession) -> None:
    _, resources = await call(http_off, "GET", A3)
    assert not any(r["name"].startswith("podschedulingcontexts") for r in resources["resources"])
    assert "resourceclaims" in {r["name"] for r in resources["resources"]}
    for method, path, body in [
        ("GET", CONTEXTS, None),
        ("POST", CONTEXTS, context()),
        ("GET", f"{CONTEXTS}/pod-0", None),
        ("PUT", f"{CONTEXTS}/pod-0/status", context()),
        ("PATCH", f"{CONTEXTS}/pod-0", context()),
    ]:
        content_type = APPLY if method == "PATCH" else "application/json"
        status, answer = await call(http_off, method, path, body, content_type=content_type)
        assert (status, answer["message"]) == (404, "the server could not find the requested resource"), path


async def test_contexts_exist_only_in_v1alpha3(aiohttp_server: Any) -> None:
    fake = await _served(aiohttp_server, resource_versions=("v1beta1", "v1alpha3"), classic=True)
    async with aiohttp.ClientSession(fake.url) as http:
        _, beta = await call(http, "GET", "/apis/resource.k8s.io/v1beta1")
        assert "podschedulingcontexts" not in {r["name"] for r in beta["resources"]}
        status, _ = await call(http, "GET", "/apis/resource.k8s.io/v1beta1/namespaces/default/podschedulingcontexts")
        assert status == 404
        status, _ = await call(http, "GET", CONTEXTS)
        assert status == 200


async def test_gate_off_drops_the_gated_fields(gate_off: FakeApiServer, http_off: aiohttp.ClientSession) -> None:
    status, created = await call(http_off, "POST", CLAIMS, claim3("c", controller="driver.example.com"))
    assert status == 201 and "controller" not in created["spec"]
    written = {"allocation": _classic_allocation(), "deallocationRequested": True}
    status, stored = await _status_put(http_off, CLAIMS, created, written)
    assert status == 200 and stored["status"] == {"allocation": allocation()}
    node_selector: dict[str, Any] = {"nodeSelectorTerms": [{"matchFields": []}]}
    status, device_class = await call(
        http_off, "POST", CLASSES, {"metadata": {"name": "class-a"}, "spec": {"suitableNodes": node_selector}}
    )
    assert status == 201 and device_class["spec"] == {}
    device_class["spec"] = {"suitableNodes": node_selector, "selectors": [{"cel": {"expression": "true"}}]}
    status, updated = await call(http_off, "PUT", f"{CLASSES}/class-a", device_class)
    assert status == 200 and "suitableNodes" not in updated["spec"] and updated["spec"]["selectors"]
    assert "controller" not in gate_off.get_object("ResourceClaim", "default", "c")["spec"]  # type: ignore[index]


async def test_gate_off_keeps_fields_the_stored_object_uses(
    gate_off: FakeApiServer, http_off: aiohttp.ClientSession
) -> None:
    raw = claim3("c", controller="driver.example.com")
    raw["status"] = {"allocation": _classic_allocation(), "deallocationRequested": True}
    stored = gate_off.put_object(raw)
    status, written = await _status_put(http_off, CLAIMS, stored, {**stored["status"], "reservedFor": []})
    assert status == 200 and written["status"]["deallocationRequested"] is True
    assert written["status"]["allocation"]["controller"] == "driver.example.com"
    assert written["spec"]["controller"] == "driver.example.com"


async def test_gate_on_keeps_the_gated_fields(http: aiohttp.ClientSession) -> None:
    status, created = await call(http, "POST", CLAIMS, claim3("c", controller="driver.example.com"))
    assert status == 201 and created["spec"]["controller"] == "driver.example.com"
    status, stored = await _status_put(http, CLAIMS, created, {"allocation": _classic_allocation()})
    assert status == 200 and stored["status"]["allocation"]["controller"] == "driver.example.com"
    status, requested = await _status_put(http, CLAIMS, stored, {**stored["status"], "deallocationRequested": True})
    assert status == 200 and requested["status"]["deallocationRequested"] is True
    suitable = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}]}
    _, device_class = await call(
        http, "POST", CLASSES, {"metadata": {"name": "class-a"}, "spec": {"suitableNodes": suitable}}
    )
    assert device_class["spec"] == {"suitableNodes": suitable}


async def test_other_versions_are_left_alone(aiohttp_server: Any) -> None:
    fake = await _served(aiohttp_server, resource_versions=("v1beta1", "v1alpha3"))
    async with aiohttp.ClientSession(fake.url) as http:
        raw = {**claim3("c"), "apiVersion": "resource.k8s.io/v1beta1"}
        raw["spec"]["controller"] = "driver.example.com"  # no such field in v1beta1: stored as sent
        status, created = await call(
            http, "POST", "/apis/resource.k8s.io/v1beta1/namespaces/default/resourceclaims", raw
        )
        assert status == 201 and created["spec"]["controller"] == "driver.example.com"


# --- PodSchedulingContext: strategy ------------------------------------------------------------------


async def test_context_create_clears_status_and_sets_no_generation(http: aiohttp.ClientSession) -> None:
    raw = context()
    raw["status"] = {"resourceClaims": [{"name": "gpu", "unsuitableNodes": ["node-1"]}]}
    status, created = await call(http, "POST", CONTEXTS, raw)
    assert status == 201 and created["kind"] == "PodSchedulingContext"
    assert created["status"] == {} and created["spec"] == {"potentialNodes": ["node-1", "node-2"]}
    assert "generation" not in created["metadata"] and created["metadata"]["uid"]


async def test_context_main_update_keeps_status_and_status_update_keeps_spec(
    fake: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    _, created = await call(http, "POST", CONTEXTS, context())
    claims = [{"name": "gpu", "unsuitableNodes": ["node-2"]}]
    body = copy.deepcopy(created)
    body["status"] = {"resourceClaims": claims}
    body["spec"] = {"potentialNodes": ["node-9"], "selectedNode": "node-1"}
    body["metadata"]["labels"] = {"a": "b"}
    status, stored = await call(http, "PUT", f"{CONTEXTS}/pod-0/status", body)
    assert status == 200 and stored["status"] == {"resourceClaims": claims}
    assert stored["spec"] == created["spec"] and "labels" not in stored["metadata"]
    main = copy.deepcopy(stored)
    main["spec"] = {"potentialNodes": ["node-1"], "selectedNode": "node-1"}
    main["status"] = {}
    status, updated = await call(http, "PUT", f"{CONTEXTS}/pod-0", main)
    assert status == 200 and updated["spec"] == main["spec"] and updated["status"] == {"resourceClaims": claims}
    patch = {"spec": {"selectedNode": "node-2"}, "status": {"resourceClaims": []}}
    status, patched = await call(http, "PATCH", f"{CONTEXTS}/pod-0", patch, content_type=MERGE)
    assert status == 200 and patched["spec"]["selectedNode"] == "node-2"
    assert patched["status"] == {"resourceClaims": claims}
    assert fake.contexts("default")[0]["spec"]["selectedNode"] == "node-2"


async def test_context_updates_may_be_unconditional_but_not_stale(http: aiohttp.ClientSession) -> None:
    _, created = await call(http, "POST", CONTEXTS, context())
    blind = copy.deepcopy(created)
    del blind["metadata"]["resourceVersion"]
    blind["spec"]["selectedNode"] = "node-1"
    status, updated = await call(http, "PUT", f"{CONTEXTS}/pod-0", blind)
    assert status == 200 and updated["spec"]["selectedNode"] == "node-1"
    status, stored = await _status_put(http, CONTEXTS, blind, {"resourceClaims": [{"name": "gpu"}]})
    assert status == 200 and stored["status"] == {"resourceClaims": [{"name": "gpu"}]}
    status, body = await call(http, "PUT", f"{CONTEXTS}/pod-0", created)  # the creation's resourceVersion
    assert status == 409 and body["reason"] == "Conflict"
    assert body["message"].startswith('Operation cannot be fulfilled on podschedulingcontexts.resource.k8s.io "pod-0"')


async def test_claims_still_need_a_resource_version(http: aiohttp.ClientSession) -> None:
    _, created = await call(http, "POST", CLAIMS, claim3("c"))
    del created["metadata"]["resourceVersion"]
    created["metadata"]["labels"] = {"a": "b"}
    status, body = await call(http, "PUT", f"{CLAIMS}/c", created)
    assert status == 422 and "must be specified for an update" in body["message"]


async def test_context_watch(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    async with Watch(http, CONTEXTS, resourceVersion=str(fake.resource_version)) as watch:
        await call(http, "POST", CONTEXTS, context())
        event = await watch.next()
        assert event["type"] == "ADDED" and event["object"]["apiVersion"] == "resource.k8s.io/v1alpha3"


# --- PodSchedulingContext: validation -------------------------------------------------------------


def _nodes(count: int) -> list[str]:
    return [f"node-{index}" for index in range(count)]


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        (
            {"potentialNodes": _nodes(129)},
            "spec.potentialNodes",
            "spec.potentialNodes: Too long: may not be longer than 128",
        ),
        (
            {"potentialNodes": ["node-1", "node-2", "node-1"]},
            "spec.potentialNodes[2]",
            'spec.potentialNodes[2]: Duplicate value: "node-1"',
        ),
        (
            {"potentialNodes": ["Node_1"]},
            "spec.potentialNodes[0]",
            'spec.potentialNodes[0]: Invalid value: "Node_1": a lowercase RFC 1123 subdomain',
        ),
    ],
)
async def test_context_spec_validation(
    http: aiohttp.ClientSession, spec: dict[str, Any], field: str, message: str
) -> None:
    status, body = await call(http, "POST", CONTEXTS, context(spec=spec))
    assert status == 422 and body["reason"] == "Invalid"
    assert body["details"]["kind"] == "PodSchedulingContext" and body["details"]["group"] == "resource.k8s.io"
    assert body["details"]["causes"][0]["field"] == field
    assert body["message"].startswith(f'PodSchedulingContext.resource.k8s.io "pod-0" is invalid: {message}')
    status, _ = await call(http, "POST", CONTEXTS, context(spec={"potentialNodes": _nodes(128)}))
    assert status == 201
    _, stored = await call(http, "GET", f"{CONTEXTS}/pod-0")
    stored["spec"] = spec
    status, body = await call(http, "PUT", f"{CONTEXTS}/pod-0", stored)
    assert status == 422 and body["details"]["causes"][0]["field"] == field


async def test_context_name_and_selected_node(http: aiohttp.ClientSession) -> None:
    status, body = await call(http, "POST", CONTEXTS, context("Pod_0"))
    assert status == 422 and body["details"]["causes"][0]["field"] == "metadata.name"
    # 1.31 does not validate selectedNode (only potentialNodes); neither does the fake
    status, created = await call(http, "POST", CONTEXTS, context(spec={"selectedNode": "Not_A_Node"}))
    assert status == 201 and created["spec"] == {"selectedNode": "Not_A_Node"}


@pytest.mark.parametrize(
    ("claims", "field", "detail"),
    [
        ([{"name": "gpu"}, {"name": "nic"}, {"name": "gpu"}], "status.claims[2]", 'Duplicate value: "gpu"'),
        ([{"name": "gpu", "unsuitableNodes": _nodes(129)}], "status.claims[0].unsuitableNodes", "Too long"),
        (
            [{"name": "gpu", "unsuitableNodes": ["node-1", "node-1"]}],
            "status.claims[0].unsuitableNodes[1]",
            'Duplicate value: "node-1"',
        ),
        (
            [{"name": "gpu"}, {"name": "nic", "unsuitableNodes": ["bad node"]}],
            "status.claims[1].unsuitableNodes[0]",
            'Invalid value: "bad node"',
        ),
    ],
)
async def test_context_status_validation_reports_status_claims(
    http: aiohttp.ClientSession, claims: list[dict[str, Any]], field: str, detail: str
) -> None:
    _, created = await call(http, "POST", CONTEXTS, context())
    status, body = await _status_put(http, CONTEXTS, created, {"resourceClaims": claims})
    assert status == 422
    assert body["details"]["causes"][0]["field"] == field  # the upstream QUIRK: not status.resourceClaims
    assert f"{field}: {detail}" in body["message"]
    fine = [{"name": "gpu", "unsuitableNodes": _nodes(128)}, {"name": "nic"}]
    status, _ = await _status_put(http, CONTEXTS, created, {"resourceClaims": fine})
    assert status == 200


# --- PodSchedulingContext: server-side apply -----------------------------------------------------


async def test_apply_needs_a_field_manager(http: aiohttp.ClientSession) -> None:
    status, body = await apply(http, "pod-0", context(), manager=None)
    assert status == 422 and body["reason"] == "Invalid"
    assert (
        body["message"]
        == 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch'
    )
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueRequired",
            "message": "Required value: is required for apply patch",
            "field": "fieldManager",
        }
    ]


async def test_apply_creates_the_context_with_its_metadata(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    raw = context(spec={"selectedNode": "node-1", "potentialNodes": ["node-1"]}, owner_uid="uid-pod-0")
    raw["metadata"]["labels"] = {"app": "x"}
    raw["status"] = {"resourceClaims": [{"name": "gpu"}]}
    status, created = await apply(http, "pod-0", raw)
    assert status == 201
    assert created["metadata"]["ownerReferences"] == [_owner("pod-0", "uid-pod-0")]
    assert created["metadata"]["labels"] == {"app": "x"} and created["status"] == {}
    assert created["spec"] == {"selectedNode": "node-1", "potentialNodes": ["node-1"]}
    assert fake.field_managers("PodSchedulingContext", "default", "pod-0") == {
        "mgr-a": ["potentialNodes", "selectedNode"]
    }
    record = fake.requests_to("PATCH", "podschedulingcontexts")[-1]
    assert record.status == 201 and record.query == {"fieldManager": "mgr-a"} and record.body == raw


async def test_apply_updates_and_removes_what_the_manager_no_longer_applies(
    fake: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    await apply(http, "pod-0", context(spec={"selectedNode": "node-1", "potentialNodes": ["node-1", "node-2"]}))
    status, updated = await apply(http, "pod-0", context(spec={"potentialNodes": ["node-3"]}))
    assert status == 200 and updated["spec"] == {"potentialNodes": ["node-3"]}  # selectedNode went, list replaced
    before = fake.resource_version
    status, same = await apply(http, "pod-0", context(spec={"potentialNodes": ["node-3"]}))
    assert status == 200 and same["metadata"]["resourceVersion"] == updated["metadata"]["resourceVersion"]
    assert fake.resource_version == before
    stale = context(spec={"potentialNodes": ["node-4"]})
    stale["metadata"]["resourceVersion"] = "1"
    status, body = await apply(http, "pod-0", stale)
    assert status == 409 and body["reason"] == "Conflict"
    status, body = await apply(http, "pod-0", context(spec={"potentialNodes": ["x_y"]}))
    assert status == 422 and body["details"]["causes"][0]["field"] == "spec.potentialNodes[0]"


async def test_apply_conflicts_with_another_apply_manager_unless_forced(
    fake: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    await apply(http, "pod-0", context(spec={"selectedNode": "node-1"}), manager="kube-scheduler")
    status, body = await apply(http, "pod-0", context(spec={"selectedNode": "node-2"}), manager="driver")
    assert status == 409
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'Apply failed with 1 conflict: conflict with "kube-scheduler": .spec.selectedNode',
        "reason": "Conflict",
        "details": {
            "causes": [
                {
                    "reason": "FieldManagerConflict",
                    "message": 'conflict with "kube-scheduler"',
                    "field": ".spec.selectedNode",
                }
            ]
        },
        "code": 409,
    }
    status, body = await apply(http, "pod-0", context(spec={"selectedNode": "node-2"}), manager="driver", force=False)
    assert status == 409
    # the same value is shared ownership, not a conflict
    status, shared = await apply(http, "pod-0", context(spec={"selectedNode": "node-1"}), manager="driver")
    assert status == 200 and shared["spec"] == {"selectedNode": "node-1"}
    assert fake.field_managers("PodSchedulingContext", "default", "pod-0") == {
        "kube-scheduler": ["selectedNode"],
        "driver": ["selectedNode"],
    }
    status, forced = await apply(http, "pod-0", context(spec={"selectedNode": "node-2"}), manager="driver", force=True)
    assert status == 200 and forced["spec"] == {"selectedNode": "node-2"}
    assert fake.field_managers("PodSchedulingContext", "default", "pod-0") == {"driver": ["selectedNode"]}
    # the scheduler applies without the field now: it is the driver's, so it stays
    status, kept = await apply(http, "pod-0", context(spec={"potentialNodes": ["node-1"]}), manager="kube-scheduler")
    assert status == 200 and kept["spec"] == {"selectedNode": "node-2", "potentialNodes": ["node-1"]}


async def test_apply_conflicts_with_update_writers(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    _, created = await call(http, "POST", CONTEXTS, context(), headers={"User-Agent": "kube-scheduler/v1.31.0"})
    created["spec"]["selectedNode"] = "node-1"
    await call(http, "PUT", f"{CONTEXTS}/pod-0", created, params={"fieldManager": "resource-driver"})
    assert fake.field_managers("PodSchedulingContext", "default", "pod-0") == {
        "kube-scheduler (Update)": ["potentialNodes"],
        "resource-driver (Update)": ["selectedNode"],
    }
    config = context(spec={"selectedNode": "node-2", "potentialNodes": ["node-3"]})
    status, body = await apply(http, "pod-0", config)
    assert status == 409
    assert body["message"] == (  # a manager's time is never part of its name in a conflict
        "Apply failed with 2 conflicts: "
        'conflicts with "kube-scheduler" using resource.k8s.io/v1alpha3:\n- .spec.potentialNodes\n'
        'conflicts with "resource-driver" using resource.k8s.io/v1alpha3:\n- .spec.selectedNode'
    )
    assert {(c["message"], c["field"]) for c in body["details"]["causes"]} == {
        ('conflict with "kube-scheduler" using resource.k8s.io/v1alpha3', ".spec.potentialNodes"),
        ('conflict with "resource-driver" using resource.k8s.io/v1alpha3', ".spec.selectedNode"),
    }
    status, forced = await apply(http, "pod-0", config, force=True)
    assert status == 200 and forced["spec"] == config["spec"]
    assert fake.field_managers("PodSchedulingContext", "default", "pod-0") == {
        "mgr-a": ["potentialNodes", "selectedNode"]
    }


async def test_apply_to_a_directly_written_context_meets_before_first_apply(
    fake: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    fake.put_object(context(spec={"selectedNode": "node-1"}))
    status, body = await apply(http, "pod-0", context(spec={"selectedNode": "node-2"}))
    assert status == 409
    assert body["message"] == (
        'Apply failed with 1 conflict: conflict with "before-first-apply" using resource.k8s.io/v1alpha3: '
        ".spec.selectedNode"
    )


async def test_apply_accepts_yaml(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    yaml_body = b"""apiVersion: resource.k8s.io/v1alpha3
kind: PodSchedulingContext
metadata:
  name: pod-0
spec:
  selectedNode: node-1
  potentialNodes: [node-1, node-2]
"""
    status, created = await apply(http, "pod-0", None, raw=yaml_body)
    assert status == 201 and created["spec"] == {"selectedNode": "node-1", "potentialNodes": ["node-1", "node-2"]}
    assert fake.requests[-1].body["spec"]["selectedNode"] == "node-1"
    status, body = await apply(http, "pod-0", None, raw=b"spec: [unclosed")
    assert status == 400
    status, body = await apply(http, "pod-0", {"metadata": {"name": "pod-0"}, "spec": {}})
    assert status == 400 and "apiVersion" in body["message"]
    status, body = await apply(http, "pod-1", context("pod-0"))
    assert status == 400 and "does not match the name on the URL" in body["message"]


async def test_apply_elsewhere_is_still_unsupported(http: aiohttp.ClientSession) -> None:
    await call(http, "POST", PODS, pod("pod-0"))
    status, body = await call(
        http, "PATCH", f"{PODS}/pod-0", {"metadata": {}}, params={"fieldManager": "m"}, content_type=APPLY
    )
    assert status == 415 and body["reason"] == "UnsupportedMediaType"
    await call(http, "POST", CONTEXTS, context())
    status, _ = await call(
        http, "PATCH", f"{CONTEXTS}/pod-0/status", {"status": {}}, params={"fieldManager": "m"}, content_type=APPLY
    )
    assert status == 415
    status, body = await call(
        http, "PATCH", f"{CONTEXTS}/pod-0", {"spec": {}}, params={"force": "true"}, content_type=MERGE
    )
    assert status == 422 and body["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for non-apply patch'
    )


# --- ResourceClaim v1alpha3: classic status rules ------------------------------------------------


async def _allocated(http: aiohttp.ClientSession, *, reserved: int = 0) -> dict[str, Any]:
    _, created = await call(http, "POST", CLAIMS, claim3("c", controller="driver.example.com"))
    status: dict[str, Any] = {"allocation": _classic_allocation()}
    if reserved:
        status["reservedFor"] = [_consumer(i) for i in range(reserved)]
    code, stored = await _status_put(http, CLAIMS, created, status)
    assert code == 200, stored
    result: dict[str, Any] = stored
    return result


def _cause(body: dict[str, Any]) -> tuple[str, str]:
    cause = body["details"]["causes"][0]
    return cause["field"], cause["message"]


async def test_reserved_for_needs_an_allocation(http: aiohttp.ClientSession) -> None:
    _, created = await call(http, "POST", CLAIMS, claim3("c"))
    status, body = await _status_put(http, CLAIMS, created, {"reservedFor": [_consumer(0)]})
    assert status == 422
    assert _cause(body) == ("status.reservedFor", "Forbidden: may not be specified when `allocated` is not set")


async def test_reserved_for_is_at_most_32_in_v1alpha3(http: aiohttp.ClientSession) -> None:
    stored = await _allocated(http, reserved=32)
    status, body = await _status_put(
        http, CLAIMS, stored, {**stored["status"], "reservedFor": [_consumer(i) for i in range(33)]}
    )
    assert status == 422
    assert _cause(body) == ("status.reservedFor", "Too long: may not be longer than 32")
    assert body["details"]["causes"][0]["reason"] == "FieldValueTooLong"


async def test_deallocation_requested_rules(http: aiohttp.ClientSession) -> None:
    stored = await _allocated(http, reserved=2)
    status, body = await _status_put(http, CLAIMS, stored, {**stored["status"], "deallocationRequested": True})
    assert status == 422
    assert _cause(body) == (
        "status.deallocationRequested",
        "Forbidden: deallocation cannot be requested while `reservedFor` is set",
    )
    # the claim's consumers go and deallocation is requested in the same write: fine
    status, requested = await _status_put(
        http, CLAIMS, stored, {"allocation": _classic_allocation(), "deallocationRequested": True}
    )
    assert status == 200 and requested["status"]["deallocationRequested"] is True
    status, body = await _status_put(http, CLAIMS, requested, {**requested["status"], "reservedFor": [_consumer(5)]})
    assert status == 422
    assert _cause(body) == (
        "status.reservedFor",
        "Forbidden: new entries may not be added while `deallocationRequested` or `deletionTimestamp` are set",
    )
    status, body = await _status_put(http, CLAIMS, requested, {"allocation": _classic_allocation()})
    assert status == 422
    assert _cause(body) == ("status.deallocationRequested", "Forbidden: may not be cleared when `allocation` is set")
    status, body = await _status_put(http, CLAIMS, requested, {"deallocationRequested": True})
    assert status == 422
    # upstream reports this one on "status" itself
    assert _cause(body) == ("status", "Forbidden: `allocation` must be set when `deallocationRequested` is set")
    status, deallocated = await _status_put(http, CLAIMS, requested, {})
    assert status == 200 and deallocated["status"] == {}


async def test_reserved_for_may_shrink_while_deallocation_is_requested(
    fake: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    raw = claim3("c", controller="driver.example.com")
    raw["status"] = {
        "allocation": _classic_allocation(),
        "deallocationRequested": True,
        "reservedFor": [_consumer(0), _consumer(1)],
    }
    stored = fake.put_object(raw)  # an earlier state no write could reach now
    status, shrunk = await _status_put(http, CLAIMS, stored, {**stored["status"], "reservedFor": [_consumer(1)]})
    assert status == 200 and shrunk["status"]["reservedFor"] == [_consumer(1)]


async def test_deallocation_needs_an_allocation(http: aiohttp.ClientSession) -> None:
    _, created = await call(http, "POST", CLAIMS, claim3("c"))
    status, body = await _status_put(http, CLAIMS, created, {"deallocationRequested": True})
    assert status == 422 and _cause(body)[0] == "status"


@pytest.mark.parametrize(
    ("controller", "detail"),
    [
        ("not a driver", 'Invalid value: "not a driver": a lowercase RFC 1123 subdomain'),
        ("d" * 64 + ".example.com", "Too long: may not be longer than 63"),
    ],
)
async def test_claim_controller_is_a_driver_name(http: aiohttp.ClientSession, controller: str, detail: str) -> None:
    status, body = await call(http, "POST", CLAIMS, claim3("c", controller=controller))
    assert status == 422 and _cause(body)[0] == "spec.controller" and detail in body["message"]


async def test_claim_controller_upper_case_passes_and_spec_stays_immutable(http: aiohttp.ClientSession) -> None:
    status, created = await call(http, "POST", CLAIMS, claim3("c", controller="Driver.Example.com"))
    assert status == 201  # ValidateCSIDriverName lowercases before matching
    created["spec"]["controller"] = "other.example.com"
    status, body = await call(http, "PUT", f"{CLAIMS}/c", created)
    assert status == 422 and _cause(body) == ("spec", 'Invalid value: "object": field is immutable')
    _, fresh = await call(http, "POST", CLAIMS, claim3("d"))
    status, body = await _status_put(http, CLAIMS, fresh, {"allocation": {**allocation(), "controller": "Bad_Name"}})
    assert status == 422 and _cause(body)[0] == "status.allocation.controller"


# --- garbage collection ---------------------------------------------------------------------------


async def _pod(http: aiohttp.ClientSession, name: str, **extra: Any) -> str:
    raw = pod(name)
    raw["metadata"].update(extra)
    status, created = await call(http, "POST", PODS, raw)
    assert status == 201
    return str(created["metadata"]["uid"])


async def test_deleting_a_pod_collects_its_contexts_and_claims(
    fake: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    uid = await _pod(http, "pod-0")
    await call(http, "POST", CONTEXTS, context(owner_uid=uid))
    owned = claim3("pod-0-gpu")
    owned["metadata"]["ownerReferences"] = [_owner("pod-0", uid)]
    await call(http, "POST", CLAIMS, owned)
    protected = claim3("pod-0-nic", finalizers=["resource.kubernetes.io/delete-protection"])
    protected["metadata"]["ownerReferences"] = [_owner("pod-0", uid)]
    await call(http, "POST", CLAIMS, protected)
    not_controller = claim3("shared")
    not_controller["metadata"]["ownerReferences"] = [_owner("pod-0", uid, controller=False)]
    await call(http, "POST", CLAIMS, not_controller)
    other = claim3("other")
    other["metadata"]["ownerReferences"] = [_owner("pod-0", "an-older-pod-0")]
    await call(http, "POST", CLAIMS, other)
    async with Watch(http, CONTEXTS, resourceVersion=str(fake.resource_version)) as watch:
        status, _ = await call(http, "DELETE", f"{PODS}/pod-0")
        assert status == 200
        assert (await watch.next())["type"] == "DELETED"
    assert fake.contexts() == [] and fake.get_object("ResourceClaim", "default", "pod-0-gpu") is None
    marked = fake.get_object("ResourceClaim", "default", "pod-0-nic")
    assert marked is not None and marked["metadata"]["deletionTimestamp"] == NOW
    assert {c["metadata"]["name"] for c in fake.objects("ResourceClaim")} == {"pod-0-nic", "shared", "other"}


async def test_a_pod_with_finalizers_takes_its_dependents_when_it_goes(
    fake: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    uid = await _pod(http, "pod-0", finalizers=["example.com/keep"])
    await call(http, "POST", CONTEXTS, context(owner_uid=uid))
    _, deleting = await call(http, "DELETE", f"{PODS}/pod-0")
    assert deleting["metadata"]["deletionTimestamp"] and len(fake.contexts()) == 1  # the pod is still there
    deleting["metadata"]["finalizers"] = []
    status, _ = await call(http, "PUT", f"{PODS}/pod-0", deleting)
    assert status == 200 and fake.get_object("Pod", "default", "pod-0") is None
    assert fake.contexts() == []


async def test_direct_deletion_and_collect_garbage(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    uid = await _pod(http, "pod-0")
    fake.put_object(context(owner_uid=uid))
    fake.delete_object("Pod", "default", "pod-0")
    assert fake.contexts() == []
    fake.put_object(context("orphan", owner_uid="uid-gone"))
    live_uid = await _pod(http, "pod-1")
    fake.put_object(context("pod-1", owner_uid=live_uid))
    assert fake.collect_garbage() == 1
    assert [c["metadata"]["name"] for c in fake.contexts()] == ["pod-1"]
