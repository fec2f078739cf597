"""The fake apiserver's scheduling.k8s.io/v1alpha2 over real HTTP (``gangs=True``, ``podgroups.py``):
discovery with and without the gate, PodGroups created, listed and watched, the protection
finalizer and deletion, validation, the immutable spec and the gated fields, the status
subresource, the Workload template check, and Workloads. ``test_differential.py`` holds the same
behaviour to kube-apiserver v1.36.3.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from .apiserver import FakeApiServer
from .helpers import Watch, call
from .resources import GENERIC_WORKLOAD_GATE

GROUP = "/apis/scheduling.k8s.io"
VERSION = f"{GROUP}/v1alpha2"
PGS = f"{VERSION}/namespaces/default/podgroups"
WORKLOADS = f"{VERSION}/namespaces/default/workloads"
FINALIZER = "scheduling.k8s.io/podgroup-protection"
MERGE = "application/merge-patch+json"


def podgroup(name: str, policy: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    """A v1alpha2 PodGroup; a gang of 2 unless ``policy`` says otherwise."""
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}} if policy is None else policy, **spec},
    }


def workload(name: str, templates: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    if templates is None:
        templates = [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 2}}}]
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "Workload",
        "metadata": {"name": name},
        "spec": {"podGroupTemplates": templates},
    }


def condition(**fields: Any) -> dict[str, Any]:
    return {
        "type": "PodGroupScheduled",
        "status": "True",
        "reason": "Scheduled",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        **fields,
    }


def causes(body: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["field"], c["message"]) for c in body["details"]["causes"]]


@pytest.fixture
async def gangs(aiohttp_server: Any) -> FakeApiServer:
    server = FakeApiServer(bookmark_interval=None, gangs=True)
    await server.serve_with(aiohttp_server)
    return server


@pytest.fixture
async def client(gangs: FakeApiServer) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(gangs.url) as session:
        yield session


# --- discovery and the gate -----------------------------------------------------------------------


async def test_discovery_lists_the_group_only_with_gangs(
    http: aiohttp.ClientSession, client: aiohttp.ClientSession, gangs: FakeApiServer
) -> None:
    assert GENERIC_WORKLOAD_GATE in gangs.gates
    _, without = await call(http, "GET", "/apis")
    _, with_gangs = await call(client, "GET", "/apis")
    assert "scheduling.k8s.io" not in {g["name"] for g in without["groups"]}
    groups = {g["name"]: g for g in with_gangs["groups"]}
    assert groups["scheduling.k8s.io"]["versions"] == [
        {"groupVersion": "scheduling.k8s.io/v1alpha2", "version": "v1alpha2"}
    ]
    # the other groups are the same either way
    assert [g for g in with_gangs["groups"] if g["name"] != "scheduling.k8s.io"] == without["groups"]
    status, group = await call(client, "GET", GROUP)
    assert status == 200 and group["kind"] == "APIGroup"
    assert group["preferredVersion"] == {"groupVersion": "scheduling.k8s.io/v1alpha2", "version": "v1alpha2"}
    _, listing = await call(client, "GET", VERSION)
    assert listing["groupVersion"] == "scheduling.k8s.io/v1alpha2"
    by_name = {r["name"]: r for r in listing["resources"]}
    assert list(by_name) == ["podgroups", "podgroups/status", "workloads"]
    assert by_name["podgroups"]["kind"] == "PodGroup" and by_name["podgroups"]["singularName"] == "podgroup"
    assert by_name["podgroups"]["namespaced"] is True and "watch" in by_name["podgroups"]["verbs"]
    assert by_name["podgroups/status"]["verbs"] == ["get", "patch", "update"]
    assert by_name["workloads"]["kind"] == "Workload" and by_name["workloads"]["namespaced"] is True
    for path in (GROUP, VERSION):
        status, body = await call(http, "GET", path)
        assert status == 404 and body["message"] == "the server could not find the requested resource"


async def test_without_the_gate_the_collections_are_404(http: aiohttp.ClientSession) -> None:
    for method, path, body in (
        ("POST", PGS, podgroup("pg")),
        ("GET", PGS, None),
        ("GET", f"{PGS}/pg/status", None),
        ("GET", WORKLOADS, None),
        ("GET", f"{VERSION}/podgroups", None),
    ):
        status, answer = await call(http, method, path, body)
        assert (status, answer["reason"]) == (404, "NotFound"), path


# --- create, list, watch -------------------------------------------------------------------------


async def test_create_get_list_and_watch(gangs: FakeApiServer, client: aiohttp.ClientSession) -> None:
    start = str(gangs.resource_version)
    async with Watch(client, PGS, resourceVersion=start) as watch:
        status, created = await call(client, "POST", PGS, podgroup("train"))
        assert status == 201
        meta = created["metadata"]
        assert meta["finalizers"] == [FINALIZER]
        assert meta["uid"] and "generation" not in meta
        assert [(e["manager"], e["operation"]) for e in meta["managedFields"]] == [("Python", "Update")]
        assert created["spec"] == {
            "schedulingPolicy": {"gang": {"minCount": 2}},
            "podGroupTemplateRef": None,
            "disruptionMode": "Pod",
        }
        assert created["status"] == {}
        _, got = await call(client, "GET", f"{PGS}/train")
        assert got == created
        await call(client, "POST", PGS, podgroup("infer", {"basic": {}}))
        labelled = copy.deepcopy(created)
        labelled["metadata"]["labels"] = {"team": "a"}
        status, updated = await call(client, "PUT", f"{PGS}/train", labelled)
        assert status == 200 and "generation" not in updated["metadata"]
        events = [await watch.next() for _ in range(3)]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "train"),
        ("ADDED", "infer"),
        ("MODIFIED", "train"),
    ]
    assert events[2]["object"]["metadata"]["labels"] == {"team": "a"}
    _, listed = await call(client, "GET", PGS)
    assert listed["kind"] == "PodGroupList" and listed["apiVersion"] == "scheduling.k8s.io/v1alpha2"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["infer", "train"]
    _, one = await call(client, "GET", PGS, params={"fieldSelector": "metadata.name=train"})
    assert [i["metadata"]["name"] for i in one["items"]] == ["train"]
    _, everywhere = await call(
        client, "GET", f"{VERSION}/podgroups", params={"fieldSelector": "metadata.namespace=default"}
    )
    assert len(everywhere["items"]) == 2
    status, body = await call(client, "GET", PGS, params={"fieldSelector": "spec.schedulingPolicy=x"})
    assert status == 400
    assert (
        body["message"]
        == '"spec.schedulingPolicy" is not a known field selector: only "metadata.name", "metadata.namespace"'
    )
    status, body = await call(client, "POST", PGS, podgroup("train"))
    assert status == 409 and body["reason"] == "AlreadyExists"
    assert [o["metadata"]["name"] for o in gangs.objects("PodGroup", "default")] == ["infer", "train"]


async def test_a_created_group_gets_the_protection_finalizer_once(client: aiohttp.ClientSession) -> None:
    own = podgroup("own")
    own["metadata"]["finalizers"] = ["example.com/a"]
    _, created = await call(client, "POST", PGS, own)
    assert created["metadata"]["finalizers"] == ["example.com/a", FINALIZER]
    listed_first = podgroup("first")
    listed_first["metadata"]["finalizers"] = [FINALIZER, "example.com/a"]
    _, created = await call(client, "POST", PGS, listed_first)
    assert created["metadata"]["finalizers"] == [FINALIZER, "example.com/a"]
    status, created = await call(client, "POST", PGS, {**podgroup("with-status"), "status": {"conditions": []}})
    assert status == 201 and created["status"] == {}


async def test_the_protection_finalizer_holds_a_deleted_group(
    gangs: FakeApiServer, client: aiohttp.ClientSession
) -> None:
    await call(client, "POST", PGS, podgroup("pg"))
    status, marked = await call(client, "DELETE", f"{PGS}/pg")
    assert status == 200 and marked["kind"] == "PodGroup"
    assert marked["metadata"]["deletionTimestamp"] and marked["metadata"]["deletionGracePeriodSeconds"] == 0
    _, again = await call(client, "DELETE", f"{PGS}/pg")
    assert again["metadata"]["resourceVersion"] == marked["metadata"]["resourceVersion"]
    status, still = await call(client, "GET", f"{PGS}/pg")
    assert status == 200 and still["metadata"]["finalizers"] == [FINALIZER]
    more = copy.deepcopy(still)
    more["metadata"]["finalizers"].append("example.com/b")
    status, body = await call(client, "PUT", f"{PGS}/pg", more)
    assert status == 422 and "no new finalizers can be added" in body["message"]
    async with Watch(client, PGS, resourceVersion=still["metadata"]["resourceVersion"]) as watch:
        still["metadata"]["finalizers"] = []  # what kube-controller-manager does once no member is active
        status, _ = await call(client, "PUT", f"{PGS}/pg", still)
        assert status == 200
        event = await watch.next()
    assert event["type"] == "DELETED" and event["object"]["metadata"]["finalizers"] == [FINALIZER]
    status, _ = await call(client, "GET", f"{PGS}/pg")
    assert status == 404
    # written directly there is no admission: no finalizer, and the DELETE answers a Status
    stored = gangs.put_object(podgroup("direct"))
    assert "finalizers" not in stored["metadata"]
    status, gone = await call(client, "DELETE", f"{PGS}/direct")
    assert status == 200
    assert gone == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {
            "name": "direct",
            "group": "scheduling.k8s.io",
            "kind": "podgroups",
            "uid": stored["metadata"]["uid"],
        },
    }
    assert gangs.get_object("PodGroup", "default", "direct") is None


# --- validation ------------------------------------------------------------------------------------


CLAIM_MEMBERS = "`resourceClaimName`, `resourceClaimTemplateName`"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(
            {"schedulingPolicy": {"gang": {"minCount": 0}}},
            [("spec.schedulingPolicy.gang.minCount", "Required value")],
            id="minCount 0",
        ),
        pytest.param(
            {"schedulingPolicy": {"gang": {}}},
            [("spec.schedulingPolicy.gang.minCount", "Required value")],
            id="no minCount",
        ),
        pytest.param(
            {"schedulingPolicy": {"gang": {"minCount": -1}}},
            [("spec.schedulingPolicy.gang.minCount", "Invalid value: -1: must be greater than or equal to 1")],
            id="negative minCount",
        ),
        pytest.param(
            {"schedulingPolicy": {"basic": {}, "gang": {"minCount": 1}}},
            [("spec.schedulingPolicy", 'Invalid value: "{basic, gang}": must specify exactly one of: `basic`, `gang`')],
            id="basic and gang",
        ),
        pytest.param(
            {},
            [("spec.schedulingPolicy", 'Invalid value: "": must specify one of: `basic`, `gang`')],
            id="no policy",
        ),
        pytest.param(
            {
                "schedulingPolicy": {"basic": {}},
                "resourceClaims": [{"name": f"c{i}", "resourceClaimName": f"claim-{i}"} for i in range(5)],
            },
            [("spec.resourceClaims", "Too many: 5: must have at most 4 items")],
            id="five claims",
        ),
        pytest.param(
            {
                "schedulingPolicy": {"basic": {}},
                "resourceClaims": [{"name": "c", "resourceClaimName": "x", "resourceClaimTemplateName": "y"}],
            },
            [
                (
                    "spec.resourceClaims[0]",
                    f'Invalid value: "{{resourceClaimName, resourceClaimTemplateName}}": '
                    f"must specify exactly one of: {CLAIM_MEMBERS}",
                )
            ],
            id="claim name and template",
        ),
        pytest.param(
            {"schedulingPolicy": {"basic": {}}, "resourceClaims": [{"name": "c"}]},
            [("spec.resourceClaims[0]", f'Invalid value: "": must specify one of: {CLAIM_MEMBERS}')],
            id="claim without a source",
        ),
        pytest.param(
            {"schedulingPolicy": {"basic": {}}, "resourceClaims": [{"resourceClaimName": "x"}]},
            [("spec.resourceClaims[0].name", "Required value")],
            id="claim without a name",
        ),
        pytest.param(
            {
                "schedulingPolicy": {"basic": {}},
                "resourceClaims": [{"name": "c", "resourceClaimName": "x"}, {"name": "c", "resourceClaimName": "y"}],
            },
            [("spec.resourceClaims[1]", 'Duplicate value: {"name":"c","resourceClaimName":"y"}')],
            id="claim names twice",
        ),
        pytest.param(
            {"schedulingPolicy": {"gang": {"minCount": 2}}, "podGroupTemplateRef": {"workload": {}}},
            [
                ("spec.podGroupTemplateRef.workload.workloadName", "Required value"),
                ("spec.podGroupTemplateRef.workload.podGroupTemplateName", "Required value"),
            ],
            id="empty template reference",
        ),
    ],
)
async def test_invalid_groups_are_refused(
    client: aiohttp.ClientSession, spec: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    status, body = await call(client, "POST", PGS, {**podgroup("bad"), "spec": spec})
    assert (status, body["reason"]) == (422, "Invalid")
    assert body["details"]["kind"] == "PodGroup" and body["details"]["group"] == "scheduling.k8s.io"
    assert causes(body) == expected
    assert body["message"].startswith('PodGroup.scheduling.k8s.io "bad" is invalid: ')


async def test_the_limits_themselves_are_valid(client: aiohttp.ClientSession) -> None:
    four = [{"name": f"c{i}", "resourceClaimTemplateName": f"t-{i}"} for i in range(4)]
    status, created = await call(client, "POST", PGS, podgroup("four", {"gang": {"minCount": 1}}, resourceClaims=four))
    assert status == 201 and created["spec"]["resourceClaims"] == four


async def test_a_groups_workload_template_must_exist(client: aiohttp.ClientSession) -> None:
    ref = {"workload": {"workloadName": "job", "podGroupTemplateName": "workers"}}
    status, body = await call(client, "POST", PGS, podgroup("pg", podGroupTemplateRef=ref))
    assert (status, body["reason"]) == (403, "Forbidden")
    assert (
        body["message"] == 'podgroups.scheduling.k8s.io "pg" is forbidden: PodGroup rejected: Workload "job" not found'
    )
    assert body["details"] == {"name": "pg", "group": "scheduling.k8s.io", "kind": "podgroups"}
    await call(client, "POST", WORKLOADS, workload("job"))
    unknown = {"workload": {"workloadName": "job", "podGroupTemplateName": "other"}}
    status, body = await call(client, "POST", PGS, podgroup("pg", podGroupTemplateRef=unknown))
    assert status == 403 and body["message"].endswith('PodGroupTemplate "other" not found in Workload "job"')
    status, created = await call(client, "POST", PGS, podgroup("pg", podGroupTemplateRef=ref))
    assert status == 201 and created["spec"]["podGroupTemplateRef"] == ref


# --- updates, gated fields, status --------------------------------------------------------------------


async def test_the_spec_is_immutable_and_gated_fields_are_dropped(client: aiohttp.ClientSession) -> None:
    gated = podgroup(
        "pg",
        schedulingConstraints={"topology": [{"key": "example.com/rack"}]},
        disruptionMode="PodGroup",
        priorityClassName="high",
        priority=5,
    )
    status, created = await call(client, "POST", PGS, gated)
    assert status == 201  # TopologyAwareWorkloadScheduling and WorkloadAwarePreemption are off
    assert created["spec"] == {
        "schedulingPolicy": {"gang": {"minCount": 2}},
        "podGroupTemplateRef": None,
        "disruptionMode": "Pod",
    }
    path = f"{PGS}/pg"
    immutable = "Invalid value: null: field is immutable"
    changed = copy.deepcopy(created)
    changed["spec"]["schedulingPolicy"]["gang"]["minCount"] = 3
    status, body = await call(client, "PUT", path, changed)
    assert status == 422 and causes(body) == [("spec.schedulingPolicy", immutable)]
    ref = {"workload": {"workloadName": "job", "podGroupTemplateName": "workers"}}
    everything = {
        **created,
        "spec": {
            "schedulingPolicy": {"basic": {}},
            "podGroupTemplateRef": ref,
            "resourceClaims": [{"name": "c", "resourceClaimName": "x"}],
        },
    }
    status, body = await call(client, "PUT", path, everything)
    assert status == 422
    assert causes(body) == [
        ("spec.podGroupTemplateRef", immutable),
        ("spec.schedulingPolicy", immutable),
        ("spec.resourceClaims", immutable),
    ]
    mode = copy.deepcopy(created)
    mode["spec"]["disruptionMode"] = "PodGroup"
    status, body = await call(client, "PUT", path, mode)
    assert status == 422 and causes(body) == [("spec.disruptionMode", "Forbidden")]
    patch = {"spec": {"schedulingPolicy": {"gang": {"minCount": 5}}}}
    status, body = await call(client, "PATCH", path, patch, content_type=MERGE)
    assert status == 422 and causes(body) == [("spec.schedulingPolicy", immutable)]
    status, patched = await call(client, "PATCH", path, {"metadata": {"labels": {"a": "1"}}}, content_type=MERGE)
    assert status == 200 and patched["metadata"]["labels"] == {"a": "1"} and patched["spec"] == created["spec"]


async def test_status_is_written_through_the_subresource(gangs: FakeApiServer, client: aiohttp.ClientSession) -> None:
    claims = [{"name": "domain", "resourceClaimTemplateName": "domain"}]
    _, created = await call(client, "POST", PGS, podgroup("pg", resourceClaims=claims))
    path = f"{PGS}/pg"
    scheduled = condition()
    status_body = {
        "conditions": [scheduled],
        "resourceClaimStatuses": [{"name": "domain", "resourceClaimName": "pg-domain-abcde"}],
    }
    written = copy.deepcopy(created)
    written["spec"] = {"schedulingPolicy": {"basic": {}}}
    written["metadata"]["labels"] = {"ignored": "yes"}
    written["status"] = status_body
    status, stored = await call(client, "PUT", f"{path}/status", written)
    assert status == 200
    assert stored["status"]["conditions"] == [{**scheduled, "message": ""}]  # message is always written
    assert stored["status"]["resourceClaimStatuses"] == status_body["resourceClaimStatuses"]
    assert stored["spec"] == created["spec"] and "labels" not in stored["metadata"]
    assert [e.get("subresource") for e in stored["metadata"]["managedFields"]] == [None, "status"]
    status, body = await call(client, "PUT", f"{path}/status", written)
    assert status == 409 and body["reason"] == "Conflict"
    # a main-resource write keeps the stored status
    status, main = await call(client, "PUT", path, {**stored, "status": {}})
    assert status == 200 and main["status"] == stored["status"]
    unknown = {**stored, "status": {"resourceClaimStatuses": [{"name": "other", "resourceClaimName": "x"}]}}
    status, body = await call(client, "PUT", f"{path}/status", unknown)
    assert status == 422 and causes(body) == [
        (
            "status.resourceClaimStatuses[0].name",
            'Invalid value: "other": must match the name of an entry in `spec.resourceClaims`',
        )
    ]
    bare = {"type": "PodGroupScheduled", "status": "Maybe"}
    status, body = await call(client, "PUT", f"{path}/status", {**stored, "status": {"conditions": [bare, bare]}})
    assert status == 422 and causes(body) == [
        ("status.conditions[0].status", 'Unsupported value: "Maybe": supported values: "False", "True", "Unknown"'),
        ("status.conditions[0].lastTransitionTime", "Required value"),
        ("status.conditions[0].reason", "Required value"),
        ("status.conditions[1].type", 'Duplicate value: "PodGroupScheduled"'),
        ("status.conditions[1].status", 'Unsupported value: "Maybe": supported values: "False", "True", "Unknown"'),
        ("status.conditions[1].lastTransitionTime", "Required value"),
        ("status.conditions[1].reason", "Required value"),
    ]
    patch = {"status": {"conditions": [condition(status="False", reason="Unschedulable", message="2 of 3")]}}
    status, patched = await call(client, "PATCH", f"{path}/status", patch, content_type=MERGE)
    assert status == 200 and patched["status"]["conditions"][0]["reason"] == "Unschedulable"
    assert patched["status"]["resourceClaimStatuses"] == status_body["resourceClaimStatuses"]
    status, cleared = await call(client, "PUT", f"{path}/status", {**patched, "status": None})
    assert status == 200 and cleared["status"] == {}
    assert gangs.get_object("PodGroup", "default", "pg")["status"] == {}  # type: ignore[index]


# --- Workloads ----------------------------------------------------------------------------------------


async def test_workloads(client: aiohttp.ClientSession) -> None:
    status, created = await call(client, "POST", WORKLOADS, workload("job"))
    assert status == 201 and "status" not in created and "generation" not in created["metadata"]
    assert created["spec"]["podGroupTemplates"] == [
        {"name": "workers", "schedulingPolicy": {"gang": {"minCount": 2}}, "schedulingConstraints": None}
    ]
    changed = copy.deepcopy(created)
    changed["spec"]["podGroupTemplates"][0]["schedulingPolicy"] = {"basic": {}}
    status, body = await call(client, "PUT", f"{WORKLOADS}/job", changed)
    assert status == 422 and causes(body) == [("spec.podGroupTemplates", "Invalid value: null: field is immutable")]
    status, body = await call(client, "POST", WORKLOADS, workload("empty", []))
    assert status == 422 and causes(body) == [("spec.podGroupTemplates", "Required value")]
    nine = [{"name": f"t{i}", "schedulingPolicy": {"basic": {}}} for i in range(9)]
    status, body = await call(client, "POST", WORKLOADS, workload("nine", nine))
    assert status == 422 and causes(body) == [("spec.podGroupTemplates", "Too many: 9: must have at most 8 items")]
    status, body = await call(client, "POST", WORKLOADS, workload("nopolicy", [{"name": "t"}]))
    assert status == 422 and causes(body) == [
        ("spec.podGroupTemplates[0].schedulingPolicy", 'Invalid value: "": must specify one of: `basic`, `gang`')
    ]
    status, gone = await call(client, "DELETE", f"{WORKLOADS}/job")
    assert status == 200 and gone["status"] == "Success" and gone["details"]["kind"] == "workloads"
