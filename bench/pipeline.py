"""The service as kube-scheduler meets it: the scheduler model against both backends.

Run from the repository root::

    python -m bench.pipeline                                  # 500 nodes x 10 GPUs, 1000 one-GPU pods, kube backend
    python -m bench.pipeline --sizes 100,500,1000,5000 --backends kube,embedded --plot docs/pipeline-curves.png
    python -m bench.pipeline --claims template --controller-delay 0.05 --latency 0.01
    python -m bench.pipeline --tie-break worst --binds-in-flight 16 --latency 0.01 --json out.json
    python -m bench.pipeline --quick                          # tiny sizes; the CI smoke run
    python -m bench.pipeline --scheduler real --sizes 500     # the real kube-scheduler (bench/real_scheduler.py)

Each run builds a cluster with ``bench.cluster_gen`` (GPU nodes; pods of one claim shape, all with
template claims or all with direct claims; every pod fits) and drives the real service with
``bench.scheduler_model.SchedulerModel`` (kube-scheduler's serial scheduling cycle, asynchronous
binding cycles, backoff and unschedulable queues) over HTTP:

- ``kube``: the ``KubeBackend`` against the strict fake API server (``tests/fakes``) with an injected
  latency on every request that is not a watch (``--latency``), and a model of the resourceclaim
  controller (``ClaimController``: a pod's template claims appear ``--controller-delay`` after the pod,
  at most ``--controller-rate`` pods per second). The fake and the model share this process; the
  extender is ``dra-extender serve --kubeconfig`` in a process of its own, so its CPU is its own
  (``--in-process`` runs it here too, as the tests do);
- ``embedded``: ``dra-extender serve --cluster`` on the same manifests (the embedded backend answers
  writes at once and plays the resourceclaim controller itself).

Printed per run: scheduled pods/s, attempts per pod, failed attempts by cause, scheduling latency
p50/p99 (from the run's start to the bind's answer: every pod exists at the start), extender verb
latencies, the extender's CPU per bound pod, and its API requests per bound pod by verb (kube). Timings
are printed, never asserted: the tests assert the model's counts (``tests/test_pipeline.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import orjson

from bench import cluster_gen
from bench.common import ROOT, cpu_seconds, extender_root, free_port, percentile, positive_ints
from bench.http_client import LeanClient
from bench.scheduler_model import HttpExtender, ModelReport, ModelSettings, SchedulerModel
from extender.server.eventloop import new_event_loop

__all__ = [
    "PATIENT_SERVICE_OPTIONS",
    "ClaimController",
    "RunResult",
    "Stack",
    "Workload",
    "embedded_stack",
    "kube_stack",
    "run_model",
    "workload_objects",
]

Backend = Literal["kube", "embedded"]
_JSON = {"Content-Type": "application/json"}
#: The User-Agent of the model's own pod watch, which the request counts leave out.
MODEL_AGENT = "bench-scheduler-model"
#: Targets of issue 11 (kube backend, 5 ms API latency, 16 binds in flight).
TARGET_PODS_PER_S = {500: 250.0, 5000: 100.0}
TARGET_API_REQUESTS_PER_POD = 3.0
#: In-process service options for a run whose counts must not depend on the machine's speed (the
#: tests'): the service's own time limits far beyond anything a run needs. With the defaults (a
#: hold lasts 2 s, a bind waits 3 s for template claims and takes 25 s in all) a heavily loaded
#: machine could fail an attempt that the counts would blame on the extender.
PATIENT_SERVICE_OPTIONS: dict[str, float] = {
    "hold_seconds": 60.0,
    "claim_wait_seconds": 60.0,
    "bind_deadline_seconds": 90.0,
}


@dataclass(frozen=True)
class Workload:
    nodes: int = 500
    devices: int = 10
    pods: int = 1000
    claims: Literal["template", "direct"] = "direct"
    shape: str = "one-gpu"
    """A ``cluster_gen.SHAPES`` name: ``one-gpu`` or ``two-gpus`` (two on one PCIe root)."""
    seed: int = 0


def workload_objects(workload: Workload) -> list[dict[str, Any]]:
    spec = cluster_gen.ClusterSpec(
        nodes=workload.nodes,
        devices=workload.devices,
        nics=0,
        pods=workload.pods,
        mix={workload.claims: 1.0},
        shapes={workload.shape: 1.0},
        seed=workload.seed,
    )
    return cluster_gen.generate(spec)


def _pod_key(pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    return f"{meta.get('namespace') or 'default'}/{meta['name']}"


def signature(pod: dict[str, Any]) -> str:
    """What OpportunisticBatching would group pods by, here: the claim shape label."""
    return str(((pod.get("metadata") or {}).get("labels") or {}).get(cluster_gen.SHAPE_LABEL, ""))


# --- the resourceclaim controller ------------------------------------------------------------------------


class ClaimController:
    """kube-controller-manager's resourceclaim controller, as far as scheduling sees it: for each new
    pod with template claims, after ``delay`` seconds (at most ``rate`` pods per second, in arrival
    order), create each claim from its template (owned by the pod, named ``<pod>-<claim>-xxxxx``)
    and then record it in the pod's ``status.resourceClaimStatuses``, as two writes to the fake's
    storage. ``created[pod key]`` is when the last claim of a pod appeared.

    ``held``: nothing is created until ``release()`` (the pods queue up meanwhile, and their delay
    and rate count as usual from then on). A test holds the controller to have binds arrive before
    their claims on any machine: with ``delay`` and ``rate`` alone, whether the controller is
    behind the scheduler depends on how fast each of them runs."""

    def __init__(
        self, fake: Any, *, delay: float = 0.02, rate: float | None = None, seed: int = 0, held: bool = False
    ) -> None:
        self.fake = fake
        self.delay = delay
        self.rate = rate
        self.created: dict[str, float] = {}
        self._rng = random.Random(seed)
        self._queue: asyncio.Queue[tuple[float, str]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._released = asyncio.Event()
        if not held:
            self._released.set()

    def release(self) -> None:
        """Let a controller made with ``held`` create claims (idempotent)."""
        self._released.set()

    def start(self) -> None:
        self.fake.storage.subscribe(self._changed)
        self._task = asyncio.create_task(self._run(), name="resourceclaim controller")

    async def stop(self) -> None:
        with contextlib.suppress(ValueError):
            self.fake.storage.unsubscribe(self._changed)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def enqueue_existing(self) -> None:
        """Pods already in the fake when the controller starts (a cluster created at once)."""
        now = time.perf_counter()
        for pod in self.fake.objects("Pod"):
            if _pending_templates(pod):
                self._queue.put_nowait((now, _pod_key(pod)))

    def _changed(self, change: Any) -> None:
        if change.collection == ("", "pods") and change.type == "ADDED" and _pending_templates(change.obj):
            self._queue.put_nowait((time.perf_counter(), _pod_key(change.obj)))

    async def _run(self) -> None:
        gap = 1.0 / self.rate if self.rate else 0.0
        next_slot = 0.0
        while True:
            seen, key = await self._queue.get()
            await self._released.wait()
            now = time.perf_counter()
            wait = max(seen + self.delay, next_slot) - now
            if wait > 0:
                await asyncio.sleep(wait)
            next_slot = time.perf_counter() + gap
            self._sync(key)

    def _sync(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        pod = self.fake.get_object("Pod", namespace, name)
        if pod is None:
            return
        statuses = []
        for pod_claim, template_name in _pending_templates(pod):
            template = self.fake.get_object("ResourceClaimTemplate", namespace, template_name, group="resource.k8s.io")
            if template is None:
                continue
            suffix = "".join(self._rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
            claim_name = f"{name}-{pod_claim}-{suffix}"
            template_spec = template.get("spec") or {}
            self.fake.put_object(
                {
                    "apiVersion": template["apiVersion"],
                    "kind": "ResourceClaim",
                    "metadata": {
                        "name": claim_name,
                        "namespace": namespace,
                        "annotations": {"resource.kubernetes.io/pod-claim-name": pod_claim},
                        "labels": dict((template_spec.get("metadata") or {}).get("labels") or {}),
                        "ownerReferences": [
                            {
                                "apiVersion": "v1",
                                "kind": "Pod",
                                "name": name,
                                "uid": pod["metadata"]["uid"],
                                "controller": True,
                                "blockOwnerDeletion": True,
                            }
                        ],
                    },
                    "spec": template_spec.get("spec") or {},
                }
            )
            statuses.append({"name": pod_claim, "resourceClaimName": claim_name})
        if not statuses:
            return
        # Read, change and write in one step of the loop: no write of the extender comes between.
        pod = self.fake.get_object("Pod", namespace, name)
        if pod is None:
            return
        pod.setdefault("status", {}).setdefault("resourceClaimStatuses", []).extend(statuses)
        self.fake.put_object(pod)
        self.created[key] = time.perf_counter()


def _pending_templates(pod: dict[str, Any]) -> list[tuple[str, str]]:
    done = {s.get("name") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()}
    return [
        (str(ref["name"]), str(ref["resourceClaimTemplateName"]))
        for ref in (pod.get("spec") or {}).get("resourceClaims") or ()
        if ref.get("resourceClaimTemplateName") and ref.get("name") not in done
    ]


# --- stacks: an extender to drive, and what the model needs to know of the cluster ----------------------------


async def _no_requests() -> Counter[str]:
    return Counter()


@dataclass
class Stack:
    """A running extender on ``port``, with the pods and nodes to schedule. ``current`` is the
    scheduler's informer copy of a pod (kube: the fake's object), ``subscribe`` connects a model's
    ``wake`` to the cluster's pod events, ``api_requests`` counts the extender's API requests by
    verb since ``mark_requests()``, ``server_cpu`` is the extender's CPU seconds so far (None when
    it shares this process), and ``service`` the in-process service (None in a subprocess)."""

    port: int
    nodes: list[str]
    pods: list[dict[str, Any]]
    current: Callable[[str], dict[str, Any] | None] | None = None
    subscribe: Callable[[Callable[[], None]], Callable[[], None]] = lambda _wake: lambda: None
    api_requests: Callable[[], Awaitable[Counter[str]]] = _no_requests
    mark_requests: Callable[[], None] = lambda: None
    server_cpu: Callable[[], float] | None = None
    #: the fake API server's CPU seconds so far, when it runs in a process of its own
    fake_cpu: Callable[[], float] | None = None
    service: Any = None
    fake: Any = None
    controller: ClaimController | None = None
    #: creates a pod in the cluster (the model's arrivals); None where pods exist from the start
    create_pod: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]] | None = None


def _split(objects: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    nodes = [o["metadata"]["name"] for o in objects if o["kind"] == "Node"]
    return nodes, [o for o in objects if o["kind"] == "Pod"]


async def _serve_in_process(service: Any) -> tuple[Any, int]:
    from aiohttp import web

    from extender.server.app import create_app
    from extender.server.settings import ServerSettings

    app = create_app(service, ServerSettings(host="127.0.0.1", port=0))
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = int(runner.addresses[0][1])
    return runner, port


async def _wait_ready(port: int, process: subprocess.Popen[bytes] | None, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    async with LeanClient("127.0.0.1", port, 1) as http:
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"extender exited with code {process.returncode}")
            try:
                status, _ = await http.get("/readyz")
                if status == 200:
                    return
            except OSError:
                pass
            await asyncio.sleep(0.05)
    raise TimeoutError(f"extender not ready after {timeout:.0f} s")


def _stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)  # a clean shutdown (py-spy writes its profile on it)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


#: Set to a path, the extender subprocess runs under ``py-spy record`` writing a flame graph there
#: (its CPU per pod is then not reported: the process measured would be py-spy's).
PYSPY_ENV = "BENCH_PYSPY"


def _spawn(command: list[str]) -> tuple[subprocess.Popen[bytes], Callable[[], float] | None]:
    profile = os.environ.get(PYSPY_ENV)
    if profile:
        fmt = "raw" if profile.endswith(".txt") else "flamegraph"  # raw: collapsed stacks, one per line
        command = ["py-spy", "record", "--rate", "200", "-f", fmt, "-o", profile, "--", *command]
    root = extender_root()
    env = {**os.environ, "PYTHONPATH": str(root)} if root != ROOT else None
    process = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return process, None if profile else (lambda: cpu_seconds(process.pid))


def _extender_flags(scoring: str | None, extra: Sequence[str]) -> list[str]:
    # As in production: one JSON event per decision (written to /dev/null here).
    flags = ["--log-format", "json", "--log-level", "info"]
    if scoring:
        flags += ["--scoring", scoring]
    return flags + list(extra)


@contextlib.asynccontextmanager
async def embedded_stack(
    objects: list[dict[str, Any]],
    *,
    in_process: bool = True,
    scoring: str | None = None,
    service_options: dict[str, Any] | None = None,
    extender_args: Sequence[str] = (),
    workdir: Path | None = None,
) -> AsyncIterator[Stack]:
    """The embedded backend on ``objects``: in this process, or ``dra-extender serve --cluster``."""
    nodes, pods = _split(objects)
    if in_process:
        from extender.backends.embedded import EmbeddedBackend
        from extender.core.scoring import ScoringPolicy
        from extender.state.service import SchedulingService

        backend = EmbeddedBackend(objects)
        options = dict(service_options or {})
        if scoring:
            options["scoring"] = ScoringPolicy.parse(scoring)
        service = SchedulingService(backend=backend, **options)
        runner, port = await _serve_in_process(service)

        def subscribe(wake: Callable[[], None]) -> Callable[[], None]:
            active = [True]

            def listener(event: str, obj: dict[str, Any]) -> None:
                if active[0] and obj.get("kind") == "Pod":
                    wake()

            backend.add_listener(listener)
            return lambda: active.__setitem__(0, False)

        try:
            yield Stack(port=port, nodes=nodes, pods=pods, subscribe=subscribe, service=service)
        finally:
            await runner.cleanup()
        return
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp:
        path = Path(workdir or tmp) / "cluster.json"
        cluster_gen.write(objects, path)
        port = free_port()
        command = [sys.executable, "-m", "extender", "serve", "--cluster", str(path), "--listen", f"127.0.0.1:{port}"]
        command += _extender_flags(scoring, extender_args)
        process, server_cpu = _spawn(command)
        try:
            await _wait_ready(port, process, timeout=600)
            yield Stack(port=port, nodes=nodes, pods=pods, server_cpu=server_cpu)
        finally:
            _stop_process(process)


def seed_fake(fake: Any, objects: list[dict[str, Any]], *, pods: bool = True) -> None:
    """Put the generated cluster into the fake API server (its namespaces exist already); without
    ``pods`` the pods are left for the model to create during the run."""
    for obj in objects:
        if obj["kind"] == "Pod" and not pods:
            continue
        if obj["kind"] != "Namespace" or fake.get_object("Namespace", None, obj["metadata"]["name"]) is None:
            fake.put_object(obj)


@contextlib.asynccontextmanager
async def _kube_extender(
    url: str,
    *,
    in_process: bool,
    scoring: str | None,
    service_options: dict[str, Any] | None,
    extender_args: Sequence[str],
) -> AsyncIterator[tuple[int, Any, Callable[[], float] | None]]:
    """The extender's kube backend against ``url``: (port, in-process service or None, CPU reader)."""
    if in_process:
        from extender.backends.kube import ClusterConfig, KubeBackend, KubeSettings
        from extender.core.scoring import ScoringPolicy
        from extender.state.service import SchedulingService

        backend = KubeBackend(ClusterConfig(host=url), settings=KubeSettings(freeze_gc=False))
        options = dict(service_options or {})
        if scoring:
            options["scoring"] = ScoringPolicy.parse(scoring)
        if backend.rejected is not None:
            options.setdefault("rejected", backend.rejected)
        service = SchedulingService(backend=backend, **options)
        runner, port = await _serve_in_process(service)
        try:
            await _wait_ready(port, None, timeout=120)
            yield port, service, None
        finally:
            await runner.cleanup()
        return
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        kubeconfig.write_text(kubeconfig_text(url), encoding="utf-8")
        port = free_port()
        command = [sys.executable, "-m", "extender", "serve", "--kubeconfig", str(kubeconfig)]
        command += ["--listen", f"127.0.0.1:{port}", *_extender_flags(scoring, extender_args)]
        process, server_cpu = _spawn(command)
        try:
            await _wait_ready(port, process, timeout=600)
            yield port, None, server_cpu
        finally:
            _stop_process(process)


