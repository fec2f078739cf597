"""The device map's HTTP side (``extender/server/ui/routes.py``) over real loopback HTTP: the page and
its static files (content types, no-cache, no way out of the directory), the JSON endpoints over
tests/state/fixtures/device-states.yaml and the demo cluster (filters, paging, 400s naming the problem,
404s), and the event stream (a revision when it opens, a new one after a bind sent as kube-scheduler
sends it, keepalives, and its end on disconnect and on shutdown)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import ClientSession, ClientTimeout
from aiohttp.test_utils import TestClient, TestServer
from yarl import URL

from extender.backends.embedded import EmbeddedBackend
from extender.server import ServerSettings, create_app
from extender.server.keys import SERVICE
from extender.server.ui import UI
from extender.server.ui.routes import STATIC_DIR
from extender.state.service import SchedulingService
from tests.timing import TickingClock

Client = TestClient[Any, Any]
ROOT = Path(__file__).resolve().parents[2]
STATES = ROOT / "tests" / "state" / "fixtures" / "device-states.yaml"
DEMO = ROOT / "deploy" / "examples" / "demo-cluster.yaml"
PREFIX = "/v1/"


@pytest.fixture
async def client(aiohttp_client: Callable[..., Awaitable[Client]]) -> Client:
    service = SchedulingService(backend=EmbeddedBackend.from_paths(STATES))
    return await aiohttp_client(create_app(service, ServerSettings(path_prefix=PREFIX)))


@pytest.fixture
async def demo(aiohttp_client: Callable[..., Awaitable[Client]]) -> Client:
    service = SchedulingService(backend=EmbeddedBackend.from_paths(DEMO))
    return await aiohttp_client(create_app(service, ServerSettings()))


async def get_json(client: Client, path: str, status: int = 200) -> Any:
    response = await client.get(path)
    assert response.status == status, await response.text()
    assert response.content_type == "application/json"
    return await response.json()


# --- the page and its files ----------------------------------------------------------------------------


def _static(name: str) -> Path:
    path = STATIC_DIR / name
    if not path.is_file():
        pytest.skip(f"{path} is not there (the page's files are written separately)")
    return path


async def test_ui_redirects_to_the_page_with_its_slash(client: Client) -> None:
    response = await client.get(f"{PREFIX}ui", allow_redirects=False)
    assert response.status == 302
    assert response.headers["Location"] == f"{PREFIX}ui/"


async def test_the_page_and_its_files_are_served_uncached_with_their_types(client: Client) -> None:
    index = _static("index.html")
    response = await client.get(f"{PREFIX}ui/")
    assert response.status == 200
    assert response.headers["Content-Type"] == "text/html; charset=utf-8"
    assert response.headers["Cache-Control"] == "no-cache"
    assert await response.read() == index.read_bytes()
    for name, content_type in (("app.js", "text/javascript"), ("style.css", "text/css")):
        path = _static(name)
        response = await client.get(f"{PREFIX}ui/static/{name}")
        assert response.status == 200, name
        assert response.content_type == content_type
        assert response.headers["Cache-Control"] == "no-cache"
        assert await response.read() == path.read_bytes()


@pytest.mark.parametrize(
    "path",
    [
        "ui/static/..%2Froutes.py",
        "ui/static/..%2F..%2Fapp.py",
        "ui/static/%2e%2e%2f__init__.py",
        "ui/static/%2E%2E",
        "ui/static/.hidden",
        "ui/static/%2Fetc%2Fpasswd",
        "ui/static/no-such-file.js",
        "ui/static/sub%2Fdir.js",
    ],
)
async def test_no_path_leads_out_of_the_static_directory(client: Client, path: str) -> None:
    response = await client.get(URL(f"{PREFIX}{path}", encoded=True))
    assert response.status == 404
    assert response.content_type == "application/json"
    assert "error" in await response.json()


async def test_a_link_out_of_the_static_directory_is_not_followed(client: Client, tmp_path: Path) -> None:
    static = tmp_path / "static"
    static.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the web")
    (static / "leak.txt").symlink_to(secret)
    (static / "ok.txt").write_text("fine")
    client.app[UI].static_dir = static
    assert (await client.get(f"{PREFIX}ui/static/ok.txt")).status == 200
    response = await client.get(f"{PREFIX}ui/static/leak.txt")
    assert response.status == 404
    assert "not for the web" not in await response.text()


async def test_a_missing_page_is_a_clear_404(client: Client, tmp_path: Path) -> None:
    client.app[UI].static_dir = tmp_path
    body = await get_json(client, f"{PREFIX}ui/", status=404)
    assert "page is not installed" in body["error"] and "index.html" in body["error"]


# --- JSON -----------------------------------------------------------------------------------------------


async def test_summary(client: Client) -> None:
    body = await get_json(client, f"{PREFIX}ui/api/summary")
    assert body["synced"] is True and isinstance(body["revision"], int)
    assert body["totals"]["nodes"] == 4 and body["totals"]["devices"] == 11
    assert {k: body["totals"][k] for k in ("allocated", "tainted", "shared", "admin")} == {
        "allocated": 2,
        "tainted": 1,
        "shared": 1,
        "admin": 1,
    }
    assert body["pendingPods"] == 3
    assert {"binds", "bindFailures", "scheduledPods", "preemptions"} <= set(body["counters"])
    assert body["facets"]["drivers"] == ["gpu.example.com", "nic.example.com"]
    assert body["facets"]["deviceClasses"] == ["big-gpu", "gpu", "nic"]
    assert body["facets"]["namespaces"] == ["default", "team-a", "team-b"]
    assert body["facets"]["nodeLabels"] == {"rack": ["r1"], "zone": ["a", "b"]}


async def test_nodes_with_filters_and_paging(client: Client) -> None:
    page = await get_json(client, f"{PREFIX}ui/api/nodes?offset=1&limit=2")
    assert (page["total"], page["offset"], page["limit"]) == (4, 1, 2)
    assert [n["name"] for n in page["nodes"]] == ["node-b", "node-c"]
    node_b = page["nodes"][0]
    assert {d["name"]: d["state"] for d in node_b["devices"]} == {"gpu-0": "free", "gpu-1": "shared", "gpu-2": "admin"}
    shared = next(d for d in node_b["devices"] if d["name"] == "gpu-1")
    assert shared["use"] == "2 claims, memory 30Gi/80Gi"
    assert [n["poolProblems"] for n in page["nodes"]] == [[], []]
    last = await get_json(client, f"{PREFIX}ui/api/nodes?offset=3&limit=1")
    assert last["nodes"][0]["poolProblems"] == [
        {"driver": "gpu.example.com", "pool": "node-d", "status": "incomplete",
         "reason": "1 of 2 slices of generation 1"}
    ]  # fmt: skip
    detail = await get_json(client, f"{PREFIX}ui/api/nodes/node-d")
    assert detail["poolProblems"] == last["nodes"][0]["poolProblems"]

    async def names(query: str) -> list[str]:
        body = await get_json(client, f"{PREFIX}ui/api/nodes?{query}")
        return [f"{n['name']}:{','.join(d['name'] for d in n['devices'])}" for n in body["nodes"]]

    assert await names("driver=nic.example.com") == ["node-a:nic-0"]
    assert await names("deviceClass=big-gpu") == ["node-b:gpu-0,gpu-1"]
    assert await names("namespace=team-a") == ["node-a:gpu-0"]
    assert await names("label=zone%3Db&deviceClass=big-gpu") == ["node-b:gpu-0,gpu-1"]
    assert [n.split(":")[0] for n in await names("label=rack")] == ["node-a"]
    assert [n.split(":")[0] for n in await names("q=node-c")] == ["node-c"]


@pytest.mark.parametrize(
    ("query", "problem"),
    [
        ("offset=-1", "offset=-1"),
        ("offset=x", "offset='x'"),
        ("limit=0", "limit=0"),
        ("limit=501", "limit=501"),
        ("limit=ten", "limit='ten'"),
        ("label=%3Dvalue", "label="),
        ("deviceClass=no-such-class", "no-such-class"),
        ("q=" + "x" * 300, "q"),
    ],
)
async def test_bad_query_values_are_400_naming_the_problem(client: Client, query: str, problem: str) -> None:
    body = await get_json(client, f"{PREFIX}ui/api/nodes?{query}", status=400)
    assert problem in body["error"]


async def test_one_node_in_detail_and_an_unknown_one(client: Client) -> None:
    body = await get_json(client, f"{PREFIX}ui/api/nodes/node-c")
    assert body["name"] == "node-c" and isinstance(body["revision"], int)
    devices = {d["name"]: d for d in body["devices"]}
    assert devices["gpu-0-half-0"]["claims"] == [
        {"claim": "default/half", "pods": [], "request": "gpu", "adminAccess": False, "state": "allocated"}
    ]
    assert devices["gpu-0"]["capacity"] == {"memory": "40Gi"}
    assert devices["gpu-0"]["use"].startswith("unavailable:")
    assert [p["pool"] for p in body["pools"]] == ["node-c"]
    missing = await get_json(client, f"{PREFIX}ui/api/nodes/node-z", status=404)
    assert "node-z" in missing["error"]


async def test_pools_and_pending(client: Client) -> None:
    pools = await get_json(client, f"{PREFIX}ui/api/pools?driver=gpu.example.com")
    assert {p["pool"]: p["status"] for p in pools["pools"]} == {
        "node-a": "complete",
        "node-b": "complete",
        "node-c": "complete",
        "node-d": "incomplete",
    }
    again = await get_json(client, f"{PREFIX}ui/api/pools?driver=gpu.example.com")
    assert again == pools  # encoded once, answered the same
    backend = client.app[SERVICE].backend
    backend.apply(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "node-d-gpus-2-of-2"},
            "spec": {
                "driver": "gpu.example.com",
                "nodeName": "node-d",
                "pool": {"name": "node-d", "generation": 1, "resourceSliceCount": 2},
                "devices": [{"name": "gpu-1"}],
            },
        }
    )
    changed = await get_json(client, f"{PREFIX}ui/api/pools?driver=gpu.example.com")
    assert changed["revision"] > pools["revision"]
    assert {p["pool"]: p["status"] for p in changed["pools"]}["node-d"] == "complete"
    pending = await get_json(client, f"{PREFIX}ui/api/pending")
    assert [p["pod"] for p in pending["pods"]] == ["default/urgent", "default/old", "default/new"]
    assert [p["rejected"] for p in pending["pods"]] == [False, False, False]
    # a filter that finds no node for a pod puts it first
    service = client.app[SERVICE]
    new = backend.get("Pod", "default", "new")
    assert new is not None and service.filter(new, ["node-c"]).node_names == []
    rejected = await get_json(client, f"{PREFIX}ui/api/pending")
    assert rejected["revision"] > pending["revision"]
    assert [(p["pod"], p["rejected"]) for p in rejected["pods"]] == [
        ("default/new", True),
        ("default/urgent", False),
        ("default/old", False),
    ]
    assert (await get_json(client, f"{PREFIX}ui/api/pending?namespace=team-b"))["pods"] == []


async def test_pending_pods_are_explained_on_the_demo_cluster(demo: Client) -> None:
    device_map = demo.app[UI].device_map
    device_map.explain_share = 1.0
    first = await get_json(demo, "/ui/api/pending")
    assert first["pods"], "the demo cluster has pending pods"
    await device_map.settled()  # explained in the background, each one a new revision
    pending = await get_json(demo, "/ui/api/pending")
    assert pending["revision"] == first["revision"] + min(20, len(first["pods"]))
    for pod in pending["pods"][:20]:
        assert pod["explained"] is True and pod["stale"] is False, pod
        assert isinstance(pod["summary"], str) and pod["summary"]
        assert isinstance(pod["closest"], list)


async def test_a_bind_over_http_shows_on_the_map(demo: Client) -> None:
    before = await get_json(demo, "/ui/api/summary")
    bind = {"PodName": "two-gpu-pod", "PodNamespace": "default", "PodUID": "7f000000-0000-4000-8000-000000000002"}
    response = await demo.post("/bind", data=orjson.dumps({**bind, "Node": "node-2"}))
    assert (await response.json()) == {"Error": ""}
    after = await get_json(demo, "/ui/api/summary")
    assert after["revision"] > before["revision"]
    assert after["totals"]["allocated"] == before["totals"]["allocated"] + 2
    assert after["counters"]["binds"] == before["counters"]["binds"] + 1
    node = await get_json(demo, "/ui/api/nodes?q=node-2&driver=gpu.example.com")
    held = [d for d in node["nodes"][0]["devices"] if d["state"] == "allocated"]
    assert len(held) == 6 and sum(d["pods"] == ["default/two-gpu-pod"] for d in held) == 2
    pending = await get_json(demo, "/ui/api/pending")
    assert "default/two-gpu-pod" not in {p["pod"] for p in pending["pods"]}


# --- server-sent events ---------------------------------------------------------------------------------


async def read_event(stream: Any, timeout: float = 30.0) -> tuple[str, str]:
    """The next event or comment of a text/event-stream: ("revision", data) or ("comment", text)."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        line = await asyncio.wait_for(stream.readline(), timeout=max(0.01, deadline - time.monotonic()))
        assert line, "the stream ended"
        text = line.decode().rstrip("\n")
        if text == "":
            if not lines:
                continue
            if lines[0].startswith(":"):
                return "comment", lines[0][1:].strip()
            fields = dict(line.split(": ", 1) for line in lines if ": " in line)
            if "event" in fields:
                return fields["event"], fields.get("data", "")
            lines = []
            continue
        lines.append(text)


