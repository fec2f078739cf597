"""The fake API server held to the real one: the same request sequences sent to a kube-apiserver
v1.36.3 (``KUBEBUILDER_ASSETS``, ``tests/controlplane``; skipped with the reason without it) and to
a fresh ``FakeApiServer``, and the answers compared after normalisation.

Each ``Case`` is a small sequence written once against ``Side`` (one server and its transcript):
``side.call`` records the answer's status and body under a label, ``side.watch`` opens a watch
whose events the case records. Set-up calls (``side.setup``) are not compared. The requests
dra-extender makes come first (``extender/backends/kube``): claim GET and PUT (main and
``/status``, without managedFields), ``pods/binding`` with a uid, ``pods/eviction`` under a
PodDisruptionBudget, merge patches of pods and ``pods/status`` with a uid, Events created and
patched, paged LISTs and watches of pods with its field selector, watches from a resourceVersion
with bookmarks, discovery; then the rest of what the fake emulates. The control plane runs with the
gates of the gang experiments (``GANG_GATES``, scheduling.k8s.io/v1alpha2 enabled), which the
PodGroup and Workload cases meet as ``FakeApiServer(gangs=True)``.

The normaliser (``Normaliser``) replaces what legitimately differs between two servers by tokens:
uids and object resourceVersions by the order they first appear (so "unchanged" and "the same
uid" are still compared), a LIST's or a BOOKMARK's resourceVersion, continue tokens and generated
names by placeholders, timestamps by ``<time>``, numbers of three digits or more in messages by
``<n>``, the value quoted in an immutable-field error by ``<value>``; ``managedFields`` are compared
by who wrote them (manager, operation, apiVersion, subresource), sorted, not by their field sets;
a BOOKMARK by its kind, apiVersion and metadata; apply conflicts' causes sorted (upstream's order
is a Go map's). Fields only the real server's pod defaulting and admission write
(``POD_DEFAULTS``) are dropped from both sides, and discovery is compared for the resources the
fake serves.

A difference the fake keeps on purpose is declared on its case (``Case.kept``: the step label and
the reason); the test asserts such steps still differ, so that a change on either side shows, and
that every reason is in the list of ``tests/fakes/apiserver.py``'s docstring.

One control plane (etcd + kube-apiserver, no controller-manager: no controller writes behind the
test's back) serves the whole module; every case works in a namespace of its own there, and the
fake is a new one per case.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import re
import secrets
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
import pytest

from tests.controlplane.assets import assets_or_skip
from tests.controlplane.cluster import FEATURE_GATES, RUNTIME_CONFIG, ControlPlane, Options

from .apiserver import FakeApiServer

JSON = "application/json"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"
USER_AGENT = "difftest/v0.0.0"
#: A bound against a hang only (never what is measured).
HANG = 30.0
CLAIMS_GROUP = "/apis/resource.k8s.io/v1"
SCHEDULING = "/apis/scheduling.k8s.io/v1alpha2"
#: The gates of the gang experiments (workloads-and-gangs.md §0.2), which ``gangs=True`` emulates.
GANG_GATES = "GenericWorkload=true,GangScheduling=true,DRAWorkloadResourceClaims=true"


# --- the servers ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Real:
    """The module's control plane, as an aiohttp client needs it."""

    server: str
    ssl: ssl.SSLContext
    suffix: str
    #: etcd's client URL (compaction).
    etcd: str


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Real]:
    plane = ControlPlane(
        assets_or_skip("differential test of the fake apiserver"),
        tmp_path_factory.mktemp("differential"),
        Options(
            feature_gates=f"{FEATURE_GATES},{GANG_GATES}",
            runtime_config=f"{RUNTIME_CONFIG},scheduling.k8s.io/v1alpha2=true",
            controller_manager=False,
        ),
    )
    with plane:
        assert plane.pki is not None
        pair = plane.client_pair("admin", "admin", "system:masters")
        context = ssl.create_default_context(cafile=str(plane.pki.ca.pair.cert))
        context.load_cert_chain(str(pair.cert), str(pair.key))
        yield Real(plane.server, context, secrets.token_hex(3), plane.etcd_url)


# --- one side of a case --------------------------------------------------------------------------


@dataclass
class Watch:
    """An open watch: ``until(predicate)`` reads events until the predicate holds for the events
    read so far (or the stream ends); periodic BOOKMARKs are left out (the real server sends them
    on its own clock)."""

    response: aiohttp.ClientResponse
    events: list[dict[str, Any]] = field(default_factory=list)

    async def until(self, done: Callable[[list[dict[str, Any]]], bool]) -> list[dict[str, Any]]:
        start = len(self.events)
        async with asyncio.timeout(HANG):
            while not done(self.events[start:]):
                line = await self.response.content.readline()
                if not line:
                    break
                event = orjson.loads(line)
                if event.get("type") == "BOOKMARK" and not _annotations(event.get("object")):
                    continue
                self.events.append(event)
        return self.events[start:]

    async def next(self, count: int = 1) -> list[dict[str, Any]]:
        return await self.until(lambda events: len(events) >= count)

    async def rest(self) -> list[dict[str, Any]]:
        """Every event until the server ends the stream."""
        return await self.until(lambda _events: False)


def ends_with(event_type: str, name: str | None = None) -> Callable[[list[dict[str, Any]]], bool]:
    """``Watch.until`` condition: the last event read is of ``event_type`` (on object ``name``)."""

    def done(events: list[dict[str, Any]]) -> bool:
        if not events or events[-1].get("type") != event_type:
            return False
        return name is None or meta(events[-1].get("object")).get("name") == name

    return done


def _annotations(obj: Any) -> dict[str, Any]:
    if not isinstance(obj, dict):
        return {}
    return (obj.get("metadata") or {}).get("annotations") or {}


@dataclass
class Side:
    """One server in one case: ``call`` and ``watch`` record what it answers."""

    name: str
    http: aiohttp.ClientSession
    ns: str
    #: The module's random suffix (names on the real server that must not collide).
    suffix: str
    real: bool
    #: (Real server) etcd's client URL.
    etcd: str = ""
    transcript: list[tuple[str, Any]] = field(default_factory=list)

    async def call(
        self,
        label: str,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, str] | None = None,
        content_type: str = JSON,
        record: bool = True,
        check: bool = True,
    ) -> tuple[int, Any]:
        """One request; its status and body recorded under ``label`` (with ``record``), or, for
        set-up, an error unless it succeeded (``check``)."""
        data = None if body is None else (body.encode() if isinstance(body, str) else orjson.dumps(body))
        headers = {"Content-Type": content_type, "Accept": JSON}
        async with asyncio.timeout(HANG):
            async with self.http.request(method, path, data=data, params=params, headers=headers) as response:
                raw = await response.read()
                status = response.status
        try:
            answer = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:  # e.g. "404 page not found" for an API not served yet
            answer = raw.decode(errors="replace")
        if record:
            self.transcript.append((label, {"status": status, "body": answer}))
        elif check and status >= 300:
            raise AssertionError(f"{self.name}: set-up {method} {path}: HTTP {status}: {answer}")
        return status, answer

    async def setup(self, method: str, path: str, body: Any = None, *, content_type: str = JSON) -> Any:
        """A call whose answer is not compared (it must succeed)."""
        return (await self.call("", method, path, body, content_type=content_type, record=False))[1]

    @contextlib.asynccontextmanager
    async def watch(self, label: str, path: str, **params: str) -> AsyncIterator[Watch]:
        """Open a watch (its HTTP status, and its Status when refused, recorded under ``label``);
        record its events with ``record``."""
        response = await self.http.get(path, params={"watch": "true", **params}, headers={"Accept": JSON})
        try:
            if response.status != 200:
                body = orjson.loads(await response.read())
                self.transcript.append((label, {"status": response.status, "body": body}))
                raise _WatchRefused()
            self.transcript.append((label, {"status": 200}))
            yield Watch(response)
        finally:
            response.close()

    def record(self, label: str, value: Any) -> None:
        self.transcript.append((label, value))

    # --- paths and set-up ---------------------------------------------------------------------

    @property
    def claims(self) -> str:
        return f"{CLAIMS_GROUP}/namespaces/{self.ns}/resourceclaims"

    @property
    def pods(self) -> str:
        return f"/api/v1/namespaces/{self.ns}/pods"

    @property
    def pdbs(self) -> str:
        return f"/apis/policy/v1/namespaces/{self.ns}/poddisruptionbudgets"

    @property
    def leases(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.ns}/leases"

    @property
    def events(self) -> str:
        return f"/api/v1/namespaces/{self.ns}/events"

    @property
    def podgroups(self) -> str:
        return f"{SCHEDULING}/namespaces/{self.ns}/podgroups"

    @property
    def workloads(self) -> str:
        return f"{SCHEDULING}/namespaces/{self.ns}/workloads"

    async def namespace(self) -> None:
        await self.setup(
            "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.ns}}
        )
        if self.real:  # pods need the ServiceAccount its controller would make (the fake has no admission)
            await self.setup(
                "POST",
                f"/api/v1/namespaces/{self.ns}/serviceaccounts",
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
            )