@contextlib.asynccontextmanager
async def kube_stack(
    objects: list[dict[str, Any]],
    *,
    latency: float = 0.005,
    controller_delay: float = 0.02,
    controller_rate: float | None = None,
    controller_held: bool = False,
    in_process: bool = True,
    fake_process: bool = False,
    scoring: str | None = None,
    service_options: dict[str, Any] | None = None,
    extender_args: Sequence[str] = (),
    seed: int = 0,
    seed_pods: bool = True,
    fake_options: dict[str, Any] | None = None,
    classic_drivers: Sequence[str] = (),
) -> AsyncIterator[Stack]:
    """The fake API server holding ``objects`` (the pods only with ``seed_pods``: else the model
    creates them, ``Stack.create_pod``) (every request but watches waits ``latency`` s), the
    claim controller, and the extender's kube backend on it: in this process or as
    ``dra-extender serve --kubeconfig``. With ``fake_process`` the fake and the controller run in
    a process of their own (``bench/fake_cluster.py``) and the model learns of pod changes through
    a pod watch, as kube-scheduler does. ``fake_options`` go to the fake (``resource_versions``,
    ``classic``, ...); ``classic_drivers`` run as classic DRA driver controllers beside it
    (tests/fakes/classic_driver.py; in-process fake only). With ``controller_held`` the claim
    controller creates nothing until ``stack.controller.release()`` (``ClaimController``;
    in-process fake only)."""
    if fake_process and controller_held:
        raise ValueError("controller_held needs the fake in this process (fake_process=False)")
    if fake_process:
        async with _fake_process_stack(
            objects,
            latency=latency,
            controller_delay=controller_delay,
            controller_rate=controller_rate,
            in_process=in_process,
            scoring=scoring,
            service_options=service_options,
            extender_args=extender_args,
            seed=seed,
            seed_pods=seed_pods,
        ) as stack:
            yield stack
        return
    from tests.fakes import FakeApiServer
    from tests.fakes.classic_driver import running_driver

    nodes, pods = _split(objects)
    async with (
        FakeApiServer.running(bookmark_interval=None, rng=random.Random(seed), **(fake_options or {})) as fake,
        contextlib.AsyncExitStack() as drivers,
    ):
        seed_fake(fake, objects, pods=seed_pods)
        for driver in classic_drivers:
            await drivers.enter_async_context(running_driver(fake, driver))
        controller = ClaimController(
            fake, delay=controller_delay, rate=controller_rate, seed=seed, held=controller_held
        )
        controller.start()
        controller.enqueue_existing()
        if latency > 0:
            fake.delay(path="", seconds=latency, watch=False)
        mark = [0]

        async def api_requests() -> Counter[str]:
            return Counter(verb_of(r) for r in fake.requests[mark[0] :] if not r.is_watch)

        def mark_requests() -> None:
            mark[0] = len(fake.requests)

        def current(key: str) -> dict[str, Any] | None:
            namespace, _, name = key.partition("/")
            obj: dict[str, Any] | None = fake.get_object("Pod", namespace, name)
            return obj

        def subscribe(wake: Callable[[], None]) -> Callable[[], None]:
            def listener(change: Any) -> None:
                if change.collection == ("", "pods"):
                    wake()

            fake.storage.subscribe(listener)
            return lambda: fake.storage.unsubscribe(listener)

        async def create_pod(pod: dict[str, Any]) -> dict[str, Any]:
            created: dict[str, Any] = fake.put_object(pod)
            return created

        try:
            async with _kube_extender(
                fake.url,
                in_process=in_process,
                scoring=scoring,
                service_options=service_options,
                extender_args=extender_args,
            ) as (port, service, server_cpu):
                yield Stack(
                    port=port,
                    nodes=nodes,
                    pods=pods,
                    current=current,
                    subscribe=subscribe,
                    api_requests=api_requests,
                    mark_requests=mark_requests,
                    server_cpu=server_cpu,
                    service=service,
                    fake=fake,
                    controller=controller,
                    create_pod=create_pod,
                )
        finally:
            await controller.stop()


