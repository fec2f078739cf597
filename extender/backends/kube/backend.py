"""``KubeBackend``: the ``Backend`` protocol against a real API server.

Reads: six reflectors (``reflector.py``) keep ``store`` filled — ResourceSlices, ResourceClaims,
ResourceClaimTemplates and DeviceClasses in the served resource.k8s.io version (``discovery.py``),
Pods and Nodes in core/v1. All pods are watched (minus terminated ones, by field selector): the service reads pods
by name at filter time and from the pods' ``status.resourceClaimStatuses``; narrowing further
(pods with claims only) needs a server-side filter Kubernetes does not offer. ``synced`` is true
once every reflector has listed and none has failed; after the first full sync the objects are
moved out of the garbage collector's reach (``gc.freeze()``, docs/performance.md).

Writes follow the protocol and the API server's answers: ``update_claim`` (PUT),
``update_claim_status`` (PUT .../status), ``bind_pod`` (POST .../binding with ``metadata.uid`` as
precondition). The object a write returns is put into the store at once through the
``StoreFeeder``, which skips anything older than what it already applied, so the watch's later
copy (or an older event still in flight) cannot move the store back in time. A failed binding is
recorded as a Kubernetes Event on the pod, correlated as client-go does (``events.py``); a
successful one is not: kube-scheduler records ``Scheduled`` itself.

Optional parts: ``leader`` (``LeaseWatcher``: write only while the co-located kube-scheduler leads)
and the fast requeue (``rejected`` + ``Requeuer``: nudge rejected pods when devices free up).
"""

from __future__ import annotations

import asyncio
import gc
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import structlog

from extender.core.errors import (
    ApiUnavailable,
    EvictionRefused,
    ExtenderError,
    InvalidObject,
    NotLeader,
    ObjectNotFound,
)
from extender.state.cache.store import ObjectStore
from extender.state.filter.rejected import RejectedPod, RejectedPods

from .client import MERGE_PATCH, ClientSettings, KubeClient
from .config import ClusterConfig, load_cluster_config
from .discovery import (
    CLASSIC_VERSION,
    GROUP,
    SCHEDULING_GROUP,
    TAINT_RULE_VERSION,
    discover,
    discover_classic,
    discover_pod_groups,
    serves_taint_rules,
)
from .errors import AccessDenied, ApiStatusError, KubeStartupError
from .events import EventRecorder, EventSettings
from .feeder import StoreFeeder
from .leader import LeaseSettings, LeaseWatcher
from .reflector import Reflector, Resource, WatchSettings, list_pages
from .requeue import Requeuer, RequeueSettings

__all__ = ["KubeBackend", "KubeSettings"]

log = structlog.get_logger()

ConfigSource = Callable[[], Awaitable[ClusterConfig]]

#: Pods that can no longer hold devices are not worth memory (the apiserver sends DELETED when a
#: pod stops matching).
ACTIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"


@dataclass(frozen=True, slots=True)
class KubeSettings:
    watch: WatchSettings = field(default_factory=WatchSettings)
    client: ClientSettings = field(default_factory=ClientSettings)
    api_version: str = ""
    """resource.k8s.io version to use ("v1", ...); empty: discover it (the normal case)."""
    pod_field_selector: str | None = ACTIVE_PODS
    lease: LeaseSettings | None = None
    """Follow kube-scheduler's Lease and refuse binds unless we lead (None: always bind)."""
    requeue: RequeueSettings | None = field(default_factory=RequeueSettings)
    """Fast requeue of rejected pods (None: off)."""
    events: bool = True
    """Record failed binds as Events on the pod."""
    event_settings: EventSettings = field(default_factory=EventSettings)
    freeze_gc: bool = True
    """``gc.freeze()`` after the first full sync (tests switch it off)."""
    check_access: bool = True
    """At start, list each kind once (limit=1) so missing RBAC fails start with verb+resource."""
    classic: bool = True
    """Drive classic DRA (PodSchedulingContexts) when the server serves it (1.31 with the
    DRAControlPlaneController gate); False: never watch or write them."""
    gangs: bool = True
    """Watch PodGroups (scheduling.k8s.io) where the server serves them; False: every pod is
    scheduled on its own (``--no-gangs``)."""
    component: str = "dra-extender"


