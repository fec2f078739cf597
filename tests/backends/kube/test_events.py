"""EventRecorder against the fake API server: duplicates counted on one Event, similar ones
aggregated, a spam filter per object, an expired Event created again, writes in order."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from extender.backends.kube import ClusterConfig
from extender.backends.kube.client import KubeClient
from extender.backends.kube.events import AGGREGATED_PREFIX, EventRecorder, EventSettings
from tests.fakes import FakeApiServer


@pytest.fixture
async def client(fake: FakeApiServer) -> AsyncIterator[KubeClient]:
    api = KubeClient(ClusterConfig(host=fake.url))
    yield api
    await api.close()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def recorded(recorder: EventRecorder, *messages: str, reason: str = "FailedBinding") -> None:
    for message in messages:
        recorder.record("default", "p1", "uid-p1", kind="Warning", reason=reason, message=message)
    while not recorder._queue.empty():  # the writer's work, one item at a time
        method, namespace, body = recorder._queue.get_nowait()
        await recorder._write(method, namespace, body)
        recorder._queue.task_done()


def events(fake: FakeApiServer) -> list[dict[str, Any]]:
    return fake.objects("Event", "default")


def recorder(client: KubeClient, clock: Clock | None = None, **settings: Any) -> EventRecorder:
    return EventRecorder(
        lambda: client,
        component="dra-extender",
        instance="test",
        settings=EventSettings(**settings),
        clock=clock or Clock(),
    )


async def test_a_repeated_event_is_counted_on_the_first(fake: FakeApiServer, client: KubeClient) -> None:
    rec = recorder(client)
    await recorded(rec, "node node-1 no longer fits the pod", "node node-1 no longer fits the pod")
    [event] = events(fake)
    assert event["count"] == 2 and event["type"] == "Warning" and event["reason"] == "FailedBinding"
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "default",
        "name": "p1",
        "uid": "uid-p1",
    }
    assert [r.method for r in fake.requests_to(None, "/events")] == ["POST", "PATCH"]
    assert rec.written == 2 and rec.dropped == 0


async def test_many_similar_events_are_combined(fake: FakeApiServer, client: KubeClient) -> None:
    rec = recorder(client, aggregate_max=3)
    await recorded(rec, "conflict on claim a", "conflict on claim b", "conflict on claim c", "conflict on claim d")
    by_message = {e["message"]: e for e in events(fake)}
    # the third different message starts the combined Event; later ones are counted on it
    assert set(by_message) == {"conflict on claim a", "conflict on claim b", f"{AGGREGATED_PREFIX}conflict on claim d"}
    assert by_message[f"{AGGREGATED_PREFIX}conflict on claim d"]["count"] == 2
    assert [r.method for r in fake.requests_to(None, "/events")] == ["POST", "POST", "POST", "PATCH"]
    # another reason is not similar
    await recorded(rec, "conflict on claim e", reason="Other")
    assert "conflict on claim e" in {e["message"] for e in events(fake)}


async def test_the_spam_filter_drops_what_exceeds_the_burst(fake: FakeApiServer, client: KubeClient) -> None:
    clock = Clock()
    rec = recorder(client, clock, spam_burst=2, spam_refill_seconds=300)
    await recorded(rec, "x", "x", "x")
    assert rec.dropped == 1 and events(fake)[0]["count"] == 2
    clock.now += 300  # one token back
    await recorded(rec, "x", "x")
    assert rec.dropped == 2 and events(fake)[0]["count"] == 4  # the dropped third one still counts
    # another pod has a bucket of its own
    rec.record("default", "p2", "uid-p2", kind="Warning", reason="FailedBinding", message="x")
    assert rec.dropped == 2


async def test_an_expired_event_is_created_again(fake: FakeApiServer, client: KubeClient) -> None:
    rec = recorder(client)
    await recorded(rec, "gone")
    [event] = events(fake)
    fake.delete_object("Event", "default", event["metadata"]["name"], force=True)
    await recorded(rec, "gone")
    [again] = events(fake)
    assert again["metadata"]["name"] == event["metadata"]["name"] and again["count"] == 2
    assert [r.method for r in fake.requests_to(None, "/events")] == ["POST", "PATCH", "POST"]


async def test_flush_waits_for_the_writer(fake: FakeApiServer, client: KubeClient) -> None:
    import asyncio

    rec = recorder(client)
    writer = asyncio.create_task(rec.run())
    try:
        rec.record("default", "p1", "uid-p1", kind="Warning", reason="FailedBinding", message="m")
        await asyncio.wait_for(rec.flush(), 30)
        assert len(events(fake)) == 1
    finally:
        writer.cancel()


async def test_the_aggregation_interval_runs_from_the_latest_similar_event(
    fake: FakeApiServer, client: KubeClient
) -> None:
    clock = Clock()
    rec = recorder(client, clock, aggregate_max=3, aggregate_seconds=600)
    await recorded(rec, "m1", "m2")
    clock.now += 500
    await recorded(rec, "m3")  # within 600 s of m2: the third similar one, combined
    clock.now += 500
    await recorded(rec, "m4")  # 500 s after m3: still the same interval
    clock.now += 601
    await recorded(rec, "m5")  # a quiet interval later: on its own again
    messages = sorted(e["message"] for e in events(fake))
    assert messages == sorted(["m1", "m2", "m5", f"{AGGREGATED_PREFIX}m4"])
