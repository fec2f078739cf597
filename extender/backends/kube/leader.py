"""Optional: bind only while the co-located kube-scheduler holds its leader Lease.

Sidecar model: dra-extender runs as a second container in each kube-scheduler pod, so it shares
the pod's hostname. kube-scheduler (with ``--leader-elect``) writes ``<hostname>_<uuid>`` into
``spec.holderIdentity`` of its Lease (default ``kube-system/kube-scheduler``). Only the leading
scheduler schedules, but a standby replica's extender can still get a stray bind (an old
connection, a misrouted Service): refusing it with a ``Transient`` error (``Error`` on the wire)
makes it unlikely that two extenders write allocations from two caches at once. It does not make
it impossible: the Lease read is trusted for ``cache_seconds``, so for that long after a
leadership change (and while an old leader's lease runs out) both replicas may bind; each one's
claim writes are still guarded by resourceVersion, but two different claims can then be given one
device by two caches. Filter and prioritize stay open.

The Lease is read on demand at bind, and the answer cached for ``cache_seconds``: a bind costs at
most one extra GET, and a leadership change is seen within that time. A lease whose
``renewTime + leaseDurationSeconds`` has passed counts as held by nobody.
"""

from __future__ import annotations

import datetime
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from extender.core.errors import ExtenderError, ObjectNotFound, Transient

from .client import KubeClient

__all__ = ["LeaseSettings", "LeaseWatcher", "holder_is", "lease_expired"]


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    name: str = "kube-scheduler"
    namespace: str = "kube-system"
    identity: str = ""
    """Our identity: the scheduler pod's hostname (the part of holderIdentity before the last
    ``_``). Empty means ``socket.gethostname()``, right for the sidecar model."""
    cache_seconds: float = 2.0
    """How long a Lease read answers binds (one GET per bind burst, not per bind)."""


def holder_is(holder: str, identity: str) -> bool:
    """Whether a holderIdentity names us: ``<identity>_<uuid>`` as kube-scheduler writes it, or
    exactly ``<identity>``."""
    return bool(holder) and (holder == identity or holder.rpartition("_")[0] == identity)


def lease_expired(spec: dict[str, Any], now: datetime.datetime) -> bool:
    """Whether renewTime + leaseDurationSeconds lies in the past (missing fields: not expired)."""
    renew, duration = spec.get("renewTime"), spec.get("leaseDurationSeconds")
    if not isinstance(renew, str) or not isinstance(duration, int):
        return False
    try:
        renewed = datetime.datetime.fromisoformat(renew.replace("Z", "+00:00"))
    except ValueError:
        return False
    if renewed.tzinfo is None:
        renewed = renewed.replace(tzinfo=datetime.UTC)
    return renewed + datetime.timedelta(seconds=duration) < now


class LeaseWatcher:
    """``await ensure_leader()`` raises ``Transient`` unless the Lease holder is us."""

    def __init__(
        self,
        client: KubeClient,
        settings: LeaseSettings = LeaseSettings(),
        *,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self.client = client
        self.settings = settings
        self.identity = settings.identity or socket.gethostname()
        self._clock = clock
        self._now = now
        self._checked_at: float | None = None
        self._verdict: ExtenderError | None = None

    @property
    def path(self) -> str:
        s = self.settings
        return f"/apis/coordination.k8s.io/v1/namespaces/{s.namespace}/leases/{s.name}"

    async def ensure_leader(self) -> None:
        now = self._clock()
        if self._checked_at is None or now - self._checked_at >= self.settings.cache_seconds:
            self._verdict = await self._check()
            self._checked_at = now
        if self._verdict is not None:
            raise self._verdict

    async def _check(self) -> ExtenderError | None:
        where = f"{self.settings.namespace}/{self.settings.name}"
        try:
            lease = await self.client.request("GET", self.path, verb="get", resource="leases.coordination.k8s.io")
        except ObjectNotFound:
            return Transient(
                f"not the leader: lease {where} not found (is kube-scheduler running with --leader-elect?)"
            )
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        if not holder_is(holder, self.identity):
            return Transient(f"not the leader: lease {where} is held by {holder or 'nobody'}, we are {self.identity}")
        if lease_expired(spec, self._now()):
            return Transient(f"not the leader: lease {where} expired (holder {holder})")
        return None