class _WatchRefused(Exception):
    """The watch answered something else than 200 (recorded); the case goes on without it."""


# --- manifests --------------------------------------------------------------------------------------


def claim(name: str, *, requests: int = 1, request_name: str = "gpu", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, **meta},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": request_name if requests == 1 else f"{request_name}-{i}",
                        "exactly": {"deviceClassName": "gpu.example.com"},
                    }
                    for i in range(requests)
                ]
            }
        },
    }


def allocation(request: str = "gpu") -> dict[str, Any]:
    return {
        "devices": {
            "results": [{"request": request, "driver": "gpu.example.com", "pool": "node-1", "device": "gpu-0"}]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]
        },
    }


def pod(name: str, *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "registry.example/busybox:1"}]},
    }
    if labels:
        raw["metadata"]["labels"] = labels
    return raw


def running(pod_obj: dict[str, Any]) -> dict[str, Any]:
    """The pod with a Running, Ready status (as a kubelet would report it)."""
    return {
        **pod_obj,
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "True", "lastProbeTime": None, "lastTransitionTime": "2026-01-01T00:00:00Z"}
            ],
        },
    }


def binding(name: str, node: str, uid: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if uid:
        meta["uid"] = uid
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": meta,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def eviction(name: str, uid: str | None = None) -> dict[str, Any]:
    raw: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}
    if uid:
        raw["deleteOptions"] = {"preconditions": {"uid": uid}}
    return raw


def lease(name: str, holder: str | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": dict(spec),
    }
    if holder is not None:
        body["spec"]["holderIdentity"] = holder
    return body


def meta(obj: Any) -> dict[str, Any]:
    return obj["metadata"] if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict) else {}


# --- the cases ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    run: Callable[[Side], Awaitable[None]]
    #: FakeApiServer options for this case.
    fake: dict[str, Any] = field(default_factory=dict)
    #: Step label -> why the fake answers it differently on purpose (apiserver.py's docstring).
    kept: dict[str, str] = field(default_factory=dict)


CASES: list[Case] = []


def case(**options: Any) -> Callable[[Callable[[Side], Awaitable[None]]], Callable[[Side], Awaitable[None]]]:
    def register(run: Callable[[Side], Awaitable[None]]) -> Callable[[Side], Awaitable[None]]:
        CASES.append(Case(run.__name__, run, **options))
        return run

    return register


OTHER_UID = "0d7f4f4e-0000-4000-8000-000000000009"
CONSUMER = {"resource": "pods", "name": "p", "uid": "0d7f4f4e-0000-4000-8000-000000000001"}
SECOND_CONSUMER = {"resource": "pods", "name": "q", "uid": "0d7f4f4e-0000-4000-8000-000000000002"}


def labelled(obj: dict[str, Any], **labels: str) -> dict[str, Any]:
    return {**obj, "metadata": {**obj["metadata"], "labels": labels}}


@case()
async def claim_create_and_get(s: Side) -> None:
    await s.call("create", "POST", s.claims, claim("one", labels={"team": "a"}))
    await s.call("get", "GET", f"{s.claims}/one")
    await s.call("create again: AlreadyExists", "POST", s.claims, claim("one"))
    await s.call("get absent: NotFound", "GET", f"{s.claims}/absent")
    await s.call("create, status dropped", "POST", s.claims, {**claim("two"), "status": {"allocation": allocation()}})
    await s.call("create in another namespace than the URL's", "POST", s.claims, claim("three", namespace="elsewhere"))
    await s.call("create with a resourceVersion", "POST", s.claims, claim("four", resourceVersion="12"))
    await s.call("create of the wrong kind", "POST", s.claims, {**claim("five"), "kind": "Pod"})
    _, created = await s.call("create with generateName", "POST", s.claims, claim("", generateName="gen-"))
    s.record("generated name shape", bool(re.fullmatch(r"gen-[a-z0-9]{5}", meta(created).get("name", ""))))


@case()
async def claim_update(s: Side) -> None:
    _, created = await s.call("create", "POST", s.claims, claim("one"))
    _, updated = await s.call("update labels", "PUT", f"{s.claims}/one", labelled(created, x="1"))
    await s.call("update with the stale resourceVersion: Conflict", "PUT", f"{s.claims}/one", labelled(created, x="2"))
    other = {**updated, "metadata": {**updated["metadata"], "uid": OTHER_UID}}
    await s.call("update with another uid: Conflict", "PUT", f"{s.claims}/one", other)
    await s.call("update changing nothing", "PUT", f"{s.claims}/one", updated)
    bare = claim("one", resourceVersion=meta(updated)["resourceVersion"], labels={"x": "1"})
    await s.call("update without the defaulted fields", "PUT", f"{s.claims}/one", bare)
    changed = {**updated, "spec": claim("one", request_name="other")["spec"]}
    await s.call("update of the immutable spec: Invalid", "PUT", f"{s.claims}/one", changed)
    with_status = {**updated, "status": {"allocation": allocation()}}
    await s.call("update with a status: status ignored", "PUT", f"{s.claims}/one", with_status)
    renamed = {**updated, "metadata": {**updated["metadata"], "name": "other"}}
    await s.call("update under another name: BadRequest", "PUT", f"{s.claims}/one", renamed)
    absent = claim("absent", resourceVersion="5")
    await s.call("update of an absent claim: NotFound", "PUT", f"{s.claims}/absent", absent)
    await s.call("bad label on update: Invalid", "PUT", f"{s.claims}/one", labelled(updated, **{"a b": "c"}))
    await s.call("get", "GET", f"{s.claims}/one", params={"fieldManager": "ignored"})


@case(fake={"unconditional_updates": True})
async def update_without_resource_version(s: Side) -> None:
    _, created = await s.call("create claim", "POST", s.claims, claim("one"))
    unversioned = {**created, "metadata": {k: v for k, v in created["metadata"].items() if k != "resourceVersion"}}
    await s.call("update claim", "PUT", f"{s.claims}/one", labelled(unversioned, x="1"))
    with_status = {**unversioned, "status": {"allocation": allocation()}}
    await s.call("update claim status", "PUT", f"{s.claims}/one/status", with_status)
    await s.call("create lease", "POST", s.leases, lease("l", "a"))
    await s.call("update lease: Invalid", "PUT", f"{s.leases}/l", lease("l", "b"))
    budget = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "b"}, "spec": {}}
    await s.call("create budget", "POST", s.pdbs, budget)
    await s.call("update budget: Invalid", "PUT", f"{s.pdbs}/b", {**budget, "spec": {"minAvailable": 1}})


STRICT = "the fake refuses updates without resourceVersion unless unconditional_updates=True"


@case(kept={"update without resourceVersion": STRICT})
async def update_without_resource_version_strict(s: Side) -> None:
    await s.call("create", "POST", s.claims, claim("one"))
    await s.call("update without resourceVersion", "PUT", f"{s.claims}/one", claim("one", labels={"x": "1"}))


