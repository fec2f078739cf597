"""The reflector against a scripted list/watch endpoint (``scripted.py``): empty list syncs,
paging, re-list after 410 keeps the cache exact, a dropped stream resumes from the last event's
resourceVersion (not the list's), BOOKMARK advances it, unknown event types are skipped with a
log, a LIST 500 backs off (exact sequence, recorded sleep) and recovers, a 2 MB event line
parses, a watch ERROR other than 410 re-watches after backoff, a 403 (LIST or WATCH) backs off, leaves the kind
unsynced and names verb and resource until a LIST succeeds again, and cancellation
leaves no task behind. The strict fake API server is used by ``test_backend.py``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestServer
from structlog.testing import capture_logs

from extender.backends.kube.client import KubeClient
from extender.backends.kube.config import ClusterConfig
from extender.backends.kube.feeder import StoreFeeder
from extender.backends.kube.reflector import Reflector, Resource, WatchSettings
from extender.state.cache.store import ObjectStore

from .scripted import Close, Fail, Hang, Raw, ScriptedApi, status
from .test_backend import until

SETTINGS = WatchSettings(backoff_initial=0.5, backoff_factor=2, backoff_max=4, jitter=0, inactivity_timeout=60)
CLASSES = Resource("DeviceClass", "resource.k8s.io/v1", "deviceclasses")

ServerFactory = Callable[..., Awaitable[TestServer]]


def device_class(name: str, rv: int, **annotations: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": str(rv)}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": meta, "spec": {}}


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


def bookmark(rv: int) -> dict[str, Any]:
    return {"type": "BOOKMARK", "object": {"kind": "DeviceClass", "metadata": {"resourceVersion": str(rv)}}}


class Harness:
    def __init__(self, api: ScriptedApi, server: TestServer) -> None:
        self.api = api
        self.store = ObjectStore()
        self.sleeps: list[float] = []
        self.client = KubeClient(ClusterConfig(host=str(server.make_url("")).rstrip("/")))

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    def reflector(self, max_cycles: int) -> Reflector:
        return Reflector(
            self.client, CLASSES, StoreFeeder(self.store), settings=SETTINGS, sleep=self.sleep, max_cycles=max_cycles
        )

    def watch_versions(self) -> list[str]:
        return [q.get("resourceVersion", "") for q in self.api.requests if q.get("watch")]

    def kinds(self) -> list[str]:
        return ["watch" if q.get("watch") else "list" for q in self.api.requests]


@pytest.fixture
async def harness(aiohttp_server: ServerFactory) -> Any:
    api = ScriptedApi()
    server = await aiohttp_server(api.app())
    h = Harness(api, server)
    yield h
    await h.client.close()


async def test_empty_list_syncs_and_watches_from_the_list_rv(harness: Harness) -> None:
    harness.api.lists = [harness.api.page([], "10")]
    harness.api.watches = [[bookmark(10)]]
    reflector = harness.reflector(max_cycles=2)
    await reflector.run()
    assert reflector.synced and harness.store.classes == {}
    watch = harness.api.requests[1]
    assert watch["resourceVersion"] == "10" and watch["allowWatchBookmarks"] == "true"
    assert harness.api.requests[0]["limit"] == str(SETTINGS.page_size)


async def test_paged_list_follows_continue_tokens(harness: Harness) -> None:
    api = harness.api
    api.lists = [api.page([device_class("a", 3)], "7", cont="tok"), api.page([device_class("b", 5)], "7")]
    api.watches = [[bookmark(7)]]
    await harness.reflector(max_cycles=2).run()
    assert sorted(harness.store.classes) == ["a", "b"]
    assert "continue" not in api.requests[0] and api.requests[1]["continue"] == "tok"
    assert harness.watch_versions() == ["7"]


@pytest.mark.parametrize("as_http_status", [False, True])
async def test_relist_after_410_keeps_the_cache_exact(harness: Harness, as_http_status: bool) -> None:
    api = harness.api
    api.lists = [
        api.page([device_class("a", 3), device_class("b", 4)], "10"),
        api.page([device_class("b", 4), device_class("d", 19)], "20"),
    ]
    gone: Any = Fail(410, "too old") if as_http_status else event("ERROR", status(410, "too old", "Expired"))
    first: list[Any] = [gone] if as_http_status else [event("ADDED", device_class("c", 11)), gone]
    api.watches = [first, [bookmark(21)]]
    reflector = harness.reflector(max_cycles=4)
    await reflector.run()
    assert harness.kinds() == ["list", "watch", "list", "watch"]
    # "a" deleted and "d" added while we were not watching; "c" came and went: exact again.
    assert sorted(harness.store.classes) == ["b", "d"]
    assert harness.watch_versions() == ["10", "20"]
    assert harness.sleeps == []  # a 410 re-lists at once


async def test_mid_stream_drop_resumes_from_the_last_event(harness: Harness) -> None:
    api = harness.api
    api.lists = [api.page([], "10")]
    api.watches = [
        [event("ADDED", device_class("a", 11)), event("MODIFIED", device_class("a", 12)), Close()],
        [bookmark(12)],
    ]
    await harness.reflector(max_cycles=3).run()
    assert harness.watch_versions() == ["10", "12"]
    assert harness.sleeps == []  # the stream delivered events: reconnect at once
    assert harness.store.classes["a"] is not None


async def test_bookmark_advances_the_resource_version(harness: Harness) -> None:
    api = harness.api
    api.lists = [api.page([], "10")]
    api.watches = [[bookmark(15)], [bookmark(16)]]
    reflector = harness.reflector(max_cycles=3)
    await reflector.run()
    assert harness.watch_versions() == ["10", "15"]
    assert reflector.resource_version == "16"
    assert harness.store.classes == {}


async def test_unknown_event_types_are_skipped_with_a_log(harness: Harness) -> None:
    api = harness.api
    api.lists = [api.page([], "10")]
    api.watches = [[{"type": "SURPRISE", "object": device_class("x", 99)}, event("ADDED", device_class("a", 11))]]
    with capture_logs() as logs:
        reflector = harness.reflector(max_cycles=2)
        await reflector.run()
    assert sorted(harness.store.classes) == ["a"]
    assert reflector.resource_version == "11"
    assert any(e["event"] == "watch.unknown_event" and e["type"] == "SURPRISE" for e in logs)


async def test_a_list_500_backs_off_and_recovers(harness: Harness) -> None:
    api = harness.api
    api.lists = [Fail(500), Fail(503), Fail(429), api.page([device_class("a", 3)], "10")]
    api.watches = [[bookmark(10)]]
    with capture_logs() as logs:
        reflector = harness.reflector(max_cycles=5)
        await reflector.run()
    assert harness.sleeps == [0.5, 1.0, 2.0]
    assert reflector.synced and sorted(harness.store.classes) == ["a"]
    assert [e["event"] for e in logs].count("watch.list_failed") == 3


async def test_a_watch_error_event_rewatches_after_backoff(harness: Harness) -> None:
    api = harness.api
    api.lists = [api.page([], "10")]
    api.watches = [
        [event("ADDED", device_class("a", 11)), event("ERROR", status(500, "boom"))],
        [Fail(503)],
        [bookmark(12)],
    ]
    await harness.reflector(max_cycles=4).run()
    assert harness.kinds() == ["list", "watch", "watch", "watch"]
    assert harness.watch_versions() == ["10", "11", "11"]
    assert harness.sleeps == [0.5, 1.0]


async def test_an_empty_watch_backs_off_before_reconnecting(harness: Harness) -> None:
    api = harness.api
    api.lists = [api.page([], "10")]
    api.watches = [[], [], [bookmark(11)], []]
    await harness.reflector(max_cycles=5).run()
    assert harness.sleeps == [0.5, 1.0, 0.5]  # reset after the bookmark


async def test_a_two_megabyte_event_line_parses(harness: Harness) -> None:
    api = harness.api
    big = device_class("big", 11, blob="x" * (2 * 1024 * 1024))
    api.lists = [api.page([], "10")]
    line = orjson.dumps(event("ADDED", big)) + b"\n"
    api.watches = [[Raw(line[: len(line) // 3]), Raw(line[len(line) // 3 :]), event("ADDED", device_class("b", 12))]]
    await harness.reflector(max_cycles=2).run()
    assert sorted(harness.store.classes) == ["b", "big"]


async def test_a_forbidden_list_is_retried_and_named_until_it_is_allowed(harness: Harness) -> None:
    """As client-go's reflector: a refused LIST backs off and tries again (RBAC applied late)."""
    api = harness.api
    api.lists = [
        Fail(403, 'deviceclasses.resource.k8s.io is forbidden: User "x" cannot list'),
        Fail(403, 'deviceclasses.resource.k8s.io is forbidden: User "x" cannot list'),
    ]
    reflector = harness.reflector(max_cycles=2)
    await reflector.run()
    assert not reflector.synced and harness.sleeps == [0.5, 1.0]  # backed off after each refusal
    assert reflector.problem.startswith("forbidden: cannot list deviceclasses.resource.k8s.io (HTTP 403)")
    assert reflector.problem.endswith("; retrying")
    api.lists = [api.page([device_class("a", 3)], "10")]
    api.watches = [[bookmark(10)]]
    reflector.max_cycles = 4
    await reflector.run()
    assert reflector.synced and reflector.problem == "" and sorted(harness.store.classes) == ["a"]


