"""Leadership against the strict fake API server: a standby replica sends no write request at all
(bind, filter's deallocation), Lease expiry is judged from renewals we observed (a skewed
``renewTime`` does not matter, an unrenewed record expires by our clock), the Lease that cannot be
read means "not the leader", and a fail-over: the leader dies mid-bind, the other replica takes
over and finishes the pod's bind without giving a device twice."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from extender.backends.kube import ClusterConfig, KubeBackend, KubeSettings, LeaseSettings, WatchSettings
from extender.backends.kube.requeue import RequeueSettings
from extender.core.errors import NotLeader
from extender.state.service import DELETE_PROTECTION_FINALIZER, SchedulingService
from tests import manifests as m
from tests.backends.kube.test_backend import assert_consistent, claim_in_fake, node_of, until
from tests.fakes import FakeApiServer

FAST = WatchSettings(backoff_initial=0.01, backoff_max=0.05, jitter=0, inactivity_timeout=60)


def lease(holder: str, *, renewed: str = "2025-01-01T00:00:00.000000Z", duration: int = 15) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "kube-scheduler", "namespace": "kube-system"},
        "spec": {"holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": duration},
    }


def allocated_on(raw_claim: dict[str, Any], node: str) -> dict[str, Any]:
    """The claim allocated gpu-0 of ``node``, reserved for nobody."""
    raw_claim["status"] = {
        "allocation": {
            "devices": {"results": [{"request": "gpus", "driver": "gpu.example.com", "pool": node, "device": "gpu-0"}]},
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            },
        }
    }
    return raw_claim


Replica = tuple[KubeBackend, SchedulingService]


@pytest.fixture
async def replica(fake: FakeApiServer) -> AsyncIterator[Callable[[str], Any]]:
    """``await replica("sched-a")``: a backend and service that follow the Lease as ``sched-a``."""
    backends: list[KubeBackend] = []

    async def make(identity: str) -> Replica:
        settings = KubeSettings(
            watch=FAST, freeze_gc=False, requeue=None, lease=LeaseSettings(identity=identity, cache_seconds=0)
        )
        backend = KubeBackend(ClusterConfig(host=fake.url), settings=settings)
        await backend.start()
        await backend.wait_synced(30)
        backends.append(backend)
        return backend, SchedulingService(backend=backend)

    yield make
    for backend in backends:
        await backend.stop()


def changes(fake: FakeApiServer) -> list[str]:
    """Every request that could change the cluster, Events included."""
    return [f"{r.method} {r.path}" for r in fake.requests if r.method in ("PUT", "POST", "PATCH", "DELETE")]


async def test_a_standby_sends_no_write_request(fake: FakeApiServer, replica: Any) -> None:
    # c1 is allocated on node-1 for p1 alone, but p1 may only go to node-2: the leader would
    # deallocate it in filter (PostFilter); p2's bind would write its claim and bind it
    allocated = allocated_on(m.claim("c1"), "node-1")
    objects = m.cluster(allocated, m.claim("c2"), m.pod("p1", "c1"), m.pod("p2", "c2"), lease("sched-a_1"))
    for obj in objects:
        fake.put_object(obj)
    _, standby = await replica("sched-b")
    fake.clear_requests()
    with pytest.raises(NotLeader, match="held by sched-a_1, we are sched-b"):
        await standby.bind("default", "p2", "uid-p2", "node-1")
    outcome = await standby.filter_and_recover(m.pod("p1", "c1"), ["node-2"])
    assert outcome.node_names == [] and "must be deallocated" in outcome.error and "not the leader" in outcome.error
    assert changes(fake) == []
    assert len(standby.ledger) == 0
    assert claim_in_fake(fake, "c1")["status"]["allocation"]


async def test_the_leader_deallocates_what_the_standby_would_not(fake: FakeApiServer, replica: Any) -> None:
    allocated = allocated_on(m.claim("c1"), "node-1")
    for obj in m.cluster(allocated, m.pod("p1", "c1"), lease("sched-a_1")):
        fake.put_object(obj)
    _, leader = await replica("sched-a")
    outcome = await leader.filter_and_recover(m.pod("p1", "c1"), ["node-2"])
    assert outcome.error == "deallocation of ResourceClaim default/c1 completed"
    assert not (claim_in_fake(fake, "c1").get("status") or {}).get("allocation")


async def test_expiry_is_judged_by_our_clock_not_the_holders(fake: FakeApiServer, replica: Any) -> None:
    # renewTime is a year old by any clock: a lease read once is fresh from that moment on
    for obj in m.cluster(m.claim("c1"), m.pod("p1", "c1"), lease("sched-a_1", renewed="2025-01-01T00:00:00Z")):
        fake.put_object(obj)
    backend, service = await replica("sched-a")
    assert backend.leader is not None
    now = [time.monotonic()]  # from here on, our clock moves only when the test says so
    backend.leader.clock = lambda: now[0]
    await backend.ensure_leader()
    now[0] += 16  # never renewed since: expired by our own observation
    with pytest.raises(NotLeader, match="has not renewed it for 15s"):
        await service.bind("default", "p1", "uid-p1", "node-1")
    assert changes(fake) == []
    fake.put_object(lease("sched-a_1", renewed="2025-01-01T00:00:02Z"))  # a renewal, seen now
    await service.bind("default", "p1", "uid-p1", "node-1")
    assert node_of(fake, "p1") == "node-1"


async def test_a_lease_that_cannot_be_read_means_not_the_leader(fake: FakeApiServer, replica: Any) -> None:
    for obj in m.cluster(m.claim("c1"), m.pod("p1", "c1"), lease("sched-a_1")):
        fake.put_object(obj)
    _, service = await replica("sched-a")
    fake.fail("GET", "/leases/kube-scheduler", status=503, times=1)
    fake.clear_requests()
    with pytest.raises(NotLeader, match="cannot read lease kube-system/kube-scheduler"):
        await service.bind("default", "p1", "uid-p1", "node-1")
    assert changes(fake) == []
    await service.bind("default", "p1", "uid-p1", "node-1")  # readable again: asked again
    assert node_of(fake, "p1") == "node-1"


@pytest.mark.parametrize("dies_during", ["status write", "binding"])
async def test_fail_over_mid_bind(fake: FakeApiServer, replica: Any, dies_during: str) -> None:
    """The leader dies with its bind half done (no rollback: the process is gone); after the
    Lease changes hands the new leader's bind of the same pod finishes the job: the claim ends
    allocated once, reserved for the pod, and the pod bound where the claim's devices are."""
    for obj in m.cluster(m.claim("c1"), m.claim("c2"), m.pod("p1", "c1"), m.pod("p2", "c2"), lease("sched-a_1")):
        fake.put_object(obj)
    a_backend, a = await replica("sched-a")
    b_backend, b = await replica("sched-b")
    hung = r"/resourceclaims/c1/status$" if dies_during == "status write" else r"/pods/p1/binding$"
    fake.hang("PUT" if dies_during == "status write" else "POST", hung)
    bind = asyncio.create_task(a.bind("default", "p1", "uid-p1", "node-1"))
    await until(lambda: bool(fake.requests_to(None, hung)))
    bind.cancel()  # the process dies: nothing after this point runs
    with pytest.raises(asyncio.CancelledError):
        await bind
    await a_backend.stop()
    fake.release_hangs()  # the hung request is cut: never carried out
    # The standby refuses until kube-scheduler's leader election hands it the Lease.
    with pytest.raises(NotLeader):
        await b.bind("default", "p1", "uid-p1", "node-1")
    fake.put_object(lease("sched-b_2", renewed="2025-01-01T00:00:20Z"))
    # kube-scheduler on b schedules p1 again: filter, then bind to a node that passed
    await until(lambda: (b_backend.store.raw_claims.get("default/c1") or {}).get("metadata", {}).get("finalizers"))
    passing = b.filter(m.pod("p1", "c1"), ["node-1", "node-2"]).node_names
    if dies_during == "binding":
        assert passing == ["node-1"]  # allocated and reserved: the pod is pinned where its devices are
    await b.bind("default", "p1", "uid-p1", passing[0])
    await b.bind("default", "p2", "uid-p2", passing[0])  # and the next pod still gets its own device
    claim = claim_in_fake(fake, "c1")
    assert claim["metadata"]["finalizers"] == [DELETE_PROTECTION_FINALIZER]
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "p1", "uid": "uid-p1"}]
    assert node_of(fake, "p1") == claim["status"]["allocation"]["devices"]["results"][0]["pool"]
    assert node_of(fake, "p2") is not None
    assert_consistent(fake)