@contextlib.asynccontextmanager
async def _fake_process_stack(
    objects: list[dict[str, Any]],
    *,
    latency: float,
    controller_delay: float,
    controller_rate: float | None,
    in_process: bool,
    scoring: str | None,
    service_options: dict[str, Any] | None,
    extender_args: Sequence[str],
    seed: int,
    seed_pods: bool,
) -> AsyncIterator[Stack]:
    import aiohttp

    nodes, pods = _split(objects)
    with tempfile.TemporaryDirectory(prefix="bench-fake-") as tmp:
        path = Path(tmp) / "cluster.json"
        cluster_gen.write(objects, path)
        command = [sys.executable, "-m", "bench.fake_cluster", "--cluster", str(path), "--latency", str(latency)]
        command += ["--controller-delay", str(controller_delay), "--seed", str(seed)]
        if not seed_pods:
            command.append("--no-pods")
        if controller_rate:
            command += ["--controller-rate", str(controller_rate)]
        fake = await asyncio.create_subprocess_exec(*command, cwd=ROOT, stdout=asyncio.subprocess.PIPE)
        try:
            assert fake.stdout is not None
            line = await asyncio.wait_for(fake.stdout.readline(), 600)
            if not line:
                raise RuntimeError(f"the fake API server exited with code {await fake.wait()}")
            where = orjson.loads(line)
            url, admin = where["url"], where["admin"]
            async with aiohttp.ClientSession(headers={"User-Agent": MODEL_AGENT}) as session:
                mark = [0]

                async def get(path: str) -> Any:
                    async with session.get(admin + path) as response:
                        return orjson.loads(await response.read())

                async def api_requests() -> Counter[str]:
                    return Counter(await get(f"/requests?since={mark[0]}&skip-agent={MODEL_AGENT}"))

                def subscribe(wake: Callable[[], None]) -> Callable[[], None]:
                    task = asyncio.create_task(_watch_pods(session, url, wake))
                    return task.cancel

                async def create_pod(pod: dict[str, Any]) -> dict[str, Any]:
                    namespace = pod["metadata"].get("namespace") or "default"
                    path = f"{url}/api/v1/namespaces/{namespace}/pods"
                    async with session.post(path, data=orjson.dumps(pod), headers=_JSON) as response:
                        if response.status != 201:
                            raise RuntimeError(f"creating a pod: HTTP {response.status}: {await response.text()}")
                        created: dict[str, Any] = orjson.loads(await response.read())
                        return created

                async with _kube_extender(
                    url,
                    in_process=in_process,
                    scoring=scoring,
                    service_options=service_options,
                    extender_args=extender_args,
                ) as (port, service, server_cpu):
                    stack = Stack(
                        port=port,
                        nodes=nodes,
                        pods=pods,
                        subscribe=subscribe,
                        api_requests=api_requests,
                        server_cpu=server_cpu,
                        fake_cpu=lambda: cpu_seconds(fake.pid),
                        create_pod=create_pod,
                        service=service,
                    )
                    mark[0] = (await get("/mark"))["mark"]
                    yield stack
        finally:
            if fake.returncode is None:
                fake.send_signal(signal.SIGINT)
                try:
                    await asyncio.wait_for(fake.wait(), 20)
                except TimeoutError:
                    fake.kill()
                    await fake.wait()