async def test_a_watch_refused_after_the_sync_unsyncs_the_kind_until_a_list_succeeds(harness: Harness) -> None:
    """The cache of a kind whose watch is refused may be stale: not synced (filter says so), until
    a LIST succeeds again."""
    api = harness.api
    api.lists = [api.page([device_class("a", 3)], "10"), api.page([device_class("b", 4)], "20")]
    api.watches = [[Fail(401, "Unauthorized")], [bookmark(20)]]
    synced: list[bool] = []
    reflector = harness.reflector(max_cycles=2)
    await reflector.run()  # list, refused watch
    synced.append(reflector.synced)
    reflector.max_cycles = 4
    await reflector.run()  # list again, watch
    assert synced == [False] and reflector.synced and sorted(harness.store.classes) == ["b"]
    assert harness.kinds() == ["list", "watch", "list", "watch"]


async def test_cancellation_leaves_no_tasks(harness: Harness) -> None:
    api = harness.api
    api.lists = [api.page([device_class("a", 3)], "10")]
    api.watches = [[event("ADDED", device_class("b", 11)), Hang()]]
    before = asyncio.all_tasks()
    reflector = harness.reflector(max_cycles=None)  # type: ignore[arg-type]
    task = asyncio.create_task(reflector.run(), name="watch deviceclasses")
    await until(lambda: "b" in harness.store.classes)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0)
    assert _client_side(asyncio.all_tasks() - before) == set()


