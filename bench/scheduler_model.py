"""A model of kube-scheduler driving an extender: what the service must keep up with.

kube-scheduler (1.36, docs/pipeline.md) runs one *scheduling cycle* at a time and the *binding
cycles* concurrently. ``SchedulerModel`` does the same against any ``Extender`` (the real service
over HTTP, usually):

1. pop a pod: the active queue first (FIFO), then a backoff-queue pod whose backoff ended, then,
   with ``pop_from_backoff`` (the ``SchedulerPopFromBackoffQ`` gate, on since 1.33), the backoff
   queue's head even before its backoff ended when nothing else is active;
2. the single-node path first, if the pod has a ``nominatedNodeName`` or, with ``batching``
   (``OpportunisticBatching``), a hint from the previous cycle of a pod of the same signature: the
   extender's ``filter`` with that one node; if it passes, that node is chosen without scoring;
3. otherwise ``filter`` over every node; an ``Error`` fails the attempt (backoff queue); no node
   left parks the pod as unschedulable (woken by cluster events); exactly one node is chosen
   without ``prioritize``; else ``prioritize`` over the survivors, ``score x weight x 10`` added to
   the in-tree score model, the highest total wins, ties broken at random or, in the ``worst``
   mode, towards the node chosen most recently (kube-scheduler's own scores favour the node that
   just got a pod: ``NodeResourcesBalancedAllocation`` 75 against 74, docs/pipeline.md);
4. *assume* the pod on the node (the in-tree score model counts it there), start its binding
   cycle (``bind``; at most ``binds_in_flight`` at once: the next cycle waits for a free slot) and
   go on with the next pod at once: the next ``filter`` is sent before this pod's ``bind``.

**Gangs** (``groups``: PodGroup ``namespace/name`` -> ``minCount``; spec/workloads-and-gangs.md
§3) run as *group cycles*: a member waits (PreEnqueue) until ``minCount`` members exist; popping
one pulls every other unscheduled member out of the queues; they are tried in order (priority
first, then when each first entered the active queue): ``filter``, ``prioritize`` when more than
one node is left, each assumed on its node for the rest of the pass. A member without a node does
not stop the pass; an ``Error`` ends it. When assumed and bound members reach ``minCount`` every
assumed member's binding cycle starts (binds together); else every assumption is undone and every
member goes to the backoff queue (retries of members are backoff only, never parked), which an idle
scheduler pops at once; an ``Error`` sends them all to the error backoff.

A failed bind forgets the assumption and sends the pod to the backoff queue (1 s, doubling per
attempt, at most 10 s). Parked pods move back when ``wake()`` is called (a cluster event the
scheduler watches: any pod change, as the wildcard "Extender" enqueue extension does).

``ModelReport`` has pods/s, attempts per pod, failed attempts by cause, scheduling latency
(creation, or the run's start, to the successful bind's answer) and the extender latencies.
No I/O of its own beyond the ``Extender``; the harnesses in ``bench/pipeline.py`` wire it to the
embedded and the Kubernetes backends.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import math
import random
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import orjson

from bench.common import percentile
from bench.http_client import LeanClient

__all__ = [
    "Extender",
    "HttpExtender",
    "ModelReport",
    "ModelSettings",
    "SchedulerModel",
    "Scores",
    "failure_cause",
]

#: kube-scheduler's MaxNodeScore / MaxExtenderPriority.
EXTENDER_SCALE = 10


class Extender(Protocol):
    """The three verbs as kube-scheduler sends them (nodeCacheCapable: node names only)."""

    async def filter(self, pod: dict[str, Any], nodes: Sequence[str]) -> dict[str, Any]: ...

    async def prioritize(self, pod: dict[str, Any], nodes: Sequence[str]) -> Scores: ...

    async def bind(self, pod: dict[str, Any], node: str) -> dict[str, Any]: ...


class Scores:
    """A prioritize answer (``[{"Host": ..., "Score": ...}, ...]``), read as far as the model needs.

    kube-scheduler decodes the answer into Go structs at a small cost; decoding thousands of
    entries into Python dicts on the serial cycle would make the model, not the extender, the
    bottleneck at 5000 nodes. ``best()`` finds the best score and its hosts with byte searches in
    the compact layout orjson writes (the extender's), and decodes the whole answer only when the
    bytes are laid out otherwise; ``all()`` decodes everything."""

    __slots__ = ("_all", "raw")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self._all: dict[str, int] | None = None

    @classmethod
    def of(cls, entries: Sequence[dict[str, Any]]) -> Scores:
        return cls(orjson.dumps(list(entries)))

    def all(self) -> dict[str, int]:
        if self._all is None:
            decoded = orjson.loads(self.raw)
            if not isinstance(decoded, list):
                raise ValueError(f"prioritize answered {type(decoded).__name__}, not a list")
            self._all = {str(e["Host"]): int(e["Score"]) for e in decoded}
        return self._all

    def best(self) -> tuple[int, list[str]]:
        """(the best score, the hosts that have it, in answer order); (0, []) for no entries."""
        raw = self.raw
        if raw.startswith(b'[{"Host":"') and raw.endswith(b"}]"):
            for score in range(10, -1, -1):
                needle = b'"Score":%d}' % score
                at = raw.find(needle)
                if at < 0:
                    continue
                hosts = []
                while at >= 0:
                    start = raw.rfind(b'{"Host":"', 0, at)
                    if start < 0 or raw[at - 2 : at] != b'",':
                        break  # not the layout this reads: decode it all
                    hosts.append(raw[start + 9 : at - 2].decode())
                    at = raw.find(needle, at + len(needle))
                else:
                    return score, hosts
                break
        everything = self.all()
        if not everything:
            return 0, []
        top = max(everything.values())
        return top, [host for host, score in everything.items() if score == top]

    def __len__(self) -> int:
        return len(self.all())


class HttpExtender:
    """``Extender`` over ``bench.http_client.LeanClient`` (see there why not aiohttp's client)."""

    def __init__(self, http: LeanClient) -> None:
        self.http = http
        # Every full filter names the same list of every node (the first list of several nodes
        # this client sends): encoded once, as a Go client's cost per request is far below ours.
        self._encoded: tuple[Sequence[str], bytes] | None = None
        self.latencies: dict[str, list[float]] = {"filter": [], "prioritize": [], "bind": []}

    async def _exchange(self, verb: str, body: bytes) -> bytes:
        start = time.perf_counter()
        status, raw = await self.http.post(f"/{verb}", body)
        self.latencies[verb].append((time.perf_counter() - start) * 1000)
        if status != 200:
            raise RuntimeError(f"{verb}: HTTP {status}: {raw[:200]!r}")
        return raw

    async def _post(self, verb: str, body: bytes) -> Any:
        return orjson.loads(await self._exchange(verb, body))

    def _body(self, pod: dict[str, Any], nodes: Sequence[str]) -> bytes:
        """The request; the list of every node is encoded once (also when a filter's answer
        passes every node: prioritize then names them all again)."""
        if self._encoded is None and len(nodes) > 1:
            self._encoded = (nodes, b',"Nodes":null,"NodeNames":' + orjson.dumps(list(nodes)) + b"}")
        if self._encoded is not None and (self._encoded[0] is nodes or self._encoded[0] == nodes):
            return b'{"Pod":' + orjson.dumps(pod) + self._encoded[1]
        return orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": list(nodes)})

    async def filter(self, pod: dict[str, Any], nodes: Sequence[str]) -> dict[str, Any]:
        answer: dict[str, Any] = await self._post("filter", self._body(pod, nodes))
        return answer

    async def prioritize(self, pod: dict[str, Any], nodes: Sequence[str]) -> Scores:
        return Scores(await self._exchange("prioritize", self._body(pod, nodes)))

    async def bind(self, pod: dict[str, Any], node: str) -> dict[str, Any]:
        meta = pod["metadata"]
        body = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}
        answer: dict[str, Any] = await self._post("bind", orjson.dumps(body))
        return answer


@dataclass(frozen=True)
class ModelSettings:
    binds_in_flight: int = 16
    """Binding cycles at once; the next scheduling cycle waits for a free slot."""
    tie_break: Literal["random", "worst"] = "random"
    """How equal totals are settled: at random (kube-scheduler), or towards the node chosen last."""
    extender_weight: int = 5
    in_tree: Literal["balanced", "none"] = "balanced"
    """The in-tree score model: ``balanced`` gives a node 75 once it holds a pod of the run, else 74
    (what NodeResourcesBalancedAllocation did in the 1.36 runs); ``none`` scores every node 0."""
    initial_backoff: float = 1.0
    max_backoff: float = 10.0
    pop_from_backoff: bool = True
    """SchedulerPopFromBackoffQ: an empty active queue pops the backoff queue's head at once."""
    batching: bool = False
    """OpportunisticBatching: a pod of the same signature as the previous cycle's first tries the
    next node of that cycle's ranking with a one-node filter."""
    cycle_seconds: float = 0.0
    """kube-scheduler's own work per scheduling cycle (in-tree filters and scores), slept."""
    bind_lead_seconds: float = 0.0
    """What the binding cycle does before it calls the extender (PreBind plugins), slept."""
    max_attempts: int = 50
    """A pod still unbound after this many attempts is given up (reported, never hidden)."""
    arrival_rate: float = 0.0
    """Pods created per second during the run, in order (through the harness's ``create``; each
    enters the queue when created, as the scheduler's informer sees it); 0: all exist at the start."""
    time_limit: float = 300.0
    seed: int = 0


@dataclass
class ModelReport:
    pods: int = 0
    bound: int = 0
    attempts: int = 0
    failed_attempts: dict[str, int] = field(default_factory=dict)
    pods_with_failed_attempt: int = 0
    given_up: int = 0
    elapsed_s: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    #: how often the chosen node was the extender's best (its top score) when prioritize ran
    followed_extender: int = 0
    prioritized: int = 0
    single_node_paths: int = 0
    placements: dict[str, str] = field(default_factory=dict)
    #: group cycles run, and those that placed their gang
    gang_passes: int = 0
    gang_passes_placed: int = 0
    #: extender filter calls made in group cycles, and members tried there (one per member per pass)
    gang_filters: int = 0
    gang_prioritizes: int = 0
    gang_member_tries: int = 0
    #: gangs whose bound members reached minCount, and for each the seconds from the first filter
    #: of its first pass to that bind
    gangs_placed: int = 0
    gang_place_s: list[float] = field(default_factory=list)

    @property
    def pods_per_s(self) -> float:
        return self.bound / self.elapsed_s if self.elapsed_s else 0.0

    @property
    def attempts_per_pod(self) -> float:
        return self.attempts / self.pods if self.pods else 0.0

    @property
    def failed(self) -> int:
        return sum(self.failed_attempts.values())

    def latency(self, q: float) -> float:
        return percentile(self.latencies_s, q)

    def summary(self) -> dict[str, Any]:
        return {
            "pods": self.pods,
            "bound": self.bound,
            "pods_per_s": round(self.pods_per_s, 1),
            "attempts_per_pod": round(self.attempts_per_pod, 3),
            "failed_attempts": dict(sorted(self.failed_attempts.items())),
            "pods_with_failed_attempt": self.pods_with_failed_attempt,
            "given_up": self.given_up,
            "latency_p50_s": round(self.latency(50), 3),
            "latency_p99_s": round(self.latency(99), 3),
            "elapsed_s": round(self.elapsed_s, 3),
            **(
                {
                    "gangs_placed": self.gangs_placed,
                    "gang_passes": self.gang_passes,
                    "gang_passes_placed": self.gang_passes_placed,
                    "calls_per_member_per_pass": round(self.calls_per_member_per_pass, 3),
                    "gang_place_p50_s": round(percentile(self.gang_place_s, 50), 3) if self.gang_place_s else None,
                }
                if self.gang_passes
                else {}
            ),
        }

    @property
    def calls_per_member_per_pass(self) -> float:
        """Extender calls (filter and prioritize) per member and pass: 1.0 when each member's
        filter answered one node (no prioritize), as the gang's pinned answers do."""
        calls = self.gang_filters + self.gang_prioritizes
        return calls / self.gang_member_tries if self.gang_member_tries else 0.0


_QUOTED = re.compile(r'"[^"]*"')
_NAMES = re.compile(r"\b(node|claim|resource claim|ResourceClaim|pod) [\w./-]+")


def failure_cause(verb: str, text: str) -> str:
    """A failed attempt's cause, names taken out so that equal causes count together."""
    if "no longer fits" in text:
        return f"{verb}: node no longer fits the pod"
    if "not created yet" in text or (verb == "filter" and "not found" in text and "resourceclaim" in text):
        return f"{verb}: claim not created yet"
    if "in the process of being allocated" in text:
        return f"{verb}: claim being allocated for another pod"
    generic = _NAMES.sub(r"\1 X", _QUOTED.sub('"X"', text))
    return f"{verb}: {generic[:80]}"


@dataclass
class _Pod:
    key: str
    obj: dict[str, Any]
    created: float
    attempts: int = 0
    #: kube-scheduler's ConsecutiveErrorsCount and UnschedulableCount: the backoff's exponent
    errors: int = 0
    unschedulable: int = 0
    #: when the last attempt failed (the backoff counts from here)
    failed_at: float = 0.0
    failed: bool = False
    nominated: str | None = None
    signature: str = ""
    #: its PodGroup (``namespace/name``) when that is a gang of ``groups``; "" otherwise
    group: str = ""
    priority: int = 0
    #: when it first entered the active queue (a sequence number): members are tried in that order
    first_active: int = -1


class SchedulerModel:
    """kube-scheduler's queue, scheduling cycle and binding cycles; see the module docstring.

    ``pods`` are the pending pods (as the scheduler's informer holds them); ``current(key)``, if
    given, returns the scheduler's newest copy of a pod (for example with the resourceclaim
    controller's status), else the given object is sent. ``signature`` groups pods for batching.

    The queues follow kube-scheduler 1.36 (``pkg/scheduler/backend/queue``): a pod whose attempt
    failed with an error (a filter or bind ``Error``) waits in the error backoff queue, which
    neither events nor ``pop_from_backoff`` shorten; a pod no node fitted is parked, or, when an
    event came during its attempt, goes to the backoff queue of rejected pods, which an empty
    active queue may pop early. Backoffs end on the scheduler's one-second flush ticks."""

    def __init__(
        self,
        extender: Extender,
        nodes: Sequence[str],
        pods: Sequence[dict[str, Any]],
        settings: ModelSettings = ModelSettings(),
        *,
        current: Callable[[str], dict[str, Any] | None] | None = None,
        signature: Callable[[dict[str, Any]], str] = lambda _pod: "",
        create: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]] | None = None,
        before_attempt: Callable[[str, int], Awaitable[None]] | None = None,
        groups: Mapping[str, int] | None = None,
    ) -> None:
        """``create(pod)`` creates a pod in the cluster when ``arrival_rate`` is set and returns it
        as created (the API server gives it its UID). ``before_attempt(key, attempt)`` is awaited
        on the serial cycle before each scheduling attempt (``attempt`` 1 is the pod's first): a
        test holds a retry there until what the backoff's real seconds usually cover has happened
        (a driver's answer, say), so that the counts it asserts do not depend on the machine's
        speed. None: no wait, as kube-scheduler. ``groups``: the gangs (PodGroup ``namespace/name``
        -> ``minCount``) whose members run as group cycles."""
        self.extender = extender
        self.nodes = list(nodes)
        self.settings = settings
        self._current = current
        self._rng = random.Random(settings.seed)
        self._pods: dict[str, _Pod] = {}
        self._start = time.perf_counter()
        for obj in pods:
            meta = obj["metadata"]
            key = f"{meta.get('namespace') or 'default'}/{meta['name']}"
            nominated = (obj.get("status") or {}).get("nominatedNodeName")
            spec = obj.get("spec") or {}
            group = f"{meta.get('namespace') or 'default'}/{(spec.get('schedulingGroup') or {}).get('podGroupName')}"
            self._pods[key] = _Pod(
                key,
                obj,
                self._start,
                nominated=nominated,
                signature=signature(obj),
                group=group if groups and group in groups else "",
                priority=int(spec.get("priority") or 0),
            )
        self._min_count: dict[str, int] = dict(groups or {})
        self._members: dict[str, list[str]] = {}
        for pod in self._pods.values():
            if pod.group:
                self._members.setdefault(pod.group, []).append(pod.key)
        self.report = ModelReport(pods=len(self._pods))
        self._create = create
        self._before_attempt = before_attempt
        arriving = settings.arrival_rate > 0
        self._arrivals: deque[str] = deque(self._pods) if arriving else deque()
        self._active: deque[str] = deque() if arriving else deque(self._pods)
        # (ready time, order, pod key): pods that failed with an error, and rejected pods
        self._error_backoff: list[tuple[float, int, str]] = []
        self._rejected_backoff: list[tuple[float, int, str]] = []
        self._parked: set[str] = set()
        self._seq = itertools.count()
        self._events = 0  # cluster events seen so far
        self._wake = asyncio.Event()
        self._slots = asyncio.Semaphore(settings.binds_in_flight)
        self._binding: set[asyncio.Task[None]] = set()
        # the in-tree score model's view: pods assumed or bound per node, and when a node was chosen
        self._pods_on: dict[str, int] = {}
        self._chosen_at: dict[str, int] = {}
        self._batch: tuple[str, list[str]] | None = None
        self._bound_at: list[float] = []
        # gangs: members waiting for minCount members to exist (PreEnqueue), members with a
        # binding cycle running or bound, and when each gang's first pass began
        self._gated: set[str] = set()
        self._assigned: set[str] = set()
        #: pods created in the cluster (those that arrive during the run, once their create returned)
        self._exists: set[str] = set() if arriving else set(self._pods)
        self._gang_began: dict[str, float] = {}
        for key in self._active:
            self._activated(key)

    # --- events -------------------------------------------------------------------------------------

    def wake(self) -> None:
        """A cluster event the scheduler watches (the wildcard "Extender" enqueue extension: any
        pod change): every parked pod goes to the active queue, or to the backoff queue while its
        backoff lasts."""
        self._events += 1
        if self._parked:
            now = time.perf_counter()
            for key in sorted(self._parked):
                ready = self._backoff_end(self._pods[key])
                if ready <= now:
                    self._active.append(key)
                    self._activated(key)
                else:
                    heapq.heappush(self._rejected_backoff, (ready, next(self._seq), key))
            self._parked.clear()
        self._wake.set()

    # --- the loop -----------------------------------------------------------------------------------

    async def run(self) -> ModelReport:
        self._start = time.perf_counter()
        for pod in self._pods.values():
            pod.created = self._start
        deadline = self._start + self.settings.time_limit
        creator = asyncio.create_task(self._arrive()) if self._arrivals else None
        while time.perf_counter() <= deadline:
            key = self._pop()
            if key is None:
                idle = not self._binding and not self._error_backoff and not self._rejected_backoff
                if idle and (creator is None or creator.done()):
                    break  # only parked pods (or none) are left, and nothing will wake them
                await self._idle(deadline)
                continue
            group = self._pods[key].group
            if group:
                await self._group_cycle(group, key)
                continue
            await self._slots.acquire()
            try:
                started = await self._cycle(self._pods[key])
            except BaseException:
                self._slots.release()
                raise
            if not started:
                self._slots.release()
        if creator is not None:
            creator.cancel()
            await asyncio.gather(creator, return_exceptions=True)
        for task in list(self._binding):
            task.cancel()
        if self._binding:
            await asyncio.gather(*self._binding, return_exceptions=True)
        end = max(self._bound_at) if self._bound_at else time.perf_counter()
        self.report.elapsed_s = end - self._start
        self.report.given_up += (
            len(self._parked)
            + len(self._active)
            + len(self._error_backoff)
            + len(self._rejected_backoff)
            + len(self._arrivals)
            + len(self._gated)
        )
        self.report.pods_with_failed_attempt = sum(1 for p in self._pods.values() if p.failed)
        return self.report

    async def _arrive(self) -> None:
        """Create the pods at ``arrival_rate`` (creations overlap, as a controller's do), each
        queued once created (its latency counts from then)."""
        gap = 1.0 / self.settings.arrival_rate
        due = time.perf_counter()
        creating: set[asyncio.Task[None]] = set()
        try:
            while self._arrivals:
                wait = due - time.perf_counter()
                if wait > 0:
                    await asyncio.sleep(wait)
                due += gap
                task = asyncio.create_task(self._arrive_one(self._pods[self._arrivals.popleft()]))
                creating.add(task)
                task.add_done_callback(creating.discard)
            if creating:
                await asyncio.gather(*creating)
        finally:
            for task in creating:
                task.cancel()

    async def _arrive_one(self, pod: _Pod) -> None:
        if self._create is not None:
            pod.obj = await self._create(pod.obj)
        pod.created = time.perf_counter()
        self._exists.add(pod.key)
        self._active.append(pod.key)
        self._activated(pod.key)
        if pod.group:
            # another member exists: gated members of its gang may now reach minCount
            for key in sorted(k for k in self._gated if self._pods[k].group == pod.group):
                self._gated.discard(key)
                self._active.append(key)
                self._activated(key)
        self._wake.set()

    def _activated(self, key: str) -> None:
        pod = self._pods[key]
        if pod.first_active < 0:
            pod.first_active = next(self._seq)

    def _pop(self) -> str | None:
        if self._active:
            return self._active.popleft()
        now = time.perf_counter()
        heads = [q for q in (self._error_backoff, self._rejected_backoff) if q and q[0][0] <= now]
        if heads:
            return heapq.heappop(min(heads, key=lambda q: q[0]))[2]
        if self._rejected_backoff and self.settings.pop_from_backoff:
            return heapq.heappop(self._rejected_backoff)[2]  # SchedulerPopFromBackoffQ
        return None

    async def _idle(self, deadline: float) -> None:
        """Wait for a binding cycle to end, an event, or the next backoff to run out."""
        self._wake.clear()
        ready = [q[0][0] for q in (self._error_backoff, self._rejected_backoff) if q]
        timeout = max(0.0, min([*ready, deadline]) - time.perf_counter())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)

    def _backoff_end(self, pod: _Pod) -> float:
        """kube-scheduler's backoff: 1 s doubling per consecutive error (else per unschedulable
        attempt) up to 10 s, counted from the failure and ended by a whole-second flush tick."""
        count = pod.errors if pod.errors > 0 else pod.unschedulable
        if count <= 0:
            return pod.failed_at
        duration = min(self.settings.max_backoff, self.settings.initial_backoff * 2 ** min(count - 1, 32))
        return self._start + math.ceil(pod.failed_at + duration - self._start)

    # --- one scheduling cycle -------------------------------------------------------------------------

    def _object(self, pod: _Pod) -> dict[str, Any]:
        if self._current is not None:
            fresh = self._current(pod.key)
            if fresh is not None:
                return fresh
        return pod.obj

    async def _cycle(self, pod: _Pod) -> bool:
        """One scheduling attempt; True when a binding cycle was started (it owns the slot)."""
        if self._before_attempt is not None:
            await self._before_attempt(pod.key, pod.attempts + 1)
        pod.attempts += 1
        self.report.attempts += 1
        events_at_pop = self._events
        if self.settings.cycle_seconds:
            await asyncio.sleep(self.settings.cycle_seconds)
        obj = self._object(pod)
        hint = pod.nominated or self._hint(pod)
        if hint is not None:
            answer = await self.extender.filter(obj, [hint])
            if not answer.get("Error") and answer.get("NodeNames") == [hint]:
                self.report.single_node_paths += 1
                self._assume_and_bind(pod, obj, hint)
                return True
        answer = await self.extender.filter(obj, self.nodes)
        if answer.get("Error"):
            self._failed(pod, failure_cause("filter", str(answer["Error"])))
            return False
        survivors = answer.get("NodeNames") or []
        if not survivors:
            self._rejected(pod, events_during_attempt=self._events != events_at_pop)
            return False
        if len(survivors) == 1:
            self._assume_and_bind(pod, obj, survivors[0])
            return True
        scores = await self.extender.prioritize(obj, survivors)
        ranked, followed = self._rank(survivors, scores)
        self.report.prioritized += 1
        self.report.followed_extender += followed
        chosen = ranked[0]
        if self.settings.batching:
            self._batch = (pod.signature, ranked[1:])
        self._assume_and_bind(pod, obj, chosen)
        return True

    # --- one group cycle ------------------------------------------------------------------------------

    async def _group_cycle(self, group: str, key: str) -> None:
        """A gang's pass (module docstring): popped ``key`` and every other unscheduled member."""
        members = self._members[group]
        if sum(1 for k in members if k in self._exists) < self._min_count[group]:
            self._gated.add(key)  # PreEnqueue: fewer than minCount members exist yet
            self._pods[key].first_active = -1  # it enters the active queue when released
            return
        tried = [self._pods[key]] + [
            self._pods[k] for k in members if k != key and k not in self._assigned and self._take(k)
        ]
        tried.sort(key=lambda p: (-p.priority, p.first_active))
        self.report.gang_passes += 1
        self._gang_began.setdefault(group, time.perf_counter())
        assumed: list[tuple[_Pod, dict[str, Any], str]] = []
        rejected: list[_Pod] = []
        error: tuple[_Pod, str] | None = None
        for pod in tried:
            if self._before_attempt is not None:
                await self._before_attempt(pod.key, pod.attempts + 1)
            pod.attempts += 1
            self.report.attempts += 1
            self.report.gang_member_tries += 1
            if self.settings.cycle_seconds:
                await asyncio.sleep(self.settings.cycle_seconds)
            obj = self._object(pod)
            answer = await self.extender.filter(obj, self.nodes)
            self.report.gang_filters += 1
            if answer.get("Error"):
                error = (pod, failure_cause("filter", str(answer["Error"])))
                break
            survivors = answer.get("NodeNames") or []
            if not survivors:
                rejected.append(pod)
                continue
            if len(survivors) == 1:
                node = survivors[0]
            else:
                ranked, followed = self._rank(survivors, await self.extender.prioritize(obj, survivors))
                self.report.gang_prioritizes += 1
                self.report.prioritized += 1
                self.report.followed_extender += followed
                node = ranked[0]
            self._pods_on[node] = self._pods_on.get(node, 0) + 1  # assumed into the pass's snapshot
            assumed.append((pod, obj, node))
        for _, _, node in assumed:
            self._pods_on[node] -= 1  # every assumption of the pass undone
        placed = sum(1 for k in members if k in self._assigned)
        if error is None and len(assumed) + placed >= self._min_count[group]:
            self.report.gang_passes_placed += 1
            for pod, obj, node in assumed:  # every binding cycle at once, as kube-scheduler does
                self._assigned.add(pod.key)
                self._assume_and_bind(pod, obj, node, slot=False)
            for pod in rejected:  # the gang runs without them: retried on their own
                self._member_back(pod, "filter: no node fits (unschedulable)")
            return
        if error is not None:
            failing, cause = error
            for pod in tried:
                self._failed(pod, cause if pod is failing else "filter: gang pass aborted by another member's error")
            return
        for pod in tried:  # members are retried by backoff only, never parked
            cause = "filter: no node fits (unschedulable)" if pod in rejected else "filter: gang pass failed"
            self._member_back(pod, cause)

    def _take(self, key: str) -> bool:
        """Pull a member out of whichever queue holds it (kube-scheduler's PopSpecificPod); False
        when it is in none (not created yet, or given up)."""
        if key in self._active:
            self._active.remove(key)
            return True
        for queue in (self._error_backoff, self._rejected_backoff):
            for i, entry in enumerate(queue):
                if entry[2] == key:
                    queue.pop(i)
                    heapq.heapify(queue)
                    return True
        for holder in (self._parked, self._gated):
            if key in holder:
                holder.discard(key)
                return True
        return False

    def _gang_member_bound(self, group: str, now: float) -> None:
        bound = sum(1 for k in self._members[group] if k in self.report.placements)
        if bound == self._min_count[group]:
            self.report.gangs_placed += 1
            self.report.gang_place_s.append(now - self._gang_began.get(group, now))

    def _hint(self, pod: _Pod) -> str | None:
        if not self.settings.batching or self._batch is None:
            return None
        signature, rest = self._batch
        if signature != pod.signature or not rest:
            self._batch = None
            return None
        return rest.pop(0)

    def _in_tree(self, node: str) -> int:
        if self.settings.in_tree == "none":
            return 0
        return 75 if self._pods_on.get(node) else 74

    def _rank(self, survivors: Sequence[str], scores: Scores) -> tuple[list[str], bool]:
        """The chosen node first (the highest total, ties settled by the tie-break), then, with
        batching only, the rest by total; and whether the chosen node has the best extender score.
        The in-tree model spans one point, less than one extender point (``weight x 10``), so
        only the nodes with the best extender score can win (this runs on the serial cycle, where
        kube-scheduler spends microseconds: no Python-level work per node on the common path)."""
        scale = self.settings.extender_weight * EXTENDER_SCALE
        spread = 0 if self.settings.in_tree == "none" else 1
        best, close = scores.best()
        if best == 0 or spread >= scale:  # unscored survivors count 0; or in-tree could outweigh
            close = list(survivors)
        if len(close) == 1:
            first = close[0]
        else:
            extender = scores.all()
            totals = {n: self._in_tree(n) + extender.get(n, 0) * scale for n in close}
            top = max(totals.values())
            tied = [n for n in close if totals[n] == top]
            if len(tied) == 1:
                first = tied[0]
            elif self.settings.tie_break == "worst" and any(n in self._chosen_at for n in tied):
                first = max(tied, key=lambda n: self._chosen_at.get(n, -1))
            else:
                first = self._rng.choice(tied)
        followed = scores.all().get(first, 0) == best if len(close) > 1 else True
        if not self.settings.batching:
            return [first], followed
        extender = scores.all()
        rest = sorted(
            (n for n in survivors if n != first), key=lambda n: -(self._in_tree(n) + extender.get(n, 0) * scale)
        )
        return [first, *rest], followed

    def _assume_and_bind(self, pod: _Pod, obj: dict[str, Any], node: str, *, slot: bool = True) -> None:
        """Assume the pod on the node and start its binding cycle, which gives back the slot the
        cycle took (``slot``; a gang's binds take none: kube-scheduler starts them all at once)."""
        self._pods_on[node] = self._pods_on.get(node, 0) + 1
        self._chosen_at[node] = next(self._seq)
        task = asyncio.create_task(self._binding_cycle(pod, obj, node, slot))
        self._binding.add(task)

    async def _binding_cycle(self, pod: _Pod, obj: dict[str, Any], node: str, slot: bool) -> None:
        try:
            if self.settings.bind_lead_seconds:
                await asyncio.sleep(self.settings.bind_lead_seconds)
            answer = await self.extender.bind(obj, node)
            if answer.get("Error"):
                self._pods_on[node] -= 1  # ForgetPod
                self._assigned.discard(pod.key)  # retried alone (no gang semantics after Permit)
                self._failed(pod, failure_cause("bind", str(answer["Error"])))
            else:
                now = time.perf_counter()
                self.report.bound += 1
                self.report.latencies_s.append(now - pod.created)
                self.report.placements[pod.key] = node
                self._bound_at.append(now)
                if pod.group:
                    self._gang_member_bound(pod.group, now)
                self.wake()  # an assigned pod is an event every parked pod hears
        finally:
            task = asyncio.current_task()
            if task is not None:
                self._binding.discard(task)  # before the loop wakes: it looks at this set
            if slot:
                self._slots.release()
            self._wake.set()

    def _member_back(self, pod: _Pod, cause: str) -> None:
        """A gang member whose pass did not bind it: the backoff queue of rejected pods."""
        pod.errors = 0
        pod.unschedulable += 1
        if self._count(pod, cause):
            heapq.heappush(self._rejected_backoff, (self._backoff_end(pod), next(self._seq), pod.key))

    def _count(self, pod: _Pod, cause: str) -> bool:
        """Count a failed attempt; False when the pod is given up."""
        self.report.failed_attempts[cause] = self.report.failed_attempts.get(cause, 0) + 1
        pod.failed = True
        pod.failed_at = time.perf_counter()
        if pod.attempts >= self.settings.max_attempts:
            self.report.given_up += 1
            return False
        return True

    def _failed(self, pod: _Pod, cause: str) -> None:
        """An error status: the error backoff queue."""
        pod.errors += 1
        if self._count(pod, cause):
            heapq.heappush(self._error_backoff, (self._backoff_end(pod), next(self._seq), pod.key))

    def _rejected(self, pod: _Pod, *, events_during_attempt: bool) -> None:
        """No node fits: parked until an event, or straight to the backoff queue when an event
        came while the pod was being scheduled."""
        pod.errors = 0
        pod.unschedulable += 1
        if not self._count(pod, "filter: no node fits (unschedulable)"):
            return
        if events_during_attempt:
            heapq.heappush(self._rejected_backoff, (self._backoff_end(pod), next(self._seq), pod.key))
        else:
            self._parked.add(pod.key)
