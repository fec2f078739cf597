"""Initial sync of the Kubernetes backend against the fake API server: N slices x D devices.

Run from the repository root::

    python -m bench.kube_sync                      # 5000 slices x 10 devices, 3 runs
    python -m bench.kube_sync --slices 1000 --devices 8 --repeat 5 --json out.json

Seeds ``tests.fakes.FakeApiServer`` (in this process, on loopback) with one DeviceClass, one Node
per slice and N ResourceSlices of D devices each (10 attributes and 2 capacities per device, as
as a typical GPU driver publishes), then times ``KubeBackend.start()`` + ``wait_synced()``: discovery,
the access probe, and five paged LISTs (500 per page) decoded with orjson into the store.
The fake serves its pages from the same process and core, so its own encoding time is included:
the figure is an upper bound for the client side. Also prints the ResourceSlice reflector's LIST
time and the RSS growth. Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import sys
import time
from typing import Any

import aiohttp
import orjson

V1 = "resource.k8s.io/v1"


def device(index: int) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "model": {"string": "LATEST-GPU-MODEL"},
        "uuid": {"string": f"gpu-{index:08d}-5c1a-4e2b-9d7f"},
        "driverVersion": {"version": "1.2.3"},
        "index": {"int": index % 8},
        "numa": {"int": index % 2},
        "pcieRoot": {"string": f"pci0000:{index % 4:02x}"},
        "sharing": {"bool": False},
        "productName": {"string": "Example Accelerator 80GB"},
        "architecture": {"string": "Example"},
        "brand": {"string": "Example"},
    }
    capacity = {"memory": {"value": "80Gi"}, "cores": {"value": "132"}}
    return {"name": f"gpu-{index}", "attributes": attributes, "capacity": capacity}


def objects(slices: int, devices: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {
            "apiVersion": V1,
            "kind": "DeviceClass",
            "metadata": {"name": "gpu"},
            "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]},
        }
    ]
    for n in range(slices):
        node = f"node-{n:05d}"
        out.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {"zone": f"z{n % 3}"}}})
        out.append(
            {
                "apiVersion": V1,
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-gpu.example.com"},
                "spec": {
                    "driver": "gpu.example.com",
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": [device(n * devices + i) for i in range(devices)],
                },
            }
        )
    return out


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def one_run(slices: int, devices: int) -> dict[str, float]:
    from extender.backends.kube import ClusterConfig, KubeBackend, KubeSettings
    from tests.fakes import FakeApiServer

    async with FakeApiServer.running(bookmark_interval=None) as fake:
        for obj in objects(slices, devices):
            fake.put_object(obj)
        payload = sum(len(orjson.dumps(o)) for o in fake.objects("ResourceSlice", group="resource.k8s.io"))
        gc.collect()
        rss_before = rss_mb()
        backend = KubeBackend(ClusterConfig(host=fake.url), settings=KubeSettings(freeze_gc=False, requeue=None))
        started = time.perf_counter_ns()
        await backend.start()
        await backend.wait_synced(600)
        elapsed = (time.perf_counter_ns() - started) / 1e6
        row = {
            "sync_ms": elapsed,
            "slice_list_ms": backend.reflectors["ResourceSlice"].list_seconds * 1000,
            "rss_mb": rss_mb() - rss_before,
            "payload_mb": payload / 1e6,
            "devices": float(backend.store.device_count()),
        }
        await backend.stop()
        return row


def header() -> str:
    return (
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, aiohttp {aiohttp.__version__}, "
        f"orjson {orjson.__version__}, gc default (no freeze during the measurement), fake apiserver in-process"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slices", type=int, default=5000)
    parser.add_argument("--devices", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    rows = [asyncio.run(one_run(args.slices, args.devices)) for _ in range(args.repeat)]
    sync = [r["sync_ms"] for r in rows]
    lists = [r["slice_list_ms"] for r in rows]
    items = args.slices * args.devices
    print(header())
    print()
    print("| scenario | n | best ms | median ms | µs/item | search steps |")
    print("|---|---|---|---|---|---|")
    size = f"{args.slices} slices x {args.devices} devices"
    for name, values in (("initial sync (start to synced)", sync), ("ResourceSlice LIST + ingest", lists)):
        best, median = min(values), statistics.median(values)
        per_item = best * 1000 / items
        print(f"| {name}, {size} | {len(values)} | {best:.0f} | {median:.0f} | {per_item:.1f} | - |")
    print()
    print(
        f"slice payload {rows[0]['payload_mb']:.1f} MB JSON, devices in store {int(rows[0]['devices'])}, "
        f"RSS growth {statistics.median(r['rss_mb'] for r in rows):.0f} MB"
    )
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"header": header(), "args": vars(args), "rows": rows}, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