async def _watch_pods(session: Any, url: str, wake: Callable[[], None]) -> None:
    """kube-scheduler's pod informer, as far as the model needs it: every pod event wakes it."""
    async with session.get(f"{url}/api/v1/pods", params={"limit": "1"}) as response:
        version = orjson.loads(await response.read())["metadata"]["resourceVersion"]
    params = {"watch": "true", "resourceVersion": version, "allowWatchBookmarks": "false"}
    async with session.get(f"{url}/api/v1/pods", params=params, timeout=None) as response:
        async for _line in response.content:
            wake()


def kubeconfig_text(url: str) -> str:
    """A kubeconfig for an API server at ``url`` that needs no credentials (the fake's)."""
    return (
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        f"clusters:\n- name: fake\n  cluster:\n    server: {url}\n"
        "users:\n- name: fake\n  user: {}\n"
        "contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n"
    )


def verb_of(record: Any) -> str:
    """ "GET pods", "PUT resourceclaims/status", "POST pods/binding", ... for one recorded request."""
    parts = [p for p in record.path.split("/") if p]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if len(rest) >= 2 and rest[0] == "namespaces":
        rest = rest[2:]
    resource = rest[0] if rest else "?"
    if len(rest) >= 3:
        resource += "/" + rest[2]
    return f"{record.method} {resource}"


