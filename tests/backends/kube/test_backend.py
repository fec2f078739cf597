"""KubeBackend + SchedulingService against the strict fake API server (tests/fakes): a full bind
(finalizer, status, binding, in that order; Events), conflict storms retried or rolled back,
concurrent binds never giving a device twice nor leaking reservedFor, a restart mid-bind, a claim
deleted during bind, live changes followed through the watches (slice added, claim deallocated,
with the requeue nudge), re-list after a restart keeps the cache exact, Lease following, startup
errors (unreachable, 403 naming verb and resource, unserved API) and a clean stop."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from extender.backends.kube import (
    AccessDenied,
    ApiNotServed,
    ClusterConfig,
    KubeBackend,
    KubeSettings,
    LeaseSettings,
    ServerUnreachable,
    WatchSettings,
)
from extender.backends.kube.requeue import REQUEUE_ANNOTATION, RequeueSettings
from extender.core.errors import ApiUnavailable, ExtenderError, Transient, WriteConflict
from extender.state.service import DELETE_PROTECTION_FINALIZER, SchedulingService
from extender.views.debug import DebugViews
from tests import manifests as m
from tests.fakes import FakeApiServer

FAST = WatchSettings(backoff_initial=0.01, backoff_max=0.05, jitter=0, inactivity_timeout=60)


def settings(**changes: Any) -> KubeSettings:
    base: dict[str, Any] = {
        "watch": FAST,
        "freeze_gc": False,
        "requeue": RequeueSettings(settle_seconds=0.01, rate_per_second=100, burst=10),
    }
    return KubeSettings(**{**base, **changes})


async def until(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    """Wait for the watches to catch up (a bound against a hang, generous for a loaded machine;
    never what a test measures)."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.005)


async def started(fake: FakeApiServer, *objects: dict[str, Any], **changes: Any) -> KubeBackend:
    for obj in objects:
        fake.put_object(obj)
    backend = KubeBackend(ClusterConfig(host=fake.url), settings=settings(**changes))
    await backend.start()
    await backend.wait_synced(30)
    return backend


@pytest.fixture
async def stack(fake: FakeApiServer) -> AsyncIterator[Callable[..., Any]]:
    backends: list[KubeBackend] = []

    async def make(*objects: dict[str, Any], **changes: Any) -> tuple[KubeBackend, SchedulingService]:
        backend = await started(fake, *objects, **changes)
        backends.append(backend)
        return backend, SchedulingService(backend=backend)

    yield make
    for backend in backends:
        await backend.stop()


def claim_in_fake(fake: FakeApiServer, name: str) -> dict[str, Any]:
    obj = fake.get_object("ResourceClaim", "default", name, group="resource.k8s.io")
    assert obj is not None
    return obj


def node_of(fake: FakeApiServer, pod: str) -> str | None:
    obj = fake.get_object("Pod", "default", pod)
    assert obj is not None
    return (obj.get("spec") or {}).get("nodeName")


def writes(fake: FakeApiServer) -> list[str]:
    """The write requests (events aside) as "METHOD last-path-segments", e.g. "PUT c1/status"."""
    out = []
    for r in fake.requests:
        if r.method in ("PUT", "POST", "PATCH") and "/events" not in r.path:
            parts = r.path.rsplit("/", 2)
            tail = "/".join(parts[-2:]) if parts[-1] in ("status", "binding") else parts[-1]
            out.append(f"{r.method} {tail}")
    return out


def assert_consistent(fake: FakeApiServer) -> None:
    """No device held by two claims; every reservedFor names a pod bound to the claim's node set."""
    seen: dict[tuple[str, str, str], str] = {}
    bound = {p["metadata"]["uid"]: p for p in fake.objects("Pod") if (p.get("spec") or {}).get("nodeName")}
    for claim in fake.objects("ResourceClaim", group="resource.k8s.io"):
        status = claim.get("status") or {}
        for result in ((status.get("allocation") or {}).get("devices") or {}).get("results") or ():
            device = (result["driver"], result["pool"], result["device"])
            assert device not in seen, f"{device} given to {seen[device]} and {claim['metadata']['name']}"
            seen[device] = claim["metadata"]["name"]
        for ref in status.get("reservedFor") or ():
            assert ref["uid"] in bound, f"reservedFor leaks unbound pod {ref['name']}"
        if status.get("reservedFor"):
            assert status.get("allocation")


# --- bind -----------------------------------------------------------------------------------


