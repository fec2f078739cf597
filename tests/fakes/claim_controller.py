"""The part of kube-controller-manager's resourceclaim controller that frees claims (spec
dra-allocation.md §13.8), over the fake API server's HTTP API like the real one:

- a ``reservedFor`` entry whose pod no longer exists (or exists with another UID, or is done:
  ``Succeeded``/``Failed``) is removed; if none remain, the same status update clears the
  allocation, and the delete-protection finalizer is removed with a separate update;
- a claim being deleted with no valid reservation gets its allocation cleared and the finalizer
  removed, so its deletion completes.

Nothing else: a claim with an empty ``reservedFor`` that is not being deleted is left alone
(upstream deallocates only when *it* removed the last entry). ``sweep()`` does one pass;
``run()`` sweeps every ``interval`` seconds. Conflicts are left to the next pass.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import aiohttp

from .apiserver import FakeApiServer

__all__ = ["DELETE_PROTECTION", "ReservationController"]

DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
_DONE = ("Succeeded", "Failed")


class ReservationController:
    def __init__(self, fake: FakeApiServer, *, interval: float = 0.05) -> None:
        self.fake = fake
        self.interval = interval
        self.writes = 0
        self._task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ReservationController:
        self._session = aiohttp.ClientSession(self.fake.url, headers={"User-Agent": "kube-controller-manager"})
        self._task = asyncio.create_task(self._run(), name="fake resourceclaim controller")
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._session is not None:
            await self._session.close()

    async def _run(self) -> None:
        while True:
            await self.sweep()
            await asyncio.sleep(self.interval)

    async def sweep(self) -> None:
        live = {
            p["metadata"]["uid"]: p
            for p in self.fake.objects("Pod")
            if (p.get("status") or {}).get("phase") not in _DONE and not p["metadata"].get("deletionTimestamp")
        }
        for claim in self.fake.objects("ResourceClaim", group="resource.k8s.io"):
            await self._sync(claim, live)

    async def _sync(self, claim: dict[str, Any], live: dict[str, dict[str, Any]]) -> None:
        meta, status = claim["metadata"], claim.setdefault("status", {})
        reserved = status.get("reservedFor") or []
        valid = [ref for ref in reserved if ref.get("uid") in live]
        being_deleted = bool(meta.get("deletionTimestamp"))
        deallocate = (len(valid) < len(reserved) and not valid) or (being_deleted and not valid)
        if len(valid) < len(reserved) or (deallocate and status.get("allocation")):
            if valid:
                status["reservedFor"] = valid
            else:
                status.pop("reservedFor", None)
            if deallocate:
                status.pop("allocation", None)
                status.pop("devices", None)
            claim = await self._put(claim, "/status")
            if claim is None:
                return
        if deallocate:
            finalizers = claim["metadata"].get("finalizers") or []
            if DELETE_PROTECTION in finalizers and not (claim.get("status") or {}).get("allocation"):
                claim["metadata"]["finalizers"] = [f for f in finalizers if f != DELETE_PROTECTION]
                await self._put(claim, "")

    async def _put(self, claim: dict[str, Any], suffix: str) -> dict[str, Any] | None:
        assert self._session is not None
        meta = claim["metadata"]
        path = f"/apis/{claim['apiVersion']}/namespaces/{meta['namespace']}/resourceclaims/{meta['name']}{suffix}"
        async with self._session.put(path, json=claim) as response:
            if response.status == 409 or response.status == 404:
                return None  # the next pass sees the newer object
            response.raise_for_status()
            self.writes += 1
            stored: dict[str, Any] = await response.json()
            return stored