# --- one run ------------------------------------------------------------------------------------------------


@dataclass
class RunResult:
    backend: str
    workload: dict[str, Any]
    settings: dict[str, Any]
    latency_ms: float
    report: dict[str, Any]
    verbs_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    server_cpu_ms_per_pod: float | None = None
    #: this process (the model, and the fake API server unless it runs in its own process)
    process_cpu_ms_per_pod: float = 0.0
    fake_cpu_ms_per_pod: float | None = None
    api_requests_per_pod: dict[str, float] = field(default_factory=dict)
    api_requests_per_pod_total: float = 0.0
    #: the extender's own counters at the end (holds by outcome, their mean age, claim waits)
    extender: dict[str, float] = field(default_factory=dict)


async def run_model(
    stack: Stack,
    settings: ModelSettings,
    *,
    connections: int | None = None,
    before_attempt: Callable[[str, int], Awaitable[None]] | None = None,
    groups: Mapping[str, int] | None = None,
) -> tuple[ModelReport, HttpExtender, dict[str, float]]:
    """One model run against ``stack``: the report, the client (its latencies) and CPU figures.
    ``before_attempt`` goes to the model (``SchedulerModel``: a test's wait before an attempt);
    ``groups``: the gangs (PodGroup ``namespace/name`` -> ``minCount``) run as group cycles."""
    async with LeanClient("127.0.0.1", stack.port, connections or settings.binds_in_flight + 4) as http:
        extender = HttpExtender(http)
        model = SchedulerModel(
            extender,
            stack.nodes,
            stack.pods,
            settings,
            current=stack.current,
            signature=signature,
            create=stack.create_pod,
            before_attempt=before_attempt,
            groups=groups,
        )
        unsubscribe = stack.subscribe(model.wake)
        stack.mark_requests()
        server0 = stack.server_cpu() if stack.server_cpu is not None else 0.0
        fake0 = stack.fake_cpu() if stack.fake_cpu is not None else 0.0
        process0 = time.process_time()
        try:
            report = await model.run()
        finally:
            unsubscribe()
        cpu = {"process": time.process_time() - process0}
        if stack.server_cpu is not None:
            cpu["server"] = stack.server_cpu() - server0
        if stack.fake_cpu is not None:
            cpu["fake"] = stack.fake_cpu() - fake0
    return report, extender, cpu


