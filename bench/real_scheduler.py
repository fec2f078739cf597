"""The pipeline benchmark with the real kube-scheduler instead of the model (``--scheduler real``).

Run from the repository root, with the control-plane binaries (docs/testing.md)::

    export KUBEBUILDER_ASSETS=~/.cache/dra-extender/k8s/v1.36.3
    python -m bench.pipeline --scheduler real --sizes 500 --claims direct,template
    python -m bench.pipeline --scheduler real --sizes 5000 --claims template --json out.json

Per size, one real control plane (``tests/controlplane``: etcd, kube-apiserver,
kube-controller-manager v1.36) on loopback, with ``deploy/base`` applied (its ServiceAccount and
RBAC) and the cluster ``bench.cluster_gen`` generates for ``bench.pipeline`` (``--sizes`` nodes x
``--devices`` GPU slices, Ready and untainted Node objects, created 32 requests at a time; the
setup is timed and printed, never measured). Then, for each claim kind and repetition, two runs one
after the other on the same nodes and devices:

- ``in-tree``: a kube-scheduler with its default plugins (DynamicResources on, the default adaptive
  ``percentageOfNodesToScore``) and no extender;
- ``extender``: the KubeSchedulerConfiguration ``deploy/`` ships (DynamicResources off,
  ``percentageOfNodesToScore: 100``, the extender with filter / prioritize / preempt / bind,
  leader election off) pointed at a real ``dra-extender serve --kubeconfig`` process; both
  authenticate as ``deploy/``'s ServiceAccount, as the Deployment runs them.

Each run has a namespace of its own, its ResourceClaimTemplates (and for direct claims its
ResourceClaims) created before the run; the run's scheduler (and extender) is started, synced and
stopped around it, so no other profile's process watches its pods. All pods are created up front,
16 POSTs in flight, as fast as the API server takes them (the model runs also start with every
pod pending); a pod watch opened before the first POST notes when each pod shows a ``nodeName``.
Measured per run:

- pods/s: bound pods over the time from the first pod's POST to the last pod seen bound;
- latency p50 / p99: from each pod's POST to its watch event with a ``nodeName``;
- failed attempts: kube-scheduler's ``scheduler_schedule_attempts_total{result}`` (its secure
  port, authenticated with the admin client certificate) and the namespace's ``FailedScheduling``
  events;
- CPU seconds of each process over the same window (``/proc/<pid>/stat``), per bound pod: the
  run's kube-scheduler, kube-apiserver, etcd, kube-controller-manager, the extender, and this
  process (the client creating and watching the pods, reported apart from the cluster's total);
  the rest of the machine's busy CPU (``/proc/stat``) is reported as other load;
- correctness: every pod bound, every claim allocated on the pod's node and reserved for the pod,
  no device in two claims (cluster wide).

Between runs the pods are deleted with grace period 0 (no kubelet ends them), the claims deleted,
and the next run waits until the resourceclaim controller has let go of every claim.

Each size's folder (the components' logs, etcd's data) is removed at the end, unless a check failed
(then ``problems-<namespace>.json`` beside the logs holds the namespace's pods and claims, read twice
5 s apart) or ``BENCH_KEEP=1`` is set. Results and the docs: docs/performance.md, "Against the real
kube-scheduler".
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import re
import shutil
import ssl
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Self

import aiohttp
import orjson

from bench import cluster_gen
from bench.common import cpu_seconds, extender_root, percentile
from tests.controlplane.pki import KEY_TYPES

__all__ = ["PROCESSES", "RealRun", "detail_table", "main", "run", "summary_table"]

Profile = Literal["in-tree", "extender"]
PROFILES: tuple[Profile, ...] = ("in-tree", "extender")
IN_TREE_SCHEDULER = "bench-in-tree"
#: The processes whose CPU is measured (in this order in the tables); "total" sums them.
PROCESSES = ("kube-scheduler", "kube-apiserver", "etcd", "kube-controller-manager", "dra-extender")
CLIENT = "bench client"
V1 = "resource.k8s.io/v1"
#: Requests in flight while setting up nodes and slices, and while creating the pods of a run.
SETUP_CONCURRENCY = 32
CREATE_CONCURRENCY = 16
#: Bounds against a hang (never measured).
CLEANUP_TIMEOUT = 600.0


@dataclass
class Setup:
    nodes: int
    devices: int
    control_plane_s: float
    objects: int
    objects_s: float
    #: CPU seconds of each process (and the rest of the machine, "other") while creating them
    objects_cpu_s: dict[str, float] = field(default_factory=dict)
    #: ready seconds of each run's extender (informers synced), appended per extender run
    extender_start_s: list[float] = field(default_factory=list)


@dataclass
class RealRun:
    profile: str
    workload: dict[str, Any]
    pods: int
    bound: int
    seconds: float
    pods_per_s: float
    #: first POST to the last POST's answer
    creation_s: float
    latency_p50_s: float
    latency_p99_s: float
    #: template claims: from a pod's POST to its ``resourceClaimStatuses`` (the resourceclaim
    #: controller's lag, as the pod watch sees it), p50 / p99 / max; zeros for direct claims
    claim_lag_s: tuple[float, float, float]
    #: ``scheduler_schedule_attempts_total`` by result (scheduled, unschedulable, error)
    attempts: dict[str, float]
    failed_scheduling_events: int
    #: their messages (pod names elided), with counts
    failed_scheduling_messages: dict[str, int]
    cpu_s: dict[str, float]
    cpu_ms_per_pod: dict[str, float]
    #: the machine's busy CPU not spent by the measured processes, in cores (of the window)
    other_load_cores: float
    loadavg_before: float
    loadavg_after: float
    problems: list[str] = field(default_factory=list)
    #: mean ms per request of the extender's verbs (its /metrics), extender runs only
    extender_verbs_ms: dict[str, float] = field(default_factory=dict)
    #: the extender's answers with ``Error``, by "verb: reason" (``dra_extender_verb_errors_total``,
    #: ``dra_extender_binds_total{outcome="error"}``)
    extender_errors: dict[str, float] = field(default_factory=dict)
    #: what the extender's answers did (``extender_counts``), extender runs only
    extender_counts: dict[str, float] = field(default_factory=dict)
    #: kube-scheduler's mean scheduling attempt (``scheduler_scheduling_attempt_duration_seconds``), ms
    attempt_mean_ms: float = 0.0
    #: the extender profile's configuration (``--extender-config``: ``base``, ``base:pct=10``...); "" in-tree
    config: str = ""
    #: kube-scheduler's time per scheduling attempt, ms: ``algorithm`` (filter and score, the extender's
    #: filter and prioritize calls included), its in-tree extension points, and ``extenders`` (the rest)
    scheduler_ms: dict[str, float] = field(default_factory=dict)
    #: kube-scheduler's in-tree plugins, ms per attempt ("Filter/NodeResourcesFit"): each extension point's
    #: time split by the plugins' shares of ``scheduler_plugin_execution_duration_seconds`` (sampled cycles)
    plugins_ms: dict[str, float] = field(default_factory=dict)

    @property
    def failed_attempts(self) -> int:
        return int(sum(v for k, v in self.attempts.items() if k != "scheduled"))


# --- small helpers ---------------------------------------------------------------------------------------


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent not idle so far (``/proc/stat``; 0.0 without it)."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = [int(v) for v in fh.readline().split()[1:]]
    except OSError:
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    busy = sum(fields[:8]) - idle  # user nice system idle iowait irq softirq steal (guest is in user)
    return busy / os.sysconf("SC_CLK_TCK")


def _loadavg() -> float:
    with contextlib.suppress(OSError):
        return os.getloadavg()[0]
    return 0.0


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text: every sample by its full name (labels included, as printed)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        with contextlib.suppress(ValueError):
            out[name] = float(value)
    return out


def _labels(name: str) -> dict[str, str]:
    inside = name.partition("{")[2].rstrip("}")
    out = {}
    for part in inside.split(","):
        key, _, value = part.partition("=")
        if key:
            out[key.strip()] = value.strip().strip('"')
    return out


def scheduler_metrics(port: int, cert: Path, key: Path) -> dict[str, float]:
    """kube-scheduler's /metrics on its secure port, with a client certificate (its serving
    certificate is self-signed: not verified)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.load_cert_chain(str(cert), str(key))
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=context, timeout=30) as answer:
        return parse_metrics(answer.read().decode())


