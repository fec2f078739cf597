"""A classic DRA driver controller against the fake API server (spec/classic-dra.md §1.7, item 2).

The state machine is the one the embedded backend simulates drivers with
(``extender.backends.embedded.classic_driver.ClassicDriver``, a port of the 1.31 controller
library, §1.4); here it reads the fake's storage as an informer cache would (in place, never
changed) and writes over HTTP like a real controller, so every write meets the fake's validation,
its optimistic concurrency and its faults. It learns of changes from the storage's change feed.
Knobs (``DriverKnobs``): ``set_reserved_for``, ``allocate_delay``, ``allocate_gate``,
``fail_allocation``, ``recheck_seconds``; ``crash()`` and ``restart()`` stop and start it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import aiohttp

from extender.backends.embedded.classic_driver import ClassicDriver, DriverKnobs
from extender.core.errors import ExtenderError, ObjectNotFound, WriteConflict

from .apiserver import FakeApiServer
from .registry import resource_for_kind

__all__ = ["FakeDriverCluster", "running_driver"]

_KINDS = {
    ("resource.k8s.io", "podschedulingcontexts"): "PodSchedulingContext",
    ("resource.k8s.io", "resourceclaims"): "ResourceClaim",
    ("", "pods"): "Pod",
}
_ALPHA = "/apis/resource.k8s.io/v1alpha3"


class FakeDriverCluster:
    """``DriverCluster`` over the fake: storage reads, HTTP writes."""

    def __init__(self, fake: FakeApiServer, session: aiohttp.ClientSession) -> None:
        self.fake = fake
        self.session = session
        self.writes = 0

    def read(self, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        rt = resource_for_kind(kind)
        obj: Mapping[str, Any] | None = self.fake.storage.get(
            (rt.group, rt.plural), ((namespace or "") if rt.namespaced else "", name)
        )
        return obj

    def objects(self, kind: str) -> Iterable[Mapping[str, Any]]:
        rt = resource_for_kind(kind)
        return list(self.fake.storage.current((rt.group, rt.plural)).values())

    async def update_claim(self, raw: dict[str, Any]) -> dict[str, Any]:
        return await self._put(raw, "resourceclaims", "")

    async def update_claim_status(self, raw: dict[str, Any]) -> dict[str, Any]:
        return await self._put(raw, "resourceclaims", "/status")

    async def update_context_status(self, raw: dict[str, Any]) -> dict[str, Any]:
        return await self._put(raw, "podschedulingcontexts", "/status")

    async def _put(self, raw: dict[str, Any], plural: str, suffix: str) -> dict[str, Any]:
        meta = raw["metadata"]
        path = f"{_ALPHA}/namespaces/{meta['namespace']}/{plural}/{meta['name']}{suffix}"
        async with self.session.put(path, json=raw) as response:
            body: dict[str, Any] = await response.json()
            if response.status == 409:
                raise WriteConflict(str(body.get("message")))
            if response.status == 404:
                raise ObjectNotFound(str(body.get("message")))
            if response.status >= 400:
                raise ExtenderError(f"{response.status}: {body.get('message')}")
        self.writes += 1
        return body


class FakeDriver:
    """The driver plus its change feed; see the module docstring."""

    def __init__(self, fake: FakeApiServer, cluster: FakeDriverCluster, name: str, knobs: DriverKnobs) -> None:
        self.fake = fake
        self.cluster = cluster
        self.driver = ClassicDriver(cluster, name, knobs)
        fake.storage.subscribe(self._changed)

    @property
    def knobs(self) -> DriverKnobs:
        return self.driver.knobs

    def _changed(self, change: Any) -> None:
        kind = _KINDS.get(change.collection)
        if kind is not None:
            namespace, name = change.key
            self.driver.notify(kind, namespace or None, name)

    async def crash(self) -> None:
        await self.driver.stop()

    def restart(self) -> None:
        self.driver.start()

    async def idle(self) -> None:
        await self.driver.idle()

    def close(self) -> None:
        self.fake.storage.unsubscribe(self._changed)


@contextlib.asynccontextmanager
async def running_driver(fake: FakeApiServer, name: str, **knobs: Any) -> AsyncIterator[FakeDriver]:
    """The driver ``name`` running against ``fake`` (its capacity: the nodes' annotations)."""
    async with aiohttp.ClientSession(fake.url, headers={"User-Agent": f"{name}-controller/v1.31"}) as session:
        driver = FakeDriver(fake, FakeDriverCluster(fake, session), name, DriverKnobs(**knobs))
        driver.restart()
        try:
            yield driver
        finally:
            await driver.crash()
            driver.close()
