"""Optional: write only while the co-located kube-scheduler holds its leader Lease.

Sidecar model: dra-extender runs as a second container in each kube-scheduler pod, so it shares
the pod's hostname. kube-scheduler (with ``--leader-elect``) writes ``<hostname>_<uuid>`` into
``spec.holderIdentity`` of its Lease (default ``kube-system/kube-scheduler``). Only the leading
scheduler schedules, but a standby replica's extender can still get a stray request (an old
connection, a misrouted Service). The service asks ``ensure_leader()`` before it decides or writes
anything (a bind, filter's deallocation): a replica that is not the leader, or cannot prove it is
(the Lease cannot be read), answers ``NotLeader`` (``Error`` on the wire) and sends no write at
all. Filter and prioritize stay open: they change nothing in the cluster.

Expiry is judged as client-go's leader election judges it: not from ``renewTime`` (written by
another machine's clock) but from when *this* process saw the Lease record change (dated from the
read before, ``LeaseObserver``; the Lease is read every ``poll_seconds`` in the background). A
record unchanged for ``leaseDurationSeconds`` of our own monotonic clock has expired, so clock skew
between machines cannot make two leaders. A positive answer is trusted for ``cache_seconds``,
never beyond the moment the lease would expire by our observation.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from extender.core.errors import ExtenderError, NotLeader, ObjectNotFound

from .client import KubeClient

__all__ = ["LeaseObserver", "LeaseSettings", "LeaseWatcher", "holder_is"]


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    name: str = "kube-scheduler"
    namespace: str = "kube-system"
    identity: str = ""
    """Our identity: the scheduler pod's hostname (the part of holderIdentity before the last
    ``_``). Empty means ``socket.gethostname()``, right for the sidecar model."""
    cache_seconds: float = 2.0
    """How long a Lease read answers (one GET per bind burst, not per bind)."""
    poll_seconds: float = 1.0
    """How often the Lease is read in the background (``LeaseWatcher.run``), so that a renewal is
    dated within this much of when it happened."""


def holder_is(holder: str, identity: str) -> bool:
    """Whether a holderIdentity names us: ``<identity>_<uuid>`` as kube-scheduler writes it, or
    exactly ``<identity>``."""
    return bool(holder) and (holder == identity or holder.rpartition("_")[0] == identity)


class LeaseObserver:
    """When the Lease record last changed, by our clock (client-go's ``observedTime``).

    ``observe(spec, now)`` takes a freshly read ``spec``; ``expires_at`` is then the monotonic time
    at which the record, if it does not change again, has expired (None: the Lease names no
    duration, so nothing can be judged; kube-scheduler always writes one).

    A changed record is dated from the *previous* read, not this one: the renewal happened at
    some moment between the two, and for "does our scheduler still hold it" the earlier bound is
    the safe one (reads run every ``poll_seconds`` in the background, so it is close). The first
    record ever seen is dated now, as client-go dates it."""

    __slots__ = ("_last_read", "duration", "observed_at", "record")

    def __init__(self) -> None:
        self.record: tuple[Any, ...] | None = None
        self.observed_at = 0.0
        self.duration: float | None = None
        self._last_read: float | None = None

    def observe(self, spec: dict[str, Any], now: float) -> None:
        record = (
            spec.get("holderIdentity"),
            spec.get("renewTime"),
            spec.get("acquireTime"),
            spec.get("leaseTransitions"),
        )
        if record != self.record:
            # A renewal (or a new holder) made since the last read: the lease runs from there.
            self.record = record
            self.observed_at = now if self._last_read is None else self._last_read
        self._last_read = now
        duration = spec.get("leaseDurationSeconds")
        self.duration = float(duration) if isinstance(duration, int) and duration > 0 else None

    @property
    def expires_at(self) -> float | None:
        return None if self.duration is None else self.observed_at + self.duration

    def expired(self, now: float) -> bool:
        expires = self.expires_at
        return expires is not None and now > expires


class LeaseWatcher:
    """``await ensure_leader()`` raises ``NotLeader`` unless the Lease holder is us."""

    def __init__(
        self,
        client: KubeClient,
        settings: LeaseSettings = LeaseSettings(),
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.settings = settings
        self.identity = settings.identity or socket.gethostname()
        self.clock = clock
        self.observer = LeaseObserver()
        #: Until when (our clock) the last positive answer holds; a refusal is never cached
        #: longer than ``cache_seconds`` either.
        self._valid_until = float("-inf")
        self._verdict: ExtenderError | None = None
        # One read at a time: an older answer landing after a newer one must not win.
        self._reading = asyncio.Lock()

    @property
    def path(self) -> str:
        s = self.settings
        return f"/apis/coordination.k8s.io/v1/namespaces/{s.namespace}/leases/{s.name}"

    async def run(self) -> None:
        """Read the Lease every ``poll_seconds`` (a task of the backend), so that renewals are
        dated closely and ``ensure_leader`` rarely needs a read of its own."""
        while True:
            async with self._reading:
                await self._check()
            await asyncio.sleep(self.settings.poll_seconds)

    async def ensure_leader(self) -> None:
        """Returns if we lead; raises ``NotLeader`` if not, or if the Lease cannot be read."""
        if self.clock() >= self._valid_until:
            async with self._reading:
                if self.clock() >= self._valid_until:  # else a read finished while we waited
                    await self._check()
        if self._verdict is not None:
            raise self._verdict

    async def _check(self) -> None:
        where = f"{self.settings.namespace}/{self.settings.name}"
        try:
            lease = await self.client.request("GET", self.path, verb="get", resource="leases.coordination.k8s.io")
        except ObjectNotFound:
            self._refuse(f"lease {where} not found (is kube-scheduler running with --leader-elect?)")
            return
        except ExtenderError as exc:
            # Cannot prove we lead: refuse now, ask again at the next request.
            self._valid_until = float("-inf")
            self._verdict = NotLeader(f"not the leader: cannot read lease {where}: {exc.reason}")
            return
        now = self.clock()
        spec = lease.get("spec") or {}
        self.observer.observe(spec, now)
        holder = str(spec.get("holderIdentity") or "")
        if not holder_is(holder, self.identity):
            self._refuse(f"lease {where} is held by {holder or 'nobody'}, we are {self.identity}")
        elif self.observer.expired(now):
            assert self.observer.duration is not None
            self._refuse(f"lease {where} expired: holder {holder} has not renewed it for {self.observer.duration:g}s")
        else:
            expires = self.observer.expires_at
            until = now + self.settings.cache_seconds
            self._valid_until = until if expires is None else min(until, expires)
            self._verdict = None

    def _refuse(self, why: str) -> None:
        self._valid_until = self.clock() + self.settings.cache_seconds
        self._verdict = NotLeader(f"not the leader: {why}")