async def measure(
    backend: Backend,
    workload: Workload,
    settings: ModelSettings,
    *,
    latency: float,
    controller_delay: float,
    controller_rate: float | None,
    in_process: bool,
    scoring: str | None,
    extender_args: Sequence[str] = (),
    fake_process: bool = True,
) -> RunResult:
    objects = workload_objects(workload)
    stack_cm = (
        kube_stack(
            objects,
            latency=latency,
            controller_delay=controller_delay,
            controller_rate=controller_rate,
            in_process=in_process,
            fake_process=fake_process and not in_process,
            scoring=scoring,
            extender_args=extender_args,
            seed=workload.seed,
            seed_pods=settings.arrival_rate <= 0,
        )
        if backend == "kube"
        else embedded_stack(objects, in_process=in_process, scoring=scoring, extender_args=extender_args)
    )
    del objects
    async with stack_cm as stack:
        report, client, cpu = await run_model(stack, settings)
        requests = await stack.api_requests()
        counters = await extender_counters(stack.port)
    bound = max(1, report.bound)
    result = RunResult(
        backend=backend,
        workload=asdict(workload),
        settings=asdict(settings),
        latency_ms=latency * 1000 if backend == "kube" else 0.0,
        report=report.summary(),
        process_cpu_ms_per_pod=1000 * cpu["process"] / bound,
    )
    result.report["followed_extender"] = report.followed_extender
    result.report["prioritized"] = report.prioritized
    result.report["single_node_paths"] = report.single_node_paths
    result.verbs_ms = {
        verb: {"p50": round(percentile(v, 50), 2), "p99": round(percentile(v, 99), 2), "n": len(v)}
        for verb, v in client.latencies.items()
    }
    if "server" in cpu:
        result.server_cpu_ms_per_pod = 1000 * cpu["server"] / bound
    if "fake" in cpu:
        result.fake_cpu_ms_per_pod = 1000 * cpu["fake"] / bound
    result.api_requests_per_pod = {verb: round(n / bound, 3) for verb, n in sorted(requests.items())}
    result.api_requests_per_pod_total = round(sum(requests.values()) / bound, 3)
    result.extender = counters
    return result


#: The extender's counters a run reports (``/metrics``; absent in code from before they existed).
_COUNTERS = {
    'dra_extender_holds_total{outcome="placed"}': "holds placed",
    'dra_extender_holds_total{outcome="kept"}': "holds kept",
    'dra_extender_holds_total{outcome="moved"}': "holds moved",
    'dra_extender_holds_total{outcome="dropped"}': "holds dropped",
    'dra_extender_holds_total{outcome="expired"}': "holds expired",
    "dra_extender_hold_age_seconds_total": "hold age s",
    "dra_extender_hold_age_max_seconds": "max hold age s",
    "dra_extender_holds_settled_total": "holds settled",
    "dra_extender_bind_claim_waits_total": "claim waits",
    "dra_extender_bind_claim_wait_seconds_total": "claim wait s",
}


async def extender_metrics(port: int) -> dict[str, float]:
    """Every sample of the extender's ``/metrics`` by its full name (labels included); empty if
    the scrape fails."""
    async with LeanClient("127.0.0.1", port, 1) as http:
        status, body = await http.get("/metrics")
    if status != 200:
        return {}
    samples: dict[str, float] = {}
    for line in body.decode().splitlines():
        name, _, value = line.rpartition(" ")
        if name and not line.startswith("#"):
            samples[name] = float(value)
    return samples


async def extender_counters(port: int) -> dict[str, float]:
    samples = await extender_metrics(port)
    out = {label: samples[name] for name, label in _COUNTERS.items() if name in samples}
    if out.get("holds settled"):
        out["mean hold age ms"] = round(1000 * out["hold age s"] / out["holds settled"], 3)
    if out.get("claim waits"):
        out["mean claim wait ms"] = round(1000 * out["claim wait s"] / out["claim waits"], 3)
    return out