async def test_a_standby_does_not_nudge_rejected_pods(fake: FakeApiServer) -> None:
    """The fast requeue is a write too (a PATCH of the pod): a standby, wired as the CLI wires it,
    drops its rejected pods instead when devices free up."""
    held = allocated_on(m.claim("c1"), "node-1")
    held["status"]["reservedFor"] = [{"resource": "pods", "name": "p1", "uid": "uid-p1"}]
    objects = m.cluster(held, m.pod("p1", "c1"), m.claim("c2"), m.pod("p2", "c2"), lease("sched-a_1"), nodes=1, gpus=1)
    for obj in objects:
        fake.put_object(obj)
    settings = KubeSettings(
        watch=FAST,
        freeze_gc=False,
        lease=LeaseSettings(identity="sched-b", cache_seconds=0),
        requeue=RequeueSettings(settle_seconds=0.01, rate_per_second=100, burst=10),
    )
    backend = KubeBackend(ClusterConfig(host=fake.url), settings=settings)
    await backend.start()
    try:
        await backend.wait_synced(30)
        assert backend.rejected is not None and backend.requeuer is not None
        standby = SchedulingService(backend=backend, rejected=backend.rejected)
        assert standby.filter(m.pod("p2", "c2"), ["node-1"]).node_names == []  # a stray filter
        fake.clear_requests()
        passes = backend.requeuer.passes
        claim = claim_in_fake(fake, "c1")
        claim["status"] = {}
        fake.put_object(claim)  # gpu-0 is free again: the leader's extender would nudge p2
        # the pass this caused is over: a leader's would have patched p2 by its end
        requeuer = backend.requeuer
        await until(lambda: requeuer.passes > passes)
        assert backend.rejected.take() == []  # p2's nudge dropped, not kept for later
        assert changes(fake) == [] and backend.requeuer.patched == 0
    finally:
        await backend.stop()