def _disruption_budget_refusal(exc: ApiUnavailable) -> bool:
    """Whether an eviction's 429 is a PodDisruptionBudget's refusal (a ``DisruptionBudget``
    cause, as the API server's eviction handler writes it) rather than throttling."""
    cause = exc.__cause__
    if not isinstance(cause, ApiStatusError) or cause.status != 429:
        return False
    details = (cause.body or {}).get("details") or {}
    causes = details.get("causes") or [] if isinstance(details, dict) else []
    return any(isinstance(c, dict) and c.get("reason") == "DisruptionBudget" for c in causes) or (
        "disruption budget" in cause.message and not (cause.body or {}).get("details", {}).get("retryAfterSeconds")
    )


class KubeBackend:
    """The Kubernetes backend; see the module docstring."""

    def __init__(
        self,
        config: ClusterConfig | ConfigSource,
        *,
        settings: KubeSettings = KubeSettings(),
        store: ObjectStore | None = None,
        rejected: RejectedPods | None = None,
    ) -> None:
        self._config_source = config
        self.settings = settings
        self.store = store if store is not None else ObjectStore()
        self.rejected = rejected
        if self.rejected is None and settings.requeue is not None:
            self.rejected = RejectedPods(settings.requeue.max_pods, ttl_seconds=settings.requeue.ttl_seconds)
        self.client: KubeClient | None = None
        self.api_version = ""  # "resource.k8s.io/v1" once discovered
        #: Whether PodDisruptionBudgets are watched (``_discover_budgets``).
        self._watch_budgets = False
        self._watch_taint_rules = False
        #: Why classic DRA is not driven ("" when it is): see ``classic_dra``.
        self._classic_problem = "the Kubernetes backend is not started"
        #: The scheduling.k8s.io version PodGroups are watched in ("" while they are not) and why
        #: not: see ``pod_groups``.
        self._pod_group_version = ""
        self._pod_group_problem = "the Kubernetes backend is not started"
        self.reflectors: dict[str, Reflector] = {}
        self.leader: LeaseWatcher | None = None
        self.requeuer: Requeuer | None = None
        self.feeder = StoreFeeder(self.store, on_freed=self._freed)
        #: Set when a reflector failed for good: ``synced`` stays False.
        self.failure: BaseException | None = None
        #: "<task>: <reason>" of ``failure``, for /readyz.
        self._failure_reason = ""
        self._tasks: list[asyncio.Task[None]] = []
        self._synced_event: asyncio.Event | None = None
        self._frozen = False
        self._gc_paused = False
        self.events = EventRecorder(
            lambda: self.client,
            component=settings.component,
            instance=socket.gethostname(),
            settings=settings.event_settings,
        )

    @classmethod
    def from_kubeconfig(
        cls,
        kubeconfig: str | None = None,
        *,
        context: str | None = None,
        in_cluster: bool | None = None,
        **options: Any,
    ) -> KubeBackend:
        """Credentials are loaded in ``start()`` (it is async): kubeconfig path/context, or the
        in-cluster service account (see ``config.load_cluster_config``)."""

        async def load() -> ClusterConfig:
            return await load_cluster_config(kubeconfig, context=context, in_cluster=in_cluster)

        return cls(load, **options)

    # --- lifecycle ------------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return self.failure is None and bool(self.reflectors) and all(r.synced for r in self.reflectors.values())

    @property
    def not_ready_reason(self) -> str:
        """Why ``synced`` is False, in a line for /readyz ("" when synced): the failure that
        stopped a watch, else the kinds without a complete list and why their last LIST or WATCH
        failed (a 401 or 403 names the credentials sent)."""
        if self.failure is not None:
            return self._failure_reason
        if not self.reflectors:
            return "the Kubernetes backend is not started"
        waiting = [r for r in self.reflectors.values() if not r.synced]
        if not waiting:
            return ""
        problems = [r.problem for r in waiting if r.problem]
        line = "waiting for a complete list of " + ", ".join(r.resource.name for r in waiting)
        return "; ".join([line, *problems])

    async def start(self) -> None:
        """Load credentials, discover the API, check access, then spawn one task per reflector.
        Raises ``KubeStartupError`` (unreachable, forbidden, unserved) with a message to act on."""
        if self._tasks:
            return
        self._synced_event = asyncio.Event()
        try:
            await self._connect()
        except BaseException:
            await self._close_client()
            raise
        assert self.client is not None
        if self.settings.freeze_gc and not self._frozen and gc.isenabled():
            # The initial LIST allocates millions of long-lived objects; collections during it
            # rescan them again and again (about 30% of the sync). Collect once, at the end.
            gc.disable()
            self._gc_paused = True
        for resource in self._resources():
            reflector = Reflector(
                self.client,
                resource,
                self.feeder,
                settings=self.settings.watch,
                on_synced=self._reflector_synced,
                on_list_failed=self._list_failed,
            )
            self.reflectors[resource.kind] = reflector
            self._tasks.append(self._guarded(reflector.run(), f"watch {resource.plural}"))
        if self.settings.lease is not None:
            self.leader = LeaseWatcher(self.client, self.settings.lease)
            self._tasks.append(self._helper(self.leader.run, "follow the leader lease"))
        if self.settings.requeue is not None and self.rejected is not None:
            self.requeuer = Requeuer(
                self.client,
                self.rejected,
                self.settings.requeue,
                still_pending=self._still_pending,
                may_write=self.ensure_leader,
            )
            self._tasks.append(self._helper(self.requeuer.run, "requeue rejected pods"))
        if self.settings.events:
            self._tasks.append(self._helper(self.events.run, "record events"))
        log.info(
            "kube.started",
            api=self.api_version,
            source=self.client.config.source,
            host=self.client.config.host,
            credentials=self.client.config.identity,
        )

    async def stop(self) -> None:
        tasks = self._tasks
        self._tasks = []
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception:  # already logged by the guard
                pass
        self._resume_gc()
        self.reflectors = {}  # not synced any more: nothing keeps the store current
        await self._close_client()

    async def wait_synced(self, timeout: float | None = None) -> None:
        """Return once every reflector has listed (raises TimeoutError, or the failure)."""
        if self._synced_event is None:
            raise RuntimeError("start() first")
        async with asyncio.timeout(timeout):
            await self._synced_event.wait()
        if self.failure is not None:
            raise self.failure

    async def _connect(self) -> None:
        source = self._config_source
        if isinstance(source, ClusterConfig):
            config = source
        else:
            try:
                config = await source()
            except Exception as exc:  # kubeconfig missing or malformed, no service account, ...
                raise KubeStartupError(f"cannot load Kubernetes credentials: {type(exc).__name__}: {exc}") from exc
        self.client = KubeClient(config, settings=self.settings.client)
        version = self.settings.api_version or await discover(self.client)
        self.api_version = f"{GROUP}/{version}"
        await self._discover_classic(version)
        await self._discover_budgets()
        await self._discover_taint_rules()
        await self._discover_pod_groups()
        if self.settings.check_access:
            for resource in self._resources():
                params = {"limit": "1"}
                await self.client.request("GET", resource.path, params=params, verb="list", resource=resource.name)

    async def _discover_classic(self, version: str) -> None:
        """Whether to watch PodSchedulingContexts: served (1.31, gate on) and readable. A server
        that serves them to a service account without the classic RBAC (deploy/classic-dra)
        is logged, and pods with classic claims are told why they cannot be scheduled; nothing else
        changes."""
        assert self.client is not None
        if not self.settings.classic:
            self._classic_problem = "classic DRA is switched off (--no-classic-dra)"
            return
        self._classic_problem = await discover_classic(self.client, version)
        if self._classic_problem:
            log.info("kube.classic_dra_not_served", reason=self._classic_problem)
            return
        resource = self._context_resource()
        try:
            await self.client.request("GET", resource.path, params={"limit": "1"}, verb="list", resource=resource.name)
        except AccessDenied as exc:
            self._classic_problem = (
                f"{exc.reason} (the API server serves classic DRA; grant the extender "
                "deploy/classic-dra's permissions to drive it)"
            )
            log.warning("kube.classic_dra_forbidden", reason=self._classic_problem)
            return
        log.info("kube.classic_dra", api=self.api_version)

    async def _discover_budgets(self) -> None:
        """Whether to watch PodDisruptionBudgets (device-aware preemption spares the pods they
        protect): only where listing them is allowed; without it, preemption learns of budgets from
        the API server's refusals alone (logged once)."""
        assert self.client is not None
        resource = self._budget_resource()
        try:
            await self.client.request("GET", resource.path, params={"limit": "1"}, verb="list", resource=resource.name)
        except (AccessDenied, ObjectNotFound) as exc:
            self._watch_budgets = False
            log.warning("kube.budgets_not_watched", reason=exc.reason)
            return
        self._watch_budgets = True

    async def _discover_taint_rules(self) -> None:
        """Whether to watch DeviceTaintRules: where the server serves them (v1beta2; off by default
        in 1.36) and listing them is allowed; their taints then apply to the devices they select,
        as kube-scheduler applies them. A server that serves them to an extender without the RBAC
        is logged: the rules' taints would be missed."""
        assert self.client is not None
        self._watch_taint_rules = False
        if not await serves_taint_rules(self.client):
            return
        resource = self._taint_rule_resource()
        try:
            await self.client.request("GET", resource.path, params={"limit": "1"}, verb="list", resource=resource.name)
        except AccessDenied as exc:
            log.warning("kube.taint_rules_forbidden", reason=exc.reason)
            return
        self._watch_taint_rules = True
        log.info("kube.taint_rules", api=f"{GROUP}/{TAINT_RULE_VERSION}")

    async def _discover_pod_groups(self) -> None:
        """Whether to watch PodGroups: served (GenericWorkload on, the version enabled) and
        readable. A server that serves them to an extender without the RBAC is logged: its gangs
        are then scheduled member by member, as kube-scheduler's own per-pod calls ask."""
        assert self.client is not None
        self._pod_group_version = ""
        if not self.settings.gangs:
            self._pod_group_problem = "gangs are switched off (--no-gangs)"
            return
        version = await discover_pod_groups(self.client)
        if not version:
            self._pod_group_problem = f"the API server does not serve {SCHEDULING_GROUP} podgroups"
            log.info("kube.pod_groups_not_served", reason=self._pod_group_problem)
            return
        resource = Resource("PodGroup", f"{SCHEDULING_GROUP}/{version}", "podgroups")
        try:
            await self.client.request("GET", resource.path, params={"limit": "1"}, verb="list", resource=resource.name)
        except AccessDenied as exc:
            self._pod_group_problem = f"{exc.reason} (grant the extender list and watch on podgroups)"
            log.warning("kube.pod_groups_forbidden", reason=self._pod_group_problem)
            return
        self._pod_group_version, self._pod_group_problem = version, ""
        log.info("kube.pod_groups", api=resource.api_version)

    def _pod_group_resource(self) -> Resource:
        return Resource("PodGroup", f"{SCHEDULING_GROUP}/{self._pod_group_version}", "podgroups")

    def _taint_rule_resource(self) -> Resource:
        return Resource("DeviceTaintRule", f"{GROUP}/{TAINT_RULE_VERSION}", "devicetaintrules")

    def _budget_resource(self) -> Resource:
        return Resource("PodDisruptionBudget", "policy/v1", "poddisruptionbudgets")

    def _context_resource(self) -> Resource:
        return Resource("PodSchedulingContext", f"{GROUP}/{CLASSIC_VERSION}", "podschedulingcontexts")

    def _resources(self) -> list[Resource]:
        return [
            Resource("DeviceClass", self.api_version, "deviceclasses"),
            Resource("ResourceSlice", self.api_version, "resourceslices"),
            Resource("ResourceClaim", self.api_version, "resourceclaims"),
            # A pod's template claims are filtered from the template until the controller has made them.
            Resource("ResourceClaimTemplate", self.api_version, "resourceclaimtemplates"),
            Resource("Node", "v1", "nodes"),
            Resource("Pod", "v1", "pods", field_selector=self.settings.pod_field_selector),
            *([self._context_resource()] if self._classic_problem == "" else []),
            *([self._budget_resource()] if self._watch_budgets else []),
            *([self._taint_rule_resource()] if self._watch_taint_rules else []),
            *([self._pod_group_resource()] if self._pod_group_version else []),
        ]

    async def _close_client(self) -> None:
        if self.client is not None:
            await self.client.close()

    def _helper(
        self, work: Callable[[], Awaitable[None]], name: str, *, restart_seconds: float = 1.0
    ) -> asyncio.Task[None]:
        """A task the cache does not depend on (Events, the fast requeue, the Lease reader): a
        failure is logged and the task started again, never taken as the backend's failure — an
        Event that cannot be written must not stop scheduling."""

        async def keep_running() -> None:
            while True:
                try:
                    await work()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.exception("kube.helper_failed", task=name, reason=getattr(exc, "reason", str(exc)))
                else:
                    log.error("kube.helper_finished", task=name, reason="finished unexpectedly")
                await asyncio.sleep(restart_seconds)

        return asyncio.create_task(keep_running(), name=name)

    def _guarded(self, work: Awaitable[None], name: str) -> asyncio.Task[None]:
        async def guard() -> None:
            try:
                await work
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Fatal (an unexpected answer, a bug): stop being ready rather than serve a stale
                # cache. A refused request (401/403) is not: the reflector retries it.
                self.failure = exc
                self._failure_reason = f"{name}: {getattr(exc, 'reason', None) or f'{type(exc).__name__}: {exc}'}"
                log.exception("kube.task_failed", task=name, reason=getattr(exc, "reason", str(exc)))
                self._resume_gc()  # no first sync is coming: the collector must not stay paused
                if self._synced_event is not None:
                    self._synced_event.set()
            else:
                log.error("kube.task_finished", task=name, reason="finished unexpectedly")

        return asyncio.create_task(guard(), name=name)

    def _resume_gc(self) -> None:
        if self._gc_paused:
            self._gc_paused = False
            gc.enable()

    def _list_failed(self, reflector: Reflector) -> None:
        """A kind's LIST failed or was refused: the first sync may be long in coming (a missing
        RBAC rule waits for an operator), and the collector, paused for the initial lists, must
        not stay off meanwhile."""
        self._resume_gc()

    def _reflector_synced(self, reflector: Reflector) -> None:
        log.info("kube.kind_synced", kind=reflector.resource.kind, objects=self.feeder.count(reflector.resource.kind))
        if not self.synced:
            return
        if self.settings.freeze_gc and not self._frozen:
            # Everything listed so far lives long: keep the collector from scanning it again. No
            # collection first: it found nothing to free (0 unreachable objects after a list of
            # 5000 slices) and stopped the event loop for seconds at 15 000 (docs/performance.md).
            gc.freeze()
            self._frozen = True
            self._resume_gc()
        log.info("kube.synced", slices=len(self.store.slices), devices=self.store.device_count())
        if self._classic_problem:
            classic = sum(1 for claim in self.store.claims.values() if claim.controller and claim.allocation is None)
            if classic:
                log.warning("kube.classic_claims_unschedulable", claims=classic, reason=self._classic_problem)
        if self._synced_event is not None:
            self._synced_event.set()

    # --- reads ----------------------------------------------------------------------------------

    def _claim_path(self, namespace: str, name: str) -> str:
        return f"/apis/{self.api_version}/namespaces/{namespace or 'default'}/resourceclaims/{name}"

    def _api(self) -> KubeClient:
        if self.client is None:
            raise KubeStartupError("the Kubernetes backend is not started")
        return self.client

    async def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        key = f"{namespace}/{name}"
        try:
            return await self._api().request(
                "GET", self._claim_path(namespace, name), verb="get", resource=f"resourceclaims.{GROUP}"
            )
        except ExtenderError as exc:
            exc.claim = exc.claim or key
            raise

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self._api().request(
                "GET", f"/api/v1/namespaces/{namespace or 'default'}/pods/{name}", verb="get", resource="pods"
            )
        except ObjectNotFound:
            return None

    # --- writes ---------------------------------------------------------------------------------

    async def ensure_leader(self) -> None:
        """With ``settings.lease``: raise ``NotLeader`` unless the co-located kube-scheduler holds
        the Lease (``leader.py``); without: always the leader."""
        if self.leader is not None:
            await self.leader.ensure_leader()

    async def update_claim(self, raw: dict[str, Any]) -> dict[str, Any]:
        return await self._put_claim(raw, "", verb="update", resource=f"resourceclaims.{GROUP}")

    async def update_claim_status(self, raw: dict[str, Any]) -> dict[str, Any]:
        return await self._put_claim(raw, "/status", verb="update", resource=f"resourceclaims.{GROUP}/status")

    async def _put_claim(self, raw: dict[str, Any], suffix: str, *, verb: str, resource: str) -> dict[str, Any]:
        meta = raw.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
        body = dict(raw)
        body.setdefault("apiVersion", self.api_version)
        body.setdefault("kind", "ResourceClaim")
        try:
            stored = await self._api().request(
                "PUT", self._claim_path(namespace, name) + suffix, body=body, verb=verb, resource=resource
            )
        except ExtenderError as exc:
            exc.claim = exc.claim or f"{namespace}/{name}"
            raise
        stored.setdefault("kind", "ResourceClaim")
        # The store keeps the object it is given; the caller gets a copy of its own to change.
        self.feeder.written(orjson.loads(orjson.dumps(stored)))
        return stored

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        namespace = namespace or "default"
        binding: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, **({"uid": uid} if uid else {})},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            # Asked before the bind decided anything, and again here: a bind may have waited for
            # template claims meanwhile (the answer is cached, so this is rarely a GET).
            await self.ensure_leader()
            await self._api().request(
                "POST",
                f"/api/v1/namespaces/{namespace}/pods/{name}/binding",
                body=binding,
                verb="create",
                resource="pods/binding",
            )
        except ExtenderError as exc:
            exc.node = exc.node or node
            if not isinstance(exc, NotLeader):  # a replica that may not write records no Event either
                self.pod_event(namespace, name, uid, kind="Warning", reason="FailedBinding", message=exc.reason)
            raise

    # --- debug ----------------------------------------------------------------------------------

    #: Kinds the store keeps decoded only: ``list_objects`` asks the API server for them.
    LISTED_FROM_SERVER = ("DeviceClass", "ResourceSlice")

    async def list_objects(self, kind: str) -> list[dict[str, Any]] | None:
        """The raw objects of ``kind`` for ``GET debug/objects``: DeviceClasses and ResourceSlices by one
        paged LIST at the served version (the store keeps them decoded only; a debug request is rare
        enough for a LIST), None for the kinds the store keeps raw (``views/listing.py`` reads those)."""
        if kind not in self.LISTED_FROM_SERVER:
            return None
        resource = next(r for r in self._resources() if r.kind == kind)
        items, _ = await list_pages(self._api(), resource, page_size=self.settings.watch.page_size)
        return items

    # --- classic DRA ----------------------------------------------------------------------------

    @property
    def classic_dra(self) -> str:
        return self._classic_problem

    @property
    def pod_groups(self) -> str:
        return self._pod_group_problem

    def _context_path(self, namespace: str, name: str = "") -> str:
        path = f"/apis/{GROUP}/{CLASSIC_VERSION}/namespaces/{namespace or 'default'}/podschedulingcontexts"
        return f"{path}/{name}" if name else path

    async def _context_write(
        self,
        method: str,
        raw: dict[str, Any],
        *,
        verb: str,
        resource: str,
        named: bool = True,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        meta = raw.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
        body = {**raw, "apiVersion": f"{GROUP}/{CLASSIC_VERSION}", "kind": "PodSchedulingContext"}
        await self.ensure_leader()
        stored = await self._api().request(
            method,
            self._context_path(namespace, name if named else ""),
            body=body,
            params=params,
            content_type=content_type,
            verb=verb,
            resource=resource,
        )
        stored.setdefault("kind", "PodSchedulingContext")
        self.feeder.written(orjson.loads(orjson.dumps(stored)))
        return stored

    async def create_scheduling_context(self, raw: dict[str, Any]) -> dict[str, Any]:
        return await self._context_write(
            "POST", raw, verb="create", resource=f"podschedulingcontexts.{GROUP}", named=False
        )

    async def update_scheduling_context(self, raw: dict[str, Any]) -> dict[str, Any]:
        return await self._context_write("PUT", raw, verb="update", resource=f"podschedulingcontexts.{GROUP}")

    async def apply_scheduling_context(self, raw: dict[str, Any]) -> dict[str, Any]:
        return await self._context_write(
            "PATCH",
            raw,
            verb="patch",
            resource=f"podschedulingcontexts.{GROUP}",
            params={"fieldManager": self.settings.component, "force": "true"},
            content_type="application/apply-patch+yaml",
        )

    async def delete_scheduling_context(self, namespace: str, name: str) -> None:
        await self.ensure_leader()
        await self._api().request(
            "DELETE", self._context_path(namespace, name), verb="delete", resource=f"podschedulingcontexts.{GROUP}"
        )

    def observe_nodes(self, raw_nodes: Sequence[Mapping[str, Any]]) -> None:
        """Nodes the node watch has not shown yet get the request's labels until it does (the
        watch's copy then replaces them); the watch's labels win for every other node."""
        for raw in raw_nodes:
            meta = raw.get("metadata") or {}
            name = meta.get("name")
            if not isinstance(name, str) or not name or name in self.store.nodes:
                continue
            node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": meta.get("labels") or {}}}
            try:
                self.store.upsert(node)
            except InvalidObject as exc:
                log.warning("node.not_stored", node=name, reason=exc.reason)

    def observe_pod(self, raw_pod: dict[str, Any]) -> None:
        """Nothing to do: the pod watch sees every pod."""

    # --- preemption -----------------------------------------------------------------------------

    async def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        namespace = namespace or "default"
        body: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            **({"deleteOptions": {"preconditions": {"uid": uid}}} if uid else {}),
        }
        await self.ensure_leader()
        try:
            await self._api().request(
                "POST",
                f"/api/v1/namespaces/{namespace}/pods/{name}/eviction",
                body=body,
                verb="create",
                resource="pods/eviction",
            )
        except ApiUnavailable as exc:
            if _disruption_budget_refusal(exc):
                raise EvictionRefused(exc.reason) from exc
            raise  # throttled, the budget still being processed, ...: not this victim's budget

    @property
    def claim_api_version(self) -> str:
        return self.api_version

    async def create_claim(self, raw: dict[str, Any]) -> dict[str, Any]:
        meta = raw.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        body = dict(raw)
        body.setdefault("apiVersion", self.api_version)
        body.setdefault("kind", "ResourceClaim")
        await self.ensure_leader()
        stored = await self._api().request(
            "POST",
            f"/apis/{self.api_version}/namespaces/{namespace}/resourceclaims",
            body=body,
            verb="create",
            resource=f"resourceclaims.{GROUP}",
        )
        stored.setdefault("kind", "ResourceClaim")
        self.feeder.written(orjson.loads(orjson.dumps(stored)))
        return stored

    async def remove_claim(self, namespace: str, name: str, uid: str) -> None:
        namespace = namespace or "default"
        try:
            answer = await self._api().request(
                "DELETE",
                self._claim_path(namespace, name),
                body={"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}},
                verb="delete",
                resource=f"resourceclaims.{GROUP}",
            )
        except ExtenderError as exc:
            exc.claim = exc.claim or f"{namespace}/{name}"
            raise
        # Gone now (no finalizer left): out of the store at once, so that the pod's next attempt
        # cannot find it there before the watch shows the deletion.
        if isinstance(answer, dict) and answer.get("kind") in ("ResourceClaim", None) and answer.get("metadata"):
            meta = answer["metadata"]
            if not meta.get("finalizers"):
                answer.setdefault("kind", "ResourceClaim")
                self.feeder.removed(answer)

    async def patch_pod_status(self, namespace: str, name: str, uid: str, status: dict[str, Any]) -> None:
        namespace = namespace or "default"
        await self.ensure_leader()
        await self._api().request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}/status",
            body={"metadata": {"uid": uid} if uid else {}, "status": status},
            content_type=MERGE_PATCH,
            verb="patch",
            resource="pods/status",
        )

    async def set_nominated_node(self, namespace: str, name: str, uid: str, node: str) -> None:
        namespace = namespace or "default"
        await self.ensure_leader()
        await self._api().request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}/status",
            body={"metadata": {"uid": uid} if uid else {}, "status": {"nominatedNodeName": node or None}},
            content_type=MERGE_PATCH,
            verb="patch",
            resource="pods/status",
        )

    def record_event(self, namespace: str, name: str, uid: str, *, kind: str, reason: str, message: str) -> None:
        self.pod_event(namespace, name, uid, kind=kind, reason=reason, message=message)

    # --- events ---------------------------------------------------------------------------------

    def pod_event(self, namespace: str, name: str, uid: str, *, kind: str, reason: str, message: str) -> None:
        """Record a core/v1 Event on the pod (correlated, written in the background)."""
        if self.settings.events and self.client is not None:
            self.events.record(namespace, name, uid, kind=kind, reason=reason, message=message)

    # --- requeue --------------------------------------------------------------------------------

    def _freed(self, reason: str) -> None:
        if self.requeuer is not None and self.synced:
            self.requeuer.nudge(reason)

    def _still_pending(self, pod: RejectedPod) -> bool:
        """Skip pods the store shows bound, gone or re-created."""
        stored = self.store.pods.get(f"{pod.namespace}/{pod.name}")
        if stored is None:
            return True  # not seen yet by the pod watch: try anyway
        meta = stored.get("metadata") or {}
        if pod.uid and meta.get("uid") and meta.get("uid") != pod.uid:
            return False
        return not (stored.get("spec") or {}).get("nodeName")
