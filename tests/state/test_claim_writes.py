"""The claim write protocol (``state/bind/claim_writes.py``) and its undo, through the service's bind
on the embedded backend: a failed write is rolled back exactly (finalizer, allocation and
reservation, the binding); a shared claim's rollback removes only our reservation; a write is
recorded before it is sent, so an answer that never came is undone by looking at the claim; a write
the server refused was not made, so its undo must not touch what another writer put there. The
kube backend's request sequences: tests/backends/kube/test_backend.py; the embedded API server's
rules for claim writes: tests/backends/embedded/test_claim_api.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from extender.backends.embedded import EmbeddedBackend
from extender.core.errors import ApiUnavailable, Transient, WriteConflict
from extender.state.bind.claim_writes import DELETE_PROTECTION_FINALIZER
from extender.state.service import SchedulingService
from extender.views.debug import DebugViews
from tests import manifests as m

OTHER_WRITERS_ALLOCATION = {
    "allocation": {
        "devices": {"results": [{"request": "gpus", "driver": "gpu.example.com", "pool": "node-1", "device": "gpu-1"}]}
    },
    "reservedFor": [{"resource": "pods", "name": "p1", "uid": "uid-p1"}],
}


class LosesTheRace(EmbeddedBackend):
    """The first status write of c1 loses to an identical one for the same pod by another writer (an
    old leader after a fail-over, while our cache lagged): ours gets 409, theirs stands."""

    raced = False

    async def update_claim_status(self, raw: dict[str, Any]) -> dict[str, Any]:
        if not self.raced and raw["metadata"]["name"] == "c1":
            self.raced = True
            theirs = await self.get_claim("default", "c1")
            theirs["metadata"].setdefault("finalizers", []).append(DELETE_PROTECTION_FINALIZER)
            theirs = await super().update_claim(theirs)
            theirs["status"] = OTHER_WRITERS_ALLOCATION
            await super().update_claim_status(theirs)
            raise WriteConflict("Operation cannot be fulfilled on resourceclaims: the object has been modified")
        return await super().update_claim_status(raw)


async def test_a_refused_write_is_not_undone() -> None:
    backend = LosesTheRace(m.cluster(m.claim("c1"), m.pod("p1", "c1")))
    service = SchedulingService(backend=backend, hold_seconds=0)
    with pytest.raises(Transient, match="got allocated elsewhere in the meantime"):
        await service.bind("default", "p1", "uid-p1", "node-1")
    claim = await backend.get_claim("default", "c1")
    assert claim["status"] == OTHER_WRITERS_ALLOCATION  # the other writer's allocation stands
    assert DELETE_PROTECTION_FINALIZER in claim["metadata"]["finalizers"]


@pytest.mark.parametrize("operation", ["update_claim", "update_claim_status", "bind_pod"])
async def test_a_failed_write_is_rolled_back_exactly(operation: str) -> None:
    svc = SchedulingService(backend=EmbeddedBackend(m.cluster(m.claim("c1"), m.pod("p", "c1"))))
    before = copy.deepcopy(DebugViews(svc).claim("default", "c1"))
    svc.backend.faults.fail(operation, ApiUnavailable("injected"))  # type: ignore[attr-defined]
    with pytest.raises(ApiUnavailable):
        await svc.bind("default", "p", "uid-p", "node-1")
    after = DebugViews(svc).claim("default", "c1")
    assert after is not None and before is not None
    assert after.get("status", {}).get("allocation") is None
    assert not after.get("status", {}).get("reservedFor")
    assert DELETE_PROTECTION_FINALIZER not in (after["metadata"].get("finalizers") or [])
    assert "nodeName" not in (DebugViews(svc).pod("default", "p") or {}).get("spec", {})
    assert len(svc.ledger) == 0
    # and the retry succeeds
    await svc.bind("default", "p", "uid-p", "node-1")
    assert DebugViews(svc).claim("default", "c1")["status"]["allocation"]  # type: ignore[index]


async def test_rollback_of_a_shared_claim_only_removes_our_reservation() -> None:
    objects = m.cluster(m.claim("shared"), m.pod("a", "shared"), m.pod("b", "shared"))
    svc = SchedulingService(backend=EmbeddedBackend(objects))
    await svc.bind("default", "a", "uid-a", "node-1")
    svc.backend.faults.fail("bind_pod", ApiUnavailable("injected"))  # type: ignore[attr-defined]
    with pytest.raises(ApiUnavailable):
        await svc.bind("default", "b", "uid-b", "node-1")
    raw = DebugViews(svc).claim("default", "shared")
    assert raw is not None and raw["status"]["allocation"]
    assert [r["name"] for r in raw["status"]["reservedFor"]] == ["a"]