async def test_full_bind_writes_finalizer_then_status_then_binding(fake: FakeApiServer, stack: Any) -> None:
    backend, service = await stack(*m.cluster(m.claim("c1"), m.pod("p1", "c1")))
    outcome = service.filter(m.pod("p1", "c1"), ["node-1", "node-2"])
    assert outcome.node_names == ["node-1", "node-2"]
    fake.clear_requests()
    await service.bind("default", "p1", "uid-p1", "node-1")
    assert writes(fake) == ["PUT c1", "PUT c1/status", "POST p1/binding"]
    binding = fake.requests_to("POST", "/binding")[0]
    assert binding.body["metadata"]["uid"] == "uid-p1" and binding.body["target"]["name"] == "node-1"
    claim = claim_in_fake(fake, "c1")
    assert claim["metadata"]["finalizers"] == [DELETE_PROTECTION_FINALIZER]
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "p1", "uid": "uid-p1"}]
    assert claim["status"]["allocation"]["devices"]["results"][0]["pool"] == "node-1"
    assert node_of(fake, "p1") == "node-1"
    # The write's answer is in the store at once; the ledger has nothing left.
    assert backend.store.claims["default/c1"].allocation is not None and len(service.ledger) == 0
    # No Event of our own for a success (kube-scheduler records Scheduled), and no GET of the pod:
    # it came from the watch cache. Three requests, the minimum the writes need.
    await backend.events.flush()
    assert not fake.requests_to(None, "/events") and not fake.requests_to("GET", "/pods/")
    assert len([r for r in fake.requests if not r.is_watch]) == 3
    assert_consistent(fake)


async def test_the_cache_never_shows_an_allocation_before_it_is_written(fake: FakeApiServer, stack: Any) -> None:
    backend, service = await stack(*m.cluster(m.claim("c1"), m.pod("p1", "c1")))
    gate = fake.hold("PUT", r"/resourceclaims/c1/status$", times=1)
    bind = asyncio.create_task(service.bind("default", "p1", "uid-p1", "node-1"))
    await gate.arrived()  # the status write is sent and held unanswered (and not carried out)
    # the finalizer's answer is in the store, and it is the API's object, not the bind's draft
    raw = backend.store.raw_claims["default/c1"]
    assert raw["metadata"]["finalizers"] == [DELETE_PROTECTION_FINALIZER]
    assert not (raw.get("status") or {}).get("allocation")
    assert not (DebugViews(service).claim("default", "c1") or {}).get("status", {}).get("allocation")
    gate.release()
    await bind
    assert backend.store.raw_claims["default/c1"]["status"]["allocation"]
    assert_consistent(fake)


async def test_a_binding_whose_answer_is_lost_keeps_the_claims_for_the_next_attempt(
    fake: FakeApiServer, stack: Any
) -> None:
    """The binding POST times out but the API server makes the binding afterwards: undoing the
    claims would leave a bound pod without its devices, so they stay; the next bind finds it done."""
    backend, service = await stack(*m.cluster(m.claim("c1"), m.pod("p1", "c1")))
    # the binding is made, its answer lost; and the GET that asks is answered before it shows
    fake.lose_answer("POST", "/binding")
    fake.fail("GET", "/pods/p1$", status=503)
    with pytest.raises(ApiUnavailable):
        await service.bind("default", "p1", "uid-p1", "node-1")
    claim = claim_in_fake(fake, "c1")
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "p1", "uid": "uid-p1"}]
    assert claim["metadata"]["finalizers"] == [DELETE_PROTECTION_FINALIZER] and node_of(fake, "p1") == "node-1"
    await until(lambda: (backend.store.pods["default/p1"].get("spec") or {}).get("nodeName") == "node-1")
    await service.bind("default", "p1", "uid-p1", "node-1")  # kube-scheduler's retry: done already
    assert_consistent(fake)


async def test_a_binding_whose_answer_is_lost_but_that_was_made_succeeds(fake: FakeApiServer, stack: Any) -> None:
    _, service = await stack(*m.cluster(m.claim("c1"), m.pod("p1", "c1")))
    fake.lose_answer("POST", "/binding")
    await service.bind("default", "p1", "uid-p1", "node-1")  # the GET after it shows the pod bound
    assert node_of(fake, "p1") == "node-1"
    assert_consistent(fake)


async def test_a_conflict_storm_is_retried(fake: FakeApiServer, stack: Any) -> None:
    _, service = await stack(*m.cluster(m.claim("c1"), m.pod("p1", "c1")))
    fake.conflicts(r"/resourceclaims/c1/status$", times=3)
    await service.bind("default", "p1", "uid-p1", "node-1")
    assert len(fake.requests_to("PUT", r"/resourceclaims/c1/status$")) == 4
    assert len(fake.requests_to("GET", r"/resourceclaims/c1$")) >= 3  # re-read from the 2nd attempt
    assert node_of(fake, "p1") == "node-1"
    assert_consistent(fake)