def _client_side(tasks: set[asyncio.Task[Any]]) -> set[asyncio.Task[Any]]:
    """Tasks other than the test server's own request handlers (it still serves the hang)."""
    return {t for t in tasks if not getattr(t.get_coro(), "__qualname__", "").startswith("RequestHandler.")}


async def test_the_first_list_fills_the_store_a_step_at_a_time_and_a_relist_at_once(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first list of a kind lets the event loop run between objects (seconds of decoding at
    15 000 slices, while nothing is answered from the kind); a re-list, when the store is
    answering requests, replaces the kind at once: nothing ever sees the two lists mixed."""
    monkeypatch.setattr("extender.backends.kube.reflector.FILL_SLICE_SECONDS", 0.0)  # pause at every step
    api = harness.api
    first = [device_class(f"c{i}", i + 1) for i in range(5)]
    again = [device_class(f"d{i}", 20 + i) for i in range(5)]
    api.lists = [api.page(first, "10"), api.page(again, "30")]
    api.watches = [[event("ERROR", status(410, "too old", "Expired"))], [bookmark(31)]]
    seen: list[frozenset[str]] = []
    listing = asyncio.create_task(harness.reflector(max_cycles=4).run())
    while not listing.done():
        seen.append(frozenset(harness.store.classes))
        await asyncio.sleep(0)
    await listing
    old, new = frozenset(f"c{i}" for i in range(5)), frozenset(f"d{i}" for i in range(5))
    assert {len(s) for s in seen if s <= old} >= {1, 2, 3, 4}  # the first list, object by object
    assert new in seen and all(s <= old or s == new for s in seen)  # the re-list: all at once
    assert frozenset(harness.store.classes) == new
