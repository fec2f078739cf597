"""Fast requeue: nudge the pods we rejected when devices free up.

With the in-tree DRA plugin disabled, kube-scheduler does not watch ResourceSlices or
ResourceClaims, so a pod the extender rejected waits for some other event it observes, or for the
5-minute flush of the unschedulable pool (docs/pipeline.md). Any update of
the pending pod itself is such an event (the scheduler registers a wildcard enqueue extension for
extenders), so when devices free up — a claim deallocated or deleted, a slice added or grown — we
patch an annotation (``dra-extender.io/requeue: <RFC 3339 time>``) on each recently rejected pod.

- ``RejectedPods`` (``state/filter/rejected.py``): the registry the service feeds when a filter rejected
  every node; ``take`` gives the pods rejected since the last pass, those older than
  ``ttl_seconds`` left to the scheduler's own flush.
- ``TokenBucket``: the rate limit (``rate_per_second``, ``burst``).
- ``Requeuer``: ``nudge(reason)`` from the store feeder; its task drains the registry, patching
  pods at the bucket's pace. Patch failures are logged and dropped (best effort).
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog

from extender.core.errors import ExtenderError
from extender.state.filter.rejected import RejectedPod, RejectedPods

from .client import MERGE_PATCH, KubeClient

__all__ = ["REQUEUE_ANNOTATION", "RejectedPod", "RejectedPods", "RequeueSettings", "Requeuer", "TokenBucket"]

log = structlog.get_logger()

REQUEUE_ANNOTATION = "dra-extender.io/requeue"
Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class RequeueSettings:
    rate_per_second: float = 5.0
    """Sustained pod patches per second: a burst of freed devices must not flood the apiserver."""
    burst: int = 20
    """Patches allowed at once before the rate applies."""
    ttl_seconds: float = 300.0
    """How long a rejection is remembered: after 5 minutes the scheduler's flush retries anyway."""
    max_pods: int = 10_000
    """Registry bound; the oldest rejection is forgotten first."""
    settle_seconds: float = 0.2
    """Wait after the first nudge so that a burst of watch events results in one pass."""
    annotation: str = REQUEUE_ANNOTATION


class TokenBucket:
    """``await acquire()`` returns when a token is available (refilled at ``rate`` per second)."""

    def __init__(
        self, rate: float, burst: int, *, clock: Callable[[], float] = time.monotonic, sleep: Sleep = asyncio.sleep
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be positive and burst at least 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._updated = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._updated) * self.rate)
        self._updated = now

    async def acquire(self) -> None:
        self._refill()
        while self._tokens < 1.0:
            await self._sleep((1.0 - self._tokens) / self.rate)
            self._refill()
        self._tokens -= 1.0


class Requeuer:
    """Patches rejected pods after ``nudge``; ``run()`` is the worker task."""

    def __init__(
        self,
        client: KubeClient,
        registry: RejectedPods,
        settings: RequeueSettings = RequeueSettings(),
        *,
        still_pending: Callable[[RejectedPod], bool] = lambda _pod: True,
        may_write: Callable[[], Awaitable[None]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self.client = client
        self.registry = registry
        self.settings = settings
        self._still_pending = still_pending
        #: Raises unless this replica may write (``Backend.ensure_leader``): a standby patches nothing.
        self._may_write = may_write
        self._sleep = sleep
        self._now = now
        self._bucket = TokenBucket(settings.rate_per_second, settings.burst, clock=clock, sleep=sleep)
        self._wake = asyncio.Event()
        self._reasons: list[str] = []
        #: Pods patched so far (for metrics and tests).
        self.patched = 0
        #: Passes of the worker (``run``) finished so far, whatever each did (patched pods, found
        #: none, or skipped as a standby): a test waits for the pass a nudge caused and then looks
        #: at its effects, instead of sleeping and hoping the pass is over.
        self.passes = 0

    def nudge(self, reason: str) -> None:
        """Devices freed up (``reason`` says how); cheap, called from the store feeder."""
        if len(self._reasons) < 16:
            self._reasons.append(reason)
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            await self._sleep(self.settings.settle_seconds)
            self._wake.clear()
            reasons, self._reasons = self._reasons, []
            await self.requeue_once(reasons)
            self.passes += 1

    async def requeue_once(self, reasons: list[str] | None = None) -> int:
        """Patch every pending rejected pod now (at the bucket's pace); returns how many."""
        if self._may_write is not None:
            try:
                await self._may_write()
            except ExtenderError as exc:
                dropped = len(self.registry.take())  # the leader's extender nudges its own rejects
                log.debug("requeue.skipped", pods=dropped, reason=exc.reason)
                return 0
        pods = [p for p in self.registry.take() if self._still_pending(p)]
        if not pods:
            return 0
        stamp = self._now().strftime("%Y-%m-%dT%H:%M:%SZ")
        done = 0
        for pod in pods:
            await self._bucket.acquire()
            if await self._patch(pod, stamp):
                done += 1
        self.patched += done
        log.info("requeue.nudged", pods=done, rejected=len(pods), reasons=sorted(set(reasons or ())))
        return done

    async def _patch(self, pod: RejectedPod, stamp: str) -> bool:
        meta: dict[str, Any] = {"annotations": {self.settings.annotation: stamp}}
        if pod.uid:
            meta["uid"] = pod.uid  # a re-created pod of the same name fails the patch instead
        try:
            await self.client.request(
                "PATCH",
                f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}",
                body={"metadata": meta},
                content_type=MERGE_PATCH,
                verb="patch",
                resource="pods",
            )
        except ExtenderError as exc:
            log.info("requeue.patch_failed", pod=f"{pod.namespace}/{pod.name}", reason=exc.reason)
            return False
        return True