@case()
async def claim_status(s: Side) -> None:
    _, created = await s.call("create", "POST", s.claims, claim("one", labels={"a": "1"}))
    written = {
        **created,
        "metadata": {**created["metadata"], "labels": {"a": "2"}, "finalizers": ["example.com/x"]},
        "spec": claim("one", request_name="changed")["spec"],
        "status": {"allocation": allocation(), "reservedFor": [CONSUMER]},
    }
    _, allocated = await s.call("status write: spec and metadata ignored", "PUT", f"{s.claims}/one/status", written)
    await s.call("status write with the stale resourceVersion: Conflict", "PUT", f"{s.claims}/one/status", written)
    other = {**allocated, "status": {**allocated["status"], "allocation": allocation()}}
    other["status"]["allocation"]["devices"]["results"][0]["device"] = "gpu-1"
    await s.call("allocation changed: Invalid", "PUT", f"{s.claims}/one/status", other)
    no_allocation = {**allocated, "status": {"reservedFor": [CONSUMER]}}
    await s.call("reservedFor without allocation: Invalid", "PUT", f"{s.claims}/one/status", no_allocation)
    unknown = {**allocated, "status": {"allocation": allocation("nope")}}
    await s.call("other allocation for an unknown request: Invalid", "PUT", f"{s.claims}/one/status", unknown)
    twice = {**allocated, "status": {**allocated["status"], "reservedFor": [CONSUMER, CONSUMER]}}
    await s.call("reservedFor twice the same uid: Invalid", "PUT", f"{s.claims}/one/status", twice)
    stripped = {**allocated, "metadata": {k: v for k, v in allocated["metadata"].items() if k != "managedFields"}}
    stripped["status"] = {**allocated["status"], "reservedFor": [CONSUMER, SECOND_CONSUMER]}
    _, allocated = await s.call(
        "status write without managedFields, as dra-extender sends it", "PUT", f"{s.claims}/one/status", stripped
    )
    await s.call("deallocate", "PUT", f"{s.claims}/one/status", {**allocated, "status": {}})
    current = await s.setup("GET", f"{s.claims}/one")
    unknown = {**current, "status": {"allocation": allocation("nope")}}
    await s.call("new allocation for an unknown request: Invalid", "PUT", f"{s.claims}/one/status", unknown)
    patch = {"status": {"allocation": allocation()}}
    await s.call("status patch (merge)", "PATCH", f"{s.claims}/one/status", patch, content_type=MERGE)
    await s.call("get", "GET", f"{s.claims}/one")


@case()
async def pod_status(s: Side) -> None:
    _, created = await s.call("create", "POST", s.pods, pod("p", labels={"a": "1"}))
    uid = meta(created)["uid"]
    changed = running(created)
    changed["metadata"] = {**created["metadata"], "labels": {"a": "2"}, "annotations": {"k": "v"}}
    changed["spec"] = {**created["spec"], "nodeName": "node-1"}
    await s.call("status write: spec ignored, labels taken", "PUT", f"{s.pods}/p/status", changed)
    nominate = {"metadata": {"uid": uid}, "status": {"nominatedNodeName": "node-2"}}
    await s.call("nominate (merge patch with uid)", "PATCH", f"{s.pods}/p/status", nominate, content_type=MERGE)
    stale = {"metadata": {"uid": OTHER_UID}, "status": {"nominatedNodeName": "node-3"}}
    await s.call("nominate with another uid: Invalid", "PATCH", f"{s.pods}/p/status", stale, content_type=MERGE)
    clear = {"metadata": {"uid": uid}, "status": {"nominatedNodeName": None}}
    await s.call("clear the nomination", "PATCH", f"{s.pods}/p/status", clear, content_type=MERGE)
    current = await s.setup("GET", f"{s.pods}/p")
    await s.call("main write with a status: status ignored", "PUT", f"{s.pods}/p", {**current, "status": {}})
    await s.call("status write without a status", "PUT", f"{s.pods}/p/status", {**current, "status": None})


@case()
async def pod_patches(s: Side) -> None:
    _, created = await s.call("create", "POST", s.pods, pod("p"))
    uid, rv = meta(created)["uid"], meta(created)["resourceVersion"]
    path = f"{s.pods}/p"
    nudge = {"metadata": {"uid": uid, "annotations": {"example.com/requeue": "1"}}}
    await s.call("merge patch with uid (requeue)", "PATCH", path, nudge, content_type=MERGE)
    stale = {"metadata": {"uid": OTHER_UID, "annotations": {"example.com/requeue": "2"}}}
    await s.call("merge patch with another uid: Invalid", "PATCH", path, stale, content_type=MERGE)
    unset = {"metadata": {"annotations": {"example.com/requeue": None}}}
    await s.call("merge patch removing the annotation", "PATCH", path, unset, content_type=MERGE)
    labels = {"metadata": {"labels": {"x": "1"}}}
    await s.call("strategic merge patch of labels", "PATCH", path, labels, content_type=STRATEGIC)
    add = [{"op": "add", "path": "/metadata/annotations", "value": {"y": "2"}}]
    await s.call("json patch add", "PATCH", path, add, content_type=JSON_PATCH)
    test = [{"op": "test", "path": "/metadata/name", "value": "q"}]
    await s.call("json patch failed test", "PATCH", path, test, content_type=JSON_PATCH)
    missing = [{"op": "remove", "path": "/metadata/labels/absent"}]
    await s.call("json patch removing an absent field", "PATCH", path, missing, content_type=JSON_PATCH)
    versioned = {"metadata": {"resourceVersion": rv, "labels": {"z": "3"}}}
    await s.call("merge patch with a stale resourceVersion: Conflict", "PATCH", path, versioned, content_type=MERGE)
    await s.call("merge patch changing nothing", "PATCH", path, labels, content_type=MERGE)
    await s.call(
        "merge patch by another manager",
        "PATCH",
        path,
        {"metadata": {"labels": {"x": "2"}}},
        params={"fieldManager": "other"},
        content_type=MERGE,
    )
    await s.call("merge patch of an absent pod: NotFound", "PATCH", f"{s.pods}/absent", labels, content_type=MERGE)
    await s.call("patch with an unknown content type", "PATCH", path, {"metadata": {}}, content_type="text/plain")


