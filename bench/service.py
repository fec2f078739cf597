"""Service benchmark over HTTP: verb latencies, scheduled pods/s, cold start and RSS by cluster size.

Run from the repository root::

    python -m bench.service                           # 100, 500, 1000, 5000 nodes x 10 devices
    python -m bench.service --sizes 100,500 --plot docs/performance-curves.png --json out.json
    python -m bench.service --quick                   # tiny sizes; the CI smoke run

For every size it generates a cluster with ``bench.cluster_gen`` (GPU nodes, the default mix of
template, direct and shared-claim pods, no unschedulable pods) as JSON, then:

1. starts a server subprocess, ``python -m bench.service serve``: the same objects as
   ``dra-extender serve --cluster`` builds (EmbeddedBackend, SchedulingService, create_app, JSON logs at
   info to /dev/null), in a process that can run under cProfile (``--profile-dir``). **Cold start** is
   the time from spawning it to the first filter answered (load + sync + cache warm-up + first filter);
2. **filter** and **prioritize** latency: one-GPU pods reserved for probing (never bound), sent
   one at a time with ``NodeNames`` = every node (nodeCacheCapable), after a warm-up round;
3. **end-to-end**: pods in generation order: filter over all nodes, prioritize over the survivors
   (skipped when one survives), bind to the best extender score. Binds run concurrently with the
   next pods (at most ``--binds-in-flight``). A pod answered with ``Error`` is requeued at once.
   This loop has none of kube-scheduler's own scores, backoffs or API latency: for what a real
   scheduler sees use ``bench.pipeline`` (docs/pipeline.md). ``pods/s`` = bound pods / elapsed;
   **bind** latency comes from this loop;
4. **RSS**: VmRSS of the server process (``/proc/PID/status``) after the end-to-end loop, and VmHWM;
5. **cold start (serve CLI)**: ``python -m extender serve --cluster FILE`` from spawn to the first
   filter answered, given up after ``--cli-timeout`` seconds.

The client is ``bench.http_client.LeanClient`` on the same machine and event loop choice as the
server (its time is in the latencies, as kube-scheduler's would be).
Prints a Markdown table and target verdicts; ``--plot PATH`` writes a PNG of the curves when matplotlib
is importable; ``--json PATH`` writes the rows. Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench import cluster_gen
from bench.common import cpu_seconds, free_port, percentile, positive_ints
from bench.http_client import LeanClient
from extender.server.eventloop import EVENT_LOOPS, event_loop_name, new_event_loop

__all__ = ["Row", "main", "run_size"]

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SIZES = (100, 500, 1000, 5000)
#: Targets of issue 6 on a 2-core machine.
TARGET_FILTER_P99_MS = {500: 5.0, 5000: 30.0}
TARGET_PODS_PER_S = {500: 300.0}
TARGET_RSS_MB = {5000: 400.0}


@dataclass
class Row:
    nodes: int
    devices: int
    pods: int
    filter_p50_ms: float = 0.0
    filter_p99_ms: float = 0.0
    prioritize_p50_ms: float = 0.0
    prioritize_p99_ms: float = 0.0
    bind_p50_ms: float = 0.0
    bind_p99_ms: float = 0.0
    pods_per_s: float = 0.0
    bound: int = 0
    unschedulable: int = 0
    requeued: int = 0
    bind_errors: int = 0
    cold_start_s: float = 0.0
    cli_cold_start_s: float | None = None
    cli_note: str = ""
    rss_mb: float = 0.0
    hwm_mb: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


# --- the server side ----------------------------------------------------------------------------------


def serve(
    cluster: str, port: int, log_level: str, profile: str | None, gc_mode: str = "default", event_loop: str = "auto"
) -> int:
    """What ``dra-extender serve --cluster`` does, in a process the benchmark can profile.

    ``gc_mode="freeze"`` adds ``gc.collect(); gc.freeze()`` once more after the app's start-up (the
    server already freezes after its warm-up): a what-if for the collector's cost."""
    from extender.backends.embedded import EmbeddedBackend
    from extender.cli import DEFAULT_SCORING
    from extender.core.scoring import ScoringPolicy
    from extender.logconfig import configure_logging
    from extender.manifests import ManifestError
    from extender.server.app import create_app, run
    from extender.server.settings import ServerSettings
    from extender.state.service import SchedulingService

    configure_logging("json", log_level)
    try:
        backend = EmbeddedBackend.from_paths(cluster)  # JSON through orjson, as the CLI reads it
    except ManifestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    service = SchedulingService(backend=backend, scoring=ScoringPolicy.parse(DEFAULT_SCORING))
    app = create_app(service, ServerSettings(host="127.0.0.1", port=port, event_loop=event_loop))
    if gc_mode == "freeze":
        app.on_startup.append(_freeze)  # after create_app's own startup (load, warm-up)
    if profile is None:
        run(app)
        return 0
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        run(app)
    finally:
        profiler.disable()
        profiler.dump_stats(profile)
    return 0