# --- output ---------------------------------------------------------------------------------------------------


def header() -> str:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"Python {platform.python_version()} ({platform.python_implementation()}), {cpus} CPUs"


def table(results: Sequence[RunResult]) -> str:
    lines = [
        "| backend | nodes x devices | pods (claims, shape) | API latency ms | pods/s | attempts/pod "
        "| failed attempts | latency p50 / p99 s | filter / prioritize / bind p50 ms | server CPU ms/pod "
        "| API requests/pod |",
        "|---|---|---|---:|---:|---:|---|---:|---|---:|---:|",
    ]
    for r in results:
        w, rep = r.workload, r.report
        failed = ", ".join(f"{cause} {n}" for cause, n in rep["failed_attempts"].items()) or "0"
        verbs = " / ".join(f"{r.verbs_ms.get(v, {}).get('p50', 0):.2f}" for v in ("filter", "prioritize", "bind"))
        cpu = f"{r.server_cpu_ms_per_pod:.2f}" if r.server_cpu_ms_per_pod is not None else "—"
        api = f"{r.api_requests_per_pod_total:.2f}" if r.backend == "kube" else "—"
        lines.append(
            f"| {r.backend} | {w['nodes']} x {w['devices']} "
            f"| {rep['bound']}/{rep['pods']} ({w['claims']}, {w['shape']}) "
            f"| {r.latency_ms:g} | {rep['pods_per_s']:.0f} | {rep['attempts_per_pod']:.2f} | {failed} "
            f"| {rep['latency_p50_s']:.2f} / {rep['latency_p99_s']:.2f} | {verbs} | {cpu} | {api} |"
        )
    return "\n".join(lines)


def verdicts(results: Sequence[RunResult]) -> list[str]:
    out = []
    for r in results:
        w = r.workload
        if r.backend != "kube" or w["claims"] != "direct" or w["shape"] != "one-gpu":
            continue
        label = f"{w['nodes']} nodes, {r.latency_ms:g} ms"
        target = TARGET_PODS_PER_S.get(w["nodes"])
        if target is not None:
            ok = r.report["pods_per_s"] >= target
            out.append(f"pods/s at {label}: {r.report['pods_per_s']:.0f} (target ≥ {target:g}) {_ok(ok)}")
        ok = r.api_requests_per_pod_total <= TARGET_API_REQUESTS_PER_POD
        out.append(
            f"API requests per bound pod at {label}: {r.api_requests_per_pod_total:.2f} "
            f"(target ≤ {TARGET_API_REQUESTS_PER_POD:g}) {_ok(ok)}"
        )
        failed = sum(r.report["failed_attempts"].values())
        out.append(f"failed attempts at {label}: {failed} (target 0) {_ok(failed == 0)}")
    return out


def _ok(met: bool) -> str:
    return "ok" if met else "MISSED"