@case()
async def events(s: Side) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "p.1", "namespace": s.ns},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": s.ns, "name": "p", "uid": CONSUMER["uid"]},
        "type": "Warning",
        "reason": "FailedBinding",
        "message": "no",
        "source": {"component": "dra-extender"},
        "reportingComponent": "dra-extender",
        "reportingInstance": "dra-extender-host",
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:00Z",
        "count": 1,
    }
    await s.call("create event", "POST", s.events, body)
    patch = {"count": 2, "lastTimestamp": "2026-01-01T00:00:05Z", "message": "no again"}
    await s.call("patch event (merge)", "PATCH", f"{s.events}/p.1", patch, content_type=MERGE)
    await s.call("patch absent event: NotFound", "PATCH", f"{s.events}/p.2", patch, content_type=MERGE)
    minimal = {"metadata": {"name": "p.3"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": s.ns}}
    await s.call("create a minimal event", "POST", s.events, minimal)


@case()
async def binding_a_pod(s: Side) -> None:
    _, created = await s.call("create", "POST", s.pods, pod("p"))
    uid = meta(created)["uid"]
    path = f"{s.pods}/p/binding"
    await s.call("bind with another uid: Conflict", "POST", path, binding("p", "node-1", OTHER_UID))
    await s.call("bind", "POST", path, binding("p", "node-1", uid))
    await s.call("get", "GET", f"{s.pods}/p")
    await s.call("bind again: Conflict", "POST", path, binding("p", "node-2", uid))
    await s.call("bind an absent pod: NotFound", "POST", f"{s.pods}/absent/binding", binding("absent", "node-1"))
    await s.call("binding named otherwise", "POST", path, binding("q", "node-1"))
    empty = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {}}
    await s.call("binding without a target", "POST", path, empty)


@case()
async def watch_with_initial_events(s: Side) -> None:
    for name in ("a", "b"):
        await s.setup("POST", s.claims, claim(name))
    params = {"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan", "allowWatchBookmarks": "true"}
    with contextlib.suppress(_WatchRefused):
        async with s.watch("watch", s.claims, **params) as watch:
            s.record("initial events", await watch.until(ends_with("BOOKMARK")))
            current = await s.setup("GET", f"{s.claims}/a")
            await s.setup("PUT", f"{s.claims}/a", labelled(current, x="1"))
            await s.setup("DELETE", f"{s.claims}/b")
            await s.setup("POST", s.claims, claim("c"))
            s.record("live events", await watch.next(3))
    with contextlib.suppress(_WatchRefused):
        async with s.watch("watch from now, bookmarks allowed", s.claims, allowWatchBookmarks="true") as watch:
            s.record("defaulted initial events", await watch.until(ends_with("BOOKMARK")))
    with contextlib.suppress(_WatchRefused):
        async with s.watch(
            "initial events without bookmarks", s.claims, sendInitialEvents="true", resourceVersionMatch="NotOlderThan"
        ) as watch:
            s.record("initial events, no bookmark", await watch.next(2))
    await s.call(
        "sendInitialEvents alone: Invalid", "GET", s.claims, params={"watch": "true", "sendInitialEvents": "true"}
    )
    await s.call(
        "resourceVersionMatch alone: Invalid",
        "GET",
        s.claims,
        params={"watch": "true", "resourceVersionMatch": "NotOlderThan", "resourceVersion": "1"},
    )
    await s.call(
        "sendInitialEvents with Exact: Invalid",
        "GET",
        s.claims,
        params={"watch": "true", "sendInitialEvents": "true", "resourceVersionMatch": "Exact", "resourceVersion": "1"},
    )
    await s.call("sendInitialEvents on a list: Invalid", "GET", s.claims, params={"sendInitialEvents": "true"})


@case()
async def watch_from_a_resource_version(s: Side) -> None:
    created = await s.setup("POST", s.claims, claim("a"))
    await s.setup("POST", s.claims, claim("b"))
    await s.setup("PUT", f"{s.claims}/a", labelled(created, x="1"))
    rv = meta(created)["resourceVersion"]
    with contextlib.suppress(_WatchRefused):
        async with s.watch(
            "watch from the first create", s.claims, resourceVersion=rv, allowWatchBookmarks="true"
        ) as w:
            s.record("replayed", await w.next(2))
    with contextlib.suppress(_WatchRefused):
        async with s.watch(
            "watch with a field selector",
            s.claims,
            resourceVersion=rv,
            fieldSelector="metadata.name=b",
            allowWatchBookmarks="true",
        ) as w:
            s.record("selected", await w.next(1))
    with contextlib.suppress(_WatchRefused):
        async with s.watch("watch with a short timeout", s.claims, resourceVersion=rv, timeoutSeconds="1") as w:
            await w.rest()  # what came before the end depends on the machine's speed; that it ends does not
            s.record("the server ended it", True)


#: The field selector of dra-extender's pod watch (``extender/backends/kube/backend.py``).
ACTIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"


@case()
async def pods_as_the_extender_lists_and_watches_them(s: Side) -> None:
    for name in ("a", "b", "c"):
        await s.setup("POST", s.pods, pod(name))
    done = await s.setup("GET", f"{s.pods}/b")
    await s.setup("PUT", f"{s.pods}/b/status", {**done, "status": {"phase": "Succeeded"}})
    _, page = await s.call("page 1", "GET", s.pods, params={"limit": "1", "fieldSelector": ACTIVE_PODS})
    token = meta(page).get("continue", "")
    _, page = await s.call(
        "page 2", "GET", s.pods, params={"limit": "1", "fieldSelector": ACTIVE_PODS, "continue": token}
    )
    params = {"resourceVersion": meta(page)["resourceVersion"], "allowWatchBookmarks": "true", "timeoutSeconds": "300"}
    with contextlib.suppress(_WatchRefused):
        async with s.watch("watch", s.pods, fieldSelector=ACTIVE_PODS, **params) as w:
            finished = await s.setup("GET", f"{s.pods}/a")
            await s.setup("PUT", f"{s.pods}/a/status", {**finished, "status": {"phase": "Failed"}})
            await s.setup("POST", s.pods, pod("d"))
            await s.setup("DELETE", f"{s.pods}/c")
            s.record(
                "events",
                await w.until(ends_with("DELETED", "c")),
            )
    await s.call("get a lease that does not exist", "GET", f"{s.leases}/dra-extender")


async def custom_resources(s: Side) -> str:
    """(Real server only) a collection whose watch cache starts now, a CRD's, with etcd compacted
    after it: resource versions from before are too old there, as they are on a cluster whose
    watch cache and etcd have moved on (the cache of a built-in type keeps every version since
    the apiserver started, so nothing is too old on a fresh one)."""
    group = f"d{s.suffix}.example.com"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }
    await s.setup("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    path = f"/apis/{group}/v1/namespaces/{s.ns}/widgets"
    async with asyncio.timeout(HANG):  # a bound against a hang: polled until the API serves it
        while (await s.call("", "GET", path, record=False, check=False))[0] != 200:
            await asyncio.sleep(0.05)
    async with aiohttp.ClientSession(s.etcd) as etcd:  # and etcd forgets its history, as it does every 5 min
        async with etcd.post("/v3/kv/range", json={"key": "AA==", "limit": 1}) as answer:
            revision = (await answer.json())["header"]["revision"]
        async with etcd.post("/v3/kv/compaction", json={"revision": revision, "physical": True}) as answer:
            assert answer.status == 200, await answer.text()
    return path


@case()
async def watch_too_old(s: Side) -> None:
    path = await custom_resources(s) if s.real else s.claims
    with contextlib.suppress(_WatchRefused):
        async with s.watch("watch from resourceVersion 2", path, resourceVersion="2", allowWatchBookmarks="true") as w:
            s.record("events until the end", await w.rest())
    await s.call(
        "list at resourceVersion 2, Exact",
        "GET",
        path,
        params={"resourceVersion": "2", "resourceVersionMatch": "Exact"},
    )
    await s.call("list at resourceVersion 2, limit", "GET", path, params={"resourceVersion": "2", "limit": "10"})
    await s.call("list with a bad resourceVersion", "GET", s.claims, params={"resourceVersion": "x"})
    await s.call("list at a future resourceVersion", "GET", s.claims, params={"resourceVersion": "99999999"})


@case(
    kept={
        "bad label selector": "a malformed label selector or continue token is worded otherwise",
        "bad continue token": "a malformed label selector or continue token is worded otherwise",
    }
)
async def list_paging(s: Side) -> None:
    for name in ("a", "b", "c"):
        await s.setup("POST", s.claims, claim(name, labels={"set": "1" if name != "b" else "2"}))
    _, page = await s.call("page 1", "GET", s.claims, params={"limit": "1"})
    token = meta(page).get("continue", "")
    _, page = await s.call("page 2", "GET", s.claims, params={"limit": "1", "continue": token})
    last = meta(page).get("continue", "")
    await s.call("page 3", "GET", s.claims, params={"limit": "1", "continue": last})
    await s.call("paged with a selector", "GET", s.claims, params={"limit": "1", "labelSelector": "set=1"})
    await s.call("all", "GET", s.claims)
    await s.call("resourceVersion 0 and a limit", "GET", s.claims, params={"resourceVersion": "0", "limit": "1"})
    await s.call(
        "continue with resourceVersion 0",
        "GET",
        s.claims,
        params={"limit": "1", "continue": token, "resourceVersion": "0"},
    )
    await s.call(
        "continue with a resourceVersion",
        "GET",
        s.claims,
        params={"limit": "1", "continue": token, "resourceVersion": "5"},
    )
    await s.call("bad continue token", "GET", s.claims, params={"limit": "1", "continue": "garbage"})
    await s.call("claim field selector not supported", "GET", s.claims, params={"fieldSelector": "spec.x=1"})
    await s.call("pod field selector not supported", "GET", s.pods, params={"fieldSelector": "spec.x=1"})
    await s.call("bad label selector", "GET", s.claims, params={"labelSelector": "a in b"})
    await s.call(
        "unsupported resourceVersionMatch",
        "GET",
        s.claims,
        params={"resourceVersion": "0", "resourceVersionMatch": "Newest"},
    )
    await s.call("resourceVersionMatch alone", "GET", s.claims, params={"resourceVersionMatch": "Exact"})


@case()
async def eviction_with_a_budget(s: Side) -> None:
    app = {"app": "train"}
    for name in ("a", "b"):
        await s.setup("POST", s.pods, pod(name, labels=app))
        await s.setup("PUT", f"{s.pods}/{name}/status", running(await s.setup("GET", f"{s.pods}/{name}")))
    await s.setup("POST", s.pods, pod("pending", labels=app))
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "budget"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": app}},
    }
    _, created = await s.call("create budget", "POST", s.pdbs, budget)
    status = {
        "observedGeneration": 1,
        "disruptionsAllowed": 1,
        "currentHealthy": 2,
        "desiredHealthy": 1,
        "expectedPods": 2,
    }
    await s.call("budget status", "PUT", f"{s.pdbs}/budget/status", {**created, "status": status})
    await s.call("evict a with another uid: Conflict", "POST", f"{s.pods}/a/eviction", eviction("a", OTHER_UID))
    await s.call("budget after the refused precondition", "GET", f"{s.pdbs}/budget")
    current = await s.setup("GET", f"{s.pdbs}/budget")
    await s.setup("PUT", f"{s.pdbs}/budget/status", {**current, "status": status})
    with contextlib.suppress(_WatchRefused):
        async with s.watch(
            "watch pod a", s.pods, resourceVersion=meta(current)["resourceVersion"], fieldSelector="metadata.name=a"
        ) as w:
            await s.call("evict a", "POST", f"{s.pods}/a/eviction", eviction("a"))
            s.record("a's events", await w.until(ends_with("DELETED")))
    await s.call("a is gone", "GET", f"{s.pods}/a")
    await s.call("budget spent", "GET", f"{s.pdbs}/budget")
    await s.call("evict b: the budget forbids it", "POST", f"{s.pods}/b/eviction", eviction("b"))
    current = await s.setup("GET", f"{s.pdbs}/budget")
    refusing = {**current["status"], "currentHealthy": 1}
    await s.setup("PUT", f"{s.pdbs}/budget/status", {**current, "status": refusing})
    await s.call("evict b: not enough healthy pods", "POST", f"{s.pods}/b/eviction", eviction("b"))
    await s.call("evict a pending pod", "POST", f"{s.pods}/pending/eviction", eviction("pending"))
    await s.call("evict an absent pod", "POST", f"{s.pods}/absent/eviction", eviction("absent"))
    await s.call("eviction named otherwise", "POST", f"{s.pods}/b/eviction", eviction("c"))
    current = await s.setup("GET", f"{s.pdbs}/budget")
    await s.call(
        "budget spec change", "PUT", f"{s.pdbs}/budget", {**current, "spec": {**current["spec"], "minAvailable": 0}}
    )
    await s.call("evict b: the budget is still being processed", "POST", f"{s.pods}/b/eviction", eviction("b"))


