"""One deadline per bind, against the strict fake API server: a claim write that never answers, a
slow conflict storm and a binding that never answers all end the bind at its deadline with
``DeadlineExceeded``; what was written is undone within the same deadline (or, for the binding,
kept for the pod's next attempt), and the in-flight ledger's TTL follows from the deadline."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from extender.core.errors import DeadlineExceeded
from extender.state.bind.binder import ledger_ttl, rollback_reserve
from extender.state.service import SchedulingService
from tests import manifests as m
from tests.backends.kube.test_backend import assert_consistent, claim_in_fake, node_of, started
from tests.fakes import FakeApiServer

#: Long enough that the quarter kept for the undo (0.5 s) is ample on a loaded machine; short
#: enough that the three binds that run into it keep the file quick.
DEADLINE = 2.0


async def deadline_service(fake: FakeApiServer, *objects: dict[str, Any]) -> SchedulingService:
    backend = await started(fake, *objects)
    return SchedulingService(backend=backend, bind_deadline_seconds=DEADLINE)


async def bind_within_bound(service: SchedulingService, pod: str, node: str) -> BaseException | None:
    """The bind's outcome; the test fails if it outlives its deadline by far (a hang, not a timing)."""
    async with asyncio.timeout(DEADLINE + 30):
        try:
            await service.bind("default", pod, f"uid-{pod}", node)
        except Exception as exc:
            return exc
    return None


async def test_a_claim_write_that_never_answers_ends_at_the_deadline(fake: FakeApiServer) -> None:
    service = await deadline_service(fake, *m.cluster(m.claim("c1"), m.pod("p1", "c1")))
    fake.hang("PUT", r"/resourceclaims/c1/status$")
    outcome = await bind_within_bound(service, "p1", "node-1")
    assert isinstance(outcome, DeadlineExceeded)
    assert outcome.reason == 'pod "default/p1": bind deadline of 2s passed during claim writes'
    fake.release_hangs()
    claim = claim_in_fake(fake, "c1")
    assert not claim["metadata"].get("finalizers") and not (claim.get("status") or {}).get("allocation")
    assert node_of(fake, "p1") is None and len(service.ledger) == 0
    await service.bind("default", "p1", "uid-p1", "node-1")  # the next attempt is not hindered
    assert node_of(fake, "p1") == "node-1"
    await service.backend.stop()


async def test_a_slow_conflict_storm_is_cut_by_the_deadline_and_rolled_back(fake: FakeApiServer) -> None:
    """Every status write conflicts, and each answer comes when the test lets it: two come, the
    third attempt's never does (before the deadline), so the deadline, not the end of the five
    retries, ends the bind; the finalizer written first is undone."""
    service = await deadline_service(fake, *m.cluster(m.claim("c1"), m.pod("p1", "c1")))
    status_write = r"/resourceclaims/c1/status$"
    fake.fail("PUT", status_write, status=409, times=None)
    gate = fake.hold("PUT", status_write, times=1)
    bind = asyncio.create_task(bind_within_bound(service, "p1", "node-1"))
    for _ in range(2):  # an attempt held, then answered 409; the next one is held when it comes
        await gate.arrived()
        released, gate = gate, fake.hold("PUT", status_write, times=1)
        released.release()
    await gate.arrived()  # the third attempt: its answer comes after the deadline
    outcome = await bind
    assert isinstance(outcome, DeadlineExceeded) and "during claim writes" in outcome.reason
    assert len(fake.requests_to("PUT", status_write)) == 3
    fake.clear_faults()
    claim = claim_in_fake(fake, "c1")
    assert not claim["metadata"].get("finalizers")  # the finalizer write was undone in time
    assert_consistent(fake)
    await service.backend.stop()


async def test_a_binding_that_never_answers_keeps_the_claims(fake: FakeApiServer) -> None:
    service = await deadline_service(fake, *m.cluster(m.claim("c1"), m.pod("p1", "c1")))
    fake.hang("POST", r"/pods/p1/binding$")
    outcome = await bind_within_bound(service, "p1", "node-1")
    assert isinstance(outcome, DeadlineExceeded)
    assert outcome.reason.endswith("during the binding; its claims are kept for the pod's next attempt")
    fake.release_hangs()
    status = claim_in_fake(fake, "c1")["status"]
    assert status["allocation"] and status["reservedFor"] == [{"resource": "pods", "name": "p1", "uid": "uid-p1"}]
    await service.bind("default", "p1", "uid-p1", "node-1")  # the next attempt binds where the claim is
    assert node_of(fake, "p1") == "node-1"
    assert_consistent(fake)
    await service.backend.stop()


def test_the_ledger_ttl_and_the_rollback_reserve_follow_from_the_deadline() -> None:
    assert ledger_ttl(25) == 85 and ledger_ttl(10) == 70
    assert rollback_reserve(25) == 5 and rollback_reserve(2) == 0.5


async def test_the_service_derives_its_ledger_ttl(fake: FakeApiServer) -> None:
    backend = await started(fake, *m.cluster())
    assert SchedulingService(backend=backend, bind_deadline_seconds=10).ledger.ttl_seconds == 70
    with pytest.raises(ValueError, match="positive"):
        SchedulingService(backend=backend, bind_deadline_seconds=0)
    await backend.stop()