async def _freeze(_app: Any) -> None:
    import gc

    gc.collect()
    gc.freeze()


def rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MB, from /proc; zeros where /proc is missing."""
    values = {"VmRSS": 0.0, "VmHWM": 0.0}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in values:
                    values[key] = int(rest.split()[0]) / 1024  # kB -> MiB
    except OSError:
        pass
    return values["VmRSS"], values["VmHWM"]


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)  # aiohttp shuts down cleanly (and a profile gets written)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --- the client side ----------------------------------------------------------------------------------


_SCORE = itemgetter("Score")


class Client:
    """The extender verbs as kube-scheduler sends them (nodeCacheCapable: NodeNames only), over
    ``bench.http_client.LeanClient`` (see there why not aiohttp's client)."""

    def __init__(self, http: LeanClient, node_names: list[str]) -> None:
        self.http = http
        self.node_names = node_names
        # Every filter names every node: encoded once, as a Go client's cost per request is far
        # below this benchmark's (the server parses the names afresh each time all the same).
        self._all_nodes = b',"Nodes":null,"NodeNames":' + orjson.dumps(node_names) + b"}"

    async def post(self, verb: str, body: Any) -> tuple[Any, float]:
        return await self.post_bytes(verb, orjson.dumps(body))

    async def post_bytes(self, verb: str, data: bytes) -> tuple[Any, float]:
        start = time.perf_counter()
        status, raw = await self.http.post(f"/{verb}", data)
        elapsed = (time.perf_counter() - start) * 1000
        if status != 200:
            raise RuntimeError(f"{verb}: HTTP {status}: {raw[:200]!r}")
        return orjson.loads(raw), elapsed

    async def filter(self, pod: dict[str, Any], nodes: list[str] | None = None) -> tuple[dict[str, Any], float]:
        if nodes is None:
            return await self.post_bytes("filter", b'{"Pod":' + orjson.dumps(pod) + self._all_nodes)
        return await self.post("filter", {"Pod": pod, "Nodes": None, "NodeNames": nodes})

    async def prioritize(self, pod: dict[str, Any], nodes: list[str]) -> tuple[list[dict[str, Any]], float]:
        answer, ms = await self.post("prioritize", {"Pod": pod, "Nodes": None, "NodeNames": nodes})
        return answer, ms

    async def bind(self, pod: dict[str, Any], node: str) -> tuple[dict[str, Any], float]:
        meta = pod["metadata"]
        body = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}
        answer, ms = await self.post("bind", body)
        return answer, ms


async def wait_ready(
    session: aiohttp.ClientSession, base: str, process: subprocess.Popen[bytes], timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with code {process.returncode}")
        try:
            async with session.get(f"{base}/readyz") as response:
                if response.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.02)
    raise TimeoutError(f"server not ready after {timeout:.0f} s")


async def cold_start(
    command: list[str], base: str, probe: dict[str, Any], node_names: list[str], timeout: float
) -> tuple[float, subprocess.Popen[bytes]]:
    """Seconds from spawning ``command`` to its first filter answered; returns the running process."""
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        async with aiohttp.ClientSession() as session:
            await wait_ready(session, base, process, timeout)
        host, _, port = base.removeprefix("http://").partition(":")
        async with LeanClient(host, int(port), 1) as http:
            answer, _ = await Client(http, node_names).filter(probe)
            if answer.get("Error"):
                raise RuntimeError(f"first filter answered Error: {answer['Error']}")
    except BaseException:
        stop(process)
        raise
    return time.perf_counter() - start, process