@case()
async def claim_validation(s: Side) -> None:
    await s.call("invalid request name", "POST", s.claims, claim("bad-request", request_name="Req_0"))
    await s.call("too many requests", "POST", s.claims, claim("many", requests=33))
    await s.call("the most requests allowed", "POST", s.claims, claim("most", requests=32))
    duplicate = claim("dup")
    duplicate["spec"]["devices"]["requests"] *= 2
    await s.call("duplicate request names", "POST", s.claims, duplicate)
    no_class = claim("no-class")
    no_class["spec"]["devices"]["requests"][0]["exactly"] = {}
    await s.call("no device class", "POST", s.claims, no_class)
    bad_class = claim("bad-class")
    bad_class["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "Bad_Class"
    await s.call("invalid device class name", "POST", s.claims, bad_class)
    both = claim("both")
    both["spec"]["devices"]["requests"][0]["firstAvailable"] = [{"name": "x", "deviceClassName": "gpu.example.com"}]
    await s.call("exactly and firstAvailable", "POST", s.claims, both)
    neither = claim("neither")
    neither["spec"]["devices"]["requests"][0].pop("exactly")
    await s.call("neither exactly nor firstAvailable", "POST", s.claims, neither)
    first = claim("first")
    first["spec"]["devices"]["requests"][0] = {
        "name": "gpu",
        "firstAvailable": [
            {"name": "big", "deviceClassName": "gpu.example.com", "allocationMode": "All"},
            {"name": "small", "deviceClassName": "gpu.example.com", "count": 2},
        ],
    }
    await s.call("firstAvailable, defaulted", "POST", s.claims, first)
    nine = claim("nine")
    nine["spec"]["devices"]["requests"][0] = {
        "name": "gpu",
        "firstAvailable": [{"name": f"s{i}", "deviceClassName": "gpu.example.com"} for i in range(9)],
    }
    await s.call("too many subrequests", "POST", s.claims, nine)
    count = claim("count")
    count["spec"]["devices"]["requests"][0]["exactly"].update(allocationMode="ExactCount", count=0)
    await s.call("count 0: defaulted", "POST", s.claims, count)
    negative = claim("negative")
    negative["spec"]["devices"]["requests"][0]["exactly"].update(allocationMode="ExactCount", count=-1)
    await s.call("negative count", "POST", s.claims, negative)
    all_count = claim("all-count")
    all_count["spec"]["devices"]["requests"][0]["exactly"].update(allocationMode="All", count=2)
    await s.call("All with a count", "POST", s.claims, all_count)
    mode = claim("mode")
    mode["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = "Some"
    await s.call("unknown allocation mode", "POST", s.claims, mode)
    await s.call("invalid object name", "POST", s.claims, claim("Bad_Name"))
    await s.call("invalid label key", "POST", s.claims, claim("label", labels={"a b": "c"}))
    await s.call("invalid label value", "POST", s.claims, claim("value", labels={"a": "-x"}))
    await s.call("invalid annotation key", "POST", s.claims, claim("note", annotations={"/x": "y"}))
    template: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t"},
        "spec": {"spec": claim("t")["spec"]},
    }
    await s.call("template, defaulted", "POST", f"{CLAIMS_GROUP}/namespaces/{s.ns}/resourceclaimtemplates", template)
    template["metadata"]["name"] = "t2"
    template["spec"]["spec"]["devices"]["requests"][0]["name"] = "Req_0"
    await s.call(
        "template with an invalid request name",
        "POST",
        f"{CLAIMS_GROUP}/namespaces/{s.ns}/resourceclaimtemplates",
        template,
    )


POD_GRACE = "no kubelet: the fake ends a bound pod's graceful deletion at once, the real one waits for the kubelet"


@case(kept={"get the bound pod after its delete": POD_GRACE})
async def delete_with_preconditions(s: Side) -> None:
    _, created = await s.call("create", "POST", s.claims, claim("one"))
    uid, rv = meta(created)["uid"], meta(created)["resourceVersion"]
    options = {"apiVersion": "v1", "kind": "DeleteOptions"}
    other = {**options, "preconditions": {"uid": OTHER_UID}}
    await s.call("delete with another uid: Conflict", "DELETE", f"{s.claims}/one", other)
    await s.setup("PUT", f"{s.claims}/one", labelled(created, x="1"))
    stale = {**options, "preconditions": {"resourceVersion": rv}}
    await s.call("delete with a stale resourceVersion: Conflict", "DELETE", f"{s.claims}/one", stale)
    await s.call("delete", "DELETE", f"{s.claims}/one", {**options, "preconditions": {"uid": uid}})
    await s.call("get after delete", "GET", f"{s.claims}/one")
    await s.call("delete again: NotFound", "DELETE", f"{s.claims}/one")
    _, unbound = await s.call("create pod", "POST", s.pods, pod("p"))
    with contextlib.suppress(_WatchRefused):
        async with s.watch("watch the pod", s.pods, resourceVersion=meta(unbound)["resourceVersion"]) as w:
            await s.call("delete an unbound pod", "DELETE", f"{s.pods}/p")
            s.record("its events", await w.next(2))
    await s.call("get pod after delete", "GET", f"{s.pods}/p")
    await s.setup("POST", s.pods, pod("q"))
    await s.setup("POST", f"{s.pods}/q/binding", binding("q", "node-1"))
    await s.call("delete a bound pod", "DELETE", f"{s.pods}/q")
    await s.call("get the bound pod after its delete", "GET", f"{s.pods}/q")


@case()
async def finalizers(s: Side) -> None:
    _, created = await s.call("create", "POST", s.claims, claim("one", finalizers=["example.com/a"]))
    status = {"allocation": allocation(), "reservedFor": [CONSUMER]}
    allocated = await s.setup("PUT", f"{s.claims}/one/status", {**created, "status": status})
    await s.call("delete: marked", "DELETE", f"{s.claims}/one")
    _, marked = await s.call("get: still there", "GET", f"{s.claims}/one")
    await s.call("delete again", "DELETE", f"{s.claims}/one")
    more = {**marked, "metadata": {**marked["metadata"], "finalizers": ["example.com/a", "example.com/b"]}}
    await s.call("add a finalizer: Forbidden", "PUT", f"{s.claims}/one", more)
    reserve = {**marked, "status": {**allocated["status"], "reservedFor": [CONSUMER, SECOND_CONSUMER]}}
    await s.call("new consumer while deleting: Invalid", "PUT", f"{s.claims}/one/status", reserve)
    _, released = await s.call("release", "PUT", f"{s.claims}/one/status", {**marked, "status": {}})
    with contextlib.suppress(_WatchRefused):
        async with s.watch("watch", s.claims, resourceVersion=meta(released)["resourceVersion"]) as w:
            gone = {**released, "metadata": {**released["metadata"], "finalizers": []}}
            await s.call("remove the finalizer", "PUT", f"{s.claims}/one", gone)
            s.record("its event", await w.next(1))
    await s.call("get: gone", "GET", f"{s.claims}/one")


@case()
async def server_side_apply(s: Side) -> None:
    path = f"{s.leases}/l"

    async def apply(label: str, body: Any, manager: str | None = "one", **params: str) -> None:
        query = {**({"fieldManager": manager} if manager else {}), **params}
        await s.call(label, "PATCH", path, body, params=query, content_type=APPLY)

    await apply("apply without a field manager", lease("l", "a"), None)
    await apply("apply creates", lease("l", "a", leaseDurationSeconds=15))
    await apply("apply the same", lease("l", "a", leaseDurationSeconds=15))
    await apply("another manager, another value: conflict", lease("l", "b"), "two")
    await apply("another manager, the same value: shared", lease("l", "a"), "two")
    await apply("force", lease("l", "c", leaseDurationSeconds=15), "three", force="true")
    await apply("first manager drops a field", lease("l"))
    merge = {"spec": {"leaseTransitions": 3}}
    await s.call(
        "merge patch by an updater", "PATCH", path, merge, params={"fieldManager": "updater"}, content_type=MERGE
    )
    await apply("apply against the updater: conflict", lease("l", leaseTransitions=4))
    await apply("two conflicts", lease("l", "d", leaseTransitions=4))
    labelled_lease = lease("l", "c")
    labelled_lease["metadata"]["labels"] = {"app": "x"}
    await apply("apply a label", labelled_lease, "three")
    await apply("drop the label", lease("l", "c"), "three")
    await apply(
        "stale resourceVersion: conflict",
        {**lease("l", "c"), "metadata": {"name": "l", "resourceVersion": "1"}},
        "three",
    )
    yaml_body = (
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: from-yaml\nspec:\n  holderIdentity: a\n"
    )
    await s.call(
        "apply YAML", "PATCH", f"{s.leases}/from-yaml", yaml_body, params={"fieldManager": "one"}, content_type=APPLY
    )
    await s.call(
        "force with a non-apply patch",
        "PATCH",
        path,
        {"spec": {"leaseTransitions": 5}},
        params={"force": "true"},
        content_type=MERGE,
    )
    await s.call("get", "GET", path)


@case()
async def discovery(s: Side) -> None:
    _, version = await s.call("version", "GET", "/version", record=False)
    s.record("version", {k: version.get(k) for k in ("major", "minor")})
    _, group = await s.call("group", "GET", "/apis/resource.k8s.io", record=False)
    s.record("group", group)
    for path in ("/apis/resource.k8s.io/v1", "/api/v1", "/apis/policy/v1", "/apis/coordination.k8s.io/v1"):
        _, listing = await s.call(path, "GET", path, record=False)
        s.record(path, listing)
    await s.call("a group version not served", "GET", "/apis/resource.k8s.io/v1alpha3")
    await s.call("a resource not served", "GET", f"{CLAIMS_GROUP}/namespaces/{s.ns}/widgets")


# --- PodGroups and Workloads (scheduling.k8s.io/v1alpha2, gangs=True) ----------------------------------


def podgroup(name: str, policy: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}} if policy is None else policy, **spec},
    }