async def test_an_endless_conflict_storm_rolls_back(fake: FakeApiServer, stack: Any) -> None:
    _, service = await stack(*m.cluster(m.claim("c1"), m.pod("p1", "c1")))
    fake.conflicts(r"/resourceclaims/c1/status$", times=5)
    with pytest.raises(WriteConflict):
        await service.bind("default", "p1", "uid-p1", "node-1")
    claim = claim_in_fake(fake, "c1")
    assert not (claim.get("status") or {}).get("allocation")
    assert DELETE_PROTECTION_FINALIZER not in (claim["metadata"].get("finalizers") or [])
    assert node_of(fake, "p1") is None and len(service.ledger) == 0


async def test_concurrent_binds_with_conflicts_never_share_a_device(fake: FakeApiServer, stack: Any) -> None:
    pods = [m.pod(f"p{i}", f"c{i}") for i in range(6)]
    claims = [m.claim(f"c{i}") for i in range(6)]
    _, service = await stack(*m.cluster(*claims, *pods, nodes=2, gpus=2))
    fake.conflicts(r"/resourceclaims/c[0-9]/status$", times=4)
    fake.delay("PUT", r"/resourceclaims/", 0.01)
    results = await asyncio.gather(
        *(service.bind("default", f"p{i}", f"uid-p{i}", f"node-{1 + i % 2}") for i in range(6)),
        return_exceptions=True,
    )
    ok = [r for r in results if r is None]
    assert len(ok) == 4  # 2 nodes x 2 GPUs
    assert all(isinstance(r, ExtenderError) for r in results if r is not None)
    assert_consistent(fake)
    assert len(service.ledger) == 0


async def test_a_restart_mid_bind_neither_loses_nor_duplicates(fake: FakeApiServer, stack: Any) -> None:
    backend, service = await stack(*m.cluster(m.claim("c1"), m.pod("p1", "c1")))
    fake.hang("POST", "/binding")
    bind = asyncio.create_task(service.bind("default", "p1", "uid-p1", "node-1"))
    await until(lambda: bool(fake.requests_to("POST", "/binding")))
    fake.restart()  # cuts watches, drops the hanging binding, compacts history
    with pytest.raises(ExtenderError):
        await bind
    claim = claim_in_fake(fake, "c1")
    # whether the binding was made is unknown: the claim is kept whole (allocated and reserved for
    # the pod), never half-way, so that a bound pod cannot be left without its devices
    status = claim.get("status") or {}
    assert status.get("allocation") and status["reservedFor"] == [{"resource": "pods", "name": "p1", "uid": "uid-p1"}]
    await until(lambda: backend.synced and fake.watch_count() >= 6)
    await until(lambda: backend.store.claims["default/c1"].allocation is not None)
    await service.bind("default", "p1", "uid-p1", "node-1")  # the retry binds where the claim is
    claim = claim_in_fake(fake, "c1")
    assert len(claim["status"]["reservedFor"]) == 1 and node_of(fake, "p1") == "node-1"
    await service.bind("default", "p1", "uid-p1", "node-1")  # a retry after success changes nothing
    assert claim_in_fake(fake, "c1")["metadata"]["resourceVersion"] == claim["metadata"]["resourceVersion"]
    assert_consistent(fake)


async def test_a_claim_deleted_during_bind(fake: FakeApiServer, stack: Any) -> None:
    _, service = await stack(*m.cluster(m.claim("c1"), m.pod("p1", "c1")))
    gate = fake.hold("PUT", r"/resourceclaims/c1/status$", times=1)
    bind = asyncio.create_task(service.bind("default", "p1", "uid-p1", "node-1"))
    await gate.arrived()  # the status write is on its way, held until the claim is being deleted
    fake.delete_object("ResourceClaim", "default", "c1", group="resource.k8s.io")  # finalizer: only marked
    gate.release()
    with pytest.raises(Transient, match="deleted in the meantime"):
        await bind
    # The rollback removed our finalizer, so the deletion completed.
    assert fake.get_object("ResourceClaim", "default", "c1", group="resource.k8s.io") is None
    assert node_of(fake, "p1") is None and len(service.ledger) == 0


# --- following live changes -------------------------------------------------------------------