async def probe_latencies(
    client: Client, probes: list[dict[str, Any]], requests: int, seconds: float
) -> dict[str, list[float]]:
    """Filter, then prioritize, one request at a time, cycling over the probe pods: ``requests`` per
    verb, or fewer (at least 20) when the verb's ``seconds`` run out."""
    for pod in probes:  # warm-up: the server sees every probe pod once (observe_pod copies new pods)
        await client.filter(pod)
        await client.prioritize(pod, client.node_names)
    out: dict[str, list[float]] = {"filter": [], "prioritize": []}
    deadline = time.monotonic() + seconds
    for i in range(requests):
        answer, ms = await client.filter(probes[i % len(probes)])
        if answer.get("Error") or not answer.get("NodeNames"):
            raise RuntimeError(f"probe filter failed: {answer.get('Error')!r}")
        out["filter"].append(ms)
        if i >= 20 and time.monotonic() > deadline:
            break
    deadline = time.monotonic() + seconds
    for i in range(requests):
        _, ms = await client.prioritize(probes[i % len(probes)], client.node_names)
        out["prioritize"].append(ms)
        if i >= 20 and time.monotonic() > deadline:
            break
    return out


@dataclass
class LoopResult:
    bound: int = 0
    unschedulable: int = 0
    requeued: int = 0
    bind_errors: int = 0
    elapsed_s: float = 0.0
    filter_ms: list[float] = field(default_factory=list)
    prioritize_ms: list[float] = field(default_factory=list)
    bind_ms: list[float] = field(default_factory=list)


