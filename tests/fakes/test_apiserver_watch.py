"""The fake apiserver's LIST and WATCH over real HTTP: paging with continue tokens, the
resourceVersion/resourceVersionMatch rules, selectors, watch replay and live events, bookmarks,
410 after compaction or restart, timeouts and dropped streams. Writes are covered in
``test_apiserver.py``.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from .apiserver import FakeApiServer
from .helpers import CLAIMS, PODS, Watch, call, claim, pod

SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def _slice(name: str, node: str = "node-1") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "driver-a",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
        },
    }


def _names(body: dict[str, Any]) -> list[str]:
    return [item["metadata"]["name"] for item in body["items"]]


# --- LIST -----------------------------------------------------------------------------------------


async def test_paging_is_a_consistent_snapshot(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    for index in range(5):
        fake.put_object(_slice(f"slice-{index}"))
    status, first = await call(http, "GET", SLICES, params={"limit": "2"})
    assert status == 200 and _names(first) == ["slice-0", "slice-1"]
    assert first["metadata"]["remainingItemCount"] == 3
    snapshot_rv = first["metadata"]["resourceVersion"]
    fake.put_object(_slice("slice-00"))  # sorts into the first page: not seen by the continuation
    fake.delete_object("ResourceSlice", None, "slice-3")  # still listed: the snapshot predates it
    _, second = await call(http, "GET", SLICES, params={"limit": "2", "continue": first["metadata"]["continue"]})
    assert _names(second) == ["slice-2", "slice-3"] and second["metadata"]["resourceVersion"] == snapshot_rv
    _, third = await call(http, "GET", SLICES, params={"limit": "2", "continue": second["metadata"]["continue"]})
    assert _names(third) == ["slice-4"] and "continue" not in third["metadata"]
    _, fresh = await call(http, "GET", SLICES)
    assert _names(fresh) == ["slice-0", "slice-00", "slice-1", "slice-2", "slice-4"]


async def test_continue_token_too_old_after_compaction(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    for index in range(3):
        fake.put_object(_slice(f"slice-{index}"))
    _, first = await call(http, "GET", SLICES, params={"limit": "1"})
    fake.put_object(_slice("slice-9"))
    fake.compact()
    status, body = await call(http, "GET", SLICES, params={"limit": "1", "continue": first["metadata"]["continue"]})
    assert status == 410 and body["reason"] == "Expired" and body["code"] == 410
    assert body["message"].startswith("The provided continue parameter is too old")
    status, body = await call(http, "GET", SLICES, params={"limit": "1", "continue": "garbage!"})
    assert status == 400


async def test_resource_version_semantics(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    fake.put_object(_slice("slice-0"))
    old_rv = str(fake.resource_version)
    fake.put_object(_slice("slice-1"))
    _, any_version = await call(http, "GET", SLICES, params={"resourceVersion": "0", "limit": "1"})
    assert _names(any_version) == ["slice-0", "slice-1"] and "continue" not in any_version["metadata"]
    _, exact = await call(http, "GET", SLICES, params={"resourceVersion": old_rv, "resourceVersionMatch": "Exact"})
    assert _names(exact) == ["slice-0"] and exact["metadata"]["resourceVersion"] == old_rv
    _, not_older = await call(
        http, "GET", SLICES, params={"resourceVersion": old_rv, "resourceVersionMatch": "NotOlderThan"}
    )
    assert _names(not_older) == ["slice-0", "slice-1"]
    status, body = await call(http, "GET", SLICES, params={"resourceVersion": "999999"})
    assert status == 504 and body["message"].startswith("Timeout: Too large resource version: 999999")
    status, body = await call(http, "GET", SLICES, params={"resourceVersionMatch": "Exact"})
    assert status == 422 and "resourceVersionMatch is forbidden unless resourceVersion is provided" in body["message"]
    fake.compact()
    status, body = await call(http, "GET", SLICES, params={"resourceVersion": old_rv, "resourceVersionMatch": "Exact"})
    assert status == 410 and body["reason"] == "Expired"


async def test_selectors(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    await call(http, "POST", PODS, pod("pod-a", labels={"app": "x", "tier": "1"}))
    await call(http, "POST", PODS, pod("pod-b", labels={"app": "y"}, node="node-1"))
    fake.put_object(_slice("slice-1", node="node-1"))
    fake.put_object(_slice("slice-2", node="node-2"))
    cases = {
        (PODS, "labelSelector", "app=x"): ["pod-a"],
        (PODS, "labelSelector", "app in (x,y),!tier"): ["pod-b"],
        (PODS, "labelSelector", "app!=x"): ["pod-b"],
        (PODS, "fieldSelector", "spec.nodeName="): ["pod-a"],
        (PODS, "fieldSelector", "spec.nodeName=node-1"): ["pod-b"],
        (PODS, "fieldSelector", "metadata.name!=pod-a"): ["pod-b"],
        (SLICES, "fieldSelector", "spec.nodeName=node-2"): ["slice-2"],
    }
    for (path, parameter, selector), expected in cases.items():
        status, body = await call(http, "GET", path, params={parameter: selector})
        assert (status, _names(body)) == (200, expected), selector
    status, body = await call(http, "GET", CLAIMS, params={"fieldSelector": "spec.nodeName=x"})
    message = '"spec.nodeName" is not a known field selector: only "metadata.name", "metadata.namespace"'
    assert (status, body["message"]) == (400, message)  # claims have no field selectors of their own
    status, body = await call(http, "GET", SLICES, params={"fieldSelector": "spec.pool=x"})
    assert (status, body["message"]) == (400, "field label not supported: spec.pool")  # slices have some
    status, _ = await call(http, "GET", PODS, params={"labelSelector": "a b c"})
    assert status == 400


# --- WATCH ----------------------------------------------------------------------------------------


async def test_watch_from_list_version_streams_live_changes(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    await call(http, "POST", CLAIMS, claim("before"))
    _, listed = await call(http, "GET", CLAIMS)
    async with Watch(http, CLAIMS, resourceVersion=listed["metadata"]["resourceVersion"]) as watch:
        assert watch.status == 200 and watch.response is not None
        assert watch.response.headers["Content-Type"].startswith("application/json")
        _, created = await call(http, "POST", CLAIMS, claim("x"))
        created["metadata"]["labels"] = {"a": "b"}
        _, updated = await call(http, "PUT", f"{CLAIMS}/x", created)
        await call(http, "DELETE", f"{CLAIMS}/x")
        events = [await watch.next() for _ in range(3)]
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    assert all(
        e["object"]["kind"] == "ResourceClaim" and e["object"]["apiVersion"] == "resource.k8s.io/v1" for e in events
    )
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and versions[1] == int(updated["metadata"]["resourceVersion"])


async def test_watch_resumes_after_a_version(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    fake.put_object(_slice("slice-0"))
    resume_from = str(fake.resource_version)
    fake.put_object(_slice("slice-1"))
    fake.put_object(_slice("slice-1", node="node-2"))
    async with Watch(http, SLICES, resourceVersion=resume_from) as watch:
        first, second = await watch.next(), await watch.next()
    assert [
        (first["type"], first["object"]["metadata"]["name"]),
        (second["type"], second["object"]["spec"]["nodeName"]),
    ] == [
        ("ADDED", "slice-1"),
        ("MODIFIED", "node-2"),
    ]


@pytest.mark.parametrize("resource_version", [None, "0"])
async def test_watch_without_version_starts_with_the_current_state(
    fake: FakeApiServer, http: aiohttp.ClientSession, resource_version: str | None
) -> None:
    fake.put_object(_slice("slice-0"))
    fake.put_object(_slice("slice-1"))
    params = {} if resource_version is None else {"resourceVersion": resource_version}
    async with Watch(http, SLICES, **params) as watch:
        events = [await watch.next(), await watch.next()]
        fake.put_object(_slice("slice-2"))
        events.append(await watch.next())
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "slice-0"),
        ("ADDED", "slice-1"),
        ("ADDED", "slice-2"),
    ]


async def test_too_old_version_is_an_error_event_then_the_end(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    fake.put_object(_slice("slice-0"))
    old = str(fake.resource_version - 1)
    fake.put_object(_slice("slice-1"))
    fake.compact()
    async with Watch(http, SLICES, resourceVersion=old) as watch:
        assert watch.status == 200
        events = await watch.rest()
    assert events == [
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f"too old resource version: {old} ({fake.resource_version})",
                "reason": "Expired",
                "code": 410,
            },
        }
    ]


async def test_retained_window_compacts_on_its_own(aiohttp_server: Any) -> None:
    fake = FakeApiServer(retain_changes=3, bookmark_interval=None)
    await fake.serve_with(aiohttp_server)
    fake.put_object(_slice("slice-0"))
    start = str(fake.resource_version)
    for index in range(1, 5):
        fake.put_object(_slice(f"slice-{index}"))
    async with aiohttp.ClientSession(fake.url) as http, Watch(http, SLICES, resourceVersion=start) as watch:
        assert (await watch.next())["object"]["code"] == 410
        ok_from = str(fake.resource_version - 2)
    async with aiohttp.ClientSession(fake.url) as http, Watch(http, SLICES, resourceVersion=ok_from) as watch:
        assert (await watch.next())["object"]["metadata"]["name"] == "slice-3"


async def test_bookmarks_only_when_allowed(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    start = str(fake.resource_version)
    async with (
        Watch(http, SLICES, resourceVersion=start, allowWatchBookmarks="true") as with_bookmarks,
        Watch(http, SLICES, resourceVersion=start) as without,
    ):
        await fake.wait_for_watches(2, "resourceslices")
        await call(http, "POST", "/api/v1/nodes", {"metadata": {"name": "node-1"}})  # another kind moves the rv
        fake.send_bookmarks()
        fake.put_object(_slice("slice-0"))
        bookmark = await with_bookmarks.next()
        assert bookmark == {
            "type": "BOOKMARK",
            "object": {
                "kind": "ResourceSlice",
                "apiVersion": "resource.k8s.io/v1",
                "metadata": {"resourceVersion": str(fake.resource_version - 1)},
            },
        }
        assert (await with_bookmarks.next())["type"] == "ADDED"
        assert (await without.next())["type"] == "ADDED"


async def test_periodic_bookmarks(aiohttp_server: Any) -> None:
    fake = FakeApiServer(bookmark_interval=0.05)
    await fake.serve_with(aiohttp_server)
    async with aiohttp.ClientSession(fake.url) as http, Watch(http, SLICES, allowWatchBookmarks="1") as watch:
        first, second = await watch.next(), await watch.next()
    assert first["type"] == second["type"] == "BOOKMARK"


async def test_send_initial_events(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    fake.put_object(_slice("slice-0"))
    params = {"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan", "allowWatchBookmarks": "true"}
    async with Watch(http, SLICES, **params) as watch:
        added, bookmark = await watch.next(), await watch.next()
    assert added["type"] == "ADDED"
    assert bookmark["type"] == "BOOKMARK"
    assert bookmark["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    status, body = await call(http, "GET", SLICES, params={"watch": "1", "sendInitialEvents": "true"})
    assert status == 422
    assert "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan" in body["message"]


async def test_selector_watch_sees_objects_leave_and_enter(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    fake.put_object(_slice("slice-0", node="node-1"))
    async with Watch(
        http, SLICES, resourceVersion=str(fake.resource_version), fieldSelector="spec.nodeName=node-1"
    ) as watch:
        fake.put_object(_slice("slice-0", node="node-2"))
        fake.put_object(_slice("slice-9", node="node-2"))
        fake.put_object(_slice("slice-0", node="node-1"))
        left, entered = await watch.next(), await watch.next()
    # leaving: DELETED with the state the watcher last saw (kube-apiserver's watch cache), at the change's version
    assert (left["type"], left["object"]["spec"]["nodeName"]) == ("DELETED", "node-1")
    assert (
        int(left["object"]["metadata"]["resourceVersion"]) == int(entered["object"]["metadata"]["resourceVersion"]) - 2
    )
    assert (entered["type"], entered["object"]["metadata"]["name"]) == ("ADDED", "slice-0")


async def test_namespaced_watch_sees_only_its_namespace(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    await call(http, "POST", "/api/v1/namespaces", {"metadata": {"name": "team"}})
    async with Watch(http, CLAIMS, resourceVersion=str(fake.resource_version)) as watch:
        await call(
            http, "POST", "/apis/resource.k8s.io/v1/namespaces/team/resourceclaims", claim("t", namespace="team")
        )
        await call(http, "POST", CLAIMS, claim("d"))
        event = await watch.next()
    assert event["object"]["metadata"]["name"] == "d"


async def test_timeout_seconds_ends_the_stream_cleanly(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    async with Watch(http, SLICES, resourceVersion=str(fake.resource_version), timeoutSeconds="1") as watch:
        assert await watch.rest() == []


async def test_clean_close_and_abrupt_drop(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    async with Watch(http, SLICES, resourceVersion=str(fake.resource_version)) as watch:
        await fake.wait_for_watches(1, "resourceslices.resource.k8s.io")
        assert fake.drop_watches("resourceslices", abrupt=False) == 1
        assert await watch.rest() == []
    async with Watch(http, SLICES, resourceVersion=str(fake.resource_version)) as watch:
        await fake.wait_for_watches(1)
        fake.drop_watches()
        with pytest.raises(aiohttp.ClientPayloadError):
            await watch.rest()


async def test_drop_fault_after_events(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    fake.put_object(_slice("slice-0"))
    fake.put_object(_slice("slice-1"))
    fake.drop_watch("/resourceslices", after_events=1)
    async with Watch(http, SLICES) as watch:
        assert (await watch.next())["object"]["metadata"]["name"] == "slice-0"
        with pytest.raises(aiohttp.ClientPayloadError):
            await watch.rest()
    async with Watch(http, SLICES) as watch:  # the rule is spent
        assert len([await watch.next(), await watch.next()]) == 2


async def test_restart_cuts_watches_and_forgets_history(fake: FakeApiServer, http: aiohttp.ClientSession) -> None:
    fake.put_object(_slice("slice-0"))
    seen = str(fake.resource_version)
    async with Watch(http, SLICES, resourceVersion=seen) as watch:
        await fake.wait_for_watches(1)
        fake.put_object(_slice("slice-1"))
        assert (await watch.next())["type"] == "ADDED"
        fake.restart()
        with pytest.raises(aiohttp.ClientPayloadError):
            await watch.rest()
    assert fake.watch_count() == 0
    async with Watch(http, SLICES, resourceVersion=seen) as watch:
        assert (await watch.next())["object"]["reason"] == "Expired"
    async with Watch(http, SLICES, resourceVersion=str(fake.resource_version)) as watch:
        fake.put_object(_slice("slice-2"))
        assert (await watch.next())["object"]["metadata"]["name"] == "slice-2"


async def test_watch_of_an_unconvertible_object_is_an_error_event(
    fake: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    fake.put_object(_slice("slice-0"))
    async with Watch(http, "/apis/resource.k8s.io/v1beta1/resourceslices") as watch:
        events = await watch.rest()
    assert len(events) == 1 and events[0]["type"] == "ERROR" and events[0]["object"]["code"] == 500