async def test_following_a_slice_added_and_a_claim_deallocated(fake: FakeApiServer, stack: Any) -> None:
    backend, service = await stack(
        *m.cluster(m.claim("c1"), m.claim("c2"), m.pod("p1", "c1"), m.pod("p2", "c2"), nodes=1, gpus=1)
    )
    await service.bind("default", "p1", "uid-p1", "node-1")
    rejected = service.filter(m.pod("p2", "c2"), ["node-1"])
    assert rejected.node_names == [] and "node-1" in rejected.failed
    assert backend.rejected is not None
    backend.rejected.rejected(m.pod("p2", "c2"))
    # A new node with a GPU appears.
    fake.put_object(m.node("node-2"))
    fake.put_object(m.gpu_slice("node-2", 1))
    await until(lambda: "node-2-gpus" in backend.store.slices)
    assert service.filter(m.pod("p2", "c2"), ["node-1", "node-2"]).node_names == ["node-2"]
    await until(lambda: bool(fake.requests_to("PATCH", "/pods/p2$")))
    patch = fake.requests_to("PATCH", "/pods/p2$")[0]
    assert REQUEUE_ANNOTATION in patch.body["metadata"]["annotations"]
    # p1's claim is deallocated (the pod went away): node-1 fits again.
    claim = claim_in_fake(fake, "c1")
    claim["status"] = {}
    fake.put_object(claim)
    await until(lambda: backend.store.claims["default/c1"].allocation is None)
    assert service.filter(m.pod("p2", "c2"), ["node-1", "node-2"]).node_names == ["node-1", "node-2"]


async def test_relist_after_restart_keeps_the_cache_exact(fake: FakeApiServer, stack: Any) -> None:
    backend, _ = await stack(*m.cluster(nodes=3))
    await fake.wait_for_watches(5, timeout=30)
    fake.drop_watches()
    fake.delete_object("ResourceSlice", None, "node-1-gpus", group="resource.k8s.io")
    fake.put_object(m.gpu_slice("node-4", 3))
    fake.compact()  # the resumed watches get 410 and must re-list
    await until(lambda: sorted(backend.store.slices) == ["node-2-gpus", "node-3-gpus", "node-4-gpus"])
    assert backend.reflectors["ResourceSlice"].lists >= 2 and backend.synced


# --- leadership -------------------------------------------------------------------------------


def lease(holder: str) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "kube-scheduler", "namespace": "kube-system"},
        "spec": {"holderIdentity": holder},
    }


async def test_bind_refused_unless_we_hold_the_lease(fake: FakeApiServer, stack: Any) -> None:
    lease_settings = LeaseSettings(identity="sched-0", cache_seconds=0)
    _, service = await stack(*m.cluster(m.claim("c1"), m.pod("p1", "c1"), lease("sched-1_0b5e")), lease=lease_settings)
    with pytest.raises(Transient, match="held by sched-1_0b5e"):
        await service.bind("default", "p1", "uid-p1", "node-1")
    assert node_of(fake, "p1") is None and not (claim_in_fake(fake, "c1").get("status") or {}).get("allocation")
    fake.put_object(lease("sched-0_77aa"))
    await service.bind("default", "p1", "uid-p1", "node-1")
    assert node_of(fake, "p1") == "node-1"


# --- startup ----------------------------------------------------------------------------------


async def test_unreachable_server() -> None:
    backend = KubeBackend(ClusterConfig(host="http://127.0.0.1:9"), settings=settings())
    with pytest.raises(ServerUnreachable, match=r"cannot reach the API server at http://127\.0\.0\.1:9"):
        await backend.start()
    await backend.stop()


async def test_forbidden_names_verb_and_resource(fake: FakeApiServer) -> None:
    fake.deny("list", "resourceslices.resource.k8s.io")
    backend = KubeBackend(ClusterConfig(host=fake.url), settings=settings())
    with pytest.raises(AccessDenied, match=r"cannot list resourceslices\.resource\.k8s\.io") as info:
        await backend.start()
    assert (info.value.verb, info.value.resource) == ("list", "resourceslices.resource.k8s.io")
    await backend.stop()


async def test_unserved_api(aiohttp_server: Any) -> None:
    fake = FakeApiServer(resource_versions=())
    await fake.serve_with(aiohttp_server)
    backend = KubeBackend(ClusterConfig(host=fake.url), settings=settings())
    with pytest.raises(ApiNotServed, match=r"does not serve resource\.k8s\.io"):
        await backend.start()
    await backend.stop()


