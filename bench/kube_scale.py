"""One replica at 15 000 nodes through the kube backend (issue 26, part 3), on a real API server.

Run from the repository root, with the control-plane binaries (docs/testing.md)::

    export KUBEBUILDER_ASSETS=~/.cache/dra-extender/k8s/v1.36.3
    python -m bench.kube_scale                                  # 15 000 nodes x 8 GPUs + 2 NICs
    python -m bench.kube_scale --nodes 2000 --requests 50 --json out.json

What it does, in order:

1. A real control plane (``tests/controlplane``: etcd, kube-apiserver, kube-controller-manager) with
   ``deploy/base`` applied (its ServiceAccount and RBAC), and the cluster ``bench.cluster_gen``
   generates: ``--nodes`` Node objects, each with a slice of ``--gpus`` GPUs and one of ``--nics``
   NICs, created 32 requests at a time (timed, not measured).
2. ``dra-extender serve --kubeconfig`` with the ServiceAccount's token, as the Deployment runs it:
   seconds to its port answering and to ``/readyz`` 200 (paged LISTs, watches, cache warm-up), its
   RSS then and at the end (VmRSS, and the peak VmHWM), and the slowest ``/healthz`` answer between
   the two: ``/healthz`` is asked every 10 ms, each answer timed from when it fell due, so the
   slowest one bounds the longest stall of the extender's event loop.
3. A warm pod shape (one GPU, a ResourceClaim in the API): ``--requests`` filters over every node's
   name (nodeCacheCapable bodies, as kube-scheduler sends them), then as many prioritizes over the
   filter's answer, timed at the client: p50 / p99 / max.
4. New pod shapes, each a claim spec no pod asked for before (more GPUs, a GPU and a NIC on one PCIe
   root, a CEL selector no class has): for each, filter then prioritize over every node, timed end
   to end, while ``/healthz`` is still asked every 10 ms and warm filters go on back to back. Their
   slowest answers during the new shapes say whether one pod's first decision held up the others.

Prints one table; ``--json`` writes the figures. docs/performance.md, "Large clusters", has the
results and what they mean.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench import cluster_gen
from bench.common import cpu_seconds, free_port, percentile
from bench.http_client import LeanClient
from bench.real_scheduler import SETUP_CONCURRENCY, AdminPlane, Client, _bounded
from bench.service import rss_mb

ROOT = Path(__file__).resolve().parents[1]
V1 = "resource.k8s.io/v1"
NAMESPACE = "bench-scale"
GPU, NIC = cluster_gen.GPU_DRIVER, cluster_gen.NIC_DRIVER
#: How often /healthz is asked while the loop's stalls are watched.
PROBE_INTERVAL_S = 0.010


def _exactly(name: str, device_class: str, count: int = 1, selector: str = "") -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if selector:
        body["selectors"] = [{"cel": {"expression": selector}}]
    return {"name": name, "exactly": body}


#: The warm shape, then the new ones (claim name -> spec.devices).
WARM = ("one-gpu", {"requests": [_exactly("gpu", GPU)]})
NEW_SHAPES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("two-gpus", {"requests": [_exactly("gpu", GPU, 2)]}),
    ("four-gpus-one-numa", {
        "requests": [_exactly("gpu", GPU, 4)],
        "constraints": [{"requests": ["gpu"], "matchAttribute": f"{GPU}/numaNode"}],
    }),
    ("gpu-and-nic-one-root", {
        "requests": [_exactly("gpu", GPU), _exactly("nic", NIC)],
        "constraints": [{"requests": ["gpu", "nic"], "matchAttribute": cluster_gen.PCIE_ROOT}],
    }),
    ("gpu-by-cel", {"requests": [_exactly(
        "gpu", GPU, selector=f'device.capacity["{GPU}"].memory.compareTo(quantity("40Gi")) >= 0 '
        f'&& device.attributes["{GPU}"].index < 6',
    )]}),
    ("large-gpu-class", {"requests": [_exactly("gpu", f"large-{GPU}")]}),
)  # fmt: skip


@dataclass
class Result:
    nodes: int
    devices_per_node: int
    objects: int = 0
    setup_s: float = 0.0
    listening_s: float = 0.0
    ready_s: float = 0.0
    #: from the extender's log: each kind's LIST, the caches' warm-up
    list_ms: dict[str, float] = field(default_factory=dict)
    warm_up_ms: float = 0.0
    rss_ready_mib: float = 0.0
    rss_end_mib: float = 0.0
    rss_peak_mib: float = 0.0
    start_cpu_s: float = 0.0
    #: /healthz from listening to ready: answers, p99 and slowest (ms from when each fell due)
    start_probes: int = 0
    start_probe_p99_ms: float = 0.0
    start_probe_max_ms: float = 0.0
    filter_ms: dict[str, float] = field(default_factory=dict)
    prioritize_ms: dict[str, float] = field(default_factory=dict)
    #: new shape -> (filter ms, prioritize ms, nodes that fit)
    new_shapes: dict[str, tuple[float, float, int]] = field(default_factory=dict)
    new_probe_max_ms: float = 0.0
    new_probe_p99_ms: float = 0.0
    concurrent_filters: int = 0
    concurrent_filter_max_ms: float = 0.0


def _stats(values: Sequence[float]) -> dict[str, float]:
    return {
        "p50": round(statistics.median(values), 1),
        "p99": round(percentile(values, 99), 1),
        "max": round(max(values), 1),
        "n": len(values),
    }


def cluster_objects(nodes: int, gpus: int, nics: int) -> list[dict[str, Any]]:
    spec = cluster_gen.ClusterSpec(nodes=nodes, devices=gpus, nics=nics, pods=0)
    return [o for o in cluster_gen.generate(spec) if o["kind"] in ("DeviceClass", "Node", "ResourceSlice")]


async def create_objects(client: Client, objects: Sequence[dict[str, Any]]) -> int:
    """DeviceClasses first, then Nodes and slices, ``SETUP_CONCURRENCY`` requests at a time. The
    Nodes stay as created (no kubelet): the extender reads their names and labels only."""
    paths = {
        "DeviceClass": f"/apis/{V1}/deviceclasses",
        "Node": "/api/v1/nodes",
        "ResourceSlice": f"/apis/{V1}/resourceslices",
    }
    classes = [o for o in objects if o["kind"] == "DeviceClass"]
    rest = [o for o in objects if o["kind"] != "DeviceClass"]
    for obj in classes:
        await client.create(paths["DeviceClass"], obj)
    await _bounded(rest, lambda o: client.create(paths[o["kind"]], o), SETUP_CONCURRENCY)
    return len(objects)


def _claim(name: str, devices: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": V1, "kind": "ResourceClaim", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"devices": devices}}  # fmt: skip


def _pod(name: str, claim: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"00000000-0000-4000-8000-{abs(hash(name)) % 10**12:012d}",
        },
        "spec": {
            "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "c"}]}}],
            "resourceClaims": [{"name": "c", "resourceClaimName": claim}],
        },
    }


class Prober:
    """``/healthz`` every ``PROBE_INTERVAL_S``, each answer timed from when it fell due (a late
    answer, or a probe sent late because the previous one was slow, both count)."""

    def __init__(self, http: LeanClient) -> None:
        self.http = http
        self.latencies: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> list[float]:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        return self.latencies

    async def _run(self) -> None:
        due = time.perf_counter()
        while True:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                status, _ = await self.http.request("GET", "/healthz", b"")
                if status == 200:
                    self.latencies.append((time.perf_counter() - due) * 1000)
            due = max(due + PROBE_INTERVAL_S, time.perf_counter() - PROBE_INTERVAL_S)
            await asyncio.sleep(max(0.0, due - time.perf_counter()))


class Scale(AdminPlane):
    """The control plane and cluster for one size (context manager), then ``measure``."""

    def __init__(self, assets: Any, folder: Path, nodes: int, gpus: int, nics: int) -> None:
        super().__init__(assets, folder)
        self.nodes, self.gpus, self.nics = nodes, gpus, nics
        self.result = Result(nodes, gpus + nics)

    def _populate(self) -> None:
        objects = cluster_objects(self.nodes, self.gpus, self.nics)
        self.node_names = [o["metadata"]["name"] for o in objects if o["kind"] == "Node"]
        started = time.monotonic()
        self.result.objects = asyncio.run(self._with_client(lambda c: create_objects(c, objects)))
        self.result.setup_s = round(time.monotonic() - started, 1)
        self.plane.admin.create(
            "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        )
        for name, devices in (WARM, *NEW_SHAPES):
            self.plane.admin.create(f"/apis/{V1}/namespaces/{NAMESPACE}/resourceclaims", _claim(name, devices))

    def measure(self, requests: int, timeout: float) -> Result:
        port = free_port()
        log = self.folder / "dra-extender.log"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "DRA_EXTENDER_LOG_FORMAT": "json"}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        command = [sys.executable, "-m", "extender", "serve", "--kubeconfig", str(self.deployment.kubeconfig),
                   "--listen", f"127.0.0.1:{port}", "--log-level", "info"]  # fmt: skip
        started = time.perf_counter()
        with log.open("ab") as out:
            process = subprocess.Popen(
                command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
            )
        try:
            asyncio.run(self._measure(process, port, started, requests, timeout))
        finally:
            _, self.result.rss_peak_mib = rss_mb(process.pid)
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._read_log(log)
        return self.result

    async def _measure(
        self, process: subprocess.Popen[bytes], port: int, started: float, requests: int, timeout: float
    ) -> None:
        result = self.result
        deadline = time.monotonic() + timeout
        async with LeanClient("127.0.0.1", port, 4) as http:
            while True:  # the port answering
                if process.poll() is not None:
                    raise RuntimeError(f"dra-extender serve exited with {process.returncode}: see {self.folder}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"dra-extender serve not listening within {timeout:.0f} s")
                with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                    await http.request("GET", "/healthz", b"")
                    break
                await asyncio.sleep(0.05)
            result.listening_s = round(time.perf_counter() - started, 2)
            prober = Prober(http)
            prober.start()
            while (await http.request("GET", "/readyz", b""))[0] != 200:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"dra-extender serve not ready: see {self.folder}")
                await asyncio.sleep(0.05)
            result.ready_s = round(time.perf_counter() - started, 2)
            result.start_cpu_s = round(cpu_seconds(process.pid), 1)
            probes = await prober.stop()
            result.start_probes = len(probes)
            if probes:
                result.start_probe_p99_ms = round(percentile(probes, 99), 1)
                result.start_probe_max_ms = round(max(probes), 1)
            result.rss_ready_mib = round(rss_mb(process.pid)[0])
            for name, _ in (WARM, *NEW_SHAPES):  # the extender has seen every claim
                while (await http.request("GET", f"/debug/resourceclaims/{NAMESPACE}/{name}", b""))[0] != 200:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"claim {name} never reached the extender")
                    await asyncio.sleep(0.05)
            await self._warm(http, requests)
            await self._new_shapes(http)
            result.rss_end_mib = round(rss_mb(process.pid)[0])

    async def _verb(self, http: LeanClient, verb: str, pod: dict[str, Any], names: bytes) -> tuple[Any, float]:
        body = b'{"Pod":' + orjson.dumps(pod) + b',"Nodes":null,"NodeNames":' + names + b"}"
        start = time.perf_counter()
        status, raw = await http.post(f"/{verb}", body)
        elapsed = (time.perf_counter() - start) * 1000
        if status != 200:
            raise RuntimeError(f"{verb}: HTTP {status}: {raw[:300]!r}")
        answer = orjson.loads(raw)
        if verb == "filter" and answer.get("Error"):
            raise RuntimeError(f"filter answered Error: {answer['Error']}")
        return answer, elapsed

    async def _warm(self, http: LeanClient, requests: int) -> None:
        pod, names = _pod("warm", WARM[0]), orjson.dumps(self.node_names)
        answer, _ = await self._verb(http, "filter", pod, names)  # the shape's first decision
        passed = orjson.dumps(answer["NodeNames"])
        await self._verb(http, "prioritize", pod, passed)
        filters = [(await self._verb(http, "filter", pod, names))[1] for _ in range(requests)]
        scores = [(await self._verb(http, "prioritize", pod, passed))[1] for _ in range(requests)]
        self.result.filter_ms, self.result.prioritize_ms = _stats(filters), _stats(scores)

    async def _new_shapes(self, http: LeanClient) -> None:
        result, names = self.result, orjson.dumps(self.node_names)
        warm = _pod("warm", WARM[0])
        others: list[float] = []
        done = asyncio.Event()

        async def warm_filters() -> None:  # another pod's filters, back to back, on their own connection
            async with LeanClient(http.host, http.port, 1) as own:
                while not done.is_set():
                    others.append((await self._verb(own, "filter", warm, names))[1])

        async with LeanClient(http.host, http.port, 1) as probe_http:
            prober = Prober(probe_http)
            prober.start()
            background = asyncio.create_task(warm_filters())
            try:
                for name, _ in NEW_SHAPES:
                    pod = _pod(f"new-{name}", name)
                    answer, filter_ms = await self._verb(http, "filter", pod, names)
                    fit = answer["NodeNames"] or []
                    _, prioritize_ms = await self._verb(http, "prioritize", pod, orjson.dumps(fit))
                    result.new_shapes[name] = (round(filter_ms, 1), round(prioritize_ms, 1), len(fit))
            finally:
                done.set()
                await background
                probes = await prober.stop()
        result.new_probe_max_ms = round(max(probes), 1) if probes else 0.0
        result.new_probe_p99_ms = round(percentile(probes, 99), 1) if probes else 0.0
        result.concurrent_filters = len(others)
        result.concurrent_filter_max_ms = round(max(others), 1) if others else 0.0

    def _read_log(self, log: Path) -> None:
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if event.get("event") == "watch.listed" and event.get("resource") not in self.result.list_ms:
                    self.result.list_ms[event["resource"]] = event.get("duration_ms", 0.0)
                elif event.get("event") == "caches.warmed":
                    self.result.warm_up_ms = event.get("duration_ms", 0.0)


def table(r: Result) -> str:
    lists = ", ".join(f"{k} {v / 1000:.1f} s" for k, v in sorted(r.list_ms.items(), key=lambda kv: -kv[1])[:3])
    f, p = r.filter_ms, r.prioritize_ms
    lines = [
        f"| {r.nodes} nodes x {r.devices_per_node} devices | |",
        "|---|---|",
        f"| objects created | {r.objects} in {r.setup_s:g} s |",
        f"| port answering / ready | {r.listening_s:g} s / {r.ready_s:g} s (longest LISTs: {lists}; "
        f"warm-up {r.warm_up_ms / 1000:.1f} s; CPU {r.start_cpu_s:g} s) |",
        f"| /healthz while starting | {r.start_probes} answers, p99 {r.start_probe_p99_ms:g} ms, "
        f"slowest {r.start_probe_max_ms:g} ms |",
        f"| RSS ready / end / peak | {r.rss_ready_mib:g} / {r.rss_end_mib:g} / {r.rss_peak_mib:.0f} MiB |",
        f"| warm filter, {r.nodes} names (n={f.get('n')}) | p50 {f.get('p50')} / p99 {f.get('p99')} / "
        f"max {f.get('max')} ms |",
        f"| warm prioritize (n={p.get('n')}) | p50 {p.get('p50')} / p99 {p.get('p99')} / max {p.get('max')} ms |",
    ]
    for name, (filter_ms, prioritize_ms, fit) in r.new_shapes.items():
        lines.append(
            f"| new shape {name} | filter {filter_ms:g} + prioritize {prioritize_ms:g} = "
            f"{filter_ms + prioritize_ms:.1f} ms ({fit} nodes fit) |"
        )
    lines.append(
        f"| while the new shapes ran | /healthz p99 {r.new_probe_p99_ms:g} ms, slowest {r.new_probe_max_ms:g} ms; "
        f"{r.concurrent_filters} warm filters of another pod, slowest {r.concurrent_filter_max_ms:g} ms |"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.kube_scale", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=15000, help="Nodes, one GPU and one NIC slice each (15000)")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node (8)")
    parser.add_argument("--nics", type=int, default=2, help="NICs per node (2)")
    parser.add_argument("--requests", type=int, default=200, help="warm filters and prioritizes (200 each)")
    parser.add_argument("--timeout", type=float, default=900.0, help="bound on the extender's start, s (900)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    from tests.controlplane.assets import AssetsMissing, find_assets

    try:
        assets = find_assets()
    except AssetsMissing as exc:
        print(f"bench.kube_scale needs the control-plane binaries: {exc}", file=sys.stderr)
        return 2
    print(f"Python {platform.python_version()} ({platform.python_implementation()}), {os.cpu_count()} CPUs")
    folder = Path(tempfile.mkdtemp(prefix="dra-kube-scale-"))
    keep = bool(os.environ.get("BENCH_KEEP"))
    try:
        with Scale(assets, folder, args.nodes, args.gpus, args.nics) as scale:
            print(f"  {scale.result.objects} objects created in {scale.result.setup_s:g} s", flush=True)
            result = scale.measure(args.requests, args.timeout)
    except BaseException:
        keep = True
        print(f"failed: the components' logs are in {folder}", file=sys.stderr)
        raise
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
    print()
    print(table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(result), indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
