"""Kubernetes Events about pods, correlated the way client-go's recorder does it.

kube-scheduler already writes ``Scheduled`` for every pod bound and ``FailedScheduling`` for every
failed attempt, so the extender writes Events only for what it alone knows: a failed bind's
reason (``FailedBinding``). Like client-go's ``EventCorrelator`` (``tools/record/events_cache.go``):

- **dedup**: an Event equal to an earlier one (same object, type, reason and message) is not
  created again: the earlier Event's ``count`` goes up and its ``lastTimestamp`` moves (a PATCH);
- **aggregation**: more than ``aggregate_max`` (10) different messages with the same object, type
  and reason within ``aggregate_seconds`` (10 minutes) become one Event, "(combined from similar
  events): <latest message>", counted like a duplicate;
- **spam filter**: per object a token bucket of ``spam_burst`` (25) Events refilled at one per
  ``spam_refill_seconds`` (5 minutes); what exceeds it is dropped (and counted in ``dropped``).

Writes go out in order from one background task, so an update never overtakes its create; a
failed write is logged and forgotten (Events are best effort). ``record`` never waits.
"""

from __future__ import annotations

import asyncio
import datetime
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from extender.core.errors import ExtenderError, ObjectNotFound

from .client import MERGE_PATCH, KubeClient

__all__ = ["EventRecorder", "EventSettings"]

log = structlog.get_logger()

AGGREGATED_PREFIX = "(combined from similar events): "


@dataclass(frozen=True, slots=True)
class EventSettings:
    spam_burst: int = 25
    spam_refill_seconds: float = 300.0
    aggregate_max: int = 10
    aggregate_seconds: float = 600.0
    cache_size: int = 4096
    queue_size: int = 1000


@dataclass(slots=True)
class _Seen:
    """An Event already written: its name, how many times it happened, when first."""

    name: str
    count: int
    first: str


@dataclass(slots=True)
class _Similar:
    """Messages seen for one (object, type, reason) in the current aggregation interval."""

    messages: set[str] = field(default_factory=set)
    last: float = 0.0


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


class EventRecorder:
    """``record(...)`` correlates an Event and queues its write; ``run()`` is the writer task."""

    def __init__(
        self,
        client: Callable[[], KubeClient | None],
        *,
        component: str,
        instance: str,
        settings: EventSettings = EventSettings(),
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self._client = client
        self.component = component
        self.instance = instance
        self.settings = settings
        self._clock = clock
        self._now = now
        self._seen: OrderedDict[tuple[str, ...], _Seen] = OrderedDict()
        self._similar: OrderedDict[tuple[str, ...], _Similar] = OrderedDict()
        self._buckets: OrderedDict[tuple[str, ...], _Bucket] = OrderedDict()
        self._queue: asyncio.Queue[tuple[str, str, dict[str, Any]]] = asyncio.Queue(settings.queue_size)
        #: Events the spam filter or a full queue dropped, and Events written (created or updated).
        self.dropped = 0
        self.written = 0

    # --- correlation (synchronous) --------------------------------------------------------------

    def record(self, namespace: str, name: str, uid: str, *, kind: str, reason: str, message: str) -> None:
        """An Event of type ``kind`` ("Normal", "Warning") about the pod ``namespace/name``."""
        obj = (namespace, name, uid)
        message = message[:1024]
        similar_key = (*obj, kind, reason)
        if self._aggregate(similar_key, message):
            # one Event for all of them from now on, showing the latest message
            key, message = (*similar_key, AGGREGATED_PREFIX), AGGREGATED_PREFIX + message
        else:
            key = (*similar_key, message)
        stamp = self._now().strftime("%Y-%m-%dT%H:%M:%SZ")
        seen = self._seen.get(key)
        if seen is None:
            seen = _Seen(f"{name}.{uuid.uuid4().hex[:16]}", 1, stamp)
            method = "POST"
        else:
            seen.count += 1
            self._seen.move_to_end(key)
            method = "PATCH"
        self._seen[key] = seen
        while len(self._seen) > self.settings.cache_size:
            self._seen.popitem(last=False)
        # As client-go: the spam filter comes last, so what it drops is still counted, and the
        # next Event written carries the count (a create it dropped is made by the next update,
        # which finds no Event to patch).
        if not self._take_token(obj):
            self.dropped += 1
            return
        self._enqueue(method, namespace, self._event(obj, seen, kind, reason, message, stamp))

    def _take_token(self, obj: tuple[str, ...]) -> bool:
        now = self._clock()
        bucket = self._buckets.get(obj)
        if bucket is None:
            bucket = _Bucket(float(self.settings.spam_burst), now)
        else:
            refill = (now - bucket.at) / self.settings.spam_refill_seconds
            bucket.tokens = min(float(self.settings.spam_burst), bucket.tokens + refill)
            bucket.at = now
        self._buckets[obj] = bucket
        self._buckets.move_to_end(obj)
        while len(self._buckets) > self.settings.cache_size:
            self._buckets.popitem(last=False)
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True

    def _aggregate(self, key: tuple[str, ...], message: str) -> bool:
        """Whether ``message`` is one too many of its kind: to be recorded on the combined Event."""
        now = self._clock()
        similar = self._similar.get(key)
        if similar is None or now - similar.last > self.settings.aggregate_seconds:
            similar = _Similar()
        similar.last = now  # the interval runs from the latest similar Event
        similar.messages.add(message)
        self._similar[key] = similar
        self._similar.move_to_end(key)
        while len(self._similar) > self.settings.cache_size:
            self._similar.popitem(last=False)
        if len(similar.messages) < self.settings.aggregate_max:
            return False
        similar.messages.pop()  # bounded, as client-go's PopAny: from here on all go to the combined one
        return True

    def _event(
        self, obj: tuple[str, str, str], seen: _Seen, kind: str, reason: str, message: str, stamp: str
    ) -> dict[str, Any]:
        namespace, name, uid = obj
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": seen.name, "namespace": namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name, "uid": uid},
            "type": kind,
            "reason": reason,
            "message": message,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
            "firstTimestamp": seen.first,
            "lastTimestamp": stamp,
            "count": seen.count,
        }

    def _enqueue(self, method: str, namespace: str, body: dict[str, Any]) -> None:
        try:
            self._queue.put_nowait((method, namespace, body))
        except asyncio.QueueFull:
            self.dropped += 1

    # --- writing (the background task) ----------------------------------------------------------

    async def run(self) -> None:
        while True:
            method, namespace, body = await self._queue.get()
            try:
                await self._write(method, namespace, body)
            finally:
                self._queue.task_done()

    async def flush(self) -> None:
        """Return once every queued Event is written (or failed); for tests and shutdown."""
        await self._queue.join()

    async def _write(self, method: str, namespace: str, body: dict[str, Any]) -> None:
        client = self._client()
        if client is None:
            return
        path = f"/api/v1/namespaces/{namespace}/events"
        try:
            if method == "PATCH":
                patch = {"count": body["count"], "lastTimestamp": body["lastTimestamp"], "message": body["message"]}
                try:
                    await client.request(
                        "PATCH",
                        f"{path}/{body['metadata']['name']}",
                        body=patch,
                        content_type=MERGE_PATCH,
                        verb="patch",
                        resource="events",
                    )
                    self.written += 1
                    return
                except ObjectNotFound:
                    pass  # expired meanwhile (Events have a TTL): create it again, as client-go does
            await client.request("POST", path, body=body, verb="create", resource="events")
            self.written += 1
        except ExtenderError as exc:
            log.info("kube.event_failed", event_name=body["metadata"]["name"], reason=exc.reason)