async def test_an_older_served_version_is_used(aiohttp_server: Any) -> None:
    fake = FakeApiServer(resource_versions=("v1beta1",))
    await fake.serve_with(aiohttp_server)
    backend = await started(fake)
    assert backend.api_version == "resource.k8s.io/v1beta1"
    assert all("resource.k8s.io/v1beta1/" in r.path for r in fake.requests_to("GET", "resourceslices"))
    await backend.stop()


async def test_stop_leaves_no_tasks(fake: FakeApiServer) -> None:
    before = asyncio.all_tasks()
    backend = await started(fake, *m.cluster())
    assert {t.get_name() for t in backend._tasks} >= {"watch resourceslices", "watch pods", "requeue rejected pods"}
    await backend.stop()
    await asyncio.sleep(0)
    ours = {t.get_name() for t in backend._tasks} | {"pod event"}
    left = [t for t in asyncio.all_tasks() - before if t.get_name() in ours or _runs_our_code(t)]
    assert left == []
    assert not backend.synced


def _runs_our_code(task: asyncio.Task[Any]) -> bool:
    """Whether the task's coroutine is defined in the extender package (the fake server's own
    tasks, still serving its watch streams, are not ours)."""
    code = getattr(task.get_coro(), "cr_code", None)
    return code is not None and "/extender/" in code.co_filename


async def test_request_node_labels_never_override_the_watch(fake: FakeApiServer, stack: Any) -> None:
    backend, service = await stack(*m.cluster())
    watched = dict(backend.store.nodes["node-1"].labels)
    stale = {"metadata": {"name": "node-1", "labels": {"stale": "copy"}}}
    service.observe_nodes([stale, {"metadata": {"name": "node-7", "labels": {"x": "1"}}}])
    assert backend.store.nodes["node-1"].labels == watched  # the watch's labels win
    assert backend.store.nodes["node-7"].labels == {"x": "1"}  # not watched yet: taken until it is
    fake.put_object({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-7", "labels": {"x": "2"}}})
    await until(lambda: backend.store.nodes["node-7"].labels == {"x": "2"})


async def test_an_event_that_cannot_be_written_does_not_stop_scheduling(fake: FakeApiServer, stack: Any) -> None:
    """Found by the soak run: a failed Event write crashed the recorder's task (a log call with a
    reserved argument), which made the whole backend unready. Helper tasks now log and go on."""
    backend, service = await stack(*m.cluster(m.claim("c1"), m.pod("p1", "c1"), m.claim("c2"), m.pod("p2", "c2")))
    fake.fail("POST", r"/events$", status=500, times=None)
    fake.fail("POST", r"/pods/p1/binding$", status=500, times=1)
    with pytest.raises(ExtenderError):
        await service.bind("default", "p1", "uid-p1", "node-1")  # records a FailedBinding Event
    await until(lambda: bool(fake.requests_to("POST", r"/events$")))
    await backend.events.flush()
    assert backend.synced and backend.failure is None
    await service.bind("default", "p2", "uid-p2", "node-1")
    assert node_of(fake, "p2") == "node-1"


@pytest.mark.parametrize("status", [503, 403])
async def test_the_collector_runs_again_while_a_kind_cannot_be_listed(fake: FakeApiServer, status: int) -> None:
    """The collector is paused for the first lists (they are frozen once synced); a kind whose
    LIST keeps failing (a missing RBAC rule, etcd down) must not leave it off until someone acts."""
    fake.fail("GET", "/apis/resource.k8s.io/v1/resourceslices", status=status, times=None, message="no")
    backend = KubeBackend(ClusterConfig(host=fake.url), settings=settings(freeze_gc=True, check_access=False))
    try:
        await backend.start()
        await until(lambda: bool(backend.reflectors["ResourceSlice"].problem))
        assert gc.isenabled() and not backend.synced
    finally:
        await backend.stop()
        gc.enable()


async def test_the_collector_runs_again_when_a_watch_dies_before_the_first_sync(fake: FakeApiServer) -> None:
    """An unexpected answer to a first LIST stops that kind for good (the backend is not ready,
    the failure says why): no first sync is coming, so the collector must not stay paused."""
    fake.fail("GET", "/apis/resource.k8s.io/v1/resourceslices", status=418, times=None, message="teapot")
    backend = KubeBackend(ClusterConfig(host=fake.url), settings=settings(freeze_gc=True, check_access=False))
    try:
        await backend.start()
        await until(lambda: backend.failure is not None)
        assert gc.isenabled() and not backend.synced
    finally:
        await backend.stop()
        gc.enable()
