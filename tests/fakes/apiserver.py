"""A strict fake kube-apiserver for tests: a small aiohttp app speaking raw Kubernetes JSON.

Start it on a free loopback port::

    async with FakeApiServer.running(resource_versions=("v1beta1",)) as fake:
        fake.url            # "http://127.0.0.1:PORT"

or under pytest-aiohttp: ``server = await aiohttp_server(fake.app)`` then ``fake.url =
str(server.make_url(""))`` (``await fake.serve_with(aiohttp_server)`` does both).

What it emulates (each piece documented where it lives):

- discovery (``/api``, ``/apis``, ``/apis/<group>[/<version>]``, ``/api/v1``, ``/version``) with
  configurable served resource.k8s.io versions (``resources.py``);
- collections of resource.k8s.io (deviceclasses, resourceclaims, resourceclaimtemplates,
  resourceslices), core v1 (pods with ``status``, ``binding`` and ``eviction``, nodes,
  namespaces, events), events.k8s.io/v1 events, coordination.k8s.io/v1 leases, policy/v1
  poddisruptionbudgets (+``status``), and SelfSubjectAccessReview;
- the Eviction API (``disruption.py``): ``POST pods/NAME/eviction`` (RBAC ``create`` on
  ``pods/eviction``) with a policy/v1 Eviction body answers 201 Success and deletes the pod as a
  DELETE does (after adding the DisruptionTarget condition), spending one
  ``status.disruptionsAllowed`` of the one PodDisruptionBudget whose selector matches (and
  recording the pod in ``status.disruptedPods``); 404 for an absent pod, 409 for a failed
  ``deleteOptions.preconditions`` uid/resourceVersion, 429 TooManyRequests (cause
  ``DisruptionBudget``) when the budget allows no disruption, 500 when several budgets match;
  Pending, Succeeded, Failed and terminating pods skip the budgets, and unready pods may. No
  disruption controller runs: tests write budget statuses (``put_object``) or compute them from
  the pods with ``sync_disruption_budgets()``; eviction only decrements them;
- classic DRA of Kubernetes 1.31 (``classic=True``, the DRAControlPlaneController gate, with
  v1alpha3 served): ``podschedulingcontexts`` (+``status``) in resource.k8s.io/v1alpha3, the
  gated claim and class fields kept, 1.31's v1alpha3 validation; with the gate off the collection
  is absent (discovery, 404) and v1alpha3 writes lose the gated fields (``classic.py``,
  ``validation.py``);
- gang scheduling of Kubernetes 1.36 (``gangs=True``: GenericWorkload with
  ``--runtime-config=scheduling.k8s.io/v1alpha2=true``, and the other gates of the gang
  experiments): ``podgroups`` (+``status``) and ``workloads`` in scheduling.k8s.io/v1alpha2 through
  the generic verbs, the ``scheduling.k8s.io/podgroup-protection`` finalizer added to every created
  PodGroup (a DELETE then only marks it), the check that a PodGroup's Workload template exists (403),
  their validation, immutable specs and gated-field drops; without it the group is absent (discovery,
  404) (``podgroups.py``);
- resourceVersions from one global counter, LIST paging with consistent ``continue`` tokens,
  WATCH replay, bookmarks (the ``k8s.io/initial-events-end`` one after initial events, also for a
  watch from resourceVersion "" or "0", which 1.36 defaults to ``sendInitialEvents``) and 410 after
  compaction: a 410 ERROR event on an HTTP 200 stream for a watch, an HTTP 410 for a LIST
  (``storage.py``, ``registry.py``, ``watches.py``);
- write semantics: 409 on stale updates (and on a PUT's or a binding's stale uid), 422 for an
  update without resourceVersion where the strategy requires one (Lease, PodDisruptionBudget),
  status subresource, finalizers, graceful pod deletion (marked, then deleted), binding, claim and
  PodDisruptionBudget validation, label and annotation rules (``registry.py``, ``validation.py``,
  ``disruption.py``), the defaults clients meet (``defaults.py``: DRA requests, events), PATCH
  (``patches.py``; e.g. a merge or strategic merge patch of ``pods/NAME/status`` setting
  ``status.nominatedNodeName``; a ``metadata.uid`` in a patch is a 422 when it is not the pod's),
  ``metadata.managedFields`` for every write through the API (``managed.py``), server-side apply of
  PodSchedulingContexts and Leases: field ownership, conflicts, ``force`` (``apply.py``);
- garbage collection of a deleted (or evicted) pod's PodSchedulingContexts and ResourceClaims
  (controller owner references), synchronous with the pod's removal (``registry.py``);
- bearer-token or basic auth (401), RBAC-like denials (403 naming verb and resource);
- scripted faults (``faults.py``): fail N requests, delay, hang, drop watches; ``restart()``;
  ``hold()`` requests until the test releases them (``Gate``).

Every request is recorded in ``fake.requests`` (method, path, query, body, status).

Held to kube-apiserver v1.36.3 by ``test_differential.py`` (the same request sequences sent to
both, the answers compared: status, Status bodies, objects, watch events).

Differences from kube-apiserver v1.36.3 kept on purpose:

- Updates without ``metadata.resourceVersion``: the fake refuses updates without resourceVersion
  unless unconditional_updates=True (422, worded as for a Lease), where the real strategies of most
  kinds take them; a correct client always sends one, and the strictness catches one that does not.
- scheduling.k8s.io/v1 (PriorityClasses) is not served: the group lists v1alpha2 alone, as its
  preferred version (kube-apiserver lists v1 too and prefers it), and without ``gangs`` the group
  is absent where kube-apiserver still serves v1. No controller removes the PodGroup protection
  finalizer.
- Pods: no kubelet: the fake ends a bound pod's graceful deletion at once, the real one waits for
  the kubelet (the DELETE's answer and the MODIFIED event that marks the pod are the real ones;
  the pod is then gone instead of Terminating). No pod or node defaulting or admission (restart
  policy, DNS policy, scheduler name, tolerations, the service account token volume, priority,
  the ``not-ready`` taint); nodes and pods need no ServiceAccount.
- Messages: a malformed label selector or continue token is worded otherwise (status, reason and
  code are the real ones); an immutable-field error names the value ``"object"`` where the real
  server prints the Go struct of the internal type.
- ``managedFields``: the entries (manager, operation, apiVersion, subresource, time) are the real
  ones, ``fieldsV1`` is simplified (lists are one field each; no ``.``, ``k:`` or ``v:`` entries).
  ``put_object`` records nobody. Server-side apply only for PodSchedulingContexts and Leases
  (415 for other kinds and for ``/status``), with lists replaced whole.
- BOOKMARK events carry only kind, apiVersion and metadata (the real one is the type's empty
  object). Nothing is too old on a fresh real server (its watch cache keeps every version since it
  started); the fake's history starts at ``first_resource_version`` (earlier versions are 410) and
  is forgotten with ``compact()`` or ``retain_changes``. A LIST or a watch at a future
  resourceVersion answers at once (the real server waits up to 3 s for it first).
- Validation covers what dra-extender and its tests can trip over (``validation.py``), not every
  rule; no ``dryRun``, no deleteCollection, no conversion between resource.k8s.io versions of
  different shapes. No controllers: no disruption controller (tests write budget statuses or call
  ``sync_disruption_budgets()``), no namespace controller, and the garbage collection of a pod's
  dependents is synchronous. The eviction's ``DisruptionTarget`` condition records no
  managedFields entry.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import random
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from . import status as st
from .apply import APPLY_PATCH, default_manager, missing_field_manager, parse_apply_body
from .disruption import sync_status
from .faults import FaultRule, Faults
from .managed import spec_owners
from .registry import ListOptions, Registry, now_timestamp, resource_for_kind, watch_event
from .resources import (
    ALL_RESOURCE_VERSIONS,
    CLASSIC_GATE,
    GENERIC_WORKLOAD_GATE,
    TAINT_RULES_GATE,
    ResourceType,
    api_group,
    api_group_list,
    api_resource_list,
    api_versions,
    find_resource,
    is_enabled,
    is_served,
    version_info,
)
from .selectors import parse_field_selector, parse_label_selector
from .storage import Change, Storage
from .watches import WatchStream

__all__ = ["FakeApiServer", "Gate", "RequestRecord", "Target"]

#: Set by a ``drop_watch`` rule: object events the stream may carry before it is cut.
DROP_AFTER = web.RequestKey("drop_after", int)
#: Set by a ``lose_answer`` rule: carry the request out, then close the connection unanswered.
LOSE_ANSWER = web.RequestKey("lose_answer", bool)
DEFAULT_USER = "system:serviceaccount:kube-system:dra-extender"
_HEALTH = ("/healthz", "/livez", "/readyz")
_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")


@dataclass
class RequestRecord:
    """One request as the fake received it; ``status`` is the HTTP status answered (for a watch,
    200 once the stream started)."""

    method: str
    path: str
    query: dict[str, str]
    body: Any = None
    status: int | None = None
    user_agent: str = ""

    @property
    def is_watch(self) -> bool:
        return self.query.get("watch") in _TRUE


@dataclass(frozen=True)
class Target:
    """A resource URL taken apart."""

    rt: ResourceType
    version: str
    namespace: str
    name: str
    subresource: str


class Gate:
    """Requests held by ``FakeApiServer.hold``: the next ``times`` matching requests (None: all)
    wait, before any other fault applies, until ``release()``; later ones pass. ``await
    arrived(n)`` returns once ``n`` of them have reached the gate, so a test knows a request is in
    flight and unanswered without guessing with a sleep."""

    def __init__(self, method: str | None, path: str, times: int | None, watch: bool | None) -> None:
        self._rule = FaultRule("delay", method, path, watch, times=times)  # only its matching is used
        self._open = asyncio.Event()
        self._arrival = asyncio.Event()

    @property
    def held(self) -> int:
        """How many requests have reached the gate (released or not)."""
        return self._rule.hits

    async def arrived(self, count: int = 1, *, timeout: float = 30.0) -> None:
        """Until ``count`` requests have reached the gate (``timeout``: a bound against a hang)."""
        async with asyncio.timeout(timeout):
            while self.held < count:
                await self._arrival.wait()

    def release(self) -> None:
        """Let the held requests (and any later matching ones) go on."""
        self._open.set()

    async def pass_through(self, method: str, path: str, is_watch: bool) -> None:
        """(The fake's request handling.) Wait here if the request is one to hold."""
        if self._open.is_set() or not self._rule.matches(method, path, is_watch):
            return
        self._rule.hits += 1
        self._arrival.set()
        self._arrival = asyncio.Event()
        await self._open.wait()


@dataclass
class _Denial:
    verb: str
    resource: str
    namespace: str | None


@dataclass(eq=False)
class FakeApiServer:
    """The fake apiserver and its test controls; see the module docstring.

    ``resource_versions``: the resource.k8s.io versions served (discovery and URLs).
    ``token``: when set, every request but health checks needs ``Authorization: Bearer <token>``.
    ``basic_auth``: (user, password); when set, every request but health checks needs
    ``Authorization: Basic <base64 of user:password>`` (or the bearer token, if both are set).
    ``bookmark_interval``: seconds between BOOKMARK events on watches that allow them (None: only
    when ``send_bookmarks()`` is called). ``watch_timeout``: server-side cap on a watch (like
    ``--min-request-timeout``). ``retain_changes``: compact the change log beyond this many entries.
    ``unconditional_updates``: accept updates without metadata.resourceVersion (strict: 422;
    PodSchedulingContexts always accept them, as their strategy does).
    ``classic``: the DRAControlPlaneController gate (Kubernetes 1.31 classic DRA), meaningful when
    v1alpha3 is among ``resource_versions``: on, resource.k8s.io/v1alpha3 serves
    ``podschedulingcontexts`` and keeps ``ResourceClaim.spec.controller``,
    ``status.allocation.controller``, ``status.deallocationRequested`` and
    ``DeviceClass.spec.suitableNodes``; off (default), the collection is absent (404, not in
    discovery) and v1alpha3 writes silently lose those fields.
    ``gangs``: serve PodGroups and Workloads (scheduling.k8s.io/v1alpha2) as kube-apiserver 1.36
    with GenericWorkload (``podgroups.py``); off (default), the group is absent.
    """

    resource_versions: Sequence[str] = ("v1", "v1beta2", "v1beta1")
    token: str | None = None
    basic_auth: tuple[str, str] | None = None
    user: str = DEFAULT_USER
    bookmark_interval: float | None = 60.0
    watch_timeout: float | None = None
    retain_changes: int | None = None
    first_resource_version: int = 1000
    namespaces: Sequence[str] = ("default", "kube-system", "kube-public", "kube-node-lease")
    unconditional_updates: bool = False
    minor_version: int = 34
    classic: bool = False
    #: Serve DeviceTaintRules (resource.k8s.io/v1beta2), as an API server with DRADeviceTaintRules.
    taint_rules: bool = False
    #: Serve PodGroups and Workloads (scheduling.k8s.io/v1alpha2), as an API server of 1.36 with
    #: GenericWorkload and ``--runtime-config=scheduling.k8s.io/v1alpha2=true`` (``podgroups.py``).
    gangs: bool = False
    clock: Callable[[], str] = now_timestamp
    rng: random.Random = field(default_factory=random.Random)
    url: str = ""

    def __post_init__(self) -> None:
        unknown = set(self.resource_versions) - set(ALL_RESOURCE_VERSIONS)
        if unknown:
            raise ValueError(f"unknown resource.k8s.io versions: {sorted(unknown)}")
        self.storage = Storage(first_resource_version=self.first_resource_version, retain_changes=self.retain_changes)
        #: Feature gates on, for the types behind one (``resources.py``).
        self.gates: frozenset[str] = frozenset(
            ({CLASSIC_GATE} if self.classic else set())
            | ({TAINT_RULES_GATE} if self.taint_rules else set())
            | ({GENERIC_WORKLOAD_GATE} if self.gangs else set())
        )
        self.registry = Registry(
            self.storage,
            clock=self.clock,
            rng=self.rng,
            unconditional_updates=self.unconditional_updates,
            classic=self.classic,
        )
        self.faults = Faults()
        #: Every request received, oldest first.
        self.requests: list[RequestRecord] = []
        self._denials: list[_Denial] = []
        self._watches: set[WatchStream] = set()
        self._release = asyncio.Event()
        self._gates: list[Gate] = []
        for namespace in self.namespaces:
            self.put_object(
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": namespace},
                    "status": {"phase": "Active"},
                }
            )
        self.app = web.Application()
        self.app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self.app.on_shutdown.append(self._on_shutdown)

    # === starting ===============================================================================

    @classmethod
    @contextlib.asynccontextmanager
    async def running(cls, **options: Any) -> AsyncIterator[FakeApiServer]:
        """Serve on a free loopback port for the duration of the block."""
        fake = cls(**options)
        runner = web.AppRunner(fake.app, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        fake.url = f"http://{host}:{port}"
        try:
            yield fake
        finally:
            fake.close_everything()
            await runner.cleanup()

    async def serve_with(self, aiohttp_server: Callable[..., Awaitable[Any]]) -> Any:
        """Start under pytest-aiohttp's ``aiohttp_server`` fixture; sets ``url``."""
        server = await aiohttp_server(self.app)
        self.url = str(server.make_url("")).rstrip("/")
        return server

    # === direct access for tests (no HTTP, no admission) =======================================

    def put_object(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Create or replace an object whole (status included); watchers see ADDED/MODIFIED."""
        return _copy(self.registry.put(raw))

    def get_object(
        self, kind: str, namespace: str | None, name: str, *, group: str | None = None
    ) -> dict[str, Any] | None:
        """A copy of the stored object (as written, in its stored apiVersion) or None."""
        rt = resource_for_kind(kind, group)
        obj = self.storage.get((rt.group, rt.plural), (namespace or "" if rt.namespaced else "", name))
        return None if obj is None else _copy(obj)

    def delete_object(
        self, kind: str, namespace: str | None, name: str, *, force: bool = False, group: str | None = None
    ) -> dict[str, Any]:
        """Delete like the API (finalizers only mark it) or, with ``force``, remove it at once.
        Returns the object's last state. KeyError when absent."""
        rt = resource_for_kind(kind, group)
        try:
            return _copy(self.registry.remove(rt, namespace or "" if rt.namespaced else "", name, force=force))
        except st.ApiError as error:
            raise KeyError(error.body["message"]) from error

    def objects(self, kind: str, namespace: str | None = None, *, group: str | None = None) -> list[dict[str, Any]]:
        """Copies of every stored object of a kind (optionally one namespace), in LIST order."""
        rt = resource_for_kind(kind, group)
        current = self.storage.current((rt.group, rt.plural))
        return [_copy(current[key]) for key in sorted(current) if namespace is None or key[0] == namespace]

    def contexts(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """Copies of the stored PodSchedulingContexts (optionally of one namespace), in LIST order."""
        return self.objects("PodSchedulingContext", namespace)

    def field_managers(self, kind: str, namespace: str | None, name: str) -> dict[str, list[str]]:
        """Who owns which top-level spec fields of an object, from its managedFields:
        {manager: sorted field names}, Update managers as ``"name (Update)"`` (``managed.py``)."""
        obj = self.get_object(kind, namespace, name)
        return {} if obj is None else spec_owners(obj)

    def sync_disruption_budgets(self, namespace: str | None = None) -> int:
        """One pass of the disruption controller (there is none running): every
        PodDisruptionBudget (of one namespace) gets the status computed from the current pods
        (``disruption.sync_status``: expectedPods, desiredHealthy, currentHealthy,
        disruptionsAllowed, observedGeneration, the DisruptionAllowed condition; disruptedPods of
        pods gone or being deleted dropped), written as ``kube-controller-manager`` on ``status``.
        Watchers see MODIFIED for each changed one. Returns how many changed."""
        rt = resource_for_kind("PodDisruptionBudget")
        changed = 0
        for (pdb_namespace, _), pdb in sorted(self.storage.current((rt.group, rt.plural)).items()):
            if namespace is not None and pdb_namespace != namespace:
                continue
            status = sync_status(self.registry, pdb)
            if status is not pdb.get("status"):
                self.registry.record_status_write(rt, pdb, {**pdb, "status": status}, manager="kube-controller-manager")
                changed += 1
        return changed

    def collect_garbage(self) -> int:
        """Delete the PodSchedulingContexts and ResourceClaims whose controlling Pod is gone
        (pod deletions do this at once; this catches dependents written with ``put_object``).
        Returns how many were deleted or marked for deletion."""
        return self.registry.collect_garbage()

    @property
    def resource_version(self) -> int:
        """The global resourceVersion of the latest write."""
        return self.storage.rv

    # === watch control ==========================================================================

    def compact(self, resource_version: int | None = None) -> None:
        """Forget history up to ``resource_version`` (default: now): older watch resumes get a
        410 ERROR event, older continue tokens and Exact lists a 410."""
        self.storage.compact(resource_version)

    def restart(self) -> None:
        """An apiserver restart: every open watch is cut, hanging requests are dropped, and the
        watch cache starts afresh at the current resourceVersion (history compacted)."""
        self.drop_watches()
        self.release_hangs()
        self.storage.compact()

    def drop_watches(self, resource: str | None = None, *, abrupt: bool = True) -> int:
        """End open watches (of one resource, plural or ``plural.group``): ``abrupt`` cuts the
        connection, otherwise the chunked body ends cleanly (as on timeoutSeconds). Returns how many."""
        matching = [w for w in self._watches if w.matches(resource)]
        for watch in matching:
            watch.queue.put_nowait(("drop",) if abrupt else ("close",))
        return len(matching)

    def send_bookmarks(self, resource: str | None = None) -> None:
        """A BOOKMARK now on every open watch that allowed them."""
        for watch in self._watches:
            if watch.matches(resource):
                watch.queue.put_nowait(("bookmark", None, self.storage.rv))

    def watch_count(self, resource: str | None = None) -> int:
        """Open watch streams (of one resource)."""
        return sum(1 for w in self._watches if w.matches(resource))

    async def wait_for_watches(self, count: int = 1, resource: str | None = None, *, timeout: float = 30.0) -> None:
        """Wait until at least ``count`` watches (of one resource) are open."""
        async with asyncio.timeout(timeout):
            while self.watch_count(resource) < count:
                await asyncio.sleep(0.005)

    # === faults =================================================================================

    def fail(
        self,
        method: str | None = None,
        path: str = "",
        *,
        status: int = 500,
        times: int | None = 1,
        retry_after: int | None = None,
        message: str = "injected fault",
        body: dict[str, Any] | None = None,
        watch: bool | None = None,
    ) -> FaultRule:
        """Answer the next ``times`` matching requests with ``status`` and a real-looking Status
        (409 names the object as a stale-update Conflict; 429 carries Retry-After)."""
        return self.faults.add(FaultRule("fail", method, path, watch, times, status, message, retry_after, body))

    def conflicts(self, path: str, *, times: int = 1, method: str = "PUT") -> FaultRule:
        """A conflict storm: the next ``times`` matching writes get 409 Conflict."""
        return self.fail(method, path, status=409, times=times)

    def delay(
        self,
        method: str | None = None,
        path: str = "",
        seconds: float = 0.1,
        *,
        times: int | None = None,
        watch: bool | None = None,
    ) -> FaultRule:
        """Wait ``seconds`` before handling matching requests (only watches, or none of them, with
        ``watch``): an API server's latency."""
        return self.faults.add(FaultRule("delay", method, path, watch, times=times, seconds=seconds))

    def hold(
        self, method: str | None = None, path: str = "", *, times: int | None = 1, watch: bool | None = None
    ) -> Gate:
        """Hold the next ``times`` matching requests until ``gate.release()`` (``Gate``): a slow
        API server whose answer comes exactly when the test says, on any machine."""
        gate = Gate(method, path, times, watch)
        self._gates.append(gate)
        return gate

    def hang(self, method: str | None = None, path: str = "", *, times: int | None = 1) -> FaultRule:
        """Never answer matching requests; the connection is closed by ``release_hangs()``,
        ``restart()`` or shutdown."""
        return self.faults.add(FaultRule("hang", method, path, times=times))

    def lose_answer(self, method: str | None = None, path: str = "", *, times: int | None = 1) -> FaultRule:
        """Carry out the next matching requests, then close their connections without answering."""
        return self.faults.add(FaultRule("lose", method, path, times=times))

    def drop_watch(self, path: str = "", *, after_events: int = 0, times: int | None = 1) -> FaultRule:
        """Cut the next matching watch stream(s) after ``after_events`` object events."""
        return self.faults.add(FaultRule("drop", "GET", path, watch=True, times=times, after_events=after_events))

    def clear_faults(self) -> None:
        self.faults.clear()

    def release_hangs(self) -> None:
        """Close the connections of every hanging request."""
        self._release.set()
        self._release = asyncio.Event()

    # === auth ===================================================================================

    def deny(self, verb: str, resource: str, *, namespace: str | None = None) -> None:
        """RBAC: refuse ``verb`` ("*" for all) on ``resource`` (plural, ``plural/subresource``,
        optionally ``.group``-qualified) with 403 Forbidden (in one namespace, or everywhere)."""
        self._denials.append(_Denial(verb, resource, namespace))

    def allow_all(self) -> None:
        self._denials.clear()

    def is_allowed(
        self, verb: str, target: Target | None, *, resource: str = "", group: str = "", namespace: str = ""
    ) -> bool:
        if target is not None:
            resource = target.rt.plural + (f"/{target.subresource}" if target.subresource else "")
            group, namespace = target.rt.group, target.namespace
        qualified = (
            f"{resource.split('/')[0]}.{group}" + (f"/{resource.split('/')[1]}" if "/" in resource else "")
            if group
            else resource
        )
        for denial in self._denials:
            if denial.verb not in ("*", verb) or denial.resource not in (resource, qualified):
                continue
            if denial.namespace is None or denial.namespace == namespace:
                return False
        return True

    # === request log ============================================================================

    def requests_to(self, method: str | None = None, path: str | None = None) -> list[RequestRecord]:
        """Recorded requests with this method and a path containing ``path`` (a regex search)."""
        pattern = re.compile(path) if path else None
        return [
            r
            for r in self.requests
            if (method is None or r.method == method.upper()) and (pattern is None or pattern.search(r.path))
        ]

    def clear_requests(self) -> None:
        self.requests.clear()

    # === HTTP ===================================================================================

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        record = RequestRecord(
            request.method, request.path, dict(request.query), user_agent=request.headers.get("User-Agent", "")
        )
        if raw:
            try:
                record.body = orjson.loads(raw)
            except orjson.JSONDecodeError:
                record.body = raw.decode(errors="replace")
        self.requests.append(record)
        try:
            response = await self._handle(request, record, raw)
        except st.ApiError as error:
            response = web.Response(
                status=error.code, body=orjson.dumps(error.body), content_type="application/json", headers=error.headers
            )
        if response is None:  # a watch cut (drop_watches, restart) before its stream started
            response = web.Response(status=503, text="watch closed before it started")
        if record.status is None:
            record.status = response.status
        if request.get(LOSE_ANSWER) and request.transport is not None:
            request.transport.close()  # done, but the client never hears of it
        return response

    async def _handle(self, request: web.Request, record: RequestRecord, raw: bytes) -> web.StreamResponse:
        path = request.path
        if path in _HEALTH:
            return web.Response(text="ok")
        if not self._authenticated(request.headers.get("Authorization", "")):
            raise st.unauthorized()
        target = self._parse_target(path)
        await self._apply_faults(request, record, target)
        discovery = self._discovery(path)
        if discovery is not None:
            return _json(discovery)
        if target is None:
            raise st.path_not_found()
        if isinstance(record.body, str) and not _is_apply(request):
            raise st.bad_request(f"couldn't get version/kind; json parse error: {record.body[:80]!r} is not JSON")
        return await self._resource(request, record, target)

    def _authenticated(self, authorization: str) -> bool:
        """Whether ``authorization`` is one the fake accepts (anything when no auth is set)."""
        accepted = []
        if self.token is not None:
            accepted.append(f"Bearer {self.token}")
        if self.basic_auth is not None:
            accepted.append("Basic " + base64.b64encode(":".join(self.basic_auth).encode()).decode())
        return not accepted or authorization in accepted

    async def _apply_faults(self, request: web.Request, record: RequestRecord, target: Target | None) -> None:
        for gate in tuple(self._gates):  # the gates armed when it arrived, not those armed while it waits
            await gate.pass_through(request.method, request.path, record.is_watch)
        delays, rule = self.faults.select(request.method, request.path, record.is_watch)
        for delay in delays:
            await asyncio.sleep(delay.seconds)
        if rule is None:
            return
        if rule.action == "hang":
            await self._release.wait()
            if request.transport is not None:
                request.transport.close()
            raise st.internal_error("hang released")  # never reaches the closed connection
        if rule.action == "drop":
            request[DROP_AFTER] = rule.after_events
            return
        if rule.action == "lose":
            request[LOSE_ANSWER] = True
            return
        if rule.body is not None:
            raise st.ApiError({**rule.body, "code": rule.status})
        raise _fault_error(rule, target)

    def _discovery(self, path: str) -> dict[str, Any] | None:
        parts = [p for p in path.split("/") if p]
        if parts == ["version"]:
            return version_info(self.minor_version)
        if parts == ["api"]:
            return api_versions()
        if parts == ["api", "v1"]:
            return api_resource_list("", "v1", self.gates)
        if parts == ["apis"]:
            return api_group_list(self.resource_versions, self.gates)
        if len(parts) == 2 and parts[0] == "apis":
            group = api_group(parts[1], self.resource_versions, self.gates)
            if group is None:
                raise st.path_not_found()
            return group
        if len(parts) == 3 and parts[0] == "apis":
            if not is_served(parts[1], parts[2], self.resource_versions, self.gates):
                raise st.path_not_found()
            return api_resource_list(parts[1], parts[2], self.gates)
        return None

    def _parse_target(self, path: str) -> Target | None:
        """Split ``/api/v1/...`` or ``/apis/G/V/...`` into resource, namespace, name and
        subresource; None for non-resource paths; 404 for resource paths nothing serves."""
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        if not rest:
            return None
        if not is_served(group, version, self.resource_versions, self.gates):
            raise st.path_not_found()
        namespace = ""
        if rest[0] == "namespaces" and len(rest) >= 3:
            inner = find_resource(group, rest[2])
            if inner is not None and inner.namespaced:
                namespace, rest = rest[1], rest[2:]
        rt = find_resource(group, rest[0])
        if rt is None or version not in rt.versions or not is_enabled(rt, self.gates) or len(rest) > 3:
            raise st.path_not_found()
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        if sub and sub not in rt.all_subresources:
            raise st.path_not_found()
        if rt.namespaced and name and not namespace:
            raise st.path_not_found()
        return Target(rt, version, namespace, name, sub)

    async def _resource(self, request: web.Request, record: RequestRecord, target: Target) -> web.StreamResponse:
        method, rt, body = request.method, target.rt, record.body
        verb = _verb(method, target, record.is_watch)
        if not self.is_allowed(verb, target):
            raise st.forbidden(
                user=self.user,
                verb=verb,
                resource=rt.plural,
                subresource=target.subresource,
                group=rt.group,
                namespace=target.namespace,
                name=target.name or None,
            )
        if record.query.get("dryRun"):
            raise st.bad_request("dryRun is not emulated by the fake apiserver")
        if rt.kind == "SelfSubjectAccessReview":
            return _json(self._access_review(body), status=201)
        registry, ns, name = self.registry, target.namespace, target.name
        manager = record.query.get("fieldManager") or default_manager(record.user_agent)
        if verb == "watch":
            return await self._watch(request, record, target)
        if verb == "list":
            if "sendInitialEvents" in record.query:
                raise st.invalid(
                    "ListOptions",
                    "meta.k8s.io",
                    "",
                    [
                        st.FieldError(
                            "sendInitialEvents",
                            "FieldValueForbidden",
                            "Forbidden: sendInitialEvents is forbidden for list",
                        )
                    ],
                )
            return _json(registry.list_collection(rt, target.version, ns, _list_options(record.query, rt)))
        if verb == "get":
            return _json(registry.get(rt, target.version, ns, name))
        if verb == "create" and target.subresource == "binding":
            return _json(registry.bind(ns, name, body), status=201)
        if verb == "create" and target.subresource == "eviction":
            return _json(registry.evict(ns, name, body), status=201)
        if verb == "create":
            created = registry.create(rt, target.version, ns, body, manager=manager)
            return _json(registry.serve(rt, target.version, created), status=201)
        if verb == "update":
            stored = registry.update(
                rt, target.version, ns, name, body, subresource=target.subresource, manager=manager
            )
            return _json(registry.serve(rt, target.version, stored))
        if verb == "patch" and _is_apply(request):
            if not record.query.get("fieldManager"):
                raise missing_field_manager()
            if rt.apply and not target.subresource:
                return self._apply(record, target, await request.read())  # read() is cached
        if verb == "patch":
            if "force" in record.query and not _is_apply(request):
                raise st.invalid(
                    "PatchOptions",
                    "meta.k8s.io",
                    "",
                    [
                        st.FieldError(
                            "force", "FieldValueForbidden", "Forbidden: may not be specified for non-apply patch"
                        )
                    ],
                )
            content_type = request.headers.get("Content-Type", "")
            stored = registry.patch(
                rt, target.version, ns, name, content_type, body, subresource=target.subresource, manager=manager
            )
            return _json(registry.serve(rt, target.version, stored))
        if verb == "delete":
            removed = registry.delete(rt, ns, name, body)
            if rt.deleted_status and self.storage.get((rt.group, rt.plural), (ns, name)) is None:
                uid = str((removed.get("metadata") or {}).get("uid") or "")
                return _json(st.deleted(rt.plural, rt.group, name, uid))
            return _json(registry.serve(rt, target.version, removed))
        raise st.method_not_allowed(verb, rt.plural)

    def _apply(self, record: RequestRecord, target: Target, raw: bytes) -> web.Response:
        """``PATCH`` with ``application/apply-patch+yaml`` (``apply.py``): 201 when it created
        the object. The request log keeps the decoded configuration."""
        manager = record.query.get("fieldManager", "")
        if not manager:
            raise missing_field_manager()
        force = _bool(record.query, "force")
        body = parse_apply_body(raw)
        record.body = body
        rt, version = target.rt, target.version
        stored, created = self.registry.apply(
            rt, version, target.namespace, target.name, body, manager=manager, force=force
        )
        return _json(self.registry.serve(rt, version, stored), status=201 if created else 200)

    def _access_review(self, body: Any) -> dict[str, Any]:
        """SelfSubjectAccessReview: allowed unless a ``deny`` rule matches."""
        attributes = ((body or {}).get("spec") or {}).get("resourceAttributes") or {}
        resource = str(attributes.get("resource") or "")
        if attributes.get("subresource"):
            resource += f"/{attributes['subresource']}"
        allowed = self.is_allowed(
            str(attributes.get("verb") or ""),
            None,
            resource=resource,
            group=str(attributes.get("group") or ""),
            namespace=str(attributes.get("namespace") or ""),
        )
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "metadata": {"creationTimestamp": None},
        }
        review["spec"] = (body or {}).get("spec") or {}
        review["status"] = (
            {"allowed": allowed} if allowed else {"allowed": False, "reason": "denied by the fake's RBAC rules"}
        )
        return review

    async def _watch(self, request: web.Request, record: RequestRecord, target: Target) -> web.StreamResponse:
        """WATCH: see ``Registry.watch_start`` for where it starts and ``WatchStream`` for how it
        runs. A too-old resourceVersion is HTTP 200 with one ERROR 410 event, then the end."""
        rt, query = target.rt, record.query
        options = _list_options(query, rt)
        bookmarks = _bool(query, "allowWatchBookmarks")
        initial_events = _watch_initial_events(query)
        timeout = _int(query, "timeoutSeconds")
        stream = WatchStream(
            request,
            rt,
            target.version,
            target.namespace,
            bookmarks,
            serve=lambda obj: self.registry.serve(rt, target.version, obj),
            current_rv=lambda: self.storage.rv,
            drop_after=request.get(DROP_AFTER),
        )
        expired: st.ApiError | None = None
        initial: list[tuple[str, dict[str, Any]]] = []
        start_rv = self.storage.rv
        try:
            initial, start_rv = self.registry.watch_start(
                rt, target.namespace, options, send_initial_events=initial_events
            )
        except st.ApiError as error:
            if error.code != 410:
                raise
            expired = error
        listener = self._listener(stream, options)
        if expired is None:  # subscribed in the same step as the replay: nothing missed or doubled
            self.storage.subscribe(listener)
        try:
            await stream.start()
            record.status = 200
            if expired is not None:
                await stream.write_error(expired)
                await stream.response.write_eof()  # type: ignore[union-attr]
                return stream.response  # type: ignore[return-value]
            self._watches.add(stream)
            for event_type, obj in initial:
                if not await stream.send_object(event_type, obj):
                    return stream.response  # type: ignore[return-value]
            if initial_events and bookmarks:
                await stream.bookmark(start_rv, {"k8s.io/initial-events-end": "true"})
            loop = asyncio.get_running_loop()
            limits = [t for t in (timeout, self.watch_timeout) if t]
            deadline = loop.time() + min(limits) if limits else None
            await stream.run(deadline=deadline, bookmark_interval=self.bookmark_interval)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self.storage.unsubscribe(listener)
            self._watches.discard(stream)
        return stream.response  # type: ignore[return-value]

    @staticmethod
    def _listener(stream: WatchStream, options: ListOptions) -> Callable[[Change], None]:
        collection = (stream.rt.group, stream.rt.plural)

        def on_change(change: Change) -> None:
            if change.collection != collection or (stream.namespace and change.key[0] != stream.namespace):
                return
            event = watch_event(change, options.selector)
            if event is not None:
                stream.queue.put_nowait(("event", event[0], event[1]))

        return on_change

    def close_everything(self) -> None:
        """End watches and hangs so a shutdown does not wait for them."""
        self.drop_watches()
        self._release.set()
        for gate in self._gates:
            gate.release()

    async def _on_shutdown(self, _app: web.Application) -> None:
        self.close_everything()


# --- helpers --------------------------------------------------------------------------------------


def _copy(obj: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = orjson.loads(orjson.dumps(obj))
    return result


def _json(body: dict[str, Any], *, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


def _is_apply(request: web.Request) -> bool:
    media = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    return request.method == "PATCH" and media == APPLY_PATCH


def _verb(method: str, target: Target, is_watch: bool) -> str:
    """The RBAC verb of a request (``get``/``list``/``watch``/``create``/...)."""
    if target.name and target.subresource in ("binding", "eviction"):
        if method != "POST":
            raise st.method_not_allowed(method, f"pods/{target.subresource}")
        return "create"
    if method == "GET":
        if target.name:
            if is_watch:
                raise st.bad_request(
                    "watch of a single object by name is not emulated; use fieldSelector=metadata.name=NAME"
                )
            return "get"
        return "watch" if is_watch else "list"
    if (method == "POST" and not target.name and target.namespace) or (
        method == "POST" and not target.rt.namespaced and not target.name
    ):
        return "create"
    verbs = {"PUT": "update", "PATCH": "patch", "DELETE": "delete"}
    if target.name and method in verbs:
        return verbs[method]
    if method == "DELETE":
        raise st.method_not_allowed("deletecollection (not emulated)", target.rt.plural)
    raise st.method_not_allowed(method, target.rt.plural)


def _bool(query: dict[str, str], name: str) -> bool:
    value = query.get(name)
    if value is None or value == "":
        return False
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise st.bad_request(f'invalid value for {name}: "{value}": strconv.ParseBool: parsing "{value}": invalid syntax')


def _int(query: dict[str, str], name: str) -> int:
    value = query.get(name)
    if not value:
        return 0
    try:
        return int(value)
    except ValueError:
        raise st.bad_request(f'invalid value for {name}: "{value}": strconv.ParseInt: invalid syntax') from None


def _watch_initial_events(query: dict[str, str]) -> bool | None:
    """Whether a watch starts with the current objects (``sendInitialEvents``; None: the classic
    start from ``resourceVersion``), after the apiserver's defaulting and validation of 1.36
    (``SetListOptionsDefaults``, ``validateWatchOptions``): a watch from resourceVersion "" or "0"
    without either option gets ``sendInitialEvents=true`` and ``resourceVersionMatch=NotOlderThan``
    (so with bookmarks allowed its initial events end with the ``k8s.io/initial-events-end``
    BOOKMARK); ``sendInitialEvents`` needs ``resourceVersionMatch=NotOlderThan``, and that match
    needs ``sendInitialEvents`` (422 otherwise)."""
    match = query.get("resourceVersionMatch", "")
    send = _bool(query, "sendInitialEvents") if "sendInitialEvents" in query else None
    if send is None and not match and query.get("resourceVersion", "") in ("", "0"):
        return True
    errors: list[st.FieldError] = []
    if send is not None and match != "NotOlderThan":
        errors.append(
            st.FieldError(
                "resourceVersionMatch",
                "FieldValueForbidden",
                "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            )
        )
    if match:
        if send is None:
            errors.append(
                st.FieldError(
                    "resourceVersionMatch",
                    "FieldValueForbidden",
                    "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                )
            )
        if match != "NotOlderThan":
            errors.append(
                st.FieldError(
                    "resourceVersionMatch",
                    "FieldValueNotSupported",
                    f'Unsupported value: "{match}": supported values: "NotOlderThan"',
                )
            )
        if query.get("continue"):
            errors.append(
                st.FieldError(
                    "resourceVersionMatch",
                    "FieldValueForbidden",
                    "Forbidden: resourceVersionMatch is forbidden when continue is provided",
                )
            )
    if errors:
        raise st.invalid("ListOptions", "meta.k8s.io", "", errors)
    return send


def _list_options(query: dict[str, str], rt: ResourceType) -> ListOptions:
    label = parse_label_selector(query.get("labelSelector"))
    field_selector = parse_field_selector(query.get("fieldSelector"), rt)
    selector = (
        label
        if not query.get("fieldSelector")
        else (field_selector if not query.get("labelSelector") else (lambda obj: label(obj) and field_selector(obj)))
    )
    return ListOptions(
        resource_version=query.get("resourceVersion", ""),
        resource_version_match=query.get("resourceVersionMatch", ""),
        limit=max(0, _int(query, "limit")),
        continue_token=query.get("continue", ""),
        selector=selector,
        label_selector=query.get("labelSelector", ""),
        field_selector=query.get("fieldSelector", ""),
    )


def _fault_error(rule: FaultRule, target: Target | None) -> st.ApiError:
    """The Status a real server would send with this code."""
    code = rule.status
    if code == 409:
        if target is not None and target.name:
            return st.conflict(target.rt.plural, target.rt.group, target.name, st.MODIFIED)
        return st.ApiError(st.status_body(409, "Conflict", f"Operation cannot be fulfilled: {st.MODIFIED}"))
    if code == 429:
        return st.too_many_requests(rule.retry_after or 1)
    if code == 500:
        return st.internal_error(rule.message)
    if code == 503:
        body = st.status_body(503, "ServiceUnavailable", rule.message)
        return st.ApiError(body, headers={"Retry-After": str(rule.retry_after)} if rule.retry_after else None)
    if code == 504:
        return st.timeout(rule.message)
    if code == 410:
        return st.expired(rule.message)
    if code == 404 and target is not None and target.name:
        return st.not_found(target.rt.plural, target.rt.group, target.name)
    reasons = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 422: "Invalid"}
    return st.ApiError(st.status_body(code, reasons.get(code, "Unknown"), rule.message))