def schedule_attempts(samples: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, value in samples.items():
        if name.startswith("scheduler_schedule_attempts_total{"):
            result = _labels(name).get("result", "?")
            out[result] = out.get(result, 0.0) + value
    return out


#: The extension points of a scheduling cycle's algorithm (filter and score); the extenders' calls are
#: the rest of ``scheduler_scheduling_algorithm_duration_seconds``.
ALGORITHM_POINTS = ("PreFilter", "Filter", "PreScore", "Score")


def scheduler_breakdown(samples: dict[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """kube-scheduler's time per scheduling attempt, ms (``algorithm``, each of ``ALGORITHM_POINTS``
    and ``extenders``, the algorithm's rest), and per in-tree plugin ("Filter/NodeResourcesFit"): the
    extension point's time split by the plugins' shares of their (sampled) execution time."""
    family = "scheduler_scheduling_algorithm_duration_seconds"
    attempts = sum(v for k, v in samples.items() if k.startswith(f"{family}_count"))
    if not attempts:
        return {}, {}
    points: dict[str, float] = {}
    for name, value in samples.items():
        if name.startswith("scheduler_framework_extension_point_duration_seconds_sum{"):
            point = _labels(name).get("extension_point", "?")
            points[point] = points.get(point, 0.0) + value
    algorithm = sum(v for k, v in samples.items() if k.startswith(f"{family}_sum"))
    out = {"algorithm": round(1000 * algorithm / attempts, 2)}
    for point in ALGORITHM_POINTS:
        out[point] = round(1000 * points.get(point, 0.0) / attempts, 2)
    out["extenders"] = round(max(0.0, out["algorithm"] - sum(out[p] for p in ALGORITHM_POINTS)), 2)
    shares: dict[str, dict[str, float]] = {}
    for name, value in samples.items():
        if name.startswith("scheduler_plugin_execution_duration_seconds_sum{"):
            labels = _labels(name)
            point, plugin = labels.get("extension_point", "?"), labels.get("plugin", "?")
            shares.setdefault(point, {})[plugin] = shares.setdefault(point, {}).get(plugin, 0.0) + value
    plugins: dict[str, float] = {}
    for point, by_plugin in shares.items():
        total = sum(by_plugin.values())
        if point not in ALGORITHM_POINTS or not total:
            continue
        for plugin, value in by_plugin.items():
            plugins[f"{point}/{plugin}"] = round(out[point] * value / total, 3)
    return out, plugins


#: The extender's counters a run reports, by the name the bench gives them.
EXTENDER_COUNTERS = {
    "filter picks": "dra_extender_filter_picks_total",
    "holds that expired before their bind": 'dra_extender_holds_total{outcome="expired"}',
    "holds moved by their bind to another node": 'dra_extender_holds_total{outcome="moved"}',
    "binds that waited for a claim": "dra_extender_bind_claim_waits_total",
    "of which kept their decision": "dra_extender_bind_claim_decisions_kept_total",
    "claims the controller replaced, moved by their bind": 'dra_extender_replaced_claims_total{outcome="moved"}',
    "moved after the binding": 'dra_extender_replaced_claims_total{outcome="moved_after_binding"}',
    "moves that failed": 'dra_extender_replaced_claims_total{outcome="failed"}',
}


#: The connections kube-scheduler opened to the extender during a run (``dra_extender_http_connections_total``
#: at the end less at the start, less the bench's own scrape): one per request beyond the two idle
#: connections its transport keeps (``bench/connections.py``).
CONNECTIONS_OPENED = "connections kube-scheduler opened to the extender (that carried a request)"
CONNECTIONS_METRIC = "dra_extender_http_connections_total"


def extender_counts(samples: dict[str, float]) -> dict[str, float]:
    """``EXTENDER_COUNTERS`` read from the extender's /metrics samples (those it exports)."""
    return {name: samples[metric] for name, metric in EXTENDER_COUNTERS.items() if metric in samples}


def histogram_mean_ms(samples: dict[str, float], family: str, **match: str) -> float:
    total = count = 0.0
    for name, value in samples.items():
        base = name.partition("{")[0]
        labels = _labels(name)
        if any(labels.get(k) != v for k, v in match.items()):
            continue
        if base == f"{family}_sum":
            total += value
        elif base == f"{family}_count":
            count += value
    return round(1000 * total / count, 2) if count else 0.0


# --- the cluster through aiohttp ----------------------------------------------------------------------------


class Client:
    """An aiohttp session to the API server as the admin (keep-alive: a TLS handshake per
    connection, not per request, unlike the tests' urllib client)."""

    def __init__(self, server: str, ca: Path, cert: Path, key: Path, limit: int = SETUP_CONCURRENCY) -> None:
        context = ssl.create_default_context(cafile=str(ca))
        context.load_cert_chain(str(cert), str(key))
        self.server = server
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=context, limit=limit + 4),
            headers={"Accept": "application/json", "User-Agent": "bench-real-scheduler"},
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
        )

    async def close(self) -> None:
        await self.session.close()

    async def send(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        data = None if body is None else orjson.dumps(body)
        headers = {"Content-Type": content_type} if data is not None else None
        for attempt in itertools.count():
            async with self.session.request(method, self.server + path, data=data, headers=headers) as answer:
                raw = await answer.read()
                if answer.status == 429 and attempt < 20:  # the API server's priority and fairness
                    await asyncio.sleep(float(answer.headers.get("Retry-After", "1")))
                    continue
                if answer.status >= 300:
                    raise RuntimeError(f"{method} {path}: HTTP {answer.status}: {raw[:300]!r}")
                return orjson.loads(raw) if raw else None
        raise AssertionError("unreachable")

    async def create(self, path: str, body: Any) -> Any:
        return await self.send("POST", path, body)

    async def merge_patch(self, path: str, body: Any) -> Any:
        return await self.send("PATCH", path, body, "application/merge-patch+json")


async def _bounded(items: Iterable[Any], work: Callable[[Any], Any], concurrency: int) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(item: Any) -> None:
        async with gate:
            await work(item)

    await asyncio.gather(*(one(item) for item in items))


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _node_status() -> dict[str, Any]:
    resources = {"cpu": "64", "memory": "256Gi", "pods": "250"}
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "a benchmark node",
        "lastHeartbeatTime": _now(),
        "lastTransitionTime": _now(),
    }
    return {"status": {"capacity": resources, "allocatable": resources, "conditions": [ready]}}


#: The namespace of the pods and claims that hold devices before the runs (``--prefill``).
PREFILL_NAMESPACE = "bench-prefill"


def prefill_plan(nodes: int, devices: int, fraction: float, layout: str, seed: int) -> dict[str, int]:
    """Per node, how many of its GPUs are taken before the runs: ``fraction`` of all of them,
    ``packed`` (whole nodes, in an order the seed shuffles: what binpack scoring leaves behind) or
    ``spread`` (each taken device drawn at random from all of them)."""
    total = round(nodes * devices * fraction)
    names = [f"node-{n:05d}" for n in range(nodes)]
    rng = random.Random(seed)
    if layout == "packed":
        rng.shuffle(names)
        plan: dict[str, int] = {}
        for name in names:
            if total <= 0:
                break
            plan[name] = min(devices, total)
            total -= plan[name]
        return plan
    return dict(Counter(names[i // devices] for i in rng.sample(range(nodes * devices), total)))


async def prefill(client: Client, plan: dict[str, int]) -> None:
    """For each node of ``plan``, a pod bound to it (``spec.nodeName`` set at creation: no scheduler
    involved) with one claim that holds that many of the node's GPUs, allocated and reserved for it,
    as a scheduler would have left them."""
    await client.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PREFILL_NAMESPACE}}
    )
    claims_path = f"/apis/{V1}/namespaces/{PREFILL_NAMESPACE}/resourceclaims"

    async def one(item: tuple[str, int]) -> None:
        node, count = item
        name = f"fill-{node}"
        request = {"name": "gpu", "exactly": {"deviceClassName": cluster_gen.GPU_DRIVER, "count": count}}
        claim = await client.create(
            claims_path,
            {
                "apiVersion": V1,
                "kind": "ResourceClaim",
                "metadata": {"name": name},
                "spec": {"devices": {"requests": [request]}},
            },
        )
        pod = await client.create(
            f"/api/v1/namespaces/{PREFILL_NAMESPACE}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name},
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                },
            },
        )
        claim["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": cluster_gen.GPU_DRIVER, "pool": node, "device": f"gpu-{i}"}
                        for i in range(count)
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": name, "uid": pod["metadata"]["uid"]}],
        }
        await client.send("PUT", f"{claims_path}/{name}/status", claim)

    await _bounded(sorted(plan.items()), one, SETUP_CONCURRENCY)