GANGS = {"gangs": True}


@case(fake=GANGS)
async def podgroup_create_list_watch(s: Side) -> None:
    _, created = await s.call("create", "POST", s.podgroups, podgroup("train"))
    await s.call("get", "GET", f"{s.podgroups}/train")
    await s.call("create again: AlreadyExists", "POST", s.podgroups, podgroup("train"))
    with_status = {**podgroup("with-status"), "status": {"conditions": []}}
    await s.call("create with a status: dropped", "POST", s.podgroups, with_status)
    own = podgroup("own-finalizer")
    own["metadata"]["finalizers"] = ["example.com/a"]
    await s.call("create with a finalizer of its own", "POST", s.podgroups, own)
    protected = podgroup("protected")
    protected["metadata"]["finalizers"] = ["scheduling.k8s.io/podgroup-protection", "example.com/a"]
    await s.call("create with the protection finalizer", "POST", s.podgroups, protected)
    await s.call("list by name", "GET", s.podgroups, params={"fieldSelector": "metadata.name=train"})
    await s.call("unsupported field selector", "GET", s.podgroups, params={"fieldSelector": "spec.x=1"})
    with contextlib.suppress(_WatchRefused):
        async with s.watch("watch", s.podgroups, resourceVersion=meta(created)["resourceVersion"]) as w:
            s.record("replayed", await w.next(3))
            current = await s.setup("GET", f"{s.podgroups}/train")
            await s.setup("PUT", f"{s.podgroups}/train", labelled(current, x="1"))
            await s.setup("POST", s.podgroups, podgroup("basic", {"basic": {}}))
            s.record("live", await w.next(2))
    await s.call("list", "GET", s.podgroups)


@case(fake=GANGS)
async def podgroup_validation(s: Side) -> None:
    pgs = s.podgroups
    await s.call("minCount 0", "POST", pgs, podgroup("zero", {"gang": {"minCount": 0}}))
    await s.call("gang without minCount", "POST", pgs, podgroup("empty-gang", {"gang": {}}))
    await s.call("negative minCount", "POST", pgs, podgroup("negative", {"gang": {"minCount": -1}}))
    await s.call("basic and gang", "POST", pgs, podgroup("both", {"basic": {}, "gang": {"minCount": 1}}))
    await s.call("neither basic nor gang", "POST", pgs, podgroup("neither", {}))
    await s.call("no schedulingPolicy", "POST", pgs, {**podgroup("none"), "spec": {}})
    await s.call("no spec", "POST", pgs, {k: v for k, v in podgroup("nospec").items() if k != "spec"})
    await s.call("invalid name", "POST", pgs, podgroup("Bad_Name"))
    five = [{"name": f"c{i}", "resourceClaimName": f"claim-{i}"} for i in range(5)]
    await s.call("five resourceClaims", "POST", pgs, podgroup("five", resourceClaims=five))
    four = [{"name": f"c{i}", "resourceClaimTemplateName": f"t-{i}"} for i in range(4)]
    await s.call("four resourceClaims", "POST", pgs, podgroup("four", resourceClaims=four))
    both = [{"name": "c", "resourceClaimName": "x", "resourceClaimTemplateName": "y"}]
    await s.call("claim name and template", "POST", pgs, podgroup("claim-both", resourceClaims=both))
    await s.call("claim without a source", "POST", pgs, podgroup("claim-neither", resourceClaims=[{"name": "c"}]))
    unnamed = [{"resourceClaimName": "x"}]
    await s.call("claim without a name", "POST", pgs, podgroup("claim-unnamed", resourceClaims=unnamed))
    bad = [{"name": "Bad_Claim", "resourceClaimName": "Bad_Name"}]
    await s.call("claim with invalid names", "POST", pgs, podgroup("claim-bad", resourceClaims=bad))
    twice = [{"name": "c", "resourceClaimName": "x"}, {"name": "c", "resourceClaimName": "y"}]
    await s.call("claim names twice", "POST", pgs, podgroup("claim-twice", resourceClaims=twice))
    ref = {"workload": {"workloadName": "job", "podGroupTemplateName": "workers"}}
    await s.call("template reference", "POST", pgs, podgroup("ref", podGroupTemplateRef=ref))
    await s.call("empty template reference", "POST", pgs, podgroup("ref-empty", podGroupTemplateRef={"workload": {}}))
    topology = {"topology": [{"key": "example.com/rack"}]}
    await s.call("schedulingConstraints (gate off)", "POST", pgs, podgroup("tas", schedulingConstraints=topology))
    await s.call("disruptionMode PodGroup (gate off)", "POST", pgs, podgroup("wap", disruptionMode="PodGroup"))
    await s.call("disruptionMode unknown", "POST", pgs, podgroup("wap-bad", disruptionMode="Some"))
    await s.call("priority (gate off)", "POST", pgs, podgroup("prio", priorityClassName="high", priority=5))


