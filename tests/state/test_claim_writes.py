"""The claim write protocol's undo (``state/claim_writes.py``): a write is recorded before it is
sent, so an answer that never came is undone by looking at the claim; a write the server refused
was not made, so its undo must not touch what another writer put there."""

from __future__ import annotations

from typing import Any

import pytest

from extender.backends.embedded import EmbeddedBackend
from extender.core.errors import Transient, WriteConflict
from extender.state.claim_writes import DELETE_PROTECTION_FINALIZER
from extender.state.service import SchedulingService
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