async def create_cluster(client: Client, objects: Sequence[dict[str, Any]]) -> int:
    """DeviceClasses, then each Node (made Ready, its admission taint removed, as
    ``ControlPlane.make_ready`` does) with its slices, ``SETUP_CONCURRENCY`` requests at a time.
    Returns the number of objects created."""
    classes = [o for o in objects if o["kind"] == "DeviceClass"]
    slices: dict[str, list[dict[str, Any]]] = {}
    for o in objects:
        if o["kind"] == "ResourceSlice":
            slices.setdefault(o["spec"].get("nodeName", ""), []).append(o)
    nodes = [o for o in objects if o["kind"] == "Node"]
    for device_class in classes:
        await client.create(f"/apis/{V1}/deviceclasses", device_class)

    async def node(obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        await client.create("/api/v1/nodes", obj)
        await client.merge_patch(f"/api/v1/nodes/{name}/status", _node_status())
        # the only taint a new node has is TaintNodesByCondition's not-ready (no node-lifecycle controller)
        await client.merge_patch(f"/api/v1/nodes/{name}", {"spec": {"taints": None}})
        for piece in slices.get(name, ()):
            await client.create(f"/apis/{V1}/resourceslices", piece)

    await _bounded(nodes, node, SETUP_CONCURRENCY)
    return len(classes) + len(nodes) + sum(len(v) for v in slices.values())


def _in_namespace(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    copy: dict[str, Any] = orjson.loads(orjson.dumps(obj))
    meta = copy["metadata"]
    meta["namespace"] = namespace
    meta.pop("uid", None)
    return copy


def run_objects(objects: Sequence[dict[str, Any]], namespace: str, scheduler_name: str) -> dict[str, list[Any]]:
    """The templates, claims and pods of a workload, moved to ``namespace`` and given to
    ``scheduler_name``."""
    out: dict[str, list[Any]] = {"ResourceClaimTemplate": [], "ResourceClaim": [], "Pod": []}
    for obj in objects:
        if obj["kind"] in out:
            moved = _in_namespace(obj, namespace)
            if obj["kind"] == "Pod":
                moved["spec"]["schedulerName"] = scheduler_name
                moved["spec"]["terminationGracePeriodSeconds"] = 0
            out[obj["kind"]].append(moved)
    return out


# --- one measured run ----------------------------------------------------------------------------------------


@dataclass
class Watched:
    created: dict[str, float] = field(default_factory=dict)
    bound: dict[str, float] = field(default_factory=dict)
    #: when the pod first showed ``status.resourceClaimStatuses`` (its template claims created)
    claimed: dict[str, float] = field(default_factory=dict)
    first_post: float = 0.0
    last_created: float = 0.0
    all_bound: asyncio.Event = field(default_factory=asyncio.Event)
    watching: asyncio.Event = field(default_factory=asyncio.Event)


async def _watch_pods(client: Client, namespace: str, expected: int, seen: Watched) -> None:
    """Note when each pod of ``namespace`` first shows a nodeName; re-lists after a broken watch."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    while True:
        listing = await client.send("GET", path)
        for pod in listing.get("items") or ():
            _note(pod, seen)
        if len(seen.bound) >= expected:
            seen.all_bound.set()
            return
        params = {
            "watch": "true",
            "resourceVersion": listing["metadata"]["resourceVersion"],
            "allowWatchBookmarks": "false",
            "timeoutSeconds": "3600",
        }
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
            async with client.session.get(client.server + path, params=params) as answer:
                if answer.status != 200:
                    raise RuntimeError(f"watch {path}: HTTP {answer.status}: {(await answer.read())[:300]!r}")
                seen.watching.set()  # the API server answers a watch's headers once it is registered
                async for line in answer.content:
                    if not line.strip():
                        continue
                    event = orjson.loads(line)
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        _note(event.get("object") or {}, seen)
                        if len(seen.bound) >= expected:
                            seen.all_bound.set()
                            return


def _note(pod: dict[str, Any], seen: Watched) -> None:
    name = pod["metadata"]["name"]
    if (pod.get("status") or {}).get("resourceClaimStatuses"):
        seen.claimed.setdefault(name, time.monotonic())
    if (pod.get("spec") or {}).get("nodeName"):
        seen.bound.setdefault(name, time.monotonic())


async def _create_pods(client: Client, pods: Sequence[dict[str, Any]], seen: Watched) -> None:
    async def one(pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        seen.created[name] = time.monotonic()
        if not seen.first_post:
            seen.first_post = seen.created[name]
        await client.create(f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods", pod)
        seen.last_created = time.monotonic()

    await _bounded(pods, one, CREATE_CONCURRENCY)


async def _measure(
    client: Client, namespace: str, pods: Sequence[dict[str, Any]], time_limit: float, on_start: Callable[[], None]
) -> Watched:
    seen = Watched()
    watch = asyncio.create_task(_watch_pods(client, namespace, len(pods), seen))
    try:
        await asyncio.wait_for(seen.watching.wait(), 60)
        on_start()
        creating = asyncio.create_task(_create_pods(client, pods, seen))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(seen.all_bound.wait(), time_limit)
        await creating
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
    return seen


# --- checks --------------------------------------------------------------------------------------------------


def _replaced_claim(claims: dict[str, Any], pod_meta: dict[str, Any], pod_claim: str, named: str) -> str:
    """Another claim made for the same entry of the pod (owner and ``pod-claim-name``), allocated
    and reserved for it, while the pod's status names ``named``: kube-controller-manager 1.36's
    resourceclaim controller made a second claim after the pod was scheduled with the first
    (kubernetes#140217). The name of that first claim, or ""."""
    for other, claim in claims.items():
        meta = claim.get("metadata") or {}
        owned = any(o.get("uid") == pod_meta["uid"] for o in meta.get("ownerReferences") or ())
        entry = (meta.get("annotations") or {}).get("resource.kubernetes.io/pod-claim-name")
        status = claim.get("status") or {}
        reserved = any(r.get("uid") == pod_meta["uid"] for r in status.get("reservedFor") or ())
        if other != named and owned and entry == pod_claim and status.get("allocation") and reserved:
            return other
    return ""


def verify(admin: Any, namespace: str, expected: int) -> list[str]:
    """Every pod bound, every claim allocated on its pod's node and reserved for it, no device in
    two claims anywhere in the cluster. Returns the problems (empty: all correct)."""
    problems: list[str] = []
    pods = admin.items(f"/api/v1/namespaces/{namespace}/pods")
    claims = {c["metadata"]["name"]: c for c in admin.items(f"/apis/{V1}/namespaces/{namespace}/resourceclaims")}
    unbound = [p["metadata"]["name"] for p in pods if not (p.get("spec") or {}).get("nodeName")]
    if len(pods) != expected:
        problems.append(f"{len(pods)} pods, expected {expected}")
    if unbound:
        problems.append(f"{len(unbound)} pods not bound (first: {unbound[0]})")
    for pod in pods:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        node = spec.get("nodeName")
        if not node:
            continue
        generated = {
            s["name"]: s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
        }
        for ref in spec.get("resourceClaims") or ():
            name = ref.get("resourceClaimName") or generated.get(ref["name"])
            claim = claims.get(name or "")
            if claim is None:
                problems.append(f"pod {meta['name']}: claim {ref['name']} ({name}) not found")
                continue
            status = claim.get("status") or {}
            allocation = status.get("allocation")
            if not allocation:
                replaced = _replaced_claim(claims, meta, ref["name"], name or "")
                problems.append(
                    f"claim {name} of bound pod {meta['name']} not allocated"
                    + (
                        f" (the resourceclaim controller made it after {replaced}, which is allocated for the pod:"
                        " kubernetes#140217)"
                        if replaced
                        else ""
                    )
                )
                continue
            reserved = {(r.get("name"), r.get("uid")) for r in status.get("reservedFor") or ()}
            if (meta["name"], meta["uid"]) not in reserved:
                problems.append(f"claim {name} not reserved for its pod {meta['name']}")
            for result in (allocation.get("devices") or {}).get("results") or ():
                if result.get("pool") != node:
                    problems.append(
                        f"claim {name}: device {result.get('device')} of pool {result.get('pool')}, pod on {node}"
                    )
    holders: dict[tuple[str, str, str], str] = {}
    for claim in admin.items(f"/apis/{V1}/resourceclaims"):
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or ():
            device = (result["driver"], result["pool"], result["device"])
            owner = f"{claim['metadata']['namespace']}/{claim['metadata']['name']}"
            if device in holders:
                problems.append(f"device {'/'.join(device)} in two claims: {holders[device]} and {owner}")
            holders[device] = owner
    return problems


_POD_NAMES = re.compile(r"pod-\d+[-\w]*")


def failed_scheduling_events(admin: Any, namespace: str) -> Counter[str]:
    """The namespace's FailedScheduling events, counted by message (pod and claim names elided)."""
    out: Counter[str] = Counter()
    for event in admin.items(f"/api/v1/namespaces/{namespace}/events", fieldSelector="reason=FailedScheduling"):
        count = max(1, int(event.get("count") or 0), int((event.get("series") or {}).get("count") or 0))
        out[_POD_NAMES.sub("<pod>", str(event.get("message") or ""))[:240]] += count
    return out


def cleanup(admin: Any, namespace: str) -> float:
    """Pods deleted with grace period 0, claims deleted, then waits until the namespace holds no
    pod and no claim (the resourceclaim controller removed its finalizer once no pod reserves
    it); the namespace goes last. Returns the seconds it took."""
    start = time.monotonic()
    admin.request("DELETE", f"/api/v1/namespaces/{namespace}/pods", {"gracePeriodSeconds": 0})
    admin.request("DELETE", f"/apis/{V1}/namespaces/{namespace}/resourceclaims", {})
    deadline = start + CLEANUP_TIMEOUT
    while True:
        pods = admin.get(f"/api/v1/namespaces/{namespace}/pods", limit="1")["items"]
        claims = admin.get(f"/apis/{V1}/namespaces/{namespace}/resourceclaims", limit="1")["items"]
        if not pods and not claims:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{namespace}: pods or claims left after {CLEANUP_TIMEOUT:.0f} s")
        time.sleep(0.5)
    admin.delete(f"/api/v1/namespaces/{namespace}")
    return time.monotonic() - start


# --- the runs of one size ---------------------------------------------------------------------------------------


class AdminPlane:
    """A real control plane (``tests/controlplane``) with ``deploy/base`` applied (its namespace,
    ServiceAccount and RBAC; ``deployment`` has its token) and an admin client certificate, as a
    context manager: the plane is stopped on exit, or when ``_populate`` (a subclass's cluster)
    fails. ``_with_client`` runs coroutines with an admin ``Client``."""

    def __init__(self, assets: Any, folder: Path) -> None:
        from tests.controlplane.cluster import ControlPlane, Options

        self.folder = folder
        self.plane = ControlPlane(assets, folder, Options())
        #: seconds to start the plane and apply deploy/base
        self.control_plane_s = 0.0

    def __enter__(self) -> Self:
        from tests.e2e.harness import Deployment

        started = time.monotonic()
        self.plane.start()
        try:
            self.deployment = Deployment(self.plane)
            self.control_plane_s = time.monotonic() - started
            pair = self.plane.client_pair("bench-admin", "bench-admin", "system:masters")
            assert self.plane.pki is not None
            self.ca, self.cert, self.key = self.plane.pki.ca.pair.cert, pair.cert, pair.key
            self._populate()
        except BaseException:
            self.plane.stop()
            raise
        return self

    def _populate(self) -> None:
        """Create the cluster on the started plane (subclasses)."""

    def __exit__(self, *_: object) -> None:
        self.plane.stop()

    async def _with_client(self, work: Callable[[Client], Any]) -> Any:
        client = Client(self.plane.server, self.ca, self.cert, self.key)
        try:
            return await work(client)
        finally:
            await client.close()


class Bench(AdminPlane):
    """One control plane for one cluster size: its setup, then the runs."""

    def __init__(
        self,
        assets: Any,
        folder: Path,
        nodes: int,
        devices: int,
        seed: int,
        prefill: float = 0.0,
        prefill_layout: str = "packed",
    ) -> None:
        super().__init__(assets, folder)
        self.nodes, self.devices, self.seed = nodes, devices, seed
        #: GPUs taken before the runs, by node (``--prefill``)
        self.prefilled = prefill_plan(nodes, devices, prefill, prefill_layout, seed) if prefill else {}
        self.prefill, self.prefill_layout = prefill, prefill_layout
        self.setup: Setup | None = None

    def _populate(self) -> None:
        spec = cluster_gen.ClusterSpec(nodes=self.nodes, devices=self.devices, nics=0, pods=0, seed=self.seed)
        objects = cluster_gen.generate(spec)
        pids = self.plane.pids()
        cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
        client0, machine0 = time.process_time(), machine_busy_seconds()
        started = time.monotonic()
        count = asyncio.run(self._with_client(lambda client: create_cluster(client, objects)))
        self.setup = Setup(
            self.nodes, self.devices, round(self.control_plane_s, 1), count, round(time.monotonic() - started, 1)
        )
        cpu = {name: round(cpu_seconds(pid) - cpu0[name], 1) for name, pid in pids.items()}
        cpu[CLIENT] = round(time.process_time() - client0, 1)
        cpu["other"] = round(max(0.0, machine_busy_seconds() - machine0 - sum(cpu.values())), 1)
        self.setup.objects_cpu_s = cpu
        if self.prefilled:
            plan = self.prefilled
            asyncio.run(self._with_client(lambda client: prefill(client, plan)))

    def _start(self, profile: Profile, name: str, config_spec: str) -> tuple[Callable[[], None], dict[str, int], Any]:
        """The profile's kube-scheduler (and extender), synced: (stop, pids, extender or None)."""
        from tests.e2e.harness import Extender

        if profile == "in-tree":
            config = {"leaderElection": {"leaderElect": False}, "profiles": [{"schedulerName": IN_TREE_SCHEDULER}]}
            config["clientConnection"] = {"kubeconfig": str(self.deployment.kubeconfig), "qps": 1000, "burst": 2000}
            process = self.plane.start_scheduler(config, name=name)
            return (lambda: self.plane.stop_scheduler(name)), {"kube-scheduler": process.popen.pid}, None
        started = time.monotonic()
        tls = extender_tls(config_spec, self.plane.logs / f"tls-{name}")
        extender = Extender(
            self.deployment.kubeconfig,
            self.plane.logs / f"dra-extender-{name}.log",
            args=["--log-level", "info", *extender_overlay_args(config_spec), *(tls.server_args if tls else ())],
            root=extender_root(),
            tls=tls.client_context() if tls else None,
        ).start(timeout=CLEANUP_TIMEOUT)
        assert self.setup is not None
        self.setup.extender_start_s.append(round(time.monotonic() - started, 1))
        config = extender_scheduler_config(config_spec)
        (only,) = config["extenders"]
        only["urlPrefix"] = extender.url + "/"
        if tls is not None:
            only["enableHTTPS"] = True
            only["tlsConfig"] = tls.scheduler_tls_config
        config["leaderElection"] = {"leaderElect": False}  # one replica; the extender follows no Lease
        config["clientConnection"] = {"kubeconfig": str(self.deployment.kubeconfig), "qps": 1000, "burst": 2000}
        try:
            process = self.plane.start_scheduler(config, name=name)
        except BaseException:
            extender.stop()
            raise

        def stop() -> None:
            self.plane.stop_scheduler(name)
            extender.stop()

        assert extender.popen is not None
        return stop, {"kube-scheduler": process.popen.pid, "dra-extender": extender.popen.pid}, extender

    def run(
        self, profile: Profile, claims: str, pods: int, repeat: int, time_limit: float, config: str = "base"
    ) -> RealRun:
        """One run; ``config`` is the extender profile's ``--extender-config`` (ignored in-tree)."""
        admin = self.plane.admin
        variant = "" if profile == "in-tree" else _slug(config)
        namespace = f"real-{profile}-{claims}-{repeat}" + (f"-{variant}" if variant and config != "base" else "")
        workload = {"nodes": self.nodes, "devices": self.devices, "pods": pods, "claims": claims, "shape": "one-gpu"}
        if self.prefilled:
            workload["prefill"] = f"{self.prefill:g} {self.prefill_layout}"
        spec = cluster_gen.ClusterSpec(
            nodes=1,
            devices=self.devices,
            nics=0,
            pods=pods,
            mix={claims: 1.0},
            shapes={"one-gpu": 1.0},
            seed=self.seed + repeat,
        )
        generated = [
            o for o in cluster_gen.generate(spec) if o["kind"] in ("ResourceClaimTemplate", "ResourceClaim", "Pod")
        ]
        scheduler_name = IN_TREE_SCHEDULER if profile == "in-tree" else self._extender_scheduler_name()
        made = run_objects(generated, namespace, scheduler_name)
        admin.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})

        async def prepare(client: Client) -> None:
            for template in made["ResourceClaimTemplate"]:
                await client.create(f"/apis/{V1}/namespaces/{namespace}/resourceclaimtemplates", template)
            await _bounded(
                made["ResourceClaim"],
                lambda c: client.create(f"/apis/{V1}/namespaces/{namespace}/resourceclaims", c),
                SETUP_CONCURRENCY,
            )

        asyncio.run(self._with_client(prepare))
        name = f"kube-scheduler-{profile}"
        stop, pids, extender = self._start(profile, name, config)
        port = self.plane.scheduler_ports[name]
        try:
            pids = {
                **pids,
                "kube-apiserver": self.plane.pids()["kube-apiserver"],
                "etcd": self.plane.pids()["etcd"],
                "kube-controller-manager": self.plane.pids()["kube-controller-manager"],
            }
            before: dict[str, float] = {}
            marks: dict[str, float] = {}
            # the extender's connections so far (the harness's readiness polls, this scrape)
            connections_before = (
                parse_metrics(_http_text(extender.url + "/metrics", extender.tls)).get(CONNECTIONS_METRIC, 0.0)
                if extender is not None
                else 0.0
            )

            def on_start() -> None:
                marks["load"] = _loadavg()
                marks["machine"] = machine_busy_seconds()
                marks["client"] = time.process_time()
                before.update({p: cpu_seconds(pid) for p, pid in pids.items()})

            seen = asyncio.run(
                self._with_client(lambda client: _measure(client, namespace, made["Pod"], time_limit, on_start))
            )
            cpu = {p: cpu_seconds(pid) - before[p] for p, pid in pids.items()}
            client_cpu = time.process_time() - marks["client"]
            machine = machine_busy_seconds() - marks["machine"]
            cpu_window = max(1e-9, time.monotonic() - seen.first_post)  # a little past the last bind
            load_after = _loadavg()
            samples = scheduler_metrics(port, self.cert, self.key)
            scheduler_ms, plugins_ms = scheduler_breakdown(samples)
            verbs: dict[str, float] = {}
            errors: dict[str, float] = {}
            counts: dict[str, float] = {}
            if extender is not None:
                extender_samples = parse_metrics(_http_text(extender.url + "/metrics", extender.tls))
                counts = extender_counts(extender_samples)
                if CONNECTIONS_METRIC in extender_samples:  # less this scrape's own connection
                    counts[CONNECTIONS_OPENED] = extender_samples[CONNECTIONS_METRIC] - connections_before - 1
                for verb in ("filter", "prioritize", "bind", "preempt"):
                    mean = histogram_mean_ms(extender_samples, "dra_extender_request_duration_seconds", verb=verb)
                    if mean:
                        verbs[verb] = mean
                for sample, value in extender_samples.items():
                    labels = _labels(sample)
                    if sample.startswith("dra_extender_verb_errors_total{") and value:
                        errors[f"{labels.get('verb')}: {labels.get('reason')}"] = value
                    elif sample.startswith("dra_extender_binds_total{") and labels.get("outcome") == "error" and value:
                        errors[f"bind: {labels.get('reason')}"] = value
        finally:
            stop()
        end = max(seen.bound.values()) if seen.bound else time.monotonic()
        window = max(1e-9, end - seen.first_post)
        bound = len(seen.bound)
        latencies = [seen.bound[p] - seen.created[p] for p in seen.bound if p in seen.created]
        lags = [seen.claimed[p] - seen.created[p] for p in seen.claimed if p in seen.created]
        per_pod = max(1, bound)
        cpu_ms = {p: round(1000 * cpu.get(p, 0.0) / per_pod, 2) for p in PROCESSES}
        cpu_ms["total"] = round(sum(cpu_ms[p] for p in PROCESSES), 2)
        cpu_ms[CLIENT] = round(1000 * client_cpu / per_pod, 2)
        ours = sum(cpu.values()) + client_cpu
        problems = verify(admin, namespace, len(made["Pod"]))
        if problems:
            # the evidence, kept with the components' logs: the namespace's pods and claims as they
            # are now, and once more a few seconds later (a late write, or an allocation undone?)
            evidence: dict[str, Any] = {"problems": problems}
            for when in ("now", "later"):
                if when == "later":
                    time.sleep(5)
                evidence[f"pods {when}"] = admin.items(f"/api/v1/namespaces/{namespace}/pods")
                evidence[f"claims {when}"] = admin.items(f"/apis/{V1}/namespaces/{namespace}/resourceclaims")
            evidence["problems later"] = verify(admin, namespace, len(made["Pod"]))
            (self.folder / f"problems-{namespace}.json").write_text(json.dumps(evidence, indent=1), encoding="utf-8")
        events = failed_scheduling_events(admin, namespace)
        result = RealRun(
            profile=profile,
            workload=workload,
            pods=len(made["Pod"]),
            bound=bound,
            seconds=round(window, 2),
            pods_per_s=round(bound / window, 1),
            creation_s=round(seen.last_created - seen.first_post, 2),
            latency_p50_s=round(percentile(latencies, 50), 2),
            latency_p99_s=round(percentile(latencies, 99), 2),
            claim_lag_s=(
                round(percentile(lags, 50), 2),
                round(percentile(lags, 99), 2),
                round(max(lags, default=0.0), 2),
            ),
            attempts=schedule_attempts(samples),
            failed_scheduling_events=sum(events.values()),
            failed_scheduling_messages=dict(events.most_common(5)),
            cpu_s={**{p: round(v, 2) for p, v in cpu.items()}, CLIENT: round(client_cpu, 2)},
            cpu_ms_per_pod=cpu_ms,
            other_load_cores=round(max(0.0, machine - ours) / cpu_window, 2),
            loadavg_before=round(marks.get("load", 0.0), 2),
            loadavg_after=round(load_after, 2),
            problems=problems,
            extender_verbs_ms=verbs,
            extender_errors=errors,
            extender_counts=counts,
            attempt_mean_ms=histogram_mean_ms(samples, "scheduler_scheduling_attempt_duration_seconds"),
            config="" if profile == "in-tree" else config,
            scheduler_ms=scheduler_ms,
            plugins_ms=plugins_ms,
        )
        cleanup(admin, namespace)
        return result

    def _extender_scheduler_name(self) -> str:
        from tests.deploy.render import DEPLOY, render, scheduler_config

        (profile,) = scheduler_config(render(DEPLOY / "base"))["profiles"]
        return str(profile["schedulerName"])


def extender_scheduler_config(spec: str) -> dict[str, Any]:
    """The KubeSchedulerConfiguration of an extender run: ``deploy/<overlay>``'s as shipped (``base``,
    or another kustomization under ``deploy/``), then the overrides after a colon, comma separated:
    ``pct=N`` (``percentageOfNodesToScore``), ``scores=none`` (every in-tree PreScore and Score plugin
    off), ``weight=N`` (the extender's), ``picks=off`` (the extender without ``--filter-picks-node``:
    ``extender_overlay_args``), ``tls=rsa`` or ``tls=ec`` (the extender served with mutual TLS, as
    ``deploy/tls`` configures it, certificates of that key type: ``extender_tls``; set on the
    configuration when the run starts). Raises ValueError naming a bad spec."""
    from tests.deploy.render import DEPLOY, render, scheduler_config

    overlay, _, overrides = spec.partition(":")
    folder = DEPLOY / overlay
    if not overlay or not (folder / "kustomization.yaml").is_file():
        raise ValueError(f"--extender-config {spec!r}: no kustomization at deploy/{overlay}")
    config: dict[str, Any] = json.loads(json.dumps(scheduler_config(render(folder))))
    (profile,) = config["profiles"]
    (extender,) = config["extenders"]
    for item in filter(None, overrides.split(",")):
        key, _, value = item.partition("=")
        if key == "pct" and value.isdigit() and int(value) <= 100:
            profile["percentageOfNodesToScore"] = int(value)
        elif key == "scores" and value == "none":
            plugins = profile.setdefault("plugins", {})
            for point in ("preScore", "score"):
                plugins.setdefault(point, {})["disabled"] = [{"name": "*"}]
        elif key == "weight" and value.isdigit():
            extender["weight"] = int(value)
        elif (key == "picks" and value == "off") or (key == "tls" and value in TLS_KEYS):
            pass  # the extender's flags and TLS: ``extender_overlay_args``, ``extender_tls``
        else:
            raise ValueError(
                f"--extender-config {spec!r}: unknown override {item!r} "
                f"(pct=N, scores=none, weight=N, picks=off, tls={'|'.join(TLS_KEYS)})"
            )
    return config


#: ``tls=KEY`` in ``--extender-config``: the extender served with mutual TLS as ``deploy/tls``
#: configures it, with certificates of this key type (``bench.connections.make_certificates``).
TLS_KEYS = KEY_TYPES


@dataclass(frozen=True)
class ExtenderTls:
    """The files of a run with ``tls=KEY``: made for it, in its logs folder."""

    files: dict[str, Path]

    @property
    def server_args(self) -> list[str]:
        """The extender's flags, as ``deploy/tls`` gives them (client certificates required)."""
        from bench.connections import server_args

        return server_args("mtls", self.files)

    @property
    def scheduler_tls_config(self) -> dict[str, Any]:
        """kube-scheduler's ``tlsConfig`` for the extender, as ``deploy/tls`` writes it."""
        files = self.files
        return {
            "insecure": False,
            "caFile": str(files["ca"]),
            "certFile": str(files["client_cert"]),
            "keyFile": str(files["client_key"]),
        }

    def client_context(self) -> ssl.SSLContext:
        """The bench's own client side (readiness, metrics), with the same client certificate."""
        from bench.connections import client_context

        context = client_context("mtls", self.files)
        assert context is not None
        return context


def extender_tls(spec: str, folder: Path) -> ExtenderTls | None:
    """With ``tls=KEY`` among the spec's overrides: certificates made in ``folder`` (created)."""
    from bench.connections import make_certificates

    keys = [item.partition("=")[2] for item in spec.partition(":")[2].split(",") if item.startswith("tls=")]
    if not keys:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    return ExtenderTls(make_certificates(folder, keys[-1]))


def extender_overlay_args(spec: str) -> list[str]:
    """The extender's flags ``deploy/<overlay>`` adds to ``deploy/base``'s (``--filter-picks-node`` in
    ``large-cluster``, unless the spec's overrides say ``picks=off``): the run's extender gets them,
    as the overlay's Deployment would."""
    from tests.deploy.render import DEPLOY, container, find, render

    def args(overlay: str) -> list[str]:
        deployment = find(render(DEPLOY / overlay), "Deployment", "dra-extender-scheduler")
        return [str(arg) for arg in container(deployment, "extender").get("args") or ()]

    name, _, overrides = spec.partition(":")
    base = args("base")
    overlay = args(name)
    if overlay[: len(base)] != base:
        raise ValueError(f"--extender-config {spec!r}: the overlay's extender args do not extend the base's")
    added = overlay[len(base) :]
    if "picks=off" in overrides.split(","):
        added = [arg for arg in added if arg != "--filter-picks-node"]
    return added


def _slug(spec: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", spec.lower()).strip("-")


def _http_text(url: str, context: ssl.SSLContext | None = None) -> str:
    with urllib.request.urlopen(url, timeout=30, context=context) as answer:
        return str(answer.read().decode())


# --- output -----------------------------------------------------------------------------------------------------


def _label(workload: dict[str, Any]) -> str:
    label = f"{workload['nodes']} nodes, {workload['claims']} claims"
    if workload.get("prefill"):
        label += f", {workload['prefill']} prefilled"
    return label


def _pairs(results: Sequence[RealRun]) -> list[tuple[RealRun | None, RealRun | None]]:
    """Each extender run beside the in-tree run before it (of the same workload), in run order; an
    in-tree run no extender run followed stands alone."""
    out: list[tuple[RealRun | None, RealRun | None]] = []
    latest: RealRun | None = None
    paired = True
    for r in results:
        if r.profile == "in-tree":
            if latest is not None and not paired:
                out.append((latest, None))
            latest, paired = r, False
        else:
            same = latest is not None and latest.workload == r.workload
            out.append((latest if same else None, r))
            paired = paired or same
    if latest is not None and not paired:
        out.append((latest, None))
    return out


def _profile_label(r: RealRun) -> str:
    return r.profile if r.profile == "in-tree" or r.config in ("", "base") else f"extender ({r.config})"


def summary_table(results: Sequence[RealRun]) -> str:
    """The issue's table: pods/s side by side, and CPU per bound pod of all the cluster's processes."""
    lines = [
        "| workload | in-tree pods/s | extender pods/s | ratio "
        "| CPU ms per bound pod, all processes: in-tree / extender | other load, cores: in-tree / extender |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for in_tree, extender in _pairs(results):
        some = in_tree or extender
        assert some is not None
        a = f"{in_tree.pods_per_s:.1f}" if in_tree else "—"
        b = f"{extender.pods_per_s:.1f}" if extender else "—"
        ratio = (
            f"{extender.pods_per_s / in_tree.pods_per_s:.2f}" if in_tree and extender and in_tree.pods_per_s else "—"
        )
        cpu = " / ".join(f"{r.cpu_ms_per_pod['total']:.1f}" if r else "—" for r in (in_tree, extender))
        load = " / ".join(f"{r.other_load_cores:.2f}" if r else "—" for r in (in_tree, extender))
        variant = extender.config if extender and extender.config not in ("", "base") else ""
        label = _label(some.workload) + (f", {variant}" if variant else "")
        lines.append(f"| {label} ({some.pods} pods) | {a} | {b} | {ratio} | {cpu} | {load} |")
    return "\n".join(lines)


def detail_table(results: Sequence[RealRun]) -> str:
    """Every run: counts, latency and CPU ms per bound pod by process."""
    short = {"kube-scheduler": "scheduler", "kube-apiserver": "apiserver", "etcd": "etcd",
             "kube-controller-manager": "ctrl-mgr", "dra-extender": "extender"}  # fmt: skip
    lines = [
        "| workload | profile | bound | pods/s | failed attempts (events) | latency p50 / p99 s | "
        + " | ".join(short[p] for p in PROCESSES)
        + " | total | client | other load, cores | correct |",
        "|---|---|---:|---:|---:|---:|" + "---:|" * (len(PROCESSES) + 3) + "---|",
    ]
    for r in results:
        cpu = " | ".join(
            f"{r.cpu_ms_per_pod[p]:.1f}" if p != "dra-extender" or r.profile == "extender" else "—" for p in PROCESSES
        )
        correct = "yes" if not r.problems else f"NO: {len(r.problems)} problems"
        lines.append(
            f"| {_label(r.workload)} | {_profile_label(r)} | {r.bound}/{r.pods} | {r.pods_per_s:.1f} "
            f"| {r.failed_attempts} ({r.failed_scheduling_events}) | {r.latency_p50_s:.2f} / {r.latency_p99_s:.2f} "
            f"| {cpu} | {r.cpu_ms_per_pod['total']:.1f} | {r.cpu_ms_per_pod[CLIENT]:.1f} | {r.other_load_cores:.2f} "
            f"| {correct} |"
        )
    return "\n".join(lines)


def scheduler_table(results: Sequence[RealRun]) -> str:
    """kube-scheduler's time per scheduling attempt by extension point, and its costliest plugins."""
    lines = [
        "| workload | profile | algorithm ms | PreFilter | Filter | PreScore | Score | extenders "
        "| costliest plugins, ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        if not r.scheduler_ms:
            continue
        top = sorted(r.plugins_ms.items(), key=lambda item: -item[1])[:4]
        plugins = ", ".join(f"{name} {ms:.2f}" for name, ms in top)
        cells = " | ".join(f"{r.scheduler_ms.get(k, 0.0):.2f}" for k in ("algorithm", *ALGORITHM_POINTS, "extenders"))
        lines.append(f"| {_label(r.workload)} | {_profile_label(r)} | {cells} | {plugins} |")
    return "\n".join(lines)


def header() -> str:
    from bench.pipeline import header as model_header

    return f"{model_header()}, real kube-scheduler ({os.environ.get('KUBEBUILDER_ASSETS', '')})"


# --- command line ---------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    """``python -m bench.pipeline --scheduler real``: the options ``bench.pipeline`` parsed (sizes,
    devices, pods, claims, repeat, time limit, seed, json; the model's own options are ignored)."""
    from tests.controlplane.assets import AssetsMissing, find_assets

    try:
        assets = find_assets()
    except AssetsMissing as exc:
        print(f"--scheduler real needs the control-plane binaries: {exc}", file=sys.stderr)
        return 2
    shapes = getattr(args, "shapes", ["one-gpu"])
    if list(shapes) != ["one-gpu"]:
        print("--scheduler real: only --shapes one-gpu", file=sys.stderr)
        return 2
    sizes = [20] if getattr(args, "quick", False) else args.sizes
    configs = list(getattr(args, "extender_config", None) or ["base"])
    try:
        for spec in configs:
            extender_scheduler_config(spec)
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    profiles = list(getattr(args, "profiles", None) or PROFILES)
    runs: list[tuple[Profile, str]] = [("in-tree", "")] if "in-tree" in profiles else []
    if "extender" in profiles:
        runs += [("extender", spec) for spec in configs]
    print(header(), flush=True)
    print(f"load before: {_uptime()}", flush=True)
    results: list[RealRun] = []
    setups: list[Setup] = []
    keep = bool(os.environ.get("BENCH_KEEP"))
    for nodes in sizes:
        fraction = float(getattr(args, "prefill", 0.0) or 0.0)
        layout = str(getattr(args, "prefill_layout", "packed"))
        taken = sum(prefill_plan(nodes, args.devices, fraction, layout, args.seed).values()) if fraction else 0
        count = max(1, min(args.pods, (nodes * args.devices - taken) * 4 // 5))
        folder = Path(tempfile.mkdtemp(prefix=f"bench-real-{nodes}-"))
        first = len(results)
        failed = True
        try:
            with Bench(assets, folder, nodes, args.devices, args.seed, fraction, layout) as bench:
                assert bench.setup is not None
                setups.append(bench.setup)
                print(
                    f"  setup {nodes} nodes: control plane {bench.setup.control_plane_s} s, "
                    f"{bench.setup.objects} nodes, slices and classes in {bench.setup.objects_s} s",
                    file=sys.stderr,
                    flush=True,
                )
                for claims, repeat in itertools.product(args.claims, range(args.repeat)):
                    for profile, config in runs:
                        result = bench.run(profile, claims, count, repeat, args.time_limit, config)
                        results.append(result)
                        print(
                            f"  {_profile_label(result)} {nodes} nodes {claims}: {result.pods_per_s:.1f} pods/s, "
                            f"{result.bound}/{result.pods} bound, failed attempts {result.failed_attempts}, "
                            f"CPU ms/pod {result.cpu_ms_per_pod['total']:.1f}, other load "
                            f"{result.other_load_cores:.2f} cores, problems {len(result.problems)}",
                            file=sys.stderr,
                            flush=True,
                        )
                        for problem in result.problems[:10]:
                            print(f"    {problem}", file=sys.stderr)
            failed = any(r.problems for r in results[first:])
        finally:
            if failed or keep:
                print(f"  logs kept in {folder}", file=sys.stderr)
            else:
                shutil.rmtree(folder, ignore_errors=True)
    print(f"load after: {_uptime()}")
    print()
    print(summary_table(results))
    print()
    print(detail_table(results))
    print()
    print(scheduler_table(results))
    print()
    for s in setups:
        starts = ", ".join(f"{v:g}" for v in s.extender_start_s)
        cpu = ", ".join(f"{name} {v:g}" for name, v in s.objects_cpu_s.items())
        print(
            f"- setup, {s.nodes} nodes x {s.devices} devices: control plane {s.control_plane_s:g} s; "
            f"{s.objects} nodes, slices and classes in {s.objects_s:g} s (CPU s: {cpu}); "
            f"extender ready in {starts} s"
        )
    for r in results:
        attempts = ", ".join(f"{k} {v:g}" for k, v in sorted(r.attempts.items()))
        line = f"- {_label(r.workload)}, {r.profile}: pods created in {r.creation_s:g} s; attempts {attempts}"
        line += f"; mean scheduling attempt (binding included) {r.attempt_mean_ms:.1f} ms"
        if any(r.claim_lag_s):
            line += "; claims created after the pod p50 / p99 / max {:.2f} / {:.2f} / {:.2f} s".format(*r.claim_lag_s)
        if r.extender_verbs_ms:
            line += "; extender mean ms per request " + ", ".join(
                f"{v} {ms:.2f}" for v, ms in r.extender_verbs_ms.items()
            )
        if r.extender_counts:
            line += "; " + ", ".join(f"{k} {v:g}" for k, v in r.extender_counts.items())
        if r.extender_errors:
            line += "; extender errors " + ", ".join(f"{k} {v:g}" for k, v in r.extender_errors.items())
        print(line)
        for message, n in r.failed_scheduling_messages.items():
            print(f"  - FailedScheduling x{n}: {message}")
    bad = [r for r in results if r.problems or r.bound < r.pods]
    if getattr(args, "json", None):
        document = {
            "header": header(),
            "scheduler": "real",
            "setup": [asdict(s) for s in setups],
            "results": [asdict(r) for r in results],
        }
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(document, fh, indent=2)
            fh.write("\n")
    return 1 if bad else 0


def _uptime() -> str:
    with contextlib.suppress(OSError), open("/proc/loadavg", encoding="ascii") as fh:
        return "load average " + ", ".join(fh.read().split()[:3])
    return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.real_scheduler ...``: the same as ``python -m bench.pipeline --scheduler real ...``."""
    from bench.pipeline import _parser

    parser = _parser()
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