async def test_events_tell_of_a_new_revision_after_a_bind(demo: Client) -> None:
    response = await demo.get("/ui/api/events")
    assert response.status == 200
    assert response.headers["Content-Type"] == "text/event-stream"
    assert response.headers["Cache-Control"] == "no-cache"
    kind, data = await read_event(response.content)
    assert kind == "revision"
    first = orjson.loads(data)["revision"]
    bind = {"PodName": "two-gpu-pod", "PodNamespace": "default", "PodUID": "7f000000-0000-4000-8000-000000000002"}
    answer = await demo.post("/bind", data=orjson.dumps({**bind, "Node": "node-2"}))
    assert (await answer.json()) == {"Error": ""}
    kind, data = await read_event(response.content)
    assert kind == "revision"
    assert orjson.loads(data)["revision"] > first
    summary = await get_json(demo, "/ui/api/summary")
    assert summary["revision"] >= orjson.loads(data)["revision"]
    response.close()


class ManualTicks:
    """The event streams' ticks (``UiState.ticks``), one for each ``tick()`` of the test."""

    def __init__(self) -> None:
        self._due = asyncio.Semaphore(0)

    def tick(self) -> None:
        self._due.release()

    async def __call__(self, stop: asyncio.Event) -> None:
        due, stopped = asyncio.ensure_future(self._due.acquire()), asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({due, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (due, stopped):
                task.cancel()


async def test_events_are_coalesced_and_kept_alive(demo: Client) -> None:
    state = demo.app[UI]
    ticks, clock = ManualTicks(), TickingClock()
    state.ticks, state.clock = ticks, clock
    device_map = state.device_map
    response = await demo.get("/ui/api/events")
    kind, data = await read_event(response.content)
    assert kind == "revision"
    first = orjson.loads(data)["revision"]
    for _ in range(20):  # twenty changes before the stream's next tick: one event
        device_map.stats.count_bind_failure("Example")
    ticks.tick()
    kind, data = await read_event(response.content)
    assert kind == "revision" and orjson.loads(data)["revision"] == device_map.revision() > first
    ticks.tick()  # nothing changed and no keepalive due: nothing is written
    clock.advance(state.keepalive_seconds)
    ticks.tick()
    # the next thing on the stream is the keepalive: no second event for the twenty changes
    assert await read_event(response.content) == ("comment", "keepalive")
    response.close()


async def test_a_stream_ends_when_its_client_goes(demo: Client) -> None:
    state = demo.app[UI]
    state.tick_seconds = 0.05
    response = await demo.get("/ui/api/events")
    await read_event(response.content)
    assert len(state.streams) == 1
    response.close()
    async with asyncio.timeout(30):  # a bound against a hang: the stream ends at its next tick
        while state.streams:
            await asyncio.sleep(0.02)


async def test_open_streams_do_not_hold_the_server_s_stop() -> None:
    service = SchedulingService(backend=EmbeddedBackend.from_paths(DEMO))
    app = create_app(service, ServerSettings())
    server = TestServer(app)
    await server.start_server()
    async with ClientSession(timeout=ClientTimeout(total=30)) as session:
        responses = [await session.get(server.make_url("/ui/api/events")) for _ in range(3)]
        for response in responses:
            await read_event(response.content)
        assert len(app[UI].streams) == 3
        # aiohttp would wait for open handlers up to its shutdown timeout (60 s): half of it is
        # a bound that tells the two apart on any machine
        await asyncio.wait_for(server.close(), timeout=30)
        assert not app[UI].streams
        for response in responses:
            response.close()
