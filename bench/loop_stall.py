"""How a long allocator search affects everything else in the process (docs/reliability.md).

One pathological filter (tests/pathological.py: a claim that backtracks through every combination
of a counter pool, about a second of work) runs in the service while the same event loop serves
``/healthz`` to a client polling every 10 ms and a heartbeat coroutine measures how late the loop
wakes it. Three ways to run the search:

- ``cooperative``: what the server does (``extender/state/cooperative.py``), for several slice
  lengths;
- ``blocking``: the search on the loop, in one piece (the code before issue 13);
- ``thread``: the search on a worker thread (``asyncio.to_thread``), which the service cannot do
  safely — the store and caches it reads change in place on the loop — measured to show what the
  GIL alone would give.

Prints one table: the search's wall time, how many ``/healthz`` probes fell due during it and
their latencies counted from when each was due (median, 99th percentile, worst), and how late the
heartbeat woke (99th percentile, worst)::

    python -m bench.loop_stall [--units 5 --devices 20] [--repeat 3] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from extender.backends.embedded import EmbeddedBackend
from extender.server import ServerSettings, create_app
from extender.state.service import SchedulingService
from tests import manifests as m
from tests.pathological import counter_pool, greedy_claim

HEARTBEAT_SECONDS = 0.01
PROBE_SECONDS = 0.01


def _service(devices: int, units: int, slice_seconds: float) -> SchedulingService:
    objects = [m.gpu_class(), m.node("node-1"), *counter_pool("node-1", devices=devices, units=units)]
    objects += [greedy_claim("greedy", units=units), m.pod("greedy", "greedy")]
    service = SchedulingService(backend=EmbeddedBackend(objects), hold_seconds=0, filter_timeout_seconds=0)
    service.cluster.slice_seconds = slice_seconds
    return service


def _runner(mode: str, service: SchedulingService) -> Callable[[], Awaitable[Any]]:
    pod, nodes = m.pod("greedy", "greedy"), ["node-1"]
    if mode == "cooperative":
        return lambda: service.filter_and_recover(pod, nodes)
    if mode == "thread":
        return lambda: asyncio.to_thread(service.filter, pod, nodes)

    async def blocking() -> Any:
        return service.filter(pod, nodes)

    return blocking


async def _heartbeat(done: asyncio.Event, samples: list[tuple[float, float]]) -> None:
    """(due, how late the loop woke us) every HEARTBEAT_SECONDS."""
    while not done.is_set():
        due = time.perf_counter() + HEARTBEAT_SECONDS
        await asyncio.sleep(HEARTBEAT_SECONDS)
        samples.append((due, max(0.0, time.perf_counter() - due)))


async def _probe(url: str, done: asyncio.Event, samples: list[tuple[float, float]]) -> None:
    """(due, answered after) for a GET every PROBE_SECONDS, counted from when it was due: a probe
    the stalled loop could not even send is late by the stall."""
    async with aiohttp.ClientSession() as session:
        due = time.perf_counter()
        while not done.is_set():
            async with session.get(url) as response:
                await response.read()
            samples.append((due, time.perf_counter() - due))
            due = max(due + PROBE_SECONDS, time.perf_counter())
            await asyncio.sleep(max(0.0, due - time.perf_counter()))


async def _one_run(mode: str, slice_seconds: float, devices: int, units: int) -> dict[str, Any]:
    service = _service(devices, units, slice_seconds)
    runner = web.AppRunner(create_app(service, ServerSettings()))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    done = asyncio.Event()
    lateness: list[tuple[float, float]] = []
    latencies: list[tuple[float, float]] = []
    tasks = [
        asyncio.create_task(_heartbeat(done, lateness)),
        asyncio.create_task(_probe(f"http://127.0.0.1:{port}/healthz", done, latencies)),
    ]
    await asyncio.sleep(0.2)  # the probes settle
    started = time.perf_counter()
    outcome = await _runner(mode, service)()
    ended = time.perf_counter()
    await asyncio.sleep(0.1)  # probes that fell due during the search are answered now
    done.set()
    await asyncio.gather(*tasks)
    await runner.cleanup()
    assert not outcome.node_names and not outcome.error, outcome  # the search ran to its end

    def during(samples: list[tuple[float, float]]) -> list[float]:
        """The samples whose wait overlapped the search."""
        return [value for due, value in samples if due <= ended and due + value >= started]

    return {"seconds": ended - started, "healthz": during(latencies), "lateness": during(lateness)}


def _ms(values: list[float], q: float) -> str:
    if not values:
        return "—"
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--devices", type=int, default=20, help="partitions in the pool (default 20)")
    parser.add_argument("--units", type=int, default=5, help="counter units; the claim asks one more (default 5)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per row, the median search time shown")
    parser.add_argument("--quick", action="store_true", help="a tiny search, one run per row: a smoke test")
    args = parser.parse_args(argv)
    if args.quick:
        args.devices, args.units, args.repeat = 12, 3, 1
    rows = [("blocking", 0.005), ("thread", 0.005)] + [("cooperative", s) for s in (0.001, 0.002, 0.005, 0.02)]
    print(
        f"Python {platform.python_version()} ({sys.implementation.name}), {args.devices} partitions, "
        f"{args.units} units, claim for {args.units + 1}, best of {args.repeat} by search time"
    )
    print()
    print("| mode | slice ms | search s | /healthz answered | p50 ms | p99 ms | max ms | loop lag p99 ms | max ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mode, slice_seconds in rows:
        runs = [asyncio.run(_one_run(mode, slice_seconds, args.devices, args.units)) for _ in range(args.repeat)]
        run = sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]
        healthz, lag = run["healthz"], run["lateness"]
        median = statistics.median(healthz) if healthz else 0.0
        slice_text = f"{slice_seconds * 1000:g}" if mode == "cooperative" else "—"
        print(
            f"| {mode} | {slice_text} | {run['seconds']:.2f} | {len(healthz)} | {median * 1000:.1f} | "
            f"{_ms(healthz, 0.99)} | {_ms(healthz, 1.0)} | {_ms(lag, 0.99)} | {_ms(lag, 1.0)} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
