"""The part of kube-controller-manager's resourceclaim controller that frees claims (spec
dra-allocation.md §13.8), over the fake API server's HTTP API like the real one:

- a ``reservedFor`` entry whose pod no longer exists (or exists with another UID, or is done:
  ``Succeeded``/``Failed``) is removed; if none remain, the same status update clears the
  allocation, and the delete-protection finalizer is removed with a separate update;
- a claim being deleted with no valid reservation gets its allocation cleared and the finalizer
  removed, so its deletion completes.

Classic DRA (v1alpha3, a claim its driver's controller allocated: ``allocation.controller`` set, no
delete-protection finalizer): when the last entry goes, the same status update sets
``deallocationRequested`` and keeps the allocation, for the driver to deallocate (1.31's
kube-controller-manager, spec/classic-dra.md §1.5); and a pod bound to a node, not being deleted,
that uses such an allocated claim without being in its ``reservedFor`` is added back to it.

Nothing else: a claim with an empty ``reservedFor`` that is not being deleted is left alone
(upstream deallocates only when *it* removed the last entry). ``sweep()`` does one pass;
``run()`` sweeps every ``interval`` seconds. A write that fails (a conflict, an injected fault) is
left to the next pass, as the real controller's work queue retries it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
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
        self.failures = 0
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
        """One pass over every claim. The stored objects are read in place (a copy of each of
        10,000 claims twice a second would be the soak's bottleneck); only a claim that needs a
        write is copied."""
        storage = self.fake.storage
        live = {
            p["metadata"]["uid"]
            for p in storage.current(("", "pods")).values()
            if (p.get("status") or {}).get("phase") not in _DONE and not p["metadata"].get("deletionTimestamp")
        }
        claims = storage.current(("resource.k8s.io", "resourceclaims"))
        for stored in list(claims.values()):
            status = stored.get("status") or {}
            reserved = status.get("reservedFor") or []
            stale = any(ref.get("uid") not in live for ref in reserved)
            if stale or stored["metadata"].get("deletionTimestamp"):
                await self._sync(copy.deepcopy(stored), live)
        await self._reserve_for_bound_pods(storage.current(("", "pods")).values(), claims)

    async def _sync(self, claim: dict[str, Any], live: set[str]) -> None:
        meta, status = claim["metadata"], claim.setdefault("status", {})
        reserved = status.get("reservedFor") or []
        valid = [ref for ref in reserved if ref.get("uid") in live]
        being_deleted = bool(meta.get("deletionTimestamp"))
        deallocate = (len(valid) < len(reserved) and not valid) or (being_deleted and not valid)
        classic = bool((status.get("allocation") or {}).get("controller")) and DELETE_PROTECTION not in (
            meta.get("finalizers") or ()
        )
        if classic and deallocate:
            if status.get("deallocationRequested") and not reserved:
                return
            status.pop("reservedFor", None)
            status["deallocationRequested"] = True  # the driver deallocates (and drops its finalizer)
            await self._put(claim, "/status")
            return
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

    async def _reserve_for_bound_pods(self, pods: Any, claims: dict[Any, dict[str, Any]]) -> None:
        """A bound pod that uses an allocated classic claim it is not a consumer of gets reserved
        (as 1.31's controller does for pods scheduled without a scheduler's reservation)."""
        for pod in list(pods):
            meta, spec = pod["metadata"], pod.get("spec") or {}
            if not spec.get("nodeName") or meta.get("deletionTimestamp"):
                continue
            if (pod.get("status") or {}).get("phase") in _DONE:
                continue
            recorded = (pod.get("status") or {}).get("resourceClaimStatuses") or ()
            statuses = {e.get("name"): e.get("resourceClaimName") for e in recorded}
            for entry in spec.get("resourceClaims") or ():
                name = entry.get("resourceClaimName") or statuses.get(entry.get("name"))
                stored = claims.get((meta["namespace"], name)) if name else None
                if stored is None or stored["metadata"].get("deletionTimestamp"):
                    continue
                status = stored.get("status") or {}
                allocation = status.get("allocation") or {}
                if not allocation.get("controller") or status.get("deallocationRequested"):
                    continue
                if any(ref.get("uid") == meta["uid"] for ref in status.get("reservedFor") or ()):
                    continue
                claim = copy.deepcopy(stored)
                claim["status"].setdefault("reservedFor", []).append(
                    {"resource": "pods", "name": meta["name"], "uid": meta["uid"]}
                )
                await self._put(claim, "/status")

    async def _put(self, claim: dict[str, Any], suffix: str) -> dict[str, Any] | None:
        assert self._session is not None
        meta = claim["metadata"]
        path = f"/apis/{claim['apiVersion']}/namespaces/{meta['namespace']}/resourceclaims/{meta['name']}{suffix}"
        async with self._session.put(path, json=claim) as response:
            if response.status >= 400:
                self.failures += 1
                return None  # a conflict, a missing object, an injected fault: the next pass retries
            self.writes += 1
            stored: dict[str, Any] = await response.json()
            return stored