@case(fake=GANGS)
async def podgroup_update_and_status(s: Side) -> None:
    claims = [{"name": "domain", "resourceClaimTemplateName": "domain"}]
    _, created = await s.call("create", "POST", s.podgroups, podgroup("pg", resourceClaims=claims))
    path = f"{s.podgroups}/pg"
    _, updated = await s.call("update labels", "PUT", path, labelled(created, x="1"))
    changed = {**updated, "spec": {**updated["spec"], "schedulingPolicy": {"gang": {"minCount": 3}}}}
    await s.call("change minCount: Invalid", "PUT", path, changed)
    basic = {**updated, "spec": {**updated["spec"], "schedulingPolicy": {"basic": {}}}}
    await s.call("gang to basic: Invalid", "PUT", path, basic)
    fewer = {**updated, "spec": {**updated["spec"], "resourceClaims": []}}
    await s.call("drop the claims: Invalid", "PUT", path, fewer)
    ref = {"workload": {"workloadName": "job", "podGroupTemplateName": "workers"}}
    referenced = {**updated, "spec": {**updated["spec"], "podGroupTemplateRef": ref}}
    await s.call("set the template reference: Invalid", "PUT", path, referenced)
    everything = {**updated, "spec": {"schedulingPolicy": {"basic": {}}, "podGroupTemplateRef": ref}}
    await s.call("change everything: Invalid", "PUT", path, everything)
    mode = {**updated, "spec": {**updated["spec"], "disruptionMode": "PodGroup"}}
    await s.call("change disruptionMode", "PUT", path, mode)
    await s.call("main write with a status: ignored", "PUT", path, {**updated, "status": {"conditions": []}})
    condition = {
        "type": "PodGroupScheduled",
        "status": "True",
        "reason": "Scheduled",
        "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    statuses = [{"name": "domain", "resourceClaimName": "pg-domain-abcde"}]
    status = {"conditions": [condition], "resourceClaimStatuses": statuses}
    written = {**updated, "spec": {"schedulingPolicy": {"basic": {}}}, "status": status}
    written["metadata"] = {**updated["metadata"], "labels": {"y": "2"}}
    _, scheduled = await s.call("status write: spec and metadata ignored", "PUT", f"{path}/status", written)
    await s.call("status write with the stale resourceVersion", "PUT", f"{path}/status", written)
    unknown = {
        **scheduled,
        "status": {**status, "resourceClaimStatuses": [{"name": "other", "resourceClaimName": "x"}]},
    }
    await s.call("claim status for an unknown claim: Invalid", "PUT", f"{path}/status", unknown)
    bare = {k: v for k, v in condition.items() if k not in ("reason", "lastTransitionTime")}
    await s.call(
        "condition without reason and time", "PUT", f"{path}/status", {**scheduled, "status": {"conditions": [bare]}}
    )
    odd = {**condition, "status": "Maybe", "type": "Bad Type", "reason": "1bad"}
    await s.call("odd condition", "PUT", f"{path}/status", {**scheduled, "status": {"conditions": [odd]}})
    twice = {**scheduled, "status": {"conditions": [condition, condition]}}
    await s.call("a condition twice", "PUT", f"{path}/status", twice)
    patch = {"status": {"conditions": [{**condition, "status": "False", "reason": "Unschedulable"}]}}
    await s.call("status merge patch", "PATCH", f"{path}/status", patch, content_type=MERGE)
    current = await s.setup("GET", path)
    await s.call("status write without a status", "PUT", f"{path}/status", {**current, "status": None})
    await s.call(
        "merge patch of the spec: Invalid",
        "PATCH",
        path,
        {"spec": {"schedulingPolicy": {"gang": {"minCount": 5}}}},
        content_type=MERGE,
    )
    await s.call("merge patch of labels", "PATCH", path, {"metadata": {"labels": {"z": "3"}}}, content_type=MERGE)
    await s.call("get", "GET", path)


@case(fake=GANGS)
async def podgroup_protection(s: Side) -> None:
    await s.call("create", "POST", s.podgroups, podgroup("pg"))
    path = f"{s.podgroups}/pg"
    await s.call("delete: marked", "DELETE", path)
    _, marked = await s.call("get: still there", "GET", path)
    await s.call("delete again", "DELETE", path)
    more = {
        **marked,
        "metadata": {**marked["metadata"], "finalizers": [*marked["metadata"]["finalizers"], "example.com/b"]},
    }
    await s.call("add a finalizer: Forbidden", "PUT", path, more)
    with contextlib.suppress(_WatchRefused):
        async with s.watch("watch", s.podgroups, resourceVersion=meta(marked)["resourceVersion"]) as w:
            gone = {**marked, "metadata": {**marked["metadata"], "finalizers": []}}
            await s.call("remove the finalizer", "PUT", path, gone)
            s.record("its event", await w.next(1))
    await s.call("get: gone", "GET", path)


def workload(name: str, templates: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    if templates is None:
        templates = [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 2}}}]
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "Workload",
        "metadata": {"name": name},
        "spec": {"podGroupTemplates": templates, **spec},
    }


@case(fake=GANGS)
async def workloads(s: Side) -> None:
    _, created = await s.call("create", "POST", s.workloads, workload("job"))
    path = f"{s.workloads}/job"
    await s.call("get", "GET", path)
    _, updated = await s.call("update labels", "PUT", path, labelled(created, x="1"))
    changed = workload("job", [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 3}}}])
    await s.call("change the templates: Invalid", "PUT", path, {**updated, "spec": changed["spec"]})
    controller = {"apiGroup": "batch", "kind": "Job", "name": "job"}
    with_controller = {**updated, "spec": {**updated["spec"], "controllerRef": controller}}
    await s.call("set controllerRef: Invalid", "PUT", path, with_controller)
    await s.call("no templates", "POST", s.workloads, workload("none", []))
    nine = [{"name": f"t{i}", "schedulingPolicy": {"basic": {}}} for i in range(9)]
    await s.call("nine templates", "POST", s.workloads, workload("nine", nine))
    await s.call("template without policy", "POST", s.workloads, workload("nopolicy", [{"name": "t"}]))
    ref = {"workload": {"workloadName": "job", "podGroupTemplateName": "workers"}}
    await s.call("podgroup of a template", "POST", s.podgroups, podgroup("pg", podGroupTemplateRef=ref))
    unknown = {"workload": {"workloadName": "job", "podGroupTemplateName": "other"}}
    await s.call("podgroup of an unknown template", "POST", s.podgroups, podgroup("pg2", podGroupTemplateRef=unknown))
    await s.call(
        "podgroup of a template, another policy",
        "POST",
        s.podgroups,
        podgroup("pg3", {"basic": {}}, podGroupTemplateRef=ref),
    )
    await s.call(
        "workload without spec", "POST", s.workloads, {k: v for k, v in workload("nospec").items() if k != "spec"}
    )
    bad = [
        {"name": "Bad_T", "schedulingPolicy": {"basic": {}}},
        {"name": "x", "schedulingPolicy": {"gang": {"minCount": 0}}},
    ]
    await s.call("bad templates", "POST", s.workloads, workload("bad", bad))
    twice = [{"name": "t", "schedulingPolicy": {"basic": {}}}, {"name": "t", "schedulingPolicy": {"basic": {}}}]
    await s.call("templates twice", "POST", s.workloads, workload("twice", twice))
    await s.call("workload with a bad controllerRef", "POST", s.workloads, workload("ctl", controllerRef={"name": "x"}))
    gated = [
        {
            "name": "t",
            "schedulingPolicy": {"basic": {}},
            "schedulingConstraints": {"topology": [{"key": "k"}]},
            "disruptionMode": "PodGroup",
            "priority": 3,
        }
    ]
    await s.call("template with gated fields", "POST", s.workloads, workload("gated", gated))
    await s.call("delete", "DELETE", path)
    await s.call("get: gone", "GET", path)


NO_PRIORITY_CLASSES = (
    "scheduling.k8s.io/v1 (PriorityClasses) is not served: the group lists v1alpha2 alone, as its preferred version"
)


@case(fake=GANGS, kept={"group": NO_PRIORITY_CLASSES})
async def scheduling_discovery(s: Side) -> None:
    _, group = await s.call("group", "GET", "/apis/scheduling.k8s.io", record=False)
    s.record("group", group)
    _, listing = await s.call(SCHEDULING, "GET", SCHEDULING, record=False)
    s.record(SCHEDULING, listing)


