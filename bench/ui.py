"""The device map's server cost per update (``/ui/api/...``, docs/ui.md) over the real HTTP app.

Run from the repository root::

    python -m bench.ui                        # 5000 nodes x 10 devices, 1000 pods bound first
    python -m bench.ui --nodes 500 --rounds 10
    python -m bench.ui --quick                # tiny; the CI smoke run

A cluster from ``bench.cluster_gen`` (GPU nodes, pods with their own claims) is served by
``create_app`` over ``EmbeddedBackend`` on a loopback port, in this process; ``--prefill`` pods are
scheduled first (filter over a sample of nodes, bind to the first that fits, as kube-scheduler
sends them), so that the map shows allocated devices and pending pods. Then, per request:

- **cold**: the first request after start (the summary renders every node once);
- **warm**: the median of ``--repeat`` requests at one revision (what a second browser tab costs);
- **after a change**: ``--rounds`` times, one pod bound over HTTP, then the request once: what the
  page's refetch costs the server when the event stream tells it of a new revision.

``server ms`` is the handler's own time (measured by a middleware around it: decoding the query,
the read model, ``orjson``), ``latency ms`` what the client on the same loop saw. The revision check
each open event stream makes every 250 ms is timed directly, and so is one pending pod's explanation
(made in the background, not in the request). Prints a Markdown table; timings are printed, never
asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from bench import cluster_gen
from extender.backends.embedded import EmbeddedBackend
from extender.server import ServerSettings, create_app
from extender.server.ui import UI
from extender.state.service import SchedulingService
from extender.views.devicemap import EXPLAIN_SHARE

__all__ = ["Row", "main", "measure"]


@dataclass
class Row:
    request: str
    cold_ms: float = 0.0
    warm_server_ms: float = 0.0
    warm_latency_ms: float = 0.0
    change_server_ms: float = 0.0
    change_latency_ms: float = 0.0
    bytes: int = 0


@dataclass
class Run:
    nodes: int
    devices: int
    total_devices: int = 0
    bound: int = 0
    pending: int = 0
    rows: list[Row] = field(default_factory=list)
    revision_check_us: float = 0.0
    explanation_ms: float = 0.0
    explained: int = 0


#: The requests of one page refresh, and the others the page makes.
REQUESTS: tuple[tuple[str, str], ...] = (
    ("summary", "ui/api/summary"),
    ("nodes, page of 50", "ui/api/nodes?offset=0&limit=50"),
    ("nodes, page 40 of 50", "ui/api/nodes?offset=1950&limit=50"),
    ("nodes, deviceClass filter", "ui/api/nodes?deviceClass=large-gpu.example.com&limit=50"),
    ("nodes, label filter", "ui/api/nodes?label=topology.kubernetes.io%2Fzone%3Dzone-1&limit=50"),
    ("one node", "ui/api/nodes/{node}"),
    ("pools", "ui/api/pools"),
    ("pending", "ui/api/pending"),
)


class _Timer:
    """The server-side time of the last request per route (a middleware around the handlers)."""

    def __init__(self) -> None:
        self.last = 0.0

    @web.middleware
    async def middleware(self, request: web.Request, handler: Callable[[web.Request], Awaitable[Any]]) -> Any:
        start = time.perf_counter()
        try:
            return await handler(request)
        finally:
            self.last = time.perf_counter() - start


class _Scheduler:
    """Binds pending pods as kube-scheduler would: filter over a sample of nodes, bind to the first."""

    def __init__(self, session: aiohttp.ClientSession, base: str, pods: list[dict[str, Any]], nodes: list[str]):
        self.session, self.base, self.queue, self.nodes = session, base, pods, nodes
        self.rng = random.Random(1)
        self.bound = 0

    async def bind_one(self) -> bool:
        while self.queue:
            pod = self.queue.pop(0)
            sample = self.rng.sample(self.nodes, min(50, len(self.nodes)))
            async with self.session.post(
                self.base + "filter", data=orjson.dumps({"Pod": pod, "NodeNames": sample})
            ) as response:
                answer = orjson.loads(await response.read())
            fitting = answer.get("NodeNames") or []
            if not fitting:
                continue
            meta = pod["metadata"]
            bind = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"]}
            async with self.session.post(self.base + "bind", data=orjson.dumps({**bind, "Node": fitting[0]})) as r:
                if orjson.loads(await r.read()).get("Error") == "":
                    self.bound += 1
                    return True
        return False


async def measure(nodes: int, devices: int, *, pods: int, prefill: int, repeat: int, rounds: int) -> Run:
    spec = cluster_gen.ClusterSpec(nodes=nodes, devices=devices, pods=pods, mix={"direct": 1.0}, seed=7)
    objects = cluster_gen.generate(spec)
    node_names = sorted(o["metadata"]["name"] for o in objects if o["kind"] == "Node")
    queue = cluster_gen.pods_of(objects)
    service = SchedulingService(backend=EmbeddedBackend(objects), hold_seconds=0)
    app = create_app(service, ServerSettings())
    timer = _Timer()
    app.middlewares.append(timer.middleware)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    base = f"http://127.0.0.1:{port}/"
    run = Run(nodes=nodes, devices=devices)
    middle = node_names[len(node_names) // 2]
    try:
        async with aiohttp.ClientSession() as session:
            scheduler = _Scheduler(session, base, queue, node_names)

            async def get(path: str) -> tuple[float, float, int]:
                start = time.perf_counter()
                async with session.get(base + path.format(node=middle)) as response:
                    body = await response.read()
                    assert response.status == 200, body[:300]
                return (time.perf_counter() - start) * 1000, timer.last * 1000, len(body)

            # cold: the first requests after start, before anything was bound
            for name, path in REQUESTS:
                latency, _server, size = await get(path)
                run.rows.append(Row(name, cold_ms=latency, bytes=size))
            print(f"{nodes} nodes: binding {prefill} pods", file=sys.stderr)
            for _ in range(prefill):
                if not await scheduler.bind_one():
                    break
            for row, (_name, path) in zip(run.rows, REQUESTS, strict=True):
                await get(path)  # catch up with the prefill
                samples = [await get(path) for _ in range(repeat)]
                row.warm_latency_ms = statistics.median(s[0] for s in samples)
                row.warm_server_ms = statistics.median(s[1] for s in samples)
                row.bytes = samples[-1][2]
            for row, (_name, path) in zip(run.rows, REQUESTS, strict=True):
                changed: list[tuple[float, float, int]] = []
                for _ in range(rounds):
                    if not await scheduler.bind_one():
                        break
                    changed.append(await get(path))
                if changed:
                    row.change_latency_ms = statistics.median(s[0] for s in changed)
                    row.change_server_ms = statistics.median(s[1] for s in changed)
            device_map = app[UI].device_map
            start = time.perf_counter()
            for _ in range(1000):
                device_map.revision()
            run.revision_check_us = (time.perf_counter() - start) * 1000
            # the pending pods' explanations, made in the background: here without rests, timed
            await device_map.settled()
            await scheduler.bind_one()  # a new state: every explanation is to be made again
            device_map.explain_share = 1.0
            before = device_map.revision()
            start = time.perf_counter()
            await device_map.pending_explained()
            await device_map.settled()
            run.explained = device_map.revision() - before
            run.explanation_ms = (time.perf_counter() - start) * 1000 / max(1, run.explained)
            summary = device_map.summary()
            run.total_devices = summary["totals"]["devices"]
            run.pending = summary["pendingPods"]
            run.bound = scheduler.bound
    finally:
        await runner.cleanup()
    return run


def print_table(run: Run) -> None:
    print(f"Python {platform.python_version()} on {platform.machine()}, aiohttp {aiohttp.__version__}")
    print(
        f"{run.nodes} nodes x {run.devices} devices ({run.total_devices} devices), {run.bound} pods bound, "
        f"{run.pending} pending"
    )
    print()
    print("| request | cold ms | warm server ms | warm latency ms | after a bind: server ms | latency ms | bytes |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for row in run.rows:
        print(
            f"| {row.request} | {row.cold_ms:.1f} | {row.warm_server_ms:.2f} | {row.warm_latency_ms:.2f} | "
            f"{row.change_server_ms:.2f} | {row.change_latency_ms:.2f} | {row.bytes} |"
        )
    print(f"| revision check (each event stream, every 250 ms) | | {run.revision_check_us / 1000:.4f} | | | | |")
    print()
    print(
        f"Explaining one pending pod (debug/why over every node, made in the background for the first 20, "
        f"at most {EXPLAIN_SHARE:.0%} of the time): {run.explanation_ms:.0f} ms ({run.explained} explained)"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.ui", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--devices", type=int, default=10)
    parser.add_argument("--pods", type=int, default=1400, help="pods generated (all pending at start)")
    parser.add_argument("--prefill", type=int, default=1000, help="pods bound before the measurements")
    parser.add_argument("--repeat", type=int, default=20, help="warm requests per row")
    parser.add_argument("--rounds", type=int, default=20, help="binds, each followed by one request, per row")
    parser.add_argument("--quick", action="store_true", help="a tiny cluster and few rounds (smoke test)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.quick:
        args.nodes, args.devices, args.pods, args.prefill = 40, 4, 60, 20
        args.repeat, args.rounds = 3, 2
    run = asyncio.run(
        measure(
            args.nodes,
            args.devices,
            pods=args.pods,
            prefill=args.prefill,
            repeat=args.repeat,
            rounds=args.rounds,
        )
    )
    print_table(run)
    return 0


if __name__ == "__main__":
    from extender.logconfig import configure_logging

    configure_logging("console", "warning")  # the table alone on stdout
    sys.exit(main())