async def schedule_loop(
    client: Client, pods: list[dict[str, Any]], *, binds_in_flight: int, time_limit: float
) -> LoopResult:
    """kube-scheduler's loop: serial scheduling cycles (filter, prioritize, pick), concurrent binds."""
    result = LoopResult()
    queue = list(reversed(pods))
    attempts: dict[str, int] = {}
    slots = asyncio.Semaphore(binds_in_flight)
    tasks: set[asyncio.Task[None]] = set()

    async def bind(pod: dict[str, Any], node: str) -> None:
        try:
            answer, ms = await client.bind(pod, node)
            result.bind_ms.append(ms)
            if answer.get("Error"):
                result.bind_errors += 1
                requeue(pod)
            else:
                result.bound += 1
        finally:
            slots.release()

    def requeue(pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        attempts[uid] = attempts.get(uid, 0) + 1
        if attempts[uid] <= 5:
            result.requeued += 1
            queue.insert(0, pod)  # the back of the queue: popped last
        else:
            result.unschedulable += 1

    start = time.perf_counter()
    while queue or tasks:
        if not queue or time.perf_counter() - start > time_limit:
            if tasks:
                await asyncio.wait(tasks)
            if not queue or time.perf_counter() - start > time_limit:
                break
            continue
        pod = queue.pop()
        answer, ms = await client.filter(pod)
        result.filter_ms.append(ms)
        if answer.get("Error"):
            requeue(pod)
            await asyncio.sleep(0)  # let in-flight binds progress before the retry
            continue
        survivors = answer.get("NodeNames") or []
        if not survivors:
            result.unschedulable += 1
            continue
        best = survivors[0]
        if len(survivors) > 1:
            scores, ms = await client.prioritize(pod, survivors)
            result.prioritize_ms.append(ms)
            if scores:
                best = max(scores, key=_SCORE)["Host"]
        await slots.acquire()
        task = asyncio.create_task(bind(pod, best))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    result.elapsed_s = time.perf_counter() - start
    return result


# --- one size -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    devices: int
    probe_requests: int
    probe_seconds: float
    loop_pods: int
    loop_seconds: float
    binds_in_flight: int
    cli_timeout: float
    server_log_level: str
    server_gc: str
    workdir: Path
    event_loop: str = "auto"
    profile_dir: Path | None = None


def probe_pods(pods: list[dict[str, Any]], count: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(probes, the rest): the first ``count`` one-GPU template pods are kept for latency probes."""
    probes = [
        p
        for p in pods
        if p["metadata"]["labels"][cluster_gen.SHAPE_LABEL] == "one-gpu"
        and p["metadata"]["labels"][cluster_gen.MIX_LABEL] == "template"
    ][:count]
    taken = {id(p) for p in probes}
    return probes, [p for p in pods if id(p) not in taken]


async def run_size(nodes: int, settings: Settings) -> Row:
    probe_count = 8
    spec = cluster_gen.ClusterSpec(
        nodes=nodes, devices=settings.devices, nics=0, pods=settings.loop_pods + 4 * probe_count, seed=nodes
    )
    objects = cluster_gen.generate(spec)
    path = settings.workdir / f"cluster-{nodes}x{settings.devices}.json"
    cluster_gen.write(objects, path)
    node_names = [o["metadata"]["name"] for o in objects if o["kind"] == "Node"]
    probes, pods = probe_pods(cluster_gen.pods_of(objects), probe_count)
    # About a third of the devices: the loop measures scheduling, not a full cluster.
    pods = pods[: min(settings.loop_pods, max(10, nodes * settings.devices // 3))]
    del objects
    row = Row(nodes=nodes, devices=settings.devices, pods=len(pods))

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "bench.service", "serve", "--cluster", str(path), "--port", str(port)]
    command += ["--log-level", settings.server_log_level, "--gc", settings.server_gc]
    command += ["--event-loop", settings.event_loop]
    if settings.profile_dir is not None:
        command += ["--profile", str(settings.profile_dir / f"server-{nodes}.prof")]
    row.cold_start_s, process = await cold_start(command, base, probes[0], node_names, timeout=600)
    try:
        async with LeanClient("127.0.0.1", port, settings.binds_in_flight + 4) as http:
            client = Client(http, node_names)
            latencies = await probe_latencies(client, probes, settings.probe_requests, settings.probe_seconds)
            row.extra["filter_samples"] = len(latencies["filter"])
            row.extra["prioritize_samples"] = len(latencies["prioritize"])
            row.filter_p50_ms = percentile(latencies["filter"], 50)
            row.filter_p99_ms = percentile(latencies["filter"], 99)
            row.prioritize_p50_ms = percentile(latencies["prioritize"], 50)
            row.prioritize_p99_ms = percentile(latencies["prioritize"], 99)
            server_cpu, client_cpu = cpu_seconds(process.pid), time.process_time()
            loop = await schedule_loop(
                client, pods, binds_in_flight=settings.binds_in_flight, time_limit=settings.loop_seconds
            )
            server_cpu, client_cpu = cpu_seconds(process.pid) - server_cpu, time.process_time() - client_cpu
        row.bound, row.unschedulable = loop.bound, loop.unschedulable
        row.requeued, row.bind_errors = loop.requeued, loop.bind_errors
        row.pods_per_s = loop.bound / loop.elapsed_s if loop.elapsed_s else 0.0
        row.bind_p50_ms = percentile(loop.bind_ms, 50)
        row.bind_p99_ms = percentile(loop.bind_ms, 99)
        row.extra |= {
            "loop_filter_p50_ms": percentile(loop.filter_ms, 50),
            "loop_filter_p99_ms": percentile(loop.filter_ms, 99),
            "loop_prioritize_p50_ms": percentile(loop.prioritize_ms, 50),
            "loop_elapsed_s": loop.elapsed_s,
            # CPU per bound pod over the loop: where the wall time goes on a 2-CPU machine
            "loop_server_cpu_ms_per_pod": 1000 * server_cpu / max(1, loop.bound),
            "loop_client_cpu_ms_per_pod": 1000 * client_cpu / max(1, loop.bound),
        }
        row.rss_mb, row.hwm_mb = rss_mb(process.pid)
    finally:
        stop(process)

    # The real command line, with its own manifest loader.
    if settings.cli_timeout <= 0:
        row.cli_note = "skipped"
        return row
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cli = [sys.executable, "-m", "extender", "serve", "--cluster", str(path), "--listen", f"127.0.0.1:{port}"]
    cli += ["--log-level", settings.server_log_level, "--log-format", "json", "--event-loop", settings.event_loop]
    try:
        row.cli_cold_start_s, process = await cold_start(cli, base, probes[0], node_names, settings.cli_timeout)
        stop(process)
    except TimeoutError:
        row.cli_note = f"> {settings.cli_timeout:g} s"
    return row


# --- output ---------------------------------------------------------------------------------------------------


def header(server_gc: str = "default", event_loop: str = "auto") -> str:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"Python {platform.python_version()} ({platform.python_implementation()}), {cpus} CPUs, "
        f"aiohttp {aiohttp.__version__}, {event_loop_name(event_loop)} event loop, client and server on one machine"
        + (", server gc frozen after warm-up" if server_gc == "freeze" else "")
    )


def table(rows: Sequence[Row]) -> str:
    lines = [
        "| nodes x devices | filter p50 / p99 ms | prioritize p50 / p99 ms | bind p50 / p99 ms "
        "| pods/s | bound / unsched. / requeued | cold start s | cold start s (serve CLI) | RSS MB (peak) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        cli = r.cli_note or (f"{r.cli_cold_start_s:.2f}" if r.cli_cold_start_s is not None else "—")
        lines.append(
            f"| {r.nodes} x {r.devices} | {r.filter_p50_ms:.2f} / {r.filter_p99_ms:.2f} "
            f"| {r.prioritize_p50_ms:.2f} / {r.prioritize_p99_ms:.2f} | {r.bind_p50_ms:.2f} / {r.bind_p99_ms:.2f} "
            f"| {r.pods_per_s:.0f} | {r.bound} / {r.unschedulable} / {r.requeued} | {r.cold_start_s:.2f} | {cli} "
            f"| {r.rss_mb:.0f} ({r.hwm_mb:.0f}) |"
        )
    return "\n".join(lines)


def verdicts(rows: Sequence[Row]) -> list[str]:
    out = []
    by_nodes = {r.nodes: r for r in rows if r.devices == 10}
    for nodes, limit in TARGET_FILTER_P99_MS.items():
        if nodes in by_nodes:
            value = by_nodes[nodes].filter_p99_ms
            out.append(f"filter p99 at {nodes} nodes: {value:.2f} ms (target ≤ {limit:g}) {_ok(value <= limit)}")
    for nodes, limit in TARGET_PODS_PER_S.items():
        if nodes in by_nodes:
            value = by_nodes[nodes].pods_per_s
            out.append(f"scheduled pods/s at {nodes} nodes: {value:.0f} (target ≥ {limit:g}) {_ok(value >= limit)}")
    for nodes, limit in TARGET_RSS_MB.items():
        if nodes in by_nodes:
            value = by_nodes[nodes].rss_mb
            out.append(f"RSS at {nodes} nodes: {value:.0f} MB (target ≤ {limit:g}) {_ok(value <= limit)}")
    return out


def _ok(met: bool) -> str:
    return "ok" if met else "MISSED"


def plot(rows: Sequence[Row], path: str) -> bool:
    """A PNG of the curves; False when matplotlib is not importable."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    x = [r.nodes for r in rows]
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    ax = axes[0][0]
    for name, p50, p99 in (
        ("filter", "filter_p50_ms", "filter_p99_ms"),
        ("prioritize", "prioritize_p50_ms", "prioritize_p99_ms"),
        ("bind", "bind_p50_ms", "bind_p99_ms"),
    ):
        line = ax.plot(x, [getattr(r, p50) for r in rows], marker="o", label=f"{name} p50")[0]
        ax.plot(
            x, [getattr(r, p99) for r in rows], marker="x", linestyle="--", color=line.get_color(), label=f"{name} p99"
        )
    ax.set(title="latency over HTTP (ms)", xscale="log", yscale="log", xlabel="nodes")
    ax.legend(fontsize=8)
    ax = axes[0][1]
    ax.plot(x, [r.pods_per_s for r in rows], marker="o")
    ax.set(title="scheduled pods/s (filter + prioritize + bind)", xscale="log", xlabel="nodes")
    ax = axes[1][0]
    ax.plot(x, [r.cold_start_s for r in rows], marker="o", label="bench server (orjson)")
    cli = [(r.nodes, r.cli_cold_start_s) for r in rows if r.cli_cold_start_s is not None]
    if cli:
        ax.plot([c[0] for c in cli], [c[1] for c in cli], marker="x", label="dra-extender serve --cluster")
    ax.set(title="cold start to first filter (s)", xscale="log", yscale="log", xlabel="nodes")
    ax.legend(fontsize=8)
    ax = axes[1][1]
    ax.plot(x, [r.rss_mb for r in rows], marker="o", label="VmRSS")
    ax.plot(x, [r.hwm_mb for r in rows], marker="x", label="VmHWM (peak)")
    ax.set(title="server memory (MB)", xscale="log", xlabel="nodes")
    ax.legend(fontsize=8)
    devices = rows[0].devices if rows else 0
    fig.suptitle(f"dra-extender service, embedded backend, {devices} GPUs per node ({header()})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# --- command line -----------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.service", description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    srv = sub.add_parser("serve", help="(internal) the benchmark's server process")
    srv.add_argument("--cluster", required=True)
    srv.add_argument("--port", type=int, required=True)
    srv.add_argument("--log-level", default="info")
    srv.add_argument("--profile", help="write a cProfile of the whole server run here")
    srv.add_argument("--gc", choices=("default", "freeze"), default="default")
    srv.add_argument("--event-loop", choices=EVENT_LOOPS, default="auto")
    parser.add_argument("--sizes", type=positive_ints, help="node counts (default 100,500,1000,5000)")
    parser.add_argument("--devices", type=int, default=10, help="GPUs per node (default 10)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes and few requests, for a CI smoke run")
    parser.add_argument("--requests", type=int, help="probe requests per verb and size (default 300)")
    parser.add_argument("--probe-seconds", type=float, default=15.0, help="cap per verb on probing (default 15)")
    parser.add_argument("--pods", type=int, help="pods for the end-to-end loop (default 1500)")
    parser.add_argument("--loop-seconds", type=float, default=20.0, help="cap on each end-to-end loop (default 20)")
    parser.add_argument("--binds-in-flight", type=int, default=16, help="concurrent binds (default 16)")
    parser.add_argument(
        "--cli-timeout", type=float, default=120.0, help="give up the serve CLI cold start after (s); 0 skips it"
    )
    parser.add_argument("--server-log-level", default="info", help="server log level; logs go to /dev/null")
    parser.add_argument(
        "--server-gc",
        choices=("default", "freeze"),
        default="default",
        help="default: as dra-extender serve; freeze: gc.freeze() after the warm-up (what-if)",
    )
    parser.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        default="auto",
        help="the server's and the client's event loop, as dra-extender serve --event-loop (default auto: "
        "uvloop if installed)",
    )
    parser.add_argument("--profile-dir", help="run each server under cProfile, writing server-NODES.prof here")
    parser.add_argument("--plot", metavar="PATH", help="write a PNG of the curves (needs matplotlib)")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    parser.add_argument("--workdir", help="where generated clusters go (default: a temporary directory)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return serve(args.cluster, args.port, args.log_level, args.profile, args.gc, args.event_loop)
    sizes = args.sizes or ([20, 50] if args.quick else list(DEFAULT_SIZES))
    devices = 4 if args.quick and args.devices == 10 else args.devices
    with tempfile.TemporaryDirectory(prefix="bench-service-") as tmp:
        workdir = Path(args.workdir) if args.workdir else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        profile_dir = Path(args.profile_dir) if args.profile_dir else None
        if profile_dir is not None:
            profile_dir.mkdir(parents=True, exist_ok=True)
        settings = Settings(
            devices=devices,
            probe_requests=args.requests or (20 if args.quick else 300),
            probe_seconds=args.probe_seconds,
            loop_pods=args.pods or (40 if args.quick else 1500),
            loop_seconds=args.loop_seconds,
            binds_in_flight=max(1, args.binds_in_flight),
            cli_timeout=min(args.cli_timeout, 30.0) if args.quick else args.cli_timeout,
            server_log_level=args.server_log_level,
            server_gc=args.server_gc,
            workdir=workdir,
            event_loop=args.event_loop,
            profile_dir=profile_dir,
        )
        print(header(args.server_gc, args.event_loop), flush=True)
        rows = []
        for nodes in sizes:
            # The client stands in for kube-scheduler (Go): it runs on the same loop as the server,
            # so that its own cost per request stays small next to the server's.
            with asyncio.Runner(loop_factory=lambda: new_event_loop(args.event_loop)[0]) as runner:
                row = runner.run(run_size(nodes, settings))
            rows.append(row)
            print(
                f"  {nodes} nodes: filter p99 {row.filter_p99_ms:.2f} ms, {row.pods_per_s:.0f} pods/s, "
                f"cold {row.cold_start_s:.2f} s, RSS {row.rss_mb:.0f} MB; CPU per bound pod: "
                f"server {row.extra.get('loop_server_cpu_ms_per_pod', 0):.2f} ms, "
                f"client {row.extra.get('loop_client_cpu_ms_per_pod', 0):.2f} ms",
                file=sys.stderr,
                flush=True,
            )
    print()
    print(table(rows))
    print()
    for line in verdicts(rows):
        print(f"- {line}")
    if args.plot:
        print(f"\nplot: {args.plot}" if plot(rows, args.plot) else "\nplot: matplotlib is not importable, skipped")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            document = {"header": header(args.server_gc, args.event_loop), "rows": [asdict(r) for r in rows]}
            json.dump(document, fh, indent=2)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
