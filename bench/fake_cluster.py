"""The benchmark's API server in a process of its own: the strict fake (``tests/fakes``) holding a
generated cluster, with the resourceclaim controller model and an injected latency.

``bench.pipeline`` runs it so that kube-scheduler's model, the API server and the extender are
three processes, as on a cluster (with the fake in the model's process, the model's serial cycle
waited for the fake's work on the same event loop). Not meant to be run by hand::

    python -m bench.fake_cluster --cluster cluster.json --port 0 --admin-port 0 --latency 0.005

It prints one line of JSON when it listens (``{"url": ..., "admin": ...}``), then serves until
SIGINT/SIGTERM. The admin app answers ``GET /requests?since=N`` with the API requests recorded
from the N-th on (not watches), counted by verb as ``bench.pipeline`` names them, and ``GET /mark``
with the current count.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import signal
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

import orjson
from aiohttp import web

__all__ = ["main"]


async def serve(args: argparse.Namespace) -> None:
    from bench.pipeline import ClaimController, seed_fake, verb_of
    from tests.fakes import FakeApiServer

    with open(args.cluster, "rb") as fh:
        document = orjson.loads(fh.read())
    objects: list[dict[str, Any]] = document["items"] if document.get("kind") == "List" else [document]
    async with FakeApiServer.running(bookmark_interval=None, rng=random.Random(args.seed)) as fake:
        seed_fake(fake, objects, pods=not args.no_pods)
        del objects, document
        controller = ClaimController(fake, delay=args.controller_delay, rate=args.controller_rate, seed=args.seed)
        controller.start()
        controller.enqueue_existing()
        if args.latency > 0:
            fake.delay(path="", seconds=args.latency, watch=False)

        async def requests(request: web.Request) -> web.Response:
            since = int(request.query.get("since", "0"))
            skip = request.query.get("skip-agent")
            counts = Counter(
                verb_of(r) for r in fake.requests[since:] if not r.is_watch and (not skip or r.user_agent != skip)
            )
            return web.Response(body=orjson.dumps(counts), content_type="application/json")

        async def mark(_request: web.Request) -> web.Response:
            return web.Response(body=orjson.dumps({"mark": len(fake.requests)}), content_type="application/json")

        admin = web.Application()
        admin.router.add_get("/requests", requests)
        admin.router.add_get("/mark", mark)
        runner = web.AppRunner(admin, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", args.admin_port)
        await site.start()
        admin_port = runner.addresses[0][1]
        print(orjson.dumps({"url": fake.url, "admin": f"http://127.0.0.1:{admin_port}"}).decode(), flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            await controller.stop()
            with contextlib.suppress(Exception):
                await runner.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fake_cluster", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--cluster", required=True)
    parser.add_argument("--admin-port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.005)
    parser.add_argument("--controller-delay", type=float, default=0.02)
    parser.add_argument("--controller-rate", type=float, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-pods", action="store_true", help="leave the pods for the model to create")
    args = parser.parse_args(argv)
    from extender.server.eventloop import new_event_loop

    with asyncio.Runner(loop_factory=lambda: new_event_loop("auto")[0]) as runner:
        runner.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