def plot(results: Sequence[RunResult], path: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    series: dict[str, list[RunResult]] = {}
    for r in results:
        label = f"{r.backend}, {r.workload['claims']}, {r.workload['shape']}"
        series.setdefault(label, []).append(r)
    for label, rows in series.items():
        rows = sorted(rows, key=lambda r: r.workload["nodes"])
        x = [r.workload["nodes"] for r in rows]
        axes[0].plot(x, [r.report["pods_per_s"] for r in rows], marker="o", label=label)
        axes[1].plot(x, [r.report["latency_p99_s"] for r in rows], marker="o", label=label)
        axes[2].plot(x, [r.server_cpu_ms_per_pod or 0 for r in rows], marker="o", label=label)
    axes[0].set(title="scheduled pods/s (scheduler model)", xscale="log", xlabel="nodes")
    axes[1].set(title="scheduling latency p99 (s)", xscale="log", xlabel="nodes")
    axes[2].set(title="extender CPU per bound pod (ms)", xscale="log", xlabel="nodes")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.suptitle(f"dra-extender under the kube-scheduler model ({header()})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# --- command line ----------------------------------------------------------------------------------------


def _names(allowed: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = [p.strip() for p in text.split(",") if p.strip()]
        bad = [n for n in names if n not in allowed]
        if not names or bad:
            raise argparse.ArgumentTypeError(f"{text}: choose from {', '.join(allowed)}")
        return names

    return parse


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.pipeline", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", type=positive_ints, default=[500], help="node counts (default 500)")
    parser.add_argument("--devices", type=int, default=10, help="GPUs per node (default 10)")
    parser.add_argument("--pods", type=int, default=1000, help="pods per run (default 1000)")
    parser.add_argument("--backends", type=_names(("kube", "embedded")), default=["kube"])
    parser.add_argument(
        "--scheduler",
        choices=("model", "real"),
        default="model",
        help="model: bench/scheduler_model.py (default); real: the real kube-scheduler, in-tree and extender "
        "profiles side by side on a real control plane (KUBEBUILDER_ASSETS; bench/real_scheduler.py)",
    )
    parser.add_argument("--claims", type=_names(("direct", "template")), default=["direct"])
    parser.add_argument("--shapes", type=_names(("one-gpu", "two-gpus")), default=["one-gpu"])
    parser.add_argument("--latency", type=float, default=0.005, help="API latency per request, s (default 0.005)")
    parser.add_argument("--controller-delay", type=float, default=0.02, help="claim controller delay, s")
    parser.add_argument("--controller-rate", type=float, default=None, help="claim controller pods/s (default: no cap)")
    parser.add_argument("--binds-in-flight", type=int, default=16)
    parser.add_argument("--tie-break", choices=("random", "worst"), default="worst")
    parser.add_argument("--in-tree", choices=("balanced", "none"), default="balanced")
    parser.add_argument("--weight", type=int, default=5, help="the extender's weight (default 5)")
    parser.add_argument("--batching", action="store_true", help="OpportunisticBatching hints")
    parser.add_argument("--cycle-seconds", type=float, default=0.0, help="in-tree work per cycle, s")
    parser.add_argument(
        "--arrival-rate", type=float, default=0.0, help="pods created per second during the run (default: all at start)"
    )
    parser.add_argument("--scoring", default=None, help="the extender's --scoring (default: its own default)")
    parser.add_argument("--extender-arg", action="append", default=[], help="more dra-extender serve flags")
    parser.add_argument("--in-process", action="store_true", help="run the extender in this process")
    parser.add_argument("--repeat", type=int, default=1, help="runs per combination (default 1)")
    parser.add_argument(
        "--extender-config",
        action="append",
        default=None,
        metavar="SPEC",
        help="--scheduler real: the extender profile's KubeSchedulerConfiguration, deploy/<overlay>[:pct=N,"
        "scores=none,weight=N] (repeatable: one extender run each; default base)",
    )
    parser.add_argument(
        "--prefill",
        type=float,
        default=0.0,
        help="--scheduler real: the fraction of the GPUs taken before the runs (bound pods with allocated claims)",
    )
    parser.add_argument("--prefill-layout", choices=("packed", "spread"), default="packed")
    parser.add_argument(
        "--profiles",
        type=_names(("in-tree", "extender")),
        default=["in-tree", "extender"],
        help="--scheduler real: which profiles run (default in-tree,extender)",
    )
    parser.add_argument("--time-limit", type=float, default=300.0, help="cap per run, s")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a CI smoke run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--plot", metavar="PATH", help="write a PNG of the curves (needs matplotlib)")
    parser.add_argument("--from-json", metavar="PATH", help="no runs: print and plot the results of an earlier --json")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.scheduler == "real":
        from bench import real_scheduler

        return real_scheduler.run(args)
    if args.in_process:
        from extender.logconfig import configure_logging

        configure_logging("json", "warning")  # the extender shares this terminal
    sizes = [20, 50] if args.quick else args.sizes
    pods = 60 if args.quick else args.pods
    devices = 4 if args.quick and args.devices == 10 else args.devices
    settings = ModelSettings(
        binds_in_flight=max(1, args.binds_in_flight),
        tie_break=args.tie_break,
        extender_weight=args.weight,
        in_tree=args.in_tree,
        batching=args.batching,
        cycle_seconds=args.cycle_seconds,
        arrival_rate=args.arrival_rate,
        time_limit=args.time_limit,
        seed=args.seed,
    )
    if args.from_json:
        with open(args.from_json, encoding="utf-8") as fh:
            document = json.load(fh)
        print(document["header"])
        return _report([RunResult(**r) for r in document["results"]], args)
    print(header(), flush=True)
    results: list[RunResult] = []
    combinations = itertools.product(sizes, args.backends, args.claims, args.shapes, range(args.repeat))
    for nodes, backend, claims, shape, run in combinations:
        # at most four fifths of what fits, so that every pod fits wherever the earlier ones went
        fitting = nodes * (devices if shape == "one-gpu" else 2 * (devices // 4))
        count = max(1, min(pods, fitting * 4 // 5))
        workload = Workload(nodes=nodes, devices=devices, pods=count, claims=claims, shape=shape, seed=args.seed + run)
        # uvloop where installed, as the server runs: the model stands in for a Go scheduler,
        # whose cost per request is far below this process's
        with asyncio.Runner(loop_factory=lambda: new_event_loop("auto")[0]) as runner:
            result = runner.run(
                measure(
                    backend,
                    workload,
                    replace(settings, seed=args.seed + run),
                    latency=args.latency,
                    controller_delay=args.controller_delay,
                    controller_rate=args.controller_rate,
                    in_process=args.in_process,
                    scoring=args.scoring,
                    extender_args=args.extender_arg,
                )
            )
        results.append(result)
        rep = result.report
        print(
            f"  {backend} {nodes} nodes {claims} {shape}: {rep['pods_per_s']:.0f} pods/s, "
            f"{rep['bound']}/{rep['pods']} bound, failed {rep['failed_attempts'] or 0}, "
            f"API/pod {result.api_requests_per_pod or '—'}, server CPU ms/pod "
            f"{result.server_cpu_ms_per_pod or 0:.2f}",
            file=sys.stderr,
            flush=True,
        )
    return _report(results, args)


def _report(results: list[RunResult], args: argparse.Namespace) -> int:
    print()
    print(table(results))
    print()
    for line in verdicts(results):
        print(f"- {line}")
    if args.plot:
        print(f"\nplot: {args.plot}" if plot(results, args.plot) else "\nplot: matplotlib is not importable")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"header": header(), "results": [asdict(r) for r in results]}, fh, indent=2)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
