"""A programmable stand-in for ``SchedulingService`` (and its backend), for server tests that need
exact control of what the service answers or raises. Integration tests use the real service."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from extender.state.cache.ledger import InFlightLedger
from extender.state.cache.nominations import Nominations
from extender.state.cache.store import ObjectStore
from extender.state.classic import ClassicStats
from extender.state.preemption.devices import PreemptionStats
from extender.state.preemption.verb import PreemptVerbStats
from extender.state.service import FilterOutcome, SchedulingService, ServiceStats
from extender.views.debug import DebugViews


class FakeBackend:
    def __init__(self, *, synced: bool = True) -> None:
        self.store = ObjectStore()
        self._synced = synced
        self.started = 0
        self.stopped = 0
        self._event: asyncio.Event | None = None

    @property
    def synced(self) -> bool:
        return self._synced

    def set_synced(self, value: bool) -> None:
        self._synced = value
        if value:
            self._synced_event().set()

    async def wait_synced(self, timeout: float | None = None) -> None:
        """As the real backends: returns once synced (the server warms its caches then)."""
        if self._synced:
            return
        async with asyncio.timeout(timeout):
            await self._synced_event().wait()

    def _synced_event(self) -> asyncio.Event:
        # made on first use, inside the test's event loop
        if self._event is None:
            self._event = asyncio.Event()
        return self._event

    async def start(self) -> None:
        self.started += 1

    async def stop(self) -> None:
        self.stopped += 1


@dataclass
class FakeClassic:
    """What the server reads of the classic DRA negotiator: its counters."""

    stats: ClassicStats = field(default_factory=lambda: ClassicStats(publishes={}, publish_failures={}))


@dataclass
class FakePreemption:
    """What the server reads of device-aware preemption: its counters."""

    stats: PreemptionStats = field(default_factory=PreemptionStats)


@dataclass
class FakePreemptVerb:
    """What the server reads of the preempt verb: its counters."""

    stats: PreemptVerbStats = field(default_factory=PreemptVerbStats)


@dataclass
class FakeCluster:
    nominations: Nominations = field(default_factory=Nominations)


@dataclass
class FakeService:
    """Answers from its attributes; ``raise_on[verb]`` makes that verb raise instead."""

    backend: FakeBackend = field(default_factory=FakeBackend)
    outcome: FilterOutcome | None = None  # None: every node passes
    scores: dict[str, int] = field(default_factory=dict)
    raise_on: dict[str, BaseException] = field(default_factory=dict)
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    contexts: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    warmed_up: int = 0
    warmed: bool = False
    stopped: int = 0
    observed_nodes: list[str] = field(default_factory=list)
    ledger: InFlightLedger = field(default_factory=InFlightLedger)
    stats: ServiceStats = field(default_factory=ServiceStats)
    classic: FakeClassic = field(default_factory=lambda: FakeClassic())
    preemption: FakePreemption = field(default_factory=lambda: FakePreemption())
    preempt_verb: FakePreemptVerb = field(default_factory=lambda: FakePreemptVerb())
    cluster: FakeCluster = field(default_factory=lambda: FakeCluster())

    @property
    def store(self) -> ObjectStore:
        return self.backend.store

    def _maybe_raise(self, verb: str) -> None:
        if verb in self.raise_on:
            raise self.raise_on[verb]

    def filter(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> FilterOutcome:
        self.calls.append(("filter", pod["metadata"]["name"], list(node_names)))
        self._maybe_raise("filter")
        if self.outcome is None:
            return FilterOutcome(list(node_names))
        return self.outcome

    def observe_nodes(self, nodes: Sequence[Mapping[str, Any]]) -> None:
        self.observed_nodes.extend(n["metadata"]["name"] for n in nodes)  # not a verb: kept out of ``calls``

    async def warm_up(self) -> dict[str, int]:
        self.warmed_up += 1  # not a verb: kept out of ``calls``
        self.warmed = True
        return {"nodes": 0, "evaluations": 0}

    async def filter_and_recover(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> FilterOutcome:
        return self.filter(pod, node_names)

    async def prioritize_cooperatively(
        self, pod: Mapping[str, Any], node_names: Sequence[str]
    ) -> tuple[list[str], list[Any]]:
        return self.prioritize_columns(pod, node_names)

    def prioritize_columns(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> tuple[list[str], list[Any]]:
        self.calls.append(("prioritize", pod["metadata"]["name"], list(node_names)))
        self._maybe_raise("prioritize")
        return list(node_names), [self.scores.get(name, 0) for name in node_names]

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        self.calls.append(("bind", namespace, name, uid, node))
        self._maybe_raise("bind")

    async def stop(self) -> None:
        self.stopped += 1  # not a verb: kept out of ``calls``

    def as_service(self) -> SchedulingService:
        return cast(SchedulingService, self)

    def as_views(self) -> DebugViews:
        """The read models over this fake (``create_app(..., views=...)``): answers from its
        ``claims``, ``pods`` and ``contexts``; explain is recorded in ``calls``."""
        return cast(DebugViews, FakeViews(self))


@dataclass
class FakeViews:
    """What the server asks of ``DebugViews``, answered by a ``FakeService``."""

    fake: FakeService

    @property
    def store(self) -> ObjectStore:
        return self.fake.store

    async def explain_cooperatively(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> dict[str, Any]:
        self.fake.calls.append(("explain", pod["metadata"]["name"], list(node_names)))
        self.fake._maybe_raise("explain")
        return {"pod": "default/" + pod["metadata"]["name"], "error": "", "nodes": [{"node": n} for n in node_names]}

    def claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.fake.claims.get(f"{namespace}/{name}")

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.fake.pods.get(f"{namespace}/{name}")

    def scheduling_context(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.fake.contexts.get(f"{namespace}/{name}")

    def node(self, node: str) -> dict[str, Any]:
        return {"node": node, "labels": {}, "pools": [], "devices": []}


def pod(name: str = "pod-a", namespace: str = "default", uid: str = "uid-a", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec},
    }


def node(name: str, **labels: str) -> dict[str, Any]:
    """A Node as the scheduler sends it in a NodeList (no kind: Go omits empty TypeMeta)."""
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}, "resourceVersion": "7"},
        "status": {"capacity": {"cpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def node_list(*names: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "NodeList",
        "metadata": {"resourceVersion": "99"},
        "items": [node(n) for n in names],
    }