# --- the normaliser ------------------------------------------------------------------------------------

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
TIME_IN_TEXT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")
NUMBER = re.compile(r"\b\d{3,}\b")
#: The value in an immutable-field error: upstream prints the Go struct, the fake "object".
IMMUTABLE_VALUE = re.compile(r'Invalid value: (\{.*?\}|"object"): field is immutable')
#: Pod fields that only the real server's defaulting and admission plugins write.
POD_DEFAULTS = {
    "spec": (
        "dnsPolicy", "enableServiceLinks", "preemptionPolicy", "priority", "restartPolicy", "schedulerName",
        "securityContext", "serviceAccount", "serviceAccountName", "terminationGracePeriodSeconds", "tolerations",
        "volumes",
    ),
    "container": ("imagePullPolicy", "resources", "terminationMessagePath", "terminationMessagePolicy", "volumeMounts"),
    "status": ("qosClass",),
}  # fmt: skip
#: The resources the fake serves, and the keys of their discovery entries clients read.
FAKE_SERVED = {
    "deviceclasses", "resourceclaims", "resourceclaims/status", "resourceclaimtemplates", "resourceslices",
    "pods", "pods/status", "pods/binding", "pods/eviction", "nodes", "nodes/status", "namespaces",
    "namespaces/status", "events", "poddisruptionbudgets", "poddisruptionbudgets/status", "leases",
    "podgroups", "podgroups/status", "workloads",
}  # fmt: skip
DISCOVERY_KEYS = ("name", "singularName", "namespaced", "kind", "verbs", "shortNames", "group", "version")


class Normaliser:
    """Tokens for what legitimately differs between two servers (see the module docstring); one
    per transcript, so equal tokens mean equal values within a side."""

    def __init__(self) -> None:
        self.uids: dict[str, str] = {}
        self.rvs: dict[str, str] = {}

    def uid(self, value: str) -> str:
        return self.uids.setdefault(value, f"<uid{len(self.uids) + 1}>")

    def rv(self, value: str) -> str:
        return self.rvs.setdefault(value, f"<rv{len(self.rvs) + 1}>")

    def text(self, value: str) -> str:
        value = IMMUTABLE_VALUE.sub("Invalid value: <value>: field is immutable", value)
        value = UUID.sub(lambda m: self.uids.get(m.group(0), "<other uid>"), value)
        value = TIME_IN_TEXT.sub("<time>", value)
        for rv, token in sorted(self.rvs.items(), key=lambda item: -len(item[0])):
            value = re.sub(rf"\b{rv}\b", token, value)
        return NUMBER.sub("<n>", value)

    def answer(self, label: str, value: Any) -> Any:
        if label.startswith("/api"):
            return discovery_listing(value)
        if isinstance(value, dict) and isinstance(value.get("status"), int):
            return {"status": value["status"], "body": self.body(value.get("body"))}
        if isinstance(value, list):  # watch events
            return [self.event(e) for e in value]
        return self.body(value)

    def event(self, event: dict[str, Any]) -> dict[str, Any]:
        obj = event.get("object")
        if event.get("type") == "BOOKMARK" and isinstance(obj, dict):  # only what a bookmark means
            bookmark = {"kind": obj.get("kind"), "apiVersion": obj.get("apiVersion")}
            return {
                "type": "BOOKMARK",
                "object": {**bookmark, "metadata": {**meta(obj), "resourceVersion": "<bookmark>"}},
            }
        return {"type": event.get("type"), "object": self.body(obj)}

    def body(self, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        if str(value.get("kind", "")).endswith("List") and isinstance(value.get("items"), list):
            list_meta = dict(meta(value))
            if list_meta.get("resourceVersion"):
                list_meta["resourceVersion"] = "<list>"
            if list_meta.get("continue"):
                list_meta["continue"] = "<continue>"
            return {**value, "metadata": list_meta, "items": [self.body(i) for i in value["items"]]}
        if isinstance(value.get("spec"), dict) and "containers" in value["spec"]:
            value = without_pod_defaults(value)
        causes = (value.get("details") or {}).get("causes") if value.get("kind") == "Status" else None
        if causes and all(c.get("reason") == "FieldManagerConflict" for c in causes):
            # upstream collects apply conflicts from a Go map: their order is random
            value = {**value, "details": {**value["details"], "causes": sorted(causes, key=orjson.dumps)}}
        return self.walk(value, ())

    def walk(self, value: Any, path: tuple[str, ...]) -> Any:
        key = path[-1] if path else ""
        if isinstance(value, dict):
            if key == "metadata" and "managedFields" in value:
                value = {**value, "managedFields": managers(value["managedFields"])}
            if (
                key == "metadata"
                and value.get("generateName")
                and str(value.get("name")).startswith(value["generateName"])
            ):
                value = {**value, "name": f"{value['generateName']}<generated>"}
            return {k: self.walk(v, (*path, k)) for k, v in value.items()}
        if isinstance(value, list):
            return [self.walk(v, path) for v in value]
        if not isinstance(value, str):
            return value
        if key == "uid" and UUID.fullmatch(value):
            return self.uid(value)
        if key == "resourceVersion" and value:
            return self.rv(value)
        if TIMESTAMP.match(value):
            return "<time>"
        if key in ("message", "field"):
            return self.text(value)
        return value


def managers(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Who wrote (manager, operation, apiVersion, subresource), in an order that does not depend
    on the clock (upstream sorts by time first); the field sets are not compared."""
    keys = ("manager", "operation", "apiVersion", "subresource", "fieldsType")
    reduced = [{k: e[k] for k in keys if k in e} for e in entries]
    return sorted(reduced, key=lambda e: tuple(str(e.get(k, "")) for k in keys))


def without_pod_defaults(obj: dict[str, Any]) -> dict[str, Any]:
    obj = orjson.loads(orjson.dumps(obj))
    spec = obj.get("spec") or {}
    for name in POD_DEFAULTS["spec"]:
        spec.pop(name, None)
    for container in spec.get("containers") or ():
        for name in POD_DEFAULTS["container"]:
            container.pop(name, None)
    status = obj.get("status")
    if isinstance(status, dict):
        for name in POD_DEFAULTS["status"]:
            status.pop(name, None)
    return obj


def discovery_listing(listing: Any) -> Any:
    """An APIResourceList reduced to the resources the fake serves and the keys clients read."""
    if not isinstance(listing, dict):
        return listing
    resources = [
        {k: r[k] for k in DISCOVERY_KEYS if k in r}
        for r in listing.get("resources") or ()
        if r.get("name") in FAKE_SERVED
    ]
    for resource in resources:
        resource["verbs"] = sorted(resource.get("verbs") or ())
    return {"groupVersion": listing.get("groupVersion"), "resources": sorted(resources, key=lambda r: r["name"])}


def normalised(transcript: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    normaliser = Normaliser()
    return [(label, normaliser.answer(label, value)) for label, value in transcript]


# --- the test -------------------------------------------------------------------------------------------


async def run_case(case: Case, side: Side) -> list[tuple[str, Any]]:
    await side.namespace()
    await case.run(side)
    return side.transcript


def _dump(value: Any) -> list[str]:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode().splitlines()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_the_fake_answers_as_kube_apiserver(case: Case, real: Real) -> None:
    ns = f"{case.name.replace('_', '-')}-{real.suffix}"
    headers = {"User-Agent": USER_AGENT}
    connector = aiohttp.TCPConnector(ssl=real.ssl)
    async with aiohttp.ClientSession(real.server, headers=headers, connector=connector) as http:
        real_answers = normalised(await run_case(case, Side("real", http, ns, real.suffix, real=True, etcd=real.etcd)))
    options = {"bookmark_interval": None, "minor_version": 36, **case.fake}
    async with FakeApiServer.running(**options) as fake, aiohttp.ClientSession(fake.url, headers=headers) as http:
        fake_answers = normalised(await run_case(case, Side("fake", http, ns, real.suffix, real=False)))
    assert [label for label, _ in fake_answers] == [label for label, _ in real_answers]
    problems: list[str] = []
    for (label, theirs), (_, ours) in zip(real_answers, fake_answers, strict=True):
        if label in case.kept:
            if theirs == ours:
                problems.append(f"{label!r} is listed as a kept difference ({case.kept[label]}) but no longer differs")
            continue
        if theirs != ours:
            diff = difflib.unified_diff(_dump(theirs), _dump(ours), "kube-apiserver", "fake", lineterm="", n=4)
            problems.append(f"--- step {label!r}:\n" + "\n".join(diff))
    assert not problems, "\n\n".join(problems)


def test_every_kept_difference_is_listed_in_the_fakes_docstring() -> None:
    """The reasons a case gives for a kept difference are in ``apiserver.py``'s list."""
    from . import apiserver

    doc = " ".join((apiserver.__doc__ or "").split())
    for case in CASES:
        for label, reason in case.kept.items():
            assert " ".join(reason.split()) in doc, f"{case.name}: {label!r}: {reason!r} is not in the docstring"
